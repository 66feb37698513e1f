import Fastify, { LogController, type FastifyBaseLogger, type FastifyInstance } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { sql } from 'kysely';
import type { Deps } from './deps.ts';
import { installErrorHandling } from './http/error-handler.ts';
import { installPublicApiHooks } from './http/public-api.ts';
import { requestIdFor } from './http/request-id.ts';
import { adminRoutes } from './modules/admin/admin.routes.ts';
import { contactActivityRoutes } from './modules/contacts/activity.routes.ts';
import { contactsRoutes } from './modules/contacts/contacts.routes.ts';
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
    return503OnClosing: true,
  });
  const app = base.withTypeProvider<TypeBoxTypeProvider>();

  const routes: { method: string; pattern: RegExp }[] = [];
  app.addHook('onRoute', (route) => {
    const pattern = new RegExp('^' + route.url.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/:[^/]+/g, '[^/]+') + '/?$');
    for (const method of [route.method].flat()) routes.push({ method, pattern });
  });
  installErrorHandling(base, () => routes);
  app.addHook('onSend', async (request, reply) => {
    reply.header('x-request-id', request.id);
  });

  if (deps.config.openapiEnabled) {
    await app.register(import('@fastify/swagger'), {
      openapi: { info: { title: 'Messaging Service Public API', version: '1.0.0' }, components: { securitySchemes: { bearer: { type: 'http', scheme: 'bearer' } } }, security: [{ bearer: [] }] },
    });
    await app.register(import('@fastify/swagger-ui'), { routePrefix: '/docs' });
  }

  app.get('/healthz', async () => ({ status: 'ok' }));
  app.get('/readyz', async (_req, reply) => {
    const database = await sql`SELECT 1`.execute(deps.db).then(() => 'ok', () => 'unavailable');
    const redis = !deps.redis ? 'not_configured' : await deps.redis.ping().then(() => 'ok', () => 'unavailable');
    return reply.code(database === 'ok' ? 200 : 503).send({ status: database === 'ok' ? 'ready' : 'not_ready', database, redis });
  });

  await app.register(adminRoutes, { prefix: '/admin/v1', admin: deps.admin, adminToken: deps.config.adminToken });

  await app.register(async (api) => {
    installPublicApiHooks(api, {
      authenticator: deps.authenticator,
      rateCounter: deps.rateCounter,
      idempotency: deps.idempotency,
      rateLimitPerMinute: deps.config.rateLimitPerMinute,
    });
    await api.register(contactsRoutes, { contacts: deps.contacts });
    await api.register(contactActivityRoutes, { activity: deps.contactActivity });
    await api.register(webhooksRoutes, { webhooks: deps.webhooks });
  }, { prefix: PUBLIC_PREFIX });

  return base;
}
