import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { campaignQueue } from '../src/modules/campaigns/campaigns.queue.ts';
import { foldCounterMoves } from '../src/modules/campaigns/campaigns.repository.ts';
import { call, eventually, itOnPostgresServer } from './helpers/app.ts';
import { createApprovedTemplate, createConnectedTenant, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';
import { CAMPAIGN_ENV, createContacts, runCampaignWorkers, someContacts, uniqueTag } from './helpers/campaigns.ts';

// Campaign counters move by insert-only rows that are folded into the campaign later: status
// changes never wait on the campaign row, reads add what is not folded yet, and a recount racing
// the folds neither loses nor double-counts a move.
describe('campaigns: counter moves', () => {
  let t: UpstreamTestApp;
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => { await t?.close(); });

  const mapping = { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] }] };
  const startCampaign = async (n: number) => {
    const tenant = await createConnectedTenant(t.app);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(n, { tags: [tag] }));
    const created = await call(t.app, tenant, 'POST', '/campaigns', { name: 'C', template_id: template.id, audience: { groups: [tag] }, variable_mapping: mapping });
    expect(created.statusCode, created.body).toBe(201);
    const id = created.json().id as string;
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
    return { tenant, id };
  };
  const truth = async (id: string) => {
    const rows = await t.deps.db.selectFrom('campaign_recipients').select(['status', 'replied_at', 'clicked_at']).where('campaign_id', '=', id).execute();
    const count = (...statuses: string[]) => rows.filter((r) => statuses.includes(r.status)).length;
    return { total: rows.length, sent: count('sent', 'delivered', 'read'), delivered: count('delivered', 'read'), read: count('read'), failed: count('failed'),
      pending: count('pending', 'sending', 'held', 'deferred'), held: count('held'), deferred: count('deferred'), skipped: count('skipped'),
      replied: rows.filter((r) => r.replied_at).length, clicked: rows.filter((r) => r.clicked_at).length };
  };
  const unfoldedMoves = async (id: string) => (await t.deps.db.selectFrom('campaign_counter_moves').select('campaign_id').where('campaign_id', '=', id).execute()).length;

  itOnPostgresServer('a row held by another connection needs a server')('sends, outcomes and callbacks never wait on the campaign row; reads add the unfolded moves; completion folds them', async () => {
    const { tenant, id } = await startCampaign(8);
    // Another transaction holds the campaign row as an UPDATE of it would, for the whole dispatch.
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    let holding!: () => void;
    const held = new Promise<void>((resolve) => { holding = resolve; });
    const holder = t.deps.db.transaction().execute(async (tx) => {
      await sql`SELECT id FROM campaigns WHERE id = ${id}::uuid FOR NO KEY UPDATE`.execute(tx);
      holding();
      await released;
    });
    await held;
    const workers = runCampaignWorkers(t, [tenant.id]);
    try {
      // Every recipient is sent and read while the row is held; GET counts the moves not yet folded.
      await eventually(async () => (await truth(id)).read === 8, 20_000);
      const during = (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
      expect(during.status).toBe('RUNNING');
      expect(during.stats).toEqual({ total: 8, sent: 8, delivered: 8, read: 8, failed: 0, pending: 0, held: 0, deferred: 0, skipped: 0, replied: 0, clicked: 0 });
      expect(await unfoldedMoves(id)).toBeGreaterThan(0);
      const row = await t.deps.db.selectFrom('campaigns').select(['pending_count', 'read_count']).where('id', '=', id).executeTakeFirstOrThrow();
      expect(row).toEqual({ pending_count: 8, read_count: 0 });

      release();
      await holder;
      const done = await eventually(async () => {
        const c = (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json();
        return c.status === 'COMPLETED' ? c : null;
      }, 10_000);
      expect(done.stats).toEqual({ total: 8, sent: 8, delivered: 8, read: 8, failed: 0, pending: 0, held: 0, deferred: 0, skipped: 0, replied: 0, clicked: 0 });
      // Completion folded every move into the row (the event carries exact stats).
      expect(await unfoldedMoves(id)).toBe(0);
      const folded = await t.deps.db.selectFrom('campaigns').select(['pending_count', 'sent_count', 'delivered_count', 'read_count', 'failed_count']).where('id', '=', id).executeTakeFirstOrThrow();
      expect(folded).toEqual({ pending_count: 0, sent_count: 0, delivered_count: 0, read_count: 8, failed_count: 0 });
    } finally {
      release();
      await workers.stop();
    }
  });

  const recipientIds = async (id: string) => (await t.deps.db.selectFrom('campaign_recipients').select('id').where('campaign_id', '=', id).execute()).map((r) => r.id);
  const order = ['sent', 'delivered', 'read', 'failed'];
  const move = (picked: string[]) => t.deps.db.transaction().execute((tx) => campaignQueue.applyStatuses(tx, picked.map((rid) => ({
    id: rid, status: order[Math.floor(Math.random() * order.length)], wamid: `wamid.${rid}`, code: 131026, title: 'Message undeliverable',
  }))));

  it('a recount covers the moves not yet folded and removes them; a fold moves them into the row', async () => {
    const { tenant, id } = await startCampaign(20);
    const ids = await recipientIds(id);
    await move(ids.slice(0, 10));
    expect(await unfoldedMoves(id)).toBeGreaterThan(0);
    expect((await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().stats).toEqual(await truth(id));
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/refresh-metrics`)).json().stats).toEqual(await truth(id));
    expect(await unfoldedMoves(id)).toBe(0);
    expect((await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().stats).toEqual(await truth(id));

    await move(ids.slice(5, 15));
    expect(await t.deps.db.transaction().execute((tx) => foldCounterMoves(tx))).toBeGreaterThanOrEqual(1);
    expect(await unfoldedMoves(id)).toBe(0);
    const expected = await truth(id);
    const row = await t.deps.db.selectFrom('campaigns').select(['pending_count', 'sent_count', 'delivered_count', 'read_count', 'failed_count']).where('id', '=', id).executeTakeFirstOrThrow();
    expect({ pending: row.pending_count, failed: row.failed_count, read: row.read_count }).toEqual({ pending: expected.pending, failed: expected.failed, read: expected.read });
    expect((await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().stats).toEqual(expected);
  });

  it('several statuses of one recipient in one batch move it to the furthest, whatever their order, counted once', async () => {
    const { tenant, id } = await startCampaign(3);
    const [a, b, c] = await recipientIds(id);
    const status = (rid: string, s: string) => ({ id: rid, status: s, wamid: `wamid.${rid}`, code: 131026, title: 'Message undeliverable' });
    await t.deps.db.transaction().execute((tx) => campaignQueue.applyStatuses(tx, [
      status(a, 'sent'), status(a, 'delivered'), status(a, 'read'), status(b, 'read'), status(b, 'delivered'), status(c, 'delivered'), status(c, 'failed'), status(c, 'sent'),
    ]));
    const rows = await t.deps.db.selectFrom('campaign_recipients').select(['id', 'status', 'error_code']).where('campaign_id', '=', id).execute();
    const byId = new Map(rows.map((r) => [r.id, r]));
    expect([byId.get(a)?.status, byId.get(b)?.status, byId.get(c)?.status]).toEqual(['read', 'read', 'failed']);
    expect(byId.get(c)?.error_code).toBe(131026);
    expect(await truth(id)).toEqual({ total: 3, sent: 2, delivered: 2, read: 2, failed: 1, pending: 0, held: 0, deferred: 0, skipped: 0, replied: 0, clicked: 0 });
    expect((await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().stats).toEqual(await truth(id));
  });

  itOnPostgresServer('concurrent transactions need a server')('a recount racing the folds and the status moves ends with counters equal to the recipient rows', async () => {
    const { tenant, id } = await startCampaign(60);
    const ids = await recipientIds(id);
    let moving = true;
    const mover = (async () => {
      // Random recipients move forward (never back; failed is final) in small transactions.
      for (let round = 0; round < 80; round++) await move([...new Set(Array.from({ length: 4 }, () => ids[Math.floor(Math.random() * ids.length)]))]);
      moving = false;
    })();
    const folder = (async () => { while (moving) await t.deps.db.transaction().execute((tx) => foldCounterMoves(tx)); })();
    const recounter = (async () => {
      while (moving) expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/refresh-metrics`)).statusCode).toBe(200);
    })();
    await Promise.all([mover, folder, recounter]);

    const expected = await truth(id);
    expect(expected.pending).toBeLessThan(60);
    expect((await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().stats).toEqual(expected);
    await t.deps.db.transaction().execute((tx) => foldCounterMoves(tx, [id]));
    expect(await unfoldedMoves(id)).toBe(0);
    expect((await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().stats).toEqual(expected);
    expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/refresh-metrics`)).json().stats).toEqual(expected);
  });
});
