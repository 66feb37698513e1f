import { randomUUID } from 'node:crypto';
import type { Selectable } from 'kysely';
import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import type { UpstreamClient } from '../../upstream/types.ts';
import { limitOfTier } from '../business-accounts/messaging-limit.ts';
import type { ApiKeysTable, BusinessAccountsTable, TenantsTable } from '../../db/schema.ts';
import { encryptSecret } from '../../crypto/secrets.ts';
import { AppError, conflict, notFound, validationError } from '../../http/errors.ts';
import { isoOrNull } from '../../http/nullable.ts';
import { offsetOf, paginationFor, type PageQuery, type Pagination } from '../../http/pagination.ts';
import { pageWithTotal } from '../../db/page.ts';
import { parseAllowlistEntry } from '../../http/ip-allowlist.ts';
import { isUuid } from '../contacts/contacts.repository.ts';
import { marketingSettingsRepository, normaliseKeyword, type MarketingSettings } from '../contacts/marketing-settings.ts';
import { generateApiKey } from '../tenants/api-key-format.ts';
import { PLANS, type PlanName } from '../tenants/plans.ts';
import { isKnownScope, PRESETS } from '../tenants/scopes.ts';
import type { ApiKey, ApiKeyCreate, BusinessAccount, BusinessAccountConnect, BusinessAccountPatch, MarketingSettingsPatch, Tenant, TenantPatch } from './admin.schemas.ts';


function toTenant(row: Selectable<TenantsTable>): Tenant {
  return { id: row.id, name: row.name, plan: row.plan, api_requests_daily: row.api_requests_daily, created_at: row.created_at.toISOString() };
}

function toApiKey(row: Selectable<ApiKeysTable>): ApiKey {
  return {
    id: row.id, name: row.name, prefix: row.prefix, scopes: row.scopes, mode: row.mode, expires_at: isoOrNull(row.expires_at),
    ip_allowlist: row.ip_allowlist, created_at: row.created_at.toISOString(),
  };
}

export function toBusinessAccount(row: Selectable<BusinessAccountsTable>): BusinessAccount {
  return {
    tenant_id: row.tenant_id, waba_id: row.waba_id, phone_number_id: row.phone_number_id, display_phone_number: row.display_phone_number,
    status: row.status, status_reason: row.status_reason, messages_per_second: row.messages_per_second, messaging_tier: row.messaging_tier,
    messaging_limit: row.messaging_limit, messaging_limit_updated_at: isoOrNull(row.messaging_limit_updated_at),
    connected_at: row.connected_at.toISOString(), updated_at: isoOrNull(row.updated_at),
  };
}

/** What operators (a dashboard, scripts) do: provision tenants, keys and business accounts. */
export class AdminService {
  /** `keysChanged` is told when what a cached key lookup holds (revocation, tenant, plan, quota) has changed. */
  constructor(private db: Db, private secretsKey: Buffer, private keysChanged: () => void = () => {}, private upstream?: UpstreamClient, private logger?: Logger) {}

  async createTenant(name: string, plan: PlanName): Promise<Tenant> {
    const row = await this.db.insertInto('tenants')
      .values({ id: randomUUID(), name, plan, api_requests_daily: PLANS[plan].apiRequestsDaily })
      .returningAll().executeTakeFirstOrThrow();
    return toTenant(row);
  }

  /** Live tenants, newest first; `name` matches a case-insensitive substring. */
  async listTenants(query: PageQuery & { name?: string }): Promise<{ data: Tenant[]; pagination: Pagination }> {
    let filtered = this.db.selectFrom('tenants').where('deleted_at', 'is', null);
    if (query.name) filtered = filtered.where('name', 'ilike', `%${query.name.replace(/[\\%_]/g, (c) => `\\${c}`)}%`);
    const { rows, total } = await pageWithTotal(filtered, (q) => q.selectAll().orderBy('created_at', 'desc').orderBy('id', 'desc').limit(query.limit).offset(offsetOf(query)));
    return { data: rows.map(toTenant), pagination: paginationFor(query.page, query.limit, total) };
  }

  private async liveTenant(id: string) {
    const row = isUuid(id)
      ? await this.db.selectFrom('tenants').selectAll().where('id', '=', id).where('deleted_at', 'is', null).executeTakeFirst()
      : undefined;
    if (!row) throw notFound('Tenant');
    return row;
  }

  async getTenant(id: string): Promise<Tenant> {
    return toTenant(await this.liveTenant(id));
  }

  async updateTenant(id: string, patch: TenantPatch): Promise<Tenant> {
    const current = await this.liveTenant(id);
    const plan = (patch.plan ?? current.plan) as PlanName;
    // A plan change brings the plan's standard quota unless a custom one is given with it.
    const daily = patch.api_requests_daily ?? (patch.plan && patch.plan !== current.plan ? PLANS[plan].apiRequestsDaily : current.api_requests_daily);
    const row = await this.db.updateTable('tenants')
      .set({ name: patch.name ?? current.name, plan, api_requests_daily: daily, updated_at: new Date() })
      .where('id', '=', id).returningAll().executeTakeFirstOrThrow();
    this.keysChanged();
    return toTenant(row);
  }

  async deleteTenant(id: string): Promise<{ message: string }> {
    await this.liveTenant(id);
    await this.db.transaction().execute(async (tx) => {
      await tx.updateTable('tenants').set({ deleted_at: new Date() }).where('id', '=', id).execute();
      await tx.updateTable('business_accounts').set({ status: 'disconnected', updated_at: new Date() }).where('tenant_id', '=', id).execute();
    });
    this.keysChanged();
    return { message: 'Tenant deleted' };
  }

  async createApiKey(tenantId: string, input: ApiKeyCreate): Promise<ApiKey & { key: string }> {
    await this.liveTenant(tenantId);
    const scopes = new Set<string>(input.scopes ?? []);
    if (input.preset !== undefined) {
      const preset = PRESETS.find((p) => p.name === input.preset);
      if (!preset) throw validationError(`Unknown preset "${input.preset}"; known presets: ${PRESETS.map((p) => p.name).join(', ')}`, ['body', 'preset'], input.preset);
      preset.scopes.forEach((s) => scopes.add(s));
    }
    if (scopes.size === 0) scopes.add('*');
    const unknown = [...scopes].filter((s) => !isKnownScope(s));
    if (unknown.length > 0) throw validationError(`Unknown scope(s): ${unknown.join(', ')}`, ['body', 'scopes'], unknown);
    const allowlist = input.ip_allowlist ?? [];
    allowlist.forEach((entry, i) => {
      if (!parseAllowlistEntry(entry)) throw validationError(`ip_allowlist[${i}] must be an IPv4 or IPv6 address or CIDR`, ['body', 'ip_allowlist', i], entry);
    });

    const mode = input.mode ?? 'live';
    const { key, hash, prefix } = generateApiKey(mode);
    const row = await this.db.insertInto('api_keys')
      .values({
        id: randomUUID(), tenant_id: tenantId, name: input.name, key_hash: hash, prefix, mode, scopes: [...scopes],
        expires_at: input.expires_at ?? null, ip_allowlist: allowlist,
      })
      .returningAll().executeTakeFirstOrThrow();
    return { ...toApiKey(row), key };
  }

  async listApiKeys(tenantId: string): Promise<{ data: ApiKey[] }> {
    await this.liveTenant(tenantId);
    // A revoked key is gone from the list, as after any DELETE (its row stays for the record).
    const rows = await this.db.selectFrom('api_keys').selectAll().where('tenant_id', '=', tenantId).where('revoked_at', 'is', null).orderBy('created_at').execute();
    return { data: rows.map(toApiKey) };
  }

  async revokeApiKey(tenantId: string, keyId: string): Promise<{ message: string }> {
    await this.liveTenant(tenantId);
    const result = isUuid(keyId)
      ? await this.db.updateTable('api_keys').set({ revoked_at: new Date() })
          .where('tenant_id', '=', tenantId).where('id', '=', keyId).where('revoked_at', 'is', null).executeTakeFirst()
      : undefined;
    if (!result || Number(result.numUpdatedRows) === 0) throw notFound('API key');
    this.keysChanged();
    return { message: 'API key revoked' };
  }

  async connectBusinessAccount(tenantId: string, input: BusinessAccountConnect): Promise<BusinessAccount> {
    await this.liveTenant(tenantId);
    const upstream = await this.readPhoneNumber(tenantId, input);
    const values = {
      waba_id: input.waba_id, phone_number_id: input.phone_number_id, display_phone_number: input.display_phone_number ?? upstream.displayPhoneNumber,
      access_token_enc: encryptSecret(this.secretsKey, input.access_token), status: 'active', status_reason: null,
      messages_per_second: input.messages_per_second ?? 80, messaging_tier: input.messaging_tier ?? '1K',
      messaging_limit: input.messaging_limit !== undefined ? input.messaging_limit : upstream.messagingLimit,
      messaging_limit_updated_at: input.messaging_limit !== undefined || upstream.known ? new Date() : null,
    };
    try {
      const row = await this.db.insertInto('business_accounts')
        .values({ tenant_id: tenantId, ...values })
        .onConflict((oc) => oc.column('tenant_id').doUpdateSet({ ...values, connected_at: new Date(), updated_at: new Date() }))
        .returningAll().executeTakeFirstOrThrow();
      return toBusinessAccount(row);
    } catch (err) {
      if ((err as { code?: string }).code === '23505') throw conflict('This phone_number_id is already connected to another tenant');
      throw err;
    }
  }

  /**
   * The number's display number and its portfolio's messaging limit, as the upstream tells at
   * connection (`GET /{phone-number-id}?fields=display_phone_number,whatsapp_business_manager_messaging_limit`).
   * An upstream that cannot tell (unreachable, an older API) leaves the limit unknown: unlimited.
   */
  private async readPhoneNumber(tenantId: string, input: BusinessAccountConnect): Promise<{ displayPhoneNumber: string | null; messagingLimit: number | null; known: boolean }> {
    const none = { displayPhoneNumber: null, messagingLimit: null, known: false };
    if (!this.upstream) return none;
    const outcome = await this.upstream.getPhoneNumber({ wabaId: input.waba_id, phoneNumberId: input.phone_number_id, accessToken: input.access_token });
    if (outcome.kind !== 'accepted') {
      this.logger?.warn({ tenant_id: tenantId, outcome: outcome.kind }, 'the upstream did not tell the phone number\'s messaging limit at connection; treated as unlimited until a callback or an operator sets it');
      return none;
    }
    const limit = limitOfTier(outcome.value.messagingLimitTier);
    return { displayPhoneNumber: outcome.value.displayPhoneNumber, messagingLimit: limit ?? null, known: limit !== undefined };
  }

  async getBusinessAccount(tenantId: string): Promise<BusinessAccount> {
    await this.liveTenant(tenantId);
    const row = await this.db.selectFrom('business_accounts').selectAll().where('tenant_id', '=', tenantId).executeTakeFirst();
    if (!row) throw notFound('Business account');
    return toBusinessAccount(row);
  }

  /** Pacing, tier and limit changes; dispatchers read them with every batch, so they apply within a second. */
  async updateBusinessAccount(tenantId: string, patch: BusinessAccountPatch): Promise<BusinessAccount> {
    await this.liveTenant(tenantId);
    const row = await this.db.updateTable('business_accounts')
      .set({
        ...(patch.messages_per_second !== undefined ? { messages_per_second: patch.messages_per_second } : {}), ...(patch.messaging_tier ? { messaging_tier: patch.messaging_tier } : {}),
        ...(patch.messaging_limit !== undefined ? { messaging_limit: patch.messaging_limit, messaging_limit_updated_at: new Date() } : {}), updated_at: new Date(),
      })
      .where('tenant_id', '=', tenantId).returningAll().executeTakeFirst();
    if (!row) throw notFound('Business account');
    return toBusinessAccount(row);
  }

  async getMarketingSettings(tenantId: string): Promise<MarketingSettings> {
    await this.liveTenant(tenantId);
    return marketingSettingsRepository.get(this.db, tenantId);
  }

  /** Only the fields sent change; keywords are stored normalised (upper case, no whitespace). */
  async updateMarketingSettings(tenantId: string, patch: MarketingSettingsPatch): Promise<MarketingSettings> {
    await this.liveTenant(tenantId);
    const keywords = (key: 'opt_out_keywords' | 'opt_in_keywords', current: string[]) => {
      const given = patch[key];
      if (given === undefined) return current;
      return [...new Set(given.map((word, i) => {
        const keyword = normaliseKeyword(word);
        if (keyword.length === 0) throw validationError(`${key}[${i}] must contain a character other than whitespace`, ['body', key, i], word);
        return keyword;
      }))];
    };
    return this.db.transaction().execute(async (tx) => {
      // Held until the write commits: two concurrent changes never lose one another's fields.
      await tx.selectFrom('tenants').select('id').where('id', '=', tenantId).forUpdate().execute();
      const current = await marketingSettingsRepository.get(tx, tenantId);
      const next: MarketingSettings = {
        opt_out_keywords: keywords('opt_out_keywords', current.opt_out_keywords),
        opt_in_keywords: keywords('opt_in_keywords', current.opt_in_keywords),
        block_us_marketing: patch.block_us_marketing ?? current.block_us_marketing,
        frequency_cap: patch.frequency_cap === undefined ? current.frequency_cap : patch.frequency_cap,
      };
      const both = next.opt_out_keywords.filter((k) => next.opt_in_keywords.includes(k));
      if (both.length > 0) {
        const loc = patch.opt_in_keywords !== undefined ? 'opt_in_keywords' : 'opt_out_keywords';
        throw validationError(`A keyword cannot both opt out and opt in: ${both.join(', ')}`, ['body', loc], both);
      }
      await marketingSettingsRepository.put(tx, tenantId, next);
      return next;
    });
  }

  async disconnectBusinessAccount(tenantId: string): Promise<BusinessAccount> {
    await this.liveTenant(tenantId);
    const row = await this.db.updateTable('business_accounts').set({ status: 'disconnected', updated_at: new Date() })
      .where('tenant_id', '=', tenantId).returningAll().executeTakeFirst();
    if (!row) throw notFound('Business account');
    return toBusinessAccount(row);
  }
}

export function assertAdminToken(header: string | undefined, expected: string, safeEqual: (a: string, b: string) => boolean) {
  const match = header ? /^Bearer +(\S+)$/i.exec(header) : null;
  if (!match || !safeEqual(match[1], expected)) throw new AppError('AUTHENTICATION_REQUIRED', 'Invalid or missing admin token');
}
