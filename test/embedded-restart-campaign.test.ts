import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeTempDir, removeTempDir, uniquePhone } from './helpers/app.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;

/**
 * The embedded default restarted in the middle of a campaign (the service and its built-in
 * sandbox stop together, paused first so the sandbox's sends log, which a restart does not keep,
 * can be read whole): the sandbox keeps the status callbacks it still owes in
 * DATA_DIR/sandbox-state.json and posts them once the service is back, so no message stays `sent`
 * for good, and every recipient is sent exactly once.
 */
describe('embedded default restarted mid-campaign', () => {
  const dataDir = makeTempDir('msvc-restart-campaign-');
  let server: ServerProcess | undefined;
  afterAll(async () => {
    await stopServer(server);
    removeTempDir(dataDir);
  });

  it('every recipient is sent once and every message reaches read', { timeout: 300_000 }, async () => {
    const port = await freePort();
    const sandboxPort = await freePort();
    const env = {
      PORT: String(port), SANDBOX_PORT: String(sandboxPort), DATA_DIR: dataDir, LOG_LEVEL: 'warn', SANDBOX_REVIEW_MS: '200',
      RATE_LIMIT_PER_MINUTE: '100000', CAMPAIGN_POLL_MS: '20', WORKER_POLL_MS: '50', CAMPAIGN_DISPATCH_ENABLED: 'true',
      // The embedded default, whatever the test run has: one process, its own database and sandbox.
      DATABASE_URL: '', REDIS_URL: '',
    };
    const base = `http://127.0.0.1:${port}`;
    const api = `${base}/api/v1/public`;
    server = startServer(env);
    await waitForHttp(`${base}/healthz`, server, 120_000);
    const [, apiKey] = await server.waitForOutput(/API key:\s+(svc_sk_live_[0-9a-f]{40})/);
    const [, tenantId] = await server.waitForOutput(/tenant id:\s+([0-9a-f-]{36})/);
    const auth = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };
    const admin = { authorization: `Bearer ${JSON.parse(readFileSync(join(dataDir, 'dev-secrets.json'), 'utf8')).ADMIN_TOKEN}`, 'content-type': 'application/json' };
    const post = async (url: string, body: unknown, headers = auth) => fetch(url, { method: 'POST', headers, body: JSON.stringify(body) });

    const template = await (await post(`${api}/templates`, { template_name: 'restart_campaign', language: 'en', category: 'UTILITY',
      components: [{ type: 'BODY', text: 'Hello {{1}}, welcome.', example: { body_text: [['Ada']] } }] })).json() as Json;
    expect((await post(`${api}/templates/${template.id}/submit`, {})).status).toBe(200);
    for (let i = 0; (await fetch(`${api}/templates/${template.id}`, { headers: auth })).status !== 200; i++) {
      if (i > 600) throw new Error('template never approved');
      await new Promise((r) => setTimeout(r, 50));
    }
    const total = 300;
    const phones = Array.from({ length: total }, () => uniquePhone());
    for (let i = 0; i < total; i += 100) {
      const bulk = await post(`${api}/contacts/bulk`, { contacts: phones.slice(i, i + 100).map((phone) => ({ first_name: 'Ada', phone, tags: ['restart'] })) });
      expect(bulk.status).toBe(201);
    }
    // The first ten recipients' statuses are held back 15 s by the sandbox: owed when the service stops.
    for (const to of phones.slice(0, 10)) {
      expect((await post(`http://127.0.0.1:${sandboxPort}/__sandbox/recipients`, { to, outcome: 'ok', delay_ms: 15_000 }, { 'content-type': 'application/json' } as never)).status).toBe(200);
    }
    // 50 a second: the campaign is still running when the service stops.
    expect((await fetch(`${base}/admin/v1/tenants/${tenantId}/business-account`, { method: 'PATCH', headers: admin, body: JSON.stringify({ messages_per_second: 50 }) })).status).toBe(200);
    const campaign = await (await post(`${api}/campaigns`, { name: 'Across a restart', template_id: template.id, batch_size: 10, audience: { groups: ['restart'] },
      variable_mapping: { components: [{ type: 'BODY', parameters: [{ kind: 'contact_field', field: 'first_name' }] }] } })).json() as Json;
    expect((await post(`${api}/campaigns/${campaign.id}/send`, {})).status).toBe(200);
    const get = async () => (await (await fetch(`${api}/campaigns/${campaign.id}`, { headers: auth })).json()) as Json;
    for (let i = 0; (await get()).stats.sent < 100; i++) {
      if (i > 1200) throw new Error(`the campaign never got going: ${JSON.stringify((await get()).stats)}`);
      await new Promise((r) => setTimeout(r, 50));
    }

    // Paused (nothing more is claimed; sends in flight finish) and stopped while the sandbox still
    // owes callbacks: its sends log is not kept across a restart, so it is read before.
    expect((await post(`${api}/campaigns/${campaign.id}/pause`, {})).status).toBe(200);
    for (let i = 0; ; i++) {
      const sending = await (await fetch(`${api}/campaigns/${campaign.id}/recipients?status=sending&limit=1`, { headers: auth })).json() as Json;
      if (sending.pagination.total_items === 0) break;
      if (i > 600) throw new Error('sends still in flight');
      await new Promise((r) => setTimeout(r, 50));
    }
    const before = (await (await fetch(`http://127.0.0.1:${sandboxPort}/__sandbox/sends`)).json() as Json).data as { to: string }[];
    const owed = (await get()).stats;
    expect(owed.read).toBeLessThanOrEqual(owed.sent - 10); // callbacks still owed when the service stops
    server.child.kill('SIGTERM');
    expect(await server.exited).toEqual({ code: 0, signal: null });
    server = startServer(env);
    await waitForHttp(`${base}/healthz`, server, 120_000);
    expect((await post(`${api}/campaigns/${campaign.id}/resume`, {})).status).toBe(200);

    let final: Json;
    for (let i = 0; ; i++) {
      final = await get();
      if (final.status === 'COMPLETED' && final.stats.read === total) break;
      if (i > 1200) throw new Error(`not every message reached read: ${JSON.stringify(final)}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(final.stats).toMatchObject({ total, sent: total, delivered: total, read: total, failed: 0, pending: 0 });
    const stuck = await (await fetch(`${api}/messages?campaign_id=${campaign.id}&status=sent&limit=1`, { headers: auth })).json() as Json;
    expect(stuck.pagination.total_items).toBe(0);
    // Exactly once each, as the upstream saw it.
    const sends = [...before, ...(await (await fetch(`http://127.0.0.1:${sandboxPort}/__sandbox/sends`)).json() as Json).data as { to: string }[]];
    const digits = new Set(phones.map((p) => p.replace('+', '')));
    const counts = new Map<string, number>();
    for (const s of sends) { const d = s.to.replace('+', ''); if (digits.has(d)) counts.set(d, (counts.get(d) ?? 0) + 1); }
    expect(counts.size).toBe(total);
    expect([...counts.values()].every((n) => n === 1)).toBe(true);
  });
});
