-- GET /messages filters (newest first within each): by recipient, by contact, by campaign. Status and
-- template filters ride on messages_tenant_created. The campaign index gains the order it is read in.
CREATE INDEX IF NOT EXISTS messages_tenant_to ON messages (tenant_id, to_phone, created_at DESC);
CREATE INDEX IF NOT EXISTS messages_tenant_contact ON messages (tenant_id, contact_id, created_at DESC) WHERE contact_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS messages_campaign_created ON messages (campaign_id, created_at DESC) WHERE campaign_id IS NOT NULL;
DROP INDEX IF EXISTS messages_campaign;
