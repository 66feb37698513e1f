import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

describe('contacts: bulk create (spec 4.3)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });
  const events = (tenantId: string) => t.deps.db.selectFrom('events').selectAll().where('tenant_id', '=', tenantId).execute();

  it('creates up to 100 contacts, source bulk by default, one contact.created per created item', async () => {
    const tenant = await createTenant(t.app);
    const items = Array.from({ length: 100 }, (_, i) => ({ first_name: `Bulk${i}`, phone: uniquePhone(), ...(i === 0 ? { source: 'import' } : {}) }));
    const res = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: items });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toEqual({ total: 100, created: 100, failed: 0, errors: [] });
    const list = (await call(t.app, tenant, 'GET', '/contacts?limit=100')).json();
    expect(list.pagination.total_items).toBe(100);
    const sources = list.data.map((c: { source: string }) => c.source);
    expect(sources.filter((s: string) => s === 'bulk')).toHaveLength(99);
    expect(sources.filter((s: string) => s === 'import')).toHaveLength(1);
    const rows = await events(tenant.id);
    expect(rows).toHaveLength(100);
    expect(rows.every((e) => e.type === 'contact.created')).toBe(true);
    const byId = new Map(list.data.map((c: { id: string }) => [c.id, c]));
    for (const e of rows) expect(e.data).toEqual(byId.get((e.data as { id: string }).id));
  });

  it('more than 100 items, none, or a non-array answer 400 and create nothing', async () => {
    const tenant = await createTenant(t.app);
    const items = Array.from({ length: 101 }, (_, i) => ({ first_name: `B${i}`, phone: uniquePhone() }));
    expectError(await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: items }), 400, 'VALIDATION_ERROR');
    expectError(await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: [] }), 400, 'VALIDATION_ERROR');
    expectError(await call(t.app, tenant, 'POST', '/contacts/bulk', {}), 400, 'VALIDATION_ERROR');
    expectError(await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: { first_name: 'A' } }), 400, 'VALIDATION_ERROR');
    expect((await call(t.app, tenant, 'GET', '/contacts')).json().pagination.total_items).toBe(0);
    expect(await events(tenant.id)).toEqual([]);
  });

  it('a bad item, an in-batch duplicate or an existing duplicate never aborts the others; errors are per index', async () => {
    const tenant = await createTenant(t.app);
    const existing = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Old', phone: uniquePhone(), email: 'old@example.com' })).json();
    const p0 = uniquePhone();
    const items: unknown[] = [
      { first_name: 'Ok0', phone: p0, email: 'ok0@example.com' },                 // 0 created
      { phone: uniquePhone() },                                                   // 1 missing first_name
      { first_name: 'BadPhone', phone: '12345' },                                 // 2 invalid phone
      { first_name: 'BadEmail', phone: uniquePhone(), email: 'nope' },            // 3 invalid email
      { first_name: 'DupPhone', phone: p0 },                                      // 4 same phone as 0
      { first_name: 'DupEmail', phone: uniquePhone(), email: 'OK0@example.com' }, // 5 same email as 0, other case
      { first_name: 'Taken', phone: existing.phone },                             // 6 phone of an existing contact
      { first_name: 'TakenMail', phone: uniquePhone(), email: 'OLD@example.com' },// 7 email of an existing contact
      'not an object',                                                            // 8
      { first_name: 'x'.repeat(256), phone: uniquePhone() },                      // 9 too long
      { first_name: 'Nul\u0000', phone: uniquePhone() },                          // 10 NUL character
      { first_name: 'Ok11', phone: uniquePhone(), tenant_id: crypto.randomUUID() },// 11 created; tenant_id ignored
      { first_name: 'Spaced', phone: `${p0.slice(0, 2)} ${p0.slice(2)}` },        // 12 a valid number, not written in E.164
    ];
    const res = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: items });
    expect(res.statusCode, res.body).toBe(201);
    const body = res.json();
    expect(body).toMatchObject({ total: 13, created: 2, failed: 11 });
    expect(body.errors.map((e: { index: number }) => e.index)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12]);
    for (const e of body.errors) expect(typeof e.error === 'string' && e.error.length > 0).toBe(true);
    const errorOf = (i: number) => body.errors.find((e: { index: number }) => e.index === i).error as string;
    expect(errorOf(4)).toBe('duplicate phone in this batch (same as item 0)');
    expect(errorOf(12)).toBe(`phone must be a phone number in E.164 format (+<country code><number>, digits only, no spaces or punctuation): did you mean ${p0}?`);
    expect(errorOf(3)).toBe('email must match format "email"'); // not "must be null", the other branch of a nullable field
    expect(errorOf(5)).toMatch(/email/);
    expect(errorOf(6)).toMatch(/phone/);
    expect(errorOf(7)).toMatch(/email/);

    const list = (await call(t.app, tenant, 'GET', '/contacts?limit=100')).json();
    expect(list.data.map((c: { first_name: string }) => c.first_name).sort()).toEqual(['Ok0', 'Ok11', 'Old']);
    expect((await events(tenant.id)).filter((e) => e.type === 'contact.created')).toHaveLength(3);
  });

  it('a batch where every item fails still answers 201 with the errors and records nothing', async () => {
    const tenant = await createTenant(t.app);
    const res = await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: [{ first_name: 'A' }, { phone: '+1' }] });
    expect(res.statusCode).toBe(201);
    expect(res.json()).toMatchObject({ total: 2, created: 0, failed: 2 });
    expect(await events(tenant.id)).toEqual([]);
  });
});
