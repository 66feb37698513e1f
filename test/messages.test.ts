import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, createTenant, eventually, uniquePhone } from './helpers/app.ts';
import {
  createApprovedTemplate, createConnectedTenant, eventsOf, sandboxControl, startUpstreamApp, uniqueTemplateName, type UpstreamTestApp,
} from './helpers/upstream.ts';

const bodyParams = (...values: string[]) => [{ type: 'body', parameters: values.map((text) => ({ type: 'text', text })) }];

describe('messages: POST /messages/template', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as any[];

  it('sends, stores the message with its contact, and follows sent/delivered/read callbacks', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ada', phone })).json();

    const res = await call(t.app, tenant, 'POST', '/messages/template', { to: phone, template_name: template.template_name, components: bodyParams('Ada', 'A-1') });
    expect(res.statusCode).toBe(200);
    const sent = res.json();
    expect(sent).toEqual({ message_id: expect.any(String), status: 'accepted', to: phone });

    const sends = await sendsTo(phone);
    expect(sends).toHaveLength(1);
    expect(sends[0].components).toEqual([{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }, { type: 'text', text: 'A-1' }] }]);
    const row = await t.deps.db.selectFrom('messages').selectAll().where('upstream_message_id', '=', sent.message_id).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ tenant_id: tenant.id, contact_id: contact.id, template_id: template.id, to_phone: phone, language: 'en' });
    expect(sends[0].biz_opaque_callback_data).toBe(row.id);

    const read = await eventually(async () => {
      const events = await eventsOf(t.deps, tenant.id);
      return events.some((e) => e.type === 'message.read') ? events : null;
    });
    const types = read.map((e) => e.type);
    // Callbacks may be posted concurrently: a delivered that lands after read is (rightly) dropped.
    const messageTypes = types.filter((x) => x.startsWith('message.'));
    expect(messageTypes).toContain('message.sent');
    expect(messageTypes.filter((x) => x === 'message.read')).toHaveLength(1);
    expect(messageTypes.filter((x) => x === 'message.delivered').length).toBeLessThanOrEqual(1);
    expect(types).toContain('contact.communication_added');
    const readEvent = read.find((e) => e.type === 'message.read')!;
    expect(readEvent.data).toEqual({
      message_id: sent.message_id, to: phone, status: 'read', timestamp: expect.any(String), read_at: expect.any(String), contact_id: contact.id, campaign_id: null, template_name: template.template_name,
    });
    const delivered = read.find((e) => e.type === 'message.delivered')!.data as Record<string, unknown>;
    expect(delivered.delivered_at).toBe(delivered.timestamp); // the spec's delivered-message example
    const final = await t.deps.db.selectFrom('messages').selectAll().where('id', '=', row.id).executeTakeFirstOrThrow();
    expect(final.status).toBe('read');
    expect(final.sent_at && final.read_at).toBeTruthy();
    const comms = await call(t.app, tenant, 'GET', `/contacts/${contact.id}/communications`);
    if (comms.statusCode === 200) expect(comms.json().data[0]).toMatchObject({ direction: 'outbound', message_id: sent.message_id });
  });

  it('takes `to` exactly in E.164: anything else is 400 naming the field, with the E.164 form of a valid number written otherwise', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    for (const to of ['14155550123', '+1 555', 'not a phone']) {
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: bodyParams('a', 'b') });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
    const phone = uniquePhone();
    for (const to of [phone.replace('+1415', '+1 (415) '), '+44 7400 123456', ` ${phone}`]) {
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: bodyParams('a', 'b') });
      expect(res.statusCode).toBe(400);
      expect(res.json().error).toMatchObject({
        code: 'VALIDATION_ERROR',
        message: `to must be a phone number in E.164 format (+<country code><number>, digits only, no spaces or punctuation): did you mean ${to.includes('7400') ? '+447400123456' : phone}?`,
        details: [{ loc: ['body', 'to'], input: to }],
      });
    }
    expect(await sendsTo(phone)).toEqual([]);
    const ok = await call(t.app, tenant, 'POST', '/messages/template', { to: phone, template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(ok.statusCode).toBe(200);
    expect(ok.json().to).toBe(phone);
  });

  it('404 without an active business account, with the exact message', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders });
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(res.statusCode).toBe(404);
    expect(res.json().error).toMatchObject({ code: 'NOT_FOUND', message: 'No active WABA account for this tenant' });
    const never = await createTenant(t.app);
    const res2 = await call(t.app, never, 'POST', '/messages/template', { to: uniquePhone(), template_name: 'anything' });
    expect(res2.json().error.message).toBe('No active WABA account for this tenant');
  });

  it('404 for unknown, unapproved or other-language templates; default language is en', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant, { language: 'en_US' });
    const draft = (await call(t.app, tenant, 'POST', '/templates', { template_name: uniqueTemplateName(), language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hi' }] })).json();
    const to = uniquePhone();
    for (const body of [
      { to, template_name: 'no_such_template' },
      { to, template_name: draft.template_name },
      { to, template_name: template.template_name }, // default en, approved only as en_US
      { to, template_name: template.template_name, language: 'en_GB', components: bodyParams('a', 'b') },
    ]) {
      const res = await call(t.app, tenant, 'POST', '/messages/template', body);
      expect(res.statusCode).toBe(404);
      expect(res.json().error.message).toMatch(/not found or not approved/);
    }
    const ok = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, language: 'en_US', components: bodyParams('a', 'b') });
    expect(ok.statusCode).toBe(200);
    expect(await sendsTo(to)).toHaveLength(1);
  });

  it('a template approved under another business account is 404: after reconnecting to a new WABA until reconnected to its own', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const connect = async (wabaId: string) => {
      const res = await t.app.inject({ method: 'PUT', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders,
        payload: { waba_id: wabaId, phone_number_id: tenant.phoneNumberId, access_token: 'sandbox-token' } });
      expect(res.statusCode).toBe(200);
    };
    const send = () => call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') });
    await connect(`9${tenant.wabaId}`);
    const refused = await send();
    expect(refused.statusCode).toBe(404);
    expect(refused.json().error.message).toMatch(/not found or not approved/);
    await connect(tenant.wabaId);
    expect((await send()).statusCode).toBe(200);
  });

  it('fewer (or more) parameters than placeholders is 400 before any upstream call', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    for (const components of [undefined, [], bodyParams('only one'), bodyParams('a', 'b', 'c'), [{ type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text' }] }]]) {
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, ...(components ? { components } : {}) });
      expect(res.statusCode).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
      expect(res.json().error.details.length).toBeGreaterThan(0);
    }
    expect(await sendsTo(to)).toHaveLength(0);
    const rows = await t.deps.db.selectFrom('messages').select('id').where('tenant_id', '=', tenant.id).execute();
    expect(rows).toEqual([]);
  });

  it('translates header, body and button parameters to the upstream format', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant, { components: [
      { type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' },
      { type: 'BODY', text: 'Total {{1}} due {{2}}.' },
      { type: 'BUTTONS', buttons: [{ type: 'QUICK_REPLY', text: 'Stop' }, { type: 'URL', text: 'Track', url: 'https://shop.example/t/{{1}}' }] },
    ] });
    const to = uniquePhone();
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [
      { type: 'header', parameters: [{ type: 'text', text: 'A-1' }] },
      { type: 'body', parameters: [{ type: 'currency', currency: { fallback_value: '$5', code: 'USD', amount_1000: 5000 } }, { type: 'date_time', date_time: { fallback_value: 'May 1' } }] },
      { type: 'button', sub_type: 'url', index: 1, parameters: [{ type: 'text', text: 'A-1' }] },
      { type: 'button', sub_type: 'quick_reply', index: '0', parameters: [{ type: 'payload', payload: 'STOP' }] },
    ] });
    expect(res.statusCode).toBe(200);
    const [send] = await sendsTo(to);
    expect(send.components).toEqual([
      { type: 'header', parameters: [{ type: 'text', text: 'A-1' }] },
      { type: 'body', parameters: [{ type: 'currency', currency: { fallback_value: '$5', code: 'USD', amount_1000: 5000 } }, { type: 'date_time', date_time: { fallback_value: 'May 1' } }] },
      { type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'A-1' }] },
      { type: 'button', sub_type: 'quick_reply', index: '0', parameters: [{ type: 'payload', payload: 'STOP' }] },
    ]);
    // The URL button's placeholder must be filled.
    const missing = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [
      { type: 'header', parameters: [{ type: 'text', text: 'A-1' }] }, { type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
    ] });
    expect(missing.statusCode).toBe(400);
    expect(missing.json().error.message).toMatch(/URL button 1/);

    // `index` is optional: a button component without it fills the one button it can fill.
    const to2 = uniquePhone();
    const inferred = await call(t.app, tenant, 'POST', '/messages/template', { to: to2, template_name: template.template_name, components: [
      { type: 'header', parameters: [{ type: 'text', text: 'A-2' }] }, { type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
      { type: 'button', sub_type: 'url', parameters: [{ type: 'text', text: 'A-2' }] },
    ] });
    expect(inferred.statusCode).toBe(200);
    expect((await sendsTo(to2))[0].components[2]).toEqual({ type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'A-2' }] });
    // Without sub_type both buttons could take parameters: then index is required.
    const ambiguous = await call(t.app, tenant, 'POST', '/messages/template', { to: to2, template_name: template.template_name, components: [
      { type: 'header', parameters: [{ type: 'text', text: 'A-2' }] }, { type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] },
      { type: 'button', parameters: [{ type: 'text', text: 'A-2' }] },
    ] });
    expect(ambiguous.statusCode).toBe(400);
    expect(ambiguous.json().error.details).toContainEqual({ type: 'missing', loc: ['body', 'components', 2, 'index'], msg: 'index is required: 2 template buttons could take these parameters', input: null });
  });

  it('an upstream refusal is a 400 naming the upstream code (stored as failed, one message.failed); a per-recipient failure is 200 then message.failed', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const rejected = uniquePhone();
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: rejected, outcome: 'reject', error_code: 131009 });
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to: rejected, template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(res.statusCode).toBe(400);
    expect(res.json()).toMatchObject({ success: false, error: { code: 'VALIDATION_ERROR', upstream_error: { code: 131009 } }, meta: { request_id: expect.any(String) } });
    const row = await t.deps.db.selectFrom('messages').selectAll().where('tenant_id', '=', tenant.id).where('to_phone', '=', rejected).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ status: 'failed', error_code: 131009 });
    const refused = await eventsOf(t.deps, tenant.id, 'message.failed');
    expect(refused.map((e) => e.data)).toEqual([expect.objectContaining({ message_id: row.id, to: rejected, status: 'failed', error: { code: 131009, title: expect.any(String) } })]);

    const optedOut = uniquePhone();
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: optedOut, outcome: 'fail', error_code: 131050 });
    const ok = await call(t.app, tenant, 'POST', '/messages/template', { to: optedOut, template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(ok.statusCode).toBe(200);
    const failed = await eventually(async () => (await eventsOf(t.deps, tenant.id, 'message.failed')).find((e) => (e.data as { to?: string }).to === optedOut));
    expect(failed.data).toMatchObject({ message_id: ok.json().message_id, to: optedOut, status: 'failed', error: { code: 131050, title: expect.any(String) } });
  });

  it('Idempotency-Key replays the send without a second upstream call', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    const key = crypto.randomUUID();
    const body = { to, template_name: template.template_name, components: bodyParams('a', 'b') };
    const first = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    const second = await call(t.app, tenant, 'POST', '/messages/template', body, { 'idempotency-key': key });
    expect(second.statusCode).toBe(200);
    expect(second.headers['idempotent-replayed']).toBe('true');
    expect(second.json()).toEqual(first.json());
    expect(await sendsTo(to)).toHaveLength(1);
  });

  it('cross-tenant: another tenant cannot send with a template it does not own', async () => {
    const a = await createConnectedTenant(t.app);
    const b = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, a);
    const res = await call(t.app, b, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') });
    expect(res.statusCode).toBe(404);
  });

  it('needs the messages:send scope', async () => {
    const tenant = await createTenant(t.app, { scopes: ['templates:read'] });
    const res = await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: 'x' });
    expect(res.statusCode).toBe(403);
  });
});

describe('messages: upstream timeout and 5xx', () => {
  it('answers 504 when the upstream is slower than UPSTREAM_TIMEOUT_MS', async () => {
    const t = await startUpstreamApp({ UPSTREAM_TIMEOUT_MS: '200' });
    try {
      const tenant = await createConnectedTenant(t.app);
      const template = await createApprovedTemplate(t.app, tenant);
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { latency_ms: 1000 });
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: template.template_name, components: bodyParams('a', 'b') });
      expect(res.statusCode).toBe(504);
      expect(res.json().error.code).toBe('UPSTREAM_TIMEOUT');
      // The outcome is unknown, so the row is not failed: here the sandbox did accept the send, and
      // its callbacks (matched by biz_opaque_callback_data, as the upstream id never came back)
      // still move the message on and fill in the upstream id.
      const row = await eventually(async () => {
        const r = await t.deps.db.selectFrom('messages').selectAll().where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
        return r.status === 'read' ? r : null;
      });
      expect(row).toMatchObject({ error_title: expect.stringMatching(/outcome unknown.*did not answer in time/i), upstream_message_id: expect.stringMatching(/^wamid\./) });
    } finally {
      await t.close();
    }
  });

  it('answers 502 when the upstream answers 500', async () => {
    let server: Server | undefined;
    server = createServer((_req, res) => { res.writeHead(500, { 'content-type': 'application/json' }); res.end('{"error":{"message":"boom","code":1}}'); });
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', () => r()));
    const t = await startUpstreamApp({ UPSTREAM_BASE_URL: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v21.0` });
    try {
      const tenant = await createConnectedTenant(t.app);
      // Approve a template directly: this upstream cannot review.
      const created = (await call(t.app, tenant, 'POST', '/templates', { template_name: uniqueTemplateName(), language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hi {{1}}, welcome.', example: { body_text: [['Ana']] } }] })).json();
      expect((await call(t.app, tenant, 'POST', `/templates/${created.id}/submit`)).statusCode).toBe(502);
      await t.deps.db.updateTable('templates').set({ status: 'approved', waba_id: tenant.wabaId }).where('id', '=', created.id).execute();
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to: uniquePhone(), template_name: created.template_name, components: bodyParams('a') });
      expect(res.statusCode).toBe(502);
      expect(res.json().error.code).toBe('UPSTREAM_ERROR');
    } finally {
      await t.close();
      server.close();
    }
  });
});
