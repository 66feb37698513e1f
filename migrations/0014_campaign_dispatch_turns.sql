-- The dispatcher's round-robin stamp leaves the campaign row. That row is locked by every
-- transaction that moves the campaign's counters (each status callback, each batch's outcomes), so
-- stamping it there made each dispatcher turn wait behind the callbacks in flight.
CREATE TABLE campaign_dispatch_turns (
  campaign_id      uuid PRIMARY KEY REFERENCES campaigns(id) ON DELETE CASCADE,
  last_dispatch_at timestamptz NOT NULL
);
DROP INDEX campaigns_running;
ALTER TABLE campaigns DROP COLUMN last_dispatch_at;
CREATE INDEX campaigns_running ON campaigns (id) WHERE status = 'RUNNING';
