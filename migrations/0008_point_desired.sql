-- The command plane's desired values (issue 21 item 2; core runtime spec, "Single writer is a
-- requirement": "the arbitration resolver is the only writer of point_desired"). One row per
-- writable point whose claims ever changed: the value the resolver chose (JSON: a number, a
-- bool or a codebook member; NULL when nothing was ever desired), the claim that won (NULL
-- when every claim is released: the value is the relinquish default, or held), since when,
-- the epoch that wrote it, and the last control_event written with it. A row is only ever
-- written together with the claim's control event, in one transaction fenced on the epoch
-- (Store::write_arbitration), so the log and the row cannot disagree.

CREATE TABLE point_desired (
  point_id        text        PRIMARY KEY,
  value           jsonb,
  winner_holder   text,
  winner_band     text        CHECK (winner_band IN ('automation', 'operator', 'safety', 'interlock')),
  winner_priority smallint,
  winner_since    timestamptz,
  winner_until    timestamptz,
  since           timestamptz NOT NULL,
  core_epoch      integer     NOT NULL,
  control_seq     bigint      NOT NULL,
  CHECK ((winner_holder IS NULL) = (winner_band IS NULL)),
  CHECK ((winner_holder IS NULL) = (winner_priority IS NULL)),
  CHECK ((winner_holder IS NULL) = (winner_since IS NULL))
);

-- The writer upserts rows (always beside a fenced control event); the reader reads them.
-- Kept apart from sentinel_apply_grants, like the reprocess grant, and called after it by
-- `sentinel db grants` (PgStore::apply_grants).
CREATE FUNCTION sentinel_apply_command_grants(writer text, reader text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
  EXECUTE format('GRANT SELECT, INSERT, UPDATE ON point_desired TO %I', writer);
  EXECUTE format('GRANT SELECT ON point_desired TO %I', reader);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_command_grants(text, text) FROM PUBLIC;
