import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
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
 * BENCH_FULL=1 also dispatches the 1,000,000-recipient campaign and reports the service's peak RSS.
 */

const CONTACTS = Number(process.env.BENCH_CONTACTS ?? 1_000_000);
const DISPATCH = Number(process.env.BENCH_DISPATCH ?? 100_000);
const FULL = process.env.BENCH_FULL === '1';
const UNPACED = process.env.BENCH_UNPACED !== '0';

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
  const service = await startProcess('dist/server.js', {
    PORT: String(port), HOST: '127.0.0.1', ROLE: 'all', UPSTREAM_BASE_URL: sandboxUrl, UPSTREAM_APP_SECRET: appSecret,
    ADMIN_TOKEN: adminToken, SEED_DEMO: 'false', LOG_LEVEL: 'warn', OPENAPI_ENABLED: 'false', WEBHOOK_DELIVERY_ENABLED: 'false', DATABASE_URL: fresh.url,
    // The benchmark polls campaign progress; the tenant minute limit is not what is measured.
    RATE_LIMIT_PER_MINUTE: '100000',
    DATA_DIR: mkdtempSync(join(tmpdir(), 'msvc-bench-')),
  }, `${url}/healthz`);
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

  async function waitFinal(t: Tenant, campaignId: string, total: number, timeoutMs: number) {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const c = await json(`${url}/api/v1/public/campaigns/${campaignId}`, { headers: t.auth });
      if (c.status === 'COMPLETED' && c.stats.read + c.stats.failed >= total) return c;
      if (Date.now() > deadline) throw new Error(`campaign ${campaignId} not final: ${JSON.stringify(c.stats)} ${c.status}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  // PostgreSQL: the backends serving this run's database and the server's own processes (WAL
  // writer, checkpointer...), not other databases' backends on a shared machine.
  const postgresPids = async () => (await sql<{ pid: number }>`
    SELECT pid FROM pg_stat_activity WHERE datname = current_database() OR backend_type <> 'client backend'`.execute(database.db)).rows.map((r) => r.pid);
  const cpuSnapshot = async () => {
    const processes = { service: [service.pid!], postgres: await postgresPids(), redis: pidsOf('redis-server'), sandbox: [sandbox.pid!], bench: [process.pid] };
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
   * The service's statements (its db_statements_total) and the rows written in this run's database
   * (inserted, updated, deleted: pg_stat_user_tables, which backends report within about a second).
   */
  const databaseWork = async () => {
    const metrics = await (await fetch(`${url}/admin/v1/metrics`, { headers: admin })).text();
    const statements = Number(/^db_statements_total(?:\{[^}]*\})? (\d+)/m.exec(metrics)?.[1] ?? Number.NaN);
    await new Promise((r) => setTimeout(r, 1500));
    const rows = (await sql<{ n: number }>`SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint AS n FROM pg_stat_user_tables`.execute(database.db)).rows[0].n;
    return { statements, rows };
  };
  const workPerRecipient = (before: { statements: number; rows: number }, after: { statements: number; rows: number }, n: number) => ({
    statements_per_recipient: Math.round(((after.statements - before.statements) / n) * 100) / 100,
    rows_written_per_recipient: Math.round(((after.rows - before.rows) / n) * 100) / 100,
  });

  try {
    // Tenants and templates first: a template approval callback must not meet a database busy seeding.
    const big = await tenant('bench materialise', 1000);
    const paced = await tenant('bench dispatch', 1000);
    const four: Tenant[] = [];
    for (let i = 0; i < 4; i++) four.push(await tenant(`bench unpaced ${i}`, 1000));

    // 1. Materialise 1,000,000 recipients.
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
    };
    console.log(`campaigns materialise: ${sent.total_recipients} recipients in ${Math.round(serviceMs)} ms through POST /send vs raw INSERT ... SELECT ${Math.round(rawMs)} ms = ${materialise.ratio_to_raw}`);

    let full: object | undefined;
    if (FULL) {
      const final = await waitFinal(big, measured.id, CONTACTS, 3 * 3600_000);
      full = { recipients: final.total_recipients, duration_s: Math.round((Date.now() - new Date(final.started_at).getTime()) / 1000), service_peak_rss_mb: peakRssMb(service.pid!) };
    }

    // 2. Dispatch 100,000 from one number at 1,000/s.
    await seed(database, paced.id, DISPATCH, 1_000_000, 'all');
    const pacedCampaign = await createCampaign(paced, 'all');
    const cpu0 = await cpuSnapshot();
    const t0 = Date.now();
    await json(`${url}/api/v1/public/campaigns/${pacedCampaign.id}/send`, { method: 'POST', headers: paced.auth, body: '{}' });
    const answered = Date.now();
    const final = await waitFinal(paced, pacedCampaign.id, DISPATCH, 30 * 60_000);
    const elapsedS = (Date.now() - t0) / 1000;
    const cpu1 = await cpuSnapshot();
    const pacedPhones = new Set(Array.from({ length: DISPATCH }, (_, g) => `1415${String(2000000 + 1_000_000 + g).padStart(7, '0')}`));
    const sends = (await json(`${sandboxUrl}/__sandbox/sends`)).data as { to: string; at: string }[];
    const sendTimes = sends.filter((s) => pacedPhones.has(s.to.replace(/^\+/, ''))).map((s) => new Date(s.at).getTime());
    const sorted = [...sendTimes].sort((a, b) => a - b);
    const perSecond = new Map<number, number>();
    for (const t of sorted) perSecond.set(Math.floor((t - sorted[0]) / 1000), (perSecond.get(Math.floor((t - sorted[0]) / 1000)) ?? 0) + 1);
    const fullSeconds = [...perSecond.entries()].filter(([s]) => s < Math.floor((sorted.at(-1)! - sorted[0]) / 1000)).map(([, n]) => n).sort((a, b) => a - b);
    const dispatch = {
      recipients: final.total_recipients,
      messages_per_second: 1000,
      elapsed_s: Math.round(elapsedS * 10) / 10,
      recipients_per_s: Math.round(DISPATCH / elapsedS),
      busiest_second_sends: busiestSecond(sendTimes),
      sends_seen_by_sandbox: sendTimes.length,
      // Where the end-to-end time goes: until the first send, sending, and after the last send until stats were final.
      timeline_s: {
        first_send: Math.round((sorted[0] - t0) / 100) / 10,
        // Of which POST /send (materialising the recipients) until it answered.
        send_request: Math.round((answered - t0) / 100) / 10,
        sending: Math.round((sorted.at(-1)! - sorted[0]) / 100) / 10,
        after_last_send: Math.round((t0 + elapsedS * 1000 - sorted.at(-1)!) / 100) / 10,
      },
      sends_per_whole_second: { min: fullSeconds[0], median: fullSeconds[Math.floor(fullSeconds.length / 2)], max: fullSeconds.at(-1) },
      stats: final.stats,
      cpu_per_recipient: cpuPerRecipient(cpu0, cpu1, DISPATCH),
      target_recipients_per_s: 950,
    };
    console.log(`campaigns dispatch: ${dispatch.recipients_per_s} recipients/s end to end at 1,000/s (busiest second ${dispatch.busiest_second_sends} sends), CPU ms/recipient ${JSON.stringify(dispatch.cpu_per_recipient)}`);

    // 3. The same audience size over four numbers at 1,000/s each (BENCH_UNPACED=0 skips it).
    if (!UNPACED) return { materialise, dispatch, service_peak_rss_mb: peakRssMb(service.pid!), ...(full ? { full_1m: full } : {}) };
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
    };
    console.log(`campaigns dispatch_unpaced: ${dispatchUnpaced.recipients_per_s} recipients/s over 4 numbers, CPU ms/recipient ${JSON.stringify(dispatchUnpaced.cpu_per_recipient)}, ${dispatchUnpaced.statements_per_recipient} statements and ${dispatchUnpaced.rows_written_per_recipient} rows written per recipient`);

    return {
      configuration: 'service defaults (ROLE=all, batch_size 50, CAMPAIGN_POLL_MS 100, PACING_HORIZON_MS 1000, CAMPAIGN_MAX_BATCHES 64)',
      materialise,
      dispatch,
      dispatch_unpaced: dispatchUnpaced,
      service_peak_rss_mb: peakRssMb(service.pid!),
      ...(full ? { full_1m: full } : {}),
    };
  } finally {
    await database.close();
    await stopProcess(service);
    await stopProcess(sandbox);
    await fresh.drop();
  }
}

if (import.meta.url === `file://${process.argv[1]}`) {
  console.log(JSON.stringify(await run(), null, 2));
  process.exit(0);
}
