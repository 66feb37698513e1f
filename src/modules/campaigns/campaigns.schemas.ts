import { Type, type Static } from 'typebox';
import { MessagePrice, MessagePricing } from '../messages/messages.schemas.ts';
import { Nullable } from '../../http/nullable.ts';
import { PageOf, PageQuery } from '../../http/pagination.ts';
import { SEGMENTS } from './campaigns.engagement.ts';
import { SKIP_REASONS } from './campaigns.exclusions.ts';
import { CAMPAIGN_STATUSES } from './campaigns.states.ts';
import { DAYS, SendWindow } from './send-window.ts';

export const CampaignStats = Type.Object({
  total: Type.Integer(),
  sent: Type.Integer(),
  delivered: Type.Integer(),
  read: Type.Integer(),
  failed: Type.Integer(),
  /** Not sent yet: pending, sending, held and deferred recipients. */
  pending: Type.Integer(),
  /** Accepted by WhatsApp but held for a template quality assessment (counted in pending too). */
  held: Type.Integer(),
  /** Not delivered by Meta for now (per-user marketing cap, 131049), retried later (counted in pending too). */
  deferred: Type.Integer(),
  /** Never sent, by rule (not counted in the six spec keys). */
  skipped: Type.Integer(),
  /** Recipients who replied to the campaign message (by context, or first message within 72 h), additive. */
  replied: Type.Integer(),
  /** Recipients who clicked the tracked link at least once (track_clicks), additive. */
  clicked: Type.Integer(),
});

export const AudienceRow = Type.Object({ type: Type.Union([Type.Literal('group'), Type.Literal('source')]), value: Type.String() });

const campaignFields = {
  id: Type.String(),
  name: Type.String(),
  description: Nullable(Type.String()),
  status: Type.Union(CAMPAIGN_STATUSES.map((s) => Type.Literal(s))),
  template_id: Type.String(),
  template_name: Nullable(Type.String()),
  template_category: Nullable(Type.String()),
  template_language: Nullable(Type.String()),
  variable_mapping: Nullable(Type.Object({}, { additionalProperties: true })),
  batch_size: Type.Integer(),
  scheduled_at: Nullable(Type.String()),
  started_at: Nullable(Type.String()),
  completed_at: Nullable(Type.String()),
  total_recipients: Type.Integer(),
  stats: CampaignStats,
  /** Why a FAILED campaign stopped (additive). */
  failure_reason: Nullable(Type.String()),
  /** Why a PAUSED campaign is paused: `user`, `template_paused` (resumed by itself once the template is approved again), `number_restricted` (131048) or `requests_refused` (every send refused with one request code), these two resumed by the tenant. Additive. */
  paused_reason: Nullable(Type.String()),
  /** Whether recipients Meta deferred (131049) are retried later (CAMPAIGN_DEFER_MS) instead of failed at once. Additive. */
  retry_deferred: Type.Boolean(),
  /** When recipients may be sent, in their local time (additive; null: any time). docs/campaigns.md. */
  send_window: Nullable(Type.Object({
    start: Type.String(), end: Type.String(),
    days: Nullable(Type.Array(Type.Union(DAYS.map((d) => Type.Literal(d))))),
    time_zone: Type.String({ description: '`recipient` or an IANA zone' }),
  })),
  /** Whether the campaign's URL button carries a per-recipient click-tracking link (GET /r/{token}). Additive. */
  track_clicks: Type.Boolean(),
  created_at: Nullable(Type.String()),
  updated_at: Nullable(Type.String()),
};

export const Campaign = Type.Object(campaignFields);
export type Campaign = Static<typeof Campaign>;

/** Recipients a MARKETING campaign skips, by reason (all zero for UTILITY and AUTHENTICATION). */
export const Excluded = Type.Object({
  opted_out: Type.Integer(),
  marketing_blocked_country: Type.Integer(),
  frequency_cap: Type.Integer(),
});

export const Preflight = Type.Object({
  audience_size: Type.Integer(),
  /** Of audience_size, never sent; the tier check and duration count the rest. */
  excluded: Excluded,
  /** The operator's per-number tier (Meta's older model), as set; informational. */
  messaging_tier: Nullable(Type.String()),
  /** The business portfolio's messaging limit: unique users per moving 24 h outside a service window; null when unlimited or no account. */
  tier_limit: Nullable(Type.Integer()),
  /** Whether the recipients still to send fit in what the limit allows now. */
  within_tier: Type.Boolean(),
  /** Users counted in the limit's window now, and how many more it allows (null when unlimited or no account). */
  messaging_limit_used: Nullable(Type.Integer()),
  messaging_limit_available: Nullable(Type.Integer()),
  /** When enough of the window frees up for every recipient still to send, about; null when they fit now. Until then the rest wait (pending). */
  messaging_limit_wait_until: Nullable(Type.String()),
  /** The template's quality (GREEN, YELLOW, RED, UNKNOWN); null when it is gone. */
  template_quality_score: Nullable(Type.String()),
  messages_per_second: Nullable(Type.Integer()),
  estimated_duration_seconds: Nullable(Type.Integer()),
  /** The cost estimate (additive): recipients by market times the rate of the template's category. */
  estimated_cost: Type.Object({
    currency: Nullable(Type.String()),
    category: Nullable(Type.String({ description: 'the template\'s category as the card prices it' })),
    amount: Nullable(Type.Number({ description: 'null when no rate card is in effect' })),
    by_market: Type.Array(Type.Object({
      market: Type.String(), recipients: Type.Integer(), rate: Nullable(Type.Number({ description: 'null: the card has no rate for the category in this market (counted as 0)' })), amount: Type.Number(),
    })),
  }),
  warnings: Type.Array(Type.String()),
});

const Money = (description: string) => Nullable(Type.Number({ description }));

/** What a campaign costs (additive): amounts are decimal numbers in `currency`, rounded to 4 decimals (docs/cost.md). */
export const CampaignCost = Type.Object({
  currency: Nullable(Type.String({ description: 'ISO 4217 currency of the rate card in effect; null when no card is in effect' })),
  estimated: Money('recipients (skipped excluded) by market times the rate of the template\'s category on the card in effect now; null without a card in effect'),
  spent: Type.Number({ description: 'sum of the prices of the campaign\'s charged messages, from the pricing of their status callbacks' }),
  by_category: Type.Record(Type.String(), Type.Object({
    messages: Type.Integer({ description: 'charged messages (a message that failed after its price arrived is taken back)' }),
    amount: Type.Number(),
  }), { description: 'spent by the pricing category of the callbacks (marketing, utility, authentication, authentication_international, service...)' }),
});

const Rate = Nullable(Type.Number({ description: 'of sent, 0 to 1 (4 decimals); null when nothing was sent' }));
/** GET one campaign: recipients at each stage after sending, and their share of those sent. */
export const CampaignFunnel = Type.Object({
  sent: Type.Integer(), delivered: Type.Integer(), read: Type.Integer(), replied: Type.Integer(), clicked: Type.Integer(),
  delivered_rate: Rate, read_rate: Rate, replied_rate: Rate, clicked_rate: Rate,
});

export const CampaignDetail = Type.Object({ ...campaignFields, funnel: CampaignFunnel, audiences: Type.Array(AudienceRow), preflight: Preflight, cost: CampaignCost });
export type CampaignDetail = Static<typeof CampaignDetail>;

export const CampaignList = Type.Object({ data: Type.Array(Campaign) });

// Items are checked by the service (400 naming the item) so the message can say what is wrong.
const AudienceItems = Type.Array(Type.Unknown());
export const AudienceBody = Type.Object({
  groups: Type.Optional(AudienceItems),
  sources: Type.Optional(AudienceItems),
});
export type AudienceBody = Static<typeof AudienceBody>;

export const CampaignCreate = Type.Object({
  name: Type.String({ minLength: 1, maxLength: 120 }),
  description: Type.Optional(Nullable(Type.String({ maxLength: 500 }))),
  template_id: Type.String({ minLength: 1, maxLength: 255 }),
  batch_size: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
  // Normalised and checked by the service (spec 2.2), which names the failing path.
  variable_mapping: Type.Optional(Type.Unknown()),
  audience: Type.Optional(AudienceBody),
  scheduled_at: Type.Optional(Nullable(Type.String({ format: 'date-time' }))),
  retry_deferred: Type.Optional(Type.Boolean({ default: true })),
  send_window: Type.Optional(Nullable(SendWindow)),
  /** Track link clicks: the template needs a URL button `<PUBLIC_BASE_URL>/r/{{1}}`, mapped to an https destination. */
  track_clicks: Type.Optional(Type.Boolean({ default: false })),
});
export type CampaignCreate = Static<typeof CampaignCreate>;

/**
 * PATCH /campaigns/{id} (additive): the send window while the campaign is DRAFT, SCHEDULED or PAUSED;
 * the name, variable mapping and batch size while it is DRAFT (a builder saving as the person edits).
 */
export const CampaignPatch = Type.Object({
  send_window: Type.Optional(Nullable(SendWindow)),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 120 })),
  // Normalised and checked against the campaign's template by the service, as on create.
  variable_mapping: Type.Optional(Type.Unknown()),
  batch_size: Type.Optional(Type.Integer({ minimum: 1, maximum: 1000 })),
}, { minProperties: 1 });
export type CampaignPatch = Static<typeof CampaignPatch>;

export const ScheduleBody = Type.Object({ scheduled_at: Type.String({ format: 'date-time' }) });

export const IdParams = Type.Object({ id: Type.String() });
export const ErrorCodeParams = Type.Object({ id: Type.String(), error_code: Type.String({ maxLength: 32 }) });

export const AudiencePreview = Type.Object({
  total: Type.Integer(),
  sample: Type.Array(Type.Object({ id: Type.String(), first_name: Type.String(), phone: Type.String() })),
  /** Of total, recipients a MARKETING campaign skips, by reason. */
  excluded: Excluded,
});

export const FieldCoverageBody = Type.Object({ fields: Type.Array(Type.String({ minLength: 1, maxLength: 120 }), { minItems: 1, maxItems: 50 }) });
export const FieldCoverage = Type.Object({
  total_recipients: Type.Integer(),
  /** Of total_recipients, recipients a MARKETING campaign skips, by reason. */
  excluded: Excluded,
  coverage: Type.Record(Type.String(), Type.Object({ present: Type.Integer(), missing: Type.Integer() })),
});

export const RenderBody = Type.Object({ sample_contact_id: Type.Optional(Type.String()) });
export const RenderPreview = Type.Object({
  campaign_id: Type.String(),
  sample_contact_id: Nullable(Type.String()),
  resolved_components: Type.Array(Type.Object({ type: Type.String(), text: Type.String() })),
});

export const ErrorsSummary = Type.Object({
  total_failed: Type.Integer(),
  by_code: Type.Array(Type.Object({ code: Type.String(), title: Type.String(), fix: Type.String(), count: Type.Integer(), sample_message: Type.String() })),
});

export const RecipientRow = Type.Object({
  id: Type.String(),
  phone_number: Type.String(),
  contact_id: Nullable(Type.String()),
  status: Type.String(),
  message_id: Nullable(Type.String()),
  error: Nullable(Type.String()),
});
export const ErrorDrillDown = Type.Object({ error_code: Type.String(), recipients: Type.Array(RecipientRow) });
export const DrillDownQuery = Type.Object({ limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 200, default: 50 })) });

export const Recipient = Type.Object({
  ...RecipientRow.properties,
  /** The upstream error code as the errors endpoints show it (digits); null without one. */
  error_code: Nullable(Type.String()),
  /** The pricing of the recipient's message callbacks and its price (additive; null until its pricing arrives). */
  pricing: Nullable(MessagePricing),
  price: Nullable(MessagePrice),
  attempts: Type.Integer(),
  updated_at: Nullable(Type.String()),
  /** Why a skipped recipient was never sent: opted_out, marketing_blocked_country or frequency_cap; null otherwise. */
  skip_reason: Nullable(Type.Enum([...SKIP_REASONS])),
  /** A pending or deferred recipient waiting (its send window's next opening, a retry, Meta's deferral): not sent before then. Additive. */
  next_attempt_at: Nullable(Type.String()),
  /** The zone its campaign's send window is read in (null: no window when it was materialised). Additive. */
  time_zone: Nullable(Type.String()),
  /** When the recipient first replied (additive), the payload of their first quick-reply tap, and their first link click. */
  replied_at: Nullable(Type.String()),
  button_payload: Nullable(Type.String()),
  clicked_at: Nullable(Type.String()),
  click_count: Type.Integer(),
});
export const RECIPIENT_STATUSES = ['pending', 'sending', 'held', 'deferred', 'skipped', 'sent', 'delivered', 'read', 'failed'] as const;
export const RecipientStatus = Type.Union(RECIPIENT_STATUSES.map((s) => Type.Literal(s)));
export const RecipientsQuery = Type.Object({ ...PageQuery.properties, status: Type.Optional(RecipientStatus) });
export const RecipientPage = PageOf(Recipient);

export const RetargetBody = Type.Object({
  /** Which recipients: failed (default), not_delivered, delivered_not_read, read_not_replied, replied, clicked, not_clicked. */
  segment: Type.Optional(Type.Union(SEGMENTS.map((s) => Type.Literal(s)))),
  // As GET /errors shows them ("131026", "unknown") or as numbers (131026): checked by the service.
  error_codes: Type.Optional(Type.Array(Type.Union([Type.String({ minLength: 1, maxLength: 32 }), Type.Integer()]), { minItems: 1, maxItems: 100 })),
  name: Type.Optional(Type.String({ minLength: 1, maxLength: 120 })),
});
