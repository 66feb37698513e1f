import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { WebhooksService } from './webhooks.service.ts';
import {
  DeliveryMetrics, DeliveryPage, DeliveryQuery, Endpoint, EndpointCreate, EndpointCreated, EndpointList, EndpointUpdate, IdParams,
  MessageResult, RecoverBody, RecoverResult, RetryResult, SecretRotated, TestResult,
} from './webhooks.schemas.ts';

const read = { scopes: ['webhooks:read'], feature: 'webhooks' as const };
const write = { scopes: ['webhooks:write'], feature: 'webhooks' as const };

/** The literal /webhooks/deliveries routes are static segments, which Fastify's router prefers over /webhooks/:id. */
export const webhooksRoutes: FastifyPluginAsyncTypebox<{ webhooks: WebhooksService }> = async (app, { webhooks }) => {
  app.get('/webhooks/deliveries', { config: read, schema: { querystring: DeliveryQuery, response: { 200: DeliveryPage } } },
    (req) => webhooks.listDeliveries(req.auth.tenantId, undefined, req.query));

  app.get('/webhooks/deliveries/metrics', { config: read, schema: { response: { 200: DeliveryMetrics } } },
    (req) => webhooks.metrics(req.auth.tenantId));

  app.post('/webhooks/deliveries/:id/retry', { config: { ...write, idempotent: true }, schema: { params: IdParams, response: { 200: RetryResult } } },
    (req) => webhooks.retryDelivery(req.auth.tenantId, req.params.id));

  // Its kept Idempotency-Key response holds the signing secret: the store encrypts kept responses.
  app.post('/webhooks', { config: { ...write, idempotent: true }, schema: { body: EndpointCreate, response: { 201: EndpointCreated } } },
    async (req, reply) => reply.code(201).send(await webhooks.create(req.auth.tenantId, req.body)));

  app.get('/webhooks', { config: read, schema: { response: { 200: EndpointList } } },
    (req) => webhooks.list(req.auth.tenantId));

  app.get('/webhooks/:id', { config: read, schema: { params: IdParams, response: { 200: Endpoint } } },
    (req) => webhooks.get(req.auth.tenantId, req.params.id));

  app.put('/webhooks/:id', { config: write, schema: { params: IdParams, body: EndpointUpdate, response: { 200: Endpoint } } },
    (req) => webhooks.update(req.auth.tenantId, req.params.id, req.body));

  app.delete('/webhooks/:id', { config: write, schema: { params: IdParams, response: { 200: MessageResult } } },
    (req) => webhooks.remove(req.auth.tenantId, req.params.id));

  app.post('/webhooks/:id/rotate-secret', { config: write, schema: { params: IdParams, response: { 200: SecretRotated } } },
    (req) => webhooks.rotateSecret(req.auth.tenantId, req.params.id));

  app.post('/webhooks/:id/test', { config: write, schema: { params: IdParams, response: { 200: TestResult } } },
    (req) => webhooks.sendTest(req.auth.tenantId, req.params.id));

  app.post('/webhooks/:id/recover', { config: { ...write, idempotent: true }, schema: { params: IdParams, body: RecoverBody, response: { 202: RecoverResult } } },
    async (req, reply) => reply.code(202).send(await webhooks.recover(req.auth.tenantId, req.params.id, req.body)));

  app.get('/webhooks/:id/deliveries', { config: read, schema: { params: IdParams, querystring: DeliveryQuery, response: { 200: DeliveryPage } } },
    (req) => webhooks.listDeliveries(req.auth.tenantId, req.params.id, req.query));
};
