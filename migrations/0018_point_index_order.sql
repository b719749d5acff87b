-- Sentinel schema, version 18: the point index of each class table in the order rows arrive
-- (issue 24 item 1, "hot ≤ 120 B"; BENCHMARKS.md "The hot row's bytes: index layout and
-- packing").
--
-- `observation_<class>_point` was `(point_key, observed_at DESC)`: a point's newest row goes to
-- the front of the point's entries, just after the previous point's last, so a full leaf splits
-- in the middle and the left half is never written again — filled in ingest order a day's
-- point index ends with its leaves about half full (53.4 B a row over 4,320,000 rows of 4,000
-- points). In ascending order a point's newest row goes after the point's previous one, and
-- PostgreSQL's B-tree split heuristic (nbtsplitloc.c, `_bt_afternewitemoff`: a new entry of at
-- most two 8-byte keys that sorts after an entry with the same leading key) splits such a leaf
-- after the new entry, leaving the left page as full as the index's fillfactor; at fillfactor
-- 100 the same day measures 38.5 B a row, and 28.5 B once rebuilt (REINDEX), against 31.5 B
-- at the default 90. No reader loses: a reader of a point's newest rows (`ORDER BY observed_at
-- DESC`) scans the same entries backward, a history read (`ORDER BY observed_at`) forward;
-- both plans are shown in BENCHMARKS.md beside the sizes. A row that arrives with an older
-- `observed_at` than its point's newest splits a full leaf in the middle, as every insert did
-- before.
--
-- The dedup index `observation_<class>_key` stays as it is: with `ingested_at` leading it would
-- fill as packed as this one, but the late-duplicate probe (store-pg `commit.rs`) looks a key up
-- by (instance, epoch, seq) with a range of `ingested_at`, which would then scan every entry of
-- that range (about 670 pages a late row instead of 7, measured).
--
-- A partitioned index takes its storage parameters only when created, so each is dropped and
-- created again: on a populated database this rebuilds every hot partition's point index, under
-- the single-writer lock `sentinel migrate` holds (its time per GB is in BENCHMARKS.md). The
-- partitions `sentinel_ensure_partitions` creates later inherit the definition and fillfactor.

DROP INDEX observation_measurement_point;
CREATE INDEX observation_measurement_point
  ON observation_measurement (point_key, observed_at) WITH (fillfactor = 100);
DROP INDEX observation_state_point;
CREATE INDEX observation_state_point
  ON observation_state (point_key, observed_at) WITH (fillfactor = 100);
DROP INDEX observation_diagnostic_point;
CREATE INDEX observation_diagnostic_point
  ON observation_diagnostic (point_key, observed_at) WITH (fillfactor = 100);
