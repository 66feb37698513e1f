/**
 * Builds the two API descriptions (/openapi.json and /admin/v1/openapi.json) without a running
 * server or database: the app is built against a PostgreSQL pool that is never connected (building
 * the routes runs no query) and no Redis. Used by `npm run lint:openapi` and `npm run sdk:types`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pino from 'pino';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createDeps } from '../src/deps.ts';

export interface OpenApiDocuments {
  public: unknown;
  admin: unknown;
}

export async function buildOpenApiDocuments(): Promise<OpenApiDocuments> {
  const work = mkdtempSync(join(tmpdir(), 'msvc-openapi-'));
  const adminToken = 'adm_openapi_build';
  try {
    const config = loadConfig({
      DATA_DIR: work, DATABASE_URL: 'postgres://openapi@127.0.0.1:1/never_connected', ADMIN_TOKEN: adminToken,
      SECRETS_KEY: '0'.repeat(64), UPSTREAM_APP_SECRET: 'openapi', UPSTREAM_VERIFY_TOKEN: 'openapi',
      OPENAPI_ENABLED: 'true', SEED_DEMO: 'false', LOG_LEVEL: 'silent',
    });
    const deps = await createDeps(config, pino({ level: 'silent' }));
    const app = await buildApp(deps);
    try {
      await app.ready();
      const fetchDocument = async (url: string, headers: Record<string, string>) => {
        const response = await app.inject({ method: 'GET', url, headers });
        if (response.statusCode !== 200) throw new Error(`GET ${url} answered ${response.statusCode}: ${response.body}`);
        return response.json() as unknown;
      };
      return {
        public: await fetchDocument('/openapi.json', {}),
        admin: await fetchDocument('/admin/v1/openapi.json', { authorization: `Bearer ${adminToken}` }),
      };
    } finally {
      await app.close();
      await deps.close();
    }
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}
