-- The latest status timestamp (the upstream's clock) among the status callbacks the service has
-- committed for the account: a campaign send whose outcome is unknown is sent again only once the
-- callbacks have caught up past its reconciliation window, not on the service's clock alone (a
-- service whose callback processing lags would otherwise send twice). Null until the first status.
ALTER TABLE business_accounts ADD COLUMN statuses_through timestamptz;
