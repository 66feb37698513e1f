import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { requireFeature } from '../../http/auth.ts';
import type { CampaignsService } from './campaigns.service.ts';
import type { CampaignRecipients } from './campaigns.recipients.ts';
import {
  AudienceBody, AudiencePreview, Campaign, CampaignCreate, CampaignPatch, CampaignDetail, CampaignList, DrillDownQuery, ErrorCodeParams, ErrorDrillDown,
  ErrorsSummary, FieldCoverage, FieldCoverageBody, IdParams, RecipientPage, RecipientsQuery, RenderBody, RenderPreview, RetargetBody, ScheduleBody,
} from './campaigns.schemas.ts';

const read = { scopes: ['campaigns:read'] };
const write = { scopes: ['campaigns:write'] };
// Spec 4.1 and the plan gate: only plans with campaign sending may start, schedule or steer one.
// Lifecycle actions are sending POSTs: they honour Idempotency-Key (spec 4).
const send = { scopes: ['campaigns:send'], feature: 'campaigns' as const, idempotent: true };
// Routes whose body is optional as a whole: a request without one reads as {} (the schema alone would refuse it).
const noBodyIsEmpty = async (req: FastifyRequest) => { if (req.body === undefined) req.body = {}; };

export const campaignsRoutes: FastifyPluginAsyncTypebox<{ campaigns: CampaignsService; recipients: CampaignRecipients }> = async (app, { campaigns, recipients }) => {
  app.get('/campaigns', { config: read, schema: { response: { 200: CampaignList } } },
    (req) => campaigns.list(req.auth.tenantId));

  app.post('/campaigns', { config: { ...write, idempotent: true }, schema: { body: CampaignCreate, response: { 201: Campaign } } },
    async (req, reply) => {
      // Created SCHEDULED, it starts sending by itself: the same gate as POST /campaigns/{id}/schedule.
      if (req.body.scheduled_at) requireFeature(req.auth, 'campaigns');
      return reply.code(201).send(await campaigns.create(req.auth.tenantId, req.body));
    });

  app.get('/campaigns/:id', { config: read, schema: { params: IdParams, response: { 200: CampaignDetail } } },
    (req) => campaigns.get(req.auth.tenantId, req.params.id));

  app.patch('/campaigns/:id', { config: write, schema: { params: IdParams, body: CampaignPatch, response: { 200: CampaignDetail } } },
    (req) => campaigns.update(req.auth.tenantId, req.params.id, req.body));

  app.put('/campaigns/:id/audience', { config: write, schema: { params: IdParams, body: AudienceBody, response: { 200: CampaignDetail } } },
    (req) => campaigns.setAudience(req.auth.tenantId, req.params.id, req.body));

  app.get('/campaigns/:id/audience/preview', { config: read, schema: { params: IdParams, response: { 200: AudiencePreview } } },
    (req) => campaigns.audiencePreview(req.auth.tenantId, req.params.id));

  app.post('/campaigns/:id/audience/field-coverage', { config: read, schema: { params: IdParams, body: FieldCoverageBody, response: { 200: FieldCoverage } } },
    (req) => campaigns.fieldCoverage(req.auth.tenantId, req.params.id, req.body.fields));

  app.post('/campaigns/:id/preview', { config: write, preValidation: noBodyIsEmpty, schema: { params: IdParams, body: RenderBody, response: { 200: RenderPreview } } },
    (req) => campaigns.renderPreview(req.auth.tenantId, req.params.id, req.body.sample_contact_id));

  for (const action of ['send', 'pause', 'resume', 'stop'] as const) {
    app.post(`/campaigns/:id/${action}`, { config: send, schema: { params: IdParams, response: { 200: CampaignDetail } } },
      (req) => campaigns.act(req.auth.tenantId, req.params.id, action));
  }
  app.post('/campaigns/:id/schedule', { config: send, schema: { params: IdParams, body: ScheduleBody, response: { 200: CampaignDetail } } },
    (req) => campaigns.act(req.auth.tenantId, req.params.id, 'schedule', req.body));

  app.post('/campaigns/:id/refresh-metrics', { config: write, schema: { params: IdParams, response: { 200: Campaign } } },
    (req) => campaigns.refreshMetrics(req.auth.tenantId, req.params.id));

  app.get('/campaigns/:id/errors', { config: read, schema: { params: IdParams, response: { 200: ErrorsSummary } } },
    (req) => campaigns.errorsSummary(req.auth.tenantId, req.params.id));

  app.get('/campaigns/:id/errors/:error_code', { config: read, schema: { params: ErrorCodeParams, querystring: DrillDownQuery, response: { 200: ErrorDrillDown } } },
    (req) => campaigns.errorsDrillDown(req.auth.tenantId, req.params.id, req.params.error_code, req.query.limit ?? 50));

  // Beyond the spec: every recipient's outcome, as a page of JSON or (Accept: text/csv) one streamed CSV.
  app.get('/campaigns/:id/recipients', { config: read, schema: { params: IdParams, querystring: RecipientsQuery, response: { 200: RecipientPage } } },
    async (req, reply) => {
      if (/\btext\/csv\b/.test(req.headers.accept ?? '')) {
        const stream = await recipients.csv(req.auth.tenantId, req.params.id, req.query.status);
        return reply.type('text/csv; charset=utf-8').header('content-disposition', `attachment; filename="campaign-${req.params.id}-recipients.csv"`).send(stream as never);
      }
      return recipients.page(req.auth.tenantId, req.params.id, req.query);
    });

  app.post('/campaigns/:id/retarget', { config: { ...write, idempotent: true }, preValidation: noBodyIsEmpty, schema: { params: IdParams, body: RetargetBody, response: { 201: Campaign } } },
    async (req, reply) => reply.code(201).send(await recipients.retarget(req.auth.tenantId, req.params.id, req.body)));
};
