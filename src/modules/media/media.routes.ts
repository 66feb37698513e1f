import multipart from '@fastify/multipart';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import { PageQuery } from '../../http/pagination.ts';
import { IdParams, Media, MediaPage, MessageResult } from './media.schemas.ts';
import type { MediaService, StagedFile } from './media.service.ts';
import { MAX_MEDIA_BYTES } from './media.types.ts';

const read = { scopes: ['media:read'] };
const write = { scopes: ['media:write'] };

export const mediaRoutes: FastifyPluginAsyncTypebox<{ media: MediaService }> = async (app, { media }) => {
  // The service enforces the per-type limits while streaming; this is only the outer bound.
  await app.register(multipart, { limits: { fileSize: MAX_MEDIA_BYTES + 1, files: 1, fields: 5, fieldSize: 1024 } });

  app.post('/media', { config: { ...write, idempotent: true }, schema: { response: { 201: Media } } }, async (req, reply) => {
    let type: string | undefined;
    let staged: StagedFile | undefined;
    try {
      for await (const part of req.parts()) {
        if (part.type === 'file') {
          if (part.fieldname !== 'file' || staged) { part.file.resume(); continue; }
          staged = await media.stage(req.auth.tenantId, { filename: part.filename, mimeType: part.mimetype, stream: part.file }, type);
        } else if (part.fieldname === 'type') {
          type = String(part.value);
        }
      }
    } catch (err) {
      if (staged) await media.discard(staged);
      throw err;
    }
    return reply.code(201).send(await media.create(req.auth.tenantId, { type, file: staged }));
  });

  app.get('/media', { config: read, schema: { querystring: PageQuery, response: { 200: MediaPage } } },
    (req) => media.list(req.auth.tenantId, req.query));

  app.get('/media/:id', { config: read, schema: { params: IdParams, response: { 200: Media } } },
    (req) => media.get(req.auth.tenantId, req.params.id));

  app.delete('/media/:id', { config: write, schema: { params: IdParams, response: { 200: MessageResult } } },
    (req) => media.remove(req.auth.tenantId, req.params.id));
};
