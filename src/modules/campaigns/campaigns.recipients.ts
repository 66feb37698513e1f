import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import { pageWithTotal } from '../../db/page.ts';
import { recordEvents } from '../../events/events.ts';
import { AppError, notFound, validationError } from '../../http/errors.ts';
import { completeIdempotencyKey } from '../../http/idempotency.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { offsetOf, paginationFor, type PageQuery } from '../../http/pagination.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import { pricingOf } from '../messages/messages.queries.ts';
import { recordAudiencePrefixes } from './campaigns.cost.ts';
import { trackedComponent } from '../clicks/clicks.tracking.ts';
import { SEGMENT_WORDS, segmentCondition, type Segment } from './campaigns.engagement.ts';
import { errorCodeText, parseErrorCode } from './campaigns.error-codes.ts';
import type { VariableMapping } from './campaigns.mapping.ts';
import { exclusionsFor, type SkipReason } from './campaigns.exclusions.ts';
import { campaignsRepository as repo, countSkipped, windowColumns, type CampaignRow } from './campaigns.repository.ts';
import type { StoredSendWindow } from './send-window.ts';
import { campaignEventData, toCampaign } from './campaigns.service.ts';
import { TERMINAL_STATUSES } from './campaigns.states.ts';
import type { Campaign } from './campaigns.schemas.ts';

const CSV_BATCH = 1000;

/** When a pending or deferred recipient goes next (its window or retry time); null for any other. */
const nextAttemptAt = (r: { status: string; not_before: Date | null }) => (r.status === 'pending' || r.status === 'deferred' ? isoOrNull(r.not_before) : null);

function csvField(value: unknown): string {
  const text = value === null || value === undefined ? '' : String(value);
  // Quote what needs it, and defuse spreadsheet formulas (a value starting with = + - @).
  const safe = /^[=+\-@]/.test(text) && !/^[+-]?\d/.test(text) ? `'${text}` : text;
  return /[",\r\n]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe;
}

/** The pricing and price of recipients' messages (a recipient's message has the recipient's id), by id. */
async function pricesOf(db: Db, tenantId: string, ids: string[]) {
  if (ids.length === 0) return new Map<string, ReturnType<typeof pricingOf>>();
  const rows = await db.selectFrom('messages')
    .select(['id', 'pricing_category', 'pricing_type', 'pricing_billable', 'pricing_model', 'price_amount', 'price_currency'])
    .where('tenant_id', '=', tenantId).where('id', 'in', ids).execute();
  return new Map(rows.map((r) => [r.id, pricingOf(r)]));
}

/** Every recipient's outcome (listing, CSV export) and retargeting of the failed ones. */
export class CampaignRecipients {
  constructor(private db: Db) {}

  private async campaign(tenantId: string, id: string): Promise<CampaignRow> {
    const row = isUuid(id) ? await repo.findById(this.db, tenantId, id) : undefined;
    if (!row) throw notFound('Campaign');
    return row;
  }

  async page(tenantId: string, id: string, query: PageQuery & { status?: string }) {
    await this.campaign(tenantId, id);
    let base = this.db.selectFrom('campaign_recipients').where('campaign_id', '=', id).where('tenant_id', '=', tenantId);
    if (query.status) base = base.where('status', '=', query.status);
    const { rows, total } = await pageWithTotal(base, (q) => q.selectAll().orderBy('id').limit(query.limit).offset(offsetOf(query)));
    const prices = await pricesOf(this.db, tenantId, rows.map((r) => r.id));
    return {
      data: rows.map((r) => ({
        id: r.id, phone_number: r.phone, contact_id: r.contact_id, status: r.status, message_id: r.message_id,
        error: r.error_title, error_code: r.error_code === null ? null : errorCodeText(r.error_code), attempts: r.attempts, updated_at: isoOrNull(r.updated_at),
        skip_reason: r.skip_reason as SkipReason | null,
        next_attempt_at: nextAttemptAt(r),
        time_zone: r.time_zone,
        replied_at: isoOrNull(r.replied_at), button_payload: r.button_payload, clicked_at: isoOrNull(r.clicked_at), click_count: r.click_count ?? 0,
        ...(prices.get(r.id) ?? { pricing: null, price: null }),
      })),
      pagination: paginationFor(query.page, query.limit, total),
    };
  }

  /** The whole outcome as CSV, read in keyset batches so a million recipients never sit in memory. */
  async csv(tenantId: string, id: string, status?: string): Promise<Readable> {
    await this.campaign(tenantId, id);
    const db = this.db;
    async function* lines() {
      yield 'id,phone_number,contact_id,status,message_id,error_code,error,attempts,updated_at,skip_reason,pricing_category,pricing_type,price,currency,replied_at,button_payload,clicked_at,click_count,next_attempt_at,time_zone\n';
      let after = '00000000-0000-0000-0000-000000000000';
      for (;;) {
        let q = db.selectFrom('campaign_recipients').selectAll().where('campaign_id', '=', id).where('tenant_id', '=', tenantId).where('id', '>', after);
        if (status) q = q.where('status', '=', status);
        const rows = await q.orderBy('id').limit(CSV_BATCH).execute();
        if (rows.length === 0) return;
        const prices = await pricesOf(db, tenantId, rows.map((r) => r.id));
        yield rows.map((r) => {
          const { pricing, price } = prices.get(r.id) ?? { pricing: null, price: null };
          return [r.id, r.phone, r.contact_id, r.status, r.message_id, r.error_code, r.error_title, r.attempts, isoOrNull(r.updated_at), r.skip_reason,
            pricing?.category, pricing?.type, price?.amount, price?.currency, isoOrNull(r.replied_at), r.button_payload, isoOrNull(r.clicked_at), r.click_count ?? 0, nextAttemptAt(r), r.time_zone].map(csvField).join(',') + '\n';
        }).join('');
        after = rows[rows.length - 1].id;
      }
    }
    return Readable.from(lines());
  }

  /**
   * A new DRAFT campaign with the same template and mapping whose recipients are exactly the
   * recipients of a segment of a finished campaign (default: the failed ones, optionally those with
   * the chosen error codes; campaigns.engagement.ts), less contacts
   * archived since. Its recipients are materialised at once, so its audience is fixed. None to
   * retarget: 400, and no campaign.
   */
  async retarget(tenantId: string, id: string, input: { segment?: Segment; error_codes?: (string | number)[]; name?: string }): Promise<Campaign> {
    const source = await this.campaign(tenantId, id);
    if (!TERMINAL_STATUSES.includes(source.status as never)) {
      throw validationError(`Only a finished campaign (COMPLETED, STOPPED or FAILED) can be retargeted; this one is ${source.status}`, ['path', 'id'], source.status, 'invalid_transition');
    }
    const named = (input.error_codes ?? []).map((value, i) => {
      const code = parseErrorCode(value);
      if (code === undefined) throw validationError('error_codes must be upstream error codes (integers, as numbers or strings of digits) or "unknown"', ['body', 'error_codes', i], value);
      return code;
    });
    const codes = named.filter((code): code is number => code !== null);
    const segment = input.segment ?? 'failed';
    if (segment !== 'failed' && named.length > 0) throw validationError('error_codes combine only with the failed segment', ['body', 'error_codes'], input.error_codes ?? null);
    if ((segment === 'clicked' || segment === 'not_clicked') && !trackedComponent((source.variable_mapping ?? null) as VariableMapping | null)) {
      throw validationError(`The campaign does not track link clicks (track_clicks): the ${segment} segment needs it`, ['body', 'segment'], segment);
    }
    const template = await this.db.selectFrom('templates').select(['id', 'status']).where('id', '=', source.template_id).executeTakeFirst();
    if (template?.status !== 'approved') throw new AppError('NOT_FOUND', `Template ${source.template_id} not found or not approved`);
    return this.db.transaction().execute(async (tx) => {
      const row = await repo.insert(tx, tenantId, {
        id: randomUUID(), name: input.name ?? `${source.name} (retarget)`.slice(0, 120), description: source.description, status: 'DRAFT',
        template: { id: source.template_id, template_name: source.template_name ?? '', category: source.template_category ?? '', language: source.template_language ?? '' },
        variableMapping: source.variable_mapping ?? null, batchSize: source.batch_size, groups: [], sources: [], scheduledAt: null, retargetedFrom: source.id,
        sendWindow: (source.send_window ?? null) as StoredSendWindow | null,
      });
      // Skipped as any MARKETING audience is (opted out since, US numbers, frequency cap).
      const excluded = await exclusionsFor(tx, tenantId, source.template_id, source.template_category);
      const chosen = sql`r.campaign_id = ${source.id}::uuid AND r.tenant_id = ${tenantId}::uuid AND ${segmentCondition(segment)}
          AND (${named.length === 0} OR r.error_code = ANY(${codes}::int[]) OR (${named.includes(null)} AND r.error_code IS NULL))`;
      // Contacts archived since are out, as they are of every audience.
      const live = sql`JOIN contacts c ON c.id = r.contact_id AND c.tenant_id = r.tenant_id AND c.deleted_at IS NULL`;
      const window = await windowColumns(tx, row, sql`campaign_recipients r ${live} WHERE ${chosen}`);
      const inserted = await sql`
        ${excluded.with}
        INSERT INTO campaign_recipients (id, tenant_id, campaign_id, contact_id, phone, status, skip_reason, time_zone, not_before)
        SELECT uuid_v7(), r.tenant_id, ${row.id}::uuid, r.contact_id, r.phone, CASE WHEN x.reason IS NULL THEN 'pending' ELSE 'skipped' END, x.reason,
          ${window.zone}, CASE WHEN x.reason IS NULL THEN ${window.notBefore} END
        FROM campaign_recipients r ${live}
        ${excluded.join} ${window.join} CROSS JOIN LATERAL (SELECT ${excluded.reason} AS reason) x
        WHERE ${chosen}`.execute(tx);
      const total = Number(inserted.numAffectedRows ?? 0);
      // Nothing to send: refused, and the transaction takes the new campaign back with it.
      if (total === 0) {
        if (named.length > 0) throw validationError('No failed recipient of the campaign has these error codes', ['body', 'error_codes'], input.error_codes ?? null);
        // Without a segment, as before: the failed recipients are what the path names.
        throw validationError(`The campaign has no ${SEGMENT_WORDS[segment]} to retarget`, input.segment ? ['body', 'segment'] : ['path', 'id'], input.segment ?? id);
      }
      await recordAudiencePrefixes(tx, row.id);
      const skipped = excluded.applies ? await countSkipped(tx, row.id) : 0;
      const materialised = await tx.updateTable('campaigns')
        .set({ total_recipients: total, pending_count: total - skipped, skipped_count: skipped, materialised_at: new Date() })
        .where('id', '=', row.id).returningAll().executeTakeFirstOrThrow();
      await recordEvents(tx, tenantId, [{ type: 'campaign.created', data: campaignEventData(materialised) }]);
      const campaign = toCampaign(materialised);
      await completeIdempotencyKey(tx, campaign);
      return campaign;
    });
  }
}
