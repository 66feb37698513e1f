import { randomBytes, randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import pino, { type Logger } from 'pino';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { campaignQueue } from '../src/modules/campaigns/campaigns.queue.ts';
import type { MediaService } from '../src/modules/media/media.service.ts';
import { SendPacer, type Reservation } from '../src/modules/messages/send-pacer.ts';
import type { SendTemplateRequest, SendTemplateResult, UpstreamAccount, UpstreamClient, UpstreamError, UpstreamOutcome } from '../src/upstream/types.ts';
import { CampaignDispatcher } from '../src/workers/campaign-dispatcher.ts';
import { call } from './helpers/app.ts';
import { CAMPAIGN_ENV, createContacts, someContacts, uniqueTag, type SeedContact } from './helpers/campaigns.ts';
import { createConnectedTenant, startUpstreamApp, uniqueTemplateName, type UpstreamTenant, type UpstreamTestApp } from './helpers/upstream.ts';

type Answer = UpstreamOutcome<SendTemplateResult>;
interface Sent { at: number; account: UpstreamAccount; request: SendTemplateRequest }
const upstreamError = (code: number, title: string, errorClass: UpstreamError['errorClass']): UpstreamError =>
  ({ httpStatus: 400, code, subcode: null, title, details: null, fbtraceId: null, errorClass });
const accepted = (request: SendTemplateRequest): Answer => ({ kind: 'accepted', value: { messageId: `wamid.${request.callbackData}`, waId: null, messageStatus: null } });
// A template that does not exist in the language: the recipient fails and its campaign fails.
const FATAL_132001: Answer = { kind: 'rejected', error: upstreamError(132001, 'Template name does not exist in the translation', 'fatal') };
const FATAL_REASON = 'Upstream error 132001: Template name does not exist in the translation';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
async function until(check: () => boolean | Promise<boolean>, timeoutMs = 5_000): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error('condition not met in time');
    await sleep(5);
  }
}
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => { open = resolve; });
  return { opened, open };
}

/**
 * The dispatch loop of CampaignDispatcher (campaign-dispatcher.ts up to `record`), turn by turn:
 * dispatchOnce driven directly on the real database, with a scripted upstream (answers by arrival,
 * each send's arrival time kept), an in-process pacer of the test's own (so slots are known), and
 * where it matters a media service or pacer that records what it is asked. Each test has its own
 * tenants; nothing waits longer than the rule it checks needs (the send window is a second).
 */
// A short timeout per test (they take a few seconds at most): a send that waits forever fails its test instead of idling to the global one.
describe('campaign dispatcher: the dispatch loop, turn by turn', { timeout: 30_000 }, () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  async function tenantAt(mps: number): Promise<UpstreamTenant> {
    const tenant = await createConnectedTenant(t.app);
    await t.deps.db.updateTable('business_accounts').set({ messages_per_second: mps }).where('tenant_id', '=', tenant.id).execute();
    return tenant;
  }

  /** An approved template row of the tenant's account (written directly: its status and account are what the tests vary). */
  async function template(tenant: UpstreamTenant, components: unknown[] = [{ type: 'BODY', text: 'Hello there.' }]): Promise<string> {
    const id = randomUUID();
    await sql`INSERT INTO templates (id, tenant_id, template_name, language, category, status, components, waba_id)
      VALUES (${id}::uuid, ${tenant.id}::uuid, ${uniqueTemplateName('loop')}, 'en', 'UTILITY', 'approved', ${JSON.stringify(components)}::jsonb, ${tenant.wabaId})`.execute(t.deps.db);
    return id;
  }

  /** A RUNNING campaign (through the API) of `contacts` on the template; its recipients in id order (the claim order). */
  async function campaign(tenant: UpstreamTenant, templateId: string, contacts: number | SeedContact[], options: { batchSize?: number; mapping?: unknown } = {}) {
    const tag = uniqueTag();
    const seeds = (typeof contacts === 'number' ? someContacts(contacts) : contacts).map((c) => ({ ...c, tags: [tag] }));
    await createContacts(t, tenant, seeds);
    const created = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Loop', template_id: templateId, audience: { groups: [tag] }, batch_size: options.batchSize ?? 1,
      ...(options.mapping ? { variable_mapping: options.mapping } : {}),
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    const sent = await call(t.app, tenant, 'POST', `/campaigns/${id}/send`);
    expect(sent.statusCode, sent.body).toBe(200);
    const recipients = await t.deps.db.selectFrom('campaign_recipients').select(['id', 'phone']).where('campaign_id', '=', id).orderBy('id').execute();
    return { id, recipients };
  }

  /** An upstream answering each send by its arrival index (accepted by default), keeping what it was sent and when. */
  function scripted(answer: (request: SendTemplateRequest, index: number) => Answer | Promise<Answer> = accepted) {
    const sent: Sent[] = [];
    const upstream = {
      sendTemplate: async (account: UpstreamAccount, request: SendTemplateRequest) => {
        const index = sent.length;
        sent.push({ at: Date.now(), account, request });
        return answer(request, index);
      },
    } as unknown as UpstreamClient;
    return { upstream, sent };
  }

  function dispatcher(tenantIds: string[], upstream: UpstreamClient, o: { maxBatches?: number; reconcileMs?: number; issueWithinMs?: number; pacer?: SendPacer; media?: MediaService; logger?: Logger; secretsKey?: Buffer } = {}) {
    return new CampaignDispatcher(t.deps.db, upstream, o.media ?? t.deps.media, o.pacer ?? new SendPacer(null, { horizonMs: 1000 }), {
      secretsKey: o.secretsKey ?? t.deps.config.secretsKey, leaseMs: 60_000, reconcileMs: o.reconcileMs ?? 45_000, maxBatches: o.maxBatches ?? 4, maxAttempts: 3, onlyTenants: tenantIds,
      ...(o.issueWithinMs !== undefined ? { issueWithinMs: o.issueWithinMs } : {}),
    }, o.logger);
  }

  /** A pacer that keeps every reservation it hands out, and runs `before` (once each, in order) before a reservation. */
  function recordingPacer(horizonMs: number, before: (() => Promise<void>)[] = []) {
    const real = new SendPacer(null, { horizonMs });
    const reservations: (Reservation & { phoneNumberId: string })[] = [];
    const pacer = {
      async reserve(phoneNumberId: string, want: number, rate: number, unit?: number) {
        await before.shift()?.();
        const r = await real.reserve(phoneNumberId, want, rate, unit);
        reservations.push({ ...r, phoneNumberId });
        return r;
      },
      penalise: (phoneNumberId: string) => real.penalise(phoneNumberId),
    } as unknown as SendPacer;
    return { pacer, reservations, real };
  }

  function capturedLogger() {
    const records: { level: number; msg: string; [key: string]: unknown }[] = [];
    const logger = pino({ level: 'info' }, { write: (line: string) => { records.push(JSON.parse(line)); } });
    return { logger, records };
  }

  const statusOf = async (campaignId: string) => t.deps.db.selectFrom('campaigns').select(['status', 'failure_reason']).where('id', '=', campaignId).executeTakeFirstOrThrow();
  const recipientRows = (campaignId: string) => t.deps.db.selectFrom('campaign_recipients').select(['id', 'phone', 'status', 'attempts', 'error_code']).where('campaign_id', '=', campaignId).orderBy('id').execute();
  const statusesOf = async (campaignId: string) => (await recipientRows(campaignId)).map((r) => r.status);
  const requeue = (ids: string[]) => t.deps.db.updateTable('campaign_recipients').set({ status: 'pending', lease_until: null }).where('id', 'in', ids).execute();

  it('a turn sends each claimed recipient once with the account, the template and its components from the contact (fallbacks without one), the recipient id as callback data, attempt 0; the loop drains on stop; the next turn completes the campaign', async () => {
    const tenant = await tenantAt(80);
    const templateId = await template(tenant, [{ type: 'BODY', text: 'Hi {{1}} from {{2}}, order {{3}}.' }]);
    const seeds: SeedContact[] = [
      { first_name: 'Ada', phone: someContacts(1)[0].phone, source: 'import', custom_fields: { order: 'A-1' } },
      { first_name: 'Bo', phone: someContacts(1)[0].phone, source: 'form', custom_fields: { order: 'B-2' } },
      { first_name: 'Cy', phone: someContacts(1)[0].phone, source: 'shop', custom_fields: { order: 'C-3' } },
    ];
    const mapping = { components: [{ type: 'body', parameters: [
      { kind: 'contact_field', field: 'first_name', fallback: 'there' },
      { kind: 'contact_field', field: 'source', fallback: 'nowhere' },
      { kind: 'contact_field', field: 'custom_fields.order', fallback: 'none' },
    ] }] };
    const { id, recipients } = await campaign(tenant, templateId, seeds, { batchSize: 3, mapping });
    // The third recipient has no contact (its contact's values are all null): the fallbacks fill in.
    const orphan = recipients.find((r) => r.phone === seeds[2].phone)!;
    await t.deps.db.updateTable('campaign_recipients').set({ contact_id: null }).where('id', '=', orphan.id).execute();
    // Answers come after a while: only a drain waits for them.
    const { upstream, sent } = scripted(async (request) => { await sleep(40); return accepted(request); });
    const loop = dispatcher([tenant.id], upstream).loop();
    expect(loop.name).toBe('campaign-dispatcher');
    expect(await loop.runOnce()).toBe(3);
    await loop.stop!();
    expect(await statusesOf(id)).toEqual(['sent', 'sent', 'sent']);

    expect(sent).toHaveLength(3);
    const byPhone = new Map(sent.map((s) => [s.request.to, s]));
    const templateName = (await t.deps.db.selectFrom('templates').select('template_name').where('id', '=', templateId).executeTakeFirstOrThrow()).template_name;
    const expected: Record<string, string[]> = { [seeds[0].phone]: ['Ada', 'import', 'A-1'], [seeds[1].phone]: ['Bo', 'form', 'B-2'], [seeds[2].phone]: ['there', 'nowhere', 'none'] };
    for (const r of recipients) {
      const s = byPhone.get(r.phone)!;
      expect(s.account).toEqual({ wabaId: tenant.wabaId, phoneNumberId: tenant.phoneNumberId, accessToken: 'sandbox-token' });
      expect(s.request).toEqual({
        to: r.phone, templateName, language: 'en', callbackData: r.id, attempt: 0,
        components: [{ type: 'body', parameters: expected[r.phone].map((text) => ({ type: 'text', text })) }],
      });
    }

    // Nothing pending or sending: the next turn completes it, and counts it.
    expect((await statusOf(id)).status).toBe('RUNNING');
    expect(await dispatcher([tenant.id], upstream).dispatchOnce()).toBe(1);
    expect((await statusOf(id)).status).toBe('COMPLETED');
    expect(sent).toHaveLength(3);
  });

  it('expired leases are reconciled at most every min(1 s, reconcileMs): the first turn, not one 799 ms later, again at 800 ms; each counts what it settled', async () => {
    const tenant = await tenantAt(80);
    const { id, recipients } = await campaign(tenant, await template(tenant), 1);
    // Paused: nothing is claimed, so a turn's count is what reconciliation settled.
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/pause`)).statusCode).toBe(200);
    const expire = () => t.deps.db.updateTable('campaign_recipients')
      .set({ status: 'sending', attempts: 1, attempted_at: sql<Date>`now() - interval '1 hour'`, lease_until: sql<Date>`now() - interval '1 second'` })
      .where('id', '=', recipients[0].id).execute();
    const d = dispatcher([tenant.id], scripted().upstream, { reconcileMs: 800 });
    const now = Date.now();
    const clock = vi.spyOn(Date, 'now').mockReturnValue(now);
    try {
      await expire();
      expect(await d.dispatchOnce()).toBe(1);
      expect(await statusesOf(id)).toEqual(['pending']);
      await expire();
      clock.mockReturnValue(now + 799);
      expect(await d.dispatchOnce()).toBe(0);
      expect(await statusesOf(id)).toEqual(['sending']);
      clock.mockReturnValue(now + 800);
      expect(await d.dispatchOnce()).toBe(1);
      expect(await statusesOf(id)).toEqual(['pending']);
    } finally {
      clock.mockRestore();
    }
  });

  it('a campaign that cannot go on fails with its reason before anything is claimed (disconnected account, template disabled, not approved, or under another account), one whose template is paused pauses; the others send', async () => {
    const tenant = await tenantAt(80);
    const other = await tenantAt(80);
    const names = ['paused', 'disabled', 'pending', 'otherWaba', 'good'] as const;
    const campaigns: Record<string, { id: string; templateId: string }> = {};
    for (const name of names) {
      const templateId = await template(tenant);
      campaigns[name] = { id: (await campaign(tenant, templateId, 1)).id, templateId };
    }
    const disconnected = (await campaign(other, await template(other), 1)).id;
    const setTemplate = (name: string, values: { status?: string; waba_id?: string }) =>
      t.deps.db.updateTable('templates').set(values).where('id', '=', campaigns[name].templateId).execute();
    await setTemplate('paused', { status: 'paused' });
    await setTemplate('disabled', { status: 'disabled' });
    await setTemplate('pending', { status: 'pending' });
    await setTemplate('otherWaba', { waba_id: `9${Date.now()}` });
    await t.deps.db.updateTable('business_accounts').set({ status: 'disconnected' }).where('tenant_id', '=', other.id).execute();

    // No logger: nothing on this path may need one.
    const { upstream, sent } = scripted();
    const d = dispatcher([tenant.id, other.id], upstream);
    expect(await d.dispatchOnce()).toBe(6);
    await d.drain();
    const notApproved = 'The template is no longer approved under the connected business account';
    const expected: [string, string][] = [
      [disconnected, 'The business account was disconnected'],
      [campaigns.disabled.id, 'The template was disabled by WhatsApp'],
      [campaigns.pending.id, notApproved],
      [campaigns.otherWaba.id, notApproved],
    ];
    for (const [id, reason] of expected) {
      expect(await statusOf(id)).toEqual({ status: 'FAILED', failure_reason: reason });
      expect(await recipientRows(id)).toEqual([expect.objectContaining({ status: 'pending', attempts: 0 })]);
    }
    // Paused by WhatsApp: the campaign waits for the template (resumed when it is approved again).
    expect(await statusOf(campaigns.paused.id)).toEqual({ status: 'PAUSED', failure_reason: null });
    expect(await recipientRows(campaigns.paused.id)).toEqual([expect.objectContaining({ status: 'pending', attempts: 0 })]);
    expect((await statusOf(campaigns.good.id)).status).toBe('RUNNING');
    expect(await statusesOf(campaigns.good.id)).toEqual(['sent']);
    expect(sent).toHaveLength(1);
  });

  it('due work only takes slots: a campaign whose recipients all wait reserves none; claimed away meanwhile, a turn counts 0 until the campaign is done, then completes it', async () => {
    const tenant = await tenantAt(10);
    const waiting = await campaign(tenant, await template(tenant), 1);
    await t.deps.db.updateTable('campaign_recipients').set({ not_before: sql<Date>`now() + interval '1 hour'` }).where('campaign_id', '=', waiting.id).execute();
    const idle = recordingPacer(1000);
    expect(await dispatcher([tenant.id], scripted().upstream, { pacer: idle.pacer }).dispatchOnce()).toBe(0);
    expect(idle.reservations).toEqual([]);
    // The number's slots are all still free.
    const next = await idle.real.reserve(tenant.phoneNumberId, 1, 10);
    expect(next.startAt).toBeLessThanOrEqual(Date.now());
    expect((await statusOf(waiting.id)).status).toBe('RUNNING');
    expect((await call(t.app, tenant, 'POST', `/campaigns/${waiting.id}/pause`)).statusCode).toBe(200);

    // While this worker waits for its slots, another claims the recipients (and, for the second campaign, sends them).
    const first = await campaign(tenant, await template(tenant), 2);
    const second = await campaign(tenant, await template(tenant), 1);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${second.id}/pause`)).statusCode).toBe(200);
    const otherWorker = recordingPacer(1000, [
      async () => { expect(await campaignQueue.claim(t.deps.db, first.id, 10, 60_000)).toHaveLength(2); },
      async () => {
        const [r] = await campaignQueue.claim(t.deps.db, second.id, 10, 60_000);
        await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { accepted: [{ id: r.id, wamid: 'wamid.other' }], failed: [], retry: [], unknown: [], unsent: [] }));
      },
    ]);
    const { upstream, sent } = scripted();
    const d = dispatcher([tenant.id], upstream, { pacer: otherWorker.pacer });
    expect(await d.dispatchOnce()).toBe(0);
    expect((await statusOf(first.id)).status).toBe('RUNNING');
    expect((await call(t.app, tenant, 'POST', `/campaigns/${second.id}/resume`)).statusCode).toBe(200);
    expect(await d.dispatchOnce()).toBe(1);
    expect((await statusOf(second.id)).status).toBe('COMPLETED');
    expect((await statusOf(first.id)).status).toBe('RUNNING');
    expect(sent).toEqual([]);
  });

  it('batches per turn are min(8, maxBatches − batches in flight): a second campaign gets what the first left', async () => {
    const tenant = await tenantAt(80);
    const first = await campaign(tenant, await template(tenant), 2, { batchSize: 2 });
    const second = await campaign(tenant, await template(tenant), 10, { batchSize: 2 });
    await campaignQueue.touch(t.deps.db, [second.id]);
    const answers = gate();
    const { upstream } = scripted(async (request) => { await answers.opened; return accepted(request); });
    const d = dispatcher([tenant.id], upstream, { maxBatches: 3 });
    try {
      // The first takes its one batch of 2; the second 2 batches of 2 (3 − 1 in flight), not more.
      expect(await d.dispatchOnce()).toBe(6);
      expect(await statusesOf(first.id)).toEqual(['sending', 'sending']);
      const rows = await statusesOf(second.id);
      expect(rows.filter((s) => s === 'sending')).toHaveLength(4);
    } finally {
      answers.open();
      await d.drain();
    }
    // Never more than 8 batches in one turn, however many a worker may have in flight.
    const roomy = await tenantAt(80);
    const many = await campaign(roomy, await template(roomy), 12, { batchSize: 1 });
    const d2 = dispatcher([roomy.id], scripted().upstream, { maxBatches: 20 });
    expect(await d2.dispatchOnce()).toBe(8);
    await d2.drain();
    expect((await statusesOf(many.id)).filter((s) => s === 'sent')).toHaveLength(8);
  });

  it('with maxBatches in flight a turn waits for one to finish before the next campaign', async () => {
    const tenant = await tenantAt(80);
    const first = await campaign(tenant, await template(tenant), 1);
    const second = await campaign(tenant, await template(tenant), 1);
    await campaignQueue.touch(t.deps.db, [second.id]);
    const answers = gate();
    const { upstream, sent } = scripted(async (request) => { await answers.opened; return accepted(request); });
    const d = dispatcher([tenant.id], upstream, { maxBatches: 1 });
    let returned = false;
    const turn = d.dispatchOnce().then((n) => { returned = true; return n; });
    try {
      await until(() => sent.length === 1);
      await sleep(150);
      expect(returned).toBe(false);
      expect(await statusesOf(second.id)).toEqual(['pending']);
      expect(sent.map((s) => s.request.to)).toEqual([first.recipients[0].phone]);
    } finally {
      answers.open();
    }
    expect(await turn).toBe(2);
    await d.drain();
    expect(await statusesOf(second.id)).toEqual(['sent']);
  });

  it('claims go on after this process\'s last claim of each campaign, and wrap to the start once nothing is left after it', async () => {
    const tenant = await tenantAt(80);
    const a = await campaign(tenant, await template(tenant), 4, { batchSize: 2 });
    const b = await campaign(tenant, await template(tenant), 4, { batchSize: 2 });
    const { upstream, sent } = scripted();
    // One batch in flight at a time: each campaign gets one batch of 2 per turn.
    const d = dispatcher([tenant.id], upstream, { maxBatches: 1 });
    const turn = async () => {
      const from = sent.length;
      expect(await d.dispatchOnce()).toBe(4);
      await d.drain();
      return sent.slice(from).map((s) => s.request.to).sort();
    };
    const phones = (...rs: { phone: string }[]) => rs.map((r) => r.phone).sort();
    const [a1, a2, a3, a4] = a.recipients;
    const [b1, b2, b3, b4] = b.recipients;
    expect(await turn()).toEqual(phones(a1, a2, b1, b2));
    // Back to pending behind the cursor: not claimed before the rest.
    await requeue([a2.id, b2.id]);
    expect(await turn()).toEqual(phones(a3, a4, b3, b4));
    // Nothing left after the cursor: from the start again.
    await requeue([a1.id, b1.id]);
    expect(await turn()).toEqual(phones(a1, a2, b1, b2));
  });

  it('each send waits for its slot: the k-th send of a reservation not before startAt + k × interval', async () => {
    const tenant = await tenantAt(10);
    const { id } = await campaign(tenant, await template(tenant), 4, { batchSize: 2 });
    const { pacer, reservations } = recordingPacer(1000);
    const { upstream, sent } = scripted();
    const d = dispatcher([tenant.id], upstream, { pacer });
    expect(await d.dispatchOnce()).toBe(4);
    await d.drain();
    expect(reservations).toHaveLength(1);
    const { startAt, intervalMs } = reservations[0];
    expect(intervalMs).toBe(100);
    const times = sent.map((s) => s.at).sort((x, y) => x - y);
    expect(times).toHaveLength(4);
    times.forEach((at, k) => expect(at, `send ${k}`).toBeGreaterThanOrEqual(startAt + k * intervalMs - 2));
    // And not held back further (10 places a second at 10/s).
    expect(times[3] - startAt).toBeLessThan(1000);
    expect(await statusesOf(id)).toEqual(['sent', 'sent', 'sent', 'sent']);
  });

  it('the number\'s send window: at mps 4 a fifth send waits while four are unanswered, across batches, until a second after their answers; with four waiting, a turn claims nothing more for the number', async () => {
    const tenant = await tenantAt(4);
    const { id } = await campaign(tenant, await template(tenant), 12, { batchSize: 4 });
    const { pacer, reservations } = recordingPacer(2000);
    const answers = gate();
    const { upstream, sent } = scripted(async (request) => { await answers.opened; return accepted(request); });
    const d = dispatcher([tenant.id], upstream, { pacer });
    let releasedAt = 0;
    try {
      // 2 s of slots at 4/s: two batches of 4.
      expect(await d.dispatchOnce()).toBe(8);
      expect(reservations.map((r) => [r.granted, r.intervalMs])).toEqual([[8, 250]]);
      const { startAt } = reservations[0];
      // Slots at +0, 250, 500, 750 (first batch), 1000... (second batch): by +1300 two of the second's have passed.
      await until(() => sent.length === 4);
      await sleep(Math.max(0, startAt + 1300 - Date.now()));
      expect(sent).toHaveLength(4);
      // By +1950 all four of the second batch wait for a place (a second's worth at 4/s): the next turn
      // claims none of the 4 still pending, though the pacer has slots for them.
      await sleep(Math.max(0, startAt + 1950 - Date.now()));
      expect(await d.dispatchOnce()).toBe(0);
      expect(reservations).toHaveLength(1);
      expect(sent).toHaveLength(4);
    } finally {
      releasedAt = Date.now();
      answers.open();
    }
    await until(() => sent.length === 8);
    for (const s of sent.slice(4)) expect(s.at).toBeGreaterThanOrEqual(releasedAt + 1000 - 2);
    await d.drain();
    expect((await statusesOf(id)).sort()).toEqual([...Array(4).fill('pending'), ...Array(8).fill('sent')]);
  });

  it('a number\'s window is its own and outlives the turn: another number\'s first sends do not reset it', async () => {
    const a = await tenantAt(4);
    const b = await tenantAt(80);
    const ca = await campaign(a, await template(a), 8, { batchSize: 4 });
    const cb = await campaign(b, await template(b), 1);
    await t.deps.db.updateTable('campaigns').set({ status: 'PAUSED' }).where('id', '=', cb.id).execute();
    const aPhones = new Set(ca.recipients.map((r) => r.phone));
    // 1 s of slots at 4/s: one batch of 4 per turn.
    const { pacer, reservations } = recordingPacer(1000);
    const answers = gate();
    const { upstream, sent } = scripted(async (request) => { if (aPhones.has(request.to)) await answers.opened; return accepted(request); });
    const sentToA = () => sent.filter((s) => aPhones.has(s.request.to));
    const d = dispatcher([a.id, b.id], upstream, { pacer });
    let releasedAt = 0;
    try {
      expect(await d.dispatchOnce()).toBe(4);
      await until(() => sentToA().length === 4);
      // The other number's first batch (its window is new).
      await t.deps.db.updateTable('campaigns').set({ status: 'RUNNING' }).where('id', '=', cb.id).execute();
      expect(await d.dispatchOnce()).toBe(1);
      await until(async () => (await statusesOf(cb.id))[0] === 'sent');
      // A's next slots (B completes in that turn): A's second batch still finds four places held.
      const firstA = reservations.find((r) => r.phoneNumberId === a.phoneNumberId && r.granted > 0)!;
      await sleep(Math.max(0, firstA.startAt + 1005 - Date.now()));
      expect(await d.dispatchOnce()).toBe(4 + 1);
      const secondA = reservations.filter((r) => r.phoneNumberId === a.phoneNumberId && r.granted > 0)[1];
      expect(secondA.granted).toBe(4);
      await sleep(Math.max(0, secondA.startAt + 300 - Date.now()));
      expect(sentToA()).toHaveLength(4);
    } finally {
      releasedAt = Date.now();
      answers.open();
    }
    await until(() => sentToA().length === 8);
    for (const s of sentToA().slice(4)) expect(s.at).toBeGreaterThanOrEqual(releasedAt + 1000 - 2);
    await d.drain();
    expect(await statusesOf(ca.id)).toEqual(Array(8).fill('sent'));
  });

  it('a send not issued within issueWithinMs of its claim goes back to pending unsent; one whose place frees up in time waits for it', async () => {
    /** At 4/s two batches of 4, answers held until `releaseAt` ms after the slots start. */
    async function run(issueWithinMs: number, releaseAt: number) {
      const tenant = await tenantAt(4);
      const { id } = await campaign(tenant, await template(tenant), 8, { batchSize: 4 });
      const { pacer, reservations } = recordingPacer(2000);
      const answers = gate();
      const { upstream, sent } = scripted(async (request) => { await answers.opened; return accepted(request); });
      const d = dispatcher([tenant.id], upstream, { pacer, issueWithinMs });
      try {
        expect(await d.dispatchOnce()).toBe(8);
        await sleep(Math.max(0, reservations[0].startAt + releaseAt - Date.now()));
      } finally {
        answers.open();
      }
      await d.drain();
      const rows = await recipientRows(id);
      const messages = await t.deps.db.selectFrom('messages').select('id').where('campaign_id', '=', id).execute();
      return { sent: sent.length, rows, messages: messages.length };
    }
    // Places free at release + 1 s: 2.2 s after the first slot is within 3 s of the claim, 2.7 s is not within 1.5 s.
    const [inTime, late] = await Promise.all([run(3000, 1200), run(1500, 1700)]);
    expect(inTime.sent).toBe(8);
    expect(inTime.rows.map((r) => r.status)).toEqual(Array(8).fill('sent'));
    expect(late.sent).toBe(4);
    expect(late.rows.filter((r) => r.status === 'sent')).toHaveLength(4);
    expect(late.rows.filter((r) => r.status === 'pending').map((r) => r.attempts)).toEqual([0, 0, 0, 0]);
    expect(late.messages).toBe(4);
  });

  it('a fatal answer halts its campaign\'s sends still waiting for their slot (claimed in the same millisecond too), per campaign: they go back to pending unsent; each campaign fails once, logged', async () => {
    const x = await tenantAt(10);
    const y = await tenantAt(10);
    const cx = await campaign(x, await template(x), 4);
    const cy = await campaign(y, await template(y), 4);
    const { logger, records } = capturedLogger();
    const { upstream, sent } = scripted(() => FATAL_132001);
    const d = dispatcher([x.id, y.id], upstream, { maxBatches: 8, logger });
    // A clock that stands still: batches are claimed in the millisecond the halt happens.
    const clock = vi.spyOn(Date, 'now').mockReturnValue(Date.now());
    try {
      expect(await d.dispatchOnce()).toBe(8);
      await d.drain();
    } finally {
      clock.mockRestore();
    }
    expect(sent).toHaveLength(2);
    for (const [tenant, c] of [[x, cx], [y, cy]] as const) {
      expect(await statusOf(c.id)).toEqual({ status: 'FAILED', failure_reason: FATAL_REASON });
      const rows = await recipientRows(c.id);
      expect(rows.filter((r) => r.status === 'failed')).toEqual([expect.objectContaining({ attempts: 1, error_code: 132001 })]);
      expect(rows.filter((r) => r.status === 'pending').map((r) => r.attempts)).toEqual([0, 0, 0]);
      const warned = records.filter((r) => r.msg === 'campaign failed' && r.campaign_id === c.id);
      expect(warned).toEqual([expect.objectContaining({ level: 40, tenant_id: tenant.id, reason: FATAL_REASON })]);
    }
    const messages = await t.deps.db.selectFrom('messages').select('id').where('campaign_id', 'in', [cx.id, cy.id]).execute();
    expect(messages).toHaveLength(2);
  });

  it('a rejection that is not fatal halts nothing; a fatal one later in the batch halts the rest of it', async () => {
    const tenant = await tenantAt(10);
    const { id } = await campaign(tenant, await template(tenant), 4, { batchSize: 4 });
    const { upstream, sent } = scripted((request, i) => (i === 0 ? { kind: 'rejected', error: upstreamError(131026, 'Message undeliverable', 'recipient') } : i === 1 ? FATAL_132001 : accepted(request)));
    const d = dispatcher([tenant.id], upstream);
    expect(await d.dispatchOnce()).toBe(4);
    await d.drain();
    expect(sent).toHaveLength(2);
    expect((await recipientRows(id)).map((r) => r.status).sort()).toEqual(['failed', 'failed', 'pending', 'pending']);
    expect((await statusOf(id)).status).toBe('FAILED');
  });

  it('a campaign paused when its fatal answer comes is not failed (nothing logged); its halted sends wait, and what is claimed after the resume is sent', async () => {
    const tenant = await tenantAt(10);
    const { id } = await campaign(tenant, await template(tenant), 3);
    const { logger, records } = capturedLogger();
    const { upstream, sent } = scripted(async (request, i) => {
      if (i > 0) return accepted(request);
      await t.deps.db.updateTable('campaigns').set({ status: 'PAUSED' }).where('id', '=', id).execute();
      return FATAL_132001;
    });
    const d = dispatcher([tenant.id], upstream, { logger });
    expect(await d.dispatchOnce()).toBe(3);
    await d.drain();
    expect(sent).toHaveLength(1);
    expect(await statusOf(id)).toEqual({ status: 'PAUSED', failure_reason: null });
    expect(records.filter((r) => r.msg === 'campaign failed')).toEqual([]);
    expect((await statusesOf(id)).sort()).toEqual(['failed', 'pending', 'pending']);
    await t.deps.db.updateTable('campaigns').set({ status: 'RUNNING' }).where('id', '=', id).execute();
    expect(await d.dispatchOnce()).toBe(2);
    await d.drain();
    expect(sent).toHaveLength(3);
    expect((await statusesOf(id)).sort()).toEqual(['failed', 'sent', 'sent']);
  });

  it('a batch that fails is logged with its campaign and does not stop the turn (with or without a logger)', async () => {
    for (const withLogger of [false, true]) {
      const tenant = await tenantAt(80);
      const failing = await campaign(tenant, await template(tenant), 1);
      const next = await campaign(tenant, await template(tenant), 1);
      await campaignQueue.touch(t.deps.db, [next.id]);
      const { logger, records } = capturedLogger();
      const { upstream, sent } = scripted((request) => {
        if (request.to === failing.recipients[0].phone) throw new Error('connection reset by the test');
        return accepted(request);
      });
      // One batch at a time: the next campaign's turn waits for the failing batch.
      const d = dispatcher([tenant.id], upstream, { maxBatches: 1, ...(withLogger ? { logger } : {}) });
      expect(await d.dispatchOnce()).toBe(2);
      await d.drain();
      expect(sent).toHaveLength(2);
      // Its recipient stays sending until its lease runs out (then reconciliation decides).
      expect(await statusesOf(failing.id)).toEqual(['sending']);
      expect(await statusesOf(next.id)).toEqual(['sent']);
      if (withLogger) {
        expect(records.filter((r) => r.level === 50)).toEqual([expect.objectContaining({
          campaign_id: failing.id, msg: 'campaign batch failed; its recipients are reconciled after their lease', err: expect.objectContaining({ message: 'connection reset by the test' }),
        })]);
      }
    }
  });

  it('a token that cannot be decrypted fails the campaign once, logged, and no batch is attempted', async () => {
    const tenant = await tenantAt(80);
    const { id } = await campaign(tenant, await template(tenant), 4, { batchSize: 2 });
    const { logger, records } = capturedLogger();
    const { upstream, sent } = scripted();
    const d = dispatcher([tenant.id], upstream, { logger, secretsKey: randomBytes(32) });
    expect(await d.dispatchOnce()).toBe(4);
    await d.drain();
    expect(sent).toEqual([]);
    expect(await statusesOf(id)).toEqual(Array(4).fill('pending'));
    expect(records.map((r) => [r.level, r.msg])).toEqual([[40, 'campaign failed']]);
    expect(records[0]).toMatchObject({ campaign_id: id, tenant_id: tenant.id, reason: expect.stringContaining('cannot be decrypted') });
  });

  it('media of a media header is resolved once per claim with the header\'s type (image, video, document); other parameters and headers without media resolve nothing; no mapping sends no components', async () => {
    const tenant = await tenantAt(80);
    const body = { type: 'BODY', text: 'Hello there.' };
    const [m1, m2, m3, m4] = [randomUUID(), randomUUID(), randomUUID(), randomUUID()];
    const header = (...parameters: unknown[]) => ({ components: [{ type: 'header', parameters }] });
    const media = (mediaId: string) => ({ kind: 'media', media_id: mediaId });
    const cases = {
      image: { components: [{ type: 'HEADER', format: 'IMAGE' }, body], mapping: header(media(m1)) },
      video: { components: [{ type: 'HEADER', format: 'VIDEO' }, body], mapping: header(media(m2), { kind: 'static', value: 'x' }, media(m2)) },
      document: { components: [{ type: 'HEADER', format: 'DOCUMENT' }, body], mapping: header(media(m3)) },
      noHeader: { components: [body], mapping: header(media(m4)) },
      plain: { components: [body], mapping: null },
    };
    const ids: Record<string, { id: string; phone: string }> = {};
    for (const [name, c] of Object.entries(cases)) {
      // Created on a plain template, then given the case's template and mapping as stored rows.
      const templateId = await template(tenant);
      const { id, recipients } = await campaign(tenant, templateId, 1);
      await t.deps.db.updateTable('templates').set({ components: JSON.stringify(c.components) }).where('id', '=', templateId).execute();
      await t.deps.db.updateTable('campaigns').set({ variable_mapping: c.mapping === null ? null : JSON.stringify(c.mapping) }).where('id', '=', id).execute();
      ids[name] = { id, phone: recipients[0].phone };
    }
    const asked: unknown[][] = [];
    const spy = {
      upstreamIdFor: async (tenantId: string, mediaId: string, account: UpstreamAccount, type: string) => {
        asked.push([tenantId, mediaId, account, type]);
        return { type, upstreamId: `up-${mediaId}`, filename: `${mediaId}.bin` };
      },
    } as unknown as MediaService;
    const { logger, records } = capturedLogger();
    const { upstream, sent } = scripted();
    const d = dispatcher([tenant.id], upstream, { media: spy, logger });
    expect(await d.dispatchOnce()).toBe(5);
    await d.drain();
    const account = { wabaId: tenant.wabaId, phoneNumberId: tenant.phoneNumberId, accessToken: 'sandbox-token' };
    expect(asked.sort((p, q) => String(p[3]).localeCompare(String(q[3])))).toEqual([
      [tenant.id, m3, account, 'document'], [tenant.id, m1, account, 'image'], [tenant.id, m2, account, 'video'],
    ]);
    const componentsTo = (phone: string) => sent.find((s) => s.request.to === phone)?.request.components;
    expect(componentsTo(ids.image.phone)).toEqual([{ type: 'header', parameters: [{ type: 'image', image: { id: `up-${m1}` } }] }]);
    expect(componentsTo(ids.video.phone)).toEqual([{ type: 'header', parameters: [
      { type: 'video', video: { id: `up-${m2}` } }, { type: 'text', text: 'x' }, { type: 'video', video: { id: `up-${m2}` } },
    ] }]);
    expect(componentsTo(ids.document.phone)).toEqual([{ type: 'header', parameters: [{ type: 'document', document: { id: `up-${m3}`, filename: `${m3}.bin` } }] }]);
    expect(componentsTo(ids.plain.phone)).toEqual([]);
    // A media parameter without a media header is never resolved: that batch cannot be built.
    expect(componentsTo(ids.noHeader.phone)).toBeUndefined();
    expect(records.filter((r) => r.level === 50).map((r) => r.campaign_id)).toEqual([ids.noHeader.id]);
    expect(sent).toHaveLength(4);
  });
});
