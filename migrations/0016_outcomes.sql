-- One outcome model for every upstream answer (synchronous or by status callback).

-- A business account the upstream stopped (token expired or revoked, account restricted) keeps its
-- phone number and its callbacks' routing; it sends nothing until an operator connects it again.
ALTER TABLE business_accounts DROP CONSTRAINT business_accounts_status_check;
ALTER TABLE business_accounts ADD CONSTRAINT business_accounts_status_check
  CHECK (status IN ('active', 'disconnected', 'token_invalid', 'restricted'));
ALTER TABLE business_accounts ADD COLUMN status_reason text;
DROP INDEX business_accounts_phone_number;
CREATE UNIQUE INDEX business_accounts_phone_number ON business_accounts (phone_number_id) WHERE status <> 'disconnected';

-- A keyed single send whose outcome is unknown (the upstream did not answer in time): its key is
-- neither replayed nor released until a callback tells the outcome or SEND_RECONCILE_MS passes.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_state_check;
ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_state_check CHECK (state IN ('running', 'done', 'unknown'));

-- A message whose send answer never came: 'unknown' until a callback says what became of it.
ALTER TABLE messages DROP CONSTRAINT messages_status_check;
ALTER TABLE messages ADD CONSTRAINT messages_status_check CHECK (status IN ('accepted', 'unknown', 'sent', 'delivered', 'read', 'failed'));

-- Recipients Meta held for a quality assessment, deferred (131049, retried a day later) or skipped.
ALTER TABLE campaign_recipients DROP CONSTRAINT campaign_recipients_status_check;
ALTER TABLE campaign_recipients ADD CONSTRAINT campaign_recipients_status_check
  CHECK (status IN ('pending', 'sending', 'held', 'deferred', 'skipped', 'sent', 'delivered', 'read', 'failed'));
ALTER TABLE campaign_recipients ADD COLUMN defers integer NOT NULL DEFAULT 0;
ALTER TABLE campaign_recipients ADD COLUMN skip_reason text;
-- Deferred recipients come back to pending when their not_before passes; held ones count as sent
-- once it passes without word from the upstream (CAMPAIGN_HOLD_MS).
CREATE INDEX campaign_recipients_waiting ON campaign_recipients (not_before) WHERE status IN ('deferred', 'held');

ALTER TABLE campaigns ADD COLUMN paused_reason text;
ALTER TABLE campaigns ADD COLUMN retry_deferred boolean NOT NULL DEFAULT true;
ALTER TABLE campaigns ADD COLUMN held_count integer NOT NULL DEFAULT 0;
ALTER TABLE campaigns ADD COLUMN deferred_count integer NOT NULL DEFAULT 0;
ALTER TABLE campaigns ADD COLUMN skipped_count integer NOT NULL DEFAULT 0;
ALTER TABLE campaign_counter_moves ADD COLUMN held integer NOT NULL DEFAULT 0;
ALTER TABLE campaign_counter_moves ADD COLUMN deferred integer NOT NULL DEFAULT 0;
ALTER TABLE campaign_counter_moves ADD COLUMN skipped integer NOT NULL DEFAULT 0;
