import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, eventually, itOnPostgresServer } from './helpers/app.ts';
import { settleCallbackFailures } from '../src/modules/campaigns/callback-failures.ts';
import { campaignQueue } from '../src/modules/campaigns/campaigns.queue.ts';
import { REFUSED_RUN } from '../src/workers/campaign-dispatcher.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, postCallback, sandboxControl, startUpstreamApp, statusCallback, type UpstreamTenant, type UpstreamTestApp } from './helpers/upstream.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';

/**
 * Campaigns act on every upstream answer through the outcome model, whether it is the send's own
 * answer or a status callback: the real database, the dispatcher and the sandbox over HTTP.
 */
describe('campaigns: every upstream answer through the outcome model', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => {
    t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000', CAMPAIGN_DEFER_MS: '1500', CAMPAIGN_DEFER_ATTEMPTS: '2', CAMPAIGN_HOLD_MS: '4000' });
  });
  afterAll(async () => { await t?.close(); });

  const sendsTo = async (to: string) => (await sandboxControl(t.sandbox!, 'GET', `/__sandbox/sends?to=${encodeURIComponent(to)}`)).json.data as { message_id: string }[];
  const rule = (to: string, outcome: string, extra: Record<string, unknown> = {}) => sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to, outcome, ...extra });
  const getCampaign = async (tenant: UpstreamTenant, id: string) => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
  const recipient = (id: string, phone: string) => t.deps.db.selectFrom('campaign_recipients').selectAll().where('campaign_id', '=', id).where('phone', '=', phone).executeTakeFirstOrThrow();
  /** Test contacts have US numbers, which MARKETING campaigns skip by default (marketing-consent.test.ts). */
  const allowUsMarketing = (tenant: UpstreamTenant) => t.app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${tenant.id}/marketing-settings`, headers: adminHeaders, payload: { block_us_marketing: false } });
  const mapping = { components: [{ type: 'BODY', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'x' }] }] };

  async function campaignOf(tenant: UpstreamTenant, templateId: string, tag: string, extra: Record<string, unknown> = {}): Promise<string> {
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'Outcomes', template_id: templateId, batch_size: 5, audience: { groups: [tag] }, variable_mapping: mapping, ...extra });
    expect(created.statusCode, created.body).toBe(201);
    return created.json().id;
  }
  const completed = (tenant: UpstreamTenant, id: string) => eventually(async () => {
    const c = await getCampaign(tenant, id);
    return c.status === 'COMPLETED' ? c : null;
  }, 40_000);

  it('every recipient that fails emits exactly one message.failed with campaign_id and the numeric code, refused at send or by callback', async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(9, { tags: [tag] }));
      const refused = contacts.slice(0, 3);
      const failedLater = contacts.slice(3, 5);
      for (const c of refused) await rule(c.phone, 'reject', { error_code: 131026 });
      for (const c of failedLater) await rule(c.phone, 'fail', { error_code: 131026 });
      const id = await campaignOf(tenant, template.id, tag);
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      const done = await completed(tenant, id);
      expect(done.stats).toMatchObject({ total: 9, failed: 5, sent: 4, pending: 0 });
      const events = (await eventsOf(t.deps, tenant.id, 'message.failed')).map((e) => e.data as { to: string; campaign_id: string; error: { code: unknown } });
      expect(events.map((e) => e.to).sort()).toEqual([...refused, ...failedLater].map((c) => c.phone).sort());
      for (const e of events) expect(e).toMatchObject({ campaign_id: id, error: { code: 131026 } });
    } finally {
      await workers.stop();
    }
  });

  it('a retry-later code by callback puts the recipient back to pending, sends it again, and emits no message.failed; a redelivered failure of an earlier attempt is stale', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    let workers: ReturnType<typeof runCampaignWorkers> | null = null;
    let flaky = '';
    let id = '';
    let waiting: Awaited<ReturnType<typeof recipient>>;
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      await createContacts(t, tenant, someContacts(3, { tags: [tag] }));
      id = await campaignOf(tenant, template.id, tag);
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      // The first recipient (sent first) is the flaky one, and one send a second keeps the campaign
      // running while its failure comes back by callback (after the campaign ends, it would stand).
      const [first] = await t.deps.db.selectFrom('campaign_recipients').select('phone').where('campaign_id', '=', id).orderBy('id').limit(1).execute();
      flaky = first.phone;
      await rule(flaky, 'fail', { error_code: 131000 });
      await t.deps.db.updateTable('business_accounts').set({ messages_per_second: 1 }).where('tenant_id', '=', tenant.id).execute();
      workers = runCampaignWorkers(t, [tenant.id]);
      // As a synchronous 131000: back to pending at its retry delay, the code kept for the listing.
      waiting = await eventually(async () => {
        const r = await recipient(id, flaky);
        return r.status === 'pending' && r.attempts === 1 ? r : null;
      }, 20_000);
      expect(waiting).toMatchObject({ error_code: 131000, message_id: null });
      expect(waiting.not_before!.getTime()).toBeGreaterThan(Date.now());
      await rule(flaky, 'ok');
      const done = await completed(tenant, id);
      expect(done.stats, JSON.stringify(done.stats)).toMatchObject({ total: 3, failed: 0, pending: 0, sent: 3 });
      expect(await recipient(id, flaky)).toMatchObject({ attempts: 2 });
      expect(await sendsTo(flaky)).toHaveLength(2);
      expect(await eventsOf(t.deps, tenant.id, 'message.failed')).toEqual([]);
    } finally {
      await workers?.stop();
    }
    // Meta redelivers the first attempt's failure while a next attempt is on its way (its row has no
    // upstream id yet, so the callback matches by our id): stale, it must not send the recipient again.
    const [first] = await sendsTo(flaky);
    // The sandbox's own status callbacks of the second attempt all in (a late one would move the recipient on again).
    const row = await eventually(async () => {
      const r = await recipient(id, flaky);
      return r.status === 'read' ? r : null;
    }, 20_000);
    await t.deps.db.updateTable('campaigns').set({ status: 'RUNNING' }).where('id', '=', id).execute();
    await t.deps.db.updateTable('campaign_recipients').set({ status: 'sending', attempted_at: new Date() }).where('id', '=', row.id).execute();
    await t.deps.db.updateTable('messages').set({ upstream_message_id: null, status: 'accepted', status_rank: 0 }).where('id', '=', row.id).execute();
    const failure = (at: number) => statusCallback(tenant.phoneNumberId, [{
      id: first.message_id, status: 'failed', timestamp: String(Math.floor(at / 1000)), recipient_id: flaky.slice(1), biz_opaque_callback_data: row.id,
      errors: [{ code: 131000, title: 'Something went wrong' }],
    }]);
    expect((await postCallback(t.app, failure(waiting.attempted_at!.getTime()))).statusCode).toBe(200);
    expect(await recipient(id, flaky)).toMatchObject({ status: 'sending' });
    // The same failure dated after the attempt is this attempt's: back to pending.
    expect((await postCallback(t.app, failure(Date.now() + 1000))).statusCode).toBe(200);
    expect(await recipient(id, flaky)).toMatchObject({ status: 'pending' });
    await t.deps.db.updateTable('campaigns').set({ status: 'STOPPED' }).where('id', '=', id).execute();
  });

  itOnPostgresServer('two connections: a callback transaction held open while the completion runs')('a retry-later failure by callback and the campaign\'s completion never cross: the campaign waits for the recipient sent back to pending', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(1, { tags: [tag] }));
    const id = await campaignOf(tenant, template.id, tag);
    await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
    await completed(tenant, id);
    await workers.stop();
    // The sandbox's own status callbacks all in (a late one would move the recipient on again).
    for (let i = 0; (await t.deps.db.selectFrom('campaign_recipients').select('status').where('campaign_id', '=', id).executeTakeFirstOrThrow()).status !== 'read'; i++) {
      if (i > 400) throw new Error('the recipient never reached read');
      await new Promise((r) => setTimeout(r, 25));
    }
    // Its only recipient sent, the campaign about to complete (as in the dispatcher's next turn)
    // while the recipient's 131000 failure is being applied in a callback's transaction.
    await t.deps.db.updateTable('campaigns').set({ status: 'RUNNING', completed_at: null }).where('id', '=', id).execute();
    const [row] = await t.deps.db.selectFrom('campaign_recipients').select(['id', 'message_id']).where('campaign_id', '=', id).execute();
    let release!: () => void;
    const held = new Promise<void>((done) => { release = done; });
    let settled!: () => void;
    const applied = new Promise<void>((done) => { settled = done; });
    const callback = t.deps.db.transaction().execute(async (tx) => {
      await settleCallbackFailures(tx, tenant.id, [{
        upstreamMessageId: row.message_id!, status: 'failed', timestamp: new Date(Date.now() + 1000), callbackData: row.id, error: { code: 131000, title: 'Something went wrong' },
      }], { maxAttempts: 3, deferMs: 60_000, deferAttempts: 2 });
      settled();
      await held;
    });
    await applied;
    let completing = false;
    const completion = campaignQueue.completeIfDone(t.deps.db, id).then((r) => { completing = true; return r; });
    await new Promise((r) => setTimeout(r, 300));
    expect(completing).toBe(false);
    release();
    await callback;
    expect(await completion).toBeUndefined();
    expect((await getCampaign(tenant, id))).toMatchObject({ status: 'RUNNING', stats: { pending: 1, sent: 0 } });
    await t.deps.db.updateTable('campaigns').set({ status: 'STOPPED' }).where('id', '=', id).execute();
  });

  it('the account\'s statuses_through follows the latest committed status timestamp, never back', async () => {
    const tenant = await createConnectedTenant(t.app);
    const through = async () => (await t.deps.db.selectFrom('business_accounts').select('statuses_through').where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow()).statuses_through;
    expect(await through()).toBeNull();
    const status = (seconds: number) => statusCallback(tenant.phoneNumberId, [{ id: `wamid.${seconds}`, status: 'delivered', timestamp: String(seconds), recipient_id: '14155550100' }]);
    const now = Math.floor(Date.now() / 1000);
    expect((await postCallback(t.app, status(now))).statusCode).toBe(200);
    expect(await through()).toEqual(new Date(now * 1000));
    expect((await postCallback(t.app, status(now - 30))).statusCode).toBe(200);
    expect(await through()).toEqual(new Date(now * 1000));
    expect((await postCallback(t.app, status(now + 5))).statusCode).toBe(200);
    expect(await through()).toEqual(new Date((now + 5) * 1000));
  });

  it('a recipient Meta deferred (131049) waits as deferred, is retried after CAMPAIGN_DEFER_MS and sent; the campaign completes only then', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
      await allowUsMarketing(tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(3, { tags: [tag] }));
      // Two a second: the campaign is still running when the first recipient's 131049 comes back.
      await t.deps.db.updateTable('business_accounts').set({ messages_per_second: 2 }).where('tenant_id', '=', tenant.id).execute();
      const capped = contacts[0].phone;
      await rule(capped, 'defer', { count: 1 });
      const id = await campaignOf(tenant, template.id, tag);
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      const during = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.stats.deferred === 1 ? c : null;
      }, 20_000);
      // Deferred counts in pending (the spec's six keys) and on its own; the campaign runs on.
      expect(during).toMatchObject({ status: 'RUNNING', stats: { deferred: 1, failed: 0 } });
      expect(during.stats.pending).toBeGreaterThanOrEqual(1);
      const listed = (await call(t.app, tenant, 'GET', `/campaigns/${id}/recipients?status=deferred`)).json();
      expect(listed.data.map((r: { phone_number: string }) => r.phone_number)).toEqual([capped]);
      const done = await completed(tenant, id);
      expect(done.stats).toMatchObject({ total: 3, sent: 3, failed: 0, deferred: 0, pending: 0 });
      expect(await recipient(id, capped)).toMatchObject({ defers: 1 });
      expect(await sendsTo(capped)).toHaveLength(2);
      expect(await eventsOf(t.deps, tenant.id, 'message.failed')).toEqual([]);
    } finally {
      await workers.stop();
    }
  });

  it('deferrals past CAMPAIGN_DEFER_ATTEMPTS, or with retry_deferred false, fail with 131049 once', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant, { category: 'MARKETING' });
      await allowUsMarketing(tenant);
      const [tagA, tagB] = [uniqueTag(), uniqueTag()];
      const [always, holder] = await createContacts(t, tenant, someContacts(2, { tags: [tagA] }));
      const [once] = await createContacts(t, tenant, someContacts(1, { tags: [tagB] }));
      await rule(always.phone, 'defer', { count: 10 });
      // Held for 8 s, it keeps campaign a running while the deferrals come back (a campaign that
      // has ended tries nothing again).
      await rule(holder.phone, 'held', { then: 'release', hold_ms: 8000 });
      await rule(once.phone, 'defer', { count: 10 });
      const a = await campaignOf(tenant, template.id, tagA);
      const b = await campaignOf(tenant, template.id, tagB, { retry_deferred: false });
      await call(t.app, tenant, 'POST', `/campaigns/${a}/send`);
      await call(t.app, tenant, 'POST', `/campaigns/${b}/send`);
      expect((await completed(tenant, b)).stats).toMatchObject({ failed: 1, deferred: 0 });
      expect(await sendsTo(once.phone)).toHaveLength(1);
      // Two deferrals allowed: the third 131049 fails it.
      expect((await completed(tenant, a)).stats).toMatchObject({ failed: 1, deferred: 0, sent: 1 });
      expect(await recipient(a, always.phone)).toMatchObject({ status: 'failed', error_code: 131049, defers: 2 });
      expect(await sendsTo(always.phone)).toHaveLength(3);
      const failed = (await eventsOf(t.deps, tenant.id, 'message.failed')).map((e) => e.data as { to: string; error: { code: number } });
      expect(failed.map((e) => [e.to, e.error.code]).sort()).toEqual([[always.phone, 131049], [once.phone, 131049]].sort());
    } finally {
      await workers.stop();
    }
  });

  it('a held send is held, then sent when released; a dropped one fails with 132015 and its template pause pauses the campaign until it is approved again', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(2, { tags: [tag] }));
      await rule(contacts[0].phone, 'held', { then: 'release', hold_ms: 1500 });
      const id = await campaignOf(tenant, template.id, tag);
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      const during = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.stats.held === 1 ? c : null;
      }, 20_000);
      expect(during.status).toBe('RUNNING');
      expect((await recipient(id, contacts[0].phone)).status).toBe('held');
      expect((await completed(tenant, id)).stats).toMatchObject({ sent: 2, held: 0, failed: 0 });

      // Dropped: the template goes PAUSED (its campaigns pause) and the held message fails.
      const tag2 = uniqueTag();
      const more = await createContacts(t, tenant, someContacts(4, { tags: [tag2] }));
      await rule(more[0].phone, 'held', { then: 'drop', hold_ms: 300 });
      // One a second: the others are still to go when the pause comes.
      await t.deps.db.updateTable('business_accounts').set({ messages_per_second: 1 }).where('tenant_id', '=', tenant.id).execute();
      const second = await campaignOf(tenant, template.id, tag2, { batch_size: 1 });
      await call(t.app, tenant, 'POST', `/campaigns/${second}/send`);
      const paused = await eventually(async () => {
        const c = await getCampaign(tenant, second);
        return c.status === 'PAUSED' ? c : null;
      }, 20_000);
      expect(paused.paused_reason).toBe('template_paused');
      await eventually(async () => (await recipient(second, more[0].phone)).status === 'failed');
      expect(await recipient(second, more[0].phone)).toMatchObject({ error_code: 132015 });
      const pausedEvent = (await eventsOf(t.deps, tenant.id, 'campaign.paused')).find((e) => (e.data as { id: string }).id === second);
      expect(pausedEvent?.data).toMatchObject({ reason: 'template_paused', paused_reason: 'template_paused' });
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/unpause', { name: template.template_name, language: 'en', waba_id: tenant.wabaId });
      const resumed = await completed(tenant, second);
      expect(resumed.stats).toMatchObject({ total: 4, failed: 1, sent: 3, pending: 0 });
      expect((await eventsOf(t.deps, tenant.id, 'campaign.resumed')).map((e) => (e.data as { id: string }).id)).toContain(second);
      for (const c of more) expect(await sendsTo(c.phone), c.phone).toHaveLength(1);
    } finally {
      await workers.stop();
    }
  });

  it('a template paused mid-flight pauses its running campaigns and the unpause resumes exactly those: every recipient sent once; a pause by the user stays', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    await t.deps.db.updateTable('business_accounts').set({ messages_per_second: 10 }).where('tenant_id', '=', tenant.id).execute();
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const [tag, userTag] = [uniqueTag(), uniqueTag()];
      const contacts = await createContacts(t, tenant, someContacts(30, { tags: [tag] }));
      await createContacts(t, tenant, someContacts(2, { tags: [userTag] }));
      const byUser = await campaignOf(tenant, template.id, userTag);
      await call(t.app, tenant, 'POST', `/campaigns/${byUser}/send`);
      await call(t.app, tenant, 'POST', `/campaigns/${byUser}/pause`);
      const id = await campaignOf(tenant, template.id, tag);
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      await eventually(async () => (await getCampaign(tenant, id)).stats.sent >= 5, 20_000);
      await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/pause', { name: template.template_name, language: 'en', waba_id: tenant.wabaId, unpause_after_ms: 2000 });
      const paused = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'PAUSED' ? c : null;
      }, 20_000);
      expect(paused.paused_reason).toBe('template_paused');
      expect(paused.stats.sent).toBeLessThan(30);
      const done = await completed(tenant, id);
      expect(done.stats).toMatchObject({ total: 30, sent: 30, failed: 0, pending: 0 });
      for (const c of contacts) expect(await sendsTo(c.phone), c.phone).toHaveLength(1);
      const types = (await eventsOf(t.deps, tenant.id)).filter((e) => (e.data as { id?: string }).id === id).map((e) => e.type);
      expect(types).toEqual(expect.arrayContaining(['campaign.paused', 'campaign.resumed', 'campaign.completed']));
      // The user's pause is the user's to undo.
      expect(await getCampaign(tenant, byUser)).toMatchObject({ status: 'PAUSED', paused_reason: 'user' });
    } finally {
      await workers.stop();
    }
  });

  /** A campaign of six at 2/s whose first recipient fails by callback with `code`, run until it is `status`. */
  async function firstFailsByCallback(code: number, status: string) {
    const tenant = await createConnectedTenant(t.app);
    await t.deps.db.updateTable('business_accounts').set({ messages_per_second: 2 }).where('tenant_id', '=', tenant.id).execute();
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const contacts = await createContacts(t, tenant, someContacts(6, { tags: [tag] }));
      await rule(contacts[0].phone, 'fail', { error_code: code });
      const id = await campaignOf(tenant, template.id, tag, { batch_size: 1 });
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      const campaign = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === status ? c : null;
      }, 20_000);
      const account = await t.deps.db.selectFrom('business_accounts').select(['status', 'status_reason']).where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
      return { tenant, id, first: contacts[0].phone, campaign, account };
    } finally {
      await workers.stop();
    }
  }

  it('an account-stopping code by callback (131031) acts as the same answer at send: the account is restricted and its running campaigns fail', { timeout: 60_000 }, async () => {
    const { id, first, campaign, account } = await firstFailsByCallback(131031, 'FAILED');
    expect(campaign.failure_reason).toMatch(/131031/);
    expect(account.status).toBe('restricted');
    expect(account.status_reason).toMatch(/131031/);
    expect(await recipient(id, first)).toMatchObject({ status: 'failed', error_code: 131031 });
  });

  it('a number restricted for spam by callback (131048) pauses the running campaign (paused_reason number_restricted), its recipient waits an hour pending, the account stays active', { timeout: 60_000 }, async () => {
    const { tenant, id, first, campaign, account } = await firstFailsByCallback(131048, 'PAUSED');
    expect(campaign).toMatchObject({ paused_reason: 'number_restricted', failure_reason: null });
    expect(account.status).toBe('active');
    const row = await recipient(id, first);
    expect(row.status).toBe('pending');
    expect(row.not_before!.getTime()).toBeGreaterThan(Date.now() + 59 * 60_000);
    expect(await eventsOf(t.deps, tenant.id, 'campaign.paused')).toHaveLength(1);
    expect((await eventsOf(t.deps, tenant.id, 'message.failed')).filter((e: any) => e.data.to === first)).toEqual([]);
  });

  it(`a campaign whose first ${REFUSED_RUN} sends are all refused with one request code (132000) pauses (paused_reason requests_refused); accepted sends among them keep it going`, { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const [refusedTag, mixedTag] = [uniqueTag(), uniqueTag()];
      const refused = await createContacts(t, tenant, someContacts(REFUSED_RUN + 40, { tags: [refusedTag] }));
      const mixed = await createContacts(t, tenant, someContacts(REFUSED_RUN + 10, { tags: [mixedTag] }));
      // Every other one of the second campaign is accepted, so any run of its sends has one.
      for (const c of [...refused, ...mixed.filter((_, i) => i % 2 === 1)]) await rule(c.phone, 'reject', { error_code: 132000 });

      const id = await campaignOf(tenant, template.id, refusedTag, { batch_size: 10 });
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      const paused = await eventually(async () => {
        const c = await getCampaign(tenant, id);
        return c.status === 'PAUSED' ? c : null;
      }, 20_000);
      expect(paused.paused_reason).toBe('requests_refused');
      expect(paused.stats.failed).toBeGreaterThanOrEqual(REFUSED_RUN);
      expect(paused.stats.pending).toBeGreaterThan(0);
      const [event] = await eventsOf(t.deps, tenant.id, 'campaign.paused');
      expect(event.data).toMatchObject({ id, status: 'PAUSED' });

      // The same refusals beside accepted sends: the rows differ, so it completes.
      const other = await campaignOf(tenant, template.id, mixedTag, { batch_size: 10 });
      await call(t.app, tenant, 'POST', `/campaigns/${other}/send`);
      const done = await eventually(async () => {
        const c = await getCampaign(tenant, other);
        return c.status === 'COMPLETED' ? c : null;
      }, 20_000);
      expect(done.stats).toMatchObject({ failed: (REFUSED_RUN + 10) / 2 });
    } finally {
      await workers.stop();
    }
  });

  it('a held recipient never released (a lost callback) counts as sent after CAMPAIGN_HOLD_MS, and its campaign completes', { timeout: 60_000 }, async () => {
    const tenant = await createConnectedTenant(t.app);
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      const template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const [held] = await createContacts(t, tenant, someContacts(1, { tags: [tag] }));
      await rule(held.phone, 'held', { then: 'release', hold_ms: 600_000 });
      const id = await campaignOf(tenant, template.id, tag);
      await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
      await eventually(async () => (await recipient(id, held.phone)).status === 'held', 20_000);
      expect((await getCampaign(tenant, id)).status).toBe('RUNNING');
      const done = await completed(tenant, id);
      expect(done.stats).toMatchObject({ total: 1, sent: 1, held: 0, pending: 0 });
      expect((await recipient(id, held.phone)).status).toBe('sent');
    } finally {
      await workers.stop();
    }
  });
});
