-- Users with a WhatsApp username may write without a phone number: the upstream then names them by
-- a business-scoped user id (BSUID) only. It is kept on the inbound message, and an earlier message
-- that carried both the id and a phone number lets a later one find its contact.
ALTER TABLE inbound_messages ADD COLUMN from_user_id text;
CREATE INDEX inbound_messages_user_phone ON inbound_messages (tenant_id, from_user_id)
  WHERE from_user_id IS NOT NULL AND from_phone IS NOT NULL;
