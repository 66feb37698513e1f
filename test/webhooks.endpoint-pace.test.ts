import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WebhookSender } from '../src/modules/webhooks/webhooks.sender.ts';
import { createWebhookDeliverer } from '../src/worker.ts';
import { WebhookDeliverer } from '../src/workers/webhook-deliverer.ts';
import { startLoops, type RunningLoops } from '../src/workers/loop.ts';
import { call, createTenant, eventually, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { startReceiver, type Receiver } from './helpers/https-receiver.ts';
import { createOwnDatabase } from './helpers/own-database.ts';

/**
 * One endpoint with a backlog is paced by its receiver, not by the idle poll: when the per-endpoint
 * limit held a claim back, the deliverer waits for attempts to finish, not WEBHOOK_POLL_MS; and a
 * fast endpoint gets a claim-ahead that keeps its slots busy, which it gives up once it stops answering.
 */
describe('one endpoint with a backlog (own database)', () => {
  const EVENTS = 300;
  const POLL_MS = 5_000;
  let database: Awaited<ReturnType<typeof createOwnDatabase>>;
  let receiver: Receiver;
  let t: TestApp;
  let loops: RunningLoops | null = null;

  beforeAll(async () => {
    database = await createOwnDatabase('msvc_wh_pace');
    receiver = await startReceiver();
    t = await startTestApp({
      DATABASE_URL: database.url,
      WEBHOOK_DELIVERY_ENABLED: 'true',
      WEBHOOK_EXTRA_CA_FILE: receiver.caFile,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_POLL_MS: String(POLL_MS),
    });
  });
  afterAll(async () => {
    await loops?.stop();
    await t?.close();
    await receiver?.close();
    await database?.drop();
  });

  async function endpointWithBacklog(tenant: TestTenant, path: string, events: number) {
    const created = await call(t.app, tenant, 'POST', '/webhooks', { url: receiver.url(path), events: ['contact.created'] });
    expect(created.statusCode).toBe(201);
    for (let i = 0; i < events; i += 100) {
      const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: Array.from({ length: Math.min(100, events - i) }, () => ({ first_name: 'Paced', phone: uniquePhone() })) });
      expect(bulk.json().created).toBe(Math.min(100, events - i));
    }
    return created.json().data.id as string;
  }
  /** A small deliverer of the test's own: 8 slots, 2 per endpoint, a 20 ms idle poll. */
  function smallDeliverer() {
    const sender = new WebhookSender({ timeoutMs: 3_000, extraCaFile: t.config.webhookExtraCaFile, allowPrivateNetworks: true });
    const deliverer = new WebhookDeliverer(t.deps.db, sender, {
      secretsKey: t.deps.config.secretsKey, retryDelaysMs: [60_000], leaseMs: 60_000, timeoutMs: 3_000, pollMs: 20,
      concurrency: 8, endpointConcurrency: 2, retryConcurrency: 4,
    }, pino({ level: 'silent' }));
    const running = startLoops([deliverer.loop()], 20, pino({ level: 'silent' }));
    return { deliverer, async stop() { await running.stop(); await sender.close(); } };
  }

  it('delivers far faster than one claim per idle poll (default caps, WEBHOOK_POLL_MS 5000)', { timeout: 60_000 }, async () => {
    expect(t.config.webhookEndpointConcurrency).toBe(8);
    const tenant = await createTenant(t.app);
    await endpointWithBacklog(tenant, '/paced', EVENTS);

    loops = startLoops([createWebhookDeliverer(t.deps).loop()], POLL_MS, pino({ level: 'silent' }));
    // Paced by the poll, each claim is followed by a 5 s sleep: with two caps ahead (16 rows) 300
    // events took 90 s; even with this fast endpoint's larger claim-ahead (at most 8 + 64 rows) they
    // would take 20 s. Waiting for slots instead takes a second or two here; the bound leaves a
    // loaded machine several times that.
    const started = Date.now();
    await eventually(async () => receiver.at('/paced').length >= EVENTS, 10_000, 20);
    expect(Date.now() - started).toBeLessThan(10_000);
    const rows = await eventually(async () => {
      const all = await t.deps.db.selectFrom('webhook_deliveries').select(['status', 'attempt_number']).where('tenant_id', '=', tenant.id).execute();
      return all.every((r) => r.status === 'success') && all;
    });
    expect(rows).toHaveLength(EVENTS);
    expect(rows.every((r) => r.attempt_number === 1)).toBe(true);
    expect(receiver.at('/paced')).toHaveLength(EVENTS);
    await loops.stop();
    loops = null;
  });

  it('claims more than two caps ahead for an endpoint that answers fast', { timeout: 60_000 }, async () => {
    const tenant = await createTenant(t.app);
    await endpointWithBacklog(tenant, '/fast', 200);
    const own = smallDeliverer();
    try {
      await eventually(async () => receiver.at('/fast').length >= 200, 20_000, 20);
      // Two caps is 4 rows; a few-millisecond receiver allows up to the process's 8 slots ahead.
      expect(own.deliverer.stats.largestClaim).toBeGreaterThan(4);
    } finally {
      await own.stop();
    }
  });

  it('a fast endpoint that stops answering gives up its claim-ahead at once: another endpoint is not held up', { timeout: 60_000 }, async () => {
    const tenant = await createTenant(t.app);
    const fastThenHung = await endpointWithBacklog(tenant, '/turns-hung', 300);
    const own = smallDeliverer();
    try {
      // Once its pace is known, it hangs: its 2 slots hang and up to 8 claimed rows wait behind them.
      await eventually(async () => receiver.at('/turns-hung').length >= 40, 20_000, 5);
      receiver.behave('/turns-hung', 'hang');
      await eventually(async () => receiver.maxOpenAt('/turns-hung') === 2, 10_000, 5);
      const other = await createTenant(t.app);
      await call(t.app, other, 'POST', '/webhooks', { url: receiver.url('/beside-hung'), events: ['contact.created'] });
      const started = Date.now();
      await call(t.app, other, 'POST', '/contacts', { first_name: 'Beside', phone: uniquePhone() });
      await eventually(async () => receiver.at('/beside-hung').length === 1, 5_000, 10);
      // Counted as about to start, the rows waiting on the hung endpoint would stop every claim until
      // they are given back (1 s after their claim); it is detected after 100 ms without progress.
      expect(Date.now() - started).toBeLessThan(800);
    } finally {
      await own.stop();
      await call(t.app, tenant, 'DELETE', `/webhooks/${fastThenHung}`);
    }
  });
});
