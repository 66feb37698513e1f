import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { safeEqual } from '../../crypto/safe-equal.ts';
import type { Metrics } from '../../metrics.ts';
import { SCOPES, PRESETS, WILDCARD } from '../tenants/scopes.ts';
import { assertAdminToken, type AdminService } from './admin.service.ts';
import {
  ApiKey, ApiKeyCreate, BusinessAccount, BusinessAccountConnect, BusinessAccountPatch, CreatedApiKey, KeyParams, MarketingSettings, MarketingSettingsPatch, Message, ScopeVocabulary, Tenant,
  TenantCreate, TenantListQuery, TenantPage, TenantParams, TenantPatch,
} from './admin.schemas.ts';
import { Type } from 'typebox';

export const adminRoutes: FastifyPluginAsyncTypebox<{ admin: AdminService; adminToken: string; metrics: Metrics }> = async (app, { admin, adminToken, metrics }) => {
  app.addHook('onRequest', async (req) => assertAdminToken(req.headers.authorization, adminToken, safeEqual));

  app.post('/tenants', { schema: { body: TenantCreate, response: { 201: Tenant } } },
    async (req, reply) => reply.code(201).send(await admin.createTenant(req.body.name, req.body.plan)));
  app.get('/tenants', { schema: { querystring: TenantListQuery, response: { 200: TenantPage } } }, (req) => admin.listTenants(req.query));
  app.get('/tenants/:id', { schema: { params: TenantParams, response: { 200: Tenant } } }, (req) => admin.getTenant(req.params.id));
  app.patch('/tenants/:id', { schema: { params: TenantParams, body: TenantPatch, response: { 200: Tenant } } },
    (req) => admin.updateTenant(req.params.id, req.body));
  app.delete('/tenants/:id', { schema: { params: TenantParams, response: { 200: Message } } }, (req) => admin.deleteTenant(req.params.id));

  app.post('/tenants/:id/api-keys', { schema: { params: TenantParams, body: ApiKeyCreate, response: { 201: CreatedApiKey } } },
    async (req, reply) => reply.code(201).send(await admin.createApiKey(req.params.id, req.body)));
  app.get('/tenants/:id/api-keys', { schema: { params: TenantParams, response: { 200: Type.Object({ data: Type.Array(ApiKey) }) } } },
    (req) => admin.listApiKeys(req.params.id));
  app.delete('/tenants/:id/api-keys/:key_id', { schema: { params: KeyParams, response: { 200: Message } } },
    (req) => admin.revokeApiKey(req.params.id, req.params.key_id));

  app.get('/tenants/:id/business-account', { schema: { params: TenantParams, response: { 200: BusinessAccount } } },
    (req) => admin.getBusinessAccount(req.params.id));
  app.put('/tenants/:id/business-account', { schema: { params: TenantParams, body: BusinessAccountConnect, response: { 200: BusinessAccount } } },
    (req) => admin.connectBusinessAccount(req.params.id, req.body));
  app.patch('/tenants/:id/business-account', { schema: { params: TenantParams, body: BusinessAccountPatch, response: { 200: BusinessAccount } } },
    (req) => admin.updateBusinessAccount(req.params.id, req.body));
  app.delete('/tenants/:id/business-account', { schema: { params: TenantParams, response: { 200: BusinessAccount } } },
    (req) => admin.disconnectBusinessAccount(req.params.id));

  app.get('/tenants/:id/marketing-settings', { schema: { params: TenantParams, response: { 200: MarketingSettings } } },
    (req) => admin.getMarketingSettings(req.params.id));
  app.patch('/tenants/:id/marketing-settings', { schema: { params: TenantParams, body: MarketingSettingsPatch, response: { 200: MarketingSettings } } },
    (req) => admin.updateMarketingSettings(req.params.id, req.body));

  // Prometheus text format (scrape with the admin token as a bearer credential).
  app.get('/metrics', async (_req, reply) => {
    const { contentType, body } = await metrics.render();
    return reply.type(contentType).send(body);
  });

  app.get('/scopes', { schema: { response: { 200: ScopeVocabulary } } }, async () => ({ scopes: [...SCOPES], wildcard: WILDCARD, presets: PRESETS }));
};
