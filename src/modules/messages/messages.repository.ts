import { sql } from 'kysely';
import type { Queryable } from '../../db/database.ts';

export const messagesRepository = {
  /**
   * Records an outbound message before the upstream call, linking the live contact with this
   * phone in the same statement.
   */
  async insertAccepted(db: Queryable, tenantId: string, values: {
    id: string; templateId: string; templateName: string; language: string; to: string; components: unknown[]; campaignId?: string | null;
  }): Promise<{ id: string; contact_id: string | null }> {
    return db.insertInto('messages').values({
      id: values.id,
      tenant_id: tenantId,
      contact_id: sql<string | null>`(SELECT id FROM contacts WHERE tenant_id = ${tenantId} AND phone = ${values.to} AND deleted_at IS NULL)`,
      template_id: values.templateId,
      template_name: values.templateName,
      language: values.language,
      to_phone: values.to,
      components: JSON.stringify(values.components),
      status: 'accepted',
      campaign_id: values.campaignId ?? null,
      callback_data: values.id,
    }).returning(['id', 'contact_id']).executeTakeFirstOrThrow();
  },

  /** A status callback may have set the id already (it races the send response); keep the first. */
  async recordUpstreamId(db: Queryable, tenantId: string, id: string, upstreamMessageId: string): Promise<void> {
    await db.updateTable('messages')
      .set({ upstream_message_id: sql`coalesce(upstream_message_id, ${upstreamMessageId})`, updated_at: new Date() } as never)
      .where('tenant_id', '=', tenantId).where('id', '=', id).execute();
  },

  /** The upstream refused the send synchronously: the row keeps the reason. No event (the caller got the error). */
  async recordSendFailure(db: Queryable, tenantId: string, id: string, failure: { final: boolean; code: number | null; title: string }): Promise<void> {
    await db.updateTable('messages')
      .set({
        ...(failure.final ? { status: 'failed', status_rank: 4, failed_at: new Date() } : {}),
        error_code: failure.code, error_title: failure.title.slice(0, 500), updated_at: new Date(),
      })
      .where('tenant_id', '=', tenantId).where('id', '=', id).execute();
  },
};
