import { cpSync, existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { FastifyInstance, LightMyRequestResponse } from 'fastify';
import pino from 'pino';
import { describe, inject, it } from 'vitest';
import { buildApp } from '../../src/app.ts';
import { loadConfig, type Config } from '../../src/config.ts';
import { createDeps, type Deps } from '../../src/deps.ts';

export const hasPostgres = Boolean(process.env.DATABASE_URL);
export const hasRedis = Boolean(process.env.REDIS_URL);

/**
 * For tests of what only a PostgreSQL server does (a restart, pg_terminate_backend, several
 * processes on one database, pool limits): `describe`/`it` with DATABASE_URL set; without it (the
 * embedded default, PGlite in the test process) skipped, with the reason in the test's name.
 */
export const describeOnPostgresServer = (reason: string) => hasPostgres
  ? describe
  : (name: string, ...rest: unknown[]) => describe.skip(`${name} [skipped without DATABASE_URL: ${reason}]`, ...(rest as [() => void]));
export const itOnPostgresServer = (reason: string) => hasPostgres
  ? it
  : (name: string, ...rest: unknown[]) => it.skip(`${name} [skipped without DATABASE_URL: ${reason}]`, ...(rest as [() => void]));

/**
 * On the embedded default, gives `dataDir` the migrated PGlite database global-setup made (a copy)
 * unless it has one: each test app has its own database, without initdb or migrations.
 */
export function withEmbeddedDatabase(dataDir: string, config?: Config): string {
  const template = inject('pgliteTemplate');
  if (config?.databaseUrl) return dataDir;
  const target = join(dataDir, 'pglite');
  if (template && !existsSync(join(target, 'PG_VERSION'))) cpSync(template, target, { recursive: true });
  return dataDir;
}

export const API = '/api/v1/public';
export const ADMIN_TOKEN = 'adm_test_token';

/** A fresh directory under the system's temporary directory: whoever makes one removes it (removeTempDir). */
export function makeTempDir(prefix = 'msvc-test-'): string {
  return mkdtempSync(join(tmpdir(), prefix));
}

export function removeTempDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
}

/**
 * The environment every test app starts from: the real servers when DATABASE_URL/REDIS_URL are set,
 * else the embedded default (its own PGlite copy, counters in memory); quiet logs, no demo seed; `env`
 * overrides it. Without a DATA_DIR in `env` it makes a fresh one, which the caller removes (the
 * test apps below do so on close).
 */
export function testEnv(env: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  return {
    DATA_DIR: env.DATA_DIR ?? makeTempDir(),
    ADMIN_TOKEN,
    SEED_DEMO: 'false',
    LOG_LEVEL: 'silent',
    PORT: '0',
    OPENAPI_ENABLED: 'false',
    DATABASE_URL: process.env.DATABASE_URL,
    REDIS_URL: process.env.REDIS_URL,
    // Test files share one database and a deliverer claims every tenant's deliveries, so only the
    // webhook delivery tests (which run their own receiver and timings) turn delivery on.
    WEBHOOK_DELIVERY_ENABLED: 'false',
    // Making the development CA loads an X.509 library (about 1.4 s of CPU) for every fresh DATA_DIR;
    // only the tests of `msvc listen` need it.
    WEBHOOK_DEV_CA: 'false',
    ...env,
  };
}

export interface TestApp {
  app: FastifyInstance;
  deps: Deps;
  config: Config;
  close(): Promise<void>;
}

/**
 * Builds the real app against the real PostgreSQL (and Redis when REDIS_URL is set), or on the
 * embedded default without them. `env`
 * overrides configuration the way the environment would.
 */
export async function startTestApp(env: Record<string, string | undefined> = {}, options: {
  /** Extra routes registered before ready() (e.g. one that throws, to see the 500 envelope). */
  routes?: (app: FastifyInstance) => void;
  /** Receives the app's log lines (JSON) at `logLevel` (default error). */
  logStream?: { write(line: string): void };
  logLevel?: string;
} = {}): Promise<TestApp> {
  const config = loadConfig(testEnv(env));
  // Our own data directory goes when the app does (one passed in belongs to the test).
  const removeDataDir = () => { if (env.DATA_DIR === undefined) removeTempDir(config.dataDir); };
  withEmbeddedDatabase(config.dataDir, config);
  const logger = options.logStream
    ? pino({ level: options.logLevel ?? 'error' }, options.logStream)
    : pino({ level: process.env.TEST_LOG_LEVEL ?? 'silent' });
  let deps: Deps | undefined;
  try {
    deps = await createDeps(config, logger);
    const app = await buildApp(deps);
    options.routes?.(app);
    await app.ready();
    const started = deps;
    return {
      app, deps, config,
      async close() {
        try {
          await app.close();
          await started.close();
        } finally {
          removeDataDir();
        }
      },
    };
  } catch (err) {
    await deps?.close().catch(() => {});
    removeDataDir();
    throw err;
  }
}

export const adminHeaders = { authorization: `Bearer ${ADMIN_TOKEN}` };

export interface TestTenant {
  id: string;
  key: string;
  keyId: string;
  headers: Record<string, string>;
}

/** A fresh tenant with one API key (full access unless scopes or preset say otherwise). */
export async function createTenant(app: FastifyInstance, options: {
  plan?: string; scopes?: string[]; preset?: string; api_requests_daily?: number; key?: Record<string, unknown>;
} = {}): Promise<TestTenant> {
  const tenant = await app.inject({ method: 'POST', url: '/admin/v1/tenants', headers: adminHeaders, payload: { name: 'Test tenant', plan: options.plan ?? 'business' } });
  if (tenant.statusCode !== 201) throw new Error(`tenant create failed: ${tenant.body}`);
  const id = tenant.json().id as string;
  if (options.api_requests_daily !== undefined) {
    await app.inject({ method: 'PATCH', url: `/admin/v1/tenants/${id}`, headers: adminHeaders, payload: { api_requests_daily: options.api_requests_daily } });
  }
  const key = await app.inject({
    method: 'POST', url: `/admin/v1/tenants/${id}/api-keys`, headers: adminHeaders,
    payload: { name: 'test key', ...(options.scopes ? { scopes: options.scopes } : {}), ...(options.preset ? { preset: options.preset } : {}), ...options.key },
  });
  if (key.statusCode !== 201) throw new Error(`key create failed: ${key.body}`);
  return { id, key: key.json().key, keyId: key.json().id, headers: { authorization: `Bearer ${key.json().key}` } };
}

/** Shorthand for an authenticated public-API call. */
export function call(app: FastifyInstance, tenant: TestTenant, method: string, path: string, payload?: unknown, headers: Record<string, string> = {}): Promise<LightMyRequestResponse> {
  return app.inject({ method: method as 'GET', url: `${API}${path}`, headers: { ...tenant.headers, ...headers }, ...(payload !== undefined ? { payload: payload as object } : {}) });
}

let phoneCounter = Math.floor(Math.random() * 1_000_000);
/** A valid, unique US phone number in E.164 (555-01xx numbers are not valid, so use a real area code). */
export function uniquePhone(): string {
  phoneCounter = (phoneCounter + 1) % 10_000_000;
  return `+1415${String(2000000 + (phoneCounter % 7_999_999)).padStart(7, '0')}`;
}

/** Polls until `check` returns a truthy value (for worker outcomes); never a fixed sleep. */
export async function eventually<T>(check: () => Promise<T | undefined | null | false>, timeoutMs = 10_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, everyMs));
  }
}
