import { isDeepStrictEqual } from 'node:util';
import Value from 'typebox/value';
import type { Db } from '../../db/database.ts';
import { recordEvents } from '../../events/events.ts';
import { notFound, validationError } from '../../http/errors.ts';
import { completeIdempotencyKey } from '../../http/idempotency.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { unstorableText } from '../../http/storable-text.ts';
import { offsetOf, paginationFor, type PageQuery } from '../../http/pagination.ts';
import { contactsRepository as repo, type ContactFilter, type ContactRow, type ContactValues } from './contacts.repository.ts';
import { ContactCreate, type BulkResult, type Contact, type ContactPatch } from './contacts.schemas.ts';
import { e164Problem } from './phone.ts';
import { knownTimeZones, timeZoneProblem } from '../campaigns/send-window.ts';

export function toContact(row: ContactRow): Contact {
  return {
    id: row.id,
    first_name: row.first_name,
    last_name: row.last_name,
    phone: row.phone,
    email: row.email,
    company: row.company,
    job_title: row.job_title,
    status: row.status,
    tags: row.tags,
    custom_fields: row.custom_fields as Contact['custom_fields'],
    source: row.source,
    marketing_opt_out: row.marketing_opt_out,
    marketing_opt_out_at: isoOrNull(row.marketing_opt_out_at),
    marketing_opt_out_source: row.marketing_opt_out_source as Contact['marketing_opt_out_source'],
    time_zone: row.time_zone,
    created_at: row.created_at.toISOString(),
    updated_at: isoOrNull(row.updated_at),
  };
}

// Bodies are validated but not stripped, so only these keys may reach the database: a body carrying
// tenant_id, id or deleted_at must not write them.
const CREATE_FIELDS = ['first_name', 'phone', 'last_name', 'email', 'company', 'job_title', 'status', 'tags', 'custom_fields', 'source', 'time_zone'] as const;
const PATCH_FIELDS = CREATE_FIELDS.filter((f) => f !== 'source');

function contactFields<T extends object>(input: T, fields: readonly string[]): Partial<ContactValues> {
  return Object.fromEntries(fields.filter((f) => f in input && (input as Record<string, unknown>)[f] !== undefined).map((f) => [f, (input as Record<string, unknown>)[f]]));
}

function e164Phone(phone: string, loc: (string | number)[]): string {
  const problem = e164Problem(phone, 'phone');
  if (problem) throw validationError(problem, loc, phone);
  return phone;
}

function describeFirstError(item: unknown): string {
  const errors = [...Value.Errors(ContactCreate, item)];
  // A nullable field's value failed both branches: what the value was meant to be says more than "must be null".
  const first = errors.find((e) => !(e.keyword === 'type' && (e.params as { type?: unknown }).type === 'null')) ?? errors[0];
  if (!first) return 'invalid contact';
  const field = first.instancePath.split('/').filter(Boolean).join('.');
  if (first.keyword === 'required') return `${(first.params as { requiredProperties?: string[] }).requiredProperties?.join(', ') ?? 'field'} is required`;
  return `${field || 'contact'} ${first.message}`;
}

/** An opt-out (or opt-in) set through the API: now, source `api`. */
function consentColumns(optOut: boolean): Partial<ContactValues> {
  const now = new Date();
  return { marketing_opt_out: optOut, marketing_opt_out_at: optOut ? now : null, marketing_opt_out_source: optOut ? 'api' : null, marketing_consent_changed_at: now };
}

export class ContactsService {
  constructor(private db: Db) {}

  async list(tenantId: string, filter: ContactFilter, page: PageQuery) {
    const { rows, total } = await repo.list(this.db, tenantId, filter, page.limit, offsetOf(page));
    return { data: rows.map(toContact), pagination: paginationFor(page.page, page.limit, total) };
  }

  async get(tenantId: string, id: string): Promise<Contact> {
    const row = await repo.findById(this.db, tenantId, id);
    if (!row) throw notFound('Contact');
    return toContact(row);
  }

  /** A time_zone that is not an IANA zone the database knows: 400. */
  private async checkTimeZone(zone: string | null | undefined): Promise<void> {
    if (zone === null || zone === undefined) return;
    const problem = timeZoneProblem(zone, await knownTimeZones(this.db), 'time_zone');
    if (problem) throw validationError(problem, ['body', 'time_zone'], zone);
  }

  async create(tenantId: string, input: ContactCreate): Promise<Contact> {
    await this.checkTimeZone(input.time_zone);
    const values: ContactValues = { ...contactFields(input, CREATE_FIELDS), first_name: input.first_name, phone: e164Phone(input.phone, ['body', 'phone']), source: input.source ?? 'api' };
    return this.db.transaction().execute(async (tx) => {
      const contact = toContact(await repo.insert(tx, tenantId, values));
      await recordEvents(tx, tenantId, [{ type: 'contact.created', data: contact }]);
      await completeIdempotencyKey(tx, contact);
      return contact;
    });
  }

  /**
   * Validates every item on its own, rejects duplicates inside the batch, then inserts the rest in
   * one statement that skips rows already taken (also by a concurrent request).
   */
  async bulkCreate(tenantId: string, items: unknown[]): Promise<BulkResult> {
    const errors: { index: number; error: string }[] = [];
    const candidates: { index: number; values: ContactValues }[] = [];
    const seenPhones = new Map<string, number>();
    const seenEmails = new Map<string, number>();
    const zones = await knownTimeZones(this.db);

    items.forEach((item, index) => {
      if (!Value.Check(ContactCreate, item)) return errors.push({ index, error: describeFirstError(item) });
      const input = item as ContactCreate;
      const bad = unstorableText(input, []);
      if (bad) return errors.push({ index, error: `${bad.path.join('.')} ${bad.reason}` });
      const problem = e164Problem(input.phone, 'phone');
      if (problem) return errors.push({ index, error: problem });
      const zoneProblem = input.time_zone ? timeZoneProblem(input.time_zone, zones, 'time_zone') : null;
      if (zoneProblem) return errors.push({ index, error: zoneProblem });
      const phone = input.phone;
      const email = input.email?.toLowerCase();
      if (seenPhones.has(phone)) return errors.push({ index, error: `duplicate phone in this batch (same as item ${seenPhones.get(phone)})` });
      if (email && seenEmails.has(email)) return errors.push({ index, error: `duplicate email in this batch (same as item ${seenEmails.get(email)})` });
      seenPhones.set(phone, index);
      if (email) seenEmails.set(email, index);
      candidates.push({ index, values: { ...contactFields(input, CREATE_FIELDS), first_name: input.first_name, phone, source: input.source ?? 'bulk' } });
    });

    return this.db.transaction().execute(async (tx) => {
      const inserted = await repo.insertManySkippingDuplicates(tx, tenantId, candidates.map((c) => c.values));
      const insertedPhones = new Set(inserted.map((r) => r.phone));
      const skipped = candidates.filter((c) => !insertedPhones.has(c.values.phone));
      if (skipped.length > 0) {
        const taken = await repo.findTaken(tx, tenantId, skipped.map((c) => c.values.phone), skipped.flatMap((c) => (c.values.email ? [c.values.email.toLowerCase()] : [])));
        for (const c of skipped) {
          const field = taken.phones.has(c.values.phone) || !c.values.email ? 'phone' : 'email';
          errors.push({ index: c.index, error: `A contact with this ${field} already exists` });
        }
      }
      const contacts = inserted.map(toContact);
      await recordEvents(tx, tenantId, contacts.map((data) => ({ type: 'contact.created' as const, data })));
      errors.sort((a, b) => a.index - b.index);
      const result = { total: items.length, created: contacts.length, failed: errors.length, errors };
      await completeIdempotencyKey(tx, result);
      return result;
    });
  }

  async update(tenantId: string, id: string, patch: ContactPatch): Promise<Contact> {
    const changes: Partial<ContactValues> = contactFields(patch, PATCH_FIELDS);
    if (patch.phone !== undefined) changes.phone = e164Phone(patch.phone, ['body', 'phone']);
    await this.checkTimeZone(patch.time_zone);
    return this.db.transaction().execute(async (tx) => {
      const current = await repo.lockById(tx, tenantId, id);
      if (!current) throw notFound('Contact');
      // Deep equality ignores object key order (jsonb keeps its own), so re-sending custom_fields is no change.
      const changed = Object.entries(changes).filter(([key, value]) => !isDeepStrictEqual(current[key as keyof ContactRow], value));
      const consent = patch.marketing_opt_out !== undefined && patch.marketing_opt_out !== current.marketing_opt_out ? consentColumns(patch.marketing_opt_out) : {};
      if (changed.length === 0 && Object.keys(consent).length === 0) return toContact(current);
      const row = await repo.update(tx, tenantId, id, { ...Object.fromEntries(changed), ...consent });
      if (!row) throw notFound('Contact');
      const contact = toContact(row);
      await recordEvents(tx, tenantId, [{ type: 'contact.updated', data: contact }]);
      return contact;
    });
  }

  async remove(tenantId: string, id: string): Promise<{ message: string }> {
    return this.db.transaction().execute(async (tx) => {
      const row = await repo.softDelete(tx, tenantId, id);
      if (!row) throw notFound('Contact');
      await recordEvents(tx, tenantId, [{ type: 'contact.deleted', data: toContact(row) }]);
      return { message: 'Contact deleted' };
    });
  }
}
