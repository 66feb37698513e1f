import { sql } from 'kysely';
import type { Tx } from '../../db/database.ts';
import { unnestRows } from '../../db/unnest.ts';
import { isStop, isThrottle, outcomeOfCallbackFailure, type FailureOutcome } from '../../upstream/outcomes.ts';
import { messageMatcher, namedMessageIds, type StatusUpdate } from '../messages/messages.statuses.ts';
import { withCounterMoves, type MovedRecipient } from './campaigns.repository.ts';
import { applyStop } from './upstream-stops.ts';

const STALE_MARGIN_MS = 2000;

export interface RetryPolicy {
  /** Retryable answers before a recipient fails (CAMPAIGN_MAX_ATTEMPTS). */
  maxAttempts: number;
  /** A deferred recipient (131049) waits this long (CAMPAIGN_DEFER_MS)... */
  deferMs: number;
  /** ...at most this many times (CAMPAIGN_DEFER_ATTEMPTS). */
  deferAttempts: number;
}

interface FailedRow {
  id: string;
  upstream_message_id: string | null;
  campaign_id: string | null;
  template_id: string | null;
  recipient_status: string | null;
  attempts: number | null;
  defers: number | null;
  attempted_at: Date | null;
  retry_deferred: boolean | null;
  campaign_status: string | null;
}

/**
 * `failed` status callbacks, acted on through the outcome model before they are applied, exactly as
 * the same code answered at send time is: a campaign message failed with a retry-later code goes
 * back to pending (same backoff and attempt limit), one deferred (131049) waits as deferred; neither
 * fails its message nor emits message.failed, and the message row is cleared for the next attempt.
 * A template or account stop is applied (template paused, campaigns paused or failed, account
 * stopped). A failure of a recipient already waiting for its next attempt is a duplicate and is
 * dropped. A campaign that has already ended (its last sends accepted, the failure came after)
 * tries nothing again: the failure stands, with its message.failed. Returns the updates still to apply (their failures reach the tenant as message.failed).
 */
export async function settleCallbackFailures(tx: Tx, tenantId: string, updates: StatusUpdate[], policy: RetryPolicy): Promise<StatusUpdate[]> {
  const failures = updates.filter((u) => u.status === 'failed');
  if (failures.length === 0) return updates;
  // Every message the batch names is locked here, in id order, before any recipient, template or
  // campaign row: the order the dispatcher's record() takes them in (no deadlock between the two).
  const { rows } = await sql<FailedRow>`
    ${namedMessageIds(updates)}
    SELECT m.id, m.upstream_message_id, m.campaign_id, m.template_id, r.status AS recipient_status, r.attempts, r.defers, r.attempted_at,
      c.retry_deferred, c.status AS campaign_status
    FROM ids JOIN messages m ON m.id = ids.id
    LEFT JOIN campaign_recipients r ON r.id = m.id
    LEFT JOIN campaigns c ON c.id = m.campaign_id
    WHERE m.tenant_id = ${tenantId}
    ORDER BY m.id FOR UPDATE OF m`.execute(tx);
  const rowOf = messageMatcher(rows);

  const dropped = new Set<StatusUpdate>();
  const again: { id: string; campaignId: string; update: StatusUpdate; next: 'pending' | 'deferred'; at: Date; defer: number; code: number; title: string }[] = [];
  const stops: { outcome: FailureOutcome; templateId: string | null; at: Date }[] = [];
  const now = Date.now();
  for (const u of failures) {
    const row = rowOf(u);
    if (!row) continue;
    const code = u.error?.code ?? 0;
    const title = u.error?.title ?? 'Unknown failure';
    // A failure of an earlier attempt (Meta redelivers, out of order, for days) while the next one
    // is on its way matches the row by our id: it is stale, and must not send the recipient again.
    // Status timestamps are whole seconds, hence the margin.
    if (row.attempted_at && u.timestamp.getTime() < row.attempted_at.getTime() - STALE_MARGIN_MS) {
      dropped.add(u);
      continue;
    }
    const outcome = outcomeOfCallbackFailure(code, title, Math.max(0, (row.attempts ?? 1) - 1));
    if (isStop(outcome)) stops.push({ outcome, templateId: row.template_id, at: u.timestamp });
    // A campaign that has ended (a late failure of its last sends) sends nothing more: the failure stands.
    if (!row.campaign_id || row.recipient_status === null || (row.campaign_status !== 'RUNNING' && row.campaign_status !== 'PAUSED')) continue;
    if (row.recipient_status === 'pending' || row.recipient_status === 'deferred' || again.some((a) => a.id === row.id)) {
      dropped.add(u); // its attempt was already settled: a duplicate callback
      continue;
    }
    if (outcome.kind === 'number_restricted' || (outcome.kind === 'retry_later' && (isThrottle(outcome) || (row.attempts ?? 0) < policy.maxAttempts))) {
      again.push({ id: row.id, campaignId: row.campaign_id, update: u, next: 'pending', at: new Date(now + outcome.retryAfterMs), defer: 0, code, title });
      dropped.add(u);
    } else if (outcome.kind === 'deferred' && row.retry_deferred && (row.defers ?? 0) < policy.deferAttempts) {
      again.push({ id: row.id, campaignId: row.campaign_id, update: u, next: 'deferred', at: new Date(now + policy.deferMs), defer: 1, code, title });
      dropped.add(u);
    }
  }

  // The campaigns are read again under a share lock, which completeIfDone's waits for: a campaign
  // that completed meanwhile (its last sends were accepted) keeps the failure, and one still
  // running cannot complete until this recipient's return to pending is counted.
  const open = again.length === 0 ? new Set<string>() : await lockOpenCampaigns(tx, again.map((a) => a.campaignId));
  for (const a of again) if (!open.has(a.campaignId)) dropped.delete(a.update);
  const retried = again.filter((a) => open.has(a.campaignId));
  if (retried.length > 0) {
    const values = unnestRows(retried, 'v', [
      ['id', 'uuid', (a) => a.id], ['next', 'text', (a) => a.next], ['at', 'timestamptz', (a) => a.at], ['defer', 'int', (a) => a.defer],
      ['code', 'int', (a) => a.code], ['title', 'text', (a) => a.title.slice(0, 500)]]);
    const moved = await withCounterMoves<MovedRecipient & { id: string }>(tx, sql`
      v AS (SELECT * FROM ${values}),
      old AS (SELECT r.id, r.status FROM campaign_recipients r JOIN v ON v.id = r.id ORDER BY r.id FOR UPDATE OF r),
      moved AS (
        UPDATE campaign_recipients r SET status = v.next, not_before = v.at, defers = r.defers + v.defer, lease_until = NULL, message_id = NULL,
          error_code = v.code, error_title = v.title, updated_at = now()
        FROM v, old WHERE r.id = v.id AND old.id = v.id AND old.status NOT IN ('failed', 'skipped')
        RETURNING r.id, r.campaign_id, old.status AS old, r.status)`);
    // The next attempt starts from a clean message row (its upstream id is set by that attempt, its
    // pricing by that attempt's callbacks): a failed attempt costs nothing, so a price its `sent`
    // brought leaves the campaign's spend in the same statement.
    if (moved.length > 0) await sql`
      WITH old AS (
        SELECT id, campaign_id, pricing_category, price_currency, price_amount FROM messages
        WHERE tenant_id = ${tenantId} AND id = ANY(${moved.map((m) => m.id)}::uuid[])),
      cleared AS (
        UPDATE messages m SET status = 'accepted', status_rank = 0, upstream_message_id = NULL, sent_at = NULL, delivered_at = NULL, read_at = NULL,
          failed_at = NULL, error_code = NULL, error_title = NULL, pricing_category = NULL, pricing_type = NULL, pricing_billable = NULL,
          pricing_model = NULL, price_amount = NULL, price_currency = NULL, updated_at = now()
        FROM old WHERE m.id = old.id)
      INSERT INTO campaign_cost_moves (campaign_id, category, currency, messages, amount)
      SELECT campaign_id, pricing_category, price_currency, -count(*)::int, -sum(price_amount) FROM old
      WHERE price_amount > 0 AND campaign_id IS NOT NULL GROUP BY campaign_id, pricing_category, price_currency`.execute(tx);
  }
  for (const stop of stops) {
    // An account stop older than the account's connection (Meta redelivering an old failure after
    // an operator fixed the account) is stale.
    if (stop.outcome.kind === 'account_stopped') {
      const account = await tx.selectFrom('business_accounts').select('connected_at').where('tenant_id', '=', tenantId).executeTakeFirst();
      if (account && stop.at.getTime() < account.connected_at.getTime() - STALE_MARGIN_MS) continue;
    }
    await applyStop(tx, tenantId, stop.outcome, stop.templateId);
  }
  // Other statuses of a resent attempt in the same batch (its `sent` before the failure) go with it.
  const settled = new Set([...dropped].map((u) => u.upstreamMessageId));
  return settled.size === 0 ? updates : updates.filter((u) => !settled.has(u.upstreamMessageId));
}

/** Of these campaigns, the ids of those still RUNNING or PAUSED, each share-locked until the transaction ends. */
async function lockOpenCampaigns(tx: Tx, ids: string[]): Promise<Set<string>> {
  const { rows } = await sql<{ id: string; status: string }>`
    SELECT id, status FROM campaigns WHERE id = ANY(${[...new Set(ids)]}::uuid[]) ORDER BY id FOR SHARE`.execute(tx);
  return new Set(rows.filter((c) => c.status === 'RUNNING' || c.status === 'PAUSED').map((c) => c.id));
}
