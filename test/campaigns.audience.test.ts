import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, uniquePhone } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { createCampaign, expectInvalid, RICH_TEMPLATE, richMapping, stopLeftovers } from './helpers/campaigns-api.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, type UpstreamTenant, type UpstreamTestApp } from './helpers/upstream.ts';

describe('campaigns API: audience preview, field coverage, render preview', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  const tenants: string[] = [];
  afterAll(async () => {
    if (t) await stopLeftovers(t, tenants);
    await t?.close();
  });
  const connected = async (options: Parameters<typeof createConnectedTenant>[1] = {}) => {
    const tenant = await createConnectedTenant(t.app, options);
    tenants.push(tenant.id);
    return tenant;
  };

  const recipientRows = async (id: string) => (await t.deps.db.selectFrom('campaign_recipients').select('id').where('campaign_id', '=', id).execute()).length;

  /** Live contacts of the tenant in (created_at, id) order, as the audience orders them. */
  const ordered = async (tenantId: string, ids: string[]) =>
    (await t.deps.db.selectFrom('contacts').select(['id', 'first_name', 'phone']).where('tenant_id', '=', tenantId).where('id', 'in', ids)
      .orderBy('created_at').orderBy('id').execute());

  it('preview: total and up to 10 samples; groups are tags, sources the contact source; any match counts once; archived never', async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const [group, source] = [uniqueTag(), `src_${uniqueTag()}`];
    const inGroup = await createContacts(t, tenant, someContacts(11, { tags: [group, 'x'] }));
    const both = await createContacts(t, tenant, someContacts(2, { tags: [group], source }));
    const bySource = await createContacts(t, tenant, someContacts(2, { source }));
    const archived = await createContacts(t, tenant, someContacts(2, { tags: [group], source }));
    for (const c of archived) expect((await call(t.app, tenant, 'DELETE', `/contacts/${c.id}`)).statusCode).toBe(200);
    // Not in the audience: a tag named like the source, a source named like the group, another tenant's matching contact.
    await createContacts(t, tenant, [{ first_name: 'T', phone: uniquePhone(), tags: [source] }, { first_name: 'S', phone: uniquePhone(), source: group }]);
    const other = await connected();
    await createContacts(t, other, someContacts(3, { tags: [group], source }));

    const preview = async (audience: Record<string, string[]>) => {
      const c = await createCampaign(t, tenant, template.id, { audience });
      const res = await call(t.app, tenant, 'GET', `/campaigns/${c.id}/audience/preview`);
      expect(res.statusCode, res.body).toBe(200);
      expect(await recipientRows(c.id)).toBe(0);
      return res.json();
    };
    const members = [...inGroup, ...both, ...bySource].map((c) => c.id);
    const full = await preview({ groups: [group, 'nobody'], sources: [source] });
    expect(full.total).toBe(15);
    expect(full.sample).toEqual((await ordered(tenant.id, members)).slice(0, 10));
    for (const s of full.sample) expect(Object.keys(s).sort()).toEqual(['first_name', 'id', 'phone']);

    const groupOnly = await preview({ groups: [group] });
    expect(groupOnly.total).toBe(13);
    const sourceOnly = await preview({ sources: [source] });
    expect(sourceOnly.total).toBe(4);
    expect(sourceOnly.sample).toEqual(await ordered(tenant.id, [...both, ...bySource].map((c) => c.id)));
    expect(await preview({})).toEqual({ total: 0, sample: [], excluded: { opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 } });
    expect(await preview({ groups: ['nobody'] })).toEqual({ total: 0, sample: [], excluded: { opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 } });
    // Below ten, total is the sample size.
    const small = await preview({ groups: [source] });
    expect(small.total).toBe(1);
    expect(small.sample.map((s: { first_name: string }) => s.first_name)).toEqual(['T']);
  });

  it('PUT audience on a PAUSED campaign replaces the recipients it never tried with the new audience\'s; those it tried stay, each phone once', async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const [a, b] = [uniqueTag(), uniqueTag()];
    const onlyA = await createContacts(t, tenant, someContacts(3, { tags: [a] }));
    const both = await createContacts(t, tenant, someContacts(1, { tags: [a, b] }));
    const onlyB = await createContacts(t, tenant, someContacts(2, { tags: [b] }));
    const campaign = await createCampaign(t, tenant, template.id, { audience: { groups: [a] } });
    // No worker runs yet: every recipient waits pending.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/send`)).json()).toMatchObject({ status: 'RUNNING', total_recipients: 4 });
    expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/pause`)).json().status).toBe('PAUSED');
    // One of A's was tried before the pause (it failed): it stays the campaign's.
    await t.deps.db.updateTable('campaign_recipients').set({ status: 'failed', attempts: 1, error_code: 131026, error_title: 'Message undeliverable' })
      .where('campaign_id', '=', campaign.id).where('phone', '=', onlyA[0].phone).execute();

    const res = await call(t.app, tenant, 'PUT', `/campaigns/${campaign.id}/audience`, { groups: [b] });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ status: 'PAUSED', total_recipients: 4 });
    expect(JSON.stringify(res.json().audiences)).toContain(b);
    expect(JSON.stringify(res.json().audiences)).not.toContain(a);
    expect(res.json().stats).toMatchObject({ pending: 3, failed: 1, sent: 0 });
    const rows = await t.deps.db.selectFrom('campaign_recipients').select(['phone', 'status']).where('campaign_id', '=', campaign.id).execute();
    expect(new Map(rows.map((r) => [r.phone, r.status]))).toEqual(new Map([
      [onlyA[0].phone, 'failed'], [both[0].phone, 'pending'], [onlyB[0].phone, 'pending'], [onlyB[1].phone, 'pending'],
    ]));

    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${campaign.id}/resume`)).statusCode).toBe(200);
      await eventually(async () => (await call(t.app, tenant, 'GET', `/campaigns/${campaign.id}`)).json().status === 'COMPLETED', 20_000);
    } finally {
      await workers.stop();
    }
    const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data.length;
    for (const c of [...both, ...onlyB]) expect(await sendsTo(c.phone), c.phone).toBe(1);
    for (const c of onlyA) expect(await sendsTo(c.phone), c.phone).toBe(0);
  });

  it('field coverage: present and missing per field over the audience, custom fields included; unknown fields are 400', async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const group = uniqueTag();
    await createContacts(t, tenant, [
      { first_name: 'A', phone: uniquePhone(), tags: [group], company: 'Acme', custom_fields: { order: 'A-1', tier: 'gold' } },
      { first_name: 'B', phone: uniquePhone(), tags: [group], company: '', custom_fields: { order: '' } },
      { first_name: 'C', phone: uniquePhone(), tags: [group], custom_fields: { order: 7, tier: null } },
      { first_name: 'D', phone: uniquePhone(), tags: [group] },
    ]);
    const archived = await createContacts(t, tenant, [{ first_name: 'Z', phone: uniquePhone(), tags: [group], company: 'Gone', custom_fields: { order: 'Z' } }]);
    await call(t.app, tenant, 'DELETE', `/contacts/${archived[0].id}`);
    const c = await createCampaign(t, tenant, template.id, { audience: { groups: [group] } });
    const coverage = (fields: unknown, id = c.id) => call(t.app, tenant, 'POST', `/campaigns/${id}/audience/field-coverage`, { fields });

    const res = await coverage(['first_name', 'company', 'email', 'custom_fields.order', 'custom_fields.tier', 'custom_fields.absent', 'company']);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toEqual({
      total_recipients: 4, excluded: { opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 },
      coverage: {
        first_name: { present: 4, missing: 0 },
        company: { present: 1, missing: 3 },
        email: { present: 0, missing: 4 },
        'custom_fields.order': { present: 2, missing: 2 },
        'custom_fields.tier': { present: 1, missing: 3 },
        'custom_fields.absent': { present: 0, missing: 4 },
      },
    });
    expect(await recipientRows(c.id)).toBe(0);

    for (const [i, field] of [[0, 'password'], [1, 'tags'], [0, 'custom_fields.'], [0, 'custom_fields'], [1, 'First_Name']] as const) {
      const fields = i === 0 ? [field] : ['first_name', field];
      expectInvalid(await coverage(fields), ['body', 'fields', i], field);
    }
    expectInvalid(await coverage([]), ['body', 'fields']);
    expectInvalid(await coverage('first_name'), ['body', 'fields']);
    expectInvalid(await coverage([5]), ['body', 'fields', 0]);

    const empty = await createCampaign(t, tenant, template.id);
    expect((await coverage(['company', 'custom_fields.order'], empty.id)).json()).toEqual({
      total_recipients: 0, excluded: { opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 }, coverage: { company: { present: 0, missing: 0 }, 'custom_fields.order': { present: 0, missing: 0 } },
    });
  });

  describe('render preview', () => {
    let tenant: UpstreamTenant;
    let campaignId: string;
    let first: { id: string };
    let second: { id: string };
    let outsider: { id: string };

    beforeAll(async () => {
      tenant = await connected();
      const template = await createApprovedTemplate(t.app, tenant, { components: RICH_TEMPLATE });
      const group = uniqueTag();
      // Created one request after another, so created_at orders them: the outsider first, then the audience.
      [outsider] = await createContacts(t, tenant, [{ first_name: 'Olga', phone: uniquePhone(), company: 'Out Inc', custom_fields: { order: 'O-9' } }]);
      [first] = await createContacts(t, tenant, [{ first_name: 'Ana', phone: uniquePhone(), tags: [group], custom_fields: { order: 'A-7' } }]);
      [second] = await createContacts(t, tenant, [{ first_name: 'Bo', phone: uniquePhone(), tags: [group], company: 'Acme' }]);
      campaignId = (await createCampaign(t, tenant, template.id, { audience: { groups: [group] }, variable_mapping: richMapping() })).id;
    });

    const render = (body: unknown, id = campaignId, who = tenant) => call(t.app, who, 'POST', `/campaigns/${id}/preview`, body);

    it('replaces placeholders with the sample contact\'s values, the fallback or empty', async () => {
      const res = await render({ sample_contact_id: second.id });
      expect(res.statusCode, res.body).toBe(200);
      expect(res.json()).toEqual({
        campaign_id: campaignId, sample_contact_id: second.id,
        resolved_components: [
          { type: 'header', text: 'Order for Acme ready' },
          // No custom_fields.order and no fallback: empty.
          { type: 'body', text: 'Hello Bo, your order  has shipped.' },
          { type: 'footer', text: 'Reply STOP to opt out' },
          { type: 'button', text: 'Track (https://shop.example/track/T-1)' },
          { type: 'button', text: 'Stop' },
        ],
      });
      // A contact outside the audience may be previewed too; no company: the fallback.
      const ana = (await render({ sample_contact_id: first.id })).json().resolved_components;
      expect(ana.slice(0, 2)).toEqual([{ type: 'header', text: 'Order for friend ready' }, { type: 'body', text: 'Hello Ana, your order A-7 has shipped.' }]);
      const olga = (await render({ sample_contact_id: outsider.id })).json();
      expect(olga.resolved_components[1]).toEqual({ type: 'body', text: 'Hello Olga, your order O-9 has shipped.' });
      expect(await recipientRows(campaignId)).toBe(0);
    });

    it('without sample_contact_id uses the audience\'s first contact by (created_at, id)', async () => {
      for (const body of [{}, { unknown: 1 }]) {
        const res = await render(body);
        expect(res.statusCode, res.body).toBe(200);
        expect(res.json().sample_contact_id).toBe(first.id);
        expect(res.json().resolved_components[1].text).toBe('Hello Ana, your order A-7 has shipped.');
      }
      const bare = await t.app.inject({ method: 'POST', url: `/api/v1/public/campaigns/${campaignId}/preview`, headers: tenant.headers });
      expect(bare.statusCode, bare.body).toBe(200);
      expect(bare.json().sample_contact_id).toBe(first.id);
      // An empty audience renders with blanks and fallbacks.
      const empty = await createCampaign(t, tenant, (await t.deps.db.selectFrom('campaigns').select('template_id').where('id', '=', campaignId).executeTakeFirstOrThrow()).template_id, { variable_mapping: richMapping() });
      const blank = (await render({}, empty.id)).json();
      expect(blank.sample_contact_id).toBeNull();
      expect(blank.resolved_components.slice(0, 2)).toEqual([{ type: 'header', text: 'Order for friend ready' }, { type: 'body', text: 'Hello , your order  has shipped.' }]);
    });

    it('a contact of another tenant, an archived one, an unknown or malformed id is 404', async () => {
      const other = await connected();
      const [foreign] = await createContacts(t, other, someContacts(1));
      const [gone] = await createContacts(t, tenant, someContacts(1));
      await call(t.app, tenant, 'DELETE', `/contacts/${gone.id}`);
      for (const id of [foreign.id, gone.id, '00000000-0000-4000-8000-000000000000', 'nope']) {
        expectError(await render({ sample_contact_id: id }), 404, 'NOT_FOUND');
      }
      expectInvalid(await render({ sample_contact_id: 5 }), ['body', 'sample_contact_id']);
      // Another tenant previewing this campaign with its own contact: the campaign is not found.
      expectError(await render({ sample_contact_id: foreign.id }, campaignId, other), 404, 'NOT_FOUND');
    });
  });
});
