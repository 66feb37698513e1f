// The embedded database's own thread: it opens PGlite and runs the queries that src/db/pglite-thread.ts
// posts to it. Plain JavaScript, not TypeScript: a worker thread does not inherit tsx's or vitest's
// loaders, and this file must run as it is from src/ (tests, `npm run dev`) and from dist/.
import { cpSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parentPort, workerData } from 'node:worker_threads';

/** @type {{ dir: string; templateDir: string; sharedBuffers: string }} */
const { dir, templateDir, sharedBuffers } = workerData;

// PostgreSQL's WebAssembly (10 MB) compiles on V8's background threads while PGlite's modules load;
// PGlite would begin only once its own module has loaded. Undefined if the file is not where this
// PGlite keeps it: PGlite then loads it itself.
const wasmModule = (() => {
  try {
    return WebAssembly.compile(readFileSync(fileURLToPath(new URL('pglite.wasm', import.meta.resolve('@electric-sql/pglite')))));
  } catch {
    return Promise.resolve(undefined);
  }
})();
wasmModule.catch(() => {}); // awaited (and so reported) below

/** What crosses back to the main thread: structured clone keeps only an Error's message and stack,
 * and callers read PostgreSQL's fields (`code`, `constraint`, `detail`...). */
function serializeError(err) {
  if (!(err instanceof Error)) return { message: String(err) };
  return { ...err, name: err.name, message: err.message, stack: err.stack };
}

let client;
try {
  // A new embedded database starts as a copy of the template: initdb is most of a first start's time.
  if (!existsSync(join(dir, 'PG_VERSION')) && existsSync(join(templateDir, 'PG_VERSION'))) cpSync(templateDir, dir, { recursive: true });
  mkdirSync(dir, { recursive: true });
  const { PGlite, types } = await import('@electric-sql/pglite');
  const { pg_trgm } = await import('@electric-sql/pglite/contrib/pg_trgm');
  client = await PGlite.create(dir, {
    extensions: { pg_trgm },
    // int8 (count(*), bigint columns) as a number, as with the PostgreSQL server: our counts fit in one.
    parsers: { [types.INT8]: (value) => Number(value) },
    // PostgreSQL zeroes its shared buffers at every start, and PGlite's default 128 MB made that
    // memset a third of the embedded start's CPU; the files stay in the kernel's page cache anyway.
    startParams: [...PGlite.defaultStartParams, '-c', `shared_buffers=${sharedBuffers}`],
    pgliteWasmModule: await wasmModule,
  });
} catch (err) {
  parentPort.postMessage({ type: 'failed', error: serializeError(err) });
  process.exit(1);
}
parentPort.postMessage({ type: 'ready' });

parentPort.on('message', async (request) => {
  try {
    if (request.op === 'query') {
      const result = await client.query(request.sql, request.parameters);
      parentPort.postMessage({ id: request.id, rows: result.rows, affectedRows: result.affectedRows });
    } else if (request.op === 'exec') {
      await client.exec(request.sql);
      parentPort.postMessage({ id: request.id, rows: [] });
    } else if (request.op === 'close') {
      await client.close();
      parentPort.postMessage({ id: request.id, rows: [] });
      parentPort.close();
    } else {
      throw new Error(`unknown request ${JSON.stringify(request.op)}`);
    }
  } catch (err) {
    parentPort.postMessage({ id: request.id, error: serializeError(err) });
  }
});
