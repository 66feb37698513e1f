import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

// Runs with or without DATABASE_URL/REDIS_URL: this is what `npm start` gives a newcomer.
describe('embedded default (PGlite, in-memory counters, no configuration)', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'msvc-embedded-'));
  let server: ServerProcess | undefined;
  afterAll(async () => {
    await stopServer(server);
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('starts, prints a demo key, does a contact round trip, reports readiness and exits 0 on SIGTERM; a restart keeps the data', { timeout: 120_000 }, async () => {
    const port = await freePort();
    // Its own PGlite database: dispatch campaigns as a newcomer's `npm start` does.
    const env = { PORT: String(port), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'info', CAMPAIGN_DISPATCH_ENABLED: 'true' };
    server = startServer(env);
    const base = `http://127.0.0.1:${port}`;
    await waitForHttp(`${base}/healthz`, server, 90_000);
    const [, apiKey] = await server.waitForOutput(/API key:\s+(svc_sk_live_[0-9a-f]{40})/);
    const [, adminToken] = await server.waitForOutput(/admin token:\s+(\S+)/);
    expect(server.output()).toContain(`curl -s ${base}/api/v1/public/contacts`);
    // Where the docs and the sandbox are: addresses that answer.
    const [, docs] = await server.waitForOutput(/API docs:\s+(\S+) \(API explorer/);
    expect(docs).toBe(`${base}/docs`);
    expect((await fetch(docs)).status).toBe(200);
    const [, sandboxUrl] = await server.waitForOutput(/Sandbox:\s+(http:\/\/127\.0\.0\.1:\d+) \(SANDBOX_PORT;/);
    expect(await (await fetch(`${sandboxUrl}/__sandbox/health`)).json()).toEqual({ status: 'ok' });

    const ready = await fetch(`${base}/readyz`);
    expect(ready.status).toBe(200);
    expect(await ready.json()).toEqual({ status: 'ready', database: 'ok', redis: 'not_configured' });
    expect((await fetch(`${base}/admin/v1/scopes`, { headers: { authorization: `Bearer ${adminToken}` } })).status).toBe(200);

    const auth = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };
    const created = await fetch(`${base}/api/v1/public/contacts`, { method: 'POST', headers: auth, body: JSON.stringify({ first_name: 'Ada', phone: '+14155552671', email: 'ada@example.com', tags: ['vip'] }) });
    expect(created.status).toBe(201);
    expect(created.headers.get('x-ratelimit-limit-minute')).toBe('120');
    expect(created.headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{12}$/);
    const contact = await created.json() as Json;
    expect(contact).toMatchObject({ first_name: 'Ada', phone: '+14155552671', source: 'api' });
    const got = await fetch(`${base}/api/v1/public/contacts/${contact.id}`, { headers: auth });
    expect(await got.json()).toEqual(contact);
    const list = await (await fetch(`${base}/api/v1/public/contacts?search=ADA`, { headers: auth })).json() as Json;
    expect(list.data.map((c: { id: string }) => c.id)).toEqual([contact.id]);
    expect(list.pagination).toMatchObject({ total_items: 1, total_pages: 1 });
    expect((await fetch(`${base}/api/v1/public/contacts`, { method: 'POST', headers: auth, body: JSON.stringify({ first_name: 'Dup', phone: '+14155552671' }) })).status).toBe(409);

    // A campaign end to end on PGlite and the in-process sandbox: template approved, sent, completed.
    const template = await (await fetch(`${base}/api/v1/public/templates`, { method: 'POST', headers: auth, body: JSON.stringify({
      template_name: 'smoke_hello', language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hello {{1}}, welcome aboard.', example: { body_text: [['Ada']] } }] }) })).json() as Json;
    expect((await fetch(`${base}/api/v1/public/templates/${template.id}/submit`, { method: 'POST', headers: { authorization: auth.authorization } })).status).toBe(200);
    for (let i = 0; (await fetch(`${base}/api/v1/public/templates/${template.id}`, { headers: auth })).status !== 200; i++) {
      if (i > 300) throw new Error('template never approved');
      await new Promise((r) => setTimeout(r, 50));
    }
    const campaign = await (await fetch(`${base}/api/v1/public/campaigns`, { method: 'POST', headers: auth, body: JSON.stringify({
      name: 'Smoke', template_id: template.id, audience: { groups: ['vip'] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }] }] } }) })).json() as Json;
    expect((await fetch(`${base}/api/v1/public/campaigns/${campaign.id}/send`, { method: 'POST', headers: { authorization: auth.authorization } })).status).toBe(200);
    let final: Json;
    for (let i = 0; ; i++) {
      final = await (await fetch(`${base}/api/v1/public/campaigns/${campaign.id}`, { headers: auth })).json();
      if (final.status === 'COMPLETED' && final.stats.read === 1) break;
      if (i > 300) throw new Error(`campaign not completed: ${JSON.stringify(final)}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    expect(final.stats).toEqual({ total: 1, sent: 1, delivered: 1, read: 1, failed: 0, pending: 0, held: 0, deferred: 0, skipped: 0, replied: 0, clicked: 0 });

    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });

    // Same DATA_DIR: the data, the key and the generated secrets are still there; no second demo tenant.
    server = startServer(env);
    await waitForHttp(`${base}/healthz`, server, 60_000);
    const again = await fetch(`${base}/api/v1/public/contacts/${contact.id}`, { headers: auth });
    expect(again.status).toBe(200);
    expect((await fetch(`${base}/admin/v1/scopes`, { headers: { authorization: `Bearer ${adminToken}` } })).status).toBe(200);
    expect(server.output()).not.toMatch(/API key:/);
    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
  });

  it('NODE_ENV=production without DATABASE_URL, ADMIN_TOKEN and SECRETS_KEY refuses to start, naming them', { timeout: 30_000 }, async () => {
    const refused = startServer({ NODE_ENV: 'production', PORT: String(await freePort()), DATA_DIR: dataDir });
    const { code } = await refused.exited;
    expect(code).not.toBe(0);
    expect(code).not.toBeNull();
    const output = refused.output();
    for (const name of ['DATABASE_URL', 'ADMIN_TOKEN', 'SECRETS_KEY']) expect(output).toContain(name);
    expect(output).toMatch(/configuration error/i);
    expect(output).not.toMatch(/at .*\.ts:\d+/); // a message, not a stack trace
  });
});
