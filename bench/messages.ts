import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import autocannon from 'autocannon';
import { sql } from 'kysely';
import { openDatabase } from '../src/db/database.ts';
import { measureSandboxCapacityDetailed } from '../src/sandbox/capacity.ts';
import { createSandbox } from '../src/sandbox/sandbox.ts';
import { freePort, startProcess, stopProcess } from './support.ts';

/**
 * Single template sends per second through POST /messages/template, against the real service in
 * its own process (PostgreSQL, Redis, the upstream client) talking to the sandbox over HTTP, with
 * the sandbox's sent/delivered/read callbacks flowing back into /upstream/webhook during the run.
 * Beside it, the sandbox's own capacity, measured directly in the same run; the target is at
 * least half of it. The benchmark tenant's limits are raised by configuration only: a business
 * plan (daily -1) and RATE_LIMIT_PER_MINUTE.
 */

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 64);
const PACED_RATE = 500;
const TENANTS = Number(process.env.BENCH_TENANTS ?? 4);

async function json(url: string, init: RequestInit & { body?: string } = {}): Promise<any> {
  const res = await fetch(url, { ...init, headers: { 'content-type': 'application/json', ...(init.headers ?? {}) } });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${url}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const phones = Array.from({ length: 2000 }, (_, i) => `+1415${String(3_000_000 + i).padStart(7, '0')}`);

/** The service's statements so far (its db_statements_total). */
async function statementsSoFar(url: string, adminToken: string): Promise<number> {
  const metrics = await (await fetch(`${url}/admin/v1/metrics`, { headers: { authorization: `Bearer ${adminToken}` } })).text();
  return Number(/^db_statements_total(?:\{[^}]*\})? (\d+)/m.exec(metrics)?.[1] ?? Number.NaN);
}

/**
 * Sends for `seconds` to `sendUrl`, as fast as CONNECTIONS allow or at `overallRate` requests per
 * second, in turn with each key (each its own tenant, number and pace).
 */
async function sendLoad(sendUrl: string, keys: string[], templateName: string, seconds: number, overallRate?: number) {
  let i = 0;
  const result = await autocannon({
    url: sendUrl,
    method: 'POST',
    connections: CONNECTIONS,
    duration: seconds,
    ...(overallRate ? { overallRate } : {}),
    headers: { 'content-type': 'application/json' },
    requests: [{
      method: 'POST',
      setupRequest: (req) => ({ ...req, headers: { ...req.headers, authorization: `Bearer ${keys[i % keys.length]}` }, body: JSON.stringify({
        to: phones[i++ % phones.length], template_name: templateName, language: 'en',
        components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }, { type: 'text', text: `A-${i}` }] }],
      }) }),
    }],
  });
  return {
    sends_per_s: Math.round(result.requests.average),
    total: result.requests.total,
    p50_ms: result.latency.p50,
    p99_ms: result.latency.p99,
    non_2xx: result.non2xx,
    errors: result.errors,
  };
}

/**
 * The bare baseline (bench/servers/bare-sends.ts) in its own process on the same database, Redis and
 * sandbox, whose callbacks go to it for the while: sends per second, and how many reached read.
 */
async function bareBaseline(o: { sandbox: Awaited<ReturnType<typeof createSandbox>>; account: { phone_number_id: string; access_token: string }; tenantIds: string[]; keys: string[]; templateName: string; appSecret: string; database: Awaited<ReturnType<typeof openDatabase>> }) {
  const port = await freePort();
  const bareUrl = `http://127.0.0.1:${port}`;
  const server = await startProcess('bench/servers/bare-sends.ts', {
    PORT: String(port), UPSTREAM_BASE_URL: o.sandbox.baseUrl, PHONE_NUMBER_ID: o.account.phone_number_id, ACCESS_TOKEN: o.account.access_token,
    UPSTREAM_APP_SECRET: o.appSecret,
  }, `${bareUrl}/healthz`);
  const serviceCallbacks = o.sandbox.state.config.callback_url;
  o.sandbox.state.config.callback_url = `${bareUrl}/upstream/webhook`;
  try {
    await sendLoad(`${bareUrl}/messages/template`, o.keys, o.templateName, 2);
    const started = new Date();
    const measured = await sendLoad(`${bareUrl}/messages/template`, o.keys, o.templateName, SECONDS);
    let counts = { total: 0, read: 0 };
    for (const drainStarted = Date.now(); Date.now() - drainStarted < 60_000;) {
      counts = (await sql<{ total: number; read: number }>`
        SELECT count(*)::int AS total, count(*) FILTER (WHERE status = 'read')::int AS read
        FROM messages WHERE tenant_id IN (${sql.join(o.tenantIds)}) AND created_at >= ${started} AND upstream_message_id IS NOT NULL`.execute(o.database.db)).rows[0];
      if (counts.read >= counts.total) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    return { ...measured, ...counts };
  } finally {
    o.sandbox.state.config.callback_url = serviceCallbacks;
    await stopProcess(server);
  }
}

export async function run(): Promise<object> {
  if (!process.env.DATABASE_URL || !process.env.REDIS_URL) throw new Error('benchmarks run against real servers: set DATABASE_URL and REDIS_URL');
  const appSecret = randomBytes(16).toString('hex');
  const adminToken = `adm_${randomBytes(16).toString('hex')}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const sandbox = await createSandbox({ port: 0, appSecret, reviewMs: 50, callbackUrl: `${url}/upstream/webhook` });
  const service = await startProcess('src/server.ts', {
    PORT: String(port), HOST: '127.0.0.1', ROLE: 'api', UPSTREAM_BASE_URL: sandbox.baseUrl, UPSTREAM_APP_SECRET: appSecret,
    ADMIN_TOKEN: adminToken, SEED_DEMO: 'false', LOG_LEVEL: 'warn', OPENAPI_ENABLED: 'false',
    RATE_LIMIT_PER_MINUTE: '100000000',
    // Diagnostics only: BENCH_SERVICE_DATABASE_URL lets a run vary connection options (e.g. commit mode).
    ...(process.env.BENCH_SERVICE_DATABASE_URL ? { DATABASE_URL: process.env.BENCH_SERVICE_DATABASE_URL } : {}),
    ...(process.env.BENCH_SERVICE_REDIS_URL !== undefined ? { REDIS_URL: process.env.BENCH_SERVICE_REDIS_URL } : {}), DATA_DIR: mkdtempSync(join(tmpdir(), 'msvc-bench-')),
  }, `${url}/healthz`);
  const database = await openDatabase({ databaseUrl: process.env.DATABASE_URL, dataDir: tmpdir(), poolSize: 2 });
  try {
    const admin = { authorization: `Bearer ${adminToken}` };
    // A number sends at most 1,000 messages a second (the service paces each number to it), so the
    // load is spread over TENANTS tenants, each with its own number at that pace.
    const templateName = `bench_${randomBytes(4).toString('hex')}`;
    const senders = await Promise.all(Array.from({ length: TENANTS }, async (_, n) => {
      const tenant = await json(`${url}/admin/v1/tenants`, { method: 'POST', headers: admin, body: JSON.stringify({ name: `bench messages ${n + 1}`, plan: 'business' }) });
      const key = await json(`${url}/admin/v1/tenants/${tenant.id}/api-keys`, { method: 'POST', headers: admin, body: JSON.stringify({ name: 'bench', preset: 'full_access' }) });
      const account = { waba_id: `7${Date.now()}${n}`, phone_number_id: `6${Date.now()}${n}`, access_token: 'bench-token', messages_per_second: 1000 };
      await json(`${url}/admin/v1/tenants/${tenant.id}/business-account`, { method: 'PUT', headers: admin, body: JSON.stringify(account) });
      const auth = { authorization: `Bearer ${key.key}` };
      const template = await json(`${url}/api/v1/public/templates`, { method: 'POST', headers: auth, body: JSON.stringify({
        template_name: templateName, language: 'en', category: 'UTILITY', components: [{ type: 'BODY', text: 'Hello {{1}}, your order {{2}} has shipped.', example: { body_text: [['Ana', 'A-1001']] } }] }) });
      await json(`${url}/api/v1/public/templates/${template.id}/submit`, { method: 'POST', headers: auth, body: '{}' });
      for (let i = 0; ; i++) {
        const res = await fetch(`${url}/api/v1/public/templates/${template.id}`, { headers: auth });
        if (res.ok) break;
        if (i > 200) throw new Error('benchmark template was not approved');
        await new Promise((r) => setTimeout(r, 50));
      }
      return { tenantId: tenant.id as string, key: key.key as string, templateId: template.id as string, account };
    }));
    const keys = senders.map((s) => s.key);
    const tenantIds = senders.map((s) => s.tenantId);
    const auth = { authorization: `Bearer ${keys[0]}` };

    // BENCH_CALLBACKS=false isolates the send path (diagnostics only; the reported run keeps callbacks on).
    const callbacks = process.env.BENCH_CALLBACKS !== 'false';
    sandbox.state.config.callbacks = callbacks;

    // The sandbox alone: the ceiling the service is compared with.
    const capacity = await measureSandboxCapacityDetailed({ baseUrl: sandbox.baseUrl, seconds: Math.min(SECONDS, 5), concurrency: CONNECTIONS });

    // Context: an authenticated, rate-limited one-query read on the same service and machine.
    const baseline = await autocannon({ url: `${url}/api/v1/public/templates/${senders[0].templateId}`, connections: CONNECTIONS, duration: 3, headers: auth });

    const sendUrl = `${url}/api/v1/public/messages/template`;
    await sendLoad(sendUrl, keys, templateName, 2); // warm-up: JIT, pools, caches
    const before = await sql<{ n: number }>`SELECT count(*)::int AS n FROM messages WHERE tenant_id IN (${sql.join(tenantIds)})`.execute(database.db);
    const statementsBefore = await statementsSoFar(url, adminToken);
    const measured = await sendLoad(sendUrl, keys, templateName, SECONDS);

    // Callbacks keep flowing after the load stops; wait until every accepted message reached read.
    const drainStarted = Date.now();
    let counts = { total: 0, read: 0, sent_or_later: 0 };
    for (;;) {
      const row = (await sql<{ total: number; read: number; later: number }>`
        SELECT count(*)::int AS total, count(*) FILTER (WHERE status = 'read')::int AS read, count(*) FILTER (WHERE status_rank >= 1)::int AS later
        FROM messages WHERE tenant_id IN (${sql.join(tenantIds)}) AND upstream_message_id IS NOT NULL`.execute(database.db)).rows[0];
      counts = { total: row.total, read: row.read, sent_or_later: row.later };
      if (!callbacks || row.read >= row.total || Date.now() - drainStarted > 60_000) break;
      await new Promise((r) => setTimeout(r, 250));
    }
    const drainMs = Date.now() - drainStarted;
    const sendsMeasured = counts.total - before.rows[0].n;
    const statementsPerSend = Math.round(((await statementsSoFar(url, adminToken)) - statementsBefore) / sendsMeasured * 100) / 100;
    const events = (await sql<{ n: number }>`SELECT count(*)::int AS n FROM events WHERE tenant_id IN (${sql.join(tenantIds)}) AND type LIKE 'message.%'`.execute(database.db)).rows[0].n;

    // Latency at a steady 500 sends/s (the p99 target), then the bare baseline of the same I/O.
    const paced = await sendLoad(sendUrl, keys, templateName, 5, PACED_RATE);
    const bare = await bareBaseline({ sandbox, account: senders[0].account, tenantIds, keys, templateName, appSecret, database });

    const ratio = Math.round((measured.sends_per_s / capacity.sendsPerSecond) * 100) / 100;
    const result = {
      seconds: SECONDS,
      callbacks,
      connections: CONNECTIONS,
      tenants: TENANTS,
      sandbox_capacity_sends_per_s: capacity.sendsPerSecond,
      sandbox_capacity_errors: capacity.errors,
      api_sends_per_s: measured.sends_per_s,
      api_sends_total: measured.total,
      api_p50_ms: measured.p50_ms,
      api_p99_ms: measured.p99_ms,
      api_non_2xx: measured.non_2xx,
      api_errors: measured.errors,
      ratio_to_sandbox: ratio,
      baseline_get_template_per_s: Math.round(baseline.requests.average),
      baseline_get_template_p50_ms: baseline.latency.p50,
      target_ratio: 0.5,
      meets_target: ratio >= 0.5,
      messages_stored: counts.total,
      messages_before_measured_run: before.rows[0].n,
      messages_read_after_drain: counts.read,
      messages_sent_or_later: counts.sent_or_later,
      message_status_events: events,
      callback_drain_ms: drainMs,
      statements_per_send: statementsPerSend,
      paced_rate_per_s: PACED_RATE,
      paced_sends_per_s: paced.sends_per_s,
      paced_p50_ms: paced.p50_ms,
      paced_p99_ms: paced.p99_ms,
      paced_non_2xx: paced.non_2xx,
      bare_sends_per_s: bare.sends_per_s,
      bare_p50_ms: bare.p50_ms,
      bare_p99_ms: bare.p99_ms,
      bare_non_2xx: bare.non_2xx,
      bare_read_after_drain: bare.read,
      bare_messages: bare.total,
      ratio_to_bare: Math.round((measured.sends_per_s / bare.sends_per_s) * 100) / 100,
      target_ratio_to_bare: 0.6,
      target_paced_p99_ms: 100,
    };
    console.log(`messages: bare baseline ${bare.sends_per_s}/s (ratio ${result.ratio_to_bare}, target 0.6); at ${PACED_RATE}/s p99 ${paced.p99_ms} ms (target 100)`);
    console.log(`messages: ${measured.sends_per_s} sends/s through the API (p50 ${measured.p50_ms} ms, p99 ${measured.p99_ms} ms, non-2xx ${measured.non_2xx}) vs sandbox ${capacity.sendsPerSecond}/s = ${ratio} (target 0.5); GET /templates/{id} baseline ${Math.round(baseline.requests.average)}/s; ${counts.read}/${counts.total} read after ${drainMs} ms drain, ${events} status events, ${statementsPerSend} statements per send with its callbacks`);
    return result;
  } finally {
    await database.close();
    await stopProcess(service);
    await sandbox.close();
  }
}

// Run directly: `DATABASE_URL=... REDIS_URL=... npx tsx bench/messages.ts`.
if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await run(), null, 2));
  process.exit(0);
}
