-- Status changes record how they move a campaign's counters as rows here, instead of updating the
-- campaign row: that row lock, held by every callback and outcome transaction until it committed,
-- made them queue behind each other. The moves are folded into the campaign's counters in the
-- background (and before any move of the campaign itself); reads add the moves not yet folded.
CREATE TABLE campaign_counter_moves (
  campaign_id uuid NOT NULL,
  pending     integer NOT NULL,
  sent        integer NOT NULL,
  delivered   integer NOT NULL,
  read        integer NOT NULL,
  failed      integer NOT NULL
);
CREATE INDEX campaign_counter_moves_campaign ON campaign_counter_moves (campaign_id);
