import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { faultPoint } from '../faults.ts';
import type { Feature } from '../modules/tenants/plans.ts';
import type { ApiKeyAuthenticator, AuthContext } from './auth.ts';
import { AppError } from './errors.ts';
import { handleError, sendError } from './error-handler.ts';
import { IdempotencyStore, idempotencyScope, shouldKeepResponse, type IdempotencyScope } from './idempotency.ts';
import { checkRateLimit, currentRateLimit, rateLimitHeaders, type RateCounter } from './rate-limit.ts';

declare module 'fastify' {
  interface FastifyContextConfig {
    /** Scopes the API key needs for this route (public API routes must declare them). */
    scopes?: string[];
    /** Plan feature the tenant needs beyond access_api. */
    feature?: Feature;
    /** Creating or sending POST: honours Idempotency-Key. */
    idempotent?: boolean;
    /** The route reports bad items of its body one by one (unstorable text included). */
    validatesItems?: boolean;
    /**
     * Reads a body the JSON parser does not (multipart) into `request.body` after authentication,
     * so that the Idempotency-Key fingerprint covers it.
     */
    readBody?: (request: FastifyRequest) => Promise<void>;
  }
  interface FastifyRequest {
    auth: AuthContext;
    /** The key's tenant once identified, also when the request is then refused (403). */
    caller?: AuthContext;
    idempotencyKey?: string;
    /** The claimed key as services see it (completed inside the write's transaction). */
    idempotencyScope?: IdempotencyScope;
    /** The request's outcome at the upstream is unknown: its key is kept for the outcome (AppError.outcomeUnknown). */
    outcomeUnknown?: boolean;
    /** Set once the request has been counted against the tenant's windows (never twice). */
    rateCounted: boolean;
  }
}

export interface PublicApiDeps {
  authenticator: ApiKeyAuthenticator;
  rateCounter: RateCounter;
  idempotency: IdempotencyStore;
  rateLimitPerMinute: number;
  /** Told of each request allowed uncounted because the rate counter did not answer. */
  onUncounted?: () => void;
}

/**
 * Hooks every public route goes through, in the order the spec implies: authenticate and
 * authorise (nothing counted on 401/403), replay an Idempotency-Key (replays are free), then count
 * the request against the tenant's windows (400 and 404 results still count).
 */
export function installPublicApiHooks(app: FastifyInstance, deps: PublicApiDeps) {
  app.decorateRequest('auth', null as unknown as AuthContext);

  app.addHook('onRequest', async (request) => {
    const config = request.routeOptions.config;
    const record = await deps.authenticator.identify(request);
    request.caller = record.auth;
    request.auth = deps.authenticator.authorize(request, record, config.scopes ?? [], config.feature);
  });

  app.decorateRequest('rateCounted', false);

  // Handlers of idempotent routes run inside their key's scope, so the services they call can
  // complete the key in the same transaction as their write.
  app.addHook('onRoute', (route) => {
    if (route.config?.idempotent !== true) return;
    const handler = route.handler;
    route.handler = function (this: unknown, request, reply) {
      const scope = request.idempotencyScope;
      return scope ? idempotencyScope.run(scope, () => handler.call(this as never, request, reply)) : handler.call(this as never, request, reply);
    };
  });

  app.addHook('preValidation', async (request, reply) => {
    const { idempotent, readBody } = request.routeOptions.config;
    const keyed = idempotent === true && request.headers['idempotency-key'] !== undefined;
    // A body the Idempotency-Key fingerprint must cover is read first; otherwise a request refused
    // by the rate limit is not read at all.
    if (readBody && keyed) await readBody(request);
    if (keyed && (await replayIdempotent(request, reply, deps))) return reply;
    if (await countRequest(request, reply, deps)) return reply;
    if (readBody && !keyed) await readBody(request);
  });

  // An authenticated request that fails before preValidation (malformed JSON, body too large,
  // unsupported type) or in it (Idempotency-Key conflict) is a 4xx that still counts.
  // A 403 spends no budget but, like every response of a known tenant, shows where it stands.
  app.setErrorHandler(async (error, request, reply) => {
    if (request.auth && !request.rateCounted && (await countRequest(request, reply, deps))) return reply;
    if (!request.auth && request.caller) await showRateLimit(request.caller, reply, deps);
    if (error instanceof AppError && error.outcomeUnknown) request.outcomeUnknown = true;
    return handleError(error as Parameters<typeof handleError>[0], request, reply);
  });

  app.addHook('onSend', async (request, reply, payload) => {
    const key = request.idempotencyKey;
    if (!key) return payload;
    // Crash drills stop here: the handler's write has committed, the response is not out yet.
    await faultPoint('write:after-commit');
    request.idempotencyKey = undefined;
    if (request.outcomeUnknown) {
      await deps.idempotency.markUnknown(request.auth.tenantId, key);
      return payload;
    }
    const completed = request.idempotencyScope?.completed === true;
    // Completed with the write: the stored response is this one (same serialiser), and a failure
    // after the commit must not release a key whose write happened.
    if (completed && (reply.statusCode < 300 || reply.statusCode >= 500)) return payload;
    if (shouldKeepResponse(reply.statusCode) && typeof payload === 'string') {
      await deps.idempotency.complete(request.auth.tenantId, key, reply.statusCode, { 'content-type': String(reply.getHeader('content-type') ?? 'application/json'), 'x-request-id': request.id }, payload);
    } else {
      await deps.idempotency.release(request.auth.tenantId, key);
    }
    return payload;
  });

  // A client that goes away does not release its key: the handler runs on (a send may be on its way
  // to the upstream), and onSend settles the key when it ends. A process that dies leaves its key
  // to be taken over (process liveness).
}

/** Counts the request once; sends the 429 and answers true when a window is spent. */
async function countRequest(request: FastifyRequest, reply: FastifyReply, deps: PublicApiDeps): Promise<boolean> {
  request.rateCounted = true;
  const result = await checkRateLimit(deps.rateCounter, request.auth.tenantId, deps.rateLimitPerMinute, request.auth.apiRequestsDaily);
  if (!result) {
    deps.onUncounted?.();
    return false;
  }
  reply.headers(rateLimitHeaders(result));
  if (result.allowed) return false;
  if (request.idempotencyKey) await deps.idempotency.release(request.auth.tenantId, request.idempotencyKey);
  request.idempotencyKey = undefined;
  reply.header('retry-after', String(result.retryAfter));
  sendError(reply, new AppError('RATE_LIMIT_EXCEEDED', 'Rate limit exceeded. Please slow down.'));
  return true;
}

/** Rate-limit headers without counting the request (headers omitted if the counter does not answer). */
async function showRateLimit(caller: AuthContext, reply: FastifyReply, deps: PublicApiDeps): Promise<void> {
  const result = await currentRateLimit(deps.rateCounter, caller.tenantId, deps.rateLimitPerMinute, caller.apiRequestsDaily);
  if (result) reply.headers(rateLimitHeaders(result));
}

async function replayIdempotent(request: FastifyRequest, reply: FastifyReply, deps: PublicApiDeps): Promise<boolean> {
  const store = deps.idempotency;
  const header = request.headers['idempotency-key'];
  if (header === undefined) return false;
  const key = Array.isArray(header) ? header[0] : header;
  if (!IdempotencyStore.validKey(key)) {
    throw new AppError('VALIDATION_ERROR', 'Idempotency-Key must be 1-255 printable characters (a UUID v4 is recommended)', {
      details: [{ type: 'value_error', loc: ['header', 'Idempotency-Key'], msg: 'Invalid Idempotency-Key', input: key }],
    });
  }
  const claim = await store.claim({ tenantId: request.auth.tenantId, key, method: request.method, path: request.url, body: request.body });
  if (claim.kind === 'claimed') {
    request.idempotencyKey = key;
    request.idempotencyScope = keyScope(request, reply, store, key, claim.resourceId);
    return false;
  }
  // A replay is free: it shows the current counts without adding to them.
  await showRateLimit(request.auth, reply, deps);
  reply.code(claim.status).headers(claim.headers).header('idempotent-replayed', 'true').send(claim.body);
  return true;
}

const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

function keyScope(request: FastifyRequest, reply: FastifyReply, store: IdempotencyStore, key: string, takenOverResource: string | null): IdempotencyScope {
  const tenantId = request.auth.tenantId;
  const responses = request.routeOptions.schema?.response as Record<string, unknown> | undefined;
  const status = Number(Object.keys(responses ?? {}).find((code) => /^2\d\d$/.test(code)) ?? 200);
  const scope: IdempotencyScope = {
    takenOverResource,
    completed: false,
    async complete(tx, result) {
      const body = reply.serializeInput(result as Record<string, unknown>, String(status)) as string;
      await store.complete(tenantId, key, status, { 'content-type': JSON_CONTENT_TYPE, 'x-request-id': request.id }, body, tx);
      scope.completed = true;
    },
    attach: (tx, resourceId) => store.attachResource(tx, tenantId, key, resourceId),
  };
  return scope;
}
