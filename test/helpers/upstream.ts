import { randomBytes } from 'node:crypto';
import type { AddressInfo } from 'node:net';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { request } from 'undici';
import { buildApp } from '../../src/app.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { createDeps, type Deps } from '../../src/deps.ts';
import { signUpstreamBody } from '../../src/modules/callbacks/callbacks.signature.ts';
import { createSandbox, type Sandbox } from '../../src/sandbox/sandbox.ts';
import { adminHeaders, call, createTenant, eventually, removeTempDir, testEnv, withEmbeddedDatabase, type TestTenant } from './app.ts';
import { withExamples } from './template-examples.ts';

export const APP_SECRET = 'test_app_secret';
export const VERIFY_TOKEN = 'test_verify_token';

export interface UpstreamTestApp {
  app: FastifyInstance;
  deps: Deps;
  config: Config;
  sandbox: Sandbox | null;
  /** Where the app listens (the sandbox posts callbacks to `${url}/upstream/webhook`). */
  url: string;
  close(): Promise<void>;
}

/**
 * The real app listening on a free port, with its own real sandbox (unless UPSTREAM_BASE_URL is
 * given) whose callbacks come back to the app, signed with the app secret.
 */
export async function startUpstreamApp(env: Record<string, string | undefined> = {}, sandboxOptions: { reviewMs?: number } = {}): Promise<UpstreamTestApp> {
  const config = loadConfig(testEnv({ UPSTREAM_APP_SECRET: APP_SECRET, UPSTREAM_VERIFY_TOKEN: VERIFY_TOKEN, ...env }));
  // Our own data directory goes when the app does (one passed in belongs to the test).
  const removeDataDir = () => { if (env.DATA_DIR === undefined) removeTempDir(config.dataDir); };
  withEmbeddedDatabase(config.dataDir, config);
  let sandbox: Sandbox | null = null;
  let deps: Deps | undefined;
  try {
    sandbox = config.upstreamBaseUrl ? null : await createSandbox({ port: 0, appSecret: APP_SECRET, reviewMs: sandboxOptions.reviewMs ?? 50, statusFlushMs: 5 });
    deps = await createDeps(config, pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' }), { upstreamBaseUrl: sandbox?.baseUrl });
    const app = await buildApp(deps);
    await app.listen({ port: 0, host: '127.0.0.1' });
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;
    if (sandbox) sandbox.state.config.callback_url = `${url}/upstream/webhook`;
    const [started, ownSandbox] = [deps, sandbox];
    return {
      app, deps, config, sandbox, url,
      async close() {
        try {
          await ownSandbox?.close();
          await app.close();
          await started.close();
        } finally {
          removeDataDir();
        }
      },
    };
  } catch (err) {
    await sandbox?.close().catch(() => {});
    await deps?.close().catch(() => {});
    removeDataDir();
    throw err;
  }
}

export interface UpstreamTenant extends TestTenant {
  wabaId: string;
  phoneNumberId: string;
}

/** A tenant with an active business account on unique sandbox ids. */
export async function createConnectedTenant(app: FastifyInstance, options: Parameters<typeof createTenant>[1] = {}): Promise<UpstreamTenant> {
  const tenant = await createTenant(app, options);
  const wabaId = `1${Date.now()}${randomBytes(3).readUIntBE(0, 3)}`;
  const phoneNumberId = `2${Date.now()}${randomBytes(3).readUIntBE(0, 3)}`;
  const res = await app.inject({ method: 'PUT', url: `/admin/v1/tenants/${tenant.id}/business-account`, headers: adminHeaders,
    payload: { waba_id: wabaId, phone_number_id: phoneNumberId, access_token: 'sandbox-token' } });
  if (res.statusCode !== 200) throw new Error(`connect failed: ${res.body}`);
  return { ...tenant, wabaId, phoneNumberId };
}

let nameCounter = 0;
export function uniqueTemplateName(prefix = 'tpl'): string {
  return `${prefix}_${Date.now().toString(36)}_${randomBytes(3).toString('hex')}_${nameCounter++}`;
}

export const BODY_TWO_VARS = [{ type: 'BODY', text: 'Hello {{1}}, your order {{2}} has shipped.', example: { body_text: [['Ana', 'A-1001']] } }];

/** Creates, submits and waits for the sandbox's approval (SANDBOX review of ~50 ms, by callback). */
export interface ApprovedTemplate { id: string; template_name: string; language: string; status: string; components: unknown[] }

/** Components without the sample values the upstream requires get them (withExamples). */
export async function createApprovedTemplate(app: FastifyInstance, tenant: TestTenant, options: { name?: string; language?: string; category?: string; components?: unknown[] } = {}): Promise<ApprovedTemplate> {
  const created = await call(app, tenant, 'POST', '/templates', {
    template_name: options.name ?? uniqueTemplateName(), language: options.language ?? 'en', category: options.category ?? 'UTILITY',
    components: withExamples(options.components ?? BODY_TWO_VARS),
  });
  if (created.statusCode !== 201) throw new Error(`template create failed: ${created.body}`);
  const submitted = await call(app, tenant, 'POST', `/templates/${created.json().id}/submit`);
  if (submitted.statusCode !== 200) throw new Error(`template submit failed: ${submitted.body}`);
  // The approval arrives by the sandbox's callback: allow for a loaded machine (CI runs files in parallel).
  return eventually(async () => {
    const got = await call(app, tenant, 'GET', `/templates/${created.json().id}`);
    return got.statusCode === 200 ? (got.json() as ApprovedTemplate) : null;
  }, 20_000);
}

/** Calls the sandbox's control API. */
export async function sandboxControl(sandbox: Sandbox, method: 'GET' | 'POST' | 'PUT', path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const res = await request(`${sandbox.url}${path}`, {
    method, headers: { 'content-type': 'application/json' }, ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  const text = await res.body.text();
  return { status: res.statusCode, json: text ? JSON.parse(text) : null };
}

/** Posts a callback signed like the upstream does (or with the given signature). */
export function postCallback(app: FastifyInstance, payload: unknown, signature?: string | null) {
  const raw = typeof payload === 'string' ? payload : JSON.stringify(payload);
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (signature !== null) headers['x-hub-signature-256'] = signature ?? signUpstreamBody(APP_SECRET, raw);
  return app.inject({ method: 'POST', url: '/upstream/webhook', headers, payload: raw });
}

export function statusCallback(phoneNumberId: string, statuses: Record<string, unknown>[]) {
  return {
    object: 'whatsapp_business_account',
    entry: [{ id: 'waba', changes: [{ field: 'messages', value: { messaging_product: 'whatsapp', metadata: { display_phone_number: '15550000000', phone_number_id: phoneNumberId }, statuses } }] }],
  };
}

export async function eventsOf(deps: Deps, tenantId: string, type?: string) {
  let q = deps.db.selectFrom('events').selectAll().where('tenant_id', '=', tenantId);
  if (type) q = q.where('type', '=', type);
  return q.orderBy('created_at').execute();
}
