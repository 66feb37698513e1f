import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { createSandbox, type Sandbox } from '../src/sandbox/sandbox.ts';
import { hasPostgres, uniquePhone, withEmbeddedDatabase } from './helpers/app.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';
import { APP_SECRET, sandboxControl, uniqueTemplateName } from './helpers/upstream.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const ADMIN = 'adm_faults_token';
const SECRETS_KEY = 'b'.repeat(64);

/**
 * Issue 8.2: a crash between a write's commit and its Idempotency-Key's completion. The service
 * is paused exactly there (FAULT_PAUSE) and SIGKILLed; the client's retry, which the spec calls
 * safe, must answer the original result and not write (or send) again.
 */
// Against PostgreSQL when DATABASE_URL is set, else on the embedded database in DATA_DIR, recovered after each SIGKILL.
describe('crash between commit and Idempotency-Key completion', () => {
  const dataDir = withEmbeddedDatabase(mkdtempSync(join(tmpdir(), 'msvc-faults-')));
  let servers: ServerProcess[] = [];
  let sandbox: Sandbox | undefined;
  afterEach(async () => {
    for (const s of servers) await stopServer(s);
    servers = [];
    await sandbox?.close();
    sandbox = undefined;
  });
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }));

  async function start(port: number, env: Record<string, string> = {}) {
    const server = startServer({
      PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, ...(hasPostgres ? { DATABASE_URL: process.env.DATABASE_URL! } : {}), ADMIN_TOKEN: ADMIN, SECRETS_KEY,
      SEED_DEMO: 'false', LOG_LEVEL: 'warn', ROLE: 'api', UPSTREAM_APP_SECRET: APP_SECRET, UPSTREAM_VERIFY_TOKEN: 'verify', ...env,
    });
    servers.push(server);
    await waitForHttp(`http://127.0.0.1:${port}/healthz`, server, 60_000);
    return server;
  }

  async function tenantWithKey(base: string): Promise<{ id: string; auth: Record<string, string> }> {
    const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const tenant = await (await fetch(`${base}/admin/v1/tenants`, { method: 'POST', headers: admin, body: JSON.stringify({ name: 'Faults', plan: 'business' }) })).json() as Json;
    const key = await (await fetch(`${base}/admin/v1/tenants/${tenant.id}/api-keys`, { method: 'POST', headers: admin, body: '{"name":"k"}' })).json() as Json;
    return { id: tenant.id, auth: { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' } };
  }

  async function killAtFaultPoint(server: ServerProcess, point: string) {
    await server.waitForOutput(new RegExp(`fault point reached: ${point}`), 30_000);
    server.child.kill('SIGKILL');
    await server.exited;
  }

  it('a contact create: the retry replays the original 201 and no second contact exists', { timeout: 120_000 }, async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const first = await start(port, { FAULT_PAUSE: 'write:after-commit' });
    const tenant = await tenantWithKey(base);
    const phone = uniquePhone();
    const key = randomUUID();
    const body = JSON.stringify({ first_name: 'Once', phone });
    const lost = fetch(`${base}/api/v1/public/contacts`, { method: 'POST', headers: { ...tenant.auth, 'idempotency-key': key }, body }).catch(() => 'connection lost');
    await killAtFaultPoint(first, 'write:after-commit');
    expect(await lost).toBe('connection lost');

    await start(port);
    const retry = await fetch(`${base}/api/v1/public/contacts`, { method: 'POST', headers: { ...tenant.auth, 'idempotency-key': key }, body });
    expect(retry.status).toBe(201);
    expect(retry.headers.get('idempotent-replayed')).toBe('true');
    const contact = await retry.json() as Json;
    expect(contact).toMatchObject({ first_name: 'Once', phone });
    const list = await (await fetch(`${base}/api/v1/public/contacts?search=Once&limit=100`, { headers: tenant.auth })).json() as Json;
    expect(list.data.filter((c: Json) => c.phone === phone).map((c: Json) => c.id)).toEqual([contact.id]);
  });

  it('a template send: the retry answers the original message id and the sandbox saw one send', { timeout: 120_000 }, async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    // The sandbox lives in this test process, so it outlives the killed service; its callbacks are
    // retried until the restarted service takes them, as Meta's are.
    sandbox = await createSandbox({ port: 0, appSecret: APP_SECRET, reviewMs: 50, statusFlushMs: 5, callbackUrl: `${base}/upstream/webhook`, callbackRetryDelaysMs: [200, 1000, 3000, 5000, 10000] });
    const env = { UPSTREAM_BASE_URL: sandbox.baseUrl, IDEMPOTENCY_LOCK_MS: '1000', SEND_RECONCILE_MS: '30000' };
    const first = await start(port, { ...env, FAULT_PAUSE: 'send:after-upstream' });
    const tenant = await tenantWithKey(base);
    const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const account = await fetch(`${base}/admin/v1/tenants/${tenant.id}/business-account`, { method: 'PUT', headers: admin,
      body: JSON.stringify({ waba_id: `1${Date.now()}`, phone_number_id: `2${Date.now()}${port}`, access_token: 'sandbox-token' }) });
    expect(account.status).toBe(200);
    const name = uniqueTemplateName('fault');
    const created = await (await fetch(`${base}/api/v1/public/templates`, { method: 'POST', headers: tenant.auth,
      body: JSON.stringify({ template_name: name, language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Your code is {{1}} today.', example: { body_text: [['1234']] } }] }) })).json() as Json;
    expect((await fetch(`${base}/api/v1/public/templates/${created.id}/submit`, { method: 'POST', headers: { authorization: tenant.auth.authorization } })).status).toBe(200);
    for (let i = 0; ; i++) {
      if ((await fetch(`${base}/api/v1/public/templates/${created.id}`, { headers: tenant.auth })).status === 200) break;
      if (i > 200) throw new Error('template never approved');
      await new Promise((r) => setTimeout(r, 50));
    }

    const to = uniquePhone();
    const key = randomUUID();
    const body = JSON.stringify({ to, template_name: name, components: [{ type: 'body', parameters: [{ type: 'text', text: '4321' }] }] });
    const lost = fetch(`${base}/api/v1/public/messages/template`, { method: 'POST', headers: { ...tenant.auth, 'idempotency-key': key }, body }).catch(() => 'connection lost');
    await killAtFaultPoint(first, 'send:after-upstream');
    expect(await lost).toBe('connection lost');

    await start(port, env);
    await new Promise((r) => setTimeout(r, 1100)); // the dead request's key lock (IDEMPOTENCY_LOCK_MS) runs out
    // Until a callback says what became of the first attempt, a retry is told to wait (409 with
    // Retry-After), never sent again; once the callback is in, it answers the original message id.
    let retry: Response;
    for (let i = 0; ; i++) {
      retry = await fetch(`${base}/api/v1/public/messages/template`, { method: 'POST', headers: { ...tenant.auth, 'idempotency-key': key }, body });
      if (retry.status !== 409) break;
      expect(Number(retry.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
      if (i > 100) throw new Error('the outcome never became known');
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(retry.status).toBe(200);
    const answer = await retry.json() as Json;
    const sends = (await sandboxControl(sandbox, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as Json[];
    expect(sends).toHaveLength(1);
    expect(answer).toEqual({ message_id: sends[0].message_id, status: 'accepted', to });
    // A second retry is a plain replay of that answer.
    const again = await fetch(`${base}/api/v1/public/messages/template`, { method: 'POST', headers: { ...tenant.auth, 'idempotency-key': key }, body });
    expect(again.headers.get('idempotent-replayed')).toBe('true');
    expect(await again.json()).toEqual(answer);
  });
});
