import { execFileSync } from 'node:child_process';

/** Migrates the real database once before any test file runs, with the same CLI operators use. */
export default function setup() {
  if (!process.env.DATABASE_URL) {
    console.warn('\n[tests] DATABASE_URL is not set: tests that need a real PostgreSQL server are skipped; the embedded-default smoke tests still run.\n');
  }
  if (!process.env.REDIS_URL) {
    console.warn('[tests] REDIS_URL is not set: tests that need a real Redis server are skipped.\n');
  }
  if (!process.env.DATABASE_URL) return;
  execFileSync(process.execPath, ['--import', 'tsx', 'src/db/migrate-cli.ts'], { stdio: 'inherit', env: process.env });
}
