import { randomUUID } from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import type { TemplatesTable } from '../../db/schema.ts';
import { conflict } from '../../http/errors.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import { pageWithTotal } from '../../db/page.ts';

export type TemplateRow = Selectable<TemplatesTable>;
export type TemplateStatus = 'draft' | 'pending' | 'approved' | 'rejected' | 'paused' | 'disabled';

export const templatesRepository = {
  async insertDraft(db: Queryable, tenantId: string, values: { template_name: string; language: string; category: string; components: unknown[] }): Promise<TemplateRow> {
    try {
      return await db.insertInto('templates')
        .values({ id: randomUUID(), tenant_id: tenantId, ...values, components: JSON.stringify(values.components), status: 'draft' })
        .returningAll().executeTakeFirstOrThrow();
    } catch (err) {
      if ((err as { code?: string }).code === '23505') throw conflict(`A template named "${values.template_name}" in language "${values.language}" already exists`);
      throw err;
    }
  },

  async findById(db: Queryable, tenantId: string, id: string): Promise<TemplateRow | undefined> {
    if (!isUuid(id)) return undefined;
    return db.selectFrom('templates').selectAll().where('tenant_id', '=', tenantId).where('id', '=', id).executeTakeFirst();
  },

  /** Campaigns accept the internal template UUID or the upstream template id. */
  async findByIdOrUpstreamId(db: Queryable, tenantId: string, idOrUpstreamId: string): Promise<TemplateRow | undefined> {
    return db.selectFrom('templates').selectAll().where('tenant_id', '=', tenantId)
      .where((eb) => (isUuid(idOrUpstreamId) ? eb.or([eb('id', '=', idOrUpstreamId), eb('upstream_id', '=', idOrUpstreamId)]) : eb('upstream_id', '=', idOrUpstreamId)))
      .orderBy('created_at', 'desc').executeTakeFirst();
  },

  async findApprovedByNameLanguage(db: Queryable, tenantId: string, name: string, language: string): Promise<TemplateRow | undefined> {
    return db.selectFrom('templates').selectAll()
      .where('tenant_id', '=', tenantId).where('template_name', '=', name).where('language', '=', language).where('status', '=', 'approved')
      .executeTakeFirst();
  },

  async listApproved(db: Queryable, tenantId: string, limit: number, offset: number) {
    const base = db.selectFrom('templates').where('tenant_id', '=', tenantId).where('status', '=', 'approved');
    return pageWithTotal(base, (q) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset));
  },

  /** draft -> submitted; conditional so a concurrent submit cannot win twice. */
  async markSubmitted(db: Queryable, tenantId: string, id: string, submitted: { upstreamId: string; wabaId: string }, status: TemplateStatus, category: string | null): Promise<TemplateRow | undefined> {
    return db.updateTable('templates')
      .set({ status, upstream_id: submitted.upstreamId, waba_id: submitted.wabaId, submitted_at: new Date(), updated_at: new Date(), ...(category ? { category } : {}) })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('status', '=', 'draft')
      .returningAll().executeTakeFirst();
  },

  /** draft -> rejected, when the upstream refused the template at creation (nothing went to review). */
  async markRefused(db: Queryable, tenantId: string, id: string, wabaId: string, reason: string): Promise<TemplateRow | undefined> {
    return db.updateTable('templates')
      .set({ status: 'rejected', rejected_reason: reason, waba_id: wabaId, submitted_at: new Date(), updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('status', '=', 'draft')
      .returningAll().executeTakeFirst();
  },

  /**
   * Applies an upstream review outcome to submitted templates of these tenants, matched by
   * upstream id, else by name and language. Drafts are never touched. Returns the changed rows.
   */
  async applyUpstreamStatus(db: Queryable, tenantIds: string[], match: { upstreamId: string | null; name: string | null; language: string | null },
    status: TemplateStatus, reason: string | null): Promise<TemplateRow[]> {
    if (tenantIds.length === 0) return [];
    const update = (by: 'id' | 'name') => db.updateTable('templates')
      .set({ status, rejected_reason: status === 'rejected' ? reason : sql`rejected_reason`, updated_at: new Date() } as never)
      .where('tenant_id', 'in', tenantIds).where('status', '<>', 'draft').where('status', '<>', status)
      .where((eb) => (by === 'id' ? eb('upstream_id', '=', match.upstreamId!) : eb.and([eb('template_name', '=', match.name!), eb('language', '=', match.language!)])))
      .returningAll().execute();
    if (match.upstreamId) {
      const exists = await db.selectFrom('templates').select('id').where('tenant_id', 'in', tenantIds).where('upstream_id', '=', match.upstreamId).executeTakeFirst();
      if (exists) return update('id');
    }
    if (match.name && match.language) return update('name');
    return [];
  },

  /**
   * Whether an upstream status names a template these tenants are still submitting: a draft of that
   * name and language, and no template with its upstream id yet. The upstream forbids two templates
   * of one name and language in a WABA, so that draft is the one being submitted.
   */
  async isBeingSubmitted(db: Queryable, tenantIds: string[], match: { upstreamId: string | null; name: string | null; language: string | null }): Promise<boolean> {
    if (tenantIds.length === 0 || !match.name || !match.language) return false;
    const draft = await db.selectFrom('templates').select('id').where('tenant_id', 'in', tenantIds).where('status', '=', 'draft')
      .where('template_name', '=', match.name).where('language', '=', match.language).executeTakeFirst();
    if (!draft || !match.upstreamId) return Boolean(draft);
    const known = await db.selectFrom('templates').select('id').where('tenant_id', 'in', tenantIds).where('upstream_id', '=', match.upstreamId).executeTakeFirst();
    return !known;
  },

  /**
   * Claims pending and paused templates (a lost UNPAUSE callback must not keep campaigns paused) whose last poll is older than `intervalMs` (SKIP LOCKED, so several
   * workers never poll the same template), stamping last_polled_at in the same statement.
   */
  async claimDueForPoll(db: Queryable, intervalMs: number, batch: number) {
    const due = new Date(Date.now() - intervalMs);
    return db.updateTable('templates').set({ last_polled_at: new Date() })
      .where('id', 'in', (eb) => eb.selectFrom('templates').select('id')
        .where('status', 'in', ['pending', 'paused']).where('upstream_id', 'is not', null)
        .where((w) => w.or([w('last_polled_at', 'is', null), w('last_polled_at', '<', due)]))
        .where((w) => w.or([w('submitted_at', 'is', null), w('submitted_at', '<', due)]))
        .orderBy(sql`last_polled_at NULLS FIRST`).limit(batch).forUpdate().skipLocked())
      .returning(['id', 'tenant_id', 'upstream_id', 'template_name', 'language'])
      .execute();
  },
};
