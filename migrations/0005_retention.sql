-- Retention and class changes (ingest spec, "Retention and rollups", "One hypertable per
-- retention class", exit criterion "Class routing"; DESIGN.md §3; issue 9 items 2 and 4).
--
-- 1. The rollup tables become partitioned by bucket, so old buckets go the way old raw rows go:
--    by dropping whole partitions, never by row DELETEs. rollup_1m by day (`rollup_1m_pYYYYMMDD`),
--    rollup_1h by month (`rollup_1h_pYYYYMM`): at 4,000 points an hourly day is only ~96k rows,
--    and a two-year horizon as 730 daily partitions would make every dashboard query plan
--    against hundreds of partitions; a month's granularity on a 730-day horizon keeps at most
--    one month (~4 %) longer than asked. Existing rows are kept, and so are the grants the old
--    tables had.
-- 2. `retention_mark`: per table, the first instant still kept after a drop. The rollup
--    recompute never touches buckets of a class before its raw table's mark (its raw rows are
--    gone: recomputing would wipe the rollups there), and the partition function never creates
--    a partition again below a mark.
-- 3. `sentinel_retention_drop`: drops one partition wholly before the caller's cut, fenced on
--    the epoch, with its `retention_drop` control event in the same transaction.
-- 4. `sentinel_move_point_class`: a point's whole history into another class table, its
--    rollups recomputed and a `class_moved` control event, in one fenced transaction.

CREATE TABLE retention_mark (
  tbl         text        PRIMARY KEY,   -- observation_<class>, rollup_1m, rollup_1h
  kept_from   timestamptz NOT NULL,      -- every partition ending at or before it is gone
  core_epoch  integer     NOT NULL,
  updated_at  timestamptz NOT NULL
);

-- The views depend on the tables; they are defined again below.
DROP VIEW rollup_1m_avg;
DROP VIEW rollup_1h_avg;
ALTER TABLE rollup_1m RENAME TO rollup_1m_unpartitioned;
ALTER TABLE rollup_1h RENAME TO rollup_1h_unpartitioned;
ALTER INDEX rollup_1m_bucket RENAME TO rollup_1m_unpartitioned_bucket;
ALTER INDEX rollup_1m_pkey RENAME TO rollup_1m_unpartitioned_pkey;
ALTER INDEX rollup_1h_pkey RENAME TO rollup_1h_unpartitioned_pkey;

CREATE TABLE rollup_1m (
  point_id         text             NOT NULL,
  bucket           timestamptz      NOT NULL,
  retention_class  text             NOT NULL,
  count            bigint           NOT NULL CHECK (count > 0),
  live_count       bigint           NOT NULL CHECK (live_count >= 0 AND live_count <= count),
  sum              double precision,
  min              double precision,
  max              double precision,
  PRIMARY KEY (point_id, bucket)
) PARTITION BY RANGE (bucket);
CREATE INDEX rollup_1m_bucket ON rollup_1m (bucket);

CREATE TABLE rollup_1h (LIKE rollup_1m INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
  PARTITION BY RANGE (bucket);
ALTER TABLE rollup_1h ADD PRIMARY KEY (point_id, bucket);
CREATE INDEX rollup_1h_bucket ON rollup_1h (bucket);

CREATE VIEW rollup_1m_avg AS
  SELECT point_id, bucket, retention_class, count, live_count, sum, min, max,
         sum / NULLIF(live_count, 0) AS avg
  FROM rollup_1m;
CREATE VIEW rollup_1h_avg AS
  SELECT point_id, bucket, retention_class, count, live_count, sum, min, max,
         sum / NULLIF(live_count, 0) AS avg
  FROM rollup_1h;

-- The kept-from mark of a table, or -infinity while nothing was ever dropped.
CREATE FUNCTION sentinel_kept_from(tbl text)
RETURNS timestamptz
LANGUAGE sql STABLE
AS $$
  SELECT COALESCE((SELECT m.kept_from FROM retention_mark m WHERE m.tbl = $1), '-infinity'::timestamptz)
$$;

-- Creates the rollup partitions covering the days [from_day, from_day + days): the daily
-- rollup_1m partitions and the monthly rollup_1h ones, skipping anything below a table's
-- retention mark. Idempotent, serialised like sentinel_ensure_partitions.
CREATE FUNCTION sentinel_ensure_rollup_partitions(from_day date, days integer)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
  d        date;
  m        date;
  part     text;
  created  integer := 0;
BEGIN
  IF days IS NULL OR days < 0 OR days > 400 THEN
    RAISE EXCEPTION 'sentinel_ensure_rollup_partitions: days must be within 0..400, got %', days;
  END IF;
  FOR i IN 0 .. days - 1 LOOP
    d := from_day + i;
    part := format('rollup_1m_p%s', to_char(d, 'YYYYMMDD'));
    IF to_regclass(part) IS NULL AND (d::timestamp AT TIME ZONE 'UTC') >= sentinel_kept_from('rollup_1m') THEN
      PERFORM pg_advisory_xact_lock(7310598112409645057);
      IF to_regclass(part) IS NULL THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF rollup_1m FOR VALUES FROM (%L) TO (%L)',
          part, to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00', to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
        created := created + 1;
      END IF;
    END IF;
    m := date_trunc('month', d)::date;
    part := format('rollup_1h_p%s', to_char(m, 'YYYYMM'));
    IF to_regclass(part) IS NULL AND (m::timestamp AT TIME ZONE 'UTC') >= sentinel_kept_from('rollup_1h') THEN
      PERFORM pg_advisory_xact_lock(7310598112409645057);
      IF to_regclass(part) IS NULL THEN
        EXECUTE format('CREATE TABLE %I PARTITION OF rollup_1h FOR VALUES FROM (%L) TO (%L)',
          part, to_char(m, 'YYYY-MM-DD') || ' 00:00:00+00',
          to_char((m + interval '1 month')::date, 'YYYY-MM-DD') || ' 00:00:00+00');
        created := created + 1;
      END IF;
    END IF;
  END LOOP;
  RETURN created;
END;
$$;

-- The raw partitions as in 0001, now also skipping days below a class's retention mark (a
-- dropped day never comes back), and the rollup partitions of the same days with them, so the
-- rollups' partitions are created ahead of need exactly when the raw ones are.
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
          created := created + 1;
        END IF;
      END IF;
    END LOOP;
  END LOOP;
  RETURN created + sentinel_ensure_rollup_partitions(from_day, days);
END;
$$;

-- Existing rollups into the partitioned tables: partitions for every day they cover (in
-- 400-day calls), then the rows, then the grants the old tables had.
DO $$
DECLARE
  lo date;
  hi date;
  g  record;
BEGIN
  SELECT min(b)::date, max(b)::date INTO lo, hi FROM (
    SELECT (min(bucket) AT TIME ZONE 'UTC') AS b FROM rollup_1m_unpartitioned
    UNION ALL SELECT (max(bucket) AT TIME ZONE 'UTC') FROM rollup_1m_unpartitioned
    UNION ALL SELECT (min(bucket) AT TIME ZONE 'UTC') FROM rollup_1h_unpartitioned
    UNION ALL SELECT (max(bucket) AT TIME ZONE 'UTC') FROM rollup_1h_unpartitioned) bounds;
  WHILE lo IS NOT NULL AND lo <= hi LOOP
    PERFORM sentinel_ensure_rollup_partitions(lo, LEAST(400, hi - lo + 1));
    lo := lo + 400;
  END LOOP;
  PERFORM sentinel_ensure_rollup_partitions(((now() AT TIME ZONE 'UTC')::date - 1), 9);
  INSERT INTO rollup_1m SELECT * FROM rollup_1m_unpartitioned;
  INSERT INTO rollup_1h SELECT * FROM rollup_1h_unpartitioned;
  FOR g IN SELECT DISTINCT grantee, privilege_type, table_name FROM information_schema.role_table_grants
           WHERE table_schema = current_schema()
             AND table_name IN ('rollup_1m_unpartitioned', 'rollup_1h_unpartitioned')
             AND grantee <> current_user LOOP
    EXECUTE format('GRANT %s ON %I TO %I', g.privilege_type,
                   replace(g.table_name, '_unpartitioned', ''), g.grantee);
    EXECUTE format('GRANT %s ON %I TO %I', g.privilege_type,
                   replace(g.table_name, '_unpartitioned', '') || '_avg', g.grantee);
  END LOOP;
END;
$$;
DROP TABLE rollup_1m_unpartitioned;
DROP TABLE rollup_1h_unpartitioned;

-- 0004's recompute with two changes: the partitions of the range are made first, and each
-- class is clipped at its raw table's retention mark — buckets of a class before it are left
-- as they are (neither deleted nor recomputed), because their raw rows are gone. Clipping
-- rather than refusing keeps the running core's step and a reprocess over a range that
-- straddles the mark working for every bucket that can still be computed.
CREATE OR REPLACE FUNCTION sentinel_rollup_recompute(grain text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  tbl      text;
  width    interval;
  written  bigint;
  clip_m   timestamptz := sentinel_kept_from('observation_measurement');
  clip_s   timestamptz := sentinel_kept_from('observation_state');
  clip_d   timestamptz := sentinel_kept_from('observation_diagnostic');
  clip_own timestamptz;
  lo       date;
BEGIN
  IF grain = '1m' THEN tbl := 'rollup_1m'; width := interval '1 minute';
  ELSIF grain = '1h' THEN tbl := 'rollup_1h'; width := interval '1 hour';
  ELSE RAISE EXCEPTION 'sentinel_rollup_recompute: unknown grain %', grain;
  END IF;
  IF from_ts IS NULL OR to_ts IS NULL OR from_ts > to_ts
     OR date_bin(width, from_ts, TIMESTAMPTZ '1970-01-01 00:00:00+00') <> from_ts
     OR date_bin(width, to_ts, TIMESTAMPTZ '1970-01-01 00:00:00+00') <> to_ts THEN
    RAISE EXCEPTION 'sentinel_rollup_recompute: [%, %) is not a range of % buckets', from_ts, to_ts, grain;
  END IF;
  IF from_ts = to_ts THEN
    RETURN 0;
  END IF;
  -- Nor are buckets written below the rollup table's own mark (its partitions are gone).
  clip_own := sentinel_kept_from(tbl);
  lo := (GREATEST(from_ts, clip_own, LEAST(clip_m, clip_s, clip_d)) AT TIME ZONE 'UTC')::date;
  WHILE (lo::timestamp AT TIME ZONE 'UTC') < to_ts LOOP
    PERFORM sentinel_ensure_rollup_partitions(lo,
      LEAST(400, ((to_ts AT TIME ZONE 'UTC')::date - lo) + 1));
    lo := lo + 400;
  END LOOP;
  EXECUTE format($q$DELETE FROM %I WHERE bucket >= $1 AND bucket < $2
    AND bucket >= CASE retention_class WHEN 'measurement' THEN $3 WHEN 'state' THEN $4
                                       WHEN 'diagnostic' THEN $5 ELSE '-infinity'::timestamptz END$q$, tbl)
    USING from_ts, to_ts, clip_m, clip_s, clip_d;
  EXECUTE format($q$
    WITH reg AS (
      SELECT pd.point_id,
             CASE WHEN jsonb_typeof(b.descriptor -> 'agg_safe') = 'boolean'
                  THEN (b.descriptor ->> 'agg_safe')::boolean ELSE false END AS safe,
             CASE WHEN b.descriptor ->> 'retention' IN ('measurement', 'state', 'diagnostic')
                  THEN b.descriptor ->> 'retention' END AS cls
      FROM point_descriptor pd JOIN descriptor_blob b ON b.hash = pd.hash
      WHERE pd.version = (SELECT max(version) FROM registry_version)
    ),
    raw AS (
      SELECT 'measurement'::text AS cls, point_id, observed_at, quality, value_num
        FROM observation_measurement WHERE observed_at >= GREATEST($1, $4) AND observed_at < $2
      UNION ALL
      SELECT 'state', point_id, observed_at, quality, value_num
        FROM observation_state WHERE observed_at >= GREATEST($1, $5) AND observed_at < $2
      UNION ALL
      SELECT 'diagnostic', point_id, observed_at, quality, value_num
        FROM observation_diagnostic WHERE observed_at >= GREATEST($1, $6) AND observed_at < $2
    ),
    agg AS (
      SELECT point_id,
             date_bin($3, observed_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS bucket,
             min(cls) AS cls,
             count(*) AS n,
             count(*) FILTER (WHERE quality = 'live') AS live_n,
             sum(value_num) FILTER (WHERE quality = 'live') AS s,
             min(value_num) FILTER (WHERE quality = 'live') AS lo,
             max(value_num) FILTER (WHERE quality = 'live') AS hi
      FROM raw
      GROUP BY 1, 2
    )
    INSERT INTO %I (point_id, bucket, retention_class, count, live_count, sum, min, max)
    SELECT a.point_id, a.bucket, COALESCE(r.cls, a.cls), a.n, a.live_n,
           CASE WHEN r.safe THEN a.s END,
           CASE WHEN r.safe THEN a.lo END,
           CASE WHEN r.safe THEN a.hi END
    FROM agg a LEFT JOIN reg r ON r.point_id = a.point_id
    WHERE a.bucket >= $7
  $q$, tbl) USING from_ts, to_ts, width, clip_m, clip_s, clip_d, clip_own;
  GET DIAGNOSTICS written = ROW_COUNT;
  RETURN written;
END;
$$;

-- Drops one partition of `tbl` (observation_<class>, rollup_1m or rollup_1h) whose range
-- [part_from, part_to) ends at or before `kept_from`, fenced on `epoch`, and records it: the
-- table's retention mark moves up to part_to and a `retention_drop` control event (payload:
-- table `raw` | `rollup_1m` | `rollup_1h`, class (raw only), day (the partition's first), to) is written in the same transaction. Returns the
-- event's seq, or NULL when the partition does not exist (already dropped).
CREATE FUNCTION sentinel_retention_drop(epoch integer, tbl text, part_from timestamptz,
  kept_from timestamptz, principal text, occurred_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  part     text;
  part_to  timestamptz;
  cls      text;
  version  integer;
  seq      bigint;
BEGIN
  PERFORM sentinel_rollup_fence(epoch);
  IF tbl IN ('observation_measurement', 'observation_state', 'observation_diagnostic', 'rollup_1m') THEN
    IF date_bin('1 day', part_from, TIMESTAMPTZ '1970-01-01 00:00:00+00') <> part_from THEN
      RAISE EXCEPTION 'sentinel_retention_drop: % is not a UTC midnight', part_from;
    END IF;
    part := format('%s_p%s', tbl, to_char(part_from AT TIME ZONE 'UTC', 'YYYYMMDD'));
    part_to := part_from + interval '1 day';
  ELSIF tbl = 'rollup_1h' THEN
    part := format('%s_p%s', tbl, to_char(part_from AT TIME ZONE 'UTC', 'YYYYMM'));
    IF (date_trunc('month', part_from AT TIME ZONE 'UTC') AT TIME ZONE 'UTC') <> part_from THEN
      RAISE EXCEPTION 'sentinel_retention_drop: % is not the start of a UTC month', part_from;
    END IF;
    part_to := ((part_from AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
  ELSE
    RAISE EXCEPTION 'sentinel_retention_drop: unknown table %', tbl;
  END IF;
  IF kept_from IS NULL OR part_to > kept_from THEN
    RAISE EXCEPTION 'sentinel_retention_drop: partition % ends at %, after the kept-from %', part, part_to, kept_from;
  END IF;
  -- Serialises drops with each other and with partition creation.
  PERFORM pg_advisory_xact_lock(7310598112409645057);
  INSERT INTO retention_mark AS m (tbl, kept_from, core_epoch, updated_at)
    VALUES (tbl, part_to, epoch, now())
    ON CONFLICT ON CONSTRAINT retention_mark_pkey DO UPDATE SET kept_from = GREATEST(m.kept_from, EXCLUDED.kept_from),
      core_epoch = EXCLUDED.core_epoch, updated_at = EXCLUDED.updated_at;
  IF to_regclass(part) IS NULL THEN
    RETURN NULL;
  END IF;
  EXECUTE format('DROP TABLE %I', part);
  cls := CASE WHEN tbl LIKE 'observation_%' THEN substr(tbl, 13) END;
  SELECT COALESCE(max(v.version), 0) INTO version FROM registry_version v;
  INSERT INTO control_event (occurred_at, kind, point_id, subject_key, principal, core_epoch, payload, registry_version)
    VALUES (occurred_at, 'retention_drop', NULL, tbl, principal, epoch,
            jsonb_build_object('table', CASE WHEN cls IS NULL THEN tbl ELSE 'raw' END, 'class', cls,
              'day', to_char(part_from AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
              'to', to_char(part_to AT TIME ZONE 'UTC', 'YYYY-MM-DD')),
            version)
    RETURNING control_event.seq INTO seq;
  RETURN seq;
END;
$$;

-- A point's whole history into the class table `to_class`, in one transaction fenced on
-- `epoch`: its rows leave the other two class tables (DELETE … RETURNING feeding the INSERT,
-- so nothing is lost or doubled), the partitions of their days are made first, its rollups are
-- recomputed over the moved rows' observed range (both grains, rounded outward; the newest
-- registry version, which names the new class, has to be stored before), and a `class_moved`
-- control event records it. Idempotent: a point already wholly in `to_class` moves nothing and
-- writes no event (seq NULL). Refuses rows ingested before the new class's retention mark:
-- that class no longer keeps those days.
CREATE FUNCTION sentinel_move_point_class(epoch integer, point text, to_class text,
  principal text, occurred_at timestamptz,
  OUT moved bigint, OUT observed_from timestamptz, OUT observed_to timestamptz, OUT seq bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  cls       text;
  n         bigint;
  lo_ing    timestamptz;
  hi_ing    timestamptz;
  lo_obs    timestamptz;
  hi_obs    timestamptz;
  d         date;
  target    text := 'observation_' || to_class;
  version   integer;
  froms     jsonb := '{}'::jsonb;
BEGIN
  PERFORM sentinel_rollup_fence(epoch);
  IF to_class IS NULL OR to_class NOT IN ('measurement', 'state', 'diagnostic') THEN
    RAISE EXCEPTION 'sentinel_move_point_class: unknown retention class %', to_class;
  END IF;
  moved := 0;
  FOREACH cls IN ARRAY ARRAY['measurement', 'state', 'diagnostic'] LOOP
    CONTINUE WHEN cls = to_class;
    EXECUTE format('SELECT count(*), min(ingested_at), max(ingested_at), min(observed_at), max(observed_at) '
                   'FROM %I WHERE point_id = $1', 'observation_' || cls)
      INTO n, lo_ing, hi_ing, lo_obs, hi_obs USING point;
    CONTINUE WHEN n = 0;
    IF lo_ing < sentinel_kept_from(target) THEN
      RAISE EXCEPTION 'point % has rows ingested at % in class %, before the first day class % still keeps (%)',
        point, lo_ing, cls, to_class, sentinel_kept_from(target);
    END IF;
    d := (lo_ing AT TIME ZONE 'UTC')::date;
    WHILE d <= (hi_ing AT TIME ZONE 'UTC')::date LOOP
      PERFORM sentinel_ensure_partitions(d, LEAST(400, (hi_ing AT TIME ZONE 'UTC')::date - d + 1));
      d := d + 400;
    END LOOP;
    EXECUTE format('WITH gone AS (DELETE FROM %I WHERE point_id = $1 RETURNING *) '
                   'INSERT INTO %I SELECT * FROM gone', 'observation_' || cls, target) USING point;
    GET DIAGNOSTICS n = ROW_COUNT;
    moved := moved + n;
    froms := froms || jsonb_build_object(cls, n);
    observed_from := LEAST(observed_from, lo_obs);
    observed_to := GREATEST(observed_to, hi_obs);
  END LOOP;
  IF moved = 0 THEN
    RETURN;
  END IF;
  -- Both grains over the moved range, rounded outward (the recompute clips at the marks).
  PERFORM sentinel_rollup_recompute('1m', date_bin('1 minute', observed_from, TIMESTAMPTZ '1970-01-01 00:00:00+00'),
    date_bin('1 minute', observed_to, TIMESTAMPTZ '1970-01-01 00:00:00+00') + interval '1 minute');
  PERFORM sentinel_rollup_recompute('1h', date_bin('1 hour', observed_from, TIMESTAMPTZ '1970-01-01 00:00:00+00'),
    date_bin('1 hour', observed_to, TIMESTAMPTZ '1970-01-01 00:00:00+00') + interval '1 hour');
  SELECT COALESCE(max(v.version), 0) INTO version FROM registry_version v;
  INSERT INTO control_event (occurred_at, kind, point_id, subject_key, principal, core_epoch, payload, registry_version)
    VALUES (occurred_at, 'class_moved', point, NULL, principal, epoch,
            jsonb_build_object('from', froms, 'to', to_class, 'rows', moved,
              'observed_from', observed_from, 'observed_to', observed_to),
            version)
    RETURNING control_event.seq INTO seq;
END;
$$;

-- CREATE OR REPLACE resets a function's SECURITY DEFINER and SET clauses (PostgreSQL keeps only
-- its owner and grants), so the two replaced above get theirs back as 0003 and 0004 gave them.
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_ensure_partitions(date, integer) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_kept_from(text) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_ensure_rollup_partitions(date, integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_ensure_rollup_partitions(date, integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_ensure_rollup_partitions(date, integer) FROM PUBLIC;
ALTER FUNCTION sentinel_retention_drop(integer, text, timestamptz, timestamptz, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_retention_drop(integer, text, timestamptz, timestamptz, text, timestamptz) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_retention_drop(integer, text, timestamptz, timestamptz, text, timestamptz) FROM PUBLIC;
ALTER FUNCTION sentinel_move_point_class(integer, text, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_move_point_class(integer, text, text, text, timestamptz) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_move_point_class(integer, text, text, text, timestamptz) FROM PUBLIC;

-- The grants list of 0004, with retention added: the writer executes the drop and the class
-- move (both fenced) and reads the marks; the reader reads the marks.
CREATE OR REPLACE FUNCTION sentinel_apply_grants(writer text, reader text)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
  schema_name text := current_schema();
BEGIN
  IF writer IS NULL OR reader IS NULL OR writer = reader THEN
    RAISE EXCEPTION 'sentinel_apply_grants: the writer and the reader must be two named roles';
  END IF;
  EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I, %I', schema_name, writer, reader);

  EXECUTE format('GRANT SELECT, INSERT ON observation_measurement, observation_state, '
                 'observation_diagnostic, quarantine, control_event, descriptor_blob, '
                 'point_descriptor TO %I', writer);
  EXECUTE format('GRANT SELECT, INSERT, UPDATE ON registry_version, point_state, core_start TO %I',
                 writer);
  EXECUTE format('GRANT SELECT, UPDATE ON core_epoch TO %I', writer);
  EXECUTE format('GRANT USAGE ON SEQUENCE control_event_seq_seq TO %I', writer);
  EXECUTE format('GRANT SELECT ON observation, _sqlx_migrations TO %I', writer);
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_ensure_partitions(date, integer) TO %I', writer);
  EXECUTE format('GRANT SELECT ON rollup_1m, rollup_1h, rollup_1m_avg, rollup_1h_avg, '
                 'rollup_watermark, retention_mark TO %I', writer);
  EXECUTE format('GRANT EXECUTE ON FUNCTION '
                 'sentinel_rollup_refresh_range(integer, timestamptz, timestamptz), '
                 'sentinel_rollup_claim(integer, timestamptz, integer, integer), '
                 'sentinel_rollup_apply(integer), '
                 'sentinel_retention_drop(integer, text, timestamptz, timestamptz, text, timestamptz), '
                 'sentinel_move_point_class(integer, text, text, text, timestamptz) TO %I', writer);

  EXECUTE format('GRANT SELECT ON observation_measurement, observation_state, observation_diagnostic, '
                 'observation, control_event, registry_version, descriptor_blob, point_descriptor, '
                 'point_state, core_epoch, core_start, _sqlx_migrations, rollup_1m, rollup_1h, '
                 'rollup_1m_avg, rollup_1h_avg, rollup_watermark, retention_mark TO %I', reader);
  EXECUTE format('GRANT SELECT (stream, stream_seq, ingested_at, subject, reason, detail, '
                 'payload_bytes, core_epoch, recorded_at) ON quarantine TO %I', reader);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_grants(text, text) FROM PUBLIC;
