import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
import { SendPacer } from '../src/modules/messages/send-pacer.ts';
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
    const id = number();
    const x = await a.reserve(id, 30, 100);
    const y = await b.reserve(id, 30, 100);
    expect(x.granted + y.granted).toBeLessThanOrEqual(51);
    expect(y.startAt).toBeGreaterThanOrEqual(x.startAt + x.granted * 10 - 5);
  });
});
