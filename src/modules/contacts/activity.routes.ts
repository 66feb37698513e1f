import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { PageQuery } from '../../http/pagination.ts';
import type { ContactActivityService } from './activity.service.ts';
import {
  CommunicationPage, ContactParams, Followup, FollowupCreate, FollowupPage, FollowupParams, FollowupPatch, MessageResult, Note, NoteCreate, NotePage,
} from './activity.schemas.ts';

const read = { scopes: ['contacts:read'] };
const write = { scopes: ['contacts:write'] };

/** Contact sub-resources (ARCHITECTURE §4): notes, communication history, follow-ups. */
export const contactActivityRoutes: FastifyPluginAsyncTypebox<{ activity: ContactActivityService }> = async (app, { activity }) => {
  app.post('/contacts/:id/notes', { config: { ...write, idempotent: true }, schema: { params: ContactParams, body: NoteCreate, response: { 201: Note } } },
    async (req, reply) => reply.code(201).send(await activity.addNote(req.auth.tenantId, req.params.id, req.body.content)));

  app.get('/contacts/:id/notes', { config: read, schema: { params: ContactParams, querystring: PageQuery, response: { 200: NotePage } } },
    (req) => activity.listNotes(req.auth.tenantId, req.params.id, req.query));

  app.get('/contacts/:id/communications', { config: read, schema: { params: ContactParams, querystring: PageQuery, response: { 200: CommunicationPage } } },
    (req) => activity.listCommunications(req.auth.tenantId, req.params.id, req.query));

  app.post('/contacts/:id/followups', { config: { ...write, idempotent: true }, schema: { params: ContactParams, body: FollowupCreate, response: { 201: Followup } } },
    async (req, reply) => reply.code(201).send(await activity.createFollowup(req.auth.tenantId, req.params.id, req.body)));

  app.get('/contacts/:id/followups', { config: read, schema: { params: ContactParams, querystring: PageQuery, response: { 200: FollowupPage } } },
    (req) => activity.listFollowups(req.auth.tenantId, req.params.id, req.query));

  app.patch('/contacts/:id/followups/:followup_id', { config: write, schema: { params: FollowupParams, body: FollowupPatch, response: { 200: Followup } } },
    (req) => activity.updateFollowup(req.auth.tenantId, req.params.id, req.params.followup_id, req.body));

  app.delete('/contacts/:id/followups/:followup_id', { config: write, schema: { params: FollowupParams, response: { 200: MessageResult } } },
    (req) => activity.deleteFollowup(req.auth.tenantId, req.params.id, req.params.followup_id));
};
