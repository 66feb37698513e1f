import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, eventually, itOnPostgresServer, makeTempDir, removeTempDir, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

describe('Idempotency-Key (ARCHITECTURE section 4)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });
  const contactsOf = (tenant: TestTenant, app = t) => app.deps.db.selectFrom('contacts').select('id').where('tenant_id', '=', tenant.id).execute();
  const eventsOf = (tenant: TestTenant) => t.deps.db.selectFrom('events').select('type').where('tenant_id', '=', tenant.id).execute();
  const post = (app: TestApp, tenant: TestTenant, key: string, body: unknown, path = '/contacts') => call(app.app, tenant, 'POST', path, body, { 'idempotency-key': key });

  it('a replay returns the same status and byte-identical body with Idempotent-Replayed: true, and creates nothing', async () => {
    const tenant = await createTenant(t.app);
    const key = crypto.randomUUID();
    const body = { first_name: 'Once', phone: uniquePhone() };
    const first = await post(t, tenant, key, body);
    expect(first.statusCode).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    for (let i = 0; i < 3; i++) {
      const replay = await post(t, tenant, key, body);
      expect(replay.statusCode).toBe(201);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.headers['content-type']).toMatch(/^application\/json/);
      expect(replay.body).toBe(first.body);
      expect(replay.headers['x-request-id']).toMatch(/^req_[0-9a-f]{12}$/);
    }
    expect(await contactsOf(tenant)).toHaveLength(1);
    expect(await eventsOf(tenant)).toHaveLength(1);
  });

  it('bulk create is idempotent too', async () => {
    const tenant = await createTenant(t.app);
    const key = crypto.randomUUID();
    const body = { contacts: [{ first_name: 'A', phone: uniquePhone() }, { first_name: 'B', phone: uniquePhone() }] };
    const first = await post(t, tenant, key, body, '/contacts/bulk');
    expect(first.json()).toMatchObject({ created: 2 });
    const replay = await post(t, tenant, key, body, '/contacts/bulk');
    expect(replay.body).toBe(first.body);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(await contactsOf(tenant)).toHaveLength(2);
    expect(await eventsOf(tenant)).toHaveLength(2);
  });

  it('the same key with a different body or path answers 409 CONFLICT and runs nothing', async () => {
    const tenant = await createTenant(t.app);
    const key = crypto.randomUUID();
    const phone = uniquePhone();
    expect((await post(t, tenant, key, { first_name: 'A', phone })).statusCode).toBe(201);
    const reused = await post(t, tenant, key, { first_name: 'B', phone: uniquePhone() });
    expectError(reused, 409, 'CONFLICT', 'Idempotency-Key was already used with a different request');
    // Final, unlike a key still being processed: nothing to wait for.
    expect(reused.headers['retry-after']).toBeUndefined();
    expectError(await post(t, tenant, key, { first_name: 'A', phone, last_name: 'X' }), 409, 'CONFLICT');
    expectError(await post(t, tenant, key, { contacts: [{ first_name: 'A', phone: uniquePhone() }] }, '/contacts/bulk'), 409, 'CONFLICT');
    expect(await contactsOf(tenant)).toHaveLength(1);
    // the original is still replayable afterwards
    expect((await post(t, tenant, key, { first_name: 'A', phone })).headers['idempotent-replayed']).toBe('true');
  });

  it('concurrent use: one request runs, the others get 409 or the replay, and exactly one contact exists', async () => {
    const tenant = await createTenant(t.app);
    const key = crypto.randomUUID();
    const body = { first_name: 'Race', phone: uniquePhone() };
    const results = await Promise.all(Array.from({ length: 8 }, () => post(t, tenant, key, body)));
    const fresh = results.filter((r) => r.statusCode === 201 && r.headers['idempotent-replayed'] === undefined);
    expect(fresh).toHaveLength(1);
    for (const r of results) {
      if (r === fresh[0]) continue;
      if (r.statusCode === 409) {
        expectError(r, 409, 'CONFLICT', 'A request with this Idempotency-Key is still being processed');
        expect(r.headers['retry-after']).toBe('1');
      } else {
        expect(r.statusCode).toBe(201);
        expect(r.headers['idempotent-replayed']).toBe('true');
        expect(r.body).toBe(fresh[0].body);
      }
    }
    expect(await contactsOf(tenant)).toHaveLength(1);
    expect(await eventsOf(tenant)).toHaveLength(1);
  });

  itOnPostgresServer('a transaction held open beside the requests (PGlite has one connection)')('a second request while the first is still running answers 409 CONFLICT', async () => {
    const tenant = await createTenant(t.app);
    const key = crypto.randomUUID();
    const phone = uniquePhone();
    // Hold the first request inside its INSERT: an uncommitted row with the same phone blocks it on the unique index.
    let release!: () => void;
    const held = new Promise<void>((r) => { release = r; });
    let locked!: () => void;
    const lockTaken = new Promise<void>((r) => { locked = r; });
    const lock = t.deps.db.transaction().execute(async (tx) => {
      await tx.insertInto('contacts').values({ id: crypto.randomUUID(), tenant_id: tenant.id, first_name: 'Lock', phone } as never).execute();
      locked();
      await held;
      throw new Error('roll back the lock');
    }).catch(() => undefined);
    await lockTaken;
    const first = post(t, tenant, key, { first_name: 'First', phone });
    await eventually(async () => (await t.deps.db.selectFrom('idempotency_keys').select('state').where('tenant_id', '=', tenant.id).where('key', '=', key).executeTakeFirst())?.state === 'running');
    const second = await post(t, tenant, key, { first_name: 'First', phone });
    expectError(second, 409, 'CONFLICT', 'A request with this Idempotency-Key is still being processed');
    expect(second.headers['retry-after']).toBe('1');
    release();
    await lock;
    const done = await first;
    expect(done.statusCode).toBe(201);
    const replay = await post(t, tenant, key, { first_name: 'First', phone });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toBe(done.body);
    expect(await contactsOf(tenant)).toHaveLength(1);
  });

  it('a 4xx answer (400 validation, 409 duplicate) is kept and replayed', async () => {
    const tenant = await createTenant(t.app);
    const invalidKey = crypto.randomUUID();
    const invalid = await post(t, tenant, invalidKey, { first_name: 'NoPhone' });
    expectError(invalid, 400, 'VALIDATION_ERROR');
    const replay = await post(t, tenant, invalidKey, { first_name: 'NoPhone' });
    expect(replay.statusCode).toBe(400);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toBe(invalid.body);
    // The replayed envelope names the original request, and so does its X-Request-Id.
    expect(replay.headers['x-request-id']).toBe(invalid.headers['x-request-id']);
    expect(replay.json().meta.request_id).toBe(replay.headers['x-request-id']);

    const phone = uniquePhone();
    expect((await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Taken', phone })).statusCode).toBe(201);
    const dupKey = crypto.randomUUID();
    const dup = await post(t, tenant, dupKey, { first_name: 'Dup', phone });
    expect(dup.statusCode).toBe(409);
    // even once the phone is free again, the kept 409 is what this key answers
    const taken = (await call(t.app, tenant, 'GET', '/contacts')).json().data[0];
    expect((await call(t.app, tenant, 'DELETE', `/contacts/${taken.id}`)).statusCode).toBe(200);
    const dupReplay = await post(t, tenant, dupKey, { first_name: 'Dup', phone });
    expect(dupReplay.statusCode).toBe(409);
    expect(dupReplay.body).toBe(dup.body);
    expect(dupReplay.headers['idempotent-replayed']).toBe('true');
  });

  it('a key survives a restart: a new app on the same database replays it', async () => {
    // A restarted process keeps its data directory (and so its secrets key): kept responses are encrypted.
    const dataDir = makeTempDir();
    try {
      const first = await startTestApp({ DATA_DIR: dataDir });
      const tenant = await createTenant(first.app);
      const key = crypto.randomUUID();
      const body = { first_name: 'Durable', phone: uniquePhone() };
      const original = await post(first, tenant, key, body);
      expect(original.statusCode).toBe(201);
      await first.close();

      const second = await startTestApp({ DATA_DIR: dataDir });
      try {
        const replay = await post(second, tenant, key, body);
        expect(replay.statusCode).toBe(201);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(replay.body).toBe(original.body);
        expect(await contactsOf(tenant, second)).toHaveLength(1);
      } finally {
        await second.close();
      }
    } finally {
      removeTempDir(dataDir);
    }
  });

  it('keys are per tenant: the same key in two tenants is independent', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const key = crypto.randomUUID();
    const body = { first_name: 'Shared', phone: uniquePhone() };
    const ra = await post(t, a, key, body);
    const rb = await post(t, b, key, body);
    expect([ra.statusCode, rb.statusCode]).toEqual([201, 201]);
    expect(rb.headers['idempotent-replayed']).toBeUndefined();
    expect(rb.json().id).not.toBe(ra.json().id);
    expect((await post(t, b, key, { first_name: 'Other', phone: uniquePhone() })).statusCode).toBe(409);
  });

  it('an invalid Idempotency-Key answers 400 and creates nothing', async () => {
    const tenant = await createTenant(t.app);
    for (const key of ['', 'x'.repeat(256), 'has space', 'tab\there']) {
      const error = expectError(await post(t, tenant, key, { first_name: 'K', phone: uniquePhone() }), 400, 'VALIDATION_ERROR');
      expect((error.details as { loc: unknown[] }[])[0].loc).toEqual(['header', 'Idempotency-Key']);
    }
    expect(await contactsOf(tenant)).toHaveLength(0);
    expect((await post(t, tenant, 'x'.repeat(255), { first_name: 'K', phone: uniquePhone() })).statusCode).toBe(201);
  });

  it('without the header nothing is deduplicated', async () => {
    const tenant = await createTenant(t.app);
    const body = { first_name: 'Twice', phone: uniquePhone() };
    expect((await call(t.app, tenant, 'POST', '/contacts', body)).statusCode).toBe(201);
    expect((await call(t.app, tenant, 'POST', '/contacts', body)).statusCode).toBe(409);
  });

  it('a kept response expires after the TTL and the key may then be used again', async () => {
    const short = await startTestApp({ IDEMPOTENCY_TTL_MS: '300' });
    try {
      const tenant = await createTenant(short.app);
      const key = crypto.randomUUID();
      expect((await post(short, tenant, key, { first_name: 'A', phone: uniquePhone() })).statusCode).toBe(201);
      await new Promise((r) => setTimeout(r, 400));
      const again = await post(short, tenant, key, { first_name: 'B', phone: uniquePhone() });
      expect(again.statusCode).toBe(201);
      expect(again.headers['idempotent-replayed']).toBeUndefined();
    } finally {
      await short.close();
    }
  });

  it('a claim left running by a crashed request is taken over once its lock expires', async () => {
    const tenant = await createTenant(t.app);
    const key = crypto.randomUUID();
    const body = { first_name: 'Crashed', phone: uniquePhone() };
    const first = await post(t, tenant, key, body);
    expect(first.statusCode).toBe(201);
    // simulate a process that died mid-request with this key: running, lock expired
    await t.deps.db.updateTable('idempotency_keys').set({ state: 'running', response_status: null, response_body: null, locked_until: new Date(Date.now() - 1000) })
      .where('tenant_id', '=', tenant.id).where('key', '=', key).execute();
    await t.deps.db.deleteFrom('events').where('tenant_id', '=', tenant.id).execute();
    await t.deps.db.updateTable('contacts').set({ deleted_at: new Date() }).where('tenant_id', '=', tenant.id).execute();
    const retried = await post(t, tenant, key, body);
    expect(retried.statusCode).toBe(201);
    expect(retried.headers['idempotent-replayed']).toBeUndefined();
    expect((await post(t, tenant, key, body)).headers['idempotent-replayed']).toBe('true');
  });

  it('a claim left running by a process that is gone is taken over at once; while its process lives, a retry gets 409 with Retry-After', async () => {
    const tenant = await createTenant(t.app);
    const key = crypto.randomUUID();
    const body = { first_name: 'Orphan', phone: uniquePhone() };
    expect((await post(t, tenant, key, body)).statusCode).toBe(201);
    // The key running again, its lock far from expiry: first in this (live) process, then in one that ended.
    const running = (owner: string) => t.deps.db.updateTable('idempotency_keys')
      .set({ state: 'running', response_status: null, response_body: null, locked_until: new Date(Date.now() + 3_600_000), owner_process_id: owner })
      .where('tenant_id', '=', tenant.id).where('key', '=', key).execute();
    await t.deps.db.updateTable('contacts').set({ deleted_at: new Date() }).where('tenant_id', '=', tenant.id).execute();
    await running(t.deps.liveness.processId);
    const refused = await post(t, tenant, key, body);
    expectError(refused, 409, 'CONFLICT', 'A request with this Idempotency-Key is still being processed');
    expect(refused.headers['retry-after']).toBe('1');
    expect(Object.keys(refused.json().error).sort()).toEqual(['code', 'message']);

    await running(crypto.randomUUID());
    const retried = await post(t, tenant, key, body);
    expect(retried.statusCode).toBe(201);
    expect(retried.headers['idempotent-replayed']).toBeUndefined();
    expect((await post(t, tenant, key, body)).headers['idempotent-replayed']).toBe('true');
  });
});
