import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EVENT_TYPES } from '../src/events/events.ts';
import { decryptSecret } from '../src/crypto/secrets.ts';
import { sql } from 'kysely';
import pg from 'pg';
import { call, createTenant, eventually, itOnPostgresServer, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';

const PUBLIC_URL = 'https://93.184.215.14/hooks/in'; // a public IP literal: no DNS needed in tests

describe('webhook endpoints: management', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp({ WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'false' }); });
  afterAll(async () => { await t.close(); });

  it('creates an endpoint, returns the secret once, stores it encrypted, and reads back exactly the spec fields', async () => {
    const tenant = await createTenant(t.app);
    const res = await call(t.app, tenant, 'POST', '/webhooks', { url: PUBLIC_URL, events: ['contact.created', 'contact.created', 'message.sent'], description: 'CRM sync' });
    expect(res.statusCode).toBe(201);
    const body = res.json();
    expect(Object.keys(body).sort()).toEqual(['data', 'signing_secret']);
    expect(body.signing_secret).toMatch(/^whsec_[0-9a-f]{64}$/);
    const endpoint = body.data;
    expect(Object.keys(endpoint).sort()).toEqual([
      'consecutive_failures', 'created_at', 'description', 'events', 'id', 'is_active', 'last_failure_at', 'last_success_at', 'updated_at', 'url',
    ]);
    expect(endpoint).toMatchObject({ url: PUBLIC_URL, events: ['contact.created', 'message.sent'], description: 'CRM sync', is_active: true, consecutive_failures: 0, last_success_at: null, last_failure_at: null, updated_at: null });

    const stored = await t.deps.db.selectFrom('webhook_endpoints').selectAll().where('id', '=', endpoint.id).executeTakeFirstOrThrow();
    expect(stored.signing_secret_enc).not.toContain(body.signing_secret.slice(6));
    expect(decryptSecret(t.config.secretsKey, stored.signing_secret_enc)).toBe(body.signing_secret);

    const got = await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}`);
    expect(got.statusCode).toBe(200);
    expect(got.json()).toEqual(endpoint);
    expect(got.body).not.toContain('whsec_');
    const list = await call(t.app, tenant, 'GET', '/webhooks');
    expect(list.json()).toEqual({ data: [endpoint] });
  });

  it('honours Idempotency-Key on create without ever storing the signing secret in clear', async () => {
    const tenant = await createTenant(t.app);
    const key = { 'idempotency-key': crypto.randomUUID() };
    const body = { url: PUBLIC_URL, events: ['contact.created'] };
    const res = await call(t.app, tenant, 'POST', '/webhooks', body, key);
    expect(res.statusCode).toBe(201);
    const kept = await t.deps.db.selectFrom('idempotency_keys').select('response_body').where('tenant_id', '=', tenant.id).execute();
    expect(kept).toHaveLength(1);
    expect(kept.map((k) => k.response_body ?? '').join('')).not.toContain(res.json().signing_secret);

    const replay = await call(t.app, tenant, 'POST', '/webhooks', body, key);
    expect(replay.statusCode).toBe(201);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toBe(res.body);
    expect((await call(t.app, tenant, 'GET', '/webhooks')).json().data).toHaveLength(1);
  });

  it('accepts a subscription to all 24 event types', async () => {
    const tenant = await createTenant(t.app);
    expect(EVENT_TYPES).toHaveLength(24);
    const res = await call(t.app, tenant, 'POST', '/webhooks', { url: PUBLIC_URL, events: [...EVENT_TYPES] });
    expect(res.statusCode).toBe(201);
    expect(res.json().data.events).toEqual([...EVENT_TYPES]);
  });

  it('rejects bad input with 400 VALIDATION_ERROR and writes nothing', async () => {
    const tenant = await createTenant(t.app);
    const cases: [unknown, string][] = [
      [{ url: 'http://93.184.215.14/x', events: ['contact.created'] }, 'HTTPS'],
      [{ url: 'https://user:pw@93.184.215.14/x', events: ['contact.created'] }, 'credentials'],
      [{ url: 'not a url', events: ['contact.created'] }, 'valid absolute URL'],
      [{ url: PUBLIC_URL, events: [] }, ''],
      [{ url: PUBLIC_URL }, ''],
      [{ url: PUBLIC_URL, events: ['contact.created', 'template.approved'] }, 'template.approved'],
      [{ url: PUBLIC_URL, events: ['contact.created'], description: 'x'.repeat(501) }, ''],
      [{ url: PUBLIC_URL, events: [42] }, ''],
      [{ url: 'https://93.184.215.14/' + 'a'.repeat(2100), events: ['contact.created'] }, ''],
    ];
    for (const [payload, text] of cases) {
      const res = await call(t.app, tenant, 'POST', '/webhooks', payload);
      expect(res.statusCode, JSON.stringify(payload)).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
      expect(res.json().error.message).toContain(text);
    }
    const unknown = await call(t.app, tenant, 'POST', '/webhooks', { url: PUBLIC_URL, events: ['contact.created', 'nope.event'] });
    expect(unknown.json().error.details[0]).toMatchObject({ loc: ['body', 'events', 1], input: 'nope.event' });
    expect((await call(t.app, tenant, 'GET', '/webhooks')).json().data).toEqual([]);
  });

  it('refuses destinations that are not public (private networks disallowed)', async () => {
    const tenant = await createTenant(t.app);
    for (const url of [
      'https://127.0.0.1/hook', 'https://localhost/hook', 'https://10.0.0.5/hook', 'https://192.168.1.10/hook', 'https://172.16.3.4/hook',
      'https://169.254.169.254/latest/meta-data', 'https://100.64.0.1/hook', 'https://[::1]/hook', 'https://[::ffff:127.0.0.1]/hook',
      'https://[::ffff:10.0.0.1]/hook', 'https://[fd00::1]/hook', 'https://[fe80::1]/hook', 'https://0.0.0.0/hook', 'https://224.0.0.1/hook',
    ]) {
      const res = await call(t.app, tenant, 'POST', '/webhooks', { url, events: ['contact.created'] });
      expect(res.statusCode, url).toBe(400);
      expect(res.json().error.code).toBe('VALIDATION_ERROR');
    }
  });

  it('updates any subset, re-enables with active: true (resetting the failure count), and validates updates', async () => {
    const tenant = await createTenant(t.app);
    const { data: endpoint } = (await call(t.app, tenant, 'POST', '/webhooks', { url: PUBLIC_URL, events: ['contact.created'] })).json();

    const cleared = await call(t.app, tenant, 'PUT', `/webhooks/${endpoint.id}`, { description: null });
    expect(cleared.json().description).toBeNull();
    const desc = await call(t.app, tenant, 'PUT', `/webhooks/${endpoint.id}`, { description: 'new' });
    expect(desc.statusCode).toBe(200);
    expect(desc.json()).toMatchObject({ description: 'new', url: PUBLIC_URL, events: ['contact.created'], is_active: true });
    expect(desc.json().updated_at).not.toBeNull();

    // What the deliverer does after 20 consecutive failures.
    await t.deps.db.updateTable('webhook_endpoints').set({ is_active: false, consecutive_failures: 20 }).where('id', '=', endpoint.id).execute();
    const enabled = await call(t.app, tenant, 'PUT', `/webhooks/${endpoint.id}`, { active: true });
    expect(enabled.json()).toMatchObject({ is_active: true, consecutive_failures: 0 });

    const disabled = await call(t.app, tenant, 'PUT', `/webhooks/${endpoint.id}`, { active: false, events: ['message.read'], url: 'https://93.184.215.15/other' });
    expect(disabled.json()).toMatchObject({ is_active: false, events: ['message.read'], url: 'https://93.184.215.15/other' });

    for (const bad of [{ url: 'http://93.184.215.14/' }, { events: [] }, { events: ['bogus'] }, { url: 'https://10.1.1.1/' }, { description: 'y'.repeat(501) }]) {
      const res = await call(t.app, tenant, 'PUT', `/webhooks/${endpoint.id}`, bad);
      expect(res.statusCode, JSON.stringify(bad)).toBe(400);
    }
    expect((await call(t.app, tenant, 'GET', `/webhooks/${endpoint.id}`)).json()).toMatchObject({ is_active: false, events: ['message.read'] });
  });

  it('rotates the secret (returned once, stored encrypted) and deletes softly', async () => {
    const tenant = await createTenant(t.app);
    const created = (await call(t.app, tenant, 'POST', '/webhooks', { url: PUBLIC_URL, events: ['contact.created'] })).json();
    const rotated = await call(t.app, tenant, 'POST', `/webhooks/${created.data.id}/rotate-secret`);
    expect(rotated.statusCode).toBe(200);
    expect(Object.keys(rotated.json()).sort()).toEqual(['message', 'signing_secret']);
    expect(rotated.json().signing_secret).toMatch(/^whsec_[0-9a-f]{64}$/);
    expect(rotated.json().signing_secret).not.toBe(created.signing_secret);
    const stored = await t.deps.db.selectFrom('webhook_endpoints').select('signing_secret_enc').where('id', '=', created.data.id).executeTakeFirstOrThrow();
    expect(decryptSecret(t.config.secretsKey, stored.signing_secret_enc)).toBe(rotated.json().signing_secret);

    const del = await call(t.app, tenant, 'DELETE', `/webhooks/${created.data.id}`);
    expect(del.statusCode).toBe(200);
    expect(Object.keys(del.json())).toEqual(['message']);
    expect((await call(t.app, tenant, 'GET', `/webhooks/${created.data.id}`)).statusCode).toBe(404);
    expect((await call(t.app, tenant, 'GET', '/webhooks')).json().data).toEqual([]);
    expect((await call(t.app, tenant, 'DELETE', `/webhooks/${created.data.id}`)).statusCode).toBe(404);
    const row = await t.deps.db.selectFrom('webhook_endpoints').select('deleted_at').where('id', '=', created.data.id).executeTakeFirstOrThrow();
    expect(row.deleted_at).not.toBeNull();
  });

  itOnPostgresServer('a second connection holds the deliverer\'s row locks')('deleting an endpoint while a deliverer records its attempts waits for it, then answers 200 (no deadlock)', async () => {
    const tenant = await createTenant(t.app);
    const created = (await call(t.app, tenant, 'POST', '/webhooks', { url: PUBLIC_URL, events: ['contact.created'] })).json();
    expect((await call(t.app, tenant, 'POST', '/contacts', { first_name: 'D', phone: uniquePhone() })).statusCode).toBe(201);
    const [delivery] = await t.deps.db.selectFrom('webhook_deliveries').select('id').where('endpoint_id', '=', created.data.id).execute();
    const deliverer = new pg.Client({ connectionString: process.env.DATABASE_URL });
    await deliverer.connect();
    try {
      const pid = (await deliverer.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
      // As webhook_record_attempts does: the batch's deliveries first...
      await deliverer.query('BEGIN');
      await deliverer.query('UPDATE webhook_deliveries SET response_time_ms = 1 WHERE id = $1', [delivery.id]);
      const deleting = call(t.app, tenant, 'DELETE', `/webhooks/${created.data.id}`);
      await eventually(async () => (await sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE ${pid} = ANY (pg_blocking_pids(pid))`.execute(t.deps.db)).rows[0].n > 0);
      // ... then their endpoints. Had the delete locked the endpoint first, one of the two would die of a deadlock here.
      await deliverer.query('SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR UPDATE', [created.data.id]);
      await deliverer.query('COMMIT');
      const del = await deleting;
      expect(del.statusCode, del.body).toBe(200);
    } finally {
      await deliverer.end();
    }
    const row = await t.deps.db.selectFrom('webhook_deliveries').select(['status', 'error_class']).where('id', '=', delivery.id).executeTakeFirstOrThrow();
    expect(row).toEqual({ status: 'failed', error_class: 'endpoint_deleted' });
  });

  it('routes literal /webhooks/deliveries paths before /webhooks/{id}', async () => {
    const tenant = await createTenant(t.app);
    const list = await call(t.app, tenant, 'GET', '/webhooks/deliveries');
    expect(list.statusCode).toBe(200);
    expect(list.json()).toEqual({ data: [], pagination: { page: 1, limit: 20, total_items: 0, total_pages: 0, has_next: false, has_prev: false } });
    const metrics = await call(t.app, tenant, 'GET', '/webhooks/deliveries/metrics');
    expect(metrics.statusCode).toBe(200);
    expect(metrics.json()).toEqual({ total: 0, success: 0, retrying: 0, abandoned: 0, pending: 0, success_rate: 0 });
    const retry = await call(t.app, tenant, 'POST', '/webhooks/deliveries/00000000-0000-4000-8000-000000000000/retry');
    expect(retry.statusCode).toBe(404);
    expect(retry.json().error.message).toBe('Webhook delivery not found');
    const badStatus = await call(t.app, tenant, 'GET', '/webhooks/deliveries?status=done');
    expect(badStatus.statusCode).toBe(400);
    const badLimit = await call(t.app, tenant, 'GET', '/webhooks/deliveries?limit=101');
    expect(badLimit.statusCode).toBe(400);
  });

  it('answers 404 for unknown or malformed ids', async () => {
    const tenant = await createTenant(t.app);
    for (const [method, path] of [['GET', '/webhooks/nope'], ['PUT', '/webhooks/00000000-0000-4000-8000-000000000000'], ['POST', '/webhooks/nope/test'], ['GET', '/webhooks/nope/deliveries'], ['POST', '/webhooks/nope/rotate-secret']] as const) {
      const res = await call(t.app, tenant, method, path, method === 'PUT' ? { description: 'x' } : undefined);
      expect(res.statusCode, path).toBe(404);
      expect(res.json().error.code).toBe('NOT_FOUND');
    }
  });

  it('isolates tenants: another tenant\'s endpoint is 404 for every route and never listed', async () => {
    const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
    const { data: endpoint } = (await call(t.app, a, 'POST', '/webhooks', { url: PUBLIC_URL, events: ['contact.created'] })).json();
    for (const [method, path, payload] of [
      ['GET', `/webhooks/${endpoint.id}`], ['PUT', `/webhooks/${endpoint.id}`, { description: 'hijack' }], ['DELETE', `/webhooks/${endpoint.id}`],
      ['POST', `/webhooks/${endpoint.id}/rotate-secret`], ['POST', `/webhooks/${endpoint.id}/test`], ['GET', `/webhooks/${endpoint.id}/deliveries`],
    ] as [string, string, unknown?][]) {
      const res = await call(t.app, b, method, path, payload);
      expect(res.statusCode, `${method} ${path}`).toBe(404);
    }
    expect((await call(t.app, b, 'GET', '/webhooks')).json().data).toEqual([]);
    expect((await call(t.app, a, 'GET', `/webhooks/${endpoint.id}`)).json()).toEqual(endpoint);
  });

  it('gates the plan (403 UPGRADE_REQUIRED, feature_key webhooks) and checks scopes', async () => {
    const starter = await createTenant(t.app, { plan: 'starter' });
    for (const [method, path] of [['GET', '/webhooks'], ['POST', '/webhooks'], ['GET', '/webhooks/deliveries'], ['GET', '/webhooks/deliveries/metrics']] as const) {
      const res = await call(t.app, starter, method, path, method === 'POST' ? { url: PUBLIC_URL, events: ['contact.created'] } : undefined);
      expect(res.statusCode).toBe(403);
      expect(res.json().error).toMatchObject({ code: 'UPGRADE_REQUIRED', upgrade_required: true, feature_key: 'webhooks' });
    }
    const growth = await createTenant(t.app, { plan: 'growth', scopes: ['webhooks:read'] });
    expect((await call(t.app, growth, 'GET', '/webhooks')).statusCode).toBe(200);
    const write = await call(t.app, growth, 'POST', '/webhooks', { url: PUBLIC_URL, events: ['contact.created'] });
    expect(write.statusCode).toBe(403);
    expect(write.json().error).toMatchObject({ code: 'FORBIDDEN', required_permissions: ['webhooks:write'] });
    const noRead = await createTenant(t.app, { scopes: ['contacts:read'] });
    expect((await call(t.app, noRead, 'GET', '/webhooks/deliveries')).statusCode).toBe(403);
  });
});
