-- Bulk recovery (POST /webhooks/{id}/recover) replays each failed delivery at most once: it looks
-- up whether a delivery already has a replay. Replays are few, so the partial index stays small,
-- and replay_of is never updated, so the queue's HOT updates are unaffected.
CREATE INDEX webhook_deliveries_replay_of ON webhook_deliveries (replay_of) WHERE replay_of IS NOT NULL;
