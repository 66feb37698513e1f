import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { ContactNotesTable } from '../../db/schema.ts';
import { pageWithTotal } from '../../db/page.ts';

export type NoteRow = Selectable<ContactNotesTable>;

export const notesRepository = {
  async insert(tx: Tx, tenantId: string, contactId: string, content: string): Promise<NoteRow> {
    return tx.insertInto('contact_notes').values({ id: randomUUID(), tenant_id: tenantId, contact_id: contactId, content })
      .returningAll().executeTakeFirstOrThrow();
  },

  async list(db: Queryable, tenantId: string, contactId: string, limit: number, offset: number) {
    const base = db.selectFrom('contact_notes').where('tenant_id', '=', tenantId).where('contact_id', '=', contactId);
    return pageWithTotal(base, (q) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset));
  },
};
