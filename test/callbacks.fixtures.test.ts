import { randomBytes } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { templatesRepository } from '../src/modules/templates/templates.repository.ts';
import { metaJson } from '../src/sandbox/callbacks.ts';
import { call, eventually, uniquePhone } from './helpers/app.ts';
import {
  createApprovedTemplate, createConnectedTenant, eventsOf, postCallback, sandboxControl, startUpstreamApp, uniqueTemplateName, type UpstreamTenant, type UpstreamTestApp,
} from './helpers/upstream.ts';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), 'fixtures/upstream-payloads');

/** Replaces `{{NAME}}` tokens in every string; a string that is only a token takes the value's own type. */
function fill(value: unknown, vars: Record<string, string | number>): unknown {
  if (typeof value === 'string') {
    const whole = /^\{\{([A-Z_]+)\}\}$/.exec(value);
    if (whole && whole[1] in vars) return vars[whole[1]];
    return value.replace(/\{\{([A-Z_]+)\}\}/g, (token, name: string) => (name in vars ? String(vars[name]) : token));
  }
  if (Array.isArray(value)) return value.map((v) => fill(v, vars));
  if (typeof value === 'object' && value !== null) return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, fill(v, vars)]));
  return value;
}

/** A fixture as Meta would post it: tokens filled, escaped like Meta's bodies (the signature covers these bytes). */
function fixture(name: string, vars: Record<string, string | number>): string {
  const body = metaJson(fill(JSON.parse(readFileSync(join(FIXTURES, name), 'utf8')), vars));
  expect(body, `${name} has tokens left`).not.toMatch(/\{\{[A-Z_]+\}\}/);
  return body;
}

const bsuid = () => `US.${BigInt('0x' + randomBytes(8).toString('hex'))}`;
const messageId = () => `wamid.IN${randomBytes(12).toString('base64url')}`;

describe('upstream callbacks: Meta-shaped payloads (test/fixtures/upstream-payloads)', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(); });
  afterAll(async () => { await t?.close(); });

  it('has a test below for every fixture file', () => {
    const used = readFileSync(fileURLToPath(import.meta.url), 'utf8');
    for (const file of readdirSync(FIXTURES).filter((f) => f.endsWith('.json'))) expect(used, file).toContain(`'${file}'`);
  });

  /** A message sent through the service with the sandbox's own callbacks off, so the fixtures drive its statuses. */
  async function quietMessage(tenant?: UpstreamTenant) {
    tenant ??= await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const to = uniquePhone();
    await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: false });
    try {
      const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
      expect(res.statusCode).toBe(200);
      const row = await t.deps.db.selectFrom('messages').selectAll().where('upstream_message_id', '=', res.json().message_id).executeTakeFirstOrThrow();
      return { tenant, to, vars: { WABA_ID: tenant.wabaId, PHONE_NUMBER_ID: tenant.phoneNumberId, WAMID: row.upstream_message_id!, ROW_ID: row.id, RECIPIENT: to.slice(1) }, rowId: row.id };
    } finally {
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { callbacks: true });
    }
  }
  const eventData = async (tenantId: string, type: string) => (await eventsOf(t.deps, tenantId, type)).map((e) => e.data as Record<string, any>);

  it('statuses: sent with pricing, delivered and read in one out-of-order batch', async () => {
    const m = await quietMessage();
    expect((await postCallback(t.app, fixture('status-sent-with-pricing.json', m.vars))).statusCode).toBe(200);
    expect((await postCallback(t.app, fixture('status-delivered-read-batch.json', m.vars))).statusCode).toBe(200);
    const types = (await eventsOf(t.deps, m.tenant.id)).map((e) => e.type).filter((x) => x.startsWith('message.'));
    expect(types.sort()).toEqual(['message.delivered', 'message.read', 'message.sent']); // delivered and read share a transaction
    const row = await t.deps.db.selectFrom('messages').selectAll().where('id', '=', m.rowId).executeTakeFirstOrThrow();
    expect(row).toMatchObject({ status: 'read', sent_at: new Date(1_750_030_000_000), delivered_at: new Date(1_750_030_010_000), read_at: new Date(1_750_030_020_000) });
  });

  it('statuses: failures after a 200 carry the numeric code (131049 ecosystem, 131053 media)', async () => {
    const ecosystem = await quietMessage();
    const media = await quietMessage(ecosystem.tenant);
    expect((await postCallback(t.app, fixture('status-failed-ecosystem.json', ecosystem.vars))).statusCode).toBe(200);
    expect((await postCallback(t.app, fixture('status-failed-media.json', media.vars))).statusCode).toBe(200);
    const failed = await eventData(ecosystem.tenant.id, 'message.failed');
    expect(failed.map((d) => [d.message_id, d.error])).toEqual([
      [ecosystem.vars.WAMID, { code: 131049, title: 'This message was not delivered to maintain healthy ecosystem engagement.' }],
      [media.vars.WAMID, { code: 131053, title: 'Media upload error' }],
    ]);
  });

  it('inbound: a user known by phone and user id, then the same user writing with a username only, both reach the contact', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ana', phone })).json();
    const user = bsuid();
    const vars = { WABA_ID: tenant.wabaId, PHONE_NUMBER_ID: tenant.phoneNumberId, USER_PHONE: phone.slice(1), BSUID: user };
    const first = messageId();
    const second = messageId();
    expect((await postCallback(t.app, fixture('inbound-text.json', { ...vars, MESSAGE_ID: first }))).statusCode).toBe(200);
    expect((await postCallback(t.app, fixture('inbound-username-only.json', { ...vars, MESSAGE_ID: second }))).statusCode).toBe(200);

    const received = await eventData(tenant.id, 'message.received');
    expect(received).toEqual([
      { message_id: first, from: phone, from_user_id: user, contact_id: contact.id, type: 'text', text: 'Olá, meu pedido já saiu?', timestamp: new Date(1_750_030_073_000).toISOString() },
      { message_id: second, from: null, from_user_id: user, contact_id: contact.id, type: 'text', text: 'Sou eu de novo, pelo meu nome de usuário', timestamp: new Date(1_750_030_080_000).toISOString() },
    ]);
    const rows = await t.deps.db.selectFrom('inbound_messages').select(['upstream_message_id', 'from_phone', 'from_user_id', 'contact_id'])
      .where('tenant_id', '=', tenant.id).orderBy('received_at').execute();
    expect(rows).toEqual([
      { upstream_message_id: first, from_phone: phone, from_user_id: user, contact_id: contact.id },
      { upstream_message_id: second, from_phone: null, from_user_id: user, contact_id: contact.id },
    ]);
    const communications = await eventData(tenant.id, 'contact.communication_added');
    expect(communications.map((c) => [c.contact_id, c.message_id, c.from_user_id])).toEqual([[contact.id, first, user], [contact.id, second, user]]);
    const listed = (await call(t.app, tenant, 'GET', `/contacts/${contact.id}/communications`)).json().data;
    expect(listed.map((c: { from_user_id: string | null }) => c.from_user_id)).toEqual([user, user]);

    // A username user never seen with a phone number: kept with the user id, no contact.
    const stranger = bsuid();
    const third = messageId();
    await postCallback(t.app, fixture('inbound-username-only.json', { ...vars, BSUID: stranger, MESSAGE_ID: third }));
    expect((await eventData(tenant.id, 'message.received')).find((d) => d.message_id === third)).toMatchObject({ from: null, from_user_id: stranger, contact_id: null });
  });

  it('inbound: a quick-reply tap, a Flow completion and unsupported content', async () => {
    const m = await quietMessage();
    const vars = { ...m.vars, USER_PHONE: m.to.slice(1) };
    const [tap, flow, unsupported] = [messageId(), messageId(), messageId()];
    expect((await postCallback(t.app, fixture('inbound-button-reply.json', { ...vars, MESSAGE_ID: tap }))).statusCode).toBe(200);
    expect((await postCallback(t.app, fixture('inbound-flow-nfm-reply.json', { ...vars, MESSAGE_ID: flow }))).statusCode).toBe(200);
    expect((await postCallback(t.app, fixture('inbound-unsupported.json', { ...vars, MESSAGE_ID: unsupported }))).statusCode).toBe(200);
    const received = await eventData(m.tenant.id, 'message.received');
    expect(received.map((d) => [d.message_id, d.type, d.text, d.from])).toEqual([
      [tap, 'button', 'Parar avisos', m.to], [flow, 'interactive', 'Sent', m.to], [unsupported, 'unsupported', null, m.to],
    ]);
    expect(await eventData(m.tenant.id, 'flow.submission_received')).toEqual([
      { message_id: flow, from: m.to, from_user_id: null, contact_id: null, flow_token: 'FT-981-17', response: { cpf: '123', consent: true } },
    ]);
    const stored = await t.deps.db.selectFrom('inbound_messages').select('payload').where('upstream_message_id', '=', tap).executeTakeFirstOrThrow();
    expect(stored.payload).toMatchObject({ button: { payload: 'STOP_ORDER_UPDATES:981:17' }, context: { id: m.vars.WAMID } });
  });

  it('template status updates: paused and approved again; a pending template rejected with its reason', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const row = await templatesRepository.findById(t.deps.db, tenant.id, template.id);
    const vars = { WABA_ID: tenant.wabaId, TEMPLATE_ID_NUMBER: Number(row!.upstream_id), TEMPLATE_NAME: template.template_name, TEMPLATE_LANGUAGE: template.language };
    const statusOf = async (id: string) => (await templatesRepository.findById(t.deps.db, tenant.id, id))!.status;
    await postCallback(t.app, fixture('template-paused.json', vars));
    expect(await statusOf(template.id)).toBe('paused');
    await postCallback(t.app, fixture('template-approved.json', vars));
    expect(await statusOf(template.id)).toBe('approved');

    const draft = await templatesRepository.insertDraft(t.deps.db, tenant.id, { template_name: uniqueTemplateName(), language: 'en_US', category: 'MARKETING', components: [{ type: 'BODY', text: 'Hi' }] });
    const upstreamId = String(Date.now());
    await templatesRepository.markSubmitted(t.deps.db, tenant.id, draft.id, { upstreamId, wabaId: tenant.wabaId }, 'pending', null);
    await postCallback(t.app, fixture('template-rejected.json', { ...vars, TEMPLATE_ID_NUMBER: Number(upstreamId), TEMPLATE_NAME: draft.template_name, TEMPLATE_LANGUAGE: 'en_US' }));
    expect(await templatesRepository.findById(t.deps.db, tenant.id, draft.id)).toMatchObject({ status: 'rejected', rejected_reason: 'INVALID_FORMAT' });
  });

  it('a field the service does not process is acknowledged and changes nothing; the fixtures are refused unsigned', async () => {
    const tenant = await createConnectedTenant(t.app);
    const body = fixture('user-preferences.json', { WABA_ID: tenant.wabaId, PHONE_NUMBER_ID: tenant.phoneNumberId, USER_PHONE: '5511987654321' });
    expect((await postCallback(t.app, body, null)).statusCode).toBe(401);
    expect((await postCallback(t.app, body)).statusCode).toBe(200);
    expect(await eventsOf(t.deps, tenant.id)).toEqual([]);
  });

  it('through the sandbox: an inbound from a username user (no phone) reaches the service with its user id', async () => {
    const tenant = await createConnectedTenant(t.app);
    const phone = uniquePhone();
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Bea', phone })).json();
    const user = bsuid();
    const withPhone = await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from: phone, from_user_id: user, text: 'first' });
    await eventually(async () => (await eventData(tenant.id, 'message.received')).length === 1);
    const usernameOnly = await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from_user_id: user, username: 'bea', text: 'second' });
    expect(usernameOnly.status).toBe(200);
    const received = await eventually(async () => { const r = await eventData(tenant.id, 'message.received'); return r.length === 2 ? r : null; });
    expect(received).toEqual([
      expect.objectContaining({ message_id: withPhone.json.message_id, from: phone, from_user_id: user, contact_id: contact.id }),
      expect.objectContaining({ message_id: usernameOnly.json.message_id, from: null, from_user_id: user, contact_id: contact.id, text: 'second' }),
    ]);
    expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, text: 'nobody' })).status).toBe(400);
  });
});
