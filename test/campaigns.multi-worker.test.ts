import { afterEach, expect, it } from 'vitest';
import { describeOnPostgresServer } from './helpers/app.ts';
import { busiestSecond, sendsPerPhone, startWorkerProcesses, type WorkerProcesses } from './helpers/worker-processes.ts';

const RATE = 20;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Issue 24 §2-3: several ROLE=worker processes share one number. One of them at a time sends for
 * it (src/workers/number-ownership.ts), so every second at the sandbox stays within the number's
 * rate, and a SIGKILLed owner's claims that it never sent go back to pending within seconds.
 */
describeOnPostgresServer('several worker processes on one database')('worker processes sharing one number', () => {
  let drill: WorkerProcesses | undefined;
  afterEach(async () => { await drill?.close(); drill = undefined; });

  const waitForSends = async (n: number) => {
    for (let i = 0; (await drill!.sends()).length < n; i++) {
      if (i > 1200) throw new Error(`fewer than ${n} sends after a minute`);
      await sleep(50);
    }
  };
  /** Every process holds its liveness lock once it is up (src/db/process-liveness.ts). */
  const waitForProcesses = async (n: number) => {
    for (let i = 0; ; i++) {
      const [{ count }] = await drill!.query<{ count: number }>(`SELECT count(*)::int AS count FROM pg_locks WHERE locktype = 'advisory' AND classid = ${0x4c495645} AND objsubid = 2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`);
      if (count >= n) return;
      if (i > 1200) throw new Error(`${count} of ${n} processes up after a minute`);
      await sleep(50);
    }
  };

  /**
   * Waits for the campaign to complete and checks every recipient was sent exactly once; returns
   * the sandbox's sends.
   */
  const expectEachSentOnce = async (campaignId: string, recipients: number, timeoutMs: number) => {
    const final = await drill!.completed(campaignId, timeoutMs);
    const sends = await drill!.sends();
    const perPhone = sendsPerPhone(sends);
    expect([...perPhone].filter(([, n]) => n > 1)).toEqual([]);
    expect(perPhone.size).toBe(recipients);
    expect(final.stats).toMatchObject({ total: recipients, sent: recipients, failed: 0, pending: 0 });
    return sends;
  };
  /**
   * One worker (the owner) sending a campaign (30 s by default), a second worker up beside it; returns once the
   * owner holds at least `least` claims that `claims` (SQL on campaign_recipients r) selects.
   */
  const ownerWithClaims = async (prefix: string, env: Record<string, string>, claims: string, least: number, recipients = 30 * RATE) => {
    const processes = drill = await startWorkerProcesses(prefix, { UPSTREAM_TIMEOUT_MS: '2000', CAMPAIGN_LEASE_MS: '10000', SEND_RECONCILE_MS: '3000', ...env });
    const owner = processes.startWorker();
    await waitForProcesses(2);
    const campaign = await processes.startCampaign(recipients, RATE, 10);
    await waitForSends(RATE);
    processes.startWorker();
    await waitForProcesses(3);
    let found: { id: string; claimed_by: string }[] = [];
    for (const until = Date.now() + 60_000; found.length < least && Date.now() < until;) {
      found = await processes.query(`SELECT r.id, r.claimed_by FROM campaign_recipients r WHERE r.status = 'sending' AND ${claims}`);
    }
    return { processes, owner, campaign, recipients, found };
  };
  /** SIGKILLs the owner; how many ms later none of `claims` is still its (-1: not within 10 s). */
  const killedAndBack = async (owner: { child: { kill: (signal: NodeJS.Signals) => boolean }; exited: Promise<unknown> }, claims: { id: string; claimed_by: string }[]) => {
    owner.child.kill('SIGKILL');
    const killedAt = Date.now();
    await owner.exited;
    for (let i = 0; i < 200; i++) {
      const [{ held }] = await drill!.query<{ held: number }>(`SELECT count(*)::int AS held FROM campaign_recipients WHERE id = ANY($1::uuid[]) AND status = 'sending' AND claimed_by = $2::uuid`, [claims.map((r) => r.id), claims[0].claimed_by]);
      if (held === 0) return Date.now() - killedAt;
      await sleep(50);
    }
    return -1;
  };
  /**
   * Claims reaching 4 s ahead; returns once the owner holds ten slotted past the fence (1.25 s
   * after the next owner takes the number, itself up to a second after a fault on a loaded
   * machine): claims the owner can never have sent when it stops.
   */
  const ownerWithClaimsAhead = (prefix: string) => ownerWithClaims(prefix, { PACING_HORIZON_MS: '4000' }, `r.send_at > now() + interval '2800 milliseconds'`, 10);

  it(`three workers, one started late, then two stopped for 1.5 s in turn: no second at the sandbox carries more than ${RATE}, end to end near the rate, everyone is sent once`, { timeout: 180_000 }, async () => {
    const recipients = 16 * RATE;
    drill = await startWorkerProcesses('msvc_multi_pace', { UPSTREAM_TIMEOUT_MS: '2000', PACING_HORIZON_MS: '200', CAMPAIGN_LEASE_MS: '2500', SEND_RECONCILE_MS: '3000' });
    const workers = [drill.startWorker(), drill.startWorker()];
    await waitForProcesses(3);
    const campaign = await drill.startCampaign(recipients, RATE, 5);
    await waitForSends(2 * RATE);
    workers.push(drill.startWorker());
    await waitForSends(8 * RATE);
    // The stopped owner's number waits for it (its lock is held while it is stopped).
    for (const worker of workers.slice(0, 2)) {
      worker.child.kill('SIGSTOP');
      await sleep(1500);
      worker.child.kill('SIGCONT');
      await sleep(1000);
    }

    const sends = await expectEachSentOnce(campaign.id, recipients, 120_000);
    const times = sends.map((s) => new Date(s.at).getTime()).sort((a, b) => a - b);
    expect(busiestSecond(times).sends).toBeLessThanOrEqual(RATE);
    // Before the stops, with the third worker started meanwhile: far from the collapse of a design
    // that drops late sends (3.6-9.1/s of 20).
    const perSecond = (8 * RATE - 1) / ((times[8 * RATE - 1] - times[0]) / 1000);
    console.log(`three workers on one number at ${RATE}/s: ${perSecond.toFixed(1)}/s end to end before the stops, busiest second ${busiestSecond(times).sends}`);
    expect(perSecond).toBeGreaterThan(0.75 * RATE);
  });

  it('a SIGKILLed owner\'s claims it had not sent go back to pending within seconds at the default horizon; each recipient is sent once', { timeout: 180_000 }, async () => {
    // Claims (PACING_HORIZON_MS, 1 s ahead by default) whose message rows are not written yet, with
    // their slots far enough ahead (inside the fence) that the owner cannot write them before the kill.
    const { processes, owner, campaign, recipients, found: unsent } = await ownerWithClaims('msvc_multi_kill', {},
      `r.send_at > now() + interval '400 milliseconds' AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = r.id AND m.attempted_at >= r.attempted_at)`, 5);
    expect(unsent.length).toBeGreaterThanOrEqual(5);
    const back = await killedAndBack(owner, unsent);
    const [{ waiting }] = await processes.query<{ waiting: number }>(`SELECT count(*)::int AS waiting FROM campaign_recipients WHERE status = 'sending' AND claimed_by = $1::uuid`, [unsent[0].claimed_by]);
    console.log(`${unsent.length} claims the killed owner had not sent were back ${back} ms after the kill; ${waiting} of its claims wait for reconciliation`);
    // At most the batches it had written (10 each, 100 ms ahead of their slots), not its whole horizon.
    expect(waiting).toBeLessThanOrEqual(20);
    expect(back).toBeGreaterThanOrEqual(0);
    expect(back).toBeLessThan(5000);

    await expectEachSentOnce(campaign.id, recipients, 120_000);
  });

  it('a SIGKILLed owner\'s unsent claims of a campaign\'s last recipients go back within seconds though nobody takes its number over; each recipient is sent once', { timeout: 180_000 }, async () => {
    // Nothing pending: the other worker has no due work for the number, so no takeover. Claims
    // reaching 2 s ahead keep the moment to catch (the last claims, not yet written) over a second
    // long on a loaded machine; at the default 1 s it was missed once in CI. The campaign lasts 30 s
    // so that the moment comes well after the second worker is up: with 10 s, a CI run on a loaded
    // machine took that long to start it, and the moment had passed.
    const { processes, owner, campaign, recipients, found: unsent } = await ownerWithClaims('msvc_multi_last', { PACING_HORIZON_MS: '2000' },
      `NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = r.id AND m.attempted_at >= r.attempted_at)
        AND NOT EXISTS (SELECT 1 FROM campaign_recipients p WHERE p.campaign_id = r.campaign_id AND p.status = 'pending')`, 3);
    expect(unsent.length).toBeGreaterThanOrEqual(3);
    const back = await killedAndBack(owner, unsent);
    console.log(`${unsent.length} last claims the killed owner had not sent were back ${back} ms after the kill`);
    expect(back).toBeGreaterThanOrEqual(0);
    // Well inside the lease (10 s here), which they waited for before.
    expect(back).toBeLessThan(5000);
    await expectEachSentOnce(campaign.id, recipients, 120_000);
  });

  it('an owner stopped and cut off from the database while another takes its number over sends nothing it was not left when it runs again: each recipient once', { timeout: 180_000 }, async () => {
    const { processes, owner, campaign, recipients } = await ownerWithClaimsAhead('msvc_multi_fence');
    const numberLock = async () => (await processes.query<{ pid: number }>(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND classid = ${0x4e554d42} AND objsubid = 2`))[0]?.pid;
    const ownerBackend = await numberLock();
    // Stopped with claims slotted seconds ahead; the server drops its session (as a failover or a
    // network fault would) while it cannot notice.
    owner.child.kill('SIGSTOP');
    await processes.query('SELECT pg_terminate_backend($1)', [ownerBackend]);
    for (let i = 0; (await numberLock()) === undefined || (await numberLock()) === ownerBackend; i++) {
      if (i > 400) throw new Error('nobody took the number over');
      await sleep(50);
    }
    await sleep(1000);
    owner.child.kill('SIGCONT');

    await expectEachSentOnce(campaign.id, recipients, 150_000);
  });
});
