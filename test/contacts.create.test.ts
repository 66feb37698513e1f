import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

const PHONE_RULE = 'phone must be a phone number in E.164 format (+<country code><number>, digits only, no spaces or punctuation)';

describe('contacts: create (spec 2.4, 4.3)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });
  const events = (tenantId: string) => t.deps.db.selectFrom('events').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at').execute();

  it('returns 201 with every field of the contact, defaults applied, source api by default', async () => {
    const tenant = await createTenant(t.app);
    const phone = uniquePhone();
    const res = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ada', phone });
    expect(res.statusCode).toBe(201);
    const c = res.json();
    expect(c).toEqual({
      id: expect.stringMatching(/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/), first_name: 'Ada', last_name: null, phone,
      email: null, company: null, job_title: null, status: null, tags: [], custom_fields: {}, source: 'api', created_at: expect.any(String), updated_at: null,
      marketing_opt_out: false, marketing_opt_out_at: null, marketing_opt_out_source: null, time_zone: null,
    });
    expect(new Date(c.created_at).toISOString()).toBe(c.created_at);
  });

  it('keeps every optional field and a given source', async () => {
    const tenant = await createTenant(t.app);
    const body = { first_name: 'Grace', last_name: 'Hopper', phone: uniquePhone(), email: 'grace@example.com', company: 'Navy', job_title: 'Admiral',
      status: 'customer', tags: ['vip', 'navy'], custom_fields: { plan: 'gold', score: 3, nested: { a: [1, 2] } }, source: 'website' };
    const res = await call(t.app, tenant, 'POST', '/contacts', body);
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject(body);
  });

  it('null optional fields stay null (not coerced to empty strings)', async () => {
    const tenant = await createTenant(t.app);
    const res = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Nul', phone: uniquePhone(), last_name: null, email: null, company: null, job_title: null, status: null });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({ last_name: null, email: null, company: null, job_title: null, status: null });
    const row = await t.deps.db.selectFrom('contacts').selectAll().where('id', '=', res.json().id).executeTakeFirstOrThrow();
    expect([row.last_name, row.company, row.job_title, row.status]).toEqual([null, null, null, null]);
  });

  it('does not coerce JSON body types: a number for a string or a string for an array is 400', async () => {
    const tenant = await createTenant(t.app);
    for (const [field, value] of [['first_name', 123], ['tags', 'vip'], ['last_name', false], ['custom_fields', 'x']] as const) {
      const error = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'T', phone: uniquePhone(), [field]: value }), 400, 'VALIDATION_ERROR');
      expect((error.details as { loc: unknown[] }[])[0].loc).toEqual(['body', field]);
    }
    expect(await events(tenant.id)).toEqual([]);
  });

  it('takes phones exactly in E.164; another notation of a valid number is 400 naming the field and suggesting its E.164 form', async () => {
    const tenant = await createTenant(t.app);
    for (const [input, e164] of [['+44 7400 123456', '+447400123456'], ['+44 20 7946 0958', '+442079460958'], ['+49 (30) 901820', '+4930901820'], [' +1-415-555-2671 ', '+14155552671'], ['+4407400123457', '+447400123457']]) {
      const error = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'N', phone: input }), 400, 'VALIDATION_ERROR',
        `${PHONE_RULE}: did you mean ${e164}?`);
      expect(error.details).toEqual([{ type: 'value_error', loc: ['body', 'phone'], msg: error.message, input }]);
      const res = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'N', phone: e164 });
      expect(res.statusCode, e164).toBe(201);
      expect(res.json().phone).toBe(e164);
    }
    expect((await events(tenant.id)).map((e) => e.type)).toEqual(Array(5).fill('contact.created'));
  });

  it('rejects invalid phones with 400 and details', async () => {
    const tenant = await createTenant(t.app);
    for (const phone of ['12345', '4155552671', '+1 415', '+999 123 456', 'phone', '+1415555267a', '']) {
      const error = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'P', phone }), 400, 'VALIDATION_ERROR');
      const details = error.details as { type: string; loc: unknown[]; msg: string; input: unknown }[];
      expect(details.length).toBeGreaterThan(0);
      expect(details[0].loc).toEqual(['body', 'phone']);
    }
    expect(await events(tenant.id)).toEqual([]);
  });

  it('validates lengths and required fields: first_name 1-255, phone at most 20 characters, email RFC-5322', async () => {
    const tenant = await createTenant(t.app);
    const bad: [Record<string, unknown>, (string | number)[]][] = [
      [{ phone: uniquePhone() }, ['body', 'first_name']],
      [{ first_name: 'A' }, ['body', 'phone']],
      [{ first_name: '', phone: uniquePhone() }, ['body', 'first_name']],
      [{ first_name: 'x'.repeat(256), phone: uniquePhone() }, ['body', 'first_name']],
      [{ first_name: null, phone: uniquePhone() }, ['body', 'first_name']],
      [{ first_name: 'A', phone: '+1 (415) 555-2671 000' }, ['body', 'phone']],
      [{ first_name: 'A', phone: uniquePhone(), email: 'not-an-email' }, ['body', 'email']],
      [{ first_name: 'A', phone: uniquePhone(), email: 'a@b@c.com' }, ['body', 'email']],
      [{ first_name: 'A', phone: uniquePhone(), custom_fields: [1] }, ['body', 'custom_fields']],
      [{ first_name: 'A', phone: uniquePhone(), tags: [''] }, ['body', 'tags', 0]],
      [{ first_name: 'A', phone: uniquePhone(), source: 'x'.repeat(65) }, ['body', 'source']],
    ];
    for (const [body, loc] of bad) {
      const error = expectError(await call(t.app, tenant, 'POST', '/contacts', body), 400, 'VALIDATION_ERROR');
      expect((error.details as { loc: unknown[] }[]).map((d) => d.loc), JSON.stringify(body)).toContainEqual(loc);
    }
    expect((await call(t.app, tenant, 'POST', '/contacts', { first_name: 'x'.repeat(255), phone: uniquePhone() })).statusCode).toBe(201);
    expect(await events(tenant.id)).toHaveLength(1);
  });

  it('a duplicate phone or email (in any case) is 409 and records no event', async () => {
    const tenant = await createTenant(t.app);
    const phone = uniquePhone();
    const first = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'A', phone, email: 'Dup@Example.com' });
    expect(first.statusCode).toBe(201);
    expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'B', phone }), 409, 'CONFLICT');
    expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'C', phone: uniquePhone(), email: 'dup@example.COM' }), 409, 'CONFLICT');
    expect((await events(tenant.id)).map((e) => e.type)).toEqual(['contact.created']);
    expect((await call(t.app, tenant, 'GET', '/contacts')).json().pagination.total_items).toBe(1);
  });

  it('the same phone and email may exist in two tenants', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const body = { first_name: 'Same', phone: uniquePhone(), email: 'same@example.com' };
    expect((await call(t.app, a, 'POST', '/contacts', body)).statusCode).toBe(201);
    expect((await call(t.app, b, 'POST', '/contacts', body)).statusCode).toBe(201);
  });

  it('records exactly one contact.created event with the contact as data', async () => {
    const tenant = await createTenant(t.app);
    const contact = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ev', phone: uniquePhone(), tags: ['x'] })).json();
    const rows = await events(tenant.id);
    expect(rows).toHaveLength(1);
    expect(rows[0].type).toBe('contact.created');
    expect(rows[0].data).toEqual(contact);
  });

  it('fields outside the contact (tenant_id, id, timestamps) cannot be set by the caller', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const forgedId = crypto.randomUUID();
    const res = await call(t.app, a, 'POST', '/contacts', {
      first_name: 'Forge', phone: uniquePhone(), tenant_id: b.id, id: forgedId, created_at: '2000-01-01T00:00:00.000Z', deleted_at: '2000-01-01T00:00:00.000Z',
    });
    expect(res.statusCode).toBe(201);
    const contact = res.json();
    expect(contact.id).not.toBe(forgedId);
    expect(contact.created_at).not.toBe('2000-01-01T00:00:00.000Z');
    expect((await call(t.app, a, 'GET', `/contacts/${contact.id}`)).statusCode).toBe(200);
    expect((await call(t.app, b, 'GET', '/contacts')).json().data).toEqual([]);
  });

  it('text with a NUL character is a validation error, not a server error', async () => {
    const tenant = await createTenant(t.app);
    for (const body of [{ first_name: 'A\u0000B', phone: uniquePhone() }, { first_name: 'A', phone: uniquePhone(), custom_fields: { k: 'a\u0000b' } }]) {
      expectError(await call(t.app, tenant, 'POST', '/contacts', body), 400, 'VALIDATION_ERROR');
    }
  });
});
