import { randomBytes, randomUUID } from 'node:crypto';
import type { Db } from '../../db/database.ts';
import { AppError, validationError } from '../../http/errors.ts';
import { hashApiKey } from '../tenants/api-key-format.ts';
import { PRESETS } from '../tenants/scopes.ts';
import type { AdminService } from '../admin/admin.service.ts';

/** How long an operator's link can be redeemed, and how long the session it opens lasts. */
export const LINK_TTL_MS = 15 * 60 * 1000;
export const SESSION_TTL_MS = 8 * 3600 * 1000;

export interface ConsoleLink { url: string; preset: string; expires_at: string }
export interface ConsoleSession { key: string; scopes: string[]; expires_at: string }

/**
 * One-time sign-in links to the web console. A link holds no key: redeeming it (once, within
 * LINK_TTL_MS) makes a key of its preset for that browser session, which sign-out revokes and which
 * expires after SESSION_TTL_MS in any case.
 */
export class ConsoleLinks {
  constructor(private db: Db, private admin: AdminService, private keysChanged: () => void) {}

  async create(tenantId: string, preset: string, origin: string): Promise<ConsoleLink> {
    await this.admin.getTenant(tenantId);
    if (!PRESETS.some((p) => p.name === preset)) {
      throw validationError(`Unknown preset "${preset}"; known presets: ${PRESETS.map((p) => p.name).join(', ')}`, ['body', 'preset'], preset);
    }
    const token = `csl_${randomBytes(24).toString('hex')}`;
    const expiresAt = new Date(Date.now() + LINK_TTL_MS);
    await this.db.insertInto('console_links')
      .values({ id: randomUUID(), tenant_id: tenantId, token_hash: hashApiKey(token), preset, expires_at: expiresAt })
      .execute();
    // In the fragment: browsers never send it, so it stays out of access logs and Referer headers.
    return { url: `${origin}/console/#/link/${token}`, preset, expires_at: expiresAt.toISOString() };
  }

  /** Exchanges a link for a session key, once. */
  async redeem(token: string): Promise<ConsoleSession> {
    const invalid = new AppError('AUTHENTICATION_REQUIRED', 'This sign-in link is invalid, expired or already used');
    if (!/^csl_[0-9a-f]{48}$/.test(token)) throw invalid;
    const now = new Date();
    const link = await this.db.updateTable('console_links').set({ redeemed_at: now })
      .where('token_hash', '=', hashApiKey(token)).where('redeemed_at', 'is', null).where('expires_at', '>', now)
      .returningAll().executeTakeFirst();
    if (!link) throw invalid;
    const expiresAt = new Date(now.getTime() + SESSION_TTL_MS);
    const key = await this.admin.createApiKey(link.tenant_id, { name: `console session ${now.toISOString()}`, preset: link.preset, expires_at: expiresAt.toISOString() })
      .catch((err) => { throw err instanceof AppError && err.code === 'NOT_FOUND' ? invalid : err; });
    await this.db.updateTable('console_links').set({ api_key_id: key.id }).where('id', '=', link.id).execute();
    return { key: key.key, scopes: key.scopes, expires_at: expiresAt.toISOString() };
  }

  /** Sign-out: revokes the key when a console link made it (a person's own key is theirs to keep). */
  async end(tenantId: string, keyId: string): Promise<{ revoked: boolean }> {
    const link = await this.db.selectFrom('console_links').select('id')
      .where('tenant_id', '=', tenantId).where('api_key_id', '=', keyId).executeTakeFirst();
    if (!link) return { revoked: false };
    await this.db.updateTable('api_keys').set({ revoked_at: new Date() })
      .where('tenant_id', '=', tenantId).where('id', '=', keyId).where('revoked_at', 'is', null).execute();
    this.keysChanged();
    return { revoked: true };
  }
}
