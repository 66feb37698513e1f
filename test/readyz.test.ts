import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { eventually, startTestApp, type TestApp } from './helpers/app.ts';
import { freePort } from './helpers/process.ts';
import { hasRedisServer, startRedis, stopRedis } from './helpers/redis-server.ts';

describe.skipIf(!hasRedisServer)('readiness when Redis hangs (a frozen server, like a partition)', () => {
  let redis: ChildProcess | undefined;
  let t: TestApp;
  beforeAll(async () => {
    const port = await freePort();
    redis = await startRedis(port);
    t = await startTestApp({ REDIS_URL: `redis://127.0.0.1:${port}` });
  });
  afterAll(async () => {
    redis?.kill('SIGCONT');
    await t?.close();
    await stopRedis(redis);
  });

  const timedReadyz = async () => {
    const started = performance.now();
    const res = await t.app.inject({ method: 'GET', url: '/readyz' });
    return { ms: performance.now() - started, status: res.statusCode, body: res.json() };
  };

  it('answers within ~100 ms, ready, with Redis reported degraded; ok again once Redis resumes', async () => {
    expect(await timedReadyz()).toMatchObject({ status: 200, body: { status: 'ready', database: 'ok', redis: 'ok' } });

    redis!.kill('SIGSTOP');
    const probes = [];
    for (let i = 0; i < 10; i++) probes.push(await timedReadyz());
    const times = probes.map((p) => Math.round(p.ms)).sort((a, b) => a - b);
    console.log(`[readyz] with Redis frozen: ${JSON.stringify(times)} ms`);
    for (const probe of probes) {
      // The service serves without Redis (rate limits are suspended), so it stays ready.
      expect(probe).toMatchObject({ status: 200, body: { status: 'ready', database: 'ok', redis: 'degraded' } });
      expect(probe.ms).toBeLessThan(300);
    }
    expect(times[Math.floor(times.length / 2)]).toBeLessThan(150);

    redis!.kill('SIGCONT');
    await eventually(async () => (await timedReadyz()).body.redis === 'ok', 10_000, 50);
  });

  it('a Redis that is down is reported unavailable at once, still ready', async () => {
    await stopRedis(redis);
    redis = undefined;
    await eventually(async () => {
      const probe = await timedReadyz();
      return probe.body.redis === 'unavailable' && probe;
    }, 10_000, 50);
    const probe = await timedReadyz();
    expect(probe).toMatchObject({ status: 200, body: { status: 'ready', redis: 'unavailable' } });
    expect(probe.ms).toBeLessThan(150);
  });
});
