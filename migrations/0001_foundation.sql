-- Foundation: tenants, API keys, business accounts, contacts, events, idempotency.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE tenants (
  id                  uuid PRIMARY KEY,
  name                text NOT NULL,
  plan                text NOT NULL CHECK (plan IN ('free', 'starter', 'growth', 'business')),
  api_requests_daily  integer NOT NULL,
  created_at          timestamptz NOT NULL DEFAULT now(),
  updated_at          timestamptz,
  deleted_at          timestamptz
);

CREATE TABLE api_keys (
  id            uuid PRIMARY KEY,
  tenant_id     uuid NOT NULL REFERENCES tenants (id),
  name          text NOT NULL,
  key_hash      text NOT NULL UNIQUE,           -- sha256 hex of the whole key; the key itself is never stored
  prefix        text NOT NULL,                  -- display prefix, e.g. svc_sk_live_1a2b3c4d
  mode          text NOT NULL CHECK (mode IN ('live', 'test')),
  scopes        text[] NOT NULL,
  expires_at    timestamptz,
  ip_allowlist  text[] NOT NULL DEFAULT '{}',
  created_at    timestamptz NOT NULL DEFAULT now(),
  revoked_at    timestamptz
);
CREATE INDEX api_keys_tenant ON api_keys (tenant_id, created_at);

CREATE TABLE business_accounts (
  tenant_id             uuid PRIMARY KEY REFERENCES tenants (id),
  waba_id               text NOT NULL,
  phone_number_id       text NOT NULL,
  display_phone_number  text,
  access_token_enc      text NOT NULL,           -- AES-256-GCM with SECRETS_KEY
  status                text NOT NULL CHECK (status IN ('active', 'disconnected')),
  connected_at          timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz
);
-- A phone-number id routes upstream callbacks, so only one tenant may hold it.
CREATE UNIQUE INDEX business_accounts_phone_number ON business_accounts (phone_number_id) WHERE status = 'active';
CREATE INDEX business_accounts_waba ON business_accounts (waba_id);

CREATE TABLE contacts (
  id             uuid PRIMARY KEY,
  tenant_id      uuid NOT NULL REFERENCES tenants (id),
  first_name     text NOT NULL,
  last_name      text,
  phone          text NOT NULL,
  email          text,
  company        text,
  job_title      text,
  status         text,
  tags           text[] NOT NULL DEFAULT '{}',
  custom_fields  jsonb NOT NULL DEFAULT '{}',
  source         text NOT NULL DEFAULT 'api',
  search_text    text GENERATED ALWAYS AS (
                   lower(first_name || ' ' || coalesce(last_name, '') || ' ' || coalesce(email, '') || ' ' || coalesce(company, ''))
                 ) STORED,
  created_at     timestamptz NOT NULL DEFAULT now(),
  updated_at     timestamptz,
  deleted_at     timestamptz
);
-- Archived contacts free their phone and email for reuse.
CREATE UNIQUE INDEX contacts_tenant_phone ON contacts (tenant_id, phone) WHERE deleted_at IS NULL;
CREATE UNIQUE INDEX contacts_tenant_email ON contacts (tenant_id, lower(email)) WHERE deleted_at IS NULL AND email IS NOT NULL;
CREATE INDEX contacts_tenant_created ON contacts (tenant_id, created_at DESC, id DESC) WHERE deleted_at IS NULL;
-- Substring search over a million contacts: trigram GIN on the combined lower-cased text.
CREATE INDEX contacts_search_trgm ON contacts USING gin (search_text gin_trgm_ops) WHERE deleted_at IS NULL;
CREATE INDEX contacts_tags ON contacts USING gin (tags) WHERE deleted_at IS NULL;
CREATE INDEX contacts_tenant_source ON contacts (tenant_id, source) WHERE deleted_at IS NULL;

-- Communication history of a contact: one row per outbound or inbound message.
CREATE TABLE contact_communications (
  id          uuid PRIMARY KEY,
  tenant_id   uuid NOT NULL REFERENCES tenants (id),
  contact_id  uuid NOT NULL REFERENCES contacts (id),
  direction   text NOT NULL CHECK (direction IN ('outbound', 'inbound')),
  channel     text NOT NULL DEFAULT 'whatsapp',
  message_id  text,
  summary     text,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX contact_communications_contact ON contact_communications (tenant_id, contact_id, created_at DESC);

-- Every domain event, written in the same transaction as its cause (transactional outbox).
CREATE TABLE events (
  id          uuid PRIMARY KEY,
  tenant_id   uuid NOT NULL REFERENCES tenants (id),
  type        text NOT NULL,
  data        jsonb NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_tenant_created ON events (tenant_id, created_at DESC);

CREATE TABLE idempotency_keys (
  tenant_id         uuid NOT NULL,
  key               text NOT NULL,
  method            text NOT NULL,
  path              text NOT NULL,
  request_hash      text NOT NULL,
  state             text NOT NULL CHECK (state IN ('running', 'done')),
  response_status   integer,
  response_headers  jsonb,
  response_body     text,
  created_at        timestamptz NOT NULL DEFAULT now(),
  locked_until      timestamptz,
  PRIMARY KEY (tenant_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
