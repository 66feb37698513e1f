import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, API, call, createTenant, hasRedis, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { awayFromMinuteEdge, createKey, expectError, RATE_LIMIT_HEADERS } from './helpers/expect.ts';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const minuteReset = () => (Math.floor(Date.now() / 60_000) + 1) * 60;
const dayReset = () => (Math.floor(Date.now() / 86_400_000) + 1) * 86_400;
const header = (res: LightMyRequestResponse, name: string) => res.headers[name] as string | undefined;
const remainingMinute = (res: LightMyRequestResponse) => Number(header(res, 'x-ratelimit-remaining-minute'));

function expectRateHeaders(res: LightMyRequestResponse, minuteLimit: number, dayLimit: number) {
  for (const name of RATE_LIMIT_HEADERS) expect(header(res, name), `${name} on ${res.statusCode}`).toMatch(/^-?\d+$/);
  expect(Number(header(res, 'x-ratelimit-limit-minute'))).toBe(minuteLimit);
  expect(Number(header(res, 'x-ratelimit-limit-day'))).toBe(dayLimit);
}

const backends = [
  { name: 'Redis counters', env: {}, needsRedis: true },
  { name: 'in-memory counters', env: { REDIS_URL: undefined }, needsRedis: false },
];

for (const backend of backends) {
  describe.skipIf(backend.needsRedis && !hasRedis)(`rate limits (spec section 8) with ${backend.name}`, () => {
    let t: TestApp;       // RATE_LIMIT_PER_MINUTE=5
    let wide: TestApp;    // the default 120
    beforeAll(async () => {
      t = await startTestApp({ ...backend.env, RATE_LIMIT_PER_MINUTE: '5' });
      wide = await startTestApp({ ...backend.env });
      if (backend.needsRedis) expect(t.deps.redis).not.toBeNull();
      else expect(t.deps.redis).toBeNull();
    });
    afterAll(async () => { await t.close(); await wide.close(); });

    it('increment-then-check: 5 pass with decreasing Remaining, the 6th is 429 with Retry-After and all five headers', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app, { api_requests_daily: 1000 });
      for (let i = 1; i <= 5; i++) {
        const res = await call(t.app, tenant, 'GET', '/contacts');
        expect(res.statusCode).toBe(200);
        expectRateHeaders(res, 5, 1000);
        expect(remainingMinute(res)).toBe(5 - i);
        expect(Number(header(res, 'x-ratelimit-remaining-day'))).toBe(1000 - i);
        expect(header(res, 'retry-after')).toBeUndefined();
      }
      const before = minuteReset();
      const res = await call(t.app, tenant, 'GET', '/contacts');
      expectError(res, 429, 'RATE_LIMIT_EXCEEDED', 'Rate limit exceeded. Please slow down.');
      expectRateHeaders(res, 5, 1000);
      expect(remainingMinute(res)).toBe(0);
      // Refused by the minute window: the day budget is not spent.
      expect(Number(header(res, 'x-ratelimit-remaining-day'))).toBe(995);
      const retryAfter = Number(header(res, 'retry-after'));
      expect(retryAfter).toBeGreaterThanOrEqual(1);
      expect(retryAfter).toBeLessThanOrEqual(60);
      expect([before, minuteReset()]).toContain(Number(header(res, 'x-ratelimit-reset')));
      expect(Math.abs(Number(header(res, 'x-ratelimit-reset')) - Math.floor(Date.now() / 1000) - retryAfter)).toBeLessThanOrEqual(1);
      // a body that would fail parsing is refused by the window too
      const malformed = await t.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { ...tenant.headers, 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() }, payload: '{oops' });
      expectError(malformed, 429, 'RATE_LIMIT_EXCEEDED');
      // a refused write does nothing
      const refused = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'No', phone: uniquePhone() });
      expect(refused.statusCode).toBe(429);
      expect(Number(header(refused, 'x-ratelimit-remaining-day'))).toBe(995);
      expect(await t.deps.db.selectFrom('contacts').select('id').where('tenant_id', '=', tenant.id).execute()).toEqual([]);
    });

    it('headers are on every counted response: 200, 201, 400 (validation, malformed JSON, bad Idempotency-Key), 404, 409, 413', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(wide.app, { api_requests_daily: 1000 });
      const phone = uniquePhone();
      const responses = [
        await call(wide.app, tenant, 'GET', '/contacts'),
        await call(wide.app, tenant, 'POST', '/contacts', { first_name: 'A', phone }),
        await call(wide.app, tenant, 'POST', '/contacts', { first_name: 'A' }),
        await call(wide.app, tenant, 'GET', `/contacts/${crypto.randomUUID()}`),
        await call(wide.app, tenant, 'POST', '/contacts', { first_name: 'B', phone }),
        await wide.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { ...tenant.headers, 'content-type': 'application/json' }, payload: '{"first_name":' }),
        await wide.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { ...tenant.headers, 'content-type': 'application/json', 'idempotency-key': crypto.randomUUID() }, payload: '{"first_name":' }),
        await wide.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { ...tenant.headers, 'content-type': 'application/json' }, payload: JSON.stringify({ first_name: 'x'.repeat(1_100_000), phone }) }),
        await call(wide.app, tenant, 'POST', '/contacts', { first_name: 'C', phone: uniquePhone() }, { 'idempotency-key': 'not valid \u00e9' }),
      ];
      expect(responses.map((r) => r.statusCode)).toEqual([200, 201, 400, 404, 409, 400, 400, 413, 400]);
      responses.forEach((res, i) => {
        expectRateHeaders(res, 120, 1000);
        expect(remainingMinute(res)).toBe(119 - i);
      });
    });

    it('exactly 120 of 200 concurrent requests pass with the default limit', async () => {
      await awayFromMinuteEdge(8000);
      const tenant = await createTenant(wide.app);
      const results = await Promise.all(Array.from({ length: 200 }, () => call(wide.app, tenant, 'GET', `/contacts/${crypto.randomUUID()}`)));
      const statuses = results.map((r) => r.statusCode);
      expect(statuses.filter((s) => s === 404)).toHaveLength(120);
      expect(statuses.filter((s) => s === 429)).toHaveLength(80);
      const remaining = results.filter((r) => r.statusCode === 404).map(remainingMinute).sort((a, b) => a - b);
      expect(remaining).toEqual(Array.from({ length: 120 }, (_, i) => i));
    });

    it('401 and 403 answers do not consume budget (a 403 still shows it); 400 and 404 do', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app, { plan: 'starter' });
      const readOnly = await createKey(t.app, tenant.id, { preset: 'read_only' });
      const expired = await createKey(t.app, tenant.id, { expires_at: new Date(Date.now() - 1000).toISOString() });
      const fenced = await createKey(t.app, tenant.id, { ip_allowlist: ['203.0.113.1'] });
      const revoked = await createKey(t.app, tenant.id);
      await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}/api-keys/${revoked.keyId}`, headers: adminHeaders });
      for (let i = 0; i < 4; i++) {
        const forbidden = await call(t.app, readOnly, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone() });
        expect(forbidden.statusCode).toBe(403);
        expect(remainingMinute(forbidden)).toBe(5); // shown, not spent
        const fencedRes = await call(t.app, fenced, 'GET', '/contacts');
        expect(fencedRes.statusCode).toBe(403);
        expect(remainingMinute(fencedRes)).toBe(5);
        const expiredRes = await call(t.app, expired, 'GET', '/contacts');
        expect(expiredRes.statusCode).toBe(401);
        expect(header(expiredRes, 'x-ratelimit-remaining-minute')).toBeUndefined();
        expect((await call(t.app, revoked, 'GET', '/contacts')).statusCode).toBe(401);
      }
      const first = await call(t.app, tenant, 'GET', '/contacts?page=0');
      expect(first.statusCode).toBe(400);
      expect(remainingMinute(first)).toBe(4);
      expect(Number(header(first, 'x-ratelimit-remaining-day'))).toBe(9999);
      const second = await call(t.app, readOnly, 'GET', `/contacts/${crypto.randomUUID()}`);
      expect(second.statusCode).toBe(404);
      expect(remainingMinute(second)).toBe(3);
    });

    it('the plan gate (403 UPGRADE_REQUIRED) does not consume budget', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app, { plan: 'free' });
      for (let i = 0; i < 7; i++) {
        const res = await call(t.app, tenant, 'GET', '/contacts');
        expect(res.statusCode).toBe(403);
        expect(header(res, 'x-ratelimit-limit-minute')).toBe('5');
        expect(remainingMinute(res)).toBe(5);
      }
      await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders, payload: { plan: 'starter' } });
      const res = await call(t.app, tenant, 'GET', '/contacts');
      // the plan change reaches the key within the auth cache bound
      const ok = res.statusCode === 200 ? res : await (async () => { await sleep(1100); return call(t.app, tenant, 'GET', '/contacts'); })();
      expect(ok.statusCode).toBe(200);
      expect(remainingMinute(ok)).toBe(4);
    });

    it('idempotent replays do not consume budget, even once the window is spent', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app);
      const key = crypto.randomUUID();
      const body = { first_name: 'Once', phone: uniquePhone() };
      const first = await call(t.app, tenant, 'POST', '/contacts', body, { 'idempotency-key': key });
      expect(first.statusCode).toBe(201);
      expect(remainingMinute(first)).toBe(4);
      for (let i = 0; i < 6; i++) {
        const replay = await call(t.app, tenant, 'POST', '/contacts', body, { 'idempotency-key': key });
        expect(replay.statusCode).toBe(201);
        expect(replay.headers['idempotent-replayed']).toBe('true');
        expect(remainingMinute(replay)).toBe(4); // shown, not spent
      }
      expect(remainingMinute(await call(t.app, tenant, 'GET', '/contacts'))).toBe(3);
      for (let i = 0; i < 3; i++) await call(t.app, tenant, 'GET', '/contacts');
      expect((await call(t.app, tenant, 'GET', '/contacts')).statusCode).toBe(429);
      const replay = await call(t.app, tenant, 'POST', '/contacts', body, { 'idempotency-key': key });
      expect(replay.statusCode).toBe(201);
      expect(replay.body).toBe(first.body);
      expect(remainingMinute(replay)).toBe(0);
    });

    it('a 429 does not spend an Idempotency-Key: the same key runs once the window allows', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app);
      for (let i = 0; i < 5; i++) await call(t.app, tenant, 'GET', '/contacts');
      const key = crypto.randomUUID();
      const body = { first_name: 'Later', phone: uniquePhone() };
      expect((await call(t.app, tenant, 'POST', '/contacts', body, { 'idempotency-key': key })).statusCode).toBe(429);
      const row = await t.deps.db.selectFrom('idempotency_keys').selectAll().where('tenant_id', '=', tenant.id).executeTakeFirst();
      expect(row).toBeUndefined();
    });

    it('the daily window: api_requests_daily=3 allows 3, then 429 until the UTC day resets; Reset is the day when it is tighter', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(wide.app, { api_requests_daily: 3 });
      for (let i = 1; i <= 3; i++) {
        const res = await call(wide.app, tenant, 'GET', '/contacts');
        expect(res.statusCode).toBe(200);
        expectRateHeaders(res, 120, 3);
        expect(Number(header(res, 'x-ratelimit-remaining-day'))).toBe(3 - i);
        expect(remainingMinute(res)).toBe(120 - i);
        expect(Number(header(res, 'x-ratelimit-reset'))).toBe(dayReset());
      }
      const res = await call(wide.app, tenant, 'GET', '/contacts');
      expectError(res, 429, 'RATE_LIMIT_EXCEEDED', 'Rate limit exceeded. Please slow down.');
      expectRateHeaders(res, 120, 3);
      expect(Number(header(res, 'x-ratelimit-remaining-day'))).toBe(0);
      expect(Number(header(res, 'x-ratelimit-reset'))).toBe(dayReset());
      const retryAfter = Number(header(res, 'retry-after'));
      expect(Math.abs(retryAfter - (dayReset() - Math.floor(Date.now() / 1000)))).toBeLessThanOrEqual(1);
    });

    it('on a tie the day window binds: its reset is announced, and Retry-After points to it when both are spent', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app, { api_requests_daily: 5 });
      for (let i = 1; i <= 5; i++) {
        const res = await call(t.app, tenant, 'GET', '/contacts');
        expect(res.statusCode).toBe(200);
        expect(remainingMinute(res)).toBe(5 - i);
        expect(Number(header(res, 'x-ratelimit-remaining-day'))).toBe(5 - i);
        expect(Number(header(res, 'x-ratelimit-reset'))).toBe(dayReset());
      }
      const res = await call(t.app, tenant, 'GET', '/contacts');
      expectError(res, 429, 'RATE_LIMIT_EXCEEDED');
      expect(Number(header(res, 'x-ratelimit-reset'))).toBe(dayReset());
      expect(Math.abs(Number(header(res, 'retry-after')) - (dayReset() - Math.floor(Date.now() / 1000)))).toBeLessThanOrEqual(1);
    });

    it('X-RateLimit-Reset is the minute reset when the minute is tighter', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app, { api_requests_daily: 1000 });
      const res = await call(t.app, tenant, 'GET', '/contacts');
      expect(Number(header(res, 'x-ratelimit-reset'))).toBe(minuteReset());
    });

    it('api_requests_daily -1 is unlimited: the day never refuses and the minute window sets Reset', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(t.app, { api_requests_daily: -1 });
      const res = await call(t.app, tenant, 'GET', '/contacts');
      expect(res.statusCode).toBe(200);
      expectRateHeaders(res, 5, -1);
      expect(header(res, 'x-ratelimit-remaining-day')).toBe('-1');
      expect(Number(header(res, 'x-ratelimit-reset'))).toBe(minuteReset());
    });

    it('raising a tenant\'s daily quota through the operator API takes effect', async () => {
      await awayFromMinuteEdge();
      const tenant = await createTenant(wide.app, { api_requests_daily: 1 });
      expect((await call(wide.app, tenant, 'GET', '/contacts')).statusCode).toBe(200);
      expect((await call(wide.app, tenant, 'GET', '/contacts')).statusCode).toBe(429);
      await wide.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders, payload: { api_requests_daily: 100 } });
      await sleep(1100); // the auth cache (at most one second) carries the quota
      const res = await call(wide.app, tenant, 'GET', '/contacts');
      expect(res.statusCode).toBe(200);
      expect(header(res, 'x-ratelimit-limit-day')).toBe('100');
    });

    it('tenants have separate budgets', async () => {
      await awayFromMinuteEdge();
      const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
      for (let i = 0; i < 6; i++) await call(t.app, a, 'GET', '/contacts');
      expect((await call(t.app, a, 'GET', '/contacts')).statusCode).toBe(429);
      const res = await call(t.app, b, 'GET', '/contacts');
      expect(res.statusCode).toBe(200);
      expect(remainingMinute(res)).toBe(4);
    });
  });
}
