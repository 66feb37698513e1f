import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { Message, MessageListQuery, MessagePage, MessageParams, SendResult, SendTemplateMessage } from './messages.schemas.ts';
import type { MessagesService } from './messages.service.ts';

export const messagesRoutes: FastifyPluginAsyncTypebox<{ messages: MessagesService }> = async (app, { messages }) => {
  app.post('/messages/template', { config: { scopes: ['messages:send'], idempotent: true }, schema: { body: SendTemplateMessage, response: { 200: SendResult } } },
    (req) => messages.sendTemplate(req.auth.tenantId, req.body));

  // Reading what was sent: messages are part of a contact's communication history, so they are read
  // under contacts:read (the vocabulary has no messages:read; messages:send only sends).
  app.get('/messages', { config: { scopes: ['contacts:read'] }, schema: { querystring: MessageListQuery, response: { 200: MessagePage } } },
    (req) => messages.list(req.auth.tenantId, req.query));
  app.get('/messages/:id', { config: { scopes: ['contacts:read'] }, schema: { params: MessageParams, response: { 200: Message } } },
    (req) => messages.get(req.auth.tenantId, req.params.id));
  // An inbound message's media, streamed from the upstream (which keeps it for a limited time).
  app.get('/messages/:id/media', { config: { scopes: ['contacts:read'] }, schema: { params: MessageParams } }, async (req, reply) => {
    const media = await messages.inboundMedia(req.auth.tenantId, req.params.id);
    reply.type(/^[\w.+-]+\/[\w.+-]+(;[\x20-\x7e]*)?$/.test(media.mimeType) ? media.mimeType : 'application/octet-stream');
    if (media.size !== null) reply.header('content-length', media.size);
    if (media.filename) {
      const ascii = media.filename.replace(/[^\x20-\x7e]|["\\]/g, '_');
      reply.header('content-disposition', `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(media.filename)}`);
    }
    return reply.send(media.body);
  });
};
