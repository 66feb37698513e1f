import { displayPhoneNumber, type Reply, type SandboxState } from './state.ts';
import type { SandboxTemplate } from './templates.ts';

/**
 * The account and template callbacks Meta sends about capacity and quality (reference §7, §8, §11),
 * each on request through the control API, shaped as Meta's webhook references show them:
 * `business_capability_update`, `phone_number_quality_update`, `message_template_quality_update`
 * and `template_category_update`. Like `/__sandbox/inbound`, they are posted even when status
 * callbacks are switched off (a test asked for them). The portfolio's messaging limit set here is
 * also what `GET /{phone-number-id}?fields=whatsapp_business_manager_messaging_limit` answers.
 */

type Obj = Record<string, unknown>;
const isObject = (v: unknown): v is Obj => typeof v === 'object' && v !== null && !Array.isArray(v);
const bad = (message: string): Reply => ({ status: 400, body: { error: { message } } });
const noCallbackUrl: Reply = { status: 409, body: { error: { message: 'no callback_url is configured' } } };

/** Meta's messaging-limit levels as `max_daily_conversations_per_business` gives them; -1 is unlimited. */
const CAPABILITY_LIMITS = [250, 2000, 10000, 100000, -1];
const TIERS = ['TIER_50', 'TIER_250', 'TIER_1K', 'TIER_2K', 'TIER_10K', 'TIER_100K', 'TIER_UNLIMITED', 'TIER_NOT_SET'];
const QUALITY_SCORES = ['GREEN', 'YELLOW', 'RED', 'UNKNOWN'];
const CATEGORIES = ['MARKETING', 'UTILITY', 'AUTHENTICATION'];
export const PHONE_NUMBER_FIELDS = new Set(['id', 'display_phone_number', 'whatsapp_business_manager_messaging_limit', 'verified_name', 'quality_rating']);

/** A limit as the Graph field names it: 2000 -> TIER_2K, null (unlimited) -> TIER_UNLIMITED. */
export function tierOf(limit: number | null): string {
  if (limit === null) return 'TIER_UNLIMITED';
  return limit >= 1000 && limit % 1000 === 0 ? `TIER_${limit / 1000}K` : `TIER_${limit}`;
}

function limitOfTier(tier: string): number | null | undefined {
  if (tier === 'TIER_UNLIMITED') return null;
  const m = /^TIER_(\d+)(K?)$/.exec(tier);
  return m ? Number(m[1]) * (m[2] ? 1000 : 1) : undefined;
}

/** The portfolio limit of the WABA a phone number belongs to; unlimited by default, so nothing existing is limited. */
export function messagingLimitOf(state: SandboxState, phoneNumberId: string): number | null {
  const waba = state.templates.wabaOf(phoneNumberId);
  const limit = waba === undefined ? undefined : state.messagingLimits.get(waba);
  return limit === undefined ? null : limit;
}

/** `GET /{phone-number-id}?fields=...` with phone-number fields: the number as Graph describes it. */
export function phoneNumberJson(state: SandboxState, phoneNumberId: string, fields: string[]): Reply {
  const all: Obj = {
    id: phoneNumberId, display_phone_number: displayPhoneNumber(phoneNumberId), verified_name: 'Sandbox Business', quality_rating: 'GREEN',
    whatsapp_business_manager_messaging_limit: tierOf(messagingLimitOf(state, phoneNumberId)),
  };
  return { status: 200, body: Object.fromEntries(['id', ...fields.filter((f) => f !== 'id')].map((f) => [f, all[f]])) };
}

function post(state: SandboxState, wabaId: string, field: string, value: Obj): void {
  state.deliverer.post({ object: 'whatsapp_business_account', entry: [{ id: wabaId, time: Math.floor(Date.now() / 1000), changes: [{ value, field }] }] });
}

/**
 * `POST /__sandbox/business_capability {waba_id, max_daily_conversations_per_business, phone_number_id?}`:
 * the portfolio's new messaging limit (250, 2000, 10000, 100000 or -1 for unlimited), kept for the
 * WABA (and `phone_number_id` bound to it) and announced by `business_capability_update`.
 */
export function businessCapability(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.waba_id !== 'string' || body.waba_id === '') return bad('waba_id is required');
  const limit = body.max_daily_conversations_per_business;
  if (typeof limit !== 'number' || !CAPABILITY_LIMITS.includes(limit)) return bad(`max_daily_conversations_per_business must be one of ${CAPABILITY_LIMITS.join(', ')}`);
  if (body.phone_number_id !== undefined && typeof body.phone_number_id !== 'string') return bad('phone_number_id must be a string');
  if (!state.config.callback_url) return noCallbackUrl;
  if (typeof body.phone_number_id === 'string') state.templates.bindPhoneNumber(body.phone_number_id, body.waba_id);
  state.messagingLimits.set(body.waba_id, limit === -1 ? null : limit);
  const value = { max_daily_conversations_per_business: limit, max_phone_numbers_per_business: 2, max_phone_numbers_per_waba: 2 };
  post(state, body.waba_id, 'business_capability_update', value);
  return { status: 200, body: { waba_id: body.waba_id, value } };
}

/**
 * `POST /__sandbox/phone_number_quality {phone_number_id, event, waba_id?, current_limit?, max_daily_conversations_per_business?}`:
 * `phone_number_quality_update` for the number (entry id: its WABA). `THROUGHPUT_UPGRADE` is Meta's
 * move to 1,000 messages per second (current_limit TIER_UNLIMITED unless given); a
 * `max_daily_conversations_per_business` tier also becomes the WABA's messaging limit.
 */
export function phoneNumberQuality(state: SandboxState, body: unknown): Reply {
  if (!isObject(body) || typeof body.phone_number_id !== 'string' || body.phone_number_id === '') return bad('phone_number_id is required');
  if (typeof body.event !== 'string' || body.event === '') return bad('event is required (THROUGHPUT_UPGRADE, ONBOARDING, UPGRADE, DOWNGRADE, FLAGGED, UNFLAGGED)');
  if (body.waba_id !== undefined && typeof body.waba_id !== 'string') return bad('waba_id must be a string');
  for (const key of ['current_limit', 'max_daily_conversations_per_business'] as const) {
    if (body[key] !== undefined && !TIERS.includes(body[key] as string)) return bad(`${key} must be one of ${TIERS.join(', ')}`);
  }
  if (!state.config.callback_url) return noCallbackUrl;
  if (typeof body.waba_id === 'string') state.templates.bindPhoneNumber(body.phone_number_id, body.waba_id);
  const wabaId = state.templates.wabaOf(body.phone_number_id) ?? body.phone_number_id;
  const value: Obj = { display_phone_number: displayPhoneNumber(body.phone_number_id), event: body.event };
  const current = body.current_limit ?? (body.event === 'THROUGHPUT_UPGRADE' ? 'TIER_UNLIMITED' : undefined);
  if (current !== undefined) value.current_limit = current;
  if (typeof body.max_daily_conversations_per_business === 'string') {
    value.max_daily_conversations_per_business = body.max_daily_conversations_per_business;
    const limit = limitOfTier(body.max_daily_conversations_per_business);
    if (limit !== undefined) state.messagingLimits.set(wabaId, limit);
  }
  post(state, wabaId, 'phone_number_quality_update', value);
  return { status: 200, body: { waba_id: wabaId, value } };
}

function namedTemplates(state: SandboxState, body: unknown): { body: Obj; templates: SandboxTemplate[] } | Reply {
  if (!isObject(body) || typeof body.name !== 'string' || typeof body.language !== 'string') return bad('name and language are required');
  if (body.waba_id !== undefined && typeof body.waba_id !== 'string') return bad('waba_id must be a string');
  const templates = state.templates.find(body.name, body.language, body.waba_id as string | undefined);
  if (templates.length === 0) return { status: 404, body: { error: { message: `no template ${body.name} (${body.language})` } } };
  return { body, templates };
}

const templateIds = (t: SandboxTemplate) => ({ message_template_id: Number(t.id), message_template_name: t.name, message_template_language: t.language });

/** `POST /__sandbox/templates/quality {name, language, quality_score, waba_id?}`: `message_template_quality_update`. */
export function templateQuality(state: SandboxState, request: unknown): Reply {
  const named = namedTemplates(state, request);
  if ('status' in named) return named;
  const score = named.body.quality_score;
  if (typeof score !== 'string' || !QUALITY_SCORES.includes(score)) return bad(`quality_score must be one of ${QUALITY_SCORES.join(', ')}`);
  if (!state.config.callback_url) return noCallbackUrl;
  for (const t of named.templates) {
    const previous = t.qualityScore ?? 'UNKNOWN';
    t.qualityScore = score;
    post(state, t.wabaId, 'message_template_quality_update', { previous_quality_score: previous, new_quality_score: score, ...templateIds(t) });
  }
  return { status: 200, body: { templates: named.templates.map((t) => t.id), quality_score: score } };
}

/**
 * `POST /__sandbox/templates/category {name, language, new_category, waba_id?, impending?}`:
 * `template_category_update`. Done (default): the template takes the category (and its sends'
 * pricing with it), announced with `previous_category`. `impending: true`: only Meta's notice that
 * it will be recategorised in 24 hours (`correct_category`, `category_update_timestamp`).
 */
export function templateCategory(state: SandboxState, request: unknown): Reply {
  const named = namedTemplates(state, request);
  if ('status' in named) return named;
  const { body, templates } = named;
  if (typeof body.new_category !== 'string' || !CATEGORIES.includes(body.new_category)) return bad(`new_category must be one of ${CATEGORIES.join(', ')}`);
  if (body.impending !== undefined && typeof body.impending !== 'boolean') return bad('impending must be true or false');
  if (!state.config.callback_url) return noCallbackUrl;
  for (const t of templates) {
    if (body.impending) {
      post(state, t.wabaId, 'template_category_update', {
        ...templateIds(t), correct_category: body.new_category, new_category: t.category, category_update_timestamp: Math.floor(Date.now() / 1000) + 86_400,
      });
    } else {
      const previous = t.category;
      t.category = body.new_category;
      post(state, t.wabaId, 'template_category_update', { ...templateIds(t), previous_category: previous, new_category: t.category });
    }
  }
  return { status: 200, body: { templates: templates.map((t) => t.id), new_category: body.new_category, impending: body.impending ?? false } };
}
