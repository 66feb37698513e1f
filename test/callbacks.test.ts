import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, uniquePhone } from './helpers/app.ts';
import {
  APP_SECRET, VERIFY_TOKEN, createApprovedTemplate, createConnectedTenant, eventsOf, postCallback, sandboxControl, startUpstreamApp, statusCallback, type UpstreamTestApp,
} from './helpers/upstream.ts';
import { signUpstreamBody } from '../src/modules/callbacks/callbacks.signature.ts';

describe('upstream callbacks: /upstream/webhook', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  /** A sent message whose sandbox callbacks are switched off, so the test drives its statuses. */
  async function quietMessage() {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: false });
    try {
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
      expect(res.statusCode).toBe(200);
      const row = await t.deps.db.selectFrom('messages').selectAll().where('upstream_message_id', '=', res.json().message_id).executeTakeFirstOrThrow();
      return { tenant, template, to, wamid: res.json().message_id as string, rowId: row.id };
    } finally {
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: true });
    }
  }
  const status = (wamid: string, s: string, ts: number, extra: Record<string, unknown> = {}) => ({ id: wamid, status: s, timestamp: String(ts), recipient_id: '1', ...extra });
  const messageTypes = async (tenantId: string) => (await eventsOf(t.deps, tenantId)).map((e) => e.type).filter((x) => x.startsWith('message.')).sort();

  it('handshake: echoes hub.challenge for the right token, 403 otherwise', async () => {
    const ok = await t.app.inject({ method: 'GET', url: `/upstream/webhook?hub.mode=subscribe&hub.verify_token=${VERIFY_TOKEN}&hub.challenge=1158201444` });
    expect(ok.statusCode).toBe(200);
    expect(ok.body).toBe('1158201444');
    const bad = await t.app.inject({ method: 'GET', url: '/upstream/webhook?hub.mode=subscribe&hub.verify_token=wrong&hub.challenge=1' });
    expect(bad.statusCode).toBe(403);
    expect((await t.app.inject({ method: 'GET', url: `/upstream/webhook?hub.mode=unsubscribe&hub.verify_token=${VERIFY_TOKEN}&hub.challenge=1` })).statusCode).toBe(403);
  });

  it('refuses a missing or wrong signature with 401 and processes nothing', async () => {
    const m = await quietMessage();
    const payload = statusCallback(m.tenant.phoneNumberId, [status(m.wamid, 'delivered', 1_700_000_000)]);
    expect((await postCallback(t.app, payload, null)).statusCode).toBe(401);
    expect((await postCallback(t.app, payload, signUpstreamBody('other secret', JSON.stringify(payload)))).statusCode).toBe(401);
    expect((await postCallback(t.app, payload, 'sha256=zz')).statusCode).toBe(401);
    // The signature covers the raw bytes: re-serialised JSON with different spacing fails.
    const raw = JSON.stringify(payload, null, 2);
    expect((await postCallback(t.app, raw, signUpstreamBody(APP_SECRET, JSON.stringify(payload)))).statusCode).toBe(401);
    expect(await messageTypes(m.tenant.id)).toEqual([]);
    expect((await postCallback(t.app, raw, signUpstreamBody(APP_SECRET, raw))).statusCode).toBe(200);
    expect(await messageTypes(m.tenant.id)).toEqual(['message.delivered']);
  });

  it('moves statuses monotonically: duplicates and late statuses change nothing and emit nothing', async () => {
    const m = await quietMessage();
    const send = (s: string, ts: number, extra = {}) => postCallback(t.app, statusCallback(m.tenant.phoneNumberId, [status(m.wamid, s, ts, extra)]));
    expect((await send('sent', 1_700_000_001)).statusCode).toBe(200);
    expect((await send('sent', 1_700_000_001)).statusCode).toBe(200);
    expect((await send('read', 1_700_000_003)).statusCode).toBe(200);
    expect((await send('delivered', 1_700_000_002)).statusCode).toBe(200); // out of order
    expect((await send('read', 1_700_000_003)).statusCode).toBe(200);
    expect(await messageTypes(m.tenant.id)).toEqual(['message.read', 'message.sent']);
    const row = await t.deps.db.selectFrom('messages').selectAll().where('id', '=', m.rowId).executeTakeFirstOrThrow();
    expect(row.status).toBe('read');
    expect(row.read_at?.toISOString()).toBe(new Date(1_700_000_003_000).toISOString());
    const read = (await eventsOf(t.deps, m.tenant.id, 'message.read'))[0];
    expect(read.data).toEqual({ message_id: m.wamid, to: m.to, status: 'read', timestamp: new Date(1_700_000_003_000).toISOString(), read_at: new Date(1_700_000_003_000).toISOString(),
      contact_id: null, template_name: m.template.template_name, campaign_id: null });
  });

  it('failed is final and carries the numeric error code; several statuses in one batch each emit', async () => {
    const m = await quietMessage();
    const res = await postCallback(t.app, statusCallback(m.tenant.phoneNumberId, [
      status(m.wamid, 'sent', 1_700_000_001),
      status(m.wamid, 'failed', 1_700_000_002, { errors: [{ code: 131026, title: 'Message undeliverable' }] }),
    ]));
    expect(res.statusCode).toBe(200);
    await postCallback(t.app, statusCallback(m.tenant.phoneNumberId, [status(m.wamid, 'read', 1_700_000_003)]));
    expect(await messageTypes(m.tenant.id)).toEqual(['message.failed', 'message.sent']);
    const failed = (await eventsOf(t.deps, m.tenant.id, 'message.failed'))[0];
    expect(failed.data).toMatchObject({ status: 'failed', error: { code: 131026, title: 'Message undeliverable' } });
    const row = await t.deps.db.selectFrom('messages').selectAll().where('id', '=', m.rowId).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ status: 'failed', error_code: 131026 });
  });

  it('finds a message by biz_opaque_callback_data when the callback overtakes the send response', async () => {
    const m = await quietMessage();
    await t.deps.db.updateTable('messages').set({ upstream_message_id: null }).where('id', '=', m.rowId).execute();
    await postCallback(t.app, statusCallback(m.tenant.phoneNumberId, [status(m.wamid, 'delivered', 1_700_000_002, { biz_opaque_callback_data: m.rowId })]));
    const row = await t.deps.db.selectFrom('messages').selectAll().where('id', '=', m.rowId).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ status: 'delivered', upstream_message_id: m.wamid });
  });

  it('a signed but malformed body is 400', async () => {
    expect((await postCallback(t.app, '{"entry": [')).statusCode).toBe(400);
  });

  it('a signed body of the wrong shape is acknowledged: what can be read is applied, the rest skipped (a 500 would be retried forever)', async () => {
    const m = await quietMessage();
    const odd = (value: unknown) => ({ object: 'whatsapp_business_account', entry: [{ id: m.tenant.wabaId, changes: [{ field: 'messages', value }] }] });
    for (const payload of [
      { entry: 'not a list' }, { entry: [null, 7, { changes: {} }] }, { entry: [{ changes: [{ field: 'messages', value: 'text' }] }] },
      odd({ metadata: { phone_number_id: m.tenant.phoneNumberId }, statuses: { id: m.wamid } }),
      odd({ metadata: { phone_number_id: m.tenant.phoneNumberId }, messages: [{ id: { nested: true }, from: 42 }, 'x', null] }),
      { entry: [{ id: { not: 'an id' }, changes: [{ field: 'message_template_status_update', value: { event: ['APPROVED'], reason: { x: 1 } } }] }] },
    ]) {
      expect((await postCallback(t.app, payload)).statusCode, JSON.stringify(payload)).toBe(200);
    }
    // In one batch: a status of the wrong type is skipped, the good one still applies.
    const mixed = odd({ metadata: { phone_number_id: m.tenant.phoneNumberId }, statuses: [
      { id: 5, status: { s: 'sent' } }, { id: 'wamid.x\u0000', status: 'failed', timestamp: '1e20', errors: [{ code: 131026, title: 'bad\u0000' }] },
      status(m.wamid, 'delivered', 1_700_000_100, { errors: 'none' }),
    ] });
    expect((await postCallback(t.app, mixed)).statusCode).toBe(200);
    expect(await messageTypes(m.tenant.id)).toEqual(['message.delivered']);

    // Text the database cannot hold is cleaned, not refused.
    const inbound = odd({ metadata: { phone_number_id: m.tenant.phoneNumberId }, messages: [{ id: `wamid.nul${Date.now()}`, from: m.to.slice(1), timestamp: '1700000000', type: 'text', text: { body: 'he\u0000llo \ud800' } }] });
    expect((await postCallback(t.app, inbound)).statusCode).toBe(200);
    const [received] = await eventsOf(t.deps, m.tenant.id, 'message.received');
    expect((received.data as { text: string }).text).toBe('hello \ufffd');
  });

  it('acknowledges callbacks for unknown phone-number ids without processing them', async () => {
    const res = await postCallback(t.app, statusCallback('999000111', [status('wamid.unknown', 'sent', 1)]));
    expect(res.statusCode).toBe(200);
  });

  it('cross-tenant: a status routed to another tenant\'s phone number does not touch this tenant\'s message', async () => {
    const m = await quietMessage();
    const other = await createConnectedTenant(t.app);
    await postCallback(t.app, statusCallback(other.phoneNumberId, [status(m.wamid, 'delivered', 1, { biz_opaque_callback_data: m.rowId })]));
    const row = await t.deps.db.selectFrom('messages').selectAll().where('id', '=', m.rowId).executeTakeFirstOrThrow();
    expect(row.status).toBe('accepted');
    expect(await messageTypes(other.id)).toEqual([]);
  });

  it('inbound text from a known contact: message.received and a communication row, once even if retried', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ana', phone })).json();
    const r = await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from: phone, text: 'hello there' });
    expect(r.status).toBe(200);
    const received = await eventually(async () => (await eventsOf(t.deps, tenant.id, 'message.received'))[0]);
    expect(received.data).toEqual({ message_id: r.json.message_id, from: phone, from_user_id: null, contact_id: contact.id, type: 'text', text: 'hello there', timestamp: expect.any(String) });
    const comms = await eventsOf(t.deps, tenant.id, 'contact.communication_added');
    expect(comms.map((c) => c.data)).toEqual([expect.objectContaining({ contact_id: contact.id, direction: 'inbound', message_id: r.json.message_id })]);

    // The platform retries: the same inbound message again emits nothing.
    const replay = { object: 'whatsapp_business_account', entry: [{ id: tenant.wabaId, changes: [{ field: 'messages', value: {
      metadata: { phone_number_id: tenant.phoneNumberId }, messages: [{ from: phone.slice(1), id: r.json.message_id, timestamp: '1700000000', type: 'text', text: { body: 'hello there' } }] } }] }] };
    expect((await postCallback(t.app, replay)).statusCode).toBe(200);
    expect(await eventsOf(t.deps, tenant.id, 'message.received')).toHaveLength(1);
  });

  it('inbound from an unknown number: message.received with contact_id null', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from: phone, text: 'hi' });
    const received = await eventually(async () => (await eventsOf(t.deps, tenant.id, 'message.received'))[0]);
    expect(received.data).toMatchObject({ from: phone, contact_id: null, type: 'text', text: 'hi' });
    expect(await eventsOf(t.deps, tenant.id, 'contact.communication_added')).toEqual([]);
  });

  it('a Flow nfm_reply emits flow.submission_received with the parsed fields', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Flo', phone })).json();
    const r = await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from: phone, flow_response: { flow_token: 'FT-1', cpf: '123', consent: true } });
    const flow = await eventually(async () => (await eventsOf(t.deps, tenant.id, 'flow.submission_received'))[0]);
    expect(flow.data).toEqual({ message_id: r.json.message_id, from: phone, from_user_id: null, contact_id: contact.id, flow_token: 'FT-1', response: { cpf: '123', consent: true } });
    const received = (await eventsOf(t.deps, tenant.id, 'message.received'))[0];
    expect(received.data).toMatchObject({ type: 'interactive' });
  });

  it('odd but well-formed values are read safely: a fractional or huge error code, an over-long id, unstorable Flow fields, a deep envelope, a repeated challenge', async () => {
    const m = await quietMessage();
    const messages = (value: unknown) => ({ object: 'whatsapp_business_account', entry: [{ id: m.tenant.wabaId, changes: [{ field: 'messages', value }] }] });
    const metadata = { phone_number_id: m.tenant.phoneNumberId };

    const failed = messages({ metadata, statuses: [status(m.wamid, 'failed', 1_700_000_200, { errors: [{ code: 1e10, title: 'odd' }] })] });
    expect((await postCallback(t.app, failed)).statusCode).toBe(200);
    const [failure] = await eventsOf(t.deps, m.tenant.id, 'message.failed');
    expect((failure.data as { error: unknown }).error).toEqual({ code: 0, title: 'odd' });

    const longId = messages({ metadata, messages: [{ id: `wamid.${'A'.repeat(3000)}`, from: '14155550100', timestamp: '1700000000', type: 'text', text: { body: 'hi' } }] });
    expect((await postCallback(t.app, longId)).statusCode).toBe(200);
    expect(await eventsOf(t.deps, m.tenant.id, 'message.received')).toEqual([]);

    const flowJson = JSON.stringify({ flow_token: 'FT-2', 'bad\u0000key': 1, text: 'a\ud800b' });
    const flow = messages({ metadata, messages: [{ id: `wamid.flow${Date.now()}`, from: '14155550100', timestamp: '1700000000', type: 'interactive',
      interactive: { type: 'nfm_reply', nfm_reply: { name: 'flow', body: 'Sent', response_json: flowJson } } }] });
    expect((await postCallback(t.app, flow)).statusCode).toBe(200);
    const [submitted] = await eventsOf(t.deps, m.tenant.id, 'flow.submission_received');
    expect(submitted.data).toMatchObject({ flow_token: 'FT-2', response: { badkey: 1, text: 'a\ufffdb' } });

    const deep = JSON.stringify(messages({ metadata, messages: [{ id: 'wamid.deep', nested: 'DEEP' }] })).replace('"DEEP"', '['.repeat(10_000) + ']'.repeat(10_000));
    expect((await postCallback(t.app, deep)).statusCode).toBe(400);

    const challenge = await t.app.inject({ method: 'GET', url: `/upstream/webhook?hub.mode=subscribe&hub.verify_token=${VERIFY_TOKEN}&hub.challenge=11&hub.challenge=22` });
    expect(challenge.statusCode).toBe(200);
    expect(challenge.body).toBe('11');
  });
});
