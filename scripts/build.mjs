// Compiles src/ to dist/ (JavaScript and type declarations) with tsconfig.build.json, and bundles the
// server's entry into dist/server.js with esbuild.
// `--if-stale` (the prestart step) builds only when a source, migration or build setting is newer
// than the last build, so `npm start` never runs code older than src/ and costs a few stats otherwise.
// It builds the web console (console/, Vite) into dist/console, each file beside its gzip and brotli
// forms, which the service serves at /console.
// Beside the code it leaves dist/pglite-template, the embedded database initialised and migrated,
// which a first start copies instead of running initdb (most of a first start's time).
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const stamp = join(root, 'dist', '.build-stamp');

function newestInput() {
  let newest = 0;
  const visit = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) visit(path);
      else if (/\.(ts|tsx|mjs|sql|css|html)$/.test(entry.name)) newest = Math.max(newest, statSync(path).mtimeMs);
    }
  };
  visit(join(root, 'src'));
  visit(join(root, 'migrations'));
  visit(join(root, 'console'));
  for (const file of ['tsconfig.json', 'tsconfig.build.json', 'package.json']) newest = Math.max(newest, statSync(join(root, file)).mtimeMs);
  return newest;
}

if (process.argv.includes('--if-stale') && existsSync(stamp) && statSync(stamp).mtimeMs >= newestInput()) process.exit(0);

/**
 * @fastify/swagger-ui finds the explorer's files (page, scripts, logo) from its modules' __dirname,
 * which a bundle does not have: bundled, those modules take it from where the package is installed.
 */
const swaggerUiFilesFromItsPackage = {
  name: 'swagger-ui-files-from-its-package',
  setup(build) {
    build.onLoad({ filter: /[\\/]@fastify[\\/]swagger-ui[\\/].*\.js$/ }, (args) => {
      const source = readFileSync(args.path, 'utf8');
      if (!source.includes('__dirname')) return undefined;
      const packageDir = args.path.replace(/([\\/]@fastify[\\/]swagger-ui)[\\/].*$/, '$1');
      const within = JSON.stringify(relative(packageDir, dirname(args.path)));
      const dirnameAtRuntime = `require('node:path').join(require('node:path').dirname(require.resolve('@fastify/swagger-ui/package.json')), ${within})`;
      return { contents: `var __dirname = ${dirnameAtRuntime};\n${source}`, loader: 'js', resolveDir: dirname(args.path) };
    });
  },
};

let tsc;
try {
  tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  createRequire(import.meta.url).resolve('esbuild');
} catch {
  console.error('dist/ needs building but TypeScript or esbuild is not installed: run `npm install` (with dev dependencies).');
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
// tsc leaves plain JavaScript alone: the embedded database's thread (src/db/pglite-worker.mjs) is copied as it is.
cpSync(join(root, 'src', 'db', 'pglite-worker.mjs'), join(out, 'db', 'pglite-worker.mjs'));
// `npm start` runs one bundled file instead of some 2,000 modules: resolving, reading and compiling them
// one by one was over a second of every start. The compiled modules stay beside it (the package's
// exports, `npm run migrate`, `npm run sandbox`). Kept out of the bundle: PGlite (it reads its
// WebAssembly and data files beside its own modules) and the drivers of the real servers (loaded
// only when DATABASE_URL or REDIS_URL is set).
try {
  const { build } = await import('esbuild');
  await build({
    entryPoints: [join(root, 'src', 'server.ts')],
    outfile: join(out, 'server.js'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    external: ['@electric-sql/pglite', 'pg', 'ioredis'],
    plugins: [swaggerUiFilesFromItsPackage],
    // CommonJS dependencies call require() for Node's own modules, which an ES module has not.
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    // Names as written (a bundle renames clashing ones), for logged error types and stack traces.
    keepNames: true,
    logLevel: 'warning',
  });
} catch (err) {
  rmSync(out, { recursive: true, force: true });
  console.error(`build failed: bundling src/server.ts: ${err.message}; dist/ is left as it was`);
  process.exit(1);
}
// The console: Vite bundles it (hashed file names under assets/, cached for good by the service),
// then each file is compressed once here so no request pays for it.
try {
  const { build } = await import('vite');
  await build({ configFile: join(root, 'console', 'vite.config.ts'), build: { outDir: join(out, 'console') } });
  const { brotliCompressSync, gzipSync, constants } = await import('node:zlib');
  const compress = (dir) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      if (entry.isDirectory()) { compress(path); continue; }
      if (!/\.(js|css|html|svg|json|txt)$/.test(entry.name)) continue;
      const body = readFileSync(path);
      writeFileSync(`${path}.gz`, gzipSync(body, { level: 9 }));
      writeFileSync(`${path}.br`, brotliCompressSync(body, { params: { [constants.BROTLI_PARAM_QUALITY]: 11, [constants.BROTLI_PARAM_SIZE_HINT]: body.length } }));
    }
  };
  compress(join(out, 'console'));
} catch (err) {
  rmSync(out, { recursive: true, force: true });
  console.error(`build failed: the console (console/, Vite): ${err.message}; dist/ is left as it was`);
  process.exit(1);
}
// The embedded database a first start copies instead of running initdb and the migrations.
const scratch = join(out, '.pglite-build');
const { openDatabase } = await import(pathToFileURL(join(out, 'db', 'database.js')).href);
const { migrate } = await import(pathToFileURL(join(out, 'db', 'migrate.js')).href);
const database = await openDatabase({ dataDir: scratch });
await migrate(database);
// Only the service's database is kept: PGlite opens `postgres`, and nothing makes a database from
// template0 or template1. Without them a first start copies 495 files (25 MB) instead of 1,091
// (39 MB); making each file was most of the copy's time. (DROP DATABASE runs alone, outside a
// transaction, and a template database must stop being one first.)
await database.withScriptConnection(async (conn) => {
  for (const name of ['template0', 'template1']) {
    await conn.exec(`ALTER DATABASE ${name} IS_TEMPLATE false`);
    await conn.exec(`DROP DATABASE ${name}`);
  }
});
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
