-- Sentinel schema, version 13: every write is fenced on (epoch, start identity) (issue 25 item 3).
--
-- An epoch can repeat after a PostgreSQL failover that lost the last commits: the new primary
-- never saw the acquisition's increment, so the next core takes the same epoch N again. The
-- bus tells the two starts apart by their start identities (0012); the store did not, so a
-- deposed core of the lost epoch N whose pool reconnected to the new primary passed the fence
-- `epoch = N` until its own lock check ended it. Now the acquisition records its start
-- identity in `core_epoch` beside the epoch (and in its `core_start` row), and every fenced
-- write names both: a write whose identity is not the holder's is refused like a stale epoch.
--
-- A database migrated from an earlier version keeps its epoch with no identity (NULL) until
-- the next acquisition sets one; a NULL identity matches no writer, so nothing fenced is
-- written in between (no core runs then: the migration runs under the lock, before the
-- acquisition). The epoch raise (`Store::raise_epoch`) keeps the identity: the holder stays
-- the same start at the raised epoch, and is fenced there by the next acquisition.
ALTER TABLE core_epoch
  ADD COLUMN core_start bigint CHECK (core_start IS NULL OR core_start BETWEEN 1 AND 9007199254740991);

-- The fence every SQL function takes: raises SN001 unless (epoch, p_core_start) is the holder's.
-- Replaces the epoch-only `sentinel_rollup_fence(integer)`, dropped below with its callers.
CREATE FUNCTION sentinel_rollup_fence(epoch integer, p_core_start bigint)
RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
  current       integer;
  current_start bigint;
BEGIN
  SELECT e.epoch, e.core_start INTO current, current_start FROM core_epoch e WHERE singleton FOR SHARE;
  IF current IS DISTINCT FROM epoch OR current_start IS NULL OR current_start IS DISTINCT FROM p_core_start THEN
    RAISE EXCEPTION 'sentinel fenced: epoch % start % is not the holder (epoch % start %)',
      epoch, p_core_start, current, current_start
      USING ERRCODE = 'SN001';
  END IF;
END;
$$;
ALTER FUNCTION sentinel_rollup_fence(integer, bigint) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_fence(integer, bigint) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_fence(integer, bigint) FROM PUBLIC;

-- The fenced functions of 0004–0006 again, each taking the caller's start identity second and
-- fencing on both; their bodies are otherwise those of the migrations that created them.

CREATE FUNCTION sentinel_rollup_refresh_range(epoch integer, p_core_start bigint, from_ts timestamptz, to_ts timestamptz,
  OUT from_1m timestamptz, OUT to_1m timestamptz, OUT buckets_1m bigint,
  OUT from_1h timestamptz, OUT to_1h timestamptz, OUT buckets_1h bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  origin constant timestamptz := TIMESTAMPTZ '1970-01-01 00:00:00+00';
BEGIN
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
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

CREATE FUNCTION sentinel_rollup_claim(epoch integer, p_core_start bigint, closed_before timestamptz, step_minutes integer,
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
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
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

CREATE FUNCTION sentinel_rollup_apply(epoch integer, p_core_start bigint,
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
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
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

CREATE FUNCTION sentinel_retention_drop(epoch integer, p_core_start bigint, tbl text, part_from timestamptz,
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

CREATE FUNCTION sentinel_move_point_class(epoch integer, p_core_start bigint, point text, to_class text,
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
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
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

CREATE FUNCTION sentinel_reprocess_apply(p_epoch integer, p_core_start bigint, p_class text, p_instances text[],
  p_epochs integer[], p_seqs bigint[], p_ingested timestamptz[], p_value_num float8[],
  p_value_bool boolean[], p_value_text text[], p_native_fill text[], p_qualities text[],
  p_reasons text[], p_version integer)
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  origin constant timestamptz := TIMESTAMPTZ '1970-01-01 00:00:00+00';
  updated bigint;
  mark    timestamptz;
BEGIN
  PERFORM sentinel_rollup_fence(p_epoch, p_core_start);
  SELECT claimed_to INTO mark FROM rollup_watermark WHERE singleton FOR SHARE;
  IF p_class = 'measurement' THEN
    WITH changed AS (
      UPDATE observation_measurement o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = p_version
      FROM unnest(p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
                  p_native_fill, p_qualities, p_reasons) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
      WHERE o.driver_instance = u.di AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, origin) FROM changed
        WHERE mark IS NULL OR observed_at < mark
    )
    SELECT count(*) INTO updated FROM changed;
  ELSIF p_class = 'state' THEN
    WITH changed AS (
      UPDATE observation_state o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = p_version
      FROM unnest(p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
                  p_native_fill, p_qualities, p_reasons) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
      WHERE o.driver_instance = u.di AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, origin) FROM changed
        WHERE mark IS NULL OR observed_at < mark
    )
    SELECT count(*) INTO updated FROM changed;
  ELSIF p_class = 'diagnostic' THEN
    WITH changed AS (
      UPDATE observation_diagnostic o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = p_version
      FROM unnest(p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
                  p_native_fill, p_qualities, p_reasons) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
      WHERE o.driver_instance = u.di AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, origin) FROM changed
        WHERE mark IS NULL OR observed_at < mark
    )
    SELECT count(*) INTO updated FROM changed;
  ELSE
    RAISE EXCEPTION 'sentinel_reprocess_apply: unknown retention class %', p_class;
  END IF;
  RETURN updated;
END;
$$;

-- As 0004–0006 gave the functions they replace: the owner's rights and a pinned search path.
ALTER FUNCTION sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz) FROM PUBLIC;
ALTER FUNCTION sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer) FROM PUBLIC;
ALTER FUNCTION sentinel_rollup_apply(integer, bigint) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_apply(integer, bigint) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_rollup_apply(integer, bigint) FROM PUBLIC;
ALTER FUNCTION sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz) FROM PUBLIC;
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) FROM PUBLIC;
ALTER FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer) FROM PUBLIC;

-- Whoever could execute an epoch-only function (the writer role, granted by `sentinel db
-- grants`) may execute its replacement, so a database upgrades without granting again; then
-- the epoch-only functions go, and with them every way to write fenced on the epoch alone.
DO $$
DECLARE
  pair    record;
  grantee text;
BEGIN
  FOR pair IN SELECT * FROM (VALUES
    ('sentinel_rollup_refresh_range(integer, timestamptz, timestamptz)', 'sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz)'),
    ('sentinel_rollup_claim(integer, timestamptz, integer, integer)', 'sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer)'),
    ('sentinel_rollup_apply(integer)', 'sentinel_rollup_apply(integer, bigint)'),
    ('sentinel_retention_drop(integer, text, timestamptz, timestamptz, text, timestamptz)', 'sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz)'),
    ('sentinel_move_point_class(integer, text, text, text, timestamptz)', 'sentinel_move_point_class(integer, bigint, text, text, text, timestamptz)'),
    ('sentinel_reprocess_apply(integer, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer)', 'sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer)')
  ) AS t(old_fn, new_fn) LOOP
    FOR grantee IN
      SELECT a.grantee::regrole::text FROM aclexplode((SELECT proacl FROM pg_proc
        WHERE oid = pair.old_fn::regprocedure)) a
      WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
        AND a.grantee <> (SELECT proowner FROM pg_proc WHERE oid = pair.old_fn::regprocedure)
    LOOP
      EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', pair.new_fn, grantee);
    END LOOP;
  END LOOP;
END;
$$;
DROP FUNCTION sentinel_rollup_refresh_range(integer, timestamptz, timestamptz);
DROP FUNCTION sentinel_rollup_claim(integer, timestamptz, integer, integer);
DROP FUNCTION sentinel_rollup_apply(integer);
DROP FUNCTION sentinel_retention_drop(integer, text, timestamptz, timestamptz, text, timestamptz);
DROP FUNCTION sentinel_move_point_class(integer, text, text, text, timestamptz);
DROP FUNCTION sentinel_reprocess_apply(integer, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer);
DROP FUNCTION sentinel_rollup_fence(integer);

-- The grants list of 0005 with the new signatures.
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
                 'sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz), '
                 'sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer), '
                 'sentinel_rollup_apply(integer, bigint), '
                 'sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz), '
                 'sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) TO %I', writer);

  EXECUTE format('GRANT SELECT ON observation_measurement, observation_state, observation_diagnostic, '
                 'observation, control_event, registry_version, descriptor_blob, point_descriptor, '
                 'point_state, core_epoch, core_start, _sqlx_migrations, rollup_1m, rollup_1h, '
                 'rollup_1m_avg, rollup_1h_avg, rollup_watermark, retention_mark TO %I', reader);
  EXECUTE format('GRANT SELECT (stream, stream_seq, ingested_at, subject, reason, detail, '
                 'payload_bytes, core_epoch, recorded_at) ON quarantine TO %I', reader);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_grants(text, text) FROM PUBLIC;

-- The reprocess grant of 0006 with the new signature.
CREATE OR REPLACE FUNCTION sentinel_apply_reprocess_grants(writer text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], '
    'integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], '
    'integer) TO %I', writer);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_reprocess_grants(text) FROM PUBLIC;
