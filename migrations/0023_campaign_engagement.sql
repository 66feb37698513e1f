-- What recipients do after a campaign (issue 25 §2): replies, quick-reply taps and link clicks.
-- replied_at: the first inbound message that replies to the recipient's message (context), or the
-- first of that contact within 72 h of it. button_payload: the payload of the first quick-reply tap.
-- clicked_at / click_count: the first click on the tracked link (GET /r/{token}) and how many.
-- Nullable columns without defaults: adding them rewrites nothing, and materialising writes nothing more.
ALTER TABLE campaign_recipients
  ADD COLUMN replied_at timestamptz,
  ADD COLUMN button_payload text,
  ADD COLUMN clicked_at timestamptz,
  ADD COLUMN click_count integer;

-- Recipients that replied and clicked, kept like the status counters (counter moves, folded).
ALTER TABLE campaigns
  ADD COLUMN replied_count integer NOT NULL DEFAULT 0,
  ADD COLUMN clicked_count integer NOT NULL DEFAULT 0;
ALTER TABLE campaign_counter_moves
  ADD COLUMN replied integer NOT NULL DEFAULT 0,
  ADD COLUMN clicked integer NOT NULL DEFAULT 0;
