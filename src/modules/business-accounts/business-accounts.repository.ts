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
  return { wabaId: account.wabaId, phoneNumberId: account.phoneNumberId, accessToken: decryptSecret(secretsKey, account.accessTokenEnc) };
}

/** Routing of upstream callbacks: the tenant whose active account holds this phone-number id. */
export async function findTenantByPhoneNumberId(db: Queryable, phoneNumberId: string): Promise<string | undefined> {
  const row = await db.selectFrom('business_accounts').select('tenant_id')
    .where('phone_number_id', '=', phoneNumberId).where('status', '=', 'active')
    .executeTakeFirst();
  return row?.tenant_id;
}

/** Template callbacks carry only the WABA id; several tenants may share one WABA (one phone number each). */
export async function findTenantsByWabaId(db: Queryable, wabaId: string): Promise<string[]> {
  const rows = await db.selectFrom('business_accounts').select('tenant_id')
    .where('waba_id', '=', wabaId).where('status', '=', 'active')
    .execute();
  return rows.map((r) => r.tenant_id);
}
