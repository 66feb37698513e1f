import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  checkRateLimit, currentRateLimit, MemoryRateCounter, rateLimitHeaders, TIMED_OUT, windowsAt, withDeadline, type RateCounter, type WindowCounts,
} from '../src/http/rate-limit.ts';

/**
 * The decision from the two window counts (spec 8): allowed or not, what remains, which window's
 * reset is announced and how long Retry-After is, at an exact clock. The counts are given as they
 * come back from a counter (the counters themselves: rate-limit.counters.test.ts, against real Redis).
 */
const NOW = Date.UTC(2026, 0, 15, 10, 30, 15, 500); // 10:30:15.5 UTC
const NOW_S = Math.floor(NOW / 1000);
const MINUTE_RESET = Date.UTC(2026, 0, 15, 10, 31) / 1000;
const DAY_RESET = Date.UTC(2026, 0, 16) / 1000;

/** A counter that reports the given counts (what Redis or memory would have answered). */
const counted = (counts: WindowCounts | null): RateCounter => ({ hit: async () => counts, peek: async () => counts });
const decide = (minute: number, day: number, minuteLimit: number, dayLimit: number) =>
  checkRateLimit(counted({ minute, day }), 't', minuteLimit, dayLimit, NOW);

describe('rate limit decision', () => {
  afterEach(() => { vi.useRealTimers(); });

  it('fixed UTC windows: the minute and the day of a moment, and when each resets', () => {
    expect(windowsAt(NOW)).toEqual({ minute: Math.floor(NOW / 60_000), day: Math.floor(NOW / 86_400_000), minuteReset: MINUTE_RESET, dayReset: DAY_RESET });
  });

  it('within both limits: allowed, with what remains; the minute, being tighter, sets the reset', async () => {
    expect(await decide(3, 40, 5, 1000)).toEqual({
      allowed: true, minuteLimit: 5, minuteRemaining: 2, dayLimit: 1000, dayRemaining: 960, reset: MINUTE_RESET, retryAfter: MINUTE_RESET - NOW_S,
    });
    expect(MINUTE_RESET - NOW_S).toBe(45);
  });

  it('the last request of the minute is allowed; the next is refused until the minute resets', async () => {
    expect(await decide(5, 5, 5, 1000)).toMatchObject({ allowed: true, minuteRemaining: 0, dayRemaining: 995, reset: MINUTE_RESET });
    expect(await decide(6, 5, 5, 1000)).toMatchObject({ allowed: false, minuteRemaining: 0, dayRemaining: 995, reset: MINUTE_RESET, retryAfter: 45 });
  });

  it('past the day limit: refused until the day resets', async () => {
    expect(await decide(1, 1000, 5, 1000)).toMatchObject({ allowed: true, dayRemaining: 0, reset: DAY_RESET });
    expect(await decide(1, 1001, 5, 1000)).toEqual({
      allowed: false, minuteLimit: 5, minuteRemaining: 4, dayLimit: 1000, dayRemaining: 0, reset: DAY_RESET, retryAfter: DAY_RESET - NOW_S,
    });
  });

  it('the day sets the reset when it has as little left as the minute or less (a tie included)', async () => {
    expect(await decide(1, 996, 5, 1000)).toMatchObject({ allowed: true, minuteRemaining: 4, dayRemaining: 4, reset: DAY_RESET });
    expect(await decide(1, 997, 5, 1000)).toMatchObject({ minuteRemaining: 4, dayRemaining: 3, reset: DAY_RESET });
    expect(await decide(1, 995, 5, 1000)).toMatchObject({ minuteRemaining: 4, dayRemaining: 5, reset: MINUTE_RESET });
    // Both spent: Retry-After points to the day, when a retry can succeed.
    expect(await decide(6, 1000, 5, 1000)).toMatchObject({ allowed: false, minuteRemaining: 0, dayRemaining: 0, reset: DAY_RESET, retryAfter: DAY_RESET - NOW_S });
    expect(await decide(7, 1001, 5, 1000)).toMatchObject({ allowed: false, reset: DAY_RESET });
  });

  it('a day limit of 0 is no budget at all, not unlimited: the first request of the day is refused until the day resets', async () => {
    expect(await decide(1, 1, 5, 0)).toEqual({
      allowed: false, minuteLimit: 5, minuteRemaining: 4, dayLimit: 0, dayRemaining: 0, reset: DAY_RESET, retryAfter: DAY_RESET - NOW_S,
    });
  });

  it('a day limit of -1 is unlimited: never refuses, reports -1 remaining, and the minute sets the reset', async () => {
    expect(await decide(2, 5_000_000, 5, -1)).toEqual({
      allowed: true, minuteLimit: 5, minuteRemaining: 3, dayLimit: -1, dayRemaining: -1, reset: MINUTE_RESET, retryAfter: 45,
    });
    expect(await decide(6, 5_000_000, 5, -1)).toMatchObject({ allowed: false, dayRemaining: -1, reset: MINUTE_RESET });
  });

  it('Retry-After is at least one second, also in the last second of a window', async () => {
    const lastMs = MINUTE_RESET * 1000 - 1;
    expect(await checkRateLimit(counted({ minute: 9, day: 9 }), 't', 5, 1000, lastMs)).toMatchObject({ allowed: false, retryAfter: 1, reset: MINUTE_RESET });
  });

  it('no counts (the counter is unavailable): no decision, for a hit and for a peek', async () => {
    expect(await checkRateLimit(counted(null), 't', 5, 1000, NOW)).toBeNull();
    expect(await currentRateLimit(counted(null), 't', 5, 1000, NOW)).toBeNull();
  });

  it('a peek reports the same figures without counting', async () => {
    const counter = new MemoryRateCounter();
    await counter.hit('a', 5);
    await counter.hit('a', 5);
    const peeked = await currentRateLimit(counter, 'a', 5, 1000);
    expect(peeked).toMatchObject({ allowed: true, minuteRemaining: 3, dayRemaining: 998 });
    expect(await counter.peek('a')).toEqual({ minute: 2, day: 2 });
    expect(await counter.peek('b')).toEqual({ minute: 0, day: 0 });
  });

  it('the five headers carry the figures', () => {
    expect(rateLimitHeaders({ allowed: true, minuteLimit: 120, minuteRemaining: 7, dayLimit: -1, dayRemaining: -1, reset: 1_768_473_060, retryAfter: 3 })).toEqual({
      'x-ratelimit-limit-minute': '120', 'x-ratelimit-remaining-minute': '7', 'x-ratelimit-limit-day': '-1', 'x-ratelimit-remaining-day': '-1', 'x-ratelimit-reset': '1768473060',
    });
  });

  it('the memory counter starts a new minute, and a new day, at the UTC boundaries', async () => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(Date.UTC(2026, 0, 15, 23, 58, 59, 900));
    const counter = new MemoryRateCounter();
    for (let i = 0; i < 3; i++) await counter.hit('t', 2);
    expect(await counter.peek('t')).toEqual({ minute: 3, day: 2 });
    vi.setSystemTime(Date.UTC(2026, 0, 15, 23, 59, 0, 100));
    expect(await counter.peek('t')).toEqual({ minute: 0, day: 2 });
    expect(await counter.hit('t', 2)).toEqual({ minute: 1, day: 3 });
    vi.setSystemTime(Date.UTC(2026, 0, 16, 0, 0, 0, 100));
    expect(await counter.peek('t')).toEqual({ minute: 0, day: 0 });
    expect(await counter.hit('t', 2)).toEqual({ minute: 1, day: 1 });
  });
});

describe('withDeadline', () => {
  const later = <T>(ms: number, value: T) => new Promise<T>((resolve) => setTimeout(() => resolve(value), ms));

  it('passes on a value or an error that arrives in time', async () => {
    expect(await withDeadline(later(5, 'v'), 500)).toBe('v');
    await expect(withDeadline(Promise.reject(new Error('down')), 500)).rejects.toThrow('down');
  });

  it('settles with TIMED_OUT when nothing arrived by the deadline, and ignores what comes after', async () => {
    const started = Date.now();
    expect(await withDeadline(later(300, 'late'), 20)).toBe(TIMED_OUT);
    expect(Date.now() - started).toBeLessThan(250);
    const failing = new Promise((_resolve, reject) => setTimeout(() => reject(new Error('late failure')), 60));
    expect(await withDeadline(failing, 10)).toBe(TIMED_OUT);
    await later(80, null); // the late rejection is absorbed, not unhandled
  });

  it('a reply that arrives in the same turn as the deadline still counts', async () => {
    let deliver!: (value: string) => void;
    const work = new Promise<string>((resolve) => { deliver = resolve; });
    const result = withDeadline(work, 5);
    // Created in the same tick with the same delay, this timer is due together with the deadline's
    // and runs right after it: the reply is there before the deadline's check.
    setTimeout(() => deliver('just in time'), 5);
    // Busy past both: had the clock moved on by a millisecond between the two timers, the reply's
    // would otherwise come due a turn later (seen on a loaded machine).
    const until = Date.now() + 20;
    while (Date.now() < until) { /* busy */ }
    expect(await result).toBe('just in time');
  });
});
