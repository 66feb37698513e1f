import type { Logger } from 'pino';
import type { Db } from '../db/database.ts';
import { decryptSecret } from '../crypto/secrets.ts';
import { AppError } from '../http/errors.ts';
import { resolveSendComponents, type MediaForSend, type VariableMapping } from '../modules/campaigns/campaigns.mapping.ts';
import { campaignQueue, FIRST_ID, type ClaimedRecipient, type ClaimSlots, type RunningCampaign } from '../modules/campaigns/campaigns.queue.ts';
import { countClaimed, countOutcomes, countSendIssued } from '../modules/campaigns/campaigns.metrics.ts';
import { campaignsRepository } from '../modules/campaigns/campaigns.repository.ts';
import { recordTransition } from '../modules/campaigns/campaigns.service.ts';
import { withClickToken } from '../modules/clicks/clicks.tracking.ts';
import type { MediaService } from '../modules/media/media.service.ts';
import type { MediaType } from '../modules/media/media.types.ts';
import { SendWindow, type SendPacer } from '../modules/messages/send-pacer.ts';
import { placeholderPlan } from '../modules/templates/templates.grammar.ts';
import { applyStop, applyTemplateStatus, pauseCampaign } from '../modules/campaigns/upstream-stops.ts';
import { exhausted, isStop, isThrottle, outcomeOfSend, type FailureOutcome, type SendOutcome } from '../upstream/outcomes.ts';
import type { UpstreamAccount, UpstreamClient } from '../upstream/types.ts';
import type { WorkerLoop } from './loop.ts';
import type { NumberLease, NumberOwnership } from './number-ownership.ts';

export interface CampaignDispatcherOptions {
  secretsKey: Buffer;
  /** A claimed recipient's lease: longer than the pacing horizon plus an upstream call. */
  leaseMs: number;
  /**
   * How long after its claim a send may still be issued (it may wait for a place in the number's
   * window while earlier sends are slow to answer); later, it goes back to pending unsent. Unset:
   * no limit.
   */
  issueWithinMs?: number;
  /** After an attempt whose outcome is unknown, how long to wait for a callback before sending again. */
  reconcileMs: number;
  /** Batches in flight per worker process. */
  maxBatches: number;
  /** Retryable upstream answers (other than the rate limits) before a recipient fails. */
  maxAttempts: number;
  /** A recipient Meta deferred (131049) is tried again this much later (CAMPAIGN_DEFER_MS; default a day)... */
  deferMs?: number;
  /** ...at most this many times, then fails (CAMPAIGN_DEFER_ATTEMPTS; default 3). */
  deferAttempts?: number;
  /** A held recipient with no word from the upstream this long after its send counts as sent (CAMPAIGN_HOLD_MS; default two days). */
  holdMs?: number;
  /** Only these tenants' campaigns (tests that share one database run their own dispatchers). */
  onlyTenants?: string[];
  /** The moving window of the portfolio's messaging limit (MESSAGING_LIMIT_WINDOW_MS; default 24 h). */
  messagingLimitWindowMs?: number;
  /** Which process sends for each number, where several may run; unset, this dispatcher sends for every number. */
  numbers?: NumberOwnership;
}

/** Batches one campaign may start in one turn (one reservation, one claim) before the next campaign's turn. */
const BATCHES_PER_TURN = 8;
/** After a mapped media asset failed to upload, how long its claimed recipients wait. */
const MEDIA_RETRY_MS = 10_000;
const DAY_MS = 86_400_000;
/** A tenant at its messaging limit: how long its campaigns wait before the next claim tries again. */
const LIMIT_RECHECK_MS = 500;
const MEDIA_TYPES: Record<string, MediaType> = { IMAGE: 'image', VIDEO: 'video', DOCUMENT: 'document' };
/** How often a taken-over number's inherited sends are counted again. */
const INHERITED_RECHECK_MS = 250;
/** How long before a batch's first slot its message rows are written. */
const ATTEMPT_LEAD_MS = 100;
/** Reference §4 (REQ): this many sends of a campaign refused with one code and none accepted pause it. */
export const REFUSED_RUN = 20;
const REQUESTS_REFUSED = 'requests_refused';
const sleepUntil = (at: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, at - Date.now())));

type Outcomes = Required<Parameters<typeof campaignQueue.recordOutcomes>[1]>;
/** Every number this process's own, where no ownership is configured (one dispatcher sends for all). */
const OWN_EVERY_NUMBER: NumberLease | null = null;
interface SendContext {
  account: UpstreamAccount;
  plan: ReturnType<typeof placeholderPlan>;
  mapping: VariableMapping | null;
  media: Map<string, MediaForSend>;
}

/**
 * The campaign dispatcher (ARCHITECTURE 5): claims batches of pending recipients of running
 * campaigns, paces them per phone number, sends each through the upstream client with its
 * recipient id as biz_opaque_callback_data, and records the outcomes. Any number of workers may
 * run it: every claim is a SKIP LOCKED row lock, every campaign move a conditional UPDATE.
 */
export class CampaignDispatcher {
  private inFlight = new Set<Promise<void>>();
  /** Per campaign, the last recipient id this process claimed. */
  private cursors = new Map<string, string>();
  private lastReconcile = 0;
  /** Per phone number, this process's sends until a second after their answers. */
  private windows = new Map<string, SendWindow>();
  /** Numbers taken over whose previous owner's sends may still be on their way (inheritSends). */
  private inherited = new Map<string, { tenantId: string; checkedAt: number }>();
  /**
   * Campaigns that met a fatal answer here, and when: sends of batches claimed before it and still
   * waiting for a slot are not sent. Later batches are (a campaign paused at that moment is not
   * failed, and may be resumed).
   */
  private halted = new Map<string, number>();
  /**
   * Per campaign, the run of sends refused as request_invalid with one code since its start here,
   * or null once any was accepted (its rows differ; the template and mapping work).
   */
  private refusedRuns = new Map<string, { code: number; count: number } | null>();
  /** Tenants whose last claim found the messaging limit reached, and until when they are not tried. */
  private limitReached = new Map<string, number>();
  /**
   * Recipients of this process's batches in flight. Their leases are renewed while they run, so a
   * batch whose answers or recording come late (a slow upstream, a loaded database) is never taken
   * for a dead worker's and sent again; a batch that failed or a worker that died stops renewing.
   */
  private inFlightRecipients = new Set<string>();
  private renewal: NodeJS.Timeout | null = null;
  private renewing = false;

  /** Stamped on this process's claims (null: no ownership, one dispatcher sends for every number). */
  private readonly claimant: string | null;

  constructor(private db: Db, private upstream: UpstreamClient, private media: MediaService, private pacer: SendPacer,
    private options: CampaignDispatcherOptions, private logger?: Logger) {
    this.claimant = options.numbers?.claimant ?? null;
  }

  loop(): WorkerLoop {
    return { name: 'campaign-dispatcher', runOnce: () => this.dispatchOnce(), stop: () => this.drain() };
  }

  /** Waits for the batches in flight (their sends finish and are recorded). */
  async drain(): Promise<void> {
    while (this.inFlight.size > 0) await Promise.allSettled([...this.inFlight]);
    this.stopRenewal();
  }

  /** Every third of a lease, one statement extends the leases of all this process's recipients in flight. */
  private startRenewal(): void {
    if (this.renewal) return;
    this.renewal = setInterval(() => void this.renewLeases(), Math.max(50, Math.floor(this.options.leaseMs / 3)));
    this.renewal.unref();
  }

  private stopRenewal(): void {
    if (this.renewal) clearInterval(this.renewal);
    this.renewal = null;
  }

  private async renewLeases(): Promise<void> {
    if (this.inFlightRecipients.size === 0) { this.stopRenewal(); return; }
    if (this.renewing) return;
    this.renewing = true;
    try {
      await campaignQueue.renewLeases(this.db, [...this.inFlightRecipients], this.options.leaseMs);
    } catch (err) {
      this.logger?.warn({ err }, 'campaign leases could not be renewed; tried again shortly');
    } finally {
      this.renewing = false;
    }
  }

  async dispatchOnce(): Promise<number> {
    let handled = 0;
    if (Date.now() - this.lastReconcile >= Math.min(1000, this.options.reconcileMs)) {
      this.lastReconcile = Date.now();
      handled += await campaignQueue.reconcileExpired(this.db, this.options.reconcileMs, this.options.onlyTenants);
      if (this.options.numbers) handled += await this.options.numbers.returnUnwritten(this.options.onlyTenants);
      // Deferred recipients whose wait is over go back to pending; held ones never released count as sent.
      handled += await campaignQueue.releaseWaiting(this.db, this.options.onlyTenants);
    }
    for (const [phoneNumberId, inherited] of this.inherited) {
      if (Date.now() - inherited.checkedAt >= INHERITED_RECHECK_MS) await this.inheritSends(inherited.tenantId, phoneNumberId);
    }
    const campaigns = await campaignQueue.running(this.db, 16, this.options.onlyTenants);
    await campaignQueue.touch(this.db, campaigns.map((c) => c.id));
    for (const campaign of campaigns) {
      if (this.inFlight.size >= this.options.maxBatches) await Promise.race(this.inFlight);
      handled += await this.startBatches(campaign);
    }
    return handled;
  }

  /**
   * Claims whole batches of a campaign, as many as its number has slots for (up to the pacing
   * horizon and BATCHES_PER_TURN), in one reservation and one claim, and starts each paced batch
   * in the background; returns how many recipients it took.
   */
  private async startBatches(campaign: RunningCampaign): Promise<number> {
    if (campaign.template_status === 'paused') {
      // Paused by WhatsApp (a callback or a poll said so before any send did): its campaigns wait for it.
      await this.db.transaction().execute((tx) => applyTemplateStatus(tx, [{ id: campaign.template_id, status: 'paused' }]));
      return 1;
    }
    const fatal = this.fatalCondition(campaign);
    if (fatal) {
      await this.failCampaign(campaign, fatal, null);
      return 1;
    }
    // Slots are reserved only for work that is due: a campaign whose last recipients wait (pair rate
    // limit) must not hold the number's throughput from other campaigns and single sends.
    if (!campaign.has_due) return campaign.pending_count <= 0 && (await campaignQueue.completeIfDone(this.db, campaign.id)) ? 1 : 0;
    // A second's worth of sends already waiting for a place in the number's window (its answers come
    // slower than the rate): claiming more would only make them wait longer, past their leases.
    const rate = campaign.messages_per_second ?? 80;
    if (this.sendWindow(campaign.phone_number_id!).waiting >= rate) return 0;
    if (campaign.messaging_limit !== null && (this.limitReached.get(campaign.tenant_id) ?? 0) > Date.now()) return 0;
    // Whole batches only: the few slots freed since the last turn would make a batch of a handful
    // of recipients paying a whole batch's statements.
    // One process at a time sends for a number: its send window then bounds the number's every second.
    const lease = this.options.numbers ? await this.options.numbers.lease(campaign.tenant_id, campaign.phone_number_id!) : OWN_EVERY_NUMBER;
    if (this.options.numbers && !lease) return 0;
    if (lease?.taken) await this.inheritSends(campaign.tenant_id, campaign.phone_number_id!);
    const size = campaign.batch_size;
    const batches = Math.max(1, Math.min(BATCHES_PER_TURN, this.options.maxBatches - this.inFlight.size));
    const whole = Math.min(size, Math.max(1, campaign.pending_count));
    const reservation = await this.pacer.reserve(campaign.phone_number_id!, size * batches, rate, whole);
    if (reservation.granted === 0) return 0;
    const claimedAt = Date.now();
    const recipients = await this.claim(campaign, reservation.granted, { by: this.claimant, startAt: reservation.startAt, intervalMs: reservation.intervalMs });
    if (recipients.length === 0) {
      if (await campaignQueue.completeIfDone(this.db, campaign.id)) return 1;
      // Due recipients left, none claimable: the rest wait (pending) for the window to move.
      if (campaign.messaging_limit !== null) this.limitReached.set(campaign.tenant_id, Date.now() + LIMIT_RECHECK_MS);
      return 0;
    }
    const context = this.sendContext(campaign, recipients);
    for (const r of recipients) this.inFlightRecipients.add(r.id);
    this.startRenewal();
    for (let from = 0; from < recipients.length; from += size) {
      const startAt = reservation.startAt + from * reservation.intervalMs;
      const slice = recipients.slice(from, from + size);
      const batch = this.sendBatch(campaign, context, slice, startAt, reservation.intervalMs, claimedAt, lease)
        .catch((err) => this.logger?.error({ err, campaign_id: campaign.id }, 'campaign batch failed; its recipients are reconciled after their lease'))
        .finally(() => {
          for (const r of slice) this.inFlightRecipients.delete(r.id);
          this.inFlight.delete(batch);
        });
      this.inFlight.add(batch);
    }
    return recipients.length;
  }

  /**
   * Claims from where this process's last claim of the campaign ended, and from the start again
   * once nothing is left after it (recipients re-queued by a rate limit or by reconciliation).
   */
  private async claim(campaign: RunningCampaign, limit: number, slots: ClaimSlots): Promise<ClaimedRecipient[]> {
    const campaignId = campaign.id;
    const skipOptedOut = campaign.template_category === 'MARKETING';
    // A limited portfolio (reference §8) claims only as many new users as its limit still allows;
    // unlimited (the default), the plain claim: no extra work per batch.
    const claimFrom = (after?: string) => campaign.messaging_limit === null
      ? campaignQueue.claim(this.db, campaignId, limit, this.options.leaseMs, after, skipOptedOut, slots)
      : campaignQueue.claimWithinLimit(this.db, campaign.tenant_id, campaignId, limit, this.options.leaseMs, campaign.messaging_limit, this.options.messagingLimitWindowMs ?? DAY_MS, after, skipOptedOut, slots);
    const after = this.cursors.get(campaignId) ?? FIRST_ID;
    let claimed = await claimFrom(after);
    if (claimed.length === 0 && after !== FIRST_ID) claimed = await claimFrom();
    countClaimed(claimed.length);
    // The claim slotted its recipients in id order (their send_at): they are sent in that order.
    claimed.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    if (claimed.length > 0) {
      if (this.cursors.size > 10_000) this.cursors.clear();
      this.cursors.set(campaignId, claimed.reduce((max, r) => (r.id > max ? r.id : max), claimed[0].id));
    }
    return claimed;
  }

  /** Why the campaign cannot go on: template no longer approved under the account, account gone. */
  private fatalCondition(c: RunningCampaign): string | null {
    if (c.account_status !== 'active' || !c.phone_number_id) {
      return c.account_status === 'token_invalid' || c.account_status === 'restricted'
        ? `The business account was stopped by WhatsApp (${c.account_status}); an operator must connect it again` : 'The business account was disconnected';
    }
    if (c.template_status === 'disabled') return 'The template was disabled by WhatsApp';
    if (c.template_status !== 'approved' || c.template_waba_id !== c.waba_id) return 'The template is no longer approved under the connected business account';
    return null;
  }

  private async failCampaign(campaign: RunningCampaign, reason: string, code: number | null): Promise<void> {
    const row = await campaignQueue.fail(this.db, campaign.id, reason, code);
    if (row) this.logger?.warn({ campaign_id: campaign.id, tenant_id: campaign.tenant_id, reason }, 'campaign failed');
  }

  /**
   * What every batch of one claim shares, built once: the account with its decrypted token, the
   * template's placeholders, and each mapped media asset's upstream id (so a first use uploads it
   * once, not once per batch). Null when the token cannot be decrypted (nothing is sent, the
   * claimed recipients go back to pending for whoever can send them, and the campaign fails) or a
   * mapped media asset cannot be resolved (see mediaUnavailable).
   */
  private async sendContext(campaign: RunningCampaign, claimed: ClaimedRecipient[]): Promise<SendContext | null> {
    let accessToken: string;
    try {
      accessToken = decryptSecret(this.options.secretsKey, campaign.access_token_enc!);
    } catch {
      await this.failClaimed(campaign, claimed, 'The business account\'s access token cannot be decrypted (was SECRETS_KEY changed?); reconnect the account');
      return null;
    }
    const account: UpstreamAccount = { wabaId: campaign.waba_id!, phoneNumberId: campaign.phone_number_id!, accessToken };
    const plan = placeholderPlan(campaign.template_components ?? []);
    const mapping = (campaign.variable_mapping ?? null) as VariableMapping | null;
    try {
      const media = await this.resolveMedia(campaign, mapping, plan.header?.format, account);
      return { account, plan, mapping, media };
    } catch (err) {
      await this.mediaUnavailable(campaign, claimed, err as Error);
      return null;
    }
  }

  /**
   * A mapped media asset could not be resolved. Deleted (or no longer of the header's type), or
   * still failing after maxAttempts claims: the campaign fails and its recipients stay pending.
   * Otherwise (the upload failed, say the upstream was unavailable) the claimed recipients wait
   * MEDIA_RETRY_MS before they are claimed again.
   */
  private async mediaUnavailable(campaign: RunningCampaign, claimed: ClaimedRecipient[], err: Error): Promise<void> {
    const permanent = err instanceof AppError && (err.code === 'NOT_FOUND' || err.code === 'VALIDATION_ERROR');
    if (permanent || claimed.some((r) => r.attempts >= this.options.maxAttempts)) {
      await this.failClaimed(campaign, claimed, `A mapped media asset cannot be sent: ${err.message}`);
      return;
    }
    const retryAt = new Date(Date.now() + MEDIA_RETRY_MS);
    await this.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { retry: claimed.map((r) => ({ id: r.id, retryAt, claim: { by: this.claimant, attempts: r.attempts } })) }));
    countOutcomes({ retry: claimed });
    this.logger?.warn({ err, campaign_id: campaign.id }, 'campaign media could not be uploaded; its recipients are retried later');
  }

  /** Nothing of the claim can be sent: its recipients go back to pending unsent, and the campaign fails. */
  private async failClaimed(campaign: RunningCampaign, claimed: ClaimedRecipient[], reason: string): Promise<void> {
    await this.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { unsent: claimed.map((r) => ({ id: r.id, claimedBy: this.claimant, attempts: r.attempts })) }));
    countOutcomes({ unsent: claimed });
    await this.failCampaign(campaign, reason, null);
  }

  private async sendBatch(campaign: RunningCampaign, sendContext: Promise<SendContext | null>, recipients: ClaimedRecipient[], startAt: number, intervalMs: number, claimedAt: number, lease: NumberLease | null): Promise<void> {
    const context = await sendContext;
    if (!context) return;
    const { account, plan, mapping, media } = context;
    const sends = recipients.map((r) => ({
      id: r.id, contactId: r.contact_id, to: r.phone, attempts: r.attempts, defers: r.defers,
      // A tracked link's button carries the recipient's click token instead of the destination.
      components: withClickToken(resolveSendComponents(mapping, plan, {
        first_name: r.first_name ?? '', last_name: r.last_name, phone: r.phone, email: r.email, company: r.company, job_title: r.job_title,
        status: r.status, source: r.source ?? '', custom_fields: r.custom_fields ?? {},
      }, media), mapping, r.id, this.options.secretsKey),
    }));
    // Written just before the batch's first slot, not at the claim: a claim a dead owner never got
    // to write was never sent, and a takeover puts it back at once (campaignQueue.takeOver).
    await sleepUntil(startAt - ATTEMPT_LEAD_MS);
    const mine = await campaignQueue.recordAttempts(this.db, campaign.tenant_id, campaign, this.claimant, sends);

    const window = this.sendWindow(account.phoneNumberId);
    const perSecond = Math.max(1, Math.floor(1000 / intervalMs + 1e-9));
    const issueBy = claimedAt + (this.options.issueWithinMs ?? Infinity);
    const results = await Promise.all(sends.map(async (send, i) => {
      // Taken over before its row was written: another process sends it.
      if (!mine.has(send.id)) return { send, outcome: null };
      await sleepUntil(startAt + i * intervalMs);
      const release = await window.acquire(perSecond, issueBy);
      if (!release) return { send, outcome: null };
      // Not sent once this process may no longer be the number's owner: the next owner puts it back.
      if (lease && !(await this.options.numbers!.mayIssue(lease, issueBy))) {
        release(false);
        return { send, outcome: null };
      }
      // Halted after this batch was claimed (not after its rows were written: another batch of the
      // same claim may have sent and met the fatal answer meanwhile).
      if ((this.halted.get(campaign.id) ?? -Infinity) >= claimedAt) {
        release(false);
        return { send, outcome: null };
      }
      let outcome: SendOutcome;
      try {
        countSendIssued(account.phoneNumberId, startAt + i * intervalMs);
        outcome = outcomeOfSend(await this.upstream.sendTemplate(account, {
          to: send.to, templateName: campaign.template_name, language: campaign.language, components: send.components, callbackData: send.id, attempt: send.attempts - 1,
        }), send.attempts - 1);
      } finally {
        release();
      }
      if (isStop(outcome)) this.haltCampaign(campaign.id);
      return { send, outcome };
    }));
    await this.record(campaign, results);
  }

  /**
   * A number just taken over: its previous owner's sends that may still reach the upstream (held up
   * on the way when it was cut off) keep places in this process's window until they are answered,
   * heard of, or reconciled, so they and this owner's sends never crowd one second together.
   */
  private async inheritSends(tenantId: string, phoneNumberId: string): Promise<void> {
    const count = await campaignQueue.othersUnanswered(this.db, tenantId, this.claimant!);
    this.sendWindow(phoneNumberId).setForeign(count);
    if (count > 0) this.inherited.set(phoneNumberId, { tenantId, checkedAt: Date.now() });
    else this.inherited.delete(phoneNumberId);
  }

  /**
   * Reference §4 (REQ): a request refused the same way for every row is the campaign's fault (a
   * parameter count the template does not have, say), not the rows'. Every answer this worker saw
   * for the campaign so far a request refusal, the last REFUSED_RUN with one code: the code, and the
   * campaign pauses with campaign.paused. Any other answer ends the watch; unknown and retry-later
   * answers do not count.
   */
  private refusedEveryRow(campaignId: string, results: { outcome: SendOutcome | null }[]): { code: number } | null {
    let run = this.refusedRuns.get(campaignId);
    if (run === null) return null;
    for (const { outcome } of results) {
      if (!outcome || outcome.kind === 'unknown' || outcome.kind === 'retry_later') continue;
      if (outcome.kind !== 'request_invalid') { run = null; break; }
      run = run?.code === outcome.error.code ? { code: run.code, count: run.count + 1 } : { code: outcome.error.code, count: 1 };
    }
    if (this.refusedRuns.size > 10_000) this.refusedRuns.clear();
    if (run && run.count >= REFUSED_RUN) {
      this.refusedRuns.delete(campaignId); // resumed, it gets another run
      return { code: run.code };
    }
    if (run !== undefined) this.refusedRuns.set(campaignId, run);
    return null;
  }

  private haltCampaign(campaignId: string): void {
    if (this.halted.size > 10_000) this.halted.clear();
    this.halted.set(campaignId, Date.now());
  }

  private sendWindow(phoneNumberId: string): SendWindow {
    let window = this.windows.get(phoneNumberId);
    if (!window) {
      if (this.windows.size > 10_000) this.windows.clear();
      window = new SendWindow();
      this.windows.set(phoneNumberId, window);
    }
    return window;
  }

  /** Each mapped media asset's upstream id, uploaded on first use. */
  private async resolveMedia(campaign: RunningCampaign, mapping: VariableMapping | null, headerFormat: string | undefined, account: UpstreamAccount): Promise<Map<string, MediaForSend>> {
    const resolved = new Map<string, MediaForSend>();
    const type = headerFormat ? MEDIA_TYPES[headerFormat] : undefined;
    for (const c of mapping?.components ?? []) {
      for (const p of c.parameters) {
        if (p.kind !== 'media' || resolved.has(p.media_id) || !type) continue;
        const m = await this.media.upstreamIdFor(campaign.tenant_id, p.media_id, account, type);
        resolved.set(p.media_id, { type: m.type, upstreamId: m.upstreamId, filename: m.filename });
      }
    }
    return resolved;
  }

  /** Acts on each send's outcome (src/upstream/outcomes.ts), in one transaction with what it stops. */
  private async record(campaign: RunningCampaign, results: { send: { id: string; attempts: number; defers: number }; outcome: SendOutcome | null }[]): Promise<void> {
    const outcomes: Outcomes = { accepted: [], failed: [], retry: [], deferred: [], unknown: [], unsent: [] };
    let stop: FailureOutcome | null = null;
    let rateLimited = false;
    const now = Date.now();
    // -1: no upstream code at all (stored as none, the errors summary's `unknown`).
    const fail = (id: string, outcome: FailureOutcome) => outcomes.failed.push({ id, code: outcome.error!.code < 0 ? null : outcome.error!.code, title: outcome.error!.title });
    for (const { send, outcome } of results) {
      if (!outcome) { outcomes.unsent.push({ id: send.id, claimedBy: this.claimant, attempts: send.attempts }); continue; }
      if (isStop(outcome)) stop ??= outcome;
      switch (outcome.kind) {
        case 'accepted':
        case 'held':
          outcomes.accepted.push({ id: send.id, wamid: outcome.messageId, ...(outcome.kind === 'held' ? { heldUntil: new Date(now + (this.options.holdMs ?? 2 * DAY_MS)) } : {}) });
          break;
        case 'unknown':
          // The send may have reached the upstream: callbacks decide within the reconciliation window.
          outcomes.unknown.push({ id: send.id, reconcileAt: new Date(now + this.options.reconcileMs) });
          break;
        case 'retry_later':
          if (outcome.error?.code === 130429) rateLimited = true;
          // Throttles slow the number (or the pair) down whatever maxAttempts says.
          if (isThrottle(outcome) || send.attempts < this.options.maxAttempts) outcomes.retry.push({ id: send.id, retryAt: new Date(now + outcome.retryAfterMs) });
          else fail(send.id, exhausted(outcome));
          break;
        case 'deferred':
          if (campaign.retry_deferred && send.defers < (this.options.deferAttempts ?? 3)) outcomes.deferred.push({ id: send.id, retryAt: new Date(now + (this.options.deferMs ?? DAY_MS)) });
          else fail(send.id, outcome);
          break;
        case 'number_restricted':
          // Not sent: the recipient waits out the restriction, and the number's campaigns pause.
          outcomes.retry.push({ id: send.id, retryAt: new Date(now + outcome.retryAfterMs) });
          break;
        case 'template_stopped':
        case 'account_stopped':
          // A paused template pauses the campaign: its recipient goes out once it is approved again.
          // An account stopped fails the campaign; its recipients were not at fault.
          if (outcome.kind === 'template_stopped' && outcome.templateStatus !== 'paused') fail(send.id, outcome);
          else outcomes.unsent.push({ id: send.id, claimedBy: this.claimant, attempts: send.attempts });
          break;
        default:
          fail(send.id, outcome);
      }
    }
    if (rateLimited) await this.pacer.penalise(campaign.phone_number_id!);
    const everyRowRefused = this.refusedEveryRow(campaign.id, results);
    if (everyRowRefused) this.haltCampaign(campaign.id);
    const failed = await this.db.transaction().execute(async (tx) => {
      await campaignQueue.recordOutcomes(tx, outcomes);
      if (everyRowRefused) await pauseCampaign(tx, campaign.tenant_id, campaign.id, REQUESTS_REFUSED, everyRowRefused.code);
      if (!stop) return [];
      // No Graph error at all (a proxy's page, a wrong UPSTREAM_BASE_URL): this campaign stops, the account is not known to be at fault.
      if (stop.kind === 'account_stopped' && !stop.accountStatus) {
        const row = await campaignQueue.failIn(tx, campaign.id, `Upstream error ${stop.error.code}: ${stop.error.title}`, stop.error.code);
        return row ? [row] : [];
      }
      return applyStop(tx, campaign.tenant_id, stop, campaign.template_id);
    });
    countOutcomes(outcomes);
    for (const row of failed) this.logger?.warn({ campaign_id: row.id, tenant_id: row.tenant_id, reason: row.failure_reason }, 'campaign failed');
  }
}

/** Starts due SCHEDULED campaigns: each exactly once, however many workers run this. */
export async function startDueCampaigns(db: Db, onlyTenants?: string[]): Promise<number> {
  let started = 0;
  for (const due of await campaignQueue.due(db, 10, onlyTenants)) {
    await db.transaction().execute(async (tx) => {
      let row = await campaignsRepository.transition(tx, due.tenant_id, due.id, 'start_scheduled', { started_at: new Date() });
      if (!row) return;
      row = await campaignsRepository.materialise(tx, row);
      await recordTransition(tx, row, 'start_scheduled');
      started++;
    });
  }
  return started;
}
