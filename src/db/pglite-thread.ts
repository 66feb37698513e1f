import { Worker } from 'node:worker_threads';
import {
  CompiledQuery, PostgresAdapter, PostgresIntrospector, PostgresQueryCompiler,
  type DatabaseConnection, type Dialect, type Driver, type Kysely, type QueryResult, type TransactionSettings,
} from 'kysely';
import { PGLITE_TEMPLATE_DIR, PGLITE_WORKER_FILE } from '../paths.ts';

/**
 * The embedded PGlite runs in a worker thread (src/db/pglite-worker.mjs): PostgreSQL's start (about
 * a second of CPU) runs on the second core while the main thread loads the service's modules and
 * builds the app, and its queries no longer hold the main thread's requests.
 */
export interface PgliteThread {
  /** Settles once PGlite is open, or fails with why it could not be. */
  ready: Promise<void>;
  query<T = Record<string, unknown>>(sql: string, parameters?: readonly unknown[]): Promise<{ rows: T[]; affectedRows?: number }>;
  /** Several statements in one string (migrations). */
  exec(sql: string): Promise<void>;
  /** Closes PGlite (PostgreSQL's orderly shutdown) and waits for the thread to end. */
  close(): Promise<void>;
  /** Ends the thread at once, as a crash would; for tests. */
  terminate(): Promise<void>;
}

type Reply = { id: number; rows: unknown[]; affectedRows?: number; error?: undefined } | { id: number; error: SerializedError };
type SerializedError = { message: string; name?: string; stack?: string; [field: string]: unknown };

/** PostgreSQL's error as raised in the thread, with its fields (`code`, `constraint`, `detail`...). */
export class PgliteError extends Error {
  [field: string]: unknown;
  constructor(serialized: SerializedError) {
    super(serialized.message);
    const { message: _message, stack: _threadStack, ...fields } = serialized;
    // The caller's stack (where the query was made); the thread's is only PGlite's own frames.
    Object.assign(this, fields);
  }
}

/**
 * Starts the thread and returns at once: requests made while PGlite is still starting wait for it
 * (the thread takes them once it is open), so the caller loads and builds the rest meanwhile. A
 * database that cannot be opened fails `ready` and every request with the reason.
 */
export function startPgliteThread(dir: string, sharedBuffers: string): PgliteThread {
  const worker = new Worker(PGLITE_WORKER_FILE, { workerData: { dir, templateDir: PGLITE_TEMPLATE_DIR, sharedBuffers } });
  const pending = new Map<number, { resolve: (reply: Reply) => void; reject: (err: Error) => void }>();
  let nextId = 1;
  let stopped: Error | null = null;
  let openError: Error | null = null;
  let threadError: Error | null = null;
  let closing = false;
  let started = false;
  // The thread keeps the process alive only while it starts or a request waits on it, as PGlite in
  // the main thread did: a script that forgets close() still ends.
  const holdWhileBusy = () => { if (started && pending.size === 0 && !closing) worker.unref(); else worker.ref(); };

  let markReady!: () => void;
  const ready = new Promise<void>((resolve) => { markReady = resolve; });
  worker.on('error', (err) => { threadError = err; });
  const exited = new Promise<void>((resolveExit) => worker.once('exit', (code) => {
    stopped = openError ?? (closing && code === 0
      ? new Error('the embedded database is closed')
      : new Error(`the embedded database's thread stopped (exit code ${code})${threadError ? `: ${threadError.message}` : ''}`, { cause: threadError ?? undefined }));
    for (const request of pending.values()) request.reject(stopped);
    pending.clear();
    resolveExit();
  }));
  const failedOrReady = Promise.race([ready, exited.then(() => { throw stopped; })]);
  failedOrReady.catch(() => {}); // the same error reaches every request
  worker.on('message', (message: Reply | { type: 'ready' } | { type: 'failed'; error: SerializedError }) => {
    if ('type' in message) {
      if (message.type === 'failed') openError = new PgliteError(message.error);
      else { started = true; holdWhileBusy(); markReady(); }
      return;
    }
    const request = pending.get(message.id);
    if (!request) return;
    pending.delete(message.id);
    holdWhileBusy();
    request.resolve(message);
  });

  async function send(op: 'query' | 'exec' | 'close', sql?: string, parameters?: readonly unknown[]): Promise<Reply & { error?: undefined }> {
    const reply = await post(op, sql, parameters);
    // Made here, after the await, so its stack runs through the caller's (V8's async stack trace).
    if (reply.error) throw new PgliteError(reply.error);
    return reply;
  }

  function post(op: 'query' | 'exec' | 'close', sql?: string, parameters?: readonly unknown[]): Promise<Reply> {
    if (stopped) return Promise.reject(stopped);
    const id = nextId++;
    const reply = new Promise<Reply>((resolve, reject) => pending.set(id, { resolve, reject }));
    holdWhileBusy();
    // Posted at once even while PGlite starts: the thread's port keeps it until PGlite is open.
    worker.postMessage({ id, op, sql, parameters });
    return reply;
  }

  return {
    ready: failedOrReady,
    query: async (sql, parameters = []) => {
      const reply = await send('query', sql, parameters);
      return { rows: reply.rows as never[], affectedRows: reply.affectedRows };
    },
    exec: async (sql) => { await send('exec', sql); },
    async close() {
      if (stopped) return;
      closing = true;
      // Held until the thread has ended, not only until PGlite has answered.
      worker.ref();
      // A thread that failed to open ends by itself; the request then fails with the reason.
      await send('close').catch(() => {});
      await exited;
    },
    async terminate() {
      await worker.terminate();
      await exited;
    },
  };
}

/** Kysely on the thread: one connection (PGlite has one), lent to one caller at a time. */
export class PgliteThreadDialect implements Dialect {
  constructor(private thread: PgliteThread) {}
  createAdapter() { return new PostgresAdapter(); }
  createDriver(): Driver { return new PgliteThreadDriver(this.thread); }
  createQueryCompiler() { return new PostgresQueryCompiler(); }
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  createIntrospector(db: Kysely<any>) { return new PostgresIntrospector(db); }
}

class PgliteThreadDriver implements Driver {
  private connection: PgliteThreadConnection;
  private lent = false;
  private waiting: Array<() => void> = [];

  constructor(private thread: PgliteThread) {
    this.connection = new PgliteThreadConnection(thread);
  }

  async init() {}

  async acquireConnection(): Promise<DatabaseConnection> {
    if (this.lent) await new Promise<void>((resolve) => this.waiting.push(resolve));
    this.lent = true;
    return this.connection;
  }

  async releaseConnection() {
    const next = this.waiting.shift();
    // Handed straight to the next waiter, so no newcomer slips in between.
    if (next) next();
    else this.lent = false;
  }

  async beginTransaction(connection: DatabaseConnection, settings: TransactionSettings) {
    await connection.executeQuery(CompiledQuery.raw(settings.isolationLevel ? `start transaction isolation level ${settings.isolationLevel}` : 'begin'));
  }

  async commitTransaction(connection: DatabaseConnection) {
    await connection.executeQuery(CompiledQuery.raw('commit'));
  }

  async rollbackTransaction(connection: DatabaseConnection) {
    await connection.executeQuery(CompiledQuery.raw('rollback'));
  }

  async destroy() {
    // After the caller holding the connection (a transaction under way at a signal) has let it go.
    await this.acquireConnection();
    await this.thread.close();
  }
}

class PgliteThreadConnection implements DatabaseConnection {
  constructor(private thread: PgliteThread) {}

  async executeQuery<R>(compiledQuery: CompiledQuery): Promise<QueryResult<R>> {
    const { rows, affectedRows } = await this.thread.query<R>(compiledQuery.sql, compiledQuery.parameters);
    // As kysely-pglite-dialect reported it (PGlite gives 0 for statements that change no rows).
    return affectedRows ? { rows, numAffectedRows: BigInt(affectedRows) } : { rows };
  }

  async *streamQuery<R>(compiledQuery: CompiledQuery, chunkSize: number): AsyncIterableIterator<QueryResult<R>> {
    if (!Number.isInteger(chunkSize) || chunkSize <= 0) throw new Error('chunkSize must be a positive integer');
    // PGlite has no cursor over the thread boundary: the rows arrive at once and are handed out in chunks.
    const { rows } = await this.thread.query<R>(compiledQuery.sql, compiledQuery.parameters);
    for (let i = 0; i < rows.length; i += chunkSize) yield { rows: rows.slice(i, i + chunkSize) };
  }
}
