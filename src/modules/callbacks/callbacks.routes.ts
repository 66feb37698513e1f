import type { FastifyPluginAsync } from 'fastify';
import { nestsDeeperThan } from '../../http/storable-text.ts';
import { safeEqual } from '../../crypto/safe-equal.ts';
import { AppError } from '../../http/errors.ts';
import { sendError } from '../../http/error-handler.ts';
import type { CallbacksService } from './callbacks.service.ts';
import { verifyUpstreamSignature } from './callbacks.signature.ts';

export interface CallbackRoutesOptions {
  callbacks: CallbacksService;
  appSecret: string;
  verifyToken: string;
}

/**
 * The upstream's callback receiver (outside the public API: no API key; the signature is the
 * authentication). Processing happens before the 200, so an acknowledged callback is committed;
 * a failure answers 500 and the upstream retries (processing is idempotent).
 */
export const callbackRoutes: FastifyPluginAsync<CallbackRoutesOptions> = async (app, { callbacks, appSecret, verifyToken }) => {
  // The signature covers the raw bytes, so this scope keeps the body as a Buffer.
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: 4 * 1024 * 1024 }, (_req, body, done) => done(null, body));

  // Not part of the public API description.
  app.get('/', { schema: { hide: true } }, async (req, reply) => {
    const q = req.query as Record<string, string | undefined>;
    if (q['hub.mode'] === 'subscribe' && typeof q['hub.verify_token'] === 'string' && safeEqual(q['hub.verify_token'], verifyToken)) {
      const challenge = q['hub.challenge'];
      return reply.code(200).type('text/plain').send(String((Array.isArray(challenge) ? challenge[0] : challenge) ?? ''));
    }
    return sendError(reply, new AppError('FORBIDDEN', 'Verification token mismatch'));
  });

  app.post('/', { schema: { hide: true } }, async (req, reply) => {
    const raw = Buffer.isBuffer(req.body) ? req.body : Buffer.alloc(0);
    const header = req.headers['x-hub-signature-256'];
    if (!verifyUpstreamSignature(appSecret, raw, Array.isArray(header) ? header[0] : header)) {
      return sendError(reply, new AppError('AUTHENTICATION_REQUIRED', 'Missing or invalid X-Hub-Signature-256'));
    }
    let envelope: unknown;
    try {
      envelope = JSON.parse(raw.toString('utf8'));
    } catch {
      return sendError(reply, new AppError('VALIDATION_ERROR', 'Malformed JSON body'));
    }
    if (typeof envelope !== 'object' || envelope === null) return sendError(reply, new AppError('VALIDATION_ERROR', 'Expected a JSON object'));
    if (nestsDeeperThan(envelope)) return sendError(reply, new AppError('VALIDATION_ERROR', 'The body nests too deeply'));
    await callbacks.process(envelope as never);
    return reply.code(200).type('text/plain').send('EVENT_RECEIVED');
  });
};
