import { sql, type RawBuilder } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import { roundMoney, type RateCard } from '../pricing/rate-card.ts';
import { exclusionsFor } from './campaigns.exclusions.ts';
import { audienceCondition, type CampaignRow } from './campaigns.repository.ts';

/**
 * A campaign's cost: `estimated` before sending (its recipients by market times the rate of the
 * template's category on the card in effect now), `spent` from the priced callbacks of its messages
 * (running sums: campaign_costs plus the moves not yet folded, a few rows whatever the size).
 */

/** Recipients counted by phone prefix: `+` and four digits tell every market apart (+1 area codes, +7 7 Kazakhstan). */
interface PrefixCount { prefix: string; sample_phone: string; recipients: number }

/**
 * The audience's recipients grouped by phone prefix, over `source`: a FROM and WHERE whose rows
 * (alias c) have a `phone`, after `with` (a leading WITH clause, or empty). One statement however
 * large the audience.
 */
export function prefixCounts(source: RawBuilder<unknown>, withClause: RawBuilder<unknown> = sql``) {
  return sql<PrefixCount>`${withClause} SELECT left(c.phone, 5) AS prefix, min(c.phone) AS sample_phone, count(*)::int AS recipients FROM ${source} GROUP BY 1`;
}

/** A materialised campaign's recipients that will be sent to (skipped ones are not). */
const recipientsSource = (campaignId: string) => sql`campaign_recipients c WHERE c.campaign_id = ${campaignId}::uuid AND c.status <> 'skipped'`;

/** A campaign not yet materialised: its audience resolved now, without those materialising it would skip (a MARKETING campaign's exclusions). */
async function audiencePrefixes(db: Queryable, row: CampaignRow): Promise<PrefixCount[]> {
  const ex = await exclusionsFor(db, row.tenant_id, row.template_id, row.template_category);
  const audience = audienceCondition(row.tenant_id, { groups: row.audience_groups, sources: row.audience_sources });
  const source = ex.applies ? sql`contacts c ${ex.join} WHERE ${audience} AND ${ex.reason} IS NULL` : sql`contacts c WHERE ${audience}`;
  return (await prefixCounts(source, ex.with).execute(db)).rows;
}

/**
 * Keeps the counts by prefix of a campaign's recipients as materialised (after any are skipped),
 * so the estimate of a large campaign reads a few hundred rows instead of its recipients.
 */
export async function recordAudiencePrefixes(tx: Tx, campaignId: string): Promise<void> {
  await sql`
    INSERT INTO campaign_audience_prefixes (campaign_id, prefix, sample_phone, recipients)
    SELECT ${campaignId}::uuid, p.prefix, p.sample_phone, p.recipients FROM (${prefixCounts(recipientsSource(campaignId))}) p
    ON CONFLICT (campaign_id, prefix) DO NOTHING`.execute(tx);
}

async function audienceByPrefix(db: Queryable, row: CampaignRow): Promise<PrefixCount[]> {
  if (row.materialised_at) {
    const kept = await db.selectFrom('campaign_audience_prefixes').select(['prefix', 'sample_phone', 'recipients']).where('campaign_id', '=', row.id).execute();
    // Materialised before the counts were kept (migration 0018): counted from the recipients.
    if (kept.length > 0 || row.total_recipients === 0) return kept;
    return (await prefixCounts(recipientsSource(row.id)).execute(db)).rows;
  }
  if (row.audience_groups.length === 0 && row.audience_sources.length === 0) return [];
  return audiencePrefixes(db, row);
}

export interface MarketEstimate { market: string; recipients: number; rate: number | null; amount: number }
export interface Estimate { currency: string | null; category: string | null; amount: number | null; by_market: MarketEstimate[] }

/** The template's category as the card prices it (authentication-international depends on the business's country: priced as authentication). */
const cardCategory = (templateCategory: string | null) => templateCategory?.toLowerCase() ?? null;

/**
 * Recipients by market times the rate of the template's category, on the card in effect now. A
 * market the card has no rate for counts its recipients at 0 (rate null). No card in effect: null.
 */
export async function estimateCost(db: Queryable, row: CampaignRow, card: RateCard, at = new Date()): Promise<Estimate> {
  const version = card.versionAt(at);
  // The template's category now: Meta may have recategorised it since the campaign was created, and prices it so.
  const template = await db.selectFrom('templates').select('category').where('id', '=', row.template_id).executeTakeFirst();
  const category = cardCategory(template?.category ?? row.template_category);
  if (!version || !category) return { currency: version?.currency ?? null, category, amount: null, by_market: [] };
  const byMarket = new Map<string, MarketEstimate>();
  for (const p of await audienceByPrefix(db, row)) {
    const market = card.marketOf(version, p.sample_phone)?.market ?? 'Other';
    const rate = card.rate(version, p.sample_phone, category)?.rate ?? null;
    const entry = byMarket.get(market) ?? { market, recipients: 0, rate, amount: 0 };
    entry.recipients += p.recipients;
    entry.amount += p.recipients * (rate ?? 0);
    byMarket.set(market, entry);
  }
  const markets = [...byMarket.values()].sort((a, b) => b.amount - a.amount || a.market.localeCompare(b.market));
  const amount = markets.reduce((sum, m) => sum + m.amount, 0);
  return { currency: version.currency, category, amount: roundMoney(amount), by_market: markets.map((m) => ({ ...m, amount: roundMoney(m.amount) })) };
}

export interface Spent { currency: string; category: string; messages: number; amount: number }

/** The campaign's spend per pricing category and currency: folded sums plus the moves not yet folded. */
export async function spentOf(db: Queryable, campaignId: string): Promise<Spent[]> {
  const { rows } = await sql<{ category: string; currency: string; messages: number; amount: string }>`
    SELECT category, currency, sum(messages)::int AS messages, sum(amount)::text AS amount FROM (
      SELECT category, currency, messages, amount FROM campaign_costs WHERE campaign_id = ${campaignId}::uuid
      UNION ALL
      SELECT category, currency, messages, amount FROM campaign_cost_moves WHERE campaign_id = ${campaignId}::uuid) s
    GROUP BY category, currency ORDER BY category, currency`.execute(db);
  return rows.map((r) => ({ ...r, amount: Number(r.amount) }));
}

export interface CampaignCost {
  currency: string | null;
  estimated: number | null;
  spent: number;
  by_category: Record<string, { messages: number; amount: number }>;
}

/** GET one campaign's `cost`: amounts in the card's currency (a spend in another currency, from an earlier card, is left out). */
export async function campaignCost(db: Queryable, row: CampaignRow, card: RateCard, estimate?: Estimate): Promise<CampaignCost> {
  const est = estimate ?? await estimateCost(db, row, card);
  const spent = await spentOf(db, row.id);
  const currency = est.currency ?? spent[0]?.currency ?? null;
  const mine = spent.filter((s) => s.currency === currency);
  return {
    currency,
    estimated: est.amount,
    spent: roundMoney(mine.reduce((sum, s) => sum + s.amount, 0)),
    by_category: Object.fromEntries(mine.map((s) => [s.category, { messages: s.messages, amount: roundMoney(s.amount) }])),
  };
}

/**
 * Folds the recorded spend moves into campaign_costs (the worker, every COUNTER_FOLD_MS). Moves are
 * taken by the DELETE, so two folds never add one twice; sums are upserted in key order (no deadlock).
 */
export async function foldCostMoves(tx: Tx): Promise<void> {
  await sql`
    WITH moved AS (DELETE FROM campaign_cost_moves RETURNING *)
    INSERT INTO campaign_costs (campaign_id, category, currency, messages, amount)
    SELECT m.campaign_id, m.category, m.currency, sum(m.messages)::int, sum(m.amount) FROM moved m
    -- A campaign deleted since: its moves go with it.
    WHERE EXISTS (SELECT 1 FROM campaigns c WHERE c.id = m.campaign_id)
    GROUP BY m.campaign_id, m.category, m.currency ORDER BY m.campaign_id, m.category, m.currency
    ON CONFLICT (campaign_id, category, currency) DO UPDATE SET
      messages = campaign_costs.messages + excluded.messages, amount = campaign_costs.amount + excluded.amount`.execute(tx);
}
