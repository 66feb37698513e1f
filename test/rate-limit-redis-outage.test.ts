import type { ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { call, createTenant, describeOnPostgresServer, eventually, startTestApp, type TestApp } from './helpers/app.ts';
import { RATE_LIMIT_HEADERS } from './helpers/expect.ts';
import { freePort } from './helpers/process.ts';
import { hasRedisServer, startRedis, stopRedis } from './helpers/redis-server.ts';

/**
 * Waits until responses carry the rate-limit headers again, then checks that consecutive requests
 * are counted. The minute window is keyed by wall-clock minute, so a pair that straddles a minute
 * boundary starts a fresh count; such a pair is taken again rather than failing the test.
 */
async function expectCountingResumed(app: TestApp['app'], tenant: Awaited<ReturnType<typeof createTenant>>, intervalMs: number) {
  const remaining = async () => {
    const res = await call(app, tenant, 'GET', '/contacts');
    expect(res.statusCode).toBe(200);
    const value = res.headers['x-ratelimit-remaining-minute'];
    return value === undefined ? null : Number(value);
  };
  await eventually(remaining, 10_000, intervalMs);
  for (let attempt = 1; ; attempt++) {
    const first = await remaining();
    const second = await remaining();
    if (second === first! - 1 || attempt === 3) {
      expect(second).toBe(first! - 1);
      return;
    }
  }
}

/** Times `count` requests served while Redis is unreachable: each succeeds, uncounted, without rate-limit headers. */
async function uncountedDurations(app: TestApp['app'], tenant: Awaited<ReturnType<typeof createTenant>>, count: number): Promise<number[]> {
  const durations: number[] = [];
  for (let i = 0; i < count; i++) {
    const started = performance.now();
    const res = await call(app, tenant, 'GET', '/contacts');
    durations.push(performance.now() - started);
    expect(res.statusCode).toBe(200);
    for (const name of [...RATE_LIMIT_HEADERS, 'retry-after']) expect(res.headers[name], name).toBeUndefined();
  }
  return durations;
}

// The outage drill times the request path and the start against the servers CI runs (PGlite in the test process would be in the timings).
(hasRedisServer ? describeOnPostgresServer('a Redis outage drill timed on PostgreSQL and Redis servers') : describe.skip)('rate limits when Redis becomes unreachable (spec section 8)', () => {
  let port: number;
  let redis: ChildProcess | undefined;
  let t: TestApp;
  beforeAll(async () => {
    port = await freePort();
    redis = await startRedis(port);
    t = await startTestApp({ REDIS_URL: `redis://127.0.0.1:${port}`, RATE_LIMIT_PER_MINUTE: '1000' });
  });
  afterAll(async () => {
    await t?.close();
    await stopRedis(redis);
  });

  it('allows requests without the headers and adds well under 50 ms while Redis is down, then resumes counting by itself', async () => {
    const tenant = await createTenant(t.app);
    for (let i = 1; i <= 3; i++) {
      const res = await call(t.app, tenant, 'GET', '/contacts');
      expect(res.statusCode).toBe(200);
      for (const name of RATE_LIMIT_HEADERS) expect(res.headers[name]).toBeDefined();
      expect(res.headers['x-ratelimit-remaining-minute']).toBe(String(1000 - i));
    }
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).json()).toMatchObject({ status: 'ready', redis: 'ok' });

    await stopRedis(redis);
    redis = undefined;

    const durations = (await uncountedDurations(t.app, tenant, 20)).sort((a, b) => a - b);
    expect(durations[10]).toBeLessThan(50);
    // Operators see it: every request served uncounted is counted in the metrics.
    expect((await t.deps.metrics.uncountedRequests.get()).values[0].value).toBeGreaterThanOrEqual(20);
    // The added latency itself: one counter call against the dead server.
    for (let i = 0; i < 20; i++) {
      const started = performance.now();
      expect(await t.deps.rateCounter.hit(tenant.id, 1000)).toBeNull();
      expect(performance.now() - started).toBeLessThan(25);
    }
    // Writes still work, the rest of the API does not depend on Redis.
    const created = await call(t.app, tenant, 'POST', '/contacts', { first_name: 'Offline', phone: '+14155550123' });
    expect(created.statusCode).toBe(201);
    const ready = await t.app.inject({ method: 'GET', url: '/readyz' });
    expect(ready.statusCode).toBe(200);
    expect(ready.json()).toMatchObject({ status: 'ready', database: 'ok', redis: 'unavailable' });

    redis = await startRedis(port);
    await expectCountingResumed(t.app, tenant, 100);
    expect((await t.app.inject({ method: 'GET', url: '/readyz' })).json()).toMatchObject({ redis: 'ok' });
  });

  it('a Redis that hangs (stopped process, like a partition): only the first request waits, then counting resumes', async () => {
    const hungPort = await freePort();
    const hung = await startRedis(hungPort);
    const app = await startTestApp({ REDIS_URL: `redis://127.0.0.1:${hungPort}`, RATE_LIMIT_PER_MINUTE: '1000' });
    try {
      const tenant = await createTenant(app.app);
      expect((await call(app.app, tenant, 'GET', '/contacts')).headers['x-ratelimit-remaining-minute']).toBe('999');
      hung.kill('SIGSTOP');
      const durations = await uncountedDurations(app.app, tenant, 20);
      // the first request discovers the outage (bounded by the 50 ms command timeout); the rest do not wait
      expect(durations[0]).toBeLessThan(250);
      const rest = durations.slice(1).sort((a, b) => a - b);
      expect(rest[Math.floor(rest.length / 2)]).toBeLessThan(25);
      hung.kill('SIGCONT');
      await expectCountingResumed(app.app, tenant, 50);
    } finally {
      await app.close();
      hung.kill('SIGCONT');
      await stopRedis(hung);
    }
  });

  it('a Redis that is down at start: the app starts promptly and serves uncounted requests', async () => {
    const deadPort = await freePort();
    const started = Date.now();
    const app = await startTestApp({ REDIS_URL: `redis://127.0.0.1:${deadPort}` });
    try {
      expect(Date.now() - started).toBeLessThan(5000);
      const tenant = await createTenant(app.app);
      const res = await call(app.app, tenant, 'GET', '/contacts');
      expect(res.statusCode).toBe(200);
      expect(res.headers['x-ratelimit-limit-minute']).toBeUndefined();
    } finally {
      await app.close();
    }
  });
});
