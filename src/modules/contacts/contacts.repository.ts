import { randomUUID } from 'node:crypto';
import { sql, type Selectable } from 'kysely';
import type { Queryable, Tx } from '../../db/database.ts';
import type { ContactsTable } from '../../db/schema.ts';
import { conflict } from '../../http/errors.ts';
import { pageWithTotal } from '../../db/page.ts';

export type ContactRow = Selectable<ContactsTable>;

export interface ContactValues {
  first_name: string;
  phone: string;
  last_name?: string | null;
  email?: string | null;
  company?: string | null;
  job_title?: string | null;
  status?: string | null;
  tags?: string[];
  custom_fields?: object;
  source?: string;
  marketing_opt_out?: boolean;
  marketing_opt_out_at?: Date | null;
  marketing_opt_out_source?: string | null;
  marketing_consent_changed_at?: Date;
  time_zone?: string | null;
}

export interface ContactFilter {
  search?: string;
  status?: string;
  tag?: string;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
export const isUuid = (id: string) => UUID.test(id);

/** A unique-index violation on contacts becomes the spec's 409. */
function rethrowUnique(err: unknown): never {
  const e = err as { code?: string; constraint?: string; message?: string };
  if (e.code === '23505') {
    const field = (e.constraint ?? e.message ?? '').includes('email') ? 'email' : 'phone';
    throw conflict(`A contact with this ${field} already exists`);
  }
  throw err;
}

function escapeLike(term: string): string {
  return term.replace(/[\\%_]/g, (c) => `\\${c}`);
}

function toColumns(values: Partial<ContactValues>) {
  const { custom_fields, ...rest } = values;
  return { ...rest, ...(custom_fields !== undefined ? { custom_fields: JSON.stringify(custom_fields) } : {}) };
}

export const contactsRepository = {
  async findById(db: Queryable, tenantId: string, id: string): Promise<ContactRow | undefined> {
    if (!isUuid(id)) return undefined;
    // Raw SQL on the hottest read: the query builder's per-call compile shows in profiles.
    const { rows } = await sql<ContactRow>`
      SELECT * FROM contacts WHERE tenant_id = ${tenantId} AND id = ${id} AND deleted_at IS NULL`.execute(db);
    return rows[0];
  },

  /** The same row, locked until the transaction ends: a change decided on it cannot race another. */
  async lockById(tx: Tx, tenantId: string, id: string): Promise<ContactRow | undefined> {
    if (!isUuid(id)) return undefined;
    const { rows } = await sql<ContactRow>`
      SELECT * FROM contacts WHERE tenant_id = ${tenantId} AND id = ${id} AND deleted_at IS NULL FOR UPDATE`.execute(tx);
    return rows[0];
  },

  async findByPhone(db: Queryable, tenantId: string, phone: string): Promise<ContactRow | undefined> {
    return db.selectFrom('contacts').selectAll()
      .where('tenant_id', '=', tenantId).where('phone', '=', phone).where('deleted_at', 'is', null)
      .executeTakeFirst();
  },

  async insert(tx: Tx, tenantId: string, values: ContactValues): Promise<ContactRow> {
    try {
      return await tx.insertInto('contacts')
        .values({ id: randomUUID(), tenant_id: tenantId, ...toColumns(values) } as never)
        .returningAll().executeTakeFirstOrThrow();
    } catch (err) {
      rethrowUnique(err);
    }
  },

  /** Inserts many in one statement; rows that hit a unique index are skipped, not failed. */
  async insertManySkippingDuplicates(tx: Tx, tenantId: string, values: ContactValues[]): Promise<ContactRow[]> {
    if (values.length === 0) return [];
    return tx.insertInto('contacts')
      .values(values.map((v) => ({ id: randomUUID(), tenant_id: tenantId, ...toColumns(v) }) as never))
      .onConflict((oc) => oc.doNothing())
      .returningAll().execute();
  },

  /** Which of these phones and emails are already held by live contacts of the tenant. */
  async findTaken(db: Queryable, tenantId: string, phones: string[], emails: string[]) {
    const rows = await db.selectFrom('contacts').select(['phone', 'email'])
      .where('tenant_id', '=', tenantId).where('deleted_at', 'is', null)
      .where((eb) => eb.or([
        eb('phone', 'in', phones.length ? phones : ['']),
        eb(sql<string>`lower(email)`, 'in', emails.length ? emails : ['']),
      ]))
      .execute();
    return { phones: new Set(rows.map((r) => r.phone)), emails: new Set(rows.filter((r) => r.email).map((r) => r.email!.toLowerCase())) };
  },

  async update(tx: Tx, tenantId: string, id: string, values: Partial<ContactValues>): Promise<ContactRow | undefined> {
    try {
      return await tx.updateTable('contacts')
        .set({ ...toColumns(values), updated_at: new Date() } as never)
        .where('tenant_id', '=', tenantId).where('id', '=', id).where('deleted_at', 'is', null)
        .returningAll().executeTakeFirst();
    } catch (err) {
      rethrowUnique(err);
    }
  },

  async softDelete(tx: Tx, tenantId: string, id: string): Promise<ContactRow | undefined> {
    if (!isUuid(id)) return undefined;
    return tx.updateTable('contacts').set({ deleted_at: new Date(), updated_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', id).where('deleted_at', 'is', null)
      .returningAll().executeTakeFirst();
  },

  async list(db: Queryable, tenantId: string, filter: ContactFilter, limit: number, offset: number) {
    let query = db.selectFrom('contacts').where('tenant_id', '=', tenantId).where('deleted_at', 'is', null);
    if (filter.search) query = query.where('search_text', 'like', `%${escapeLike(filter.search.toLowerCase())}%`);
    if (filter.status !== undefined) query = query.where('status', '=', filter.status);
    if (filter.tag !== undefined) query = query.where(sql<boolean>`tags @> ARRAY[${filter.tag}]::text[]`);
    const countAll = async () => Number((await query.select((eb) => eb.fn.countAll<number>().as('n')).executeTakeFirstOrThrow()).n);

    if (!filter.search) return pageWithTotal(query, (q) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset));
    // The total needs every match, so the matches come from the trigram index once (materialised),
    // then are counted and paged. Left to itself the planner would walk the created_at index and
    // filter a million rows to find fifty (measured: 450 ms against 5 ms).
    const rows = await db
      .with((cte) => cte('matches').materialized(), () => query.selectAll())
      .selectFrom('matches').selectAll().select(sql<number>`count(*) OVER ()`.as('total_matches'))
      .orderBy('created_at', 'desc').orderBy('id', 'desc').limit(limit).offset(offset)
      .execute();
    const total = rows.length > 0 ? Number(rows[0].total_matches) : offset > 0 ? await countAll() : 0;
    return { rows: rows.map(({ total_matches: _, ...row }) => row), total };
  },
};
