import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decryptSecret } from '../src/crypto/secrets.ts';
import { adminHeaders, call, createTenant, startTestApp, uniquePhone, type TestApp } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

const SCOPES = ['contacts:read', 'contacts:write', 'templates:read', 'templates:write', 'messages:send', 'campaigns:read', 'campaigns:write', 'campaigns:send',
  'webhooks:read', 'webhooks:write', 'media:read', 'media:write'];

describe('operator API (ARCHITECTURE section 3)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });
  const admin = (method: string, url: string, payload?: unknown) =>
    t.app.inject({ method: method as 'GET', url: `/admin/v1${url}`, headers: adminHeaders, ...(payload !== undefined ? { payload: payload as object } : {}) });
  const newTenant = async (plan = 'business') => (await admin('POST', '/tenants', { name: 'Acme', plan })).json();
  const uniqueId = () => String(Date.now()) + String(Math.floor(Math.random() * 1e6)).padStart(6, '0');

  it('a missing or wrong admin token is 401 with the envelope on every route; an API key is not an admin token', async () => {
    const tenant = await createTenant(t.app);
    for (const headers of [{}, { authorization: 'Bearer wrong' }, { authorization: 'adm_test_token' }, { authorization: `Basic ${Buffer.from('x:adm_test_token').toString('base64')}` }, tenant.headers]) {
      for (const [method, url] of [['GET', '/admin/v1/scopes'], ['POST', '/admin/v1/tenants'], ['GET', `/admin/v1/tenants/${tenant.id}`], ['DELETE', `/admin/v1/tenants/${tenant.id}`]] as const) {
        expectError(await t.app.inject({ method, url, headers }), 401, 'AUTHENTICATION_REQUIRED');
      }
    }
    expect((await admin('GET', `/tenants/${tenant.id}`)).statusCode).toBe(200);
  });

  describe('tenants', () => {
    it('creates tenants with the plan\'s standard daily quota', async () => {
      for (const [plan, daily] of [['free', 0], ['starter', 10_000], ['growth', 10_000], ['business', -1]] as const) {
        const res = await admin('POST', '/tenants', { name: `T ${plan}`, plan });
        expect(res.statusCode).toBe(201);
        const tenant = res.json();
        expect(Object.keys(tenant).sort()).toEqual(['api_requests_daily', 'created_at', 'id', 'name', 'plan']);
        expect(tenant).toMatchObject({ name: `T ${plan}`, plan, api_requests_daily: daily });
        expect((await admin('GET', `/tenants/${tenant.id}`)).json()).toEqual(tenant);
      }
    });

    it('GET /tenants lists live tenants newest first, paginated, filtered by a case-insensitive name substring', async () => {
      const m = uniqueId();
      const create = async (name: string) => (await admin('POST', '/tenants', { name, plan: 'free' })).json();
      const one = await create(`Acme ${m} one`);
      const two = await create(`ACME ${m} two`);
      const other = await create(`Other ${m}`);
      const sale = await create(`50%_off ${m}`);
      const gone = await create(`acme ${m} deleted`);
      await admin('DELETE', `/tenants/${gone.id}`);

      const first = await admin('GET', `/tenants?name=${encodeURIComponent(`acme ${m}`)}&limit=1`);
      expect(first.statusCode).toBe(200);
      expect(first.json()).toEqual({ data: [two], pagination: { page: 1, limit: 1, total_items: 2, total_pages: 2, has_next: true, has_prev: false } });
      expect((await admin('GET', `/tenants?name=${encodeURIComponent(`acme ${m}`)}&limit=1&page=2`)).json().data).toEqual([one]);
      expect((await admin('GET', `/tenants?name=${m}`)).json().data.map((t: { id: string }) => t.id)).toEqual([sale.id, other.id, two.id, one.id]);
      // % and _ are matched as themselves, not as LIKE wildcards.
      expect((await admin('GET', `/tenants?name=${encodeURIComponent(`%_off ${m}`)}`)).json().data).toEqual([sale]);
      expect((await admin('GET', `/tenants?name=${encodeURIComponent(`${m}%`)}`)).json().pagination.total_items).toBe(0);
      expect((await admin('GET', `/tenants?name=${encodeURIComponent(`acme_${m}`)}`)).json().pagination.total_items).toBe(0);

      const all = (await admin('GET', '/tenants?limit=100')).json();
      expect(all.pagination).toMatchObject({ page: 1, limit: 100 });
      expect(all.pagination.total_items).toBeGreaterThanOrEqual(4);
      const created = all.data.map((t: { created_at: string }) => t.created_at);
      expect(created).toEqual([...created].sort().reverse());
      expect(all.data.some((t: { id: string }) => t.id === gone.id)).toBe(false);
      expect((await admin('GET', '/tenants')).json().pagination.limit).toBe(20);

      for (const query of ['limit=0', 'limit=101', 'page=0', 'name=%00', `name=${'x'.repeat(256)}`]) {
        expectError(await admin('GET', `/tenants?${query}`), 400, 'VALIDATION_ERROR');
      }
      expectError(await t.app.inject({ method: 'GET', url: '/admin/v1/tenants' }), 401, 'AUTHENTICATION_REQUIRED');
    });

    it('validates the plan and name', async () => {
      for (const body of [{ name: 'X', plan: 'enterprise' }, { name: 'X' }, { plan: 'free' }, { name: '', plan: 'free' }, { name: 'X', plan: 'FREE' }]) {
        expectError(await admin('POST', '/tenants', body), 400, 'VALIDATION_ERROR');
      }
    });

    it('PATCH sets a custom daily quota; a plan change resets it to the new plan\'s standard quota', async () => {
      const tenant = await newTenant('business');
      expect((await admin('PATCH', `/tenants/${tenant.id}`, { api_requests_daily: 50_000 })).json()).toMatchObject({ plan: 'business', api_requests_daily: 50_000 });
      expect((await admin('PATCH', `/tenants/${tenant.id}`, { name: 'Renamed' })).json()).toMatchObject({ name: 'Renamed', api_requests_daily: 50_000 });
      expect((await admin('PATCH', `/tenants/${tenant.id}`, { plan: 'business' })).json()).toMatchObject({ api_requests_daily: 50_000 });
      expect((await admin('PATCH', `/tenants/${tenant.id}`, { plan: 'growth' })).json()).toMatchObject({ plan: 'growth', api_requests_daily: 10_000 });
      expect((await admin('PATCH', `/tenants/${tenant.id}`, { plan: 'business' })).json()).toMatchObject({ plan: 'business', api_requests_daily: -1 });
      expect((await admin('PATCH', `/tenants/${tenant.id}`, { plan: 'starter', api_requests_daily: 20_000 })).json()).toMatchObject({ plan: 'starter', api_requests_daily: 20_000 });
      expect((await admin('GET', `/tenants/${tenant.id}`)).json()).toMatchObject({ name: 'Renamed', plan: 'starter', api_requests_daily: 20_000 });
      for (const body of [{ api_requests_daily: -2 }, { api_requests_daily: 1.5 }, { plan: 'gold' }, { name: '' }]) {
        expectError(await admin('PATCH', `/tenants/${tenant.id}`, body), 400, 'VALIDATION_ERROR');
      }
    });

    it('unknown, malformed and deleted tenants are 404', async () => {
      const tenant = await newTenant();
      expect((await admin('DELETE', `/tenants/${tenant.id}`)).statusCode).toBe(200);
      for (const id of [tenant.id, crypto.randomUUID(), 'not-a-uuid']) {
        expectError(await admin('GET', `/tenants/${id}`), 404, 'NOT_FOUND');
        expectError(await admin('PATCH', `/tenants/${id}`, { name: 'X' }), 404, 'NOT_FOUND');
        expectError(await admin('DELETE', `/tenants/${id}`), 404, 'NOT_FOUND');
        expectError(await admin('POST', `/tenants/${id}/api-keys`, { name: 'k' }), 404, 'NOT_FOUND');
        expectError(await admin('GET', `/tenants/${id}/api-keys`), 404, 'NOT_FOUND');
      }
    });
  });

  describe('API keys', () => {
    it('creates a key svc_sk_{live|test}_{40 hex}, shown once, stored only as its SHA-256', async () => {
      const tenant = await newTenant();
      for (const mode of ['live', 'test', undefined]) {
        const res = await admin('POST', `/tenants/${tenant.id}/api-keys`, { name: `k ${mode}`, ...(mode ? { mode } : {}) });
        expect(res.statusCode).toBe(201);
        const key = res.json();
        expect(Object.keys(key).sort()).toEqual(['created_at', 'expires_at', 'id', 'ip_allowlist', 'key', 'mode', 'name', 'prefix', 'scopes']);
        expect(key.key).toMatch(new RegExp(`^svc_sk_${mode ?? 'live'}_[0-9a-f]{40}$`));
        expect(key.mode).toBe(mode ?? 'live');
        expect(key.key.startsWith(key.prefix)).toBe(true);
        expect(key.prefix.length).toBeLessThan(key.key.length - 20);
        expect(key).toMatchObject({ scopes: ['*'], expires_at: null, ip_allowlist: [] });

        const row = await t.deps.db.selectFrom('api_keys').selectAll().where('id', '=', key.id).executeTakeFirstOrThrow();
        expect(row.key_hash).toBe(createHash('sha256').update(key.key).digest('hex'));
        const secret = key.key.slice(-40);
        expect(JSON.stringify(row)).not.toContain(secret);
        expect(JSON.stringify(row)).not.toContain(secret.slice(8));
      }
    });

    it('scopes, presets (unioned), expires_at and ip_allowlist are kept', async () => {
      const tenant = await newTenant();
      const expires = new Date(Date.now() + 86_400_000).toISOString();
      const res = await admin('POST', `/tenants/${tenant.id}/api-keys`, { name: 'mixed', scopes: ['contacts:write'], preset: 'messaging', expires_at: expires, ip_allowlist: ['10.0.0.0/8', '2001:db8::/32', '203.0.113.9'] });
      expect(res.statusCode).toBe(201);
      const key = res.json();
      expect([...key.scopes].sort()).toEqual(['contacts:read', 'contacts:write', 'media:read', 'media:write', 'messages:send', 'templates:read']);
      expect(key.expires_at).toBe(expires);
      expect(key.ip_allowlist).toEqual(['10.0.0.0/8', '2001:db8::/32', '203.0.113.9']);
      const readOnly = (await admin('POST', `/tenants/${tenant.id}/api-keys`, { name: 'ro', preset: 'read_only' })).json();
      expect([...readOnly.scopes].sort()).toEqual(SCOPES.filter((s) => s.endsWith(':read')).sort());
    });

    it('validates name, scopes, preset, mode, expires_at and ip_allowlist', async () => {
      const tenant = await newTenant();
      const bad = [
        {}, { name: '' }, { name: 'k', scopes: [] }, { name: 'k', scopes: ['contacts:delete'] }, { name: 'k', scopes: ['contacts:read', 'admin'] },
        { name: 'k', preset: 'everything' }, { name: 'k', mode: 'prod' }, { name: 'k', expires_at: 'tomorrow' }, { name: 'k', expires_at: '2030-13-01T00:00:00Z' },
        { name: 'k', ip_allowlist: ['not-an-ip'] }, { name: 'k', ip_allowlist: ['10.0.0.0/33'] }, { name: 'k', ip_allowlist: ['2001:db8::/129'] },
        { name: 'k', ip_allowlist: ['10.0.0.1/8/9'] }, { name: 'k', ip_allowlist: ['10.0.0.0/'] }, { name: 'k', ip_allowlist: ['10.0.0.0/-1'] }, { name: 'k', ip_allowlist: ['300.1.1.1'] },
      ];
      for (const body of bad) expectError(await admin('POST', `/tenants/${tenant.id}/api-keys`, body), 400, 'VALIDATION_ERROR');
      expect((await admin('GET', `/tenants/${tenant.id}/api-keys`)).json().data).toEqual([]);
    });

    it('lists keys without the secret; revokes at once; a key id of another tenant is 404', async () => {
      const tenant = await createTenant(t.app);
      const other = await createTenant(t.app);
      const list = await admin('GET', `/tenants/${tenant.id}/api-keys`);
      expect(list.statusCode).toBe(200);
      const [listed] = list.json().data;
      expect(listed.id).toBe(tenant.keyId);
      expect(listed).not.toHaveProperty('key');
      expect(listed).not.toHaveProperty('key_hash');
      expect(list.body).not.toContain(tenant.key.slice(-40));
      expect(listed.prefix).toBe(tenant.key.slice(0, listed.prefix.length));

      expectError(await admin('DELETE', `/tenants/${other.id}/api-keys/${tenant.keyId}`), 404, 'NOT_FOUND');
      expect((await call(t.app, tenant, 'GET', '/contacts')).statusCode).toBe(200);

      expect((await admin('DELETE', `/tenants/${tenant.id}/api-keys/${tenant.keyId}`)).statusCode).toBe(200);
      expectError(await admin('DELETE', `/tenants/${tenant.id}/api-keys/${tenant.keyId}`), 404, 'NOT_FOUND');
      expectError(await admin('DELETE', `/tenants/${tenant.id}/api-keys/${crypto.randomUUID()}`), 404, 'NOT_FOUND');
      expectError(await admin('DELETE', `/tenants/${tenant.id}/api-keys/nope`), 404, 'NOT_FOUND');
      expect((await admin('GET', `/tenants/${tenant.id}/api-keys`)).json().data.map((k: { id: string }) => k.id)).not.toContain(tenant.keyId);
      expect((await call(t.app, other, 'GET', '/contacts')).statusCode).toBe(200);
    });
  });

  describe('business account', () => {
    const connect = (tenantId: string, body: Record<string, unknown>) => admin('PUT', `/tenants/${tenantId}/business-account`, body);

    it('connects with the token encrypted at rest (AES-256-GCM with SECRETS_KEY) and never returns it', async () => {
      const tenant = await newTenant();
      const token = `EAAG-secret-token-${crypto.randomUUID()}`;
      const phoneNumberId = uniqueId();
      const res = await connect(tenant.id, { waba_id: uniqueId(), phone_number_id: phoneNumberId, access_token: token, display_phone_number: '+15550100000' });
      expect(res.statusCode).toBe(200);
      const account = res.json();
      expect(Object.keys(account).sort()).toEqual(['connected_at', 'display_phone_number', 'messages_per_second', 'messaging_limit', 'messaging_limit_updated_at', 'messaging_tier', 'phone_number_id', 'status', 'status_reason', 'tenant_id', 'updated_at', 'waba_id']);
      // Campaign pacing defaults: Meta's standard 80 messages per second, tier 1K.
      expect(account).toMatchObject({ tenant_id: tenant.id, phone_number_id: phoneNumberId, status: 'active', status_reason: null, display_phone_number: '+15550100000', messages_per_second: 80, messaging_tier: '1K' });
      expect(res.body).not.toContain(token);
      const row = await t.deps.db.selectFrom('business_accounts').selectAll().where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
      expect(row.access_token_enc).not.toBe(token);
      expect(row.access_token_enc).not.toContain('secret-token');
      expect(decryptSecret(t.config.secretsKey, row.access_token_enc)).toBe(token);
      // a fresh IV each time: the same token never encrypts to the same text
      await connect(tenant.id, { waba_id: account.waba_id, phone_number_id: phoneNumberId, access_token: token });
      const again = await t.deps.db.selectFrom('business_accounts').selectAll().where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
      expect(again.access_token_enc).not.toBe(row.access_token_enc);
      expect(decryptSecret(t.config.secretsKey, again.access_token_enc)).toBe(token);
    });

    it('a phone_number_id held by another tenant is 409 until that tenant disconnects', async () => {
      const [a, b] = [await newTenant(), await newTenant()];
      const phoneNumberId = uniqueId();
      expect((await connect(a.id, { waba_id: uniqueId(), phone_number_id: phoneNumberId, access_token: 'tok-a' })).statusCode).toBe(200);
      expectError(await connect(b.id, { waba_id: uniqueId(), phone_number_id: phoneNumberId, access_token: 'tok-b' }), 409, 'CONFLICT');
      expect((await admin('DELETE', `/tenants/${b.id}/business-account`)).statusCode).toBe(404);

      const disconnected = await admin('DELETE', `/tenants/${a.id}/business-account`);
      expect(disconnected.statusCode).toBe(200);
      expect(disconnected.json()).toMatchObject({ tenant_id: a.id, status: 'disconnected' });
      expect((await connect(b.id, { waba_id: uniqueId(), phone_number_id: phoneNumberId, access_token: 'tok-b' })).statusCode).toBe(200);
      // and now a cannot reconnect it
      expectError(await connect(a.id, { waba_id: uniqueId(), phone_number_id: phoneNumberId, access_token: 'tok-a' }), 409, 'CONFLICT');
    });

    it('deleting a tenant releases its phone_number_id', async () => {
      const [a, b] = [await newTenant(), await newTenant()];
      const phoneNumberId = uniqueId();
      expect((await connect(a.id, { waba_id: uniqueId(), phone_number_id: phoneNumberId, access_token: 'tok' })).statusCode).toBe(200);
      await admin('DELETE', `/tenants/${a.id}`);
      expect((await connect(b.id, { waba_id: uniqueId(), phone_number_id: phoneNumberId, access_token: 'tok' })).statusCode).toBe(200);
    });

    it('validates the body', async () => {
      const tenant = await newTenant();
      for (const body of [{}, { waba_id: '1', phone_number_id: '2' }, { waba_id: '1', phone_number_id: '2', access_token: '' }, { waba_id: '', phone_number_id: '2', access_token: 't' }]) {
        expectError(await connect(tenant.id, body), 400, 'VALIDATION_ERROR');
      }
    });
  });

  it('GET /scopes: 12 scopes, the wildcard and 4 presets', async () => {
    const res = await admin('GET', '/scopes');
    expect(res.statusCode).toBe(200);
    const body = res.json();
    expect(body.scopes).toHaveLength(12);
    expect([...body.scopes].sort()).toEqual([...SCOPES].sort());
    expect(body.wildcard).toBe('*');
    expect(body.presets).toHaveLength(4);
    const presets = Object.fromEntries(body.presets.map((p: { name: string; scopes: string[] }) => [p.name, [...p.scopes].sort()]));
    expect(presets).toEqual({
      read_only: SCOPES.filter((s) => s.endsWith(':read')).sort(),
      campaigns: ['campaigns:read', 'campaigns:send', 'campaigns:write', 'contacts:read', 'media:read', 'templates:read'],
      messaging: ['contacts:read', 'media:read', 'media:write', 'messages:send', 'templates:read'],
      full_access: ['*'],
    });
  });
});
