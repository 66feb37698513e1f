import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

describe('contacts: list, search and pagination (spec 2.4, 2.7, 4.3)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });

  async function add(tenant: TestTenant, fields: Record<string, unknown>) {
    const res = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Someone', phone: uniquePhone(), ...fields });
    expect(res.statusCode, res.body).toBe(201);
    return res.json();
  }
  const ids = (res: { json(): { data: { id: string }[] } }) => res.json().data.map((c) => c.id).sort();

  it('search matches first_name, last_name, email and company, case-insensitively, and nothing else', async () => {
    const tenant = await createTenant(t.app);
    const matches = [
      await add(tenant, { first_name: 'Zebulon' }),
      await add(tenant, { last_name: 'MacZEBUlon' }),
      await add(tenant, { email: 'zebulon@example.com' }),
      await add(tenant, { company: 'Zebulon Industries' }),
    ];
    await add(tenant, { job_title: 'zebulon', status: 'zebulon', tags: ['zebulon'], custom_fields: { x: 'zebulon' } });
    await add(tenant, { first_name: 'Other' });
    for (const term of ['zebulon', 'ZEBULON', 'ebul']) {
      const res = await call(t.app, tenant, 'GET', `/contacts?search=${term}`);
      expect(res.statusCode).toBe(200);
      expect(ids(res), term).toEqual(matches.map((c) => c.id).sort());
      expect(res.json().pagination.total_items).toBe(4);
    }
    const viaPost = await call(t.app, tenant, 'POST', '/contacts/search', { search_term: 'zEbUlOn' });
    expect(ids(viaPost)).toEqual(matches.map((c) => c.id).sort());
  });

  it('search treats % and _ literally', async () => {
    const tenant = await createTenant(t.app);
    const pct = await add(tenant, { company: '100% Cotton' });
    await add(tenant, { company: '1000 Cotton' });
    expect(ids(await call(t.app, tenant, 'GET', `/contacts?search=${encodeURIComponent('0%')}`))).toEqual([pct.id]);
    expect(ids(await call(t.app, tenant, 'GET', `/contacts?search=${encodeURIComponent('1_0')}`))).toEqual([]);
  });

  it('status is an exact filter, alone or with search', async () => {
    const tenant = await createTenant(t.app);
    const lead = await add(tenant, { first_name: 'Ann', status: 'lead' });
    const customer = await add(tenant, { first_name: 'Ann', status: 'customer' });
    await add(tenant, { first_name: 'Bob', status: 'lead' });
    await add(tenant, { first_name: 'Ann', status: 'Lead' });
    expect(ids(await call(t.app, tenant, 'GET', '/contacts?status=lead&search=ann'))).toEqual([lead.id]);
    expect(ids(await call(t.app, tenant, 'GET', '/contacts?status=customer'))).toEqual([customer.id]);
    expect((await call(t.app, tenant, 'GET', '/contacts?status=lead')).json().pagination.total_items).toBe(2);
    expect((await call(t.app, tenant, 'GET', '/contacts?status=lea')).json().data).toEqual([]);
  });

  it('POST /contacts/search applies search_term, status and tag, together or alone', async () => {
    const tenant = await createTenant(t.app);
    const vipLead = await add(tenant, { first_name: 'Cleo', status: 'lead', tags: ['vip', 'newsletter'] });
    const vipCustomer = await add(tenant, { first_name: 'Cleo', status: 'customer', tags: ['vip'] });
    const plainLead = await add(tenant, { first_name: 'Dora', status: 'lead', tags: ['newsletter'] });
    const search = (body: object, query = '') => call(t.app, tenant, 'POST', `/contacts/search${query}`, body);
    expect(ids(await search({ tag: 'vip' }))).toEqual([vipLead.id, vipCustomer.id].sort());
    expect(ids(await search({ tag: 'vi' }))).toEqual([]);
    expect(ids(await search({ status: 'lead' }))).toEqual([vipLead.id, plainLead.id].sort());
    expect(ids(await search({ tag: 'vip', status: 'lead' }))).toEqual([vipLead.id]);
    expect(ids(await search({ search_term: 'cleo', tag: 'newsletter' }))).toEqual([vipLead.id]);
    expect(ids(await search({}))).toHaveLength(3);
    const paged = await search({ tag: 'newsletter' }, '?page=2&limit=1');
    expect(paged.statusCode).toBe(200);
    expect(paged.json().data).toHaveLength(1);
    expect(paged.json().pagination).toEqual({ page: 2, limit: 1, total_items: 2, total_pages: 2, has_next: false, has_prev: true });
    expectError(await search({ tag: { a: 1 } }), 400, 'VALIDATION_ERROR');
  });

  it('the pagination object is exact on every page', async () => {
    const tenant = await createTenant(t.app);
    const empty = await call(t.app, tenant, 'GET', '/contacts');
    expect(empty.json()).toEqual({ data: [], pagination: { page: 1, limit: 20, total_items: 0, total_pages: 0, has_next: false, has_prev: false } });
    const created = [];
    for (let i = 0; i < 5; i++) created.push(await add(tenant, { first_name: `P${i}` }));
    const page = (n: number) => call(t.app, tenant, 'GET', `/contacts?page=${n}&limit=2`).then((r) => r.json());
    const [p1, p2, p3, p4] = [await page(1), await page(2), await page(3), await page(4)];
    expect(p1.pagination).toEqual({ page: 1, limit: 2, total_items: 5, total_pages: 3, has_next: true, has_prev: false });
    expect(p2.pagination).toEqual({ page: 2, limit: 2, total_items: 5, total_pages: 3, has_next: true, has_prev: true });
    expect(p3.pagination).toEqual({ page: 3, limit: 2, total_items: 5, total_pages: 3, has_next: false, has_prev: true });
    expect(p4.pagination).toEqual({ page: 4, limit: 2, total_items: 5, total_pages: 3, has_next: false, has_prev: true });
    expect([p1.data.length, p2.data.length, p3.data.length, p4.data.length]).toEqual([2, 2, 1, 0]);
    const seen = [...p1.data, ...p2.data, ...p3.data].map((c: { id: string }) => c.id);
    expect(new Set(seen).size).toBe(5);
    expect(seen.sort()).toEqual(created.map((c) => c.id).sort());
    const all = await call(t.app, tenant, 'GET', '/contacts?limit=100');
    expect(all.json().pagination).toEqual({ page: 1, limit: 100, total_items: 5, total_pages: 1, has_next: false, has_prev: false });
  });

  it('out-of-range or non-integer page and limit answer 400, never clamped (list and search)', async () => {
    const tenant = await createTenant(t.app);
    for (const query of ['page=0', 'page=-1', 'limit=0', 'limit=101', 'limit=-5', 'page=abc', 'limit=abc', 'page=1.5', 'limit=2.5', 'page=', 'limit=1e9', 'page=100000000000000000000', 'page=1000000001']) {
      for (const [method, path] of [['GET', '/contacts'], ['POST', '/contacts/search']] as const) {
        const error = expectError(await call(t.app, tenant, method, `${path}?${query}`, method === 'POST' ? {} : undefined), 400, 'VALIDATION_ERROR');
        const details = error.details as { type: string; loc: (string | number)[]; msg: string; input: unknown }[];
        expect(details[0].loc[0], query).toBe('query');
        expect(['page', 'limit']).toContain(details[0].loc[1]);
      }
    }
    for (const query of ['page=1&limit=1', 'limit=100', 'page=999', 'page=1000000000&limit=100']) {
      expect((await call(t.app, tenant, 'GET', `/contacts?${query}`)).statusCode, query).toBe(200);
    }
  });

  it('a NUL character in a filter is a 400, not a database error', async () => {
    const tenant = await createTenant(t.app);
    for (const query of ['search=a%00b', 'status=%00']) {
      const error = expectError(await call(t.app, tenant, 'GET', `/contacts?${query}`), 400, 'VALIDATION_ERROR');
      expect((error.details as { loc: unknown[] }[])[0].loc[0]).toBe('query');
    }
    for (const body of [{ search_term: 'a\u0000' }, { status: '\u0000' }, { tag: 'v\u0000ip' }]) {
      expectError(await call(t.app, tenant, 'POST', '/contacts/search', body), 400, 'VALIDATION_ERROR');
    }
  });
});
