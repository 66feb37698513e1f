-- Campaigns: bulk template sends to an audience of contact groups (tags) and sources.

-- Pacing and pre-flight facts of the sending phone number (operator API).
ALTER TABLE business_accounts
  ADD COLUMN messages_per_second integer NOT NULL DEFAULT 80 CHECK (messages_per_second BETWEEN 1 AND 1000),
  ADD COLUMN messaging_tier text NOT NULL DEFAULT '1K' CHECK (messaging_tier IN ('250', '1K', '10K', '100K', 'unlimited'));

CREATE TABLE campaigns (
  id                 uuid PRIMARY KEY,
  tenant_id          uuid NOT NULL REFERENCES tenants (id),
  name               text NOT NULL,
  description        text,
  status             text NOT NULL CHECK (status IN ('DRAFT', 'SCHEDULED', 'RUNNING', 'PAUSED', 'COMPLETED', 'STOPPED', 'FAILED')),
  template_id        uuid NOT NULL REFERENCES templates (id),
  template_name      text,
  template_category  text,
  template_language  text,
  variable_mapping   jsonb,
  batch_size         integer NOT NULL DEFAULT 50,
  audience_groups    text[] NOT NULL DEFAULT '{}',
  audience_sources   text[] NOT NULL DEFAULT '{}',
  scheduled_at       timestamptz,
  started_at         timestamptz,
  completed_at       timestamptz,
  -- Set once, when the audience is materialised into recipient rows.
  materialised_at    timestamptz,
  total_recipients   integer NOT NULL DEFAULT 0,
  -- Recipients currently in each status, kept with every status change (stats never scan recipients).
  -- pending counts pending and sending recipients.
  pending_count      integer NOT NULL DEFAULT 0,
  sent_count         integer NOT NULL DEFAULT 0,
  delivered_count    integer NOT NULL DEFAULT 0,
  read_count         integer NOT NULL DEFAULT 0,
  failed_count       integer NOT NULL DEFAULT 0,
  failure_reason     text,
  retargeted_from    uuid,
  -- Round-robin fairness between running campaigns: the dispatcher serves the longest-waiting first.
  last_dispatch_at   timestamptz,
  created_at         timestamptz NOT NULL DEFAULT now(),
  updated_at         timestamptz
);
CREATE INDEX campaigns_tenant_created ON campaigns (tenant_id, created_at DESC, id DESC);
CREATE INDEX campaigns_due ON campaigns (scheduled_at) WHERE status = 'SCHEDULED';
CREATE INDEX campaigns_running ON campaigns (last_dispatch_at NULLS FIRST) WHERE status = 'RUNNING';

-- One row per (campaign, phone). A recipient's id is also the id of its messages row and travels as
-- biz_opaque_callback_data, so status callbacks (and crash reconciliation) find it by primary key.
-- Statuses: pending -> sending (leased) -> sent -> delivered -> read, or failed.
CREATE TABLE campaign_recipients (
  id               uuid PRIMARY KEY,
  tenant_id        uuid NOT NULL,
  campaign_id      uuid NOT NULL REFERENCES campaigns (id),
  contact_id       uuid,
  phone            text NOT NULL,
  status           text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sending', 'sent', 'delivered', 'read', 'failed')),
  attempts         integer NOT NULL DEFAULT 0,
  not_before       timestamptz,          -- a recipient re-queued after a pair rate limit waits until then
  attempted_at     timestamptz,          -- last upstream attempt (reconciliation window starts here)
  lease_until      timestamptz,
  message_id       text,                 -- the upstream message id once accepted
  error_code       integer,
  error_title      text,
  updated_at       timestamptz
) WITH (fillfactor = 80);
-- No foreign keys to contacts or tenants: 1,000,000 rows are materialised in one statement, and
-- their checks would double its cost; the rows are written only from the campaign's own tenant.
CREATE UNIQUE INDEX campaign_recipients_phone ON campaign_recipients (campaign_id, phone);
-- The dispatcher's claim: a campaign's pending rows; the index shrinks as the campaign progresses.
CREATE INDEX campaign_recipients_pending ON campaign_recipients (campaign_id, id) WHERE status = 'pending';
CREATE INDEX campaign_recipients_leased ON campaign_recipients (lease_until) WHERE status = 'sending';
-- Errors summary and drill-down, recipient listings by status.
CREATE INDEX campaign_recipients_failed ON campaign_recipients (campaign_id, error_code) WHERE status = 'failed';
CREATE INDEX campaign_recipients_status ON campaign_recipients (campaign_id, status, id);

-- Audience resolution: contacts by tag (GIN contacts_tags) and by source (contacts_tenant_source) exist.

-- Crash-safe sends (single sends and campaigns share one mechanism): the messages row is the send's
-- durable record, written before the upstream call. attempted_at starts the reconciliation window
-- of a resend (null: created_at). An Idempotency-Key names the message row its request recorded, so
-- a retry that takes over a dead request's key reconciles that message instead of sending again.
ALTER TABLE messages ADD COLUMN attempted_at timestamptz;
ALTER TABLE idempotency_keys ADD COLUMN resource_id uuid;
