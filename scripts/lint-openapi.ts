/**
 * `npm run lint:openapi`: builds the two API descriptions (/openapi.json and /admin/v1/openapi.json)
 * without a running server or database, and lints them with Redocly's recommended rules
 * (redocly.yaml). The app is built against a PostgreSQL pool that is never connected (building the
 * routes runs no query) and no Redis. `--out DIR` keeps the documents in DIR.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import pino from 'pino';
import { buildApp } from '../src/app.ts';
import { loadConfig } from '../src/config.ts';
import { createDeps } from '../src/deps.ts';

interface LintReport {
  totals: { errors: number; warnings: number };
  problems: { ruleId: string; severity: string; message: string; location: { pointer?: string }[] }[];
}

const outArg = process.argv.indexOf('--out');
const work = mkdtempSync(join(tmpdir(), 'msvc-openapi-'));
const out = outArg > 0 ? resolve(process.argv[outArg + 1]) : work;
const adminToken = 'adm_openapi_lint';

let status = 1;
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
    mkdirSync(out, { recursive: true });
    for (const [file, url, headers] of [
      ['public.json', '/openapi.json', {}],
      ['admin.json', '/admin/v1/openapi.json', { authorization: `Bearer ${adminToken}` }],
    ] as const) {
      const response = await app.inject({ method: 'GET', url, headers });
      if (response.statusCode !== 200) throw new Error(`GET ${url} answered ${response.statusCode}: ${response.body}`);
      writeFileSync(join(out, file), JSON.stringify(response.json(), null, 2));
    }
  } finally {
    await app.close();
    await deps.close();
  }
  // Redocly exits 0 on warnings; the bar here is zero of both, so its JSON report is read instead.
  let errors = 0;
  let warnings = 0;
  for (const file of ['public.json', 'admin.json']) {
    const lint = spawnSync(join('node_modules', '.bin', 'redocly'), ['lint', join(out, file), '--format=json', '--max-problems=1000'], {
      encoding: 'utf8', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
    });
    const report = JSON.parse(lint.stdout.slice(lint.stdout.indexOf('{'))) as LintReport;
    for (const problem of report.problems) {
      console.log(`${file} ${problem.location[0]?.pointer ?? ''}: ${problem.severity} ${problem.ruleId}: ${problem.message}`);
    }
    errors += report.totals.errors;
    warnings += report.totals.warnings;
  }
  console.log(`OpenAPI lint (Redocly recommended): ${errors} errors, ${warnings} warnings${outArg > 0 ? ` (documents in ${out})` : ''}`);
  status = errors + warnings === 0 ? 0 : 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
process.exit(status);
