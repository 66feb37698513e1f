/**
 * `npm run lint:openapi`: builds the two API descriptions (/openapi.json and /admin/v1/openapi.json)
 * without a running server or database (scripts/openapi-documents.ts), and lints them with
 * Redocly's recommended rules (redocly.yaml). `--out DIR` keeps the documents in DIR.
 */
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { buildOpenApiDocuments } from './openapi-documents.ts';

interface LintReport {
  totals: { errors: number; warnings: number };
  problems: { ruleId: string; severity: string; message: string; location: { pointer?: string }[] }[];
}

const outArg = process.argv.indexOf('--out');
const work = mkdtempSync(join(tmpdir(), 'msvc-openapi-'));
const out = outArg > 0 ? resolve(process.argv[outArg + 1]) : work;

/** Problems that are the design, not defects: the click redirect answers 302 or 404, never 2xx. */
const ACCEPTED = [{ ruleId: 'operation-2xx-response', pointer: '#/paths/~1r~1{token}/get/responses' }];
const accepted = (p: LintReport['problems'][number]) => ACCEPTED.some((a) => a.ruleId === p.ruleId && p.location[0]?.pointer === a.pointer);

let status = 1;
try {
  const documents = await buildOpenApiDocuments();
  mkdirSync(out, { recursive: true });
  writeFileSync(join(out, 'public.json'), JSON.stringify(documents.public, null, 2));
  writeFileSync(join(out, 'admin.json'), JSON.stringify(documents.admin, null, 2));
  // Redocly exits 0 on warnings; the bar here is zero of both, so its JSON report is read instead.
  let errors = 0;
  let warnings = 0;
  for (const file of ['public.json', 'admin.json']) {
    const lint = spawnSync(join('node_modules', '.bin', 'redocly'), ['lint', join(out, file), '--format=json', '--max-problems=1000'], {
      encoding: 'utf8', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' },
    });
    const report = JSON.parse(lint.stdout.slice(lint.stdout.indexOf('{'))) as LintReport;
    for (const problem of report.problems) {
      if (accepted(problem)) continue;
      console.log(`${file} ${problem.location[0]?.pointer ?? ''}: ${problem.severity} ${problem.ruleId}: ${problem.message}`);
      if (problem.severity === 'error') errors++;
      else warnings++;
    }
  }
  console.log(`OpenAPI lint (Redocly recommended): ${errors} errors, ${warnings} warnings${outArg > 0 ? ` (documents in ${out})` : ''}`);
  status = errors + warnings === 0 ? 0 : 1;
} finally {
  rmSync(work, { recursive: true, force: true });
}
process.exit(status);
