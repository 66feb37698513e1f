import { sql } from 'kysely';
import type { Queryable } from '../../db/database.ts';

/**
 * The business portfolio's messaging limit (reference §8): how many unique users the tenant's
 * numbers together may message outside a customer service window in a moving window (Meta: 24 h,
 * MESSAGING_LIMIT_WINDOW_MS). A user counts while their last such message is inside the window;
 * messaging them again does not count them again. Null: unlimited, nothing is counted.
 */

/** Meta's levels since 2025-10-07; null is unlimited. */
export const MESSAGING_LIMIT_LEVELS = [250, 2_000, 10_000, 100_000] as const;

/** A customer service window: 24 h after the user's last inbound message (Meta's rule, not configurable). */
export const SERVICE_WINDOW_MS = 86_400_000;

/**
 * A limit as Meta names it: `TIER_250`, `TIER_2K`, `TIER_10K`, `TIER_100K`, `TIER_UNLIMITED` (and
 * the older `TIER_50`, `TIER_1K`). Undefined: not a limit (`TIER_NOT_SET`, anything else).
 */
export function limitOfTier(value: unknown): number | null | undefined {
  if (typeof value !== 'string') return undefined;
  if (value === 'TIER_UNLIMITED') return null;
  const match = /^TIER_(\d+)(K?)$/.exec(value);
  if (!match) return undefined;
  const n = Number(match[1]) * (match[2] ? 1000 : 1);
  return n > 0 ? n : undefined;
}

/** `max_daily_conversations_per_business` of business_capability_update: an integer, -1 unlimited (or a TIER_ name). */
export function limitOfCapability(value: unknown): number | null | undefined {
  const n = typeof value === 'string' && /^-?\d+$/.test(value) ? Number(value) : value;
  if (n === -1) return null;
  if (typeof n === 'number') return Number.isInteger(n) && n > 0 && n <= 2_147_483_647 ? n : undefined;
  return limitOfTier(value);
}

const windowStart = (windowMs: number) => sql`now() - ${windowMs} * interval '1 millisecond'`;

/**
 * Counts users a limited tenant just messaged (single sends): each one outside a service window is
 * counted, or its last message moves to now. One statement for the lot.
 */
export async function countMessagedUsers(db: Queryable, tenantId: string, phones: string[]): Promise<void> {
  const unique = [...new Set(phones)];
  if (unique.length === 0) return;
  await sql`
    INSERT INTO messaging_limit_users (tenant_id, phone, last_at)
    SELECT ${tenantId}::uuid, p.phone, now() FROM unnest(${unique}::text[]) AS p(phone)
    WHERE NOT EXISTS (SELECT 1 FROM inbound_messages i WHERE i.tenant_id = ${tenantId}::uuid AND i.from_phone = p.phone
      AND i.received_at > now() - ${SERVICE_WINDOW_MS} * interval '1 millisecond')
    ON CONFLICT (tenant_id, phone) DO UPDATE SET last_at = excluded.last_at`.execute(db);
}

export interface LimitUsage {
  limit: number;
  used: number;
  available: number;
}

/** Users counted in the window now, and how many more the limit allows. */
export async function limitUsage(db: Queryable, tenantId: string, limit: number, windowMs: number): Promise<LimitUsage> {
  const { rows } = await sql<{ n: number }>`
    SELECT count(*)::int AS n FROM messaging_limit_users WHERE tenant_id = ${tenantId}::uuid AND last_at > ${windowStart(windowMs)}`.execute(db);
  const used = rows[0].n;
  return { limit, used, available: Math.max(0, limit - used) };
}

/**
 * When `needed` more users can be messaged, about: when that many of the users counted now have
 * left the window; beyond them, a whole window per limit's worth (sends meanwhile count too).
 * Null when they can be messaged now.
 */
export async function limitFreesAt(db: Queryable, tenantId: string, usage: LimitUsage, needed: number, windowMs: number): Promise<Date | null> {
  const beyond = needed - usage.available;
  if (beyond <= 0) return null;
  if (beyond <= usage.used) {
    const { rows } = await sql<{ last_at: Date }>`
      SELECT last_at FROM messaging_limit_users WHERE tenant_id = ${tenantId}::uuid AND last_at > ${windowStart(windowMs)}
      ORDER BY last_at OFFSET ${beyond - 1} LIMIT 1`.execute(db);
    if (rows[0]) return new Date(new Date(rows[0].last_at).getTime() + windowMs);
  }
  return new Date(Date.now() + Math.ceil(beyond / usage.limit) * windowMs);
}
