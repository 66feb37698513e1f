import { Redis } from 'ioredis';
import type { Logger } from 'pino';
import type { Config } from './config.ts';
import { openDatabase, type Database, type Db } from './db/database.ts';
import { ApiKeyAuthenticator } from './http/auth.ts';
import { IdempotencyStore } from './http/idempotency.ts';
import { MemoryRateCounter, RedisRateCounter, type RateCounter } from './http/rate-limit.ts';
import { createLogger } from './logger.ts';
import { AdminService } from './modules/admin/admin.service.ts';
import { ContactsService } from './modules/contacts/contacts.service.ts';
import { ContactActivityService } from './modules/contacts/activity.service.ts';
import { WebhookSender } from './modules/webhooks/webhooks.sender.ts';
import { WebhooksService } from './modules/webhooks/webhooks.service.ts';
import { createUpstreamClient } from './upstream/client.ts';
import type { UpstreamClient } from './upstream/types.ts';

export interface Deps {
  config: Config;
  logger: Logger;
  database: Database;
  db: Db;
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
  close(): Promise<void>;
}

export interface DepsOptions {
  /** Graph base URL to use when UPSTREAM_BASE_URL is unset (the in-process sandbox's). */
  upstreamBaseUrl?: string;
}

/** Where the upstream is: configured, given by the caller (in-process sandbox), or the sandbox's default port. */
export function upstreamBaseUrlFor(config: Config, options: DepsOptions = {}): string {
  return config.upstreamBaseUrl ?? options.upstreamBaseUrl ?? `http://127.0.0.1:${config.sandboxPort}/v21.0`;
}

/**
 * Redis holds only rate-limit counters, so it must never slow a request down: no offline queue,
 * a 50 ms command timeout, and reconnection in the background.
 */
export function connectRedis(url: string, logger: Logger): Redis {
  const redis = new Redis(url, {
    enableOfflineQueue: false,
    commandTimeout: 50,
    maxRetriesPerRequest: 0,
    connectTimeout: 200,
    // Concurrent requests' counter scripts share one write to the socket.
    enableAutoPipelining: true,
    retryStrategy: (times) => Math.min(times * 100, 1000),
  });
  let lastLogged = 0;
  redis.on('error', (err) => {
    if (Date.now() - lastLogged > 10_000) {
      lastLogged = Date.now();
      logger.warn({ err: err.message }, 'redis unavailable; rate limiting is suspended until it returns');
    }
  });
  return redis;
}

export async function createDeps(config: Config, logger: Logger = createLogger(config.logLevel), options: DepsOptions = {}): Promise<Deps> {
  const database = await openDatabase(config);
  const db = database.db;
  const redis = config.redisUrl ? connectRedis(config.redisUrl, logger) : null;
  const upstream = createUpstreamClient({ baseUrl: upstreamBaseUrlFor(config, options), timeoutMs: config.upstreamTimeoutMs });
  const webhookSender = new WebhookSender({
    timeoutMs: config.webhookTimeoutMs, extraCaFile: config.webhookExtraCaFile, allowPrivateNetworks: config.webhookAllowPrivateNetworks,
  });
  return {
    config,
    logger,
    database,
    db,
    redis,
    rateCounter: redis ? new RedisRateCounter(redis) : new MemoryRateCounter(),
    authenticator: new ApiKeyAuthenticator(db, Math.min(config.authCacheMs, 1000)),
    idempotency: new IdempotencyStore(db, config.idempotencyTtlMs, config.idempotencyLockMs),
    admin: new AdminService(db, config.secretsKey),
    contacts: new ContactsService(db),
    upstream,
    contactActivity: new ContactActivityService(db),
    webhookSender,
    webhooks: new WebhooksService(db, { secretsKey: config.secretsKey, allowPrivateNetworks: config.webhookAllowPrivateNetworks }, webhookSender),
    async close() {
      redis?.disconnect();
      await webhookSender.close();
      await upstream.close();
      await database.close();
    },
  };
}
