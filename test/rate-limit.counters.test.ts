import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
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

    it('tenants are counted apart', async () => {
      await awayFromMinuteEdge();
      const [a, b] = [newTenant(), newTenant()];
      for (let i = 0; i < 3; i++) await counter.hit(a, 2);
      expect(await counter.hit(b, 2)).toEqual({ minute: 1, day: 1 });
      expect(await counter.peek(a)).toEqual({ minute: 3, day: 2 });
    });
  });
}
