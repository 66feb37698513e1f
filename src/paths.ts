import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

// Files that ship beside the code, found from this module. It sits at the top of src/, and so at the
// top of dist/ once compiled, which is also where the bundled entry (dist/server.js, one file that
// holds this module too) lives: the same relative paths hold for tsx, the compiled modules and the bundle.

/** The numbered plain-SQL migrations. */
export const MIGRATIONS_DIR = fileURLToPath(new URL('../migrations', import.meta.url));

/**
 * The embedded database initialised and migrated by `npm run build` (dist/pglite-template), which a
 * first start copies instead of running initdb. Running from the sources (tsx) there is none.
 */
export const PGLITE_TEMPLATE_DIR = fileURLToPath(new URL('./pglite-template', import.meta.url));

/**
 * The web console built by `npm run build` (Vite, from console/). Running from the sources (tsx) it
 * is the one in dist/, when there is one.
 */
export const CONSOLE_DIR = [new URL('./console', import.meta.url), new URL('../dist/console', import.meta.url)]
  .map((url) => fileURLToPath(url)).find((dir) => existsSync(join(dir, 'index.html'))) ?? fileURLToPath(new URL('./console', import.meta.url));

/** The embedded database's thread (plain JavaScript, so the same file runs from src/ and dist/). */
export const PGLITE_WORKER_FILE = new URL('./db/pglite-worker.mjs', import.meta.url);
