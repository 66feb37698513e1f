import { randomBytes, randomUUID } from 'node:crypto';
import { createServer, connect, type Server, type Socket } from 'node:net';
import pg from 'pg';
import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isDatabaseUnavailable } from '../src/db/database.ts';
import { ADMIN_TOKEN, describeOnPostgresServer, eventually, hasPostgres, itOnPostgresServer, makeTempDir, removeTempDir, startTestApp, type TestApp } from './helpers/app.ts';
import { startReceiver, type Receiver } from './helpers/https-receiver.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const ADMIN = 'adm_faults_token';
const SECRETS_KEY = 'b'.repeat(64);

/**
 * A TCP proxy in front of PostgreSQL that can cut the database off: `cut()` drops every open
 * connection and resets new ones (as a failover or a partition looks to the service) until `restore()`.
 */
async function startDbProxy(target: { host: string; port: number }) {
  const pairs = new Set<[Socket, Socket]>();
  let cut = false;
  const server: Server = createServer((client) => {
    if (cut) { client.resetAndDestroy(); return; }
    const upstream = connect(target.port, target.host);
    const pair: [Socket, Socket] = [client, upstream];
    pairs.add(pair);
    const end = () => { pairs.delete(pair); client.destroy(); upstream.destroy(); };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as { port: number }).port,
    cut() {
      cut = true;
      for (const [client, upstream] of pairs) { client.resetAndDestroy(); upstream.destroy(); }
      pairs.clear();
    },
    restore() { cut = false; },
    async close() {
      this.cut();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

interface Outcome { startedAt: number; finishedAt: number; status: number | 'network'; retryAfter: string | null; requestId: string | null; body: Json; contactId?: string }

describeOnPostgresServer('pg_terminate_backend and a database cut off from separate processes')('a lost database connection (fault drill, separate processes, own database)', () => {
  const dbName = `msvc_fault_${randomBytes(4).toString('hex')}`;
  const adminUrl = process.env.DATABASE_URL!;
  let admin: pg.Client;
  let proxy: Awaited<ReturnType<typeof startDbProxy>>;
  let receiver: Receiver;
  let api: ServerProcess | undefined;
  let worker: ServerProcess | undefined;
  const dirs: string[] = [];
  const dataDir = (prefix: string) => { const dir = makeTempDir(prefix); dirs.push(dir); return dir; };

  beforeAll(async () => {
    admin = new pg.Client({ connectionString: adminUrl });
    await admin.connect();
    await admin.query(`CREATE DATABASE ${dbName}`);
    const url = new URL(adminUrl);
    proxy = await startDbProxy({ host: url.hostname, port: Number(url.port || 5432) });
    receiver = await startReceiver();
  });
  afterAll(async () => {
    await stopServer(api);
    await stopServer(worker);
    await proxy?.close();
    await receiver?.close();
    await admin?.query(`DROP DATABASE IF EXISTS ${dbName} WITH (FORCE)`);
    await admin?.end();
    for (const dir of dirs) removeTempDir(dir);
  });

  it('API and worker processes survive terminated backends and a cut-off database: 503 + Retry-After meanwhile, no acknowledged write lost, back within a second', { timeout: 120_000 }, async () => {
    const url = new URL(adminUrl);
    url.host = `127.0.0.1:${proxy.port}`;
    url.pathname = `/${dbName}`;
    const common = {
      HOST: '127.0.0.1', DATABASE_URL: url.toString(), ADMIN_TOKEN: ADMIN, SECRETS_KEY, SEED_DEMO: 'false', LOG_LEVEL: 'warn',
      RATE_LIMIT_PER_MINUTE: '1000000',
    };
    const port = await freePort();
    api = startServer({ ...common, ROLE: 'api', PORT: String(port), SANDBOX_PORT: String(await freePort()), DATA_DIR: dataDir('msvc-fault-api-') });
    const base = `http://127.0.0.1:${port}`;
    await waitForHttp(`${base}/healthz`, api);
    worker = startServer({
      ...common, ROLE: 'worker', LOG_LEVEL: 'info', PORT: String(await freePort()), DATA_DIR: dataDir('msvc-fault-worker-'),
      WORKER_POLL_MS: '50', WEBHOOK_DELIVERY_ENABLED: 'true', WEBHOOK_EXTRA_CA_FILE: receiver.caFile, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_POLL_MS: '20', WEBHOOK_TIMEOUT_MS: '1000', WEBHOOK_LEASE_MS: '2000', WEBHOOK_RETRY_DELAYS_MS: '100,100,100,100,100,100,100,100',
    });
    await worker.waitForOutput(/workers started/);

    const adminHeaders = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const tenant = await (await fetch(`${base}/admin/v1/tenants`, { method: 'POST', headers: adminHeaders, body: JSON.stringify({ name: 'Faults', plan: 'business' }) })).json() as Json;
    const key = await (await fetch(`${base}/admin/v1/tenants/${tenant.id}/api-keys`, { method: 'POST', headers: adminHeaders, body: '{"name":"k"}' })).json() as Json;
    const auth = { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' };
    const hook = await fetch(`${base}/api/v1/public/webhooks`, { method: 'POST', headers: auth, body: JSON.stringify({ url: receiver.url('/faults'), events: ['contact.created'] }) });
    expect(hook.status).toBe(201);

    // Load: writers creating contacts (each queues a webhook), readers listing them, an admin reader.
    const outcomes: Outcome[] = [];
    let loading = true;
    let phone = 2_000_000;
    const request = async (path: string, init: RequestInit = {}): Promise<Outcome> => {
      const startedAt = Date.now();
      try {
        const res = await fetch(`${base}${path}`, init);
        const text = await res.text();
        let body: Json = null;
        try { body = JSON.parse(text); } catch { body = text; }
        return { startedAt, finishedAt: Date.now(), status: res.status, retryAfter: res.headers.get('retry-after'), requestId: res.headers.get('x-request-id'), body };
      } catch (err) {
        return { startedAt, finishedAt: Date.now(), status: 'network', retryAfter: null, requestId: null, body: String(err) };
      }
    };
    const clients = [
      ...Array.from({ length: 4 }, () => async () => {
        const outcome = await request('/api/v1/public/contacts', { method: 'POST', headers: auth, body: JSON.stringify({ first_name: 'Drill', phone: `+1415${phone++}` }) });
        if (outcome.status === 201) outcome.contactId = outcome.body.id;
        return outcome;
      }),
      async () => request('/api/v1/public/contacts?limit=5', { headers: auth }),
      async () => request(`/admin/v1/tenants/${tenant.id}`, { headers: adminHeaders }),
    ];
    const load = Promise.all(clients.map(async (next) => {
      while (loading) outcomes.push(await next());
    }));

    const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));
    await pause(500);
    // 1. Every ~300 ms for 3 s, terminate every backend of the service's database.
    let terminated = 0;
    const terminationsStarted = Date.now();
    while (Date.now() - terminationsStarted < 3000) {
      const res = await admin.query('SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()', [dbName]);
      terminated += res.rowCount ?? 0;
      await pause(300);
    }
    const terminationsEnded = Date.now();
    await pause(1500);

    // 2. The database is unreachable for 2 s: /readyz says so.
    const readyDuringCut: number[] = [];
    proxy.cut();
    const cutStarted = Date.now();
    while (Date.now() - cutStarted < 2000) {
      readyDuringCut.push((await request('/readyz')).status as number);
      await pause(100);
    }
    proxy.restore();
    const restored = Date.now();
    await pause(1500);
    loading = false;
    await load;

    const byStatus = new Map<string, number>();
    for (const o of outcomes) byStatus.set(String(o.status), (byStatus.get(String(o.status)) ?? 0) + 1);
    const firstOkAfter = (t: number) => Math.min(...outcomes.filter((o) => o.startedAt >= t && typeof o.status === 'number' && o.status < 300).map((o) => o.startedAt)) - t;
    console.log(`[drill] ${outcomes.length} requests ${JSON.stringify(Object.fromEntries(byStatus))}; ${terminated} backends terminated; ` +
      `first success ${firstOkAfter(terminationsEnded)} ms after the terminations, ${firstOkAfter(restored)} ms after the database returned; readyz during the cut ${JSON.stringify(readyDuringCut)}; ` +
      `api exit ${api.child.exitCode}, worker exit ${worker.child.exitCode}`);
    expect(api.child.exitCode, api.output()).toBeNull();
    expect(worker.child.exitCode, worker.output()).toBeNull();


    // Errors meanwhile are retryable 503s in the envelope, never 500s or dropped connections.
    const failures = outcomes.filter((o) => o.status !== 200 && o.status !== 201);
    expect(failures.length).toBeGreaterThan(0); // the drill did cut requests off
    for (const o of failures) {
      expect(o.status, JSON.stringify(o.body)).toBe(503);
      expect(o.retryAfter).toMatch(/^\d+$/);
      expect(o.body).toMatchObject({ success: false, error: { code: 'INTERNAL_ERROR', message: expect.any(String) }, meta: { request_id: o.requestId } });
    }
    expect(readyDuringCut).toContain(503);
    // Requests succeed again within a second of each fault's end, and all do after that second.
    expect(firstOkAfter(terminationsEnded)).toBeLessThan(1000);
    expect(firstOkAfter(restored)).toBeLessThan(1000);
    for (const o of outcomes.filter((o) => (o.startedAt >= terminationsEnded + 1000 && o.finishedAt < cutStarted) || o.startedAt >= restored + 1000)) {
      expect(o.status, JSON.stringify(o.body)).toBeLessThan(300);
    }
    expect((await request('/readyz')).status).toBe(200);

    // Every acknowledged write is there, and the worker delivered its webhook.
    const acknowledged = outcomes.flatMap((o) => (o.contactId ? [o.contactId] : []));
    expect(acknowledged.length).toBeGreaterThan(10);
    const stored = new pg.Client({ connectionString: `${adminUrl.replace(/\/[^/]*$/, '')}/${dbName}` });
    await stored.connect();
    try {
      const found = await stored.query('SELECT count(*)::int AS n FROM contacts WHERE id = ANY ($1::uuid[])', [acknowledged]);
      expect(found.rows[0].n).toBe(acknowledged.length);
    } finally {
      await stored.end();
    }
    await eventually(async () => {
      const delivered = new Set(receiver.at('/faults').map((r) => JSON.parse(r.body).data?.id));
      return acknowledged.every((id) => delivered.has(id));
    }, 30_000, 200);

    // A lost connection is an expected condition, not a bug: nothing was logged as unhandled.
    expect(api.output()).not.toMatch(/unhandled error|Unhandled/);
    expect(worker.output()).not.toMatch(/Unhandled/);
  });
});

describe('database errors: a lost connection is a 503, a failed statement is still a bug (in process)', () => {
  let t: TestApp;
  let admin: pg.Client | undefined;
  const logs: { level: number; msg: string }[] = [];
  beforeAll(async () => {
    if (hasPostgres) {
      admin = new pg.Client({ connectionString: process.env.DATABASE_URL });
      await admin.connect();
    }
    t = await startTestApp({}, {
      logStream: { write: (line: string) => { logs.push(JSON.parse(line)); } },
      logLevel: 'warn',
      routes: (app) => {
        app.get('/__test/sleep', async () => sql`SELECT pg_sleep(30), 'faults-drill-sleeper' AS tag`.execute(t.deps.db).then(() => ({ slept: true })));
        app.get('/__test/bad-sql', async () => sql`SELECT * FROM no_such_table_faults`.execute(t.deps.db).then(() => ({})));
      },
    });
  });
  afterAll(async () => {
    await t?.close();
    await admin?.end();
  });

  itOnPostgresServer('pg_terminate_backend from a second connection')('a query whose backend is terminated answers 503 with Retry-After, logged as a warning, not an unhandled error', async () => {
    const pending = t.app.inject({ method: 'GET', url: '/__test/sleep' });
    const query = "SELECT pid FROM pg_stat_activity WHERE query LIKE '%faults-drill-sleeper%' AND pid <> pg_backend_pid()";
    const pid = await eventually(async () => (await admin!.query(query)).rows[0]?.pid, 10_000, 20);
    await admin!.query('SELECT pg_terminate_backend($1)', [pid]);
    const res = await pending;
    expect(res.statusCode).toBe(503);
    expect(res.headers['retry-after']).toBe('1');
    expect(res.json()).toMatchObject({ success: false, error: { code: 'INTERNAL_ERROR' }, meta: { request_id: res.headers['x-request-id'] } });
    expect(logs.some((l) => l.msg === 'unhandled error')).toBe(false);
    // The pool dropped the dead client at once (its socket closes a moment later): the next request works.
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  });

  it('a failing statement (a bug) is still a logged 500 without Retry-After', async () => {
    const res = await t.app.inject({ method: 'GET', url: '/__test/bad-sql' });
    expect(res.statusCode).toBe(500);
    expect(res.headers['retry-after']).toBeUndefined();
    expect(res.json().error.code).toBe('INTERNAL_ERROR');
    expect(logs.some((l) => l.msg === 'unhandled error')).toBe(true);
  });

  itOnPostgresServer('a PostgreSQL server reached over the network')('a database that accepts connections but never answers: a 503 after DATABASE_CONNECT_TIMEOUT_MS, not a request held indefinitely', async () => {
    const accepted: Socket[] = [];
    const silent = createServer((socket) => { accepted.push(socket); }); // accepts and never answers, like a partitioned host
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    const url = new URL(process.env.DATABASE_URL!);
    url.host = `127.0.0.1:${(silent.address() as { port: number }).port}`;
    const hung = await startTestApp({ DATABASE_URL: url.toString(), DATABASE_CONNECT_TIMEOUT_MS: '300' });
    try {
      const started = performance.now();
      const res = await hung.app.inject({ method: 'GET', url: `/admin/v1/tenants/${randomUUID()}`, headers: { authorization: `Bearer ${ADMIN_TOKEN}` } });
      const elapsed = performance.now() - started;
      expect(res.statusCode).toBe(503);
      expect(res.headers['retry-after']).toBe('1');
      expect(elapsed).toBeGreaterThanOrEqual(250);
      expect(elapsed).toBeLessThan(2000);
      expect((await hung.app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(503);
    } finally {
      await hung.close();
      for (const socket of accepted) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    }
  });

  itOnPostgresServer('errors of the pg driver and a PostgreSQL server')('tells connection failures from statement failures', async () => {
    const refused = new pg.Client({ host: '127.0.0.1', port: await freePort(), user: 'postgres' });
    const connectError = await refused.connect().then(() => null, (err: unknown) => err);
    expect(isDatabaseUnavailable(connectError)).toBe(true);
    const statementError = await admin!.query('SELECT 1/0').then(() => null, (err: unknown) => err);
    expect((statementError as { code: string }).code).toBe('22012');
    expect(isDatabaseUnavailable(statementError)).toBe(false);
    const unique = Object.assign(new Error('duplicate key value violates unique constraint'), { code: '23505' });
    expect(isDatabaseUnavailable(unique)).toBe(false);
    expect(isDatabaseUnavailable(new TypeError("Cannot read properties of undefined (reading 'id')"))).toBe(false);
    expect(isDatabaseUnavailable(Object.assign(new Error('the database system is starting up'), { code: '57P03' }))).toBe(true);
    expect(isDatabaseUnavailable(Object.assign(new Error('connection failure'), { code: '08006' }))).toBe(true);
  });
});
