import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import type { Redis } from 'ioredis';
import { sql } from 'kysely';
import type { Deps } from './deps.ts';
import { AppError, validationError } from './http/errors.ts';
import { handleClientError } from './http/client-error.ts';
import { installErrorHandling, sendError } from './http/error-handler.ts';
import { installOpenApi } from './http/openapi.ts';
import { installPublicApiHooks } from './http/public-api.ts';
import { TIMED_OUT, withDeadline } from './http/rate-limit.ts';
import { installValidators } from './http/validation.ts';
import { requestIdFor } from './http/request-id.ts';
import { serializersBuiltAtFirstUse } from './http/serialization.ts';
import { MAX_JSON_DEPTH, assertStorableText, nestsDeeperThan } from './http/storable-text.ts';
import { adminRoutes } from './modules/admin/admin.routes.ts';
import { campaignsRoutes } from './modules/campaigns/campaigns.routes.ts';
import { clickRoutes } from './modules/clicks/clicks.routes.ts';
import { callbackRoutes } from './modules/callbacks/callbacks.routes.ts';
import { contactActivityRoutes } from './modules/contacts/activity.routes.ts';
import { contactsRoutes } from './modules/contacts/contacts.routes.ts';
import { mediaRoutes } from './modules/media/media.routes.ts';
import { messagesRoutes } from './modules/messages/messages.routes.ts';
import { templatesRoutes } from './modules/templates/templates.routes.ts';
import { webhooksRoutes } from './modules/webhooks/webhooks.routes.ts';

export const PUBLIC_PREFIX = '/api/v1/public';

export async function buildApp(deps: Deps): Promise<FastifyInstance> {
  const base = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    genReqId: requestIdFor,
    requestIdHeader: false,
    // Access logs are left to the proxy; errors are logged once by the error handler, with the request id.
    logController: new LogController({ requestIdLogLabel: 'request_id', disableRequestLogging: true }),
    trustProxy: deps.config.trustProxy,
    bodyLimit: 1024 * 1024,
    // A declared but unsent body (or headers) cannot hold a socket: the request is answered 408 and closed.
    requestTimeout: deps.config.httpRequestTimeoutMs,
    keepAliveTimeout: deps.config.httpKeepAliveTimeoutMs,
    http: {
      headersTimeout: deps.config.httpHeadersTimeoutMs,
      // Node checks the two timeouts above on this period (30 s by default, which would stretch them).
      connectionsCheckingInterval: Math.max(50, Math.min(1000, Math.floor(deps.config.httpHeadersTimeoutMs / 4))),
    },
    // What the HTTP parser rejects before routing: the envelope with an X-Request-Id too.
    clientErrorHandler: handleClientError,
    schemaController: { compilersFactory: { buildSerializer: serializersBuiltAtFirstUse() } },
    // Our own 503 below, in the envelope (Fastify's would not be).
    return503OnClosing: false,
    // URLs the router rejects before any route or hook runs: answer them with the envelope too.
    // An over-long path parameter cannot name a resource (ids are UUIDs), so it is a 404.
    frameworkErrors: (error, _request, reply) => {
      reply.header('x-request-id', reply.request.id);
      if (error.code === 'FST_ERR_MAX_PARAM_LENGTH') return sendError(reply, new AppError('NOT_FOUND', 'Resource not found'));
      return sendError(reply, new AppError('VALIDATION_ERROR', 'Malformed URL'));
    },
  });
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  const routes: { method: string; pattern: RegExp }[] = [];
  app.addHook('onRoute', (route) => {
    const pattern = new RegExp('^' + route.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+') + '/?$');
    for (const method of [route.method].flat()) routes.push({ method, pattern });
  });
  installErrorHandling(base, () => routes);
  // Between SIGTERM and the last in-flight response, requests arriving on open connections are
  // refused with a retryable 503 (new connections are no longer accepted at all).
  let closing = false;
  base.addHook('preClose', async () => { closing = true; });
  base.addHook('onRequest', async (_request, reply) => {
    if (!closing) return;
    reply.header('connection', 'close').header('retry-after', '1');
    throw new AppError('INTERNAL_ERROR', 'The service is shutting down; retry the request', {}, 503);
  });
  installValidators(base);
  // Parsed JSON bodies of every route (raw bodies, the upstream callbacks' bytes, are checked where parsed).
  // Before validation, fingerprinting or any walk of the body: a body nested past any sensible depth
  // would overflow the stack of whatever recursive code reads it next.
  base.addHook('preValidation', async (request) => {
    if (Buffer.isBuffer(request.body)) return;
    if (nestsDeeperThan(request.body)) throw validationError(`The body nests objects or arrays deeper than ${MAX_JSON_DEPTH} levels`, ['body'], null, 'too_deep');
  });
  // After validation: text the database cannot store, anywhere in the body, is a 400 naming the field.
  base.addHook('preHandler', async (request) => {
    if (Buffer.isBuffer(request.body) || request.routeOptions.config.validatesItems) return;
    assertStorableText(request.body, ['body']);
  });
  app.addHook('onResponse', async (request, reply) => {
    deps.metrics.httpRequests.observe(
      { method: request.method, route: request.routeOptions.url ?? 'unmatched', status_code: String(reply.statusCode) },
      reply.elapsedTime / 1000,
    );
  });
  app.addHook('onSend', async (request, reply) => {
    // An idempotent replay already carries the id of the request whose response it repeats.
    if (!reply.hasHeader('x-request-id')) reply.header('x-request-id', request.id);
  });

  // /openapi.json, /admin/v1/openapi.json and the explorer at /docs.
  if (deps.config.openapiEnabled) await installOpenApi(app, { adminToken: deps.config.adminToken });

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    const [database, redis] = await Promise.all([
      sql`SELECT 1`.execute(deps.db).then(() => 'ok', () => 'unavailable'),
      deps.redis ? redisHealth(deps.redis) : 'not_configured',
    ]);
    return reply.code(database === 'ok' ? 200 : 503).send({ status: database === 'ok' ? 'ready' : 'not_ready', database, redis });
  });

  await app.register(adminRoutes, { prefix: '/admin/v1', admin: deps.admin, adminToken: deps.config.adminToken, metrics: deps.metrics, rateCards: deps.rateCards });

  await app.register(async (api) => {
    installPublicApiHooks(api, {
      authenticator: deps.authenticator,
      rateCounter: deps.rateCounter,
      idempotency: deps.idempotency,
      rateLimitPerMinute: deps.config.rateLimitPerMinute,
      onUncounted: () => deps.metrics.uncountedRequests.inc(),
    });
    await api.register(contactsRoutes, { contacts: deps.contacts });
    await api.register(contactActivityRoutes, { activity: deps.contactActivity });
    await api.register(webhooksRoutes, { webhooks: deps.webhooks });
    await api.register(templatesRoutes, { templates: deps.templates });
    await api.register(messagesRoutes, { messages: deps.messages });
    await api.register(mediaRoutes, { media: deps.media });
    await api.register(campaignsRoutes, { campaigns: deps.campaigns, recipients: deps.campaignRecipients });
  }, { prefix: PUBLIC_PREFIX });

  // Campaign link clicks (GET /r/{token}): outside the public API, the token is the credential.
  await app.register(clickRoutes, { clicks: deps.clicks });

  // The upstream's callbacks: outside the public API, authenticated by X-Hub-Signature-256.
  await app.register(callbackRoutes, {
    prefix: '/upstream/webhook', callbacks: deps.callbacks, appSecret: deps.config.upstreamAppSecret, verifyToken: deps.config.upstreamVerifyToken,
  });

  return base;
}

/**
 * Redis holds only rate-limit counters and the service serves without it, so it never fails
 * readiness, and a hung Redis (stopped, partitioned) must not slow the probe either: a ping not
 * answered within 100 ms reports it degraded.
 */
async function redisHealth(redis: Redis): Promise<'ok' | 'degraded' | 'unavailable'> {
  if (redis.status !== 'ready') return 'unavailable';
  const pong = await withDeadline(redis.ping(), 100).catch(() => null);
  if (pong === TIMED_OUT) return 'degraded';
  return pong === 'PONG' ? 'ok' : 'unavailable';
}
