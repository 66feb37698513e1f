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

const Reactions = Type.Array(Type.Object({
  emoji: Type.String(),
  from: Nullable(Type.String({ description: 'the reacting user: phone in E.164, or business-scoped user id' })),
  reacted_at: Type.String(),
}), { description: 'the users\' current reactions (a reaction taken back is removed)' });

/** A sent template message as stored, with its delivery status (GET /messages, GET /messages/{id}). */
export const OutboundMessage = Type.Object({
  id: Type.String({ description: 'our id of the message (a campaign recipient\'s id for campaign sends)' }),
  direction: Type.Literal('outbound'),
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
  reactions: Reactions,
  pricing: Nullable(MessagePricing),
  price: Nullable(MessagePrice),
  created_at: Type.String(),
  updated_at: Nullable(Type.String()),
});
export type OutboundMessage = Static<typeof OutboundMessage>;

/** Which message (ours, by our id, when we know it) an inbound message replies to or annotates. */
const MessageReference = Type.Object({
  message_id: Nullable(Type.String({ description: 'our id of that message (GET /messages/{id}); null when it is not a message we know' })),
  upstream_message_id: Type.String({ description: 'the upstream message id the user\'s message named' }),
});
const Open = Type.Object({}, { additionalProperties: true });

/** A message a user sent to the business number, with its per-type fields (as in message.received). */
export const InboundMessage = Type.Object({
  id: Type.String({ description: 'our id of the message' }),
  direction: Type.Literal('inbound'),
  message_id: Type.String({ description: 'the upstream message id, as in message.received' }),
  from: Nullable(Type.String({ description: 'sender phone in E.164; null for a user writing by username only' })),
  from_user_id: Nullable(Type.String()),
  contact_id: Nullable(Type.String()),
  type: Type.String({ description: 'upstream message type: text, image, video, audio, document, sticker, button, interactive, location, contacts, order, ...' }),
  text: Nullable(Type.String({ description: 'the text, caption, button or reply title; null once deleted' })),
  context: Type.Optional(MessageReference),
  button: Type.Optional(Type.Object({ payload: Nullable(Type.String()), text: Nullable(Type.String()) })),
  interactive: Type.Optional(Type.Object({
    type: Type.String({ description: 'button_reply, list_reply or nfm_reply (a Flow: see flow.submission_received)' }),
    id: Nullable(Type.String()), title: Nullable(Type.String()), description: Nullable(Type.String()),
  })),
  media: Type.Optional(Type.Object({
    id: Nullable(Type.String({ description: 'the upstream media id; fetch the bytes with GET /messages/{id}/media' })),
    mime_type: Nullable(Type.String()), sha256: Nullable(Type.String()), caption: Nullable(Type.String()), filename: Nullable(Type.String()),
  })),
  location: Type.Optional(Type.Object({
    latitude: Nullable(Type.Number()), longitude: Nullable(Type.Number()), name: Nullable(Type.String()), address: Nullable(Type.String()), url: Nullable(Type.String()),
  })),
  contacts: Type.Optional(Type.Array(Open, { description: 'shared contact cards, as the upstream sends them' })),
  order: Type.Optional(Type.Object({ catalog_id: Nullable(Type.String()), text: Nullable(Type.String()), product_items: Type.Array(Open) })),
  referral: Type.Optional(Type.Record(Type.String(), Type.Union([Type.String(), Type.Number(), Type.Boolean(), Type.Null()]), {
    description: 'the click-to-WhatsApp ad the user came from: source_url, source_id, source_type, headline, body, ctwa_clid, ...',
  })),
  reactions: Reactions,
  edited_at: Nullable(Type.String()),
  deleted_at: Nullable(Type.String({ description: 'the user deleted the message: its text and content are gone' })),
  timestamp: Type.String({ description: 'when the user sent it (the upstream\'s timestamp)' }),
  created_at: Type.String({ description: 'when it reached us' }),
});
export type InboundMessage = Static<typeof InboundMessage>;

/** One message either way; `direction` tells which. */
export const Message = Type.Union([OutboundMessage, InboundMessage]);
export type Message = Static<typeof Message>;

export const MessageParams = Type.Object({
  id: Type.String({ minLength: 1, maxLength: 255, pattern: '^[^\\u0000]*$', description: 'our message id or the upstream message id' }),
});

export const MessageListQuery = Type.Object({
  direction: Type.Optional(Type.Union([Type.Literal('outbound'), Type.Literal('inbound')], { description: 'only messages we sent, or only messages users sent; both when absent' })),
  to: Type.Optional(Type.String({ pattern: '^\\+[1-9][0-9]{1,14}$', description: 'recipient in E.164 (outbound messages only)' })),
  from: Type.Optional(Type.String({ pattern: '^\\+[1-9][0-9]{1,14}$', description: 'sender in E.164 (inbound messages only)' })),
  status: Type.Optional(Type.Union(STATUSES.map((s) => Type.Literal(s)), { description: 'delivery status (outbound messages only)' })),
  contact_id: Type.Optional(Type.String({ format: 'uuid' })),
  campaign_id: Type.Optional(Type.String({ format: 'uuid', description: 'outbound messages only' })),
  template_name: Type.Optional(Type.String({ minLength: 1, maxLength: 512, pattern: '^[^\\u0000]*$', description: 'outbound messages only' })),
  created_after: Type.Optional(Type.String({ format: 'date-time', description: 'created at or after this instant' })),
  created_before: Type.Optional(Type.String({ format: 'date-time', description: 'created before this instant' })),
  ...PageQuery.properties,
});
export type MessageListQuery = Static<typeof MessageListQuery>;

export const MessagePage = PageOf(Message);
