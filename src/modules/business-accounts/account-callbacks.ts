import type { Logger } from 'pino';
import type { Db } from '../../db/database.ts';
import { limitOfCapability, limitOfTier } from './messaging-limit.ts';

/**
 * Meta's callbacks about a portfolio's capacity and a template's standing (reference §7, §8, §11),
 * routed by the WABA id (`entry[].id`) to the tenants whose business account is under it (and, for
 * a phone number's callback, to the account of that number): no other tenant is touched.
 * - `business_capability_update`: the portfolio's messaging limit (`max_daily_conversations_per_business`, -1 unlimited).
 * - `phone_number_quality_update`: `THROUGHPUT_UPGRADE` raises that number's pacing to 1,000 per
 *   second; a `max_daily_conversations_per_business` tier is the portfolio's new messaging limit.
 * - `message_template_quality_update`: the template's `quality_score`.
 * - `template_category_update`: a done recategorisation (`previous_category`) sets the template's
 *   category; an impending one (`correct_category`) changes nothing yet.
 * No tenant event: the spec has none for accounts or templates.
 */

export const ACCOUNT_FIELDS = new Set(['business_capability_update', 'phone_number_quality_update', 'message_template_quality_update', 'template_category_update']);

/** Meta's top throughput, which THROUGHPUT_UPGRADE moves a number to. */
export const UPGRADED_MESSAGES_PER_SECOND = 1000;
const QUALITY_SCORES = new Set(['GREEN', 'YELLOW', 'RED', 'UNKNOWN']);
const CATEGORIES = new Set(['MARKETING', 'UTILITY', 'AUTHENTICATION']);

type Value = Record<string, unknown>;
const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : typeof v === 'number' ? String(v) : undefined);
const digits = (v: string | null | undefined) => (v ?? '').replace(/\D/g, '');

/** Applies one account or template change of a WABA; returns how many rows it changed. */
export async function applyAccountChange(db: Db, field: string, wabaId: string, value: Value, logger?: Logger): Promise<number> {
  switch (field) {
    case 'business_capability_update': {
      const limit = limitOfCapability(value.max_daily_conversations_per_business);
      return limit === undefined ? 0 : setPortfolioLimit(db, wabaId, limit);
    }
    case 'phone_number_quality_update':
      return phoneNumberQuality(db, wabaId, value, logger);
    case 'message_template_quality_update': {
      const score = text(value.new_quality_score);
      return score && QUALITY_SCORES.has(score) ? updateTemplates(db, wabaId, value, { quality_score: score }) : 0;
    }
    case 'template_category_update': {
      const category = text(value.new_category);
      // An impending change names the category it will become as correct_category; new_category is still the current one.
      if (value.previous_category === undefined || !category || !CATEGORIES.has(category)) return 0;
      return updateTemplates(db, wabaId, value, { category });
    }
    default:
      return 0;
  }
}

async function setPortfolioLimit(db: Db, wabaId: string, limit: number | null): Promise<number> {
  const result = await db.updateTable('business_accounts').set({ messaging_limit: limit, messaging_limit_updated_at: new Date(), updated_at: new Date() })
    .where('waba_id', '=', wabaId).where('status', '<>', 'disconnected').executeTakeFirst();
  return Number(result.numUpdatedRows);
}

/**
 * The callback names its number only by `display_phone_number`: the account of the WABA with that
 * display number, or the WABA's only account when it has none stored.
 */
async function phoneNumberQuality(db: Db, wabaId: string, value: Value, logger?: Logger): Promise<number> {
  let changed = 0;
  const limit = limitOfTier(value.max_daily_conversations_per_business);
  if (limit !== undefined) changed += await setPortfolioLimit(db, wabaId, limit);
  if (value.event !== 'THROUGHPUT_UPGRADE') return changed;
  const accounts = await db.selectFrom('business_accounts').select(['tenant_id', 'display_phone_number'])
    .where('waba_id', '=', wabaId).where('status', '<>', 'disconnected').execute();
  const wanted = digits(text(value.display_phone_number));
  let matched = accounts.filter((a) => wanted !== '' && digits(a.display_phone_number) === wanted);
  if (matched.length === 0 && accounts.length === 1 && !accounts[0].display_phone_number) matched = accounts;
  if (matched.length === 0) {
    logger?.warn({ waba_id: wabaId, display_phone_number: value.display_phone_number }, 'THROUGHPUT_UPGRADE for a number no connected account has; ignored');
    return changed;
  }
  const result = await db.updateTable('business_accounts').set({ messages_per_second: UPGRADED_MESSAGES_PER_SECOND, updated_at: new Date() })
    .where('waba_id', '=', wabaId).where('status', '<>', 'disconnected').where('tenant_id', 'in', matched.map((a) => a.tenant_id)).executeTakeFirst();
  return changed + Number(result.numUpdatedRows);
}

/** The WABA's tenants' template of that upstream id (else of that name and language) takes the change. */
async function updateTemplates(db: Db, wabaId: string, value: Value, set: { quality_score: string } | { category: string }): Promise<number> {
  const upstreamId = text(value.message_template_id);
  const name = text(value.message_template_name);
  const language = text(value.message_template_language);
  let query = db.updateTable('templates').set({ ...set, updated_at: new Date() })
    .where('tenant_id', 'in', (eb) => eb.selectFrom('business_accounts').select('tenant_id').where('waba_id', '=', wabaId).where('status', '<>', 'disconnected'))
    .where('waba_id', '=', wabaId);
  if (upstreamId) query = query.where('upstream_id', '=', upstreamId);
  else if (name && language) query = query.where('template_name', '=', name).where('language', '=', language);
  else return 0;
  return Number((await query.executeTakeFirst()).numUpdatedRows);
}
