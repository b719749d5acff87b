-- Sentinel schema, version 16: compacted minute rollups of old days (issue 24, disk; core
-- runtime spec: the minutely rollup is "the long-term storage driver"; BENCHMARKS.md
-- "Compacted days").
--
-- A closed day of `rollup_1m`, once old enough, is compacted with the day's raw rows (the
-- store's `compact_day`, same age rule): its rows move from the hot daily partition
-- `rollup_1m_pYYYYMMDD` (left empty) into `rollup_1m_compact_pYYYYMMDD`, one partition per day,
-- so retention stays a partition drop (it drops both). A compacted row is one *chunk*: the
-- minute buckets of one (point, retention class) in one UTC day, column by column, in bucket
-- order:
--   * `point_key`: the registry's integer key (`point_key`, migration 0014; a rollup's point
--     that has none is given one, the mapping never reuses a key) instead of the text id;
--   * `minute_0`: the first bucket's minute from the day's start; `minutes`: every bucket's
--     minute, NULL as a whole when they are the run `minute_0`, `minute_0 + 1`, … (a point
--     reporting every minute: the common case). Not delta-coded: decoding deltas
--     (`sentinel_undelta`) cost 3.4 µs a bucket, three times the rest of the decode
--     (BENCHMARKS.md "Compacted days: the minute rollups");
--   * `count` as int4 (a minute of more than 2^31 rows fails the cast: nothing is written);
--     `live_count` NULL as a whole when it equals `count` element for element (the common case);
--     `sum`, `min`, `max` NULL as a whole when every element is NULL (a point that is not
--     `agg_safe`);
--   * the arrays are compressed by TOAST with lz4 (`toast_tuple_target = 128`), as 0015's.
-- Nothing is lost: every column of the hot row is a column or an element here.
--
-- Writes stay as they were: the recompute (rollup apply, refresh, reprocess, class moves)
-- deletes and inserts hot rows, also on a compacted day. Reads go through `rollup_1m_all`, in
-- which a hot row for (point, bucket) wins over the compacted element, and a compacted element
-- the recompute would have deleted is hidden: the recompute records each range it rewrote on a
-- compacted day in `rollup_1m_compact_mask` (with the per-class clips its DELETE used), and an
-- element in a mask's range at or past its class's clip is not shown. Compacting the day again
-- merges what `rollup_1m_all` shows for it into new chunks and clears the day's masks; a day
-- with no hot rows writes nothing (its masks stay, and stay true).

CREATE TABLE rollup_1m_compact (
  day              timestamptz         NOT NULL,   -- the UTC midnight of the buckets' day
  point_key        integer             NOT NULL,
  retention_class  text                NOT NULL,
  n                integer             NOT NULL CHECK (n > 0 AND n <= 1440),
  minute_0         smallint            NOT NULL CHECK (minute_0 >= 0 AND minute_0 < 1440),
  minutes          smallint[],
  count            integer[]           NOT NULL,
  live_count       integer[],
  sum              double precision[],
  min              double precision[],
  max              double precision[],
  PRIMARY KEY (point_key, day, retention_class)
) PARTITION BY RANGE (day);
ALTER TABLE rollup_1m_compact ALTER COLUMN minutes SET COMPRESSION lz4;
ALTER TABLE rollup_1m_compact ALTER COLUMN count SET COMPRESSION lz4;
ALTER TABLE rollup_1m_compact ALTER COLUMN live_count SET COMPRESSION lz4;
ALTER TABLE rollup_1m_compact ALTER COLUMN sum SET COMPRESSION lz4;
ALTER TABLE rollup_1m_compact ALTER COLUMN min SET COMPRESSION lz4;
ALTER TABLE rollup_1m_compact ALTER COLUMN max SET COMPRESSION lz4;

-- Ranges the recompute rewrote on a compacted day: a compacted element of class c with a bucket
-- in [from_<c>, to_ts) is stale (its hot row, if the recompute wrote one, wins anyway).
CREATE TABLE rollup_1m_compact_mask (
  id       bigserial    PRIMARY KEY,
  day      timestamptz  NOT NULL,
  from_ts  timestamptz  NOT NULL,   -- a class the recompute does not clip
  from_m   timestamptz  NOT NULL,   -- GREATEST(from_ts, the measurement clip)
  from_s   timestamptz  NOT NULL,
  from_d   timestamptz  NOT NULL,
  to_ts    timestamptz  NOT NULL,
  CHECK (from_ts < to_ts AND to_ts <= day + interval '1 day' AND from_ts >= day)
);
CREATE INDEX rollup_1m_compact_mask_day ON rollup_1m_compact_mask (day);

-- The decoded chunks, with the hot table's columns in its order and the chunk's day.
CREATE VIEW rollup_1m_compacted AS
  SELECT k.point_id, c.day + COALESCE(u.m, c.minute_0 + u.i - 1) * interval '1 minute' AS bucket, c.retention_class,
         u.count::bigint AS count, COALESCE(u.live, u.count)::bigint AS live_count,
         u.sum, u.min, u.max, c.day
    FROM rollup_1m_compact c
    JOIN point_key k ON k.key = c.point_key
    CROSS JOIN LATERAL unnest(c.minutes, c.count, c.live_count, c.sum, c.min, c.max)
      WITH ORDINALITY AS u(m, count, live, sum, min, max, i);

-- Every minute rollup, hot and compacted: the hot row wins; a masked element is gone. `day`
-- is the bucket's UTC day: a read that bounds it touches only the chunks of its days.
CREATE VIEW rollup_1m_all AS
  SELECT h.point_id, h.bucket, h.retention_class, h.count, h.live_count, h.sum, h.min, h.max,
         date_bin('1 day', h.bucket, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS day
    FROM rollup_1m h
  UNION ALL
  SELECT c.point_id, c.bucket, c.retention_class, c.count, c.live_count, c.sum, c.min, c.max, c.day
    FROM rollup_1m_compacted c
   WHERE NOT EXISTS (SELECT 1 FROM rollup_1m h WHERE h.point_id = c.point_id AND h.bucket = c.bucket)
     AND NOT EXISTS (SELECT 1 FROM rollup_1m_compact_mask m
                      WHERE m.day = c.day AND c.bucket < m.to_ts
                        AND c.bucket >= CASE c.retention_class WHEN 'measurement' THEN m.from_m
                                          WHEN 'state' THEN m.from_s WHEN 'diagnostic' THEN m.from_d
                                          ELSE m.from_ts END);

-- The average view of 0005 over every minute rollup (same columns).
CREATE OR REPLACE VIEW rollup_1m_avg AS
  SELECT point_id, bucket, retention_class, count, live_count, sum, min, max,
         sum / NULLIF(live_count, 0) AS avg
  FROM rollup_1m_all;

-- The rollup recompute of 0015, unchanged but for the mask it leaves on compacted days.
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
  -- What the DELETE did to the hot rows, done to the compacted ones of every compacted day in
  -- the range (0016): their elements in it, past their class's clip, are hidden from now on.
  IF grain = '1m' THEN
    INSERT INTO rollup_1m_compact_mask (day, from_ts, from_m, from_s, from_d, to_ts)
      SELECT d.day, GREATEST(from_ts, d.day), GREATEST(from_ts, d.day, clip_m),
             GREATEST(from_ts, d.day, clip_s), GREATEST(from_ts, d.day, clip_d),
             LEAST(to_ts, d.day + interval '1 day')
        FROM generate_series(date_bin('1 day', from_ts, TIMESTAMPTZ '1970-01-01 00:00:00+00'),
                             to_ts - interval '1 microsecond', interval '1 day') AS d(day)
       WHERE EXISTS (SELECT 1 FROM rollup_1m_compact c WHERE c.day = d.day);
  END IF;
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
      SELECT 'measurement'::text AS cls, point_key, observed_at, quality, value_num
        FROM observation_measurement_all WHERE observed_at >= GREATEST($1, $4) AND observed_at < $2
          AND obs_hour >= date_bin('1 hour', GREATEST($1, $4), TIMESTAMPTZ '1970-01-01 00:00:00+00') AND obs_hour < $2
      UNION ALL
      SELECT 'state', point_key, observed_at, quality, value_num
        FROM observation_state_all WHERE observed_at >= GREATEST($1, $5) AND observed_at < $2
          AND obs_hour >= date_bin('1 hour', GREATEST($1, $5), TIMESTAMPTZ '1970-01-01 00:00:00+00') AND obs_hour < $2
      UNION ALL
      SELECT 'diagnostic', point_key, observed_at, quality, value_num
        FROM observation_diagnostic_all WHERE observed_at >= GREATEST($1, $6) AND observed_at < $2
          AND obs_hour >= date_bin('1 hour', GREATEST($1, $6), TIMESTAMPTZ '1970-01-01 00:00:00+00') AND obs_hour < $2
    ),
    agg AS (
      SELECT point_key,
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
    SELECT k.point_id, a.bucket, COALESCE(r.cls, a.cls), a.n, a.live_n,
           CASE WHEN r.safe THEN a.s END,
           CASE WHEN r.safe THEN a.lo END,
           CASE WHEN r.safe THEN a.hi END
    FROM agg a JOIN point_key k ON k.key = a.point_key LEFT JOIN reg r ON r.point_id = k.point_id
    WHERE a.bucket >= $7
  $q$, tbl) USING from_ts, to_ts, width, clip_m, clip_s, clip_d, clip_own;
  GET DIAGNOSTICS written = ROW_COUNT;
  RETURN written;
END;
$$;

-- The guard of the rollup encoder: a chunk's row numbers, as its aggregates saw them, must be
-- exactly 1..n in order (0015's `sentinel_compact_in_order`, for int4 counts). Returns n.
CREATE FUNCTION sentinel_compact_rollup_in_order(n bigint, rns bigint[]) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF rns IS DISTINCT FROM ARRAY(SELECT generate_series(1::bigint, n)) THEN
    RAISE EXCEPTION 'rollup compaction: a chunk''s buckets reached its aggregates out of order; nothing is written';
  END IF;
  RETURN n;
END;
$$;

-- Compacts the minute rollups of one closed day (issue 24, disk): what `rollup_1m_all` shows
-- for the day (hot rows, and the chunks already there less their masked elements) becomes the
-- day's chunks in one transaction, fenced on (epoch, start identity), with one `compaction`
-- control event (subject `rollup_1m`). Refused, before anything is written: a day not closed
-- at `p_now`, a day that ended less than `p_age_days` days before `p_now` (the raw compaction's
-- words). A day with no hot rows writes nothing (`buckets` 0, `seq` NULL): idempotent.
CREATE FUNCTION sentinel_compact_rollup_day(epoch integer, p_core_start bigint, p_day timestamptz,
  p_now timestamptz, p_age_days integer, principal text,
  OUT buckets bigint, OUT chunks bigint, OUT bytes_before bigint, OUT bytes_after bigint, OUT seq bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  day_to   timestamptz := p_day + interval '1 day';
  hot      text;
  packed   text;
  version  integer;
BEGIN
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
  IF p_day IS NULL OR date_bin('1 day', p_day, TIMESTAMPTZ '1970-01-01 00:00:00+00') <> p_day THEN
    RAISE EXCEPTION 'compaction: % is not a UTC midnight', p_day;
  END IF;
  IF p_age_days IS NULL OR p_age_days < 1 OR p_age_days > 400 THEN
    RAISE EXCEPTION 'compaction: the age must be within 1..=400 days, got %', p_age_days;
  END IF;
  IF p_now IS NULL OR day_to > p_now THEN
    RAISE EXCEPTION 'compaction refused: day % is not closed (it ends after now)', to_char(p_day AT TIME ZONE 'UTC', 'YYYY-MM-DD');
  END IF;
  IF day_to + p_age_days * interval '1 day' > p_now THEN
    RAISE EXCEPTION 'compaction refused: day % is younger than % days', to_char(p_day AT TIME ZONE 'UTC', 'YYYY-MM-DD'), p_age_days;
  END IF;
  buckets := 0; chunks := 0; bytes_before := 0; bytes_after := 0;
  hot := format('rollup_1m_p%s', to_char(p_day AT TIME ZONE 'UTC', 'YYYYMMDD'));
  packed := format('rollup_1m_compact_p%s', to_char(p_day AT TIME ZONE 'UTC', 'YYYYMMDD'));
  -- Serialises with the rollup steps (their lock first, as they take it), then with partition
  -- creation and retention drops.
  PERFORM pg_advisory_xact_lock(7310598112409645058);
  PERFORM pg_advisory_xact_lock(7310598112409645057);
  IF to_regclass(hot) IS NULL THEN
    RETURN;
  END IF;
  EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', hot);
  EXECUTE format('SELECT count(*) FROM %I', hot) INTO buckets;
  IF buckets = 0 THEN
    RETURN;
  END IF;
  bytes_before := pg_total_relation_size(hot) + COALESCE(pg_total_relation_size(to_regclass(packed)), 0);
  IF to_regclass(packed) IS NULL THEN
    EXECUTE format('CREATE TABLE %I PARTITION OF rollup_1m_compact FOR VALUES FROM (%L) TO (%L) '
                   'WITH (toast_tuple_target = 128)', packed, p_day, day_to);
  END IF;
  IF to_regclass('pg_temp.sentinel_compact_rollup_stage') IS NOT NULL THEN
    DROP TABLE pg_temp.sentinel_compact_rollup_stage;
  END IF;
  CREATE TEMP TABLE sentinel_compact_rollup_stage ON COMMIT DROP AS
    SELECT * FROM rollup_1m_all WHERE day = p_day AND bucket >= p_day AND bucket < day_to;
  -- A rollup's point the registry never keyed (rollups older than 0014's keys) gets its key.
  INSERT INTO point_key (point_id)
    SELECT DISTINCT s.point_id FROM sentinel_compact_rollup_stage s
     WHERE NOT EXISTS (SELECT 1 FROM point_key k WHERE k.point_id = s.point_id)
    ON CONFLICT DO NOTHING;
  EXECUTE format('DELETE FROM %I', packed);
  DELETE FROM rollup_1m_compact_mask m WHERE m.day = p_day;
  EXECUTE format('TRUNCATE %I', hot);
  EXECUTE format($q$
    INSERT INTO %I (day, point_key, retention_class, n, minute_0, minutes, count, live_count, sum, min, max)
    SELECT $1, point_key, retention_class,
      sentinel_compact_rollup_in_order(count(*), array_agg(rn)),
      min(minute), CASE WHEN max(minute) - min(minute) + 1 <> count(*) THEN array_agg(minute) END,
      array_agg(count::integer),
      CASE WHEN NOT bool_and(live_count = count) THEN array_agg(live_count::integer) END,
      CASE WHEN count(sum) > 0 THEN array_agg(sum) END,
      CASE WHEN count(min) > 0 THEN array_agg(min) END,
      CASE WHEN count(max) > 0 THEN array_agg(max) END
    FROM (
      SELECT s.*, k.key AS point_key, row_number() OVER w AS rn,
             ((extract(epoch FROM s.bucket - $1) / 60)::integer)::smallint AS minute
      FROM sentinel_compact_rollup_stage s JOIN point_key k ON k.point_id = s.point_id
      WINDOW w AS (PARTITION BY k.key, s.retention_class ORDER BY s.bucket)
      ORDER BY k.key, s.retention_class, s.bucket) r
    GROUP BY point_key, retention_class
  $q$, packed) USING p_day;
  GET DIAGNOSTICS chunks = ROW_COUNT;
  DROP TABLE pg_temp.sentinel_compact_rollup_stage;
  bytes_after := pg_total_relation_size(hot) + pg_total_relation_size(packed);
  SELECT COALESCE(max(v.version), 0) INTO version FROM registry_version v;
  INSERT INTO control_event (occurred_at, kind, point_id, subject_key, principal, core_epoch, payload, registry_version)
    VALUES (p_now, 'compaction', NULL, 'rollup_1m', principal, epoch,
            jsonb_build_object('table', 'rollup_1m', 'day', to_char(p_day AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
              'buckets', buckets, 'chunks', chunks, 'bytes_before', bytes_before, 'bytes_after', bytes_after),
            version)
    RETURNING control_event.seq INTO seq;
END;
$$;

-- Retention of 0015, dropping a rollup_1m day's compacted partition and masks with its hot
-- partition (one mark, one event: the day is gone in both forms).
CREATE OR REPLACE FUNCTION sentinel_retention_drop(epoch integer, p_core_start bigint, tbl text, part_from timestamptz,
  kept_from timestamptz, principal text, occurred_at timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  part     text;
  packed   text;
  part_to  timestamptz;
  cls      text;
  version  integer;
  seq      bigint;
BEGIN
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
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
  -- Serialises drops with each other, with partition creation and with compaction.
  PERFORM pg_advisory_xact_lock(7310598112409645057);
  INSERT INTO retention_mark AS m (tbl, kept_from, core_epoch, updated_at)
    VALUES (tbl, part_to, epoch, now())
    ON CONFLICT ON CONSTRAINT retention_mark_pkey DO UPDATE SET kept_from = GREATEST(m.kept_from, EXCLUDED.kept_from),
      core_epoch = EXCLUDED.core_epoch, updated_at = EXCLUDED.updated_at;
  cls := CASE WHEN tbl LIKE 'observation_%' THEN substr(tbl, 13) END;
  IF cls IS NOT NULL OR tbl = 'rollup_1m' THEN
    packed := format('%s_compact_p%s', tbl, to_char(part_from AT TIME ZONE 'UTC', 'YYYYMMDD'));
    IF to_regclass(packed) IS NOT NULL THEN
      EXECUTE format('DROP TABLE %I', packed);
    END IF;
  END IF;
  IF tbl = 'rollup_1m' THEN
    DELETE FROM rollup_1m_compact_mask m WHERE m.day = part_from;
  END IF;
  IF to_regclass(part) IS NULL THEN
    RETURN NULL;
  END IF;
  EXECUTE format('DROP TABLE %I', part);
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

-- CREATE OR REPLACE resets these; their grants (ACLs) are kept.
ALTER FUNCTION sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_compact_rollup_day(integer, bigint, timestamptz, timestamptz, integer, text) SECURITY DEFINER;
ALTER FUNCTION sentinel_compact_rollup_day(integer, bigint, timestamptz, timestamptz, integer, text) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_compact_rollup_day(integer, bigint, timestamptz, timestamptz, integer, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION sentinel_compact_rollup_in_order(bigint, bigint[]) FROM PUBLIC;

-- Whoever reads the minute rollups reads the compacted ones, the masks and the views over
-- them; whoever may compact a raw day may compact a rollup day. So a database upgrades without
-- granting again.
DO $$
DECLARE
  grantee text;
BEGIN
  FOR grantee IN
    SELECT DISTINCT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a
    WHERE c.oid = 'rollup_1m'::regclass AND a.privilege_type = 'SELECT'
      AND a.grantee <> 0 AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT SELECT ON rollup_1m_compact, rollup_1m_compact_mask, rollup_1m_compacted, '
                   'rollup_1m_all TO %s', grantee);
  END LOOP;
  FOR grantee IN
    SELECT a.grantee::regrole::text FROM aclexplode((SELECT proacl FROM pg_proc
      WHERE oid = 'sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text)'::regprocedure)) a
    WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
      AND a.grantee <> (SELECT proowner FROM pg_proc WHERE oid = 'sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text)'::regprocedure)
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_compact_rollup_day(integer, bigint, timestamptz, '
                   'timestamptz, integer, text) TO %s', grantee);
  END LOOP;
END;
$$;

-- The grants list of 0015 with the compacted rollups, their views and their compaction.
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
                 'point_descriptor, point_key, instance_key TO %I', writer);
  EXECUTE format('GRANT SELECT, INSERT, UPDATE ON registry_version, point_state, core_start TO %I',
                 writer);
  EXECUTE format('GRANT SELECT, UPDATE ON core_epoch TO %I', writer);
  EXECUTE format('GRANT USAGE ON SEQUENCE control_event_seq_seq TO %I', writer);
  EXECUTE format('GRANT SELECT ON observation, observation_measurement_named, observation_state_named, '
                 'observation_diagnostic_named, _sqlx_migrations TO %I', writer);
  EXECUTE format('GRANT SELECT ON observation_measurement_compact, observation_state_compact, '
                 'observation_diagnostic_compact, observation_measurement_compacted, '
                 'observation_state_compacted, observation_diagnostic_compacted, observation_measurement_all, '
                 'observation_state_all, observation_diagnostic_all TO %I, %I', writer, reader);
  EXECUTE format('GRANT SELECT ON rollup_1m_compact, rollup_1m_compact_mask, rollup_1m_compacted, '
                 'rollup_1m_all TO %I, %I', writer, reader);
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_ensure_partitions(date, integer) TO %I', writer);
  EXECUTE format('GRANT SELECT ON rollup_1m, rollup_1h, rollup_1m_avg, rollup_1h_avg, '
                 'rollup_watermark, retention_mark TO %I', writer);
  EXECUTE format('GRANT EXECUTE ON FUNCTION '
                 'sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz), '
                 'sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer), '
                 'sentinel_rollup_apply(integer, bigint), '
                 'sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz), '
                 'sentinel_move_point_class(integer, bigint, text, text, text, timestamptz), '
                 'sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text), '
                 'sentinel_compact_rollup_day(integer, bigint, timestamptz, timestamptz, integer, text) TO %I', writer);

  EXECUTE format('GRANT SELECT ON observation_measurement, observation_state, observation_diagnostic, '
                 'observation, observation_measurement_named, observation_state_named, '
                 'observation_diagnostic_named, point_key, instance_key, '
                 'control_event, registry_version, descriptor_blob, point_descriptor, '
                 'point_state, core_epoch, core_start, _sqlx_migrations, rollup_1m, rollup_1h, '
                 'rollup_1m_avg, rollup_1h_avg, rollup_watermark, retention_mark TO %I', reader);
  EXECUTE format('GRANT SELECT (stream, stream_seq, ingested_at, subject, reason, detail, '
                 'payload_bytes, core_epoch, recorded_at) ON quarantine TO %I', reader);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_grants(text, text) FROM PUBLIC;
