-- The service process (src/db/process-liveness.ts) running a key's request. A retry takes over a
-- running key as soon as that process is gone (its liveness lock released), instead of waiting out
-- locked_until. Null on keys claimed before this column existed: those wait for locked_until.
ALTER TABLE idempotency_keys ADD COLUMN owner_process_id uuid;
