-- Sentinel schema, version 14: points and driver instances are small integer keys in the raw
-- rows and their indexes (issue 24 item 1, first half; BENCHMARKS.md "A raw row's bytes").
--
-- A raw row carried its point id (~29 B) and its driver instance (~18 B) as text, in the heap
-- and again in the point index `(point_id, observed_at DESC)` and the unique dedup index
-- `(driver_instance, source_epoch, source_seq, ingested_at)`. Now the three class tables carry
-- `point_key` and `instance_key` (integer), keyed by two registry-owned mappings:
--   * `point_key (point_id, key)` and `instance_key (driver_instance, key)`: a key is assigned
--     once (an identity, so never reused) and never deleted, updated or reassigned: a point
--     removed from the registry and added back keeps its key, a new point gets a new one.
--   * Keys are assigned when a registry version is stored (`Store::store_registry`: every point
--     of the version and every driver instance its assignments name), so a row of a point the
--     registry names finds its keys there (a row whose point the registry does not name is
--     quarantined by stage 5). The store binds a batch's keys from a cache it fills from these
--     tables, and assigns a key itself only to an id that has none (a caller that stored no
--     registry, as the store tests do), in a statement of its own before the commit.
--   * The text ids are read back by joining the mapping: `observation_<class>_named` (each class
--     table with `point_id` and `driver_instance` beside the keys, for the store's reads) and the
--     `observation` view, whose columns are exactly those it had, so ad-hoc SQL reads as before.
--   * The SQL functions that read or write the raw rows (the rollup recompute, the class move,
--     reprocess) use the keys; their signatures do not change.
--
-- The upgrade of a populated database rewrites each class table once (ALTER COLUMN ... TYPE
-- with the key looked up per row) and rebuilds its indexes, under the single-writer lock
-- `sentinel migrate` holds; its time per GB of raw table is measured in BENCHMARKS.md
-- ("Integer ids"). A row whose id has no key would fail the NOT NULL of its column and abort the
-- migration: every id of every row, every registry version and every checkpoint gets one first.

CREATE TABLE point_key (
  point_id  text     PRIMARY KEY,
  key       integer  GENERATED ALWAYS AS IDENTITY UNIQUE NOT NULL
);
CREATE TABLE instance_key (
  driver_instance  text     PRIMARY KEY,
  key              integer  GENERATED ALWAYS AS IDENTITY UNIQUE NOT NULL
);

-- Every id already known, in a stable order (so a fresh upgrade of the same data assigns the
-- same keys): the registry's points, the checkpoint's, the raw rows'.
INSERT INTO point_key (point_id)
  SELECT point_id FROM (
    SELECT point_id FROM point_descriptor
    UNION SELECT point_id FROM point_state
    UNION SELECT point_id FROM observation_measurement
    UNION SELECT point_id FROM observation_state
    UNION SELECT point_id FROM observation_diagnostic) ids
  ORDER BY point_id COLLATE "C";
INSERT INTO instance_key (driver_instance)
  SELECT driver_instance FROM (
    SELECT b.descriptor -> 'assignment' ->> 'driver_instance' AS driver_instance
      FROM descriptor_blob b
    UNION SELECT driver_instance FROM point_state
    UNION SELECT driver_instance FROM observation_measurement
    UNION SELECT driver_instance FROM observation_state
    UNION SELECT driver_instance FROM observation_diagnostic) ids
  WHERE driver_instance IS NOT NULL
  ORDER BY driver_instance COLLATE "C";

-- The `observation` view depends on the text columns; it is emptied (same columns, so its
-- grants stay) while they change type, and defined again below.
CREATE OR REPLACE VIEW observation AS
  SELECT NULL::text AS retention_class, NULL::timestamptz AS ingested_at, NULL::text AS point_id,
         NULL::timestamptz AS observed_at, NULL::timestamptz AS device_time,
         NULL::double precision AS value_num, NULL::boolean AS value_bool, NULL::text AS value_text,
         NULL::double precision AS native_num, NULL::text AS native_text, NULL::text AS unit_native,
         NULL::quality AS quality, NULL::text AS reason, NULL::jsonb AS detail,
         NULL::boolean AS changed, NULL::integer AS registry_version, NULL::text AS driver_instance,
         NULL::integer AS source_epoch, NULL::bigint AS source_seq, NULL::boolean AS skew_flagged
  WHERE false;

-- The lookups the rewrite calls once per row (dropped at the end of this migration).
CREATE FUNCTION sentinel_0014_point_key(id text) RETURNS integer
  LANGUAGE sql STABLE STRICT AS $$ SELECT key FROM point_key WHERE point_id = id $$;
CREATE FUNCTION sentinel_0014_instance_key(id text) RETURNS integer
  LANGUAGE sql STABLE STRICT AS $$ SELECT key FROM instance_key WHERE driver_instance = id $$;

-- One rewrite per table (both columns in one ALTER); the unique key and point indexes are
-- rebuilt on the integer columns under their names.
ALTER TABLE observation_measurement
  ALTER COLUMN point_id TYPE integer USING sentinel_0014_point_key(point_id),
  ALTER COLUMN driver_instance TYPE integer USING sentinel_0014_instance_key(driver_instance);
ALTER TABLE observation_state
  ALTER COLUMN point_id TYPE integer USING sentinel_0014_point_key(point_id),
  ALTER COLUMN driver_instance TYPE integer USING sentinel_0014_instance_key(driver_instance);
ALTER TABLE observation_diagnostic
  ALTER COLUMN point_id TYPE integer USING sentinel_0014_point_key(point_id),
  ALTER COLUMN driver_instance TYPE integer USING sentinel_0014_instance_key(driver_instance);
ALTER TABLE observation_measurement RENAME COLUMN point_id TO point_key;
ALTER TABLE observation_measurement RENAME COLUMN driver_instance TO instance_key;
ALTER TABLE observation_state RENAME COLUMN point_id TO point_key;
ALTER TABLE observation_state RENAME COLUMN driver_instance TO instance_key;
ALTER TABLE observation_diagnostic RENAME COLUMN point_id TO point_key;
ALTER TABLE observation_diagnostic RENAME COLUMN driver_instance TO instance_key;
DROP FUNCTION sentinel_0014_point_key(text);
DROP FUNCTION sentinel_0014_instance_key(text);

-- Each class table with its text ids (LEFT JOINs on unique keys: a query that names neither
-- id joins nothing). The store's reads go through these; its writes go to the tables.
CREATE VIEW observation_measurement_named AS
  SELECT o.*, p.point_id, i.driver_instance FROM observation_measurement o
    LEFT JOIN point_key p ON p.key = o.point_key LEFT JOIN instance_key i ON i.key = o.instance_key;
CREATE VIEW observation_state_named AS
  SELECT o.*, p.point_id, i.driver_instance FROM observation_state o
    LEFT JOIN point_key p ON p.key = o.point_key LEFT JOIN instance_key i ON i.key = o.instance_key;
CREATE VIEW observation_diagnostic_named AS
  SELECT o.*, p.point_id, i.driver_instance FROM observation_diagnostic o
    LEFT JOIN point_key p ON p.key = o.point_key LEFT JOIN instance_key i ON i.key = o.instance_key;

-- For ad-hoc querying only, with the columns it always had.
CREATE OR REPLACE VIEW observation AS
  SELECT 'measurement'::text AS retention_class, ingested_at, point_id, observed_at, device_time,
         value_num, value_bool, value_text, native_num, native_text, unit_native, quality, reason,
         detail, changed, registry_version, driver_instance, source_epoch, source_seq, skew_flagged
    FROM observation_measurement_named
  UNION ALL
  SELECT 'state'::text, ingested_at, point_id, observed_at, device_time,
         value_num, value_bool, value_text, native_num, native_text, unit_native, quality, reason,
         detail, changed, registry_version, driver_instance, source_epoch, source_seq, skew_flagged
    FROM observation_state_named
  UNION ALL
  SELECT 'diagnostic'::text, ingested_at, point_id, observed_at, device_time,
         value_num, value_bool, value_text, native_num, native_text, unit_native, quality, reason,
         detail, changed, registry_version, driver_instance, source_epoch, source_seq, skew_flagged
    FROM observation_diagnostic_named;

-- The rollup recompute of 0005, aggregating per point key and naming the point after the
-- aggregation (the rollup tables keep text ids).
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
      SELECT 'measurement'::text AS cls, point_key, observed_at, quality, value_num
        FROM observation_measurement WHERE observed_at >= GREATEST($1, $4) AND observed_at < $2
      UNION ALL
      SELECT 'state', point_key, observed_at, quality, value_num
        FROM observation_state WHERE observed_at >= GREATEST($1, $5) AND observed_at < $2
      UNION ALL
      SELECT 'diagnostic', point_key, observed_at, quality, value_num
        FROM observation_diagnostic WHERE observed_at >= GREATEST($1, $6) AND observed_at < $2
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

-- The class move of 0013, selecting the point's rows by its key.
CREATE OR REPLACE FUNCTION sentinel_move_point_class(epoch integer, p_core_start bigint, point text, to_class text,
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
  pkey      integer;
BEGIN
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
  IF to_class IS NULL OR to_class NOT IN ('measurement', 'state', 'diagnostic') THEN
    RAISE EXCEPTION 'sentinel_move_point_class: unknown retention class %', to_class;
  END IF;
  moved := 0;
  SELECT k.key INTO pkey FROM point_key k WHERE k.point_id = point;
  IF pkey IS NULL THEN
    RETURN;   -- a point with no key has no rows
  END IF;
  FOREACH cls IN ARRAY ARRAY['measurement', 'state', 'diagnostic'] LOOP
    CONTINUE WHEN cls = to_class;
    EXECUTE format('SELECT count(*), min(ingested_at), max(ingested_at), min(observed_at), max(observed_at) '
                   'FROM %I WHERE point_key = $1', 'observation_' || cls)
      INTO n, lo_ing, hi_ing, lo_obs, hi_obs USING pkey;
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
    EXECUTE format('WITH gone AS (DELETE FROM %I WHERE point_key = $1 RETURNING *) '
                   'INSERT INTO %I SELECT * FROM gone', 'observation_' || cls, target) USING pkey;
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

-- Reprocess of 0013: the callers still address rows by their driver instance's text; the
-- update joins it to its key.
CREATE OR REPLACE FUNCTION sentinel_reprocess_apply(p_epoch integer, p_core_start bigint, p_class text, p_instances text[],
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
        JOIN instance_key i ON i.driver_instance = u.di
      WHERE o.instance_key = i.key AND o.source_epoch = u.se AND o.source_seq = u.ss
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
        JOIN instance_key i ON i.driver_instance = u.di
      WHERE o.instance_key = i.key AND o.source_epoch = u.se AND o.source_seq = u.ss
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
        JOIN instance_key i ON i.driver_instance = u.di
      WHERE o.instance_key = i.key AND o.source_epoch = u.se AND o.source_seq = u.ss
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

-- CREATE OR REPLACE resets these; their grants (ACLs) are kept.
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer) SECURITY DEFINER;
ALTER FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer) SET search_path FROM CURRENT;

-- Whoever reads the raw tables reads the mappings and the named views; whoever inserts raw rows
-- (the writer) may add a key (commit, registry load), never change or delete one. So a
-- database upgrades without granting again.
DO $$
DECLARE
  grantee text;
BEGIN
  FOR grantee IN
    SELECT DISTINCT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a
    WHERE c.oid = 'observation_measurement'::regclass AND a.privilege_type = 'SELECT'
      AND a.grantee <> 0 AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT SELECT ON point_key, instance_key, observation_measurement_named, '
                   'observation_state_named, observation_diagnostic_named TO %s', grantee);
  END LOOP;
  FOR grantee IN
    SELECT DISTINCT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a
    WHERE c.oid = 'observation_measurement'::regclass AND a.privilege_type = 'INSERT'
      AND a.grantee <> 0 AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT INSERT ON point_key, instance_key TO %s', grantee);
  END LOOP;
END;
$$;

-- The grants list of 0013 with the mappings and the named views.
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
