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
    return db.selectFrom('campaigns').selectAll().where('tenant_id', '=', tenantId).where('id', '=', id).executeTakeFirst();
  },

  async list(db: Queryable, tenantId: string): Promise<CampaignRow[]> {
    return db.selectFrom('campaigns').selectAll().where('tenant_id', '=', tenantId).orderBy('created_at', 'desc').orderBy('id', 'desc').execute();
  },

  /**
   * One state-machine move (campaigns.states.ts) as one conditional UPDATE: it happens only if the
   * campaign is still in a status the action is allowed from. Undefined when it was not.
   */
  async transition(tx: Tx, tenantId: string, id: string, action: CampaignAction, set: TransitionSet = {}): Promise<CampaignRow | undefined> {
    const { from, to } = TRANSITIONS[action];
    return tx.updateTable('campaigns').set({ ...set, status: to, updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('status', 'in', [...from])
      .returningAll().executeTakeFirst();
  },

  async setAudience(tx: Tx, tenantId: string, id: string, audience: Audience, statuses: readonly string[]): Promise<CampaignRow | undefined> {
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
    return tx.updateTable('campaigns')
      .set({ total_recipients: total, pending_count: total, materialised_at: new Date(), updated_at: new Date() })
      .where('id', '=', campaign.id).returningAll().executeTakeFirstOrThrow();
  },

  /** Recomputes the status counters from the recipient rows (refresh-metrics). */
  async recountStats(tx: Tx, tenantId: string, id: string): Promise<CampaignRow | undefined> {
    const { rows } = await sql<CampaignRow>`
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
export const COUNTER_OF: Record<string, 'pending_count' | 'sent_count' | 'delivered_count' | 'read_count' | 'failed_count'> = {
  pending: 'pending_count', sending: 'pending_count', sent: 'sent_count', delivered: 'delivered_count', read: 'read_count', failed: 'failed_count',
};

/**
 * Applies counter deltas for recipients that moved from one status to another, one UPDATE for
 * all campaigns involved. `moves` are (campaign, from, to) triples, one per recipient.
 */
export async function applyCounterMoves(tx: Tx, moves: { campaignId: string; from: string; to: string }[]): Promise<void> {
  const deltas = new Map<string, Record<string, number>>();
  for (const m of moves) {
    const from = COUNTER_OF[m.from];
    const to = COUNTER_OF[m.to];
    if (from === to) continue;
    const d = deltas.get(m.campaignId) ?? { pending_count: 0, sent_count: 0, delivered_count: 0, read_count: 0, failed_count: 0 };
    d[from]--;
    d[to]++;
    deltas.set(m.campaignId, d);
  }
  if (deltas.size === 0) return;
  const values = sql.join([...deltas].map(([id, d]) => sql`(${id}::uuid, ${d.pending_count}::int, ${d.sent_count}::int, ${d.delivered_count}::int, ${d.read_count}::int, ${d.failed_count}::int)`));
  // Locked in id order first, so concurrent writers (callbacks, dispatchers) never deadlock on two campaigns.
  await sql`
    WITH v(id, p, s, d, r, f) AS (VALUES ${values}),
    locked AS (SELECT c.id FROM campaigns c WHERE c.id IN (SELECT id FROM v) ORDER BY c.id FOR UPDATE)
    UPDATE campaigns c SET
      pending_count = c.pending_count + v.p, sent_count = c.sent_count + v.s, delivered_count = c.delivered_count + v.d,
      read_count = c.read_count + v.r, failed_count = c.failed_count + v.f
    FROM v WHERE c.id = v.id AND c.id IN (SELECT id FROM locked)`.execute(tx);
}
