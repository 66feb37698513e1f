// What the bare baselines (bare-sends.ts, bare-dispatch.ts) share: their environment and the
// upstream's signed status callback route.
import { createHmac, timingSafeEqual } from 'node:crypto';
import type { FastifyInstance } from 'fastify';

export const env = (name: string) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is required`);
  return value;
};

export const RANK: Record<string, number> = { sent: 1, delivered: 2, read: 3, failed: 4 };

export interface CallbackStatus { id: string; status: string; timestamp: string; biz_opaque_callback_data?: string }

/**
 * POST /upstream/webhook: verifies the signature over the raw body (401 otherwise), then hands
 * `apply` every status of the payload, in order, and answers 200.
 */
export function statusCallbackRoute(app: FastifyInstance, appSecret: string, apply: (statuses: CallbackStatus[]) => Promise<void>) {
  app.register(async (scope) => {
    scope.addContentTypeParser('application/json', { parseAs: 'buffer' }, (_req, body, done) => done(null, body));
    scope.post('/upstream/webhook', async (req, reply) => {
      const raw = req.body as Buffer;
      const expected = Buffer.from(`sha256=${createHmac('sha256', appSecret).update(raw).digest('hex')}`);
      const given = Buffer.from(String(req.headers['x-hub-signature-256'] ?? ''));
      if (given.length !== expected.length || !timingSafeEqual(given, expected)) return reply.code(401).send();
      const payload = JSON.parse(raw.toString('utf8')) as { entry?: { changes?: { value?: { statuses?: CallbackStatus[] } }[] }[] };
      await apply((payload.entry ?? []).flatMap((e) => (e.changes ?? []).flatMap((c) => c.value?.statuses ?? [])));
      return reply.code(200).send();
    });
  });
}
