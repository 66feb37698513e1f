import type { Selectable } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import type { MediaTable } from '../../db/schema.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import { pageWithTotal } from '../../db/page.ts';

export type MediaRow = Selectable<MediaTable>;

export const mediaRepository = {
  async insert(db: Queryable, values: Omit<MediaRow, 'created_at' | 'deleted_at' | 'upstream_media_id' | 'upstream_phone_number_id' | 'upstream_uploaded_at'>): Promise<MediaRow> {
    return db.insertInto('media').values(values).returningAll().executeTakeFirstOrThrow();
  },

  async findById(db: Queryable, tenantId: string, id: string): Promise<MediaRow | undefined> {
    if (!isUuid(id)) return undefined;
    return db.selectFrom('media').selectAll()
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('deleted_at', 'is', null)
      .executeTakeFirst();
  },

  async list(db: Queryable, tenantId: string, limit: number, offset: number) {
    const base = db.selectFrom('media').where('tenant_id', '=', tenantId).where('deleted_at', 'is', null);
    return pageWithTotal(base, (q) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset));
  },

  async softDelete(db: Queryable, tenantId: string, id: string): Promise<MediaRow | undefined> {
    if (!isUuid(id)) return undefined;
    return db.updateTable('media').set({ deleted_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('deleted_at', 'is', null)
      .returningAll().executeTakeFirst();
  },

  async recordUpstreamUpload(db: Queryable, tenantId: string, id: string, upstreamMediaId: string, phoneNumberId: string): Promise<void> {
    await db.updateTable('media').set({ upstream_media_id: upstreamMediaId, upstream_phone_number_id: phoneNumberId, upstream_uploaded_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).execute();
  },
};
