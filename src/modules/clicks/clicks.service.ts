import { sql } from 'kysely';
import type { Db } from '../../db/database.ts';
import { moveEngagementCounters } from '../campaigns/campaigns.engagement.ts';
import type { MappedContact, VariableMapping } from '../campaigns/campaigns.mapping.ts';
import { destinationFor, recipientOfToken } from './clicks.tracking.ts';

/**
 * GET /r/{token}: records a recipient's click and answers where to send them. Only a token of ours
 * whose recipient's campaign tracks clicks and whose destination is an https URL redirects: anything
 * else is not found, so the route can never redirect elsewhere (no open redirect).
 */
export class ClicksService {
  constructor(private db: Db, private secretsKey: Buffer) {}

  async click(token: string): Promise<string | null> {
    const recipientId = recipientOfToken(this.secretsKey, token);
    if (!recipientId) return null;
    return this.db.transaction().execute(async (tx) => {
      // The recipient row is locked first: concurrent clicks count one first click between them.
      const { rows } = await sql<MappedContact & { tenant_id: string; campaign_id: string; click_count: number | null; variable_mapping: unknown; has_contact: boolean }>`
        SELECT r.tenant_id, r.campaign_id, r.click_count, k.variable_mapping, c.id IS NOT NULL AS has_contact,
               c.first_name, c.last_name, coalesce(c.phone, r.phone) AS phone, c.email, c.company, c.job_title, c.status, c.source, c.custom_fields
        FROM campaign_recipients r
        JOIN campaigns k ON k.id = r.campaign_id AND k.tenant_id = r.tenant_id
        LEFT JOIN contacts c ON c.id = r.contact_id AND c.tenant_id = r.tenant_id
        WHERE r.id = ${recipientId}::uuid
        FOR UPDATE OF r`.execute(tx);
      const row = rows[0];
      if (!row) return null;
      const destination = destinationFor((row.variable_mapping ?? null) as VariableMapping | null, {
        first_name: row.first_name ?? '', last_name: row.last_name, phone: row.phone, email: row.email, company: row.company, job_title: row.job_title,
        status: row.status, source: row.source ?? '', custom_fields: row.custom_fields ?? {},
      });
      if (!destination) return null;
      await tx.updateTable('campaign_recipients')
        .set({ clicked_at: sql`coalesce(clicked_at, now())`, click_count: sql`coalesce(click_count, 0) + 1` })
        .where('id', '=', recipientId).where('tenant_id', '=', row.tenant_id).execute();
      if (row.click_count === null) await moveEngagementCounters(tx, [row.campaign_id], 'clicked');
      return destination;
    });
  }
}
