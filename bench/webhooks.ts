/**
 * Webhook delivery benchmark (needs DATABASE_URL).
 *
 * 1. Raw undici POST throughput to a local HTTPS receiver (the ceiling for this machine).
 * 2. Delivered events/s: N events committed to the outbox first, then the real deliverer drains them
 *    into the same receiver (claim, sign, POST, batched attempt records), same concurrency as 1.
 * 3. Latency from event commit to receipt at a fixed 500 events/s (p50/p95/p99).
 *
 * The receiver runs in a worker thread so it does not share an event loop with the deliverer.
 */
import { execFileSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { sql } from 'kysely';
import pino from 'pino';
import { Agent, request } from 'undici';
import { loadConfig } from '../src/config.ts';
import { createDeps } from '../src/deps.ts';
import { migrate } from '../src/db/migrate.ts';
import { envelopeJson, recordEvents } from '../src/events/events.ts';
import { createWebhookDeliverer } from '../src/worker.ts';
import { startLoops } from '../src/workers/loop.ts';

const CONCURRENCY = Number(process.env.BENCH_WEBHOOK_CONCURRENCY ?? 64);
const DRAIN_EVENTS = Number(process.env.BENCH_WEBHOOK_EVENTS ?? 20_000);
const RAW_REQUESTS = Number(process.env.BENCH_WEBHOOK_RAW_REQUESTS ?? 20_000);
const LATENCY_RATE = 500; // events per second
const LATENCY_SECONDS = Number(process.env.BENCH_WEBHOOK_LATENCY_SECONDS ?? 10);

const RECEIVER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const https = require('node:https');
const seen = [];
let count = 0;
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
  });
});
server.keepAliveTimeout = 10000;
server.listen(0, '127.0.0.1', () => parentPort.postMessage({ port: server.address().port }));
parentPort.on('message', (msg) => {
  if (msg === 'count') parentPort.postMessage({ count });
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
    async drain(): Promise<{ count: number; seen: number[] }> { const r = next(); worker.postMessage('drain'); return r; },
    async close() { worker.postMessage('close'); await new Promise((r) => worker.once('exit', r)); },
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
  const config = loadConfig({
    ...process.env,
    DATA_DIR: mkdtempSync(join(tmpdir(), 'wh-bench-data-')),
    SEED_DEMO: 'false',
    LOG_LEVEL: 'silent',
    WEBHOOK_EXTRA_CA_FILE: certFile,
    WEBHOOK_ALLOW_PRIVATE_NETWORKS: 'true',
    WEBHOOK_POLL_MS: process.env.WEBHOOK_POLL_MS ?? '10',
    WEBHOOK_CONCURRENCY: String(CONCURRENCY),
    WEBHOOK_ENDPOINT_CONCURRENCY: String(CONCURRENCY),
  });
  const deps = await createDeps(config, pino({ level: 'silent' }));
  await migrate(deps.database);
  const db = deps.db;
  const tenantId = randomUUID();
  let loops: ReturnType<typeof startLoops> | null = null;
  try {
    // 1. Raw undici throughput: same receiver, same body size, same concurrency.
    const payload = Buffer.from(envelopeJson(randomUUID(), 'contact.created', new Date().toISOString(), JSON.stringify(sampleData(0))));
    const agent = new Agent({ connect: { ca: [cert] } });
    let sent = 0;
    const rawStart = performance.now();
    await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
      while (sent < RAW_REQUESTS) {
        sent++;
        const res = await request(receiver.url, { method: 'POST', body: payload, headers: { 'content-type': 'application/json' }, dispatcher: agent });
        await res.body.dump();
      }
    }));
    const rawSeconds = (performance.now() - rawStart) / 1000;
    const rawPerSecond = RAW_REQUESTS / rawSeconds;
    await agent.close();
    await receiver.drain();

    // The queue relies on (auto)vacuum to drop dead row versions; measure from a vacuumed table even
    // where autovacuum is off (it is on this machine's test server).
    await sql`VACUUM (ANALYZE) webhook_deliveries, webhook_endpoints`.execute(db);
    await db.insertInto('tenants').values({ id: tenantId, name: 'webhook bench', plan: 'business', api_requests_daily: -1 }).execute();
    const { data: endpoint } = await deps.webhooks.create(tenantId, { url: receiver.url, events: ['contact.created'] });

    // 2. Drain a pre-filled outbox.
    let seq = 0;
    for (let i = 0; i < DRAIN_EVENTS; i += 1000) {
      const batch = Array.from({ length: Math.min(1000, DRAIN_EVENTS - i) }, () => ({ type: 'contact.created' as const, data: sampleData(++seq) }));
      await db.transaction().execute((tx) => recordEvents(tx, tenantId, batch));
    }
    const drainStart = performance.now();
    const drainCpu = process.cpuUsage();
    const deliverer = createWebhookDeliverer(deps);
    loops = startLoops([deliverer.loop()], config.webhookPollMs, pino({ level: 'silent' }));
    await waitFor(async () => (await receiver.count()) >= DRAIN_EVENTS, 300_000);
    const drainSeconds = (performance.now() - drainStart) / 1000;
    const cpu = process.cpuUsage(drainCpu);
    // Share of one core this process used while draining (main thread + libuv; the receiver thread is included too).
    const drainStats = { ...deliverer.stats, process_cpu_share: Number(((cpu.user + cpu.system) / 1000 / (drainSeconds * 1000)).toFixed(2)) };
    const deliveredPerSecond = DRAIN_EVENTS / drainSeconds;
    // Wait until every attempt is recorded, so the latency phase starts from an idle queue.
    await waitFor(async () => {
      const open = await db.selectFrom('webhook_deliveries').select((eb) => eb.fn.countAll<number>().as('n'))
        .where('tenant_id', '=', tenantId).where('status', 'in', ['pending', 'retrying']).executeTakeFirstOrThrow();
      return Number(open.n) === 0;
    }, 120_000);
    const failedDrain = await db.selectFrom('webhook_deliveries').select((eb) => eb.fn.countAll<number>().as('n'))
      .where('tenant_id', '=', tenantId).where('status', '!=', 'success').executeTakeFirstOrThrow();
    await receiver.drain();

    // 3. Commit-to-receipt latency at a fixed 500 events/s: 5 events committed every 10 ms.
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

    const result = {
      concurrency: CONCURRENCY,
      raw_undici: { requests: RAW_REQUESTS, per_second: Math.round(rawPerSecond), payload_bytes: payload.length },
      outbox_drain: { events: DRAIN_EVENTS, per_second: Math.round(deliveredPerSecond), seconds: Number(drainSeconds.toFixed(2)), not_success: Number(failedDrain.n) },
      ratio_to_raw: Number((deliveredPerSecond / rawPerSecond).toFixed(3)),
      latency_at_500_per_second: {
        events: latencies.length, achieved_rate: Math.round(total / productionSeconds),
        p50_ms: percentile(latencies, 50), p95_ms: percentile(latencies, 95), p99_ms: percentile(latencies, 99), max_ms: latencies[latencies.length - 1],
      },
      deliverer_stats: { drain: drainStats, total: { ...deliverer.stats } },
      targets: { ratio_to_raw_at_least: 0.5, p99_ms_at_most: 250 },
      endpoint_id: endpoint.id,
    };
    console.log(`webhooks: raw undici ${result.raw_undici.per_second}/s, outbox->receiver ${result.outbox_drain.per_second}/s (ratio ${result.ratio_to_raw}), `
      + `commit->receipt at 500/s p50 ${result.latency_at_500_per_second.p50_ms} ms p99 ${result.latency_at_500_per_second.p99_ms} ms`);
    return result;
  } finally {
    await loops?.stop();
    // The bench tenant's rows are removed so repeated runs do not grow the database.
    await db.deleteFrom('webhook_deliveries').where('tenant_id', '=', tenantId).execute();
    await db.deleteFrom('webhook_endpoints').where('tenant_id', '=', tenantId).execute();
    await db.deleteFrom('events').where('tenant_id', '=', tenantId).execute();
    await db.deleteFrom('tenants').where('id', '=', tenantId).execute();
    await sql`VACUUM webhook_deliveries`.execute(db);
    await deps.close();
    await receiver.close();
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  run().then((r) => console.log(JSON.stringify(r, null, 2)), (err) => { console.error(err); process.exitCode = 1; });
}
