import { Type, type Static } from 'typebox';
import { Nullable } from '../../http/nullable.ts';
import { PageOf, PageQuery } from '../../http/pagination.ts';
import { PLAN_NAMES } from '../tenants/plans.ts';

const PlanName = Type.Union(PLAN_NAMES.map((p) => Type.Literal(p)));

export const Tenant = Type.Object({
  id: Type.String(),
  name: Type.String(),
  plan: Type.String(),
  api_requests_daily: Type.Integer(),
  created_at: Type.String(),
});
export type Tenant = Static<typeof Tenant>;

export const TenantListQuery = Type.Object({
  // Compared with stored text, which never holds U+0000.
  name: Type.Optional(Type.String({ maxLength: 255, pattern: '^[^\\u0000]*$' })),
  ...PageQuery.properties,
});
export const TenantPage = PageOf(Tenant);

export const TenantCreate = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 255 }),
  plan: PlanName,
});
export const TenantPatch = Type.Object({
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
  plan: Type.Optional(PlanName),
  api_requests_daily: Type.Optional(Type.Integer({ minimum: -1, maximum: 2_147_483_647 })), // the column is a 32-bit integer
});
export type TenantPatch = Static<typeof TenantPatch>;

export const ApiKey = Type.Object({
  id: Type.String(),
  name: Type.String(),
  prefix: Type.String(),
  scopes: Type.Array(Type.String()),
  mode: Type.String(),
  expires_at: Nullable(Type.String()),
  ip_allowlist: Type.Array(Type.String()),
  created_at: Type.String(),
});
export type ApiKey = Static<typeof ApiKey>;
export const CreatedApiKey = Type.Object({ ...ApiKey.properties, key: Type.String() });

export const ApiKeyCreate = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 255 }),
  scopes: Type.Optional(Type.Array(Type.String(), { minItems: 1 })),
  preset: Type.Optional(Type.String()),
  mode: Type.Optional(Type.Union([Type.Literal('live'), Type.Literal('test')])),
  expires_at: Type.Optional(Nullable(Type.String({ format: 'date-time' }))),
  ip_allowlist: Type.Optional(Type.Array(Type.String(), { maxItems: 100 })),
});
export type ApiKeyCreate = Static<typeof ApiKeyCreate>;

export const ConsoleLinkCreate = Type.Object({
  /** The preset of the session's key (GET /scopes); default full_access. */
  preset: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  /** Where the person reaches this service (default: the origin this request came to). */
  base_url: Type.Optional(Type.String({ pattern: '^https?://[^/?#]+$', maxLength: 300 })),
});
export const ConsoleLink = Type.Object({ url: Type.String(), preset: Type.String(), expires_at: Type.String() });

export const BusinessAccount = Type.Object({
  tenant_id: Type.String(),
  waba_id: Type.String(),
  phone_number_id: Type.String(),
  display_phone_number: Nullable(Type.String()),
  /** active, disconnected, or stopped by WhatsApp: token_invalid (expired or revoked token) or restricted (account locked, payment, policy). */
  status: Type.String(),
  /** Why WhatsApp stopped it (the upstream code and title); null while active. */
  status_reason: Nullable(Type.String()),
  messages_per_second: Type.Integer(),
  /** The operator's per-number tier (Meta's older model): kept and shown, no longer what sending holds to. */
  messaging_tier: Type.String(),
  /** The business portfolio's messaging limit: unique users per moving 24 h outside a service window; null: unlimited. */
  messaging_limit: Nullable(Type.Integer()),
  /** When the limit was last set (from the upstream at connection, a callback, or an operator). */
  messaging_limit_updated_at: Nullable(Type.String()),
  connected_at: Type.String(),
  updated_at: Nullable(Type.String()),
});
export type BusinessAccount = Static<typeof BusinessAccount>;

/** Campaign pacing (Meta's throughput, default 80/s, up to 1,000) and the number's messaging tier. */
const pacingFields = {
  messages_per_second: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  messaging_tier: Type.Optional(Type.Union(['250', '1K', '10K', '100K', 'unlimited'].map((t) => Type.Literal(t)))),
  /** The portfolio's messaging limit (Meta's levels: 250, 2000, 10000, 100000; null unlimited); on connect, read from the upstream when absent. */
  messaging_limit: Type.Optional(Nullable(Type.Integer({ minimum: 1, maximum: 100_000_000 }))),
};

export const BusinessAccountConnect = Type.Object({
  waba_id: Type.String({ minLength: 1, maxLength: 64 }),
  phone_number_id: Type.String({ minLength: 1, maxLength: 64 }),
  access_token: Type.String({ minLength: 1, maxLength: 4096 }),
  display_phone_number: Type.Optional(Nullable(Type.String({ maxLength: 32 }))),
  ...pacingFields,
});
export type BusinessAccountConnect = Static<typeof BusinessAccountConnect>;
export const BusinessAccountPatch = Type.Object(pacingFields);
export type BusinessAccountPatch = Static<typeof BusinessAccountPatch>;

export const ScopeVocabulary = Type.Object({
  scopes: Type.Array(Type.String()),
  wildcard: Type.String(),
  presets: Type.Array(Type.Object({ name: Type.String(), scopes: Type.Array(Type.String()) })),
});

/** A tenant's marketing rules (issue 23): keywords, the US rule and the frequency cap. */
const FrequencyCap = Type.Object({
  max_messages: Type.Integer({ minimum: 1, maximum: 1000 }),
  days: Type.Integer({ minimum: 1, maximum: 365 }),
});
const Keywords = Type.Array(Type.String({ minLength: 1, maxLength: 64 }), { maxItems: 50 });
export const MarketingSettings = Type.Object({
  /** Normalised: upper case, without whitespace. */
  opt_out_keywords: Type.Array(Type.String()),
  opt_in_keywords: Type.Array(Type.String()),
  block_us_marketing: Type.Boolean(),
  frequency_cap: Nullable(FrequencyCap),
});
export const MarketingSettingsPatch = Type.Object({
  opt_out_keywords: Type.Optional(Keywords),
  opt_in_keywords: Type.Optional(Keywords),
  block_us_marketing: Type.Optional(Type.Boolean()),
  frequency_cap: Type.Optional(Nullable(FrequencyCap)),
});
export type MarketingSettingsPatch = Static<typeof MarketingSettingsPatch>;

export const TenantParams = Type.Object({ id: Type.String() });
export const KeyParams = Type.Object({ id: Type.String(), key_id: Type.String() });
export const Message = Type.Object({ message: Type.String() });

const Rate = (description: string) => Nullable(Type.Number({ minimum: 0, maximum: 1000, description }));

/** One market's rates per message on a card version; null: the card has no rate for that category. */
export const MarketRates = Type.Object({
  market: Type.String({ minLength: 1, maxLength: 100, description: 'a country by Meta\'s name ("Brazil"), one of Meta\'s regions ("Rest of Africa", "North America"...) or "Other"' }),
  marketing: Rate('marketing template messages'),
  utility: Rate('utility template messages'),
  authentication: Rate('authentication template messages'),
  authentication_international: Rate('authentication messages billed at the authentication-international rate'),
  service: Rate('service (non-template) messages, when Meta charges them'),
});

export const RateCardVersion = Type.Object({
  effective_from: Type.String({ pattern: '^\\d{4}-\\d{2}-\\d{2}$', description: 'first UTC day the version prices messages sent on' }),
  currency: Type.String({ pattern: '^[A-Z]{3}$', description: 'ISO 4217; rates are decimal amounts in it' }),
  source: Type.Optional(Nullable(Type.String({ maxLength: 1000, description: 'where the figures come from' }))),
  rates: Type.Array(MarketRates, { minItems: 1, maxItems: 1000 }),
});

/** The whole rate card (PUT replaces it; JSON, or CSV with Content-Type text/csv). */
export const RateCard = Type.Object({ versions: Type.Array(RateCardVersion, { minItems: 1, maxItems: 100 }) });
export type RateCard = Static<typeof RateCard>;
