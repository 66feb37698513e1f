import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { envelopeJson } from '../src/events/events.ts';
import { applyMessageStatuses, STATUS_RANK, statusEventData, type StatusUpdate } from '../src/modules/messages/messages.statuses.ts';
import { call, createTenant, startTestApp, type TestApp, type TestTenant } from './helpers/app.ts';
import { eventsOf } from './helpers/upstream.ts';

/**
 * The status rules themselves (ARCHITECTURE 4, spec 6.1), on real PostgreSQL rows without the
 * upstream: a message only moves forward, failed is final, each step emits its event with its own
 * timestamp, and a callback reaches only its own tenant's message.
 */
describe('applyMessageStatuses: monotonic message statuses', () => {
  let t: TestApp;
  let tenant: TestTenant;
  beforeAll(async () => {
    t = await startTestApp();
    tenant = await createTenant(t.app);
  });
  afterAll(async () => { await t?.close(); });

  const at = (s: number) => new Date(1_700_000_000_000 + s * 1000);
  async function message(tenantId = tenant.id, options: { wamid?: string | null; status?: keyof typeof STATUS_RANK; campaignId?: string } = {}) {
    const id = randomUUID();
    const wamid = options.wamid === undefined ? `wamid.${randomUUID()}` : options.wamid;
    const status = options.status ?? 'accepted';
    await t.deps.db.insertInto('messages').values({
      id, tenant_id: tenantId, template_name: 'order_update', language: 'en', to_phone: '+14155550100',
      upstream_message_id: wamid, status, status_rank: STATUS_RANK[status], campaign_id: options.campaignId ?? null,
    }).execute();
    return { id, wamid: wamid ?? `wamid.${randomUUID()}` };
  }
  const apply = (updates: StatusUpdate[], tenantId = tenant.id) =>
    t.deps.db.transaction().execute((tx) => applyMessageStatuses(tx, tenantId, updates));
  const row = (id: string) => t.deps.db.selectFrom('messages').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const update = (wamid: string, status: StatusUpdate['status'], s: number, extra: Partial<StatusUpdate> = {}): StatusUpdate =>
    ({ upstreamMessageId: wamid, status, timestamp: at(s), callbackData: null, ...extra });
  const eventsFor = async (wamid: string) => (await eventsOf(t.deps, tenant.id))
    .filter((e) => (e.data as { message_id?: string }).message_id === wamid);

  it('the rank order is accepted < sent < delivered < read < failed', () => {
    expect(STATUS_RANK).toEqual({ accepted: 0, sent: 1, delivered: 2, read: 3, failed: 4 });
  });

  it('an empty batch changes and reports nothing', async () => {
    expect(await apply([])).toEqual({ applied: [], unknown: [] });
  });

  it('each forward step is stored with its timestamp and emits its event with exactly the documented data', async () => {
    const m = await message();
    for (const [status, s] of [['sent', 1], ['delivered', 2], ['read', 3]] as const) {
      const { applied, unknown } = await apply([update(m.wamid, status, s)]);
      expect(unknown).toEqual([]);
      expect(applied).toEqual([{
        messageRowId: m.id, upstreamMessageId: m.wamid, status, timestamp: at(s), to: '+14155550100',
        contactId: null, campaignId: null, templateName: 'order_update', error: null,
      }]);
      expect(await row(m.id)).toMatchObject({ status, status_rank: STATUS_RANK[status], [`${status}_at`]: at(s), error_code: null, error_title: null });
    }
    const stored = await row(m.id);
    expect([stored.sent_at, stored.delivered_at, stored.read_at, stored.failed_at]).toEqual([at(1), at(2), at(3), null]);
    expect(stored.updated_at).not.toBeNull();
    const events = await eventsFor(m.wamid);
    expect(events.map((e) => e.type)).toEqual(['message.sent', 'message.delivered', 'message.read']);
    expect(events[1].data).toEqual({
      message_id: m.wamid, to: '+14155550100', status: 'delivered', timestamp: at(2).toISOString(), delivered_at: at(2).toISOString(),
      contact_id: null, campaign_id: null, template_name: 'order_update',
    });
  });

  it('a status at or below the stored one changes nothing and emits nothing', async () => {
    const m = await message(tenant.id, { status: 'delivered' });
    for (const status of ['sent', 'delivered'] as const) {
      const { applied } = await apply([update(m.wamid, status, 9)]);
      expect(applied).toEqual([]);
    }
    expect(await row(m.id)).toMatchObject({ status: 'delivered', status_rank: 2, sent_at: null, delivered_at: null, updated_at: null });
    expect(await eventsFor(m.wamid)).toEqual([]);
  });

  it('failed is final: nothing moves it, not even read; without an error it records code 0', async () => {
    const m = await message();
    const { applied } = await apply([update(m.wamid, 'failed', 5)]);
    expect(applied).toEqual([expect.objectContaining({ status: 'failed', error: { code: 0, title: 'Unknown failure' } })]);
    expect(await row(m.id)).toMatchObject({ status: 'failed', status_rank: 4, failed_at: at(5), error_code: 0, error_title: 'Unknown failure' });
    for (const status of ['sent', 'delivered', 'read', 'failed'] as const) {
      expect((await apply([update(m.wamid, status, 6, { error: { code: 1, title: 'again' } })])).applied).toEqual([]);
    }
    expect(await row(m.id)).toMatchObject({ status: 'failed', error_code: 0, read_at: null });
    const [failed] = await eventsFor(m.wamid);
    expect(failed.data).toMatchObject({ status: 'failed', failed_at: at(5).toISOString(), error: { code: 0, title: 'Unknown failure' } });
  });

  it('a failure keeps its error; an error on a status that is not failed is ignored', async () => {
    const m = await message();
    const sent = await apply([update(m.wamid, 'sent', 1, { error: { code: 7, title: 'not a failure' } })]);
    expect(sent.applied[0].error).toBeNull();
    expect(await row(m.id)).toMatchObject({ status: 'sent', error_code: null, error_title: null });
    expect((await eventsFor(m.wamid))[0].data).not.toHaveProperty('error');
    await apply([update(m.wamid, 'failed', 2, { error: { code: 131026, title: 'Message undeliverable' } })]);
    expect(await row(m.id)).toMatchObject({ status: 'failed', sent_at: at(1), failed_at: at(2), error_code: 131026, error_title: 'Message undeliverable' });
  });

  it('several statuses of one message in one batch apply in rank order, each with its event; the rest of the batch too', async () => {
    const m = await message();
    const other = await message();
    const { applied } = await apply([
      update(m.wamid, 'read', 3), update(m.wamid, 'sent', 1), update(other.wamid, 'delivered', 4), update(m.wamid, 'delivered', 2), update(m.wamid, 'sent', 1),
    ]);
    expect(applied.map((a) => `${a.upstreamMessageId === m.wamid ? 'm' : 'o'}:${a.status}`)).toEqual(['m:sent', 'm:delivered', 'm:read', 'o:delivered']);
    expect(await row(m.id)).toMatchObject({ status: 'read', status_rank: 3, sent_at: at(1), delivered_at: at(2), read_at: at(3) });
    expect(await row(other.id)).toMatchObject({ status: 'delivered', status_rank: 2, sent_at: null, delivered_at: at(4) });
    expect((await eventsFor(m.wamid)).map((e) => e.type).sort()).toEqual(['message.delivered', 'message.read', 'message.sent']);
  });

  it('a later step keeps the timestamps already stored', async () => {
    const m = await message();
    await apply([update(m.wamid, 'delivered', 2)]);
    await apply([update(m.wamid, 'sent', 1), update(m.wamid, 'read', 3)]);
    expect(await row(m.id)).toMatchObject({ status: 'read', sent_at: null, delivered_at: at(2), read_at: at(3) });
  });

  it('an unknown upstream id is reported as unknown and changes nothing', async () => {
    const m = await message();
    const stray = update(`wamid.${randomUUID()}`, 'sent', 1);
    const { applied, unknown } = await apply([stray, update(m.wamid, 'sent', 1)]);
    expect(unknown).toEqual([stray]);
    expect(applied.map((a) => a.messageRowId)).toEqual([m.id]);
  });

  it('biz_opaque_callback_data finds a message the send response has not named yet, and records its upstream id', async () => {
    const m = await message(tenant.id, { wamid: null });
    const { applied, unknown } = await apply([update(m.wamid, 'delivered', 2, { callbackData: m.id })]);
    expect(unknown).toEqual([]);
    expect(applied).toEqual([expect.objectContaining({ messageRowId: m.id, upstreamMessageId: m.wamid, status: 'delivered' })]);
    expect(await row(m.id)).toMatchObject({ upstream_message_id: m.wamid, status: 'delivered' });
  });

  it('biz_opaque_callback_data does not redirect a status to a message that has another upstream id', async () => {
    const m = await message();
    const u = update(`wamid.${randomUUID()}`, 'delivered', 2, { callbackData: m.id });
    expect(await apply([u])).toEqual({ applied: [], unknown: [u] });
    expect(await row(m.id)).toMatchObject({ status: 'accepted', upstream_message_id: m.wamid });
  });

  it('callback data that is not one of our ids is ignored, not an error', async () => {
    for (const callbackData of ['campaign-42', `x${randomUUID()}`, `${randomUUID()}0`, '']) {
      const u = update(`wamid.${randomUUID()}`, 'sent', 1, { callbackData });
      expect(await apply([u])).toEqual({ applied: [], unknown: [u] });
    }
  });

  it('another tenant\'s message is never found, by upstream id or by callback data', async () => {
    const other = await createTenant(t.app);
    const m = await message(other.id, { wamid: null, campaignId: randomUUID() });
    const byId = update(`wamid.${randomUUID()}`, 'sent', 1, { callbackData: m.id });
    expect(await apply([byId])).toEqual({ applied: [], unknown: [byId] });
    const named = await message(other.id);
    const byWamid = update(named.wamid, 'sent', 1);
    expect(await apply([byWamid])).toEqual({ applied: [], unknown: [byWamid] });
    expect(await row(m.id)).toMatchObject({ status: 'accepted', upstream_message_id: null });
    expect(await row(named.id)).toMatchObject({ status: 'accepted' });
    // Its own tenant still can.
    expect((await apply([byWamid], other.id)).applied).toEqual([expect.objectContaining({ messageRowId: named.id, campaignId: null })]);
    expect((await apply([byId], other.id)).applied).toEqual([expect.objectContaining({ messageRowId: m.id, campaignId: expect.any(String) })]);
  });
  it('the events a status batch emits (in the update\'s own statement) reach a subscribed endpoint with their exact envelope', async () => {
    const other = await createTenant(t.app);
    const endpoint = await call(t.app, other, 'POST', '/webhooks', { url: 'https://93.184.215.15/statuses', events: ['message.delivered'] });
    expect(endpoint.statusCode, endpoint.body).toBe(201);
    const m = await message(other.id);
    const { applied } = await apply([update(m.wamid, 'sent', 1), update(m.wamid, 'delivered', 2)], other.id);
    expect(applied.map((a) => a.status)).toEqual(['sent', 'delivered']);

    const events = await t.deps.db.selectFrom('events').select(['id', 'type', 'data', 'created_at']).where('tenant_id', '=', other.id)
      .where('type', 'like', 'message.%').orderBy('type', 'desc').execute();
    expect(events.map((e) => e.type)).toEqual(['message.sent', 'message.delivered']);
    expect(events.map((e) => e.data)).toEqual(applied.map((a) => JSON.parse(JSON.stringify(statusEventData(a)))));
    const delivered = events[1];
    const deliveries = await t.deps.db.selectFrom('webhook_deliveries').select(['event_id', 'endpoint_id', 'event_type'])
      .where('tenant_id', '=', other.id).execute();
    expect(deliveries).toEqual([{ event_id: delivered.id, endpoint_id: endpoint.json().data.id, event_type: 'message.delivered' }]);
    const payloads = await t.deps.db.selectFrom('webhook_payloads').select(['event_id', 'payload']).where('tenant_id', '=', other.id).execute();
    expect(payloads.map((p) => p.event_id)).toEqual([delivered.id]);
    expect(Buffer.from(payloads[0].payload).toString('utf8'))
      .toBe(envelopeJson(delivered.id, 'message.delivered', new Date(delivered.created_at).toISOString(), JSON.stringify(statusEventData(applied[1]))));
  });
});
