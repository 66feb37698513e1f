import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loadConfig } from '../src/config.ts';
import { adminHeaders, call, eventually } from './helpers/app.ts';
import { createApprovedTemplate, createConnectedTenant, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';

/**
 * An upstream that answers slower than the rate: a send holds its place in the number's window
 * until a second after its answer, so sends wait for places. Claims stop while a second's worth
 * waits, and a send that gets no place within its time goes back to pending instead of going out
 * after its lease ran out (when it may already have been reconciled and claimed again).
 */
describe('campaigns: dispatch against a slow upstream', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  const setLatency = (ms: number) => sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { latency_ms: ms });
  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as any[];

  async function startCampaign(contactCount: number) {
    const tenant = await createConnectedTenant(t.app);
    const paced = await t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders, payload: { messages_per_second: 5 } });
    expect(paced.statusCode).toBe(200);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(contactCount, { tags: [tag] }));
    const created = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Slow', template_id: template.id, batch_size: 1, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] }] },
    });
    expect(created.statusCode, created.body).toBe(201);
    return { tenant, contacts, id: created.json().id as string };
  }

  const sendingCount = async (campaignId: string) => {
    const row = await t.deps.db.selectFrom('campaign_recipients').select((eb) => eb.fn.countAll<number>().as('n'))
      .where('campaign_id', '=', campaignId).where('status', '=', 'sending').executeTakeFirstOrThrow();
    return Number(row.n);
  };

  it('claims no more while a second\'s worth of sends waits for places', async () => {
    const { tenant, contacts, id } = await startCampaign(15);
    // 5/s, answers after 3.2 s: five places free every 4.2 s, while the pacer has a slot every 0.2 s.
    await setLatency(3200);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      let most = 0;
      await eventually(async () => {
        most = Math.max(most, await sendingCount(id));
        return (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().status === 'COMPLETED';
      }, 40_000, 50);
      // In flight (5) + waiting for a place (5, then claims stop) + a claim or two on their way to
      // the window; claiming on every slot holds all 15 after 3 s, before the first answer.
      expect(most).toBeGreaterThanOrEqual(5);
      expect(most).toBeLessThanOrEqual(12);
      await workers.stop();
      for (const c of contacts) expect(await sendsTo(c.phone)).toHaveLength(1);
    } finally {
      await setLatency(0);
      await workers.stop();
    }
  }, 60_000);

  it('a send that gets no place within its time goes back to pending, so it never goes out after its lease', async () => {
    // 5/s, leases of 2.5 s and answers after 1.5 s: a send issued within 0.5 s of its claim ends
    // inside its lease; the sixth would wait 1.5 s for a place, end after its lease, be reconciled
    // and sent twice.
    const { tenant, contacts, id } = await startCampaign(10);
    await setLatency(1500);
    const workers = runCampaignWorkers(t, [tenant.id], { leaseMs: 2500, reconcileMs: 200, issueWithinMs: 500 });
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      await eventually(async () => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().status === 'COMPLETED', 40_000);
      // A second copy would still be waiting for its place in the worker: let it finish first.
      await workers.stop();
      for (const c of contacts) expect(await sendsTo(c.phone)).toHaveLength(1);
    } finally {
      await setLatency(0);
      await workers.stop();
    }
  }, 60_000);

  it('a live worker keeps its claims while an answer takes longer than the lease and the reconciliation window: another worker never sends them again', async () => {
    // Answers after 2.5 s, leases of 1.2 s, a reconciliation window of 0.6 s: without the live
    // worker renewing its leases, the second worker's reconciliation would take these sends for
    // unsent (no answer recorded, no callback yet) and send them again.
    const { tenant, contacts, id } = await startCampaign(3);
    await setLatency(2500);
    const options = { leaseMs: 1200, reconcileMs: 600, issueWithinMs: 500 };
    const first = runCampaignWorkers(t, [tenant.id], options);
    let second: ReturnType<typeof runCampaignWorkers> | null = null;
    try {
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      await eventually(async () => (await sendingCount(id)) > 0, 10_000, 10);
      second = runCampaignWorkers(t, [tenant.id], options);
      await eventually(async () => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().status === 'COMPLETED', 40_000);
      await first.stop();
      await second.stop();
      for (const c of contacts) expect(await sendsTo(c.phone)).toHaveLength(1);
      const attempts = await t.deps.db.selectFrom('campaign_recipients').select('attempts').where('campaign_id', '=', id).execute();
      expect(attempts.map((r) => r.attempts)).toEqual([1, 1, 1]);
    } finally {
      await setLatency(0);
      await first.stop();
      await second?.stop();
    }
  }, 60_000);

  it('a send may be issued until half of its lease\'s spare time after its slots (lease minus horizon and upstream timeout)', () => {
    expect(loadConfig({}).campaignIssueWithinMs).toBe(1000 + (41_000 - 1000 - 10_000) / 2);
    expect(loadConfig({ PACING_HORIZON_MS: '200', UPSTREAM_TIMEOUT_MS: '2000', CAMPAIGN_LEASE_MS: '2500' }).campaignIssueWithinMs).toBe(350);
  });
});
