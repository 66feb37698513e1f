#!/usr/bin/env node
// `npm run mutate` runs every set of stryker.config.mjs one after the other, then prints the score of each module
// group; `npm run mutate -- http-auth messages` runs some sets, `npm run mutate -- http` every set of a group; other
// arguments pass to Stryker (`npm run mutate -- http --incremental`). Stryker runs at nice 10.
// `npm run mutate -- --summary` only prints the scores of the last reports.
import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { SETS } from '../stryker.config.mjs';

const args = process.argv.slice(2);
const names = args.filter((a) => !a.startsWith('-'));
const passThrough = args.filter((a) => a.startsWith('-') && a !== '--summary');
const chosen = names.length === 0 ? Object.keys(SETS) : names.flatMap((n) => (n in SETS ? [n] : Object.keys(SETS).filter((s) => SETS[s].group === n)));
if (names.some((n) => !(n in SETS) && !Object.values(SETS).some((s) => s.group === n))) {
  console.error(`sets: ${Object.keys(SETS).join(', ')}; groups: ${[...new Set(Object.values(SETS).map((s) => s.group))].join(', ')}`);
  process.exit(2);
}

let failed = false;
if (!args.includes('--summary')) {
  for (const name of chosen) {
    const started = Date.now();
    const result = spawnSync('nice', ['-n', '10', 'npx', 'stryker', 'run', 'stryker.config.mjs', ...passThrough], {
      stdio: 'inherit', env: { ...process.env, MUTATE_SET: name },
    });
    console.log(`[mutate] ${name}: exit ${result.status}, ${Math.round((Date.now() - started) / 1000)} s`);
    if (result.status !== 0) failed = true;
  }
}

// Score as Stryker counts it: killed + timed out over killed + timed out + survived + no coverage.
const DETECTED = new Set(['Killed', 'Timeout']);
const UNDETECTED = new Set(['Survived', 'NoCoverage']);
const tally = new Map();
const add = (key, file, status) => {
  const t = tally.get(key) ?? { detected: 0, undetected: 0, files: new Set() };
  if (DETECTED.has(status)) t.detected++;
  if (UNDETECTED.has(status)) t.undetected++;
  t.files.add(file);
  tally.set(key, t);
};
for (const name of Object.keys(SETS)) {
  const report = `reports/mutation/${name}/mutation.json`;
  if (!existsSync(report)) continue;
  for (const [file, { mutants }] of Object.entries(JSON.parse(readFileSync(report, 'utf8')).files)) {
    for (const m of mutants) { add(SETS[name].group, file, m.status); add(`${SETS[name].group} ${file}`, file, m.status); }
  }
}
const rows = [...tally.entries()].sort(([a], [b]) => a.localeCompare(b));
for (const [key, t] of rows) {
  const total = t.detected + t.undetected;
  console.log(`${(key.includes(' ') ? `  ${key.split(' ')[1]}` : `${key} (all)`).padEnd(50)} ${String(t.detected).padStart(4)}/${String(total).padEnd(4)} ${total ? ((100 * t.detected) / total).toFixed(1) : '-'}%`);
}
process.exit(failed ? 1 : 0);
