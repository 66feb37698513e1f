-- Upstream layer: message templates, template messages, media assets, inbound messages.

-- One row per (name, language) variant, like the upstream (each translation is its own template).
-- 'paused' is internal: the upstream pauses a low-quality template temporarily and later
-- reinstates it; it is not sendable and, like every non-approved status, hidden from the API.
CREATE TABLE templates (
  id               uuid PRIMARY KEY,
  tenant_id        uuid NOT NULL REFERENCES tenants (id),
  template_name    text NOT NULL,
  language         text NOT NULL,
  category         text NOT NULL CHECK (category IN ('MARKETING', 'UTILITY', 'AUTHENTICATION')),
  status           text NOT NULL CHECK (status IN ('draft', 'pending', 'approved', 'rejected', 'paused', 'disabled')),
  components       jsonb NOT NULL,
  upstream_id      text,
  rejected_reason  text,
  submitted_at     timestamptz,
  -- Fallback poller bookkeeping: when the upstream was last asked about this pending template.
  last_polled_at   timestamptz,
  created_at       timestamptz NOT NULL DEFAULT now(),
  updated_at       timestamptz
);
CREATE UNIQUE INDEX templates_tenant_name_language ON templates (tenant_id, template_name, language);
CREATE INDEX templates_tenant_approved ON templates (tenant_id, created_at DESC, id DESC) WHERE status = 'approved';
CREATE INDEX templates_upstream_id ON templates (upstream_id) WHERE upstream_id IS NOT NULL;
CREATE INDEX templates_pending_poll ON templates (last_polled_at NULLS FIRST) WHERE status = 'pending';

-- Media assets: bytes in the media storage (DATA_DIR/media by default), metadata here. The upstream
-- media id is tied to the phone number that uploaded it and lives 30 days, so both are kept.
CREATE TABLE media (
  id                        uuid PRIMARY KEY,
  tenant_id                 uuid NOT NULL REFERENCES tenants (id),
  media_type                text NOT NULL CHECK (media_type IN ('image', 'video', 'document')),
  filename                  text NOT NULL,
  mime_type                 text NOT NULL,
  size_bytes                bigint NOT NULL,
  sha256                    text NOT NULL,
  storage_key               text NOT NULL,
  upstream_media_id         text,
  upstream_phone_number_id  text,
  upstream_uploaded_at      timestamptz,
  created_at                timestamptz NOT NULL DEFAULT now(),
  deleted_at                timestamptz
);
CREATE INDEX media_tenant_created ON media (tenant_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;

-- Outbound template messages. The row is written before the upstream call (status accepted, no
-- upstream id yet) and its id travels as biz_opaque_callback_data, so a status callback that
-- overtakes the send response still finds it.
-- status_rank makes status moves monotonic: accepted 0 < sent 1 < delivered 2 < read 3 < failed 4.
CREATE TABLE messages (
  id                   uuid PRIMARY KEY,
  tenant_id            uuid NOT NULL REFERENCES tenants (id),
  contact_id           uuid REFERENCES contacts (id),
  template_id          uuid REFERENCES templates (id),
  template_name        text NOT NULL,
  language             text NOT NULL,
  to_phone             text NOT NULL,
  components           jsonb NOT NULL DEFAULT '[]',
  upstream_message_id  text,
  status               text NOT NULL CHECK (status IN ('accepted', 'sent', 'delivered', 'read', 'failed')),
  status_rank          smallint NOT NULL DEFAULT 0,
  error_code           integer,
  error_title          text,
  sent_at              timestamptz,
  delivered_at         timestamptz,
  read_at              timestamptz,
  failed_at            timestamptz,
  campaign_id          uuid,
  callback_data        text,
  created_at           timestamptz NOT NULL DEFAULT now(),
  updated_at           timestamptz
);
CREATE UNIQUE INDEX messages_upstream_message_id ON messages (upstream_message_id) WHERE upstream_message_id IS NOT NULL;
CREATE INDEX messages_tenant_created ON messages (tenant_id, created_at DESC);
CREATE INDEX messages_campaign ON messages (campaign_id) WHERE campaign_id IS NOT NULL;

-- Inbound messages from users. The upstream retries callbacks for days; the unique upstream id
-- makes processing idempotent (a retried message inserts nothing and emits nothing).
CREATE TABLE inbound_messages (
  id                   uuid PRIMARY KEY,
  tenant_id            uuid NOT NULL REFERENCES tenants (id),
  upstream_message_id  text NOT NULL,
  from_phone           text,
  contact_id           uuid REFERENCES contacts (id),
  type                 text NOT NULL,
  text                 text,
  payload              jsonb NOT NULL,
  received_at          timestamptz NOT NULL,
  created_at           timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX inbound_messages_upstream_id ON inbound_messages (tenant_id, upstream_message_id);
