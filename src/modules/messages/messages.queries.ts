import { sql, type Selectable } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import { pageWithTotal } from '../../db/page.ts';
import type { MessagesTable } from '../../db/schema.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import { roundMoney } from '../pricing/rate-card.ts';
import type { Message, MessageListQuery } from './messages.schemas.ts';

type MessageRow = Selectable<MessagesTable>;

const COLUMNS = [
  'id', 'upstream_message_id', 'to_phone', 'contact_id', 'campaign_id', 'template_name', 'language', 'status',
  'sent_at', 'delivered_at', 'read_at', 'failed_at', 'error_code', 'error_title', 'created_at', 'updated_at',
  'pricing_category', 'pricing_type', 'pricing_billable', 'pricing_model', 'price_amount', 'price_currency',
] as const;

type PricingColumns = Pick<MessageRow, 'pricing_category' | 'pricing_type' | 'pricing_billable' | 'pricing_model' | 'price_amount' | 'price_currency'>;

/** A message's `pricing` and `price` (GET /messages, the campaign recipients). */
export function pricingOf(row: PricingColumns): Pick<Message, 'pricing' | 'price'> {
  return {
    pricing: row.pricing_category === null ? null : { category: row.pricing_category, type: row.pricing_type, billable: row.pricing_billable, pricing_model: row.pricing_model },
    price: row.price_amount === null || row.price_currency === null ? null : { amount: roundMoney(Number(row.price_amount)), currency: row.price_currency },
  };
}

export function toMessage(row: Pick<MessageRow, (typeof COLUMNS)[number]>): Message {
  return {
    id: row.id,
    message_id: row.upstream_message_id,
    to: row.to_phone,
    contact_id: row.contact_id,
    campaign_id: row.campaign_id,
    template_name: row.template_name,
    language: row.language,
    status: row.status as Message['status'],
    sent_at: isoOrNull(row.sent_at),
    delivered_at: isoOrNull(row.delivered_at),
    read_at: isoOrNull(row.read_at),
    failed_at: isoOrNull(row.failed_at),
    // A refusal or a timeout of the send call leaves a title (and the upstream's code, when it gave one).
    error: row.error_title === null && row.error_code === null ? null : { code: row.error_code, title: row.error_title ?? '' },
    ...pricingOf(row),
    created_at: row.created_at.toISOString(),
    updated_at: isoOrNull(row.updated_at),
  };
}

/** Reads of stored outbound messages, always within one tenant. */
export const messageQueries = {
  /** By our id or by the upstream message id (what the send response and the message.* events carry). */
  async find(db: Queryable, tenantId: string, id: string): Promise<Message | undefined> {
    const row = await db.selectFrom('messages').select(COLUMNS).where('tenant_id', '=', tenantId)
      .where(isUuid(id) ? 'id' : 'upstream_message_id', '=', id).executeTakeFirst();
    return row && toMessage(row);
  },

  /** Newest first; each filter narrows (to, contact and campaign have indexes of their own, migration 0011). */
  async list(db: Queryable, tenantId: string, query: MessageListQuery, offset: number): Promise<{ rows: Message[]; total: number }> {
    let filtered = db.selectFrom('messages').where('tenant_id', '=', tenantId);
    if (query.to !== undefined) filtered = filtered.where('to_phone', '=', query.to);
    if (query.status !== undefined) filtered = filtered.where('status', '=', query.status);
    if (query.contact_id !== undefined) filtered = filtered.where('contact_id', '=', query.contact_id);
    if (query.campaign_id !== undefined) filtered = filtered.where('campaign_id', '=', query.campaign_id);
    if (query.template_name !== undefined) filtered = filtered.where('template_name', '=', query.template_name);
    // Passed as text so PostgreSQL keeps the instant's full precision (a JS Date keeps milliseconds).
    if (query.created_after !== undefined) filtered = filtered.where('created_at', '>=', sql<Date>`${query.created_after}::timestamptz`);
    if (query.created_before !== undefined) filtered = filtered.where('created_at', '<', sql<Date>`${query.created_before}::timestamptz`);
    const { rows, total } = await pageWithTotal(filtered, (q) => q.select(COLUMNS).orderBy('created_at', 'desc').orderBy('id', 'desc').limit(query.limit).offset(offset));
    return { rows: rows.map(toMessage), total };
  },
};
