import { Type, type Static } from 'typebox';
import { Nullable } from '../../http/nullable.ts';
import { PageOf, PageQuery } from '../../http/pagination.ts';

const Parameter = Type.Object({ type: Type.String({ minLength: 1, maxLength: 32 }) }, { additionalProperties: true });

export const SendComponentInput = Type.Object({
  type: Type.String({ minLength: 1, maxLength: 16 }),
  sub_type: Type.Optional(Type.String({ maxLength: 32 })),
  index: Type.Optional(Type.Union([Type.String({ maxLength: 4 }), Type.Integer({ minimum: 0, maximum: 99 })])),
  parameters: Type.Optional(Type.Array(Parameter, { maxItems: 100 })),
});

export const SendTemplateMessage = Type.Object({
  to: Type.String({ minLength: 1, maxLength: 32 }),
  template_name: Type.String({ minLength: 1, maxLength: 512 }),
  language: Type.String({ minLength: 2, maxLength: 10, default: 'en' }),
  components: Type.Optional(Type.Array(SendComponentInput, { maxItems: 20 })),
});
export type SendTemplateMessage = Static<typeof SendTemplateMessage>;

export const SendResult = Type.Object({
  message_id: Type.String(),
  status: Type.Literal('accepted'),
  to: Type.String(),
});
export type SendResult = Static<typeof SendResult>;

/** The `pricing` of the message's status callbacks (Meta's, reference §7), as the first that carried one said it. Additive. */
export const MessagePricing = Type.Object({
  category: Type.String({ description: 'marketing, utility, authentication, authentication_international, service, marketing_lite, referral_conversion' }),
  type: Nullable(Type.String({ description: 'regular, free_customer_service or free_entry_point' })),
  billable: Nullable(Type.Boolean()),
  pricing_model: Nullable(Type.String({ description: 'PMP (per-message pricing)' })),
});

/** What the message costs: its pricing on the rate card in effect when it was sent (0 when free). Additive. */
export const MessagePrice = Type.Object({
  amount: Type.Number({ description: 'decimal amount in `currency`, rounded to 4 decimals' }),
  currency: Type.String({ description: 'ISO 4217, the rate card\'s' }),
});

// unknown: the send's answer never came and no callback has said yet what became of it.
const STATUSES = ['accepted', 'unknown', 'sent', 'delivered', 'read', 'failed'] as const;

/** A sent template message as stored, with its delivery status (GET /messages, GET /messages/{id}). */
export const Message = Type.Object({
  id: Type.String({ description: 'our id of the message (a campaign recipient\'s id for campaign sends)' }),
  message_id: Nullable(Type.String({ description: 'the upstream message id, as in the send response and message.* events; null until the upstream accepted it' })),
  to: Type.String(),
  contact_id: Nullable(Type.String()),
  campaign_id: Nullable(Type.String()),
  template_name: Type.String(),
  language: Type.String(),
  status: Type.Union(STATUSES.map((s) => Type.Literal(s))),
  sent_at: Nullable(Type.String()),
  delivered_at: Nullable(Type.String()),
  read_at: Nullable(Type.String()),
  failed_at: Nullable(Type.String()),
  error: Nullable(Type.Object({ code: Nullable(Type.Integer()), title: Type.String() })),
  pricing: Nullable(MessagePricing),
  price: Nullable(MessagePrice),
  created_at: Type.String(),
  updated_at: Nullable(Type.String()),
});
export type Message = Static<typeof Message>;

export const MessageParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 255, pattern: '^[^\\u0000]*$', description: 'our message id or the upstream message id' }),
});

export const MessageListQuery = Type.Object({
  to: Type.Optional(Type.String({ pattern: '^\\+[1-9][0-9]{1,14}$', description: 'recipient in E.164' })),
  status: Type.Optional(Type.Union(STATUSES.map((s) => Type.Literal(s)))),
  contact_id: Type.Optional(Type.String({ format: 'uuid' })),
  campaign_id: Type.Optional(Type.String({ format: 'uuid' })),
  template_name: Type.Optional(Type.String({ minLength: 1, maxLength: 512, pattern: '^[^\\u0000]*$' })),
  created_after: Type.Optional(Type.String({ format: 'date-time', description: 'created at or after this instant' })),
  created_before: Type.Optional(Type.String({ format: 'date-time', description: 'created before this instant' })),
  ...PageQuery.properties,
});
export type MessageListQuery = Static<typeof MessageListQuery>;

export const MessagePage = PageOf(Message);
