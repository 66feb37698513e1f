import type { Deps } from './deps.ts';
import { WebhookDeliverer } from './workers/webhook-deliverer.ts';
import { CampaignDispatcher, startDueCampaigns } from './workers/campaign-dispatcher.ts';
import { NumberOwnership } from './workers/number-ownership.ts';
import { startLoops, type RunningLoops, type WorkerLoop } from './workers/loop.ts';
import { foldCostMoves } from './modules/campaigns/campaigns.cost.ts';
import { foldCounterMoves } from './modules/campaigns/campaigns.repository.ts';

/** How often campaigns' counter moves are folded into their counters (reads add the unfolded ones). */
const COUNTER_FOLD_MS = 250;

/** Every background loop of the worker role. Each claims work through the database, never memory. */
export function workerLoops(deps: Deps): WorkerLoop[] {
  return [
    { name: 'idempotency-sweeper', intervalMs: 60_000, runOnce: () => deps.idempotency.sweepExpired() },
    ...(deps.config.webhookDeliveryEnabled ? [createWebhookDeliverer(deps).loop()] : []),
    // Fallback for lost template-status callbacks. The loop looks every WORKER_POLL_MS (one probe of
    // a partial index); each template is asked about at most once per TEMPLATE_POLL_INTERVAL_MS.
    { name: 'template-status-poller', runOnce: () => deps.templateSync.pollOnce() },
    { name: 'campaign-counter-fold', intervalMs: COUNTER_FOLD_MS, runOnce: async () => { await deps.db.transaction().execute((tx) => foldCounterMoves(tx)); return 0; } },
    { name: 'campaign-cost-fold', intervalMs: COUNTER_FOLD_MS, runOnce: async () => { await deps.db.transaction().execute((tx) => foldCostMoves(tx)); return 0; } },
    ...(deps.config.campaignDispatchEnabled ? [
      { name: 'campaign-scheduler', runOnce: () => startDueCampaigns(deps.db) },
      { ...createCampaignDispatcher(deps).loop(), intervalMs: deps.config.campaignPollMs },
    ] : []),
  ];
}

export function startWorkers(deps: Deps): RunningLoops {
  return startLoops(workerLoops(deps), deps.config.workerPollMs, deps.logger);
}

export function createWebhookDeliverer(deps: Deps): WebhookDeliverer {
  const c = deps.config;
  return new WebhookDeliverer(deps.db, deps.webhookSender, {
    secretsKey: c.secretsKey,
    retryDelaysMs: c.webhookRetryDelaysMs,
    leaseMs: c.webhookLeaseMs,
    timeoutMs: c.webhookTimeoutMs,
    pollMs: c.webhookPollMs,
    concurrency: c.webhookConcurrency,
    endpointConcurrency: c.webhookEndpointConcurrency,
    retryConcurrency: c.webhookRetryConcurrency,
  }, deps.logger);
}

export function createCampaignDispatcher(deps: Deps): CampaignDispatcher {
  const c = deps.config;
  return new CampaignDispatcher(deps.db, deps.upstream, deps.media, deps.pacer, {
    secretsKey: c.secretsKey, leaseMs: c.campaignLeaseMs, issueWithinMs: c.campaignIssueWithinMs, reconcileMs: c.sendReconcileMs, maxBatches: c.campaignMaxBatches, maxAttempts: c.campaignMaxAttempts,
    deferMs: c.campaignDeferMs, deferAttempts: c.campaignDeferAttempts, holdMs: c.campaignHoldMs, messagingLimitWindowMs: c.messagingLimitWindowMs,
    numbers: new NumberOwnership(deps.db, deps.liveness, deps.logger),
  }, deps.logger);
}
