import { sql, type Selectable } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { CampaignsTable } from '../../db/schema.ts';
import { TRANSITIONS, type CampaignAction } from './campaigns.states.ts';

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
}

export interface TransitionSet {
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

/** Campaign rows (alias c) with the sums of their counter moves not yet folded, in one statement (one snapshot). */
function selectWithUnfoldedMoves(db: Queryable) {
  return db.selectFrom('campaigns as c')
    .leftJoinLateral((eb) => eb.selectFrom('campaign_counter_moves as m').whereRef('m.campaign_id', '=', 'c.id').select([
      sql<number>`coalesce(sum(m.pending), 0)::int`.as('pending'), sql<number>`coalesce(sum(m.sent), 0)::int`.as('sent'),
      sql<number>`coalesce(sum(m.delivered), 0)::int`.as('delivered'), sql<number>`coalesce(sum(m.read), 0)::int`.as('read'),
      sql<number>`coalesce(sum(m.failed), 0)::int`.as('failed'),
    ]).as('u'), (join) => join.onTrue())
    .selectAll('c')
    .select(['u.pending as unfolded_pending', 'u.sent as unfolded_sent', 'u.delivered as unfolded_delivered', 'u.read as unfolded_read', 'u.failed as unfolded_failed']);
}

type Unfolded = Record<'unfolded_pending' | 'unfolded_sent' | 'unfolded_delivered' | 'unfolded_read' | 'unfolded_failed', number | null>;

function addUnfoldedMoves(r: CampaignRow & Unfolded): CampaignRow {
  const { unfolded_pending, unfolded_sent, unfolded_delivered, unfolded_read, unfolded_failed, ...row } = r;
  return {
    ...row,
    pending_count: row.pending_count + (unfolded_pending ?? 0), sent_count: row.sent_count + (unfolded_sent ?? 0),
    delivered_count: row.delivered_count + (unfolded_delivered ?? 0), read_count: row.read_count + (unfolded_read ?? 0),
    failed_count: row.failed_count + (unfolded_failed ?? 0),
  };
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
   * (materialised_at), and fixes total_recipients. Returns the campaign row.
   */
  async materialise(tx: Tx, campaign: CampaignRow): Promise<CampaignRow> {
    if (campaign.materialised_at) return campaign;
    const audience = { groups: campaign.audience_groups, sources: campaign.audience_sources };
    // The row count comes with the command's completion: no RETURNING of a million rows to count them.
    const inserted = await sql`
      INSERT INTO campaign_recipients (id, tenant_id, campaign_id, contact_id, phone)
      SELECT uuid_v7(), c.tenant_id, ${campaign.id}::uuid, c.id, c.phone
      FROM contacts c WHERE ${audienceCondition(campaign.tenant_id, audience)}
      ON CONFLICT (campaign_id, phone) DO NOTHING`.execute(tx);
    const total = Number(inserted.numAffectedRows ?? 0);
    // The planner must see a large audience from the first claim: until the table is analysed it
    // keeps the row count of the last VACUUM or ANALYZE (autovacuum may be off or behind), and with
    // a count of none it walked the whole primary key for every batch of statuses of a million-row
    // campaign. In this transaction, ANALYZE samples the new rows too; a sample of 3,000 rows (not
    // 30,000) gives the row count those plans need without reading every page of a million rows.
    if (total >= ANALYZE_AFTER_ROWS) {
      await sql`SET LOCAL default_statistics_target = 10`.execute(tx);
      await sql`ANALYZE campaign_recipients`.execute(tx);
    }
    return tx.updateTable('campaigns')
      .set({ total_recipients: total, pending_count: total, materialised_at: new Date(), updated_at: new Date() })
      .where('id', '=', campaign.id).returningAll().executeTakeFirstOrThrow();
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
        total_recipients = CASE WHEN c.materialised_at IS NULL THEN c.total_recipients ELSE s.total END
      FROM (
        SELECT count(*) FILTER (WHERE status IN ('pending', 'sending'))::int AS pending,
               count(*) FILTER (WHERE status = 'sent')::int AS sent,
               count(*) FILTER (WHERE status = 'delivered')::int AS delivered,
               count(*) FILTER (WHERE status = 'read')::int AS read,
               count(*) FILTER (WHERE status = 'failed')::int AS failed,
               count(*)::int AS total
        FROM campaign_recipients WHERE campaign_id = ${id}::uuid AND tenant_id = ${tenantId}::uuid
      ) s
      WHERE c.tenant_id = ${tenantId}::uuid AND c.id = ${id}::uuid
      RETURNING c.*`.execute(tx);
    return rows[0];
  },
};

/** How a recipient status moves the campaign's counters (pending covers pending and sending). */
export const COUNTER_OF: Record<string, 'pending' | 'sent' | 'delivered' | 'read' | 'failed'> = {
  pending: 'pending', sending: 'pending', sent: 'sent', delivered: 'delivered', read: 'read', failed: 'failed',
};

/**
 * Records how recipients that moved from one status to another move their campaigns' counters:
 * one insert-only row per campaign (campaign_counter_moves), so the transactions of callbacks and
 * outcomes never wait on the campaign row. `moves` are (campaign, from, to) triples, one per recipient.
 */
export async function recordCounterMoves(tx: Tx, moves: { campaignId: string; from: string; to: string }[]): Promise<void> {
  const deltas = new Map<string, Record<'pending' | 'sent' | 'delivered' | 'read' | 'failed', number>>();
  for (const m of moves) {
    const from = COUNTER_OF[m.from];
    const to = COUNTER_OF[m.to];
    if (from === to) continue;
    const d = deltas.get(m.campaignId) ?? { pending: 0, sent: 0, delivered: 0, read: 0, failed: 0 };
    d[from]--;
    d[to]++;
    deltas.set(m.campaignId, d);
  }
  if (deltas.size === 0) return;
  await tx.insertInto('campaign_counter_moves').values([...deltas].map(([campaign_id, d]) => ({ campaign_id, ...d }))).execute();
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
      SELECT campaign_id, sum(pending)::int AS p, sum(sent)::int AS s, sum(delivered)::int AS d, sum(read)::int AS r, sum(failed)::int AS f
      FROM moved GROUP BY campaign_id)
    UPDATE campaigns c SET
      pending_count = c.pending_count + sums.p, sent_count = c.sent_count + sums.s, delivered_count = c.delivered_count + sums.d,
      read_count = c.read_count + sums.r, failed_count = c.failed_count + sums.f
    FROM sums WHERE c.id = sums.campaign_id`.execute(tx);
  return locked.length;
}
