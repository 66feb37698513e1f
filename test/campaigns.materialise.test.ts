import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ANALYZE_AFTER_ROWS } from '../src/modules/campaigns/campaigns.repository.ts';
import { call } from './helpers/app.ts';
import { CAMPAIGN_ENV, uniqueTag } from './helpers/campaigns.ts';
import { createApprovedTemplate, createConnectedTenant, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

// A large audience is materialised with the planner's statistics refreshed in the same transaction:
// with the row count of an earlier VACUUM (none), every batch of a million-row campaign's statuses
// walked the whole primary key, and autovacuum may be off (it is on this project's CI machine).
describe('campaigns: materialising a large audience', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  const lastAnalyze = async () => (await sql<{ at: Date | null }>`
    SELECT last_analyze AS at FROM pg_stat_user_tables WHERE relname = 'campaign_recipients'`.execute(t.deps.db)).rows[0]?.at?.getTime() ?? 0;

  const campaignOf = async (size: number) => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await sql`
      INSERT INTO contacts (id, tenant_id, first_name, phone, tags)
      SELECT gen_random_uuid(), ${tenant.id}::uuid, 'Name' || g, '+1555' || lpad(g::text, 7, '0'), ARRAY[${tag}]::text[]
      FROM generate_series(1, ${size}::int) g`.execute(t.deps.db);
    const created = await call(t.app, tenant, 'POST', '/campaigns', {
      name: 'Big', template_id: template.id, audience: { groups: [tag] },
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X' }] }] },
    });
    expect(created.statusCode, created.body).toBe(201);
    return { tenant, id: created.json().id as string };
  };

  it(`analyses campaign_recipients when a send materialises ${ANALYZE_AFTER_ROWS} recipients or more, and not for a small audience`, async () => {
    const small = await campaignOf(20);
    const before = await lastAnalyze();
    const sentSmall = await call(t.app, small.tenant, 'POST', `/campaigns/${small.id}/send`);
    expect(sentSmall.json().total_recipients).toBe(20);
    expect(await lastAnalyze()).toBe(before);

    const big = await campaignOf(ANALYZE_AFTER_ROWS);
    const sent = await call(t.app, big.tenant, 'POST', `/campaigns/${big.id}/send`);
    expect(sent.statusCode, sent.body).toBe(200);
    expect(sent.json()).toMatchObject({ status: 'RUNNING', total_recipients: ANALYZE_AFTER_ROWS, stats: { pending: ANALYZE_AFTER_ROWS } });
    expect(await lastAnalyze()).toBeGreaterThan(before);
    const { rows } = await sql<{ reltuples: number }>`SELECT reltuples FROM pg_class WHERE relname = 'campaign_recipients'`.execute(t.deps.db);
    expect(Number(rows[0].reltuples)).toBeGreaterThanOrEqual(ANALYZE_AFTER_ROWS);
    for (const c of [small, big]) expect((await call(t.app, c.tenant, 'POST', `/campaigns/${c.id}/stop`)).statusCode).toBe(200);
  });
});
