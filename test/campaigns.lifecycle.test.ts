import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { adminHeaders, call, eventually, uniquePhone } from './helpers/app.ts';
import { expectError } from './helpers/expect.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { bodyMapping, createCampaign, expectInvalid, future, stopLeftovers } from './helpers/campaigns-api.ts';
import {
  createApprovedTemplate, createConnectedTenant, eventsOf, sandboxControl, startUpstreamApp, type ApprovedTemplate, type UpstreamTenant, type UpstreamTestApp,
} from './helpers/upstream.ts';
import { TRANSITIONS, AUDIENCE_EDITABLE } from '../src/modules/campaigns/campaigns.states.ts';
import { lookupErrorCode } from '../src/upstream/error-codes.ts';

/** Spec 3.1 and issue 9, written out: the statuses each public action is allowed from, where it leads and what it emits. */
const SPEC = {
  send: { from: ['DRAFT', 'SCHEDULED'], to: 'RUNNING', event: 'campaign.started' },
  schedule: { from: ['DRAFT'], to: 'SCHEDULED', event: 'campaign.scheduled' },
  pause: { from: ['RUNNING', 'SCHEDULED'], to: 'PAUSED', event: 'campaign.paused' },
  resume: { from: ['PAUSED'], to: 'RUNNING', event: 'campaign.resumed' },
  stop: { from: ['RUNNING', 'PAUSED'], to: 'STOPPED', event: 'campaign.stopped' },
} as const;
type Action = keyof typeof SPEC;
const ACTIONS = Object.keys(SPEC) as Action[];
/** Every status a campaign can be in; PAUSED_S is a campaign paused while SCHEDULED (not yet materialised). */
const STATES = ['DRAFT', 'SCHEDULED', 'RUNNING', 'PAUSED', 'PAUSED_S', 'STOPPED', 'COMPLETED', 'FAILED'] as const;
type State = (typeof STATES)[number];
const statusOf = (s: State) => (s === 'PAUSED_S' ? 'PAUSED' : s);

describe('campaigns API: lifecycle, audience, recipients, errors, retarget', () => {
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

  const get = async (tenant: UpstreamTenant, id: string) => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
  const act = (tenant: UpstreamTenant, id: string, action: Action | 'audience' | 'retarget') => {
    if (action === 'schedule') return call(t.app, tenant, 'POST', `/campaigns/${id}/schedule`, { scheduled_at: future() });
    if (action === 'audience') return call(t.app, tenant, 'PUT', `/campaigns/${id}/audience`, { groups: ['replaced'] });
    if (action === 'retarget') return call(t.app, tenant, 'POST', `/campaigns/${id}/retarget`, {});
    return call(t.app, tenant, 'POST', `/campaigns/${id}/${action}`);
  };
  const campaignEvents = async (tenantId: string, id: string) =>
    (await eventsOf(t.deps, tenantId)).filter((e) => e.type.startsWith('campaign.') && (e.data as { id: string }).id === id);
  const recipientsOf = (id: string) => t.deps.db.selectFrom('campaign_recipients').selectAll().where('campaign_id', '=', id).execute();

  it('the state table in campaigns.states.ts is spec 3.1', () => {
    for (const action of ACTIONS) expect(TRANSITIONS[action], action).toEqual(SPEC[action]);
    expect([...AUDIENCE_EDITABLE]).toEqual(['DRAFT', 'PAUSED']);
  });

  // About 60 campaigns through the API and the dispatcher: 25-30 s on a busy machine, past the default 30 s limit.
  it('every action from every status: allowed ones answer 200 with the campaign and emit their event, the rest 400 naming the status', { timeout: 90_000 }, async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(1, { tags: [tag] }));
    const fresh = () => createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    const must = async (res: Promise<{ statusCode: number; body: string }>) => { const r = await res; expect(r.statusCode, r.body).toBe(200); };

    /** A new campaign in `state`, through the API (COMPLETED and FAILED through the dispatcher, below). */
    async function reach(state: State): Promise<string> {
      if (state === 'SCHEDULED' || state === 'PAUSED_S') {
        const c = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] }, scheduled_at: future() });
        if (state === 'PAUSED_S') await must(act(tenant, c.id, 'pause'));
        return c.id;
      }
      const { id } = await fresh();
      if (state === 'DRAFT') return id;
      await must(act(tenant, id, 'send'));
      if (state === 'PAUSED') await must(act(tenant, id, 'pause'));
      if (state === 'STOPPED') await must(act(tenant, id, 'stop'));
      return id;
    }

    // COMPLETED: sent and dispatched to its one contact. FAILED: the account disconnected while RUNNING.
    const finished = { COMPLETED: [] as string[], FAILED: [] as string[] };
    const failing = await connected();
    const failingTemplate = await createApprovedTemplate(t.app, failing);
    await createContacts(t, failing, someContacts(1, { tags: [tag] }));
    for (let i = 0; i < ACTIONS.length + 2; i++) {
      finished.COMPLETED.push(await reach('RUNNING'));
      const f = await createCampaign(t, failing, failingTemplate.id, { audience: { groups: [tag] } });
      await must(act(failing, f.id, 'send'));
      finished.FAILED.push(f.id);
    }
    await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${failing.id}/business-account`, headers: adminHeaders });
    const workers = runCampaignWorkers(t, [tenant.id, failing.id]);
    try {
      await eventually(async () => {
        const rows = await t.deps.db.selectFrom('campaigns').select(['id', 'status']).where('id', 'in', [...finished.COMPLETED, ...finished.FAILED]).execute();
        return rows.every((r) => r.status === (finished.COMPLETED.includes(r.id) ? 'COMPLETED' : 'FAILED'));
      }, 20_000);
    } finally {
      await workers.stop();
    }

    let checked = 0;
    for (const state of STATES) {
      const status = statusOf(state);
      for (const action of [...ACTIONS, 'audience', 'retarget'] as const) {
        const owner = state === 'FAILED' ? failing : tenant;
        const id = state === 'COMPLETED' || state === 'FAILED' ? finished[state].pop()! : await reach(state);
        const before = await get(owner, id);
        expect(before.status).toBe(status);
        const eventsBefore = await campaignEvents(owner.id, id);
        const res = await act(owner, id, action);
        const what = `${action} from ${state}: ${res.body}`;
        const allowed = action === 'audience' ? status === 'DRAFT' || status === 'PAUSED'
          : action === 'retarget' ? ['COMPLETED', 'STOPPED', 'FAILED'].includes(status)
          : (SPEC[action].from as readonly string[]).includes(status);
        if (allowed && action === 'retarget') {
          // Allowed from this status, but none of these campaigns has a failed recipient: nothing to
          // retarget (the retarget of failures is below, under "a dispatched campaign with failures").
          expectError(res, 400, 'VALIDATION_ERROR', 'The campaign has no failed recipients to retarget');
          expect(await campaignEvents(owner.id, id), what).toHaveLength(eventsBefore.length);
        } else if (allowed) {
          expect(res.statusCode, what).toBe(200);
          const body = res.json();
          const to = action === 'audience' ? status : SPEC[action as Action].to;
          expect(body, what).toMatchObject({ id, status: to, stats: expect.any(Object), audiences: expect.any(Array), preflight: expect.any(Object) });
          expect(await get(owner, id)).toMatchObject({ status: to });
          if (action === 'audience') {
            expect(body.audiences).toEqual([{ type: 'group', value: 'replaced' }]);
          } else {
            const added = (await campaignEvents(owner.id, id)).slice(eventsBefore.length);
            expect(added.map((e) => e.type), what).toEqual([SPEC[action as Action].event]);
            expect(added[0].data).toMatchObject({ id, status: to });
          }
          if (action === 'send' || action === 'resume') {
            expect(body.started_at, what).toEqual(expect.any(String));
            // Materialised on the way to RUNNING (also when resuming a campaign paused while SCHEDULED).
            expect(body.total_recipients, what).toBe(1);
          }
          if (action === 'schedule') expect(body.scheduled_at).toEqual(expect.any(String));
        } else {
          const error = expectError(res, 400, 'VALIDATION_ERROR');
          expect(error.message, what).toContain(status);
          expect((error.details as { input: unknown }[])[0].input, what).toBe(status);
          const after = await get(owner, id);
          expect(after.status, what).toBe(status);
          expect(after.updated_at, what).toBe(before.updated_at);
          expect(await campaignEvents(owner.id, id), what).toHaveLength(eventsBefore.length);
        }
        checked++;
      }
    }
    expect(checked).toBe(STATES.length * 7);
  });

  it('schedule needs a future scheduled_at (an audience may come later); send needs an audience, an active account and an approved template', async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const c = await createCampaign(t, tenant, template.id);
    for (const body of [{}, { scheduled_at: 'soon' }, { scheduled_at: new Date(Date.now() - 60_000).toISOString() }]) {
      expectInvalid(await call(t.app, tenant, 'POST', `/campaigns/${c.id}/schedule`, body), ['body', 'scheduled_at'], JSON.stringify(body));
    }
    expectInvalid(await act(tenant, c.id, 'send'), ['body', 'audience']);
    const at = new Date(Date.now() + 7_200_000);
    at.setMilliseconds(0);
    // Scheduling does not need an audience (spec 3.1): it can be set later, paused.
    const scheduled = await call(t.app, tenant, 'POST', `/campaigns/${c.id}/schedule`, { scheduled_at: at.toISOString() });
    expect(scheduled.statusCode, scheduled.body).toBe(200);
    expect(scheduled.json()).toMatchObject({ status: 'SCHEDULED', scheduled_at: at.toISOString(), audiences: [] });
    expect(scheduled.json().preflight.warnings).toContain(
      'The campaign has no audience: it has no recipients and will send nothing. Set groups or sources (a SCHEDULED campaign: pause it, set the audience, resume it).');

    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(1, { tags: [tag] }));
    const ready = await createCampaign(t, tenant, template.id, { audience: { groups: [tag] } });
    await sandboxControl(t.sandbox!, 'POST', '/__sandbox/templates/review', { name: template.template_name, language: template.language, status: 'PAUSED' });
    await eventually(async () => (await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow()).status === 'paused');
    expectInvalid(await act(tenant, ready.id, 'send'), ['body', 'template_id']);
    expect((await get(tenant, ready.id)).status).toBe('DRAFT');
    expect(await recipientsOf(ready.id)).toHaveLength(0);

    const other = await createApprovedTemplate(t.app, tenant);
    const c2 = await createCampaign(t, tenant, other.id, { audience: { groups: [tag] } });
    await t.app.inject({ method: 'DELETE', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders });
    expectError(await act(tenant, c2.id, 'send'), 404, 'NOT_FOUND');
    expect((await get(tenant, c2.id)).status).toBe('DRAFT');
  });

  it('a campaign scheduled without an audience sends nothing when due and completes with no recipients; one given its audience while paused sends to it', async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(2, { tags: [tag] }));
    const at = new Date(Date.now() + 1500).toISOString();
    const empty = await createCampaign(t, tenant, template.id, { scheduled_at: at });
    // The audience set later: pause, PUT audience while PAUSED, resume.
    const later = await createCampaign(t, tenant, template.id, { scheduled_at: future() });
    expect((await act(tenant, later.id, 'pause')).statusCode).toBe(200);
    expect((await call(t.app, tenant, 'PUT', `/campaigns/${later.id}/audience`, { groups: [tag] })).statusCode).toBe(200);
    const resumed = await act(tenant, later.id, 'resume');
    expect(resumed.statusCode, resumed.body).toBe(200);
    expect(resumed.json()).toMatchObject({ status: 'RUNNING', total_recipients: 2 });

    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      await eventually(async () => (await get(tenant, empty.id)).status === 'COMPLETED' && (await get(tenant, later.id)).status === 'COMPLETED', 15_000);
    } finally {
      await workers.stop();
    }
    const done = await get(tenant, empty.id);
    expect(done).toMatchObject({ total_recipients: 0, stats: { total: 0, sent: 0, failed: 0, pending: 0 }, started_at: expect.any(String), completed_at: expect.any(String) });
    expect(done.preflight.warnings).toContain('The campaign has no recipients and will send nothing.');
    expect(await recipientsOf(empty.id)).toHaveLength(0);
    expect((await campaignEvents(tenant.id, empty.id)).map((e) => e.type).slice(2)).toEqual(['campaign.started', 'campaign.completed']);
    // The tenant's only sends are the two of the campaign that was given its audience.
    const sends = await t.deps.db.selectFrom('messages').select('to_phone').where('tenant_id', '=', tenant.id).execute();
    const digits = (phone: string) => phone.replace(/^\+/, '');
    expect(sends.map((m) => digits(m.to_phone)).sort()).toEqual(contacts.map((c) => digits(c.phone)).sort());
  });

  it('PUT audience replaces groups and sources; bad items are 400 naming the item', async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const c = await createCampaign(t, tenant, template.id, { audience: { groups: ['a', 'b'], sources: ['s'] } });
    const put = (body: unknown) => call(t.app, tenant, 'PUT', `/campaigns/${c.id}/audience`, body);
    let res = await put({ groups: ['x', 'x', 'y'] });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().audiences).toEqual([{ type: 'group', value: 'x' }, { type: 'group', value: 'y' }]);
    res = await put({ sources: ['website'] });
    expect(res.json().audiences).toEqual([{ type: 'source', value: 'website' }]);
    expect((await get(tenant, c.id)).audiences).toEqual([{ type: 'source', value: 'website' }]);
    res = await put({ groups: Array.from({ length: 100 }, (_, i) => `g${i}`), sources: Array.from({ length: 100 }, (_, i) => `s${i}`) });
    expect(res.statusCode).toBe(200);
    expect(res.json().audiences).toHaveLength(200);

    const bad: [unknown, (string | number)[]][] = [
      [{ groups: [1] }, ['body', 'groups', 0]],
      [{ groups: ['ok', null] }, ['body', 'groups', 1]],
      [{ sources: [{ name: 'x' }] }, ['body', 'sources', 0]],
      [{ groups: [''] }, ['body', 'groups', 0]],
      [{ sources: ['   '] }, ['body', 'sources', 0]],
      [{ groups: ['g'.repeat(101)] }, ['body', 'groups', 0]],
      [{ groups: Array.from({ length: 101 }, (_, i) => `g${i}`) }, ['body', 'groups']],
      [{ sources: Array.from({ length: 101 }, (_, i) => `s${i}`) }, ['body', 'sources']],
      [{ groups: 'vip' }, ['body', 'groups']],
      // Spec 1: groups and sources only, never contact ids (the key was dropped, emptying the audience).
      [{ contact_ids: [randomUUID()] }, ['body', 'contact_ids']],
      [{ groups: ['g'], contacts: ['x'] }, ['body', 'contacts']],
    ];
    for (const [body, loc] of bad) expectInvalid(await put(body), loc, JSON.stringify(body).slice(0, 60));
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'ids', template_id: template.id, variable_mapping: bodyMapping(), audience: { contact_ids: [randomUUID()] } });
    expectInvalid(created, ['body', 'audience', 'contact_ids']);
    expect((await get(tenant, c.id)).audiences).toHaveLength(200);
    res = await put({});
    expect(res.json().audiences).toEqual([]);
  });

  it('send materialises the audience once: any group or source, each phone once, archived never; the recipients change only when a PAUSED campaign\'s audience is replaced', async () => {
    const tenant = await connected();
    const template = await createApprovedTemplate(t.app, tenant);
    const [tagA, tagB, source] = [uniqueTag(), uniqueTag(), `src_${uniqueTag()}`];
    const seeds = [
      { first_name: 'A1', phone: uniquePhone(), tags: [tagA] },
      { first_name: 'A2', phone: uniquePhone(), tags: [tagA], source },
      { first_name: 'AB', phone: uniquePhone(), tags: [tagA, tagB, 'other'] },
      { first_name: 'B1', phone: uniquePhone(), tags: [tagB] },
      { first_name: 'S1', phone: uniquePhone(), source },
      { first_name: 'Archived', phone: uniquePhone(), tags: [tagA], source },
      { first_name: 'Outside', phone: uniquePhone(), tags: ['other'] },
      // A tag named like the source is not the source.
      { first_name: 'TagNamedLikeSource', phone: uniquePhone(), tags: [source] },
    ];
    const contacts = await createContacts(t, tenant, seeds);
    const idOf = (name: string) => contacts.find((c) => c.phone === seeds.find((s) => s.first_name === name)!.phone)!.id;
    expect((await call(t.app, tenant, 'DELETE', `/contacts/${idOf('Archived')}`)).statusCode).toBe(200);
    const neighbour = await connected();
    await createContacts(t, neighbour, [{ first_name: 'Neighbour', phone: seeds[0].phone, tags: [tagA], source }]);

    const c = await createCampaign(t, tenant, template.id, { audience: { groups: [tagA, tagB], sources: [source] } });
    expect((await get(tenant, c.id)).preflight.audience_size).toBe(5);
    expect(await recipientsOf(c.id)).toHaveLength(0);
    const sent = await act(tenant, c.id, 'send');
    expect(sent.statusCode, sent.body).toBe(200);
    expect(sent.json()).toMatchObject({ status: 'RUNNING', total_recipients: 5, stats: { total: 5, pending: 5, sent: 0, delivered: 0, read: 0, failed: 0 } });
    const expected = ['A1', 'A2', 'AB', 'B1', 'S1'].map((n) => ({ contact_id: idOf(n), phone: seeds.find((s) => s.first_name === n)!.phone, status: 'pending', tenant_id: tenant.id }));
    const rows = await recipientsOf(c.id);
    expect(rows.map((r) => ({ contact_id: r.contact_id, phone: r.phone, status: r.status, tenant_id: r.tenant_id })).sort((a, b) => a.phone.localeCompare(b.phone)))
      .toEqual(expected.sort((a, b) => a.phone.localeCompare(b.phone)));

    // The audience grows after the send: the campaign's recipients do not.
    await createContacts(t, tenant, someContacts(2, { tags: [tagA] }));
    expect((await call(t.app, tenant, 'PATCH', `/contacts/${idOf('Outside')}`, { tags: [tagA] })).statusCode).toBe(200);
    const check = async () => {
      const now = await get(tenant, c.id);
      expect(now.total_recipients).toBe(5);
      expect(now.stats.total).toBe(5);
      expect(now.preflight.audience_size).toBe(5);
      expect(await recipientsOf(c.id)).toHaveLength(5);
    };
    await check();
    expect((await call(t.app, tenant, 'POST', `/campaigns/${c.id}/refresh-metrics`)).json()).toMatchObject({ total_recipients: 5, stats: { total: 5, pending: 5 } });
    await check();
    // Paused, its audience replaced (spec 3.1): the recipients it never tried are the new audience's
    // as it is now (tag A's three, the two contacts tagged since and Outside), each phone once.
    expect((await act(tenant, c.id, 'pause')).statusCode).toBe(200);
    const replaced = await call(t.app, tenant, 'PUT', `/campaigns/${c.id}/audience`, { groups: [tagA] });
    expect(replaced.statusCode, replaced.body).toBe(200);
    expect(replaced.json()).toMatchObject({ status: 'PAUSED', total_recipients: 6, stats: { total: 6, pending: 6 } });
    expect((await recipientsOf(c.id)).map((r) => r.contact_id)).not.toContain(idOf('B1'));
    const resumed = await act(tenant, c.id, 'resume');
    expect(resumed.json()).toMatchObject({ status: 'RUNNING', total_recipients: 6 });

    // Stopped: undispatched recipients stay pending and queryable.
    expect((await act(tenant, c.id, 'stop')).json()).toMatchObject({ status: 'STOPPED', total_recipients: 6, stats: { pending: 6 } });
    const pending = (await call(t.app, tenant, 'GET', `/campaigns/${c.id}/recipients?status=pending`)).json();
    expect(pending.pagination.total_items).toBe(6);
    expect((await call(t.app, tenant, 'GET', `/campaigns/${c.id}/errors`)).json()).toEqual({ total_failed: 0, by_code: [] });
    // Stopped, the audience grows again: the recipients do not.
    await createContacts(t, tenant, someContacts(1, { tags: [tagA] }));
    expect(await recipientsOf(c.id)).toHaveLength(6);
  });

  describe('a dispatched campaign with failures', () => {
    let tenant: UpstreamTenant;
    let template: ApprovedTemplate;
    let campaignId: string;
    const rejected: string[] = [];
    const optedOut: string[] = [];
    const delivered: string[] = [];
    let contactByPhone: Map<string, string>;

    beforeAll(async () => {
      tenant = await connected();
      template = await createApprovedTemplate(t.app, tenant);
      const tag = uniqueTag();
      const seeds = someContacts(58, { tags: [tag] });
      seeds.forEach((s, i) => (i < 53 ? rejected : i < 55 ? optedOut : delivered).push(s.phone));
      for (const to of rejected) await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to, outcome: 'reject', error_code: 131026 });
      for (const to of optedOut) await sandboxControl(t.sandbox!, 'POST', '/__sandbox/recipients', { to, outcome: 'fail', error_code: 131050 });
      contactByPhone = new Map((await createContacts(t, tenant, seeds)).map((c) => [c.phone, c.id]));
      campaignId = (await createCampaign(t, tenant, template.id, { audience: { groups: [tag] }, batch_size: 20 })).id;
      const workers = runCampaignWorkers(t, [tenant.id]);
      try {
        expect((await act(tenant, campaignId, 'send')).statusCode).toBe(200);
        await eventually(async () => {
          const c = await get(tenant, campaignId);
          return c.status === 'COMPLETED' && c.stats.failed === 55 && c.stats.read === 3;
        }, 30_000);
      } finally {
        await workers.stop();
      }
    });

    it('errors summary groups failed recipients by code with the catalogue title and fix, count and a sample message', async () => {
      const res = await call(t.app, tenant, 'GET', `/campaigns/${campaignId}/errors`);
      expect(res.statusCode).toBe(200);
      const summary = res.json();
      expect(summary.total_failed).toBe(55);
      expect(summary.by_code.map((r: { code: string; count: number }) => [r.code, r.count])).toEqual([['131026', 53], ['131050', 2]]);
      for (const row of summary.by_code) {
        const info = lookupErrorCode(Number(row.code))!;
        expect(Object.keys(row).sort()).toEqual(['code', 'count', 'fix', 'sample_message', 'title']);
        expect(row).toMatchObject({ title: info.title, fix: info.fix, sample_message: expect.stringMatching(/\S/) });
      }
      expect((await get(tenant, campaignId)).stats).toEqual({ total: 58, sent: 3, delivered: 3, read: 3, failed: 55, pending: 0, held: 0, deferred: 0, skipped: 0, replied: 0, clicked: 0 });
    });

    it('drill-down lists a code\'s failed recipients, limit 1-200 (default 50)', async () => {
      const drill = (code: string, query = '') => call(t.app, tenant, 'GET', `/campaigns/${campaignId}/errors/${code}${query}`);
      const byDefault = await drill('131026');
      expect(byDefault.statusCode).toBe(200);
      expect(byDefault.json().error_code).toBe('131026');
      expect(byDefault.json().recipients).toHaveLength(50);
      const all = (await drill('131026', '?limit=200')).json().recipients;
      expect(all.map((r: { phone_number: string }) => r.phone_number).sort()).toEqual([...rejected].sort());
      for (const r of all) {
        expect(Object.keys(r).sort()).toEqual(['contact_id', 'error', 'id', 'message_id', 'phone_number', 'status']);
        expect(r).toMatchObject({ status: 'failed', contact_id: contactByPhone.get(r.phone_number), error: expect.stringMatching(/\S/) });
      }
      expect((await drill('131026', '?limit=1')).json().recipients).toHaveLength(1);
      expect((await drill('131026', '?limit=53')).json().recipients).toHaveLength(53);
      const opted = (await drill('131050')).json().recipients;
      expect(opted.map((r: { phone_number: string }) => r.phone_number).sort()).toEqual([...optedOut].sort());
      for (const r of opted) expect(r.message_id).toEqual(expect.any(String)); // accepted, then failed by callback
      expect((await drill('100')).json()).toEqual({ error_code: '100', recipients: [] });
      for (const q of ['?limit=0', '?limit=201', '?limit=-1', '?limit=abc', '?limit=2.5']) expectInvalid(await drill('131026', q), ['query', 'limit'], q);
      expectInvalid(await drill('abc'), ['path', 'error_code']);
    });

    it('recipients are paginated and filtered by status, and export as CSV', async () => {
      const page = (query: string, headers: Record<string, string> = {}) => call(t.app, tenant, 'GET', `/campaigns/${campaignId}/recipients${query}`, undefined, headers);
      const seen = new Set<string>();
      for (let p = 1; p <= 3; p++) {
        const res = (await page(`?limit=20&page=${p}`)).json();
        expect(res.pagination).toEqual({ page: p, limit: 20, total_items: 58, total_pages: 3, has_next: p < 3, has_prev: p > 1 });
        expect(res.data).toHaveLength(p < 3 ? 20 : 18);
        for (const r of res.data) seen.add(r.id);
      }
      expect(seen.size).toBe(58);
      const first = (await page('?limit=1')).json().data[0];
      expect(Object.keys(first).sort()).toEqual(['attempts', 'button_payload', 'click_count', 'clicked_at', 'contact_id', 'error', 'error_code', 'id', 'message_id', 'next_attempt_at', 'phone_number', 'price', 'pricing', 'replied_at', 'skip_reason', 'status', 'time_zone', 'updated_at']);
      expect((await page('')).json().pagination).toMatchObject({ page: 1, limit: 20 });
      const failed = (await page('?status=failed&limit=100')).json();
      expect(failed.pagination.total_items).toBe(55);
      // The same type as the errors summary and drill-down show (spec 4.1: strings).
      expect(failed.data.every((r: { status: string; error_code: string }) => r.status === 'failed' && ['131026', '131050'].includes(r.error_code))).toBe(true);
      expect((await page('?status=read')).json().data.every((r: { error_code: unknown }) => r.error_code === null)).toBe(true);
      // One recipient's code, as is, names its group in the summary and its drill-down.
      const code = failed.data[0].error_code;
      const summary = (await call(t.app, tenant, 'GET', `/campaigns/${campaignId}/errors`)).json();
      expect(summary.by_code.map((r: { code: unknown }) => r.code)).toContain(code);
      const drill = (await call(t.app, tenant, 'GET', `/campaigns/${campaignId}/errors/${code}?limit=200`)).json();
      expect(drill.error_code).toBe(code);
      expect(drill.recipients.map((r: { id: string }) => r.id)).toContain(failed.data[0].id);
      const read = (await page('?status=read')).json();
      expect(read.data.map((r: { phone_number: string }) => r.phone_number).sort()).toEqual([...delivered].sort());
      expect((await page('?status=pending')).json().pagination.total_items).toBe(0);
      expectInvalid(await page('?status=lost'), ['query', 'status']);
      expectInvalid(await page('?limit=101'), ['query', 'limit']);

      const csv = await page('', { accept: 'text/csv' });
      expect(csv.statusCode).toBe(200);
      expect(csv.headers['content-type']).toMatch(/^text\/csv/);
      expect(csv.headers['content-disposition']).toContain('attachment');
      const lines = csv.body.trimEnd().split('\n');
      expect(lines[0]).toBe('id,phone_number,contact_id,status,message_id,error_code,error,attempts,updated_at,skip_reason,pricing_category,pricing_type,price,currency,replied_at,button_payload,clicked_at,click_count,next_attempt_at,time_zone');
      expect(lines).toHaveLength(59);
      const all = (await page('?limit=100')).json().data;
      const byId = new Map(all.map((r: { id: string }) => [r.id, r]));
      for (const line of lines.slice(1)) {
        const [id, phone, contactId, status] = line.split(',');
        expect(byId.get(id), line).toMatchObject({ phone_number: phone, contact_id: contactId, status });
      }
      const failedCsv = await page('?status=failed', { accept: 'text/csv' });
      expect(failedCsv.body.trimEnd().split('\n')).toHaveLength(56);
    });

    it('a retargeted draft previews, covers and renders its fixed recipients (it has no groups or sources)', async () => {
      const retarget = await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, { error_codes: ['131050'] });
      expect(retarget.statusCode, retarget.body).toBe(201);
      const id = retarget.json().id;
      expect((await get(tenant, id)).audiences).toEqual([]);
      const ids = optedOut.map((phone) => contactByPhone.get(phone)!);
      const names = new Map((await t.deps.db.selectFrom('contacts').select(['id', 'first_name']).where('id', 'in', ids).execute()).map((c) => [c.id, c.first_name]));
      expect((await call(t.app, tenant, 'PATCH', `/contacts/${ids[0]}`, { company: 'Acme' })).statusCode).toBe(200);

      const preview = (await call(t.app, tenant, 'GET', `/campaigns/${id}/audience/preview`)).json();
      expect(preview.total).toBe(2);
      expect(preview.sample.map((c: { id: string }) => c.id).sort()).toEqual([...ids].sort());
      for (const c of preview.sample) expect(c).toEqual({ id: c.id, first_name: names.get(c.id), phone: optedOut[ids.indexOf(c.id)] });

      const coverage = await call(t.app, tenant, 'POST', `/campaigns/${id}/audience/field-coverage`, { fields: ['first_name', 'company', 'custom_fields.order'] });
      expect(coverage.json()).toEqual({
        total_recipients: 2, excluded: { opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 },
        coverage: { first_name: { present: 2, missing: 0 }, company: { present: 1, missing: 1 }, 'custom_fields.order': { present: 0, missing: 2 } },
      });

      const rendered = (await call(t.app, tenant, 'POST', `/campaigns/${id}/preview`, {})).json();
      expect(ids).toContain(rendered.sample_contact_id);
      expect(rendered.resolved_components).toEqual([{ type: 'body', text: `Hello ${names.get(rendered.sample_contact_id)}, your order A-1 has shipped.` }]);
    });

    it('retarget: a new DRAFT whose recipients are exactly the failed ones, or those of the chosen codes', async () => {
      const all = await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, {});
      expect(all.statusCode, all.body).toBe(201);
      const source = await get(tenant, campaignId);
      expect(all.json()).toMatchObject({
        status: 'DRAFT', template_id: template.id, template_name: template.template_name, variable_mapping: source.variable_mapping,
        total_recipients: 55, stats: { total: 55, pending: 55, sent: 0, failed: 0 },
      });
      expect(all.json().id).not.toBe(campaignId);
      expect((await recipientsOf(all.json().id)).map((r) => r.phone).sort()).toEqual([...rejected, ...optedOut].sort());
      expect((await recipientsOf(all.json().id)).every((r) => r.status === 'pending' && r.contact_id === contactByPhone.get(r.phone))).toBe(true);

      const chosen = await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, { error_codes: ['131050'], name: 'Opted out' });
      expect(chosen.statusCode).toBe(201);
      expect(chosen.json()).toMatchObject({ name: 'Opted out', total_recipients: 2 });
      expect((await recipientsOf(chosen.json().id)).map((r) => r.phone).sort()).toEqual([...optedOut].sort());
      const campaignsBefore = (await call(t.app, tenant, 'GET', '/campaigns')).json().data.length;
      const none = expectError(await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, { error_codes: ['100', 131049] }),
        400, 'VALIDATION_ERROR', 'No failed recipient of the campaign has these error codes');
      expect(none.details).toEqual([{ type: 'value_error', loc: ['body', 'error_codes'], msg: 'No failed recipient of the campaign has these error codes', input: ['100', 131049] }]);
      expect((await call(t.app, tenant, 'GET', '/campaigns')).json().data).toHaveLength(campaignsBefore);
      // Codes as GET /errors shows them (strings) or as numbers (Meta's type) name the same recipients.
      for (const codes of [[131050], ['131050'], [131050, '131050']]) {
        const res = await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, { error_codes: codes });
        expect(res.statusCode, `${JSON.stringify(codes)} ${res.body}`).toBe(201);
        expect((await recipientsOf(res.json().id)).map((r) => r.phone).sort()).toEqual([...optedOut].sort());
      }
      const both = await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, { error_codes: [131026, '131050'] });
      expect(both.json().total_recipients).toBe(55);
      // The body is optional as a whole.
      const bare = await t.app.inject({ method: 'POST', url: `/api/v1/public/campaigns/${campaignId}/retarget`, headers: tenant.headers });
      expect(bare.statusCode, bare.body).toBe(201);
      expect(bare.json().total_recipients).toBe(55);
      // A contact archived since is never retargeted.
      expect((await call(t.app, tenant, 'DELETE', `/contacts/${contactByPhone.get(rejected[0])}`)).statusCode).toBe(200);
      const afterArchive = await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, {});
      expect(afterArchive.json().total_recipients).toBe(54);
      expect((await recipientsOf(afterArchive.json().id)).map((r) => r.phone).sort()).toEqual([...rejected.slice(1), ...optedOut].sort());

      for (const [body, loc] of [
        [{ error_codes: ['abc'] }, ['body', 'error_codes', 0]], [{ error_codes: ['131026', 1.5] }, ['body', 'error_codes', 1]], [{ error_codes: [true] }, ['body', 'error_codes', 0]],
        [{ error_codes: ['13 1026'] }, ['body', 'error_codes', 0]], [{ error_codes: [] }, ['body', 'error_codes']], [{ name: '' }, ['body', 'name']],
      ] as const) {
        expectInvalid(await call(t.app, tenant, 'POST', `/campaigns/${campaignId}/retarget`, body), [...loc]);
      }
      // Only a finished campaign can be retargeted; the retarget's own audience is fixed.
      const error = expectError(await call(t.app, tenant, 'POST', `/campaigns/${chosen.json().id}/retarget`, {}), 400, 'VALIDATION_ERROR');
      expect(error.message).toContain('DRAFT');
      expectError(await call(t.app, tenant, 'PUT', `/campaigns/${chosen.json().id}/audience`, { groups: ['x'] }), 400, 'VALIDATION_ERROR');
      // Sent, it keeps exactly its recipients.
      const sent = await act(tenant, chosen.json().id, 'send');
      expect(sent.statusCode, sent.body).toBe(200);
      expect(sent.json()).toMatchObject({ status: 'RUNNING', total_recipients: 2, stats: { pending: 2 } });
      expect(await recipientsOf(chosen.json().id)).toHaveLength(2);
      expect((await act(tenant, chosen.json().id, 'stop')).statusCode).toBe(200);
    });
  });
});
