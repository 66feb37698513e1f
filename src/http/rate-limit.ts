import type { Redis } from 'ioredis';

export interface RateLimitResult {
  allowed: boolean;
  minuteLimit: number;
  minuteRemaining: number;
  dayLimit: number;
  dayRemaining: number;
  /** Unix seconds at which the tighter window resets. */
  reset: number;
  /** Seconds until the exceeded window resets (only meaningful when not allowed). */
  retryAfter: number;
}

export interface WindowCounts {
  minute: number;
  day: number;
}

export interface RateCounter {
  /** Counts one request in both fixed windows; resolves null when the counter backend is unavailable. */
  hit(tenantId: string, minuteLimit: number): Promise<WindowCounts | null>;
  /** The current counts without counting (for responses that do not consume budget). */
  peek(tenantId: string): Promise<WindowCounts | null>;
}

const MINUTE_MS = 60_000;
const DAY_MS = 86_400_000;

export function windowsAt(now: number) {
  const minute = Math.floor(now / MINUTE_MS);
  const day = Math.floor(now / DAY_MS);
  return { minute, day, minuteReset: (minute + 1) * 60, dayReset: (day + 1) * 86_400 };
}

/**
 * Increment-then-check over fixed UTC windows. A request refused by the minute window does not
 * consume the day budget; one refused by the day window has already spent its minute slot.
 */
export async function checkRateLimit(counter: RateCounter, tenantId: string, minuteLimit: number, dayLimit: number, now = Date.now()): Promise<RateLimitResult | null> {
  const counts = await counter.hit(tenantId, minuteLimit);
  return counts && limitsFor(counts, minuteLimit, dayLimit, now);
}

/** The headers' figures for a response that spends nothing (a 403, an idempotent replay). */
export async function currentRateLimit(counter: RateCounter, tenantId: string, minuteLimit: number, dayLimit: number, now = Date.now()): Promise<RateLimitResult | null> {
  const counts = await counter.peek(tenantId);
  return counts && limitsFor(counts, minuteLimit, dayLimit, now);
}

function limitsFor(counts: WindowCounts, minuteLimit: number, dayLimit: number, now: number): RateLimitResult {
  const w = windowsAt(now);
  const unlimitedDay = dayLimit < 0;
  const minuteRemaining = Math.max(0, minuteLimit - counts.minute);
  const dayRemaining = unlimitedDay ? -1 : Math.max(0, dayLimit - counts.day);
  const minuteExceeded = counts.minute > minuteLimit;
  const dayExceeded = !unlimitedDay && !minuteExceeded && counts.day > dayLimit;
  // On a tie the day binds: once the minute resets, the spent day still refuses (so a client that
  // used its last daily request, or hit both windows, is told to come back at the day reset).
  const dayIsTighter = !unlimitedDay && (dayExceeded || dayRemaining <= minuteRemaining);
  const reset = dayIsTighter ? w.dayReset : w.minuteReset;
  return {
    allowed: !minuteExceeded && !dayExceeded,
    minuteLimit,
    minuteRemaining,
    dayLimit,
    dayRemaining,
    reset,
    retryAfter: Math.max(1, reset - Math.floor(now / 1000)),
  };
}

// One round trip, atomic: bump the minute counter, and the day counter only if the minute allows it.
const HIT_SCRIPT = `
local m = redis.call('INCR', KEYS[1])
if m == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local d
if m <= tonumber(ARGV[3]) then
  d = redis.call('INCR', KEYS[2])
  if d == 1 then redis.call('PEXPIRE', KEYS[2], ARGV[2]) end
else
  d = tonumber(redis.call('GET', KEYS[2]) or '0')
end
return {m, d}
`;

type RedisWithHit = Redis & { rateHit(k1: string, k2: string, a1: number, a2: number, a3: number): Promise<[number, number]> };

export const TIMED_OUT = Symbol('timed out');

/**
 * Settles with TIMED_OUT when `work` has not settled `ms` after the call. A plain timer is not
 * enough: when this process is busy (a burst of requests), the timer and Redis's reply become due in
 * the same event-loop turn and timers run before I/O, so a reply already received would count as a
 * timeout (measured: 200 concurrent requests on a loaded machine). One setImmediate lets the I/O
 * phase deliver it first; only a reply that has really not arrived is a timeout.
 */
export function withDeadline<T>(work: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => setImmediate(() => {
      if (!settled) { settled = true; resolve(TIMED_OUT); }
    }), ms);
    work.then(
      (value) => { if (!settled) { settled = true; clearTimeout(timer); resolve(value); } },
      (err) => { if (!settled) { settled = true; clearTimeout(timer); reject(err); } },
    );
  });
}

/**
 * A dead Redis fails commands at once, but an unreachable one (network partition, stopped process)
 * keeps the connection open and every command would wait for its deadline. So after a failure
 * requests stop calling Redis altogether, and a background ping brings counting back when it answers:
 * only the requests that discovered the outage wait (at most `deadlineMs` + `livenessMs`).
 */
export class RedisRateCounter implements RateCounter {
  private redis: RedisWithHit;
  private suspended = false;
  private liveness: Promise<unknown> | null = null;

  constructor(redis: Redis, private deadlineMs = 50, private probeMs = 200, private livenessMs = 100) {
    redis.defineCommand('rateHit', { numberOfKeys: 2, lua: HIT_SCRIPT });
    this.redis = redis as RedisWithHit;
  }

  async hit(tenantId: string, minuteLimit: number) {
    if (this.suspended) return null;
    const w = windowsAt(Date.now());
    try {
      const command = this.redis.rateHit(`rl:${tenantId}:m:${w.minute}`, `rl:${tenantId}:d:${w.day}`, MINUTE_MS * 2, DAY_MS + MINUTE_MS, minuteLimit);
      let counts = await withDeadline(command, this.deadlineMs);
      if (counts === TIMED_OUT) {
        // Slow is not down: on a busy process the reply may be queued behind other work, and the
        // script has already counted this request. Replies come in order, so a ping answered means
        // the count has arrived too; only a silent connection makes the request go uncounted.
        if ((await this.connectionAlive()) === TIMED_OUT) throw new Error('rate counter not answering');
        counts = await command;
      }
      const [minute, day] = counts;
      return { minute, day };
    } catch {
      this.suspend();
      return null; // Redis down or hung: allow the request, omit the headers.
    }
  }

  async peek(tenantId: string) {
    if (this.suspended) return null;
    const w = windowsAt(Date.now());
    try {
      const values = await withDeadline(this.redis.mget(`rl:${tenantId}:m:${w.minute}`, `rl:${tenantId}:d:${w.day}`), this.deadlineMs);
      if (values === TIMED_OUT) return null; // headers are omitted; nothing was counted, so nothing is lost
      return { minute: Number(values[0] ?? 0), day: Number(values[1] ?? 0) };
    } catch {
      return null;
    }
  }

  /** One shared liveness check for all requests that passed their deadline at the same time. */
  private connectionAlive(): Promise<unknown> {
    this.liveness ??= withDeadline(this.redis.ping(), this.livenessMs).finally(() => { this.liveness = null; });
    return this.liveness;
  }

  private suspend() {
    if (this.suspended) return;
    this.suspended = true;
    const probe = () => {
      if (this.redis.status === 'end') return; // closed on shutdown
      this.redis.ping().then(
        () => { this.suspended = false; },
        () => { setTimeout(probe, this.probeMs).unref(); },
      );
    };
    setTimeout(probe, this.probeMs).unref();
  }
}

export class MemoryRateCounter implements RateCounter {
  private counters = new Map<string, { minuteWindow: number; minute: number; dayWindow: number; day: number }>();

  async peek(tenantId: string) {
    const w = windowsAt(Date.now());
    const c = this.counters.get(tenantId);
    return { minute: c?.minuteWindow === w.minute ? c.minute : 0, day: c?.dayWindow === w.day ? c.day : 0 };
  }

  async hit(tenantId: string, minuteLimit: number) {
    const w = windowsAt(Date.now());
    let c = this.counters.get(tenantId);
    if (!c) this.counters.set(tenantId, (c = { minuteWindow: w.minute, minute: 0, dayWindow: w.day, day: 0 }));
    if (c.minuteWindow !== w.minute) Object.assign(c, { minuteWindow: w.minute, minute: 0 });
    if (c.dayWindow !== w.day) Object.assign(c, { dayWindow: w.day, day: 0 });
    c.minute += 1;
    if (c.minute <= minuteLimit) c.day += 1;
    return { minute: c.minute, day: c.day };
  }
}

export function rateLimitHeaders(r: RateLimitResult): Record<string, string> {
  return {
    'x-ratelimit-limit-minute': String(r.minuteLimit),
    'x-ratelimit-remaining-minute': String(r.minuteRemaining),
    'x-ratelimit-limit-day': String(r.dayLimit),
    'x-ratelimit-remaining-day': String(r.dayRemaining),
    'x-ratelimit-reset': String(r.reset),
  };
}
