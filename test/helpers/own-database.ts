import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import pg from 'pg';
import { openDatabase } from '../../src/db/database.ts';
import { migrate } from '../../src/db/migrate.ts';

/**
 * A new, migrated database on the test server for one test file. A webhook deliverer serves every
 * tenant of its database, so a file that runs its own deliverer (with its own timings and its own
 * receiver's certificate) uses its own database: it neither takes nor leaves rows for the
 * deliverers of files running beside it. On the embedded default every test app has its own
 * PGlite database already: no URL (the test app's DATABASE_URL stays unset), nothing to drop.
 */
export async function createOwnDatabase(prefix: string): Promise<{ url: string | undefined; drop(): Promise<void> }> {
  if (!process.env.DATABASE_URL) return { url: undefined, async drop() {} };
  const adminUrl = process.env.DATABASE_URL!;
  const name = `${prefix}_${randomBytes(4).toString('hex')}`;
  const admin = new pg.Client({ connectionString: adminUrl });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  const database = await openDatabase({ databaseUrl: url.toString(), dataDir: tmpdir(), poolSize: 1 });
  try {
    await migrate(database);
  } finally {
    await database.close();
  }
  return {
    url: url.toString(),
    async drop() {
      await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await admin.end();
    },
  };
}
