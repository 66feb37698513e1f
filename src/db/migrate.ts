import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Database } from './database.ts';

const MIGRATIONS_DIR = join(dirname(fileURLToPath(import.meta.url)), '../../migrations');
// Any constant works; it only has to be the same for every process migrating this database.
const MIGRATION_LOCK_ID = 7_345_001;

/** Applies the numbered plain-SQL migrations not yet recorded, each in its own transaction. */
export async function migrate(database: Database, log: (msg: string) => void = () => {}): Promise<string[]> {
  const files = readdirSync(MIGRATIONS_DIR).filter((f) => /^\d{4}_.+\.sql$/.test(f)).sort();
  return database.withScriptConnection(async (conn) => {
    await conn.exec('SELECT pg_advisory_lock(' + MIGRATION_LOCK_ID + ')');
    try {
      await conn.exec(`CREATE TABLE IF NOT EXISTS schema_migrations (
        name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`);
      const done = new Set((await conn.query<{ name: string }>('SELECT name FROM schema_migrations')).map((r) => r.name));
      const applied: string[] = [];
      for (const file of files) {
        if (done.has(file)) continue;
        const sql = readFileSync(join(MIGRATIONS_DIR, file), 'utf8');
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
