-- One-time sign-in links to the web console (issue 26). An operator makes one
-- (POST /admin/v1/tenants/{id}/console-links); the console redeems it once, within 15 minutes, for an
-- API key of the chosen preset made for that browser session (api_key_id), revoked at sign-out and
-- expiring with the session. Only the link token's hash is kept.
CREATE TABLE console_links (
  id           uuid PRIMARY KEY,
  tenant_id    uuid NOT NULL REFERENCES tenants (id),
  token_hash   text NOT NULL UNIQUE,
  preset       text NOT NULL,
  expires_at   timestamptz NOT NULL,
  redeemed_at  timestamptz,
  api_key_id   uuid REFERENCES api_keys (id),
  created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_links_tenant ON console_links (tenant_id, created_at);
CREATE UNIQUE INDEX console_links_key ON console_links (api_key_id) WHERE api_key_id IS NOT NULL;
