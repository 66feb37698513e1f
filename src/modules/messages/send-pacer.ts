import type { Redis } from 'ioredis';
import { TIMED_OUT, withDeadline } from '../../http/rate-limit.ts';

/**
 * Pacing of sends per phone number (Meta's throughput: messages per second), shared by every
 * worker process through Redis when it is configured.
 *
 * Each number has a theoretical arrival time (GCRA): a reservation of n sends gets n slots spaced
 * 1/rate apart from max(now, tat), and tat moves past them. Senders send each message at its slot,
 * so no second ever carries more than the rate, however many workers share the number. Slots are
 * handed out at most `horizonMs` ahead, which bounds what a crashed worker can waste.
 *
 * A number that answered 130429 (throughput exceeded) has its rate halved, then raised back by a
 * quarter every `recoveryMs` without another 130429.
 */
export interface Reservation {
  granted: number;
  /** Epoch ms of the first slot. */
  startAt: number;
  /** Ms between two slots. */
  intervalMs: number;
}

export interface PacerOptions {
  horizonMs?: number;
  recoveryMs?: number;
}

const MIN_FACTOR = 1 / 64;

interface PaceState { tat: number; factor: number; penalisedAt: number }

function effectiveFactor(state: PaceState, now: number, recoveryMs: number): number {
  if (state.factor >= 1) return 1;
  const steps = Math.floor((now - state.penalisedAt) / recoveryMs);
  return Math.min(1, state.factor * 1.25 ** steps);
}

function reserveFrom(state: PaceState, now: number, want: number, unit: number, rate: number, horizonMs: number, recoveryMs: number): Reservation {
  const interval = 1000 / (rate * effectiveFactor(state, now, recoveryMs));
  const tat = Math.max(state.tat, now);
  // A number with nothing reserved gets its slot now even when the horizon is shorter than one
  // slot (else a number slower than one slot per horizon never got one).
  const fit = Math.floor((now + horizonMs - tat) / interval);
  const room = tat === now ? Math.max(1, fit) : fit;
  const whole = Math.max(1, Math.min(unit, want, Math.floor(horizonMs / interval)));
  const granted = Math.floor(Math.max(0, Math.min(want, room)) / whole) * whole;
  state.tat = tat + granted * interval;
  return { granted, startAt: tat, intervalMs: interval };
}

// The same arithmetic in Lua, so that a reservation is one atomic round trip.
const RESERVE_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local want, rate, horizon, recovery, unit = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local s = redis.call('HMGET', KEYS[1], 'tat', 'factor', 'pen')
local tat = tonumber(s[1]) or 0
local factor = tonumber(s[2]) or 1
local pen = tonumber(s[3]) or 0
if factor < 1 then
  factor = math.min(1, factor * (1.25 ^ math.floor((now - pen) / recovery)))
end
local interval = 1000 / (rate * factor)
if tat < now then tat = now end
local granted = math.floor((now + horizon - tat) / interval)
if tat == now and granted < 1 then granted = 1 end
if granted > want then granted = want end
if granted < 0 then granted = 0 end
-- Whole units only (a unit is never more than asked for or than the horizon holds): the rest waits for the next call.
local whole = math.max(1, math.min(unit, want, math.floor(horizon / interval)))
granted = math.floor(granted / whole) * whole
redis.call('HSET', KEYS[1], 'tat', tostring(tat + granted * interval))
redis.call('PEXPIRE', KEYS[1], 3600000)
return { granted, tostring(tat), tostring(interval), tostring(now) }
`;

const PENALISE_LUA = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local recovery, minFactor = tonumber(ARGV[1]), tonumber(ARGV[2])
local s = redis.call('HMGET', KEYS[1], 'factor', 'pen')
local factor = tonumber(s[1]) or 1
local pen = tonumber(s[2]) or 0
if factor < 1 then factor = math.min(1, factor * (1.25 ^ math.floor((now - pen) / recovery))) end
-- One halving per recovery period: a burst of 130429 answers to one reservation counts once.
if now - pen >= 1000 then
  factor = math.max(minFactor, factor / 2)
  redis.call('HSET', KEYS[1], 'factor', tostring(factor), 'pen', tostring(now))
  redis.call('PEXPIRE', KEYS[1], 3600000)
end
return tostring(factor)
`;

type RedisWithPace = Redis & {
  paceReserve(key: string, want: number, rate: number, horizon: number, recovery: number, unit: number): Promise<[number, string, string, string]>;
  pacePenalise(key: string, recovery: number, minFactor: number): Promise<string>;
};

export class SendPacer {
  private memory = new Map<string, PaceState>();
  private redis: RedisWithPace | null;
  private readonly horizonMs: number;
  private readonly recoveryMs: number;
  private offset: { value: number; at: number } | null = null;

  constructor(redis: Redis | null, options: PacerOptions = {}, private deadlineMs = 200) {
    this.horizonMs = options.horizonMs ?? 1000;
    this.recoveryMs = options.recoveryMs ?? 5000;
    if (redis && !('paceReserve' in redis)) {
      redis.defineCommand('paceReserve', { numberOfKeys: 1, lua: RESERVE_LUA });
      redis.defineCommand('pacePenalise', { numberOfKeys: 1, lua: PENALISE_LUA });
    }
    this.redis = redis as RedisWithPace | null;
  }

  private local(phoneNumberId: string): PaceState {
    let state = this.memory.get(phoneNumberId);
    if (!state) {
      if (this.memory.size > 10_000) this.memory.clear();
      state = { tat: 0, factor: 1, penalisedAt: 0 };
      this.memory.set(phoneNumberId, state);
    }
    return state;
  }

  /**
   * Up to `want` send slots for this number at `rate` per second, a whole multiple of `unit` (a
   * unit larger than `want` or than the horizon holds shrinks to fit, so a low rate still gets slots). Without
   * Redis (or while it does not answer) pacing holds per process.
   */
  async reserve(phoneNumberId: string, want: number, rate: number, unit = 1): Promise<Reservation> {
    if (this.redis) {
      try {
        const reply = await withDeadline(this.redis.paceReserve(`pace:${phoneNumberId}`, want, rate, this.horizonMs, this.recoveryMs, unit), this.deadlineMs);
        if (reply !== TIMED_OUT) {
          const [granted, tat, interval, redisNow] = reply;
          return { granted: Number(granted), startAt: Number(tat) + this.clockOffset(Number(redisNow)), intervalMs: Number(interval) };
        }
      } catch { /* Redis unavailable: pace in process */ }
    }
    return reserveFrom(this.local(phoneNumberId), Date.now(), want, unit, rate, this.horizonMs, this.recoveryMs);
  }

  /**
   * Redis's clock onto ours. Each reply carries Redis's time plus the reply's trip back, so the
   * smallest difference seen is the closest to the true offset; taking each reply's own difference
   * would shift consecutive reservations against each other by their round trips. Renewed every
   * minute so that clock drift is followed.
   */
  private clockOffset(redisNow: number): number {
    const now = Date.now();
    const measured = now - redisNow;
    if (!this.offset || measured < this.offset.value || now - this.offset.at > 60_000) this.offset = { value: measured, at: now };
    return this.offset.value;
  }

  /** The number answered 130429: halve its rate for a while. */
  async penalise(phoneNumberId: string): Promise<void> {
    const state = this.local(phoneNumberId);
    const now = Date.now();
    if (now - state.penalisedAt >= 1000) {
      state.factor = Math.max(MIN_FACTOR, effectiveFactor(state, now, this.recoveryMs) / 2);
      state.penalisedAt = now;
    }
    if (this.redis) {
      try { await withDeadline(this.redis.pacePenalise(`pace:${phoneNumberId}`, this.recoveryMs, MIN_FACTOR), this.deadlineMs); } catch { /* in process only */ }
    }
  }
}

/** Gives a send's place back: `sent` false when nothing was sent (then it leaves the window at once). */
export type Release = (sent?: boolean) => void;

/**
 * One process's sends to one number: at most `limit` in any one-second window as the upstream
 * receives them. A send reaches the upstream somewhere between being issued and its answer, so it
 * holds a place from its issue until a window after its answer, and a send is issued only while
 * fewer than `limit` places are held. Then no second at the upstream can carry more than `limit`,
 * however the sends are delayed on the way (a pause in this process, the network, the upstream):
 * evenly spaced slots alone do not hold this, since sends held up together arrive together.
 * Sends are let through in the order they ask.
 */
export class SendWindow {
  private inFlight = 0;
  /** When each answered send leaves the window, ascending from `head`. */
  private leaving: number[] = [];
  private head = 0;
  private answered: (() => void) | null = null;
  private turn: Promise<unknown> = Promise.resolve();
  /** Sends waiting for a place. */
  waiting = 0;
  /** Places held for another process's sends that may still reach the upstream (setForeign). */
  private foreign = 0;

  constructor(private readonly windowMs = 1000) {}

  /**
   * Waits for a place and returns what gives it back; null once `deadline` (epoch ms) has come
   * without one, even if a place is free then: that send must not go out.
   */
  acquire(limit: number): Promise<Release>;
  acquire(limit: number, deadline: number): Promise<Release | null>;
  acquire(limit: number, deadline = Infinity): Promise<Release | null> {
    this.waiting++;
    const mine = this.turn.then(() => this.place(limit, deadline)).finally(() => { this.waiting--; });
    this.turn = mine;
    return mine;
  }

  /**
   * How many sends of a number's previous owner may still reach the upstream (issued, neither
   * answered nor heard of since): each holds a place, as this process's own sends in flight do, and
   * one that stops counting leaves a window later, as an answered send does.
   */
  setForeign(count: number): void {
    const now = Date.now();
    for (let gone = this.foreign - count; gone > 0; gone--) this.leaving.push(now + this.windowMs);
    this.foreign = Math.max(0, count);
    this.answered?.();
    this.answered = null;
  }

  private async place(limit: number, deadline: number): Promise<Release | null> {
    for (;;) {
      const now = Date.now();
      while (this.head < this.leaving.length && this.leaving[this.head] <= now) this.head++;
      if (this.head > 1024) { this.leaving = this.leaving.slice(this.head); this.head = 0; }
      if (now >= deadline) return null;
      if (this.inFlight + this.foreign + this.leaving.length - this.head < limit) break;
      // Until the first answered send leaves, or (all in flight) an answer, or the deadline.
      const until = Math.min(deadline, this.head < this.leaving.length ? this.leaving[this.head] : Infinity);
      await new Promise<void>((resolve) => {
        const timer = until === Infinity ? null : setTimeout(resolve, until - now);
        this.answered = () => { if (timer) clearTimeout(timer); resolve(); };
      });
    }
    this.inFlight++;
    let held = true;
    return (sent = true) => {
      if (!held) return;
      held = false;
      this.inFlight--;
      if (sent) this.leaving.push(Date.now() + this.windowMs);
      this.answered?.();
      this.answered = null;
    };
  }
}
