import type { Db, Queryable } from '../../db/database.ts';
import { recordEvents } from '../../events/events.ts';
import { notFound } from '../../http/errors.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { offsetOf, paginationFor, type PageQuery } from '../../http/pagination.ts';
import { listCommunications } from './communications.repository.ts';
import { contactsRepository } from './contacts.repository.ts';
import { followupsRepository as followups, type FollowupRow, type FollowupValues } from './followups.repository.ts';
import { notesRepository as notes, type NoteRow } from './notes.repository.ts';
import type { Followup, FollowupCreate, FollowupPatch, Note } from './activity.schemas.ts';
import { completeIdempotencyKey } from '../../http/idempotency.ts';

export function toNote(row: NoteRow): Note {
  return { id: row.id, contact_id: row.contact_id, content: row.content, created_at: row.created_at.toISOString() };
}

export function toFollowup(row: FollowupRow): Followup {
  return {
    id: row.id, contact_id: row.contact_id, title: row.title, due_at: row.due_at.toISOString(), done: row.done, notes: row.notes,
    created_at: row.created_at.toISOString(), updated_at: isoOrNull(row.updated_at),
  };
}

/**
 * Contact sub-resources: notes, follow-ups, communication history. Every call first proves the
 * contact is a live contact of the caller's tenant (404 otherwise, also for another tenant's id);
 * writes and their events commit in one transaction.
 */
export class ContactActivityService {
  constructor(private db: Db) {}

  async addNote(tenantId: string, contactId: string, content: string): Promise<Note> {
    return this.db.transaction().execute(async (tx) => {
      await this.contactOrThrow(tx, tenantId, contactId);
      const note = toNote(await notes.insert(tx, tenantId, contactId, content));
      await recordEvents(tx, tenantId, [{ type: 'contact.note_added', data: note }]);
      await completeIdempotencyKey(tx, note);
      return note;
    });
  }

  async listNotes(tenantId: string, contactId: string, page: PageQuery) {
    await this.contactOrThrow(this.db, tenantId, contactId);
    const { rows, total } = await notes.list(this.db, tenantId, contactId, page.limit, offsetOf(page));
    return { data: rows.map(toNote), pagination: paginationFor(page.page, page.limit, total) };
  }

  async listCommunications(tenantId: string, contactId: string, page: PageQuery) {
    await this.contactOrThrow(this.db, tenantId, contactId);
    const { rows, total } = await listCommunications(this.db, tenantId, contactId, page.limit, offsetOf(page));
    return { data: rows, pagination: paginationFor(page.page, page.limit, total) };
  }

  async createFollowup(tenantId: string, contactId: string, input: FollowupCreate): Promise<Followup> {
    return this.db.transaction().execute(async (tx) => {
      await this.contactOrThrow(tx, tenantId, contactId);
      const followup = toFollowup(await followups.insert(tx, tenantId, contactId, input));
      await recordEvents(tx, tenantId, [{ type: 'followup.created', data: followup }]);
      await completeIdempotencyKey(tx, followup);
      return followup;
    });
  }

  async listFollowups(tenantId: string, contactId: string, page: PageQuery) {
    await this.contactOrThrow(this.db, tenantId, contactId);
    const { rows, total } = await followups.list(this.db, tenantId, contactId, page.limit, offsetOf(page));
    return { data: rows.map(toFollowup), pagination: paginationFor(page.page, page.limit, total) };
  }

  /** Only sent fields change; a patch that changes nothing returns the follow-up and emits nothing. */
  async updateFollowup(tenantId: string, contactId: string, id: string, patch: FollowupPatch): Promise<Followup> {
    return this.db.transaction().execute(async (tx) => {
      await this.contactOrThrow(tx, tenantId, contactId);
      const current = await followups.lock(tx, tenantId, contactId, id);
      if (!current) throw notFound('Follow-up');
      const before = toFollowup(current);
      const changed = Object.entries(patch).filter(([key, value]) => {
        const old = before[key as keyof Followup];
        return key === 'due_at' ? new Date(value as string).getTime() !== new Date(old as string).getTime() : old !== value;
      });
      if (changed.length === 0) return before;
      const row = await followups.update(tx, tenantId, contactId, id, Object.fromEntries(changed) as Partial<FollowupValues>);
      if (!row) throw notFound('Follow-up');
      const followup = toFollowup(row);
      await recordEvents(tx, tenantId, [{ type: 'followup.updated', data: followup }]);
      return followup;
    });
  }

  async deleteFollowup(tenantId: string, contactId: string, id: string): Promise<{ message: string }> {
    return this.db.transaction().execute(async (tx) => {
      await this.contactOrThrow(tx, tenantId, contactId);
      const row = await followups.delete(tx, tenantId, contactId, id);
      if (!row) throw notFound('Follow-up');
      await recordEvents(tx, tenantId, [{ type: 'followup.deleted', data: toFollowup(row) }]);
      return { message: 'Follow-up deleted' };
    });
  }

  private async contactOrThrow(db: Queryable, tenantId: string, contactId: string) {
    const contact = await contactsRepository.findById(db, tenantId, contactId);
    if (!contact) throw notFound('Contact');
    return contact;
  }
}
