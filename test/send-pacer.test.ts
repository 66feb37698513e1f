import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { IssueWindow, SendPacer } from '../src/modules/messages/send-pacer.ts';
import { hasRedis } from './helpers/app.ts';

const number = () => `pace-test-${Math.random().toString(36).slice(2)}`;

/** The same rules whichever backend holds the state: in process (embedded) or Redis (shared by workers). */
function pacerRules(name: string, make: () => SendPacer) {
  describe(name, () => {
    it('hands out slots 1/rate apart, at most the horizon ahead', async () => {
      const pacer = make();
      const id = number();
      const first = await pacer.reserve(id, 50, 100);
      expect(first.intervalMs).toBeCloseTo(10, 5);
      // 500 ms horizon at 100/s: 50 slots fit, the next reservation gets what is left of the horizon.
      expect(first.granted).toBe(50);
      const second = await pacer.reserve(id, 50, 100);
      expect(second.startAt).toBeGreaterThanOrEqual(first.startAt + 50 * 10 - 5);
      expect(second.granted).toBeLessThanOrEqual(2);
    });

    it('grants whole multiples of `unit` and keeps the rest; a unit never exceeds `want` or what the horizon holds', async () => {
      const pacer = make();
      const id = number();
      // 500 ms horizon at 20/s holds 10 slots: 3 taken, 7 free (an eighth frees 50 ms later).
      const first = await pacer.reserve(id, 3, 20);
      expect(first.granted).toBe(3);
      expect((await pacer.reserve(id, 10, 20, 5)).granted).toBe(5);
      expect((await pacer.reserve(id, 10, 20, 5)).granted).toBe(0);
      // What was not granted stays: the free slots follow those granted directly.
      const rest = await pacer.reserve(id, 10, 20);
      expect(rest.granted).toBeGreaterThanOrEqual(2);
      // Within half a slot (the Redis clock offset may be refined between two replies).
      expect(Math.abs(rest.startAt - (first.startAt + 8 * 50))).toBeLessThan(25);
      // At 10/s the horizon holds 5 slots: a unit of 50 shrinks to them; a unit above `want` to `want`.
      expect((await pacer.reserve(number(), 50, 10, 50)).granted).toBe(5);
      expect((await pacer.reserve(number(), 3, 100, 50)).granted).toBe(3);
    });

    it('a 130429 halves the rate; it recovers by a quarter per recovery period', async () => {
      const pacer = make();
      const id = number();
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(10, 5);
      await pacer.penalise(id);
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(20, 5);
      await pacer.penalise(id); // within a second of the last: counted once
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(20, 5);
      await new Promise((r) => setTimeout(r, 260)); // recovery period 250 ms
      expect((await pacer.reserve(id, 1, 100)).intervalMs).toBeCloseTo(16, 5);
    });
  });
}

pacerRules('send pacer in process', () => new SendPacer(null, { horizonMs: 500, recoveryMs: 250 }));

describe.skipIf(!hasRedis)('send pacer on Redis', () => {
  const redis = hasRedis ? new Redis(process.env.REDIS_URL!) : null;
  afterAll(() => redis?.disconnect());
  pacerRules('shared state', () => new SendPacer(redis, { horizonMs: 500, recoveryMs: 250 }));

  it('two pacers (two workers) share one number\'s slots', async () => {
    const a = new SendPacer(redis, { horizonMs: 500, recoveryMs: 250 });
    const b = new SendPacer(redis, { horizonMs: 500, recoveryMs: 250 });
    // Each learns Redis's clock from its replies (the quickest reply tells the offset best).
    for (let i = 0; i < 5; i++) await Promise.all([a.reserve(number(), 1, 100), b.reserve(number(), 1, 100)]);
    const id = number();
    const x = await a.reserve(id, 30, 100);
    const y = await b.reserve(id, 30, 100);
    expect(x.granted + y.granted).toBeLessThanOrEqual(51);
    expect(y.startAt).toBeGreaterThanOrEqual(x.startAt + x.granted * 10 - 5);
  });
});

describe('issue window', () => {
  /** Acquires `count` turns at once and returns when each was let through, in the order asked. */
  async function issue(window: IssueWindow, count: number, limit: number): Promise<number[]> {
    const at: number[] = [];
    await Promise.all(Array.from({ length: count }, (_, i) => window.acquire(limit).then(() => { at[i] = Date.now(); })));
    return at;
  }

  it('lets at most `limit` through in any window, the rest as soon as the window allows, in order', async () => {
    const window = new IssueWindow(200);
    const started = Date.now();
    const at = await issue(window, 12, 5);
    // The first five at once; the sixth when the first is a window old, the eleventh two windows on.
    expect(at[4] - started).toBeLessThan(100);
    expect(at[5] - at[0]).toBeGreaterThanOrEqual(199);
    expect(at[5] - started).toBeLessThan(300);
    expect(at[10] - at[5]).toBeGreaterThanOrEqual(199);
    for (let i = 1; i < at.length; i++) expect(at[i]).toBeGreaterThanOrEqual(at[i - 1]);
    for (let i = 5; i < at.length; i++) expect(at[i] - at[i - 5]).toBeGreaterThanOrEqual(199);
  });

  it('a changed limit starts a new window', async () => {
    const window = new IssueWindow(10_000);
    await issue(window, 3, 3);
    const started = Date.now();
    await issue(window, 4, 4); // at the old limit the fourth would wait ten seconds
    expect(Date.now() - started).toBeLessThan(1000);
  });
});
