import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { SendResult, SendTemplateMessage } from './messages.schemas.ts';
import type { MessagesService } from './messages.service.ts';

export const messagesRoutes: FastifyPluginAsyncTypebox<{ messages: MessagesService }> = async (app, { messages }) => {
  app.post('/messages/template', { config: { scopes: ['messages:send'], idempotent: true }, schema: { body: SendTemplateMessage, response: { 200: SendResult } } },
    (req) => messages.sendTemplate(req.auth.tenantId, req.body));
};
