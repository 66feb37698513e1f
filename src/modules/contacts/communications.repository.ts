import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { ContactCommunicationsTable } from '../../db/schema.ts';
import { recordEvents } from '../../events/events.ts';
import { pageWithTotal } from '../../db/page.ts';

export interface Communication {
  id: string;
  contact_id: string;
  direction: 'outbound' | 'inbound';
  channel: string;
  message_id: string | null;
  summary: string | null;
  /** Inbound only: the sender's business-scoped user id, when the upstream gave one. */
  from_user_id: string | null;
  created_at: string;
}

function toCommunication(row: Selectable<ContactCommunicationsTable>): Communication {
  return {
    id: row.id, contact_id: row.contact_id, direction: row.direction as Communication['direction'], channel: row.channel,
    message_id: row.message_id, summary: row.summary, from_user_id: row.from_user_id, created_at: row.created_at.toISOString(),
  };
}

/**
 * Attaches a communication-history row to a contact and emits contact.communication_added, in the
 * caller's transaction (called for every outbound and inbound message of a known contact).
 */
export async function addCommunication(tx: Tx, tenantId: string, input: {
  contactId: string; direction: 'outbound' | 'inbound'; messageId: string | null; summary: string | null; fromUserId?: string | null;
}): Promise<Communication> {
  const row = await tx.insertInto('contact_communications')
    .values({ id: randomUUID(), tenant_id: tenantId, contact_id: input.contactId, direction: input.direction, message_id: input.messageId, summary: input.summary, from_user_id: input.fromUserId ?? null })
    .returningAll().executeTakeFirstOrThrow();
  const communication = toCommunication(row);
  await recordEvents(tx, tenantId, [{ type: 'contact.communication_added', data: communication }]);
  return communication;
}

export async function listCommunications(db: Queryable, tenantId: string, contactId: string, limit: number, offset: number) {
  const base = db.selectFrom('contact_communications').where('tenant_id', '=', tenantId).where('contact_id', '=', contactId);
  const { rows, total } = await pageWithTotal(base, (q) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset));
  return { rows: rows.map(toCommunication), total };
}
