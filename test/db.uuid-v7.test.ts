import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestApp, type TestApp } from './helpers/app.ts';

/** uuid_v7() (migration 0013): the ids campaign recipients and their messages are written with. */
describe('uuid_v7()', () => {
  let t: TestApp;
  beforeAll(async () => { t = await startTestApp(); });
  afterAll(async () => { await t.close(); });

  it('is a version 7 UUID whose first 48 bits are the Unix milliseconds, distinct and ordered by time', async () => {
    const before = Date.now();
    const { rows } = await sql<{ id: string; n: number }>`SELECT uuid_v7()::text AS id, g AS n FROM generate_series(1, 2000) g`.execute(t.deps.db);
    const after = Date.now();
    expect(new Set(rows.map((r) => r.id)).size).toBe(2000);
    for (const { id } of rows) {
      expect(id).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
      const ms = parseInt(id.replace(/-/g, '').slice(0, 12), 16);
      expect(ms).toBeGreaterThanOrEqual(before - 5);
      expect(ms).toBeLessThanOrEqual(after + 5);
    }
    // Later rows never carry an earlier millisecond: inserts land at the right edge of an id index.
    const millis = rows.sort((a, b) => a.n - b.n).map((r) => parseInt(r.id.slice(0, 8) + r.id.slice(9, 13), 16));
    for (let i = 1; i < millis.length; i++) expect(millis[i]).toBeGreaterThanOrEqual(millis[i - 1]);
  });
});
