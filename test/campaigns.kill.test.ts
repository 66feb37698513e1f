import { afterAll, expect, it } from 'vitest';
import { describeOnPostgresServer } from './helpers/app.ts';
import { sendsPerPhone, startWorkerProcesses, type WorkerProcesses } from './helpers/worker-processes.ts';

const RECIPIENTS = 300;

/**
 * ARCHITECTURE 5, proved: a campaign worker SIGKILLed mid-campaign, again and again, loses no
 * recipient and sends none twice.
 */
describeOnPostgresServer('several worker processes on one database')('campaign dispatch survives SIGKILLed workers', () => {
  let drill: WorkerProcesses | undefined;
  afterAll(async () => { await drill?.close(); });

  it('every recipient is sent exactly once across 4 worker kills', { timeout: 180_000 }, async () => {
    drill = await startWorkerProcesses('msvc_kill', { UPSTREAM_TIMEOUT_MS: '2000', PACING_HORIZON_MS: '200', CAMPAIGN_LEASE_MS: '2500', SEND_RECONCILE_MS: '2000' });
    const campaign = await drill.startCampaign(RECIPIENTS, 100);

    let worker = drill.startWorker();
    for (let kill = 1; kill <= 4; kill++) {
      // Let the worker get going (sends flowing), then kill it mid-batch.
      const before = (await drill.sends()).length;
      for (let i = 0; (await drill.sends()).length < before + 20 && i < 400; i++) await new Promise((r) => setTimeout(r, 25));
      worker.child.kill('SIGKILL');
      await worker.exited;
      worker = drill.startWorker();
    }

    const final = await drill.completed(campaign.id, 120_000);
    const perPhone = sendsPerPhone(await drill.sends());
    expect([...perPhone].filter(([, n]) => n > 1)).toEqual([]);
    expect(perPhone.size).toBe(RECIPIENTS);
    for (const phone of campaign.phones) expect(perPhone.get(phone.replace(/^\+/, ''))).toBe(1);
    expect(final.stats).toMatchObject({ total: RECIPIENTS, failed: 0, pending: 0, sent: RECIPIENTS });
  });
});
