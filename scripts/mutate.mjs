#!/usr/bin/env node
// `npm run mutate` runs every group of stryker.config.mjs one after the other; `npm run mutate -- http webhooks`
// runs some; other arguments pass to Stryker (`npm run mutate -- http --incremental`). Runs at nice 10.
import { spawnSync } from 'node:child_process';
import { GROUPS } from '../stryker.config.mjs';

const args = process.argv.slice(2);
const names = args.filter((a) => !a.startsWith('-'));
const passThrough = args.filter((a) => a.startsWith('-'));
const unknown = names.filter((n) => !(n in GROUPS));
if (unknown.length) {
  console.error(`unknown group ${unknown.join(', ')}; groups: ${Object.keys(GROUPS).join(', ')}`);
  process.exit(2);
}
let failed = false;
for (const name of names.length ? names : Object.keys(GROUPS)) {
  const started = Date.now();
  const result = spawnSync('nice', ['-n', '10', 'npx', 'stryker', 'run', 'stryker.config.mjs', ...passThrough], {
    stdio: 'inherit', env: { ...process.env, MUTATE_GROUP: name },
  });
  console.log(`[mutate] ${name}: exit ${result.status}, ${Math.round((Date.now() - started) / 1000)} s`);
  if (result.status !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
