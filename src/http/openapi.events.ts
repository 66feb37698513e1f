import { EVENT_TYPES, type EventType } from '../events/events.ts';

/**
 * The webhook events in the public API description: one envelope schema per event type (spec 6.2,
 * `data` as ARCHITECTURE §4 gives it) and an OpenAPI 3.1 `webhooks` entry per type, describing the
 * signed POST a subscribed endpoint receives.
 */

type Schema = Record<string, unknown>;
const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
const nullable = (schema: Schema) => ({ anyOf: [{ type: 'null' }, schema] });
const timestamp = { type: 'string', format: 'date-time' };
/** A message the user's message names: ours by our id when we know it (else null), always by the upstream id. */
const messageReference = {
  type: 'object',
  required: ['message_id', 'upstream_message_id'],
  properties: {
    message_id: { ...nullable({ type: 'string' }), description: 'Our id of that message (GET /messages/{id}); null when it is not a message this service knows.' },
    upstream_message_id: { type: 'string' },
  },
};

const messageStatus = (statuses: string[]) => ({
  type: 'object',
  required: ['message_id', 'to', 'status', 'timestamp', 'contact_id', 'campaign_id', 'template_name'],
  properties: {
    message_id: { type: 'string', description: 'The upstream message id (as returned by POST /messages/template).' },
    to: { type: 'string', description: 'Recipient in E.164.' },
    status: { type: 'string', enum: statuses },
    timestamp: { ...timestamp, description: 'When the upstream reported the status.' },
    sent_at: { ...timestamp, description: 'The status time under its own name: present on message.sent.' },
    delivered_at: { ...timestamp, description: 'Present on message.delivered.' },
    read_at: { ...timestamp, description: 'Present on message.read.' },
    failed_at: { ...timestamp, description: 'Present on message.failed.' },
    contact_id: nullable({ type: 'string', format: 'uuid' }),
    campaign_id: nullable({ type: 'string', format: 'uuid' }),
    template_name: { type: 'string' },
  },
});

/** `data` schemas of the events that do not carry an API resource as it is. */
export const EVENT_DATA_SCHEMAS: Record<string, Schema> = {
  MessageStatusEventData: messageStatus(['sent', 'delivered', 'read']),
  MessageFailedEventData: {
    ...messageStatus(['failed']),
    required: [...messageStatus([]).required, 'error'],
    properties: {
      ...messageStatus(['failed']).properties,
      error: {
        type: 'object',
        required: ['code', 'title'],
        properties: { code: { type: 'integer', description: 'The upstream (WhatsApp Cloud API) error code, e.g. 131026.' }, title: { type: 'string' } },
      },
    },
  },
  MessageReceivedEventData: {
    type: 'object',
    required: ['message_id', 'from', 'from_user_id', 'contact_id', 'type', 'text', 'timestamp'],
    description: 'The per-type fields are present only for the types that have them. A `reaction`, `edit` or `revoke` is not a new message: it names the message it changes (GET /messages shows the change there).',
    properties: {
      message_id: { type: 'string' },
      from: { ...nullable({ type: 'string' }), description: 'Sender phone in E.164; null for a user writing by username only.' },
      from_user_id: { ...nullable({ type: 'string' }), description: "The sender's business-scoped user id, when the upstream gave one." },
      contact_id: nullable({ type: 'string', format: 'uuid' }),
      type: { type: 'string', description: 'Upstream message type: text, image, video, audio, document, sticker, button, interactive, location, contacts, order, reaction, edit, revoke, ...' },
      text: { ...nullable({ type: 'string' }), description: 'The text, caption, quick-reply button text, reply title or order note (for an edit: the new text).' },
      timestamp,
      context: { ...messageReference, description: 'The message this one replies to or whose button it taps.' },
      button: { type: 'object', properties: { payload: nullable({ type: 'string' }), text: nullable({ type: 'string' }) }, description: 'A template quick-reply tap.' },
      interactive: {
        type: 'object', description: 'A reply to an interactive message: button_reply, list_reply (with description), or nfm_reply (a Flow: see flow.submission_received).',
        properties: { type: { type: 'string' }, id: nullable({ type: 'string' }), title: nullable({ type: 'string' }), description: nullable({ type: 'string' }) },
      },
      media: {
        type: 'object', description: 'Image, video, audio, document or sticker; the bytes come from GET /messages/{message_id}/media while the upstream keeps them.',
        properties: { id: nullable({ type: 'string' }), mime_type: nullable({ type: 'string' }), sha256: nullable({ type: 'string' }), caption: nullable({ type: 'string' }), filename: nullable({ type: 'string' }) },
      },
      location: { type: 'object', properties: { latitude: nullable({ type: 'number' }), longitude: nullable({ type: 'number' }), name: nullable({ type: 'string' }), address: nullable({ type: 'string' }), url: nullable({ type: 'string' }) } },
      contacts: { type: 'array', items: { type: 'object', additionalProperties: true }, description: 'Shared contact cards, as the upstream sends them.' },
      order: { type: 'object', properties: { catalog_id: nullable({ type: 'string' }), text: nullable({ type: 'string' }), product_items: { type: 'array', items: { type: 'object', additionalProperties: true } } } },
      referral: { type: 'object', additionalProperties: true, description: 'The click-to-WhatsApp ad the user came from: source_url, source_id, source_type, headline, body, media_type, ctwa_clid, ...' },
      reaction: { ...messageReference, properties: { ...messageReference.properties, emoji: { type: 'string', description: 'Empty when the user took the reaction back.' } } },
      edit: { ...messageReference, description: 'The message the user edited (the new content is in text and the per-type fields).' },
      revoke: { ...messageReference, description: 'The message the user deleted.' },
    },
  },
  FlowSubmissionEventData: {
    type: 'object',
    required: ['message_id', 'from', 'from_user_id', 'contact_id', 'flow_token', 'response'],
    properties: {
      message_id: { type: 'string' },
      from: nullable({ type: 'string' }),
      from_user_id: nullable({ type: 'string' }),
      contact_id: nullable({ type: 'string', format: 'uuid' }),
      flow_token: nullable({ type: 'string' }),
      response: { type: 'object', additionalProperties: true, description: 'The submitted fields, parsed.' },
    },
  },
  CommunicationEventData: {
    allOf: [ref('Communication'), { type: 'object', properties: { from_user_id: nullable({ type: 'string' }) } }],
  },
  CampaignEventData: {
    allOf: [ref('Campaign'), { type: 'object', required: ['audiences'], properties: { audiences: { type: 'array', items: ref('CampaignAudience') } } }],
  },
  CampaignPausedEventData: {
    allOf: [ref('CampaignEventData'), {
      type: 'object',
      properties: {
        reason: { type: 'string', description: 'Set when the service paused it: template_paused, number_restricted or requests_refused.' },
        error_code: { type: 'integer', description: 'The upstream code behind number_restricted (131048) or requests_refused.' },
      },
    }],
  },
  CampaignResumedEventData: {
    allOf: [ref('CampaignEventData'), {
      type: 'object',
      properties: { reason: { type: 'string', description: 'template_approved when the service resumed it (the template it paused for was approved again).' } },
    }],
  },
  CampaignFailedEventData: {
    allOf: [ref('CampaignEventData'), {
      type: 'object',
      required: ['reason', 'error_code'],
      properties: { reason: { type: 'string' }, error_code: nullable({ type: 'integer' }) },
    }],
  },
  WebhookTestEventData: {
    type: 'object',
    required: ['webhook_id', 'message'],
    properties: { webhook_id: { type: 'string', format: 'uuid' }, message: { type: 'string' } },
  },
};

/** Spec 6.1: when each event is emitted, and the schema of its `data`. */
const EVENTS: Record<EventType, { when: string; data: string }> = {
  'contact.created': { when: 'A contact was added (API create or bulk row).', data: 'Contact' },
  'contact.updated': { when: 'A contact field changed (PATCH).', data: 'Contact' },
  'contact.deleted': { when: 'A contact was archived.', data: 'Contact' },
  'contact.note_added': { when: 'A note was attached to a contact.', data: 'Note' },
  'contact.communication_added': { when: 'A communication-history row was attached (every outbound and inbound message of a known contact).', data: 'CommunicationEventData' },
  'followup.created': { when: 'A follow-up reminder was scheduled.', data: 'Followup' },
  'followup.updated': { when: 'A follow-up was edited or marked done.', data: 'Followup' },
  'followup.deleted': { when: 'A follow-up was removed.', data: 'Followup' },
  'message.sent': { when: 'The upstream accepted the outbound message.', data: 'MessageStatusEventData' },
  'message.delivered': { when: 'Delivery to the device was confirmed.', data: 'MessageStatusEventData' },
  'message.read': { when: 'The recipient opened the message (only with read receipts).', data: 'MessageStatusEventData' },
  'message.failed': { when: 'The send failed permanently; carries the numeric upstream error code. May follow a 200 from POST /messages/template.', data: 'MessageFailedEventData' },
  'message.received': { when: 'A user sent a message to the business number.', data: 'MessageReceivedEventData' },
  'campaign.created': { when: 'After POST /campaigns (and when a retarget creates one).', data: 'CampaignEventData' },
  'campaign.updated': { when: 'A campaign that has not dispatched was edited.', data: 'CampaignEventData' },
  'campaign.scheduled': { when: 'After schedule, or a create with scheduled_at.', data: 'CampaignEventData' },
  'campaign.started': { when: 'Dispatch began, manually or at the scheduled time.', data: 'CampaignEventData' },
  'campaign.paused': { when: 'After pause, or when the service paused it (its template paused, its number restricted for spam, its sends all refused the same way): then with reason and error_code.', data: 'CampaignPausedEventData' },
  'campaign.resumed': { when: 'After resume, or when the service resumed it (the template it paused for was approved again): then with reason.', data: 'CampaignResumedEventData' },
  'campaign.stopped': { when: 'After stop.', data: 'CampaignEventData' },
  'campaign.completed': { when: 'Every recipient was processed.', data: 'CampaignEventData' },
  'campaign.failed': { when: 'A fatal error stopped the dispatch (the business account token was refused, for example).', data: 'CampaignFailedEventData' },
  'flow.submission_received': { when: 'A user submitted an interactive flow; carries the submitted fields.', data: 'FlowSubmissionEventData' },
  'webhook.test': { when: 'A test requested with POST /webhooks/{id}/test (signed like any event, never retried).', data: 'WebhookTestEventData' },
};

/** `contact.note_added` -> `ContactNoteAddedEvent`. */
export const eventSchemaName = (type: string) =>
  type.split(/[._]/).map((word) => word[0].toUpperCase() + word.slice(1)).join('') + 'Event';

/** The envelope of each event type, named by eventSchemaName. */
export function eventSchemas(): Record<string, Schema> {
  const schemas: Record<string, Schema> = {};
  for (const type of EVENT_TYPES) {
    schemas[eventSchemaName(type)] = {
      type: 'object',
      description: `The \`${type}\` envelope. ${EVENTS[type].when}`,
      required: ['id', 'type', 'created_at', 'data'],
      properties: {
        id: { type: 'string', format: 'uuid', description: 'Event id: the same on every attempt and replay; deduplicate on it.' },
        type: { type: 'string', enum: [type] },
        created_at: timestamp,
        data: ref(EVENTS[type].data),
      },
    };
  }
  return schemas;
}

const header = (name: string, description: string, schema: Schema = { type: 'string' }) =>
  ({ name, in: 'header', required: true, description, schema });

/** Headers of every delivery (spec 6.2), as reusable parameters. */
export const DELIVERY_HEADERS: Record<string, Schema> = {
  XServiceEvent: header('X-Service-Event', 'The event type.', ref('EventType')),
  XServiceDeliveryId: header('X-Service-Delivery-ID', 'Unique per delivery attempt.', { type: 'string', format: 'uuid' }),
  XServiceWebhookId: header('X-Service-Webhook-ID', 'The receiving webhook endpoint.', { type: 'string', format: 'uuid' }),
  XServiceTimestamp: header('X-Service-Timestamp', 'Unix epoch seconds at signing, as sent: part of the signed string.', { type: 'string', pattern: '^[0-9]+$' }),
  XServiceSignature: header(
    'X-Service-Signature',
    '`sha256=<hex>`: HMAC-SHA256 keyed by the endpoint signing secret over `<X-Service-Timestamp>.<raw body>`. Compare in constant time and reject timestamps more than a few minutes old.',
    { type: 'string', pattern: '^sha256=[0-9a-f]{64}$' },
  ),
};

/** OpenAPI 3.1 `webhooks`: the request this service sends to a subscribed endpoint, per event type. */
export function webhookOperations(): Record<string, Schema> {
  const webhooks: Record<string, Schema> = {};
  for (const type of EVENT_TYPES) {
    webhooks[type] = {
      post: {
        operationId: `on${eventSchemaName(type).replace(/Event$/, '')}`,
        summary: EVENTS[type].when.split('. ')[0].replace(/\.$/, ''),
        description: `${EVENTS[type].when}\n\nSent as a signed POST to every active endpoint subscribed to \`${type}\`.`,
        tags: ['Events'],
        security: [],
        parameters: Object.keys(DELIVERY_HEADERS).map((name) => ({ $ref: `#/components/parameters/${name}` })),
        requestBody: { required: true, content: { 'application/json': { schema: ref(eventSchemaName(type)) } } },
        responses: {
          200: { description: 'Any 2xx answered within 10 seconds acknowledges the delivery.' },
          default: { description: 'Any other answer, or none within 10 seconds, fails the attempt: it is retried after 1 min, 5 min, 30 min, 2 h and 6 h, then abandoned.' },
        },
      },
    };
  }
  return webhooks;
}
