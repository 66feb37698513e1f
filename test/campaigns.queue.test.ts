import { sql } from 'kysely';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIRST_ID, campaignQueue, type ClaimedRecipient, type RunningCampaign } from '../src/modules/campaigns/campaigns.queue.ts';
import { call, eventually, itOnPostgresServer, type TestTenant } from './helpers/app.ts';
import { CAMPAIGN_ENV, createContacts, someContacts, uniqueTag } from './helpers/campaigns.ts';
import { stopLeftovers } from './helpers/campaigns-api.ts';
import { createApprovedTemplate, createConnectedTenant, eventsOf, startUpstreamApp, type UpstreamTestApp } from './helpers/upstream.ts';

/**
 * The recipient queue's statements one by one, on the real database, with no dispatcher running:
 * what each leaves in the recipient, message and campaign rows, and what it returns.
 */
describe('campaign recipient queue', () => {
  let t: UpstreamTestApp;
  const tenants: string[] = [];
  beforeAll(async () => { t = await startUpstreamApp({ ...CAMPAIGN_ENV, RATE_LIMIT_PER_MINUTE: '100000' }); });
  afterAll(async () => {
    if (t) await stopLeftovers(t, tenants);
    await t?.close();
  });

  const mapping = { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name' }, { kind: 'static', value: 'X-1' }] }] };

  /** A tenant with `campaigns` RUNNING campaigns of `n` recipients each (materialised, none claimed), or SCHEDULED at `scheduledAt`. */
  async function campaignsOf(n: number, campaigns = 1, scheduledAt?: Date): Promise<{ tenant: TestTenant; ids: string[] }> {
    const tenant = await createConnectedTenant(t.app);
    tenants.push(tenant.id);
    const template = await createApprovedTemplate(t.app, tenant);
    const tag = uniqueTag();
    await createContacts(t, tenant, someContacts(n, { tags: [tag] }));
    const ids: string[] = [];
    for (let i = 0; i < campaigns; i++) {
      const created = await call(t.app, tenant, 'POST', '/campaigns', {
        name: `Q${i}`, template_id: template.id, audience: { groups: [tag] }, variable_mapping: mapping,
        ...(scheduledAt ? { scheduled_at: scheduledAt.toISOString() } : {}),
      });
      expect(created.statusCode, created.body).toBe(201);
      const id = created.json().id as string;
      if (!scheduledAt) expect((await call(t.app, tenant, 'POST', `/campaigns/${id}/send`)).statusCode).toBe(200);
      ids.push(id);
    }
    return { tenant, ids };
  }

  const campaignRow = async (tenant: TestTenant, id: string): Promise<RunningCampaign> => {
    const [row] = (await campaignQueue.running(t.deps.db, 100, [tenant.id])).filter((c) => c.id === id);
    expect(row, id).toBeDefined();
    return row;
  };
  /** Claims every recipient of the campaign and writes their message rows, as a dispatcher's batch does. */
  async function claimAndRecord(tenant: TestTenant, campaignId: string, leaseMs = 60_000) {
    const claimed = await campaignQueue.claim(t.deps.db, campaignId, 1_000, leaseMs);
    await campaignQueue.recordAttempts(t.deps.db, tenant.id, await campaignRow(tenant, campaignId), null,
      claimed.map((r) => ({ id: r.id, contactId: r.contact_id, to: r.phone, components: [], attempts: r.attempts })));
    return claimed.sort((a, b) => a.id.localeCompare(b.id));
  }
  const attemptsOf = (claimed: ClaimedRecipient[]) => claimed.map((r) => ({ id: r.id, contactId: r.contact_id, to: r.phone, components: [], attempts: r.attempts }));
  /** Claims up to ten of the campaign's recipients for `by`, slotted `intervalMs` apart from now, in id order. */
  const claimSlotted = async (campaignId: string, by: string, intervalMs: number) =>
    (await campaignQueue.claim(t.deps.db, campaignId, 10, 60_000, FIRST_ID, false, { by, startAt: Date.now(), intervalMs })).sort((a, b) => a.id.localeCompare(b.id));
  const statusesOf = async (claimed: ClaimedRecipient[]) => (await Promise.all(claimed.map((r) => recipient(r.id)))).map((r) => r.status);
  const recipient = (id: string) => t.deps.db.selectFrom('campaign_recipients').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
  const message = (id: string) => t.deps.db.selectFrom('messages').selectAll().where('id', '=', id).executeTakeFirst();
  const truth = async (id: string) => {
    const rows = await t.deps.db.selectFrom('campaign_recipients').select(['status', 'replied_at', 'clicked_at']).where('campaign_id', '=', id).execute();
    const count = (...statuses: string[]) => rows.filter((r) => statuses.includes(r.status)).length;
    return { total: rows.length, sent: count('sent', 'delivered', 'read'), delivered: count('delivered', 'read'), read: count('read'), failed: count('failed'),
      pending: count('pending', 'sending', 'held', 'deferred'), held: count('held'), deferred: count('deferred'), skipped: count('skipped'),
      replied: rows.filter((r) => r.replied_at).length, clicked: rows.filter((r) => r.clicked_at).length };
  };
  const statsOf = async (tenant: TestTenant, id: string) => (await call(t.app, tenant, 'GET', `/campaigns/${id}`)).json().stats;

  it('running lists only the given tenants\' campaigns (every tenant\'s without a list), the longest-waiting turn first', async () => {
    const a = await campaignsOf(1, 2);
    const b = await campaignsOf(1);
    const mine = await campaignQueue.running(t.deps.db, 100, [a.tenant.id]);
    expect(mine.map((c) => c.id).sort()).toEqual([...a.ids].sort());
    const everyone = (await campaignQueue.running(t.deps.db, 100_000)).map((c) => c.id);
    expect(everyone).toEqual(expect.arrayContaining([...a.ids, ...b.ids]));

    // Each turn stamped goes to the back: two campaigns alternate.
    const [first] = await campaignQueue.running(t.deps.db, 1, [a.tenant.id]);
    await campaignQueue.touch(t.deps.db, [first.id]);
    const [second] = await campaignQueue.running(t.deps.db, 1, [a.tenant.id]);
    expect(second.id).not.toBe(first.id);
    await campaignQueue.touch(t.deps.db, [second.id]);
    expect((await campaignQueue.running(t.deps.db, 1, [a.tenant.id]))[0].id).toBe(first.id);
    await campaignQueue.touch(t.deps.db, []);
  });

  it('due lists SCHEDULED campaigns whose time has come, of the given tenants or of every tenant', async () => {
    const { tenant, ids: [past, future] } = await campaignsOf(1, 2, new Date(Date.now() + 60_000));
    await t.deps.db.updateTable('campaigns').set({ scheduled_at: new Date(Date.now() - 1_000) }).where('id', '=', past).execute();
    expect(await campaignQueue.due(t.deps.db, 10, [tenant.id])).toEqual([{ id: past, tenant_id: tenant.id }]);
    const everyone = (await campaignQueue.due(t.deps.db, 100_000)).map((c) => c.id);
    expect(everyone).toContain(past);
    expect(everyone).not.toContain(future);
  });

  it('recordAttempts writes one accepted message row per send with the recipient\'s id; an empty batch writes nothing', async () => {
    const { tenant, ids: [id] } = await campaignsOf(2);
    await campaignQueue.recordAttempts(t.deps.db, tenant.id, await campaignRow(tenant, id), null, []);
    const [r1, r2] = await claimAndRecord(tenant, id);
    for (const r of [r1, r2]) {
      expect(await message(r.id)).toMatchObject({ tenant_id: tenant.id, campaign_id: id, callback_data: r.id, to_phone: r.phone, status: 'accepted', upstream_message_id: null });
    }
  });

  it('recordOutcomes: accepted stores the upstream id and moves sending to sent (a callback\'s further status stays); refused fails with the title cut at 500', async () => {
    const { tenant, ids: [id] } = await campaignsOf(4);
    const [sending, delivered, refused, other] = await claimAndRecord(tenant, id);
    // A callback overtook the send response of one recipient.
    await t.deps.db.transaction().execute((tx) => campaignQueue.applyStatuses(tx, [{ id: delivered.id, status: 'delivered', wamid: `wamid.${delivered.id}`, code: null, title: null }]));
    const title = 'x'.repeat(600);
    const moves = await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, {
      accepted: [{ id: sending.id, wamid: `wamid.${sending.id}` }, { id: delivered.id, wamid: `wamid.${delivered.id}` }],
      failed: [{ id: refused.id, code: 131026, title }], retry: [], unknown: [], unsent: [],
    }));
    expect(moves).toEqual(expect.arrayContaining([
      { campaignId: id, from: 'sending', to: 'sent' }, { campaignId: id, from: 'delivered', to: 'delivered' }, { campaignId: id, from: 'sending', to: 'failed' },
    ]));
    expect(moves).toHaveLength(3);
    expect(await recipient(sending.id)).toMatchObject({ status: 'sent', message_id: `wamid.${sending.id}`, lease_until: null });
    expect((await message(sending.id))?.upstream_message_id).toBe(`wamid.${sending.id}`);
    expect(await recipient(delivered.id)).toMatchObject({ status: 'delivered', message_id: `wamid.${delivered.id}` });
    expect(await recipient(refused.id)).toMatchObject({ status: 'failed', error_code: 131026, error_title: 'x'.repeat(500), lease_until: null });
    expect(await message(refused.id)).toMatchObject({ status: 'failed', status_rank: 4, error_code: 131026, error_title: 'x'.repeat(500) });
    expect((await recipient(other.id)).status).toBe('sending');
    expect(await statsOf(tenant, id)).toEqual(await truth(id));
    // Nothing to record: nothing moves.
    expect(await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { accepted: [], failed: [], retry: [], unknown: [], unsent: [] }))).toEqual([]);
  });

  it('recordOutcomes: an unsent first attempt loses its message row, a later attempt keeps it; both are pending again with the attempt given back', async () => {
    const { tenant, ids: [id] } = await campaignsOf(2);
    const [first, later] = await claimAndRecord(tenant, id);
    await t.deps.db.updateTable('campaign_recipients').set({ attempts: 2 }).where('id', '=', later.id).execute();
    const moves = await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { accepted: [], failed: [], retry: [], unknown: [], unsent: [{ id: first.id, claimedBy: null, attempts: 1 }, { id: later.id, claimedBy: null, attempts: 2 }] }));
    expect(moves).toEqual([]);
    expect(await message(first.id)).toBeUndefined();
    expect(await message(later.id)).toBeDefined();
    expect(await recipient(first.id)).toMatchObject({ status: 'pending', attempts: 0, lease_until: null });
    expect(await recipient(later.id)).toMatchObject({ status: 'pending', attempts: 1, lease_until: null });
  });

  it('recordOutcomes puts an unsent claim back only while it is still that claim: not another claimant\'s, not the same recipient claimed again', async () => {
    const { tenant, ids: [id] } = await campaignsOf(3);
    const mine = '00000000-0000-4000-8000-00000000000a';
    const theirs = '00000000-0000-4000-8000-00000000000b';
    const claimed = await claimSlotted(id, mine, 100);
    await campaignQueue.recordAttempts(t.deps.db, tenant.id, await campaignRow(tenant, id), mine, attemptsOf(claimed));
    const [stays, claimedAgain, goes] = claimed;
    // One was taken over and claimed by another process since; one was claimed again by this one.
    await t.deps.db.updateTable('campaign_recipients').set({ claimed_by: theirs }).where('id', '=', stays.id).execute();
    await t.deps.db.updateTable('campaign_recipients').set({ attempts: 2 }).where('id', '=', claimedAgain.id).execute();
    await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { unsent: claimed.map((r) => ({ id: r.id, claimedBy: mine, attempts: r.attempts })) }));
    expect(await recipient(stays.id)).toMatchObject({ status: 'sending', claimed_by: theirs });
    expect(await message(stays.id)).toBeDefined();
    expect(await recipient(claimedAgain.id)).toMatchObject({ status: 'sending', attempts: 2 });
    expect(await recipient(goes.id)).toMatchObject({ status: 'pending', attempts: 0, claimed_by: null, send_at: null });
    expect(await message(goes.id)).toBeUndefined();
  });

  it('takeOver puts back the dead claimants\' claims slotted past the fence, and keeps earlier slots, live claimants\' claims and its own', async () => {
    const { tenant, ids: [id] } = await campaignsOf(6);
    const dead = '00000000-0000-4000-8000-0000000000d1';
    const alive = '00000000-0000-4000-8000-0000000000a1';
    const me = '00000000-0000-4000-8000-0000000000e1';
    // Slots 3 s apart from now: 0, 3, 6, 9, 12, 15 s ahead.
    const claimed = await claimSlotted(id, dead, 3000);
    await campaignQueue.recordAttempts(t.deps.db, tenant.id, await campaignRow(tenant, id), dead, attemptsOf(claimed));
    await t.deps.db.updateTable('campaign_recipients').set({ claimed_by: alive }).where('id', '=', claimed[5].id).execute();
    await t.deps.db.updateTable('campaign_recipients').set({ claimed_by: me }).where('id', '=', claimed[4].id).execute();
    const asked: string[][] = [];
    const back = await campaignQueue.takeOver(t.deps.db, tenant.id, me, 1250, async (claimants) => { asked.push(claimants); return claimants.filter((c) => c !== alive); });
    expect(asked.flat().sort()).toEqual([alive, dead].sort());
    // Past now + 1.25 s: the dead's slots at 3, 6 and 9 s; 12 s is this process's own, 15 s a live claimant's.
    expect(back).toBe(3);
    expect(await statusesOf(claimed)).toEqual(['sending', 'pending', 'pending', 'pending', 'sending', 'sending']);
    expect(await message(claimed[1].id)).toBeUndefined();
    expect(await message(claimed[0].id)).toBeDefined();
  });

  it('recordAttempts writes rows only for recipients still held by the claim, and says which: not one taken over, not one put back', async () => {
    const { tenant, ids: [id] } = await campaignsOf(3);
    const mine = '00000000-0000-4000-8000-00000000001a';
    const claimed = await claimSlotted(id, mine, 100);
    const [takenOver, putBack, kept] = claimed;
    await t.deps.db.updateTable('campaign_recipients').set({ claimed_by: '00000000-0000-4000-8000-00000000001b' }).where('id', '=', takenOver.id).execute();
    await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { unsent: [{ id: putBack.id, claimedBy: mine, attempts: putBack.attempts }] }));
    const written = await campaignQueue.recordAttempts(t.deps.db, tenant.id, await campaignRow(tenant, id), mine, attemptsOf(claimed));
    expect([...written]).toEqual([kept.id]);
    expect(await message(takenOver.id)).toBeUndefined();
    expect(await message(putBack.id)).toBeUndefined();
    expect(await message(kept.id)).toMatchObject({ status: 'accepted', callback_data: kept.id });
  });

  it('takeOver puts back at once a dead claimant\'s claims without this attempt\'s message row, even inside the fence; one whose row is written waits for reconciliation', async () => {
    const { tenant, ids: [id] } = await campaignsOf(3);
    const dead = '00000000-0000-4000-8000-0000000000d2';
    const me = '00000000-0000-4000-8000-0000000000e2';
    // Every slot inside the fence (100 ms apart from now).
    const claimed = await claimSlotted(id, dead, 100);
    await campaignQueue.recordAttempts(t.deps.db, tenant.id, await campaignRow(tenant, id), dead, attemptsOf(claimed.slice(0, 1)));
    // The third was sent once before (an earlier attempt's row, outcome unknown) and claimed again.
    await t.deps.db.updateTable('campaign_recipients').set({ attempts: 2 }).where('id', '=', claimed[2].id).execute();
    await t.deps.db.insertInto('messages').values({ id: claimed[2].id, tenant_id: tenant.id, template_name: 'x', language: 'en', to_phone: claimed[2].phone, components: '[]', status: 'accepted', campaign_id: id, callback_data: claimed[2].id, attempted_at: new Date(Date.now() - 120_000) } as never).execute();
    const back = await campaignQueue.takeOver(t.deps.db, tenant.id, me, 1250, async (claimants) => claimants);
    expect(back).toBe(2);
    expect(await statusesOf(claimed)).toEqual(['sending', 'pending', 'pending']);
    // The earlier attempt's row stays (it may still hear from the upstream).
    expect(await message(claimed[2].id)).toBeDefined();
  });

  it('returnUnwritten puts back dead claimants\' claims without this attempt\'s message row, whatever their slot; written ones, live claimants\' and its own stay', async () => {
    const { tenant, ids: [id] } = await campaignsOf(4);
    const dead = '00000000-0000-4000-8000-0000000000d3';
    const alive = '00000000-0000-4000-8000-0000000000a3';
    const me = '00000000-0000-4000-8000-0000000000e3';
    // Slotted 10 s apart: past any fence, so only the message rows decide.
    const claimed = await claimSlotted(id, dead, 10_000);
    await campaignQueue.recordAttempts(t.deps.db, tenant.id, await campaignRow(tenant, id), dead, attemptsOf(claimed.slice(0, 1)));
    await t.deps.db.updateTable('campaign_recipients').set({ claimed_by: alive }).where('id', '=', claimed[2].id).execute();
    await t.deps.db.updateTable('campaign_recipients').set({ claimed_by: me }).where('id', '=', claimed[3].id).execute();
    const back = await campaignQueue.returnUnwritten(t.deps.db, me, async (claimants) => claimants.filter((c) => c !== alive), [tenant.id]);
    expect(back).toBe(1);
    expect(await statusesOf(claimed)).toEqual(['sending', 'pending', 'sending', 'sending']);
  });

  itOnPostgresServer('a row lock held from a second connection')('recordOutcomes locks every message row, then every recipient row in id order, before it changes one (as callbacks do: no deadlock)', async () => {
    const { tenant, ids: [id] } = await campaignsOf(2);
    const [low, high] = await claimAndRecord(tenant, id);
    // Another transaction holds the higher recipient row; the batch's statements queue behind it.
    let release!: () => void;
    const released = new Promise<void>((resolve) => { release = resolve; });
    let holding!: (pid: number) => void;
    const held = new Promise<number>((resolve) => { holding = resolve; });
    const holder = t.deps.db.transaction().execute(async (tx) => {
      await sql`SELECT id FROM campaign_recipients WHERE id = ${high.id}::uuid FOR UPDATE`.execute(tx);
      holding((await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(tx)).rows[0].pid);
      await released;
    });
    let recording: Promise<unknown> | undefined;
    try {
      const holderPid = await held;
      recording = t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, {
        accepted: [{ id: high.id, wamid: `wamid.${high.id}` }], failed: [], retry: [], unknown: [], unsent: [{ id: low.id, claimedBy: null, attempts: 1 }],
      }));
      await eventually(async () => (await sql<{ n: number }>`SELECT count(*)::int AS n FROM pg_stat_activity WHERE ${holderPid}::int = ANY(pg_blocking_pids(pid))`.execute(t.deps.db)).rows[0].n > 0, 20_000);
      // Waiting for the higher recipient, the batch already holds the lower one and both message rows.
      const lockedElsewhere = (table: 'messages' | 'campaign_recipients', rowId: string) => t.deps.db.transaction().execute(async (tx) => {
        try {
          await sql`SELECT id FROM ${sql.table(table)} WHERE id = ${rowId}::uuid FOR UPDATE NOWAIT`.execute(tx);
          return false;
        } catch (err) {
          if ((err as { code?: string }).code === '55P03') return true;
          throw err;
        }
      });
      expect(await lockedElsewhere('messages', low.id)).toBe(true);
      expect(await lockedElsewhere('messages', high.id)).toBe(true);
      expect(await lockedElsewhere('campaign_recipients', low.id)).toBe(true);
      release();
      await holder;
      await recording;
      expect((await recipient(high.id)).status).toBe('sent');
      expect((await recipient(low.id)).status).toBe('pending');
    } finally {
      release();
      await holder;
      await recording?.catch(() => {});
    }
  });

  it('reconcileExpired settles expired leases by what the message row heard, re-queues silent ones past the window once the callbacks caught up (or after five windows), and counts only those settled', async () => {
    const { tenant, ids: [id] } = await campaignsOf(6);
    const [delivered, accepted, failed, silentOld, silentRecent, noMessage] = await claimAndRecord(tenant, id);
    const db = t.deps.db;
    await db.updateTable('messages').set({ status: 'delivered', status_rank: 2, upstream_message_id: `wamid.${delivered.id}` }).where('id', '=', delivered.id).execute();
    await db.updateTable('messages').set({ upstream_message_id: `wamid.${accepted.id}` }).where('id', '=', accepted.id).execute();
    await db.updateTable('messages').set({ status: 'failed', status_rank: 4, error_code: 131026, error_title: 'Message undeliverable' }).where('id', '=', failed.id).execute();
    await db.deleteFrom('messages').where('id', '=', noMessage.id).execute();
    const oldAttempt = new Date(Date.now() - 120_000);
    const recentAttempt = new Date(Date.now() - 10_000);
    const expire = (ids: string[]) => db.updateTable('campaign_recipients').set({ lease_until: new Date(Date.now() - 1_000) }).where('id', 'in', ids).execute();
    const heardThrough = (at: Date | null) => db.updateTable('business_accounts').set({ statuses_through: at }).where('tenant_id', '=', tenant.id).execute();
    await db.updateTable('campaign_recipients').set({ lease_until: new Date(Date.now() - 1_000), attempted_at: oldAttempt }).where('campaign_id', '=', id).execute();
    await db.updateTable('campaign_recipients').set({ attempted_at: recentAttempt }).where('id', '=', silentRecent.id).execute();

    // No status callback heard yet for the account: the silent old one waits although its window is over.
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(4);
    expect(await recipient(delivered.id)).toMatchObject({ status: 'delivered', message_id: `wamid.${delivered.id}`, lease_until: null, error_code: null });
    expect(await recipient(accepted.id)).toMatchObject({ status: 'sent', message_id: `wamid.${accepted.id}`, lease_until: null });
    expect(await recipient(failed.id)).toMatchObject({ status: 'failed', error_code: 131026, error_title: 'Message undeliverable', lease_until: null });
    // No message row: never sent, back at once.
    expect(await recipient(noMessage.id)).toMatchObject({ status: 'pending', lease_until: null });
    const unheard = await recipient(silentOld.id);
    expect(unheard.status).toBe('sending');
    expect(unheard.lease_until!.getTime()).toBeGreaterThan(Date.now());
    expect(unheard.lease_until!.getTime()).toBeLessThanOrEqual(Date.now() + 1_000);
    // Still inside its window: sending, leased until the window ends.
    const waiting = await recipient(silentRecent.id);
    expect(waiting.status).toBe('sending');
    expect(waiting.lease_until?.getTime()).toBe(recentAttempt.getTime() + 60_000);

    // Callbacks heard up to the end of its window, not past it: still waiting.
    await heardThrough(new Date(oldAttempt.getTime() + 60_000));
    await expire([silentOld.id]);
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(0);
    // Past it: sent again.
    await heardThrough(new Date(oldAttempt.getTime() + 61_000));
    await expire([silentOld.id]);
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(1);
    expect(await recipient(silentOld.id)).toMatchObject({ status: 'pending', lease_until: null, message_id: null });

    // An account that hears nothing at all: after five windows it is sent again anyway.
    await heardThrough(null);
    await db.updateTable('campaign_recipients').set({ attempted_at: new Date(Date.now() - 290_000) }).where('id', '=', silentRecent.id).execute();
    await expire([silentRecent.id]);
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(0);
    await db.updateTable('campaign_recipients').set({ attempted_at: new Date(Date.now() - 301_000) }).where('id', '=', silentRecent.id).execute();
    await expire([silentRecent.id]);
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(1);
    expect(await recipient(silentRecent.id)).toMatchObject({ status: 'pending', lease_until: null });
    expect(await statsOf(tenant, id)).toEqual(await truth(id));
    // Nothing expired is left: nothing more to settle.
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(0);
  });

  it('a silent send past its window goes back without waiting five windows once a status later than it is heard and no answered send since still waits for its first status', async () => {
    // A campaign's last batch: its worker died after writing the rows, and the account sends nothing more.
    const { tenant, ids: [id] } = await campaignsOf(2);
    const [silent, answered] = await claimAndRecord(tenant, id);
    const db = t.deps.db;
    const attempt = new Date(Date.now() - 70_000);
    const expire = () => db.updateTable('campaign_recipients').set({ lease_until: new Date(Date.now() - 1_000), attempted_at: attempt }).where('id', '=', silent.id).execute();
    const heardThrough = (at: Date) => db.updateTable('business_accounts').set({ statuses_through: at }).where('tenant_id', '=', tenant.id).execute();
    await db.updateTable('messages').set({ upstream_message_id: `wamid.${answered.id}` }).where('id', '=', answered.id).execute();

    // The other send was answered and has no status yet: the callbacks may be behind, so it waits.
    await heardThrough(new Date(attempt.getTime() + 5_000));
    await expire();
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(0);
    expect((await recipient(silent.id)).status).toBe('sending');
    // Its status came, but nothing heard is later than the silent attempt: still no evidence, it waits.
    await db.updateTable('messages').set({ status: 'sent', status_rank: 1 }).where('id', '=', answered.id).execute();
    await heardThrough(new Date(attempt.getTime() - 1_000));
    await expire();
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(0);
    // A status later than the attempt, and every answered send has its status: it goes back, 70 s after its attempt.
    await heardThrough(new Date(attempt.getTime() + 5_000));
    await expire();
    expect(await campaignQueue.reconcileExpired(db, 60_000, [tenant.id])).toBe(1);
    expect(await recipient(silent.id)).toMatchObject({ status: 'pending', lease_until: null });
    expect(await statsOf(tenant, id)).toEqual(await truth(id));
  });

  it('completeIfDone completes a RUNNING campaign only with nothing pending, folding its counters, once, with campaign.completed', async () => {
    const { tenant, ids: [id] } = await campaignsOf(2);
    expect(await campaignQueue.completeIfDone(t.deps.db, id)).toBeUndefined();
    const claimed = await claimAndRecord(tenant, id);
    await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, {
      accepted: claimed.map((r) => ({ id: r.id, wamid: `wamid.${r.id}` })), failed: [], retry: [], unknown: [], unsent: [],
    }));
    const done = await campaignQueue.completeIfDone(t.deps.db, id);
    expect(done).toMatchObject({ id, status: 'COMPLETED', pending_count: 0, sent_count: 2 });
    expect(done?.completed_at).toBeInstanceOf(Date);
    expect(await campaignQueue.completeIfDone(t.deps.db, id)).toBeUndefined();
    const events = await eventsOf(t.deps, tenant.id, 'campaign.completed');
    expect(events).toHaveLength(1);
    expect(events[0].data).toMatchObject({ id, status: 'COMPLETED' });
  });

  it('fail moves a RUNNING campaign to FAILED once, folding its counters, with the reason (cut at 500) and code in campaign.failed', async () => {
    const { tenant, ids: [id] } = await campaignsOf(2);
    const [sent] = await claimAndRecord(tenant, id);
    await t.deps.db.transaction().execute((tx) => campaignQueue.recordOutcomes(tx, { accepted: [{ id: sent.id, wamid: `wamid.${sent.id}` }], failed: [], retry: [], unknown: [], unsent: [] }));
    const reason = `Upstream error 190: ${'y'.repeat(600)}`;
    const row = await campaignQueue.fail(t.deps.db, id, reason, 190);
    // The row (and so the event) carries exact stats: the batch's move is folded in.
    expect(row).toMatchObject({ id, status: 'FAILED', failure_reason: reason.slice(0, 500), pending_count: 1, sent_count: 1 });
    expect(row?.completed_at).toBeInstanceOf(Date);
    expect(await campaignQueue.fail(t.deps.db, id, 'again')).toBeUndefined();
    const events = await eventsOf(t.deps, tenant.id, 'campaign.failed');
    expect(events).toHaveLength(1);
    expect(events[0].data).toMatchObject({ id, status: 'FAILED', reason, error_code: 190, stats: { total: 2, sent: 1, delivered: 0, read: 0, failed: 0, pending: 1 } });
  });

  it('applyStatuses moves recipients forward only (failed is final), keeps error fields for failures, and takes an empty list', async () => {
    const { tenant, ids: [id] } = await campaignsOf(3);
    const [read, failed, delivered] = await claimAndRecord(tenant, id);
    const apply = (updates: { id: string; status: string; code?: number }[]) => t.deps.db.transaction().execute((tx) => campaignQueue.applyStatuses(tx,
      updates.map((u) => ({ id: u.id, status: u.status, wamid: `wamid.${u.id}`, code: u.code ?? null, title: u.code ? 'Message undeliverable' : null }))));
    await apply([]);
    await apply([{ id: read.id, status: 'read' }, { id: failed.id, status: 'failed', code: 131026 }, { id: delivered.id, status: 'delivered', code: 131026 }]);
    await apply([{ id: read.id, status: 'delivered' }, { id: failed.id, status: 'read' }, { id: delivered.id, status: 'sent' }]);
    expect(await recipient(read.id)).toMatchObject({ status: 'read', message_id: `wamid.${read.id}`, lease_until: null, error_code: null });
    expect(await recipient(failed.id)).toMatchObject({ status: 'failed', error_code: 131026, error_title: 'Message undeliverable' });
    expect(await recipient(delivered.id)).toMatchObject({ status: 'delivered', error_code: null, error_title: null });
    expect(await statsOf(tenant, id)).toEqual(await truth(id));
  });
});
