import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MediaService } from '../src/modules/media/media.service.ts';
import { LocalDiskStorage } from '../src/modules/media/media.storage.ts';
import type { SendTemplateRequest, SendTemplateResult, UpstreamClient, UpstreamError, UpstreamOutcome } from '../src/upstream/types.ts';
import { CampaignDispatcher, startDueCampaigns } from '../src/workers/campaign-dispatcher.ts';
import { call } from './helpers/app.ts';
import { CAMPAIGN_ENV, createContacts, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { uploadMedia } from './helpers/campaigns-api.ts';
import { BODY_TWO_VARS, createApprovedTemplate, createConnectedTenant, eventsOf, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

type Answer = UpstreamOutcome<SendTemplateResult>;
const upstreamError = (code: number, title: string, errorClass: UpstreamError['errorClass']): UpstreamError =>
  ({ httpStatus: 400, code, subcode: null, title, details: null, fbtraceId: null, errorClass });
const retryable = (error: UpstreamError | null): Answer => ({ kind: 'retryable', error, retryAfterMs: 0, reason: 'reason given by the client' });
const rejected = (code: number, title: string): Answer => ({ kind: 'rejected', error: upstreamError(code, title, 'fatal') });

const RECONCILE_MS = 45_000;

/**
 * One dispatcher turn against a scripted upstream (answers by recipient phone; everything else is
 * accepted), on the real database: what each kind of answer does to its recipient, campaign and template.
 */
describe('campaign dispatcher: each upstream answer, recorded', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  async function runningCampaign(count: number, options: { batchSize?: number; imageHeader?: boolean } = {}) {
    const tenant = await createConnectedTenant(t.app);
    const body = { type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] };
    let components: unknown[] = [body];
    let template;
    if (options.imageHeader) {
      template = await createApprovedTemplate(t.app, tenant, { components: [{ type: 'HEADER', format: 'IMAGE' }, ...BODY_TWO_VARS] });
      components = [{ type: 'header', parameters: [{ kind: 'media', media_id: await uploadMedia(t, tenant, 'image') }] }, body];
    } else {
      template = await createApprovedTemplate(t.app, tenant);
    }
    const tag = uniqueTag();
    const contacts = await createContacts(t, tenant, someContacts(count, { tags: [tag] }));
    const created = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Scripted', template_id: template.id, audience: { groups: [tag] }, batch_size: options.batchSize ?? count, variable_mapping: { components },
    });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
    const account = await t.deps.db.selectFrom('business_accounts').select('phone_number_id').where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
    return { tenant, template, contacts, id, phoneNumberId: account.phone_number_id! };
  }

  /**
   * One turn of a dispatcher whose upstream answers `answers[phone]` (accepted otherwise); waits for
   * its batches and returns the sends the upstream saw.
   */
  async function dispatchOnce(tenantId: string, answers: Map<string, Answer>, secretsKey = t.deps.config.secretsKey) {
    const sent: SendTemplateRequest[] = [];
    const upstream = {
      sendTemplate: async (_account: unknown, request: SendTemplateRequest) => {
        sent.push(request);
        return answers.get(request.to) ?? { kind: 'accepted', value: { messageId: `wamid.${request.callbackData}`, waId: null, messageStatus: null } };
      },
    } as unknown as UpstreamClient;
    const c = t.deps.config;
    const dispatcher = new CampaignDispatcher(t.deps.db, upstream, t.deps.media, t.deps.pacer, {
      secretsKey, leaseMs: c.campaignLeaseMs, reconcileMs: RECONCILE_MS, maxBatches: 4, maxAttempts: 1, onlyTenants: [tenantId],
    }, pino({ level: 'silent' }));
    await dispatcher.dispatchOnce();
    await dispatcher.drain();
    return sent;
  }
  const recipientOf = (campaignId: string, phone: string) =>
    t.deps.db.selectFrom('campaign_recipients').selectAll().where('campaign_id', '=', campaignId).where('phone', '=', phone).executeTakeFirstOrThrow();
  const near = (at: Date | null, expectedMs: number, slackMs: number) => {
    expect(at).not.toBeNull();
    expect(Math.abs(at!.getTime() - expectedMs)).toBeLessThan(slackMs);
  };

  it('accepted is sent; no answer or a lost connection waits for callbacks; a retryable error fails after maxAttempts, throttles never do', async () => {
    expect(RECONCILE_MS).not.toBe(t.deps.config.campaignLeaseMs);
    const { tenant, contacts, id, phoneNumberId } = await runningCampaign(6);
    const [accepted, timedOut, lost, exhausted, pairLimited, rateLimited] = contacts.map((c) => c.phone);
    const started = Date.now();
    await dispatchOnce(tenant.id, new Map<string, Answer>([
      [timedOut, { kind: 'timeout' }],
      [lost, { kind: 'retryable', error: null, retryAfterMs: 1000, reason: 'network: UND_ERR_SOCKET' }],
      [exhausted, retryable(upstreamError(131000, 'Title from the answer', 'retryable'))],
      [pairLimited, retryable(upstreamError(131056, 'Pair rate limit hit', 'retryable'))],
      [rateLimited, retryable(upstreamError(130429, 'Rate limit hit', 'retryable'))],
    ]));
    const finished = Date.now();
    const slack = finished - started + 1_000;

    expect(await recipientOf(id, accepted)).toMatchObject({ status: 'sent', attempts: 1, lease_until: null });
    // Outcome unknown: still sending, its lease now the reconciliation window (not the claim's lease).
    for (const phone of [timedOut, lost]) {
      const row = await recipientOf(id, phone);
      expect(row.status, phone).toBe('sending');
      near(row.lease_until, started + RECONCILE_MS, slack);
    }
    // maxAttempts 1: the first retryable error is the last; its title is the answer's.
    expect(await recipientOf(id, exhausted)).toMatchObject({ status: 'failed', error_code: 131000, error_title: 'Title from the answer' });
    // Throttles go back to pending at their retry delay (131056: 6 s, 130429: 1 s), whatever maxAttempts says.
    const pair = await recipientOf(id, pairLimited);
    expect(pair).toMatchObject({ status: 'pending', error_code: null });
    near(pair.not_before, started + 6_000, slack);
    const rate = await recipientOf(id, rateLimited);
    expect(rate).toMatchObject({ status: 'pending', error_code: null });
    near(rate.not_before, started + 1_000, slack);
    // 130429 slows the number down: its next slots come at a longer interval than 80/s.
    const next = await t.deps.pacer.reserve(phoneNumberId, 1, 80);
    expect(next.intervalMs).toBeGreaterThan(1000 / 80);
  });

  it('a pair rate limit alone does not slow the number down', async () => {
    const { tenant, contacts, id, phoneNumberId } = await runningCampaign(1);
    await dispatchOnce(tenant.id, new Map([[contacts[0].phone, retryable(upstreamError(131056, 'Pair rate limit hit', 'retryable'))]]));
    expect(await recipientOf(id, contacts[0].phone)).toMatchObject({ status: 'pending' });
    expect((await t.deps.pacer.reserve(phoneNumberId, 1, 80)).intervalMs).toBe(1000 / 80);
  });

  it('a stopping answer acts on the campaign: 132015 pauses it (template paused, recipient pending), 131048 pauses it (number restricted, recipient pending an hour, account active), 132016 fails it (template disabled), 190 fails it (account token_invalid, recipient pending)', async () => {
    for (const [code, title, expected] of [
      [131048, 'Spam rate limit hit', { campaign: 'PAUSED', paused_reason: 'number_restricted', failure_reason: null, template: 'approved', account: 'active', recipient: 'pending' }],
      [132015, 'Template is paused', { campaign: 'PAUSED', paused_reason: 'template_paused', failure_reason: null, template: 'paused', account: 'active', recipient: 'pending' }],
      [132016, 'Template is disabled', { campaign: 'FAILED', paused_reason: null, failure_reason: 'Upstream error 132016: Template is disabled', template: 'disabled', account: 'active', recipient: 'failed' }],
      [190, 'Access token has expired', { campaign: 'FAILED', paused_reason: null, failure_reason: 'Upstream error 190: Access token has expired', template: 'approved', account: 'token_invalid', recipient: 'pending' }],
    ] as const) {
      const { tenant, template, contacts, id } = await runningCampaign(1);
      await dispatchOnce(tenant.id, new Map([[contacts[0].phone, rejected(code, title)]]));
      const campaign = await t.deps.db.selectFrom('campaigns').select(['status', 'failure_reason', 'paused_reason']).where('id', '=', id).executeTakeFirstOrThrow();
      expect(campaign, String(code)).toEqual({ status: expected.campaign, failure_reason: expected.failure_reason, paused_reason: expected.paused_reason });
      const row = await t.deps.db.selectFrom('templates').select('status').where('id', '=', template.id).executeTakeFirstOrThrow();
      expect(row.status, String(code)).toBe(expected.template);
      const account = await t.deps.db.selectFrom('business_accounts').select('status').where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
      expect(account.status, String(code)).toBe(expected.account);
      const recipient = await recipientOf(id, contacts[0].phone);
      expect(recipient.status, String(code)).toBe(expected.recipient);
      // Reference §4: retried hours later, not at once.
      if (code === 131048) expect(recipient.not_before?.getTime()).toBeGreaterThan(Date.now() + 59 * 60_000);
      if (expected.campaign === 'PAUSED') {
        const [paused] = await eventsOf(t.deps, tenant.id, 'campaign.paused');
        expect(paused, String(code)).toBeDefined();
      }
    }
  });

  it('a token that cannot be decrypted fails the campaign: nothing is sent, every claimed batch is pending again', async () => {
    const { tenant, id } = await runningCampaign(6, { batchSize: 2 });
    const sent = await dispatchOnce(tenant.id, new Map(), randomBytes(32));
    expect(sent).toEqual([]);
    const campaign = await t.deps.db.selectFrom('campaigns').select(['status', 'failure_reason']).where('id', '=', id).executeTakeFirstOrThrow();
    expect(campaign.status).toBe('FAILED');
    expect(campaign.failure_reason).toMatch(/access token cannot be decrypted/);
    const recipients = await t.deps.db.selectFrom('campaign_recipients').select(['status', 'attempts', 'lease_until']).where('campaign_id', '=', id).execute();
    expect(recipients).toEqual(Array(6).fill({ status: 'pending', attempts: 0, lease_until: null }));
    expect(await eventsOf(t.deps, tenant.id, 'campaign.failed')).toHaveLength(1);
  });

  it('a media header is uploaded once per claim: every batch of it sends the same upstream media id', async () => {
    const { tenant, id } = await runningCampaign(6, { batchSize: 2, imageHeader: true });
    const sent = await dispatchOnce(tenant.id, new Map());
    expect(sent).toHaveLength(6);
    const media = await t.deps.db.selectFrom('media').select('upstream_media_id').where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
    expect(media.upstream_media_id).toBeTruthy();
    const headers = sent.map((s) => JSON.stringify(s.components.find((c) => c.type === 'header')));
    expect(new Set(headers).size).toBe(1);
    expect(headers[0]).toContain(media.upstream_media_id);
    const recipients = await t.deps.db.selectFrom('campaign_recipients').select('status').where('campaign_id', '=', id).execute();
    expect(recipients.map((r) => r.status)).toEqual(Array(6).fill('sent'));
  });

  it('a mapped media asset deleted while the campaign runs fails the campaign: nothing is sent, its recipients stay pending', async () => {
    const { tenant, id } = await runningCampaign(3, { imageHeader: true });
    const media = await t.deps.db.selectFrom('media').select('id').where('tenant_id', '=', tenant.id).executeTakeFirstOrThrow();
    expect((await call(t.app, tenant, 'DELETE', `/media/${media.id}`)).statusCode).toBe(200);
    const sent = await dispatchOnce(tenant.id, new Map());
    expect(sent).toEqual([]);
    const campaign = await t.deps.db.selectFrom('campaigns').select(['status', 'failure_reason']).where('id', '=', id).executeTakeFirstOrThrow();
    expect(campaign.status).toBe('FAILED');
    expect(campaign.failure_reason).toBe(`A mapped media asset cannot be sent: Media ${media.id} not found`);
    const recipients = await t.deps.db.selectFrom('campaign_recipients').select(['status', 'attempts', 'lease_until']).where('campaign_id', '=', id).execute();
    expect(recipients).toEqual(Array(3).fill({ status: 'pending', attempts: 0, lease_until: null }));
    expect(await eventsOf(t.deps, tenant.id, 'campaign.failed')).toHaveLength(1);
  });

  it('a media upload that fails is retried after a wait, and fails the campaign once maxAttempts claims met it', async () => {
    const { tenant, id } = await runningCampaign(2, { imageHeader: true });
    const upstream = {
      uploadMedia: async () => ({ kind: 'retryable', error: null, retryAfterMs: 1000, reason: 'http 503' }),
      sendTemplate: async () => { throw new Error('nothing is sent without the media'); },
    } as unknown as UpstreamClient;
    const c = t.deps.config;
    const media = new MediaService(t.deps.db, new LocalDiskStorage(join(c.dataDir, 'media')), upstream, c.mediaUpstreamTtlMs);
    const dispatcher = new CampaignDispatcher(t.deps.db, upstream, media, t.deps.pacer, {
      secretsKey: c.secretsKey, leaseMs: c.campaignLeaseMs, reconcileMs: RECONCILE_MS, maxBatches: 4, maxAttempts: 2, onlyTenants: [tenant.id],
    }, pino({ level: 'silent' }));
    const turn = async () => { await dispatcher.dispatchOnce(); await dispatcher.drain(); };
    const recipients = () => t.deps.db.selectFrom('campaign_recipients').select(['status', 'attempts', 'not_before']).where('campaign_id', '=', id).execute();
    const status = async () => (await t.deps.db.selectFrom('campaigns').select(['status', 'failure_reason']).where('id', '=', id).executeTakeFirstOrThrow());

    const started = Date.now();
    await turn();
    expect((await status()).status).toBe('RUNNING');
    for (const r of await recipients()) {
      expect(r).toMatchObject({ status: 'pending', attempts: 1 });
      near(r.not_before, started + 10_000, Date.now() - started + 1_000);
    }
    // Due again: the second claim is the last attempt.
    await t.deps.db.updateTable('campaign_recipients').set({ not_before: null }).where('campaign_id', '=', id).execute();
    await turn();
    const failed = await status();
    expect(failed.status).toBe('FAILED');
    expect(failed.failure_reason).toMatch(/^A mapped media asset cannot be sent: The messaging platform is temporarily unavailable while uploading media/);
    expect((await recipients()).map((r) => [r.status, r.attempts])).toEqual([['pending', 1], ['pending', 1]]);
  });

  it('the scheduler starts a due campaign once and says how many it started', async () => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(2, { tags: [tag] }));
    const ids: string[] = [];
    for (let i = 0; i < 2; i++) {
      const created = await call(t.app, tenant, 'POST', '/campaigns', {
        name: `Due ${i}`, template_id: template.id, audience: { groups: [tag] },
        variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] }] },
      });
      const id = created.json().id as string;
      const scheduled = await call(t.app, tenant, 'POST', `/campaigns/${id}/schedule`, { scheduled_at: new Date(Date.now() + 60_000).toISOString() });
      expect(scheduled.statusCode, scheduled.body).toBe(200);
      ids.push(id);
    }
    await t.deps.db.updateTable('campaigns').set({ scheduled_at: new Date(Date.now() - 1_000) }).where('id', 'in', ids).execute();
    expect(await startDueCampaigns(t.deps.db, [tenant.id])).toBe(2);
    expect(await startDueCampaigns(t.deps.db, [tenant.id])).toBe(0);
    const rows = await t.deps.db.selectFrom('campaigns').select('status').where('id', 'in', ids).execute();
    expect(rows.map((r) => r.status)).toEqual(['RUNNING', 'RUNNING']);
  });
});
