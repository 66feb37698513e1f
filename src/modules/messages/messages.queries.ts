import { sql, type Selectable } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import { pageWithTotal } from '../../db/page.ts';
import type { InboundMessagesTable, MessagesTable } from '../../db/schema.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import { roundMoney } from '../pricing/rate-card.ts';
import type { InboundMessage, Message, MessageListQuery, OutboundMessage } from './messages.schemas.ts';

type MessageRow = Selectable<MessagesTable>;
type InboundRow = Selectable<InboundMessagesTable>;

const COLUMNS = [
  'id', 'upstream_message_id', 'to_phone', 'contact_id', 'campaign_id', 'template_name', 'language', 'status',
  'sent_at', 'delivered_at', 'read_at', 'failed_at', 'error_code', 'error_title', 'reactions', 'created_at', 'updated_at',
  'pricing_category', 'pricing_type', 'pricing_billable', 'pricing_model', 'price_amount', 'price_currency',
] as const;

const INBOUND_COLUMNS = [
  'id', 'upstream_message_id', 'from_phone', 'from_user_id', 'contact_id', 'type', 'text', 'details', 'reactions',
  'edited_at', 'deleted_at', 'received_at', 'created_at',
] as const;

type PricingColumns = Pick<MessageRow, 'pricing_category' | 'pricing_type' | 'pricing_billable' | 'pricing_model' | 'price_amount' | 'price_currency'>;

/** A sent message's `pricing` and `price` (GET /messages, the campaign recipients); received messages have none. */
export function pricingOf(row: PricingColumns): Pick<OutboundMessage, 'pricing' | 'price'> {
  return {
    pricing: row.pricing_category === null ? null : { category: row.pricing_category, type: row.pricing_type, billable: row.pricing_billable, pricing_model: row.pricing_model },
    price: row.price_amount === null || row.price_currency === null ? null : { amount: roundMoney(Number(row.price_amount)), currency: row.price_currency },
  };
}

export function toMessage(row: Pick<MessageRow, (typeof COLUMNS)[number]>): OutboundMessage {
  return {
    id: row.id,
    direction: 'outbound',
    message_id: row.upstream_message_id,
    to: row.to_phone,
    contact_id: row.contact_id,
    campaign_id: row.campaign_id,
    template_name: row.template_name,
    language: row.language,
    status: row.status as OutboundMessage['status'],
    sent_at: isoOrNull(row.sent_at),
    delivered_at: isoOrNull(row.delivered_at),
    read_at: isoOrNull(row.read_at),
    failed_at: isoOrNull(row.failed_at),
    // A refusal or a timeout of the send call leaves a title (and the upstream's code, when it gave one).
    error: row.error_title === null && row.error_code === null ? null : { code: row.error_code, title: row.error_title ?? '' },
    reactions: row.reactions ?? [],
    ...pricingOf(row),
    created_at: row.created_at.toISOString(),
    updated_at: isoOrNull(row.updated_at),
  };
}

export function toInboundMessage(row: Pick<InboundRow, (typeof INBOUND_COLUMNS)[number]>): InboundMessage {
  return {
    id: row.id,
    direction: 'inbound',
    message_id: row.upstream_message_id,
    from: row.from_phone,
    from_user_id: row.from_user_id,
    contact_id: row.contact_id,
    type: row.type,
    text: row.text,
    // Stored as message.received carried them (context, button, interactive, media, ...).
    ...(row.details ?? {}),
    reactions: row.reactions ?? [],
    edited_at: isoOrNull(row.edited_at),
    deleted_at: isoOrNull(row.deleted_at),
    timestamp: row.received_at.toISOString(),
    created_at: row.created_at.toISOString(),
  };
}

const OUTBOUND_ONLY = ['to', 'status', 'campaign_id', 'template_name'] as const;

/** Which tables a list query reads: a filter only one direction has leaves the other out. */
function directionsOf(query: MessageListQuery): { outbound: boolean; inbound: boolean } {
  const outboundOnly = OUTBOUND_ONLY.some((f) => query[f] !== undefined);
  const inboundOnly = query.from !== undefined;
  return {
    outbound: query.direction !== 'inbound' && !inboundOnly,
    inbound: query.direction !== 'outbound' && !outboundOnly,
  };
}

/** Reads of stored messages (sent and received), always within one tenant. */
export const messageQueries = {
  /** By our id or by the upstream message id (what the send response and the message.* events carry). */
  async find(db: Queryable, tenantId: string, id: string): Promise<Message | undefined> {
    const outbound = await db.selectFrom('messages').select(COLUMNS).where('tenant_id', '=', tenantId)
      .where(isUuid(id) ? 'id' : 'upstream_message_id', '=', id).executeTakeFirst();
    if (outbound) return toMessage(outbound);
    const inbound = await messageQueries.findInbound(db, tenantId, id);
    return inbound && toInboundMessage(inbound);
  },

  async findInbound(db: Queryable, tenantId: string, id: string) {
    return db.selectFrom('inbound_messages').select(INBOUND_COLUMNS).where('tenant_id', '=', tenantId)
      .where(isUuid(id) ? 'id' : 'upstream_message_id', '=', id).where('annotates_upstream_id', 'is', null).executeTakeFirst();
  },

  /**
   * Newest first; each filter narrows (to, contact and campaign have indexes of their own,
   * migration 0011; inbound ones, 0022). Both directions: one page of ids over the two tables,
   * then their rows.
   */
  async list(db: Queryable, tenantId: string, query: MessageListQuery, offset: number): Promise<{ rows: Message[]; total: number }> {
    const { outbound, inbound } = directionsOf(query);
    // Passed as text so PostgreSQL keeps the instant's full precision (a JS Date keeps milliseconds).
    const after = query.created_after === undefined ? undefined : sql<Date>`${query.created_after}::timestamptz`;
    const before = query.created_before === undefined ? undefined : sql<Date>`${query.created_before}::timestamptz`;
    let sent = db.selectFrom('messages').where('tenant_id', '=', tenantId);
    if (query.to !== undefined) sent = sent.where('to_phone', '=', query.to);
    if (query.status !== undefined) sent = sent.where('status', '=', query.status);
    if (query.contact_id !== undefined) sent = sent.where('contact_id', '=', query.contact_id);
    if (query.campaign_id !== undefined) sent = sent.where('campaign_id', '=', query.campaign_id);
    if (query.template_name !== undefined) sent = sent.where('template_name', '=', query.template_name);
    if (after) sent = sent.where('created_at', '>=', after);
    if (before) sent = sent.where('created_at', '<', before);
    let received = db.selectFrom('inbound_messages').where('tenant_id', '=', tenantId).where('annotates_upstream_id', 'is', null);
    if (query.from !== undefined) received = received.where('from_phone', '=', query.from);
    if (query.contact_id !== undefined) received = received.where('contact_id', '=', query.contact_id);
    if (after) received = received.where('created_at', '>=', after);
    if (before) received = received.where('created_at', '<', before);

    if (!outbound && !inbound) return { rows: [], total: 0 }; // e.g. direction=inbound with an outbound filter
    if (outbound && !inbound) {
      const { rows, total } = await pageWithTotal(sent, (q) => q.select(COLUMNS).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(query.limit).offset(offset));
      return { rows: rows.map(toMessage), total };
    }
    if (inbound && !outbound) {
      const { rows, total } = await pageWithTotal(received, (q) => q.select(INBOUND_COLUMNS).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(query.limit).offset(offset));
      return { rows: rows.map(toInboundMessage), total };
    }
    const count = (q: typeof sent | typeof received) => (q as typeof sent).select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow();
    const [page, sentCount, receivedCount] = await Promise.all([
      sent.select(['id', 'created_at', sql<string>`'outbound'`.as('direction')])
        .unionAll(received.select(['id', 'created_at', sql<string>`'inbound'`.as('direction')]) as never)
        .orderBy('created_at', 'desc').orderBy('id', 'desc').limit(query.limit).offset(offset).execute(),
      count(sent), count(received),
    ]);
    const ids = (direction: string) => page.filter((r) => r.direction === direction).map((r) => r.id);
    const [sentRows, receivedRows] = await Promise.all([
      ids('outbound').length === 0 ? [] : db.selectFrom('messages').select(COLUMNS).where('tenant_id', '=', tenantId).where('id', 'in', ids('outbound')).execute(),
      ids('inbound').length === 0 ? [] : db.selectFrom('inbound_messages').select(INBOUND_COLUMNS).where('tenant_id', '=', tenantId).where('id', 'in', ids('inbound')).execute(),
    ]);
    const byId = new Map<string, Message>([...sentRows.map((r) => [r.id, toMessage(r)] as const), ...receivedRows.map((r) => [r.id, toInboundMessage(r)] as const)]);
    return { rows: page.flatMap((r) => byId.get(r.id) ?? []), total: Number(sentCount.n) + Number(receivedCount.n) };
  },
};
