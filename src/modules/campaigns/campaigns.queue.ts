import { sql, type RawBuilder } from 'kysely';
import type { Db, Tx } from '../../db/database.ts';
import { unnestRows } from '../../db/unnest.ts';
import { foldCounterMoves, recordCounterMoves, withCounterMoves, type CampaignRow } from './campaigns.repository.ts';
import { recordTransition } from './campaigns.service.ts';
import { recordEvents, type NewEvent } from '../../events/events.ts';
import { SERVICE_WINDOW_MS } from '../business-accounts/messaging-limit.ts';
import { refusedEvent, STATUS_RANK as MESSAGE_STATUS_RANK } from '../messages/messages.statuses.ts';
import { optOutOnMarketingRefusals } from '../contacts/marketing-consent.ts';
import { claimWaitUntil } from './send-window.ts';
import { plansWithFeature } from '../tenants/plans.ts';

type RefusedRow = Parameters<typeof refusedEvent>[0] & { tenant_id: string; error_code: number | null; error_title: string };

/** Unknown outcomes on an account whose callbacks have not caught up: sent again after this many windows regardless. */
const RECONCILE_FALLBACK = 5;
/** ...and looked at again this often meanwhile (not on every pass: the oldest leases first would starve the rest). */
const RECHECK_MS = 1000;

/**
 * The recipient rows as the dispatcher's work queue (ARCHITECTURE 5). A recipient is claimed
 * (pending -> sending, with a lease) before its upstream call; its id is also its messages row's
 * id and the send's biz_opaque_callback_data, so callbacks and crash reconciliation find it.
 */

/** What the dispatcher needs of a running campaign, with its sending account and template state. */
export interface RunningCampaign {
  id: string;
  tenant_id: string;
  batch_size: number;
  variable_mapping: unknown;
  template_id: string;
  template_name: string;
  language: string;
  template_status: string | null;
  /** MARKETING: a recipient who opted out since materialisation is skipped when claimed. */
  template_category: string | null;
  template_components: unknown[];
  template_waba_id: string | null;
  account_status: string | null;
  waba_id: string | null;
  phone_number_id: string | null;
  access_token_enc: string | null;
  messages_per_second: number | null;
  /** The portfolio's messaging limit (src/modules/business-accounts/messaging-limit.ts); null: unlimited. */
  messaging_limit: number | null;
  /** Recipients Meta deferred (131049) are tried again later, or fail at once. */
  retry_deferred: boolean;
  /** Whether a pending recipient is due now (a pair-rate-limited one waits for its not_before). */
  has_due: boolean;
  /** Recipients pending or sending: none left means the campaign is complete. */
  pending_count: number;
}

export interface ClaimedRecipient {
  id: string;
  contact_id: string | null;
  phone: string;
  attempts: number;
  /** Times Meta deferred this recipient (131049). */
  defers: number;
  first_name: string | null;
  last_name: string | null;
  email: string | null;
  company: string | null;
  job_title: string | null;
  status: string | null;
  source: string | null;
  custom_fields: Record<string, unknown> | null;
}

/**
 * Recipient status order: after the send, its message's order (failed is final); the statuses
 * before it (pending, sending, held, deferred) rank 0. Skipped recipients are never sent.
 */
const STATUS_RANK: Record<string, number> = { pending: 0, sending: 0, held: 0, deferred: 0, ...MESSAGE_STATUS_RANK };
const RANK_SQL = (column: string) => sql.raw(`(CASE ${column} ${Object.entries(STATUS_RANK).filter(([, rank]) => rank > 0).map(([status, rank]) => `WHEN '${status}' THEN ${rank}`).join(' ')} ELSE 0 END)`);

/** Advisory lock namespace of a tenant's messaging-limit claims (the second key is the tenant). */
const LIMIT_LOCK = 23_003;

/** The smallest UUID: a claim from the start of a campaign's recipients. */
export const FIRST_ID = '00000000-0000-0000-0000-000000000000';

const tenantFilter = (alias: string, tenants: string[] | undefined) =>
  tenants ? sql`${sql.ref(`${alias}.tenant_id`)} = ANY(${tenants}::uuid[])` : sql`true`;

/** Whether the claimed recipient `r`'s contact opted out of marketing (only asked for MARKETING campaigns). */
const optedOut = (skip: boolean) => skip ? sql`coalesce((SELECT ct.marketing_opt_out FROM contacts ct WHERE ct.id = r.contact_id), false)` : sql`false`;

/**
 * The claim's CTEs that skip the opted-out rows of `from` (opted_out), with their counter moves,
 * and take them out of the campaign's cost estimate (its recipients by prefix, campaigns.cost.ts);
 * prefixes in order, so two claims never lock two of them the other way round.
 */
const skippedOptedOut = (from: ReturnType<typeof sql>) => sql`
      skipped AS (
        UPDATE campaign_recipients r SET status = 'skipped', skip_reason = 'opted_out', not_before = NULL, updated_at = now()
        FROM ${from} o WHERE r.id = o.id AND o.opted_out
        RETURNING r.campaign_id, r.phone),
      skipped_moves AS (
        INSERT INTO campaign_counter_moves (campaign_id, pending, sent, delivered, read, failed, skipped)
        SELECT campaign_id, -count(*), 0, 0, 0, 0, count(*) FROM skipped GROUP BY campaign_id),
      skipped_prefixes AS (
        SELECT s.campaign_id, left(s.phone, 5) AS prefix, count(*)::int AS n FROM skipped s GROUP BY 1, 2),
      estimate_locked AS (
        SELECT p.campaign_id, p.prefix FROM campaign_audience_prefixes p
        WHERE (p.campaign_id, p.prefix) IN (SELECT campaign_id, prefix FROM skipped_prefixes)
        ORDER BY p.campaign_id, p.prefix FOR UPDATE),
      estimate_moves AS (
        UPDATE campaign_audience_prefixes p SET recipients = greatest(p.recipients - sp.n, 0)
        FROM skipped_prefixes sp, estimate_locked l
        WHERE p.campaign_id = sp.campaign_id AND p.prefix = sp.prefix AND l.campaign_id = p.campaign_id AND l.prefix = p.prefix)`;

/**
 * The claim's CTE that puts back the rows of `from` whose send window is closed now (wait_until,
 * send-window.ts): they stay pending until its next opening.
 */
const waitingForWindow = (from: ReturnType<typeof sql>) => sql`
      waiting AS (
        UPDATE campaign_recipients r SET not_before = o.wait_until, updated_at = now()
        FROM ${from} o WHERE r.id = o.id AND NOT o.opted_out AND o.wait_until IS NOT NULL)`;

/**
 * Who claims (the process's liveness id; null where one process does all the sending) and the
 * claim's slots: the n-th claimed recipient in id order is sent at `startAt + n * intervalMs`.
 */
export interface ClaimSlots { by: string | null; startAt: number; intervalMs: number }
const NO_SLOTS: ClaimSlots = { by: null, startAt: 0, intervalMs: 0 };
const claimStamp = (slots: ClaimSlots) => slots.by === null
  ? sql`claimed_by = NULL, send_at = NULL`
  : sql`claimed_by = ${slots.by}::uuid, send_at = to_timestamp((${slots.startAt}::float8 + (s.rn - 1) * ${slots.intervalMs}::float8) / 1000.0)`;

export const campaignQueue = {
  /** Running campaigns, the longest-waiting first (round robin between campaigns and tenants). */
  async running(db: Db, limit: number, onlyTenants?: string[]): Promise<RunningCampaign[]> {
    const { rows } = await sql<RunningCampaign>`
      SELECT c.id, c.tenant_id, c.batch_size, c.variable_mapping, c.template_id, c.retry_deferred,
        c.pending_count + coalesce((SELECT sum(m.pending) FROM campaign_counter_moves m WHERE m.campaign_id = c.id), 0)::int AS pending_count, t.template_name, t.language,
        t.status AS template_status, t.category AS template_category, t.components AS template_components, t.waba_id AS template_waba_id,
        ba.status AS account_status, ba.waba_id, ba.phone_number_id, ba.access_token_enc, ba.messages_per_second, ba.messaging_limit,
        -- From the newest recipient back: claims take the oldest first, so the index entries they left
        -- behind (until vacuum) lie at the other end instead of being stepped over on every turn.
        (SELECT r.id FROM campaign_recipients r WHERE r.campaign_id = c.id AND r.status = 'pending' AND (r.not_before IS NULL OR r.not_before <= now())
         ORDER BY r.id DESC LIMIT 1) IS NOT NULL AS has_due
      FROM campaigns c
      LEFT JOIN templates t ON t.id = c.template_id
      LEFT JOIN business_accounts ba ON ba.tenant_id = c.tenant_id
      LEFT JOIN campaign_dispatch_turns turn ON turn.campaign_id = c.id
      WHERE c.status = 'RUNNING' AND ${tenantFilter('c', onlyTenants)}
      ORDER BY turn.last_dispatch_at NULLS FIRST
      LIMIT ${limit}`.execute(db);
    return rows;
  },

  /** Stamps the campaigns' turn (kept off the campaign row, which folds and state moves lock). */
  async touch(db: Db, campaignIds: string[]): Promise<void> {
    if (campaignIds.length === 0) return;
    await sql`
      INSERT INTO campaign_dispatch_turns (campaign_id, last_dispatch_at) SELECT unnest(${campaignIds}::uuid[]), now()
      ON CONFLICT (campaign_id) DO UPDATE SET last_dispatch_at = excluded.last_dispatch_at`.execute(db);
  },

  /**
   * Claims up to `limit` due pending recipients of a campaign that is still RUNNING (a paused or
   * stopped campaign gets nothing new), with their contacts' current values, in id order after
   * `after`: a claimer keeps its place instead of stepping again over the index entries of every
   * recipient claimed before (left until vacuum, they made each claim slower than the last).
   * With `skipOptedOut` (MARKETING campaigns), recipients whose contact opted out of marketing
   * since materialisation are skipped instead (opted_out), in the same statement, with their
   * counter moves; they are not returned.
   */
  async claim(db: Db, campaignId: string, limit: number, leaseMs: number, after = FIRST_ID, skipOptedOut = false, slots: ClaimSlots = NO_SLOTS): Promise<ClaimedRecipient[]> {
    const { rows } = await sql<ClaimedRecipient>`
      WITH picked AS (
        SELECT r.id, ${optedOut(skipOptedOut)} AS opted_out, ${claimWaitUntil(campaignId)} AS wait_until
        FROM campaign_recipients r
        WHERE r.campaign_id = ${campaignId}::uuid AND r.status = 'pending' AND r.id > ${after}::uuid AND (r.not_before IS NULL OR r.not_before <= now())
          AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = ${campaignId}::uuid AND c.status = 'RUNNING')
        ORDER BY r.id LIMIT ${limit}
        FOR UPDATE OF r SKIP LOCKED),
      ${skippedOptedOut(sql`picked`)},
      ${waitingForWindow(sql`picked`)},
      claimed AS (
        UPDATE campaign_recipients r SET status = 'sending', attempts = r.attempts + 1, attempted_at = now(),
          lease_until = now() + ${leaseMs} * interval '1 millisecond', not_before = NULL, updated_at = now(), ${claimStamp(slots)}
        FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM picked WHERE NOT opted_out AND wait_until IS NULL) s WHERE r.id = s.id
        RETURNING r.id, r.contact_id, r.phone, r.attempts, r.defers)
      SELECT cl.id, cl.contact_id, cl.phone, cl.attempts, cl.defers, c.first_name, c.last_name, c.email, c.company, c.job_title, c.status, c.source, c.custom_fields
      FROM claimed cl LEFT JOIN contacts c ON c.id = cl.contact_id`.execute(db);
    return rows;
  },

  /**
   * claim() for a tenant whose portfolio has a messaging limit (reference §8): of the due pending
   * recipients, those already counted in the window and those inside a customer service window are
   * claimed as usual; of the others, only as many as the limit still allows, in id order, and they
   * are counted with the claim. The rest stay pending. One transaction holding the tenant's
   * advisory lock, so claims of several workers never count past the limit together.
   */
  async claimWithinLimit(db: Db, tenantId: string, campaignId: string, limit: number, leaseMs: number, messagingLimit: number, windowMs: number, after = FIRST_ID, skipOptedOut = false, slots: ClaimSlots = NO_SLOTS): Promise<ClaimedRecipient[]> {
    const since = sql`now() - ${windowMs} * interval '1 millisecond'`;
    return db.transaction().execute(async (tx) => {
      await sql`SELECT pg_advisory_xact_lock(${LIMIT_LOCK}, hashtext(${tenantId}))`.execute(tx);
      const { rows } = await sql<ClaimedRecipient>`
        WITH used AS (
          SELECT count(*)::int AS n FROM messaging_limit_users u WHERE u.tenant_id = ${tenantId}::uuid AND u.last_at > ${since}),
        candidates AS (
          SELECT r.id, r.phone, ${optedOut(skipOptedOut)} AS opted_out, ${claimWaitUntil(campaignId)} AS wait_until FROM campaign_recipients r
          WHERE r.campaign_id = ${campaignId}::uuid AND r.status = 'pending' AND r.id > ${after}::uuid AND (r.not_before IS NULL OR r.not_before <= now())
            AND EXISTS (SELECT 1 FROM campaigns c WHERE c.id = ${campaignId}::uuid AND c.status = 'RUNNING')
          ORDER BY r.id LIMIT ${limit}
          FOR UPDATE OF r SKIP LOCKED),
        judged AS (
          SELECT cd.id, cd.phone, cd.opted_out, cd.wait_until,
            EXISTS (SELECT 1 FROM inbound_messages i WHERE i.tenant_id = ${tenantId}::uuid AND i.from_phone = cd.phone
              AND i.received_at > now() - ${SERVICE_WINDOW_MS} * interval '1 millisecond') AS in_service,
            EXISTS (SELECT 1 FROM messaging_limit_users u WHERE u.tenant_id = ${tenantId}::uuid AND u.phone = cd.phone AND u.last_at > ${since}) AS counted
          FROM candidates cd),
        ranked AS (
          SELECT j.*, count(*) FILTER (WHERE NOT j.in_service AND NOT j.counted AND NOT j.opted_out AND j.wait_until IS NULL) OVER (ORDER BY j.id) AS new_rank FROM judged j),
        ${skippedOptedOut(sql`judged`)},
        ${waitingForWindow(sql`judged`)},
        picked AS (
          SELECT ranked.id, ranked.phone, ranked.in_service FROM ranked, used
          WHERE NOT ranked.opted_out AND ranked.wait_until IS NULL AND (ranked.in_service OR ranked.counted OR ranked.new_rank <= ${messagingLimit} - used.n)),
        usage AS (
          INSERT INTO messaging_limit_users (tenant_id, phone, last_at)
          SELECT DISTINCT ${tenantId}::uuid, p.phone, now() FROM picked p WHERE NOT p.in_service
          ON CONFLICT (tenant_id, phone) DO UPDATE SET last_at = excluded.last_at),
        claimed AS (
          UPDATE campaign_recipients r SET status = 'sending', attempts = r.attempts + 1, attempted_at = now(),
            lease_until = now() + ${leaseMs} * interval '1 millisecond', not_before = NULL, updated_at = now(), ${claimStamp(slots)}
          FROM (SELECT id, row_number() OVER (ORDER BY id) AS rn FROM picked) s WHERE r.id = s.id
          RETURNING r.id, r.contact_id, r.phone, r.attempts, r.defers)
        SELECT cl.id, cl.contact_id, cl.phone, cl.attempts, cl.defers, c.first_name, c.last_name, c.email, c.company, c.job_title, c.status, c.source, c.custom_fields
        FROM claimed cl LEFT JOIN contacts c ON c.id = cl.contact_id`.execute(tx);
      return rows;
    });
  },

  /**
   * Writes the batch's message rows (one per recipient, same id) just before its upstream calls,
   * for the recipients still held by this claim (`claimant` and the claim's `attempts`), and returns
   * their ids: only those may be sent. A claim without this attempt's message row was therefore
   * never sent, so a takeover can put it back at once; a takeover that gets there first makes the
   * write skip it (the recipient's row lock orders the two). A resend after reconciliation reuses
   * the row and restarts its reconciliation window.
   */
  async recordAttempts(db: Db, tenantId: string, campaign: RunningCampaign, claimant: string | null, sends: { id: string; contactId: string | null; to: string; components: unknown[]; attempts: number }[]): Promise<Set<string>> {
    if (sends.length === 0) return new Set();
    const batch = unnestRows(sends, 'v', [
      ['id', 'uuid', (s) => s.id], ['contact_id', 'uuid', (s) => s.contactId], ['to_phone', 'text', (s) => s.to],
      ['components', 'jsonb', (s) => JSON.stringify(s.components)], ['attempts', 'int', (s) => s.attempts]]);
    const { rows } = await sql<{ id: string }>`
      WITH v AS (SELECT * FROM ${batch}),
      mine AS (
        SELECT r.id FROM campaign_recipients r JOIN v ON v.id = r.id
        WHERE r.status = 'sending' AND r.attempts = v.attempts AND r.claimed_by IS NOT DISTINCT FROM ${claimant}::uuid
        ORDER BY r.id FOR SHARE OF r)
      INSERT INTO messages (id, tenant_id, contact_id, template_id, template_name, language, to_phone, components, status, campaign_id, callback_data, attempted_at)
      SELECT v.id, ${tenantId}::uuid, v.contact_id, ${campaign.template_id}::uuid, ${campaign.template_name}, ${campaign.language},
        v.to_phone, v.components, 'accepted', ${campaign.id}::uuid, v.id::text, now()
      FROM v JOIN mine ON mine.id = v.id
      ON CONFLICT (id) DO UPDATE SET attempted_at = now()
      RETURNING id`.execute(db);
    return new Set(rows.map((r) => r.id));
  },

  /**
   * Records a batch's upstream outcomes in one transaction: accepted sends get their upstream id
   * (the recipient moves to sent, or held when Meta holds it for a quality assessment, unless a
   * callback already moved it further), refused ones fail with one message.failed each, retryable
   * ones go back to pending until `retryAt`, deferred ones (131049) wait as deferred until then,
   * unknown ones (timeout, connection lost) stay sending with a lease that ends with the
   * reconciliation window. Unsent ones (their campaign halted before their slot) go back to pending
   * as they were, without the message row written for the attempt.
   */
  async recordOutcomes(tx: Tx, outcomes: {
    /** `heldUntil`: WhatsApp holds it (template pacing); counted sent after then without word. */
    accepted?: { id: string; wamid: string; heldUntil?: Date }[];
    failed?: { id: string; code: number | null; title: string }[];
    /** `claim`: a claim never sent (its media could not be uploaded) goes back only while it is still that claim. */
    retry?: { id: string; retryAt: Date; claim?: { by: string | null; attempts: number } }[];
    deferred?: { id: string; retryAt: Date }[];
    unknown?: { id: string; reconcileAt: Date }[];
    /**
     * `claimedBy` and `attempts` name the claim: it goes back only while it is still that claim
     * (another process may have taken it over, or the same one claimed it again since).
     */
    unsent?: { id: string; claimedBy: string | null; attempts: number }[];
  }): Promise<{ campaignId: string; from: string; to: string }[]> {
    const { accepted = [], failed = [], retry = [], deferred = [], unknown = [], unsent = [] } = outcomes;
    const moves: { campaignId: string; from: string; to: string }[] = [];
    // Rows are locked in id order, messages before recipients, as status callbacks lock them:
    // the two writers never deadlock.
    const ids = [...accepted, ...failed, ...retry, ...deferred, ...unknown, ...unsent].map((o) => o.id);
    if (ids.length === 0) return moves;
    await sql`SELECT id FROM messages WHERE id = ANY(${ids}::uuid[]) ORDER BY id FOR UPDATE`.execute(tx);
    await sql`SELECT id FROM campaign_recipients WHERE id = ANY(${ids}::uuid[]) ORDER BY id FOR UPDATE`.execute(tx);
    if (accepted.length > 0) {
      const values = unnestRows(accepted, 'v', [
        ['id', 'uuid', (a) => a.id], ['wamid', 'text', (a) => a.wamid], ['next', 'text', (a) => (a.heldUntil ? 'held' : 'sent')], ['until', 'timestamptz', (a) => a.heldUntil ?? null]]);
      // A callback that already sent the recipient back for another attempt (retry later, deferred)
      // settled this one: its upstream id must not stand in for the next attempt's.
      await sql`
        UPDATE messages m SET upstream_message_id = v.wamid, updated_at = now()
        FROM ${values} WHERE m.id = v.id AND m.upstream_message_id IS NULL
          AND NOT EXISTS (SELECT 1 FROM campaign_recipients r WHERE r.id = v.id AND r.status IN ('pending', 'deferred'))`.execute(tx);
      const { rows } = await sql<{ campaign_id: string; old: string; status: string }>`
        WITH v AS (SELECT * FROM ${values}),
        old AS (SELECT r.id, r.status FROM campaign_recipients r JOIN v ON v.id = r.id)
        UPDATE campaign_recipients r SET message_id = v.wamid, lease_until = NULL, updated_at = now(),
          status = CASE WHEN old.status = 'sending' THEN v.next ELSE r.status END,
          not_before = CASE WHEN old.status = 'sending' AND v.next = 'held' THEN v.until ELSE r.not_before END
        FROM v, old WHERE r.id = v.id AND old.id = v.id AND old.status NOT IN ('pending', 'deferred')
        RETURNING r.campaign_id, old.status AS old, r.status`.execute(tx);
      for (const r of rows) moves.push({ campaignId: r.campaign_id, from: r.old, to: r.status });
    }
    if (failed.length > 0) {
      const values = unnestRows(failed, 'v', [['id', 'uuid', (f) => f.id], ['code', 'int', (f) => f.code], ['title', 'text', (f) => f.title.slice(0, 500)]]);
      const { rows } = await sql<{ campaign_id: string }>`
        UPDATE campaign_recipients r SET status = 'failed', error_code = v.code, error_title = v.title, lease_until = NULL, updated_at = now()
        FROM ${values} WHERE r.id = v.id AND r.status = 'sending'
        RETURNING r.campaign_id`.execute(tx);
      for (const r of rows) moves.push({ campaignId: r.campaign_id, from: 'sending', to: 'failed' });
      // Each failure reaches the tenant once: the message moves to failed here, and its event with it.
      const { rows: refused } = await sql<RefusedRow>`
        UPDATE messages m SET status = 'failed', status_rank = 4, failed_at = now(), error_code = v.code, error_title = v.title, updated_at = now()
        FROM ${values} WHERE m.id = v.id AND m.status_rank < 4
        RETURNING m.id, m.tenant_id, m.upstream_message_id, m.to_phone, m.contact_id, m.campaign_id, m.template_name, m.error_code, m.error_title`.execute(tx);
      const byTenant = new Map<string, NewEvent[]>();
      for (const m of refused) byTenant.set(m.tenant_id, [...(byTenant.get(m.tenant_id) ?? []), refusedEvent(m, { code: m.error_code, title: m.error_title })]);
      for (const [tenantId, events] of byTenant) await recordEvents(tx, tenantId, events);
      // A refusal because the user stopped marketing messages (131050) opts the contact out.
      for (const tenantId of byTenant.keys()) {
        await optOutOnMarketingRefusals(tx, tenantId, refused.filter((m) => m.tenant_id === tenantId).map((m) => ({ phone: m.to_phone, code: m.error_code, at: new Date() })));
      }
    }
    if (retry.length > 0 || deferred.length > 0) {
      const values = unnestRows([
        ...retry.map((r) => ({ id: r.id, at: r.retryAt, next: 'pending', defer: 0, guarded: r.claim !== undefined, claimedBy: r.claim?.by ?? null, attempts: r.claim?.attempts ?? null })),
        ...deferred.map((d) => ({ id: d.id, at: d.retryAt, next: 'deferred', defer: 1, guarded: false, claimedBy: null, attempts: null }))], 'v', [
        ['id', 'uuid', (r) => r.id], ['at', 'timestamptz', (r) => r.at], ['next', 'text', (r) => r.next], ['defer', 'int', (r) => r.defer],
        ['guarded', 'boolean', (r) => r.guarded], ['claimed_by', 'uuid', (r) => r.claimedBy], ['attempts', 'int', (r) => r.attempts]]);
      const { rows } = await sql<{ campaign_id: string; status: string }>`
        UPDATE campaign_recipients r SET status = v.next, not_before = v.at, defers = r.defers + v.defer, lease_until = NULL, updated_at = now()
        FROM ${values} WHERE r.id = v.id AND r.status = 'sending'
          AND (NOT v.guarded OR (r.claimed_by IS NOT DISTINCT FROM v.claimed_by AND r.attempts = v.attempts))
        RETURNING r.campaign_id, r.status`.execute(tx);
      for (const r of rows) moves.push({ campaignId: r.campaign_id, from: 'sending', to: r.status });
    }
    if (unknown.length > 0) {
      const values = unnestRows(unknown, 'v', [['id', 'uuid', (u) => u.id], ['at', 'timestamptz', (u) => u.reconcileAt]]);
      await sql`
        UPDATE campaign_recipients r SET lease_until = v.at, updated_at = now()
        FROM ${values} WHERE r.id = v.id AND r.status = 'sending'`.execute(tx);
    }
    if (unsent.length > 0) {
      const values = unnestRows(unsent, 'v', [['id', 'uuid', (u) => u.id], ['claimed_by', 'uuid', (u) => u.claimedBy], ['attempts', 'int', (u) => u.attempts]]);
      const mine = sql`r.status = 'sending' AND r.claimed_by IS NOT DISTINCT FROM v.claimed_by AND r.attempts = v.attempts`;
      // A first attempt's row only: an earlier attempt's (outcome unknown) may still hear from the upstream.
      await sql`
        DELETE FROM messages m USING campaign_recipients r, ${values}
        WHERE m.id = v.id AND r.id = v.id AND ${mine} AND r.attempts <= 1 AND m.upstream_message_id IS NULL AND m.status = 'accepted'`.execute(tx);
      await sql`
        UPDATE campaign_recipients r SET status = 'pending', attempts = greatest(r.attempts - 1, 0), lease_until = NULL, claimed_by = NULL, send_at = NULL, updated_at = now()
        FROM ${values} WHERE r.id = v.id AND ${mine}`.execute(tx);
    }
    await recordCounterMoves(tx, moves);
    return moves;
  },

  /**
   * A live worker's recipients still in flight keep their leases (never shortened: an unknown
   * outcome's reconciliation window may already reach further). Rows being recorded are skipped.
   */
  async renewLeases(db: Db, ids: string[], leaseMs: number): Promise<void> {
    await sql`
      UPDATE campaign_recipients r SET lease_until = greatest(r.lease_until, now() + ${leaseMs} * interval '1 millisecond')
      FROM (SELECT id FROM campaign_recipients WHERE id = ANY(${ids}::uuid[]) AND status = 'sending' ORDER BY id FOR UPDATE SKIP LOCKED) l
      WHERE r.id = l.id`.execute(db);
  },

  /**
   * A number taken over (src/workers/number-ownership.ts): the tenant's sending claims of dead
   * processes that were never sent go back to pending at once, as unsent: those without this
   * attempt's message row (recordAttempts writes it before any send), and those slotted more than
   * `fenceMs` ahead (their claimant, dead or cut off, sends nothing that late). The others may have
   * been sent: they wait for reconciliation. Returns how many went back.
   */
  async takeOver(db: Db, tenantId: string, claimant: string, fenceMs: number, gone: (claimants: string[]) => Promise<string[]>): Promise<number> {
    return putBackNeverSent(db, claimant, gone, sql`c.tenant_id = ${tenantId}::uuid`, fenceMs);
  },

  /**
   * The tenant's sends by other processes that may still reach the upstream: written (so perhaps
   * issued), with neither an answer recorded nor a callback heard. A new owner of the tenant's
   * number keeps a place in its send window for each (SendWindow.setForeign).
   */
  async othersUnanswered(db: Db, tenantId: string, claimant: string): Promise<number> {
    const { rows } = await sql<{ n: number }>`
      SELECT count(*)::int AS n FROM campaign_recipients r JOIN messages m ON m.id = r.id
      WHERE ${inLiveCampaigns(sql`c.tenant_id = ${tenantId}::uuid`)}
        AND r.status = 'sending' AND r.claimed_by <> ${claimant}::uuid
        AND m.attempted_at >= r.attempted_at AND m.upstream_message_id IS NULL AND m.status = 'accepted'`.execute(db);
    return rows[0].n;
  },

  /**
   * Every tenant's (or `onlyTenants'`) sending claims of dead processes without this attempt's
   * message row go back to pending, as unsent: never sent, whoever owns their number now (a claim
   * of a campaign's last recipients has no next owner to take it over).
   */
  async returnUnwritten(db: Db, claimant: string, gone: (claimants: string[]) => Promise<string[]>, onlyTenants?: string[]): Promise<number> {
    return putBackNeverSent(db, claimant, gone, tenantFilter('c', onlyTenants), null);
  },

  /**
   * Recipients whose wait is over: deferred ones go back to pending, to be claimed like any other
   * (the deferred attempt is given back: deferrals have their own limit, not CAMPAIGN_MAX_ATTEMPTS);
   * held ones with no word from the upstream by then count as sent (WhatsApp took them; a later
   * callback still moves them on), so a lost release never keeps a campaign running.
   */
  async releaseWaiting(db: Db, onlyTenants?: string[], limit = 1000): Promise<number> {
    return db.transaction().execute(async (tx) => {
      const { rows } = await sql<{ campaign_id: string; status: string }>`
        UPDATE campaign_recipients r SET status = CASE WHEN r.status = 'deferred' THEN 'pending' ELSE 'sent' END,
          attempts = CASE WHEN r.status = 'deferred' THEN greatest(r.attempts - 1, 0) ELSE r.attempts END, updated_at = now()
        WHERE r.id IN (
          SELECT d.id FROM campaign_recipients d
          WHERE d.status IN ('deferred', 'held') AND d.not_before <= now() AND ${tenantFilter('d', onlyTenants)}
          ORDER BY d.not_before LIMIT ${limit} FOR UPDATE SKIP LOCKED)
        RETURNING r.campaign_id, r.status`.execute(tx);
      await recordCounterMoves(tx, rows.map((r) => ({ campaignId: r.campaign_id, from: r.status === 'pending' ? 'deferred' : 'held', to: r.status })));
      return rows.length;
    });
  },

  /**
   * Crash reconciliation: `sending` recipients whose lease expired (their worker died, or the
   * outcome was unknown). What the callbacks told the messages row wins; with no word from the
   * upstream within the reconciliation window (from the attempt) the recipient goes back to
   * pending, to be sent again by whichever worker claims it, but only once the account's status
   * callbacks have caught up past that window too (statuses_through, the upstream's clock): a
   * service whose callback processing lags must not take its own lag for silence. When the
   * account's sends stop (a campaign's last batch), no later status moves statuses_through past
   * the window; then the callbacks count as caught up once one status later than the attempt is
   * committed and no answered send of the account since a window before it still waits for its
   * first status (`answersCaughtUp`). An account that hears nothing at all for RECONCILE_FALLBACK
   * windows sends again anyway, so a last send is never stuck. Until then a recipient is looked at
   * again every RECHECK. Returns how many were settled.
   */
  async reconcileExpired(db: Db, reconcileMs: number, onlyTenants?: string[], limit = 500): Promise<number> {
    const window = sql`${reconcileMs} * interval '1 millisecond'`;
    return db.transaction().execute(async (tx) => {
      // Locked first, resolved by the next statement: its snapshot sees every message row written
      // before the lock, and a write waiting for the lock finds the recipient moved on.
      // `stalled`: past its window, with a status heard after the attempt but none past the window,
      // the only case answersCaughtUp decides (so its scan never runs for the others).
      const { rows: locked } = await sql<{ id: string; tenant_id: string; attempted_at: Date | null; stalled: boolean | null }>`
        SELECT r.id, r.tenant_id, r.attempted_at,
          r.attempted_at < now() - ${window} AND ba.statuses_through > r.attempted_at AND ba.statuses_through <= r.attempted_at + ${window} AS stalled
        FROM campaign_recipients r LEFT JOIN business_accounts ba ON ba.tenant_id = r.tenant_id
        WHERE r.status = 'sending' AND r.lease_until < now() AND ${tenantFilter('r', onlyTenants)}
        ORDER BY r.lease_until LIMIT ${limit}
        FOR UPDATE OF r SKIP LOCKED`.execute(tx);
      if (locked.length === 0) return 0;
      const caughtUp = await answersCaughtUp(tx, locked.filter((r) => r.stalled && r.attempted_at), reconcileMs);
      const { rows } = await sql<{ campaign_id: string; status: string }>`
        WITH expired AS (SELECT unnest(${locked.map((r) => r.id)}::uuid[]) AS id),
        resolved AS (
          SELECT e.id, m.upstream_message_id AS wamid, m.error_code, m.error_title, r.attempted_at,
            CASE WHEN m.status IN ('sent', 'delivered', 'read', 'failed') THEN m.status
                 WHEN m.upstream_message_id IS NOT NULL THEN 'sent'
                 -- No message row of this attempt: its worker died before writing it, so before any send.
                 WHEN r.attempted_at IS NULL OR m.id IS NULL OR m.attempted_at < r.attempted_at THEN 'pending'
                 WHEN r.attempted_at < now() - ${window} AND (ba.statuses_through > r.attempted_at + ${window}
                   OR (ba.statuses_through > r.attempted_at AND r.tenant_id = ANY(${caughtUp}::uuid[]))
                   OR r.attempted_at < now() - ${RECONCILE_FALLBACK * reconcileMs} * interval '1 millisecond') THEN 'pending'
                 ELSE 'sending' END AS next
          FROM expired e JOIN campaign_recipients r ON r.id = e.id LEFT JOIN messages m ON m.id = e.id
          LEFT JOIN business_accounts ba ON ba.tenant_id = r.tenant_id)
        UPDATE campaign_recipients r SET
          status = res.next,
          message_id = coalesce(res.wamid, r.message_id),
          error_code = CASE WHEN res.next = 'failed' THEN res.error_code ELSE r.error_code END,
          error_title = CASE WHEN res.next = 'failed' THEN res.error_title ELSE r.error_title END,
          lease_until = CASE WHEN res.next = 'sending' THEN greatest(res.attempted_at + ${window}, now() + ${RECHECK_MS} * interval '1 millisecond') ELSE NULL END,
          updated_at = now()
        FROM resolved res WHERE r.id = res.id
        RETURNING r.campaign_id, r.status`.execute(tx);
      await recordCounterMoves(tx, rows.map((r) => ({ campaignId: r.campaign_id, from: 'sending', to: r.status })));
      return rows.filter((r) => r.status !== 'sending').length;
    });
  },

  /** RUNNING -> COMPLETED once no recipient is pending or sending. */
  async completeIfDone(db: Db, campaignId: string): Promise<CampaignRow | undefined> {
    return db.transaction().execute(async (tx) => {
      // Locked before the counters are folded: a callback sending a recipient back to pending holds
      // a share lock on the campaign until its move is committed, so the fold then counts it.
      await sql`SELECT id FROM campaigns WHERE id = ${campaignId}::uuid FOR NO KEY UPDATE`.execute(tx);
      await foldCounterMoves(tx, [campaignId]);
      const row = await tx.updateTable('campaigns').set({ status: 'COMPLETED', completed_at: new Date(), updated_at: new Date() })
        .where('id', '=', campaignId).where('status', '=', 'RUNNING').where('pending_count', '<=', 0)
        .returningAll().executeTakeFirst();
      if (row) await recordTransition(tx, row, 'complete');
      return row;
    });
  },

  /** RUNNING -> FAILED with the reason (campaign.failed carries it). */
  async fail(db: Db, campaignId: string, reason: string, code: number | null = null): Promise<CampaignRow | undefined> {
    return db.transaction().execute((tx) => campaignQueue.failIn(tx, campaignId, reason, code));
  },

  /** fail() inside the caller's transaction. */
  async failIn(tx: Tx, campaignId: string, reason: string, code: number | null = null): Promise<CampaignRow | undefined> {
    await foldCounterMoves(tx, [campaignId]);
    const row = await tx.updateTable('campaigns').set({ status: 'FAILED', failure_reason: reason.slice(0, 500), completed_at: new Date(), updated_at: new Date() })
      .where('id', '=', campaignId).where('status', '=', 'RUNNING')
      .returningAll().executeTakeFirst();
    if (row) await recordTransition(tx, row, 'fail', { reason, error_code: code });
    return row;
  },

  /**
   * Status callbacks of campaign messages move their recipients forward (never back; failed is
   * final), inside the callback's own transaction, with their counter moves: one statement.
   */
  async applyStatuses(tx: Tx, updates: { id: string; status: string; wamid: string; code: number | null; title: string | null }[]): Promise<void> {
    // Several statuses of one message in one batch: the furthest moves its recipient (an UPDATE
    // joined to two rows of one recipient would take either).
    const furthest = new Map<string, (typeof updates)[number]>();
    for (const u of updates) {
      const seen = furthest.get(u.id);
      if (!seen || STATUS_RANK[u.status] > STATUS_RANK[seen.status]) furthest.set(u.id, u);
    }
    if (furthest.size === 0) return;
    const values = unnestRows([...furthest.values()], 'v', [
      ['id', 'uuid', (u) => u.id], ['status', 'text', (u) => u.status], ['wamid', 'text', (u) => u.wamid], ['code', 'int', (u) => u.code], ['title', 'text', (u) => u.title]]);
    // Only recipients that move are locked: most `sent` callbacks find theirs sent already.
    await withCounterMoves(tx, sql`
      v AS (SELECT * FROM ${values}),
      old AS (
        SELECT r.id, r.status FROM campaign_recipients r JOIN v ON v.id = r.id
        WHERE ${RANK_SQL('r.status')} < ${RANK_SQL('v.status')} AND r.status <> 'failed'
        ORDER BY r.id FOR UPDATE OF r),
      moved AS (
        UPDATE campaign_recipients r SET status = v.status, message_id = coalesce(r.message_id, v.wamid), lease_until = NULL, updated_at = now(),
          error_code = CASE WHEN v.status = 'failed' THEN v.code ELSE r.error_code END,
          error_title = CASE WHEN v.status = 'failed' THEN v.title ELSE r.error_title END
        FROM v, old
        WHERE r.id = v.id AND old.id = v.id AND ${RANK_SQL('old.status')} < ${RANK_SQL('v.status')} AND old.status <> 'failed'
        RETURNING r.campaign_id, old.status AS old, r.status)`);
  },

  /** Due SCHEDULED campaigns (the scheduler starts each with a conditional UPDATE). */
  async due(db: Db, limit: number, onlyTenants?: string[]): Promise<{ id: string; tenant_id: string }[]> {
    // A tenant whose plan lost campaign sending after scheduling: its campaigns wait, SCHEDULED, for an upgrade.
    const { rows } = await sql<{ id: string; tenant_id: string }>`
      SELECT c.id, c.tenant_id FROM campaigns c JOIN tenants t ON t.id = c.tenant_id
      WHERE c.status = 'SCHEDULED' AND c.scheduled_at <= now() AND ${tenantFilter('c', onlyTenants)}
        AND t.plan = ANY(${plansWithFeature('campaigns')}::text[])
      ORDER BY c.scheduled_at LIMIT ${limit}`.execute(db);
    return rows;
  },
};

/**
 * Of the tenants of these stalled sends (no word past their window), those with no answered send
 * (an upstream id) still without its first status, among the messages made since a window before
 * the tenant's oldest stalled attempt: their callbacks are not lagging, so silence means unsent.
 * A scan of those messages.
 */
async function answersCaughtUp(tx: Tx, stalled: { tenant_id: string; attempted_at: Date | null }[], reconcileMs: number): Promise<string[]> {
  const since = new Map<string, number>();
  for (const r of stalled) since.set(r.tenant_id, Math.min(since.get(r.tenant_id) ?? Infinity, r.attempted_at!.getTime() - reconcileMs));
  if (since.size === 0) return [];
  const tenants = unnestRows([...since], 't', [['tenant_id', 'uuid', ([tenantId]) => tenantId], ['since', 'timestamptz', ([, at]) => new Date(at)]]);
  const { rows } = await sql<{ tenant_id: string }>`
    SELECT t.tenant_id FROM ${tenants}
    WHERE NOT EXISTS (SELECT 1 FROM messages m WHERE m.tenant_id = t.tenant_id AND m.created_at >= t.since
      AND m.upstream_message_id IS NOT NULL AND m.status = 'accepted')`.execute(tx);
  return rows.map((r) => r.tenant_id);
}

/** Recipient `r` belongs to a running or paused campaign that `campaigns` (on alias c) selects. */
const inLiveCampaigns = (campaigns: RawBuilder<unknown>) =>
  sql`r.campaign_id IN (SELECT c.id FROM campaigns c WHERE c.status IN ('RUNNING', 'PAUSED') AND ${campaigns})`;

/**
 * Sending claims of other processes, in campaigns `campaigns` selects (alias c), that were never
 * sent: without this attempt's message row, or (with `fenceMs`) slotted more than that far ahead.
 * Those of dead claimants go back to pending as unsent. Read, locked, and read again: the second
 * read (a later statement) sees a message row written before the lock, and a write waiting for
 * the lock finds the recipient no longer claimed (recordAttempts).
 */
async function putBackNeverSent(db: Db, claimant: string, gone: (claimants: string[]) => Promise<string[]>, campaigns: RawBuilder<unknown>, fenceMs: number | null): Promise<number> {
  const neverSent = (ids?: string[]) => sql<{ id: string; claimed_by: string; attempts: number }>`
    SELECT r.id, r.claimed_by, r.attempts FROM campaign_recipients r
    WHERE ${inLiveCampaigns(campaigns)}
      AND r.status = 'sending' AND r.claimed_by <> ${claimant}::uuid ${ids ? sql`AND r.id = ANY(${ids}::uuid[])` : sql``}
      AND (${fenceMs === null ? sql`false` : sql`r.send_at > now() + ${fenceMs} * interval '1 millisecond'`}
        OR NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = r.id AND m.attempted_at >= r.attempted_at))`;
  return db.transaction().execute(async (tx) => {
    const { rows: candidates } = await neverSent().execute(tx);
    if (candidates.length === 0) return 0;
    const dead = new Set(await gone([...new Set(candidates.map((r) => r.claimed_by))]));
    const ids = candidates.filter((r) => dead.has(r.claimed_by)).map((r) => r.id);
    if (ids.length === 0) return 0;
    await sql`SELECT id FROM campaign_recipients WHERE id = ANY(${ids}::uuid[]) ORDER BY id FOR UPDATE`.execute(tx);
    const { rows } = await neverSent(ids).execute(tx);
    if (rows.length === 0) return 0;
    await campaignQueue.recordOutcomes(tx, { unsent: rows.map((r) => ({ id: r.id, claimedBy: r.claimed_by, attempts: r.attempts })) });
    return rows.length;
  });
}
