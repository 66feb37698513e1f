import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { openDatabase } from '../../src/db/database.ts';
import { migrate } from '../../src/db/migrate.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    /** A migrated PGlite data directory each test app copies on the embedded default (no DATABASE_URL). */
    pgliteTemplate: string | null;
  }
}

/**
 * With DATABASE_URL: migrates the real database once before any test file runs, with the same CLI
 * operators use. Without it (the embedded default): makes one migrated PGlite data directory that
 * every test app starts from as a copy (test/helpers/app.ts), so test files need neither initdb nor
 * the migrations of their own.
 */
export default async function setup(project: TestProject) {
  if (!process.env.REDIS_URL) console.warn('\n[tests] REDIS_URL is not set: rate-limit counters are in memory; tests of a Redis server\'s own behaviour are skipped.');
  if (process.env.DATABASE_URL) {
    project.provide('pgliteTemplate', null);
    execFileSync(process.execPath, ['--import', 'tsx', 'src/db/migrate-cli.ts'], { stdio: 'inherit', env: process.env });
    return;
  }
  console.warn('[tests] DATABASE_URL is not set: test apps run on the embedded default (PGlite, one database each); tests of a PostgreSQL server\'s own behaviour are skipped.\n');
  const scratch = mkdtempSync(join(tmpdir(), 'msvc-pglite-template-'));
  const dir = join(scratch, 'pglite');
  // The build's template (initialised and migrated) saves initdb when it is newer than every migration;
  // migrate() below then only checks it (or applies one added since).
  const built = join('dist', 'pglite-template');
  const stamp = join('dist', '.build-stamp');
  const newestMigration = Math.max(...readdirSync('migrations').map((f) => statSync(join('migrations', f)).mtimeMs));
  if (existsSync(join(built, 'PG_VERSION')) && existsSync(stamp) && statSync(stamp).mtimeMs >= newestMigration) cpSync(built, dir, { recursive: true });
  const database = await openDatabase({ dataDir: scratch });
  try {
    await migrate(database);
  } finally {
    await database.close();
  }
  project.provide('pgliteTemplate', dir);
  return () => rmSync(scratch, { recursive: true, force: true });
}
