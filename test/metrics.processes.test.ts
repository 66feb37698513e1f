import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { createSandbox, type Sandbox } from '../src/sandbox/sandbox.ts';
import { numberBucket } from '../src/modules/campaigns/campaigns.metrics.ts';
import { describeOnPostgresServer, eventually, hasRedis, uniquePhone } from './helpers/app.ts';
import { createOwnDatabase } from './helpers/own-database.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './helpers/process.ts';
import { scrapeMetrics, sumOf, valueOf, type Sample } from './helpers/prometheus.ts';
import { APP_SECRET, uniqueTemplateName } from './helpers/upstream.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const ADMIN = 'adm_metrics_token';
const RECIPIENTS = 60;

const refused = (url: string) => fetch(url).then(() => false, () => true);

/** One scrape target per process: an API process and a worker process on one database, each with METRICS_PORT. */
describeOnPostgresServer('an API process and a worker process on one database')('METRICS_PORT in an API process and a worker process', () => {
  const dataDir = mkdtempSync(join(tmpdir(), 'msvc-metrics-'));
  const processes: ServerProcess[] = [];
  let sandbox: Sandbox | undefined;
  let db: Awaited<ReturnType<typeof createOwnDatabase>> | undefined;
  afterAll(async () => {
    for (const p of processes) await stopServer(p);
    await sandbox?.close();
    await db?.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('each serves its role\'s series while a campaign runs, moving between scrapes, with no tenant in any label; SIGTERM closes it', { timeout: 180_000 }, async () => {
    db = await createOwnDatabase('msvc_metrics');
    const [apiPort, apiMetricsPort, workerMetricsPort] = [await freePort(), await freePort(), await freePort()];
    const base = `http://127.0.0.1:${apiPort}`;
    sandbox = await createSandbox({ port: 0, appSecret: APP_SECRET, reviewMs: 50, statusFlushMs: 5, callbackUrl: `${base}/upstream/webhook` });
    const env = {
      DATA_DIR: dataDir, DATABASE_URL: db.url!, ...(hasRedis ? { REDIS_URL: process.env.REDIS_URL! } : {}), ADMIN_TOKEN: ADMIN, SECRETS_KEY: 'd'.repeat(64),
      SEED_DEMO: 'false', LOG_LEVEL: 'info', UPSTREAM_BASE_URL: sandbox.baseUrl, UPSTREAM_APP_SECRET: APP_SECRET, UPSTREAM_VERIFY_TOKEN: 'verify',
      HOST: '127.0.0.1', CAMPAIGN_DISPATCH_ENABLED: 'true', PACING_HORIZON_MS: '200', CAMPAIGN_POLL_MS: '20', WORKER_POLL_MS: '50',
    };
    const api = startServer({ ...env, ROLE: 'api', PORT: String(apiPort), METRICS_PORT: String(apiMetricsPort) });
    const worker = startServer({ ...env, ROLE: 'worker', PORT: '0', METRICS_PORT: String(workerMetricsPort) });
    processes.push(api, worker);
    await waitForHttp(`${base}/healthz`, api, 60_000);
    await worker.waitForOutput(/workers started/, 60_000);
    expect(worker.output()).toContain(`"msg":"metrics on http://127.0.0.1:${workerMetricsPort}/metrics"`);
    const apiMetrics = `http://127.0.0.1:${apiMetricsPort}/metrics`;
    const workerMetrics = `http://127.0.0.1:${workerMetricsPort}/metrics`;

    const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
    const post = async (path: string, body: unknown, headers: Record<string, string>, method = 'POST') => {
      const res = await fetch(`${base}${path}`, { method, headers, body: JSON.stringify(body) });
      const json = await res.json() as Json;
      if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
      return json;
    };
    const tenant = await post('/admin/v1/tenants', { name: 'Metrics', plan: 'business' }, admin);
    const key = await post(`/admin/v1/tenants/${tenant.id}/api-keys`, { name: 'k' }, admin);
    const auth = { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' };
    const phoneNumberId = `2077${apiPort}`;
    // 60 recipients at 20 a second: three seconds of sending, scraped in between.
    await post(`/admin/v1/tenants/${tenant.id}/business-account`, { waba_id: '1077', phone_number_id: phoneNumberId, access_token: 't', messages_per_second: 20 }, admin, 'PUT');
    const template = await post('/api/v1/public/templates', { template_name: uniqueTemplateName('metrics'), language: 'en', category: 'UTILITY',
      components: [{ type: 'BODY', text: 'Hello {{1}}, see you soon.', example: { body_text: [['Ada']] } }] }, auth);
    await post(`/api/v1/public/templates/${template.id}/submit`, {}, auth);
    await eventually(async () => (await fetch(`${base}/api/v1/public/templates/${template.id}`, { headers: auth })).status === 200, 20_000);
    const phones = Array.from({ length: RECIPIENTS }, () => uniquePhone());
    await post('/api/v1/public/contacts/bulk', { contacts: phones.map((phone, i) => ({ first_name: `M${i}`, phone, tags: ['metrics'] })) }, auth);
    const campaign = await post('/api/v1/public/campaigns', { name: 'Scraped', template_id: template.id, batch_size: 5, audience: { groups: ['metrics'] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }] }] } }, auth);
    const campaignStatus = async () => (await (await fetch(`${base}/api/v1/public/campaigns/${campaign.id}`, { headers: auth })).json() as Json);

    const workerProgress = (samples: Sample[]) => ({
      sends: sumOf(samples, 'campaign_sends_total', { role: 'worker' }),
      accepted: sumOf(samples, 'campaign_recipient_outcomes_total', { role: 'worker', outcome: 'accepted' }),
      claimed: sumOf(samples, 'campaign_recipient_transitions_total', { role: 'worker', from: 'pending', to: 'sending' }),
      lagObserved: sumOf(samples, 'campaign_dispatch_lag_seconds_count', { role: 'worker' }),
    });
    // Status callbacks arrive at the API process: it moves the recipients on.
    const apiProgress = (samples: Sample[]) => ({
      delivered: sumOf(samples, 'campaign_recipient_transitions_total', { role: 'api', to: 'delivered' }),
      read: sumOf(samples, 'campaign_recipient_transitions_total', { role: 'api', to: 'read' }),
    });

    await post(`/api/v1/public/campaigns/${campaign.id}/send`, {}, auth);
    const duringWorker = await eventually(async () => {
      const scraped = await scrapeMetrics(workerMetrics);
      return Object.values(workerProgress(scraped.samples)).every((v) => v > 0) ? scraped : null;
    }, 30_000);
    const duringApi = await eventually(async () => {
      const scraped = await scrapeMetrics(apiMetrics);
      return Object.values(apiProgress(scraped.samples)).every((v) => v > 0) ? scraped : null;
    }, 30_000);
    expect((await campaignStatus()).status).toBe('RUNNING');
    // Both read the shared queues from the database: the recipients still waiting, by status.
    for (const [role, scraped] of [['worker', duringWorker], ['api', duringApi]] as const) {
      expect(valueOf(scraped.samples, 'campaign_recipients_queued', { role, status: 'pending' })).toEqual(expect.any(Number));
      expect(valueOf(scraped.samples, 'campaign_recipients_queued', { role, status: 'sending' })).toEqual(expect.any(Number));
      expect(sumOf(scraped.samples, 'campaign_recipients_queued', { role })).toBeGreaterThan(0);
      expect(valueOf(scraped.samples, 'webhook_deliveries_due', { role })).toEqual(expect.any(Number));
      expect(valueOf(scraped.samples, 'process_resident_memory_bytes', { role })).toBeGreaterThan(0);
    }
    // The worker serves no HTTP API: it has no request series.
    expect(sumOf(duringWorker.samples, 'http_request_duration_seconds_count')).toBe(0);
    expect(sumOf(duringApi.samples, 'http_request_duration_seconds_count', { role: 'api' })).toBeGreaterThan(0);

    await eventually(async () => {
      const c = await campaignStatus();
      return c.status === 'COMPLETED' && c.stats.read === RECIPIENTS ? c : null;
    }, 60_000);
    const afterWorker = await scrapeMetrics(workerMetrics);
    const afterApi = await scrapeMetrics(apiMetrics);
    const [w1, w2] = [workerProgress(duringWorker.samples), workerProgress(afterWorker.samples)];
    for (const k of Object.keys(w2) as (keyof typeof w2)[]) expect(w2[k], k).toBeGreaterThan(w1[k]);
    expect(w2.sends).toBe(RECIPIENTS);
    expect(valueOf(afterWorker.samples, 'campaign_sends_total', { number_bucket: numberBucket(phoneNumberId) })).toBe(RECIPIENTS);
    const [a1, a2] = [apiProgress(duringApi.samples), apiProgress(afterApi.samples)];
    for (const k of Object.keys(a2) as (keyof typeof a2)[]) expect(a2[k], k).toBeGreaterThan(a1[k]);
    expect(sumOf(afterWorker.samples, 'campaign_recipients_queued', { role: 'worker' })).toBe(0);

    const identifiers = [tenant.id, campaign.id, template.id, key.id, phoneNumberId, ...phones.map((p) => p.replace(/^\+/, ''))];
    for (const scraped of [duringWorker, duringApi, afterWorker, afterApi]) {
      for (const id of identifiers) expect(scraped.text).not.toContain(id);
    }

    for (const [proc, url] of [[worker, workerMetrics], [api, apiMetrics]] as const) {
      proc.child.kill('SIGTERM');
      expect(await proc.exited).toEqual({ code: 0, signal: null });
      expect(await refused(url)).toBe(true);
    }
  });
});
