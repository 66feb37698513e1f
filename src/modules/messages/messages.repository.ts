import { sql } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import { unnestRows } from '../../db/unnest.ts';

export interface NewMessage {
  id: string;
  templateId: string;
  templateName: string;
  language: string;
  to: string;
  components: unknown[];
  campaignId?: string | null;
}

function messageValues(tenantId: string, values: NewMessage, upstreamMessageId: string | null) {
  return {
    id: values.id,
    tenant_id: tenantId,
    contact_id: sql<string | null>`(SELECT id FROM contacts WHERE tenant_id = ${tenantId} AND phone = ${values.to} AND deleted_at IS NULL)`,
    template_id: values.templateId,
    template_name: values.templateName,
    language: values.language,
    to_phone: values.to,
    components: JSON.stringify(values.components),
    upstream_message_id: upstreamMessageId,
    status: 'accepted',
    campaign_id: values.campaignId ?? null,
    callback_data: values.id,
  };
}

export const messagesRepository = {
  async findById(db: Queryable, tenantId: string, id: string) {
    return db.selectFrom('messages').selectAll().where('tenant_id', '=', tenantId).where('id', '=', id).executeTakeFirst();
  },

  /**
   * Records an outbound message before the upstream call, linking the live contact with this
   * phone in the same statement (one round trip). This row is what a status callback that
   * overtakes the send response finds.
   */
  async insertAccepted(db: Queryable, tenantId: string, values: NewMessage): Promise<{ id: string; contact_id: string | null }> {
    // Raw SQL on the hot send path: the query builder's per-call compile cost shows in profiles.
    const { rows } = await sql<{ id: string; contact_id: string | null }>`
      INSERT INTO messages (id, tenant_id, contact_id, template_id, template_name, language, to_phone, components, status, campaign_id, callback_data)
      VALUES (${values.id}, ${tenantId},
        (SELECT id FROM contacts WHERE tenant_id = ${tenantId} AND phone = ${values.to} AND deleted_at IS NULL),
        ${values.templateId}, ${values.templateName}, ${values.language}, ${values.to}, ${JSON.stringify(values.components)}::jsonb,
        'accepted', ${values.campaignId ?? null}, ${values.id})
      RETURNING id, contact_id`.execute(db);
    return rows[0];
  },

  /**
   * Durably records the upstream message id after an accepted send. A status callback that
   * arrived first sets the id itself, while holding the row lock; that row is skipped rather than
   * waited for (SKIP LOCKED), which keeps sends from queueing behind callback batches.
   */
  async recordAccepted(db: Queryable, tenantId: string, values: NewMessage, upstreamMessageId: string): Promise<void> {
    const updated = await sql`
      UPDATE messages SET upstream_message_id = ${upstreamMessageId}, updated_at = now(),
        status = CASE WHEN status = 'unknown' THEN 'accepted' ELSE status END, error_title = CASE WHEN status = 'unknown' THEN NULL ELSE error_title END
      WHERE id = (SELECT id FROM messages WHERE tenant_id = ${tenantId} AND id = ${values.id} AND upstream_message_id IS NULL FOR UPDATE SKIP LOCKED)`.execute(db);
    if (Number(updated.numAffectedRows ?? 0) > 0) return;
    // Skipped (locked by a callback, or already set): a plain read sees the committed row without
    // waiting on the callback's lock; the insert only covers a row that went missing.
    const exists = await db.selectFrom('messages').select('id').where('tenant_id', '=', tenantId).where('id', '=', values.id).executeTakeFirst();
    if (exists) return;
    await db.insertInto('messages').values(messageValues(tenantId, values, upstreamMessageId))
      .onConflict((oc) => oc.column('id').doNothing()).execute();
  },

  /** insertAccepted for many messages in one statement (the send path's write batcher). */
  async insertAcceptedMany(db: Queryable, items: { tenantId: string; values: NewMessage }[]): Promise<{ id: string; contact_id: string | null }[]> {
    const batch = unnestRows(items, 'v', [
      ['id', 'uuid', (i) => i.values.id], ['tenant_id', 'uuid', (i) => i.tenantId], ['template_id', 'uuid', (i) => i.values.templateId],
      ['template_name', 'text', (i) => i.values.templateName], ['language', 'text', (i) => i.values.language], ['to_phone', 'text', (i) => i.values.to],
      ['components', 'jsonb', (i) => JSON.stringify(i.values.components)], ['campaign_id', 'uuid', (i) => i.values.campaignId ?? null]]);
    const { rows: inserted } = await sql<{ id: string; contact_id: string | null }>`
      INSERT INTO messages (id, tenant_id, contact_id, template_id, template_name, language, to_phone, components, status, campaign_id, callback_data)
      SELECT v.id, v.tenant_id, (SELECT c.id FROM contacts c WHERE c.tenant_id = v.tenant_id AND c.phone = v.to_phone AND c.deleted_at IS NULL),
        v.template_id, v.template_name, v.language, v.to_phone, v.components, 'accepted', v.campaign_id, v.id::text
      FROM ${batch}
      RETURNING id, contact_id`.execute(db);
    const byId = new Map(inserted.map((r) => [r.id, r]));
    return items.map(({ values }) => byId.get(values.id)!);
  },

  /** recordAccepted for many messages: one SKIP LOCKED update, then the rare leftovers one by one. */
  async recordAcceptedMany(db: Queryable, items: { tenantId: string; values: NewMessage; upstreamMessageId: string }[]): Promise<void[]> {
    const batch = unnestRows(items, 'v', [['id', 'uuid', (i) => i.values.id], ['tenant_id', 'uuid', (i) => i.tenantId], ['wamid', 'text', (i) => i.upstreamMessageId]]);
    const { rows: updated } = await sql<{ id: string }>`
      WITH v AS (SELECT * FROM ${batch}),
      free AS (
        SELECT m.id FROM messages m JOIN v ON m.id = v.id AND m.tenant_id = v.tenant_id
        WHERE m.upstream_message_id IS NULL
        FOR UPDATE OF m SKIP LOCKED)
      UPDATE messages m SET upstream_message_id = v.wamid, updated_at = now()
      FROM v WHERE m.id = v.id AND m.id IN (SELECT id FROM free)
      RETURNING m.id`.execute(db);
    const done = new Set(updated.map((r) => r.id));
    for (const item of items) {
      if (!done.has(item.values.id)) await messagesRepository.recordAccepted(db, item.tenantId, item.values, item.upstreamMessageId);
    }
    return items.map(() => undefined);
  },

  /** A send whose answer never came: its outcome waits for a callback (our id travels as biz_opaque_callback_data). */
  async markUnknown(db: Queryable, tenantId: string, id: string, reason: string): Promise<void> {
    await db.updateTable('messages').set({ status: 'unknown', error_title: reason.slice(0, 500), updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('status_rank', '=', 0).execute();
  },

  /** A send the upstream refused for good; returns what its message.failed event needs (undefined if it had failed already). */
  async recordFailed(db: Queryable, tenantId: string, id: string, failure: { code: number; title: string }) {
    return db.updateTable('messages')
      .set({ status: 'failed', status_rank: 4, failed_at: new Date(), error_code: failure.code, error_title: failure.title.slice(0, 500), updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('status_rank', '<', 4)
      .returning(['id', 'upstream_message_id', 'to_phone', 'contact_id', 'campaign_id', 'template_name', 'failed_at'])
      .executeTakeFirst();
  },

  /** A send the upstream never took (throttled, unavailable): nothing to keep. */
  async discard(db: Queryable, tenantId: string, id: string): Promise<void> {
    await db.deleteFrom('messages').where('tenant_id', '=', tenantId).where('id', '=', id).where('upstream_message_id', 'is', null).execute();
  },
};
