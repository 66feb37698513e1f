import { sql, type RawBuilder } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import { marketingSettingsRepository } from '../contacts/marketing-settings.ts';
import { unitedStatesAreaCodes } from '../contacts/phone.ts';

/** Why a recipient of a MARKETING campaign is skipped (never sent, never billed). */
export const SKIP_REASONS = ['opted_out', 'marketing_blocked_country', 'frequency_cap'] as const;
export type SkipReason = (typeof SKIP_REASONS)[number];
export type ExcludedCounts = Record<SkipReason, number>;

export const NONE_EXCLUDED: ExcludedCounts = Object.freeze({ opted_out: 0, marketing_blocked_country: 0, frequency_cap: 0 });

/**
 * The skip reason of each contact (alias c) of a campaign, as SQL to splice into a query over
 * contacts: `with` (a leading WITH clause, or empty), `join` (after the FROM item of c) and
 * `reason` (text, NULL when the contact is sent to). Only MARKETING templates skip anyone (Meta's
 * opt-outs and caps leave utility and authentication alone). In order: the contact opted out;
 * a US number while the tenant blocks them (Meta fails them with 131049); the tenant's frequency
 * cap reached by the marketing templates sent to that phone (campaigns and single sends) in its
 * window, counted once for the whole audience from the tenant's recent messages.
 */
export interface Exclusions {
  with: RawBuilder<unknown>;
  join: RawBuilder<unknown>;
  reason: RawBuilder<string | null>;
  /** False for a template that is not MARKETING: nobody is skipped. */
  applies: boolean;
}

const NO_EXCLUSIONS: Exclusions = { with: sql``, join: sql``, reason: sql<string | null>`NULL::text`, applies: false };

export async function exclusionsFor(db: Queryable, tenantId: string, templateId: string, fallbackCategory: string | null): Promise<Exclusions> {
  // The template's category now: Meta may have recategorised it since the campaign was created.
  const template = await db.selectFrom('templates').select('category').where('id', '=', templateId).executeTakeFirst();
  if ((template?.category ?? fallbackCategory) !== 'MARKETING') return NO_EXCLUSIONS;
  const settings = await marketingSettingsRepository.get(db, tenantId);
  const cap = settings.frequency_cap;
  const whens = [sql`WHEN c.marketing_opt_out THEN 'opted_out'`];
  if (settings.block_us_marketing) {
    whens.push(sql`WHEN left(c.phone, 2) = '+1' AND substr(c.phone, 3, 3) = ANY(${unitedStatesAreaCodes()}::text[]) THEN 'marketing_blocked_country'`);
  }
  if (cap) whens.push(sql`WHEN capped.to_phone IS NOT NULL THEN 'frequency_cap'`);
  return {
    applies: true,
    // Sent means the upstream took it (it has an upstream id) and it did not fail.
    with: cap ? sql`WITH capped AS MATERIALIZED (
        SELECT m.to_phone FROM messages m
        WHERE m.tenant_id = ${tenantId}::uuid AND m.created_at > now() - ${cap.days} * interval '1 day'
          AND m.upstream_message_id IS NOT NULL AND m.status <> 'failed'
          AND m.template_id IN (SELECT t.id FROM templates t WHERE t.tenant_id = ${tenantId}::uuid AND t.category = 'MARKETING')
        GROUP BY m.to_phone HAVING count(*) >= ${cap.max_messages})` : sql``,
    join: cap ? sql`LEFT JOIN capped ON capped.to_phone = c.phone` : sql``,
    reason: sql<string | null>`(CASE ${sql.join(whens, sql` `)} END)`,
  };
}

/** Counts by reason from rows of (reason, n). */
export function excludedCounts(rows: { reason: string | null; n: number }[]): ExcludedCounts {
  const counts: ExcludedCounts = { ...NONE_EXCLUDED };
  for (const r of rows) if (r.reason && r.reason in counts) counts[r.reason as SkipReason] += Number(r.n);
  return counts;
}

export const totalExcluded = (counts: ExcludedCounts) => SKIP_REASONS.reduce((n, k) => n + counts[k], 0);
