import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';

describe('contacts: create and read back', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });

  it('creates a contact and records contact.created in the same transaction', async () => {
    const tenant = await createTenant(t.app);
    const phone = uniquePhone();
    const res = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Ada', phone, tags: ['vip'] });
    expect(res.statusCode).toBe(201);
    const contact = res.json();
    expect(contact).toMatchObject({ first_name: 'Ada', phone, tags: ['vip'], source: 'api', custom_fields: {} });

    const got = await call(t.app, tenant, 'GET', `/contacts/${contact.id}`);
    expect(got.json()).toEqual(contact);

    const events = await t.deps.db.selectFrom('events').selectAll().where('tenant_id', '=', tenant.id).execute();
    expect(events.map((e) => e.type)).toEqual(['contact.created']);
    expect(events[0].data).toEqual(contact);
  });

  it('answers 404 for another tenant\'s contact', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const created = (await call(t.app, a, 'POST', '/contacts', { first_name: 'Bo', phone: uniquePhone() })).json();
    const res = await call(t.app, b, 'GET', `/contacts/${created.id}`);
    expect(res.statusCode).toBe(404);
    expect(res.json().error.code).toBe('NOT_FOUND');
  });
});
