import { sql } from 'kysely';
import type { Queryable } from '../../db/database.ts';
import { decryptSecret } from '../../crypto/secrets.ts';
import { AppError } from '../../http/errors.ts';
import type { UpstreamAccount } from '../../upstream/types.ts';

export const NO_ACTIVE_ACCOUNT = 'No active WABA account for this tenant';
export const noActiveAccount = () => new AppError('NOT_FOUND', NO_ACTIVE_ACCOUNT);

export interface ActiveAccount {
  tenantId: string;
  wabaId: string;
  phoneNumberId: string;
  accessTokenEnc: string;
}

/** The tenant's business account when it is active; the token stays encrypted until a call needs it. */
export async function findActiveAccount(db: Queryable, tenantId: string): Promise<ActiveAccount | undefined> {
  const row = await db.selectFrom('business_accounts')
    .select(['tenant_id', 'waba_id', 'phone_number_id', 'access_token_enc'])
    .where('tenant_id', '=', tenantId).where('status', '=', 'active')
    .executeTakeFirst();
  return row ? { tenantId: row.tenant_id, wabaId: row.waba_id, phoneNumberId: row.phone_number_id, accessTokenEnc: row.access_token_enc } : undefined;
}

/** Decrypts the access token for one upstream call; never log the result. */
export function toUpstreamAccount(account: ActiveAccount, secretsKey: Buffer): UpstreamAccount {
  return { wabaId: account.wabaId, phoneNumberId: account.phoneNumberId, accessToken: accessToken(secretsKey, account.accessTokenEnc) };
}

// Every send needs its account's token: each sealed token is opened once per key, not per send.
const openedTokens = new WeakMap<Buffer, Map<string, string>>();
const MAX_OPENED_TOKENS = 1000;

function accessToken(secretsKey: Buffer, sealed: string): string {
  let opened = openedTokens.get(secretsKey);
  if (!opened) openedTokens.set(secretsKey, (opened = new Map()));
  let token = opened.get(sealed);
  if (token === undefined) {
    token = decryptSecret(secretsKey, sealed);
    if (opened.size >= MAX_OPENED_TOKENS) opened.clear();
    opened.set(sealed, token);
  }
  return token;
}

/**
 * Routing of upstream callbacks: the tenant whose connected account holds this phone-number id (an
 * account the upstream stopped still hears what became of the messages it sent).
 */
export async function findTenantByPhoneNumberId(db: Queryable, phoneNumberId: string): Promise<string | undefined> {
  const row = await db.selectFrom('business_accounts').select('tenant_id')
    .where('phone_number_id', '=', phoneNumberId).where('status', '<>', 'disconnected')
    .executeTakeFirst();
  return row?.tenant_id;
}

/** Template callbacks carry only the WABA id; several tenants may share one WABA (one phone number each). */
export async function findTenantsByWabaId(db: Queryable, wabaId: string): Promise<string[]> {
  const rows = await db.selectFrom('business_accounts').select('tenant_id')
    .where('waba_id', '=', wabaId).where('status', '<>', 'disconnected')
    .execute();
  return rows.map((r) => r.tenant_id);
}

export interface SendPrerequisites {
  account: (ActiveAccount & { messagesPerSecond: number; messagingLimit: number | null }) | undefined;
  template: { id: string; template_name: string; components: unknown[] } | undefined;
}

/**
 * The send path's prerequisites, for many sends in one query (the send path's read batcher): each
 * tenant's active account and, when it has one, the template with this name and exact language
 * approved under that account. Raw SQL: the query builder's per-call compile cost shows in profiles.
 */
export async function findAccountsAndApprovedTemplates(db: Queryable, keys: { tenantId: string; templateName: string; language: string }[]): Promise<SendPrerequisites[]> {
  const values = sql.join(keys.map((k, i) => sql`(${i}::int, ${k.tenantId}::uuid, ${k.templateName}::text, ${k.language}::text)`));
  const { rows } = await sql<{ k: number; tenant_id: string; waba_id: string; phone_number_id: string; access_token_enc: string; messages_per_second: number; messaging_limit: number | null; template_id: string | null; template_name: string | null; components: unknown[] | null }>`
    SELECT v.k, ba.tenant_id, ba.waba_id, ba.phone_number_id, ba.access_token_enc, ba.messages_per_second, ba.messaging_limit, t.id AS template_id, t.template_name, t.components
    FROM (VALUES ${values}) AS v(k, tenant_id, name, language)
    JOIN business_accounts ba ON ba.tenant_id = v.tenant_id AND ba.status = 'active'
    LEFT JOIN templates t ON t.tenant_id = ba.tenant_id AND t.template_name = v.name AND t.language = v.language AND t.status = 'approved'
      AND t.waba_id = ba.waba_id`.execute(db);
  const byKey = new Map(rows.map((r) => [r.k, r]));
  return keys.map((_, i) => {
    const row = byKey.get(i);
    if (!row) return { account: undefined, template: undefined };
    return {
      account: { tenantId: row.tenant_id, wabaId: row.waba_id, phoneNumberId: row.phone_number_id, accessTokenEnc: row.access_token_enc, messagesPerSecond: row.messages_per_second, messagingLimit: row.messaging_limit },
      template: row.template_id ? { id: row.template_id, template_name: row.template_name!, components: row.components ?? [] } : undefined,
    };
  });
}
