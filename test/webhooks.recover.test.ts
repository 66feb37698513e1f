import { sql } from 'kysely';
import pg from 'pg';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWebhookDeliverer } from '../src/worker.ts';
import { startLoops, type RunningLoops } from '../src/workers/loop.ts';
import { call, createTenant, eventually, itOnPostgresServer, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { startReceiver, type Receiver } from './helpers/https-receiver.ts';
import { createOwnDatabase } from './helpers/own-database.ts';

describe('POST /webhooks/{id}/recover (own database, real receiver and deliverer)', () => {
  let database: Awaited<ReturnType<typeof createOwnDatabase>>;
  let receiver: Receiver;
  let t: TestApp;
  let loops: RunningLoops | null = null;
  let pathCounter = 0;

  beforeAll(async () => {
    database = await createOwnDatabase('msvc_wh_recover');
    receiver = await startReceiver();
    t = await startTestApp({
      DATABASE_URL: database.url,
      WEBHOOK_DELIVERY_ENABLED: 'true',
      WEBHOOK_EXTRA_CA_FILE: receiver.caFile,
      WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
      // Two attempts, then abandoned.
      WEBHOOK_RETRY_DELAYS_MS: '20',
      WEBHOOK_TIMEOUT_MS: '1000',
      WEBHOOK_LEASE_MS: '3000',
      WEBHOOK_POLL_MS: '20',
    });
    loops = startLoops([createWebhookDeliverer(t.deps).loop()], 20, pino({ level: 'silent' }));
  });
  afterAll(async () => {
    await loops?.stop();
    await t?.close();
    await receiver?.close();
    await database?.drop();
  });

  const db = () => t.deps.db;
  const freshPath = (name: string) => `/${name}-${++pathCounter}`;
  async function endpointFor(tenant: TestTenant, path: string) {
    const res = await call(t.app, tenant, 'POST', '/webhooks', { url: receiver.url(path), events: ['contact.created'] });
    expect(res.statusCode).toBe(201);
    return res.json().data.id as string;
  }
  async function createContacts(tenant: TestTenant, n: number) {
    const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: Array.from({ length: n }, () => ({ first_name: 'Recover', phone: uniquePhone() })) });
    expect(bulk.json().created).toBe(n);
  }
  const deliveriesOf = (endpointId: string) =>
    db().selectFrom('webhook_deliveries').selectAll().where('endpoint_id', '=', endpointId).orderBy('created_at').orderBy('id').execute();
  /** Waits until the endpoint has `n` deliveries and none is still open. */
  const settled = (endpointId: string, n: number) => eventually(async () => {
    const rows = await deliveriesOf(endpointId);
    return rows.length === n && rows.every((r) => !['pending', 'retrying'].includes(r.status)) && rows;
  });
  const setCreatedAt = (id: string, at: Date) => sql`UPDATE webhook_deliveries SET created_at = ${at} WHERE id = ${id}`.execute(db());
  const recover = (tenant: TestTenant, endpointId: string, body: unknown, headers: Record<string, string> = {}) =>
    call(t.app, tenant, 'POST', `/webhooks/${endpointId}/recover`, body, headers);
  const eventIdOf = (body: string) => JSON.parse(body).id as string;

  it('re-queues the failed and abandoned deliveries of the window once each, and they are delivered with the original bytes', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('outage');
    receiver.behave(path, 503);
    const endpointId = await endpointFor(tenant, path);
    const otherPath = freshPath('outage-other');
    receiver.behave(otherPath, 503);
    const otherEndpointId = await endpointFor(tenant, otherPath);
    await createContacts(tenant, 6);
    const abandoned = await settled(endpointId, 6);
    expect(abandoned.every((r) => r.status === 'abandoned' && r.attempt_number === 2)).toBe(true);
    await settled(otherEndpointId, 6);
    await call(t.app, tenant, 'PUT', `/webhooks/${otherEndpointId}`, { active: false }); // it takes no more events
    receiver.behave(path, 200);
    await createContacts(tenant, 2);
    const all = await settled(endpointId, 8);
    const successes = all.filter((r) => r.status === 'success');
    expect(successes).toHaveLength(2);
    // A test event that failed: never replayed.
    receiver.behave(path, 500);
    const test = await call(t.app, tenant, 'POST', `/webhooks/${endpointId}/test`);
    expect(test.json().delivered).toBe(false);
    receiver.behave(path, 200);

    // Place the deliveries in time around a window [since, until].
    const since = new Date(Date.now() - 2 * 3600_000);
    const until = new Date(Date.now() - 3600_000);
    const minutes = (m: number, from = since) => new Date(from.getTime() + m * 60_000);
    const [a1, a2, a3, a4, a5, a6] = abandoned;
    await setCreatedAt(a1.id, minutes(1));
    await setCreatedAt(a2.id, minutes(2));
    // A delivery closed as failed (status 'failed') is recovered like an abandoned one.
    await setCreatedAt(a3.id, minutes(3));
    await db().updateTable('webhook_deliveries').set({ status: 'failed' }).where('id', '=', a3.id).execute();
    await setCreatedAt(a4.id, minutes(-1)); // before the window
    await setCreatedAt(a5.id, minutes(1, until)); // after it
    await setCreatedAt(a6.id, since); // on its first instant
    for (const s of successes) await setCreatedAt(s.id, minutes(4));
    await setCreatedAt(test.json().delivery_id, minutes(5));
    for (const r of await deliveriesOf(otherEndpointId)) await setCreatedAt(r.id, minutes(6));

    const before = receiver.at(path).length;
    const res = await recover(tenant, endpointId, { since: since.toISOString(), until: until.toISOString() });
    expect(res.statusCode).toBe(202);
    expect(res.json()).toEqual({ message: '4 deliveries queued for redelivery', queued: 4 });

    const recovered = [a1, a2, a3, a6];
    const replays = await eventually(async () => {
      const rows = (await deliveriesOf(endpointId)).filter((r) => r.replay_of !== null);
      return rows.length === 4 && rows.every((r) => r.status === 'success') && rows;
    });
    expect(replays.map((r) => r.replay_of).sort()).toEqual(recovered.map((r) => r.id).sort());
    for (const replay of replays) {
      const original = recovered.find((r) => r.id === replay.replay_of)!;
      expect(replay).toMatchObject({ event_id: original.event_id, event_type: 'contact.created', attempt_number: 1, request_url: receiver.url(path), is_test: false });
    }
    // Received exactly once each, with the bytes the failed attempts carried.
    const received = receiver.at(path).slice(before);
    expect(received).toHaveLength(4);
    const originalBodies = new Map(receiver.at(path).slice(0, before).map((r) => [eventIdOf(r.body), r.body]));
    expect(received.map((r) => eventIdOf(r.body)).sort()).toEqual(recovered.map((r) => r.event_id).sort());
    for (const r of received) expect(r.body).toBe(originalBodies.get(eventIdOf(r.body)));
    // The originals are untouched; nothing was queued for the other endpoint.
    const originals = (await deliveriesOf(endpointId)).filter((r) => recovered.some((o) => o.id === r.id));
    expect(originals.map((r) => r.status).sort()).toEqual(['abandoned', 'abandoned', 'abandoned', 'failed']);
    expect(await deliveriesOf(otherEndpointId)).toHaveLength(6);

    // The same call again queues nothing: each delivery is recovered once.
    const again = await recover(tenant, endpointId, { since: since.toISOString(), until: until.toISOString() });
    expect(again.statusCode).toBe(202);
    expect(again.json()).toEqual({ message: '0 deliveries queued for redelivery', queued: 0 });

    // Without `until`, the window runs to now: only a5 is new to it (a4 is before `since`; the
    // replays just made succeeded).
    const open = await recover(tenant, endpointId, { since: since.toISOString() });
    expect(open.json()).toEqual({ message: '1 delivery queued for redelivery', queued: 1 });
    await eventually(async () => (await deliveriesOf(endpointId)).some((r) => r.replay_of === a5.id && r.status === 'success'));
    expect((await recover(tenant, endpointId, { since: since.toISOString() })).json().queued).toBe(0);
    expect(receiver.at(path).length).toBe(before + 5);
  });

  it('an inactive endpoint gets its deliveries queued, to be sent once it is re-enabled', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('disabled');
    receiver.behave(path, 503);
    const endpointId = await endpointFor(tenant, path);
    await createContacts(tenant, 2);
    await settled(endpointId, 2);
    await call(t.app, tenant, 'PUT', `/webhooks/${endpointId}`, { active: false });
    receiver.behave(path, 200);
    const res = await recover(tenant, endpointId, { since: new Date(Date.now() - 60_000).toISOString() });
    expect(res.statusCode).toBe(202);
    expect(res.json()).toEqual({ message: '2 deliveries queued for redelivery; they are sent once the endpoint is re-enabled', queued: 2 });
    expect((await deliveriesOf(endpointId)).filter((r) => r.status === 'pending')).toHaveLength(2);
    await call(t.app, tenant, 'PUT', `/webhooks/${endpointId}`, { active: true });
    await eventually(async () => (await deliveriesOf(endpointId)).filter((r) => r.status === 'success').length === 2);
  });

  it('honours Idempotency-Key: the same key replays the first answer instead of recovering again', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('idempotent');
    receiver.behave(path, 503);
    const endpointId = await endpointFor(tenant, path);
    await createContacts(tenant, 3);
    await settled(endpointId, 3);
    const body = { since: new Date(Date.now() - 60_000).toISOString() };
    const headers = { 'idempotency-key': `recover-${endpointId}` };
    const first = await recover(tenant, endpointId, body, headers);
    expect(first.statusCode).toBe(202);
    expect(first.json().queued).toBe(3);
    const replay = await recover(tenant, endpointId, body, headers);
    expect(replay.statusCode).toBe(202);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.json()).toEqual(first.json());
    expect((await deliveriesOf(endpointId)).filter((r) => r.replay_of !== null)).toHaveLength(3);
  });

  itOnPostgresServer('a table lock held from a second connection')('two concurrent calls for one endpoint queue each delivery once between them', async () => {
    const tenant = await createTenant(t.app);
    const path = freshPath('concurrent');
    receiver.behave(path, 503);
    const endpointId = await endpointFor(tenant, path);
    await createContacts(tenant, 5);
    await settled(endpointId, 5);
    const body = { since: new Date(Date.now() - 60_000).toISOString() };
    // Hold every write to the deliveries table until both calls have reached the database, so
    // both would run their INSERT ... SELECT at the same moment if nothing serialised them.
    const blocker = new pg.Client({ connectionString: database.url });
    await blocker.connect();
    try {
      await blocker.query('BEGIN');
      await blocker.query('LOCK TABLE webhook_deliveries IN SHARE MODE');
      const calls = Promise.all([recover(tenant, endpointId, body), recover(tenant, endpointId, body)]);
      await eventually(async () => {
        // (A transaction sees pg_stat_activity as of its first read: clear that snapshot each time.)
        await blocker.query('SELECT pg_stat_clear_snapshot()');
        const { rows } = await blocker.query(`SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'
          AND (query LIKE '%pg_advisory_xact_lock%' OR query LIKE '%INSERT INTO webhook_deliveries%replay_of%')`);
        return rows[0].n >= 2;
      });
      await blocker.query('COMMIT');
      const [a, b] = await calls;
      expect([a.statusCode, b.statusCode]).toEqual([202, 202]);
      expect([a.json().queued, b.json().queued].sort()).toEqual([0, 5]);
    } finally {
      await blocker.end();
    }
    expect((await deliveriesOf(endpointId)).filter((r) => r.replay_of !== null)).toHaveLength(5);
  });

  it('validates the window (400 envelope)', async () => {
    const tenant = await createTenant(t.app);
    const endpointId = await endpointFor(tenant, freshPath('validation'));
    for (const body of [{}, { until: new Date().toISOString() }, { since: 'yesterday' }, { since: '2026-01-01' }, { since: 12 }, { since: new Date().toISOString(), until: 'soon' }]) {
      const res = await recover(tenant, endpointId, body);
      expect(res.statusCode, JSON.stringify(body)).toBe(400);
      expect(res.json()).toMatchObject({ success: false, error: { code: 'VALIDATION_ERROR' } });
    }
    const reversed = await recover(tenant, endpointId, { since: '2026-01-02T00:00:00Z', until: '2026-01-01T23:59:59Z' });
    expect(reversed.statusCode).toBe(400);
    expect(reversed.json()).toMatchObject({ success: false, error: { code: 'VALIDATION_ERROR', message: 'until must not be before since' } });
    expect(reversed.json().error.details[0].loc).toEqual(['body', 'until']);
    expect(reversed.headers['x-request-id']).toBeTruthy();
    // An offset the database cannot store is a 400 too, and an empty window is fine.
    expect((await recover(tenant, endpointId, { since: '2026-01-01T00:00:00+16:00' })).statusCode).toBe(400);
    const instant = await recover(tenant, endpointId, { since: '2026-01-01T00:00:00Z', until: '2026-01-01T01:00:00+01:00' });
    expect(instant.statusCode).toBe(202);
    expect(instant.json().queued).toBe(0);
  });

  it('404 for another tenant\'s, a deleted or an unknown endpoint; 403 without webhooks:write or without the plan', async () => {
    const owner = await createTenant(t.app);
    const path = freshPath('foreign');
    receiver.behave(path, 503);
    const endpointId = await endpointFor(owner, path);
    await createContacts(owner, 1);
    await settled(endpointId, 1);
    const body = { since: new Date(Date.now() - 60_000).toISOString() };

    const other = await createTenant(t.app);
    const foreign = await recover(other, endpointId, body);
    expect(foreign.statusCode).toBe(404);
    expect(foreign.json()).toMatchObject({ success: false, error: { code: 'NOT_FOUND' } });
    expect((await recover(owner, '00000000-0000-4000-8000-000000000000', body)).statusCode).toBe(404);
    expect((await recover(owner, 'not-a-uuid', body)).statusCode).toBe(404);

    const readOnly = await createTenant(t.app, { scopes: ['webhooks:read'] });
    const forbidden = await recover(readOnly, endpointId, body);
    expect(forbidden.statusCode).toBe(403);
    expect(forbidden.json().error).toMatchObject({ code: 'FORBIDDEN', required_permissions: ['webhooks:write'] });
    const starter = await createTenant(t.app, { plan: 'starter' });
    const upgrade = await recover(starter, endpointId, body);
    expect(upgrade.statusCode).toBe(403);
    expect(upgrade.json().error).toMatchObject({ code: 'UPGRADE_REQUIRED', feature_key: 'webhooks' });
    expect(await deliveriesOf(endpointId)).toHaveLength(1);

    await call(t.app, owner, 'DELETE', `/webhooks/${endpointId}`);
    expect((await recover(owner, endpointId, body)).statusCode).toBe(404);
    expect(await deliveriesOf(endpointId)).toHaveLength(1);
  });
});
