import type { ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { Redis } from 'ioredis';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { RedisRateCounter, TIMED_OUT, withDeadline } from '../src/http/rate-limit.ts';
import { call, createTenant, describeOnPostgresServer, eventually, startTestApp, type TestApp } from './helpers/app.ts';
import { awayFromMinuteEdge, RATE_LIMIT_HEADERS } from './helpers/expect.ts';
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

/**
 * The outage state machine of RedisRateCounter (suspend on a failure, the liveness ping that tells a
 * slow Redis from a silent one, the probe that resumes counting), pinned by outcomes and by what
 * reached Redis, never by latency: these hold on instrumented code on a loaded machine too.
 * A private redis-server is frozen (SIGSTOP: the connection stays open and commands wait, as in a
 * partition) or killed. The client has no ioredis commandTimeout (deps.ts sets 1 s as a backstop), so
 * only the counter's own deadlines can end a wait.
 */
(hasRedisServer ? describe : describe.skip)('rate counter outage states (outcomes, no latency)', () => {
  const STILL_WAITING = Symbol('still waiting');
  /** A call that should settle long before 10 s; a wait without end shows as STILL_WAITING instead of a hung test. */
  const settled = <T>(work: Promise<T>) => Promise.race([work, new Promise<typeof STILL_WAITING>((r) => setTimeout(() => r(STILL_WAITING), 10_000).unref())]);
  const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

  let port: number;
  let server: ChildProcess | undefined;
  let client: Redis;
  let observer: Redis;
  beforeEach(async () => {
    port = await freePort();
    server = await startRedis(port);
    const options = { host: '127.0.0.1', port, enableOfflineQueue: false, maxRetriesPerRequest: 0, retryStrategy: () => 20 };
    client = new Redis(options);
    observer = new Redis(options);
    // Refused reconnections while the server is down are expected here (deps.ts logs them).
    for (const c of [client, observer]) c.on('error', () => {});
    await Promise.all([client, observer].map((c) => new Promise((r) => c.once('ready', r))));
    // The counts below are exact only inside one fixed minute window.
    await awayFromMinuteEdge(15_000);
  });
  afterEach(async () => {
    server?.kill('SIGCONT');
    client.disconnect();
    observer.disconnect();
    await stopRedis(server);
  });

  it('withDeadline: the work\'s value or error, TIMED_OUT for work that never settles', async () => {
    expect(await withDeadline(Promise.resolve('value'), 1000)).toBe('value');
    await expect(withDeadline(Promise.reject(new Error('refused')), 1000)).rejects.toThrow('refused');
    expect(await withDeadline(new Promise(() => {}), 5)).toBe(TIMED_OUT);
  });

  it('withDeadline: a reply that arrived while the process was busy past the deadline is not a timeout', async () => {
    const reply = withDeadline(client.ping(), 1);
    // Busy (no event-loop turn) until the deadline is long due and Redis has answered: both are ready in
    // the same turn, and the reply already received wins.
    const until = Date.now() + 100;
    while (Date.now() < until) { /* busy */ }
    expect(await reply).toBe('PONG');
  });

  it('a silent Redis: the request that finds it goes uncounted, later ones do not call Redis at all, and counting resumes', async () => {
    const counter = new RedisRateCounter(client, 5, 20, 50);
    const tenant = randomUUID();
    expect(await counter.hit(tenant, 100)).toEqual({ minute: 1, day: 1 });
    await observer.config('RESETSTAT');
    server!.kill('SIGSTOP');
    try {
      // A read past its deadline only goes without headers: nothing was counted, nothing suspends.
      expect(await settled(counter.peek(tenant))).toBeNull();
      // Past its deadline the request asks whether the connection is alive; the ping is not answered either.
      expect(await settled(counter.hit(tenant, 100))).toBeNull();
      for (let i = 0; i < 5; i++) {
        expect(await settled(counter.hit(tenant, 100))).toBeNull();
        expect(await settled(counter.peek(tenant))).toBeNull();
      }
    } finally {
      server!.kill('SIGCONT');
    }
    // Back: the probe's ping is answered and requests are counted again. Redis ran what it had
    // received during the freeze: the first read, the script of the request that found the outage (2),
    // nothing of the requests after it (suspended: neither their scripts nor their reads were sent), then this one.
    expect(await eventually(() => counter.hit(tenant, 100))).toEqual({ minute: 3, day: 3 });
    // The one read sent is the one made before the outage was found.
    expect(await observer.info('commandstats')).toMatch(/cmdstat_mget:calls=1,/);
    expect(await counter.peek(tenant)).toEqual({ minute: 3, day: 3 });
  });

  it('a slow Redis is not a down one: a reply past the deadline still counts when the connection answers its ping', async () => {
    const counter = new RedisRateCounter(client, 5, 20, 2000);
    const tenant = randomUUID();
    // First a silent Redis, then back (the liveness check of that outage must not be reused later).
    server!.kill('SIGSTOP');
    try {
      expect(await settled(counter.hit(tenant, 100))).toBeNull();
    } finally {
      server!.kill('SIGCONT');
    }
    expect(await eventually(() => counter.hit(tenant, 100))).toEqual({ minute: 2, day: 2 });

    // Frozen just long enough for the request's deadline to pass, then thawed: its count arrives and is used.
    server!.kill('SIGSTOP');
    const slow = settled(counter.hit(tenant, 100));
    try {
      await pause(50);
    } finally {
      server!.kill('SIGCONT');
    }
    expect(await slow).toEqual({ minute: 3, day: 3 });
    // Not suspended: the next request is counted too.
    expect(await counter.hit(tenant, 100)).toEqual({ minute: 4, day: 4 });
  });

  it('a dead Redis: commands fail at once, the probe keeps trying, and counting resumes on the restarted server', async () => {
    const counter = new RedisRateCounter(client, 50, 20, 50);
    const tenant = randomUUID();
    expect(await counter.hit(tenant, 100)).toEqual({ minute: 1, day: 1 });
    await stopRedis(server);
    server = undefined;
    await eventually(async () => client.status !== 'ready');
    expect(await settled(counter.peek(tenant))).toBeNull();
    expect(await settled(counter.hit(tenant, 100))).toBeNull();
    expect(await settled(counter.hit(tenant, 100))).toBeNull();
    // Down for several probe intervals: each failed probe must schedule the next.
    await pause(200);
    server = await startRedis(port);
    // A fresh server: its counters start again.
    expect(await eventually(() => counter.hit(tenant, 100))).toEqual({ minute: 1, day: 1 });
    expect(await counter.peek(tenant)).toEqual({ minute: 1, day: 1 });
  });
});
