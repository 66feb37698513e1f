import { sql } from 'kysely';
import type { Db, Queryable } from '../../db/database.ts';
import type { WebhookBacklog } from '../../metrics.ts';
import type { LoggedOutcome } from './webhooks.sender.ts';

/**
 * The delivery work queue: delivery rows themselves are the jobs. These queries are the one place
 * that works across tenants (a worker serves every tenant); each row still carries its tenant_id and
 * every write below is scoped by it.
 */

export const AUTO_DISABLE_AFTER = 20;

export interface ClaimedDelivery {
  id: string;
  /** Physical address of the leased row version: recording the attempt is a TID lookup. */
  ctid: string;
  tenant_id: string;
  endpoint_id: string;
  event_type: string;
  /**
   * The stored envelope bytes as text: the envelope is built from JSON text, so it is valid UTF-8
   * and the text re-encodes to exactly the stored bytes. Text parses far cheaper than bytea's hex.
   * Null only if the stored envelope is missing (no foreign key guards it; see migration 0004).
   */
  payload: string | null;
  attempt_number: number;
  url: string;
  signing_secret_enc: string;
}

export interface ClaimOptions {
  /** First attempts (attempt_number 0) or retries: claimed separately so retries can be capped. */
  kind: 'first' | 'retry';
  limit: number;
  /** Rows claimed at most per endpoint (per worker process), for endpoints not in `room`. */
  endpointCap: number;
  /** Rows this worker may still claim per endpoint id (its cap less what it holds); overrides endpointCap. */
  room?: Map<string, number>;
  leaseMs: number;
}

/**
 * Claims due deliveries of active endpoints. For each endpoint with due work (random order, so no
 * endpoint is systematically served last), locks at most its room of its oldest due rows with
 * SKIP LOCKED and leases them. A row whose lease expired (its worker died) is due again, with its
 * attempt count unchanged: the lost attempt is not counted. Rows held back by the cap stay due and
 * spend nothing. The cap is per worker process (n workers allow n x cap to one endpoint): counting
 * other workers' leases would need an index on lease_until, which turns every claim from a HOT
 * update into one that rewrites all six indexes (measured: claims ~2x slower).
 */
export async function claimDueDeliveries(db: Queryable, o: ClaimOptions): Promise<ClaimedDelivery[]> {
  if (o.limit <= 0) return [];
  const kind = o.kind === 'first' ? sql`d.attempt_number = 0` : sql`d.attempt_number > 0`;
  const due = sql`d.status IN ('pending', 'retrying') AND d.next_attempt_at <= now() AND (d.lease_until IS NULL OR d.lease_until <= now()) AND ${kind}`;
  const roomIds = [...(o.room?.keys() ?? [])];
  const roomCounts = roomIds.map((id) => o.room!.get(id)!);
  const result = await sql<ClaimedDelivery>`
    WITH candidates AS (
      SELECT e.id AS endpoint_id, e.url, e.signing_secret_enc, coalesce(b.n, ${o.endpointCap}::int) AS room
      FROM webhook_endpoints e
      LEFT JOIN unnest(${roomIds}::uuid[], ${roomCounts}::int[]) AS b(id, n) ON b.id = e.id
      -- No EXISTS pre-filter: it was planned as a semi join scanning every due row per endpoint
      -- (92 endpoints x 20,000 due rows: 150 ms per claim). The lateral below is one index probe
      -- per active endpoint, and endpoints with nothing due simply contribute no rows.
      WHERE e.is_active AND e.deleted_at IS NULL
    ),
    picked AS (
      SELECT d.id, d.ctid, c.url, c.signing_secret_enc
      FROM (SELECT * FROM candidates WHERE room > 0 ORDER BY random()) c
      CROSS JOIN LATERAL (
        SELECT d.id, d.ctid FROM webhook_deliveries d
        WHERE d.endpoint_id = c.endpoint_id AND ${due}
        ORDER BY d.next_attempt_at
        LIMIT c.room
        FOR UPDATE SKIP LOCKED
      ) d
      LIMIT ${o.limit}
    ),
    -- The rows are locked by this statement, so their ctids are stable: leasing by ctid is a TID
    -- scan whatever the statistics say. Joining on id was planned as a full index scan when the
    -- table's statistics were stale (measured 78-190 ms per claim of 64 instead of ~1 ms).
    leased AS (
      UPDATE webhook_deliveries w SET lease_until = now() + ${o.leaseMs}::int * interval '1 millisecond'
      WHERE w.ctid = ANY (ARRAY(SELECT ctid FROM picked))
      RETURNING w.id, w.ctid::text AS ctid, w.tenant_id, w.endpoint_id, w.event_id, w.event_type, w.attempt_number
    )
    -- The envelope by a scalar subquery: one primary-key probe per row, whatever the statistics say.
    SELECT l.id, l.ctid, l.tenant_id, l.endpoint_id, l.event_type, l.attempt_number, p.url, p.signing_secret_enc,
      convert_from((SELECT b.payload FROM webhook_payloads b WHERE b.event_id = l.event_id), 'UTF8') AS payload
    FROM leased l JOIN picked p ON p.id = l.id
  `.execute(db);
  return result.rows;
}

/**
 * Due deliveries of active endpoints (what the deliverers have yet to take), and how long the
 * oldest has waited past its due time: one probe of the due index per active endpoint.
 */
export async function webhookBacklog(db: Queryable): Promise<WebhookBacklog> {
  const { rows } = await sql<{ due: number; oldest_due_seconds: number }>`
    SELECT coalesce(sum(d.n), 0)::int AS due, coalesce(extract(epoch FROM now() - min(d.oldest)), 0)::float8 AS oldest_due_seconds
    FROM webhook_endpoints e
    CROSS JOIN LATERAL (
      SELECT count(*) AS n, min(d.next_attempt_at) AS oldest FROM webhook_deliveries d
      WHERE d.endpoint_id = e.id AND d.status IN ('pending', 'retrying') AND d.next_attempt_at <= now()
    ) d
    WHERE e.is_active AND e.deleted_at IS NULL
  `.execute(db);
  return { due: rows[0].due, oldestDueSeconds: Math.max(0, rows[0].oldest_due_seconds) };
}

/**
 * Leased rows are written back by the ctid their claim returned, and the planner is held to that
 * TID scan with a hash join against the batch. Left to statistics (often taken while the queue was
 * empty) it walked the due index or scanned the table, nested-looping over the batch: measured
 * 34 ms, and with other predicates up to 1.9 s, for 435 rows that the TID plan writes in 11 ms.
 * Transaction-local; `plannerDefaults` puts it back for the rest of the transaction.
 */
const tidScanOnly = sql`SELECT set_config('enable_seqscan', 'off', true), set_config('enable_indexscan', 'off', true),
  set_config('enable_bitmapscan', 'off', true), set_config('enable_nestloop', 'off', true)`;
const plannerDefaults = sql`SELECT set_config('enable_seqscan', 'on', true), set_config('enable_indexscan', 'on', true),
  set_config('enable_bitmapscan', 'on', true), set_config('enable_nestloop', 'on', true)`;

/** Gives claimed rows that were never attempted back to the queue (their attempt count unchanged). */
export async function releaseLeases(db: Db, rows: ClaimedDelivery[]): Promise<void> {
  if (rows.length === 0) return;
  await db.transaction().execute(async (tx) => {
    await tidScanOnly.execute(tx);
    await sql`
      UPDATE webhook_deliveries d SET lease_until = NULL
      FROM unnest(${rows.map((r) => r.id)}::uuid[], ${rows.map((r) => r.attempt_number)}::int[]) AS v(id, attempt_number)
      WHERE d.ctid = ANY (${rows.map((r) => r.ctid)}::tid[]) AND d.id = v.id AND d.attempt_number = v.attempt_number
        AND d.status IN ('pending', 'retrying')
    `.execute(tx);
  });
}

export interface AttemptResult extends LoggedOutcome {
  delivery: ClaimedDelivery;
  /** Delay before the next attempt; null when this failure was the last attempt (abandoned). */
  retryDelayMs: number | null;
}

/**
 * Records a batch of finished attempts and their effect on each endpoint in ONE statement (one
 * round trip, one transaction), so the failure count can never disagree with the log: the delivery
 * rows through webhook_record_attempts (migration 0012), whose per-endpoint outcome updates the
 * endpoint rows. Rows are matched on their claimed attempt number: a result that arrives after its
 * lease expired and another worker re-attempted is dropped. Results are in completion order, which
 * decides what "consecutive" means within the batch. Returns how many results were recorded.
 *
 * Endpoint rows are locked in id order first (`locked`), so concurrent flushers touching the same
 * endpoints never deadlock; the update reads the endpoint's failure count from the row it updates,
 * which under READ COMMITTED is its latest committed version once locked.
 */
export async function recordAttemptResults(db: Queryable, results: AttemptResult[]): Promise<number> {
  if (results.length === 0) return 0;
  const count = sql`CASE WHEN n.had_success THEN n.trailing_failures ELSE e.consecutive_failures + n.failures END`;
  const column = <T>(pick: (r: AttemptResult) => T) => results.map(pick);
  const { rows } = await sql<{ recorded: number }>`
    WITH n AS MATERIALIZED (
      SELECT * FROM webhook_record_attempts(
        ${column((r) => r.delivery.ctid)}::tid[], ${column((r) => r.delivery.id)}::uuid[], ${column((r) => r.delivery.tenant_id)}::uuid[],
        ${column((r) => r.delivery.attempt_number)}::int[], ${column((r) => r.ok)}::boolean[], ${column((r) => r.statusCode)}::int[],
        ${column((r) => r.responseTimeMs)}::int[], ${column((r) => r.responseBody)}::text[], ${column((r) => r.errorClass)}::text[],
        ${column((r) => r.errorMessage)}::text[], ${column((r) => r.retryDelayMs)}::bigint[], ${column((r) => r.delivery.url)}::text[]
      )
    ),
    locked AS (
      SELECT e.id FROM webhook_endpoints e WHERE e.id IN (SELECT endpoint_id FROM n) ORDER BY e.id FOR UPDATE
    ),
    endpoints AS (
      UPDATE webhook_endpoints e SET
        consecutive_failures = ${count},
        is_active = e.is_active AND ${count} < ${AUTO_DISABLE_AFTER},
        updated_at = CASE WHEN e.is_active AND ${count} >= ${AUTO_DISABLE_AFTER} THEN now() ELSE e.updated_at END,
        last_success_at = CASE WHEN n.had_success THEN now() ELSE e.last_success_at END,
        last_failure_at = CASE WHEN n.failures > 0 THEN now() ELSE e.last_failure_at END
      FROM locked l JOIN n ON n.endpoint_id = l.id
      WHERE e.id = l.id AND e.tenant_id = n.tenant_id
    )
    -- Losing this commit in a database crash loses no delivery: the rows are still leased and are
    -- attempted again after the lease (at-least-once; receivers deduplicate on the event id). Not
    -- waiting for the WAL flush is what lets a worker record thousands of attempts per second.
    -- (Transaction-local: it applies to this statement's commit.)
    SELECT (SELECT coalesce(sum(n.recorded), 0) FROM n)::int AS recorded, set_config('synchronous_commit', 'off', true) AS commit_mode
  `.execute(db);
  return rows[0].recorded;
}
