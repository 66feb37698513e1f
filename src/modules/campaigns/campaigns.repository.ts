import { sql, type RawBuilder, type Selectable } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { CampaignsTable } from '../../db/schema.ts';
import { recordAudiencePrefixes } from './campaigns.cost.ts';
import { exclusionsFor } from './campaigns.exclusions.ts';
import { countTransitions } from './campaigns.metrics.ts';
import { TRANSITIONS, type CampaignAction } from './campaigns.states.ts';
import { audienceZones, materialisedWindow, type StoredSendWindow } from './send-window.ts';

export type CampaignRow = Selectable<CampaignsTable>;

export interface NewCampaign {
  id: string;
  name: string;
  description: string | null;
  status: 'DRAFT' | 'SCHEDULED';
  template: { id: string; template_name: string; category: string; language: string };
  variableMapping: unknown | null;
  batchSize: number;
  groups: string[];
  sources: string[];
  scheduledAt: Date | null;
  retargetedFrom?: string | null;
  /** Recipients Meta deferred (131049) are retried later (default) or failed at once. */
  retryDeferred?: boolean;
  sendWindow?: StoredSendWindow | null;
}

export interface TransitionSet {
  paused_reason?: string | null;
  scheduled_at?: Date;
  started_at?: Date;
  completed_at?: Date;
  failure_reason?: string;
}

export interface Audience {
  groups: string[];
  sources: string[];
}

/**
 * The audience as a condition on `contacts` (alias c): a live contact of the tenant in any of the
 * groups (tags, GIN index) or any of the sources. Phones are unique among a tenant's live contacts,
 * so each phone appears once.
 */
export function audienceCondition(tenantId: string, audience: Audience) {
  return sql`c.tenant_id = ${tenantId}::uuid AND c.deleted_at IS NULL
    AND (c.tags && ${audience.groups}::text[] OR c.source = ANY(${audience.sources}::text[]))`;
}

/** The campaign counters (`<name>_count` columns), each with a column of the same name in campaign_counter_moves. */
export const COUNTERS = ['pending', 'sent', 'delivered', 'read', 'failed', 'held', 'deferred', 'skipped', 'replied', 'clicked'] as const;
export type Counter = (typeof COUNTERS)[number];

/** Campaign rows (alias c) with the sums of their counter moves not yet folded, in one statement (one snapshot). */
function selectWithUnfoldedMoves(db: Queryable) {
  return db.selectFrom('campaigns as c')
    .leftJoinLateral((eb) => eb.selectFrom('campaign_counter_moves as m').whereRef('m.campaign_id', '=', 'c.id')
      .select(COUNTERS.map((k) => sql<number>`coalesce(sum(m.${sql.ref(k)}), 0)::int`.as(`unfolded_${k}`))).as('u'), (join) => join.onTrue())
    .selectAll('c')
    .select(COUNTERS.map((k) => `u.unfolded_${k}` as const));
}

function addUnfoldedMoves(r: CampaignRow & Partial<Record<`unfolded_${Counter}`, number | null>>): CampaignRow {
  const row: Record<string, unknown> = { ...r };
  for (const k of COUNTERS) {
    row[`${k}_count`] = (r[`${k}_count`] as number) + (r[`unfolded_${k}`] ?? 0);
    delete row[`unfolded_${k}`];
  }
  return row as unknown as CampaignRow;
}

/** Materialising at least this many recipients refreshes the planner's statistics of the table. */
export const ANALYZE_AFTER_ROWS = 10_000;

export const campaignsRepository = {
  async insert(db: Queryable, tenantId: string, c: NewCampaign): Promise<CampaignRow> {
    return db.insertInto('campaigns').values({
      id: c.id, tenant_id: tenantId, name: c.name, description: c.description, status: c.status,
      template_id: c.template.id, template_name: c.template.template_name, template_category: c.template.category, template_language: c.template.language,
      variable_mapping: c.variableMapping === null ? null : JSON.stringify(c.variableMapping), batch_size: c.batchSize,
      audience_groups: c.groups, audience_sources: c.sources, scheduled_at: c.scheduledAt, retargeted_from: c.retargetedFrom ?? null,
      retry_deferred: c.retryDeferred ?? true, send_window: c.sendWindow ? JSON.stringify(c.sendWindow) : null,
    }).returningAll().executeTakeFirstOrThrow();
  },

  async findById(db: Queryable, tenantId: string, id: string): Promise<CampaignRow | undefined> {
    const row = await selectWithUnfoldedMoves(db).where('c.tenant_id', '=', tenantId).where('c.id', '=', id).executeTakeFirst();
    return row && addUnfoldedMoves(row);
  },

  async list(db: Queryable, tenantId: string): Promise<CampaignRow[]> {
    const rows = await selectWithUnfoldedMoves(db).where('c.tenant_id', '=', tenantId).orderBy('c.created_at', 'desc').orderBy('c.id', 'desc').execute();
    return rows.map(addUnfoldedMoves);
  },

  /**
   * One state-machine move (campaigns.states.ts) as one conditional UPDATE: it happens only if the
   * campaign is still in a status the action is allowed from. Undefined when it was not.
   */
  async transition(tx: Tx, tenantId: string, id: string, action: CampaignAction, set: TransitionSet = {}): Promise<CampaignRow | undefined> {
    const { from, to } = TRANSITIONS[action];
    await foldCounterMoves(tx, [id]);
    return tx.updateTable('campaigns').set({ ...set, status: to, updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('status', 'in', [...from])
      .returningAll().executeTakeFirst();
  },

  async setAudience(tx: Tx, tenantId: string, id: string, audience: Audience, statuses: readonly string[]): Promise<CampaignRow | undefined> {
    await foldCounterMoves(tx, [id]);
    return tx.updateTable('campaigns').set({ audience_groups: audience.groups, audience_sources: audience.sources, updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('status', 'in', [...statuses])
      .returningAll().executeTakeFirst();
  },

  /**
   * Materialises the audience into recipient rows with one INSERT ... SELECT, once per campaign
   * (materialised_at), and fixes total_recipients. Recipients a MARKETING campaign must not send to
   * (campaigns.exclusions.ts) are written as skipped with their reason. Returns the campaign row.
   */
  async materialise(tx: Tx, campaign: CampaignRow): Promise<CampaignRow> {
    if (campaign.materialised_at) return campaign;
    const { total, skipped } = await insertAudience(tx, campaign);
    await recordAudiencePrefixes(tx, campaign.id);
    return tx.updateTable('campaigns')
      .set({ total_recipients: total, pending_count: total - skipped, skipped_count: skipped, materialised_at: new Date(), updated_at: new Date() })
      .where('id', '=', campaign.id).returningAll().executeTakeFirstOrThrow();
  },

  /**
   * A materialised (PAUSED) campaign's audience replaced (spec 3.1): the recipients it never tried
   * to send to (pending or skipped, no attempt) give way to the new audience's, each phone still
   * once per campaign, so those it has sent to (or tried) stay as they are. The counters and the
   * audience's prefixes are counted again from the rows. Runs after `setAudience` in its transaction.
   */
  async replaceAudience(tx: Tx, campaign: CampaignRow): Promise<CampaignRow> {
    await sql`DELETE FROM campaign_recipients
      WHERE campaign_id = ${campaign.id}::uuid AND status IN ('pending', 'skipped') AND attempts = 0`.execute(tx);
    await insertAudience(tx, campaign);
    await tx.deleteFrom('campaign_audience_prefixes').where('campaign_id', '=', campaign.id).execute();
    await recordAudiencePrefixes(tx, campaign.id);
    const row = await campaignsRepository.recountStats(tx, campaign.tenant_id, campaign.id);
    return row!;
  },

  /** Recomputes the status counters from the recipient rows (refresh-metrics). */
  async recountStats(tx: Tx, tenantId: string, id: string): Promise<CampaignRow | undefined> {
    // Held from before the count: no fold of this campaign's moves can commit between the count's
    // snapshot and the removal of the moves that count already covers.
    const locked = await sql`SELECT id FROM campaigns WHERE tenant_id = ${tenantId}::uuid AND id = ${id}::uuid FOR NO KEY UPDATE`.execute(tx);
    if (locked.rows.length === 0) return undefined;
    const { rows } = await sql<CampaignRow>`
      WITH covered AS (DELETE FROM campaign_counter_moves WHERE campaign_id = ${id}::uuid)
      UPDATE campaigns c SET
        pending_count = s.pending, sent_count = s.sent, delivered_count = s.delivered, read_count = s.read, failed_count = s.failed,
        held_count = s.held, deferred_count = s.deferred, skipped_count = s.skipped, replied_count = s.replied, clicked_count = s.clicked,
        total_recipients = CASE WHEN c.materialised_at IS NULL THEN c.total_recipients ELSE s.total END
      FROM (
        SELECT count(*) FILTER (WHERE status IN ('pending', 'sending', 'held', 'deferred'))::int AS pending,
               count(*) FILTER (WHERE status = 'sent')::int AS sent,
               count(*) FILTER (WHERE status = 'delivered')::int AS delivered,
               count(*) FILTER (WHERE status = 'read')::int AS read,
               count(*) FILTER (WHERE status = 'failed')::int AS failed,
               count(*) FILTER (WHERE status = 'held')::int AS held,
               count(*) FILTER (WHERE status = 'deferred')::int AS deferred,
               count(*) FILTER (WHERE status = 'skipped')::int AS skipped,
               count(replied_at)::int AS replied,
               count(clicked_at)::int AS clicked,
               count(*)::int AS total
        FROM campaign_recipients WHERE campaign_id = ${id}::uuid AND tenant_id = ${tenantId}::uuid
      ) s
      WHERE c.tenant_id = ${tenantId}::uuid AND c.id = ${id}::uuid
      RETURNING c.*`.execute(tx);
    return rows[0];
  },
};

/**
 * Inserts the campaign's audience as recipient rows with one INSERT ... SELECT (phones already in
 * the campaign are left as they are); recipients a MARKETING campaign must not send to
 * (campaigns.exclusions.ts) are written as skipped with their reason. Returns the rows inserted and
 * the campaign's skipped recipients.
 */
async function insertAudience(tx: Tx, campaign: CampaignRow): Promise<{ total: number; skipped: number }> {
  const audience = { groups: campaign.audience_groups, sources: campaign.audience_sources };
  const excluded = await exclusionsFor(tx, campaign.tenant_id, campaign.template_id, campaign.template_category);
  const window = await windowColumns(tx, campaign, sql`contacts c WHERE ${audienceCondition(campaign.tenant_id, audience)}`);
  // The row count comes with the command's completion: no RETURNING of a million rows to count them.
  const inserted = await sql`
    ${excluded.with}
    INSERT INTO campaign_recipients (id, tenant_id, campaign_id, contact_id, phone, status, skip_reason, time_zone, not_before)
    SELECT uuid_v7(), c.tenant_id, ${campaign.id}::uuid, c.id, c.phone, CASE WHEN x.reason IS NULL THEN 'pending' ELSE 'skipped' END, x.reason,
      ${window.zone}, CASE WHEN x.reason IS NULL THEN ${window.notBefore} END
    FROM contacts c ${excluded.join} ${window.join} CROSS JOIN LATERAL (SELECT ${excluded.reason} AS reason) x
    WHERE ${audienceCondition(campaign.tenant_id, audience)}
    ON CONFLICT (campaign_id, phone) DO NOTHING`.execute(tx);
  const total = Number(inserted.numAffectedRows ?? 0);
  const skipped = excluded.applies ? await countSkipped(tx, campaign.id) : 0;
  // The planner must see a large audience from the first claim: until the table is analysed it
  // keeps the row count of the last VACUUM or ANALYZE (autovacuum may be off or behind), and with
  // a count of none it walked the whole primary key for every batch of statuses of a million-row
  // campaign. In this transaction, ANALYZE samples the new rows too; a sample of 3,000 rows (not
  // 30,000) gives the row count those plans need without reading every page of a million rows.
  if (total >= ANALYZE_AFTER_ROWS) {
    await sql`SET LOCAL default_statistics_target = 10`.execute(tx);
    await sql`ANALYZE campaign_recipients`.execute(tx);
  }
  return { total, skipped };
}

/**
 * What materialising a campaign's recipients from `source` (a FROM and WHERE over contacts, alias
 * c) adds for its send window (send-window.ts): each recipient's zone and, outside its window now,
 * its next opening as not_before. Without a window: nulls.
 */
export async function windowColumns(db: Queryable, campaign: CampaignRow, source: ReturnType<typeof sql>) {
  const window = campaign.send_window as StoredSendWindow | null;
  if (!window) return { join: sql``, zone: sql`NULL::text`, notBefore: sql`NULL::timestamptz` };
  const zones = window.time_zone === 'recipient' ? await audienceZones(db, source) : { byKey: {}, counts: new Map<string, number>() };
  return materialisedWindow(window, zones);
}

/** Skipped recipients of a campaign, by the status index. */
export async function countSkipped(db: Queryable, campaignId: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`SELECT count(*)::int AS n FROM campaign_recipients WHERE campaign_id = ${campaignId}::uuid AND status = 'skipped'`.execute(db);
  return rows[0].n;
}

/**
 * The counters a recipient status counts in: `pending` covers every recipient not yet sent (sending,
 * and those Meta held or deferred), which `held` and `deferred` also count on their own.
 */
export const COUNTED_IN: Record<string, readonly Counter[]> = {
  pending: ['pending'], sending: ['pending'], held: ['pending', 'held'], deferred: ['pending', 'deferred'], skipped: ['skipped'],
  sent: ['sent'], delivered: ['delivered'], read: ['read'], failed: ['failed'],
};

/** A recipient that moved, as a statement reports it. */
export interface MovedRecipient { campaign_id: string; old: string; status: string }

/**
 * Runs `moving`, CTEs the last of which (`moved`) returns the recipients that moved (campaign_id,
 * old, status, and whatever else its caller needs), and records in the same statement how they move
 * their campaigns' counters: one insert-only row per campaign whose counters change
 * (campaign_counter_moves), so the transactions of callbacks and outcomes never wait on the
 * campaign row. Returns the rows of `moved`.
 */
export async function withCounterMoves<R extends MovedRecipient = MovedRecipient>(tx: Tx, moving: RawBuilder<unknown>): Promise<R[]> {
  const delta = (k: Counter) => {
    const counting = Object.keys(COUNTED_IN).filter((status) => COUNTED_IN[status].includes(k));
    if (counting.length === 0) return sql`0`;
    const list = sql.join(counting.map((status) => sql.lit(status)));
    return sql`sum((CASE WHEN m.status IN (${list}) THEN 1 ELSE 0 END) - (CASE WHEN m.old IN (${list}) THEN 1 ELSE 0 END))::int`;
  };
  const { rows } = await sql<R>`
    WITH ${moving},
    deltas AS (
      SELECT m.campaign_id, ${sql.join(COUNTERS.map((k) => sql`${delta(k)} AS ${sql.ref(k)}`))}
      FROM moved m WHERE m.old <> m.status GROUP BY m.campaign_id),
    counted AS (
      INSERT INTO campaign_counter_moves (campaign_id, ${sql.join(COUNTERS.map((k) => sql.ref(k)))})
      SELECT * FROM deltas d WHERE ${sql.join(COUNTERS.map((k) => sql`d.${sql.ref(k)} <> 0`), sql` OR `)})
    SELECT * FROM moved`.execute(tx);
  // A status COUNTED_IN does not know would count in nothing: fail (and roll back) instead.
  const unknown = rows.find((r) => !(r.old in COUNTED_IN) || !(r.status in COUNTED_IN));
  if (unknown) throw new Error(`recipient status move ${unknown.old} -> ${unknown.status} has no counters`);
  countTransitions(rows.map((r) => ({ from: r.old, to: r.status })));
  return rows;
}

/** withCounterMoves for moves already made: (campaign, from, to) triples, one per recipient. */
export async function recordCounterMoves(tx: Tx, moves: { campaignId: string; from: string; to: string }[]): Promise<void> {
  // Moves that change no counter (sending -> pending, say) need no statement, only their metric.
  if (moves.every((m) => COUNTED_IN[m.from].join() === COUNTED_IN[m.to].join())) {
    countTransitions(moves);
    return;
  }
  await withCounterMoves(tx, sql`moved AS (
    SELECT * FROM unnest(${moves.map((m) => m.campaignId)}::uuid[], ${moves.map((m) => m.from)}::text[], ${moves.map((m) => m.to)}::text[]) AS m(campaign_id, old, status))`);
}

/**
 * Folds the recorded counter moves into their campaigns' counters: those of `only` (waiting for
 * their rows), or of every campaign whose row is not locked (the background fold). A fold holds
 * the campaign row from before it takes the moves, so a recount (which holds it too) never meets
 * a fold half done, and counters plus unfolded moves always equal the recipient rows.
 */
export async function foldCounterMoves(tx: Tx, only?: string[]): Promise<number> {
  const { rows: locked } = await sql<{ id: string }>`
    SELECT c.id FROM campaigns c
    WHERE c.id IN (SELECT m.campaign_id FROM campaign_counter_moves m ${only ? sql`WHERE m.campaign_id = ANY(${only}::uuid[])` : sql``})
    ORDER BY c.id FOR NO KEY UPDATE ${only ? sql`` : sql`SKIP LOCKED`}`.execute(tx);
  if (locked.length === 0) return 0;
  await sql`
    WITH moved AS (DELETE FROM campaign_counter_moves WHERE campaign_id = ANY(${locked.map((r) => r.id)}::uuid[]) RETURNING *),
    sums AS (
      SELECT campaign_id, ${sql.join(COUNTERS.map((k) => sql`sum(${sql.ref(k)})::int AS ${sql.ref(k)}`))}
      FROM moved GROUP BY campaign_id)
    UPDATE campaigns c SET ${sql.join(COUNTERS.map((k) => sql`${sql.ref(`${k}_count`)} = c.${sql.ref(`${k}_count`)} + sums.${sql.ref(k)}`))}
    FROM sums WHERE c.id = sums.campaign_id`.execute(tx);
  return locked.length;
}
