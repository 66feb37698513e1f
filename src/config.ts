import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';

export type Role = 'all' | 'api' | 'worker';

export interface Config {
  production: boolean;
  port: number;
  host: string;
  /**
   * The service's public origin as link-tracking templates use it (`<PUBLIC_BASE_URL>/r/{{1}}`);
   * default: the listener's own URL. No trailing slash.
   */
  publicBaseUrl: string;
  /** Where every role serves Prometheus `GET /metrics` (on HOST, no auth); undefined: no such listener. */
  metricsPort: number | undefined;
  role: Role;
  databaseUrl: string | undefined;
  /** How long a request waits for a database connection (a new one, or a free pool slot) before failing with a retryable 503. */
  databaseConnectTimeoutMs: number;
  /**
   * How long a start waits for a database that cannot be reached (down, restarting, failing over)
   * before it gives up; a failure a retry cannot fix (authentication, unknown database) stops at once.
   */
  databaseStartTimeoutMs: number;
  dataDir: string;
  redisUrl: string | undefined;
  adminToken: string;
  secretsKey: Buffer;
  upstreamBaseUrl: string | undefined;
  upstreamAppSecret: string;
  upstreamVerifyToken: string;
  upstreamTimeoutMs: number;
  sandboxPort: number;
  sandboxReviewMs: number;
  /** Interface the built-in sandbox binds (loopback unless SANDBOX_HOST says otherwise). */
  sandboxHost: string;
  /** Where a standalone sandbox (`npm run sandbox`) posts callbacks; the in-process one uses this service's port. */
  sandboxCallbackUrl: string | undefined;
  rateLimitPerMinute: number;
  webhookRetryDelaysMs: number[];
  webhookTimeoutMs: number;
  webhookExtraCaFile: string | undefined;
  webhookAllowPrivateNetworks: boolean;
  /**
   * Outside production: make a development CA under DATA_DIR/dev-ca (and a certificate it signed for
   * localhost) and trust it for deliveries, so a local HTTPS receiver (`msvc listen`) is reachable.
   * Never in production, whatever WEBHOOK_DEV_CA says.
   */
  webhookDevCa: boolean;
  /** Whether this worker process runs the webhook deliverer (default true). */
  webhookDeliveryEnabled: boolean;
  /** A claimed delivery stays invisible to other workers this long; longer than the timeout so only a dead worker's claims expire. */
  webhookLeaseMs: number;
  /** Idle poll period of the deliverer (commit-to-delivery latency when idle is at most this). */
  webhookPollMs: number;
  /** Attempts in flight per worker process. */
  webhookConcurrency: number;
  /** Attempts in flight per endpoint (a slow endpoint holds at most this many slots). */
  webhookEndpointConcurrency: number;
  /** Slots retries may use; the rest is kept for first attempts so dead endpoints cannot starve fresh traffic. */
  webhookRetryConcurrency: number;
  openapiEnabled: boolean;
  logLevel: string;
  seedDemo: boolean;
  workerPollMs: number;
  trustProxy: boolean;
  /** Time to receive a whole request, its headers, and how long an idle keep-alive connection stays open. */
  httpRequestTimeoutMs: number;
  httpHeadersTimeoutMs: number;
  httpKeepAliveTimeoutMs: number;
  /** How long an authenticated key may be served from the in-process cache (revocation bound). */
  authCacheMs: number;
  /** A running Idempotency-Key claim older than this is treated as abandoned (crashed request). */
  idempotencyLockMs: number;
  idempotencyTtlMs: number;
  /** Fallback template-status poller: minimum time between two polls of one pending template. */
  templatePollIntervalMs: number;
  templatePollBatch: number;
  /** Whether this worker process runs the campaign scheduler and dispatcher (default true). */
  campaignDispatchEnabled: boolean;
  /** Campaign dispatcher: idle poll, claim lease, batches in flight, attempts on retryable errors. */
  campaignPollMs: number;
  campaignLeaseMs: number;
  /** How long after its claim a campaign send may still be issued (see campaignWorkerConfig). */
  campaignIssueWithinMs: number;
  /** A send whose outcome is unknown (crash, timeout) is sent again only if no callback told of it within this window. */
  sendReconcileMs: number;
  campaignMaxBatches: number;
  campaignMaxAttempts: number;
  campaignDeferMs: number;
  campaignDeferAttempts: number;
  campaignHoldMs: number;
  /** How long a process prices with the rate card it read before reading it again (a PUT through it is seen at once). */
  rateCardCacheMs: number;
  /** The moving window of the portfolio's messaging limit (Meta: 24 h); shorter in tests. */
  messagingLimitWindowMs: number;
  /** How far ahead a phone number's send slots are handed out; how fast a rate halved by 130429 recovers. */
  pacingHorizonMs: number;
  pacingRecoveryMs: number;
  /** How long an upstream media id is reused before the file is uploaded again (upstream keeps it 30 days). */
  mediaUpstreamTtlMs: number;
}

export class ConfigError extends Error {}

type Env = Record<string, string | undefined>;

function int(env: Env, name: string, fallback: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value)) throw new ConfigError(`${name} must be an integer, got "${raw}"`);
  return value;
}

function bool(env: Env, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (['1', 'true', 'yes', 'on'].includes(raw.toLowerCase())) return true;
  if (['0', 'false', 'no', 'off'].includes(raw.toLowerCase())) return false;
  throw new ConfigError(`${name} must be true or false, got "${raw}"`);
}

function intList(env: Env, name: string, fallback: number[]): number[] {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const values = raw.split(',').map((part) => Number(part.trim()));
  if (values.some((v) => !Number.isInteger(v) || v < 0)) {
    throw new ConfigError(`${name} must be a comma-separated list of non-negative integers`);
  }
  return values;
}

const DATABASE_URL_EXAMPLE = 'postgres://user:password@host:5432/database';
const REDIS_URL_EXAMPLE = 'redis://host:6379 or rediss://:password@host:6380/0';
// Neither message quotes the URL: it may hold a password.
const UNPARSABLE = 'it does not parse as a URL (check that the port is a number and that special characters in the user or password are percent-encoded)';

/** The scheme of `raw` when it starts like a URL (`scheme://`), lower-cased; null otherwise. */
function urlScheme(raw: string): string | null {
  return /^([a-z][a-z0-9+.-]*):\/\//i.exec(raw)?.[1].toLowerCase() ?? null;
}

/**
 * pg takes a DATABASE_URL it cannot parse as a URL relative to "postgres://base" (`localhost/db`
 * becomes a connection to a host named "base"), so a malformed one fails here, at once, instead
 * of as a connection error after the start's retries.
 */
function checkDatabaseUrl(raw: string | undefined): string | undefined {
  if (raw === undefined || raw.startsWith('/')) return raw; // pg's unix-socket form: "/var/run/postgresql dbname"
  const scheme = urlScheme(raw);
  if (!scheme) throw new ConfigError(`DATABASE_URL is malformed: it is not a URL (expected ${DATABASE_URL_EXAMPLE})`);
  if (!['postgres', 'postgresql', 'socket'].includes(scheme)) throw new ConfigError(`DATABASE_URL is malformed: the scheme must be postgres:// or postgresql://, got ${scheme}:// (expected ${DATABASE_URL_EXAMPLE})`);
  // As pg reads it: spaces and stray percent signs encoded, and "user@/db" meaning the default host.
  const encoded = / |%[^a-f0-9]|%[a-f0-9][^a-f0-9]/i.test(raw) ? encodeURI(raw).replace(/%25(\d\d)/g, '%$1') : raw;
  if (!URL.canParse(encoded) && !URL.canParse(encoded.replace('@/', '@host/'))) throw new ConfigError(`DATABASE_URL is malformed: ${UNPARSABLE}`);
  return raw;
}

/**
 * ioredis takes what is not a redis:// or rediss:// URL for a host name or a unix socket
 * (`rediss:/oops` is the socket /oops), and a Redis it cannot reach only turns rate limiting off:
 * a malformed REDIS_URL would go unnoticed, so it fails the start here.
 */
function checkRedisUrl(raw: string | undefined): string | undefined {
  if (raw === undefined) return raw;
  const scheme = urlScheme(raw);
  if (scheme !== 'redis' && scheme !== 'rediss') throw new ConfigError(`REDIS_URL is malformed: the scheme must be redis:// or rediss://${scheme ? `, got ${scheme}://` : ''} (expected ${REDIS_URL_EXAMPLE})`);
  if (!URL.canParse(raw)) throw new ConfigError(`REDIS_URL is malformed: ${UNPARSABLE}`);
  const url = new URL(raw);
  if (!url.hostname) throw new ConfigError(`REDIS_URL is malformed: a host is required (expected ${REDIS_URL_EXAMPLE})`);
  if (!/^\/?\d*$/.test(url.pathname)) throw new ConfigError(`REDIS_URL is malformed: the path must be a database number such as /0, got ${url.pathname}`);
  return raw;
}

export function parseSecretsKey(raw: string): Buffer {
  const trimmed = raw.trim();
  const key = /^[0-9a-fA-F]{64}$/.test(trimmed) ? Buffer.from(trimmed, 'hex') : Buffer.from(trimmed, 'base64');
  if (key.length !== 32) throw new ConfigError('SECRETS_KEY must be 32 bytes, as 64 hex characters or base64');
  return key;
}

/** Development secrets are generated once into DATA_DIR so restarts keep decrypting old data. */
function devSecret(dataDir: string, name: string, make: () => string): string {
  const file = join(dataDir, 'dev-secrets.json');
  let secrets: Record<string, string> = {};
  if (existsSync(file)) secrets = JSON.parse(readFileSync(file, 'utf8'));
  if (!secrets[name]) {
    secrets[name] = make();
    mkdirSync(dataDir, { recursive: true });
    writeFileSync(file, JSON.stringify(secrets, null, 2), { mode: 0o600 });
  }
  return secrets[name];
}

function webhookWorkerConfig(env: Env) {
  const timeout = int(env, 'WEBHOOK_TIMEOUT_MS', 10_000);
  const leaseMs = int(env, 'WEBHOOK_LEASE_MS', timeout + 30_000);
  if (leaseMs <= timeout) throw new ConfigError('WEBHOOK_LEASE_MS must be longer than WEBHOOK_TIMEOUT_MS (a live attempt must never lose its claim)');
  const concurrency = int(env, 'WEBHOOK_CONCURRENCY', 64);
  if (concurrency < 1) throw new ConfigError('WEBHOOK_CONCURRENCY must be at least 1');
  const retryConcurrency = int(env, 'WEBHOOK_RETRY_CONCURRENCY', Math.max(1, Math.floor(concurrency / 2)));
  return {
    webhookDeliveryEnabled: bool(env, 'WEBHOOK_DELIVERY_ENABLED', true),
    webhookLeaseMs: leaseMs,
    webhookPollMs: int(env, 'WEBHOOK_POLL_MS', 100),
    webhookConcurrency: concurrency,
    webhookEndpointConcurrency: Math.max(1, int(env, 'WEBHOOK_ENDPOINT_CONCURRENCY', 8)),
    webhookRetryConcurrency: Math.max(1, Math.min(retryConcurrency, concurrency)),
  };
}

function campaignWorkerConfig(env: Env) {
  const upstreamTimeout = int(env, 'UPSTREAM_TIMEOUT_MS', 10_000);
  const horizon = int(env, 'PACING_HORIZON_MS', 1000);
  const leaseMs = int(env, 'CAMPAIGN_LEASE_MS', horizon + upstreamTimeout + 30_000);
  if (leaseMs <= horizon + upstreamTimeout) throw new ConfigError('CAMPAIGN_LEASE_MS must be longer than PACING_HORIZON_MS + UPSTREAM_TIMEOUT_MS (a live send must never lose its claim)');
  return {
    campaignDispatchEnabled: bool(env, 'CAMPAIGN_DISPATCH_ENABLED', true),
    campaignPollMs: int(env, 'CAMPAIGN_POLL_MS', 100),
    campaignLeaseMs: leaseMs,
    // A claimed send waits for its slot (within the horizon), then for a place in the number's
    // window; one not issued by then goes back to pending, so that it and its upstream call end
    // inside its lease, with half the lease's spare time left for clocks and scheduling.
    campaignIssueWithinMs: horizon + Math.floor((leaseMs - horizon - upstreamTimeout) / 2),
    sendReconcileMs: int(env, 'SEND_RECONCILE_MS', 60_000),
    campaignMaxBatches: Math.max(1, int(env, 'CAMPAIGN_MAX_BATCHES', 64)),
    campaignMaxAttempts: Math.max(1, int(env, 'CAMPAIGN_MAX_ATTEMPTS', 5)),
    // Meta's per-user marketing cap (131049): try again no sooner than a day later, a few times.
    campaignDeferMs: Math.max(1, int(env, 'CAMPAIGN_DEFER_MS', 86_400_000)),
    campaignDeferAttempts: Math.max(0, int(env, 'CAMPAIGN_DEFER_ATTEMPTS', 3)),
    // Template pacing holds a message for hours; one never released (a lost callback) counts as sent after this.
    campaignHoldMs: Math.max(1, int(env, 'CAMPAIGN_HOLD_MS', 172_800_000)),
    rateCardCacheMs: Math.max(0, int(env, 'RATE_CARD_CACHE_MS', 5000)),
    messagingLimitWindowMs: Math.max(1000, int(env, 'MESSAGING_LIMIT_WINDOW_MS', 86_400_000)),
    pacingHorizonMs: horizon,
    pacingRecoveryMs: int(env, 'PACING_RECOVERY_MS', 5000),
  };
}

function httpTimeouts(env: Env) {
  // A whole request, uploads included (2 minutes is 100 MB at about 7 Mbit/s); headers arrive in one packet.
  const request = int(env, 'HTTP_REQUEST_TIMEOUT_MS', 120_000);
  const headers = int(env, 'HTTP_HEADERS_TIMEOUT_MS', Math.min(10_000, request));
  if (request < 1 || headers < 1 || headers > request) throw new ConfigError('HTTP_HEADERS_TIMEOUT_MS and HTTP_REQUEST_TIMEOUT_MS must be positive, the headers timeout no longer than the request timeout');
  return {
    httpRequestTimeoutMs: request,
    httpHeadersTimeoutMs: headers,
    // Longer than the usual 60 s idle timeout of load balancers, so they never reuse a connection we just closed.
    httpKeepAliveTimeoutMs: int(env, 'HTTP_KEEP_ALIVE_TIMEOUT_MS', 72_000),
  };
}

/** PUBLIC_BASE_URL: an http(s) origin (a path prefix allowed), without a trailing slash. */
function publicBaseUrl(env: Env, port: number): string {
  const raw = env.PUBLIC_BASE_URL?.trim();
  if (!raw) return `http://${env.HOST && env.HOST !== '0.0.0.0' && env.HOST !== '::' ? env.HOST : 'localhost'}:${port}`;
  let url: URL;
  try { url = new URL(raw); } catch { throw new ConfigError(`PUBLIC_BASE_URL must be an http(s) URL, got "${raw}"`); }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new ConfigError(`PUBLIC_BASE_URL must be an http(s) URL, got "${raw}"`);
  return raw.replace(/\/+$/, '');
}

export function loadConfig(env: Env = process.env): Config {
  const production = env.NODE_ENV === 'production';
  if (production) {
    const missing = ['DATABASE_URL', 'ADMIN_TOKEN', 'SECRETS_KEY', 'UPSTREAM_BASE_URL', 'UPSTREAM_APP_SECRET', 'UPSTREAM_VERIFY_TOKEN']
      .filter((name) => !env[name]);
    if (missing.length > 0) {
      throw new ConfigError(`NODE_ENV=production requires ${missing.join(', ')} to be set (no embedded database, generated secrets or sandbox upstream in production)`);
    }
  }
  const role = (env.ROLE ?? 'all') as Role;
  if (!['all', 'api', 'worker'].includes(role)) throw new ConfigError(`ROLE must be all, api or worker, got "${role}"`);
  const dataDir = resolve(env.DATA_DIR || './data');
  const port = int(env, 'PORT', 8080);
  const hex = (bytes: number) => () => randomBytes(bytes).toString('hex');

  return {
    production,
    port,
    // The embedded default prints an admin token and serves a demo tenant: loopback unless HOST widens it.
    host: env.HOST || (env.DATABASE_URL ? '0.0.0.0' : '127.0.0.1'),
    publicBaseUrl: publicBaseUrl(env, port),
    role,
    metricsPort: env.METRICS_PORT ? int(env, 'METRICS_PORT', 0) : undefined,
    databaseUrl: checkDatabaseUrl(env.DATABASE_URL || undefined),
    databaseConnectTimeoutMs: int(env, 'DATABASE_CONNECT_TIMEOUT_MS', 5000),
    databaseStartTimeoutMs: int(env, 'DATABASE_START_TIMEOUT_MS', 30_000),
    dataDir,
    redisUrl: checkRedisUrl(env.REDIS_URL || undefined),
    adminToken: env.ADMIN_TOKEN || devSecret(dataDir, 'ADMIN_TOKEN', () => `adm_${randomBytes(24).toString('hex')}`),
    secretsKey: parseSecretsKey(env.SECRETS_KEY || devSecret(dataDir, 'SECRETS_KEY', hex(32))),
    upstreamBaseUrl: env.UPSTREAM_BASE_URL || undefined,
    upstreamAppSecret: env.UPSTREAM_APP_SECRET || devSecret(dataDir, 'UPSTREAM_APP_SECRET', hex(16)),
    upstreamVerifyToken: env.UPSTREAM_VERIFY_TOKEN || devSecret(dataDir, 'UPSTREAM_VERIFY_TOKEN', hex(12)),
    upstreamTimeoutMs: int(env, 'UPSTREAM_TIMEOUT_MS', 10_000),
    sandboxPort: int(env, 'SANDBOX_PORT', port === 0 ? 0 : port + 1),
    sandboxReviewMs: int(env, 'SANDBOX_REVIEW_MS', 1500),
    sandboxHost: env.SANDBOX_HOST || '127.0.0.1',
    sandboxCallbackUrl: env.SANDBOX_CALLBACK_URL || undefined,
    rateLimitPerMinute: int(env, 'RATE_LIMIT_PER_MINUTE', 120),
    webhookRetryDelaysMs: intList(env, 'WEBHOOK_RETRY_DELAYS_MS', [60_000, 300_000, 1_800_000, 7_200_000, 21_600_000]),
    webhookTimeoutMs: int(env, 'WEBHOOK_TIMEOUT_MS', 10_000),
    webhookExtraCaFile: env.WEBHOOK_EXTRA_CA_FILE || undefined,
    webhookAllowPrivateNetworks: bool(env, 'WEBHOOK_ALLOW_PRIVATE_NETWORKS', !production),
    webhookDevCa: !production && bool(env, 'WEBHOOK_DEV_CA', true),
    ...webhookWorkerConfig(env),
    openapiEnabled: bool(env, 'OPENAPI_ENABLED', !production),
    logLevel: env.LOG_LEVEL || 'info',
    seedDemo: bool(env, 'SEED_DEMO', !production),
    workerPollMs: int(env, 'WORKER_POLL_MS', 500),
    trustProxy: bool(env, 'TRUST_PROXY', false),
    ...httpTimeouts(env),
    authCacheMs: int(env, 'AUTH_CACHE_MS', 1000),
    idempotencyLockMs: int(env, 'IDEMPOTENCY_LOCK_MS', 60_000),
    idempotencyTtlMs: int(env, 'IDEMPOTENCY_TTL_MS', 24 * 3600 * 1000),
    templatePollIntervalMs: int(env, 'TEMPLATE_POLL_INTERVAL_MS', 300_000),
    templatePollBatch: int(env, 'TEMPLATE_POLL_BATCH', 50),
    ...campaignWorkerConfig(env),
    // A day short of the upstream's 30 days, so an id never expires between our check and the send.
    mediaUpstreamTtlMs: int(env, 'MEDIA_UPSTREAM_TTL_MS', 29 * 24 * 3600 * 1000),
  };
}
