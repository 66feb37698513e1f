import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { safeEqual } from '../../crypto/safe-equal.ts';
import type { Metrics } from '../../metrics.ts';
import { SCOPES, PRESETS, WILDCARD } from '../tenants/scopes.ts';
import { cardCsv, checkCard, parseCardCsv, type RateCards } from '../pricing/rate-card.ts';
import type { ConsoleLinks } from '../console/console-links.ts';
import { assertAdminToken, type AdminService } from './admin.service.ts';
import {
  ApiKey, ApiKeyCreate, BusinessAccount, ConsoleLink, ConsoleLinkCreate, BusinessAccountConnect, BusinessAccountPatch, CreatedApiKey, KeyParams, MarketingSettings, MarketingSettingsPatch, Message, RateCard, ScopeVocabulary, Tenant,
  TenantCreate, TenantListQuery, TenantPage, TenantParams, TenantPatch,
} from './admin.schemas.ts';
import { Type } from 'typebox';

export const adminRoutes: FastifyPluginAsyncTypebox<{ admin: AdminService; consoleLinks: ConsoleLinks; adminToken: string; metrics: Metrics; rateCards: RateCards }> = async (app, { admin, consoleLinks, adminToken, metrics, rateCards }) => {
  app.addHook('onRequest', async (req) => assertAdminToken(req.headers.authorization, adminToken, safeEqual));
  // A rate card as CSV arrives as the card it describes (errors name the line and column), then meets the same schema as JSON.
  app.addContentTypeParser('text/csv', { parseAs: 'string', bodyLimit: 1024 * 1024 }, (_req, body, done) => {
    try { done(null, { versions: parseCardCsv(body as string) }); } catch (err) { done(err as Error); }
  });

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

  app.post('/tenants/:id/console-links', { schema: { params: TenantParams, body: ConsoleLinkCreate, response: { 201: ConsoleLink } } },
    async (req, reply) => reply.code(201).send(await consoleLinks.create(req.params.id, req.body.preset ?? 'full_access', req.body.base_url ?? `${req.protocol}://${req.host}`)));

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

  // The rate card prices messages and campaign estimates (docs/cost.md). Replaced as a whole, or not at all.
  app.put('/rate-card', { schema: { body: RateCard, response: { 200: RateCard } } }, async (req) => {
    const versions = checkCard(req.body, (v, r) => ['body', 'versions', v, ...(r === undefined ? [] : ['rates', r])]);
    return { versions: (await rateCards.replace(versions)).versions };
  });
  app.get('/rate-card', { schema: { response: { 200: RateCard } } }, async (req, reply) => {
    const card = await rateCards.current(true);
    if (/text\/csv/.test(req.headers.accept ?? '')) return reply.type('text/csv; charset=utf-8').send(cardCsv(card.versions) as never);
    return { versions: card.versions };
  });

  app.get('/scopes', { schema: { response: { 200: ScopeVocabulary } } }, async () => ({ scopes: [...SCOPES], wildcard: WILDCARD, presets: PRESETS }));
};
