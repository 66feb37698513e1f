import { randomBytes } from 'node:crypto';
import type { FastifyRequest } from 'fastify';
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import { ApiKeyAuthenticator } from '../src/http/auth.ts';
import { adminHeaders, API, call, createTenant, eventually, itOnPostgresServer, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { createKey, expectError } from './helpers/expect.ts';

const AUTH = 'AUTHENTICATION_REQUIRED';
const ALLOWLIST = 'Request IP not in allowlist (not recoverable by retry)';
const randomKey = (mode = 'live') => `svc_sk_${mode}_${randomBytes(20).toString('hex')}`;

describe('authentication and authorisation (spec section 5)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });

  const get = (headers: Record<string, string>, extra: { remoteAddress?: string } = {}) =>
    t.app.inject({ method: 'GET', url: `${API}/contacts`, headers, ...extra });

  describe('401 rows', () => {
    it('no Authorization header or a wrong scheme: Not authenticated', async () => {
      for (const headers of [{} as Record<string, string>, { authorization: '' }, { authorization: 'Basic dXNlcjpwYXNz' }, { authorization: `Token ${randomKey()}` }, { authorization: 'Bearer' }, { authorization: 'Bearer   ' }]) {
        expectError(await get(headers), 401, AUTH, 'Not authenticated');
      }
    });

    it('a token not matching svc_sk_{live|test}_{40 hex}: Invalid API key format', async () => {
      const bad = ['abc', 'svc_sk_live_123', `svc_sk_prod_${'a'.repeat(40)}`, `svc_pk_live_${'a'.repeat(40)}`, `svc_sk_live_${'a'.repeat(39)}`,
        `svc_sk_live_${'a'.repeat(41)}`, `svc_sk_live_${'A'.repeat(40)}`, `svc_sk_live_${'g'.repeat(40)}`];
      for (const token of bad) expectError(await get({ authorization: `Bearer ${token}` }), 401, AUTH, 'Invalid API key format');
    });

    it('a well-formed key that matches no key: Invalid or revoked API key (live and test)', async () => {
      expectError(await get({ authorization: `Bearer ${randomKey('live')}` }), 401, AUTH, 'Invalid or revoked API key');
      expectError(await get({ authorization: `Bearer ${randomKey('test')}` }), 401, AUTH, 'Invalid or revoked API key');
    });

    it('the scheme is case-insensitive and a test-mode key reaches the same API', async () => {
      const tenant = await createTenant(t.app, { key: { mode: 'test' } });
      expect(tenant.key).toMatch(/^svc_sk_test_[0-9a-f]{40}$/);
      expect((await get({ authorization: `bearer ${tenant.key}` })).statusCode).toBe(200);
    });

    itOnPostgresServer('two API processes on one database')('a revoked key fails at once in the process that revoked it, and within one second in another', async () => {
      const other = await startTestApp(); // another API process on the same database
      try {
        const tenant = await createTenant(t.app);
        expect((await call(t.app, tenant, 'GET', '/contacts')).statusCode).toBe(200); // now cached in both
        expect((await call(other.app, tenant, 'GET', '/contacts')).statusCode).toBe(200);
        const revoke = await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}/api-keys/${tenant.keyId}`, headers: adminHeaders });
        expect(revoke.statusCode).toBe(200);
        const revokedAt = Date.now();
        expectError(await call(t.app, tenant, 'GET', '/contacts'), 401, AUTH, 'Invalid or revoked API key');
        const res = await eventually(async () => {
          const r = await call(other.app, tenant, 'GET', '/contacts');
          return r.statusCode === 401 ? r : null;
        }, 3000, 20);
        expect(Date.now() - revokedAt).toBeLessThan(1100);
        expectError(res, 401, AUTH, 'Invalid or revoked API key');
      } finally {
        await other.close();
      }
    });

    itOnPostgresServer('two API processes on one database')('a configured AUTH_CACHE_MS above one second cannot stretch the revocation bound', async () => {
      const slow = await startTestApp({ AUTH_CACHE_MS: '60000' });
      try {
        const tenant = await createTenant(slow.app);
        expect((await call(slow.app, tenant, 'GET', '/contacts')).statusCode).toBe(200);
        // Revoked through another process, so only the cache bound can end it here.
        await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}/api-keys/${tenant.keyId}`, headers: adminHeaders });
        const revokedAt = Date.now();
        await eventually(async () => (await call(slow.app, tenant, 'GET', '/contacts')).statusCode === 401, 3000, 20);
        expect(Date.now() - revokedAt).toBeLessThan(1100);
      } finally {
        await slow.close();
      }
    });

    it('a plan downgrade to free reaches the key within one second', async () => {
      const tenant = await createTenant(t.app, { plan: 'starter' });
      expect((await call(t.app, tenant, 'GET', '/contacts')).statusCode).toBe(200);
      await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders, payload: { plan: 'free' } });
      const changedAt = Date.now();
      const res = await eventually(async () => {
        const r = await call(t.app, tenant, 'GET', '/contacts');
        return r.statusCode === 403 ? r : null;
      }, 3000, 20);
      expect(Date.now() - changedAt).toBeLessThan(1100);
      expect(expectError(res, 403, 'UPGRADE_REQUIRED').feature_key).toBe('access_api');
    });

    it('a key past expires_at: API key has expired (already past, and expiring while in use)', async () => {
      const past = await createTenant(t.app, { key: { expires_at: new Date(Date.now() - 60_000).toISOString() } });
      expectError(await call(t.app, past, 'GET', '/contacts'), 401, AUTH, 'API key has expired');

      const soon = await createTenant(t.app, { key: { expires_at: new Date(Date.now() + 1500).toISOString() } });
      expect((await call(t.app, soon, 'GET', '/contacts')).statusCode).toBe(200);
      const res = await eventually(async () => {
        const r = await call(t.app, soon, 'GET', '/contacts');
        return r.statusCode === 401 ? r : null;
      }, 5000, 50);
      expectError(res, 401, AUTH, 'API key has expired');
    });

    it('the tenant of the key was deleted: Tenant not found', async () => {
      const tenant = await createTenant(t.app);
      const del = await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders });
      expect(del.statusCode).toBe(200);
      const res = await eventually(async () => {
        const r = await call(t.app, tenant, 'GET', '/contacts');
        return r.statusCode === 401 ? r : null;
      }, 3000, 50);
      expectError(res, 401, AUTH, 'Tenant not found');
    });
  });

  describe('IP allowlist', () => {
    const cases: { allowlist: string[]; allowed: string[]; refused: string[] }[] = [
      { allowlist: ['203.0.113.7'], allowed: ['203.0.113.7', '::ffff:203.0.113.7'], refused: ['203.0.113.8', '127.0.0.1'] },
      { allowlist: ['10.0.0.0/8'], allowed: ['10.20.30.40', '10.255.255.255', '::ffff:10.1.2.3'], refused: ['11.0.0.1', '9.255.255.255'] },
      { allowlist: ['2001:db8::1'], allowed: ['2001:db8::1', '2001:0db8:0000::0001'], refused: ['2001:db8::2', '203.0.113.7'] },
      { allowlist: ['2001:db8:abcd::/48', '192.168.1.0/24'], allowed: ['2001:db8:abcd:12::1', '192.168.1.200'], refused: ['2001:db8:abce::1', '192.168.2.1', '::1'] },
    ];
    for (const c of cases) {
      it(`allowlist ${c.allowlist.join(', ')}`, async () => {
        const tenant = await createTenant(t.app, { key: { ip_allowlist: c.allowlist } });
        for (const ip of c.allowed) expect((await get(tenant.headers, { remoteAddress: ip })).statusCode, ip).toBe(200);
        for (const ip of c.refused) expectError(await get(tenant.headers, { remoteAddress: ip }), 403, 'FORBIDDEN', ALLOWLIST);
      });
    }

    it('X-Forwarded-For is ignored unless TRUST_PROXY is set', async () => {
      const tenant = await createTenant(t.app, { key: { ip_allowlist: ['203.0.113.7'] } });
      const spoofed = await t.app.inject({ method: 'GET', url: `${API}/contacts`, headers: { ...tenant.headers, 'x-forwarded-for': '203.0.113.7' }, remoteAddress: '198.51.100.1' });
      expectError(spoofed, 403, 'FORBIDDEN', ALLOWLIST);
      const proxied = await startTestApp({ TRUST_PROXY: 'true' });
      try {
        const behindProxy = await createTenant(proxied.app, { key: { ip_allowlist: ['203.0.113.7'] } });
        const inject = (xff: string) => proxied.app.inject({ method: 'GET', url: `${API}/contacts`, headers: { ...behindProxy.headers, 'x-forwarded-for': xff }, remoteAddress: '10.0.0.2' });
        expect((await inject('203.0.113.7')).statusCode).toBe(200);
        expectError(await inject('198.51.100.1'), 403, 'FORBIDDEN', ALLOWLIST);
      } finally {
        await proxied.close();
      }
    });

    it('a key without an allowlist accepts any address', async () => {
      const tenant = await createTenant(t.app);
      for (const ip of ['198.51.100.1', '2001:db8::99']) expect((await get(tenant.headers, { remoteAddress: ip })).statusCode).toBe(200);
    });
  });

  describe('plan and scopes', () => {
    it('a plan without API access answers 403 UPGRADE_REQUIRED with feature_key access_api on every call', async () => {
      const tenant = await createTenant(t.app, { plan: 'free' });
      for (const [method, path, body] of [['GET', '/contacts'], ['POST', '/contacts', { first_name: 'A', phone: uniquePhone() }], ['GET', `/contacts/${crypto.randomUUID()}`], ['POST', '/contacts/search', {}]] as const) {
        const error = expectError(await call(t.app, tenant, method, path, body), 403, 'UPGRADE_REQUIRED');
        expect(error.upgrade_required).toBe(true);
        expect(error.feature_key).toBe('access_api');
      }
    });

    it('every paid plan has API access', async () => {
      for (const plan of ['starter', 'growth', 'business']) {
        const tenant = await createTenant(t.app, { plan });
        expect((await call(t.app, tenant, 'GET', '/contacts')).statusCode, plan).toBe(200);
      }
    });

    it('a missing scope answers 403 FORBIDDEN with required_permissions and current_permissions', async () => {
      const tenant = await createTenant(t.app, { scopes: ['contacts:read', 'templates:read'] });
      expect((await call(t.app, tenant, 'GET', '/contacts')).statusCode).toBe(200);
      const error = expectError(await call(t.app, tenant, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone() }), 403, 'FORBIDDEN', 'Missing required scope(s): contacts:write');
      expect(error.required_permissions).toEqual(['contacts:write']);
      expect(error.current_permissions).toEqual(['contacts:read', 'templates:read']);

      const writer = await createTenant(t.app, { scopes: ['contacts:write'] });
      for (const [method, path] of [['GET', '/contacts'], ['POST', '/contacts/search'], ['GET', `/contacts/${crypto.randomUUID()}`]] as const) {
        const e = expectError(await call(t.app, writer, method, path, method === 'POST' ? {} : undefined), 403, 'FORBIDDEN', 'Missing required scope(s): contacts:read');
        expect(e.required_permissions).toEqual(['contacts:read']);
        expect(e.current_permissions).toEqual(['contacts:write']);
      }
      for (const [method, path] of [['PATCH', `/contacts/${crypto.randomUUID()}`], ['DELETE', `/contacts/${crypto.randomUUID()}`], ['POST', '/contacts/bulk']] as const) {
        expectError(await call(t.app, tenant, method, path, method === 'DELETE' ? undefined : {}), 403, 'FORBIDDEN', 'Missing required scope(s): contacts:write');
      }
    });

    it('the wildcard grants every scope', async () => {
      const tenant = await createTenant(t.app, { scopes: ['*'] });
      const created = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'W', phone: uniquePhone() });
      expect(created.statusCode).toBe(201);
      expect((await call(t.app, tenant, 'GET', `/contacts/${created.json().id}`)).statusCode).toBe(200);
      expect((await call(t.app, tenant, 'PATCH', `/contacts/${created.json().id}`, { last_name: 'X' })).statusCode).toBe(200);
      expect((await call(t.app, tenant, 'DELETE', `/contacts/${created.json().id}`)).statusCode).toBe(200);
    });

    it('presets: read_only reads but cannot write; campaigns and messaging read contacts only; full_access writes', async () => {
      const readOnly = await createTenant(t.app, { preset: 'read_only' });
      expect((await call(t.app, readOnly, 'GET', '/contacts')).statusCode).toBe(200);
      expect((await call(t.app, readOnly, 'POST', '/contacts/search', {})).statusCode).toBe(200);
      const error = expectError(await call(t.app, readOnly, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone() }), 403, 'FORBIDDEN', 'Missing required scope(s): contacts:write');
      expect(error.current_permissions).toEqual(expect.arrayContaining(['contacts:read', 'campaigns:read', 'templates:read', 'webhooks:read', 'media:read']));
      expect(error.current_permissions).not.toContain('contacts:write');
      for (const preset of ['campaigns', 'messaging']) {
        const tenant = await createTenant(t.app, { preset });
        expect((await call(t.app, tenant, 'GET', '/contacts')).statusCode, preset).toBe(200);
        expect((await call(t.app, tenant, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone() })).statusCode, preset).toBe(403);
      }
      const full = await createTenant(t.app, { preset: 'full_access' });
      expect((await call(t.app, full, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone() })).statusCode).toBe(201);
    });
  });

  describe('order of the checks', () => {
    it('format is checked before lookup, and a malformed key of a real tenant is still a format error', async () => {
      const tenant = await createTenant(t.app);
      expectError(await get({ authorization: `Bearer ${tenant.key.toUpperCase()}` }), 401, AUTH, 'Invalid API key format');
      expectError(await get({ authorization: `Bearer ${tenant.key}x` }), 401, AUTH, 'Invalid API key format');
    });

    it('revoked before expired', async () => {
      const tenant = await createTenant(t.app, { key: { expires_at: new Date(Date.now() - 1000).toISOString() } });
      await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}/api-keys/${tenant.keyId}`, headers: adminHeaders });
      expectError(await call(t.app, tenant, 'GET', '/contacts'), 401, AUTH, 'Invalid or revoked API key');
    });

    it('expiry before tenant, allowlist, plan and scope', async () => {
      const tenant = await createTenant(t.app, { plan: 'free', scopes: ['templates:read'], key: { expires_at: new Date(Date.now() - 1000).toISOString(), ip_allowlist: ['203.0.113.1'] } });
      await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders });
      expectError(await get(tenant.headers, { remoteAddress: '198.51.100.1' }), 401, AUTH, 'API key has expired');
    });

    it('tenant before allowlist, plan and scope', async () => {
      const tenant = await createTenant(t.app, { plan: 'free', scopes: ['templates:read'], key: { ip_allowlist: ['203.0.113.1'] } });
      await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}`, headers: adminHeaders });
      expectError(await get(tenant.headers, { remoteAddress: '198.51.100.1' }), 401, AUTH, 'Tenant not found');
    });

    it('allowlist before plan and scope; plan before scope', async () => {
      const tenant = await createTenant(t.app, { plan: 'free', scopes: ['templates:read'], key: { ip_allowlist: ['203.0.113.1'] } });
      expectError(await get(tenant.headers, { remoteAddress: '198.51.100.1' }), 403, 'FORBIDDEN', ALLOWLIST);
      expectError(await get(tenant.headers, { remoteAddress: '203.0.113.1' }), 403, 'UPGRADE_REQUIRED');
    });

    it('authentication comes before validation and routing of the body', async () => {
      expectError(await t.app.inject({ method: 'POST', url: `${API}/contacts`, headers: { 'content-type': 'application/json' }, payload: '{not json' }), 401, AUTH, 'Not authenticated');
      expectError(await t.app.inject({ method: 'GET', url: `${API}/contacts?page=0` }), 401, AUTH, 'Not authenticated');
    });
  });

  it('a key created by another tenant never authenticates as this tenant', async () => {
    const a = await createTenant(t.app);
    const b = await createKey(t.app, (await createTenant(t.app)).id);
    const created = await call(t.app, a, 'POST', '/contacts', { first_name: 'A', phone: uniquePhone() });
    expect((await t.app.inject({ method: 'GET', url: `${API}/contacts/${created.json().id}`, headers: b.headers })).statusCode).toBe(404);
  });

  describe('the key lookup cache and the instant of expiry (ApiKeyAuthenticator on the real database)', () => {
    afterEach(() => { vi.useRealTimers(); });
    const asRequest = (tenant: { key: string }) => ({ headers: { authorization: `Bearer ${tenant.key}` }, ip: '127.0.0.1' }) as unknown as FastifyRequest;
    /** Revoked in the database only, as another API process does (this authenticator is not told). */
    const revokeElsewhere = (keyId: string) => t.deps.db.updateTable('api_keys').set({ revoked_at: new Date() }).where('id', '=', keyId).execute();

    it('a lookup is reused for exactly the cache lifetime, for every key looked up, then read again', async () => {
      const auth = new ApiKeyAuthenticator(t.deps.db, 1000);
      const [a, b] = [await createTenant(t.app), await createTenant(t.app)];
      vi.useFakeTimers({ toFake: ['Date'] });
      const t0 = Date.now();
      expect((await auth.identify(asRequest(a))).auth.keyId).toBe(a.keyId);
      expect((await auth.identify(asRequest(b))).auth.keyId).toBe(b.keyId);
      await revokeElsewhere(a.keyId);
      vi.setSystemTime(t0 + 999);
      expect((await auth.identify(asRequest(a))).auth.keyId).toBe(a.keyId);
      vi.setSystemTime(t0 + 1000);
      await expect(auth.identify(asRequest(a))).rejects.toThrow('Invalid or revoked API key');
    });

    it('forgetAll drops every cached lookup, and a lookup under way when it runs is not cached', async () => {
      const auth = new ApiKeyAuthenticator(t.deps.db, 60_000);
      const cached = await createTenant(t.app);
      await auth.identify(asRequest(cached));
      await revokeElsewhere(cached.keyId);
      auth.forgetAll();
      await expect(auth.identify(asRequest(cached))).rejects.toThrow('Invalid or revoked API key');

      // The revoking process calls forgetAll after its commit; a lookup that started before may hold the old row.
      const racing = await createTenant(t.app);
      const underWay = auth.identify(asRequest(racing));
      auth.forgetAll();
      expect((await underWay).auth.keyId).toBe(racing.keyId);
      await revokeElsewhere(racing.keyId);
      await expect(auth.identify(asRequest(racing))).rejects.toThrow('Invalid or revoked API key');
    });

    it('a key expires at the very instant of expires_at', async () => {
      const expiresAt = new Date(Math.ceil((Date.now() + 3_600_000) / 1000) * 1000);
      const tenant = await createTenant(t.app, { key: { expires_at: expiresAt.toISOString() } });
      const auth = new ApiKeyAuthenticator(t.deps.db, 0);
      vi.useFakeTimers({ toFake: ['Date'] });
      vi.setSystemTime(expiresAt.getTime() - 1);
      expect((await auth.identify(asRequest(tenant))).auth.keyId).toBe(tenant.keyId);
      vi.setSystemTime(expiresAt);
      await expect(auth.identify(asRequest(tenant))).rejects.toThrow('API key has expired');
    });

    it('the header is the Bearer scheme, one or more spaces, then the token and nothing else', async () => {
      const tenant = await createTenant(t.app);
      expect((await get({ authorization: `Bearer  ${tenant.key}` })).statusCode).toBe(200);
      for (const authorization of [`XBearer ${tenant.key}`, `Basic Bearer ${tenant.key}`, `Bearer ${tenant.key} extra`, `Bearer ${tenant.key} ${tenant.key}`]) {
        expectError(await get({ authorization }), 401, AUTH, 'Not authenticated');
      }
    });

    it('every missing scope is named in the message, comma-separated', () => {
      const auth = new ApiKeyAuthenticator(t.deps.db, 0);
      const record = {
        auth: { tenantId: 't', keyId: 'k', scopes: ['contacts:read'], plan: 'business', apiRequestsDaily: -1 },
        expiresAt: null, revoked: false, tenantDeleted: false, allowlist: null,
      };
      expect(() => auth.authorize(asRequest({ key: 'unused' }), record, ['contacts:write', 'templates:write', 'contacts:read'], undefined))
        .toThrow('Missing required scope(s): contacts:write, templates:write');
    });
  });
});
