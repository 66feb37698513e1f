import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { PageQuery } from '../../http/pagination.ts';
import { IdParams, Template, TemplateCreate, TemplatePage } from './templates.schemas.ts';
import type { TemplatesService } from './templates.service.ts';

const read = { scopes: ['templates:read'] };
const write = { scopes: ['templates:write'] };

export const templatesRoutes: FastifyPluginAsyncTypebox<{ templates: TemplatesService }> = async (app, { templates }) => {
  // POST /templates/{id}/submit has no body; clients that still send Content-Type: application/json
  // with an empty body are accepted (POST /templates still requires its body by schema).
  const parseJson = app.getDefaultJsonParser('error', 'ignore');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (req, body, done) => {
    if (body === '') return done(null, undefined);
    parseJson(req, body as string, done);
  });

  app.get('/templates', { config: read, schema: { querystring: PageQuery, response: { 200: TemplatePage } } },
    (req) => templates.list(req.auth.tenantId, req.query));

  app.get('/templates/:id', { config: read, schema: { params: IdParams, response: { 200: Template } } },
    (req) => templates.get(req.auth.tenantId, req.params.id));

  app.post('/templates', { config: { ...write, idempotent: true }, schema: { body: TemplateCreate, response: { 201: Template } } },
    async (req, reply) => reply.code(201).send(await templates.create(req.auth.tenantId, req.body)));

  app.post('/templates/:id/submit', { config: { ...write, idempotent: true }, schema: { params: IdParams, response: { 200: Template } } },
    (req) => templates.submit(req.auth.tenantId, req.params.id));
};
