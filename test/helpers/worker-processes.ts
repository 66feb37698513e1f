import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createSandbox, type Sandbox } from '../../src/sandbox/sandbox.ts';
import { hasRedis, uniquePhone } from './app.ts';
import { createOwnDatabase } from './own-database.ts';
import { freePort, startServer, stopServer, waitForHttp, type ServerProcess } from './process.ts';
import { APP_SECRET, sandboxControl, uniqueTemplateName } from './upstream.ts';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Json = any;
const ADMIN = 'adm_workers_token';

/** A sandbox send as its log shows it. */
export interface LoggedSend { to: string; at: string }

/**
 * One API process and any number of `ROLE=worker` processes on a database of their own (the
 * workers serve every running campaign of it), with an in-process sandbox: for tests that kill,
 * stop or multiply worker processes.
 */
export interface WorkerProcesses {
  sandbox: Sandbox;
  startWorker(): ServerProcess;
  /** A tenant with a connected number at `rate`, an approved template and a running campaign of `recipients`. */
  startCampaign(recipients: number, rate: number, batchSize?: number): Promise<{ id: string; phones: string[] }>;
  /** Waits for COMPLETED with nothing pending; returns the campaign. */
  completed(campaignId: string, timeoutMs: number): Promise<Json>;
  sends(): Promise<LoggedSend[]>;
  query<T>(text: string, values?: unknown[]): Promise<T[]>;
  close(): Promise<void>;
}

export async function startWorkerProcesses(prefix: string, env: Record<string, string>): Promise<WorkerProcesses> {
  const dataDir = mkdtempSync(join(tmpdir(), `${prefix}-`));
  const processes: ServerProcess[] = [];
  const db = await createOwnDatabase(prefix);
  const apiPort = await freePort();
  const base = `http://127.0.0.1:${apiPort}`;
  const sandbox = await createSandbox({ port: 0, appSecret: APP_SECRET, reviewMs: 50, statusFlushMs: 5, callbackUrl: `${base}/upstream/webhook` });
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  const fullEnv = {
    DATA_DIR: dataDir, DATABASE_URL: db.url!, ...(hasRedis ? { REDIS_URL: process.env.REDIS_URL! } : {}), ADMIN_TOKEN: ADMIN, SECRETS_KEY: 'c'.repeat(64),
    SEED_DEMO: 'false', LOG_LEVEL: 'error', UPSTREAM_BASE_URL: sandbox.baseUrl, UPSTREAM_APP_SECRET: APP_SECRET, UPSTREAM_VERIFY_TOKEN: 'verify',
    CAMPAIGN_DISPATCH_ENABLED: 'true', CAMPAIGN_POLL_MS: '20', WORKER_POLL_MS: '50', ...env,
  };
  const api = startServer({ ...fullEnv, ROLE: 'api', PORT: String(apiPort), HOST: '127.0.0.1' });
  processes.push(api);
  await waitForHttp(`${base}/healthz`, api, 60_000);

  const call = async (path: string, body: unknown, headers: Record<string, string>, method = 'POST') => {
    const res = await fetch(`${base}${path}`, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const json = await res.json() as Json;
    if (res.status >= 300) throw new Error(`${method} ${path}: ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  let auth: Record<string, string> = {};
  return {
    sandbox,
    startWorker() {
      const worker = startServer({ ...fullEnv, ROLE: 'worker', PORT: '0' });
      processes.push(worker);
      return worker;
    },
    async startCampaign(recipients, rate, batchSize = 10) {
      const admin = { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' };
      const tenant = await call('/admin/v1/tenants', { name: prefix, plan: 'business' }, admin);
      const key = await call(`/admin/v1/tenants/${tenant.id}/api-keys`, { name: 'k' }, admin);
      auth = { authorization: `Bearer ${key.key}`, 'content-type': 'application/json' };
      await call(`/admin/v1/tenants/${tenant.id}/business-account`, { waba_id: '1099', phone_number_id: `2099${apiPort}`, access_token: 't', messages_per_second: rate }, admin, 'PUT');
      const template = await call('/api/v1/public/templates', { template_name: uniqueTemplateName(prefix.replace(/\W/g, '_')), language: 'en', category: 'UTILITY',
        components: [{ type: 'BODY', text: 'Hello {{1}}, see you soon.', example: { body_text: [['Ada']] } }] }, auth);
      await call(`/api/v1/public/templates/${template.id}/submit`, {}, auth);
      for (let i = 0; (await fetch(`${base}/api/v1/public/templates/${template.id}`, { headers: auth })).status !== 200; i++) {
        if (i > 200) throw new Error('template never approved');
        await new Promise((r) => setTimeout(r, 50));
      }
      const phones = Array.from({ length: recipients }, () => uniquePhone());
      for (let i = 0; i < recipients; i += 100) {
        await call('/api/v1/public/contacts/bulk', { contacts: phones.slice(i, i + 100).map((phone, j) => ({ first_name: `K${i + j}`, phone, tags: ['drill'] })) }, auth);
      }
      const campaign = await call('/api/v1/public/campaigns', { name: 'Drill', template_id: template.id, batch_size: batchSize, audience: { groups: ['drill'] },
        variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }] }] } }, auth);
      await call(`/api/v1/public/campaigns/${campaign.id}/send`, {}, auth);
      return { id: campaign.id, phones };
    },
    async completed(campaignId, timeoutMs) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const campaign = await (await fetch(`${base}/api/v1/public/campaigns/${campaignId}`, { headers: auth })).json() as Json;
        if (campaign.status === 'COMPLETED' && campaign.stats.pending === 0) return campaign;
        if (Date.now() > deadline) throw new Error(`campaign not completed: ${JSON.stringify(campaign)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
    async sends() {
      return (await sandboxControl(sandbox, 'GET', '/__sandbox/sends')).json.data as LoggedSend[];
    },
    async query<T>(text: string, values: unknown[] = []) {
      return (await client.query(text, values)).rows as T[];
    },
    async close() {
      for (const p of processes) await stopServer(p);
      await sandbox.close();
      await client.end();
      await db.drop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}

/** How many times each phone was sent to (the sandbox logs numbers without their +). */
export function sendsPerPhone(sends: LoggedSend[]): Map<string, number> {
  const perPhone = new Map<string, number>();
  for (const s of sends) perPhone.set(s.to.replace(/^\+/, ''), (perPhone.get(s.to.replace(/^\+/, '')) ?? 0) + 1);
  return perPhone;
}

/** The most sends that fall in any one-second window (sliding), and where that window starts. */
export function busiestSecond(times: number[]): { sends: number; at: number } {
  const sorted = [...times].sort((a, b) => a - b);
  let best = { sends: 0, at: sorted[0] ?? 0 };
  for (let i = 0, j = 0; i < sorted.length; i++) {
    while (sorted[i] - sorted[j] >= 1000) j++;
    if (i - j + 1 > best.sends) best = { sends: i - j + 1, at: sorted[j] };
  }
  return best;
}
