import { sql } from 'kysely';
import type { Tx } from '../../db/database.ts';
import { recordEvents } from '../../events/events.ts';
import { optsOutOfMarketing } from '../../upstream/outcomes.ts';
import type { ContactRow } from './contacts.repository.ts';
import { toContact } from './contacts.service.ts';
import { marketingSettingsRepository, normaliseKeyword } from './marketing-settings.ts';

/** Who set a contact's marketing opt-out (ARCHITECTURE §4). */
export type ConsentSource = 'user_preferences' | 'keyword' | 'error_131050' | 'api';
export const CONSENT_SOURCES: readonly ConsentSource[] = ['user_preferences', 'keyword', 'error_131050', 'api'];

/** One opt-out (or opt-in, `optOut: false`) of the live contact with this phone, dated when it happened. */
export interface ConsentChange {
  phone: string;
  optOut: boolean;
  source: ConsentSource;
  at: Date;
}

/** Keywords are short; a longer text is never one (and needs no settings read). */
const MAX_KEYWORD_LENGTH = 64;

/**
 * Applies consent changes to the tenant's live contacts with those phones, set-based, in the
 * caller's transaction: one locking UPDATE, one event insert. A change dated before the contact's
 * latest applied change is stale (Meta redelivers callbacks out of order, for days) and ignored;
 * a change that leaves the opt-out as it was only moves that date. Each contact whose opt-out
 * changed emits one contact.updated. Returns how many changed.
 */
export async function applyConsentChanges(tx: Tx, tenantId: string, changes: ConsentChange[]): Promise<number> {
  const latest = new Map<string, ConsentChange>();
  for (const c of changes) {
    const seen = latest.get(c.phone);
    if (!seen || c.at.getTime() >= seen.at.getTime()) latest.set(c.phone, c);
  }
  if (latest.size === 0) return 0;
  const values = sql.join([...latest.values()].map((c) => sql`(${c.phone}::text, ${c.optOut}::boolean, ${c.source}::text, ${c.at}::timestamptz)`));
  const { rows } = await sql<ContactRow & { was_opted_out: boolean }>`
    WITH v(phone, opt_out, source, at) AS (VALUES ${values}),
    old AS (
      SELECT c.id, c.marketing_opt_out FROM contacts c JOIN v ON v.phone = c.phone
      WHERE c.tenant_id = ${tenantId}::uuid AND c.deleted_at IS NULL
        AND (c.marketing_consent_changed_at IS NULL OR c.marketing_consent_changed_at <= v.at)
      ORDER BY c.id FOR UPDATE OF c)
    UPDATE contacts c SET
      marketing_opt_out = v.opt_out,
      marketing_opt_out_at = CASE WHEN v.opt_out = old.marketing_opt_out THEN c.marketing_opt_out_at WHEN v.opt_out THEN v.at END,
      marketing_opt_out_source = CASE WHEN v.opt_out = old.marketing_opt_out THEN c.marketing_opt_out_source WHEN v.opt_out THEN v.source END,
      marketing_consent_changed_at = v.at,
      updated_at = CASE WHEN v.opt_out = old.marketing_opt_out THEN c.updated_at ELSE now() END
    FROM v, old WHERE c.id = old.id AND v.phone = c.phone
    RETURNING c.*, old.marketing_opt_out AS was_opted_out`.execute(tx);
  const changed = rows.filter((r) => r.was_opted_out !== r.marketing_opt_out).map(({ was_opted_out: _, ...row }) => row as ContactRow);
  await recordEvents(tx, tenantId, changed.map((row) => ({ type: 'contact.updated' as const, data: toContact(row) })));
  return changed.length;
}

/**
 * Meta's `user_preferences` callbacks (stop / resume of marketing messages). A user is named by
 * phone (`wa_id`) or only by business-scoped user id: then by the phone an inbound message of that
 * user id came with (as inbound messages find their contact).
 */
export async function applyUserPreferences(tx: Tx, tenantId: string, preferences: { phone: string | null; userId: string | null; optOut: boolean; at: Date }[]): Promise<number> {
  const userIds = [...new Set(preferences.flatMap((p) => (!p.phone && p.userId ? [p.userId] : [])))];
  const known = userIds.length === 0 ? [] : await tx.selectFrom('inbound_messages').select(['from_user_id', 'from_phone'])
    .distinctOn('from_user_id').where('tenant_id', '=', tenantId).where('from_user_id', 'in', userIds).where('from_phone', 'is not', null)
    .orderBy('from_user_id').orderBy('received_at', 'desc').execute();
  const phoneOfUser = new Map(known.map((k) => [k.from_user_id!, k.from_phone!]));
  return applyConsentChanges(tx, tenantId, preferences.flatMap((p) => {
    const phone = p.phone ?? (p.userId ? phoneOfUser.get(p.userId) : undefined);
    return phone ? [{ phone, optOut: p.optOut, source: 'user_preferences' as const, at: p.at }] : [];
  }));
}

/**
 * Inbound text messages that are exactly one of the tenant's opt-out keywords (default STOP,
 * UNSUBSCRIBE) opt their sender out; opt-in keywords (default START) opt them back in.
 */
export async function applyConsentKeywords(tx: Tx, tenantId: string, messages: { phone: string | null; type: string; text: string | null; at: Date }[]): Promise<number> {
  const candidates = messages.flatMap((m) => {
    if (m.type !== 'text' || !m.phone || m.text === null) return [];
    const keyword = normaliseKeyword(m.text);
    return keyword.length > 0 && keyword.length <= MAX_KEYWORD_LENGTH ? [{ phone: m.phone, keyword, at: m.at }] : [];
  });
  if (candidates.length === 0) return 0;
  const settings = await marketingSettingsRepository.get(tx, tenantId);
  const optOut = new Set(settings.opt_out_keywords);
  const optIn = new Set(settings.opt_in_keywords);
  return applyConsentChanges(tx, tenantId, candidates.flatMap((c): ConsentChange[] => {
    if (optOut.has(c.keyword)) return [{ phone: c.phone, optOut: true, source: 'keyword', at: c.at }];
    if (optIn.has(c.keyword)) return [{ phone: c.phone, optOut: false, source: 'keyword', at: c.at }];
    return [];
  }));
}

/** Sends the upstream refused because the user stopped marketing messages (131050), by answer or by callback. */
export async function optOutOnMarketingRefusals(tx: Tx, tenantId: string, failures: { phone: string; code: number | null; at: Date }[]): Promise<number> {
  const refusals = failures.filter((f) => optsOutOfMarketing(f.code));
  if (refusals.length === 0) return 0;
  return applyConsentChanges(tx, tenantId, refusals.map((f) => ({ phone: f.phone, optOut: true, source: 'error_131050' as const, at: f.at })));
}
