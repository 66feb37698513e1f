// Compiles src/ to dist/ (JavaScript and type declarations) with tsconfig.build.json.
// `--if-stale` (the prestart step) builds only when a source, migration or build setting is newer
// than the last build, so `npm start` never runs code older than src/ and costs a few stats otherwise.
// Beside the code it leaves dist/pglite-template, the embedded database initialised and migrated,
// which a first start copies instead of running initdb (most of a first start's time).
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const stamp = join(root, 'dist', '.build-stamp');

function newestInput() {
  let newest = 0;
  const visit = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) visit(path);
      else if (/\.(ts|sql)$/.test(entry.name)) newest = Math.max(newest, statSync(path).mtimeMs);
    }
  };
  visit(join(root, 'src'));
  visit(join(root, 'migrations'));
  for (const file of ['tsconfig.json', 'tsconfig.build.json', 'package.json']) newest = Math.max(newest, statSync(join(root, file)).mtimeMs);
  return newest;
}

if (process.argv.includes('--if-stale') && existsSync(stamp) && statSync(stamp).mtimeMs >= newestInput()) process.exit(0);

let tsc;
try {
  tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
} catch {
  console.error('dist/ needs building but TypeScript is not installed: run `npm install` (with dev dependencies).');
  process.exit(1);
}
const started = Date.now();
// Built beside dist/ and swapped in at the end, so a server running from dist/ (or starting) never
// sees it half written, and a failed build leaves the previous one in place.
const out = join(root, `.dist-${process.pid}`);
rmSync(out, { recursive: true, force: true });
const result = spawnSync(process.execPath, [tsc, '-p', join(root, 'tsconfig.build.json'), '--outDir', out], { cwd: root, stdio: 'inherit' });
if (result.status !== 0) {
  rmSync(out, { recursive: true, force: true });
  console.error('build failed (see the TypeScript errors above); dist/ is left as it was');
  process.exit(result.status ?? 1);
}
// The embedded database a first start copies instead of running initdb and the migrations.
const scratch = join(out, '.pglite-build');
const { openDatabase } = await import(pathToFileURL(join(out, 'db', 'database.js')).href);
const { migrate } = await import(pathToFileURL(join(out, 'db', 'migrate.js')).href);
const database = await openDatabase({ dataDir: scratch });
await migrate(database);
await database.close();
renameSync(join(scratch, 'pglite'), join(out, 'pglite-template'));
rmSync(scratch, { recursive: true, force: true });

const previous = join(root, `.dist-old-${process.pid}`);
if (existsSync(join(root, 'dist'))) renameSync(join(root, 'dist'), previous);
renameSync(out, join(root, 'dist'));
rmSync(previous, { recursive: true, force: true });
writeFileSync(stamp, `${new Date(started).toISOString()}\n`);
// Dated when the build began: a source saved while tsc ran is newer, so the next start rebuilds.
utimesSync(stamp, started / 1000, started / 1000);
console.error(`built dist/ in ${((Date.now() - started) / 1000).toFixed(1)} s`);
