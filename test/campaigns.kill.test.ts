import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { createSandbox, type Sandbox } from '../src/sandbox/sandbox.ts';
import { describeOnPostgresServer, hasRedis, uniquePhone } from './helpers/app.ts';
import { createOwnDatabase } from './helpers/own-database.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';
import { APP_SECRET, sandboxControl, uniqueTemplateName } from './helpers/upstream.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const ADMIN = 'adm_kill_token';
const SECRETS_KEY = 'c'.repeat(64);
const RECIPIENTS = 300;

/**
 * ARCHITECTURE 5, proved: a campaign worker SIGKILLed mid-campaign, again and again, loses no
 * recipient and sends none twice. Its database is its own: the worker processes serve every
 * running campaign of their database.
 */
describeOnPostgresServer('several worker processes on one database')('campaign dispatch survives SIGKILLed workers', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'msvc-kill-'));
  const processes: ServerProcess[] = [];
  let sandbox: Sandbox | undefined;
  let db: Awaited<ReturnType<typeof createOwnDatabase>> | undefined;
  afterAll(async () => {
    for (const p of processes) await stopServer(p);
    await sandbox?.close();
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('every recipient is sent exactly once across 4 worker kills', { timeout: 180_000 }, async () => {
    db = await createOwnDatabase('msvc_kill');
    const apiPort = await freePort();
    const base = `http://127.0.0.1:${apiPort}`;
    sandbox = await createSandbox({ port: 0, appSecret: APP_SECRET, reviewMs: 50, statusFlushMs: 5, callbackUrl: `${base}/upstream/webhook` });
    const env = {
      DATA_DIR: dataDir, DATABASE_URL: db.url!, ...(hasRedis ? { REDIS_URL: process.env.REDIS_URL! } : {}), ADMIN_TOKEN: ADMIN, SECRETS_KEY,
      SEED_DEMO: 'false', LOG_LEVEL: 'error', UPSTREAM_BASE_URL: sandbox.baseUrl, UPSTREAM_APP_SECRET: APP_SECRET, UPSTREAM_VERIFY_TOKEN: 'verify',
      CAMPAIGN_DISPATCH_ENABLED: 'true', UPSTREAM_TIMEOUT_MS: '2000', PACING_HORIZON_MS: '200', CAMPAIGN_LEASE_MS: '2500', SEND_RECONCILE_MS: '2000', CAMPAIGN_POLL_MS: '20', WORKER_POLL_MS: '50',
    };
    const api = startServer({ ...env, ROLE: 'api', PORT: String(apiPort), HOST: '127.0.0.1' });
    processes.push(api);
    await waitForHttp(`${base}/healthz`, api, 60_000);
    const startWorker = () => {
      const worker = startServer({ ...env, ROLE: 'worker', PORT: '0' });
      processes.push(worker);
      return worker;
    };

    const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const post = async (path: string, body: unknown, headers: Record<string, string>, method = 'POST') => {
      const res = await fetch(`${base}${path}`, { method, headers, body: JSON.stringify(body) });
      const json = await res.json() as Json;
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
      return json;
    };
    const tenant = await post('/admin/v1/tenants', { name: 'Kill drill', plan: 'business' }, admin);
    const key = await post(`/admin/v1/tenants/${tenant.id}/api-keys`, { name: 'k' }, admin);
    const auth = { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' };
    await post(`/admin/v1/tenants/${tenant.id}/business-account`, { waba_id: '1099', phone_number_id: `2099${apiPort}`, access_token: 't', messages_per_second: 100 }, admin, 'PUT');
    const name = uniqueTemplateName('kill');
    const template = await post('/api/v1/public/templates', { template_name: name, language: 'en', category: 'UTILITY',
      components: [{ type: 'BODY', text: 'Hello {{1}}, see you soon.', example: { body_text: [['Ada']] } }] }, auth);
    await post(`/api/v1/public/templates/${template.id}/submit`, {}, auth);
    for (let i = 0; (await fetch(`${base}/api/v1/public/templates/${template.id}`, { headers: auth })).status !== 200; i++) {
      if (i > 200) throw new Error('template never approved');
      await new Promise((r) => setTimeout(r, 50));
    }
    const phones = Array.from({ length: RECIPIENTS }, () => uniquePhone());
    for (let i = 0; i < RECIPIENTS; i += 100) {
      await post('/api/v1/public/contacts/bulk', { contacts: phones.slice(i, i + 100).map((phone, j) => ({ first_name: `K${i + j}`, phone, tags: ['drill'] })) }, auth);
    }
    const campaign = await post('/api/v1/public/campaigns', { name: 'Drill', template_id: template.id, batch_size: 10, audience: { groups: ['drill'] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }] }] } }, auth);
    await post(`/api/v1/public/campaigns/${campaign.id}/send`, {}, auth);

    const sentCount = async () => (await sandboxControl(sandbox!, 'GET', '/__sandbox/sends')).json.data.length as number;
    let worker = startWorker();
    for (let kill = 1; kill <= 4; kill++) {
      // Let the worker get going (sends flowing), then kill it mid-batch.
      const before = await sentCount();
      for (let i = 0; (await sentCount()) < before + 20 && i < 400; i++) await new Promise((r) => setTimeout(r, 25));
      worker.child.kill('SIGKILL');
      await worker.exited;
      worker = startWorker();
    }

    const deadline = Date.now() + 120_000;
    let final: Json;
    for (;;) {
      final = await (await fetch(`${base}/api/v1/public/campaigns/${campaign.id}`, { headers: auth })).json();
      if (final.status === 'COMPLETED' && final.stats.pending === 0) break;
      if (Date.now() > deadline) throw new Error(`campaign not completed: ${JSON.stringify(final)}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const sends = (await sandboxControl(sandbox, 'GET', '/__sandbox/sends')).json.data as Json[];
    const perPhone = new Map<string, number>();
    for (const s of sends) perPhone.set(s.to, (perPhone.get(s.to) ?? 0) + 1);
    const duplicates = [...perPhone].filter(([, n]) => n > 1);
    expect(duplicates).toEqual([]);
    expect(perPhone.size).toBe(RECIPIENTS);
    for (const phone of phones) expect(perPhone.get(phone.replace(/^\+/, '')) ?? perPhone.get(phone)).toBe(1);
    expect(final.stats).toMatchObject({ total: RECIPIENTS, failed: 0, pending: 0, sent: RECIPIENTS });
  });
});
