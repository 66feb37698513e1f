import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Kysely, sql } from 'kysely';
import { afterAll, describe, expect, it } from 'vitest';
import { openDatabase, type Database } from '../src/db/database.ts';
import { PgliteThreadDialect, startPgliteThread } from '../src/db/pglite-thread.ts';
import { makeTempDir, removeTempDir, withEmbeddedDatabase } from './helpers/app.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';

// The embedded PGlite runs in a worker thread (src/db/pglite-thread.ts): what crosses the thread
// boundary must arrive as PGlite in the main thread gave it. Runs with or without DATABASE_URL.
describe('embedded database thread', () => {
  const dirs: string[] = [];
  const tempDir = () => { const dir = makeTempDir('msvc-thread-'); dirs.push(dir); return dir; };
  afterAll(() => { for (const dir of dirs) removeTempDir(dir); });

  async function open(): Promise<Database> {
    return openDatabase({ dataDir: withEmbeddedDatabase(tempDir()) });
  }

  it('keeps PostgreSQL error fields, so a unique violation is still 23505 with its constraint', async () => {
    const database = await open();
    try {
      await sql`CREATE TABLE thread_probe (k text CONSTRAINT thread_probe_k UNIQUE)`.execute(database.db);
      await sql`INSERT INTO thread_probe VALUES ('a')`.execute(database.db);
      const err = await sql`INSERT INTO thread_probe VALUES ('a')`.execute(database.db).catch((e: unknown) => e) as Record<string, unknown>;
      expect(err).toBeInstanceOf(Error);
      expect(err).toMatchObject({ code: '23505', constraint: 'thread_probe_k', table: 'thread_probe', severity: 'ERROR' });
      expect(err.message).toMatch(/duplicate key value violates unique constraint "thread_probe_k"/);
      expect(err.detail).toBe('Key (k)=(a) already exists.');
      // The caller's stack, where the query was made, not only the thread's.
      expect(err.stack).toContain('embedded-thread.test.ts');
      // A failed transaction is rolled back and the connection lent again.
      await expect(database.db.transaction().execute(async (tx) => {
        await sql`INSERT INTO thread_probe VALUES ('b')`.execute(tx);
        await sql`INSERT INTO thread_probe VALUES ('a')`.execute(tx);
      })).rejects.toMatchObject({ code: '23505' });
      const { rows } = await sql<{ k: string }>`SELECT k FROM thread_probe ORDER BY k`.execute(database.db);
      expect(rows).toEqual([{ k: 'a' }]);
    } finally {
      await database.close();
    }
  });

  it('carries values both ways as PGlite gives them: bytea, timestamps, int8 as a number, jsonb, affected rows', async () => {
    const database = await open();
    try {
      const at = new Date('2030-05-01T09:00:00.123Z');
      const { rows } = await sql<{ bytes: Uint8Array; at: Date; n: number; doc: unknown }>`SELECT ${Buffer.from([0, 1, 255])}::bytea AS bytes, ${at}::timestamptz AS at, ${2 ** 40}::int8 AS n, ${JSON.stringify({ a: [1, 'x'] })}::jsonb AS doc`.execute(database.db);
      expect(rows[0].bytes).toBeInstanceOf(Uint8Array);
      expect([...rows[0].bytes]).toEqual([0, 1, 255]);
      expect(rows[0].at).toBeInstanceOf(Date);
      expect(rows[0].at.toISOString()).toBe(at.toISOString());
      expect(rows[0].n).toBe(2 ** 40);
      expect(rows[0].doc).toEqual({ a: [1, 'x'] });
      await sql`CREATE TABLE thread_counts (n int)`.execute(database.db);
      await sql`INSERT INTO thread_counts SELECT generate_series(1, 5)`.execute(database.db);
      const updated = await sql`UPDATE thread_counts SET n = n + 1 WHERE n > 2`.execute(database.db);
      expect(updated.numAffectedRows).toBe(3n);
      // A multi-statement script (as migrations run) on the one connection.
      await database.withScriptConnection(async (conn) => {
        await conn.exec('CREATE TABLE thread_script (n int); INSERT INTO thread_script VALUES (1), (2);');
        expect(await conn.query('SELECT count(*)::int AS c FROM thread_script WHERE n > $1', [1])).toEqual([{ c: 1 }]);
      });
    } finally {
      await database.close();
    }
  });

  it('close() shuts PostgreSQL down and ends the thread: later queries fail at once, and the data is there at the next open', async () => {
    const dataDir = withEmbeddedDatabase(tempDir());
    const thread = startPgliteThread(join(dataDir, 'pglite'), '16MB');
    await thread.exec("CREATE TABLE thread_kept (v text); INSERT INTO thread_kept VALUES ('kept');");
    await thread.close();
    // Exit code 0 after PGlite's close, not a thread ended some other way.
    await expect(thread.query('SELECT 1')).rejects.toThrow(/^the embedded database is closed$/);
    const second = await openDatabase({ dataDir });
    try {
      expect((await sql<{ v: string }>`SELECT v FROM thread_kept`.execute(second.db)).rows).toEqual([{ v: 'kept' }]);
    } finally {
      await second.close();
    }
  });

  it('a thread that dies fails the query in flight and every later one with an error instead of hanging', async () => {
    const thread = startPgliteThread(join(withEmbeddedDatabase(tempDir()), 'pglite'), '16MB');
    const db = new Kysely<unknown>({ dialect: new PgliteThreadDialect(thread) });
    await thread.ready;
    const inFlight = sql`SELECT pg_sleep(5)`.execute(db);
    await new Promise((r) => setTimeout(r, 100));
    await thread.terminate();
    await expect(inFlight).rejects.toThrow(/^the embedded database's thread stopped \(exit code \d+\)/);
    await expect(sql`SELECT 1`.execute(db)).rejects.toThrow(/thread stopped/);
  });

  it('a database that cannot be opened fails its first query (and the thread\'s ready) with the reason', async () => {
    const dataDir = tempDir();
    // A file where the database's directory should be.
    writeFileSync(join(dataDir, 'pglite'), 'not a directory');
    const database = await openDatabase({ dataDir });
    await expect(sql`SELECT 1`.execute(database.db)).rejects.toThrow(/EEXIST|ENOTDIR|not a directory/);
    await database.close();
    const thread = startPgliteThread(join(dataDir, 'pglite'), '16MB');
    await expect(thread.ready).rejects.toThrow(/EEXIST|ENOTDIR|not a directory/);
    await expect(thread.query('SELECT 1')).rejects.toThrow(/EEXIST|ENOTDIR|not a directory/);
  });

  it('takes requests while PGlite is still starting, in order', async () => {
    const thread = startPgliteThread(join(withEmbeddedDatabase(tempDir()), 'pglite'), '16MB');
    const answers = await Promise.all([1, 2, 3].map((n) => thread.query<{ n: number }>('SELECT $1::int AS n', [n])));
    expect(answers.map((a) => a.rows[0].n)).toEqual([1, 2, 3]);
    await thread.ready;
    await thread.close();
  });
});

describe('embedded server stopped as soon as it answers', () => {
  const dataDir = makeTempDir('msvc-thread-server-');
  let server: ServerProcess | undefined;
  afterAll(async () => {
    await stopServer(server);
    removeTempDir(dataDir);
  });

  // With the database in its own thread /healthz answers while the start still seeds the demo tenant:
  // the signal handlers must be in place by then.
  it('SIGTERM right after the first /healthz 200 of a first start exits 0, and the next start finds the demo tenant', { timeout: 400_000 }, async () => {
    const port = await freePort();
    const env = { PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'info' };
    server = startServer(env);
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, server, 180_000);
    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
    server = startServer(env);
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, server, 180_000);
    await server.waitForOutput(/demo tenant|API key:/i);
    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
  });
});
