import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, eventually } from './helpers/app.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, type UpstreamTenant, type UpstreamTestApp } from './helpers/upstream.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';

/** The portfolio's messaging limit (issue 23 §3) over a short window (MESSAGING_LIMIT_WINDOW_MS). */
const WINDOW_MS = 4000;

describe('messaging limit: the dispatcher holds recipients beyond it until the window moves', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000', MESSAGING_LIMIT_WINDOW_MS: String(WINDOW_MS) }); });
  afterAll(async () => { await t?.close(); });

  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as { at: string }[];
  const allSends = async (phones: string[]) => (await Promise.all(phones.map(sendsTo))).flat();
  const getCampaign = async (tenant: UpstreamTenant, id: string) => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
  const setLimit = (tenantId: string, limit: number | null) =>
    t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenantId}/business-account`, headers: adminHeaders, payload: { messaging_limit: limit } });
  const mapping = { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] }] };
  const createCampaign = async (tenant: UpstreamTenant, templateId: string, tag: string, batchSize = 5) => {
    const res = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Limited', template_id: templateId, batch_size: batchSize, audience: { groups: [tag] }, variable_mapping: mapping });
    expect(res.statusCode, res.body).toBe(201);
    return res.json().id as string;
  };
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  it('a limit reached mid-campaign holds the rest (RUNNING, pending, not failed) until the window moves; then every recipient is sent once', async () => {
    const tenant = await createConnectedTenant(t.app);
    const patched = await setLimit(tenant.id, 5);
    expect(patched.statusCode, patched.body).toBe(200);
    expect(patched.json()).toMatchObject({ messaging_limit: 5, messaging_limit_updated_at: expect.any(String) });
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(12, { tags: [tag] }));
      const phones = contacts.map((c) => c.phone);
      const id = await createCampaign(tenant, template.id, tag, 3);
      const draft = (await getCampaign(tenant, id)).preflight;
      expect(draft).toMatchObject({ audience_size: 12, tier_limit: 5, within_tier: false, messaging_limit_used: 0, messaging_limit_available: 5 });
      // 5 now, 5 a window later, 2 a window after that.
      expect(Date.parse(draft.messaging_limit_wait_until)).toBeGreaterThan(Date.now() + 2 * WINDOW_MS - 1000);
      expect(draft.warnings.join(' ')).toMatch(/12 recipients to send.*limit \(5 unique users.*allows 5 more now: the rest wait/);

      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      await eventually(async () => (await allSends(phones)).length === 5, 10_000);
      await sleep(1000);
      // Held: nothing past the limit went out, nothing failed, the campaign runs on.
      expect(await allSends(phones)).toHaveLength(5);
      const held = await getCampaign(tenant, id);
      expect(held).toMatchObject({ status: 'RUNNING', stats: { failed: 0, pending: 7 } });
      expect(held.preflight).toMatchObject({ within_tier: false, messaging_limit_used: 5, messaging_limit_available: 0 });
      expect(Date.parse(held.preflight.messaging_limit_wait_until)).toBeGreaterThan(Date.now());

      const done = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'COMPLETED' ? c : null;
      }, 30_000);
      expect(done.stats).toMatchObject({ total: 12, sent: 12, failed: 0, pending: 0 });
      for (const phone of phones) expect(await sendsTo(phone)).toHaveLength(1);
      // The sixth user was messaged only once the first had left the window (counted at its claim,
      // a moment before its send: the sandbox's times carry that lag).
      const times = (await allSends(phones)).map((s) => Date.parse(s.at)).sort((a, b) => a - b);
      expect(times[5] - times[0]).toBeGreaterThanOrEqual(WINDOW_MS - 1000);
      expect(times[10] - times[5]).toBeGreaterThanOrEqual(WINDOW_MS - 1000);
    } finally {
      await workers.stop();
    }
  }, 60_000);

  it('single sends count towards the limit (and are never refused for it); users inside a service window and users already counted do not count again', async () => {
    const tenant = await createConnectedTenant(t.app);
    expect((await setLimit(tenant.id, 3)).statusCode).toBe(200);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const [single, inWindow, fresh1, fresh2] = (await createContacts(t, tenant, someContacts(4, { tags: [tag] }))).map((c) => c.phone);
    const other = someContacts(2).map((c) => c.phone);
    // The user of inWindow wrote to the business: a customer service window is open.
    expect((await sandboxControl(t.sandbox!, 'POST', '/__sandbox/inbound', { to_phone_number_id: tenant.phoneNumberId, from: inWindow, text: 'hello' })).status).toBe(200);
    await eventually(async () => (await t.deps.db.selectFrom('inbound_messages').select('id').where('tenant_id', '=', tenant.id).where('from_phone', '=', inWindow).executeTakeFirst()) ?? null);

    const id = await createCampaign(tenant, template.id, tag);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      // Two single sends (one to a campaign recipient, one not) fill two of the three places; a third
      // single send past the limit is still accepted: the spec's answers for POST /messages/template stay.
      for (const to of [single, other[0], other[1]]) {
        const res = await call(t.app, tenant, 'POST', '/messages/template', { to, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
        expect(res.statusCode, res.body).toBe(200);
      }
      const before = (await getCampaign(tenant, id)).preflight;
      expect(before).toMatchObject({ messaging_limit_used: 3, messaging_limit_available: 0, within_tier: false });

      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      // At once: the user already counted and the user in a service window; the two new ones wait.
      await eventually(async () => (await sendsTo(single)).length === 2 && (await sendsTo(inWindow)).length === 1, 3000);
      expect(await sendsTo(fresh1)).toHaveLength(0);
      expect(await sendsTo(fresh2)).toHaveLength(0);
      const counted = await t.deps.db.selectFrom('messaging_limit_users').select('phone').where('tenant_id', '=', tenant.id).execute();
      expect(counted.map((r) => r.phone).sort()).toEqual([single, ...other].sort());

      const done = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'COMPLETED' ? c : null;
      }, 30_000);
      expect(done.stats).toMatchObject({ total: 4, sent: 4, failed: 0 });
      for (const phone of [inWindow, fresh1, fresh2]) expect(await sendsTo(phone)).toHaveLength(1);
    } finally {
      await workers.stop();
    }
  }, 60_000);

  it('a limited tenant\'s MARKETING campaign skips a contact who opted out after materialising, at its claim, and does not count it', async () => {
    const tenant = await createConnectedTenant(t.app);
    expect((await setLimit(tenant.id, 10)).statusCode).toBe(200);
    // uniquePhone() numbers are +1 415 (US): the US marketing rule is not what this is about.
    const rule = await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/marketing-settings`, headers: adminHeaders, payload: { block_us_marketing: false } });
    expect(rule.statusCode, rule.body).toBe(200);
    const template = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(4, { tags: [tag] }));
    const id = await createCampaign(tenant, template.id, tag);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
    const optedOut = await call(t.app, tenant, 'PATCH', `/contacts/${contacts[0].id}`, { marketing_opt_out: true });
    expect(optedOut.statusCode, optedOut.body).toBe(200);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const done = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'COMPLETED' ? c : null;
      }, 20_000);
      expect(done.stats).toMatchObject({ total: 4, sent: 3, skipped: 1, failed: 0, pending: 0 });
      expect(await sendsTo(contacts[0].phone)).toHaveLength(0);
      expect(done.preflight).toMatchObject({ messaging_limit_used: 3, messaging_limit_available: 7 });
    } finally {
      await workers.stop();
    }
  }, 30_000);

  it('unlimited (the sandbox\'s default at connection): nothing is counted, the campaign goes out at once', async () => {
    const tenant = await createConnectedTenant(t.app);
    const account = (await t.app.inject({ method: 'GET', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders })).json();
    expect(account).toMatchObject({ messaging_limit: null, messaging_limit_updated_at: expect.any(String) });
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      await createContacts(t, tenant, someContacts(8, { tags: [tag] }));
      const id = await createCampaign(tenant, template.id, tag);
      expect((await getCampaign(tenant, id)).preflight).toMatchObject({ tier_limit: null, within_tier: true, messaging_limit_used: null, messaging_limit_wait_until: null });
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      await eventually(async () => (await getCampaign(tenant, id)).status === 'COMPLETED', 20_000);
      const counted = await t.deps.db.selectFrom('messaging_limit_users').select('phone').where('tenant_id', '=', tenant.id).execute();
      expect(counted).toEqual([]);
    } finally {
      await workers.stop();
    }
  });
});
