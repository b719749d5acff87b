-- Rollups (ingest spec, "Retention and rollups" and "Reprocess"; DESIGN.md §3): the
-- continuous aggregates become two plain tables, 1 minute and 1 hour, each computed directly
-- from the raw class tables (never the hourly from the minutely: no refresh ordering for
-- reprocess to get right). Per point and bucket (by observed_at, UTC, date_bin from the epoch so
-- the session time zone never matters):
--   * count       every row, whatever its quality;
--   * live_count  rows whose quality is 'live';
--   * sum/min/max over the live rows' value_num, and only for points whose descriptor in the
--     newest registry version is agg_safe (otherwise NULL: counts only, enforced here, in the
--     refresh, not by callers).
-- No average column: `rollup_1m_avg` / `rollup_1h_avg` divide sum by live_count.
--
-- Freshness of the tables is tracked by `rollup_watermark`:
--   * every 1m bucket in [refreshed_from, refreshed_to) and every 1h bucket in that range whose
--     end is <= refreshed_to has been computed from the rows committed before the step that
--     moved refreshed_to, and
--   * every row committed later whose observed_at is below claimed_to (>= refreshed_to) leaves
--     its minute in `rollup_invalidation` (statement trigger on the class tables), which the next
--     step recomputes. So a late arrival is never silently outside a refreshed bucket.
-- A step is two transactions, so the one that commits must wait for is short:
--   sentinel_rollup_claim  moves claimed_to ahead and claims the invalidations present, under
--                          FOR UPDATE on the watermark row (commits' triggers hold FOR SHARE on
--                          it until they commit, so every row is either visible to the compute
--                          that follows or leaves an invalidation);
--   sentinel_rollup_apply  recomputes what was claimed and moves refreshed_to up to claimed_to.
-- A crash between the two leaves the claim in the row; the next step completes it first.
-- An on-demand refresh of a range (sentinel_rollup_refresh_range) recomputes whole buckets,
-- rounded outward, and moves neither mark: a row committed during it is covered by the marks.

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
);
CREATE INDEX rollup_1m_bucket ON rollup_1m (bucket);

CREATE TABLE rollup_1h (LIKE rollup_1m INCLUDING ALL);

-- The average, only as an expression over the stored sum and live_count.
CREATE VIEW rollup_1m_avg AS
  SELECT point_id, bucket, retention_class, count, live_count, sum, min, max,
         sum / NULLIF(live_count, 0) AS avg
  FROM rollup_1m;
CREATE VIEW rollup_1h_avg AS
  SELECT point_id, bucket, retention_class, count, live_count, sum, min, max,
         sum / NULLIF(live_count, 0) AS avg
  FROM rollup_1h;

CREATE TABLE rollup_watermark (
  singleton            boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
  refreshed_from       timestamptz,
  refreshed_to         timestamptz,
  claimed_to           timestamptz,
  claimed_invalidation bigint,        -- invalidations with id <= this belong to the open claim
  core_epoch           integer     NOT NULL DEFAULT 0,
  updated_at           timestamptz,
  CHECK (refreshed_to IS NULL OR (refreshed_from <= refreshed_to AND refreshed_to <= claimed_to))
);
INSERT INTO rollup_watermark (singleton) VALUES (true);

CREATE TABLE rollup_invalidation (
  id      bigserial   PRIMARY KEY,
  bucket  timestamptz NOT NULL          -- a 1-minute bucket start
);

-- Range scans by observed_at on tables partitioned by ingested_at: observed_at follows the
-- physical order closely (late rows only widen a block range), so a BRIN index is small and
-- nearly free to maintain on the insert path.
CREATE INDEX observation_measurement_observed_brin ON observation_measurement USING brin (observed_at);
CREATE INDEX observation_state_observed_brin ON observation_state USING brin (observed_at);
CREATE INDEX observation_diagnostic_observed_brin ON observation_diagnostic USING brin (observed_at);

-- The statement trigger: minutes of rows inserted below claimed_to. FOR SHARE holds the
-- watermark row until the inserting transaction ends (see the header).
CREATE FUNCTION sentinel_rollup_invalidate()
RETURNS trigger
LANGUAGE plpgsql
AS $$
DECLARE
  mark timestamptz;
BEGIN
  SELECT claimed_to INTO mark FROM rollup_watermark WHERE singleton FOR SHARE;
  -- Before the first step every row is invalidated: the first step recomputes them.
  INSERT INTO rollup_invalidation (bucket)
    SELECT DISTINCT date_bin('1 minute', observed_at, TIMESTAMPTZ '1970-01-01 00:00:00+00')
    FROM inserted_rows
    WHERE mark IS NULL OR observed_at < mark;
  RETURN NULL;
END;
$$;
ALTER FUNCTION sentinel_rollup_invalidate() SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_invalidate() SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_invalidate() FROM PUBLIC;

CREATE TRIGGER observation_measurement_rollup_invalidate AFTER INSERT ON observation_measurement
  REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION sentinel_rollup_invalidate();
CREATE TRIGGER observation_state_rollup_invalidate AFTER INSERT ON observation_state
  REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION sentinel_rollup_invalidate();
CREATE TRIGGER observation_diagnostic_rollup_invalidate AFTER INSERT ON observation_diagnostic
  REFERENCING NEW TABLE AS inserted_rows FOR EACH STATEMENT EXECUTE FUNCTION sentinel_rollup_invalidate();

-- Raises unless `epoch` is the current core epoch (the fence every write transaction checks).
CREATE FUNCTION sentinel_rollup_fence(epoch integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
  current integer;
BEGIN
  SELECT e.epoch INTO current FROM core_epoch e WHERE singleton FOR SHARE;
  IF current IS DISTINCT FROM epoch THEN
    RAISE EXCEPTION 'sentinel fenced: epoch % is not the current epoch %', epoch, current
      USING ERRCODE = 'SN001';
  END IF;
END;
$$;

-- Recomputes the buckets of one grain ('1m' or '1h') in [from_ts, to_ts), both already on
-- bucket boundaries: deletes what is there and inserts the aggregate of the raw rows. Returns
-- the number of buckets (point × bucket) written. Idempotent.
CREATE FUNCTION sentinel_rollup_recompute(grain text, from_ts timestamptz, to_ts timestamptz)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  tbl      text;
  width    interval;
  written  bigint;
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
  EXECUTE format('DELETE FROM %I WHERE bucket >= $1 AND bucket < $2', tbl) USING from_ts, to_ts;
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
        FROM observation_measurement WHERE observed_at >= $1 AND observed_at < $2
      UNION ALL
      SELECT 'state', point_id, observed_at, quality, value_num
        FROM observation_state WHERE observed_at >= $1 AND observed_at < $2
      UNION ALL
      SELECT 'diagnostic', point_id, observed_at, quality, value_num
        FROM observation_diagnostic WHERE observed_at >= $1 AND observed_at < $2
    ),
    agg AS (
      SELECT point_id,
             date_bin($3, observed_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS bucket,
             -- The class is the newest registry version's; a point it does not name keeps
             -- the first of its rows' class names (a point lives in one table).
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
  $q$, tbl) USING from_ts, to_ts, width;
  GET DIAGNOSTICS written = ROW_COUNT;
  RETURN written;
END;
$$;

-- On demand (`sentinel rollup refresh`, reprocess, a class change): both grains over
-- [from_ts, to_ts), each rounded outward to its own bucket boundaries, fenced on `epoch`.
-- At most 400 days per call. Returns the rounded ranges and the buckets written.
CREATE FUNCTION sentinel_rollup_refresh_range(epoch integer, from_ts timestamptz, to_ts timestamptz,
  OUT from_1m timestamptz, OUT to_1m timestamptz, OUT buckets_1m bigint,
  OUT from_1h timestamptz, OUT to_1h timestamptz, OUT buckets_1h bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  origin constant timestamptz := TIMESTAMPTZ '1970-01-01 00:00:00+00';
BEGIN
  PERFORM sentinel_rollup_fence(epoch);
  IF from_ts IS NULL OR to_ts IS NULL OR from_ts >= to_ts OR to_ts - from_ts > interval '400 days' THEN
    RAISE EXCEPTION 'sentinel_rollup_refresh_range: [%, %) must be non-empty and at most 400 days', from_ts, to_ts;
  END IF;
  from_1m := date_bin('1 minute', from_ts, origin);
  to_1m := date_bin('1 minute', to_ts, origin);
  IF to_1m < to_ts THEN to_1m := to_1m + interval '1 minute'; END IF;
  from_1h := date_bin('1 hour', from_ts, origin);
  to_1h := date_bin('1 hour', to_ts, origin);
  IF to_1h < to_ts THEN to_1h := to_1h + interval '1 hour'; END IF;
  buckets_1m := sentinel_rollup_recompute('1m', from_1m, to_1m);
  buckets_1h := sentinel_rollup_recompute('1h', from_1h, to_1h);
END;
$$;

-- The first half of the running core's step: claims [refreshed_to, claimed_to) with
-- claimed_to <= closed_before (a minute boundary) and at most step_minutes past refreshed_to,
-- and at most invalidations_max invalidations. An unfinished claim (a crash between the two
-- halves) is kept as it is. The first claim ever starts the marks at closed_before and claims
-- the invalidations every row committed before it left; rows from before this migration are
-- history, refreshed on demand (`sentinel rollup refresh`).
CREATE FUNCTION sentinel_rollup_claim(epoch integer, closed_before timestamptz, step_minutes integer,
  invalidations_max integer)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
  origin constant timestamptz := TIMESTAMPTZ '1970-01-01 00:00:00+00';
  w        rollup_watermark%ROWTYPE;
  closed   timestamptz := date_bin('1 minute', closed_before, origin);
  last_id  bigint;
BEGIN
  IF step_minutes IS NULL OR step_minutes < 1 OR step_minutes > 1440
     OR invalidations_max IS NULL OR invalidations_max < 1 OR invalidations_max > 100000 THEN
    RAISE EXCEPTION 'sentinel_rollup_claim: step_minutes within 1..1440, invalidations_max within 1..100000';
  END IF;
  PERFORM sentinel_rollup_fence(epoch);
  SELECT * INTO w FROM rollup_watermark WHERE singleton FOR UPDATE;
  IF w.claimed_to IS NOT NULL AND (w.claimed_to > w.refreshed_to OR w.claimed_invalidation IS NOT NULL) THEN
    RETURN;   -- finish the open claim first
  END IF;
  SELECT id INTO last_id FROM (
    SELECT id FROM rollup_invalidation ORDER BY id LIMIT invalidations_max) first_ids
    ORDER BY id DESC LIMIT 1;
  IF w.claimed_to IS NULL THEN
    UPDATE rollup_watermark SET refreshed_from = closed, refreshed_to = closed, claimed_to = closed,
      claimed_invalidation = last_id, core_epoch = epoch, updated_at = now() WHERE singleton;
    RETURN;
  END IF;
  UPDATE rollup_watermark
    SET claimed_to = GREATEST(w.refreshed_to,
                              LEAST(closed, w.refreshed_to + make_interval(mins => step_minutes))),
        claimed_invalidation = last_id, core_epoch = epoch, updated_at = now()
    WHERE singleton;
END;
$$;

-- The second half: recomputes the claim. 1m buckets over [refreshed_to, claimed_to) and the
-- minutes of claimed invalidations; 1h buckets that closed in (refreshed_to, claimed_to] and
-- the closed hours of claimed invalidations (an open hour is recomputed when it closes). Then
-- refreshed_to := claimed_to and the claimed invalidations go. Returns what it did; `more`
-- says whether a next step has work already (further invalidations).
CREATE FUNCTION sentinel_rollup_apply(epoch integer,
  OUT refreshed_from timestamptz, OUT refreshed_to timestamptz,
  OUT minutes_advanced integer, OUT invalidated_minutes integer, OUT buckets_written bigint,
  OUT more boolean)
LANGUAGE plpgsql
AS $$
DECLARE
  origin constant timestamptz := TIMESTAMPTZ '1970-01-01 00:00:00+00';
  w        rollup_watermark%ROWTYPE;
  from_h   timestamptz;
  to_h     timestamptz;
  minute   timestamptz;
  hour     timestamptz;
BEGIN
  PERFORM sentinel_rollup_fence(epoch);
  -- Serialises steps (a single writer runs them, but a step must never interleave with itself).
  PERFORM pg_advisory_xact_lock(7310598112409645058);
  SELECT * INTO w FROM rollup_watermark WHERE singleton;
  buckets_written := 0;
  minutes_advanced := 0;
  invalidated_minutes := 0;
  IF w.claimed_to IS NOT NULL AND w.claimed_to > w.refreshed_to THEN
    minutes_advanced := (extract(epoch FROM w.claimed_to - w.refreshed_to) / 60)::integer;
    buckets_written := buckets_written + sentinel_rollup_recompute('1m', w.refreshed_to, w.claimed_to);
    from_h := date_bin('1 hour', w.refreshed_to, origin);
    to_h := date_bin('1 hour', w.claimed_to, origin);
    IF from_h < to_h THEN
      buckets_written := buckets_written + sentinel_rollup_recompute('1h', from_h, to_h);
    END IF;
  END IF;
  IF w.claimed_invalidation IS NOT NULL THEN
    FOR minute IN SELECT DISTINCT i.bucket FROM rollup_invalidation i
                  WHERE i.id <= w.claimed_invalidation ORDER BY 1 LOOP
      invalidated_minutes := invalidated_minutes + 1;
      -- Minutes inside the range just advanced were recomputed above.
      IF NOT (minute >= w.refreshed_to AND minute < w.claimed_to) THEN
        buckets_written := buckets_written
          + sentinel_rollup_recompute('1m', minute, minute + interval '1 minute');
      END IF;
    END LOOP;
    FOR hour IN SELECT DISTINCT date_bin('1 hour', i.bucket, origin) FROM rollup_invalidation i
                WHERE i.id <= w.claimed_invalidation ORDER BY 1 LOOP
      IF hour + interval '1 hour' <= w.claimed_to
         AND NOT (from_h IS NOT NULL AND hour >= from_h AND hour < to_h) THEN
        buckets_written := buckets_written
          + sentinel_rollup_recompute('1h', hour, hour + interval '1 hour');
      END IF;
    END LOOP;
    DELETE FROM rollup_invalidation i WHERE i.id <= w.claimed_invalidation;
  END IF;
  UPDATE rollup_watermark u
    SET refreshed_to = u.claimed_to, claimed_invalidation = NULL, core_epoch = epoch, updated_at = now()
    WHERE singleton
    RETURNING u.refreshed_from, u.refreshed_to INTO refreshed_from, refreshed_to;
  more := EXISTS (SELECT 1 FROM rollup_invalidation);
END;
$$;

-- Every function above runs with its owner's rights and a pinned search path: the writer
-- refreshes rollups only through them and holds no DELETE on any table.
ALTER FUNCTION sentinel_rollup_fence(integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_fence(integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_fence(integer) FROM PUBLIC;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) FROM PUBLIC;
ALTER FUNCTION sentinel_rollup_refresh_range(integer, timestamptz, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_refresh_range(integer, timestamptz, timestamptz) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_refresh_range(integer, timestamptz, timestamptz) FROM PUBLIC;
ALTER FUNCTION sentinel_rollup_claim(integer, timestamptz, integer, integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_claim(integer, timestamptz, integer, integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_claim(integer, timestamptz, integer, integer) FROM PUBLIC;
ALTER FUNCTION sentinel_rollup_apply(integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_apply(integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_apply(integer) FROM PUBLIC;

-- The grants list of 0003, with the rollups added:
--   * writer: SELECT on the rollup tables, views and watermark; EXECUTE on refresh_range,
--     claim and apply (no INSERT, UPDATE or DELETE on any rollup table: only the functions
--     write them);
--   * reader: SELECT on the rollup tables, their average views and the watermark.
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
                 'rollup_watermark TO %I', writer);
  EXECUTE format('GRANT EXECUTE ON FUNCTION '
                 'sentinel_rollup_refresh_range(integer, timestamptz, timestamptz), '
                 'sentinel_rollup_claim(integer, timestamptz, integer, integer), '
                 'sentinel_rollup_apply(integer) TO %I', writer);

  EXECUTE format('GRANT SELECT ON observation_measurement, observation_state, observation_diagnostic, '
                 'observation, control_event, registry_version, descriptor_blob, point_descriptor, '
                 'point_state, core_epoch, core_start, _sqlx_migrations, rollup_1m, rollup_1h, '
                 'rollup_1m_avg, rollup_1h_avg, rollup_watermark TO %I', reader);
  EXECUTE format('GRANT SELECT (stream, stream_seq, ingested_at, subject, reason, detail, '
                 'payload_bytes, core_epoch, recorded_at) ON quarantine TO %I', reader);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_grants(text, text) FROM PUBLIC;
