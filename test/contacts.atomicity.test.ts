import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

/**
 * The change and its event commit together: when recording the event fails (here a trigger that
 * refuses this tenant's events, standing in for any database failure), the change is rolled back,
 * the caller gets a 500 envelope, and an Idempotency-Key is released so the retry runs again.
 */
describe('contacts: a change and its event are one transaction', () => {
  let t: TestApp;
  let tenant: TestTenant;
  const fn = `ft_refuse_events_${Math.random().toString(36).slice(2, 10)}`;
  beforeAll(async () => {
    t = await startTestApp();
    tenant = await createTenant(t.app);
  });
  afterAll(async () => {
    await sql.raw(`DROP TRIGGER IF EXISTS ${fn} ON events`).execute(t.deps.db);
    await sql.raw(`DROP FUNCTION IF EXISTS ${fn}()`).execute(t.deps.db);
    await t.close();
  });
  // One statement per query: PGlite (the embedded default) prepares each query, and a prepared statement holds one.
  const refuseEvents = async () => {
    await sql.raw(`
    CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
      IF NEW.tenant_id = '${tenant.id}' THEN RAISE EXCEPTION 'events refused for this test tenant'; END IF;
      RETURN NEW;
    END $$`).execute(t.deps.db);
    await sql.raw(`CREATE TRIGGER ${fn} BEFORE INSERT ON events FOR EACH ROW EXECUTE FUNCTION ${fn}()`).execute(t.deps.db);
  };
  const allowEvents = async () => {
    await sql.raw(`DROP TRIGGER ${fn} ON events`).execute(t.deps.db);
    await sql.raw(`DROP FUNCTION ${fn}()`).execute(t.deps.db);
  };

  it('no contact without its event, no event without its contact; 5xx releases the Idempotency-Key', async () => {
    const existing = (await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Before', phone: uniquePhone() })).json();
    await refuseEvents();
    const key = crypto.randomUUID();
    const body = { first_name: 'Lost', phone: uniquePhone() };
    const failed = await call(t.app, tenant, 'POST', '/contacts', body, { 'idempotency-key': key });
    expectError(failed, 500, 'INTERNAL_ERROR');
    expect(failed.body).not.toContain('events refused');
    expect(failed.headers['x-ratelimit-remaining-minute']).toMatch(/^\d+$/); // counted, so it carries the headers
    expectError(await call(t.app, tenant, 'POST', '/contacts/bulk', { contacts: [{ first_name: 'B1', phone: uniquePhone() }, { first_name: 'B2', phone: uniquePhone() }] }), 500, 'INTERNAL_ERROR');
    expectError(await call(t.app, tenant, 'PATCH', `/contacts/${existing.id}`, { first_name: 'Changed' }), 500, 'INTERNAL_ERROR');
    expectError(await call(t.app, tenant, 'DELETE', `/contacts/${existing.id}`), 500, 'INTERNAL_ERROR');

    const rows = await t.deps.db.selectFrom('contacts').selectAll().where('tenant_id', '=', tenant.id).execute();
    expect(rows.map((r) => [r.id, r.first_name, r.deleted_at])).toEqual([[existing.id, 'Before', null]]);
    expect(await t.deps.db.selectFrom('idempotency_keys').select('key').where('tenant_id', '=', tenant.id).execute()).toEqual([]);

    await allowEvents();
    const retried = await call(t.app, tenant, 'POST', '/contacts', body, { 'idempotency-key': key });
    expect(retried.statusCode).toBe(201);
    expect(retried.headers['idempotent-replayed']).toBeUndefined();
    const events = await t.deps.db.selectFrom('events').select(['type', 'data']).where('tenant_id', '=', tenant.id).orderBy('created_at').execute();
    expect(events.map((e) => e.type)).toEqual(['contact.created', 'contact.created']);
    expect(events[1].data).toEqual(retried.json());
  });
});
