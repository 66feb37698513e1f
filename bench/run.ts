import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

// npm run bench -- <api|messages|webhooks|campaigns>[ ...]: each writes bench/results/<name>.json.
const names = process.argv.slice(2).filter((a) => !a.startsWith('-'));
const all = ['api', 'messages', 'webhooks', 'campaigns'];
const selected = names.length === 0 || names.includes('all') ? all : names;
const resultsDir = join(dirname(fileURLToPath(import.meta.url)), 'results');
mkdirSync(resultsDir, { recursive: true });

for (const name of selected) {
  if (!all.includes(name)) throw new Error(`unknown benchmark "${name}"; choose from ${all.join(', ')}`);
  const { run, partial } = (await import(`./${name}.ts`)) as { run: () => Promise<Record<string, unknown>>; partial?: () => boolean };
  const file = join(resultsDir, `${name}.json`);
  const measured = await run();
  // A run of some phases only replaces their keys; the rest (and the top-level `at`) stay the last full run's.
  const result = partial?.() && existsSync(file)
    ? { ...JSON.parse(readFileSync(file, 'utf8')), ...measured }
    : { benchmark: name, at: new Date().toISOString(), ...measured };
  writeFileSync(file, JSON.stringify(result, null, 2) + '\n');
  console.log(`wrote bench/results/${name}.json`);
}
process.exit(0);
