import type { BlockList } from 'node:net';
import type { FastifyRequest } from 'fastify';
import type { Db } from '../db/database.ts';
import { API_KEY_FORMAT, hashApiKey } from '../modules/tenants/api-key-format.ts';
import { planHasFeature, upgradeMessage, type Feature } from '../modules/tenants/plans.ts';
import { missingScopes } from '../modules/tenants/scopes.ts';
import { AppError } from './errors.ts';
import { buildAllowlist, ipAllowed } from './ip-allowlist.ts';

/** The authenticated caller; every service method takes it (or its tenantId) first. */
export interface AuthContext {
  tenantId: string;
  keyId: string;
  scopes: string[];
  plan: string;
  apiRequestsDaily: number;
}

export interface KeyRecord {
  auth: AuthContext;
  expiresAt: Date | null;
  revoked: boolean;
  tenantDeleted: boolean;
  allowlist: BlockList | null;
}

const unauthenticated = (message: string) => new AppError('AUTHENTICATION_REQUIRED', message);

/**
 * Looks keys up by hash with a short in-process cache. The cache lifetime (AUTH_CACHE_MS, at most
 * one second) bounds how long a revoked key or a deleted tenant can still be served by another
 * process; in the process that made the change, `forgetAll` applies it at once.
 */
export class ApiKeyAuthenticator {
  private cache = new Map<string, { record: KeyRecord | null; until: number }>();

  constructor(private db: Db, private cacheMs: number) {}

  /** Bumped by forgetAll: a lookup that was already under way when it ran must not refill the cache. */
  private generation = 0;

  /** After a revocation, a tenant deletion or a plan or quota change. */
  forgetAll(): void {
    this.generation += 1;
    this.cache.clear();
  }

  /** Who is calling: the key's tenant and grants, or a 401. */
  async identify(request: FastifyRequest): Promise<KeyRecord> {
    const header = request.headers.authorization;
    const match = typeof header === 'string' ? /^Bearer +(\S+)\s*$/i.exec(header) : null;
    if (!match) throw unauthenticated('Not authenticated');
    const token = match[1];
    if (!API_KEY_FORMAT.test(token)) throw unauthenticated('Invalid API key format');

    const record = await this.lookup(hashApiKey(token));
    if (!record || record.revoked) throw unauthenticated('Invalid or revoked API key');
    if (record.expiresAt && record.expiresAt.getTime() <= Date.now()) throw unauthenticated('API key has expired');
    if (record.tenantDeleted) throw unauthenticated('Tenant not found');
    return record;
  }

  /** Whether this key may make this request: the IP allowlist, the plan and the scopes, or a 403. */
  authorize(request: FastifyRequest, record: KeyRecord, requiredScopes: string[], feature: Feature | undefined): AuthContext {
    if (!ipAllowed(record.allowlist, request.ip)) {
      throw new AppError('FORBIDDEN', 'Request IP not in allowlist (not recoverable by retry)');
    }
    for (const needed of ['access_api', feature] as (Feature | undefined)[]) if (needed) requireFeature(record.auth, needed);
    const missing = missingScopes(record.auth.scopes, requiredScopes);
    if (missing.length > 0) {
      throw new AppError('FORBIDDEN', `Missing required scope(s): ${missing.join(', ')}`, {
        required_permissions: requiredScopes,
        current_permissions: record.auth.scopes,
      });
    }
    return record.auth;
  }

  private async lookup(hash: string): Promise<KeyRecord | null> {
    const now = Date.now();
    const cached = this.cache.get(hash);
    if (cached && cached.until > now) return cached.record;
    const generation = this.generation;

    const row = await this.db
      .selectFrom('api_keys as k')
      .innerJoin('tenants as t', 't.id', 'k.tenant_id')
      .select(['k.id', 'k.tenant_id', 'k.scopes', 'k.expires_at', 'k.ip_allowlist', 'k.revoked_at', 't.plan', 't.api_requests_daily', 't.deleted_at'])
      .where('k.key_hash', '=', hash)
      .executeTakeFirst();
    const record: KeyRecord | null = row
      ? {
          auth: { tenantId: row.tenant_id, keyId: row.id, scopes: row.scopes, plan: row.plan, apiRequestsDaily: row.api_requests_daily },
          expiresAt: row.expires_at,
          revoked: row.revoked_at !== null,
          tenantDeleted: row.deleted_at !== null,
          allowlist: buildAllowlist(row.ip_allowlist),
        }
      : null;
    if (this.cache.size > 50_000) this.cache.clear();
    if (generation === this.generation) this.cache.set(hash, { record, until: now + this.cacheMs });
    return record;
  }
}

/** The plan gate (spec 7): 403 UPGRADE_REQUIRED unless the tenant's plan includes the feature. */
export function requireFeature(auth: Pick<AuthContext, 'plan'>, feature: Feature): void {
  if (!planHasFeature(auth.plan, feature)) {
    throw new AppError('UPGRADE_REQUIRED', upgradeMessage(feature), { upgrade_required: true, feature_key: feature });
  }
}
