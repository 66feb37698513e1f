-- The whole inbound message (issue 25 §1). `details` keeps the per-type fields message.received
-- carries (button, interactive, media, location, contacts, order, referral, context) as emitted.
-- Reactions, edits and revokes are recorded here too, so a redelivered callback is still caught by
-- the unique upstream id, but they are not messages of their own: `annotates_upstream_id` names the
-- message they change, and listings skip them.
ALTER TABLE inbound_messages
  ADD COLUMN details jsonb,
  ADD COLUMN annotates_upstream_id text,
  ADD COLUMN reactions jsonb,
  ADD COLUMN edited_at timestamptz,
  ADD COLUMN deleted_at timestamptz;
-- A user's reactions to a message we sent ([{ emoji, from, reacted_at }]); null: none yet.
ALTER TABLE messages ADD COLUMN reactions jsonb;

-- GET /messages reads inbound messages newest first, by tenant, contact or sender.
CREATE INDEX inbound_messages_tenant_created ON inbound_messages (tenant_id, created_at DESC, id DESC)
  WHERE annotates_upstream_id IS NULL;
CREATE INDEX inbound_messages_tenant_contact ON inbound_messages (tenant_id, contact_id, created_at DESC)
  WHERE annotates_upstream_id IS NULL AND contact_id IS NOT NULL;
CREATE INDEX inbound_messages_tenant_from ON inbound_messages (tenant_id, from_phone, created_at DESC)
  WHERE annotates_upstream_id IS NULL AND from_phone IS NOT NULL;
