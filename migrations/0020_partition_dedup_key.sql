-- Sentinel schema, version 20: the dedup key of each hot daily partition without `ingested_at`
-- (issue 24, disk: the hot row; BENCHMARKS.md "The dedup key per hot partition").
--
-- Until now each class table had one partitioned unique index
-- `observation_<class>_key (instance_key, source_epoch, source_seq, ingested_at)`. `ingested_at`
-- is in it only because a unique index on a partitioned table must contain the partition key
-- (ingest spec, "Where ingested_at comes from": the three columns are the key that would
-- otherwise be correct, and stage 3 deduplicates on them). Its entries are 36 bytes with the
-- line pointer, too wide for PostgreSQL's ascending-run split (nbtsplitloc.c,
-- `_bt_afternewitemoff`: entries of at most two 8-byte keys, 28 bytes), so a day filled in
-- ingest order left its leaves about half full: 70.9 B a row over 4,320,000 rows.
--
-- Here each hot partition gets its own unique index `<partition>_key (instance_key,
-- source_epoch, source_seq)` at fillfactor 100 (16 bytes of key, 28 with the line pointer: an
-- instance's next seq sorts after its previous one, so a full leaf splits after the new entry
-- and stays packed; 28.6 B a row filled in ingest order, measured), and the partitioned index
-- is dropped. Within one partition the three-column key is stricter than the four-column one:
-- whatever the old index refused it refuses, and also a copy of a key stored the same day with
-- another `ingested_at`, which the old index let through unless it came late enough for the
-- late-duplicate probe (stage 3's bounded set and the stream's window usually stop it first);
-- the spec's three-column key refuses it, and so does the store now. Across partitions
-- nothing changes: the late-duplicate probe (store-pg `commit.rs`, `stored_copy_in!`) reads the
-- partitions of its lookback as before, now through this index and the row's `ingested_at`.
-- The commit's `INSERT … ON CONFLICT DO NOTHING` names no conflict target, so every unique index
-- of the leaf partition a row is routed to arbitrates, this one included (checked on
-- PostgreSQL 15 by tests/partition_key.rs with a redelivered batch).
--
-- A per-partition index is not inherited, so `sentinel_ensure_partitions` (the only maker of
-- hot partitions, SECURITY DEFINER: it runs as the owner, who may create the index) creates it
-- with each partition through `sentinel_hot_partition_key`. The compacted partitions keep
-- their own index (migration 0015). On a populated database this builds one index per hot
-- partition under the single-writer lock `sentinel migrate` holds (time per GB in
-- BENCHMARKS.md).

-- The dedup key of one hot partition (internal; the owner's): idempotent.
CREATE FUNCTION sentinel_hot_partition_key(part text) RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
  EXECUTE format('CREATE UNIQUE INDEX IF NOT EXISTS %I ON %I (instance_key, source_epoch, source_seq) '
                 'WITH (fillfactor = 100)', part || '_key', part);
END;
$$;
ALTER FUNCTION sentinel_hot_partition_key(text) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_hot_partition_key(text) FROM PUBLIC;

DROP INDEX observation_measurement_key;
DROP INDEX observation_state_key;
DROP INDEX observation_diagnostic_key;

DO $$
DECLARE
  part text;
BEGIN
  FOR part IN
    SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
      JOIN pg_class p ON p.oid = i.inhparent
    WHERE p.relname IN ('observation_measurement', 'observation_state', 'observation_diagnostic')
    ORDER BY 1
  LOOP
    PERFORM sentinel_hot_partition_key(part);
  END LOOP;
END;
$$;

-- 0005's function, with each new raw partition's dedup key made beside it.
CREATE OR REPLACE FUNCTION sentinel_ensure_partitions(from_day date, days integer)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
  cls      text;
  d        date;
  part     text;
  created  integer := 0;
BEGIN
  IF days IS NULL OR days < 0 OR days > 400 THEN
    RAISE EXCEPTION 'sentinel_ensure_partitions: days must be within 0..400, got %', days;
  END IF;
  FOR i IN 0 .. days - 1 LOOP
    d := from_day + i;
    FOREACH cls IN ARRAY ARRAY['measurement', 'state', 'diagnostic'] LOOP
      part := format('observation_%s_p%s', cls, to_char(d, 'YYYYMMDD'));
      IF to_regclass(part) IS NULL
         AND (d::timestamp AT TIME ZONE 'UTC') >= sentinel_kept_from('observation_' || cls) THEN
        PERFORM pg_advisory_xact_lock(7310598112409645057);
        IF to_regclass(part) IS NULL THEN
          EXECUTE format(
            'CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
            part, 'observation_' || cls,
            to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00',
            to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
          PERFORM sentinel_hot_partition_key(part);
          created := created + 1;
        END IF;
      END IF;
    END LOOP;
  END LOOP;
  RETURN created + sentinel_ensure_rollup_partitions(from_day, days);
END;
$$;

-- CREATE OR REPLACE resets SECURITY DEFINER and SET (owner and grants are kept): as 0005.
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SET search_path FROM CURRENT;
