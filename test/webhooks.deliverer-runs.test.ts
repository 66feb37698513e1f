import { randomUUID } from 'node:crypto';
import type { Logger } from 'pino';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest';
import { encryptSecret } from '../src/crypto/secrets.ts';
import type { AttemptResult, ClaimedDelivery } from '../src/modules/webhooks/webhooks.queue.ts';
import type { AttemptOutcome, AttemptRequest, WebhookSender } from '../src/modules/webhooks/webhooks.sender.ts';
import { WebhookDeliverer } from '../src/workers/webhook-deliverer.ts';
import { createTenant, eventually, startTestApp, type TestApp } from './helpers/app.ts';
import { createOwnDatabase } from './helpers/own-database.ts';

/**
 * The deliverer's slots, claim-ahead, waiting rows, attempts and records, driven one run at a time on its
 * own database with a scripted sender (each attempt ends when the test answers it). Recording and giving
 * back go through the real queue statements unless a test holds them up or fails them (`hooks`), and
 * secret decryptions are counted. Where the rule is about time (how long a row may wait, an endpoint's
 * pace), Date and performance.now are fake and moved by hand; sockets and timers stay real.
 */
type Queue = typeof import('../src/modules/webhooks/webhooks.queue.ts');
const hooks = vi.hoisted(() => ({
  record: null as null | ((real: Queue['recordAttemptResults'], db: unknown, results: AttemptResult[]) => Promise<number>),
  release: null as null | ((real: Queue['releaseLeases'], db: unknown, rows: ClaimedDelivery[]) => Promise<void>),
  decrypts: 0,
}));
vi.mock('../src/modules/webhooks/webhooks.queue.ts', async (importOriginal) => {
  const real = await importOriginal<Queue>();
  return {
    ...real,
    recordAttemptResults: (db: Parameters<Queue['recordAttemptResults']>[0], results: AttemptResult[]) =>
      hooks.record ? hooks.record(real.recordAttemptResults, db, results) : real.recordAttemptResults(db, results),
    releaseLeases: (db: Parameters<Queue['releaseLeases']>[0], rows: ClaimedDelivery[]) =>
      hooks.release ? hooks.release(real.releaseLeases, db, rows) : real.releaseLeases(db, rows),
  };
});
vi.mock('../src/crypto/secrets.ts', async (importOriginal) => {
  const real = await importOriginal<typeof import('../src/crypto/secrets.ts')>();
  return { ...real, decryptSecret: (key: Buffer, sealed: string) => { hooks.decrypts += 1; return real.decryptSecret(key, sealed); } };
});

const OK: AttemptOutcome = { ok: true, statusCode: 200, responseTimeMs: 1, responseBody: 'ok' };
const HTTP_500: AttemptOutcome = { ok: false, statusCode: 500, responseTimeMs: 7, responseBody: 'nope', errorClass: 'http_status', errorMessage: 'Endpoint answered HTTP 500' };

/** Attempts that stay open until the test answers (or fails) them. */
function scriptedSender() {
  const open: { req: AttemptRequest; resolve(o: AttemptOutcome): void; reject(e: Error): void }[] = [];
  const requests: AttemptRequest[] = [];
  const sender = {
    attempt(req: AttemptRequest) {
      requests.push(req);
      return new Promise<AttemptOutcome>((resolve, reject) => { open.push({ req, resolve, reject }); });
    },
  } as unknown as WebhookSender;
  const take = (endpointId: string) => {
    const i = open.findIndex((o) => o.req.endpointId === endpointId);
    if (i < 0) throw new Error(`no open attempt of ${endpointId}`);
    return open.splice(i, 1)[0];
  };
  return {
    sender, open, requests,
    openOf: (endpointId: string) => open.filter((o) => o.req.endpointId === endpointId).length,
    sentTo: (endpointId: string) => requests.filter((r) => r.endpointId === endpointId),
    /** Ends the oldest open attempt of the endpoint. */
    answer(endpointId: string, outcome: AttemptOutcome = OK) { take(endpointId).resolve(outcome); },
    fail(endpointId: string, err: Error) { take(endpointId).reject(err); },
    answerAll() { for (const o of open.splice(0)) o.resolve(OK); },
  };
}
type Scripted = ReturnType<typeof scriptedSender>;

/** Every continuation of an ended attempt (release, record scheduling, starting waiting rows) has run. */
const settled = () => new Promise((resolve) => setImmediate(resolve));
/** Polls on real time (Date may be fake). */
async function until(check: () => boolean | Promise<boolean>, ms = 10_000) {
  const deadline = process.hrtime.bigint() + BigInt(ms) * 1_000_000n;
  while (!(await check())) {
    if (process.hrtime.bigint() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** The deliverer's own bookkeeping (private): what it holds once everything ended and was recorded. */
function internals(d: WebhookDeliverer) {
  return d as unknown as {
    inflight: number; inflightRetries: number; busy: Map<string, number>; ready: Map<string, unknown[]>; readyCount: number; readyRetries: number;
    attempts: Set<unknown>; slotWaiters: Set<unknown>; finished: unknown[]; flushes: Set<unknown>; pace: Map<string, { ms: number; progressAt: number }>;
    secrets: Map<string, string>;
  };
}
function held(d: WebhookDeliverer) {
  const i = internals(d);
  return {
    inflight: i.inflight, inflightRetries: i.inflightRetries, busy: i.busy.size, ready: i.ready.size, readyCount: i.readyCount, readyRetries: i.readyRetries,
    attempts: i.attempts.size, slotWaiters: i.slotWaiters.size, finished: i.finished.length, flushes: i.flushes.size,
  };
}
const IDLE = { inflight: 0, inflightRetries: 0, busy: 0, ready: 0, readyCount: 0, readyRetries: 0, attempts: 0, slotWaiters: 0, finished: 0, flushes: 0 };

describe('the deliverer\'s slots, waiting rows, pace and records (own database, scripted attempts)', () => {
  let database: Awaited<ReturnType<typeof createOwnDatabase>>;
  let t: TestApp;
  const logged: { obj: Record<string, unknown>; msg: string }[] = [];
  const logger = {
    error: (obj: Record<string, unknown>, msg: string) => { logged.push({ obj, msg }); },
    warn() {}, info() {}, debug() {}, trace() {}, fatal() {},
    child() { return logger; },
  } as unknown as Logger;

  beforeAll(async () => {
    database = await createOwnDatabase('msvc_wh_drruns');
    t = await startTestApp({ DATABASE_URL: database.url, WEBHOOK_DELIVERY_ENABLED: 'false' });
  });
  afterAll(async () => {
    await t?.close();
    await database?.drop();
  });

  let tenantId: string;
  const endpoints: string[] = [];
  const running: { d: WebhookDeliverer; s: Scripted }[] = [];
  beforeEach(async () => { tenantId = (await createTenant(t.app)).id; });
  afterEach(async () => {
    vi.useRealTimers();
    hooks.record = null;
    hooks.release = null;
    logged.length = 0;
    // Answers what is open, stops the deliverers and takes this test's endpoints out of every later claim.
    for (const { d, s } of running.splice(0)) {
      s.answerAll();
      await d.drain(50);
      s.answerAll();
    }
    await t.deps.db.updateTable('webhook_endpoints').set({ deleted_at: new Date() }).where('id', 'in', endpoints.splice(0)).execute();
  });

  /** A new endpoint of this test's tenant with `first` due first attempts and `retries` due retries (one failed attempt each), oldest first. */
  async function endpointWith(first: number, retries = 0, o: { secret?: string; sealed?: string; noPayload?: boolean } = {}) {
    const id = randomUUID();
    endpoints.push(id);
    await t.deps.db.insertInto('webhook_endpoints').values({
      id, tenant_id: tenantId, url: `https://receiver.invalid/${id}`, events: ['contact.created'],
      signing_secret_enc: o.sealed ?? encryptSecret(t.config.secretsKey, o.secret ?? 'whsec_runs'),
    }).execute();
    return { id, rows: await addRows(id, first, retries, o) };
  }
  /** Due rows for an endpoint: `first` first attempts and `retries` retries, oldest first. */
  async function addRows(id: string, first: number, retries = 0, o: { noPayload?: boolean } = {}) {
    const rows = [...Array(first).fill(0), ...Array(retries).fill(1)].map((attempts: number, i) => ({
      id: randomUUID(), tenant_id: tenantId, endpoint_id: id, event_id: randomUUID(), event_type: 'contact.created', request_url: `https://receiver.invalid/${id}`,
      status: attempts === 0 ? 'pending' : 'retrying', attempt_number: attempts, next_attempt_at: new Date(Date.now() - 60_000 + i),
    }));
    if (rows.length > 0) {
      if (!o.noPayload) await t.deps.db.insertInto('webhook_payloads').values(rows.map((r) => ({ event_id: r.event_id, tenant_id: tenantId, payload: Buffer.from(`{"id":"${r.event_id}"}`) }))).execute();
      await t.deps.db.insertInto('webhook_deliveries').values(rows).execute();
    }
    return rows;
  }
  const rowsOf = (ids: string[]) => t.deps.db.selectFrom('webhook_deliveries').selectAll().where('endpoint_id', 'in', ids).execute();
  const rowById = (id: string) => t.deps.db.selectFrom('webhook_deliveries').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const leasedOf = async (ids: string[]) => (await rowsOf(ids)).filter((r) => r.lease_until !== null && ['pending', 'retrying'].includes(r.status));

  function deliverer(s: Scripted, o: Partial<ConstructorParameters<typeof WebhookDeliverer>[2]> = {}) {
    const d = new WebhookDeliverer(t.deps.db, s.sender, {
      secretsKey: t.config.secretsKey, retryDelaysMs: [60_000], leaseMs: 60_000, timeoutMs: 1_000, pollMs: 20,
      concurrency: 2, endpointConcurrency: 1, retryConcurrency: 1, ...o,
    }, logger);
    running.push({ d, s });
    return d;
  }

  it('sends each row with its URL, endpoint, event type, stored envelope and the endpoint\'s secret, decrypted once per secret', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 2, endpointConcurrency: 1 });
    const a = await endpointWith(2, 0, { secret: 'whsec_a' });
    const b = await endpointWith(2, 0, { secret: 'whsec_b' });
    const before = hooks.decrypts;
    expect(await d.runOnce()).toBe(4);
    // Each endpoint's second row waits for its slot; the two secrets alternate.
    s.answer(a.id);
    await settled();
    s.answer(b.id);
    await settled();
    expect(s.requests).toHaveLength(4);
    expect(hooks.decrypts - before).toBe(2);
    for (const [endpoint, secret] of [[a, 'whsec_a'], [b, 'whsec_b']] as const) {
      const byPayload = (a: { payload: unknown }, b: { payload: unknown }) => String(a.payload).localeCompare(String(b.payload));
      expect([...s.sentTo(endpoint.id)].sort(byPayload)).toEqual(endpoint.rows.map((r) => ({
        url: `https://receiver.invalid/${endpoint.id}`, endpointId: endpoint.id, eventType: 'contact.created', payload: `{"id":"${r.event_id}"}`, secret,
      })).sort(byPayload));
    }
  });

  it('records failures: retried after the configured delay, abandoned after the last; a thrown attempt, an undecryptable secret or a missing envelope fail without a request', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 8, endpointConcurrency: 1, retryConcurrency: 2, retryDelaysMs: [60_000] });
    const failing = await endpointWith(1);
    const last = await endpointWith(0, 1);
    const thrown = await endpointWith(1);
    const sealed = await endpointWith(1, 0, { sealed: 'v0.not.a.secret' });
    const noPayload = await endpointWith(1, 0, { noPayload: true });
    const fine = await endpointWith(1);
    const started = Date.now();
    expect(await d.runOnce()).toBe(6);
    expect(s.requests.map((r) => r.endpointId).sort()).toEqual([failing.id, last.id, thrown.id, fine.id].sort());
    s.answer(failing.id, HTTP_500);
    s.answer(last.id, HTTP_500);
    s.fail(thrown.id, new Error('socket exploded'));
    s.answer(fine.id);
    const all = [failing, last, thrown, sealed, noPayload, fine].map((e) => e.rows[0].id);
    await until(async () => (await Promise.all(all.map(rowById))).every((r) => r.lease_until === null));
    const finished = Date.now();
    const [f, l, th, se, np, ok] = await Promise.all(all.map(rowById));
    expect(f).toMatchObject({ status: 'retrying', attempt_number: 1, response_status_code: 500, response_time_ms: 7, response_body: 'nope', error_class: 'http_status', error_message: 'Endpoint answered HTTP 500', completed_at: null });
    expect(f.next_attempt_at!.getTime()).toBeGreaterThanOrEqual(started + 60_000 - 2_000);
    expect(f.next_attempt_at!.getTime()).toBeLessThanOrEqual(finished + 60_000 + 2_000);
    expect(l).toMatchObject({ status: 'abandoned', attempt_number: 2, next_attempt_at: null, error_class: 'http_status' });
    expect(l.completed_at).not.toBeNull();
    const internal = { status: 'retrying', attempt_number: 1, response_status_code: null, response_time_ms: 0, response_body: null, error_class: 'internal' };
    expect(th).toMatchObject({ ...internal, error_message: 'Error: socket exploded' });
    expect(se).toMatchObject({ ...internal, error_message: 'signing secret unavailable: unrecognised secret format' });
    expect(np).toMatchObject({ ...internal, error_message: 'stored event envelope missing' });
    for (const r of [th, se, np]) expect(r.next_attempt_at!.getTime()).toBeGreaterThanOrEqual(started + 60_000 - 2_000);
    expect(ok).toMatchObject({ status: 'success', attempt_number: 1, next_attempt_at: null, error_class: null, error_message: null });
  });

  it('starts at most `concurrency` attempts and `endpointConcurrency` per endpoint; a waiting row takes a slot as soon as an attempt ends; nothing is kept once all are recorded', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 3, endpointConcurrency: 2 });
    const a = await endpointWith(4);
    const b = await endpointWith(4);
    expect(await d.runOnce()).toBe(8); // two caps each
    const counts = () => [s.openOf(a.id), s.openOf(b.id)].sort();
    expect(counts()).toEqual([1, 2]);
    const [two, one] = s.openOf(a.id) === 2 ? [a.id, b.id] : [b.id, a.id];
    s.answer(one);
    await settled();
    expect([s.openOf(two), s.openOf(one)]).toEqual([2, 1]);
    s.answer(two);
    await settled();
    expect([s.openOf(two), s.openOf(one)]).toEqual([2, 1]);
    expect(s.requests).toHaveLength(5);
    // The rest, as slots free up, without another run.
    for (let i = 0; i < 3; i++) {
      s.answerAll();
      await settled();
    }
    expect(s.requests).toHaveLength(8);
    await until(() => d.stats.flushed === 8);
    await settled();
    expect(held(d)).toEqual(IDLE);
    expect(await leasedOf([a.id, b.id])).toHaveLength(0);
  });

  it('retries take at most retryConcurrency slots, held back retries never block first attempts, and a retry that ends frees its slot', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 4, endpointConcurrency: 1, retryConcurrency: 1 });
    const f = await endpointWith(2);
    const r1 = await endpointWith(0, 1);
    expect(await d.runOnce()).toBe(3); // f's two (one waits for its slot) and one retry
    expect([s.openOf(f.id), s.openOf(r1.id)]).toEqual([1, 1]);
    const r2 = await endpointWith(0, 1);
    // The retry slot is taken: no retry is claimed.
    await d.runOnce();
    expect(await leasedOf([r2.id])).toHaveLength(0);
    // A first attempt ends: f's waiting row starts although the retry slot is full; still no retry claimed.
    s.answer(f.id);
    await settled();
    expect(s.openOf(f.id)).toBe(1);
    expect(s.sentTo(f.id)).toHaveLength(2);
    await d.runOnce();
    expect(await leasedOf([r2.id])).toHaveLength(0);
    // The retry ends: its slot is free for the next one.
    s.answer(r1.id);
    await settled();
    await d.runOnce();
    expect(s.openOf(r2.id)).toBe(1);
    s.answerAll();
    await until(() => d.stats.flushed === 4);
    await settled();
    expect(held(d)).toEqual(IDLE);
  });

  it('an endpoint holds its limit in first attempts and retries together: a second kind is claimed only into what the first left', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 4, endpointConcurrency: 1, retryConcurrency: 4 });
    const m = await endpointWith(1, 2);
    expect(await d.runOnce()).toBe(2); // one first attempt in flight, one retry waiting: two caps
    expect(d.stats.capWaits).toBe(1);
    expect(await d.runOnce()).toBe(1); // nothing claimable: it waited for the endpoint
    expect(d.stats).toMatchObject({ claims: 2, claimed: 2, capWaits: 2 });
    expect(await leasedOf([m.id])).toHaveLength(2);
  });

  it('a row waits for a slot at most a second after its claim; one that waited longer is given back unattempted', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 2, endpointConcurrency: 1, leaseMs: 60_000, timeoutMs: 1_000 });
    const a = await endpointWith(3);
    expect(await d.runOnce()).toBe(2);
    vi.advanceTimersByTime(1_000);
    s.answer(a.id);
    await settled();
    expect(s.sentTo(a.id)).toHaveLength(2); // waited exactly the second: started
    expect(await d.runOnce()).toBe(1); // the third row, claimed now
    vi.advanceTimersByTime(1_001);
    s.answer(a.id);
    await settled();
    expect(s.sentTo(a.id)).toHaveLength(2);
    expect(d.stats.expiredWaiting).toBe(1);
    await until(async () => (await rowById(a.rows[2].id)).lease_until === null);
    expect(await rowById(a.rows[2].id)).toMatchObject({ status: 'pending', attempt_number: 0 });
    expect(logged).toEqual([]);
  });

  it('a row may wait less when its attempt could outlive its lease (half the time left after the timeout); a failed give-back is logged', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    const s = scriptedSender();
    // A 4 s lease and a 3 s timeout leave 1 s, half of which may be spent waiting.
    const d = deliverer(s, { concurrency: 2, endpointConcurrency: 1, leaseMs: 4_000, timeoutMs: 3_000 });
    const a = await endpointWith(3);
    expect(await d.runOnce()).toBe(2);
    vi.advanceTimersByTime(500);
    s.answer(a.id);
    await settled();
    expect(s.sentTo(a.id)).toHaveLength(2);
    hooks.release = async () => { throw new Error('release down'); };
    expect(await d.runOnce()).toBe(1); // nothing expired: nothing given back
    vi.advanceTimersByTime(501);
    s.answer(a.id);
    await settled();
    expect(s.sentTo(a.id)).toHaveLength(2);
    expect(d.stats.expiredWaiting).toBe(1);
    await until(() => logged.length > 0);
    expect(logged).toEqual([{ msg: 'releasing expired webhook claims failed; their leases will lapse', obj: { err: expect.objectContaining({ message: 'release down' }) } }]);
    expect((await rowById(a.rows[2].id)).lease_until).not.toBeNull();
  });

  it('an endpoint\'s claim-ahead is what its slots get through in 100 ms at its recent pace (moving average), dropped once it makes no progress for 100 ms', async () => {
    vi.useFakeTimers({ toFake: ['Date', 'performance'] });
    const s = scriptedSender();
    // 24 rows at most in the process; an endpoint may hold at most half (12) with its two slots.
    vi.advanceTimersByTime(1_000); // attempts start at a clock reading other than 0
    const d = deliverer(s, { concurrency: 4, endpointConcurrency: 2, retryConcurrency: 2 });
    const e = await endpointWith(30);
    expect(await d.runOnce()).toBe(4); // no pace yet: two caps
    vi.advanceTimersByTime(15);
    s.answer(e.id); // 15 ms
    await settled();
    vi.advanceTimersByTime(50);
    s.answer(e.id); // 65 ms: pace 15 x 0.8 + 65 x 0.2 = 25 ms
    await settled();
    await until(() => d.stats.flushed === 2);
    // 2 slots x 100 ms / 25 ms = 8 ahead: with its 2 in flight it may hold 10.
    expect(await d.runOnce()).toBe(8);
    expect(await leasedOf([e.id])).toHaveLength(10);
    expect(d.stats).toMatchObject({ claims: 2, claimed: 12, slotWaits: 0, capWaits: 2 });
    // Its waiting rows beyond its free slots (6) are about to start: a slot set's worth, so no claim.
    expect(await d.runOnce()).toBe(1);
    vi.advanceTimersByTime(100);
    expect(await d.runOnce()).toBe(1);
    expect(d.stats).toMatchObject({ claims: 2, slotWaits: 2 });
    // No progress for more than 100 ms: back to two caps, its waiting rows no longer count as about to start.
    vi.advanceTimersByTime(1);
    expect(await d.runOnce()).toBe(1);
    expect(d.stats).toMatchObject({ claims: 3, claimed: 12, slotWaits: 2, capWaits: 3 });
  });

  it('an endpoint that answers at once may hold half of what the process holds, and keeps that claim-ahead while idle', async () => {
    vi.useFakeTimers({ toFake: ['Date', 'performance'] });
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 4, endpointConcurrency: 2, retryConcurrency: 2 });
    const g = await endpointWith(40);
    expect(await d.runOnce()).toBe(4);
    for (let i = 0; i < 4; i++) {
      s.answer(g.id); // 0 ms
      await settled();
    }
    await until(() => d.stats.flushed === 4);
    vi.advanceTimersByTime(1_000); // idle: nothing in flight, so no stall
    expect(await d.runOnce()).toBe(12); // 24 / 2
    expect(s.openOf(g.id)).toBe(2);
    // Started afresh: it is making progress, and its 10 waiting rows are about to start.
    expect(await d.runOnce()).toBe(1);
    expect(d.stats).toMatchObject({ claims: 2, claimed: 16, slotWaits: 1 });
  });

  it('a row started while its endpoint makes no progress is not progress: the endpoint stays at two caps', async () => {
    vi.useFakeTimers({ toFake: ['Date', 'performance'] });
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 4, endpointConcurrency: 2, retryConcurrency: 2 });
    const h = await endpointWith(2);
    expect(await d.runOnce()).toBe(2);
    vi.advanceTimersByTime(10);
    s.answer(h.id); // a 10 ms pace: 20 ahead, at most 10
    await settled();
    await addRows(h.id, 6);
    vi.advanceTimersByTime(101); // its other attempt made no progress for 101 ms
    // Two caps less the one in flight; starting one of them does not count as progress.
    expect(await d.runOnce()).toBe(3);
    expect(s.openOf(h.id)).toBe(2);
    expect(d.stats).toMatchObject({ claimed: 5, capWaits: 1 });
  });

  it('records a slot set\'s worth of results at once, fewer within the flush delay together, one record at a time; stats count them', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 2, endpointConcurrency: 1 });
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push((await endpointWith(1)).id);
    const calls: number[] = [];
    let open!: () => void;
    const gate = new Promise<void>((resolve) => { open = resolve; });
    hooks.record = async (real, db, results) => {
      calls.push(results.length);
      await gate;
      return real(db as Parameters<typeof real>[0], results);
    };
    expect(await d.runOnce()).toBe(4);
    expect(d.stats.capWaits).toBe(0); // each endpoint holds one row of its two
    await new Promise((r) => setTimeout(r, 0));
    s.answerAll();
    await settled();
    expect(calls).toEqual([2]); // two is a slot set: no flush delay
    await settled();
    expect(s.open).toHaveLength(2); // the other two started
    s.answerAll();
    await new Promise((r) => setTimeout(r, 50));
    expect(calls).toEqual([2]); // the first record is still running
    open();
    await until(() => d.stats.flushed === 4);
    expect(calls).toEqual([2, 2]);
    expect(d.stats).toMatchObject({ flushes: 2, flushed: 4 });
    expect(d.stats.flushMs).toBeGreaterThan(0);
    expect(await leasedOf(ids)).toHaveLength(0);
  });

  it('fewer results than a slot set wait up to the flush delay and are recorded together', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 4, endpointConcurrency: 1 });
    const [a, b] = [await endpointWith(1), await endpointWith(1), await endpointWith(1), await endpointWith(1)];
    const calls: number[] = [];
    hooks.record = (real, db, results) => { calls.push(results.length); return real(db as Parameters<typeof real>[0], results); };
    expect(await d.runOnce()).toBe(4);
    await new Promise((r) => setTimeout(r, 0));
    // Both end in the same moment: the first result waits for the second instead of being recorded alone.
    s.answer(a.id);
    s.answer(b.id);
    await until(() => calls.length > 0);
    expect(calls).toEqual([2]);
    s.answerAll();
    await until(() => d.stats.flushed === 4);
    expect(calls).toEqual([2, 2]);
  });

  it('a failed record keeps its results and is tried again after four polls, and the failure is logged', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 2, endpointConcurrency: 1, pollMs: 25 });
    const ids = [(await endpointWith(1)).id, (await endpointWith(1)).id];
    const calls: { n: number; at: number }[] = [];
    hooks.record = async (real, db, results) => {
      calls.push({ n: results.length, at: performance.now() });
      if (calls.length === 1) throw new Error('database down');
      return real(db as Parameters<typeof real>[0], results);
    };
    expect(await d.runOnce()).toBe(2);
    s.answerAll();
    await until(() => d.stats.flushed === 2);
    expect(calls.map((c) => c.n)).toEqual([2, 2]);
    const waited = calls[1].at - calls[0].at;
    expect(waited).toBeGreaterThanOrEqual(95); // 4 x 25 ms
    expect(waited).toBeLessThan(900); // not the 1 s bound
    expect(logged).toEqual([{ msg: 'recording webhook attempts failed; retrying', obj: { err: expect.objectContaining({ message: 'database down' }), count: 2 } }]);
    expect(d.stats).toMatchObject({ flushes: 1, flushed: 2 });
    expect((await rowsOf(ids)).map((r) => r.status)).toEqual(['success', 'success']);
  });

  it('a stopping deliverer that cannot give its waiting rows back logs it; the run waiting for the endpoint ends with the next attempt', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 8, endpointConcurrency: 3, pollMs: 30_000 });
    const a = await endpointWith(6);
    let returned: number | undefined;
    const run = d.runOnce().then((n) => { returned = n; });
    await until(() => s.open.length === 3);
    hooks.release = async () => { throw new Error('release down'); };
    const drained = d.drain(5_000);
    // One attempt ends: the endpoint holds 5 of its 6, too many to claim again, but the deliverer is stopping.
    s.answer(a.id);
    await until(() => returned !== undefined, 5_000);
    expect(returned).toBe(6);
    s.answerAll();
    await drained;
    await run;
    expect(logged).toEqual([{ msg: 'releasing unattempted webhook claims failed; their leases will lapse', obj: { err: expect.objectContaining({ message: 'release down' }) } }]);
  });

  it('its caches of paces and secrets are bounded: past 10,000 entries they start over', async () => {
    const s = scriptedSender();
    const d = deliverer(s, { concurrency: 2, endpointConcurrency: 1 });
    const { pace, secrets } = internals(d);
    for (let i = 0; i < 10_000; i++) {
      pace.set(`p${i}`, { ms: 1_000, progressAt: 0 });
      secrets.set(`s${i}`, 'x');
    }
    const a = await endpointWith(1, 0, { secret: 'whsec_a' });
    expect(await d.runOnce()).toBe(1);
    s.answer(a.id);
    await settled();
    expect([pace.size, secrets.size]).toEqual([10_001, 10_001]);
    const b = await endpointWith(1, 0, { secret: 'whsec_b' });
    expect(await d.runOnce()).toBe(1);
    s.answer(b.id);
    await settled();
    expect([[...pace.keys()], [...secrets.values()]]).toEqual([[b.id], ['whsec_b']]);
  });
});
