// Baseline for the campaign benchmark's dispatch_unpaced (issue 24 §1): the least database work a
// campaign send needs, with none of the service around it. One row per recipient (materialised by
// INSERT ... SELECT), claimed 50 at a time, sent through undici, its upstream id recorded once per
// batch; each status callback applied as one statement that moves the rows, inserts an events row
// per status moved and the campaign's counter moves. No leases, reconciliation, consent, pricing,
// webhook fan-out or crash safety: a floor to set the service's figure against, not a design.
import Fastify from 'fastify';
import pg from 'pg';
import { Agent, request } from 'undici';
import { env, RANK, statusCallbackRoute } from './bare-common.ts';
const upstream = env('UPSTREAM_BASE_URL');
const appSecret = env('UPSTREAM_APP_SECRET');
const BATCH = 50;
/** Batches in flight per campaign. */
const LOOPS = 4;

const pool = new pg.Pool({ connectionString: env('DATABASE_URL'), max: 20 });
const agent = new Agent({ connections: 256, pipelining: 1, keepAliveTimeout: 30_000 });

await pool.query(`
  DROP TABLE IF EXISTS bare_recipients, bare_counter_moves;
  CREATE TABLE bare_recipients (
    id uuid PRIMARY KEY, tenant_id uuid NOT NULL, campaign_id uuid NOT NULL, contact_id uuid, phone text NOT NULL,
    status text NOT NULL DEFAULT 'pending', status_rank smallint NOT NULL DEFAULT 0, upstream_message_id text,
    attempted_at timestamptz, sent_at timestamptz, delivered_at timestamptz, read_at timestamptz, failed_at timestamptz,
    updated_at timestamptz NOT NULL DEFAULT now());
  CREATE UNIQUE INDEX ON bare_recipients (campaign_id, phone);
  CREATE UNIQUE INDEX ON bare_recipients (upstream_message_id);
  CREATE INDEX bare_recipients_due ON bare_recipients (campaign_id, id) WHERE status = 'pending';
  CREATE TABLE bare_counter_moves (campaign_id uuid NOT NULL, status text NOT NULL, n integer NOT NULL);`);

/** A statement retried when it deadlocks (rows locked in different orders by answers and callbacks; cheaper than ordering every lock). */
async function query<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<pg.QueryResult<R>> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await pool.query<R>(text, values);
    } catch (err) {
      if ((err as { code?: string }).code !== '40P01' || attempt >= 5) throw err;
    }
  }
}

interface Campaign { total: number; done: number; sending: boolean }
const campaigns = new Map<string, Campaign>();

async function dispatch(campaignId: string, phoneNumberId: string, templateName: string) {
  const campaign = campaigns.get(campaignId)!;
  const loop = async () => {
    for (;;) {
      const { rows } = await pool.query<{ id: string; phone: string; first_name: string | null; code: string | null }>(`
        WITH claimed AS (
          UPDATE bare_recipients r SET status = 'sending', attempted_at = now(), updated_at = now()
          WHERE r.id IN (SELECT id FROM bare_recipients WHERE campaign_id = $1 AND status = 'pending' ORDER BY id LIMIT ${BATCH} FOR UPDATE SKIP LOCKED)
          RETURNING r.id, r.phone, r.contact_id),
        moved AS (INSERT INTO bare_counter_moves SELECT $1, 'sending', count(*) FROM claimed)
        SELECT cl.id, cl.phone, c.first_name, c.custom_fields->>'code' AS code FROM claimed cl LEFT JOIN contacts c ON c.id = cl.contact_id`, [campaignId]);
      if (rows.length === 0) return;
      const answers = await Promise.all(rows.map(async (r) => {
        const res = await request(`${upstream}/${phoneNumberId}/messages`, {
          method: 'POST', dispatcher: agent,
          headers: { authorization: 'Bearer bench', 'content-type': 'application/json' },
          body: JSON.stringify({
            messaging_product: 'whatsapp', recipient_type: 'individual', to: r.phone, type: 'template', biz_opaque_callback_data: r.id,
            template: { name: templateName, language: { code: 'en', policy: 'deterministic' },
              components: [{ type: 'body', parameters: [{ type: 'text', text: r.first_name ?? '' }, { type: 'text', text: r.code ?? '' }] }] },
          }),
        });
        const answer = await res.body.json() as { messages?: { id: string }[] };
        return { id: r.id, wamid: answer.messages?.[0]?.id };
      }));
      const accepted = answers.filter((a) => a.wamid);
      if (accepted.length < answers.length) throw new Error(`upstream refused ${answers.length - accepted.length} sends`);
      await query(`
        UPDATE bare_recipients r SET upstream_message_id = v.wamid, updated_at = now()
        FROM unnest($1::uuid[], $2::text[]) AS v(id, wamid) WHERE r.id = v.id`, [accepted.map((a) => a.id), accepted.map((a) => a.wamid)]);
    }
  };
  await Promise.all(Array.from({ length: LOOPS }, loop));
  campaign.sending = false;
}

const app = Fastify();
app.get('/healthz', async () => ({ ok: true }));

/** Materialises the campaign's recipients from the tenant's contacts tagged `tag`, then sends them. */
app.post('/bare/campaigns', async (req) => {
  const body = req.body as { campaign_id: string; tenant_id: string; tag: string; phone_number_id: string; template_name: string };
  const { rowCount } = await pool.query(`
    INSERT INTO bare_recipients (id, tenant_id, campaign_id, contact_id, phone)
    SELECT uuid_v7(), c.tenant_id, $1, c.id, c.phone FROM contacts c
    WHERE c.tenant_id = $2 AND c.deleted_at IS NULL AND c.tags && ARRAY[$3]::text[]
    ON CONFLICT (campaign_id, phone) DO NOTHING`, [body.campaign_id, body.tenant_id, body.tag]);
  campaigns.set(body.campaign_id, { total: rowCount ?? 0, done: 0, sending: true });
  void dispatch(body.campaign_id, body.phone_number_id, body.template_name).catch((err) => { console.error(err); process.exit(1); });
  return { total: rowCount };
});

app.get('/bare/campaigns/:id', async (req) => {
  const campaign = campaigns.get((req.params as { id: string }).id);
  return campaign ? { total: campaign.total, done: campaign.done, final: !campaign.sending && campaign.done >= campaign.total } : null;
});

statusCallbackRoute(app, appSecret, async (all) => {
  const statuses = all.filter((s) => RANK[s.status] && s.biz_opaque_callback_data);
  if (statuses.length === 0) return;
  // Found by our row id (biz_opaque_callback_data), so a status that overtakes the send's answer still applies.
  const { rows } = await query<{ campaign_id: string; status: string }>(`
    WITH v(id, wamid, status, rank, at) AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::smallint[], $5::timestamptz[])),
    moved AS (
      UPDATE bare_recipients r SET status = v.status, status_rank = v.rank, updated_at = now(),
        sent_at = CASE WHEN v.status = 'sent' THEN v.at ELSE r.sent_at END,
        delivered_at = CASE WHEN v.status = 'delivered' THEN v.at ELSE r.delivered_at END,
        read_at = CASE WHEN v.status = 'read' THEN v.at ELSE r.read_at END,
        failed_at = CASE WHEN v.status = 'failed' THEN v.at ELSE r.failed_at END
      FROM v WHERE r.id = v.id AND r.status_rank < v.rank
      RETURNING r.tenant_id, r.campaign_id, r.contact_id, r.phone, v.wamid, v.status, v.at),
    events AS (
      INSERT INTO events (id, tenant_id, type, data, created_at)
      SELECT gen_random_uuid(), m.tenant_id, 'message.' || m.status, jsonb_build_object('message_id', m.wamid, 'to', m.phone, 'status', m.status,
        'timestamp', m.at, m.status || '_at', m.at, 'contact_id', m.contact_id, 'campaign_id', m.campaign_id, 'template_name', 'bench'), now()
      FROM moved m),
    counted AS (INSERT INTO bare_counter_moves SELECT campaign_id, status, count(*) FROM moved GROUP BY 1, 2)
    SELECT campaign_id, status FROM moved`,
  [statuses.map((s) => s.biz_opaque_callback_data), statuses.map((s) => s.id), statuses.map((s) => s.status), statuses.map((s) => RANK[s.status]),
    statuses.map((s) => new Date(Number(s.timestamp) * 1000))]);
  for (const r of rows) {
    const campaign = campaigns.get(r.campaign_id);
    if (campaign && (r.status === 'read' || r.status === 'failed')) campaign.done++;
  }
});

await app.listen({ port: Number(process.env.PORT), host: '127.0.0.1' });
process.on('SIGTERM', async () => { await app.close(); await pool.end(); process.exit(0); });
