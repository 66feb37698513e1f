import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { ContactFollowupsTable } from '../../db/schema.ts';
import { isUuid } from './contacts.repository.ts';
import { pageWithTotal } from '../../db/page.ts';

export type FollowupRow = Selectable<ContactFollowupsTable>;

export interface FollowupValues {
  title: string;
  due_at: string;
  done?: boolean;
  notes?: string | null;
}

export const followupsRepository = {
  // Columns are named one by one: the tenant and contact come from the route, never from a body.
  async insert(tx: Tx, tenantId: string, contactId: string, values: FollowupValues): Promise<FollowupRow> {
    return tx.insertInto('contact_followups')
      .values({ id: randomUUID(), tenant_id: tenantId, contact_id: contactId, title: values.title, due_at: values.due_at, done: values.done, notes: values.notes })
      .returningAll().executeTakeFirstOrThrow();
  },

  /** Locked until the transaction ends: a change decided on it cannot race another. */
  async lock(tx: Tx, tenantId: string, contactId: string, id: string): Promise<FollowupRow | undefined> {
    if (!isUuid(id)) return undefined;
    return tx.selectFrom('contact_followups').selectAll()
      .where('tenant_id', '=', tenantId).where('contact_id', '=', contactId).where('id', '=', id)
      .forUpdate().executeTakeFirst();
  },

  async update(tx: Tx, tenantId: string, contactId: string, id: string, values: Partial<FollowupValues>): Promise<FollowupRow | undefined> {
    const { title, due_at, done, notes } = values;
    return tx.updateTable('contact_followups').set({ title, due_at, done, notes, updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('contact_id', '=', contactId).where('id', '=', id)
      .returningAll().executeTakeFirst();
  },

  async delete(tx: Tx, tenantId: string, contactId: string, id: string): Promise<FollowupRow | undefined> {
    if (!isUuid(id)) return undefined;
    return tx.deleteFrom('contact_followups')
      .where('tenant_id', '=', tenantId).where('contact_id', '=', contactId).where('id', '=', id)
      .returningAll().executeTakeFirst();
  },

  /** Soonest due first. */
  async list(db: Queryable, tenantId: string, contactId: string, limit: number, offset: number) {
    const base = db.selectFrom('contact_followups').where('tenant_id', '=', tenantId).where('contact_id', '=', contactId);
    return pageWithTotal(base, (q) => q.selectAll().orderBy('due_at', 'asc').orderBy('id', 'asc').limit(limit).offset(offset));
  },
};
