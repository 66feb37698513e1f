import type { AddressInfo } from 'node:net';
import { Client } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, API, call, createTenant, eventually, removeTempDir, startTestApp, uniquePhone, type TestApp, type TestTenant } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';
import { RECIPIENT_STATUSES } from '../src/modules/campaigns/campaigns.schemas.ts';

const REQ_ID = /^req_[0-9a-f]{12}$/;

describe('shutting down', () => {
  it('a request that reaches the app while it closes is a 503 in the envelope; the in-flight one still completes', async () => {
    let release!: () => void;
    let entered!: () => void;
    const held = new Promise<void>((resolve) => { release = resolve; });
    const inHandler = new Promise<void>((resolve) => { entered = resolve; });
    const app = await startTestApp({}, { routes: (a) => { a.get('/__test/slow', async () => { entered(); await held; return { done: true }; }); } });
    await app.app.listen({ port: 0, host: '127.0.0.1' });
    const client = new Client(`http://127.0.0.1:${(app.app.server.address() as AddressInfo).port}`, { pipelining: 2 });
    try {
      const slow = client.request({ method: 'GET', path: '/__test/slow' });
      await inHandler; // in flight for certain before the app starts closing
      // Pipelined on the same connection: the server reads it only once the slow one has answered.
      const queued = client.request({ method: 'GET', path: '/healthz' });
      const closed = app.close();
      // The server stops listening only after the preClose hooks ran: from then on the app is closing.
      await eventually(async () => !app.app.server.listening, 5_000, 10);
      release();
      const first = await slow;
      expect(first.statusCode).toBe(200);
      expect(await first.body.json()).toEqual({ done: true });
      const refused = await queued;
      expect(refused.statusCode).toBe(503);
      expect(refused.headers['retry-after']).toBe('1');
      expect(refused.headers['x-request-id']).toMatch(REQ_ID);
      const body = await refused.body.json() as { success: boolean; error: { code: string; message: string }; meta: { request_id: string } };
      expect(body).toMatchObject({ success: false, error: { code: 'INTERNAL_ERROR', message: 'The service is shutting down; retry the request' } });
      expect(body.meta.request_id).toBe(refused.headers['x-request-id']);
      await closed;
    } finally {
      await client.destroy();
    }
  });
});

describe('error envelope and request ids (spec section 7)', () => {
  let t: TestApp;
  let tenant: TestTenant;
  const logs: Record<string, unknown>[] = [];
  beforeAll(async () => {
    t = await startTestApp({}, {
      logStream: { write: (line: string) => { logs.push(JSON.parse(line)); } },
      routes: (app) => {
        app.get('/__test/boom', async () => {
          const err = new Error('secret internal detail: password=hunter2');
          throw err;
        });
      },
    });
    tenant = await createTenant(t.app);
  });
  afterAll(async () => { await t.close(); });

  it('validation errors are 400 (never 422) with details {type, loc, msg, input}', async () => {
    const missing = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'A' }), 400, 'VALIDATION_ERROR');
    expect(missing.details).toEqual([{ type: 'missing', loc: ['body', 'phone'], msg: 'Field required', input: null }]);
    const error = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'x'.repeat(256), phone: uniquePhone() }), 400, 'VALIDATION_ERROR');
    const details = error.details as Record<string, unknown>[];
    expect(details.length).toBeGreaterThanOrEqual(1);
    for (const d of details) {
      expect(Object.keys(d).sort()).toEqual(['input', 'loc', 'msg', 'type']);
      expect(typeof d.type).toBe('string');
      expect(Array.isArray(d.loc)).toBe(true);
      expect(typeof d.msg).toBe('string');
    }
    expect(details[0]).toMatchObject({ loc: ['body', 'first_name'], input: 'x'.repeat(256) });
    const nested = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone(), tags: ['ok', ''] }), 400, 'VALIDATION_ERROR');
    expect((nested.details as Record<string, unknown>[])[0]).toMatchObject({ loc: ['body', 'tags', 1], input: '' });

    const query = expectError(await call(t.app, tenant, 'GET', '/contacts?limit=101'), 400, 'VALIDATION_ERROR');
    const [q] = query.details as Record<string, unknown>[];
    expect(q.loc).toEqual(['query', 'limit']);
    expect(Object.keys(q).sort()).toEqual(['input', 'loc', 'msg', 'type']);

    const phone = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'A', phone: '12' }), 400, 'VALIDATION_ERROR');
    expect(phone.details).toEqual([{ type: expect.any(String), loc: ['body', 'phone'], msg: expect.any(String), input: '12' }]);
  });

  it('a value outside a closed list is one detail naming the allowed values, in the body and in the query', async () => {
    const category = expectError(await call(t.app, tenant, 'POST', '/templates', { template_name: 'enum_check', language: 'en_US', category: 'PROMO', components: [{ type: 'BODY', text: 'Hi' }] }),
      400, 'VALIDATION_ERROR', 'category must be one of: MARKETING, UTILITY, AUTHENTICATION');
    expect(category.details).toEqual([{ type: 'enum', loc: ['body', 'category'], msg: 'category must be one of: MARKETING, UTILITY, AUTHENTICATION', input: 'PROMO' }]);
    const wrongType = expectError(await call(t.app, tenant, 'POST', '/templates', { template_name: 'enum_check', language: 'en_US', category: 7, components: [{ type: 'BODY', text: 'Hi' }] }),
      400, 'VALIDATION_ERROR', 'category must be one of: MARKETING, UTILITY, AUTHENTICATION');
    expect(wrongType.details).toEqual([{ type: 'enum', loc: ['body', 'category'], msg: 'category must be one of: MARKETING, UTILITY, AUTHENTICATION', input: 7 }]);
    const allowed = `status must be one of: ${RECIPIENT_STATUSES.join(', ')}`;
    expect(allowed).toMatch(/^status must be one of: pending, sending, .*failed$/);
    const status = expectError(await call(t.app, tenant, 'GET', '/campaigns/00000000-0000-7000-8000-000000000000/recipients?status=bounced'), 400, 'VALIDATION_ERROR', allowed);
    expect(status.details).toEqual([{ type: 'enum', loc: ['query', 'status'], msg: allowed, input: 'bounced' }]);
  });

  it('malformed JSON, an empty JSON body and a non-object body are 400 VALIDATION_ERROR', async () => {
    const inject = (payload: string, type = 'application/json') =>
      t.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { ...tenant.headers, 'content-type': type }, payload });
    expectError(await inject('{"first_name": "A",'), 400, 'VALIDATION_ERROR');
    expectError(await inject('not json at all'), 400, 'VALIDATION_ERROR');
    expectError(await inject(''), 400, 'VALIDATION_ERROR');
    expectError(await inject('[1,2]'), 400, 'VALIDATION_ERROR');
    expectError(await inject('"string"'), 400, 'VALIDATION_ERROR');
    expectError(await inject('null'), 400, 'VALIDATION_ERROR');
    expectError(await t.app.inject({ method: 'POST', url: `${API}/contacts`, headers: tenant.headers }), 400, 'VALIDATION_ERROR');
    const unsupported = await inject('first_name=A', 'application/x-www-form-urlencoded');
    expect(unsupported.statusCode).toBe(415);
    expectError(unsupported, 415, 'VALIDATION_ERROR');
  });

  it('unknown routes are 404 NOT_FOUND, with or without a key, inside and outside the API prefix', async () => {
    expectError(await t.app.inject({ method: 'GET', url: `${API}/nothing-here` }), 404, 'NOT_FOUND');
    expectError(await call(t.app, tenant, 'GET', '/nothing-here'), 404, 'NOT_FOUND');
    expectError(await t.app.inject({ method: 'GET', url: '/nope' }), 404, 'NOT_FOUND');
    expectError(await t.app.inject({ method: 'GET', url: '/api/v2/public/contacts' }), 404, 'NOT_FOUND');
    expectError(await t.app.inject({ method: 'POST', url: '/admin/v1/nope', headers: adminHeaders }), 404, 'NOT_FOUND');
  });

  it('URLs the router rejects (bad percent-encoding, over-long id) still get the envelope and a request id', async () => {
    expectError(await call(t.app, tenant, 'GET', `/contacts/${'a'.repeat(500)}`), 404, 'NOT_FOUND');
    expectError(await call(t.app, tenant, 'DELETE', `/contacts/${'a'.repeat(500)}`), 404, 'NOT_FOUND');
    const bad = await call(t.app, tenant, 'GET', '/contacts/%E0%A4%A');
    expectError(bad, 400, 'VALIDATION_ERROR');
    expect(bad.headers['x-request-id']).toMatch(REQ_ID);
  });

  it('a wrong method is 405 with the envelope and an Allow header', async () => {
    const put = await call(t.app, tenant, 'PUT', '/contacts', {});
    expectError(put, 405, 'NOT_FOUND');
    expect(put.headers.allow).toMatch(/GET/);
    expect(put.headers.allow).toMatch(/POST/);
    const onItem = await call(t.app, tenant, 'PUT', `/contacts/${crypto.randomUUID()}`, {});
    expectError(onItem, 405, 'NOT_FOUND');
    for (const m of ['GET', 'PATCH', 'DELETE']) expect(onItem.headers.allow).toContain(m);
    expectError(await call(t.app, tenant, 'DELETE', '/contacts'), 405, 'NOT_FOUND');
    expectError(await t.app.inject({ method: 'POST', url: '/healthz' }), 405, 'NOT_FOUND');
  });

  it('a body over 1 MiB is 413 with the envelope', async () => {
    const payload = JSON.stringify({ first_name: 'A', phone: uniquePhone(), custom_fields: { blob: 'x'.repeat(1024 * 1024) } });
    const res = await t.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { ...tenant.headers, 'content-type': 'application/json' }, payload });
    expectError(res, 413, 'VALIDATION_ERROR');
    const justUnder = JSON.stringify({ first_name: 'A', phone: uniquePhone(), custom_fields: { blob: 'x'.repeat(1024 * 1024 - 200) } });
    expect(Buffer.byteLength(justUnder)).toBeLessThanOrEqual(1024 * 1024);
    expect((await t.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { ...tenant.headers, 'content-type': 'application/json' }, payload: justUnder })).statusCode).toBe(201);
  });

  it('an unexpected error is 500 INTERNAL_ERROR without stack or detail, logged once with the request id', async () => {
    logs.length = 0;
    const res = await t.app.inject({ method: 'GET', url: '/__test/boom' });
    const error = expectError(res, 500, 'INTERNAL_ERROR');
    expect(res.body).not.toMatch(/hunter2|secret internal|stack|at .*\.ts/);
    expect(Object.keys(error).sort()).toEqual(['code', 'message']);
    const errors = logs.filter((l) => (l.level as number) >= 50);
    expect(errors).toHaveLength(1);
    expect(JSON.stringify(errors[0])).toContain(res.headers['x-request-id'] as string);
    expect(errors[0].request_id).toBe(res.headers['x-request-id']);
    expect(JSON.stringify(errors[0])).toContain('hunter2'); // the detail goes to the log, not to the caller
  });

  it('X-Request-Id: req_<12 hex> on every response, equal to meta.request_id on errors', async () => {
    const responses = [
      await call(t.app, tenant, 'GET', '/contacts'),
      await t.app.inject({ method: 'GET', url: `${API}/contacts` }),
      await t.app.inject({ method: 'GET', url: '/nope' }),
      await t.app.inject({ method: 'GET', url: '/healthz' }),
      await t.app.inject({ method: 'GET', url: '/readyz' }),
      await t.app.inject({ method: 'GET', url: '/admin/v1/scopes', headers: adminHeaders }),
      await t.app.inject({ method: 'GET', url: '/admin/v1/scopes' }),
    ];
    const ids = responses.map((r) => r.headers['x-request-id'] as string);
    for (const id of ids) expect(id).toMatch(REQ_ID);
    expect(new Set(ids).size).toBe(ids.length);
    for (const r of responses.filter((r) => r.statusCode >= 400)) expect(r.json().meta.request_id).toBe(r.headers['x-request-id']);
  });

  it('X-Request-Id echoes the caller\'s printable value up to 128 characters and replaces anything else', async () => {
    const withId = (id: string) => t.app.inject({ method: 'GET', url: `${API}/contacts`, headers: { ...tenant.headers, 'x-request-id': id } });
    for (const id of ['my-trace-123', 'a'.repeat(128), 'abc:def/ghi?=~!']) {
      const res = await withId(id);
      expect(res.headers['x-request-id']).toBe(id);
    }
    const unauth = await t.app.inject({ method: 'GET', url: `${API}/contacts`, headers: { 'x-request-id': 'trace-401' } });
    expect(unauth.headers['x-request-id']).toBe('trace-401');
    expect(unauth.json().meta.request_id).toBe('trace-401');
    for (const id of ['a'.repeat(129), 'has space', 'caf\u00e9', 'tab\tinside']) {
      const res = await withId(id);
      expect(res.headers['x-request-id'], JSON.stringify(id)).toMatch(REQ_ID);
    }
    const bad = await t.app.inject({ method: 'GET', url: '/nope', headers: { 'x-request-id': 'x'.repeat(500) } });
    expect(bad.headers['x-request-id']).toMatch(REQ_ID);
    expect(bad.json().meta.request_id).toBe(bad.headers['x-request-id']);
  });

  it('the database going away mid-run is a 500 INTERNAL_ERROR envelope, not a crash or a hang', async () => {
    const broken = await startTestApp();
    try {
      const victim = await createTenant(broken.app);
      await broken.deps.database.close();
      const res = await broken.app.inject({ method: 'GET', url: `${API}/contacts`, headers: victim.headers });
      expectError(res, 500, 'INTERNAL_ERROR');
      expect(res.body).not.toMatch(/stack|Pool|pg/);
      const ready = await broken.app.inject({ method: 'GET', url: '/readyz' });
      expect(ready.statusCode).toBe(503);
      expect(ready.json()).toMatchObject({ status: 'not_ready', database: 'unavailable' });
    } finally {
      // Not broken.close(): its database is closed already.
      await broken.app.close();
      broken.deps.redis?.disconnect();
      removeTempDir(broken.config.dataDir);
    }
  });
});
