import { createHash } from 'node:crypto';
import type { Logger } from 'pino';
import type { Db } from '../db/database.ts';
import type { LivenessSession, ProcessLiveness } from '../db/process-liveness.ts';
import { campaignQueue } from '../modules/campaigns/campaigns.queue.ts';

/** Advisory lock class of a number's ownership ('NUMB'); the key is derived from tenant and number. */
const NUMBER_LOCK_CLASS = 0x4e554d42;
/**
 * A process sends for a number only while it knew its session alive less than this long ago: a
 * process cut off from the database stops sending within it, so the number's next owner knows which
 * of its claims were never sent.
 */
export const OWNERSHIP_FENCE_MS = 1000;
/** Added to the fence for clocks of different hosts and the slot's rounding. */
const CLOCK_MARGIN_MS = 250;
/** How often a process tries to take a number another holds (the takeover after a death waits at most this). */
const RETRY_MS = 300;
/** A number this process has not sent for in this long is let go, for any process to take. */
const IDLE_MS = 30_000;
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** 31 bits of a hash of tenant and number (a collision only makes two numbers share an owner). */
export function numberLockKey(tenantId: string, phoneNumberId: string): number {
  return createHash('sha256').update(`${tenantId}:${phoneNumberId}`).digest().readUInt32BE(0) >>> 1;
}

/**
 * The right to send for one number, as long as the session it was taken on lives. `taken`: the
 * number was taken just now (its previous owner's sends may still be on their way).
 */
export interface NumberLease { readonly key: number; readonly session: LivenessSession; readonly taken?: boolean }

/**
 * Which process sends for a number (issue 24 §2, §3): one at a time, the holder of a session-level
 * advisory lock on its liveness connection. Its per-process send window then bounds every second at
 * the upstream exactly, however many workers run. The lock ends with the process or its connection,
 * so another process takes the number over within RETRY_MS of a death and puts back at once the
 * claims the dead one could not have sent. Embedded (one process), every number is this process's.
 */
export class NumberOwnership {
  private owned = new Map<number, { session: LivenessSession; usedAt: number }>();
  private tried = new Map<number, number>();

  constructor(private db: Db, private liveness: ProcessLiveness, private logger?: Logger) {}

  /** Stamped on this process's claims. */
  get claimant(): string { return this.liveness.processId; }

  /** This process's lease on the number, taking the number if no live process holds it; null if another does. */
  async lease(tenantId: string, phoneNumberId: string): Promise<NumberLease | null> {
    const key = numberLockKey(tenantId, phoneNumberId);
    const now = Date.now();
    await this.letIdleGo(now);
    const held = this.owned.get(key);
    const confirmedAt = held ? this.liveness.confirmedAt(held.session) : -Infinity;
    if (held && confirmedAt !== -Infinity) {
      held.usedAt = now;
      // Not confirmed lately (a slow or half-open connection): nothing new is claimed meanwhile.
      return performance.now() < confirmedAt + OWNERSHIP_FENCE_MS ? { key, session: held.session } : null;
    }
    this.owned.delete(key);
    if (now - (this.tried.get(key) ?? 0) < RETRY_MS) return null;
    if (this.tried.size > 10_000) this.tried.clear();
    this.tried.set(key, now);
    const session = await this.liveness.tryLock(NUMBER_LOCK_CLASS, key).catch(() => null);
    if (!session) return null;
    try {
      // Claims of live processes are theirs (the tenant's number changed, say): only the dead's go back.
      const back = await campaignQueue.takeOver(this.db, tenantId, this.claimant, OWNERSHIP_FENCE_MS + CLOCK_MARGIN_MS, this.gone);
      if (back > 0) this.logger?.info({ tenant_id: tenantId, recipients: back }, 'number taken over: claims its previous owner never sent went back to pending');
    } catch (err) {
      await this.liveness.unlock(session, NUMBER_LOCK_CLASS, key);
      throw err;
    }
    this.owned.set(key, { session, usedAt: now });
    return { key, session, taken: true };
  }

  /**
   * Claims of dead processes never written (so never sent) go back to pending, whether or not
   * anyone takes their numbers over: a dead owner's claims of a campaign's last recipients too.
   */
  async returnUnwritten(onlyTenants?: string[]): Promise<number> {
    const back = await campaignQueue.returnUnwritten(this.db, this.claimant, this.gone, onlyTenants);
    if (back > 0) this.logger?.info({ recipients: back }, 'claims of a dead process it never sent went back to pending');
    return back;
  }

  private readonly gone = async (claimants: string[]): Promise<string[]> =>
    (await Promise.all(claimants.map(async (c) => ((await this.liveness.isAlive(c)) ? null : c)))).filter((c) => c !== null);

  /**
   * Whether a send under the lease may be issued now; waits (at most until `by`) while the session
   * is not confirmed alive recently enough. False once the session has ended or `by` has passed.
   */
  async mayIssue(lease: NumberLease, by: number): Promise<boolean> {
    for (;;) {
      if (this.owned.get(lease.key)?.session !== lease.session) return false;
      const confirmedAt = this.liveness.confirmedAt(lease.session);
      if (confirmedAt === -Infinity) return false;
      // Monotonic: a clock stepped back must not stretch the fence.
      if (performance.now() < confirmedAt + OWNERSHIP_FENCE_MS) return true;
      if (Date.now() >= by) return false;
      await sleep(50);
    }
  }

  private async letIdleGo(now: number): Promise<void> {
    for (const [key, held] of this.owned) {
      if (now - held.usedAt < IDLE_MS) continue;
      this.owned.delete(key);
      await this.liveness.unlock(held.session, NUMBER_LOCK_CLASS, key).catch(() => {});
    }
  }
}
