import { sql } from 'kysely';
import type { Tx } from '../../db/database.ts';

/**
 * What recipients do after a campaign (issue 25 §2): replies and quick-reply taps, recorded in the
 * transaction that stores the inbound messages, set-based over a callback batch.
 */

/** A newly stored inbound message, as far as replies read it. */
export interface InboundForReplies {
  upstreamMessageId: string;
  /** The sender's phone (E.164); a sender known only by user id cannot be matched to a recipient. */
  phone: string | null;
  at: Date;
  /** The upstream id of the message it replies to or whose button it taps. */
  contextUpstreamId: string | null;
  /** A quick-reply tap's payload. */
  buttonPayload: string | null;
}

/** A message without context counts as a reply to a campaign message sent to its sender this long before. */
export const REPLY_WINDOW_HOURS = 72;

/**
 * Marks the campaign recipients these messages reply to. A message whose context names a campaign
 * message replies to that recipient; otherwise the first inbound message of the sender within 72 h
 * after a campaign message to them replies to the latest such message. `replied_at` keeps the
 * earliest reply (callbacks may arrive out of order), `button_payload` the first tap's payload; a
 * recipient that replies for the first time moves its campaign's `replied` counter.
 */
export async function recordCampaignReplies(tx: Tx, tenantId: string, messages: InboundForReplies[]): Promise<number> {
  if (messages.length === 0) return 0;
  const { rows: matches } = await sql<{ upstream_id: string; recipient_id: string; at: Date; payload: string | null }>`
    SELECT x.upstream_id, coalesce(ctx.id, late.id) AS recipient_id, x.at, x.payload
    FROM unnest(${messages.map((m) => m.upstreamMessageId)}::text[], ${messages.map((m) => m.phone)}::text[],
                ${messages.map((m) => m.at.toISOString())}::timestamptz[], ${messages.map((m) => m.contextUpstreamId)}::text[],
                ${messages.map((m) => m.buttonPayload)}::text[]) AS x(upstream_id, phone, at, ctx, payload)
    LEFT JOIN LATERAL (
      SELECT m.id FROM messages m
      WHERE x.ctx IS NOT NULL AND m.tenant_id = ${tenantId}::uuid AND m.upstream_message_id = x.ctx AND m.campaign_id IS NOT NULL
    ) ctx ON true
    LEFT JOIN LATERAL (
      SELECT m.id, coalesce(m.sent_at, m.created_at) AS sent
      FROM messages m
      WHERE ctx.id IS NULL AND x.phone IS NOT NULL AND m.tenant_id = ${tenantId}::uuid AND m.to_phone = x.phone
        AND m.campaign_id IS NOT NULL AND m.upstream_message_id IS NOT NULL AND m.status <> 'failed'
        AND m.created_at <= x.at AND m.created_at > x.at - make_interval(hours => ${REPLY_WINDOW_HOURS + 1})
        AND coalesce(m.sent_at, m.created_at) <= x.at AND coalesce(m.sent_at, m.created_at) > x.at - make_interval(hours => ${REPLY_WINDOW_HOURS})
      ORDER BY coalesce(m.sent_at, m.created_at) DESC LIMIT 1
    ) late ON true
    WHERE ctx.id IS NOT NULL OR (late.id IS NOT NULL AND NOT EXISTS (
      -- Only the sender's first message since that campaign message counts (those of this batch are stored already).
      SELECT 1 FROM inbound_messages i
      WHERE i.tenant_id = ${tenantId}::uuid AND i.from_phone = x.phone AND i.annotates_upstream_id IS NULL
        AND i.received_at >= late.sent AND i.received_at < x.at))`.execute(tx);
  if (matches.length === 0) return 0;

  // One update per recipient: its earliest reply, and the payload of its earliest tap.
  const byRecipient = new Map<string, { at: Date; payload: string | null; payloadAt: number }>();
  for (const m of [...matches].sort((a, b) => new Date(a.at).getTime() - new Date(b.at).getTime())) {
    const at = new Date(m.at);
    const seen = byRecipient.get(m.recipient_id);
    if (!seen) byRecipient.set(m.recipient_id, { at, payload: m.payload, payloadAt: at.getTime() });
    else if (seen.payload === null && m.payload !== null) Object.assign(seen, { payload: m.payload, payloadAt: at.getTime() });
  }
  const ids = [...byRecipient.keys()];
  const ats = ids.map((id) => byRecipient.get(id)!.at.toISOString());
  const payloads = ids.map((id) => byRecipient.get(id)!.payload);
  const values = sql`unnest(${ids}::uuid[], ${ats}::timestamptz[], ${payloads}::text[]) AS v(id, at, payload)`;
  // First replies: under a concurrent reply to the same recipient, the row lock re-checks
  // `replied_at IS NULL`, so only one transaction counts it.
  const { rows: first } = await sql<{ campaign_id: string }>`
    UPDATE campaign_recipients r SET replied_at = v.at, button_payload = v.payload
    FROM ${values}
    WHERE r.id = v.id AND r.tenant_id = ${tenantId}::uuid AND r.replied_at IS NULL
    RETURNING r.campaign_id`.execute(tx);
  // Recipients that had replied already: an earlier reply arriving late, or a first tap after text.
  await sql`
    UPDATE campaign_recipients r SET replied_at = least(r.replied_at, v.at), button_payload = coalesce(r.button_payload, v.payload)
    FROM ${values}
    WHERE r.id = v.id AND r.tenant_id = ${tenantId}::uuid AND r.replied_at IS NOT NULL
      AND (r.replied_at > v.at OR (r.button_payload IS NULL AND v.payload IS NOT NULL))`.execute(tx);
  await moveEngagementCounters(tx, first.map((r) => r.campaign_id), 'replied');
  return first.length;
}

/** One counter move per campaign for recipients that replied or clicked for the first time. */
export async function moveEngagementCounters(tx: Tx, campaignIds: string[], counter: 'replied' | 'clicked'): Promise<void> {
  if (campaignIds.length === 0) return;
  const counts = new Map<string, number>();
  for (const id of campaignIds) counts.set(id, (counts.get(id) ?? 0) + 1);
  await tx.insertInto('campaign_counter_moves')
    .values([...counts].map(([campaign_id, n]) => ({ campaign_id, pending: 0, sent: 0, delivered: 0, read: 0, failed: 0, [counter]: n })))
    .execute();
}

/** A rate of `sent`, to 4 decimals; null when nothing was sent. */
const rate = (n: number, sent: number) => (sent === 0 ? null : Math.round((n / sent) * 10_000) / 10_000);

/** GET one campaign's funnel: each stage's recipients and their share of those sent. */
export function funnelOf(stats: { sent: number; delivered: number; read: number; replied: number; clicked: number }) {
  const { sent, delivered, read, replied, clicked } = stats;
  return {
    sent, delivered, read, replied, clicked,
    delivered_rate: rate(delivered, sent), read_rate: rate(read, sent), replied_rate: rate(replied, sent), clicked_rate: rate(clicked, sent),
  };
}

/** Retarget segments (issue 25 §3): which recipients of the source campaign the new one goes to. */
export const SEGMENTS = ['failed', 'not_delivered', 'delivered_not_read', 'read_not_replied', 'replied', 'clicked', 'not_clicked'] as const;
export type Segment = (typeof SEGMENTS)[number];

/** The segment as a condition on campaign_recipients (alias r). */
export function segmentCondition(segment: Segment) {
  switch (segment) {
    case 'failed': return sql`r.status = 'failed'`;
    // Sent but never delivered (no delivered callback came), or failed.
    case 'not_delivered': return sql`r.status IN ('sent', 'failed')`;
    case 'delivered_not_read': return sql`r.status = 'delivered'`;
    case 'read_not_replied': return sql`r.status = 'read' AND r.replied_at IS NULL`;
    case 'replied': return sql`r.replied_at IS NOT NULL`;
    case 'clicked': return sql`r.clicked_at IS NOT NULL`;
    case 'not_clicked': return sql`r.status IN ('sent', 'delivered', 'read') AND r.clicked_at IS NULL`;
  }
}

/** What the 400 says when a segment has no recipients. */
export const SEGMENT_WORDS: Record<Segment, string> = {
  failed: 'failed recipients',
  not_delivered: 'recipients whose message was not delivered',
  delivered_not_read: 'recipients whose message was delivered but not read',
  read_not_replied: 'recipients who read the message but did not reply',
  replied: 'recipients who replied',
  clicked: 'recipients who clicked the link',
  not_clicked: 'sent recipients who did not click the link',
};
