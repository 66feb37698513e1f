import { createHmac, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { loadConfig } from '../src/config.ts';
import { verifyWebhookSignature } from '../src/index.ts';
import { encryptSecret } from '../src/crypto/secrets.ts';
import { claimDueDeliveries, webhookBacklog } from '../src/modules/webhooks/webhooks.queue.ts';
import { WebhookSender } from '../src/modules/webhooks/webhooks.sender.ts';
import { createWebhookDeliverer } from '../src/worker.ts';
import { WebhookDeliverer } from '../src/workers/webhook-deliverer.ts';
import { startLoops, type RunningLoops } from '../src/workers/loop.ts';
import { call, createTenant, eventually, itOnPostgresServer, makeTempDir, removeTempDir, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { startReceiver, type Receiver } from './helpers/https-receiver.ts';
import { createOwnDatabase } from './helpers/own-database.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const MINUTE = 60_000;
/** Spec 6.3: the waits before attempts 2 to 6. */
const SPEC_RETRY_DELAYS_MS = [1 * MINUTE, 5 * MINUTE, 30 * MINUTE, 120 * MINUTE, 360 * MINUTE];

/** The configuration with nothing set but a data directory (where generated development secrets go). */
function defaultConfig() {
  const dir = makeTempDir();
  try {
    return loadConfig({ DATA_DIR: dir });
  } finally {
    removeTempDir(dir);
  }
}

describe('the default webhook retry schedule', () => {
  it('is 1 min, 5 min, 30 min, 2 h and 6 h before attempts 2 to 6', () => {
    expect(defaultConfig().webhookRetryDelaysMs).toEqual(SPEC_RETRY_DELAYS_MS);
    expect(SPEC_RETRY_DELAYS_MS).toEqual([60_000, 300_000, 1_800_000, 7_200_000, 21_600_000]);
  });
});

/**
 * The deliverer driven one run at a time against its own database, with a scripted sender standing
 * in for the receivers: the test decides when each attempt ends, so what a run claims, holds and
 * starts is exact. Rows are written straight into the queue (first attempts, or retries with
 * attempt_number > 0); each test deletes its endpoints when done, so the next one claims only its own.
 */
describe('the deliverer run by run (own database, scripted attempts)', () => {
  let database: Awaited<ReturnType<typeof createOwnDatabase>>;
  let t: TestApp;
  let tenant: TestTenant;
  const OK = { ok: true, statusCode: 200, responseTimeMs: 1, responseBody: 'ok' } as const;

  beforeAll(async () => {
    database = await createOwnDatabase('msvc_wh_runs');
    t = await startTestApp({ DATABASE_URL: database.url, WEBHOOK_DELIVERY_ENABLED: 'false' });
    tenant = await createTenant(t.app);
  });
  afterAll(async () => {
    await t?.close();
    await database?.drop();
  });

  /**
   * Attempts that stay open until the test answers them, or answered at once (`instant`). An answer
   * comes no sooner than `latencyMs` after its attempt started: the endpoint's pace, which sizes its
   * claim-ahead (an endpoint answering within 100 ms gets more than one cap ahead).
   */
  function scriptedSender(mode: 'held' | 'instant' = 'held', latencyMs = 0) {
    const open: { endpointId: string; startedAt: number; answer(): void }[] = [];
    const attempted: string[] = [];
    const sender = {
      attempt(req: { endpointId: string }) {
        attempted.push(req.endpointId);
        if (mode === 'instant') return Promise.resolve(OK);
        return new Promise((resolve) => {
          const entry = { endpointId: req.endpointId, startedAt: performance.now(), answer: () => { open.splice(open.indexOf(entry), 1); resolve(OK); } };
          open.push(entry);
        });
      },
    } as unknown as WebhookSender;
    return {
      sender, open, attempted,
      /** Answers the oldest open attempt of `endpointId`. */
      async answer(endpointId: string) {
        const entry = open.find((o) => o.endpointId === endpointId)!;
        const early = entry.startedAt + latencyMs - performance.now();
        if (early > 0) await new Promise((resolve) => setTimeout(resolve, early));
        entry.answer();
      },
      answerAll() { for (const o of [...open]) o.answer(); },
    };
  }

  const endpoints: string[] = [];
  /** A new endpoint with `first` due first attempts and `retries` due retries (one failed attempt each). */
  async function endpointWith(first: number, retries = 0): Promise<string> {
    const id = randomUUID();
    endpoints.push(id);
    await t.deps.db.insertInto('webhook_endpoints').values({
      id, tenant_id: tenant.id, url: 'https://receiver.invalid/in', events: ['contact.created'], signing_secret_enc: encryptSecret(t.config.secretsKey, 'whsec_runs'),
    }).execute();
    const rows = [...Array(first).fill(0), ...Array(retries).fill(1)].map((attempts: number, i) => ({
      id: randomUUID(), tenant_id: tenant.id, endpoint_id: id, event_id: randomUUID(), event_type: 'contact.created', request_url: 'https://receiver.invalid/in',
      status: attempts === 0 ? 'pending' : 'retrying', attempt_number: attempts, next_attempt_at: new Date(Date.now() - 60_000 + i),
    }));
    if (rows.length > 0) {
      await t.deps.db.insertInto('webhook_payloads').values(rows.map((r) => ({ event_id: r.event_id, tenant_id: tenant.id, payload: Buffer.from(`{"id":"${r.event_id}"}`) }))).execute();
      await t.deps.db.insertInto('webhook_deliveries').values(rows).execute();
    }
    return id;
  }
  const rowsOf = (ids: string[]) => t.deps.db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', 'in', ids).execute();
  const leasedOf = async (ids: string[]) => (await rowsOf(ids)).filter((r) => r.lease_until !== null && ['pending', 'retrying'].includes(r.status));

  function deliverer(sender: WebhookSender, o: Partial<ConstructorParameters<typeof WebhookDeliverer>[2]> = {}) {
    return new WebhookDeliverer(t.deps.db, sender, {
      secretsKey: t.config.secretsKey, retryDelaysMs: [60_000], leaseMs: 60_000, timeoutMs: 1_000, pollMs: 20,
      concurrency: 2, endpointConcurrency: 1, retryConcurrency: 1, ...o,
    }, pino({ level: 'silent' }));
  }
  /** Answers what is open, stops the deliverer and takes this test's endpoints out of every later claim. */
  async function finish(d: WebhookDeliverer, s: ReturnType<typeof scriptedSender>) {
    s.answerAll();
    await d.drain(50);
    s.answerAll();
    await t.deps.db.updateTable('webhook_endpoints').set({ deleted_at: new Date() }).where('id', 'in', endpoints.splice(0)).execute();
  }
  const settledTick = () => new Promise((resolve) => setImmediate(resolve));

  it('the loop it runs in: named webhook-deliverer, its poll interval, claims on each run and drains on stop', async () => {
    const s = scriptedSender('instant');
    const d = deliverer(s.sender, { pollMs: 37 });
    const a = await endpointWith(1);
    try {
      const loop = d.loop();
      expect([loop.name, loop.intervalMs]).toEqual(['webhook-deliverer', 37]);
      expect(await loop.runOnce()).toBe(1);
      await eventually(async () => (await rowsOf([a]))[0].status === 'success');
      await loop.stop!();
      // Stopped: a run claims nothing and reports idle.
      const b = await endpointWith(1);
      expect(await d.runOnce()).toBe(0);
      expect(await leasedOf([b])).toHaveLength(0);
      expect(s.attempted).toEqual([a]);
    } finally {
      await finish(d, s);
    }
  });

  it('drain gives attempts in flight its grace only; a result that comes later is left to the lease', async () => {
    const s = scriptedSender();
    const d = deliverer(s.sender);
    const a = await endpointWith(1);
    try {
      expect(await d.runOnce()).toBe(1);
      await d.drain(50);
      expect(s.open).toHaveLength(1);
      s.answerAll();
      await d.drain(50); // waits for the late attempt, and for a record of it if one were started
      const [row] = await rowsOf([a]);
      expect(row).toMatchObject({ status: 'pending', attempt_number: 0 });
      expect(row.lease_until).not.toBeNull();
    } finally {
      await finish(d, s);
    }
  });

  it('a process holds at most six slot sets of rows, first attempts and retries together', async () => {
    const s = scriptedSender();
    // 2 slots: at most 12 rows held. 8 endpoints with one first attempt each, 4 with two retries each.
    const d = deliverer(s.sender, { concurrency: 2, endpointConcurrency: 1, retryConcurrency: 16 });
    const ids = [];
    for (let i = 0; i < 8; i++) ids.push(await endpointWith(1));
    for (let i = 0; i < 4; i++) ids.push(await endpointWith(0, 2));
    try {
      expect(await d.runOnce()).toBe(12);
      const leased = await leasedOf(ids);
      expect(leased.filter((r) => r.attempt_number === 0)).toHaveLength(8);
      expect(leased.filter((r) => r.attempt_number === 1)).toHaveLength(4);
      expect(d.stats).toMatchObject({ claims: 1, claimed: 12, largestClaim: 12 });
      expect(s.open).toHaveLength(2);
    } finally {
      await finish(d, s);
    }
  });

  it('rows in flight and rows waiting count against what a process holds; an endpoint at its limit is waited for, not idle', async () => {
    const s = scriptedSender();
    const d = deliverer(s.sender, { concurrency: 2, endpointConcurrency: 1 });
    // One slot each, and one row claimed ahead each: both endpoints are at their limit after the first run.
    const [a, b] = [await endpointWith(2), await endpointWith(2)];
    try {
      expect(await d.runOnce()).toBe(4);
      expect(d.stats.capWaits).toBe(1);
      expect(s.open.map((o) => o.endpointId).sort()).toEqual([a, b].sort());
      // Nothing claimable, but work waits on the capped endpoints: not an idle run.
      expect(await d.runOnce()).toBe(1);
      expect(d.stats).toMatchObject({ capWaits: 2, claimed: 4 });
      // Twelve rows at most: 2 in flight and 2 waiting leave room for 8 of the 16 new ones.
      const others = [];
      for (let i = 0; i < 8; i++) others.push(await endpointWith(2));
      expect(await d.runOnce()).toBe(8);
      expect(await leasedOf([a, b, ...others])).toHaveLength(12);
      // The claim filled the process: no wait for the capped endpoints.
      expect(d.stats).toMatchObject({ capWaits: 2, claims: 3, claimed: 12 });
    } finally {
      await finish(d, s);
    }
  });

  it('retries hold at most retryConcurrency rows, in flight and claimed ahead together', async () => {
    const s = scriptedSender();
    const d = deliverer(s.sender, { concurrency: 4, endpointConcurrency: 1, retryConcurrency: 2 });
    const a = await endpointWith(0, 2);
    try {
      expect(await d.runOnce()).toBe(2); // one in flight, one waiting behind it
      expect(s.open).toHaveLength(1);
      const b = await endpointWith(0, 2);
      const c = await endpointWith(0, 2);
      await d.runOnce();
      await d.runOnce();
      expect(await leasedOf([a, b, c])).toHaveLength(2);
      expect(s.attempted).toEqual([a]);
      // Its in-flight retry ends: the waiting one takes its slot, and still no more is claimed.
      await s.answer(a);
      await eventually(async () => s.attempted.length === 2 && d.stats.flushed === 1);
      expect(s.attempted).toEqual([a, a]);
      expect(await leasedOf([a, b, c])).toHaveLength(1);
      // One retry in flight: room for one more.
      expect(await d.runOnce()).toBe(1);
      expect(await leasedOf([a, b, c])).toHaveLength(2);
    } finally {
      await finish(d, s);
    }
  });

  it('retries are claimed on every run while no first attempts are due, and every 100 ms while first attempts keep the claims busy', async () => {
    // Only Date is faked: it is the retry claim's clock, and the database and the sockets keep real timers.
    vi.useFakeTimers({ toFake: ['Date'] });
    const s = scriptedSender();
    const d = deliverer(s.sender, { concurrency: 8, endpointConcurrency: 1, retryConcurrency: 4 });
    try {
      const r1 = await endpointWith(0, 1);
      expect(await d.runOnce()).toBe(1);
      const r2 = await endpointWith(0, 1);
      expect(await d.runOnce()).toBe(1); // no time has passed, but there was no fresh work
      expect(s.attempted).toEqual([r1, r2]);

      const [f1, r3] = [await endpointWith(1), await endpointWith(0, 1)];
      expect(await d.runOnce()).toBe(1); // the first attempt only: the last retry claim was 0 ms ago
      expect(await leasedOf([r3])).toHaveLength(0);
      vi.advanceTimersByTime(99);
      const f2 = await endpointWith(1);
      expect(await d.runOnce()).toBe(1);
      vi.advanceTimersByTime(1);
      const f3 = await endpointWith(1);
      expect(await d.runOnce()).toBe(2); // 100 ms since: the retry comes along
      expect(s.attempted.sort()).toEqual([r1, r2, f1, f2, f3, r3].sort());
    } finally {
      vi.useRealTimers();
      await finish(d, s);
    }
  });

  it('a run with a slot set\'s worth of rows about to start claims nothing, and waits until fewer are', async () => {
    const s = scriptedSender();
    const d = deliverer(s.sender, { concurrency: 2, endpointConcurrency: 1, pollMs: 30_000 });
    for (let i = 0; i < 4; i++) await endpointWith(1);
    try {
      expect(await d.runOnce()).toBe(4);
      // Two endpoints got the slots; the other two endpoints' rows wait for the next free slots: two
      // rows about to start, a slot set.
      expect(s.attempted).toHaveLength(2);
      const late = await endpointWith(1);
      let returned: number | undefined;
      const run = d.runOnce().then((n) => { returned = n; });
      // An attempt ends and a waiting row takes the slot: one row left about to start.
      await s.answer(s.attempted[0]);
      await eventually(async () => returned !== undefined, 10_000, 5);
      await run;
      expect(returned).toBe(1);
      expect(d.stats).toMatchObject({ slotWaits: 1, claims: 1 });
      expect(s.attempted).toHaveLength(3);
      expect(await leasedOf([late])).toHaveLength(0);
    } finally {
      await finish(d, s);
    }
  });

  it('drain records a result still waiting for its batch (fewer than a slot set) before it returns', async () => {
    const s = scriptedSender('instant');
    const d = deliverer(s.sender, { concurrency: 2 });
    const a = await endpointWith(1);
    try {
      await d.runOnce();
      await settledTick();
      // One result, under a slot set: its record waits up to 10 ms for more; drain does not.
      expect(d.stats.flushed).toBe(0);
      await d.drain(50);
      expect(d.stats.flushed).toBe(1);
      expect((await rowsOf([a]))[0].status).toBe('success');
    } finally {
      await finish(d, s);
    }
  });

  itOnPostgresServer('a second connection holds the endpoint rows (PGlite has one)')('results waiting to be recorded: more than two slot sets stop claims, and drain waits until they are recorded', async () => {
    const s = scriptedSender('instant');
    const d = deliverer(s.sender, { concurrency: 2, endpointConcurrency: 1, pollMs: 20 });
    const first = [await endpointWith(2), await endpointWith(2), await endpointWith(2)];
    // Another connection holds the endpoint rows: recording their attempts (it locks them) waits.
    const holder = new pg.Client({ connectionString: database.url });
    await holder.connect();
    let holding = true;
    const letGo = async () => { if (holding) { holding = false; await holder.query('ROLLBACK'); } };
    try {
      await holder.query('BEGIN');
      await holder.query('SELECT id FROM webhook_endpoints WHERE id = ANY($1::uuid[]) FOR UPDATE', [first]);
      // Six attempts end at once; the first two went into a record that waits: four results wait.
      await d.runOnce();
      await eventually(async () => s.attempted.length === 6, 5_000, 5);
      await settledTick();
      // Four (two slot sets) do not stop claims...
      const fourth = await endpointWith(2);
      await d.runOnce();
      expect(d.stats.claimed).toBe(8);
      await eventually(async () => s.attempted.length === 8, 5_000, 5);
      await settledTick();
      // ...six do.
      const fifth = await endpointWith(2);
      await d.runOnce();
      expect(d.stats.claimed).toBe(8);
      expect(await leasedOf([fifth])).toHaveLength(0);
      // Drain waits for the record that waits, then records the rest.
      let drained = false;
      const draining = d.drain(50).then(() => { drained = true; });
      await new Promise((resolve) => setTimeout(resolve, 300));
      expect(drained).toBe(false);
      await letGo();
      await draining;
      // Every result is recorded when drain returns, not left to a record still under way.
      expect(d.stats.flushed).toBe(8);
      const rows = await rowsOf([...first, fourth]);
      expect(rows.map((r) => r.status)).toEqual(Array(8).fill('success'));
    } finally {
      await letGo();
      await holder.end();
      await finish(d, s);
    }
  });

  it('a run that left endpoints at their limit waits until one has room for half its cap, not the idle interval', async () => {
    const s = scriptedSender('held', 150);
    // Three slots per endpoint and three claimed ahead: two endpoints hold 6 rows each, 3 in flight.
    // b's are retries: what waits of them counts as much as first attempts do.
    const d = deliverer(s.sender, { concurrency: 8, endpointConcurrency: 3, retryConcurrency: 6, pollMs: 30_000 });
    const [a, b] = [await endpointWith(6), await endpointWith(0, 6)];
    let returned: number | undefined;
    const run = d.runOnce().then((n) => { returned = n; });
    try {
      await eventually(async () => s.open.length === 6);
      // One of a's attempts ends and a waiting row takes its slot: a holds 5, room for 1 (half a cap is 2).
      await s.answer(a);
      await eventually(async () => d.stats.flushes === 1);
      await settledTick();
      expect(returned).toBeUndefined();
      // A second one: a holds 4, room for 2. The run ends without waiting for the other endpoint.
      await s.answer(a);
      await eventually(async () => returned !== undefined, 10_000, 5);
      expect(returned).toBe(12);
      expect(d.stats.capWaits).toBe(1);
      expect((await leasedOf([b]))).toHaveLength(6);
    } finally {
      await finish(d, s); // a stopping deliverer ends the run's wait
      await run;
    }
  });
});

describe('webhook delivery (real HTTPS receiver, real worker loop, own database)', () => {
  let database: Awaited<ReturnType<typeof createOwnDatabase>>;
  let t: TestApp;
  let receiver: Receiver;
  let loops: RunningLoops | null = null;
  let pathCounter = 0;

  const startDeliverer = () => { loops = startLoops([createWebhookDeliverer(t.deps).loop()], 20, pino({ level: 'silent' })); };
  const stopDeliverer = async () => { await loops?.stop(); loops = null; };

  beforeAll(async () => {
    // A deliverer serves every tenant of its database: one of another process on the shared test
    // database (other keys, other timings) took this file's rows and failed them (a secret it could
    // not decrypt), and this file's deliverers would take theirs.
    database = await createOwnDatabase('msvc_wh_delivery');
    receiver = await startReceiver();
    t = await startTestApp({
      DATABASE_URL: database.url,
      WEBHOOK_DELIVERY_ENABLED: 'true',
      WEBHOOK_EXTRA_CA_FILE: receiver.caFile,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      WEBHOOK_RETRY_DELAYS_MS: '50,50,50,50,50',
      WEBHOOK_TIMEOUT_MS: '600',
      WEBHOOK_LEASE_MS: '2000',
      WEBHOOK_POLL_MS: '20',
      WEBHOOK_CONCURRENCY: '8',
      WEBHOOK_ENDPOINT_CONCURRENCY: '2',
      WEBHOOK_RETRY_CONCURRENCY: '4',
    });
    startDeliverer();
  });
  afterEach(async () => { if (!loops) startDeliverer(); });
  afterAll(async () => {
    await stopDeliverer();
    await t?.close();
    await receiver?.close();
    await database?.drop();
  });

  const freshPath = (name: string) => `/${name}-${++pathCounter}`;

  async function endpointFor(tenant: TestTenant, path: string, events: string[] = ['contact.created']) {
    const res = await call(t.app, tenant, 'POST', '/webhooks', { url: receiver.url(path), events });
    expect(res.statusCode).toBe(201);
    return res.json() as { data: { id: string }; signing_secret: string };
  }
  const createContact = async (tenant: TestTenant, extra: Record<string, unknown> = {}) =>
    (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Webhook', phone: uniquePhone(), ...extra })).json();
  const deliveriesOf = (endpointId: string) =>
    t.deps.db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', endpointId).orderBy('created_at').execute();
  /** `count` endpoints of a new tenant whose receiver never answers, and `events` contact.created events queued to each. */
  async function hungEndpoints(name: string, count: number, events: number) {
    const tenant = await createTenant(t.app);
    const ids: string[] = [];
    for (let i = 0; i < count; i++) {
      const path = freshPath(name);
      receiver.behave(path, 'hang');
      ids.push((await endpointFor(tenant, path)).data.id);
    }
    const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: Array.from({ length: events }, () => ({ first_name: 'Hung', phone: uniquePhone() })) });
    expect(bulk.json().created).toBe(events);
    return { tenant, ids };
  }

  /**
   * A deliverer of the test's own, with its own sender (the attempt deadline is `timeoutMs`), small
   * enough that a couple of hung endpoints fill its per-endpoint caps. Stop it before the test ends.
   */
  function ownDeliverer(o: { timeoutMs: number; leaseMs?: number; endpointConcurrency: number }) {
    const sender = new WebhookSender({ timeoutMs: o.timeoutMs, extraCaFile: t.config.webhookExtraCaFile, allowPrivateNetworks: true });
    const deliverer = new WebhookDeliverer(t.deps.db, sender, {
      secretsKey: t.deps.config.secretsKey, retryDelaysMs: [60_000], leaseMs: o.leaseMs ?? 60_000, timeoutMs: o.timeoutMs, pollMs: 20,
      concurrency: 8, endpointConcurrency: o.endpointConcurrency, retryConcurrency: 4,
    }, pino({ level: 'silent' }));
    const loops = startLoops([deliverer.loop()], 20, pino({ level: 'silent' }));
    return { deliverer, async stop() { await loops.stop(); await sender.close(); } };
  }

  const endpointRow = (id: string) => t.deps.db.selectFrom('webhook_endpoints').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

  it('the webhook backlog counts due deliveries of active endpoints only, with the oldest wait', async () => {
    // A repeatable-read snapshot: deliveries other test files commit meanwhile cannot move the figures.
    const tenant = await createTenant(t.app);
    const rollback = new Error('rollback');
    await t.deps.db.transaction().setIsolationLevel('repeatable read').execute(async (tx) => {
      const before = await webhookBacklog(tx);
      const endpoint = async (active: boolean) => {
        const id = randomUUID();
        await tx.insertInto('webhook_endpoints').values({
          id, tenant_id: tenant.id, url: 'https://93.184.215.14/in', events: ['contact.created'], signing_secret_enc: encryptSecret(t.config.secretsKey, 'whsec_x'), is_active: active,
        }).execute();
        return id;
      };
      const delivery = (endpointId: string, dueSecondsAgo: number, status = 'pending') => ({
        id: randomUUID(), tenant_id: tenant.id, endpoint_id: endpointId, event_id: randomUUID(), event_type: 'contact.created', request_url: 'https://93.184.215.14/in',
        status, attempt_number: status === 'retrying' ? 1 : 0, next_attempt_at: new Date(Date.now() - dueSecondsAgo * 1000),
      });
      const active = await endpoint(true);
      const inactive = await endpoint(false);
      await tx.insertInto('webhook_deliveries').values([
        delivery(active, 3_600), delivery(active, 5), delivery(active, 1, 'retrying'),
        delivery(active, -600), // not due yet
        delivery(active, 60, 'success'),
        delivery(inactive, 60),
      ]).execute();
      const after = await webhookBacklog(tx);
      expect(after.due - before.due).toBe(3);
      expect(after.oldestDueSeconds).toBeGreaterThan(3_590); // now() is the transaction start, a moment before the rows were built
      throw rollback;
    }).catch((err) => { if (err !== rollback) throw err; });
  });

  it('delivers the envelope with exactly the spec headers and a verifiable signature', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('ok');
    const { data: endpoint, signing_secret } = await endpointFor(tenant, path);
    const contact = await createContact(tenant);

    const [req] = await eventually(async () => receiver.at(path).length === 1 && receiver.at(path));
    const event = await t.deps.db.selectFrom('events').selectAll().where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();

    expect(req.headers['content-type']).toBe('application/json');
    expect(req.headers['user-agent']).toBe('Service-Webhook/1.0');
    expect(req.headers['x-service-event']).toBe('contact.created');
    expect(req.headers['x-service-delivery-id']).toMatch(UUID);
    expect(req.headers['x-service-webhook-id']).toBe(endpoint.id);
    const timestamp = req.headers['x-service-timestamp'] as string;
    expect(timestamp).toMatch(/^\d+$/);
    expect(Math.abs(Number(timestamp) - Date.now() / 1000)).toBeLessThan(30);
    const expected = createHmac('sha256', signing_secret).update(`${timestamp}.${req.body}`).digest('hex');
    expect(req.headers['x-service-signature']).toBe(`sha256=${expected}`);
    expect(verifyWebhookSignature({ secret: signing_secret, headers: req.headers, rawBody: req.body })).toBe(true);
    expect(verifyWebhookSignature({ secret: signing_secret, headers: req.headers, rawBody: req.body + ' ' })).toBe(false);

    const envelope = JSON.parse(req.body);
    expect(Object.keys(envelope)).toEqual(['id', 'type', 'created_at', 'data']);
    expect(envelope).toEqual({ id: event.id, type: 'contact.created', created_at: event.created_at.toISOString(), data: contact });

    const [delivery] = await eventually(async () => {
      const rows = await deliveriesOf(endpoint.id);
      return rows[0]?.status === 'success' && rows;
    });
    expect(delivery).toMatchObject({ event_id: event.id, attempt_number: 1, response_status_code: 200, response_body: `ok ${path}`, error_message: null, lease_until: null });
    const stored = await t.deps.db.selectFrom('webhook_payloads').selectAll().where('event_id', '=', delivery.event_id).executeTakeFirstOrThrow();
    expect(stored.tenant_id).toBe(tenant.id);
    expect(Buffer.from(stored.payload).toString('utf8')).toBe(req.body);
    expect(delivery.completed_at).not.toBeNull();
    const ep = await endpointRow(endpoint.id);
    expect(ep.last_success_at).not.toBeNull();

    const log = await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}/deliveries`);
    expect(log.json().data).toHaveLength(1);
    expect(Object.keys(log.json().data[0]).sort()).toEqual([
      'attempt_number', 'completed_at', 'created_at', 'error_message', 'event_id', 'event_type', 'id', 'next_retry_at', 'request_body', 'request_url',
      'response_body', 'response_status_code', 'response_time_ms', 'status', 'webhook_endpoint_id',
    ]);
    expect(log.json().data[0]).toMatchObject({ id: delivery.id, webhook_endpoint_id: endpoint.id, event_id: event.id, event_type: 'contact.created', request_url: receiver.url(path), status: 'success', next_retry_at: null });
    // The delivery log shows what was sent (the signed bytes) and the start of the reply (additive fields).
    expect(log.json().data[0]).toMatchObject({ request_body: req.body, response_body: `ok ${path}` });
  });

  it('sends only subscribed types, and nothing to inactive endpoints', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('subscribed');
    const { data: endpoint } = await endpointFor(tenant, path, ['contact.deleted']);
    const pausedPath = freshPath('paused');
    const paused = await endpointFor(tenant, pausedPath, ['contact.deleted', 'contact.created']);
    await call(t.app, tenant, 'PUT', `/webhooks/${paused.data.id}`, { active: false });

    const contact = await createContact(tenant);
    await call(t.app, tenant, 'PATCH', `/contacts/${contact.id}`, { last_name: 'Changed' });
    await call(t.app, tenant, 'DELETE', `/contacts/${contact.id}`);

    await eventually(async () => receiver.at(path).length >= 1);
    const types = receiver.at(path).map((r) => r.headers['x-service-event']);
    expect(types).toEqual(['contact.deleted']);
    expect(await deliveriesOf(endpoint.id)).toHaveLength(1);
    expect(await deliveriesOf(paused.data.id)).toHaveLength(0);
    expect(receiver.at(pausedPath)).toHaveLength(0);
  });

  it('stores one envelope per event however many endpoints receive it, and the same bytes reach each', async () => {
    const tenant = await createTenant(t.app);
    const paths = [freshPath('shared-a'), freshPath('shared-b')];
    for (const path of paths) await endpointFor(tenant, path);
    const quiet = await endpointFor(tenant, freshPath('shared-quiet'), ['contact.deleted']);
    await createContact(tenant);
    await eventually(async () => paths.every((path) => receiver.at(path).length === 1));
    expect(receiver.at(paths[0])[0].body).toBe(receiver.at(paths[1])[0].body);
    const stored = await t.deps.db.selectFrom('webhook_payloads').selectAll().where('tenant_id', '=', tenant.id).execute();
    expect(stored).toHaveLength(1);
    expect(Buffer.from(stored[0].payload).toString('utf8')).toBe(receiver.at(paths[0])[0].body);
    expect(await deliveriesOf(quiet.data.id)).toHaveLength(0);
    // An event nobody subscribes to stores no envelope.
    const before = stored.length;
    await call(t.app, tenant, 'PATCH', `/contacts/${(await createContact(tenant)).id}`, { last_name: 'Unheard' });
    await eventually(async () => paths.every((path) => receiver.at(path).length === 2));
    const after = await t.deps.db.selectFrom('webhook_payloads').select('event_id').where('tenant_id', '=', tenant.id).execute();
    expect(after).toHaveLength(before + 1); // the second contact.created only; contact.updated had no subscriber
  });

  it('walks the full retry schedule to abandoned, sending identical bytes with a fresh delivery id each attempt', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('always-fails');
    receiver.behave(path, 503);
    const { data: endpoint } = await endpointFor(tenant, path);
    await createContact(tenant);

    const [delivery] = await eventually(async () => {
      const rows = await deliveriesOf(endpoint.id);
      return rows[0]?.status === 'abandoned' && rows;
    });
    expect(delivery).toMatchObject({ attempt_number: 6, response_status_code: 503, error_class: 'http_status', error_message: 'Endpoint answered HTTP 503', next_attempt_at: null });
    expect(delivery.response_body).toHaveLength(500);
    expect(delivery.completed_at).not.toBeNull();
    const attempts = receiver.at(path);
    expect(attempts).toHaveLength(6);
    expect(new Set(attempts.map((a) => a.body)).size).toBe(1);
    expect(new Set(attempts.map((a) => a.headers['x-service-delivery-id'])).size).toBe(6);
    expect((await endpointRow(endpoint.id))).toMatchObject({ consecutive_failures: 6, is_active: true });

    const abandoned = await call(t.app, tenant, 'GET', '/webhooks/deliveries?status=abandoned');
    expect(abandoned.json().data.map((d: { id: string }) => d.id)).toEqual([delivery.id]);
    const metrics = await call(t.app, tenant, 'GET', '/webhooks/deliveries/metrics');
    expect(metrics.json()).toEqual({ total: 1, success: 0, retrying: 0, abandoned: 1, pending: 0, success_rate: 0 });
  });

  it('recovers: a success after failures resets consecutive_failures to 0', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('flaky');
    receiver.behave(path, 500);
    const { data: endpoint } = await endpointFor(tenant, path);
    await createContact(tenant);
    const retrying = await eventually(async () => {
      const [row] = await deliveriesOf(endpoint.id);
      return row && row.attempt_number >= 2 && row;
    });
    expect(['retrying', 'pending']).toContain(retrying.status);
    expect((await endpointRow(endpoint.id)).consecutive_failures).toBeGreaterThanOrEqual(2);
    const listed = (await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}/deliveries`)).json().data[0];
    if (listed.status === 'retrying') expect(listed.next_retry_at).not.toBeNull();

    receiver.behave(path, 204);
    const [done] = await eventually(async () => {
      const rows = await deliveriesOf(endpoint.id);
      return rows[0]?.status === 'success' && rows;
    });
    expect(done.attempt_number).toBeGreaterThanOrEqual(3);
    const ep = await endpointRow(endpoint.id);
    expect(ep.consecutive_failures).toBe(0);
    expect(ep.last_failure_at).not.toBeNull();
    expect(ep.last_success_at).not.toBeNull();
  });

  it('counts a timeout as a failed attempt', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('hangs');
    receiver.behave(path, 'hang');
    const { data: endpoint } = await endpointFor(tenant, path);
    await createContact(tenant);
    const row = await eventually(async () => {
      const [r] = await deliveriesOf(endpoint.id);
      return r && r.attempt_number >= 1 && r;
    });
    expect(row).toMatchObject({ error_class: 'timeout', response_status_code: null });
    expect(row.error_message).toContain('No response within 600 ms');
    expect(row.response_time_ms).toBeGreaterThanOrEqual(550);
    await call(t.app, tenant, 'DELETE', `/webhooks/${endpoint.id}`); // stop hammering it
  });

  it('under the default schedule, each failed attempt sets next_retry_at 1 min, 5 min, 30 min, 2 h, 6 h after it; the 6th is abandoned', async () => {
    await stopDeliverer();
    const tenant = await createTenant(t.app);
    const path = freshPath('curve');
    receiver.behave(path, 500);
    const { data: endpoint } = await endpointFor(tenant, path);
    // The worker's own deliverer, built from this app's configuration with the default delays.
    const deliverer = createWebhookDeliverer({ ...t.deps, config: { ...t.config, webhookRetryDelaysMs: defaultConfig().webhookRetryDelaysMs } });
    const own = startLoops([deliverer.loop()], 20, pino({ level: 'silent' }));
    try {
      let before = Date.now();
      await createContact(tenant);
      for (let attempt = 1; attempt <= 6; attempt++) {
        const row = await eventually(async () => {
          const [r] = await deliveriesOf(endpoint.id);
          return r && r.attempt_number === attempt && r.lease_until === null && r;
        });
        const after = Date.now();
        const [listed] = (await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}/deliveries`)).json().data;
        expect(receiver.at(path), JSON.stringify(row)).toHaveLength(attempt);
        if (attempt === 6) {
          expect(listed).toMatchObject({ status: 'abandoned', attempt_number: 6, next_retry_at: null });
          break;
        }
        expect(listed).toMatchObject({ status: 'retrying', attempt_number: attempt });
        // Recorded right after the attempt, which happened between `before` and `after`.
        const delay = SPEC_RETRY_DELAYS_MS[attempt - 1];
        const next = Date.parse(listed.next_retry_at);
        expect(next, `next_retry_at after attempt ${attempt}`).toBeGreaterThanOrEqual(before + delay - 1000);
        expect(next, `next_retry_at after attempt ${attempt}`).toBeLessThanOrEqual(after + delay + 1000);
        // The wait passes: the retry is due now.
        before = Date.now();
        await t.deps.db.updateTable('webhook_deliveries').set({ next_attempt_at: sql<Date>`now()` }).where('id', '=', row.id).execute();
      }
    } finally {
      await own.stop();
    }
  });

  it('the 19th consecutive failure leaves the endpoint active; the 20th disables it and nothing more is queued', async () => {
    await stopDeliverer();
    const tenant = await createTenant(t.app);
    const path = freshPath('twenty');
    receiver.behave(path, 500);
    const { data: endpoint } = await endpointFor(tenant, path);
    // One attempt per event: this deliverer waits a minute before any retry, so the count is exact.
    const own = ownDeliverer({ timeoutMs: 2_000, endpointConcurrency: 2 });
    try {
      const attempted = (n: number) => eventually(async () => {
        const rows = await deliveriesOf(endpoint.id);
        return rows.length === n && rows.every((d) => d.attempt_number === 1 && d.lease_until === null) && rows;
      }, 20_000);
      const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: Array.from({ length: 19 }, () => ({ first_name: 'Bulk', phone: uniquePhone() })) });
      expect(bulk.json().created).toBe(19);
      await attempted(19);
      expect(await endpointRow(endpoint.id)).toMatchObject({ consecutive_failures: 19, is_active: true });

      await createContact(tenant);
      await attempted(20);
      expect(await endpointRow(endpoint.id)).toMatchObject({ consecutive_failures: 20, is_active: false });
      expect((await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}`)).json()).toMatchObject({ is_active: false, consecutive_failures: 20 });
      expect(receiver.at(path)).toHaveLength(20);

      await createContact(tenant);
      expect(await deliveriesOf(endpoint.id)).toHaveLength(20);
    } finally {
      await own.stop();
    }
  });

  it('disables the endpoint after 20 consecutive failures, stops queueing, and re-enables with PUT active: true', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('dead');
    receiver.behave(path, 500);
    const { data: endpoint } = await endpointFor(tenant, path);
    const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: Array.from({ length: 5 }, () => ({ first_name: 'Bulk', phone: uniquePhone() })) });
    expect(bulk.json().created).toBe(5);

    const disabled = await eventually(async () => {
      const ep = await endpointRow(endpoint.id);
      return !ep.is_active && ep;
    }, 20_000);
    // The threshold itself is pinned by the test above; here attempts already in flight when it
    // tipped over are still recorded, so the count may pass 20.
    expect(disabled.consecutive_failures).toBeGreaterThanOrEqual(20);
    expect(disabled.last_failure_at).not.toBeNull();
    const api = (await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}`)).json();
    expect(api.is_active).toBe(false);
    expect(api.consecutive_failures).toBeGreaterThanOrEqual(disabled.consecutive_failures);

    const before = (await deliveriesOf(endpoint.id)).length;
    await createContact(tenant);
    expect((await deliveriesOf(endpoint.id)).length).toBe(before);
    const settled = await eventually(async () => {
      const rows = await deliveriesOf(endpoint.id);
      return rows.every((d) => d.lease_until === null) && rows;
    });
    expect(settled.every((d) => d.status === 'retrying' || d.status === 'abandoned')).toBe(true);
    // Attempts stop: every request the receiver got is a failure the endpoint counted, and none followed.
    const failures = (await endpointRow(endpoint.id)).consecutive_failures;
    expect(settled.reduce((n, d) => n + d.attempt_number, 0)).toBe(failures);
    expect(receiver.at(path)).toHaveLength(failures);

    receiver.behave(path, 200);
    const enabled = await call(t.app, tenant, 'PUT', `/webhooks/${endpoint.id}`, { active: true });
    expect(enabled.json()).toMatchObject({ is_active: true, consecutive_failures: 0 });
    // Held deliveries resume; new events queue again.
    await createContact(tenant);
    const rows = await eventually(async () => {
      const all = await deliveriesOf(endpoint.id);
      return all.length === before + 1 && all.every((d) => d.status === 'success') && all;
    }, 20_000);
    expect(rows.length).toBe(6);
    expect((await endpointRow(endpoint.id)).consecutive_failures).toBe(0);
  });

  it('test event: signed webhook.test, works on a disabled endpoint, no threshold effect, success clears the count', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('test-event');
    receiver.behave(path, 500);
    const { data: endpoint, signing_secret } = await endpointFor(tenant, path);

    const failed = await call(t.app, tenant, 'POST', `/webhooks/${endpoint.id}/test`);
    expect(failed.statusCode).toBe(200);
    const f = failed.json();
    expect(Object.keys(f).sort()).toEqual(['delivered', 'delivery_id', 'endpoint_disabled', 'error', 'message', 'response_body', 'response_time_ms', 'status_code']);
    expect(f).toMatchObject({ delivered: false, status_code: 500, endpoint_disabled: false, error: 'Endpoint answered HTTP 500' });
    expect(f.response_body).toHaveLength(500);
    expect((await endpointRow(endpoint.id)).consecutive_failures).toBe(0);
    const [req] = receiver.at(path);
    expect(req.headers['x-service-event']).toBe('webhook.test');
    expect(req.headers['x-service-delivery-id']).toBe(f.delivery_id);
    expect(verifyWebhookSignature({ secret: signing_secret, headers: req.headers, rawBody: req.body })).toBe(true);
    expect(JSON.parse(req.body)).toMatchObject({ type: 'webhook.test', data: { webhook_id: endpoint.id } });

    // Real failures, then disable; a successful test clears the count and reports the endpoint disabled.
    await createContact(tenant);
    await eventually(async () => (await endpointRow(endpoint.id)).consecutive_failures >= 1);
    await call(t.app, tenant, 'PUT', `/webhooks/${endpoint.id}`, { active: false });
    receiver.behave(path, 200);
    const ok = (await call(t.app, tenant, 'POST', `/webhooks/${endpoint.id}/test`)).json();
    expect(ok).toMatchObject({ delivered: true, status_code: 200, error: null, endpoint_disabled: true, response_body: `ok ${path}` });
    expect(typeof ok.response_time_ms).toBe('number');
    const ep = await endpointRow(endpoint.id);
    expect(ep).toMatchObject({ consecutive_failures: 0, is_active: false });

    const log = (await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}/deliveries?limit=100`)).json().data;
    const tests = log.filter((d: { event_type: string }) => d.event_type === 'webhook.test');
    expect(tests.map((d: { id: string; status: string; attempt_number: number }) => [d.id, d.status, d.attempt_number]).sort())
      .toEqual([[f.delivery_id, 'failed', 1], [ok.delivery_id, 'success', 1]].sort());
    // Never retried: a test delivery is not replayable either.
    expect((await call(t.app, tenant, 'POST', `/webhooks/deliveries/${f.delivery_id}/retry`)).statusCode).toBe(400);
  });

  it('rotation takes effect at once: the old secret no longer verifies', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('rotated');
    const { data: endpoint, signing_secret: oldSecret } = await endpointFor(tenant, path);
    const { signing_secret: newSecret } = (await call(t.app, tenant, 'POST', `/webhooks/${endpoint.id}/rotate-secret`)).json();
    await createContact(tenant);
    const [req] = await eventually(async () => receiver.at(path).length > 0 && receiver.at(path));
    expect(verifyWebhookSignature({ secret: newSecret, headers: req.headers, rawBody: req.body })).toBe(true);
    expect(verifyWebhookSignature({ secret: oldSecret, headers: req.headers, rawBody: req.body })).toBe(false);
  });

  it('replays a delivery as a new row with the same event id and bytes, leaving the original untouched', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('replay');
    const { data: endpoint } = await endpointFor(tenant, path);
    await createContact(tenant);
    const [original] = await eventually(async () => {
      const rows = await deliveriesOf(endpoint.id);
      return rows[0]?.status === 'success' && rows;
    });
    const res = await call(t.app, tenant, 'POST', `/webhooks/deliveries/${original.id}/retry`);
    expect(res.statusCode).toBe(200);
    expect(Object.keys(res.json()).sort()).toEqual(['delivery_id', 'message']);
    const replayId = res.json().delivery_id;
    expect(replayId).not.toBe(original.id);

    const requests = await eventually(async () => receiver.at(path).length === 2 && receiver.at(path));
    expect(requests[1].body).toBe(requests[0].body);
    expect(requests[1].headers['x-service-delivery-id']).not.toBe(requests[0].headers['x-service-delivery-id']);
    const replay = await eventually(async () => {
      const row = (await deliveriesOf(endpoint.id)).find((d) => d.id === replayId);
      return row?.status === 'success' && row;
    });
    expect(replay).toMatchObject({ event_id: original.event_id, event_type: original.event_type, replay_of: original.id, attempt_number: 1 });
    const again = (await deliveriesOf(endpoint.id)).find((d) => d.id === original.id)!;
    expect(again).toEqual(original);

    const other = await createTenant(t.app);
    expect((await call(t.app, other, 'POST', `/webhooks/deliveries/${original.id}/retry`)).statusCode).toBe(404);
    expect((await call(t.app, other, 'GET', '/webhooks/deliveries')).json().data).toEqual([]);
    const mine = (await call(t.app, tenant, 'GET', '/webhooks/deliveries?status=success')).json();
    expect(mine.pagination.total_items).toBe(2);
    const metrics = (await call(t.app, tenant, 'GET', '/webhooks/deliveries/metrics')).json();
    expect(metrics).toEqual({ total: 2, success: 2, retrying: 0, abandoned: 0, pending: 0, success_rate: 1 });
    const page = (await call(t.app, tenant, 'GET', '/webhooks/deliveries?limit=1&page=2')).json();
    expect(page.data).toHaveLength(1);
    expect(page.pagination).toEqual({ page: 2, limit: 1, total_items: 2, total_pages: 2, has_next: false, has_prev: true });
  });

  it('a claim takes at most the room this worker has left per endpoint (the cap less what it holds), the cap elsewhere', async () => {
    await stopDeliverer();
    try {
      const tenant = await createTenant(t.app);
      const [held, full, other] = await Promise.all(['room-held', 'room-full', 'room-other'].map(async (name) => (await endpointFor(tenant, freshPath(name))).data.id));
      for (let i = 0; i < 3; i++) await createContact(tenant);
      const room = new Map([[held, 1], [full, 0]]);
      const claimed = await claimDueDeliveries(t.deps.db, { kind: 'first', limit: 1000, endpointCap: 2, room, leaseMs: 200 });
      const per = (id: string) => claimed.filter((c) => c.endpoint_id === id).length;
      expect([per(held), per(full), per(other)]).toEqual([1, 0, 2]);
    } finally {
      startDeliverer();
    }
  });

  it('a worker killed mid-attempt loses nothing: the claim comes back after its lease', async () => {
    await stopDeliverer();
    const tenant = await createTenant(t.app);
    const path = freshPath('crash');
    const { data: endpoint } = await endpointFor(tenant, path);
    await createContact(tenant);
    const [row] = await deliveriesOf(endpoint.id);

    // The "crashed" worker: claims with a lease, then never attempts or records anything.
    const claimed = await claimDueDeliveries(t.deps.db, { kind: 'first', limit: 1000, endpointCap: 2, leaseMs: 400 });
    expect(claimed.map((c) => c.id)).toContain(row.id);
    const leased = await eventually(async () => (await deliveriesOf(endpoint.id))[0]);
    expect(leased.lease_until).not.toBeNull();
    // While the lease holds, nobody else can claim it.
    expect((await claimDueDeliveries(t.deps.db, { kind: 'first', limit: 1000, endpointCap: 2, leaseMs: 400 })).map((c) => c.id)).not.toContain(row.id);

    startDeliverer();
    const delivered = await eventually(async () => {
      const [r] = await deliveriesOf(endpoint.id);
      return r.status === 'success' && r;
    });
    expect(delivered.attempt_number).toBe(1); // the lost attempt was not counted
    expect(receiver.at(path)).toHaveLength(1);
  });

  it('a claimed row that waited too long for a slot is given back, then attempted', async () => {
    await stopDeliverer();
    const tenant = await createTenant(t.app);
    const path = freshPath('queued-behind-hang');
    receiver.behave(path, 'hang');
    const { data: endpoint } = await endpointFor(tenant, path);
    for (let i = 0; i < 3; i++) await createContact(tenant);
    // One slot for the endpoint: two claimed rows wait behind a 600 ms hang, longer than this
    // lease allows (1600 ms lease - 600 ms attempt - 500 ms margin), so they must not start late.
    const own = ownDeliverer({ timeoutMs: 600, leaseMs: 1_600, endpointConcurrency: 1 });
    const { deliverer } = own;
    try {
      await eventually(async () => (await deliveriesOf(endpoint.id)).every((d) => d.attempt_number === 1), 10_000);
      expect(deliverer.stats.expiredWaiting).toBeGreaterThanOrEqual(1);
      expect(receiver.maxOpenAt(path)).toBe(1);
      expect(receiver.at(path)).toHaveLength(3); // each row attempted exactly once, none lost
    } finally {
      await own.stop();
      await call(t.app, tenant, 'DELETE', `/webhooks/${endpoint.id}`);
    }
  });

  it('stats count the claims and the records: every row claimed and recorded, round trips and their time', async () => {
    await stopDeliverer();
    const tenant = await createTenant(t.app);
    const path = freshPath('stats');
    const { data: endpoint } = await endpointFor(tenant, path);
    for (let i = 0; i < 5; i++) await createContact(tenant);
    const testStarted = performance.now();
    // Two slots for the endpoint and a claim-ahead of two: the first claim takes four of its five rows
    // and the endpoint is at its limit (a wait for its slots, not the idle poll).
    const own = ownDeliverer({ timeoutMs: 1_000, endpointConcurrency: 2 });
    try {
      await eventually(async () => (await deliveriesOf(endpoint.id)).every((d) => d.status === 'success'), 10_000);
    } finally {
      await own.stop();
    }
    const { stats } = own.deliverer;
    const elapsed = performance.now() - testStarted;
    // Other tests' rows of this database may be claimed too: at least this test's five.
    expect(stats.claimed).toBeGreaterThanOrEqual(5);
    expect(stats.flushed).toBeGreaterThanOrEqual(5);
    expect(stats.claims).toBeGreaterThanOrEqual(2);
    expect(stats.largestClaim).toBeGreaterThanOrEqual(4);
    expect(stats.largestClaim).toBeLessThanOrEqual(stats.claimed);
    expect(stats.flushes).toBeGreaterThanOrEqual(1);
    expect(stats.flushes).toBeLessThanOrEqual(stats.flushed);
    expect(stats.capWaits).toBeGreaterThanOrEqual(1);
    expect(stats.expiredWaiting).toBe(0);
    // One claim and one record at a time: their times add up to at most the time the deliverer ran.
    for (const ms of [stats.claimMs, stats.flushMs]) {
      expect(ms).toBeGreaterThan(0);
      expect(ms).toBeLessThanOrEqual(elapsed);
    }
    expect(receiver.at(path)).toHaveLength(5);
  });

  it('rows held back by hung endpoints do not stop claims for other endpoints', async () => {
    await stopDeliverer();
    // Each hung endpoint: 2 attempts in flight (its cap) and 2 claimed rows waiting behind them;
    // together the waiting rows are half of this worker's 8 slots.
    const { tenant: hungTenant, ids: hung } = await hungEndpoints('hung-cap', 2, 4);
    const own = ownDeliverer({ timeoutMs: 3_000, endpointConcurrency: 2 });
    try {
      await eventually(async () => {
        const leased = await t.deps.db.selectFrom('webhook_deliveries').select('id').where('endpoint_id', 'in', hung).where('lease_until', 'is not', null).execute();
        return leased.length === 8;
      });
      const freshTenant = await createTenant(t.app);
      const path = freshPath('beside-hung');
      await endpointFor(freshTenant, path);
      const started = Date.now();
      await createContact(freshTenant);
      await eventually(async () => receiver.at(path).length === 1, 5_000, 10);
      expect(Date.now() - started).toBeLessThan(1_500); // well before the hung attempts time out (3 s)
    } finally {
      await own.stop();
      for (const id of hung) await call(t.app, hungTenant, 'DELETE', `/webhooks/${id}`);
    }
  });

  it('a row claimed before a secret rotation and held for a slot is not sent with the old secret', async () => {
    await stopDeliverer();
    const tenant = await createTenant(t.app);
    const path = freshPath('rotate-while-waiting');
    receiver.behave(path, 'hang');
    const { data: endpoint, signing_secret: oldSecret } = await endpointFor(tenant, path);
    for (let i = 0; i < 2; i++) await createContact(tenant);
    // One slot: the first row hangs for the 1.5 s timeout; the second is claimed ahead (with the
    // secret of that moment) and waits for the slot longer than a claim may be held.
    const own = ownDeliverer({ timeoutMs: 1_500, endpointConcurrency: 1 });
    try {
      await eventually(async () => receiver.at(path).length === 1 && (await deliveriesOf(endpoint.id)).every((d) => d.lease_until !== null));
      const rotated = await call(t.app, tenant, 'POST', `/webhooks/${endpoint.id}/rotate-secret`);
      expect(rotated.statusCode).toBe(200);
      receiver.behave(path, 200);
      const newSecret = rotated.json().signing_secret as string;
      await eventually(async () => (await deliveriesOf(endpoint.id)).some((d) => d.status === 'success'), 10_000);
      const [, second] = receiver.at(path);
      expect(verifyWebhookSignature({ secret: newSecret, headers: second.headers, rawBody: second.body })).toBe(true);
      expect(verifyWebhookSignature({ secret: oldSecret, headers: second.headers, rawBody: second.body })).toBe(false);
      expect(own.deliverer.stats.expiredWaiting).toBeGreaterThanOrEqual(1);
    } finally {
      await own.stop();
      await call(t.app, tenant, 'DELETE', `/webhooks/${endpoint.id}`);
    }
  });

  it('a stopping worker gives its claimed but unattempted rows back at once, not after their lease', async () => {
    await stopDeliverer();
    const tenant = await createTenant(t.app);
    const path = freshPath('release-on-stop');
    receiver.behave(path, 'hang');
    const { data: endpoint } = await endpointFor(tenant, path);
    for (let i = 0; i < 2; i++) await createContact(tenant);
    // One slot for the endpoint: one row hangs in flight (1.2 s, within the 2 s drain grace), the
    // other is claimed ahead and waits.
    const own = ownDeliverer({ timeoutMs: 1_200, endpointConcurrency: 1 });
    try {
      await eventually(async () => (await deliveriesOf(endpoint.id)).every((d) => d.lease_until !== null) && receiver.at(path).length === 1);
    } finally {
      await own.stop();
    }
    const rows = await deliveriesOf(endpoint.id);
    // The hung attempt timed out within the drain grace and was recorded; the waiting row is free to claim now.
    expect(rows.map((r) => r.attempt_number).sort()).toEqual([0, 1]);
    const waiting = rows.find((r) => r.attempt_number === 0)!;
    expect(waiting.lease_until).toBeNull();
    expect(receiver.at(path)).toHaveLength(1);
    await call(t.app, tenant, 'DELETE', `/webhooks/${endpoint.id}`);
  });

  it('a dead endpoint does not delay another endpoint\'s deliveries', async () => {
    const slowTenant = await createTenant(t.app);
    const slowPath = freshPath('slow');
    receiver.behave(slowPath, 'hang');
    const slow = await endpointFor(slowTenant, slowPath);
    const bulk = await call(t.app, slowTenant, 'POST', '/contacts/bulk', { contacts: Array.from({ length: 12 }, () => ({ first_name: 'Slow', phone: uniquePhone() })) });
    expect(bulk.json().created).toBe(12);
    await eventually(async () => receiver.at(slowPath).length >= 2); // the slow endpoint holds its slots now

    const fastTenant = await createTenant(t.app);
    const fastPath = freshPath('fast');
    await endpointFor(fastTenant, fastPath);
    const started = Date.now();
    for (let i = 0; i < 4; i++) await createContact(fastTenant);
    await eventually(async () => receiver.at(fastPath).length === 4, 5_000, 10);
    // Well under one receiver timeout (600 ms): the fast endpoint never queued behind the hung one.
    expect(Date.now() - started).toBeLessThan(550);
    // At most the per-endpoint cap of attempts were ever in flight to the hung endpoint at once.
    expect(receiver.maxOpenAt(slowPath)).toBe(2);
    await call(t.app, slowTenant, 'DELETE', `/webhooks/${slow.data.id}`);
  });

  it('retries to dead endpoints cannot starve first attempts (slots reserved for fresh traffic)', async () => {
    // 4 dead endpoints x per-endpoint cap 2 could fill all 8 slots with retries; the retry cap (4) keeps 4 for first attempts.
    const { tenant: deadTenant, ids: dead } = await hungEndpoints('dead-retries', 4, 3);
    // Wait until every dead delivery has failed once: from now on they are all retries.
    await eventually(async () => {
      const rows = await t.deps.db.selectFrom('webhook_deliveries').select('attempt_number').where('endpoint_id', 'in', dead).execute();
      return rows.length === 12 && rows.every((r) => r.attempt_number >= 1);
    }, 15_000);

    const freshTenant = await createTenant(t.app);
    const freshPathName = freshPath('fresh');
    await endpointFor(freshTenant, freshPathName);
    const started = Date.now();
    await createContact(freshTenant);
    await eventually(async () => receiver.at(freshPathName).length === 1, 5_000, 10);
    expect(Date.now() - started).toBeLessThan(550);
    for (const id of dead) await call(t.app, deadTenant, 'DELETE', `/webhooks/${id}`);
  });

  it('deleting an endpoint keeps its history and queues nothing more', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('deleted');
    const { data: endpoint } = await endpointFor(tenant, path);
    await createContact(tenant);
    await eventually(async () => (await deliveriesOf(endpoint.id))[0]?.status === 'success');
    await call(t.app, tenant, 'DELETE', `/webhooks/${endpoint.id}`);
    await createContact(tenant);
    expect(await deliveriesOf(endpoint.id)).toHaveLength(1);
    const log = (await call(t.app, tenant, 'GET', '/webhooks/deliveries')).json();
    expect(log.data).toHaveLength(1);
  });

  it('refuses private destinations at attempt time when private networks are not allowed (SSRF)', async () => {
    const sender = new WebhookSender({ timeoutMs: 1000, extraCaFile: receiver.caFile, allowPrivateNetworks: false });
    try {
      const path = freshPath('ssrf');
      for (const url of [receiver.url(path), `https://localhost:${receiver.port}${path}`, `https://[::ffff:127.0.0.1]:${receiver.port}${path}`,
        'https://10.0.0.1/x', 'https://169.254.169.254/latest/meta-data', 'https://192.168.0.1/x', 'https://[::1]/x']) {
        const outcome = await sender.attempt({ url, endpointId: '00000000-0000-4000-8000-000000000000', eventType: 'contact.created', payload: Buffer.from('{}'), secret: 'whsec_x' });
        expect(outcome.ok, url).toBe(false);
        if (!outcome.ok) expect(outcome.errorClass, url).toBe('destination_refused');
      }
      expect(receiver.at(path)).toHaveLength(0);
    } finally {
      await sender.close();
    }
  });

  it('never follows redirects: a 3xx is a failed attempt', async () => {
    const sender = new WebhookSender({ timeoutMs: 1000, extraCaFile: receiver.caFile, allowPrivateNetworks: true });
    try {
      const path = freshPath('redirect');
      receiver.behave(path, 302);
      const outcome = await sender.attempt({ url: receiver.url(path), endpointId: '00000000-0000-4000-8000-000000000000', eventType: 'contact.created', payload: Buffer.from('{}'), secret: 'whsec_x' });
      expect(outcome).toMatchObject({ ok: false, statusCode: 302, errorClass: 'http_status' });
      expect(receiver.at(path)).toHaveLength(1);
    } finally {
      await sender.close();
    }
  });

  it('fails TLS to a receiver whose certificate is not trusted', async () => {
    const sender = new WebhookSender({ timeoutMs: 1000, allowPrivateNetworks: true });
    try {
      const outcome = await sender.attempt({ url: receiver.url(freshPath('untrusted')), endpointId: '00000000-0000-4000-8000-000000000000', eventType: 'contact.created', payload: Buffer.from('{}'), secret: 'whsec_x' });
      expect(outcome).toMatchObject({ ok: false, errorClass: 'tls' });
    } finally {
      await sender.close();
    }
  });
});

