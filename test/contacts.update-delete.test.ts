import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

describe('contacts: get, PATCH and DELETE (spec 4.3)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });
  const events = (tenantId: string) => t.deps.db.selectFrom('events').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at').execute();
  const full = () => ({ first_name: 'Ada', last_name: 'Lovelace', phone: uniquePhone(), email: `ada.${crypto.randomUUID()}@example.com`, company: 'Engines', job_title: 'Analyst', status: 'lead', tags: ['a', 'b'], custom_fields: { k: 1 } });
  async function add(tenant: TestTenant, fields: Record<string, unknown> = full()) {
    const res = await call(t.app, tenant, 'POST', '/contacts', fields);
    expect(res.statusCode, res.body).toBe(201);
    return res.json();
  }

  it('GET answers the contact, 404 for an unknown or malformed id', async () => {
    const tenant = await createTenant(t.app);
    const c = await add(tenant);
    expect((await call(t.app, tenant, 'GET', `/contacts/${c.id}`)).json()).toEqual(c);
    expectError(await call(t.app, tenant, 'GET', `/contacts/${crypto.randomUUID()}`), 404, 'NOT_FOUND');
    expectError(await call(t.app, tenant, 'GET', '/contacts/not-a-uuid'), 404, 'NOT_FOUND');
  });

  it('PATCH changes only the sent fields and records one contact.updated with the contact', async () => {
    const tenant = await createTenant(t.app);
    const c = await add(tenant);
    const res = await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { job_title: 'Countess', tags: ['c'], custom_fields: { k: 2, z: 'y' } });
    expect(res.statusCode).toBe(200);
    const updated = res.json();
    expect(updated).toEqual({ ...c, job_title: 'Countess', tags: ['c'], custom_fields: { k: 2, z: 'y' }, updated_at: expect.any(String) });
    expect(new Date(updated.updated_at).getTime()).toBeGreaterThanOrEqual(new Date(c.created_at).getTime());
    expect((await call(t.app, tenant, 'GET', `/contacts/${c.id}`)).json()).toEqual(updated);
    const rows = await events(tenant.id);
    expect(rows.map((e) => e.type)).toEqual(['contact.created', 'contact.updated']);
    expect(rows[1].data).toEqual(updated);
  });

  it('PATCH takes a new phone in E.164 only (another notation is 400 with the E.164 form); null clears nullable fields', async () => {
    const tenant = await createTenant(t.app);
    const c = await add(tenant);
    const spaced = expectError(await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { phone: '+44 20 7946 0001' }), 400, 'VALIDATION_ERROR');
    expect(spaced.message).toMatch(/^phone must be a phone number in E\.164 format .*: did you mean \+442079460001\?$/);
    expect((spaced.details as { loc: unknown[] }[])[0].loc).toEqual(['body', 'phone']);
    const res = await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { phone: '+442079460001', last_name: null, email: null, company: null, job_title: null, status: null });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ first_name: 'Ada', phone: '+442079460001', last_name: null, email: null, company: null, job_title: null, status: null, tags: ['a', 'b'] });
  });

  it('PATCH rejects a null or empty phone, a null first_name and invalid values with 400, and records nothing', async () => {
    const tenant = await createTenant(t.app);
    const c = await add(tenant);
    for (const body of [{ phone: null }, { phone: '' }, { phone: '12345' }, { phone: '+1 (415) 555-2671 000' }, { first_name: null }, { first_name: '' }, { email: 'bad' }, { tags: null }, { custom_fields: null }]) {
      const error = expectError(await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, body), 400, 'VALIDATION_ERROR');
      expect((error.details as { loc: unknown[] }[])[0].loc[0], JSON.stringify(body)).toBe('body');
    }
    expect((await call(t.app, tenant, 'GET', `/contacts/${c.id}`)).json()).toEqual(c);
    expect((await events(tenant.id)).map((e) => e.type)).toEqual(['contact.created']);
  });

  it('PATCH to a duplicate phone or email (any case) is 409 and records nothing', async () => {
    const tenant = await createTenant(t.app);
    const a = await add(tenant);
    const b = await add(tenant);
    expectError(await call(t.app, tenant, 'PATCH', `/contacts/${b.id}`, { phone: a.phone }), 409, 'CONFLICT');
    expectError(await call(t.app, tenant, 'PATCH', `/contacts/${b.id}`, { email: a.email.toUpperCase() }), 409, 'CONFLICT');
    expect((await call(t.app, tenant, 'GET', `/contacts/${b.id}`)).json()).toEqual(b);
    expect((await events(tenant.id)).map((e) => e.type)).toEqual(['contact.created', 'contact.created']);
    // its own phone is not a duplicate of itself
    expect((await call(t.app, tenant, 'PATCH', `/contacts/${b.id}`, { phone: b.phone, first_name: 'Self' })).statusCode).toBe(200);
  });

  it('PATCH cannot move a contact to another tenant or change its id, source or timestamps', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const c = await add(a);
    const res = await call(t.app, a, 'PATCH', `/contacts/${c.id}`, { tenant_id: b.id, id: crypto.randomUUID(), source: 'forged', created_at: '2000-01-01T00:00:00Z', deleted_at: '2000-01-01T00:00:00Z', first_name: 'Still' });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ id: c.id, first_name: 'Still', source: 'api', created_at: c.created_at });
    expect((await call(t.app, a, 'GET', `/contacts/${c.id}`)).statusCode).toBe(200);
    expect((await call(t.app, b, 'GET', `/contacts/${c.id}`)).statusCode).toBe(404);
  });

  it('PATCH of an unknown contact is 404', async () => {
    const tenant = await createTenant(t.app);
    expectError(await call(t.app, tenant, 'PATCH', `/contacts/${crypto.randomUUID()}`, { first_name: 'X' }), 404, 'NOT_FOUND');
    expectError(await call(t.app, tenant, 'PATCH', '/contacts/123', { first_name: 'X' }), 404, 'NOT_FOUND');
  });

  it('DELETE is a soft delete: hidden everywhere, phone and email reusable, contact.deleted recorded, second delete 404', async () => {
    const tenant = await createTenant(t.app);
    const c = await add(tenant, { ...full(), first_name: 'Gone', tags: ['gone'], status: 'gone' });
    const res = await call(t.app, tenant, 'DELETE', `/contacts/${c.id}`);
    expect(res.statusCode).toBe(200);
    expect(typeof res.json().message).toBe('string');

    expectError(await call(t.app, tenant, 'GET', `/contacts/${c.id}`), 404, 'NOT_FOUND');
    expect((await call(t.app, tenant, 'GET', '/contacts')).json().pagination.total_items).toBe(0);
    expect((await call(t.app, tenant, 'GET', '/contacts?search=gone')).json().data).toEqual([]);
    expect((await call(t.app, tenant, 'GET', '/contacts?status=gone')).json().data).toEqual([]);
    expect((await call(t.app, tenant, 'POST', '/contacts/search', { tag: 'gone' })).json().data).toEqual([]);
    expect((await call(t.app, tenant, 'POST', '/contacts/search', { search_term: 'gone' })).json().pagination.total_items).toBe(0);
    expectError(await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { first_name: 'Back' }), 404, 'NOT_FOUND');
    expectError(await call(t.app, tenant, 'DELETE', `/contacts/${c.id}`), 404, 'NOT_FOUND');

    const row = await t.deps.db.selectFrom('contacts').selectAll().where('id', '=', c.id).executeTakeFirstOrThrow();
    expect(row.deleted_at).not.toBeNull(); // history kept

    const again = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'New', phone: c.phone, email: c.email });
    expect(again.statusCode).toBe(201);
    expect(again.json().id).not.toBe(c.id);
    const bulk = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: [{ first_name: 'Dup', phone: c.phone }] });
    expect(bulk.json()).toMatchObject({ created: 0, failed: 1 });

    const rows = await events(tenant.id);
    expect(rows.map((e) => e.type)).toEqual(['contact.created', 'contact.deleted', 'contact.created']);
    expect((rows[1].data as { id: string }).id).toBe(c.id);
    expect(rows[1].data).toMatchObject({ ...c, updated_at: expect.any(String) });
  });

  it('a PATCH that changes nothing records no event', async () => {
    const tenant = await createTenant(t.app);
    const c = await add(tenant);
    const res = await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { first_name: c.first_name, tags: c.tags });
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual(c);
    expect((await events(tenant.id)).map((e) => e.type)).toEqual(['contact.created']);
  });

  it('re-sending the same custom_fields with keys in another order is no change; concurrent identical PATCHes record one event', async () => {
    const tenant = await createTenant(t.app);
    const c = await add(tenant);
    const first = await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { custom_fields: { plan: 'gold', seats: 12, region: { zone: 'eu', cell: 3 } } });
    expect(first.statusCode).toBe(200);
    const reordered = await call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { custom_fields: { region: { cell: 3, zone: 'eu' }, seats: 12, plan: 'gold' } });
    expect(reordered.json()).toEqual(first.json());
    const same = await Promise.all(Array.from({ length: 5 }, () => call(t.app, tenant, 'PATCH', `/contacts/${c.id}`, { company: 'Acme' })));
    expect(same.map((r) => r.statusCode)).toEqual([200, 200, 200, 200, 200]);
    expect((await events(tenant.id)).map((e) => e.type)).toEqual(['contact.created', 'contact.updated', 'contact.updated']);
  });
});
