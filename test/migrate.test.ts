import { cpSync, readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database, type ScriptConnection } from '../src/db/database.ts';
import { migrate } from '../src/db/migrate.ts';
import { MIGRATIONS_DIR } from '../src/paths.ts';
import { hasPostgres, makeTempDir, removeTempDir } from './helpers/app.ts';

/** The database with every statement its script connection runs recorded, in order. */
function recording(database: Database, failFirstQueryWith?: Error): { database: Database; statements: string[] } {
  const statements: string[] = [];
  let failNext = failFirstQueryWith;
  return {
    statements,
    database: {
      ...database,
      withScriptConnection: (fn) => database.withScriptConnection((conn) => fn({
        exec: (sql) => { statements.push(sql); return conn.exec(sql); },
        query: ((sql: string, params?: unknown[]) => {
          statements.push(sql);
          if (failNext) { const err = failNext; failNext = undefined; return Promise.reject(err); }
          return conn.query(sql, params);
        }) as ScriptConnection['query'],
      })),
    },
  };
}

/** A database that has never been migrated: a new one on the server with DATABASE_URL, else a new PGlite. */
async function freshDatabase(dataDir: string): Promise<{ database: Database; drop(): Promise<void> }> {
  if (!hasPostgres) {
    const database = await openDatabase({ dataDir });
    return { database, drop: () => database.close() };
  }
  const admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await admin.connect();
  const name = `migrate_${randomBytes(4).toString('hex')}`;
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(process.env.DATABASE_URL!);
  url.pathname = `/${name}`;
  const database = await openDatabase({ databaseUrl: url.toString(), dataDir, poolSize: 1 });
  return {
    database,
    async drop() {
      await database.close();
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}

describe('migrate', () => {
  const dataDir = makeTempDir('msvc-migrate-');
  const migrationsDir = makeTempDir('msvc-migrations-');
  let fresh: Awaited<ReturnType<typeof freshDatabase>>;
  const shipped = readdirSync(MIGRATIONS_DIR).filter((f) => f.endsWith('.sql')).sort();

  beforeAll(async () => {
    cpSync(MIGRATIONS_DIR, migrationsDir, { recursive: true });
    fresh = await freshDatabase(dataDir);
  }, 120_000);
  afterAll(async () => {
    await fresh?.drop();
    removeTempDir(dataDir);
    removeTempDir(migrationsDir);
  });

  it('applies every migration, in order, to a database that has none, and records them', async () => {
    const logged: string[] = [];
    expect(await migrate(fresh.database, (msg) => logged.push(msg), migrationsDir)).toEqual(shipped);
    expect(logged).toEqual(shipped.map((f) => `applied migration ${f}`));
    const recorded = await fresh.database.withScriptConnection((conn) => conn.query<{ name: string }>('SELECT name FROM schema_migrations ORDER BY name'));
    expect(recorded.map((r) => r.name)).toEqual(shipped);
  }, 120_000);

  it('on a database already up to date reads the record once: no lock, no DDL, nothing applied', async () => {
    const { database, statements } = recording(fresh.database);
    expect(await migrate(database, () => {}, migrationsDir)).toEqual([]);
    expect(statements).toEqual(['SELECT name FROM schema_migrations']);
  });

  it('applies a migration added since, under the lock, and only that one', async () => {
    writeFileSync(join(migrationsDir, '9999_added_later.sql'), 'CREATE TABLE added_later (id int PRIMARY KEY);');
    const { database, statements } = recording(fresh.database);
    expect(await migrate(database, () => {}, migrationsDir)).toEqual(['9999_added_later.sql']);
    expect(statements[1]).toMatch(/^SELECT pg_advisory_lock\(/);
    expect(statements.at(-1)).toMatch(/^SELECT pg_advisory_unlock\(/);
    expect(statements.filter((s) => s.startsWith('CREATE TABLE added_later'))).toHaveLength(1);
    const rows = await fresh.database.withScriptConnection((conn) => conn.query<{ n: number }>('SELECT count(*)::int AS n FROM added_later'));
    expect(rows).toEqual([{ n: 0 }]);
  });

  it('fails on an error reading the record other than a missing table, before taking the lock', async () => {
    const unavailable = Object.assign(new Error('terminating connection due to administrator command'), { code: '57P01' });
    const { database, statements } = recording(fresh.database, unavailable);
    await expect(migrate(database, () => {}, migrationsDir)).rejects.toBe(unavailable);
    expect(statements).toEqual(['SELECT name FROM schema_migrations']);
  });
});
