-- Send windows in the recipient's local time (issue 25 §4).
-- A campaign's window: { start: "HH:MM", end: "HH:MM", days: ["mon", ...] | null, time_zone: "recipient" | <IANA> };
-- null: no window, recipients go as soon as they are claimed.
ALTER TABLE campaigns ADD COLUMN send_window jsonb;
-- A contact's own IANA time zone; null: the zone of its phone number's region.
ALTER TABLE contacts ADD COLUMN time_zone text;
-- The zone a recipient's window is read in, fixed when it is materialised (null: its campaign had
-- no window then). Recipients outside their window stay pending with not_before at its next opening.
ALTER TABLE campaign_recipients ADD COLUMN time_zone text;
