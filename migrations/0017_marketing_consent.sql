-- Marketing consent (issue 23 §1). A contact's opt-out from marketing templates: who set it (Meta's
-- user_preferences callback, a keyword the user wrote, a 131050 failure, or the API) and when.
-- marketing_consent_changed_at is the time of the latest consent change applied (a stop or a
-- resume): a change dated before it (Meta redelivers callbacks out of order, for days) is stale.
ALTER TABLE contacts ADD COLUMN marketing_opt_out boolean NOT NULL DEFAULT false;
ALTER TABLE contacts ADD COLUMN marketing_opt_out_at timestamptz;
ALTER TABLE contacts ADD COLUMN marketing_opt_out_source text
  CHECK (marketing_opt_out_source IN ('user_preferences', 'keyword', 'error_131050', 'api'));
ALTER TABLE contacts ADD COLUMN marketing_consent_changed_at timestamptz;

-- Per-tenant marketing rules, set through the operator API; no row means the defaults.
CREATE TABLE tenant_marketing_settings (
  tenant_id            uuid PRIMARY KEY REFERENCES tenants (id),
  -- Stored normalised: upper case, without whitespace (an inbound text is compared the same way).
  opt_out_keywords     text[] NOT NULL,
  opt_in_keywords      text[] NOT NULL,
  -- Meta blocks marketing templates to US numbers (131049): skip them before sending.
  block_us_marketing   boolean NOT NULL DEFAULT true,
  -- At most frequency_cap_max marketing templates per phone in frequency_cap_days; null: no cap.
  frequency_cap_max    integer CHECK (frequency_cap_max > 0),
  frequency_cap_days   integer CHECK (frequency_cap_days > 0),
  updated_at           timestamptz NOT NULL DEFAULT now(),
  CHECK ((frequency_cap_max IS NULL) = (frequency_cap_days IS NULL))
);
