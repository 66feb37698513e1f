// Baseline: the same I/O per send as POST /messages/template, with none of the service around it:
// the key lookup, a Redis counter, the message insert, the upstream POST through undici and the
// update; and a callback route that verifies the signature and applies each status with one UPDATE.
import { createHash, randomUUID } from 'node:crypto';
import Fastify from 'fastify';
import { Redis } from 'ioredis';
import pg from 'pg';
import { Agent, request } from 'undici';
import { env, RANK, statusCallbackRoute } from './bare-common.ts';
const upstream = env('UPSTREAM_BASE_URL');
const phoneNumberId = env('PHONE_NUMBER_ID');
const accessToken = env('ACCESS_TOKEN');
const appSecret = env('UPSTREAM_APP_SECRET');

const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 20 });
const redis = new Redis(env('REDIS_URL'));
const agent = new Agent({ connections: 256, pipelining: 1, keepAliveTimeout: 30_000 });

const app = Fastify();
app.get('/healthz', async () => ({ ok: true }));

app.post('/messages/template', async (req, reply) => {
  const token = (req.headers.authorization ?? '').replace(/^Bearer /, '');
  const key = await pool.query('SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL', [createHash('sha256').update(token).digest('hex')]);
  if (key.rows.length === 0) return reply.code(401).send({ error: 'unauthorized' });
  const tenantId = key.rows[0].tenant_id as string;
  await redis.incr(`bare:rl:${tenantId}:${Math.floor(Date.now() / 60_000)}`);
  const body = req.body as { to: string; template_name: string; language: string; components: unknown[] };
  const id = randomUUID();
  await pool.query(
    `INSERT INTO messages (id, tenant_id, template_name, language, to_phone, components, status) VALUES ($1, $2, $3, $4, $5, $6, 'accepted')`,
    [id, tenantId, body.template_name, body.language, body.to, JSON.stringify(body.components)],
  );
  const res = await request(`${upstream}/${phoneNumberId}/messages`, {
    method: 'POST', dispatcher: agent,
    headers: { authorization: `Bearer ${accessToken}`, 'content-type': 'application/json' },
    body: JSON.stringify({
      messaging_product: 'whatsapp', recipient_type: 'individual', to: body.to, type: 'template', biz_opaque_callback_data: id,
      template: { name: body.template_name, language: { code: body.language, policy: 'deterministic' }, components: body.components },
    }),
  });
  const answer = await res.body.json() as { messages?: { id: string }[] };
  const wamid = answer.messages?.[0]?.id;
  if (!wamid) return reply.code(502).send({ error: 'upstream', answer });
  await pool.query('UPDATE messages SET upstream_message_id = $1, updated_at = now() WHERE id = $2', [wamid, id]);
  return reply.code(202).send({ message_id: wamid, status: 'accepted', to: body.to });
});

statusCallbackRoute(app, appSecret, async (statuses) => {
  for (const s of statuses) {
    const rank = RANK[s.status];
    if (!rank) continue;
    await pool.query(
      `UPDATE messages SET status = $1, status_rank = $2, updated_at = now(),
         sent_at = CASE WHEN $1 = 'sent' THEN now() ELSE sent_at END,
         delivered_at = CASE WHEN $1 = 'delivered' THEN now() ELSE delivered_at END,
         read_at = CASE WHEN $1 = 'read' THEN now() ELSE read_at END
       WHERE upstream_message_id = $3 AND status_rank < $2`,
      [s.status, rank, s.id],
    );
  }
});

await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.on('SIGTERM', async () => { await app.close(); await pool.end(); redis.disconnect(); process.exit(0); });
