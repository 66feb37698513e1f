-- Records a batch of finished webhook attempts on their delivery rows, and answers per endpoint what
-- they mean for its failure count; the deliverer folds that into the endpoint rows in the same
-- statement (see recordAttemptResults). One call per batch instead of a transaction of several
-- statements: the batch's round trips and statement overhead were a large part of each event's cost.
--
-- Rows are found by the ctid their lease returned, and the planner is held to that TID scan by the
-- SET clauses, which apply to this function's statement only. Left to statistics (often taken
-- while the queue was empty) it walked the due index or scanned the table, nested-looping over the
-- batch: 34 ms, and with other predicates up to 1.9 s, for 435 rows that the TID plan writes in
-- 11 ms. A row changed since its lease (lease expired and re-claimed, endpoint deleted) has moved,
-- and the id and attempt checks drop the stale result. `ord` is the results' completion order,
-- which decides what "consecutive" means within the batch: trailing_failures counts the failures
-- after the endpoint's last success in it.
CREATE OR REPLACE FUNCTION webhook_record_attempts(
  ctids tid[], ids uuid[], tenant_ids uuid[], prev_attempts int[], oks boolean[], codes int[], times_ms int[],
  bodies text[], error_classes text[], error_messages text[], delays_ms bigint[], urls text[]
) RETURNS TABLE (endpoint_id uuid, tenant_id uuid, recorded int, had_success boolean, failures int, trailing_failures int)
LANGUAGE sql VOLATILE ROWS 10
SET enable_seqscan = off SET enable_indexscan = off SET enable_bitmapscan = off SET enable_nestloop = off
AS $$
  WITH v AS (
    SELECT * FROM unnest(ctids, ids, tenant_ids, prev_attempts, oks, codes, times_ms, bodies, error_classes, error_messages, delays_ms, urls)
      WITH ORDINALITY AS v(ctid, id, tenant_id, prev_attempt, ok, code, ms, body, eclass, emsg, delay_ms, url, ord)
  ),
  done AS (
    UPDATE webhook_deliveries d SET
      status = CASE WHEN v.ok THEN 'success' WHEN v.delay_ms IS NULL THEN 'abandoned' ELSE 'retrying' END,
      attempt_number = v.prev_attempt + 1,
      next_attempt_at = CASE WHEN v.ok OR v.delay_ms IS NULL THEN NULL ELSE now() + v.delay_ms * interval '1 millisecond' END,
      lease_until = NULL,
      request_url = v.url,
      response_status_code = v.code,
      response_time_ms = v.ms,
      response_body = v.body,
      error_class = v.eclass,
      error_message = v.emsg,
      completed_at = CASE WHEN v.ok OR v.delay_ms IS NULL THEN now() ELSE NULL END
    FROM v
    WHERE d.ctid = ANY (ctids) AND d.ctid = v.ctid
      AND d.id = v.id AND d.tenant_id = v.tenant_id AND d.attempt_number = v.prev_attempt AND d.status IN ('pending', 'retrying')
    RETURNING d.endpoint_id, d.tenant_id, v.ok, v.ord
  ),
  marked AS (
    SELECT done.*, max(done.ord) FILTER (WHERE done.ok) OVER (PARTITION BY done.endpoint_id) AS last_success FROM done
  )
  SELECT m.endpoint_id, m.tenant_id, count(*)::int, bool_or(m.ok), (count(*) FILTER (WHERE NOT m.ok))::int,
    (count(*) FILTER (WHERE NOT m.ok AND m.ord > coalesce(m.last_success, 0)))::int
  FROM marked m
  GROUP BY m.endpoint_id, m.tenant_id
$$;
