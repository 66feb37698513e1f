import type { ColumnType, Generated, GeneratedAlways } from 'kysely';

/** A timestamp column: read as Date, written as Date or ISO string. */
export type Timestamp = ColumnType<Date, Date | string, Date | string>;
type CreatedAt = ColumnType<Date, Date | string | undefined, never>;
type Json = ColumnType<unknown, string, string>;

export interface TenantsTable {
  id: string;
  name: string;
  plan: string;
  api_requests_daily: number;
  created_at: CreatedAt;
  updated_at: Timestamp | null;
  deleted_at: Timestamp | null;
}

export interface ApiKeysTable {
  id: string;
  tenant_id: string;
  name: string;
  key_hash: string;
  prefix: string;
  mode: string;
  scopes: string[];
  expires_at: Timestamp | null;
  ip_allowlist: Generated<string[]>;
  created_at: CreatedAt;
  revoked_at: Timestamp | null;
}

export interface ConsoleLinksTable {
  id: string;
  tenant_id: string;
  token_hash: string;
  preset: string;
  expires_at: Timestamp;
  redeemed_at: Timestamp | null;
  api_key_id: string | null;
  created_at: CreatedAt;
}

export interface BusinessAccountsTable {
  tenant_id: string;
  waba_id: string;
  phone_number_id: string;
  display_phone_number: string | null;
  access_token_enc: string;
  status: string;
  status_reason: string | null;
  messages_per_second: Generated<number>;
  messaging_tier: Generated<string>;
  /** The portfolio's messaging limit (unique users per window); null: unlimited. */
  messaging_limit: number | null;
  messaging_limit_updated_at: Timestamp | null;
  /** Latest status timestamp among committed status callbacks (migrations/0027). */
  statuses_through: Timestamp | null;
  connected_at: ColumnType<Date, Date | string | undefined, Date | string>;
  updated_at: Timestamp | null;
}

export interface ContactsTable {
  id: string;
  tenant_id: string;
  first_name: string;
  last_name: string | null;
  phone: string;
  email: string | null;
  company: string | null;
  job_title: string | null;
  status: string | null;
  tags: Generated<string[]>;
  custom_fields: ColumnType<Record<string, unknown>, string | undefined, string>;
  source: Generated<string>;
  marketing_opt_out: Generated<boolean>;
  marketing_opt_out_at: Timestamp | null;
  marketing_opt_out_source: string | null;
  marketing_consent_changed_at: Timestamp | null;
  time_zone: string | null;
  search_text: GeneratedAlways<string>;
  created_at: CreatedAt;
  updated_at: Timestamp | null;
  deleted_at: Timestamp | null;
}

export interface ContactCommunicationsTable {
  id: string;
  tenant_id: string;
  contact_id: string;
  direction: string;
  channel: Generated<string>;
  message_id: string | null;
  summary: string | null;
  from_user_id: string | null;
  created_at: CreatedAt;
}

export interface EventsTable {
  id: string;
  tenant_id: string;
  type: string;
  data: Json;
  created_at: CreatedAt;
}

export interface IdempotencyKeysTable {
  tenant_id: string;
  key: string;
  method: string;
  path: string;
  request_hash: string;
  state: string;
  response_status: number | null;
  response_headers: ColumnType<Record<string, string> | null, string | null, string | null>;
  response_body: string | null;
  created_at: CreatedAt;
  locked_until: Timestamp | null;
  resource_id: string | null;
  /** The process running the request while `state` is running (src/db/process-liveness.ts). */
  owner_process_id: string | null;
}

export interface WebhookEndpointsTable {
  id: string;
  tenant_id: string;
  url: string;
  events: string[];
  description: string | null;
  is_active: Generated<boolean>;
  signing_secret_enc: string;
  consecutive_failures: Generated<number>;
  last_success_at: Timestamp | null;
  last_failure_at: Timestamp | null;
  created_at: CreatedAt;
  updated_at: Timestamp | null;
  deleted_at: Timestamp | null;
}

export interface WebhookDeliveriesTable {
  id: string;
  tenant_id: string;
  endpoint_id: string;
  event_id: string;
  event_type: string;
  request_url: string;
  status: string;
  attempt_number: Generated<number>;
  next_attempt_at: Timestamp | null;
  lease_until: Timestamp | null;
  response_status_code: number | null;
  response_time_ms: number | null;
  response_body: string | null;
  error_class: string | null;
  error_message: string | null;
  is_test: Generated<boolean>;
  replay_of: string | null;
  created_at: CreatedAt;
  completed_at: Timestamp | null;
}

export interface WebhookPayloadsTable {
  event_id: string;
  tenant_id: string;
  payload: Buffer;
}

export interface ContactNotesTable {
  id: string;
  tenant_id: string;
  contact_id: string;
  content: string;
  created_at: CreatedAt;
}

export interface ContactFollowupsTable {
  id: string;
  tenant_id: string;
  contact_id: string;
  title: string;
  due_at: Timestamp;
  done: Generated<boolean>;
  notes: string | null;
  created_at: CreatedAt;
  updated_at: Timestamp | null;
}

export interface TemplatesTable {
  id: string;
  tenant_id: string;
  template_name: string;
  language: string;
  category: string;
  status: string;
  components: ColumnType<unknown[], string, string>;
  upstream_id: string | null;
  /** The business account the template was submitted to (null for drafts). */
  waba_id: string | null;
  rejected_reason: string | null;
  submitted_at: Timestamp | null;
  last_polled_at: Timestamp | null;
  /** Meta's quality rating: GREEN, YELLOW, RED or UNKNOWN. */
  quality_score: Generated<string>;
  created_at: CreatedAt;
  updated_at: Timestamp | null;
}

export interface MessagingLimitUsersTable {
  tenant_id: string;
  phone: string;
  last_at: Timestamp;
}

export interface MediaTable {
  id: string;
  tenant_id: string;
  media_type: string;
  filename: string;
  mime_type: string;
  size_bytes: number;
  sha256: string;
  storage_key: string;
  upstream_media_id: string | null;
  upstream_phone_number_id: string | null;
  upstream_uploaded_at: Timestamp | null;
  created_at: CreatedAt;
  deleted_at: Timestamp | null;
}

export interface MessagesTable {
  id: string;
  tenant_id: string;
  contact_id: string | null;
  template_id: string | null;
  template_name: string;
  language: string;
  to_phone: string;
  components: ColumnType<unknown[], string | undefined, string>;
  upstream_message_id: string | null;
  status: string;
  status_rank: Generated<number>;
  error_code: number | null;
  error_title: string | null;
  sent_at: Timestamp | null;
  delivered_at: Timestamp | null;
  read_at: Timestamp | null;
  failed_at: Timestamp | null;
  campaign_id: string | null;
  callback_data: string | null;
  attempted_at: Timestamp | null;
  /** The `pricing` of the message's first status callback that carried one (migration 0018). */
  pricing_category: string | null;
  pricing_type: string | null;
  pricing_billable: boolean | null;
  pricing_model: string | null;
  /** numeric: read as a string. */
  price_amount: ColumnType<string | null, string | number | null, string | number | null>;
  price_currency: string | null;
  /** The user's reactions to this message, `[{ emoji, from, reacted_at }]`; null: none yet. */
  reactions: ColumnType<Reaction[] | null, string | null | undefined, string | null>;
  created_at: CreatedAt;
  updated_at: Timestamp | null;
}

export interface RateCardVersionsTable {
  effective_from: ColumnType<string, string, string>;
  currency: string;
  source: string | null;
}

export interface RateCardRatesTable {
  effective_from: ColumnType<string, string, string>;
  market: string;
  category: string;
  rate: ColumnType<string, string | number, string | number>;
}

export interface CampaignCostMovesTable {
  campaign_id: string;
  category: string;
  currency: string;
  messages: number;
  amount: ColumnType<string, string | number, string | number>;
}

export interface CampaignCostsTable {
  campaign_id: string;
  category: string;
  currency: string;
  messages: number;
  amount: ColumnType<string, string | number, string | number>;
}

export interface CampaignAudiencePrefixesTable {
  campaign_id: string;
  prefix: string;
  sample_phone: string;
  recipients: number;
}
export interface Reaction { emoji: string; from: string | null; reacted_at: string }

export interface InboundMessagesTable {
  id: string;
  tenant_id: string;
  upstream_message_id: string;
  from_phone: string | null;
  /** The sender's business-scoped user id (BSUID), when the upstream gave one. */
  from_user_id: string | null;
  contact_id: string | null;
  type: string;
  text: string | null;
  payload: Json;
  received_at: Timestamp;
  /** The per-type fields message.received carried (button, interactive, media, context, ...). */
  details: ColumnType<Record<string, unknown> | null, string | null | undefined, string | null>;
  /** A reaction, edit or revoke: the upstream id of the message it changes (not a message of its own). */
  annotates_upstream_id: string | null;
  reactions: ColumnType<Reaction[] | null, string | null | undefined, string | null>;
  edited_at: Timestamp | null;
  deleted_at: Timestamp | null;
  created_at: CreatedAt;
}

export interface CampaignsTable {
  id: string;
  tenant_id: string;
  name: string;
  description: string | null;
  status: string;
  template_id: string;
  template_name: string | null;
  template_category: string | null;
  template_language: string | null;
  variable_mapping: ColumnType<unknown | null, string | null, string | null>;
  batch_size: number;
  audience_groups: Generated<string[]>;
  audience_sources: Generated<string[]>;
  scheduled_at: Timestamp | null;
  started_at: Timestamp | null;
  completed_at: Timestamp | null;
  materialised_at: Timestamp | null;
  total_recipients: Generated<number>;
  pending_count: Generated<number>;
  sent_count: Generated<number>;
  delivered_count: Generated<number>;
  read_count: Generated<number>;
  failed_count: Generated<number>;
  held_count: Generated<number>;
  deferred_count: Generated<number>;
  skipped_count: Generated<number>;
  replied_count: Generated<number>;
  clicked_count: Generated<number>;
  failure_reason: string | null;
  paused_reason: string | null;
  retry_deferred: Generated<boolean>;
  send_window: ColumnType<unknown, string | null | undefined, string | null>;
  retargeted_from: string | null;
  created_at: CreatedAt;
  updated_at: Timestamp | null;
}

export interface CampaignDispatchTurnsTable {
  campaign_id: string;
  last_dispatch_at: Timestamp;
}

export interface CampaignCounterMovesTable {
  campaign_id: string;
  pending: number;
  sent: number;
  delivered: number;
  read: number;
  failed: number;
  held: Generated<number>;
  deferred: Generated<number>;
  skipped: Generated<number>;
  replied: Generated<number>;
  clicked: Generated<number>;
}

export interface CampaignRecipientsTable {
  id: string;
  tenant_id: string;
  campaign_id: string;
  contact_id: string | null;
  phone: string;
  status: Generated<string>;
  attempts: Generated<number>;
  not_before: Timestamp | null;
  attempted_at: Timestamp | null;
  lease_until: Timestamp | null;
  /** The process that claimed it while sending (its liveness id), and its send's slot. */
  claimed_by: string | null;
  send_at: Timestamp | null;
  message_id: string | null;
  error_code: number | null;
  error_title: string | null;
  defers: Generated<number>;
  skip_reason: string | null;
  time_zone: string | null;
  replied_at: Timestamp | null;
  button_payload: string | null;
  clicked_at: Timestamp | null;
  click_count: number | null;
  updated_at: Timestamp | null;
}

export interface TenantMarketingSettingsTable {
  tenant_id: string;
  opt_out_keywords: string[];
  opt_in_keywords: string[];
  block_us_marketing: Generated<boolean>;
  frequency_cap_max: number | null;
  frequency_cap_days: number | null;
  updated_at: Generated<Date>;
}

export interface DB {
  campaigns: CampaignsTable;
  campaign_recipients: CampaignRecipientsTable;
  campaign_dispatch_turns: CampaignDispatchTurnsTable;
  campaign_counter_moves: CampaignCounterMovesTable;
  campaign_cost_moves: CampaignCostMovesTable;
  campaign_costs: CampaignCostsTable;
  campaign_audience_prefixes: CampaignAudiencePrefixesTable;
  rate_card_versions: RateCardVersionsTable;
  rate_card_rates: RateCardRatesTable;
  tenants: TenantsTable;
  api_keys: ApiKeysTable;
  business_accounts: BusinessAccountsTable;
  console_links: ConsoleLinksTable;
  contacts: ContactsTable;
  tenant_marketing_settings: TenantMarketingSettingsTable;
  contact_communications: ContactCommunicationsTable;
  events: EventsTable;
  idempotency_keys: IdempotencyKeysTable;
  webhook_endpoints: WebhookEndpointsTable;
  webhook_deliveries: WebhookDeliveriesTable;
  webhook_payloads: WebhookPayloadsTable;
  contact_notes: ContactNotesTable;
  contact_followups: ContactFollowupsTable;
  templates: TemplatesTable;
  messaging_limit_users: MessagingLimitUsersTable;
  media: MediaTable;
  messages: MessagesTable;
  inbound_messages: InboundMessagesTable;
}
