-- Capacity as live data (issue 23 part 3).

-- The business portfolio's messaging limit (Meta: unique users messaged outside a customer service
-- window in a moving 24 h; 250, 2,000, 10,000, 100,000 or unlimited), read from the upstream at
-- connection, updated by business_capability_update and phone_number_quality_update, settable by an
-- operator. NULL: unlimited (or not known to be limited); the dispatcher then does no extra work.
ALTER TABLE business_accounts ADD COLUMN messaging_limit integer CHECK (messaging_limit IS NULL OR messaging_limit > 0);
ALTER TABLE business_accounts ADD COLUMN messaging_limit_updated_at timestamptz;

-- The users a tenant (its portfolio) messaged outside a service window, each with the last such
-- message: a user counts towards the limit while last_at is inside the window. Written only while
-- the tenant's limit is known (campaign claims and single sends of a limited tenant).
CREATE TABLE messaging_limit_users (
  tenant_id  uuid NOT NULL REFERENCES tenants (id),
  phone      text NOT NULL,
  last_at    timestamptz NOT NULL,
  PRIMARY KEY (tenant_id, phone)
);
CREATE INDEX messaging_limit_users_window ON messaging_limit_users (tenant_id, last_at);

-- Whether a user is inside a customer service window (an inbound message in the last 24 h).
CREATE INDEX inbound_messages_service_window ON inbound_messages (tenant_id, from_phone, received_at) WHERE from_phone IS NOT NULL;

-- Meta's template quality (message_template_quality_update); UNKNOWN until Meta rates it.
ALTER TABLE templates ADD COLUMN quality_score text NOT NULL DEFAULT 'UNKNOWN' CHECK (quality_score IN ('GREEN', 'YELLOW', 'RED', 'UNKNOWN'));
