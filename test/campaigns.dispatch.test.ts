import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, eventually, hasPostgres } from './helpers/app.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';

describe.skipIf(!hasPostgres)('campaigns: dispatch', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp(CAMPAIGN_ENV); });
  afterAll(async () => { await t?.close(); });

  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as any[];
  const getCampaign = async (tenant: any, id: string) => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();

  it('sends every recipient once with its mapped parameters, follows callbacks into stats, and completes', async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(12, { tags: [tag], custom_fields: { order: 'A-7' } }));
      const created = await call(t.app, tenant, 'POST', '/campaigns', {
        name: 'Launch', template_id: template.id, batch_size: 5, audience: { groups: [tag] },
        variable_mapping: { components: [{ type: 'BODY', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'contact_field', field: 'custom_fields.order', fallback: 'none' }] }] },
      });
      expect(created.statusCode, created.body).toBe(201);
      const id = created.json().id;
      const sent = await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      expect(sent.statusCode, sent.body).toBe(200);
      expect(sent.json()).toMatchObject({ status: 'RUNNING', total_recipients: 12, stats: { total: 12, pending: 12, sent: 0 } });

      const done = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'COMPLETED' && c.stats.read === 12 ? c : null;
      }, 20_000);
      expect(done.stats).toEqual({ total: 12, sent: 12, delivered: 12, read: 12, failed: 0, pending: 0 });
      for (const contact of contacts) {
        const sends = await sendsTo(contact.phone);
        expect(sends).toHaveLength(1);
        expect(sends[0].template).toBe(template.template_name);
        expect(sends[0].components).toEqual([{ type: 'body', parameters: [{ type: 'text', text: expect.stringMatching(/^Name\d+$/) }, { type: 'text', text: 'A-7' }] }]);
      }
      const types = (await eventsOf(t.deps, tenant.id)).map((e) => e.type).filter((x) => x.startsWith('campaign.'));
      expect(types).toEqual(['campaign.created', 'campaign.started', 'campaign.completed']);
      const recount = await call(t.app, tenant, 'POST', `/campaigns/${id}/refresh-metrics`);
      expect(recount.json().stats).toEqual(done.stats);
    } finally {
      await workers.stop();
    }
  });
});
