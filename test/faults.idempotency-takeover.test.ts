import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, afterEach, expect, it } from 'vitest';
import { livenessLockKey } from '../src/db/process-liveness.ts';
import { createSandbox, type Sandbox } from '../src/sandbox/sandbox.ts';
import { describeOnPostgresServer, eventually, makeTempDir, removeTempDir, uniquePhone } from './helpers/app.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';
import { APP_SECRET, sandboxControl, uniqueTemplateName } from './helpers/upstream.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const ADMIN = 'adm_takeover_token';
const SECRETS_KEY = 'c'.repeat(64);

/**
 * Issue 22: a request whose process died mid-write held its Idempotency-Key for IDEMPOTENCY_LOCK_MS
 * (60 s), answering the retry 409 without Retry-After. Two service processes share the database; the
 * first is SIGKILLed while a keyed send hangs on the upstream. While it lives, the second answers the
 * retry 409 with Retry-After; once it is gone, the second takes the key over at once (the default
 * 60 s lock is far from over). What the taken-over send then does is another rule's business.
 */
describeOnPostgresServer('two service processes on one PostgreSQL server')('a process SIGKILLed while it runs a keyed request', () => {
  const dirs: string[] = [];
  let servers: ServerProcess[] = [];
  let sandbox: Sandbox | undefined;
  let db: pg.Client | undefined;
  afterEach(async () => {
    for (const s of servers) await stopServer(s);
    servers = [];
    await sandbox?.close();
    sandbox = undefined;
    await db?.end();
    db = undefined;
  });
  afterAll(() => { for (const dir of dirs) removeTempDir(dir); });

  async function start(port: number, env: Record<string, string>) {
    const dataDir = makeTempDir('msvc-takeover-');
    dirs.push(dataDir);
    const server = startServer({
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, DATABASE_URL: process.env.DATABASE_URL!, ADMIN_TOKEN: ADMIN, SECRETS_KEY,
      SEED_DEMO: 'false', LOG_LEVEL: 'warn', ROLE: 'api', UPSTREAM_APP_SECRET: APP_SECRET, UPSTREAM_VERIFY_TOKEN: 'verify', ...env,
    });
    servers.push(server);
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, server, 60_000);
    return server;
  }

  it('the retry is refused with Retry-After while the process lives, and taken over at once when it dies', { timeout: 120_000 }, async () => {
    sandbox = await createSandbox({ port: 0, appSecret: APP_SECRET, reviewMs: 50, statusFlushMs: 5 });
    const env = { UPSTREAM_BASE_URL: sandbox.baseUrl };
    const [portA, portB] = [await freePort(), await freePort()];
    const [baseA, baseB] = [`http://127.0.0.1:${portA}`, `http://127.0.0.1:${portB}`];
    const [first] = await Promise.all([start(portA, env), start(portB, env)]);
    sandbox.state.config.callback_url = `${baseB}/upstream/webhook`;

    const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const tenant = await (await fetch(`${baseB}/admin/v1/tenants`, { method: 'POST', headers: admin, body: JSON.stringify({ name: 'Takeover', plan: 'business' }) })).json() as Json;
    const apiKey = await (await fetch(`${baseB}/admin/v1/tenants/${tenant.id}/api-keys`, { method: 'POST', headers: admin, body: '{"name":"k"}' })).json() as Json;
    const auth = { authorization: `Bearer ${apiKey.key}`, 'content-type': 'application/json' };
    const account = await fetch(`${baseB}/admin/v1/tenants/${tenant.id}/business-account`, { method: 'PUT', headers: admin,
      body: JSON.stringify({ waba_id: `1${Date.now()}`, phone_number_id: `3${Date.now()}${portB}`, access_token: 'sandbox-token' }) });
    expect(account.status).toBe(200);
    const name = uniqueTemplateName('takeover');
    const created = await (await fetch(`${baseB}/api/v1/public/templates`, { method: 'POST', headers: auth,
      body: JSON.stringify({ template_name: name, language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Your code is {{1}} today.', example: { body_text: [['1234']] } }] }) })).json() as Json;
    expect((await fetch(`${baseB}/api/v1/public/templates/${created.id}/submit`, { method: 'POST', headers: { authorization: auth.authorization } })).status).toBe(200);
    await eventually(async () => (await fetch(`${baseB}/api/v1/public/templates/${created.id}`, { headers: auth })).status === 200, 20_000);

    // The upstream now holds every send far longer than this test waits: the first process's
    // request hangs, holding its key, until it is killed.
    await sandboxControl(sandbox, 'PUT', '/__sandbox/config', { latency_ms: 60_000 });
    const key = randomUUID();
    const to = uniquePhone();
    const send = (base: string) => fetch(`${base}/api/v1/public/messages/template`, {
      method: 'POST', headers: { ...auth, 'idempotency-key': key },
      body: JSON.stringify({ to, template_name: name, components: [{ type: 'body', parameters: [{ type: 'text', text: '4321' }] }] }),
    });
    db = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await db.connect();
    const keyRow = async () => (await db!.query<{ state: string; owner_process_id: string }>(
      'SELECT state, owner_process_id FROM idempotency_keys WHERE tenant_id = $1 AND key = $2', [tenant.id, key])).rows[0];
    const lost = send(baseA).then((r) => r.status, () => 'connection lost');
    const owner = (await eventually(async () => { const row = await keyRow(); return row?.state === 'running' && row; })).owner_process_id;

    const whileAlive = await send(baseB);
    expect(whileAlive.status).toBe(409);
    expect(whileAlive.headers.get('retry-after')).toBe('1');
    expect(await whileAlive.json()).toMatchObject({ success: false, error: { code: 'CONFLICT', message: 'A request with this Idempotency-Key is still being processed' } });

    first.child.kill('SIGKILL');
    await first.exited;
    const killedAt = Date.now();
    expect(await lost).toBe('connection lost');
    // The server drops the dead process's session, and with it its liveness lock: from then on the
    // first retry takes the key over.
    await eventually(async () => (await db!.query(
      "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND objid = $1", [livenessLockKey(owner)])).rowCount === 0, 5000, 10);
    await sandboxControl(sandbox, 'PUT', '/__sandbox/config', { latency_ms: 0 });
    const retry = await send(baseB);
    const answer = await retry.text();
    expect(`${retry.status} ${answer}`).not.toMatch(/^409 .*still being processed/);
    const tookMs = Date.now() - killedAt;
    console.log(`[takeover] key taken over ${tookMs} ms after the SIGKILL (answer ${retry.status}); its lock would have lasted 60 s`);
    expect(tookMs).toBeLessThan(10_000);
    expect((await keyRow())?.owner_process_id ?? null).not.toBe(owner);
  });
});
