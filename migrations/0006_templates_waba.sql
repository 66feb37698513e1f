-- A template is approved under the business account (WABA) it was submitted to; a tenant that is
-- later connected to another WABA cannot send it (the spec: approved "under" the active account).
ALTER TABLE templates ADD COLUMN waba_id text;

-- Templates submitted before this column existed were submitted to the tenant's account of the time,
-- which (one account per tenant) is the one on record.
UPDATE templates t SET waba_id = ba.waba_id
FROM business_accounts ba
WHERE ba.tenant_id = t.tenant_id AND t.upstream_id IS NOT NULL;
