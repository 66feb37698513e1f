import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AUTO_DISABLE_AFTER, claimDueDeliveries, recordAttemptResults, type AttemptResult, type ClaimedDelivery } from '../src/modules/webhooks/webhooks.queue.ts';
import { call, createTenant, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { createOwnDatabase } from './helpers/own-database.ts';

/**
 * Recording a batch of attempt outcomes (one statement: the delivery rows and the endpoint's failure
 * count). No deliverer runs on this database: the test claims rows and records outcomes it chooses,
 * in the order it chooses, which is what "consecutive" means within a batch.
 */
describe('recording a batch of webhook attempt outcomes (own database, no deliverer)', () => {
  let database: Awaited<ReturnType<typeof createOwnDatabase>>;
  let t: TestApp;

  beforeAll(async () => {
    database = await createOwnDatabase('msvc_wh_record');
    t = await startTestApp({ DATABASE_URL: database.url, WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true' });
  });
  afterAll(async () => {
    await t?.close();
    await database?.drop();
  });

  /** A new endpoint with `events` due deliveries, all claimed; its failure count set to `failures`. */
  async function claimedRows(events: number, failures: number) {
    const tenant = await createTenant(t.app);
    const created = await call(t.app, tenant, 'POST', '/webhooks', { url: 'https://127.0.0.1:9/record', events: ['contact.created'] });
    expect(created.statusCode).toBe(201);
    const endpointId = created.json().data.id as string;
    const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: Array.from({ length: events }, () => ({ first_name: 'Record', phone: uniquePhone() })) });
    expect(bulk.json().created).toBe(events);
    await t.deps.db.updateTable('webhook_endpoints').set({ consecutive_failures: failures }).where('id', '=', endpointId).execute();
    const rows = await claimDueDeliveries(t.deps.db, { kind: 'first', limit: 1000, endpointCap: 1000, leaseMs: 60_000 });
    const own = rows.filter((r) => r.endpoint_id === endpointId);
    expect(own).toHaveLength(events);
    return { endpointId, rows: own };
  }
  const outcome = (delivery: ClaimedDelivery, ok: boolean, retryDelayMs: number | null = 60_000): AttemptResult => ok
    ? { delivery, ok, statusCode: 200, responseTimeMs: 3, responseBody: 'ok', errorClass: null, errorMessage: null, retryDelayMs: null }
    : { delivery, ok, statusCode: 500, responseTimeMs: 4, responseBody: 'no', errorClass: 'http_status', errorMessage: 'Endpoint answered HTTP 500', retryDelayMs };
  const endpoint = (id: string) => t.deps.db.selectFrom('webhook_endpoints').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const delivery = (id: string) => t.deps.db.selectFrom('webhook_deliveries').selectAll().where('id', '=', id).executeTakeFirstOrThrow();

  it('failures only: the count grows by the batch\'s failures; each row is retrying, one attempt made, due after its delay', async () => {
    const { endpointId, rows } = await claimedRows(2, 3);
    const before = Date.now();
    expect(await recordAttemptResults(t.deps.db, rows.map((r) => outcome(r, false)))).toBe(2);
    expect(await endpoint(endpointId)).toMatchObject({ consecutive_failures: 5, is_active: true, last_success_at: null });
    expect((await endpoint(endpointId)).last_failure_at).not.toBeNull();
    for (const r of rows) {
      const d = await delivery(r.id);
      expect(d).toMatchObject({ status: 'retrying', attempt_number: 1, lease_until: null, response_status_code: 500, error_class: 'http_status', completed_at: null });
      expect(d.next_attempt_at!.getTime()).toBeGreaterThanOrEqual(before + 60_000 - 1_000);
      expect(d.next_attempt_at!.getTime()).toBeLessThanOrEqual(Date.now() + 60_000 + 1_000);
    }
  });

  it('a success within the batch: the count is the failures after the last success, in the batch\'s order', async () => {
    const { endpointId, rows } = await claimedRows(5, 7);
    const [a, b, c, d, e] = rows;
    // fail, success, fail, success, fail: one failure after the last success.
    expect(await recordAttemptResults(t.deps.db, [outcome(a, false), outcome(b, true), outcome(c, false), outcome(d, true), outcome(e, false)])).toBe(5);
    expect(await endpoint(endpointId)).toMatchObject({ consecutive_failures: 1, is_active: true });
    expect((await endpoint(endpointId)).last_success_at).not.toBeNull();
    expect(await delivery(b.id)).toMatchObject({ status: 'success', attempt_number: 1, next_attempt_at: null, response_body: 'ok' });
    expect((await delivery(b.id)).completed_at).not.toBeNull();
    expect(await delivery(c.id)).toMatchObject({ status: 'retrying', attempt_number: 1 });
    // Successes first, then failures: only the trailing failures count.
    const more = await claimedRows(3, 4);
    const [x, y, z] = more.rows;
    await recordAttemptResults(t.deps.db, [outcome(x, true), outcome(y, false), outcome(z, false)]);
    expect(await endpoint(more.endpointId)).toMatchObject({ consecutive_failures: 2 });
  });

  it(`the ${AUTO_DISABLE_AFTER}th consecutive failure disables the endpoint; a last attempt is abandoned`, async () => {
    const { endpointId, rows } = await claimedRows(2, AUTO_DISABLE_AFTER - 2);
    await recordAttemptResults(t.deps.db, [outcome(rows[0], false)]);
    expect(await endpoint(endpointId)).toMatchObject({ consecutive_failures: AUTO_DISABLE_AFTER - 1, is_active: true, updated_at: null });
    await recordAttemptResults(t.deps.db, [outcome(rows[1], false, null)]);
    const disabled = await endpoint(endpointId);
    expect(disabled).toMatchObject({ consecutive_failures: AUTO_DISABLE_AFTER, is_active: false });
    expect(disabled.updated_at).not.toBeNull();
    const abandoned = await delivery(rows[1].id);
    expect(abandoned).toMatchObject({ status: 'abandoned', attempt_number: 1, next_attempt_at: null });
    expect(abandoned.completed_at).not.toBeNull();
  });

  it('a stale result (its attempt already recorded, or the row changed since its claim) is dropped and counts for nothing', async () => {
    const { endpointId, rows } = await claimedRows(2, 0);
    await recordAttemptResults(t.deps.db, [outcome(rows[0], true)]);
    // The same claim's outcome again: the row has moved on (attempt 1 recorded).
    expect(await recordAttemptResults(t.deps.db, [outcome(rows[0], false)])).toBe(0);
    expect(await delivery(rows[0].id)).toMatchObject({ status: 'success', attempt_number: 1 });
    // A row updated since its claim (here: its endpoint deleted, the row closed as failed).
    await t.deps.db.updateTable('webhook_deliveries').set({ status: 'failed', next_attempt_at: null }).where('id', '=', rows[1].id).execute();
    expect(await recordAttemptResults(t.deps.db, [outcome(rows[1], false)])).toBe(0);
    expect(await delivery(rows[1].id)).toMatchObject({ status: 'failed', attempt_number: 0 });
    expect(await endpoint(endpointId)).toMatchObject({ consecutive_failures: 0, last_failure_at: null });
  });
});
