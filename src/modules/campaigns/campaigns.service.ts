import { randomUUID } from 'node:crypto';
import { sql } from 'kysely';
import type { Db, Tx } from '../../db/database.ts';
import { recordEvents } from '../../events/events.ts';
import { AppError, notFound, validationError, type ValidationDetail } from '../../http/errors.ts';
import { completeIdempotencyKey } from '../../http/idempotency.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { lookupErrorCode } from '../../upstream/error-codes.ts';
import { noActiveAccount } from '../business-accounts/business-accounts.repository.ts';
import { limitFreesAt, limitUsage, type LimitUsage } from '../business-accounts/messaging-limit.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import { placeholderPlan } from '../templates/templates.grammar.ts';
import { templatesRepository } from '../templates/templates.repository.ts';
import { checkMappingAgainstTemplate, isContactField, mediaIdsOf, normaliseMapping, renderComponents, templateNeedsParameters, type MappedContact, type VariableMapping } from './campaigns.mapping.ts';
import type { RateCard, RateCards } from '../pricing/rate-card.ts';
import { markTrackedButton, trackedComponent } from '../clicks/clicks.tracking.ts';
import { campaignCost, estimateCost } from './campaigns.cost.ts';
import { funnelOf } from './campaigns.engagement.ts';
import { errorCodeText, parseErrorCode } from './campaigns.error-codes.ts';
import { excludedCounts, exclusionsFor, NONE_EXCLUDED, totalExcluded, type ExcludedCounts } from './campaigns.exclusions.ts';
import { audienceCondition, campaignsRepository as repo, foldCounterMoves, type Audience, type CampaignRow, type TransitionSet } from './campaigns.repository.ts';
import type { AudienceBody, Campaign, CampaignCreate, CampaignDetail, CampaignPatch } from './campaigns.schemas.ts';
import { audienceZones, FALLBACK_ZONE, materialisedWindow, normaliseSendWindow, windowedDurationSeconds, type StoredSendWindow } from './send-window.ts';
import { AUDIENCE_EDITABLE, canTransition, TRANSITIONS, type CampaignAction } from './campaigns.states.ts';

/** Statuses in which PATCH may change a campaign: before it runs, or while paused. */
const EDITABLE = ['DRAFT', 'SCHEDULED', 'PAUSED'] as const;

const MEDIA_TYPE_OF_HEADER: Record<string, string> = { IMAGE: 'image', VIDEO: 'video', DOCUMENT: 'document' };

export function toCampaign(row: CampaignRow): Campaign {
  return {
    id: row.id,
    name: row.name,
    description: row.description,
    status: row.status as Campaign['status'],
    template_id: row.template_id,
    template_name: row.template_name,
    template_category: row.template_category,
    template_language: row.template_language,
    variable_mapping: (row.variable_mapping ?? null) as Campaign['variable_mapping'],
    batch_size: row.batch_size,
    scheduled_at: isoOrNull(row.scheduled_at),
    started_at: isoOrNull(row.started_at),
    completed_at: isoOrNull(row.completed_at),
    total_recipients: row.total_recipients,
    // Funnel counts: a read message was also delivered and sent. total = sent + failed + pending.
    stats: {
      total: row.total_recipients,
      sent: row.sent_count + row.delivered_count + row.read_count,
      delivered: row.delivered_count + row.read_count,
      read: row.read_count,
      failed: row.failed_count,
      pending: row.pending_count,
      held: row.held_count,
      deferred: row.deferred_count,
      skipped: row.skipped_count,
      replied: row.replied_count,
      clicked: row.clicked_count,
    },
    failure_reason: row.failure_reason,
    paused_reason: row.paused_reason,
    retry_deferred: row.retry_deferred,
    send_window: (row.send_window ?? null) as Campaign['send_window'],
    track_clicks: trackedComponent((row.variable_mapping ?? null) as VariableMapping | null) !== undefined,
    created_at: isoOrNull(row.created_at),
    updated_at: isoOrNull(row.updated_at),
  };
}

export function audiencesOf(row: CampaignRow) {
  return [
    ...row.audience_groups.map((value) => ({ type: 'group' as const, value })),
    ...row.audience_sources.map((value) => ({ type: 'source' as const, value })),
  ];
}

/** campaign.* event data: the campaign as GET returns it (with its audiences). */
export function campaignEventData(row: CampaignRow) {
  return { ...toCampaign(row), audiences: audiencesOf(row) };
}

/** Records a state-machine move's event in the move's own transaction. */
export async function recordTransition(tx: Tx, row: CampaignRow, action: CampaignAction, extra: Record<string, unknown> = {}): Promise<void> {
  await recordEvents(tx, row.tenant_id, [{ type: TRANSITIONS[action].event, data: { ...campaignEventData(row), ...extra } }]);
}

function checkAudience(body: AudienceBody | undefined, loc: (string | number)[]): Audience {
  const issues: ValidationDetail[] = [];
  const list = (key: 'groups' | 'sources'): string[] => {
    const items = body?.[key] ?? [];
    if (items.length > 100) { issues.push({ type: 'too_long', loc: [...loc, key], msg: `${key} may have at most 100 entries`, input: items.length }); return []; }
    items.forEach((item, i) => {
      if (typeof item !== 'string') issues.push({ type: 'string_type', loc: [...loc, key, i], msg: `${key} entries must be strings`, input: item ?? null });
      else if (item.trim().length === 0) issues.push({ type: 'too_short', loc: [...loc, key, i], msg: `${key} entries must not be empty`, input: item });
      else if (item.length > 100) issues.push({ type: 'too_long', loc: [...loc, key, i], msg: `${key} entries must be at most 100 characters`, input: item });
    });
    return [...new Set(items as string[])];
  };
  const audience = { groups: list('groups'), sources: list('sources') };
  // Spec 1: groups and sources only; contact ids (or any other key) would otherwise empty the audience unseen.
  for (const key of Object.keys(body ?? {})) {
    if (key !== 'groups' && key !== 'sources') issues.push({ type: 'extra_forbidden', loc: [...loc, key], msg: `An audience has groups and sources only; "${key}" is not accepted`, input: null });
  }
  if (issues.length > 0) throw new AppError('VALIDATION_ERROR', issues.length === 1 ? issues[0].msg : 'Invalid audience', { details: issues });
  return audience;
}

/** A campaign can start once it has groups or sources (or fixed recipients, when retargeted). */
const hasAudience = (c: CampaignRow) => Boolean(c.materialised_at) || c.audience_groups.length > 0 || c.audience_sources.length > 0;
const noAudience = () => validationError('The campaign has no audience: set groups or sources first', ['body', 'audience'], null);

/**
 * Who the campaign goes to, as the FROM and WHERE of a query over contacts (alias c) and the order
 * its first contact is taken in: its fixed recipients once materialised (started, or created by
 * retargeting: the audience no longer decides, and contacts archived since are still sent to), else
 * its audience resolved now. Undefined when it has neither.
 */
function campaignContacts(row: CampaignRow) {
  if (row.materialised_at) {
    return {
      from: sql`campaign_recipients r JOIN contacts c ON c.id = r.contact_id AND c.tenant_id = r.tenant_id
        WHERE r.campaign_id = ${row.id}::uuid AND r.tenant_id = ${row.tenant_id}::uuid`,
      order: sql`r.id`,
    };
  }
  const audience = { groups: row.audience_groups, sources: row.audience_sources };
  if (audience.groups.length === 0 && audience.sources.length === 0) return undefined;
  return { from: sql`contacts c WHERE ${audienceCondition(row.tenant_id, audience)}`, order: sql`c.created_at, c.id` };
}

const CONTACT_COLUMNS = sql`c.id, c.first_name, c.last_name, c.phone, c.email, c.company, c.job_title, c.status, c.source, c.custom_fields`;
type ContactForPreview = MappedContact & { id: string };

/** Why a campaign has no recipients: it sends nothing, also when its scheduled time comes. */
function noRecipientsWarning(row: CampaignRow): string {
  if (row.materialised_at) return 'The campaign has no recipients and will send nothing.';
  if (row.audience_groups.length === 0 && row.audience_sources.length === 0) {
    return 'The campaign has no audience: it has no recipients and will send nothing. Set groups or sources (a SCHEDULED campaign: pause it, set the audience, resume it).';
  }
  return 'The audience resolves to no contacts: the campaign has no recipients and will send nothing.';
}

/** What a MARKETING campaign skips, in words. */
function skippedWarning(excluded: ExcludedCounts, audienceSize: number): string {
  const why = [
    excluded.opted_out > 0 ? `${excluded.opted_out} opted out of marketing messages` : '',
    excluded.marketing_blocked_country > 0 ? `${excluded.marketing_blocked_country} US numbers (WhatsApp does not deliver marketing templates to them)` : '',
    excluded.frequency_cap > 0 ? `${excluded.frequency_cap} reached the marketing frequency cap` : '',
  ].filter(Boolean);
  return `${totalExcluded(excluded)} of ${audienceSize} recipients will be skipped, never sent or billed: ${why.join(', ')}.`;
}

export class CampaignsService {
  constructor(private db: Db, private rateCards: RateCards, private messagingLimitWindowMs = 86_400_000, private publicBaseUrl = 'http://localhost:8080') {}

  async list(tenantId: string): Promise<{ data: Campaign[] }> {
    return { data: (await repo.list(this.db, tenantId)).map(toCampaign) };
  }

  private async mustFind(db: Db | Tx, tenantId: string, id: string): Promise<CampaignRow> {
    const row = isUuid(id) ? await repo.findById(db, tenantId, id) : undefined;
    if (!row) throw notFound('Campaign');
    return row;
  }

  async get(tenantId: string, id: string): Promise<CampaignDetail> {
    const row = await this.mustFind(this.db, tenantId, id);
    return this.detail(row);
  }

  /** GET one campaign's answer (and of the calls that answer it): with its pre-flight and cost. */
  private async detail(row: CampaignRow, db: Db | Tx = this.db, card?: RateCard): Promise<CampaignDetail> {
    card ??= await this.rateCards.current();
    const estimate = await estimateCost(db, row, card);
    const campaign = toCampaign(row);
    return { ...campaign, funnel: funnelOf(campaign.stats), audiences: audiencesOf(row), preflight: await this.preflight(row, db, estimate), cost: await campaignCost(db, row, card, estimate) };
  }

  /**
   * Audience size, the recipients a MARKETING campaign skips, the rest against the portfolio's
   * messaging limit (what it allows now, and until when the rest wait), the template's standing,
   * how long dispatch takes at the number's pace, and what it is estimated to cost.
   */
  private async preflight(row: CampaignRow, db: Db | Tx, estimatedCost: CampaignDetail['preflight']['estimated_cost']): Promise<CampaignDetail['preflight']> {
    const audienceSize = row.materialised_at ? row.total_recipients : await this.audienceCount(db, row.tenant_id, { groups: row.audience_groups, sources: row.audience_sources });
    const excluded = await this.excluded(db, row);
    const skipped = totalExcluded(excluded);
    const size = audienceSize - skipped;
    const account = await db.selectFrom('business_accounts').select(['messages_per_second', 'messaging_tier', 'messaging_limit'])
      .where('tenant_id', '=', row.tenant_id).where('status', '=', 'active').executeTakeFirst();
    const template = await db.selectFrom('templates').select(['category', 'quality_score']).where('id', '=', row.template_id).executeTakeFirst();
    const limit = account?.messaging_limit ?? null;
    const warnings: string[] = [];
    if (!account) warnings.push('No active business account: the campaign cannot be sent.');
    let usage: LimitUsage | null = null;
    let waitUntil: Date | null = null;
    if (limit !== null) {
      // Still to send: a started campaign's pending recipients, else its audience (users already counted or in a service window would not count: an upper bound).
      const toSend = row.materialised_at ? row.pending_count : size;
      usage = await limitUsage(db, row.tenant_id, limit, this.messagingLimitWindowMs);
      waitUntil = await limitFreesAt(db, row.tenant_id, usage, toSend, this.messagingLimitWindowMs);
      if (waitUntil) {
        warnings.push(`${toSend} recipients to send, and the business portfolio's messaging limit (${limit} unique users in a moving 24 hours) allows ${usage.available} more now: the rest wait (pending, not failed) until about ${waitUntil.toISOString()}.`);
      }
    }
    if (template && (template.quality_score === 'YELLOW' || template.quality_score === 'RED')) {
      warnings.push(`The template's quality is ${template.quality_score}: WhatsApp may pause it (sends then wait) and lower the messaging limit.`);
    }
    if (template && template.category !== row.template_category) {
      warnings.push(`The template's category changed from ${row.template_category} to ${template.category} since the campaign was created: it is priced and limited as ${template.category}.`);
    }
    if (skipped > 0) warnings.push(skippedWarning(excluded, audienceSize));
    const window = row.send_window as StoredSendWindow | null;
    let duration = account ? Math.ceil(size / account.messages_per_second) : null;
    if (account && window && size > 0 && (row.status === 'DRAFT' || row.status === 'SCHEDULED' || row.status === 'PAUSED' || row.status === 'RUNNING')) {
      duration = await windowedDurationSeconds(db, window, await this.zoneCounts(db, row, window, size), account.messages_per_second);
    }
    if (audienceSize === 0) warnings.push(noRecipientsWarning(row));
    return {
      audience_size: audienceSize,
      excluded,
      messaging_tier: account?.messaging_tier ?? null,
      tier_limit: limit,
      within_tier: account ? waitUntil === null : false,
      messaging_limit_used: usage?.used ?? null,
      messaging_limit_available: usage?.available ?? null,
      messaging_limit_wait_until: waitUntil?.toISOString() ?? null,
      template_quality_score: template?.quality_score ?? null,
      messages_per_second: account?.messages_per_second ?? null,
      estimated_duration_seconds: duration,
      estimated_cost: estimatedCost,
      warnings,
    };
  }

  /**
   * Recipients the campaign skips, by reason: its skipped recipients once materialised, else its
   * audience as materialising it now would skip them.
   */
  private async excluded(db: Db | Tx, row: CampaignRow): Promise<ExcludedCounts> {
    if (row.materialised_at) {
      const { rows } = await sql<{ reason: string | null; n: number }>`
        SELECT skip_reason AS reason, count(*)::int AS n FROM campaign_recipients
        WHERE campaign_id = ${row.id}::uuid AND tenant_id = ${row.tenant_id}::uuid AND status = 'skipped' GROUP BY skip_reason`.execute(db);
      return excludedCounts(rows);
    }
    if (row.audience_groups.length === 0 && row.audience_sources.length === 0) return NONE_EXCLUDED;
    const ex = await exclusionsFor(db, row.tenant_id, row.template_id, row.template_category);
    if (!ex.applies) return NONE_EXCLUDED;
    const { rows } = await sql<{ reason: string | null; n: number }>`
      ${ex.with}
      SELECT x.reason, count(*)::int AS n
      FROM contacts c ${ex.join} CROSS JOIN LATERAL (SELECT ${ex.reason} AS reason) x
      WHERE ${audienceCondition(row.tenant_id, { groups: row.audience_groups, sources: row.audience_sources })} AND x.reason IS NOT NULL
      GROUP BY x.reason`.execute(db);
    return excludedCounts(rows);
  }

  private async audienceCount(db: Db | Tx, tenantId: string, audience: Audience): Promise<number> {
    if (audience.groups.length === 0 && audience.sources.length === 0) return 0;
    const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM contacts c WHERE ${audienceCondition(tenantId, audience)}`.execute(db);
    return rows[0].n;
  }

  /** Normalises the mapping and checks it against the template and the tenant's media (400 naming the path). */
  private async checkedMapping(tenantId: string, templateComponents: unknown[], raw: unknown): Promise<VariableMapping | null> {
    const plan = placeholderPlan(templateComponents);
    let mapping: VariableMapping | null = null;
    if (raw !== undefined && raw !== null) {
      const normalised = normaliseMapping(raw);
      if (!normalised.mapping) throw new AppError('VALIDATION_ERROR', normalised.issues.length === 1 ? normalised.issues[0].msg : 'Invalid variable_mapping', { details: normalised.issues });
      mapping = normalised.mapping;
    } else if (templateNeedsParameters(plan)) {
      throw validationError('variable_mapping is required: the template has variables', ['body', 'variable_mapping']);
    }
    const issues = checkMappingAgainstTemplate(mapping, plan);
    if (issues.length > 0) throw new AppError('VALIDATION_ERROR', issues.length === 1 ? issues[0].msg : 'variable_mapping does not match the template', { details: issues });
    const mediaIds = mediaIdsOf(mapping);
    if (mediaIds.length > 0) {
      const found = await this.db.selectFrom('media').select(['id', 'media_type']).where('tenant_id', '=', tenantId).where('id', 'in', mediaIds).where('deleted_at', 'is', null).execute();
      const types = new Map(found.map((m) => [m.id, m.media_type]));
      const wanted = plan.header ? MEDIA_TYPE_OF_HEADER[plan.header.format] : undefined;
      for (const id of mediaIds) {
        if (!types.has(id)) throw validationError(`media ${id} is not a media asset of this tenant`, ['body', 'variable_mapping'], id);
        if (wanted && types.get(id) !== wanted) throw validationError(`media ${id} is ${types.get(id)}, but the template header needs ${wanted}`, ['body', 'variable_mapping'], id);
      }
    }
    return mapping;
  }

  async create(tenantId: string, input: CampaignCreate): Promise<Campaign> {
    const audience = checkAudience(input.audience, ['body', 'audience']);
    const scheduledAt = input.scheduled_at ? new Date(input.scheduled_at) : null;
    if (scheduledAt && scheduledAt.getTime() <= Date.now()) throw validationError('scheduled_at must be in the future', ['body', 'scheduled_at'], input.scheduled_at);
    // Spec 4.1: the audience is optional, also with scheduled_at ("can be set later": pause, PUT
    // audience, resume). One still without recipients when its time comes sends nothing and completes.
    const template = await templatesRepository.findByIdOrUpstreamId(this.db, tenantId, input.template_id);
    if (!template || template.status !== 'approved') throw new AppError('NOT_FOUND', `Template ${input.template_id} not found or not approved`);
    let mapping = await this.checkedMapping(tenantId, template.components, input.variable_mapping);
    if (input.track_clicks) {
      const tracked = markTrackedButton(mapping, template.components, this.publicBaseUrl);
      if (tracked.issues.length > 0) throw new AppError('VALIDATION_ERROR', tracked.issues[0].msg, { details: tracked.issues });
      mapping = tracked.mapping;
    }
    const sendWindow = await normaliseSendWindow(this.db, input.send_window, ['body', 'send_window']);
    return this.db.transaction().execute(async (tx) => {
      const row = await repo.insert(tx, tenantId, {
        id: randomUUID(), name: input.name, description: input.description ?? null, status: scheduledAt ? 'SCHEDULED' : 'DRAFT',
        template: { id: template.id, template_name: template.template_name, category: template.category, language: template.language },
        variableMapping: mapping, batchSize: input.batch_size ?? 50, groups: audience.groups, sources: audience.sources, scheduledAt,
        retryDeferred: input.retry_deferred ?? true, sendWindow,
      });
      const data = campaignEventData(row);
      await recordEvents(tx, tenantId, [
        { type: 'campaign.created', data },
        ...(scheduledAt ? [{ type: 'campaign.scheduled' as const, data }] : []),
      ]);
      const campaign = toCampaign(row);
      await completeIdempotencyKey(tx, campaign);
      return campaign;
    });
  }

  async setAudience(tenantId: string, id: string, body: AudienceBody): Promise<CampaignDetail> {
    const audience = checkAudience(body, ['body']);
    const row = await this.db.transaction().execute(async (tx) => {
      const current = await this.mustFind(tx, tenantId, id);
      if (!AUDIENCE_EDITABLE.includes(current.status as never)) {
        throw validationError(`The audience can be replaced only in DRAFT or PAUSED; the campaign is ${current.status}`, ['path', 'id'], current.status, 'invalid_transition');
      }
      if (current.status === 'DRAFT' && current.materialised_at) {
        throw validationError('This campaign retargets the recipients of another; its audience is fixed', ['path', 'id'], current.status, 'invalid_transition');
      }
      const updated = await repo.setAudience(tx, tenantId, id, audience, AUDIENCE_EDITABLE);
      if (!updated) throw new AppError('CONFLICT', 'The campaign changed status concurrently; re-read it and retry');
      // PAUSED after it started: its recipients not yet tried are the new audience's (spec 3.1).
      if (updated.materialised_at) return repo.replaceAudience(tx, updated);
      await recordEvents(tx, tenantId, [{ type: 'campaign.updated', data: campaignEventData(updated) }]);
      return updated;
    });
    return this.detail(row);
  }

  /**
   * Changes a campaign's send window while it is DRAFT, SCHEDULED or PAUSED, and its name, variable
   * mapping and batch size while it is DRAFT. Recipients already materialised (a paused or retargeted
   * campaign) that are pending get their zone and wait again under a new window (no window: they may
   * go at once), in the same transaction.
   */
  async update(tenantId: string, id: string, patch: CampaignPatch): Promise<CampaignDetail> {
    const windowed = patch.send_window !== undefined;
    const sendWindow = windowed ? await normaliseSendWindow(this.db, patch.send_window, ['body', 'send_window']) : null;
    const card = await this.rateCards.current();
    // Checked before the transaction (the check reads through this.db); the update below applies only to a draft still.
    const drafting = patch.name !== undefined || patch.variable_mapping !== undefined || patch.batch_size !== undefined;
    let mapping: VariableMapping | null | undefined;
    if (drafting) {
      const draft = await this.mustFind(this.db, tenantId, id);
      if (draft.status !== 'DRAFT') {
        throw validationError(`name, variable_mapping and batch_size can be changed only in DRAFT; this campaign is ${draft.status}`, ['path', 'id'], draft.status, 'invalid_transition');
      }
      if (patch.variable_mapping !== undefined) mapping = await this.remapped(tenantId, draft, patch.variable_mapping);
    }
    return this.db.transaction().execute(async (tx) => {
      const current = await this.mustFind(tx, tenantId, id);
      if (!EDITABLE.includes(current.status as never)) {
        throw validationError(`A campaign can be changed only in DRAFT, SCHEDULED or PAUSED; this one is ${current.status}`, ['path', 'id'], current.status, 'invalid_transition');
      }
      await foldCounterMoves(tx, [id]);
      const updated = await tx.updateTable('campaigns').set({
        ...(windowed ? { send_window: sendWindow ? JSON.stringify(sendWindow) : null } : {}),
        ...(mapping !== undefined ? { variable_mapping: mapping === null ? null : JSON.stringify(mapping) } : {}),
        ...(patch.batch_size !== undefined ? { batch_size: patch.batch_size } : {}),
        ...(patch.name !== undefined ? { name: patch.name } : {}),
        updated_at: new Date(),
      }).where('tenant_id', '=', tenantId).where('id', '=', id).where('status', 'in', drafting ? ['DRAFT'] : [...EDITABLE]).returningAll().executeTakeFirst();
      if (!updated) throw new AppError('CONFLICT', 'The campaign changed status concurrently; re-read it and retry');
      if (updated.materialised_at && windowed) await this.rewaitRecipients(tx, updated, sendWindow);
      if (!updated.materialised_at) await recordEvents(tx, tenantId, [{ type: 'campaign.updated', data: campaignEventData(updated) }]);
      return this.detail(updated, tx, card);
    });
  }

  /** A new mapping for a draft, checked against its template; a campaign tracking clicks keeps tracking them. */
  private async remapped(tenantId: string, current: CampaignRow, raw: unknown): Promise<VariableMapping | null> {
    const template = await this.db.selectFrom('templates').select('components').where('tenant_id', '=', tenantId).where('id', '=', current.template_id).executeTakeFirst();
    const components = (template?.components ?? []) as unknown[];
    const mapping = await this.checkedMapping(tenantId, components, raw);
    if (trackedComponent((current.variable_mapping ?? null) as VariableMapping | null) === undefined) return mapping;
    const tracked = markTrackedButton(mapping, components, this.publicBaseUrl);
    if (tracked.issues.length > 0) throw new AppError('VALIDATION_ERROR', tracked.issues[0].msg, { details: tracked.issues });
    return tracked.mapping;
  }

  /** A materialised campaign's pending recipients under its new window: their zone and next opening. */
  private async rewaitRecipients(tx: Tx, row: CampaignRow, window: StoredSendWindow | null): Promise<void> {
    if (!window) {
      await sql`UPDATE campaign_recipients SET not_before = NULL, updated_at = now()
        WHERE campaign_id = ${row.id}::uuid AND status = 'pending' AND not_before > now()`.execute(tx);
      return;
    }
    const pending = sql`campaign_recipients r JOIN contacts c ON c.id = r.contact_id AND c.tenant_id = r.tenant_id
      WHERE r.campaign_id = ${row.id}::uuid AND r.tenant_id = ${row.tenant_id}::uuid AND r.status = 'pending'`;
    const zones = window.time_zone === 'recipient' ? await audienceZones(tx, pending) : { byKey: {}, counts: new Map<string, number>() };
    const w = materialisedWindow(window, zones);
    await sql`
      UPDATE campaign_recipients u SET time_zone = v.zone, not_before = v.until, updated_at = now()
      FROM (SELECT r.id, ${w.zone} AS zone, ${w.notBefore} AS until FROM contacts c ${w.join}
            JOIN campaign_recipients r ON r.contact_id = c.id AND r.tenant_id = c.tenant_id
            WHERE r.campaign_id = ${row.id}::uuid AND r.tenant_id = ${row.tenant_id}::uuid AND r.status = 'pending') v
      WHERE u.id = v.id`.execute(tx);
  }

  /** Recipients by the zone their window is read in, for the pre-flight's duration (scaled to `size`, the ones that will be sent). */
  private async zoneCounts(db: Db | Tx, row: CampaignRow, window: StoredSendWindow, size: number): Promise<Map<string, number>> {
    if (row.materialised_at) {
      const { rows } = await sql<{ zone: string; n: number }>`
        SELECT coalesce(time_zone, ${FALLBACK_ZONE}) AS zone, count(*)::int AS n FROM campaign_recipients
        WHERE campaign_id = ${row.id}::uuid AND tenant_id = ${row.tenant_id}::uuid AND status <> 'skipped' GROUP BY 1`.execute(db);
      return new Map(rows.map((r) => [r.zone, r.n]));
    }
    if (window.time_zone !== 'recipient') return new Map([[window.time_zone, size]]);
    const { counts } = await audienceZones(db, sql`contacts c WHERE ${audienceCondition(row.tenant_id, { groups: row.audience_groups, sources: row.audience_sources })}`);
    const all = [...counts.values()].reduce((a, b) => a + b, 0);
    return new Map([...counts].map(([zone, n]) => [zone, all === 0 ? 0 : (n * size) / all]));
  }

  /**
   * One lifecycle action (spec 3.1). Not allowed from the current status: 400 naming it. Allowed
   * when read but lost to a concurrent move before the conditional UPDATE: 409.
   */
  async act(tenantId: string, id: string, action: 'send' | 'schedule' | 'pause' | 'resume' | 'stop', input: { scheduled_at?: string } = {}): Promise<CampaignDetail> {
    // Read before the transaction: the embedded database has one connection, which it holds.
    const card = await this.rateCards.current();
    return this.db.transaction().execute(async (tx) => {
      const current = await this.mustFind(tx, tenantId, id);
      if (!canTransition(action, current.status)) {
        throw validationError(`Cannot ${action} a campaign in status ${current.status}`, ['path', 'id'], current.status, 'invalid_transition');
      }
      const set: TransitionSet = {};
      if (action === 'schedule') {
        const at = new Date(input.scheduled_at ?? '');
        if (!(at.getTime() > Date.now())) throw validationError('scheduled_at must be in the future', ['body', 'scheduled_at'], input.scheduled_at ?? null);
        set.scheduled_at = at;
      }
      // A pause by the user is never undone by the service (a template's return resumes only its own pauses).
      if (action === 'pause') set.paused_reason = 'user';
      if (action === 'resume') set.paused_reason = null;
      const starts = action === 'send' || action === 'resume';
      if (starts) await this.checkSendable(tx, current);
      if (starts && !current.started_at) set.started_at = new Date();
      let moved = await repo.transition(tx, tenantId, id, action, set);
      if (!moved) throw new AppError('CONFLICT', `The campaign changed status concurrently; re-read it and retry`);
      if (starts) moved = await repo.materialise(tx, moved);
      await recordTransition(tx, moved, action);
      const detail = await this.detail(moved, tx, card);
      await completeIdempotencyKey(tx, detail);
      return detail;
    });
  }

  /** Dispatch needs an approved template, an active business account, and an audience. */
  private async checkSendable(tx: Tx, campaign: CampaignRow): Promise<void> {
    const account = await tx.selectFrom('business_accounts').select('waba_id').where('tenant_id', '=', campaign.tenant_id).where('status', '=', 'active').executeTakeFirst();
    if (!account) throw noActiveAccount();
    const template = await tx.selectFrom('templates').select(['status', 'waba_id']).where('id', '=', campaign.template_id).executeTakeFirst();
    if (template?.status !== 'approved' || template.waba_id !== account.waba_id) {
      throw validationError(`The campaign's template is not approved under the active business account (status ${template?.status ?? 'deleted'})`, ['body', 'template_id'], campaign.template_id);
    }
    if (!hasAudience(campaign)) throw noAudience();
  }

  async refreshMetrics(tenantId: string, id: string): Promise<Campaign> {
    await this.mustFind(this.db, tenantId, id);
    const row = await this.db.transaction().execute((tx) => repo.recountStats(tx, tenantId, id));
    if (!row) throw notFound('Campaign');
    return toCampaign(row);
  }

  async audiencePreview(tenantId: string, id: string) {
    const row = await this.mustFind(this.db, tenantId, id);
    const contacts = campaignContacts(row);
    if (!contacts) return { total: 0, sample: [], excluded: NONE_EXCLUDED };
    const { rows } = await sql<{ id: string; first_name: string; phone: string; total: number }>`
      SELECT c.id, c.first_name, c.phone, count(*) OVER ()::int AS total
      FROM ${contacts.from} ORDER BY ${contacts.order} LIMIT 10`.execute(this.db);
    const total = rows.length < 10 ? rows.length : rows[0].total;
    return { total, sample: rows.map((r) => ({ id: r.id, first_name: r.first_name, phone: r.phone })), excluded: await this.excluded(this.db, row) };
  }

  async fieldCoverage(tenantId: string, id: string, fields: string[]) {
    fields.forEach((field, i) => {
      if (!isContactField(field)) throw validationError(`Unknown field "${field}": use a contact column or custom_fields.<key>`, ['body', 'fields', i], field);
    });
    const row = await this.mustFind(this.db, tenantId, id);
    const unique = [...new Set(fields)];
    const present = unique.map((field, i) => {
      const value = field.startsWith('custom_fields.')
        ? sql`nullif(c.custom_fields ->> ${field.slice('custom_fields.'.length)}, '')`
        : sql`nullif(${sql.ref(`c.${field}`)}::text, '')`;
      return sql`count(${value})::int AS ${sql.ref(`f${i}`)}`;
    });
    const contacts = campaignContacts(row);
    const { rows } = await sql<Record<string, number>>`
      SELECT count(*)::int AS total, ${sql.join(present)} FROM ${contacts?.from ?? sql`contacts c WHERE false`}`.execute(this.db);
    const total = rows[0].total;
    const coverage = Object.fromEntries(unique.map((field, i) => [field, { present: rows[0][`f${i}`], missing: total - rows[0][`f${i}`] }]));
    return { total_recipients: total, excluded: await this.excluded(this.db, row), coverage };
  }

  async renderPreview(tenantId: string, id: string, sampleContactId: string | undefined) {
    const row = await this.mustFind(this.db, tenantId, id);
    let contact: ContactForPreview | undefined;
    if (sampleContactId !== undefined) {
      const { rows } = isUuid(sampleContactId)
        ? await sql<ContactForPreview>`SELECT ${CONTACT_COLUMNS} FROM contacts c WHERE c.tenant_id = ${tenantId}::uuid AND c.id = ${sampleContactId}::uuid AND c.deleted_at IS NULL`.execute(this.db)
        : { rows: [] };
      contact = rows[0];
      if (!contact) throw notFound('Contact');
    } else {
      const contacts = campaignContacts(row);
      if (contacts) {
        const { rows } = await sql<ContactForPreview>`SELECT ${CONTACT_COLUMNS} FROM ${contacts.from} ORDER BY ${contacts.order} LIMIT 1`.execute(this.db);
        contact = rows[0];
      }
    }
    const template = await this.db.selectFrom('templates').select('components').where('id', '=', row.template_id).executeTakeFirst();
    const blank: MappedContact = { first_name: '', last_name: null, phone: '', email: null, company: null, job_title: null, status: null, source: '', custom_fields: {} };
    return {
      campaign_id: row.id,
      sample_contact_id: contact?.id ?? null,
      resolved_components: renderComponents(template?.components ?? [], (row.variable_mapping ?? null) as VariableMapping | null, contact ?? blank),
    };
  }

  async errorsSummary(tenantId: string, id: string) {
    await this.mustFind(this.db, tenantId, id);
    const { rows } = await sql<{ code: number | null; count: number; sample: string | null }>`
      SELECT error_code AS code, count(*)::int AS count, (array_agg(error_title ORDER BY id) FILTER (WHERE error_title IS NOT NULL))[1] AS sample
      FROM campaign_recipients WHERE campaign_id = ${id}::uuid AND tenant_id = ${tenantId}::uuid AND status = 'failed'
      GROUP BY error_code ORDER BY count DESC, error_code`.execute(this.db);
    const byCode = rows.map((r) => {
      const info = r.code === null ? undefined : lookupErrorCode(r.code);
      return {
        code: errorCodeText(r.code),
        title: info?.title ?? r.sample ?? 'Unknown error',
        fix: info?.fix ?? 'An error this service does not know; see the sample message and the WhatsApp Cloud API error reference.',
        count: r.count,
        sample_message: r.sample ?? info?.title ?? '',
      };
    });
    return { total_failed: byCode.reduce((n, r) => n + r.count, 0), by_code: byCode };
  }

  async errorsDrillDown(tenantId: string, id: string, errorCode: string, limit: number) {
    await this.mustFind(this.db, tenantId, id);
    let query = this.db.selectFrom('campaign_recipients').select(['id', 'phone', 'contact_id', 'status', 'message_id', 'error_title'])
      .where('campaign_id', '=', id).where('tenant_id', '=', tenantId).where('status', '=', 'failed');
    const code = parseErrorCode(errorCode);
    if (code === undefined) throw validationError('error_code must be an upstream error code (an integer) or "unknown"', ['path', 'error_code'], errorCode);
    query = code === null ? query.where('error_code', 'is', null) : query.where('error_code', '=', code);
    const rows = await query.orderBy('id').limit(limit).execute();
    return {
      error_code: errorCode,
      recipients: rows.map((r) => ({ id: r.id, phone_number: r.phone, contact_id: r.contact_id, status: r.status, message_id: r.message_id, error: r.error_title })),
    };
  }
}
