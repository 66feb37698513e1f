import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, createTenant, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

const NUL = 'a\u0000b';
const LONE_SURROGATE = 'a\ud800b';

/** Inputs the JSON schemas accept but PostgreSQL cannot store: each must be a 400 naming the field, never a 500. */
describe('text and timestamps the database cannot store', () => {
  let t: TestApp;
  let tenant: TestTenant;
  let contactId: string;
  beforeAll(async () => {
    t = await startTestApp();
    tenant = await createTenant(t.app, { plan: 'growth' });
    contactId = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ada', phone: uniquePhone() })).json().id;
  });
  afterAll(async () => { await t.close(); });

  function expectField(res: Awaited<ReturnType<typeof call>>, loc: (string | number)[], reason: RegExp) {
    const error = expectError(res, 400, 'VALIDATION_ERROR');
    expect((error.details as { loc: unknown }[])[0].loc).toEqual(loc);
    expect(error.message).toMatch(reason);
  }

  it('a NUL or an unpaired surrogate anywhere in a JSON body is a 400 naming the field', async () => {
    expectField(await call(t.app, tenant, 'POST', '/webhooks', { url: 'https://93.184.215.14/in', events: ['contact.created'], description: NUL }),
      ['body', 'description'], /^description must not contain the NUL character$/);
    expectField(await call(t.app, tenant, 'POST', `/contacts/${contactId}/notes`, { content: NUL }), ['body', 'content'], /NUL/);
    expectField(await call(t.app, tenant, 'POST', `/contacts/${contactId}/followups`, { title: LONE_SURROGATE, due_at: '2030-01-01T09:00:00Z' }),
      ['body', 'title'], /^title must be valid Unicode text/);
    expectField(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ada', phone: uniquePhone(), custom_fields: { plan: { tier: LONE_SURROGATE } } }),
      ['body', 'custom_fields', 'plan', 'tier'], /unpaired surrogate/);
    expectField(await call(t.app, tenant, 'POST', '/templates', {
      template_name: 'nul_body', language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: `Hello ${NUL}` }],
    }), ['body', 'components', 0, 'text'], /NUL/);
    expect((await call(t.app, tenant, 'GET', '/contacts/' + contactId + '/notes')).json().data).toEqual([]);
  });

  it('bulk create reports an unstorable item on its own and still creates the rest', async () => {
    const res = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: [
      { first_name: 'Fine', phone: uniquePhone() },
      { first_name: 'Broken', phone: uniquePhone(), custom_fields: { note: LONE_SURROGATE } },
    ] });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({ total: 2, created: 1, failed: 1, errors: [{ index: 1, error: 'custom_fields.note must be valid Unicode text (it holds an unpaired surrogate)' }] });
  });

  it('a timestamp PostgreSQL cannot hold (year 0000, an offset past 15:59) is a 400; ordinary offsets are fine', async () => {
    for (const dueAt of ['0000-01-01T00:00:00Z', '2030-01-01T00:00:00+23:59', '2030-01-01T00:00:00-16:00', '2030-01-01T00:00:00+16', '2030-01-01T00:00:00+1600']) {
      const res = await call(t.app, tenant, 'POST', `/contacts/${contactId}/followups`, { title: 'Call back', due_at: dueAt });
      expectField(res, ['body', 'due_at'], /due_at/);
    }
    const ok = await call(t.app, tenant, 'POST', `/contacts/${contactId}/followups`, { title: 'Call back', due_at: '2030-01-01T09:00:00+05:30' });
    expect(ok.statusCode).toBe(201);
    expect(ok.json().due_at).toBe('2030-01-01T03:30:00.000Z');
  });

  it('a delivery-log page beyond the offset range is a 400', async () => {
    for (const url of ['/webhooks/deliveries?page=100000000000000000000', `/webhooks/${crypto.randomUUID()}/deliveries?page=100000000000000000000`]) {
      expectError(await call(t.app, tenant, 'GET', url), 400, 'VALIDATION_ERROR');
    }
  });

  it('the operator API refuses the same inputs with a 400', async () => {
    const admin = (method: string, url: string, payload: unknown) => t.app.inject({ method: method as 'POST', url, headers: adminHeaders, payload: payload as object });
    expectError(await admin('POST', '/admin/v1/tenants', { name: NUL, plan: 'starter' }), 400, 'VALIDATION_ERROR');
    expectError(await admin('PATCH', `/admin/v1/tenants/${tenant.id}`, { api_requests_daily: 3_000_000_000 }), 400, 'VALIDATION_ERROR');
    expectError(await admin('POST', `/admin/v1/tenants/${tenant.id}/api-keys`, { name: 'k', expires_at: '0000-01-01T00:00:00Z' }), 400, 'VALIDATION_ERROR');
    expect((await admin('PATCH', `/admin/v1/tenants/${tenant.id}`, { api_requests_daily: 2_147_483_647 })).statusCode).toBe(200);
  });

  it('a body nested past 64 levels is a 400 everywhere, also with an Idempotency-Key and on the operator API', async () => {
    const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
    const raw = (method: string, url: string, body: string, headers: Record<string, string>) =>
      t.app.inject({ method: method as 'POST', url, headers: { ...headers, 'content-type': 'application/json' }, payload: body });
    for (const [body, extra] of [
      [`{"first_name":${deep(5_000)},"phone":"+14155550100"}`, {}],
      [`{"first_name":"x","phone":"+14155550100","custom_fields":{"x":${deep(100)}}}`, {}],
      [deep(100_000), { 'idempotency-key': crypto.randomUUID() }],
    ] as [string, Record<string, string>][]) {
      const res = await raw('POST', `/api/v1/public/contacts`, body, { ...tenant.headers, ...extra });
      const error = expectError(res, 400, 'VALIDATION_ERROR');
      expect(error.message).toBe('The body nests objects or arrays deeper than 64 levels');
    }
    expectError(await raw('PATCH', `/admin/v1/tenants/${tenant.id}`, `{"name":${deep(10_000)}}`, adminHeaders), 400, 'VALIDATION_ERROR');
    // Deep enough for any real resource: 60 levels of custom fields are stored.
    const fine = await raw('POST', '/api/v1/public/contacts', `{"first_name":"x","phone":"${uniquePhone()}","custom_fields":{"x":${deep(60)}}}`, tenant.headers);
    expect(fine.statusCode).toBe(201);
  });
});
