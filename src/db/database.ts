import { join } from 'node:path';
import { Kysely, PostgresDialect, type Transaction } from 'kysely';
import { PgliteThreadDialect, startPgliteThread } from './pglite-thread.ts';
import type { DB } from './schema.ts';
import { countStatement } from './statement-count.ts';

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

export async function openDatabase(options: { databaseUrl?: string; dataDir: string; poolSize?: number; databaseConnectTimeoutMs?: number }): Promise<Database> {
  if (options.databaseUrl) return openPostgres(options.databaseUrl, options.poolSize ?? 20, options.databaseConnectTimeoutMs ?? 5000);
  return openPglite(join(options.dataDir, 'pglite'));
}

// SQLSTATE classes and codes that mean the connection, not the statement, failed: connection
// exceptions (08xxx), the server shutting down or terminating the backend (57P01-57P03), too many clients.
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300']);
const UNAVAILABLE_SOCKET_ERRORS = new Set(['ECONNREFUSED', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN']);
// pg's own messages for a connection that died, or a pool that could not hand one out in time.
const UNAVAILABLE_MESSAGES = /^(Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error and is not queryable|Client was closed and is not queryable)/;

/**
 * Whether an error means the database could not be reached or dropped the connection (a restart,
 * a failover, a terminated backend), as opposed to a failed statement: a transient condition that
 * a retry fixes, not a bug.
 */
export function isDatabaseUnavailable(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const code = (err as { code?: unknown }).code;
  if (typeof code === 'string' && (UNAVAILABLE_SQLSTATES.has(code) || /^08[0-9A-Z]{3}$/.test(code) || UNAVAILABLE_SOCKET_ERRORS.has(code))) return true;
  return UNAVAILABLE_MESSAGES.test(err.message);
}

async function openPostgres(url: string, max: number, connectTimeoutMs: number): Promise<Database> {
  // Loaded only here: the embedded default never needs the driver (a shorter cold start).
  const { default: pg } = await import('pg');
  // int8 (count(*), bigint columns) arrives as a string by default; our counts fit in a JS number.
  pg.types.setTypeParser(20, (value) => Number(value));
  // A connection that cannot be made (or a pool slot that does not free up) in time fails the
  // request instead of holding it while the database is unreachable.
  const pool = new pg.Pool({ connectionString: url, max, idleTimeoutMillis: 30_000, connectionTimeoutMillis: connectTimeoutMs });
  // An idle client losing its connection must not crash the process; the pool replaces it.
  pool.on('error', () => {});
  // pg also emits 'error' on a checked-out client whose connection dies (a terminated backend, a
  // restart), where the pool does not listen: without a listener that crashes the process. The
  // client's queries fail with the error (the callers' normal error path) and, no longer queryable,
  // it is dropped when released.
  pool.on('connect', (client) => {
    client.on('error', () => {});
    // A terminated backend fails the query in flight with a FATAL error and closes its socket only
    // a moment later: end the client at once, so it is dropped when released instead of being lent
    // to the next request in between (which would fail too).
    const query = client.query.bind(client) as (...args: unknown[]) => unknown;
    client.query = ((...args: unknown[]) => {
      const result = query(...args);
      if (result instanceof Promise) result.catch((err) => { if (isDatabaseUnavailable(err)) client.end().catch(() => {}); });
      return result;
    }) as typeof client.query;
  });
  const db = new Kysely<DB>({ dialect: new PostgresDialect({ pool }), log: countStatement });
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

const PGLITE_SHARED_BUFFERS = '32MB';

/**
 * Returns while PGlite is still starting in its thread (as a pool returns before it has connected):
 * the first query waits for it, or fails with why it could not open.
 */
async function openPglite(dir: string): Promise<Database> {
  const thread = startPgliteThread(dir, PGLITE_SHARED_BUFFERS);
  const db = new Kysely<DB>({ dialect: new PgliteThreadDialect(thread), log: countStatement });
  return {
    kind: 'pglite',
    db,
    // PGlite has one connection; the driver lends it to one caller at a time, so scripts take it too.
    async withScriptConnection(fn) {
      return db.connection().execute(() => fn({
        exec: (sql) => thread.exec(sql),
        query: async (sql, params) => (await thread.query(sql, params)).rows as never,
      }));
    },
    close: () => db.destroy(),
  };
}
