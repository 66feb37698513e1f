import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pino from 'pino';
import { startProcessLiveness } from '../src/db/process-liveness.ts';
import { IdempotencyStore, shouldKeepResponse } from '../src/http/idempotency.ts';
import { itOnPostgresServer, startTestApp, type TestApp } from './helpers/app.ts';

/**
 * The Idempotency-Key store's rules on the real database, with short TTL and lock times: the first
 * request claims, a kept response replays byte for byte (encrypted at rest), the same key with
 * another request is a conflict, a key still running is a conflict (with Retry-After) while its
 * process lives and its lock lasts and is then taken over with the resource it recorded, an
 * expired key is claimed afresh, and expired keys are swept in batches. Which responses are kept, and which keys are valid, are written out in full.
 */
describe('idempotency store', () => {
  let t: TestApp;
  const secretsKey = randomBytes(32);
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t?.close(); });

  const store = (ttlMs = 60_000, lockMs = 60_000) => new IdempotencyStore(t.deps.db, t.deps.liveness, ttlMs, lockMs, secretsKey);
  const request = (over: Partial<Parameters<IdempotencyStore['claim']>[0]> = {}) =>
    ({ tenantId: randomUUID(), key: `k-${randomUUID()}`, method: 'POST', path: '/api/v1/public/contacts', body: { phone: '+14155550100' }, ...over });
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
  const row = (tenantId: string, key: string) =>
    t.deps.db.selectFrom('idempotency_keys').selectAll().where('tenant_id', '=', tenantId).where('key', '=', key).executeTakeFirst();

  it('keeps 2xx and 4xx responses except 429; releases on 1xx, 3xx, 429 and 5xx', () => {
    const kept = [200, 201, 204, 299, 400, 404, 409, 422, 428, 430, 499];
    const released = [100, 199, 300, 304, 399, 429, 500, 502, 503, 599];
    expect(kept.filter((s) => !shouldKeepResponse(s))).toEqual([]);
    expect(released.filter((s) => shouldKeepResponse(s))).toEqual([]);
  });

  it('a key is 1 to 255 printable ASCII characters without spaces', () => {
    for (const ok of ['a', '!', '~', 'x'.repeat(255), 'order-42:retry/1', randomUUID()]) expect(IdempotencyStore.validKey(ok), ok).toBe(true);
    for (const bad of ['', 'x'.repeat(256), 'has space', 'tab\t', '\x7f', 'é', 'line\n', ' lead']) expect(IdempotencyStore.validKey(bad), JSON.stringify(bad)).toBe(false);
  });

  it('the first request claims; once completed, the same request replays the kept response exactly', async () => {
    const s = store();
    const req = request();
    expect(await s.claim(req)).toEqual({ kind: 'claimed', resourceId: null });
    const stored = await row(req.tenantId, req.key);
    expect(stored).toMatchObject({ state: 'running', method: 'POST', path: req.path });
    expect(stored!.locked_until!.getTime()).toBeGreaterThan(Date.now() + 50_000);
    const body = '{"id":"c1","secret":"whsec_abc"}';
    await s.complete(req.tenantId, req.key, 201, { 'content-type': 'application/json', location: '/c1' }, body);
    const done = await row(req.tenantId, req.key);
    expect(done).toMatchObject({ state: 'done', response_status: 201, locked_until: null });
    expect(done!.response_body).not.toContain('whsec_abc'); // encrypted at rest
    expect(await s.claim(req)).toEqual({ kind: 'replay', status: 201, headers: { 'content-type': 'application/json', location: '/c1' }, body });
    expect(await s.claim({ ...req, body: { phone: '+14155550100' } })).toMatchObject({ kind: 'replay' }); // an equal body
  });

  it('the same key with another body, method or path is a conflict; another tenant\'s key is independent', async () => {
    const s = store();
    const req = request();
    await s.claim(req);
    await s.complete(req.tenantId, req.key, 200, {}, '{}');
    for (const other of [{ body: { phone: '+14155550101' } }, { body: undefined }, { method: 'PUT' }, { path: '/api/v1/public/templates' }]) {
      await expect(s.claim({ ...req, ...other }), JSON.stringify(other)).rejects.toMatchObject({ code: 'CONFLICT', message: 'Idempotency-Key was already used with a different request' });
    }
    expect(await s.claim({ ...req, tenantId: randomUUID() })).toEqual({ kind: 'claimed', resourceId: null });
  });

  it('a missing body and a null body are the same request', async () => {
    const s = store();
    const req = request({ body: undefined });
    await s.claim(req);
    await s.complete(req.tenantId, req.key, 204, {}, '');
    expect(await s.claim({ ...req, body: null })).toEqual({ kind: 'replay', status: 204, headers: {}, body: '' });
  });

  it('a key still running is a conflict until its lock expires; then it is taken over with the resource it recorded', async () => {
    const s = store(60_000, 300);
    const req = request();
    await s.claim(req);
    await expect(s.claim(req)).rejects.toMatchObject({ code: 'CONFLICT', message: 'A request with this Idempotency-Key is still being processed' });
    const resourceId = randomUUID();
    await t.deps.db.transaction().execute((tx) => s.attachResource(tx, req.tenantId, req.key, resourceId));
    await sleep(400);
    expect(await s.claim(req)).toEqual({ kind: 'claimed', resourceId });
    // The takeover renewed the lock: a third request is refused again.
    await expect(s.claim(req)).rejects.toMatchObject({ code: 'CONFLICT' });
    expect((await row(req.tenantId, req.key))!.locked_until!.getTime()).toBeGreaterThan(Date.now() + 100);
  });

  it('a key running in this live process is refused with Retry-After, however long it has run within the lock', async () => {
    const s = store();
    const req = request();
    await s.claim(req);
    expect((await row(req.tenantId, req.key))!.owner_process_id).toBe(t.deps.liveness.processId);
    const refused = await s.claim(req).catch((e: unknown) => e);
    expect(refused).toMatchObject({ code: 'CONFLICT', status: 409, message: 'A request with this Idempotency-Key is still being processed', retryAfterSeconds: 1 });
  });

  it('a key whose process is gone is taken over at once (its lock far from expiry), with the resource it recorded', async () => {
    const s = store();
    const req = request();
    await s.claim(req);
    const resourceId = randomUUID();
    await t.deps.db.transaction().execute((tx) => s.attachResource(tx, req.tenantId, req.key, resourceId));
    // A process id no running process holds: one that ended.
    const gone = randomUUID();
    await t.deps.db.updateTable('idempotency_keys').set({ owner_process_id: gone }).where('tenant_id', '=', req.tenantId).where('key', '=', req.key).execute();
    expect(await s.claim(req)).toEqual({ kind: 'claimed', resourceId });
    const taken = await row(req.tenantId, req.key);
    expect(taken).toMatchObject({ state: 'running', owner_process_id: t.deps.liveness.processId });
    expect(taken!.locked_until!.getTime()).toBeGreaterThan(Date.now() + 50_000);
    // Now owned by a live process: refused again.
    await expect(s.claim(req)).rejects.toMatchObject({ code: 'CONFLICT', retryAfterSeconds: 1 });
  });

  it('retries racing for a dead process\'s key: exactly one takes it over, the others are refused with Retry-After', async () => {
    const s = store();
    const req = request();
    await s.claim(req);
    await t.deps.db.updateTable('idempotency_keys').set({ owner_process_id: randomUUID() }).where('tenant_id', '=', req.tenantId).where('key', '=', req.key).execute();
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => s.claim(req)));
    expect(results.filter((r) => r.status === 'fulfilled').map((r) => r.value)).toEqual([{ kind: 'claimed', resourceId: null }]);
    for (const r of results.filter((r) => r.status === 'rejected')) expect(r.reason).toMatchObject({ code: 'CONFLICT', retryAfterSeconds: 1 });
  });

  it('a key claimed before owners were recorded (no owner) still waits for its lock', async () => {
    const s = store(60_000, 300);
    const req = request();
    await s.claim(req);
    await t.deps.db.updateTable('idempotency_keys').set({ owner_process_id: null }).where('tenant_id', '=', req.tenantId).where('key', '=', req.key).execute();
    await expect(s.claim(req)).rejects.toMatchObject({ code: 'CONFLICT', retryAfterSeconds: 1 });
    await sleep(400);
    expect(await s.claim(req)).toEqual({ kind: 'claimed', resourceId: null });
  });

  itOnPostgresServer('a second process on the same database (PGlite serves one)')('a key owned by another live process is refused until that process ends, then taken over at once', async () => {
    const other = await startProcessLiveness({ databaseUrl: t.config.databaseUrl, db: t.deps.db, logger: pino({ level: 'silent' }) });
    try {
      const mine = store();
      const theirs = new IdempotencyStore(t.deps.db, other, 60_000, 60_000, secretsKey);
      const req = request();
      expect(await theirs.claim(req)).toEqual({ kind: 'claimed', resourceId: null });
      expect((await row(req.tenantId, req.key))!.owner_process_id).toBe(other.processId);
      await expect(mine.claim(req)).rejects.toMatchObject({ code: 'CONFLICT', retryAfterSeconds: 1 });
      await other.close();
      expect(await mine.claim(req)).toEqual({ kind: 'claimed', resourceId: null });
      expect((await row(req.tenantId, req.key))!.owner_process_id).toBe(t.deps.liveness.processId);
    } finally {
      await other.close();
    }
  });

  it('after the TTL a kept key is claimed afresh, even by another request', async () => {
    const s = store(300, 60_000);
    const req = request();
    await s.claim(req);
    await s.complete(req.tenantId, req.key, 201, {}, '{"id":"old"}');
    expect(await s.claim(req)).toMatchObject({ kind: 'replay' });
    await sleep(400);
    expect(await s.claim({ ...req, body: { other: true } })).toEqual({ kind: 'claimed', resourceId: null });
    expect(await row(req.tenantId, req.key)).toMatchObject({ state: 'running', response_status: null });
  });

  it('a released key runs again', async () => {
    const s = store();
    const req = request();
    await s.claim(req);
    await s.release(req.tenantId, req.key);
    expect(await row(req.tenantId, req.key)).toBeUndefined();
    expect(await s.claim({ ...req, body: { other: true } })).toEqual({ kind: 'claimed', resourceId: null });
  });

  it('completing inside a transaction that rolls back keeps nothing', async () => {
    const s = store();
    const req = request();
    await s.claim(req);
    await t.deps.db.transaction().execute(async (tx) => {
      await s.complete(req.tenantId, req.key, 201, {}, '{}', tx);
      throw new Error('rolled back');
    }).catch(() => {});
    expect(await row(req.tenantId, req.key)).toMatchObject({ state: 'running' });
  });

  it('sweeps expired keys in batches and leaves the others', async () => {
    const tenantId = randomUUID();
    const old = new Date(Date.now() - 3_600_000);
    await t.deps.db.insertInto('idempotency_keys').values([0, 1, 2].map((i) => ({
      tenant_id: tenantId, key: `old-${i}`, method: 'POST', path: '/p', request_hash: 'h', state: 'done', created_at: old,
    }))).execute();
    const fresh = request({ tenantId });
    // Keys older than 30 minutes: ours (an hour old), not those of test files running now.
    const s = store(1_800_000);
    await s.claim(fresh);
    // At least our three are due: a batch of two removes exactly two.
    expect(await s.sweepExpired(2)).toBe(2);
    let left = 3;
    for (let i = 0; i < 100 && left > 0; i++) {
      await s.sweepExpired();
      left = (await Promise.all([0, 1, 2].map((n) => row(tenantId, `old-${n}`)))).filter(Boolean).length;
    }
    expect(left).toBe(0);
    expect(await row(tenantId, fresh.key)).toBeDefined();
  });
});
