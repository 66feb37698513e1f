import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { checkRateLimit, MemoryRateCounter, RedisRateCounter, windowsAt, type RateCounter } from '../src/http/rate-limit.ts';
import { hasRedis } from './helpers/app.ts';
import { awayFromMinuteEdge } from './helpers/expect.ts';

/** The two counters the service runs on, each used directly (Redis: the real server and its script). */
const backends: { name: string; needsRedis: boolean; make(): { counter: RateCounter; redis?: Redis } }[] = [
  { name: 'RedisRateCounter (real Redis)', needsRedis: true, make: () => { const redis = new Redis(process.env.REDIS_URL!); return { counter: new RedisRateCounter(redis), redis }; } },
  { name: 'MemoryRateCounter', needsRedis: false, make: () => ({ counter: new MemoryRateCounter() }) },
];

for (const backend of backends) {
  describe.skipIf(backend.needsRedis && !hasRedis)(`rate counter: ${backend.name}`, () => {
    let counter: RateCounter;
    let redis: Redis | undefined;
    const tenants: string[] = [];
    beforeAll(() => { ({ counter, redis } = backend.make()); });
    afterAll(async () => {
      if (!redis) return;
      const w = windowsAt(Date.now());
      for (const id of tenants) await redis.del(`rl:${id}:m:${w.minute}`, `rl:${id}:m:${w.minute - 1}`, `rl:${id}:d:${w.day}`, `rl:${id}:d:${w.day - 1}`);
      await redis.quit();
    });
    const newTenant = () => { const id = randomUUID(); tenants.push(id); return id; };

    it('a request refused by the minute window does not spend the day budget', async () => {
      await awayFromMinuteEdge();
      const tenant = newTenant();
      for (let i = 1; i <= 5; i++) expect(await counter.hit(tenant, 5)).toEqual({ minute: i, day: i });
      // Over the minute limit: the minute window keeps counting, the day stays where it was.
      for (let i = 6; i <= 9; i++) expect(await counter.hit(tenant, 5)).toEqual({ minute: i, day: 5 });
      expect(await counter.peek(tenant)).toEqual({ minute: 9, day: 5 });
      const refused = await checkRateLimit(counter, tenant, 5, 1000);
      expect(refused).toMatchObject({ allowed: false, minuteRemaining: 0, dayRemaining: 995 });
      expect(await counter.peek(tenant)).toEqual({ minute: 10, day: 5 });
    });

    it('the minute limit is per call: a request allowed by it counts in the day, one refused by it does not', async () => {
      await awayFromMinuteEdge();
      const tenant = newTenant();
      expect(await counter.hit(tenant, 1)).toEqual({ minute: 1, day: 1 });
      expect(await counter.hit(tenant, 1)).toEqual({ minute: 2, day: 1 });
      // The limit comes with each call: under a higher one the third request is allowed and counted.
      expect(await counter.hit(tenant, 3)).toEqual({ minute: 3, day: 2 });
    });

    it('a new minute starts a fresh minute count while the day keeps counting; a new UTC day starts both afresh', async () => {
      const tenant = newTenant();
      vi.useFakeTimers({ toFake: ['Date'] });
      const at = (iso: string) => vi.setSystemTime(new Date(iso));
      try {
        at('2026-03-10T23:58:30Z');
        expect(await counter.hit(tenant, 2)).toEqual({ minute: 1, day: 1 });
        expect(await counter.hit(tenant, 2)).toEqual({ minute: 2, day: 2 });
        expect(await counter.hit(tenant, 2)).toEqual({ minute: 3, day: 2 });
        at('2026-03-10T23:59:10Z');
        expect(await counter.peek(tenant)).toEqual({ minute: 0, day: 2 });
        expect(await counter.hit(tenant, 2)).toEqual({ minute: 1, day: 3 });
        at('2026-03-11T00:00:05Z');
        expect(await counter.peek(tenant)).toEqual({ minute: 0, day: 0 });
        expect(await counter.hit(tenant, 2)).toEqual({ minute: 1, day: 1 });
      } finally {
        vi.useRealTimers();
        for (const iso of ['2026-03-10T23:58:30Z', '2026-03-10T23:59:10Z', '2026-03-11T00:00:05Z']) {
          const w = windowsAt(Date.parse(iso));
          await redis?.del(`rl:${tenant}:m:${w.minute}`, `rl:${tenant}:d:${w.day}`);
        }
      }
    });

    it('tenants are counted apart', async () => {
      await awayFromMinuteEdge();
      const [a, b] = [newTenant(), newTenant()];
      for (let i = 0; i < 3; i++) await counter.hit(a, 2);
      expect(await counter.hit(b, 2)).toEqual({ minute: 1, day: 1 });
      expect(await counter.peek(a)).toEqual({ minute: 3, day: 2 });
    });
  });
}

describe.skipIf(!hasRedis)('rate counter keys in Redis', () => {
  it('each counter outlives its window (a minute key at least a minute, a day key at least a day) and then expires', async () => {
    const redis = new Redis(process.env.REDIS_URL!);
    const tenant = randomUUID();
    await awayFromMinuteEdge();
    const w = windowsAt(Date.now());
    const [minuteKey, dayKey] = [`rl:${tenant}:m:${w.minute}`, `rl:${tenant}:d:${w.day}`];
    try {
      expect(await new RedisRateCounter(redis).hit(tenant, 5)).toEqual({ minute: 1, day: 1 });
      const [minuteTtl, dayTtl] = await Promise.all([redis.pttl(minuteKey), redis.pttl(dayKey)]);
      // A key that expired inside its window would hand out a fresh budget; one without expiry would never go.
      expect(minuteTtl).toBeGreaterThan(60_000);
      expect(minuteTtl).toBeLessThanOrEqual(120_000);
      expect(dayTtl).toBeGreaterThan(86_400_000);
      expect(dayTtl).toBeLessThanOrEqual(86_400_000 + 60_000);
    } finally {
      await redis.del(minuteKey, dayKey);
      await redis.quit();
    }
  });
});
