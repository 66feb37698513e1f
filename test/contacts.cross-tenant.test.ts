import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

describe('contacts: tenant isolation', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });

  it('every endpoint answers 404 for another tenant\'s contact and leaves it untouched; lists never show it', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const theirs = (await call(t.app, a, 'POST', '/contacts', { first_name: 'Secret', last_name: 'Agent', phone: uniquePhone(), email: 'secret@example.com', status: 'lead', tags: ['spy'] })).json();
    const mine = (await call(t.app, b, 'POST', '/contacts', { first_name: 'Mine', phone: uniquePhone() })).json();

    expectError(await call(t.app, b, 'GET', `/contacts/${theirs.id}`), 404, 'NOT_FOUND');
    expectError(await call(t.app, b, 'PATCH', `/contacts/${theirs.id}`, { first_name: 'Hacked' }), 404, 'NOT_FOUND');
    expectError(await call(t.app, b, 'DELETE', `/contacts/${theirs.id}`), 404, 'NOT_FOUND');

    for (const res of [
      await call(t.app, b, 'GET', '/contacts'),
      await call(t.app, b, 'GET', '/contacts?search=secret'),
      await call(t.app, b, 'GET', '/contacts?status=lead'),
      await call(t.app, b, 'POST', '/contacts/search', {}),
      await call(t.app, b, 'POST', '/contacts/search', { search_term: 'agent', tag: 'spy' }),
      await call(t.app, b, 'POST', '/contacts/search', { tag: 'spy' }),
    ]) {
      expect(res.statusCode).toBe(200);
      expect(res.json().data.map((c: { id: string }) => c.id)).not.toContain(theirs.id);
    }
    expect((await call(t.app, b, 'GET', '/contacts')).json().data.map((c: { id: string }) => c.id)).toEqual([mine.id]);
    // b's bulk with a's phone is not a duplicate in b
    expect((await call(t.app, b, 'POST', '/contacts/bulk', { contacts: [{ first_name: 'Same', phone: theirs.phone, email: theirs.email }] })).json()).toMatchObject({ created: 1, failed: 0 });

    expect((await call(t.app, a, 'GET', `/contacts/${theirs.id}`)).json()).toEqual(theirs);
    const aEvents = await t.deps.db.selectFrom('events').select('type').where('tenant_id', '=', a.id).execute();
    expect(aEvents.map((e) => e.type)).toEqual(['contact.created']);
  });

  it('a PATCH that would collide with a phone in another tenant is allowed', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const theirs = (await call(t.app, a, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone() })).json();
    const mine = (await call(t.app, b, 'POST', '/contacts', { first_name: 'B', phone: uniquePhone() })).json();
    expect((await call(t.app, b, 'PATCH', `/contacts/${mine.id}`, { phone: theirs.phone })).statusCode).toBe(200);
  });
});
