import { join } from 'node:path';
import type { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { openDatabase, type Database, type Db } from './db/database.ts';
import { startProcessLiveness, type ProcessLiveness } from './db/process-liveness.ts';
import { ApiKeyAuthenticator } from './http/auth.ts';
import { IdempotencyStore } from './http/idempotency.ts';
import { MemoryRateCounter, RedisRateCounter, type RateCounter } from './http/rate-limit.ts';
import { createLogger } from './logger.ts';
import { Metrics, SCRAPE_READ_MS } from './metrics.ts';
import { readWithin } from './db/read-within.ts';
import { campaignQueueDepth } from './modules/campaigns/campaigns.metrics.ts';
import { AdminService } from './modules/admin/admin.service.ts';
import { CampaignRecipients } from './modules/campaigns/campaigns.recipients.ts';
import { CampaignsService } from './modules/campaigns/campaigns.service.ts';
import { ClicksService } from './modules/clicks/clicks.service.ts';
import { ContactsService } from './modules/contacts/contacts.service.ts';
import { ContactActivityService } from './modules/contacts/activity.service.ts';
import { WebhookSender } from './modules/webhooks/webhooks.sender.ts';
import { WebhooksService } from './modules/webhooks/webhooks.service.ts';
import { CallbacksService } from './modules/callbacks/callbacks.service.ts';
import { settleCallbackFailures } from './modules/campaigns/callback-failures.ts';
import { optOutOnMarketingRefusals } from './modules/contacts/marketing-consent.ts';
import { MediaService } from './modules/media/media.service.ts';
import { LocalDiskStorage } from './modules/media/media.storage.ts';
import { MessagesService } from './modules/messages/messages.service.ts';
import { RateCards } from './modules/pricing/rate-card.ts';
import { SendPacer } from './modules/messages/send-pacer.ts';
import { campaignQueue } from './modules/campaigns/campaigns.queue.ts';
import { TemplatesService } from './modules/templates/templates.service.ts';
import { TemplateStatusSync } from './modules/templates/templates.status-sync.ts';
import { webhookBacklog } from './modules/webhooks/webhooks.queue.ts';
import { createUpstreamClient } from './upstream/client.ts';
import type { UpstreamClient } from './upstream/types.ts';
import { ensureDevCa } from './crypto/dev-ca.ts';

export interface Deps {
  config: Config;
  logger: Logger;
  metrics: Metrics;
  database: Database;
  db: Db;
  /** This process's id and whether other processes are still alive (Idempotency-Key takeover). */
  liveness: ProcessLiveness;
  redis: Redis | null;
  rateCounter: RateCounter;
  authenticator: ApiKeyAuthenticator;
  idempotency: IdempotencyStore;
  admin: AdminService;
  contacts: ContactsService;
  /** Contact notes, follow-ups and communication history (contact sub-resources). */
  contactActivity: ContactActivityService;
  /** Signed webhook HTTP attempts (SSRF guard, extra CA, timeout); shared by the test route and the deliverer. */
  webhookSender: WebhookSender;
  webhooks: WebhooksService;
  upstream: UpstreamClient;
  templates: TemplatesService;
  templateSync: TemplateStatusSync;
  media: MediaService;
  messages: MessagesService;
  callbacks: CallbacksService;
  campaigns: CampaignsService;
  /** The rate card (prices of messages, campaign estimates), cached for RATE_CARD_CACHE_MS. */
  rateCards: RateCards;
  campaignRecipients: CampaignRecipients;
  clicks: ClicksService;
  /** Per phone number send pacing, shared across processes through Redis. */
  pacer: SendPacer;
  close(): Promise<void>;
}

export interface DepsOptions {
  /** Graph base URL to use when UPSTREAM_BASE_URL is unset (the in-process sandbox's). */
  upstreamBaseUrl?: string;
  /** The database, already being opened by the caller (the server starts it before loading the rest). */
  database?: Promise<Database>;
}

/** Where the upstream is: configured, given by the caller (in-process sandbox), or the sandbox's default port. */
export function upstreamBaseUrlFor(config: Config, options: DepsOptions = {}): string {
  return config.upstreamBaseUrl ?? options.upstreamBaseUrl ?? `http://127.0.0.1:${config.sandboxPort}/v21.0`;
}

/**
 * Redis holds only rate-limit counters, so it must never slow a request down: no offline queue,
 * reconnection in the background, and a 50 ms deadline on the request path. That deadline is
 * enforced by the caller (withDeadline in rate-limit.ts), which does not mistake a busy event loop
 * for a slow Redis; ioredis's own commandTimeout fires in that case, so it is only a backstop here.
 *
 * `firstConnection` waits (bounded by firstConnectionMs) for the first connection, so a freshly
 * started process counts its first requests instead of serving them uncounted while Redis is still
 * connecting. It never fails: a Redis that is unavailable at start is handled like one that goes
 * down later (fail-open), told in one warning line naming REDIS_URL.
 */
export async function connectRedis(url: string, logger: Logger, firstConnectionMs = 500): Promise<{ redis: Redis; firstConnection: Promise<void> }> {
  // Loaded only here: without REDIS_URL the client is never needed (a shorter cold start).
  const { Redis } = await import('ioredis');
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    commandTimeout: 1000,
    maxRetriesPerRequest: 0,
    connectTimeout: 200,
    // Concurrent requests' counter scripts share one write to the socket.
    enableAutoPipelining: true,
    retryStrategy: (times) => Math.min(times * 100, 1000),
  });
  let starting = true;
  let lastError = '';
  let lastLogged = 0;
  redis.on('error', (err) => {
    lastError = err.message;
    // Errors of the start are told once, below, when the wait for the first connection ends.
    if (starting || Date.now() - lastLogged <= 10_000) return;
    lastLogged = Date.now();
    logger.warn({ err: err.message }, 'redis unavailable; rate limiting is suspended until it returns');
  });
  const firstConnection = readyWithin(redis, firstConnectionMs).then((ready) => {
    starting = false;
    if (ready) return;
    lastLogged = Date.now();
    const reason = lastError || `no connection within ${firstConnectionMs} ms`;
    logger.warn(`REDIS_URL: Redis at ${redis.options.host}:${redis.options.port} is unavailable (${reason}); starting without it: rate limiting is suspended until it connects`);
  });
  return { redis, firstConnection };
}

function readyWithin(redis: Redis, timeoutMs: number): Promise<boolean> {
  if (redis.status === 'ready') return Promise.resolve(true);
  return new Promise((resolve) => {
    const done = () => { clearTimeout(timer); redis.off('ready', done); resolve(redis.status === 'ready'); };
    const timer = setTimeout(done, timeoutMs);
    redis.once('ready', done);
  });
}

export async function createDeps(config: Config, logger: Logger = createLogger(config.logLevel), options: DepsOptions = {}): Promise<Deps> {
  const database = await (options.database ?? openDatabase(config));
  const db = database.db;
  const liveness = await startProcessLiveness({ databaseUrl: config.databaseUrl, db, logger });
  const connected = config.redisUrl ? await connectRedis(config.redisUrl, logger) : null;
  const redis = connected?.redis ?? null;
  const metrics = new Metrics({ role: config.role });
  metrics.watchWebhookBacklog(() => readWithin(db, SCRAPE_READ_MS, webhookBacklog));
  metrics.watchCampaignQueue(() => readWithin(db, SCRAPE_READ_MS, campaignQueueDepth));
  const upstream = createUpstreamClient({
    baseUrl: upstreamBaseUrlFor(config, options), timeoutMs: config.upstreamTimeoutMs,
    onCall: (operation, result, seconds) => metrics.upstreamRequests.observe({ operation, result }, seconds),
  });
  // Made once per DATA_DIR (about 1.4 s, loading the X.509 library), then only read.
  const devCa = config.webhookDevCa ? await ensureDevCa(config.dataDir) : undefined;
  const webhookSender = new WebhookSender({
    timeoutMs: config.webhookTimeoutMs, extraCaFile: config.webhookExtraCaFile, devCaFile: devCa?.caFile, allowPrivateNetworks: config.webhookAllowPrivateNetworks,
    maxConnectionsPerOrigin: config.webhookConcurrency,
    onAttempt: (result, seconds) => metrics.webhookAttempts.observe({ result }, seconds),
  });
  const authenticator = new ApiKeyAuthenticator(db, Math.min(config.authCacheMs, 1000));
  await connected?.firstConnection;
  const templateSync = new TemplateStatusSync(db, upstream, config.secretsKey, { intervalMs: config.templatePollIntervalMs, batch: config.templatePollBatch }, logger);
  const pacer = new SendPacer(redis, { horizonMs: config.pacingHorizonMs, recoveryMs: config.pacingRecoveryMs });
  const rateCards = new RateCards(db, config.rateCardCacheMs);
  const callbacks = new CallbacksService(db, templateSync, logger, undefined, rateCards);
  // Failures by callback mean what the same code answered at send time means (src/upstream/outcomes.ts).
  const retryPolicy = { maxAttempts: config.campaignMaxAttempts, deferMs: config.campaignDeferMs, deferAttempts: config.campaignDeferAttempts };
  callbacks.onStatusesReceived((tx, tenantId, updates) => settleCallbackFailures(tx, tenantId, updates, retryPolicy));
  // Status callbacks of campaign messages move their recipients and the campaign's stats.
  callbacks.onStatusesApplied((tx, _tenantId, applied) => campaignQueue.applyStatuses(tx, applied.filter((a) => a.campaignId).map((a) => ({
    id: a.messageRowId, status: a.status, wamid: a.upstreamMessageId, code: a.error?.code ?? null, title: a.error?.title ?? null,
  }))));
  // A failure because the user stopped marketing messages (131050) opts the contact out.
  callbacks.onStatusesApplied((tx, tenantId, applied) => optOutOnMarketingRefusals(tx, tenantId, applied.flatMap((a) => (a.error ? [{ phone: a.to, code: a.error.code, at: a.timestamp }] : [])))
    .then(() => undefined));
  const media = new MediaService(db, new LocalDiskStorage(join(config.dataDir, 'media')), upstream, config.mediaUpstreamTtlMs);
  return {
    config,
    logger,
    metrics,
    database,
    db,
    liveness,
    redis,
    rateCounter: redis ? new RedisRateCounter(redis) : new MemoryRateCounter(),
    authenticator,
    idempotency: new IdempotencyStore(db, liveness, config.idempotencyTtlMs, config.idempotencyLockMs, config.secretsKey),
    admin: new AdminService(db, config.secretsKey, () => authenticator.forgetAll(), upstream, logger),
    contacts: new ContactsService(db),
    upstream,
    contactActivity: new ContactActivityService(db),
    webhookSender,
    webhooks: new WebhooksService(db, { secretsKey: config.secretsKey, allowPrivateNetworks: config.webhookAllowPrivateNetworks }, webhookSender),
    templates: new TemplatesService(db, upstream, config.secretsKey, logger),
    templateSync,
    media,
    messages: new MessagesService(db, upstream, media, config.secretsKey, logger, config.sendReconcileMs, pacer),
    callbacks,
    pacer,
    campaigns: new CampaignsService(db, rateCards, config.messagingLimitWindowMs, config.publicBaseUrl),
    rateCards,
    campaignRecipients: new CampaignRecipients(db),
    clicks: new ClicksService(db, config.secretsKey),
    async close() {
      redis?.disconnect();
      await webhookSender.close();
      await upstream.close();
      await liveness.close();
      await database.close();
    },
  };
}
