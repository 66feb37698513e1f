import type { Logger } from 'pino';
import { decryptSecret } from '../crypto/secrets.ts';
import type { Db } from '../db/database.ts';
import { claimDueDeliveries, recordAttemptResults, releaseLeases, type AttemptResult, type ClaimedDelivery } from '../modules/webhooks/webhooks.queue.ts';
import { toLoggedOutcome, type WebhookSender } from '../modules/webhooks/webhooks.sender.ts';
import type { WorkerLoop } from './loop.ts';

// One flush at a time: a second one would only wait on the first's endpoint row locks, and records
// in completion order keep "consecutive failures" meaningful.
const MAX_PARALLEL_FLUSHES = 1;
/**
 * Finished attempts are recorded once a slot set's worth (`concurrency`) is ready, or this long after
 * the first of them: each record is a round trip and a statement whose fixed cost is shared by its
 * batch. A crash in between loses no delivery (the rows are still leased; see recordAttemptResults).
 */
const FLUSH_DELAY_MS = 10;
/** Rows a process holds at most (in flight, or claimed and waiting), in slot sets (`concurrency`). */
const HELD_SLOT_SETS = 6;
/** Retries are looked for at least this often while fresh work keeps the claims busy. */
const RETRY_CLAIM_MS = 100;
const DRAIN_GRACE_MS = 2_000;
/**
 * How long a claimed row may wait in memory for a slot. A claim carries the endpoint's URL and
 * secret as they were; keeping the wait short keeps an attempt that starts after a secret rotation,
 * URL change or delete on the old values to rows claimed within this moment before it.
 */
const MAX_WAIT_MS = 1_000;
/** Per endpoint, about this long's worth of its attempts may be claimed ahead (see aheadOf). */
const AHEAD_MS = 100;

interface Waiting {
  row: ClaimedDelivery;
  isRetry: boolean;
  claimedAt: number;
}

export interface DelivererOptions {
  secretsKey: Buffer;
  retryDelaysMs: number[];
  leaseMs: number;
  timeoutMs: number;
  pollMs: number;
  concurrency: number;
  endpointConcurrency: number;
  retryConcurrency: number;
}

/**
 * Delivers webhook rows: claims due rows (leased, SKIP LOCKED), POSTs them concurrently with no
 * transaction open, and records finished attempts in batches (one statement per batch, deliveries
 * and endpoint failure counts together). Batching the writes is what lets one worker keep up with a
 * campaign's event rate: a transaction per attempt would cap it at the database's commit rate, and
 * the per-batch cost (round trip, planning) is much of an event's cost when batches are small.
 *
 * Claims run ahead of the slots: claimed rows wait in memory, so a slot that frees up is refilled
 * at once instead of after a claim round trip (measured: without it the slots sat mostly empty
 * while claims were in flight). A row that waited longer than MAX_WAIT_MS, or so long that its
 * attempt could outlive its lease, is not started but given back.
 *
 * Fairness: at most `endpointConcurrency` attempts per endpoint are in flight (a hung endpoint
 * holds a few slots, never all of them); retries may use at most `retryConcurrency` slots, so the
 * rest is always available to first attempts and a backlog of retries to dead endpoints cannot
 * starve fresh traffic. A slot frees when its attempt ends; the row stays leased until its result
 * is recorded.
 *
 * Per endpoint: at most its cap in flight, and behind them a claim-ahead of one cap, or for an
 * endpoint that answers fast, about AHEAD_MS of its attempts (see aheadOf): with one cap ahead, a
 * fast endpoint's slots sat empty for most of every claim round trip. A claim that finds nothing
 * because the endpoints with work are at those limits is not idleness: the loop waits for such an
 * endpoint to finish attempts, not the idle poll. (With the idle poll and one cap ahead, one endpoint
 * at the default settings got 16 rows per WEBHOOK_POLL_MS: ~130 events/s however fast its receiver.)
 */
export class WebhookDeliverer {
  private inflight = 0;
  private inflightRetries = 0;
  /** Attempts in flight per endpoint (the per-endpoint cap). */
  private busy = new Map<string, number>();
  /** Claimed rows waiting for a slot, FIFO per endpoint and kind (a retry held back by the retry cap never blocks first attempts). */
  private ready = new Map<string, Waiting[]>();
  private readyCount = 0;
  private readyRetries = 0;
  private lastRetryClaim = 0;
  /**
   * Per endpoint: recent attempt duration (ms, moving average), and when it last made progress (an
   * attempt ended, or one started with none in flight). Sizes its claim-ahead.
   */
  private pace = new Map<string, { ms: number; progressAt: number }>();
  private finished: AttemptResult[] = [];
  /** Flushes in progress (at most MAX_PARALLEL_FLUSHES). */
  private flushes = new Set<Promise<void>>();
  private flushTimer: NodeJS.Timeout | undefined;
  private slotWaiters = new Set<() => void>();
  private attempts = new Set<Promise<void>>();
  private secrets = new Map<string, string>();
  private stopping = false;
  private drained = false;
  /** Counters for benchmarks and metrics: claim and record round trips and the time they took. */
  readonly stats = { claims: 0, claimed: 0, largestClaim: 0, claimMs: 0, flushes: 0, flushed: 0, flushMs: 0, slotWaits: 0, capWaits: 0, expiredWaiting: 0 };

  constructor(private db: Db, private sender: WebhookSender, private options: DelivererOptions, private logger: Logger) {}

  loop(): WorkerLoop {
    return { name: 'webhook-deliverer', intervalMs: this.options.pollMs, runOnce: () => this.runOnce(), stop: () => this.drain() };
  }

  /** Claims rows and starts what the slots allow; returns how many were claimed (0: idle, the loop waits pollMs). */
  async runOnce(): Promise<number> {
    if (this.stopping) return 0;
    const { concurrency, endpointConcurrency, retryConcurrency, leaseMs } = this.options;
    this.fill();
    // Claim in batches, once less than a slot set's worth of rows is about to start (enough to keep
    // the slots busy through a claim's round trip on a loaded database); and not while too many
    // results wait to be recorded (the database is slow or down). Only rows about to start count:
    // rows held back by a saturated (slow or hung) endpoint must not stop claims for the others.
    const enoughWaiting = () => this.startableWaiting() >= concurrency || this.finished.length > 2 * concurrency;
    if (enoughWaiting()) {
      this.stats.slotWaits++;
      // Woken when that no longer holds, not at every attempt that ends.
      await this.waitForSlots(this.options.pollMs, () => !enoughWaiting());
      return 1;
    }
    const room = Math.max(0, HELD_SLOT_SETS * concurrency - this.inflight - this.readyCount);
    // Per endpoint, in flight plus waiting stays within its limit (limitOf; two caps by default).
    const claim = (kind: 'first' | 'retry', limit: number) =>
      claimDueDeliveries(this.db, { kind, limit, endpointCap: 2 * endpointConcurrency, room: this.roomPerEndpoint(), leaseMs });
    const started = performance.now();
    const fresh = await claim('first', room);
    this.enqueue(fresh, false);
    // Retries are looked for when there was no fresh work, and at least every RETRY_CLAIM_MS while
    // there is, so they are delayed at most that long but never cost a query per batch. (A claim
    // held back by endpoint limits returns less than `room` with fresh work still due, and a claim
    // of retries walks past the endpoint's due first attempts: measured, a backlog of 5,000 made
    // each such claim cost more than the batch of first attempts before it.)
    const retryRoom = Math.min(room - fresh.length, retryConcurrency - this.inflightRetries - this.readyRetries);
    const now = Date.now();
    let retries: ClaimedDelivery[] = [];
    if (retryRoom > 0 && (fresh.length === 0 || now - this.lastRetryClaim >= RETRY_CLAIM_MS)) {
      this.lastRetryClaim = now;
      retries = await claim('retry', retryRoom);
      this.enqueue(retries, true);
    }
    this.stats.claims++;
    this.stats.claimed += fresh.length + retries.length;
    this.stats.largestClaim = Math.max(this.stats.largestClaim, fresh.length + retries.length);
    this.stats.claimMs += performance.now() - started;
    this.fill();
    const claimed = fresh.length + retries.length;
    // Endpoints at their limit were skipped by the claim, so room it left is no sign that nothing is due.
    const capped = this.cappedEndpoints();
    if (capped.length === 0 || (room > 0 && fresh.length >= room)) return claimed;
    // The claim took every due row of the endpoints below their limit; what is left waits on the
    // capped ones. Claim again once one of them has room for half a cap (not a claim per finished
    // attempt), or after the idle interval for other endpoints' new work.
    this.stats.capWaits++;
    const reclaim = Math.ceil(endpointConcurrency / 2);
    await this.waitForSlots(this.options.pollMs, () => capped.some((id) => this.heldBy(id) <= this.limitOf(id) - reclaim));
    return Math.max(1, claimed);
  }

  /**
   * Graceful shutdown: gives in-flight attempts a short grace to finish and records what finished.
   * Attempts still running after it (a hung receiver holds one for the whole timeout) are left to
   * their lease: another worker attempts them again, so shutdown never waits 10 s for a dead endpoint.
   */
  async drain(graceMs = DRAIN_GRACE_MS): Promise<void> {
    this.stopping = true;
    const waiting = [...this.ready.values()].flat().map((w) => w.row);
    this.ready.clear();
    this.readyCount = 0;
    this.readyRetries = 0;
    // Rows claimed but never attempted go back to the queue now rather than when their lease lapses.
    await releaseLeases(this.db, waiting).catch((err) => this.logger.error({ err }, 'releasing unattempted webhook claims failed; their leases will lapse'));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all([...this.attempts]),
      new Promise<void>((resolve) => { timer = setTimeout(resolve, graceMs); }),
    ]);
    clearTimeout(timer);
    while (this.finished.length > 0 || this.flushes.size > 0) {
      if (this.flushes.size === 0) this.scheduleFlush(true);
      await Promise.race(this.flushes);
    }
    clearTimeout(this.flushTimer);
    this.drained = true;
  }

  private enqueue(rows: ClaimedDelivery[], isRetry: boolean) {
    const claimedAt = Date.now();
    for (const row of rows) {
      const key = `${isRetry ? 'retry' : 'first'}:${row.endpoint_id}`;
      const queue = this.ready.get(key);
      if (queue) queue.push({ row, isRetry, claimedAt });
      else this.ready.set(key, [{ row, isRetry, claimedAt }]);
    }
    this.readyCount += rows.length;
    if (isRetry) this.readyRetries += rows.length;
  }

  /** Starts waiting rows while slots, the per-endpoint cap and the retry cap allow. */
  private fill() {
    const { concurrency, endpointConcurrency, retryConcurrency, leaseMs, timeoutMs } = this.options;
    // A row must also be able to finish its attempt (timeout plus a margin) before its lease lapses.
    const startBy = Date.now() - Math.min(MAX_WAIT_MS, leaseMs - timeoutMs - Math.min(5_000, (leaseMs - timeoutMs) / 2));
    const expired: ClaimedDelivery[] = [];
    for (const [key, queue] of this.ready) {
      if (this.inflight >= concurrency) break;
      const endpointId = queue[0].row.endpoint_id;
      let busy = this.busy.get(endpointId) ?? 0;
      while (queue.length > 0 && this.inflight < concurrency && busy < endpointConcurrency) {
        const { row, isRetry, claimedAt } = queue[0];
        if (isRetry && this.inflightRetries >= retryConcurrency) break;
        queue.shift();
        this.readyCount -= 1;
        if (isRetry) this.readyRetries -= 1;
        if (claimedAt < startBy) {
          expired.push(row);
          continue;
        }
        this.start(row, isRetry);
        busy += 1;
      }
      if (queue.length === 0) this.ready.delete(key);
    }
    if (expired.length > 0) {
      // Back to the queue now, to be claimed again with the endpoint's current URL and secret.
      this.stats.expiredWaiting += expired.length;
      releaseLeases(this.db, expired).catch((err) => this.logger.error({ err }, 'releasing expired webhook claims failed; their leases will lapse'));
    }
  }

  /** Waiting rows that will start soon: those a free slot awaits, and a fast endpoint's claim-ahead. */
  private startableWaiting(): number {
    let startable = 0;
    for (const queue of this.ready.values()) {
      const id = queue[0].row.endpoint_id;
      const free = Math.max(0, this.options.endpointConcurrency - (this.busy.get(id) ?? 0));
      startable += Math.min(queue.length, free + this.aheadOf(id) - this.options.endpointConcurrency);
    }
    return startable;
  }

  /** Endpoints whose rows in flight plus waiting reached their limit: a claim skips them. */
  private cappedEndpoints(): string[] {
    return [...this.heldPerEndpoint()].filter(([id, held]) => held >= this.limitOf(id)).map(([id]) => id);
  }

  /** Rows an endpoint may have in flight and waiting together. */
  private limitOf(endpointId: string): number {
    return this.options.endpointConcurrency + this.aheadOf(endpointId);
  }

  /**
   * Claimed rows that may wait behind an endpoint's slots: what its slots get through in AHEAD_MS at
   * its recent response times, so a row waits about that long (well within MAX_WAIT_MS). Sized by
   * response times, not by the rate achieved, which a too small claim-ahead would hold down. At
   * least one cap's worth (an endpoint not attempted yet, or a slow one); with its slots, at most
   * half of what the process holds, so one endpoint leaves the other half to the rest. The larger
   * the claim-ahead, the larger the claims for a fast endpoint: each claim's fixed cost (a round
   * trip, planning, the endpoint scan) is shared by more rows. An endpoint that stopped answering
   * (attempts in flight, no progress for AHEAD_MS) is back to one cap at once, not after its timeouts:
   * no more rows are claimed for it, and those it holds no longer count as about to start (they are
   * given back after MAX_WAIT_MS).
   */
  private aheadOf(endpointId: string): number {
    const { endpointConcurrency, concurrency } = this.options;
    const pace = this.pace.get(endpointId);
    if (!pace || ((this.busy.get(endpointId) ?? 0) > 0 && performance.now() - pace.progressAt > AHEAD_MS)) return endpointConcurrency;
    const most = (HELD_SLOT_SETS / 2) * concurrency - endpointConcurrency;
    return Math.max(endpointConcurrency, Math.min(Math.floor((endpointConcurrency * AHEAD_MS) / Math.max(1, pace.ms)), most));
  }

  private recordPace(endpointId: string, ms: number, now: number) {
    const pace = this.pace.get(endpointId);
    if (pace) {
      pace.ms = pace.ms * 0.8 + ms * 0.2;
      pace.progressAt = now;
      return;
    }
    if (this.pace.size > 10_000) this.pace.clear();
    this.pace.set(endpointId, { ms, progressAt: now });
  }

  /** What a claim may still take per endpoint, where that is not the default of two caps. */
  private roomPerEndpoint(): Map<string, number> {
    const held = this.heldPerEndpoint();
    const room = new Map<string, number>();
    for (const [id, n] of held) room.set(id, Math.max(0, this.limitOf(id) - n));
    for (const id of this.pace.keys()) {
      if (!room.has(id) && this.aheadOf(id) > this.options.endpointConcurrency) room.set(id, this.limitOf(id));
    }
    return room;
  }

  /** One endpoint's rows in flight plus waiting (both kinds). */
  private heldBy(endpointId: string): number {
    return (this.busy.get(endpointId) ?? 0) + (this.ready.get(`first:${endpointId}`)?.length ?? 0) + (this.ready.get(`retry:${endpointId}`)?.length ?? 0);
  }

  /** Rows in flight plus rows waiting, per endpoint: what counts against the endpoint's limit. */
  private heldPerEndpoint(): Map<string, number> {
    const held = new Map(this.busy);
    for (const queue of this.ready.values()) {
      const id = queue[0].row.endpoint_id;
      held.set(id, (held.get(id) ?? 0) + queue.length);
    }
    return held;
  }

  private start(row: ClaimedDelivery, isRetry: boolean) {
    this.inflight += 1;
    if (isRetry) this.inflightRetries += 1;
    const busy = this.busy.get(row.endpoint_id) ?? 0;
    this.busy.set(row.endpoint_id, busy + 1);
    const startedAt = performance.now();
    const pace = this.pace.get(row.endpoint_id);
    if (pace && busy === 0) pace.progressAt = startedAt;
    const attempt = this.attemptOne(row).catch((err) => this.failed(row, 'internal', String(err))).then((result) => {
      // The HTTP slot is free as soon as the attempt ends; the row stays leased (invisible to
      // claims) until its result is recorded, so releasing early never double-sends.
      this.release(result.delivery);
      const now = performance.now();
      this.recordPace(row.endpoint_id, now - startedAt, now);
      if (this.drained) return; // shutting down past the grace: the lease brings it back
      this.finished.push(result);
      this.scheduleFlush();
      if (!this.stopping) this.fill();
      this.wakeSlotWaiters();
    });
    this.attempts.add(attempt);
    void attempt.finally(() => this.attempts.delete(attempt));
  }

  private async attemptOne(row: ClaimedDelivery): Promise<AttemptResult> {
    let secret: string;
    try {
      secret = this.secretOf(row.signing_secret_enc);
    } catch (err) {
      return this.failed(row, 'internal', `signing secret unavailable: ${(err as Error).message}`);
    }
    if (row.payload === null) return this.failed(row, 'internal', 'stored event envelope missing');
    const outcome = await this.sender.attempt({ url: row.url, endpointId: row.endpoint_id, eventType: row.event_type, payload: row.payload, secret });
    return { delivery: row, ...toLoggedOutcome(outcome), retryDelayMs: outcome.ok ? null : this.retryDelayAfter(row.attempt_number) };
  }

  private release(row: ClaimedDelivery) {
    this.inflight -= 1;
    if (row.attempt_number > 0) this.inflightRetries -= 1; // it was claimed as a retry
    const left = (this.busy.get(row.endpoint_id) ?? 1) - 1;
    if (left > 0) this.busy.set(row.endpoint_id, left);
    else this.busy.delete(row.endpoint_id);
  }

  private failed(row: ClaimedDelivery, errorClass: string, errorMessage: string): AttemptResult {
    return { delivery: row, ok: false, statusCode: null, responseTimeMs: 0, responseBody: null, errorClass, errorMessage, retryDelayMs: this.retryDelayAfter(row.attempt_number) };
  }

  /** Attempt n+1 just failed, with n attempts before it: delays[n] is the wait before attempt n+2; none left means abandoned. */
  private retryDelayAfter(previousAttempts: number): number | null {
    return this.options.retryDelaysMs[previousAttempts] ?? null;
  }

  private secretOf(sealed: string): string {
    let secret = this.secrets.get(sealed);
    if (secret === undefined) {
      secret = decryptSecret(this.options.secretsKey, sealed);
      if (this.secrets.size > 10_000) this.secrets.clear();
      this.secrets.set(sealed, secret);
    }
    return secret;
  }

  /** Records finished attempts: now if `now`, a batch is ready or the deliverer stops, else within FLUSH_DELAY_MS. */
  private scheduleFlush(now = false) {
    if (this.flushes.size >= MAX_PARALLEL_FLUSHES || this.finished.length === 0) return; // a flush that ends schedules the next
    if (!now && !this.stopping && this.finished.length < this.options.concurrency) {
      this.flushTimer ??= setTimeout(() => {
        this.flushTimer = undefined;
        this.scheduleFlush(true);
      }, FLUSH_DELAY_MS);
      return;
    }
    clearTimeout(this.flushTimer);
    this.flushTimer = undefined;
    const flush: Promise<void> = this.flush().finally(() => {
      this.flushes.delete(flush);
      this.scheduleFlush();
    });
    this.flushes.add(flush);
  }

  private async flush(): Promise<void> {
    const batch = this.finished.splice(0, 1000);
    try {
      const started = performance.now();
      await recordAttemptResults(this.db, batch);
      this.stats.flushes++;
      this.stats.flushed += batch.length;
      this.stats.flushMs += performance.now() - started;
      this.wakeSlotWaiters();
    } catch (err) {
      // Keep the results and the slots: the attempts happened; write them when the database is back.
      // If it stays down past the lease, another worker re-attempts and our stale write is dropped.
      this.logger.error({ err, count: batch.length }, 'recording webhook attempts failed; retrying');
      this.finished.unshift(...batch);
      await new Promise((r) => setTimeout(r, Math.min(1000, this.options.pollMs * 4)));
    }
  }

  private wakeSlotWaiters() {
    // A waiter removes itself when woken; a Set's iteration allows that.
    for (const wake of this.slotWaiters) wake();
  }

  /** Resolves when a slot frees (an attempt finished or results were recorded) and `ready` holds, or after `timeoutMs`. */
  private waitForSlots(timeoutMs: number, ready: () => boolean = () => true): Promise<void> {
    return new Promise((resolve) => {
      const done = () => { clearTimeout(timer); this.slotWaiters.delete(wake); resolve(); };
      const wake = () => { if (this.stopping || ready()) done(); };
      const timer = setTimeout(done, timeoutMs);
      this.slotWaiters.add(wake);
    });
  }
}
