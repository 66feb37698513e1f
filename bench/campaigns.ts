import { execFileSync } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync, mkdtempSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { sql } from 'kysely';
import { openDatabase, type Database } from '../src/db/database.ts';
import { cpuSeconds, freePort, freshDatabase, pidsOf, requireRealServers, startProcess, stopProcess } from './support.ts';

/**
 * Campaigns end to end (issue 9), on this machine with PostgreSQL, Redis, the sandbox and the
 * service (one ROLE=all process at its default configuration) together:
 * - materialise: POST /campaigns/{id}/send of an audience of 1,000,000 contacts, beside a raw
 *   INSERT ... SELECT of the same rows into the same table;
 * - dispatch: 100,000 recipients from one phone number at messages_per_second 1,000, until every
 *   callback is processed and the stats are final; the busiest one-second window of sends;
 * - dispatch_unpaced: the same audience over four numbers at 1,000 each: what the machine sustains
 *   when pacing is not the limit, with the CPU per recipient of each process.
 * - dispatch_bare (issue 24 §1): the same audience, numbers and sandbox through a bare baseline
 *   (bench/servers/bare-dispatch.ts: one row per recipient, set-based writes, an events row per
 *   status, nothing else) in place of the service: the floor to set dispatch_unpaced's PostgreSQL
 *   work against, measured the same way on the same machine.
 * - dispatch_multi (issue 24 §2): the dispatch audience from one number at 1,000/s, sent by three
 *   ROLE=worker processes beside one ROLE=api process (which runs no workers), in place of the
 *   ROLE=all one, on the same database, Redis and sandbox: the busiest second at the sandbox, sends
 *   per worker (each one's campaign_sends_total on METRICS_PORT) and CPU per recipient of each process.
 * BENCH_FULL=1 also dispatches the 1,000,000-recipient campaign and reports the service's peak RSS.
 * BENCH_CAMPAIGN_PHASES (comma-separated, default all four) runs some phases only; bench/run.ts then
 * replaces only their keys in bench/results/campaigns.json. Each phase records when, at which commit
 * and at what load average it was measured.
 */

const CONTACTS = Number(process.env.BENCH_CONTACTS ?? 1_000_000);
const DISPATCH = Number(process.env.BENCH_DISPATCH ?? 100_000);
const FULL = process.env.BENCH_FULL === '1';
const ALL_PHASES = ['materialise', 'dispatch', 'dispatch_unpaced', 'dispatch_bare', 'dispatch_multi'];
const PHASES = new Set((process.env.BENCH_CAMPAIGN_PHASES ?? ALL_PHASES.join(',')).split(',').map((p) => p.trim()).filter(Boolean));
if (process.env.BENCH_UNPACED === '0') PHASES.delete('dispatch_unpaced');
for (const phase of PHASES) if (!ALL_PHASES.includes(phase)) throw new Error(`unknown campaign phase "${phase}"; choose from ${ALL_PHASES.join(', ')}`);
if (FULL && !PHASES.has('materialise')) throw new Error('BENCH_FULL=1 dispatches the materialised campaign: select the materialise phase');
const WORKERS = 3;

/** Whether this run leaves some phases out (bench/run.ts then keeps the other keys of the last results). */
export const partial = () => ALL_PHASES.some((p) => !PHASES.has(p));

async function json(url: string, init: RequestInit & { body?: string } = {}): Promise<any> {
  const res = await fetch(url, { ...init, headers: { 'content-type': 'application/json', ...(init.headers ?? {}) } });
  const text = await res.text();
  if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${url}: ${res.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

function peakRssMb(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Math.round(Number(/VmHWM:\s+(\d+)/.exec(status)![1]) / 1024);
}

/** The most sends that fall in any one-second window (sliding). */
function busiestSecond(times: number[]): number {
  const sorted = [...times].sort((a, b) => a - b);
  let best = 0;
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i] - sorted[j] >= 1000) j++;
    best = Math.max(best, i - j + 1);
  }
  return best;
}

/**
 * Where the sends of one campaign went at the sandbox (times as it received them) and in time:
 * busiest sliding second, the timeline from POST /send (t0) to final (end), sends per whole second.
 */
function sendProfile(sendTimes: number[], t0: number, answered: number, end: number) {
  const sorted = [...sendTimes].sort((a, b) => a - b);
  const perSecond = new Map<number, number>();
  for (const t of sorted) perSecond.set(Math.floor((t - sorted[0]) / 1000), (perSecond.get(Math.floor((t - sorted[0]) / 1000)) ?? 0) + 1);
  const fullSeconds = [...perSecond.entries()].filter(([s]) => s < Math.floor((sorted.at(-1)! - sorted[0]) / 1000)).map(([, n]) => n).sort((a, b) => a - b);
  return {
    busiest_second_sends: busiestSecond(sendTimes),
    sends_seen_by_sandbox: sendTimes.length,
    // The rate while sending, without materialising before the first send or the last callbacks.
    first_to_last_send_per_s: Math.round((sorted.length - 1) / ((sorted.at(-1)! - sorted[0]) / 1000)),
    // Where the end-to-end time goes: until the first send, sending, and after the last send until stats were final.
    timeline_s: {
      first_send: Math.round((sorted[0] - t0) / 100) / 10,
      // Of which POST /send (materialising the recipients) until it answered.
      send_request: Math.round((answered - t0) / 100) / 10,
      sending: Math.round((sorted.at(-1)! - sorted[0]) / 100) / 10,
      after_last_send: Math.round((end - sorted.at(-1)!) / 100) / 10,
    },
    sends_per_whole_second: { min: fullSeconds[0], median: fullSeconds[Math.floor(fullSeconds.length / 2)], max: fullSeconds.at(-1) },
  };
}

/** When, at which commit and at what load average (1-minute, sampled every 5 s; the machine is shared) a phase was measured. */
function measuring() {
  const at = new Date().toISOString();
  const commit = execFileSync('git', ['rev-parse', '--short', 'HEAD'], { encoding: 'utf8' }).trim();
  const dirty = execFileSync('git', ['status', '--porcelain', '--', 'src', 'bench/campaigns.ts'], { encoding: 'utf8' }).trim() !== '';
  const samples = [loadavg()[0]];
  const timer = setInterval(() => samples.push(loadavg()[0]), 5000).unref();
  return () => {
    clearInterval(timer);
    samples.push(loadavg()[0]);
    const round = (n: number) => Math.round(n * 100) / 100;
    return { at, commit: dirty ? `${commit}-dirty` : commit, load_average_1m: { min: round(Math.min(...samples)), max: round(Math.max(...samples)), at_end: loadavg().map(round) } };
  };
}

/** Sends this process issued to the upstream (its campaign_sends_total over every number bucket). */
async function campaignSends(metricsUrl: string): Promise<number> {
  const text = await (await fetch(metricsUrl)).text();
  let n = 0;
  for (const m of text.matchAll(/^campaign_sends_total\{[^}]*\} (\d+)/gm)) n += Number(m[1]);
  return n;
}

interface Progress { at: number; read: number; completed: boolean }

/**
 * What the time after the last send waited for: recipients not yet read (or failed) in the stats
 * at the last send, and when the campaign completed and the last one was read, after it.
 */
function tail(progress: Progress[], sendTimes: number[], total: number) {
  const last = Math.max(...sendTimes);
  const after = (p?: Progress) => (p ? Math.round((p.at - last) / 100) / 10 : null);
  return {
    unread_at_last_send: total - (progress.findLast((p) => p.at <= last)?.read ?? 0),
    completed_after_last_send_s: after(progress.find((p) => p.completed)),
    all_read_after_last_send_s: after(progress.find((p) => p.read >= total)),
  };
}

interface Tenant { id: string; auth: Record<string, string>; phoneNumberId: string; templateId: string }

export async function run(): Promise<object> {
  requireRealServers();
  // A fresh database: earlier runs' campaigns must not be dispatched beside this one's.
  const fresh = await freshDatabase('msvc_bench_campaigns');
  const appSecret = randomBytes(16).toString('hex');
  const adminToken = `adm_${randomBytes(16).toString('hex')}`;
  const port = await freePort();
  const url = `http://127.0.0.1:${port}`;
  const sandboxPort = await freePort();
  const sandboxUrl = `http://127.0.0.1:${sandboxPort}`;
  const sandbox = await startProcess('bench/sandbox-process.ts', {
    SANDBOX_PORT: String(sandboxPort), UPSTREAM_APP_SECRET: appSecret, SANDBOX_CALLBACK_URL: `${url}/upstream/webhook`,
    SANDBOX_SENDS_LOG_CAPACITY: String(Math.max(200_000, DISPATCH * 2)),
  }, `${sandboxUrl}/__sandbox/health`);
  process.once('exit', () => sandbox.kill()); // also when the run fails before its cleanup
  // What `npm start` runs: the compiled build (built first if src/ is newer).
  execFileSync(process.execPath, ['scripts/build.mjs', '--if-stale'], { stdio: 'inherit' });
  // Every process of the run shares the data directory (its generated SECRETS_KEY decrypts the accounts' tokens).
  const serviceEnv = {
    HOST: '127.0.0.1', UPSTREAM_BASE_URL: sandboxUrl, UPSTREAM_APP_SECRET: appSecret,
    ADMIN_TOKEN: adminToken, SEED_DEMO: 'false', LOG_LEVEL: 'warn', OPENAPI_ENABLED: 'false', WEBHOOK_DELIVERY_ENABLED: 'false', DATABASE_URL: fresh.url,
    // The benchmark polls campaign progress; the tenant minute limit is not what is measured.
    RATE_LIMIT_PER_MINUTE: '100000',
    DATA_DIR: mkdtempSync(join(tmpdir(), 'msvc-bench-')),
  };
  let service = await startProcess('dist/server.js', { ...serviceEnv, PORT: String(port), ROLE: 'all' }, `${url}/healthz`);
  const workers: { pid: number; metricsUrl: string; stop: () => Promise<void> }[] = [];
  const database = await openDatabase({ databaseUrl: fresh.url, dataDir: tmpdir(), poolSize: 2 });
  const admin = { authorization: `Bearer ${adminToken}` };
  let seq = 0;

  async function tenant(name: string, mps: number): Promise<Tenant> {
    const t = await json(`${url}/admin/v1/tenants`, { method: 'POST', headers: admin, body: JSON.stringify({ name, plan: 'business' }) });
    const key = await json(`${url}/admin/v1/tenants/${t.id}/api-keys`, { method: 'POST', headers: admin, body: JSON.stringify({ name: 'bench' }) });
    const phoneNumberId = `5${Date.now()}${seq++}`;
    await json(`${url}/admin/v1/tenants/${t.id}/business-account`, { method: 'PUT', headers: admin,
      body: JSON.stringify({ waba_id: `4${Date.now()}${seq}`, phone_number_id: phoneNumberId, access_token: 'bench', messages_per_second: mps, messaging_tier: 'unlimited' }) });
    // The seeded contacts have US numbers, which MARKETING campaigns skip by default.
    await json(`${url}/admin/v1/tenants/${t.id}/marketing-settings`, { method: 'PATCH', headers: admin, body: JSON.stringify({ block_us_marketing: false }) });
    const auth = { authorization: `Bearer ${key.key}` };
    const template = await json(`${url}/api/v1/public/templates`, { method: 'POST', headers: auth, body: JSON.stringify({
      template_name: `bench_${randomBytes(4).toString('hex')}`, language: 'en', category: 'MARKETING',
      components: [{ type: 'BODY', text: 'Hello {{1}}, your code {{2}} is ready.', example: { body_text: [['Ana', 'X1']] } }] }) });
    await json(`${url}/api/v1/public/templates/${template.id}/submit`, { method: 'POST', headers: auth, body: '{}' });
    for (let i = 0; !(await fetch(`${url}/api/v1/public/templates/${template.id}`, { headers: auth })).ok; i++) {
      if (i > 1200) throw new Error(`benchmark template was not approved: ${JSON.stringify(await json(`${url}/api/v1/public/templates?limit=5`, { headers: auth }))} ${(await database.db.selectFrom('templates').select(['status', 'rejected_reason']).where('id', '=', template.id).executeTakeFirst())?.status}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    return { id: t.id, auth, phoneNumberId, templateId: template.id };
  }

  /** Contacts seeded set-based (the API's bulk path is measured elsewhere), phones from `offset`. */
  async function seed(db: Database, tenantId: string, count: number, offset: number, tag: string) {
    await sql`
      INSERT INTO contacts (id, tenant_id, first_name, phone, tags, custom_fields, source)
      SELECT gen_random_uuid(), ${tenantId}::uuid, 'Name' || g, '+1415' || lpad((2000000 + ${offset}::int + g)::text, 7, '0'),
        ARRAY[${tag}]::text[], jsonb_build_object('code', 'C' || g), 'bench'
      FROM generate_series(0, ${count}::int - 1) g`.execute(db.db);
    await sql`ANALYZE contacts`.execute(db.db);
  }

  async function createCampaign(t: Tenant, tag: string) {
    return json(`${url}/api/v1/public/campaigns`, { method: 'POST', headers: t.auth, body: JSON.stringify({
      name: 'bench', template_id: t.templateId, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'contact_field', field: 'custom_fields.code' }] }] },
    }) });
  }

  const phonesFrom = (offset: number, count: number) => new Set(Array.from({ length: count }, (_, g) => `1415${String(2000000 + offset + g).padStart(7, '0')}`));
  /** The sandbox's receive times of the sends to these phones. */
  const sendTimesTo = async (phones: Set<string>) =>
    ((await json(`${sandboxUrl}/__sandbox/sends`)).data as { to: string; at: string }[]).filter((s) => phones.has(s.to.replace(/^\+/, ''))).map((s) => new Date(s.at).getTime());

  /** Polls until the stats are final; `progress` gets every poll's time, read count and status. */
  async function waitFinal(t: Tenant, campaignId: string, total: number, timeoutMs: number, progress?: Progress[]) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const c = await json(`${url}/api/v1/public/campaigns/${campaignId}`, { headers: t.auth });
      progress?.push({ at: Date.now(), read: c.stats.read + c.stats.failed, completed: c.status === 'COMPLETED' });
      if (c.status === 'COMPLETED' && c.stats.read + c.stats.failed >= total) return c;
      if (Date.now() > deadline) throw new Error(`campaign ${campaignId} not final: ${JSON.stringify(c.stats)} ${c.status}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  // PostgreSQL: the backends serving this run's database and the server's own processes (WAL
  // writer, checkpointer...), not other databases' backends on a shared machine.
  const postgresPids = async () => (await sql<{ pid: number }>`
    SELECT pid FROM pg_stat_activity WHERE datname = current_database() OR backend_type <> 'client backend'`.execute(database.db)).rows.map((r) => r.pid);
  const cpuSnapshot = async (own: Record<string, number[]> = { service: [service.pid!] }) => {
    const processes = { ...own, postgres: await postgresPids(), redis: pidsOf('redis-server'), sandbox: [sandbox.pid!], bench: [process.pid] };
    return Object.fromEntries(Object.entries(processes).map(([k, pids]) => [k, new Map(pids.map((pid) => [pid, cpuSeconds([pid])]))]));
  };
  /** CPU ms per recipient of each process group; a process born during the run counts from zero. */
  const cpuPerRecipient = (before: Record<string, Map<number, number>>, after: Record<string, Map<number, number>>, n: number) =>
    Object.fromEntries(Object.keys(after).map((k) => {
      let seconds = 0;
      for (const [pid, cpu] of after[k]) seconds += cpu - (before[k].get(pid) ?? 0);
      return [`${k}_ms`, Math.round((seconds / n) * 1000 * 1000) / 1000];
    }));

  /**
   * The dispatch audience sent from one number at 1,000/s, from POST /send until every callback is
   * in: what `dispatch` and `dispatch_multi` both report, with the CPU per recipient of `own`.
   */
  async function dispatchFromOneNumber(t: Tenant, firstPhone: number, own?: Record<string, number[]>) {
    await seed(database, t.id, DISPATCH, firstPhone, 'all');
    const campaign = await createCampaign(t, 'all');
    const cpu0 = await cpuSnapshot(own);
    const t0 = Date.now();
    await json(`${url}/api/v1/public/campaigns/${campaign.id}/send`, { method: 'POST', headers: t.auth, body: '{}' });
    const answered = Date.now();
    const progress: Progress[] = [];
    const final = await waitFinal(t, campaign.id, DISPATCH, 30 * 60_000, progress);
    const end = Date.now();
    const cpu1 = await cpuSnapshot(own);
    const sendTimes = await sendTimesTo(phonesFrom(firstPhone, DISPATCH));
    const { busiest_second_sends, ...profile } = sendProfile(sendTimes, t0, answered, end);
    return {
      run: {
        recipients: final.total_recipients,
        messages_per_second: 1000,
        elapsed_s: Math.round((end - t0) / 100) / 10,
        recipients_per_s: Math.round(DISPATCH / ((end - t0) / 1000)),
        busiest_second_sends,
        ...profile,
        tail: tail(progress, sendTimes, DISPATCH),
        stats: final.stats,
      },
      cpu: cpuPerRecipient(cpu0, cpu1, DISPATCH),
    };
  }

  /**
   * The service's statements (its db_statements_total) and the rows written in this run's database
   * (inserted, updated, deleted: pg_stat_user_tables, which backends report within about a second).
   */
  const databaseWork = async () => {
    const metrics = await (await fetch(`${url}/admin/v1/metrics`, { headers: admin })).text();
    const statements = Number(/^db_statements_total(?:\{[^}]*\})? (\d+)/m.exec(metrics)?.[1] ?? Number.NaN);
    await new Promise((r) => setTimeout(r, 1500));
    const { rows, updates, hot } = (await sql<{ rows: number; updates: number; hot: number }>`
      SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint AS rows, coalesce(sum(n_tup_upd), 0)::bigint AS updates,
        coalesce(sum(n_tup_hot_upd), 0)::bigint AS hot
      FROM pg_stat_user_tables`.execute(database.db)).rows[0];
    // The whole server's WAL (PostgreSQL 14 and later): a measure of the writes that does not depend
    // on the machine's speed, as CPU does. Other databases' writes count too, so a quiet server only.
    const wal = (await sql<{ records: number; bytes: number }>`SELECT wal_records::bigint AS records, wal_bytes::bigint AS bytes FROM pg_stat_wal`
      .execute(database.db).catch(() => ({ rows: [{ records: Number.NaN, bytes: Number.NaN }] }))).rows[0];
    return { statements, rows, updates, hot, walRecords: wal.records, walBytes: wal.bytes };
  };
  type Work = Awaited<ReturnType<typeof databaseWork>>;
  const perRecipient = (value: number, n: number) => (Number.isFinite(value) ? Math.round((value / n) * 100) / 100 : null);
  const workPerRecipient = (before: Work, after: Work, n: number) => ({
    statements_per_recipient: perRecipient(after.statements - before.statements, n),
    rows_written_per_recipient: perRecipient(after.rows - before.rows, n),
    // Updates that rewrote no index (heap-only tuples), of all updates.
    hot_update_share: Math.round(((after.hot - before.hot) / Math.max(1, after.updates - before.updates)) * 100) / 100,
    wal_records_per_recipient: perRecipient(after.walRecords - before.walRecords, n),
    wal_bytes_per_recipient: Number.isFinite(after.walBytes) ? Math.round((after.walBytes - before.walBytes) / n) : null,
  });

  const result: Record<string, unknown> = {
    configuration: 'service defaults (ROLE=all, batch_size 50, CAMPAIGN_POLL_MS 100, PACING_HORIZON_MS 1000, CAMPAIGN_MAX_BATCHES 64)',
  };
  try {
    // Tenants and templates first: a template approval callback must not meet a database busy seeding.
    const big = PHASES.has('materialise') ? await tenant('bench materialise', 1000) : undefined;
    const paced = PHASES.has('dispatch') ? await tenant('bench dispatch', 1000) : undefined;
    const four: Tenant[] = [];
    if (PHASES.has('dispatch_unpaced') || PHASES.has('dispatch_bare')) for (let i = 0; i < 4; i++) four.push(await tenant(`bench unpaced ${i}`, 1000));
    const multi = PHASES.has('dispatch_multi') ? await tenant('bench dispatch multi', 1000) : undefined;

    // 1. Materialise 1,000,000 recipients.
    if (big) {
      const stopMeasuring = measuring();
      await seed(database, big.id, CONTACTS, 0, 'all');
      const rawCampaign = await createCampaign(big, 'all');
      // The raw baseline writes the same rows as the service, ids by the same uuid_v7().
      const rawStarted = performance.now();
      await sql`
        INSERT INTO campaign_recipients (id, tenant_id, campaign_id, contact_id, phone)
        SELECT uuid_v7(), c.tenant_id, ${rawCampaign.id}::uuid, c.id, c.phone FROM contacts c
        WHERE c.tenant_id = ${big.id}::uuid AND c.deleted_at IS NULL AND (c.tags && ARRAY['all']::text[] OR c.source = ANY(ARRAY[]::text[]))
        ON CONFLICT (campaign_id, phone) DO NOTHING`.execute(database.db);
      const rawMs = performance.now() - rawStarted;
      await sql`DELETE FROM campaign_recipients WHERE campaign_id = ${rawCampaign.id}::uuid`.execute(database.db);
      await sql`VACUUM campaign_recipients`.execute(database.db);
      const measured = await createCampaign(big, 'all');
      // Paused at once below, so the materialising request is what is timed (dispatch is measured next).
      const sendStarted = performance.now();
      const sent = await json(`${url}/api/v1/public/campaigns/${measured.id}/send`, { method: 'POST', headers: big.auth, body: '{}' });
      const serviceMs = performance.now() - sendStarted;
      if (!FULL) await json(`${url}/api/v1/public/campaigns/${measured.id}/stop`, { method: 'POST', headers: big.auth, body: '{}' });
      const materialise = {
        rows: sent.total_recipients,
        raw_insert_select_ms: Math.round(rawMs),
        service_send_ms: Math.round(serviceMs),
        ratio_to_raw: Math.round((rawMs / serviceMs) * 100) / 100,
        target_ratio: 0.8,
        measured: stopMeasuring(),
      };
      result.materialise = materialise;
      console.log(`campaigns materialise: ${sent.total_recipients} recipients in ${Math.round(serviceMs)} ms through POST /send vs raw INSERT ... SELECT ${Math.round(rawMs)} ms = ${materialise.ratio_to_raw}`);

      if (FULL) {
        const final = await waitFinal(big, measured.id, CONTACTS, 3 * 3600_000);
        result.full_1m = { recipients: final.total_recipients, duration_s: Math.round((Date.now() - new Date(final.started_at).getTime()) / 1000), service_peak_rss_mb: peakRssMb(service.pid!) };
      }
    }

    // 2. Dispatch 100,000 from one number at 1,000/s.
    if (paced) {
      const stopMeasuring = measuring();
      const { run: sent, cpu } = await dispatchFromOneNumber(paced, 1_000_000);
      const dispatch = { ...sent, cpu_per_recipient: cpu, target_recipients_per_s: 950, measured: stopMeasuring() };
      result.dispatch = dispatch;
      console.log(`campaigns dispatch: ${dispatch.recipients_per_s} recipients/s end to end at 1,000/s (busiest second ${dispatch.busiest_second_sends} sends), CPU ms/recipient ${JSON.stringify(dispatch.cpu_per_recipient)}`);
    }

    // 3. The same audience size over four numbers at 1,000/s each.
    if (four.length > 0 && PHASES.has('dispatch_unpaced')) {
      const stopMeasuring = measuring();
      const share = Math.floor(DISPATCH / 4);
      for (const [i, t] of four.entries()) await seed(database, t.id, share, 2_000_000 + i * share, 'all');
      const campaigns = await Promise.all(four.map((t) => createCampaign(t, 'all')));
      const work0 = await databaseWork();
      const cpu2 = await cpuSnapshot();
      const t2 = Date.now();
      await Promise.all(four.map((t, i) => json(`${url}/api/v1/public/campaigns/${campaigns[i].id}/send`, { method: 'POST', headers: t.auth, body: '{}' })));
      await Promise.all(four.map((t, i) => waitFinal(t, campaigns[i].id, share, 30 * 60_000)));
      const unpacedS = (Date.now() - t2) / 1000;
      const cpu3 = await cpuSnapshot();
      const work1 = await databaseWork();
      const dispatchUnpaced = {
        recipients: share * 4,
        phone_numbers: 4,
        elapsed_s: Math.round(unpacedS * 10) / 10,
        recipients_per_s: Math.round((share * 4) / unpacedS),
        cpu_per_recipient: cpuPerRecipient(cpu2, cpu3, share * 4),
        // From POST /send (materialising) to every callback applied and the stats final.
        ...workPerRecipient(work0, work1, share * 4),
        target_recipients_per_s: 2000,
        target_postgres_cpu_ms: 0.3,
        measured: stopMeasuring(),
      };
      result.dispatch_unpaced = dispatchUnpaced;
      console.log(`campaigns dispatch_unpaced: ${dispatchUnpaced.recipients_per_s} recipients/s over 4 numbers, CPU ms/recipient ${JSON.stringify(dispatchUnpaced.cpu_per_recipient)}, ${dispatchUnpaced.statements_per_recipient} statements, ${dispatchUnpaced.rows_written_per_recipient} rows written (${dispatchUnpaced.hot_update_share} of updates HOT) and ${dispatchUnpaced.wal_records_per_recipient} WAL records (${dispatchUnpaced.wal_bytes_per_recipient} bytes) per recipient`);
    }
    // 3b. The same, through the bare baseline, its own contacts (phones after the service's).
    if (four.length > 0 && PHASES.has('dispatch_bare')) {
      const stopMeasuring = measuring();
      const share = Math.floor(DISPATCH / 4);
      for (const [i, t] of four.entries()) await seed(database, t.id, share, 2_000_000 + (4 + i) * share, 'bare');
      const barePort = await freePort();
      const bareUrl = `http://127.0.0.1:${barePort}`;
      const bare = await startProcess('bench/servers/bare-dispatch.ts', {
        PORT: String(barePort), DATABASE_URL: fresh.url, UPSTREAM_BASE_URL: sandboxUrl, UPSTREAM_APP_SECRET: appSecret,
      }, `${bareUrl}/healthz`);
      await json(`${sandboxUrl}/__sandbox/config`, { method: 'PUT', body: JSON.stringify({ callback_url: `${bareUrl}/upstream/webhook` }) });
      try {
        const templates = await Promise.all(four.map(async (t) => (await json(`${url}/api/v1/public/templates/${t.templateId}`, { headers: t.auth })).template_name as string));
        const ids = four.map(() => randomUUID());
        const bareOwn = { service: [service.pid!], bare: [bare.pid!] };
        const work0 = await databaseWork();
        const cpu0 = await cpuSnapshot(bareOwn);
        const t0 = Date.now();
        await Promise.all(four.map((t, i) => json(`${bareUrl}/bare/campaigns`, { method: 'POST', body: JSON.stringify({
          campaign_id: ids[i], tenant_id: t.id, tag: 'bare', phone_number_id: t.phoneNumberId, template_name: templates[i] }) })));
        for (const deadline = Date.now() + 30 * 60_000; ;) {
          const states = await Promise.all(ids.map((id) => json(`${bareUrl}/bare/campaigns/${id}`)));
          if (states.every((c) => c.final)) break;
          if (Date.now() > deadline) throw new Error(`bare campaigns not final: ${JSON.stringify(states)}`);
          await new Promise((r) => setTimeout(r, 100));
        }
        const bareS = (Date.now() - t0) / 1000;
        const cpu1 = await cpuSnapshot(bareOwn);
        const work1 = await databaseWork();
        const { statements_per_recipient: _counted, ...work } = workPerRecipient(work0, work1, share * 4);
        result.dispatch_bare = {
          recipients: share * 4,
          phone_numbers: 4,
          elapsed_s: Math.round(bareS * 10) / 10,
          recipients_per_s: Math.round((share * 4) / bareS),
          // `service_ms` is this run's idle service (its pollers), `bare_ms` the baseline's process.
          cpu_per_recipient: cpuPerRecipient(cpu0, cpu1, share * 4),
          ...work,
          measured: stopMeasuring(),
        };
        console.log(`campaigns dispatch_bare: ${(result.dispatch_bare as any).recipients_per_s} recipients/s over 4 numbers, CPU ms/recipient ${JSON.stringify((result.dispatch_bare as any).cpu_per_recipient)}, ${work.rows_written_per_recipient} rows written (${work.hot_update_share} of updates HOT) and ${work.wal_records_per_recipient} WAL records (${work.wal_bytes_per_recipient} bytes) per recipient`);
      } finally {
        await json(`${sandboxUrl}/__sandbox/config`, { method: 'PUT', body: JSON.stringify({ callback_url: `${url}/upstream/webhook` }) });
        await stopProcess(bare);
      }
    }
    if (big || paced || four.length > 0) result.service_peak_rss_mb = peakRssMb(service.pid!);

    // 4. The dispatch audience from one number at 1,000/s over three ROLE=worker processes beside a
    // ROLE=api one (no workers in it), which replaces the ROLE=all process on the same port, so the
    // sandbox's callbacks reach it.
    if (multi) {
      const stopMeasuring = measuring();
      await stopProcess(service);
      service = await startProcess('dist/server.js', { ...serviceEnv, PORT: String(port), ROLE: 'api' }, `${url}/healthz`);
      for (let i = 0; i < WORKERS; i++) {
        const metricsPort = await freePort();
        const metricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
        const worker = await startProcess('dist/server.js', { ...serviceEnv, ROLE: 'worker', METRICS_PORT: String(metricsPort) }, metricsUrl);
        workers.push({ pid: worker.pid!, metricsUrl, stop: () => stopProcess(worker) });
      }
      const own = { api: [service.pid!], ...Object.fromEntries(workers.map((w, i) => [`worker_${i + 1}`, [w.pid]])) };
      const sends0 = await Promise.all(workers.map((w) => campaignSends(w.metricsUrl)));
      const { run: sent, cpu } = await dispatchFromOneNumber(multi, 3_000_000, own);
      const sends1 = await Promise.all(workers.map((w) => campaignSends(w.metricsUrl)));
      const workersMs = workers.reduce((sum, _, i) => sum + cpu[`worker_${i + 1}_ms`], 0);
      const dispatchMulti = {
        ...sent,
        processes: `1 ROLE=api, ${WORKERS} ROLE=worker`,
        // Each worker's campaign_sends_total over the run: one owns the number at a time.
        sends_per_worker: sends1.map((n, i) => n - sends0[i]),
        cpu_per_recipient: {
          ...cpu,
          workers_ms: Math.round(workersMs * 1000) / 1000,
          // API and workers together, to set beside dispatch's one ROLE=all process.
          service_ms: Math.round((workersMs + cpu.api_ms) * 1000) / 1000,
        },
        peak_rss_mb: Object.fromEntries(Object.entries(own).map(([k, [pid]]) => [k, peakRssMb(pid)])),
        target_recipients_per_s: 950,
        target_busiest_second_sends: 1000,
        measured: stopMeasuring(),
      };
      result.dispatch_multi = dispatchMulti;
      console.log(`campaigns dispatch_multi: ${dispatchMulti.recipients_per_s} recipients/s end to end at 1,000/s over ${WORKERS} workers (busiest second ${dispatchMulti.busiest_second_sends} sends, sends per worker ${dispatchMulti.sends_per_worker.join('/')}), CPU ms/recipient ${JSON.stringify(dispatchMulti.cpu_per_recipient)}`);
    }
    return result;
  } finally {
    await database.close();
    for (const worker of workers) await worker.stop();
    await stopProcess(service);
    await stopProcess(sandbox);
    await fresh.drop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await run(), null, 2));
  process.exit(0);
}
