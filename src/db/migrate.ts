import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { MIGRATIONS_DIR } from '../paths.ts';
import type { Database, ScriptConnection } from './database.ts';

// Any constant works; it only has to be the same for every process migrating this database.
const MIGRATION_LOCK_ID = 7_345_001;
const UNDEFINED_TABLE = '42P01';

/**
 * Applies the numbered plain-SQL migrations (of `dir`, migrations/ unless a test gives its own) not
 * yet recorded, each in its own transaction.
 */
export async function migrate(database: Database, log: (msg: string) => void = () => {}, dir = MIGRATIONS_DIR): Promise<string[]> {
  const files = readdirSync(dir).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort();
  return database.withScriptConnection(async (conn) => {
    // Every start but the first after an upgrade finds nothing to apply: one read, no lock, no DDL
    // (migrations are only ever added, so a database that has them all stays up to date).
    const recorded = await recordedMigrations(conn);
    if (recorded && files.every((file) => recorded.has(file))) return [];
    await conn.exec('SELECT pg_advisory_lock(' + MIGRATION_LOCK_ID + ')');
    try {
      await conn.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
        name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
      const done = new Set((await conn.query<{ name: string }>('SELECT name FROM schema_migrations')).map((r) => r.name));
      const applied: string[] = [];
      for (const file of files) {
        if (done.has(file)) continue;
        const sql = readFileSync(join(dir, file), 'utf8');
        await conn.exec('BEGIN');
        try {
          await conn.exec(sql);
          await conn.query('INSERT INTO schema_migrations (name) VALUES ($1)', [file]);
          await conn.exec('COMMIT');
        } catch (err) {
          await conn.exec('ROLLBACK');
          throw new Error(`migration ${file} failed: ${(err as Error).message}`);
        }
        applied.push(file);
        log(`applied migration ${file}`);
      }
      return applied;
    } finally {
      await conn.exec('SELECT pg_advisory_unlock(' + MIGRATION_LOCK_ID + ')');
    }
  });
}

/** The migrations recorded as applied, or null when the database has no record yet. */
async function recordedMigrations(conn: ScriptConnection): Promise<Set<string> | null> {
  try {
    return new Set((await conn.query<{ name: string }>('SELECT name FROM schema_migrations')).map((r) => r.name));
  } catch (err) {
    if ((err as { code?: unknown }).code === UNDEFINED_TABLE) return null;
    throw err;
  }
}
