import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, createTenant, startTestApp, type TestApp } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';

// The web console's sign-in plumbing (docs/console.md): the operator's one-time link and the session
// key it makes. The pages themselves are tested in a browser (test/console.e2e.test.ts).
describe('console sign-in links (POST /admin/v1/tenants/{id}/console-links)', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });
  const makeLink = (tenantId: string, payload: object = {}) =>
    t.app.inject({ method: 'POST', url: `/admin/v1/tenants/${tenantId}/console-links`, headers: { ...adminHeaders, host: 'console.example.test' }, payload });
  const redeem = (token: string) => t.app.inject({ method: 'POST', url: '/console/session/link', payload: { token } });
  const tokenOf = (url: string) => url.split('#/link/')[1];
  const contacts = (key: string) => t.app.inject({ method: 'GET', url: '/api/v1/public/contacts', headers: { authorization: `Bearer ${key}` } });

  it('answers a URL valid 15 minutes that signs in once with a new key of the preset, which sign-out revokes', async () => {
    const tenant = await createTenant(t.app);
    const res = await makeLink(tenant.id, { preset: 'read_only' });
    expect(res.statusCode).toBe(201);
    const link = res.json();
    expect(link.url).toMatch(/^http:\/\/console\.example\.test\/console\/#\/link\/csl_[0-9a-f]{48}$/);
    expect(link.preset).toBe('read_only');
    expect(Math.abs(Date.parse(link.expires_at) - Date.now() - 15 * 60_000)).toBeLessThan(10_000);

    const session = await redeem(tokenOf(link.url));
    expect(session.statusCode).toBe(200);
    const { key, scopes } = session.json();
    expect(scopes).toContain('campaigns:read');
    expect(scopes).not.toContain('campaigns:send');
    expect((await contacts(key)).statusCode).toBe(200);
    expectError(await t.app.inject({ method: 'POST', url: '/api/v1/public/contacts', headers: { authorization: `Bearer ${key}` }, payload: { first_name: 'A', phone: '+447400123456' } }), 403, 'FORBIDDEN');
    const who = await t.app.inject({ method: 'GET', url: '/console/session', headers: { authorization: `Bearer ${key}` } });
    expect(who.json()).toMatchObject({ tenant_id: tenant.id, scopes });

    // Once only.
    expectError(await redeem(tokenOf(link.url)), 401, 'AUTHENTICATION_REQUIRED');

    const out = await t.app.inject({ method: 'DELETE', url: '/console/session', headers: { authorization: `Bearer ${key}` } });
    expect(out.json()).toEqual({ revoked: true });
    expectError(await contacts(key), 401, 'AUTHENTICATION_REQUIRED');
  });

  it('signing out with a key an operator made leaves that key working', async () => {
    const tenant = await createTenant(t.app);
    const out = await t.app.inject({ method: 'DELETE', url: '/console/session', headers: tenant.headers });
    expect(out.json()).toEqual({ revoked: false });
    expect((await contacts(tenant.key)).statusCode).toBe(200);
  });

  it('refuses an unknown preset (400), an unknown tenant (404), a link made up or past its 15 minutes (401), and another origin when asked', async () => {
    const tenant = await createTenant(t.app);
    expectError(await makeLink(tenant.id, { preset: 'everything' }), 400, 'VALIDATION_ERROR');
    expectError(await makeLink('6f1d2c0e-8a4b-4c1e-9a57-2b7c1d9e3f40'), 404, 'NOT_FOUND');
    expectError(await redeem('csl_' + '0'.repeat(48)), 401, 'AUTHENTICATION_REQUIRED');
    expectError(await redeem('not-a-token'), 401, 'AUTHENTICATION_REQUIRED');
    const res = await makeLink(tenant.id, { base_url: 'https://console.example.com' });
    expect(res.json().url.startsWith('https://console.example.com/console/#/link/')).toBe(true);
    expect(res.json().preset).toBe('full_access');
    await t.deps.db.updateTable('console_links').set({ expires_at: new Date(Date.now() - 1000) }).where('tenant_id', '=', tenant.id).execute();
    expectError(await redeem(tokenOf(res.json().url)), 401, 'AUTHENTICATION_REQUIRED');
    expectError(await t.app.inject({ method: 'POST', url: `/admin/v1/tenants/${tenant.id}/console-links`, payload: {} }), 401, 'AUTHENTICATION_REQUIRED');
  });

  it('CONSOLE_ENABLED=false serves no console', async () => {
    const off = await startTestApp({ CONSOLE_ENABLED: 'false' });
    try {
      expect((await off.app.inject({ method: 'GET', url: '/console/' })).statusCode).toBe(404);
    } finally { await off.close(); }
    expect((await t.app.inject({ method: 'GET', url: '/console/' })).statusCode).not.toBe(404);
  });
});
