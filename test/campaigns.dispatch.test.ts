import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, eventually } from './helpers/app.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, sandboxControl, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { busiestSecond } from './helpers/worker-processes.ts';

describe('campaigns: dispatch', () => {
  let t: UpstreamTestApp;
  // Tests poll campaign progress through the API; the per-minute budget is not what they are about.
  // A number's rate lowered by a 130429 stays lowered for the rest of the file (the 130429 test looks at it).
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000', PACING_RECOVERY_MS: '600000' }); });
  afterAll(async () => { await t?.close(); });

  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as any[];
  /** The most sends whose sandbox time falls in any [t, t + 1000 ms). */
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
      expect(done.stats).toEqual({ total: 12, sent: 12, delivered: 12, read: 12, failed: 0, pending: 0, held: 0, deferred: 0, skipped: 0, replied: 0, clicked: 0 });
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

  const campaignFor = async (tenant: any, templateId: string, tag: string, extra: Record<string, unknown> = {}) => {
    const res = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'C', template_id: templateId, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] }] }, ...extra,
    });
    expect(res.statusCode, res.body).toBe(201);
    return res.json().id as string;
  };
  const setPace = (tenantId: string, mps: number) => t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenantId}/business-account`, headers: adminHeaders, payload: { messages_per_second: mps } });
  const recipientStatuses = async (id: string) => {
    const rows = await t.deps.db.selectFrom('campaign_recipients').select(['status']).where('campaign_id', '=', id).execute();
    return rows.reduce((acc: Record<string, number>, r) => ({ ...acc, [r.status]: (acc[r.status] ?? 0) + 1 }), {});
  };

  it('paces sends to messages_per_second of the number: no second carries more', async () => {
    const tenant = await createConnectedTenant(t.app);
    expect((await setPace(tenant.id, 10)).statusCode).toBe(200);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(30, { tags: [tag] }));
      const id = await campaignFor(tenant, template.id, tag, { batch_size: 7 });
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      await eventually(async () => (await getCampaign(tenant, id)).status === 'COMPLETED', 20_000);
      const times: number[] = [];
      for (const c of contacts) times.push(...(await sendsTo(c.phone)).map((s) => new Date(s.at).getTime()));
      expect(times).toHaveLength(30);
      times.sort((a, b) => a - b);
      // 30 sends at 10/s take at least 2.9 s, and no 1-second window at the sandbox holds more than 10:
      // a send holds its place until a second after its answer, which comes after the sandbox logged it.
      expect(times[29] - times[0]).toBeGreaterThanOrEqual(2800);
      expect(busiestSecond(times).sends).toBeLessThanOrEqual(10);
    } finally {
      await workers.stop();
    }
  });

  it('a send held up on its way still counts in the second it arrives: sends slowed mid-campaign do not bunch at the upstream', async () => {
    const tenant = await createConnectedTenant(t.app);
    expect((await setPace(tenant.id, 5)).statusCode).toBe(200);
    const workers = runCampaignWorkers(t, [tenant.id]);
    const setLatency = (ms: number) => sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { latency_ms: ms });
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(15, { tags: [tag] }));
      const id = await campaignFor(tenant, template.id, tag, { batch_size: 5 });
      // The first sends take 700 ms to be taken; those issued after the first is taken arrive at once,
      // in the same second as the slow ones (counted from their issue alone, 6 or 7 fell into one second here).
      await setLatency(700);
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      const sendTimes = async () => (await Promise.all(contacts.map((c) => sendsTo(c.phone)))).flat().map((s) => new Date(s.at).getTime());
      await eventually(async () => (await sendTimes()).length > 0, 10_000);
      await setLatency(0);
      await eventually(async () => (await getCampaign(tenant, id)).status === 'COMPLETED', 20_000);
      const times = await sendTimes();
      expect(times).toHaveLength(15);
      expect(busiestSecond(times).sends).toBeLessThanOrEqual(5);
    } finally {
      await setLatency(0);
      await workers.stop();
    }
  });

  it('claims whole batches while the number\'s slots free up one at a time', async () => {
    const tenant = await createConnectedTenant(t.app);
    // 50/s with a 200 ms horizon: 10 slots ahead, one freed every 20 ms (the poll interval).
    expect((await setPace(tenant.id, 50)).statusCode).toBe(200);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      await createContacts(t, tenant, someContacts(22, { tags: [tag] }));
      const id = await campaignFor(tenant, template.id, tag, { batch_size: 4 });
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      await eventually(async () => (await getCampaign(tenant, id)).status === 'COMPLETED', 20_000);
      // Each batch writes its message rows in one statement: one attempted_at per batch.
      const { rows } = await sql<{ n: number }>`
        SELECT count(*)::int AS n FROM messages WHERE campaign_id = ${id}::uuid GROUP BY attempted_at ORDER BY attempted_at`.execute(t.deps.db);
      const ordered = rows.map((r) => r.n);
      expect(ordered.reduce((a, b) => a + b, 0)).toBe(22);
      expect(ordered.slice(0, -1).every((n) => n === 4), `batch sizes ${ordered.join(',')}`).toBe(true);
    } finally {
      await workers.stop();
    }
  });

  it('pause stops new claims (in-flight finish), resume continues, stop leaves the rest pending', async () => {
    const tenant = await createConnectedTenant(t.app);
    await setPace(tenant.id, 10);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      await createContacts(t, tenant, someContacts(40, { tags: [tag] }));
      const id = await campaignFor(tenant, template.id, tag, { batch_size: 5 });
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      await eventually(async () => (await getCampaign(tenant, id)).stats.sent >= 5);
      const paused = await call(t.app, tenant, 'POST', `/campaigns/${id}/pause`);
      expect(paused.statusCode).toBe(200);
      expect(paused.json().status).toBe('PAUSED');
      // In-flight sends drain: no recipient stays sending, and the sent count then holds still.
      const drained = await eventually(async () => ((await recipientStatuses(id)).sending ?? 0) === 0 ? (await getCampaign(tenant, id)).stats : null);
      expect(drained.pending).toBeGreaterThan(0);
      await new Promise((r) => setTimeout(r, 600));
      expect((await getCampaign(tenant, id)).stats.pending).toBe(drained.pending);

      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/resume`)).json().status).toBe('RUNNING');
      await eventually(async () => (await getCampaign(tenant, id)).stats.pending < drained.pending);
      const stopped = await call(t.app, tenant, 'POST', `/campaigns/${id}/stop`);
      expect(stopped.json().status).toBe('STOPPED');
      await eventually(async () => ((await recipientStatuses(id)).sending ?? 0) === 0);
      const after = await getCampaign(tenant, id);
      expect(after.status).toBe('STOPPED');
      expect(after.stats.pending).toBeGreaterThan(0);
      expect((await recipientStatuses(id)).pending).toBe(after.stats.pending);
      // Stopped is permanent.
      expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/resume`)).statusCode).toBe(400);
      const types = (await eventsOf(t.deps, tenant.id)).map((e) => e.type).filter((x) => x.startsWith('campaign.'));
      expect(types).toEqual(['campaign.created', 'campaign.started', 'campaign.paused', 'campaign.resumed', 'campaign.stopped']);
    } finally {
      await workers.stop();
    }
  });

  it('a scheduled campaign starts by itself at scheduled_at, once, even with two workers', async () => {
    const tenant = await createConnectedTenant(t.app);
    const a = runCampaignWorkers(t, [tenant.id]);
    const b = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(6, { tags: [tag] }));
      const at = new Date(Date.now() + 1500);
      const id = await campaignFor(tenant, template.id, tag, { scheduled_at: at.toISOString() });
      expect((await getCampaign(tenant, id)).status).toBe('SCHEDULED');
      const started = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status !== 'SCHEDULED' ? c : null;
      }, 10_000, 20);
      expect(new Date(started.started_at).getTime()).toBeGreaterThanOrEqual(at.getTime() - 5);
      expect(new Date(started.started_at).getTime()).toBeLessThan(at.getTime() + 1000);
      await eventually(async () => (await getCampaign(tenant, id)).status === 'COMPLETED', 15_000);
      for (const c of contacts) expect(await sendsTo(c.phone)).toHaveLength(1);
      const types = (await eventsOf(t.deps, tenant.id)).map((e) => e.type).filter((x) => x.startsWith('campaign.'));
      // created and scheduled commit together (same created_at), so their order is not defined.
      expect([...types.slice(0, 2)].sort()).toEqual(['campaign.created', 'campaign.scheduled']);
      expect(types.slice(2)).toEqual(['campaign.started', 'campaign.completed']);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
    }
  });

  it('per-recipient rejections fail only that recipient; a pair rate limit re-queues it; failures are summarised', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(8, { tags: [tag] }));
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: contacts[0].phone, outcome: 'reject', error_code: 131026 });
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: contacts[1].phone, outcome: 'fail', error_code: 131049 });
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: contacts[2].phone, outcome: 'reject', error_code: 131056 });
      // retry_deferred false: the deferred recipient (131049) fails at once instead of waiting a day.
      const id = await campaignFor(tenant, template.id, tag, { retry_deferred: false });
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      // The pair-rate-limited recipient waits (6 s by Meta's advice) and stays pending meanwhile.
      const pendingRow = await eventually(async () => {
        const row = await t.deps.db.selectFrom('campaign_recipients').selectAll().where('campaign_id', '=', id).where('phone', '=', contacts[2].phone).executeTakeFirstOrThrow();
        return row.attempts === 1 && row.status === 'pending' ? row : null;
      }, 20_000);
      expect(pendingRow.not_before!.getTime()).toBeGreaterThan(Date.now());
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: contacts[2].phone, outcome: 'ok' });
      await eventually(async () => (await getCampaign(tenant, id)).stats.failed === 2, 20_000);
      const done = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'COMPLETED' ? c : null;
      }, 30_000);
      expect(done.stats).toMatchObject({ total: 8, failed: 2, pending: 0, sent: 6 });
      expect(await sendsTo(contacts[2].phone)).toHaveLength(1);
      const errors = (await call(t.app, tenant, 'GET', `/campaigns/${id}/errors`)).json();
      expect(errors.total_failed).toBe(2);
      expect(errors.by_code.map((e: any) => e.code).sort()).toEqual(['131026', '131049']);
      expect(errors.by_code.find((e: any) => e.code === '131026')).toMatchObject({ title: 'Message undeliverable', count: 1, fix: expect.stringContaining('WhatsApp') });
      const drill = (await call(t.app, tenant, 'GET', `/campaigns/${id}/errors/131049`)).json();
      expect(drill.recipients).toEqual([expect.objectContaining({ phone_number: contacts[1].phone, status: 'failed', contact_id: contacts[1].id })]);
      // message.failed for the callback failure carries the campaign id.
      const failed = (await eventsOf(t.deps, tenant.id, 'message.failed')).map((e) => e.data as any);
      expect(failed.some((d) => d.campaign_id === id && d.error.code === 131049)).toBe(true);
    } finally {
      await workers.stop();
    }
  });

  it('a template disabled mid-flight fails the campaign with campaign.failed and sends nothing more', async () => {
    const tenant = await createConnectedTenant(t.app);
    await setPace(tenant.id, 5);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(40, { tags: [tag] }));
      const id = await campaignFor(tenant, template.id, tag, { batch_size: 2 });
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      await eventually(async () => (await getCampaign(tenant, id)).stats.sent >= 2);
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/review', { name: template.template_name, language: 'en', status: 'DISABLED' });
      const failed = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'FAILED' ? c : null;
      }, 10_000);
      expect(failed.failure_reason).toMatch(/disabled/i);
      await eventually(async () => ((await recipientStatuses(id)).sending ?? 0) === 0);
      let sent = 0;
      for (const c of contacts) sent += (await sendsTo(c.phone)).length;
      await new Promise((r) => setTimeout(r, 500));
      let later = 0;
      for (const c of contacts) later += (await sendsTo(c.phone)).length;
      expect(later).toBe(sent);
      expect(sent).toBeLessThan(40);
      const event = (await eventsOf(t.deps, tenant.id, 'campaign.failed'))[0];
      expect(event.data).toMatchObject({ id, status: 'FAILED', reason: expect.stringMatching(/disabled/i) });
    } finally {
      await workers.stop();
    }
  });

  it('130429 halves the number\'s rate until the upstream takes it: everyone is sent once, nobody fails', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    await setPace(tenant.id, 40);
    const workers = runCampaignWorkers(t, [tenant.id]);
    await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { mps_limit: 8 });
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(20, { tags: [tag] }));
      // mps_limit refuses only when a second happens to carry more than 8 sends, which a slow
      // (loaded) second may not: the first send to each of these ten is refused with 130429 whatever the timing.
      const refused = contacts.slice(0, 10);
      for (const c of refused) await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: c.phone, outcome: 'reject', error_code: 130429, count: 1 });
      const id = await campaignFor(tenant, template.id, tag, { batch_size: 10 });
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      const done = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'COMPLETED' ? c : null;
      }, 45_000);
      expect(done.stats).toMatchObject({ total: 20, failed: 0, pending: 0, sent: 20 });
      for (const c of contacts) expect(await sendsTo(c.phone)).toHaveLength(1);
      // The refused sends were tried again.
      const retried = await t.deps.db.selectFrom('campaign_recipients').select('contact_id').where('campaign_id', '=', id).where('attempts', '>', 1).execute();
      expect(retried.map((r) => r.contact_id)).toEqual(expect.arrayContaining(refused.map((c) => c.id)));
      // The number's rate was halved at least once, and is still (PACING_RECOVERY_MS outlasts the
      // test): its next slot comes at least twice 1/40 s after the one before.
      const slots = await t.deps.pacer.reserve(tenant.phoneNumberId, 2, 40);
      expect(slots.intervalMs).toBeGreaterThanOrEqual(2 * 1000 / 40);
    } finally {
      await sandboxControl(t.sandbox!, 'PUT', '/__sandbox/config', { mps_limit: null });
      await workers.stop();
    }
  });

  it('a token the upstream refuses (190) fails the campaign and stops the account; no recipient is failed for it; sends still waiting for their slot are not sent', async () => {
    const tenant = await createConnectedTenant(t.app);
    await setPace(tenant.id, 20);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(30, { tags: [tag] }));
      for (const c of contacts) await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: c.phone, outcome: 'reject', error_code: 190 });
      const id = await campaignFor(tenant, template.id, tag, { batch_size: 5 });
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      const failed = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'FAILED' ? c : null;
      }, 10_000);
      expect(failed.failure_reason).toMatch(/190/);
      await eventually(async () => ((await recipientStatuses(id)).sending ?? 0) === 0);
      const statuses = await recipientStatuses(id);
      expect(statuses.pending).toBeGreaterThan(0);
      // The recipients were not at fault: those refused and those still waiting for their slot go
      // back to pending unsent (a reconnected account can send them in a new campaign).
      expect(statuses.failed ?? 0).toBe(0);
      // Recipients put back unsent leave no message row behind.
      const rows = await t.deps.db.selectFrom('messages').select((eb) => eb.fn.countAll<string>().as('n')).where('campaign_id', '=', id).executeTakeFirstOrThrow();
      expect(Number(rows.n)).toBe(0);
      expect(await eventsOf(t.deps, tenant.id, 'message.failed')).toEqual([]);
      const event = (await eventsOf(t.deps, tenant.id, 'campaign.failed'))[0];
      expect(event.data).toMatchObject({ id, status: 'FAILED', error_code: 190 });
      // The account is stopped: the operator API shows it, and sends answer 404 until it is connected again.
      const account = await t.deps.db.selectFrom('business_accounts').select('status').where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
      expect(account.status).toBe('token_invalid');
      const single = await call(t.app, tenant, 'POST', '/messages/template', { to: contacts[0].phone, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: 'a' }, { type: 'text', text: 'b' }] }] });
      expect(single.statusCode).toBe(404);
      expect(single.json().error.message).toBe('No active WABA account for this tenant');
      for (const c of contacts) await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to: c.phone, outcome: 'ok' });
    } finally {
      await workers.stop();
    }
  });

  it('single sends take their slots from the same per-number pace as campaigns', async () => {
    const tenant = await createConnectedTenant(t.app);
    await setPace(tenant.id, 5);
    const template = await createApprovedTemplate(t.app, tenant);
    const phones = someContacts(10).map((c) => c.phone);
    const results = await Promise.all(phones.map((to) => call(t.app, tenant, 'POST', '/messages/template', {
      to, template_name: template.template_name, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }, { type: 'text', text: 'A-1' }] }],
    })));
    expect(results.map((r) => r.statusCode)).toEqual(phones.map(() => 200));
    const times: number[] = [];
    for (const phone of phones) times.push(...(await sendsTo(phone)).map((s) => new Date(s.at).getTime()));
    times.sort((a, b) => a - b);
    expect(times).toHaveLength(10);
    expect(times[9] - times[0]).toBeGreaterThanOrEqual(1700);
    for (const start of times) expect(times.filter((x) => x >= start && x < start + 1000).length).toBeLessThanOrEqual(6);
  });
});
