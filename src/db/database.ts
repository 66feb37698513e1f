import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { Kysely, PostgresDialect, type Transaction } from 'kysely';
import pg from 'pg';
import type { DB } from './schema.ts';

export type Db = Kysely<DB>;
export type Tx = Transaction<DB>;
/** Either the database or an open transaction: repositories accept both. */
export type Queryable = Db | Tx;

/** One dedicated connection for scripts (migrations) that need several statements at once. */
export interface ScriptConnection {
  exec(sql: string): Promise<void>;
  query<T = Record<string, unknown>>(sql: string, params?: unknown[]): Promise<T[]>;
}

export interface Database {
  kind: 'postgres' | 'pglite';
  db: Db;
  withScriptConnection<T>(fn: (conn: ScriptConnection) => Promise<T>): Promise<T>;
  close(): Promise<void>;
}

// int8 (count(*), bigint columns) arrives as a string by default; our counts fit in a JS number.
pg.types.setTypeParser(20, (value) => Number(value));

export async function openDatabase(options: { databaseUrl?: string; dataDir: string; poolSize?: number }): Promise<Database> {
  if (options.databaseUrl) return openPostgres(options.databaseUrl, options.poolSize ?? 20);
  return openPglite(join(options.dataDir, 'pglite'));
}

function openPostgres(url: string, max: number): Database {
  const pool = new pg.Pool({ connectionString: url, max, idleTimeoutMillis: 30_000 });
  // An idle client losing its connection must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  return {
    kind: 'postgres',
    db,
    async withScriptConnection(fn) {
      const client = await pool.connect();
      try {
        return await fn({
          exec: async (sql) => { await client.query(sql); },
          query: async (sql, params) => (await client.query(sql, params as unknown[])).rows,
        });
      } finally {
        client.release();
      }
    },
    async close() {
      await db.destroy();
      // Kysely ends only a pool it has used; scripts may have used it directly.
      if (!pool.ended) await pool.end();
    },
  };
}

async function openPglite(dir: string): Promise<Database> {
  mkdirSync(dir, { recursive: true });
  const { PGlite, types } = await import('@electric-sql/pglite');
  const { pg_trgm } = await import('@electric-sql/pglite/contrib/pg_trgm');
  const { PGliteDialect } = await import('kysely-pglite-dialect');
  const client = await PGlite.create(dir, {
    extensions: { pg_trgm },
    parsers: { [types.INT8]: (value: string) => Number(value) },
  });
  const db = new Kysely<DB>({ dialect: new PGliteDialect(client) });
  return {
    kind: 'pglite',
    db,
    // PGlite has one connection; Kysely's driver serialises access, so scripts go through it too.
    async withScriptConnection(fn) {
      return db.connection().execute(() => fn({
        exec: async (sql) => { await client.exec(sql); },
        query: async (sql, params) => (await client.query(sql, params)).rows as never,
      }));
    },
    close: () => db.destroy(),
  };
}
