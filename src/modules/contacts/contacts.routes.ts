import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { ContactsService } from './contacts.service.ts';
import {
  BulkCreate, BulkResult, Contact, ContactCreate, ContactPage, ContactPatch, IdParams, ListQuery, MessageResult, SearchBody,
} from './contacts.schemas.ts';
import { PageQuery } from '../../http/pagination.ts';

const read = { scopes: ['contacts:read'] };
const write = { scopes: ['contacts:write'] };

export const contactsRoutes: FastifyPluginAsyncTypebox<{ contacts: ContactsService }> = async (app, { contacts }) => {
  app.get('/contacts', { config: read, schema: { querystring: ListQuery, response: { 200: ContactPage } } },
    (req) => contacts.list(req.auth.tenantId, { search: req.query.search, status: req.query.status }, req.query));

  app.post('/contacts/search', { config: read, schema: { querystring: PageQuery, body: SearchBody, response: { 200: ContactPage } } },
    (req) => contacts.list(req.auth.tenantId, { search: req.body.search_term, status: req.body.status, tag: req.body.tag }, req.query));

  app.post('/contacts', { config: { ...write, idempotent: true }, schema: { body: ContactCreate, response: { 201: Contact } } },
    async (req, reply) => reply.code(201).send(await contacts.create(req.auth.tenantId, req.body)));

  // Bad items (a NUL included) are reported one by one; the rest are still created.
  app.post('/contacts/bulk', { config: { ...write, idempotent: true, validatesItems: true }, schema: { body: BulkCreate, response: { 201: BulkResult } } },
    async (req, reply) => reply.code(201).send(await contacts.bulkCreate(req.auth.tenantId, req.body.contacts)));

  app.get('/contacts/:id', { config: read, schema: { params: IdParams, response: { 200: Contact } } },
    (req) => contacts.get(req.auth.tenantId, req.params.id));

  app.patch('/contacts/:id', { config: write, schema: { params: IdParams, body: ContactPatch, response: { 200: Contact } } },
    (req) => contacts.update(req.auth.tenantId, req.params.id, req.body));

  app.delete('/contacts/:id', { config: write, schema: { params: IdParams, response: { 200: MessageResult } } },
    (req) => contacts.remove(req.auth.tenantId, req.params.id));
};
