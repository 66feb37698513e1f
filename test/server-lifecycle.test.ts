import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { hasPostgres, hasRedis, itOnPostgresServer, makeTempDir, removeTempDir, withEmbeddedDatabase } from './helpers/app.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';
import { scrapeMetrics, valueOf } from './helpers/prometheus.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const ADMIN = 'adm_lifecycle_token';
const SECRETS_KEY = 'a'.repeat(64);

// Against PostgreSQL when DATABASE_URL is set, else each process on its own embedded database.
const database = (dir: string): Record<string, string> => (hasPostgres ? { DATABASE_URL: process.env.DATABASE_URL! } : (withEmbeddedDatabase(dir), {}));

describe('server process', () => {
  let server: ServerProcess | undefined;
  const dirs: string[] = [];
  const dataDir = (prefix: string) => { const dir = makeTempDir(prefix); dirs.push(dir); return dir; };
  afterAll(async () => {
    await stopServer(server);
    for (const dir of dirs) removeTempDir(dir);
  });

  itOnPostgresServer('a row lock held from a second connection')('SIGTERM stops accepting, finishes the in-flight request, closes pools and exits 0', { timeout: 60_000 }, async () => {
    const port = await freePort();
    server = startServer({
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir('msvc-life-'), DATABASE_URL: process.env.DATABASE_URL!,
      ...(hasRedis ? { REDIS_URL: process.env.REDIS_URL! } : {}), ADMIN_TOKEN: ADMIN, SECRETS_KEY, SEED_DEMO: 'false', LOG_LEVEL: 'warn',
    });
    const base = `http://127.0.0.1:${port}`;
    await waitForHttp(`${base}/healthz`, server);
    const ready = await (await fetch(`${base}/readyz`)).json();
    expect(ready).toEqual({ status: 'ready', database: 'ok', redis: hasRedis ? 'ok' : 'not_configured' });

    const adminHeaders = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const tenant = await (await fetch(`${base}/admin/v1/tenants`, { method: 'POST', headers: adminHeaders, body: JSON.stringify({ name: 'Life', plan: 'business' }) })).json() as Json;
    const key = await (await fetch(`${base}/admin/v1/tenants/${tenant.id}/api-keys`, { method: 'POST', headers: adminHeaders, body: '{"name":"k"}' })).json() as Json;
    const auth = { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' };
    const contact = await (await fetch(`${base}/api/v1/public/contacts`, { method: 'POST', headers: auth, body: JSON.stringify({ first_name: 'Slow', phone: '+14155550199' }) })).json() as Json;
    expect(contact.id).toEqual(expect.any(String));

    // Hold a row lock so the PATCH below is in flight when SIGTERM arrives.
    const locker = new pg.Client({ connectionString: process.env.DATABASE_URL });
    const probe = new pg.Client({ connectionString: process.env.DATABASE_URL }); // activity is snapshotted per transaction, so look from outside it
    await locker.connect();
    await probe.connect();
    try {
      const lockerPid = (await locker.query('SELECT pg_backend_pid() AS pid')).rows[0].pid;
      await locker.query('BEGIN');
      await locker.query('SELECT 1 FROM contacts WHERE id = $1 FOR UPDATE', [contact.id]);
      const inFlight = fetch(`${base}/api/v1/public/contacts/${contact.id}`, { method: 'PATCH', headers: auth, body: JSON.stringify({ last_name: 'Finished' }) });
      // wait until the PATCH is blocked on our lock
      for (let i = 0; ; i++) {
        const waiting = await probe.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE $1 = ANY (pg_blocking_pids(pid))', [lockerPid]);
        if (waiting.rows[0].n > 0) break;
        if (i > 200) throw new Error('PATCH never reached the lock');
        await new Promise((r) => setTimeout(r, 25));
      }
      server.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 300));
      expect(server.child.exitCode).toBeNull(); // still finishing the in-flight request
      const refused = await fetch(`${base}/healthz`).then((r) => r.status, () => 'refused');
      expect(refused === 'refused' || refused === 503).toBe(true);

      await locker.query('COMMIT');
      const res = await inFlight;
      expect(res.status).toBe(200);
      expect((await res.json() as Json).last_name).toBe('Finished');
    } finally {
      await locker.end();
      await probe.end();
    }
    expect(await server.exited).toEqual({ code: 0, signal: null });
  });

  it('ROLE=worker runs without an API listener, serves its metrics on METRICS_PORT, and exits 0 on SIGTERM', { timeout: 30_000 }, async () => {
    const [port, metricsPort] = [await freePort(), await freePort()];
    const dir = dataDir('msvc-worker-');
    server = startServer({ ROLE: 'worker', PORT: String(port), METRICS_PORT: String(metricsPort), DATA_DIR: dir, ...database(dir), ADMIN_TOKEN: ADMIN, SECRETS_KEY, SEED_DEMO: 'false', LOG_LEVEL: 'info' });
    await server.waitForOutput(/workers started/);
    await new Promise((r) => setTimeout(r, 300));
    expect(await fetch(`http://127.0.0.1:${port}/healthz`).then((r) => r.status, () => 'refused')).toBe('refused');
    const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    const { samples } = await scrapeMetrics(metricsUrl);
    expect(valueOf(samples, 'webhook_deliveries_due', { role: 'worker' })).toEqual(expect.any(Number));
    expect(valueOf(samples, 'campaign_recipients_queued', { role: 'worker', status: 'pending' })).toEqual(expect.any(Number));
    expect((await fetch(`http://127.0.0.1:${metricsPort}/healthz`)).status).toBe(404);
    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
    expect(await fetch(metricsUrl).then((r) => r.status, () => 'refused')).toBe('refused');
  });

  it('an invalid ROLE or SECRETS_KEY is a clear configuration error', { timeout: 30_000 }, async () => {
    for (const [env, pattern] of [[{ ROLE: 'both' }, /ROLE/], [{ SECRETS_KEY: 'short' }, /SECRETS_KEY/]] as const) {
      const dir = dataDir('msvc-bad-');
      const bad = startServer({ PORT: String(await freePort()), DATA_DIR: dir, ...database(dir), ADMIN_TOKEN: ADMIN, SECRETS_KEY, ...env });
      const { code } = await bad.exited;
      expect(code).toBe(1);
      expect(bad.output()).toMatch(/configuration error/);
      expect(bad.output()).toMatch(pattern);
    }
  });
});
