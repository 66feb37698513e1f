import multipart from '@fastify/multipart';
import type { FastifyPluginAsyncTypebox } from '@fastify/type-provider-typebox';
import type { FastifyRequest } from 'fastify';
import { CLIENT_ERRORS } from '../../http/error-handler.ts';
import { AppError, validationError } from '../../http/errors.ts';
import { PageQuery } from '../../http/pagination.ts';
import { IdParams, Media, MediaPage, MessageResult } from './media.schemas.ts';
import type { MediaService, StagedFile } from './media.service.ts';
import { MAX_MEDIA_BYTES } from './media.types.ts';

const read = { scopes: ['media:read'] };
const write = { scopes: ['media:write'] };

/**
 * A multipart body the parser cannot read (no boundary, cut short, a field declared JSON that is
 * not) is the caller's fault: a 400. Errors of our own (the disk: ENOSPC and the like) stay 5xx,
 * and errors that already carry a status (limits: 413) keep it.
 */
function asClientError(err: unknown): unknown {
  const e = err as { code?: string; syscall?: string; statusCode?: number; message?: string };
  if (err instanceof AppError || e.syscall || (e.code && CLIENT_ERRORS[e.code])) return err;
  if (e.code === 'FST_INVALID_JSON_FIELD_ERROR') return validationError('a multipart field sent as JSON is not valid JSON', ['body'], null);
  if (e.code === 'ERR_STREAM_PREMATURE_CLOSE') return validationError('the multipart body ended before its closing boundary', ['body'], null);
  return validationError(`malformed multipart body: ${e.message ?? 'unreadable'}`, ['body'], null);
}

export const mediaRoutes: FastifyPluginAsyncTypebox<{ media: MediaService }> = async (app, { media }) => {
  // The service enforces the per-type limits while streaming; this is only the outer bound.
  await app.register(multipart, { limits: { fileSize: MAX_MEDIA_BYTES + 1, files: 1, fields: 5, fieldSize: 1024 } });

  /** Staged uploads not yet recorded; whatever is left when the response is sent (a replay, a 429, an error) is removed. */
  const staging = new WeakMap<FastifyRequest, StagedFile>();

  /**
   * Streams the upload to storage, then leaves in `body` only what identifies it (type, name, MIME
   * type, size and SHA-256): the Idempotency-Key fingerprint then tells a different file apart.
   */
  async function readUpload(req: FastifyRequest): Promise<void> {
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
      throw asClientError(err);
    }
    if (staged) staging.set(req, staged);
    req.body = { type, file: staged && { filename: staged.filename, mime_type: staged.mimeType, size_bytes: staged.sizeBytes, sha256: staged.sha256 } };
  }

  const discardLeftover = async (req: FastifyRequest) => {
    const left = staging.get(req);
    staging.delete(req);
    if (left) await media.discard(left);
  };
  app.addHook('onResponse', discardLeftover);
  app.addHook('onRequestAbort', discardLeftover); // a client gone before its response: onResponse never runs

  app.post('/media', { config: { ...write, idempotent: true, readBody: readUpload }, schema: { response: { 201: Media } } }, async (req, reply) => {
    // Taken out first: from here the file belongs to create (recorded, or removed if refused).
    const file = staging.get(req);
    staging.delete(req);
    return reply.code(201).send(await media.create(req.auth.tenantId, { type: (req.body as { type?: string }).type, file }));
  });

  app.get('/media', { config: read, schema: { querystring: PageQuery, response: { 200: MediaPage } } },
    (req) => media.list(req.auth.tenantId, req.query));

  app.get('/media/:id', { config: read, schema: { params: IdParams, response: { 200: Media } } },
    (req) => media.get(req.auth.tenantId, req.params.id));

  app.delete('/media/:id', { config: write, schema: { params: IdParams, response: { 200: MessageResult } } },
    (req) => media.remove(req.auth.tenantId, req.params.id));
};
