import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, createTenant, eventually } from './helpers/app.ts';
import {
  createApprovedTemplate, createConnectedTenant, postCallback, sandboxControl, startUpstreamApp, uniqueTemplateName, type UpstreamTenant, type UpstreamTestApp,
} from './helpers/upstream.ts';
import { createContacts, someContacts, uniqueTag } from './helpers/campaigns.ts';

/** Meta's capacity and template-standing callbacks (issue 23 §3), sent by the sandbox on request. */
describe('account callbacks: messaging limit, throughput, template quality and category', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  const account = async (tenantId: string) => (await t.app.inject({ method: 'GET', url: `/admin/v1/tenants/${tenantId}/business-account`, headers: adminHeaders })).json();
  const control = (path: string, body: unknown) => sandboxControl(t.sandbox!, 'POST', path, body);
  const uniqueId = (prefix: string) => `${prefix}${Date.now()}${randomBytes(3).readUIntBE(0, 3)}`;

  it('at connection the limit (and display number) is read from the upstream; an operator value wins', async () => {
    const wabaId = uniqueId('1');
    const phoneNumberId = uniqueId('2');
    // Before this number is connected anywhere: the callback routes to no tenant, the sandbox keeps the limit.
    expect((await control('/__sandbox/business_capability', { waba_id: wabaId, phone_number_id: phoneNumberId, max_daily_conversations_per_business: 2000 })).status).toBe(200);
    const tenant = await createTenant(t.app);
    const connect = (extra: Record<string, unknown> = {}) => t.app.inject({ method: 'PUT', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders,
      payload: { waba_id: wabaId, phone_number_id: phoneNumberId, access_token: 'sandbox-token', ...extra } });
    const connected = await connect();
    expect(connected.statusCode, connected.body).toBe(200);
    expect(connected.json()).toMatchObject({ messaging_limit: 2000, messaging_limit_updated_at: expect.any(String), display_phone_number: expect.stringMatching(/^1555\d{7}$/), messaging_tier: '1K' });
    expect((await connect({ messaging_limit: 300, display_phone_number: '+1 555 0100' })).json()).toMatchObject({ messaging_limit: 300, display_phone_number: '+1 555 0100' });
    expect((await connect({ messaging_limit: null })).json()).toMatchObject({ messaging_limit: null });
    // The operator's field is checked like the others.
    for (const bad of [0, -1, 2.5, '250']) {
      const res = await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders, payload: { messaging_limit: bad } });
      expect(res.statusCode, JSON.stringify(bad)).toBe(400);
    }
  });

  it('business_capability_update sets the portfolio limit of the tenants under that WABA only (-1: unlimited); an unsigned one changes nothing', async () => {
    const a = await createConnectedTenant(t.app);
    const b = await createConnectedTenant(t.app);
    expect((await control('/__sandbox/business_capability', { waba_id: a.wabaId, max_daily_conversations_per_business: 10000 })).status).toBe(200);
    await eventually(async () => (await account(a.id)).messaging_limit === 10000);
    expect((await account(b.id)).messaging_limit).toBeNull();

    const forged = { object: 'whatsapp_business_account', entry: [{ id: b.wabaId, time: 1, changes: [{ field: 'business_capability_update', value: { max_daily_conversations_per_business: 250 } }] }] };
    expect((await postCallback(t.app, forged, 'sha256=' + '0'.repeat(64))).statusCode).toBe(401);
    expect((await postCallback(t.app, forged, null)).statusCode).toBe(401);
    expect((await account(b.id)).messaging_limit).toBeNull();
    // Signed, Meta's own shape (the integer, and the deprecated per-phone field beside it).
    expect((await postCallback(t.app, { ...forged, entry: [{ ...forged.entry[0], changes: [{ field: 'business_capability_update', value: { max_daily_conversation_per_phone: 250, max_daily_conversations_per_business: 250 } }] }] })).statusCode).toBe(200);
    expect((await account(b.id)).messaging_limit).toBe(250);
    expect((await account(a.id)).messaging_limit).toBe(10000);

    expect((await control('/__sandbox/business_capability', { waba_id: a.wabaId, max_daily_conversations_per_business: -1 })).status).toBe(200);
    await eventually(async () => (await account(a.id)).messaging_limit === null);
    expect((await account(b.id)).messaging_limit).toBe(250);
    expect((await control('/__sandbox/business_capability', { waba_id: a.wabaId, max_daily_conversations_per_business: 300 })).status).toBe(400);
  });

  it('phone_number_quality_update THROUGHPUT_UPGRADE raises that number\'s pacing to 1,000/s, not another number\'s of the same WABA; its limit tier updates the portfolio', async () => {
    const wabaId = uniqueId('1');
    const [c, d] = [await createTenant(t.app), await createTenant(t.app)];
    const phones = [uniqueId('2'), uniqueId('3')];
    for (const [i, tenant] of [c, d].entries()) {
      const res = await t.app.inject({ method: 'PUT', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders,
        payload: { waba_id: wabaId, phone_number_id: phones[i], access_token: 'sandbox-token', messages_per_second: 80 } });
      expect(res.statusCode, res.body).toBe(200);
    }
    const other = await createConnectedTenant(t.app);
    expect((await control('/__sandbox/phone_number_quality', { phone_number_id: phones[0], waba_id: wabaId, event: 'THROUGHPUT_UPGRADE' })).status).toBe(200);
    await eventually(async () => (await account(c.id)).messages_per_second === 1000);
    expect((await account(d.id)).messages_per_second).toBe(80);
    expect((await account(other.id)).messages_per_second).toBe(80);
    expect((await account(c.id)).messaging_limit).toBeNull();

    // Another event of the field carrying the portfolio's limit: every account of the WABA takes it, pacing unchanged.
    expect((await control('/__sandbox/phone_number_quality', { phone_number_id: phones[1], waba_id: wabaId, event: 'UPGRADE', max_daily_conversations_per_business: 'TIER_100K' })).status).toBe(200);
    await eventually(async () => (await account(d.id)).messaging_limit === 100000);
    expect(await account(c.id)).toMatchObject({ messaging_limit: 100000, messages_per_second: 1000 });
    expect(await account(d.id)).toMatchObject({ messages_per_second: 80 });
    expect((await account(other.id)).messaging_limit).toBeNull();
  });

  it('message_template_quality_update sets quality_score (GET one and list) of that WABA\'s template; template_category_update sets its category once done; the pre-flight warns', async () => {
    const a = await createConnectedTenant(t.app);
    const b = await createConnectedTenant(t.app);
    const name = uniqueTemplateName('q');
    const template = await createApprovedTemplate(t.app, a, { name, category: 'UTILITY' });
    const twin = await createApprovedTemplate(t.app, b, { name, category: 'UTILITY' });
    expect(template).toMatchObject({ quality_score: 'UNKNOWN', category: 'UTILITY' });
    const tag = uniqueTag();
    await createContacts(t, a, someContacts(2, { tags: [tag] }));
    const created = await call(t.app, a, 'POST', '/campaigns', { name: 'Q', template_id: template.id, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'static', value: 'x' }, { kind: 'static', value: 'y' }] }] } });
    expect(created.statusCode, created.body).toBe(201);
    const preflight = async () => (await call(t.app, a, 'GET', `/campaigns/${created.json().id}`)).json().preflight;
    // UNKNOWN (not rated yet) is no warning.
    expect(await preflight()).toMatchObject({ template_quality_score: 'UNKNOWN', warnings: [] });
    const getTemplate = async (tenant: UpstreamTenant, id: string) => (await call(t.app, tenant, 'GET', `/templates/${id}`)).json();

    expect((await control('/__sandbox/templates/quality', { name, language: 'en', waba_id: a.wabaId, quality_score: 'RED' })).status).toBe(200);
    await eventually(async () => (await getTemplate(a, template.id)).quality_score === 'RED');
    const listed = (await call(t.app, a, 'GET', '/templates?limit=100')).json().data.find((x: { id: string }) => x.id === template.id);
    expect(listed.quality_score).toBe('RED');
    expect((await getTemplate(b, twin.id)).quality_score).toBe('UNKNOWN');
    expect((await preflight()).warnings).toEqual([expect.stringMatching(/quality is RED/)]);
    expect((await control('/__sandbox/templates/quality', { name, language: 'en', waba_id: a.wabaId, quality_score: 'GREEN' })).status).toBe(200);
    await eventually(async () => (await getTemplate(a, template.id)).quality_score === 'GREEN');
    expect((await preflight()).warnings).toEqual([]);
    expect((await control('/__sandbox/templates/quality', { name, language: 'en', waba_id: a.wabaId, quality_score: 'YELLOW' })).status).toBe(200);
    await eventually(async () => (await preflight()).warnings.some((w: string) => /quality is YELLOW/.test(w)));

    // Impending (Meta's notice a day ahead): nothing changes yet. Done: the category changes.
    expect((await control('/__sandbox/templates/category', { name, language: 'en', waba_id: a.wabaId, new_category: 'MARKETING', impending: true })).status).toBe(200);
    expect((await control('/__sandbox/templates/category', { name, language: 'en', waba_id: b.wabaId, new_category: 'AUTHENTICATION' })).status).toBe(200);
    await eventually(async () => (await getTemplate(b, twin.id)).category === 'AUTHENTICATION');
    expect((await getTemplate(a, template.id)).category).toBe('UTILITY');
    expect((await control('/__sandbox/templates/category', { name, language: 'en', waba_id: a.wabaId, new_category: 'MARKETING' })).status).toBe(200);
    await eventually(async () => (await getTemplate(a, template.id)).category === 'MARKETING');
    const warnings = (await preflight()).warnings.join(' ');
    expect(warnings).toMatch(/category changed from UTILITY to MARKETING since the campaign was created/);
    expect(warnings).toMatch(/quality is YELLOW/);
    // The campaign keeps the category it was created with.
    expect((await call(t.app, a, 'GET', `/campaigns/${created.json().id}`)).json().template_category).toBe('UTILITY');
  });
});
