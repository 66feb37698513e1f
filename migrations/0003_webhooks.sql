-- Webhooks: endpoints, the delivery log (which is also the delivery work queue), and the contact
-- sub-resources whose events had no public trigger (notes, follow-ups).

CREATE TABLE webhook_endpoints (
  id                    uuid PRIMARY KEY,
  tenant_id             uuid NOT NULL REFERENCES tenants (id),
  url                   text NOT NULL,
  events                text[] NOT NULL,
  description           text,
  is_active             boolean NOT NULL DEFAULT true,
  signing_secret_enc    text NOT NULL,          -- AES-256-GCM with SECRETS_KEY; never stored in clear
  consecutive_failures  integer NOT NULL DEFAULT 0,
  last_success_at       timestamptz,
  last_failure_at       timestamptz,
  created_at            timestamptz NOT NULL DEFAULT now(),
  updated_at            timestamptz,
  deleted_at            timestamptz
);
CREATE INDEX webhook_endpoints_tenant ON webhook_endpoints (tenant_id, created_at) WHERE deleted_at IS NULL;
-- Fan-out looks up the active endpoints of one tenant inside every event-writing transaction.
CREATE INDEX webhook_endpoints_fanout ON webhook_endpoints (tenant_id) WHERE is_active AND deleted_at IS NULL;

CREATE TABLE webhook_deliveries (
  id                    uuid PRIMARY KEY,
  tenant_id             uuid NOT NULL REFERENCES tenants (id),
  endpoint_id           uuid NOT NULL REFERENCES webhook_endpoints (id),
  event_id              uuid NOT NULL,
  event_type            text NOT NULL,
  request_url           text NOT NULL,
  -- The envelope {id, type, created_at, data}, serialised once: every attempt and replay sends these bytes.
  payload               bytea NOT NULL,
  status                text NOT NULL CHECK (status IN ('pending', 'success', 'failed', 'retrying', 'abandoned')),
  attempt_number        integer NOT NULL DEFAULT 0,   -- attempts made so far
  next_attempt_at       timestamptz,
  lease_until           timestamptz,                  -- set while a worker attempts it; expires if the worker dies
  response_status_code  integer,
  response_time_ms      integer,
  response_body         text,                         -- first 500 characters
  error_class           text,
  error_message         text,
  is_test               boolean NOT NULL DEFAULT false,
  replay_of             uuid,
  created_at            timestamptz NOT NULL DEFAULT now(),
  completed_at          timestamptz
) WITH (fillfactor = 80);
-- fillfactor leaves room on each page so the claim (which only sets lease_until, an unindexed
-- column) is a HOT update: no index entries are written to lease a row.
-- Claiming: per endpoint, the due open rows in due order. Only open rows are indexed, so the index
-- stays as small as the backlog however long the history grows.
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (endpoint_id, next_attempt_at)
  WHERE status IN ('pending', 'retrying');
-- Delivery log listings, newest first, per tenant and per endpoint, optionally by status.
CREATE INDEX webhook_deliveries_tenant_created ON webhook_deliveries (tenant_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_endpoint_created ON webhook_deliveries (tenant_id, endpoint_id, created_at DESC, id DESC);
-- Metrics: one index-only aggregate per tenant.
CREATE INDEX webhook_deliveries_tenant_status ON webhook_deliveries (tenant_id, status);

CREATE TABLE contact_notes (
  id          uuid PRIMARY KEY,
  tenant_id   uuid NOT NULL REFERENCES tenants (id),
  contact_id  uuid NOT NULL REFERENCES contacts (id),
  content     text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX contact_notes_contact ON contact_notes (tenant_id, contact_id, created_at DESC, id DESC);

CREATE TABLE contact_followups (
  id          uuid PRIMARY KEY,
  tenant_id   uuid NOT NULL REFERENCES tenants (id),
  contact_id  uuid NOT NULL REFERENCES contacts (id),
  title       text NOT NULL,
  due_at      timestamptz NOT NULL,
  done        boolean NOT NULL DEFAULT false,
  notes       text,
  created_at  timestamptz NOT NULL DEFAULT now(),
  updated_at  timestamptz
);
CREATE INDEX contact_followups_contact ON contact_followups (tenant_id, contact_id, due_at, id);
