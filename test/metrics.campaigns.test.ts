import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readWithin, ReadTimedOut } from '../src/db/read-within.ts';
import { Metrics } from '../src/metrics.ts';
import { startMetricsServer, type MetricsServer } from '../src/metrics-server.ts';
import { campaignQueueDepth, NUMBER_BUCKETS, numberBucket } from '../src/modules/campaigns/campaigns.metrics.ts';
import { adminHeaders, call, eventually, itOnPostgresServer } from './helpers/app.ts';
import { createOwnDatabase } from './helpers/own-database.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { parsePrometheus, scrapeMetrics, sumOf, valueOf, type Sample } from './helpers/prometheus.ts';
import { createApprovedTemplate, createConnectedTenant, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

/** Label names a series may carry: bounded ones only (never a tenant, campaign or number). */
const ALLOWED_LABELS = new Set(['role', 'le', 'quantile', 'method', 'route', 'status_code', 'operation', 'result', 'outcome', 'from', 'to',
  'number_bucket', 'status', 'version', 'major', 'minor', 'patch', 'space', 'type', 'kind']);

/** The campaign series that count work done: each must grow between a scrape mid-campaign and one after it. */
function campaignProgress(samples: Sample[]) {
  return {
    sends: sumOf(samples, 'campaign_sends_total'),
    accepted: sumOf(samples, 'campaign_recipient_outcomes_total', { outcome: 'accepted' }),
    claimed: sumOf(samples, 'campaign_recipient_transitions_total', { from: 'pending', to: 'sending' }),
    lagObserved: sumOf(samples, 'campaign_dispatch_lag_seconds_count'),
  };
}

function expectNoIdentifiers(text: string, samples: Sample[], ids: string[]) {
  for (const id of ids) expect(text).not.toContain(id);
  for (const s of samples) for (const label of Object.keys(s.labels)) expect(ALLOWED_LABELS, `${s.name} label ${label}`).toContain(label);
  for (const s of samples.filter((x) => x.name === 'campaign_sends_total')) expect(Number(s.labels.number_bucket)).toBeLessThan(NUMBER_BUCKETS);
}

describe('scrape-time reads', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  it('give up at their deadline, and the scrape reports the gauge NaN instead of waiting', async () => {
    const started = Date.now();
    await expect(readWithin(t.deps.db, 200, (tx) => sql`SELECT pg_sleep(0.8)`.execute(tx))).rejects.toBeInstanceOf(ReadTimedOut);
    expect(Date.now() - started).toBeLessThan(1000);

    const metrics = new Metrics({ role: 'worker' });
    metrics.watchCampaignQueue(() => readWithin(t.deps.db, 200, async (tx) => {
      await sql`SELECT pg_sleep(0.8)`.execute(tx);
      return new Map([['pending', 1]]);
    }));
    const scrapeStarted = Date.now();
    const samples = parsePrometheus((await metrics.render()).body);
    expect(Date.now() - scrapeStarted).toBeLessThan(1000);
    expect(valueOf(samples, 'campaign_recipients_queued', { status: 'pending', role: 'worker' })).toBeNaN();
    // The embedded database runs one statement at a time: let the sleeps end before the next test.
    await readWithin(t.deps.db, 10_000, (tx) => sql`SELECT 1`.execute(tx));
  });

  itOnPostgresServer('pg_stat_activity of a PostgreSQL server')('are cancelled by the server at their deadline, not left running', async () => {
    await expect(readWithin(t.deps.db, 200, (tx) => sql`SELECT pg_sleep(5)`.execute(tx))).rejects.toBeInstanceOf(ReadTimedOut);
    const running = () => sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%pg_sleep(5)%' AND pid <> pg_backend_pid()`.execute(t.deps.db);
    await eventually(async () => (await running()).rows[0].n === 0, 2000);
  });

  it('a phone number\'s bucket is the same in every process and never its digits', () => {
    expect(numberBucket('2109876543210')).toBe(numberBucket('2109876543210'));
    const buckets = new Set(Array.from({ length: 200 }, (_, i) => numberBucket(`21000000${i}`)));
    expect(buckets.size).toBe(NUMBER_BUCKETS);
    for (const b of buckets) expect(b).toMatch(/^\d{1,2}$/);
  });
});

describe('METRICS_PORT in process: campaign series while a campaign runs', () => {
  let t: UpstreamTestApp;
  let server: MetricsServer;
  beforeAll(async () => {
    t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' });
    server = await startMetricsServer(t.deps.metrics, { port: 0, host: '127.0.0.1' });
  });
  afterAll(async () => {
    await server?.close();
    await t?.close();
  });

  it('serves only GET /metrics, without auth', async () => {
    const base = `http://127.0.0.1:${server.port}`;
    const { samples } = await scrapeMetrics(`${base}/metrics`);
    expect(valueOf(samples, 'process_cpu_user_seconds_total', { role: 'all' })).toBeGreaterThan(0);
    expect(valueOf(samples, 'webhook_deliveries_due', { role: 'all' })).toEqual(expect.any(Number));
    for (const path of ['/healthz', '/admin/v1/metrics', '/metrics/extra', '/']) expect((await fetch(`${base}${path}`)).status).toBe(404);
    expect((await fetch(`${base}/metrics`, { method: 'POST' })).status).toBe(405);
  });

  it('counts sends, outcomes, transitions and lag, reports the queue by status, and no label names a tenant', async () => {
    const tenant = await createConnectedTenant(t.app);
    // 30 recipients at 15 a second: two seconds of sending, long enough to scrape mid-campaign.
    expect((await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders, payload: { messages_per_second: 15 } })).statusCode).toBe(200);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(30, { tags: [tag] }));
    const created = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Metrics', template_id: template.id, batch_size: 5, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'M-1' }] }] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const campaignId = created.json().id as string;
    const url = `http://127.0.0.1:${server.port}/metrics`;
    const before = campaignProgress((await scrapeMetrics(url)).samples);

    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/send`)).statusCode).toBe(200);
      const during = await eventually(async () => {
        const scraped = await scrapeMetrics(url);
        const now = campaignProgress(scraped.samples);
        return Object.entries(now).every(([key, value]) => value > before[key as keyof typeof before]) ? scraped : null;
      }, 20_000);
      // The campaign still has recipients waiting: the queue gauge counts them by status.
      const queued = sumOf(during.samples, 'campaign_recipients_queued', { status: 'pending' }) + sumOf(during.samples, 'campaign_recipients_queued', { status: 'sending' });
      expect(queued).toBeGreaterThan(0);
      expect((await call(t.app, tenant, 'GET', `/campaigns/${campaignId}`)).json().status).toBe('RUNNING');

      await eventually(async () => {
        const c = (await call(t.app, tenant, 'GET', `/campaigns/${campaignId}`)).json();
        return c.status === 'COMPLETED' && c.stats.read === 30 ? c : null;
      }, 30_000);
      const after = await scrapeMetrics(url);

      const [mid, end] = [campaignProgress(during.samples), campaignProgress(after.samples)];
      for (const key of Object.keys(end) as (keyof typeof end)[]) {
        expect(mid[key], key).toBeGreaterThan(before[key]);
        expect(end[key], key).toBeGreaterThan(mid[key]);
      }
      expect(end.sends - before.sends).toBe(30);
      expect(end.accepted - before.accepted).toBe(30);
      // Status callbacks moved the recipients on (sent -> delivered -> read), in this same process.
      expect(sumOf(after.samples, 'campaign_recipient_transitions_total', { from: 'delivered', to: 'read' }))
        .toBeGreaterThan(sumOf(during.samples, 'campaign_recipient_transitions_total', { from: 'delivered', to: 'read' }));
      expect(valueOf(after.samples, 'campaign_sends_total', { number_bucket: numberBucket(tenant.phoneNumberId) })).toBeGreaterThanOrEqual(30);
      expect(sumOf(after.samples, 'campaign_recipients_queued', { status: 'pending' })).toBeGreaterThanOrEqual(0);

      const ids = [tenant.id, campaignId, tenant.phoneNumberId, tenant.wabaId, ...contacts.map((c) => c.phone.replace(/^\+/, ''))];
      expectNoIdentifiers(during.text, during.samples, ids);
      expectNoIdentifiers(after.text, after.samples, ids);
    } finally {
      await workers.stop();
    }
  });
});

describe('the campaign queue gauge', () => {
  // Its own database: the gauge counts every running campaign of the database it reads.
  let db: Awaited<ReturnType<typeof createOwnDatabase>>;
  let t: UpstreamTestApp;
  beforeAll(async () => {
    db = await createOwnDatabase('msvc_queue_gauge');
    t = await startUpstreamApp({ ...(db.url ? { DATABASE_URL: db.url } : {}) });
  });
  afterAll(async () => {
    await t?.close();
    await db?.drop();
  });

  it('counts every unsettled status of running campaigns (held and deferred too), pending from the counters', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(10, { tags: [tag] }));
    const created = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Queue', template_id: template.id, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'Q-1' }] }] },
    });
    expect(created.statusCode, created.body).toBe(201);
    const campaignId = created.json().id as string;
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/send`)).statusCode).toBe(200);
    expect(Object.fromEntries(await campaignQueueDepth(t.deps.db))).toEqual({ pending: 10, sending: 0, held: 0, deferred: 0 });

    // No dispatcher runs here: the statuses are set as the dispatcher and callbacks would (all of
    // them still counted as pending by the campaign's counters).
    const ids = (await t.deps.db.selectFrom('campaign_recipients').select('id').where('campaign_id', '=', campaignId).orderBy('id').execute()).map((r) => r.id);
    const set = (status: string, some: string[]) => t.deps.db.updateTable('campaign_recipients').set({ status }).where('id', 'in', some).execute();
    await set('sending', ids.slice(0, 1));
    await set('held', ids.slice(1, 3));
    await set('deferred', ids.slice(3, 6));
    expect(Object.fromEntries(await campaignQueueDepth(t.deps.db))).toEqual({ pending: 4, sending: 1, held: 2, deferred: 3 });

    const samples = parsePrometheus((await t.deps.metrics.render()).body);
    for (const [status, n] of [['pending', 4], ['sending', 1], ['held', 2], ['deferred', 3]] as const) {
      expect(valueOf(samples, 'campaign_recipients_queued', { status, role: 'all' }), status).toBe(n);
    }

    // A campaign no longer running is no longer queued.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/pause`)).statusCode).toBe(200);
    expect(Object.fromEntries(await campaignQueueDepth(t.deps.db))).toEqual({ pending: 0, sending: 0, held: 0, deferred: 0 });
  });
});
