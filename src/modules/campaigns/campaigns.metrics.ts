import { createHash } from 'node:crypto';
import { Counter, Histogram, Registry } from 'prom-client';
import { sql } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import { COUNTED_IN } from './campaigns.repository.ts';

/**
 * Campaign metrics. The dispatcher, the queue and the callbacks count where they record (one call
 * each), so the series live in this module's registry, which every process's Metrics serves.
 * Labels are bounded and never name a tenant, a campaign or a phone number.
 */
export const campaignRegistry = new Registry();

const outcomes = new Counter({
  name: 'campaign_recipient_outcomes_total',
  help: 'Campaign sends by the outcome this process recorded for them (accepted, failed, retry, unknown, unsent, ...)',
  labelNames: ['outcome'] as const,
  registers: [campaignRegistry],
});

const transitions = new Counter({
  name: 'campaign_recipient_transitions_total',
  help: 'Campaign recipients moved from one status to another by this process (claims, send outcomes, status callbacks, reconciliation)',
  labelNames: ['from', 'to'] as const,
  registers: [campaignRegistry],
});

/** A phone number's bucket: stable across processes and restarts, and never its digits. */
export const NUMBER_BUCKETS = 16;

const sends = new Counter({
  name: 'campaign_sends_total',
  help: `Campaign sends issued to the upstream by this process, by sending phone number bucket (0-${NUMBER_BUCKETS - 1}, a hash of the phone number id)`,
  labelNames: ['number_bucket'] as const,
  registers: [campaignRegistry],
});

const dispatchLag = new Histogram({
  name: 'campaign_dispatch_lag_seconds',
  help: 'How late a campaign send was issued after it was due (its paced send slot)',
  buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  registers: [campaignRegistry],
});

export function numberBucket(phoneNumberId: string): string {
  return String(createHash('sha256').update(phoneNumberId).digest().readUInt32BE(0) % NUMBER_BUCKETS);
}

/** What the dispatcher recorded for a batch: one count per recipient, labelled by the outcome's name. */
export function countOutcomes(recorded: Record<string, readonly unknown[]>): void {
  for (const [outcome, recipients] of Object.entries(recorded)) {
    if (recipients.length > 0) outcomes.inc({ outcome }, recipients.length);
  }
}

/** Recipient status moves the database reported (a move to the same status is none). */
export function countTransitions(moves: readonly { from: string; to: string }[]): void {
  const counted = new Map<string, number>();
  for (const { from, to } of moves) {
    if (from !== to) counted.set(`${from}\n${to}`, (counted.get(`${from}\n${to}`) ?? 0) + 1);
  }
  for (const [key, n] of counted) {
    const [from, to] = key.split('\n');
    transitions.inc({ from, to }, n);
  }
}

/** Recipients a claim took (pending -> sending). */
export function countClaimed(recipients: number): void {
  if (recipients > 0) transitions.inc({ from: 'pending', to: 'sending' }, recipients);
}

/** A send about to be issued, and how far behind its slot (ms since the epoch) it is. */
export function countSendIssued(phoneNumberId: string, dueAt: number): void {
  sends.inc({ number_bucket: numberBucket(phoneNumberId) });
  dispatchLag.observe(Math.max(0, Date.now() - dueAt) / 1000);
}

/** Statuses the `pending` counter covers (not yet sent, or held or deferred by Meta): the queue. */
const queuedStatuses = () => Object.keys(COUNTED_IN).filter((status) => COUNTED_IN[status].includes('pending'));
/** Statuses after which a recipient needs nothing more of the dispatcher or the upstream. */
const settledStatuses = () => Object.keys(COUNTED_IN).filter((status) => !COUNTED_IN[status].includes('pending'));

/**
 * The recipients of running campaigns by status, the settled ones aside, with every queue status
 * at 0 when none is in it; a status found among the recipients that the counters do not know is
 * reported too. Read at scrape time, so it must stay cheap with a million-recipient campaign:
 * `pending` (the big one) comes from the campaigns' counters (pending_count covers every queue
 * status) less the other queue statuses; those are found with a skip scan of the
 * (campaign_id, status, id) index and counted on it. A read costs a few index probes per running
 * campaign plus the non-pending queue rows (1.4 ms with 500,000 recipients, 5,000 of them sending).
 */
export async function campaignQueueDepth(db: Queryable): Promise<Map<string, number>> {
  const { rows } = await sql<{ status: string | null; n: number }>`
    WITH RECURSIVE running AS (
      SELECT c.id, c.pending_count + coalesce((SELECT sum(m.pending) FROM campaign_counter_moves m WHERE m.campaign_id = c.id), 0) AS pending
      FROM campaigns c WHERE c.status = 'RUNNING'),
    present(campaign_id, status) AS (
      SELECT r.id, (SELECT min(cr.status) FROM campaign_recipients cr WHERE cr.campaign_id = r.id) FROM running r
      UNION ALL
      SELECT p.campaign_id, (SELECT min(cr.status) FROM campaign_recipients cr WHERE cr.campaign_id = p.campaign_id AND cr.status > p.status)
      FROM present p WHERE p.status IS NOT NULL)
    SELECT p.status, sum((SELECT count(*) FROM campaign_recipients cr WHERE cr.campaign_id = p.campaign_id AND cr.status = p.status))::int AS n
    FROM present p WHERE p.status IS NOT NULL AND p.status <> 'pending' AND p.status <> ALL(${settledStatuses()}::text[])
    GROUP BY p.status
    UNION ALL
    SELECT NULL, coalesce(sum(pending), 0)::int FROM running`.execute(db);
  const queued = queuedStatuses();
  const depth = new Map(queued.map((status) => [status, 0]));
  let pendingCounter = 0;
  for (const row of rows) {
    if (row.status === null) pendingCounter = row.n;
    else depth.set(row.status, row.n);
  }
  const otherQueued = queued.filter((status) => status !== 'pending').reduce((sum, status) => sum + depth.get(status)!, 0);
  depth.set('pending', Math.max(0, pendingCounter - otherQueued));
  return depth;
}
