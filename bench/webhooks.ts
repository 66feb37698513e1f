/**
 * Webhook delivery benchmark (needs DATABASE_URL).
 *
 * In each of ROUNDS interleaved rounds (medians compared: one round on this shared 2-core machine
 * can swing by a factor of two):
 * 1. Raw undici POST throughput to a local HTTPS receiver, the ceiling for this machine, measured
 *    twice: with undici's `request` (its POST API, the target's baseline) and with `dispatch`
 *    through the same minimal handler the deliverer uses (a stricter, same-API comparison, shown
 *    beside it).
 * 2. Delivered events/s: N events committed to the outbox first, then the real deliverer drains them
 *    into the same receiver (claim, sign, POST, batched attempt records), same concurrency as 1.
 * Then 3. latency from event commit to receipt at a fixed 500 events/s (p50/p95/p99).
 * And 4. ONE endpoint with the deliverer's DEFAULT settings (poll, per-endpoint cap 8, process cap),
 *    beside raw undici `request` POSTs at that same cap of 8 in flight, again in interleaved rounds:
 *    most tenants have exactly one endpoint, and there the per-endpoint cap is the limit.
 *
 * The receiver runs in a worker thread so it does not share an event loop with the deliverer.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { sql } from 'kysely';
import pino from 'pino';
import { Agent, request } from 'undici';
import { post } from '../src/modules/webhooks/webhooks.sender.ts';
import { loadConfig } from '../src/config.ts';
import { createDeps } from '../src/deps.ts';
import { envelopeJson, recordEvents } from '../src/events/events.ts';
import { createWebhookDeliverer } from '../src/worker.ts';
import { startLoops } from '../src/workers/loop.ts';
import { cpuSeconds, freshDatabase } from './support.ts';

const CONCURRENCY = Number(process.env.BENCH_WEBHOOK_CONCURRENCY ?? 128);
const ROUNDS = Number(process.env.BENCH_WEBHOOK_ROUNDS ?? 5);
const DRAIN_EVENTS = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 20_000);
const RAW_REQUESTS = Number(process.env.BENCH_WEBHOOK_RAW_REQUESTS ?? 20_000);
const LATENCY_RATE = 500; // events per second
const LATENCY_SECONDS = Number(process.env.BENCH_WEBHOOK_LATENCY_SECONDS ?? 10);
const ONE_ENDPOINT_EVENTS = Number(process.env.BENCH_WEBHOOK_ONE_ENDPOINT_EVENTS ?? 5_000);
/** BENCH_WEBHOOK_PHASES=one: only the one-endpoint phase (4), e.g. while profiling it. */
const PHASES = (process.env.BENCH_WEBHOOK_PHASES ?? 'all').split(',');
const runs = (phase: 'wide' | 'one') => PHASES.includes('all') || PHASES.includes(phase);
/** Settings the one-endpoint phase must not inherit from the benchmark's own: it runs the defaults. */
const DELIVERER_SETTINGS = ['WEBHOOK_POLL_MS', 'WEBHOOK_CONCURRENCY', 'WEBHOOK_ENDPOINT_CONCURRENCY', 'WEBHOOK_RETRY_CONCURRENCY', 'WEBHOOK_LEASE_MS', 'WEBHOOK_TIMEOUT_MS', 'WEBHOOK_RETRY_DELAYS_MS'];

const RECEIVER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const https = require('node:https');
const seen = [];
let count = 0;
let target = Infinity;
const server = https.createServer({ cert: workerData.cert, key: workerData.key }, (req, res) => {
  const chunks = [];
  req.on('data', (c) => chunks.push(c));
  req.on('end', () => {
    const at = Date.now();
    count++;
    const m = /"seq":(\\d+)/.exec(Buffer.concat(chunks).toString('latin1'));
    if (m) seen.push(Number(m[1]), at);
    res.writeHead(200, { 'content-type': 'text/plain' });
    res.end('ok');
    if (count >= target) { target = Infinity; parentPort.postMessage({ reached: count }); }
  });
});
server.keepAliveTimeout = 10000;
server.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: server.address().port }));
parentPort.on('message', (msg) => {
  if (msg === 'count') parentPort.postMessage({ count });
  if (msg.until !== undefined) { target = msg.until; if (count >= target) { target = Infinity; parentPort.postMessage({ reached: count }); } }
  if (msg === 'drain') { parentPort.postMessage({ count, seen: seen.splice(0) }); count = 0; }
  if (msg === 'close') server.close(() => process.exit(0));
});
`;

function certificate() {
  const dir = mkdtempSync(join(tmpdir(), 'wh-bench-'));
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-days', '1',
    '-subj', '/CN=localhost', '-addext', 'subjectAltName=IP:127.0.0.1,DNS:localhost', '-keyout', keyFile, '-out', certFile], { stdio: 'ignore' });
  return { certFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
}

async function startReceiver(cert: string, key: string) {
  const worker = new Worker(RECEIVER_SOURCE, { eval: true, workerData: { cert, key } });
  const next = () => new Promise<any>((resolve) => worker.once('message', resolve));
  const { port } = await next();
  return {
    url: `https://127.0.0.1:${port}/hook`,
    async count(): Promise<number> { const r = next(); worker.postMessage('count'); return (await r).count; },
    /** Resolves once `n` requests have arrived (told by the receiver: no polling on the measured thread). */
    async until(n: number): Promise<void> { const r = next(); worker.postMessage({ until: n }); await r; },
    async drain(): Promise<{ count: number; seen: number[] }> { const r = next(); worker.postMessage('drain'); return r; },
    async close() { worker.postMessage('close'); await new Promise((r) => worker.once('exit', r)); },
  };
}

/** BENCH_PROFILE_DIR: a CPU profile of this thread while the deliverer drains (one file per round). */
async function startProfiler() {
  const dir = process.env.BENCH_PROFILE_DIR;
  if (!dir) return null;
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.start');
  return {
    async save(name: string) {
      const { profile } = await session.post('Profiler.stop');
      mkdirSync(dir, { recursive: true });
      writeFileSync(join(dir, `${name}-${Date.now()}.cpuprofile`), JSON.stringify(profile));
      session.disconnect();
    },
  };
}

const percentile = (sorted: number[], p: number) => sorted.length === 0 ? NaN : sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)];
const sampleData = (seq: number) => ({ seq, id: randomUUID(), first_name: 'Bench', last_name: 'Mark', phone: '+14155550123', email: 'bench@example.com', tags: ['vip', 'bench'], custom_fields: { plan: 'gold', note: 'x'.repeat(600) } });

async function waitFor(check: () => Promise<boolean>, timeoutMs: number) {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('benchmark timed out');
    await new Promise((r) => setTimeout(r, 5));
  }
}

export async function run(): Promise<object> {
  if (!process.env.DATABASE_URL) throw new Error('bench webhooks needs DATABASE_URL');
  const { certFile, cert, key } = certificate();
  const receiver = await startReceiver(cert, key);
  // Its own application_name, so the CPU of the PostgreSQL backends serving this run can be told apart.
  const applicationName = `webhook-bench-${process.pid}`;
  // Its own database: a deliverer serves every tenant of its database, so one running beside it
  // (another process's, a test's) would take this run's rows, and earlier runs' rows stay out of it.
  const fresh = await freshDatabase('msvc_bench_webhooks');
  const databaseUrl = new URL(fresh.url);
  databaseUrl.searchParams.set('application_name', applicationName);
  const baseEnv = {
    ...Object.fromEntries(Object.entries(process.env).filter(([name]) => !DELIVERER_SETTINGS.includes(name))),
    DATABASE_URL: databaseUrl.toString(),
    DATA_DIR: mkdtempSync(join(tmpdir(), 'wh-bench-data-')),
    SEED_DEMO: 'false',
    LOG_LEVEL: 'silent',
    WEBHOOK_EXTRA_CA_FILE: certFile,
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
  };
  const defaults = loadConfig(baseEnv);
  const config = loadConfig({
    ...baseEnv,
    WEBHOOK_POLL_MS: process.env.WEBHOOK_POLL_MS ?? '10',
    WEBHOOK_CONCURRENCY: String(CONCURRENCY),
    WEBHOOK_ENDPOINT_CONCURRENCY: String(CONCURRENCY),
  });
  const deps = await createDeps(config, pino({ level: 'silent' }));
  const db = deps.db;
  const tenantId = randomUUID();
  let loops = null as ReturnType<typeof startLoops> | null;
  const payload = Buffer.from(envelopeJson(randomUUID(), 'contact.created', new Date().toISOString(), JSON.stringify(sampleData(0))));
  let seq = 0;
  /** The bench tenant's deliveries whose status is (or, with 'not in', is not) one of `statuses`. */
  const countDeliveries = (op: 'in' | 'not in', statuses: string[]) => db.selectFrom('webhook_deliveries')
    .select((eb) => eb.fn.countAll<number>().as('n'))
    .where('tenant_id', '=', tenantId).where('status', op, statuses)
    .executeTakeFirstOrThrow().then((r) => Number(r.n));

  /** CPU seconds so far of each PostgreSQL backend serving this run (the pool's connections). */
  const backendCpu = async () => {
    const { rows } = await sql<{ pid: number }>`SELECT pid FROM pg_stat_activity WHERE application_name = ${applicationName}`.execute(db);
    return new Map(rows.map((r) => [r.pid, cpuSeconds([r.pid])]));
  };
  /** CPU used between two snapshots (a backend opened in between counts from zero; one closed in between is lost). */
  const cpuSince = (before: Map<number, number>, after: Map<number, number>) =>
    [...after].reduce((sum, [pid, seconds]) => sum + seconds - (before.get(pid) ?? 0), 0);

  /** RAW_REQUESTS POSTs of the envelope, `concurrency` at a time; requests/s and main-thread µs per request. */
  async function rawRound(send: (agent: Agent) => Promise<void>, requests = RAW_REQUESTS, concurrency = CONCURRENCY) {
    const agent = new Agent({ connect: { ca: [cert] } });
    let sent = 0;
    const elu = performance.eventLoopUtilization();
    const cpu = process.cpuUsage();
    const started = performance.now();
    await Promise.all(Array.from({ length: concurrency }, async () => {
      while (sent < requests) {
        sent++;
        await send(agent);
      }
    }));
    const seconds = (performance.now() - started) / 1000;
    const busy = performance.eventLoopUtilization(elu);
    const used = process.cpuUsage(cpu);
    await agent.close();
    await receiver.drain();
    return {
      per_second: Math.round(requests / seconds),
      main_thread_us_per_request: Number((busy.active * 1000 / requests).toFixed(1)),
      process_cpu_us_per_request: Math.round((used.user + used.system) / requests),
    };
  }
  const viaRequest = async (agent: Agent) => {
    const res = await request(receiver.url, { method: 'POST', body: payload, headers: { 'content-type': 'application/json' }, dispatcher: agent });
    await res.body.dump();
  };
  const viaDispatch = async (agent: Agent) => { await post(agent, new URL(receiver.url), { 'content-type': 'application/json' }, payload, 10_000); };

  /** Fills the outbox with DRAIN_EVENTS deliveries, then times the real deliverer (settings of `c`) draining them. */
  async function drainRound(events = DRAIN_EVENTS, c = config) {
    // The queue relies on autovacuum to drop the dead row versions of earlier rounds; this test
    // server runs without it, so every round starts from a vacuumed table.
    await sql`VACUUM (ANALYZE) webhook_deliveries, webhook_payloads, webhook_endpoints`.execute(db);
    for (let i = 0; i < events; i += 1000) {
      const batch = Array.from({ length: Math.min(1000, events - i) }, () => ({ type: 'contact.created' as const, data: sampleData(++seq) }));
      await db.transaction().execute((tx) => recordEvents(tx, tenantId, batch));
    }
    const deliverer = createWebhookDeliverer({ ...deps, config: c });
    const profiler = await startProfiler();
    const elu = performance.eventLoopUtilization();
    const cpu = process.cpuUsage();
    const postgresCpu = await backendCpu();
    const started = performance.now();
    loops = startLoops([deliverer.loop()], c.webhookPollMs, pino({ level: 'silent' }));
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([receiver.until(events), new Promise((_, reject) => { timer = setTimeout(() => reject(new Error('benchmark timed out')), 300_000); })]);
    clearTimeout(timer);
    const seconds = (performance.now() - started) / 1000;
    const busy = performance.eventLoopUtilization(elu);
    const used = process.cpuUsage(cpu);
    const postgresSeconds = cpuSince(postgresCpu, await backendCpu());
    await profiler?.save('webhooks-drain');
    await loops.stop();
    loops = null;
    // Every attempt recorded before the next phase; the drain must not have failed anything.
    await waitFor(async () => (await countDeliveries('in', ['pending', 'retrying'])) === 0, 120_000);
    await receiver.drain();
    return {
      per_second: Math.round(events / seconds),
      seconds: Number(seconds.toFixed(2)),
      main_thread_us_per_event: Number((busy.active * 1000 / events).toFixed(1)),
      // Share of one core the whole process used (main thread, libuv and the receiver's thread).
      process_cpu_share: Number(((used.user + used.system) / 1000 / (seconds * 1000)).toFixed(2)),
      // CPU per event: this process (deliverer and the receiver's thread) and the PostgreSQL backends serving it.
      process_cpu_us_per_event: Math.round((used.user + used.system) / events),
      postgres_cpu_us_per_event: Math.round((postgresSeconds * 1e6) / events),
      deliverer: { ...deliverer.stats },
    };
  }

  try {
    await db.insertInto('tenants').values({ id: tenantId, name: 'webhook bench', plan: 'business', api_requests_daily: -1 }).execute();
    await deps.webhooks.create(tenantId, { url: receiver.url, events: ['contact.created'] });

    const median = (values: number[]) => [...values].sort((x, y) => x - y)[Math.floor(values.length / 2)];
    /** Phases 1-3: the wide drain beside raw undici, and commit-to-receipt latency. */
    async function wide() {
      const rounds: { raw_request: Awaited<ReturnType<typeof rawRound>>; raw_dispatch: Awaited<ReturnType<typeof rawRound>>; drain: Awaited<ReturnType<typeof drainRound>> }[] = [];
      // Warm-up, not recorded: the JIT and the connection pools of both sides.
      await rawRound(viaRequest, 2_000);
      await rawRound(viaDispatch, 2_000);
      await drainRound(2_000);
      for (let round = 0; round < ROUNDS; round++) {
        rounds.push({ raw_request: await rawRound(viaRequest), raw_dispatch: await rawRound(viaDispatch), drain: await drainRound() });
      }
      const rawRequest = median(rounds.map((r) => r.raw_request.per_second));
      const rawDispatch = median(rounds.map((r) => r.raw_dispatch.per_second));
      const delivered = median(rounds.map((r) => r.drain.per_second));
      const notSuccess = await countDeliveries('not in', ['success']);

      // 3. Commit-to-receipt latency at a fixed 500 events/s: 5 events committed every 10 ms.
      loops = startLoops([createWebhookDeliverer(deps).loop()], config.webhookPollMs, pino({ level: 'silent' }));
      const committedAt = new Map<number, number>();
      const total = LATENCY_RATE * LATENCY_SECONDS;
      const tickMs = 10;
      const perTick = (LATENCY_RATE * tickMs) / 1000;
      const latencyStart = Date.now();
      let produced = 0;
      const inFlight: Promise<void>[] = [];
      for (let tick = 0; produced < total; tick++) {
        const due = latencyStart + tick * tickMs;
        const wait = due - Date.now();
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        const events = Array.from({ length: perTick }, () => ({ type: 'contact.created' as const, data: sampleData(++seq) }));
        produced += events.length;
        inFlight.push(db.transaction().execute((tx) => recordEvents(tx, tenantId, events)).then(() => {
          const at = Date.now();
          for (const e of events) committedAt.set(e.data.seq, at);
        }));
      }
      await Promise.all(inFlight);
      const productionSeconds = (Date.now() - latencyStart) / 1000;
      await waitFor(async () => (await receiver.count()) >= total, 60_000);
      const { seen } = await receiver.drain();
      const latencies: number[] = [];
      for (let i = 0; i < seen.length; i += 2) {
        const commit = committedAt.get(seen[i]);
        if (commit !== undefined) latencies.push(seen[i + 1] - commit);
      }
      latencies.sort((a, b) => a - b);
      await loops.stop();
      loops = null;
      return {
        concurrency: CONCURRENCY,
        rounds: ROUNDS,
        payload_bytes: payload.length,
        raw_undici_request_per_second: rawRequest,
        raw_undici_dispatch_per_second: rawDispatch,
        outbox_drain: { events_per_round: DRAIN_EVENTS, per_second: delivered, not_success: notSuccess },
        ratio_to_raw_request: Number((delivered / rawRequest).toFixed(3)),
        ratio_to_raw_dispatch: Number((delivered / rawDispatch).toFixed(3)),
        meets_target: delivered / rawRequest >= 0.5,
        latency_at_500_per_second: {
          events: latencies.length, achieved_rate: Math.round(total / productionSeconds),
          p50_ms: percentile(latencies, 50), p95_ms: percentile(latencies, 95), p99_ms: percentile(latencies, 99), max_ms: latencies[latencies.length - 1],
        },
        per_round: rounds,
      };
    }

    /** Phase 4: one endpoint, default deliverer settings, against raw undici at the same per-endpoint cap. */
    async function oneEndpoint() {
      const cap = defaults.webhookEndpointConcurrency;
      const oneRounds: { raw_request: Awaited<ReturnType<typeof rawRound>>; drain: Awaited<ReturnType<typeof drainRound>> }[] = [];
      await rawRound(viaRequest, 1_000, cap);
      await drainRound(Math.min(1_000, ONE_ENDPOINT_EVENTS), defaults);
      for (let round = 0; round < ROUNDS; round++) {
        oneRounds.push({ raw_request: await rawRound(viaRequest, ONE_ENDPOINT_EVENTS, cap), drain: await drainRound(ONE_ENDPOINT_EVENTS, defaults) });
      }
      const oneRaw = median(oneRounds.map((r) => r.raw_request.per_second));
      const oneDelivered = median(oneRounds.map((r) => r.drain.per_second));
      return {
        settings: {
          poll_ms: defaults.webhookPollMs, concurrency: defaults.webhookConcurrency, endpoint_concurrency: cap, retry_concurrency: defaults.webhookRetryConcurrency,
        },
        events_per_round: ONE_ENDPOINT_EVENTS,
        raw_undici_request_per_second: oneRaw,
        per_second: oneDelivered,
        ratio_to_raw_request: Number((oneDelivered / oneRaw).toFixed(3)),
        meets_target: oneDelivered / oneRaw >= 0.5,
        not_success: await countDeliveries('not in', ['success']),
        per_round: oneRounds,
      };
    }

    const wideResult = runs('wide') ? await wide() : null;
    const one = runs('one') ? await oneEndpoint() : null;
    const result = {
      ...wideResult,
      one_endpoint_defaults: one,
      targets: { ratio_to_raw_request_at_least: 0.5, p99_ms_at_most: 250, one_endpoint_defaults_ratio_at_least: 0.5 },
    };
    if (wideResult) {
      console.log(`webhooks: median of ${ROUNDS} interleaved rounds: raw undici request ${wideResult.raw_undici_request_per_second}/s, dispatch ${wideResult.raw_undici_dispatch_per_second}/s; `
        + `outbox->receiver ${wideResult.outbox_drain.per_second}/s (ratio ${wideResult.ratio_to_raw_request} of request, ${wideResult.ratio_to_raw_dispatch} of dispatch); `
        + `commit->receipt at 500/s p50 ${wideResult.latency_at_500_per_second.p50_ms} ms p99 ${wideResult.latency_at_500_per_second.p99_ms} ms`);
    }
    if (one) {
      console.log(`webhooks: one endpoint at defaults ${one.per_second}/s against raw undici request at ${one.settings.endpoint_concurrency} in flight `
        + `${one.raw_undici_request_per_second}/s (ratio ${one.ratio_to_raw_request}; median of ${ROUNDS} rounds)`);
    }
    return result;
  } finally {
    await loops?.stop();
    await deps.close();
    await fresh.drop();
    await receiver.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  run().then((r) => console.log(JSON.stringify(r, null, 2)), (err) => { console.error(err); process.exitCode = 1; });
}
