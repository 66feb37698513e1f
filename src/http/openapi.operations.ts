/**
 * What the API descriptions say about each operation, in one table per document, keyed by
 * `METHOD /path` as the document writes it (relative to the API's base path). openapi.ts applies
 * it to the routes; a test fails when a route has no entry here.
 */
export interface OperationDoc {
  operationId: string;
  summary: string;
  tag: string;
  description?: string;
  /** The message of the operation's 404 (routes with path parameters answer 404 in any case). */
  notFound?: string;
  /** Message of the resource's own 409 (a duplicate, a lost race), beside the Idempotency-Key 409. */
  conflict?: string;
  /** What the call asks of the upstream (`sending the message`): it answers 502 UPSTREAM_ERROR and 504 UPSTREAM_TIMEOUT, safe to retry. */
  upstream?: string;
  /** Example request body (it must satisfy the body schema). */
  example?: unknown;
  /** Responses written out here instead of derived from the route (other content types). */
  responses?: Record<string, unknown>;
}

const UUID = '6f1d2c0e-8a4b-4c1e-9a57-2b7c1d9e3f40';
const PHONE = '+447400123456';

const contact = {
  first_name: 'Ana', last_name: 'Silva', phone: PHONE, email: 'ana@example.com', company: 'Acme', job_title: 'Buyer',
  status: 'lead', tags: ['vip'], custom_fields: { city: 'London' }, source: 'website',
};

const campaignAction = (action: string, summary: string, description: string): OperationDoc => ({
  operationId: `${action}Campaign`, summary, tag: 'Campaigns', notFound: 'Campaign not found',
  conflict: 'The campaign changed status concurrently; re-read it and retry',
  description: `${description} A campaign in a status the action does not apply to answers 400 naming the status. Scope campaigns:send; the plan must include campaign sending.`,
});

export const PUBLIC_OPERATIONS: Record<string, OperationDoc> = {
  // Contacts
  'GET /contacts': {
    operationId: 'listContacts', summary: 'List contacts', tag: 'Contacts',
    description: 'Newest first. `search` matches first_name, last_name, email and company; `status` matches exactly. Archived contacts are left out.',
  },
  'POST /contacts/search': {
    operationId: 'searchContacts', summary: 'Search contacts', tag: 'Contacts',
    description: 'The list with a body of filters, including `tag`; `page` and `limit` stay in the query.',
    example: { search_term: 'ana', status: 'lead', tag: 'vip' },
  },
  'POST /contacts': {
    operationId: 'createContact', summary: 'Create a contact', tag: 'Contacts', conflict: 'A contact with this phone already exists',
    description: '`phone` is E.164 (`+<country><number>`). A duplicate phone or email is 409. Emits contact.created.',
    example: contact,
  },
  'POST /contacts/bulk': {
    operationId: 'bulkCreateContacts', summary: 'Create up to 100 contacts', tag: 'Contacts',
    description: 'Each item is checked on its own: a failing item is reported by its index and never aborts the batch. Each created contact emits contact.created.',
    example: { contacts: [{ first_name: 'Ana', phone: PHONE }, { first_name: 'Ben', phone: '+14155552671', tags: ['vip'] }] },
  },
  'GET /contacts/{id}': { operationId: 'getContact', summary: 'Get a contact', tag: 'Contacts', notFound: 'Contact not found' },
  'PATCH /contacts/{id}': {
    operationId: 'updateContact', summary: 'Update a contact', tag: 'Contacts', notFound: 'Contact not found', conflict: 'A contact with this email already exists',
    description: 'Only the fields sent change; null clears a nullable field; `phone` cannot be cleared. Emits contact.updated.',
    example: { company: 'Acme Ltd', job_title: null, tags: ['vip', 'newsletter'] },
  },
  'DELETE /contacts/{id}': {
    operationId: 'deleteContact', summary: 'Archive a contact', tag: 'Contacts', notFound: 'Contact not found',
    description: 'Soft delete: hidden from listings and audiences, history kept. Emits contact.deleted.',
  },
  'POST /contacts/{id}/notes': {
    operationId: 'addContactNote', summary: 'Add a note to a contact', tag: 'Notes', notFound: 'Contact not found',
    description: 'Emits contact.note_added.', example: { content: 'Asked for the spring catalogue.' },
  },
  'GET /contacts/{id}/notes': { operationId: 'listContactNotes', summary: "List a contact's notes", tag: 'Notes', notFound: 'Contact not found' },
  'GET /contacts/{id}/communications': {
    operationId: 'listContactCommunications', summary: "List a contact's communications", tag: 'Communications', notFound: 'Contact not found',
    description: 'One row per outbound and inbound message of the contact, added automatically (contact.communication_added).',
  },
  'POST /contacts/{id}/followups': {
    operationId: 'createFollowup', summary: 'Schedule a follow-up', tag: 'Follow-ups', notFound: 'Contact not found',
    description: 'Emits followup.created.', example: { title: 'Call back about pricing', due_at: '2030-05-01T09:00:00Z', notes: 'Prefers mornings' },
  },
  'GET /contacts/{id}/followups': { operationId: 'listFollowups', summary: "List a contact's follow-ups", tag: 'Follow-ups', notFound: 'Contact not found' },
  'PATCH /contacts/{id}/followups/{followup_id}': {
    operationId: 'updateFollowup', summary: 'Update a follow-up', tag: 'Follow-ups', notFound: 'Follow-up not found',
    description: 'Edit it or mark it done. Emits followup.updated.', example: { done: true },
  },
  'DELETE /contacts/{id}/followups/{followup_id}': {
    operationId: 'deleteFollowup', summary: 'Delete a follow-up', tag: 'Follow-ups', notFound: 'Follow-up not found', description: 'Emits followup.deleted.',
  },

  // Templates
  'GET /templates': { operationId: 'listTemplates', summary: 'List approved templates', tag: 'Templates', description: 'Only templates in status approved, newest first.' },
  'GET /templates/{id}': {
    operationId: 'getTemplate', summary: 'Get an approved template', tag: 'Templates', notFound: 'Template not found',
    description: 'A template that is not approved is 404 here.',
  },
  'POST /templates': {
    operationId: 'createTemplate', summary: 'Create a template draft', tag: 'Templates',
    conflict: 'A template with this name and language already exists in the business account', notFound: 'No active WABA account for this tenant',
    description: 'Checked against the upstream\'s creation rules (400 naming the component): every variable needs a sample value, a media header needs `example.header_handle`. The draft is submitted for review with POST /templates/{id}/submit.',
    example: {
      template_name: 'order_update', language: 'en', category: 'UTILITY',
      components: [
        { type: 'BODY', text: 'Hi {{1}}, your order {{2}} has shipped.', example: { body_text: [['Ana', 'A-1001']] } },
        { type: 'FOOTER', text: 'Reply STOP to opt out' },
      ],
    },
  },
  'POST /templates/{id}/submit': {
    operationId: 'submitTemplate', summary: 'Submit a draft for review', tag: 'Templates', notFound: 'Template not found', upstream: 'submitting the template',
    conflict: 'The template was submitted concurrently; re-read it',
    description: 'Sends the draft to the upstream for review: the answer is the template with status pending, or rejected with `rejected_reason`.',
  },

  // Messages
  'POST /messages/template': {
    operationId: 'sendTemplateMessage', summary: 'Send a template message', tag: 'Messages', upstream: 'sending the message',
    notFound: 'No active WABA account for this tenant',
    description: '`to` is E.164. `status: accepted` does not mean delivered: follow the message.* events (a message.failed may follow the 200). The sending number\'s throughput is paced: a number saturated for 5 s answers 429 with Retry-After, as do an upstream throttle (130429, 131056) and a number restricted for spam (131048, Retry-After 3600). Upstream failures (502, 504) are safe to retry.',
    example: {
      to: PHONE, template_name: 'order_update', language: 'en',
      components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ana' }, { type: 'text', text: 'A-1001' }] }],
    },
  },
  'GET /messages': {
    operationId: 'listMessages', summary: 'List messages, sent and received', tag: 'Messages',
    description: 'Newest first: the messages we sent, with the delivery status of each (single sends and campaign sends), and the messages users sent (`direction: inbound`, with the fields of message.received). Filters: `direction` (`outbound` or `inbound`; both when absent), `contact_id`, `created_after` (inclusive) / `created_before` (exclusive) for both; `to`, `status`, `campaign_id`, `template_name` select sent messages only, `from` received ones only. Reactions, edits and deletions are not messages of their own: they show on the message they name (`reactions`, `edited_at`, `deleted_at`).',
  },
  'GET /messages/{id}': {
    operationId: 'getMessage', summary: 'Get a message', tag: 'Messages', notFound: 'Message not found',
    description: 'By the `message_id` of the send response and the message.* / message.received events, or by our `id`. A sent message: its status, status timestamps and error; a received one: its content.',
  },
  'GET /messages/{id}/media': {
    operationId: 'getInboundMessageMedia', summary: 'Download a received message\'s media', tag: 'Messages', notFound: 'Message not found',
    upstream: 'downloading the media',
    description: 'The file of an inbound image, video, audio, document or sticker, streamed from the upstream with its MIME type (and `Content-Disposition` with the file name for documents). The upstream keeps such media for a limited time (days): afterwards, and for a message without media, 404. Scope contacts:read.',
    responses: { 200: { description: 'The media bytes', content: { 'application/octet-stream': { schema: { type: 'string', format: 'binary' } } } } },
  },

  // Media
  'POST /media': {
    operationId: 'uploadMedia', summary: 'Upload a media file', tag: 'Media',
    description: 'multipart/form-data with `type` (image, video or document) and the `file`. Images: JPEG or PNG up to 5 MB; videos: MP4 or 3GPP up to 16 MB; documents: PDF, text and Office files up to 100 MB. The content must match its declared type. The file is uploaded to the upstream when first used in a send.',
  },
  'GET /media': { operationId: 'listMedia', summary: 'List media files', tag: 'Media' },
  'GET /media/{id}': { operationId: 'getMedia', summary: 'Get a media file record', tag: 'Media', notFound: 'Media not found' },
  'DELETE /media/{id}': { operationId: 'deleteMedia', summary: 'Delete a media file', tag: 'Media', notFound: 'Media not found' },

  // Campaigns
  'GET /campaigns': { operationId: 'listCampaigns', summary: 'List campaigns', tag: 'Campaigns', description: 'Newest first, not paginated.' },
  'POST /campaigns': {
    operationId: 'createCampaign', summary: 'Create a campaign', tag: 'Campaigns', notFound: `Template ${UUID} not found or not approved`,
    description: 'Starts in DRAFT, or SCHEDULED with `scheduled_at`. The template must be approved; `variable_mapping` is required when it has variables. '
      + 'The audience is optional and can be set later (a SCHEDULED campaign: pause, set it, resume); a campaign that still has no recipients when its time comes sends nothing and completes. '
      + 'With `scheduled_at`, the plan must include campaigns (403 UPGRADE_REQUIRED, feature_key campaigns). '
      + 'Emits campaign.created (and campaign.scheduled).',
    example: {
      name: 'Spring sale', description: 'Loyal customers first', template_id: UUID, batch_size: 50,
      variable_mapping: { components: [{ type: 'body', parameters: [{ kind: 'contact_field', field: 'first_name', fallback: 'there' }, { kind: 'static', value: 'SPRING20' }] }] },
      audience: { groups: ['vip'], sources: ['website'] },
    },
  },
  'GET /campaigns/{id}': {
    operationId: 'getCampaign', summary: 'Get a campaign', tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'With its audiences and a preflight (audience size against the messaging tier, estimated duration).',
  },
  'PATCH /campaigns/{id}': {
    operationId: 'updateCampaign', summary: "Change a campaign's send window, or a draft's mapping", tag: 'Campaigns', notFound: 'Campaign not found',
    conflict: 'The campaign changed status concurrently; re-read it and retry',
    description: 'Sets (or, with null, removes) `send_window`: recipients are sent only between `start` and `end` (HH:MM, an end before the start spans midnight) of their local time, '
      + 'on `days` if given, in `time_zone` (`recipient`, the default: the contact\'s `time_zone`, else its phone number\'s region\'s; or one IANA zone). '
      + 'Only in DRAFT, SCHEDULED or PAUSED; the pending recipients of a paused campaign wait under the new window. '
      + 'In DRAFT also `name`, `variable_mapping` (normalised and checked against the template as on create) and `batch_size`, so a builder can save as the person edits and the previews follow. '
      + 'Only the fields sent change. Emits campaign.updated before the campaign has started.',
    example: { send_window: { start: '09:00', end: '20:00', days: ['mon', 'tue', 'wed', 'thu', 'fri'], time_zone: 'recipient' } },
  },
  'PUT /campaigns/{id}/audience': {
    operationId: 'setCampaignAudience', summary: "Replace a campaign's audience", tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'Groups are contact tags, sources contact sources; a contact is in the audience when it matches any. Only in DRAFT or PAUSED.',
    example: { groups: ['vip'], sources: ['website', 'import'] },
  },
  'GET /campaigns/{id}/audience/preview': {
    operationId: 'previewCampaignAudience', summary: 'Preview the audience', tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'The audience size and a sample, resolved without materialising recipients; once the campaign has its fixed recipients (started, or created by retargeting), those.',
  },
  'POST /campaigns/{id}/audience/field-coverage': {
    operationId: 'getCampaignFieldCoverage', summary: 'Field coverage of the audience', tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'How many recipients have each contact column or `custom_fields.<key>` set: over the audience, or over the fixed recipients once the campaign has them (started, or created by retargeting).',
    example: { fields: ['first_name', 'custom_fields.city'] },
  },
  'POST /campaigns/{id}/preview': {
    operationId: 'previewCampaignMessage', summary: 'Render the message for a contact', tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'The template filled in by the variable mapping for one contact (the first of the audience, or of the fixed recipients once the campaign has them, when none is given).',
    example: { sample_contact_id: UUID },
  },
  'POST /campaigns/{id}/send': campaignAction('send', 'Start a campaign now', 'Materialises the audience and starts the dispatch. Emits campaign.started.'),
  'POST /campaigns/{id}/pause': campaignAction('pause', 'Pause a campaign', 'Emits campaign.paused.'),
  'POST /campaigns/{id}/resume': campaignAction('resume', 'Resume a campaign', 'Emits campaign.resumed.'),
  'POST /campaigns/{id}/stop': campaignAction('stop', 'Stop a campaign', 'Final: unsent recipients are not sent. Emits campaign.stopped.'),
  'POST /campaigns/{id}/schedule': {
    ...campaignAction('schedule', 'Schedule a campaign', 'Moves a DRAFT to SCHEDULED; it starts by itself at `scheduled_at`. Emits campaign.scheduled.'),
    example: { scheduled_at: '2030-05-01T09:00:00Z' },
  },
  'POST /campaigns/{id}/refresh-metrics': {
    operationId: 'refreshCampaignMetrics', summary: 'Recompute campaign stats', tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'Recomputes the stats from the recipient rows synchronously (they are otherwise updated in the background).',
  },
  'GET /campaigns/{id}/errors': {
    operationId: 'getCampaignErrors', summary: 'Failed recipients by error code', tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'With the upstream title of each code and how to fix it.',
  },
  'GET /campaigns/{id}/errors/{error_code}': {
    operationId: 'listCampaignErrorRecipients', summary: 'Recipients failed with one error code', tag: 'Campaigns', notFound: 'Campaign not found',
    description: '`error_code` is an upstream error code (an integer) or `unknown`.',
  },
  'GET /campaigns/{id}/recipients': {
    operationId: 'listCampaignRecipients', summary: "List a campaign's recipients", tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'Every recipient\'s outcome, a page of JSON; with `Accept: text/csv` all of them as one streamed CSV file. '
      + '`error_code` is a string of digits, as in the errors summary, or null.',
  },
  'POST /campaigns/{id}/retarget': {
    operationId: 'retargetCampaign', summary: 'Retarget a segment of recipients', tag: 'Campaigns', notFound: 'Campaign not found',
    description: 'A new DRAFT campaign whose audience is a segment of the recipients, archived contacts left out. `segment`: `failed` (the default; '
      + 'optionally only those with the given `error_codes`), `not_delivered` (sent but never delivered, or failed), `delivered_not_read`, `read_not_replied`, '
      + '`replied`, `clicked`, `not_clicked` (sent recipients without a click; `clicked` and `not_clicked` need a campaign with `track_clicks`). '
      + '`error_codes` (only with `failed`) as `GET /campaigns/{id}/errors` shows them (strings of digits, or `unknown` for failures without a code) or as numbers. '
      + 'When no recipient matches (an empty segment), 400 VALIDATION_ERROR and no campaign is created.',
    example: { segment: 'read_not_replied', name: 'Spring sale (follow-up)' },
  },

  // Webhook endpoints
  'POST /webhooks': {
    operationId: 'createWebhook', summary: 'Create a webhook endpoint', tag: 'Webhooks',
    description: 'The URL must be HTTPS and every event a known type. The signing secret is returned only in this response (and by rotate-secret).',
    example: { url: 'https://hooks.example.com/messaging', events: ['message.delivered', 'message.failed'], description: 'CRM sync', active: true },
  },
  'GET /webhooks': { operationId: 'listWebhooks', summary: 'List webhook endpoints', tag: 'Webhooks', description: 'Not paginated.' },
  'GET /webhooks/{id}': { operationId: 'getWebhook', summary: 'Get a webhook endpoint', tag: 'Webhooks', notFound: 'Webhook endpoint not found' },
  'PUT /webhooks/{id}': {
    operationId: 'updateWebhook', summary: 'Update a webhook endpoint', tag: 'Webhooks', notFound: 'Webhook endpoint not found',
    description: 'Any subset of the fields; `active: true` re-enables an auto-disabled endpoint.',
    example: { events: ['message.sent', 'message.delivered', 'message.read', 'message.failed'], active: true },
  },
  'DELETE /webhooks/{id}': {
    operationId: 'deleteWebhook', summary: 'Delete a webhook endpoint', tag: 'Webhooks', notFound: 'Webhook endpoint not found',
    description: 'Its delivery history is kept; no further events are queued for it.',
  },
  'POST /webhooks/{id}/rotate-secret': {
    operationId: 'rotateWebhookSecret', summary: 'Rotate the signing secret', tag: 'Webhooks', notFound: 'Webhook endpoint not found',
    description: 'The previous secret stops verifying at once.',
  },
  'POST /webhooks/{id}/test': {
    operationId: 'testWebhook', summary: 'Send a test event', tag: 'Webhooks', notFound: 'Webhook endpoint not found',
    description: 'Sends a signed webhook.test synchronously (up to 10 s), also to a disabled endpoint; never retried. 200 whenever the call completed: branch on `delivered`.',
  },
  'POST /webhooks/{id}/recover': {
    operationId: 'recoverWebhookDeliveries', summary: 'Redeliver a time window', tag: 'Webhook deliveries', notFound: 'Webhook endpoint not found',
    description: 'After an outage at the receiver: every failed or abandoned delivery of the endpoint created between `since` and `until` (default now) is queued again as a new delivery with the original bytes. Each is re-queued at most once, so repeating the call queues only failures that are new since.',
    example: { since: '2030-05-01T00:00:00Z', until: '2030-05-01T06:00:00Z' },
  },
  'GET /webhooks/{id}/deliveries': {
    operationId: 'listWebhookDeliveries', summary: "List an endpoint's deliveries", tag: 'Webhook deliveries', notFound: 'Webhook endpoint not found',
  },
  'GET /webhooks/deliveries': { operationId: 'listDeliveries', summary: 'List deliveries', tag: 'Webhook deliveries', description: 'Across every endpoint of the tenant, newest first.' },
  'GET /webhooks/deliveries/metrics': { operationId: 'getDeliveryMetrics', summary: 'Delivery metrics', tag: 'Webhook deliveries' },
  'POST /webhooks/deliveries/{id}/retry': {
    operationId: 'retryDelivery', summary: 'Retry a delivery', tag: 'Webhook deliveries', notFound: 'Webhook delivery not found',
    description: 'Replays the original payload as a new delivery; the original row is left as it was.',
  },

  // Outside the API's base path (see openapi.ts).
  'GET /r/{token}': {
    operationId: 'followCampaignLink', summary: 'Follow a tracked campaign link', tag: 'Campaigns',
    description: 'The link a campaign created with `track_clicks` sends in its URL button (`<PUBLIC_BASE_URL>/r/{token}`, one token per recipient). '
      + 'Records the click (the recipient\'s `clicked_at` and `click_count`, the campaign\'s `clicked`) and redirects to that recipient\'s destination. '
      + 'An unknown token, or a destination that is not an https URL, is a 404 HTML page: never a redirect elsewhere. No authentication.',
    responses: {
      302: { description: 'Redirect to the recipient\'s destination (an https URL)', headers: { Location: { schema: { type: 'string', format: 'uri' } } } },
      404: { description: 'Not a link of this service: an HTML page', content: { 'text/html': { schema: { type: 'string' } } } },
    },
  },
  'GET /healthz': {
    operationId: 'getHealth', summary: 'Liveness', tag: 'Health', description: 'The process is up. No authentication.',
    responses: { 200: { description: 'Alive', content: { 'application/json': { schema: { type: 'object', required: ['status'], properties: { status: { type: 'string', enum: ['ok'] } } } } } } },
  },
  'GET /readyz': {
    operationId: 'getReadiness', summary: 'Readiness', tag: 'Health',
    description: 'Ready when the database answers; Redis (rate-limit counters only) is reported but never fails readiness. No authentication.',
    responses: {
      200: { description: 'Ready', content: { 'application/json': { schema: { $ref: '#/components/schemas/Readiness' } } } },
      503: {
        description: 'Not ready: the database does not answer (Readiness), or the service is shutting down (Error).',
        content: {
          'application/json': {
            schema: { anyOf: [{ $ref: '#/components/schemas/Readiness' }, { $ref: '#/components/schemas/Error' }] },
            examples: {
              not_ready: { summary: 'The database does not answer', value: { status: 'not_ready', database: 'unavailable', redis: 'ok' } },
              INTERNAL_ERROR: {
                summary: 'Shutting down',
                value: { success: false, error: { code: 'INTERNAL_ERROR', message: 'The service is shutting down; retry the request' }, meta: { request_id: 'req_5f2a9c1e7b3d', timestamp: '2030-05-01T09:00:00.000Z' } },
              },
            },
          },
        },
      },
    },
  },
};

export const ADMIN_OPERATIONS: Record<string, OperationDoc> = {
  'POST /tenants': {
    operationId: 'createTenant', summary: 'Create a tenant', tag: 'Tenants', example: { name: 'Acme Ltd', plan: 'growth' },
  },
  'GET /tenants': { operationId: 'listTenants', summary: 'List tenants', tag: 'Tenants', description: 'Paginated; filter by name.' },
  'GET /tenants/{id}': { operationId: 'getTenant', summary: 'Get a tenant', tag: 'Tenants', notFound: 'Tenant not found' },
  'PATCH /tenants/{id}': {
    operationId: 'updateTenant', summary: 'Update a tenant', tag: 'Tenants', notFound: 'Tenant not found',
    description: 'Name, plan, or a custom daily request quota (-1: unlimited).', example: { plan: 'business', api_requests_daily: 50000 },
  },
  'DELETE /tenants/{id}': {
    operationId: 'deleteTenant', summary: 'Delete a tenant', tag: 'Tenants', notFound: 'Tenant not found', description: 'Its API keys stop working at once.',
  },
  'POST /tenants/{id}/api-keys': {
    operationId: 'createApiKey', summary: 'Create an API key', tag: 'API keys', notFound: 'Tenant not found',
    description: 'Scopes or a preset (see GET /scopes). The key itself is returned only in this response.',
    example: { name: 'CRM integration', preset: 'messaging', mode: 'live' },
  },
  'GET /tenants/{id}/api-keys': { operationId: 'listApiKeys', summary: "List a tenant's API keys", tag: 'API keys', notFound: 'Tenant not found' },
  'DELETE /tenants/{id}/api-keys/{key_id}': {
    operationId: 'revokeApiKey', summary: 'Revoke an API key', tag: 'API keys', notFound: 'API key not found', description: 'Effective within a second in every process.',
  },
  'POST /tenants/{id}/console-links': {
    operationId: 'createConsoleLink', summary: 'Make a one-time web console sign-in link', tag: 'API keys', notFound: 'Tenant not found',
    description: 'A URL valid 15 minutes that opens the web console (/console) signed in, once, with a new API key of the chosen preset (default full_access) made for that browser session; '
      + 'the key is revoked when the person signs out and expires after 8 hours in any case. `base_url` is where the person reaches this service (default: the origin of this request). '
      + 'Only the link\'s hash is stored. See docs/console.md.',
    example: { preset: 'campaigns' },
  },
  'GET /tenants/{id}/business-account': {
    operationId: 'getBusinessAccount', summary: 'Get the business account', tag: 'Business accounts', notFound: 'Business account not found',
    description: 'Its status: active, disconnected, or stopped by WhatsApp (token_invalid: the token expired or was revoked; restricted: the account is locked, has a payment issue or is blocked for policy), with `status_reason` naming the upstream code. A stopped account sends nothing until it is connected again (PUT).',
  },
  'PUT /tenants/{id}/business-account': {
    operationId: 'connectBusinessAccount', summary: 'Connect the business account', tag: 'Business accounts', notFound: 'Tenant not found',
    conflict: 'This phone_number_id is already connected to another tenant',
    description: 'The WhatsApp business account, phone number and access token (encrypted at rest), with the campaign pacing of the number.',
    example: { waba_id: '102290129340398', phone_number_id: '106540352242922', access_token: 'EAAG...', display_phone_number: '+1 555 0100', messages_per_second: 80, messaging_tier: '1K' },
  },
  'PATCH /tenants/{id}/business-account': {
    operationId: 'updateBusinessAccount', summary: 'Update pacing of the business account', tag: 'Business accounts', notFound: 'Business account not found',
    example: { messages_per_second: 200, messaging_tier: '10K' },
  },
  'DELETE /tenants/{id}/business-account': {
    operationId: 'disconnectBusinessAccount', summary: 'Disconnect the business account', tag: 'Business accounts', notFound: 'Business account not found',
  },
  'GET /tenants/{id}/marketing-settings': {
    operationId: 'getMarketingSettings', summary: "Get a tenant's marketing rules", tag: 'Marketing', notFound: 'Tenant not found',
    description: 'Opt-out and opt-in keywords (an inbound text that is exactly one of them, case- and space-insensitive, opts its sender out of or back into marketing templates), '
      + 'whether MARKETING campaigns skip US numbers (WhatsApp does not deliver marketing templates to them), and the marketing frequency cap (null: none). Defaults: STOP and UNSUBSCRIBE, START, true, null.',
  },
  'PATCH /tenants/{id}/marketing-settings': {
    operationId: 'updateMarketingSettings', summary: "Update a tenant's marketing rules", tag: 'Marketing', notFound: 'Tenant not found',
    description: 'Only the fields sent change. Keywords are stored upper case without whitespace; a keyword in both lists is 400. '
      + '`frequency_cap: { max_messages, days }` makes MARKETING campaigns skip (`frequency_cap`) a contact whose phone was sent at least `max_messages` marketing templates in the last `days` days (campaigns and single sends); null switches it off. '
      + '`block_us_marketing: false` sends MARKETING campaigns to US numbers again.',
    example: { opt_out_keywords: ['STOP', 'UNSUBSCRIBE', 'BAJA'], opt_in_keywords: ['START'], block_us_marketing: true, frequency_cap: { max_messages: 2, days: 7 } },
  },
  'GET /metrics': {
    operationId: 'getMetrics', summary: 'Prometheus metrics', tag: 'Operations',
    responses: { 200: { description: 'Prometheus text exposition format', content: { 'text/plain': { schema: { type: 'string' } } } } },
  },
  'GET /scopes': { operationId: 'listScopes', summary: 'Scope vocabulary and presets', tag: 'API keys' },
  'PUT /rate-card': {
    operationId: 'replaceRateCard', summary: 'Replace the rate card', tag: 'Rate card',
    description: 'Replaces the whole card (every version) or nothing: a bad version, row or field answers 400 naming it (JSON: its path; CSV: its line and column). '
      + 'JSON, or CSV with Content-Type text/csv (header `effective_from,market,currency,marketing,utility,authentication,authentication_international,service`, '
      + 'one line per version and market, an empty rate for none). Prices messages whose pricing arrives from then on; prices already stored stay. See docs/cost.md.',
    example: { versions: [{ effective_from: '2026-10-01', currency: 'USD', source: 'Meta rate card', rates: [
      { market: 'Brazil', marketing: 0.0625, utility: 0.0068, authentication: 0.0068, authentication_international: null, service: 0.0068 },
      { market: 'Other', marketing: 0.0604, utility: 0.0077, authentication: 0.0077, authentication_international: null, service: 0.0077 },
    ] }] },
  },
  'GET /rate-card': {
    operationId: 'getRateCard', summary: 'The rate card', tag: 'Rate card',
    description: 'Every version of the card, oldest first; with `Accept: text/csv` the same as CSV (the format PUT takes).',
  },
};

/** Tags in the order the explorer shows them, with their descriptions. */
export const PUBLIC_TAGS: Record<string, string> = {
  Contacts: 'People you message: create one or 100 at a time, search, update, archive.',
  Notes: 'Free-text notes attached to a contact.',
  'Follow-ups': 'Reminders attached to a contact.',
  Communications: 'Every message to and from a contact, recorded automatically.',
  Templates: 'Message templates: drafts checked against the upstream rules, submitted for review; reads return approved templates only.',
  Messages: 'Template messages sent one at a time, and their delivery status.',
  Media: 'Images, videos and documents for template headers, kept by the service and uploaded to the upstream when used.',
  Campaigns: 'A template sent to an audience of contacts (tags and sources), paced per phone number, with stats, errors by code and retargeting.',
  Webhooks: 'Endpoints that receive the events (see the webhooks section): signed with a per-endpoint secret.',
  'Webhook deliveries': 'The delivery log: every attempt, retries, replays and metrics.',
  Health: 'Liveness and readiness probes, outside the API base path and without authentication.',
  Events: 'What a webhook endpoint receives: one signed POST per event, the envelope `{ id, type, created_at, data }`.',
};

export const ADMIN_TAGS: Record<string, string> = {
  Tenants: 'Tenants, their plan and daily request quota.',
  'API keys': 'Keys of a tenant, their scopes and presets.',
  'Business accounts': 'The WhatsApp business account each tenant sends from.',
  'Rate card': 'Prices per message by market and category, versioned by effective date: they price messages and campaign estimates.',
  Marketing: 'Per-tenant marketing rules: opt-out keywords, the US rule and the frequency cap.',
  Operations: 'Metrics for monitoring.',
};
