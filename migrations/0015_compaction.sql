-- Sentinel schema, version 15: compacted closed days (issue 24 item 1, second half, and item 2;
-- ingest spec, "Reprocess": "decompress-update-recompress"; core runtime spec, "~40 GB rolling
-- under a 90-day retention with compression from day seven"; BENCHMARKS.md "Compacted days").
--
-- A closed day of a class table, once old enough and out of the stream's reach, is compacted:
-- its rows move from the hot daily partition `observation_<class>_pYYYYMMDD` (left empty, so the
-- day's hot indexes cost nothing) into `observation_<class>_compact_pYYYYMMDD`, one partition per
-- day, so retention stays a partition drop (it drops both). A compacted row is one *chunk*: the
-- rows of one (point, driver instance, source epoch) observed in one hour, column by column, in
-- the invariant-5 order `(observed_at, ingested_at, source_seq)`:
--   * `observed_d`: microseconds, the first from the chunk's hour, each next from the previous
--     (delta-encoded; a periodic point's deltas repeat); `ingested_lag`: `ingested_at −
--     observed_at`; `device_lag`: `device_time − observed_at`; `seq_d`: the source seq, the
--     first whole, each next from the previous;
--   * every other column as an array of its own type, NULL as a whole when every element is
--     NULL;
--   * each chunk stores a column in the narrowest form that holds every one of its rows
--     exactly, checked bit for bit at encode (`sentinel_compact_encode` says how), else whole:
--     the deltas and lags as int4 (`observed_d4`, `ingested_lag4`) when they fit, else int8;
--     the values as integers (`value_dec`) times `value_div` = 10^places when every value is
--     a decimal of at most four places, else `value_num`; `native_num` not at all when it is
--     `value_num` (`native_is_value`, no conversion, the common case) or `value_num × scale +
--     offset` (`native_scale`, `native_offset`: a unit conversion, 1.8 and 32) row for row,
--     else as integers (`native_dec`) times `native_div` when every native is a decimal of at
--     most four places (a converted point: the core computes the value from the device's
--     clean decimal, `native × 0.5555555555555556 + -17.77777777777778`, so the value is no
--     decimal and native is no affine map of it that survives rounding), else `native_num`.
--     lz4 finds little to squeeze in random int8 microseconds or float8 decimals, so the
--     narrow forms are what shrink a jittered day: 24.6 B an observation whole, 16.9 B with
--     them; a converted jittered day 21.5 B with native whole, 20.8 B with it as decimals,
--     its float8 values now the wide column (BENCHMARKS.md "Compacted days");
--   * the arrays are compressed by TOAST with lz4 (`toast_tuple_target = 128`, so every array
--     past a few dozen bytes is compressed, not only the largest few).
-- Nothing is lost: every column of the hot row is a column or an element here, `applied`
-- included. The dedup key (instance, epoch, seq, ingested_at) is decoded, not indexed: a day is
-- refused for compaction while the stream may still hold a message ingested on it, so no
-- redelivery ever needs the unique index to see a compacted key.
--
-- Reads: `observation_<class>_all` is the hot table and the decoded chunks (the hot table's
-- columns, in its order, plus `obs_hour`, the hour bucket of `observed_at`: a stored column of a
-- chunk, so a read that also bounds `obs_hour` touches only the chunks it needs). The store's
-- reads, the `_named` views (and so the `observation` view), the rollup recompute, the class
-- move and reprocess all read through it. Writes: `sentinel_compact_day` (fenced, one
-- transaction, one `compaction` control event); reprocess updates a compacted row by decoding
-- its chunk, updating, and encoding it again; a class move takes a point's chunks out with its
-- hot rows.

-- Microseconds of an interval, exactly (extract returns numeric).
CREATE FUNCTION sentinel_us(x interval) RETURNS bigint
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ SELECT (extract(epoch FROM x) * 1000000)::bigint $$;

-- The running sums of a delta-encoded array (the decoder of `observed_d` and `seq_d`).
CREATE FUNCTION sentinel_undelta(d bigint[]) RETURNS bigint[]
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT array_agg(s ORDER BY i) FROM (
    SELECT i, sum(x) OVER (ORDER BY i) AS s FROM unnest(d) WITH ORDINALITY AS u(x, i)) q
$$;
CREATE FUNCTION sentinel_undelta(d integer[]) RETURNS bigint[]
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT array_agg(s ORDER BY i) FROM (
    SELECT i, sum(x) OVER (ORDER BY i) AS s FROM unnest(d) WITH ORDINALITY AS u(x, i)) q
$$;

-- Whether two doubles are the same bits (NULL only as NULL): `=` but for the zeros, whose sign
-- `=` ignores, and NaN, which `=` matches whatever its payload (both rare, so `float8send` runs
-- on them alone; an SQL expression the planner inlines: the encoder checks every row with it).
CREATE FUNCTION sentinel_same_bits(a double precision, b double precision) RETURNS boolean
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN a IS NULL OR b IS NULL THEN a IS NULL AND b IS NULL
              WHEN a = 0 OR a = 'NaN'::double precision THEN float8send(a) = float8send(b)
              ELSE a = b END
$$;

-- `x` rounded to 10 significant digits of `magnitude` (> 0): how the encoder turns a chunk's
-- estimated unit conversion (1.7999999999999998, 32.00000000000001) into the constants it came
-- from (1.8, 32), which are then checked bit-exactly against every row.
CREATE FUNCTION sentinel_round_to(x double precision, magnitude double precision) RETURNS double precision
  LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT round(x::numeric, 9 - floor(log(magnitude::numeric))::integer)::double precision
$$;

-- The fewest decimal places, 0 to 4, that write `v` exactly (its value times 10^places is an
-- integer that divides back to `v`, compared as floats: −0.0 passes here and fails the encoder's
-- bit-exact check); NULL when none does, or |v| ≥ 1e15, NaN or infinite (rounding there would
-- overflow or mean nothing).
CREATE FUNCTION sentinel_decimal_places(v double precision) RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN NOT (abs(v) < 1e15) THEN NULL
              WHEN round(v) = v THEN 0
              WHEN round(v * 10) / 10 = v THEN 1
              WHEN round(v * 100) / 100 = v THEN 2
              WHEN round(v * 1000) / 1000 = v THEN 3
              WHEN round(v * 10000) / 10000 = v THEN 4 END
$$;

CREATE TABLE observation_measurement_compact (
  day               timestamptz  NOT NULL,   -- the UTC midnight of the rows' ingested day
  point_key         integer      NOT NULL,
  instance_key      integer      NOT NULL,
  source_epoch      integer      NOT NULL,
  hour              timestamptz  NOT NULL,   -- date_bin('1 hour', observed_at)
  n                 integer      NOT NULL CHECK (n > 0),
  n_valued          integer      NOT NULL,   -- rows carrying a value (the log heads' second read)
  seq_min           bigint       NOT NULL,
  seq_max           bigint       NOT NULL,
  observed_d        bigint[],                -- int8 only when some delta is past int4
  observed_d4       integer[],
  ingested_lag      bigint[],                -- int8 only when some lag is past int4
  ingested_lag4     integer[],
  device_lag        bigint[],
  value_num         double precision[],      -- NULL when value_dec holds the values
  value_dec         integer[],               -- value_num × value_div, exactly
  value_div         double precision,        -- 10^places; NULL unless value_dec is
  value_bool        boolean[],
  value_text        text[],
  native_is_value   boolean      NOT NULL,
  native_scale      double precision,        -- native_num = value_num × scale + offset, exactly
  native_offset     double precision,
  native_num        double precision[],      -- NULL when derived or native_dec holds the natives
  native_dec        integer[],               -- native_num × native_div, exactly
  native_div        double precision,        -- 10^places; NULL unless native_dec is
  native_text       text[],
  unit_native       text[],
  quality           quality[]    NOT NULL,
  reason            text[],
  detail            jsonb[],
  changed           boolean[]    NOT NULL,
  registry_version  integer[]    NOT NULL,
  seq_d             bigint[]     NOT NULL,
  skew_flagged      boolean[]    NOT NULL,
  applied           bigint[],
  PRIMARY KEY (point_key, hour, instance_key, source_epoch, day),
  -- One form of each encoded column (a chunk decodes one way only).
  CHECK ((observed_d IS NULL) <> (observed_d4 IS NULL)),
  CHECK ((ingested_lag IS NULL) <> (ingested_lag4 IS NULL)),
  CHECK (value_dec IS NULL OR (value_num IS NULL AND value_div IS NOT NULL)),
  CHECK ((value_dec IS NULL) = (value_div IS NULL)),
  CHECK ((native_scale IS NULL) = (native_offset IS NULL)),
  CHECK (native_scale IS NULL OR (native_num IS NULL AND NOT native_is_value)),
  CHECK (NOT native_is_value OR native_num IS NULL),
  CHECK ((native_dec IS NULL) = (native_div IS NULL)),
  CHECK (native_dec IS NULL OR (native_num IS NULL AND native_scale IS NULL AND NOT native_is_value))
) PARTITION BY RANGE (day);
CREATE TABLE observation_state_compact (LIKE observation_measurement_compact INCLUDING ALL)
  PARTITION BY RANGE (day);
CREATE TABLE observation_diagnostic_compact (LIKE observation_measurement_compact INCLUDING ALL)
  PARTITION BY RANGE (day);
-- Reprocess finds a key's chunk by its instance, epoch and seq range within the day.
CREATE INDEX observation_measurement_compact_key
  ON observation_measurement_compact (day, instance_key, source_epoch, seq_min);
CREATE INDEX observation_state_compact_key
  ON observation_state_compact (day, instance_key, source_epoch, seq_min);
CREATE INDEX observation_diagnostic_compact_key
  ON observation_diagnostic_compact (day, instance_key, source_epoch, seq_min);

DO $$
DECLARE
  cls text;
  col text;
BEGIN
  FOREACH cls IN ARRAY ARRAY['measurement', 'state', 'diagnostic'] LOOP
    FOREACH col IN ARRAY ARRAY['observed_d', 'observed_d4', 'ingested_lag', 'ingested_lag4',
        'device_lag', 'value_num', 'value_dec', 'value_bool',
        'value_text', 'native_num', 'native_dec', 'native_text', 'unit_native', 'quality', 'reason', 'detail',
        'changed', 'registry_version', 'seq_d', 'skew_flagged', 'applied'] LOOP
      EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET COMPRESSION lz4', 'observation_' || cls || '_compact', col);
    END LOOP;
    -- The decoded chunks, with the hot table's columns in its order and the chunk's hour.
    EXECUTE format($v$
      CREATE VIEW %I AS
      SELECT c.hour + (u.obs + COALESCE(u.lag, u.lag4)) * interval '1 microsecond' AS ingested_at,
             c.point_key,
             c.hour + u.obs * interval '1 microsecond' AS observed_at,
             c.hour + (u.obs + u.dev) * interval '1 microsecond' AS device_time,
             COALESCE(u.value_num, u.value_dec::double precision / c.value_div) AS value_num, u.value_bool, u.value_text,
             CASE WHEN c.native_is_value THEN COALESCE(u.value_num, u.value_dec::double precision / c.value_div)
                  WHEN c.native_scale IS NOT NULL
                    THEN COALESCE(u.value_num, u.value_dec::double precision / c.value_div) * c.native_scale + c.native_offset
                  ELSE COALESCE(u.native_num, u.native_dec::double precision / c.native_div) END AS native_num,
             u.native_text, u.unit_native, u.quality, u.reason, u.detail, u.changed,
             u.registry_version, c.instance_key, c.source_epoch, u.seq AS source_seq,
             u.skew_flagged, u.applied, c.hour AS obs_hour, c.day AS ingested_day
      FROM %I c
      CROSS JOIN LATERAL unnest(COALESCE(sentinel_undelta(c.observed_d), sentinel_undelta(c.observed_d4)),
          c.ingested_lag, c.ingested_lag4, c.device_lag, c.value_num, c.value_dec, c.value_bool,
          c.value_text, c.native_num, c.native_dec, c.native_text, c.unit_native, c.quality, c.reason,
          c.detail, c.changed, c.registry_version, sentinel_undelta(c.seq_d), c.skew_flagged, c.applied)
        AS u(obs, lag, lag4, dev, value_num, value_dec, value_bool, value_text, native_num, native_dec,
             native_text, unit_native, quality, reason, detail, changed, registry_version, seq, skew_flagged, applied)
      $v$, 'observation_' || cls || '_compacted', 'observation_' || cls || '_compact');
    -- Every row of the class, hot and compacted.
    EXECUTE format($v$
      CREATE VIEW %I AS
      SELECT o.*, date_bin('1 hour', o.observed_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS obs_hour,
             date_bin('1 day', o.ingested_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS ingested_day
        FROM %I o
      UNION ALL
      SELECT * FROM %I
      $v$, 'observation_' || cls || '_all', 'observation_' || cls, 'observation_' || cls || '_compacted');
  END LOOP;
END;
$$;

-- The named views of 0014 over every row (same columns, so the `observation` view, which
-- reads them, now answers ad-hoc queries over compacted days too, unchanged).
CREATE OR REPLACE VIEW observation_measurement_named AS
  SELECT o.ingested_at, o.point_key, o.observed_at, o.device_time, o.value_num, o.value_bool,
         o.value_text, o.native_num, o.native_text, o.unit_native, o.quality, o.reason, o.detail,
         o.changed, o.registry_version, o.instance_key, o.source_epoch, o.source_seq,
         o.skew_flagged, o.applied, p.point_id, i.driver_instance
    FROM observation_measurement_all o
    LEFT JOIN point_key p ON p.key = o.point_key LEFT JOIN instance_key i ON i.key = o.instance_key;
CREATE OR REPLACE VIEW observation_state_named AS
  SELECT o.ingested_at, o.point_key, o.observed_at, o.device_time, o.value_num, o.value_bool,
         o.value_text, o.native_num, o.native_text, o.unit_native, o.quality, o.reason, o.detail,
         o.changed, o.registry_version, o.instance_key, o.source_epoch, o.source_seq,
         o.skew_flagged, o.applied, p.point_id, i.driver_instance
    FROM observation_state_all o
    LEFT JOIN point_key p ON p.key = o.point_key LEFT JOIN instance_key i ON i.key = o.instance_key;
CREATE OR REPLACE VIEW observation_diagnostic_named AS
  SELECT o.ingested_at, o.point_key, o.observed_at, o.device_time, o.value_num, o.value_bool,
         o.value_text, o.native_num, o.native_text, o.unit_native, o.quality, o.reason, o.detail,
         o.changed, o.registry_version, o.instance_key, o.source_epoch, o.source_seq,
         o.skew_flagged, o.applied, p.point_id, i.driver_instance
    FROM observation_diagnostic_all o
    LEFT JOIN point_key p ON p.key = o.point_key LEFT JOIN instance_key i ON i.key = o.instance_key;

-- The guard of `sentinel_compact_encode`: a chunk's row numbers, as its aggregates saw them,
-- must be exactly 1..n in order. Returns n.
CREATE FUNCTION sentinel_compact_in_order(n bigint, rns bigint[]) RETURNS integer
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF rns IS DISTINCT FROM ARRAY(SELECT generate_series(1::bigint, n)) THEN
    RAISE EXCEPTION 'compaction: a chunk''s rows reached its aggregates out of order; nothing is written';
  END IF;
  RETURN n;
END;
$$;

-- Encodes the session's `sentinel_compact_stage` (rows with the `_all` columns) into chunks of
-- `tbl`, each in the day of its `ingested_day`. Internal: called by the compaction and by
-- reprocess, both fenced before they call it. The rows reach the aggregates sorted once by the
-- subquery (an `ORDER BY` inside each of the 17 aggregates sorted every chunk 17 times: 51 s
-- against 30 s for a tenth of a design-rate day); SQL does not promise that order to an
-- aggregate, so each chunk's row numbers are aggregated too and checked to be 1..n in order
-- (`sentinel_compact_in_order`): the compaction fails, writing nothing, rather than store a
-- chunk whose columns disagree.
--
-- Then each chunk picks, column by column, the narrowest form that holds every row exactly
-- (the choices are the chunk's, so one odd row costs its chunk the wide form, never a bit):
--   * `observed_d4`/`ingested_lag4` (int4) when every delta and lag fits, else the int8 forms;
--   * `value_dec` (int4, the values × `value_div` = 10^places, places 0–4 the most any row
--     needs) when every value is such a decimal and dividing back gives its very bits (compared
--     by `sentinel_same_bits`, so −0.0, NaN and ±inf keep `value_num`), else `value_num`;
--   * `native_is_value` when native and value are the same bits row for row; else
--     `native_scale`/`native_offset` when native = value × scale + offset to the bit for every
--     row, the pair estimated from the chunk's extremes and rounded to 10 significant digits
--     (a unit conversion's constants: 1.8 and 32), tried only when every value and native is
--     finite and between 1e-100 and 1e100 in magnitude (PostgreSQL raises on a float overflow
--     or underflow); else `native_dec` (int4, the natives × `native_div`) when every native is
--     a decimal the way `value_dec` asks, checked bit for bit the same way; else `native_num`
--     whole.
CREATE FUNCTION sentinel_compact_encode(tbl text) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  written bigint;
BEGIN
  EXECUTE format($q$
    INSERT INTO %I (day, point_key, instance_key, source_epoch, hour, n, n_valued, seq_min, seq_max,
      observed_d, observed_d4, ingested_lag, ingested_lag4, device_lag, value_num, value_dec,
      value_div, value_bool, value_text, native_is_value, native_scale, native_offset, native_num,
      native_dec, native_div, native_text, unit_native, quality, reason, detail, changed, registry_version, seq_d,
      skew_flagged, applied)
    SELECT g.ingested_day, g.point_key, g.instance_key, g.source_epoch, g.obs_hour, g.n, g.n_valued,
      g.seq_min, g.seq_max,
      CASE WHEN NOT g.od_fits THEN g.od END, CASE WHEN g.od_fits THEN g.od::integer[] END,
      CASE WHEN NOT g.lag_fits THEN g.lag END, CASE WHEN g.lag_fits THEN g.lag::integer[] END,
      g.dev,
      CASE WHEN d.exact THEN NULL ELSE g.vn END,
      CASE WHEN d.exact THEN de.dec END, CASE WHEN d.exact THEN dp.div END,
      g.vb, g.vt, g.native_is_value,
      CASE WHEN a.exact THEN a.scale END, CASE WHEN a.exact THEN a.offs END,
      CASE WHEN NOT g.native_is_value AND a.exact IS NOT TRUE AND nd.exact IS NOT TRUE THEN g.nn END,
      CASE WHEN nd.exact THEN nde.dec END, CASE WHEN nd.exact THEN ndp.div END,
      g.nt, g.un, g.q, g.rs, g.dt, g.ch, g.rv, g.sd, g.sk, g.ap
    FROM (
      SELECT ingested_day, point_key, instance_key, source_epoch, obs_hour,
        sentinel_compact_in_order(count(*), array_agg(rn)) AS n,
        count(*) FILTER (WHERE value_num IS NOT NULL OR value_bool IS NOT NULL OR value_text IS NOT NULL) AS n_valued,
        min(source_seq) AS seq_min, max(source_seq) AS seq_max,
        array_agg(od) AS od, min(od) >= -2147483648 AND max(od) <= 2147483647 AS od_fits,
        array_agg(lag) AS lag, min(lag) >= -2147483648 AND max(lag) <= 2147483647 AS lag_fits,
        CASE WHEN count(dev) > 0 THEN array_agg(dev) END AS dev,
        CASE WHEN count(value_num) > 0 THEN array_agg(value_num) END AS vn,
        count(value_num) = count(dp) AS all_dec, max(dp) AS places, max(abs(value_num)) AS vabs,
        min(value_num) AS vmin, max(value_num) AS vmax,
        min(abs(value_num)) FILTER (WHERE value_num <> 0) AS vsmall,
        min(native_num) AS nmin, max(native_num) AS nmax,
        min(abs(native_num)) FILTER (WHERE native_num <> 0) AS nsmall,
        count(native_num) = count(ndp) AS all_ndec, max(ndp) AS nplaces, max(abs(native_num)) AS nabs,
        CASE WHEN count(value_bool) > 0 THEN array_agg(value_bool) END AS vb,
        CASE WHEN count(value_text) > 0 THEN array_agg(value_text) END AS vt,
        bool_and(sentinel_same_bits(native_num, value_num)) AS native_is_value,
        CASE WHEN count(native_num) > 0 THEN array_agg(native_num) END AS nn,
        CASE WHEN count(native_text) > 0 THEN array_agg(native_text) END AS nt,
        CASE WHEN count(unit_native) > 0 THEN array_agg(unit_native) END AS un,
        array_agg(quality) AS q,
        CASE WHEN count(reason) > 0 THEN array_agg(reason) END AS rs,
        CASE WHEN count(detail) > 0 THEN array_agg(detail) END AS dt,
        array_agg(changed) AS ch, array_agg(registry_version) AS rv,
        array_agg(sd) AS sd, array_agg(skew_flagged) AS sk,
        CASE WHEN count(applied) > 0 THEN array_agg(applied) END AS ap
      FROM (
        SELECT s.*, row_number() OVER w AS rn,
               sentinel_us(s.observed_at - COALESCE(lag(s.observed_at) OVER w, s.obs_hour)) AS od,
               sentinel_us(s.ingested_at - s.observed_at) AS lag,
               sentinel_us(s.device_time - s.observed_at) AS dev,
               s.source_seq - COALESCE(lag(s.source_seq) OVER w, 0) AS sd,
               sentinel_decimal_places(s.value_num) AS dp,
               sentinel_decimal_places(s.native_num) AS ndp
        FROM sentinel_compact_stage s
        WINDOW w AS (PARTITION BY s.ingested_day, s.point_key, s.instance_key, s.source_epoch, s.obs_hour
                     ORDER BY s.observed_at, s.ingested_at, s.source_seq)
        ORDER BY s.ingested_day, s.point_key, s.instance_key, s.source_epoch, s.obs_hour,
                 s.observed_at, s.ingested_at, s.source_seq) r
      GROUP BY ingested_day, point_key, instance_key, source_epoch, obs_hour) g
    -- The values as decimals: encoded, then every element divided back and compared bit for bit.
    -- Every guard is a CASE around what it guards (an int4 cast or a float product raises on an
    -- overflow, and the planner orders a WHERE list's clauses as it likes); every step is
    -- `OFFSET 0`, so it is computed once per chunk, not inlined into each element's check.
    CROSS JOIN LATERAL (
      SELECT CASE WHEN g.vn IS NOT NULL AND g.all_dec AND g.places IS NOT NULL
                    AND g.vabs * power(10::double precision, g.places) < 2147483647
                  THEN power(10::double precision, g.places) END AS div OFFSET 0) dp
    CROSS JOIN LATERAL (
      SELECT CASE WHEN dp.div IS NOT NULL
                  THEN ARRAY(SELECT round(v * dp.div)::integer FROM unnest(g.vn) AS v) END AS dec OFFSET 0) de
    CROSS JOIN LATERAL (
      SELECT CASE WHEN de.dec IS NOT NULL THEN NOT EXISTS (SELECT 1 FROM unnest(g.vn, de.dec) AS u(v, k)
                  WHERE NOT sentinel_same_bits(u.k::double precision / dp.div, u.v)) END AS exact
      OFFSET 0) d
    -- Native as an affine map of the value: estimated, rounded, then checked on every row.
    CROSS JOIN LATERAL (
      SELECT CASE WHEN NOT g.native_is_value AND g.vmin < g.vmax AND g.nmin < g.nmax
                    AND g.vmin >= -1e100 AND g.vmax <= 1e100 AND g.nmin >= -1e100 AND g.nmax <= 1e100
                    AND g.vsmall >= 1e-100 AND g.nsmall >= 1e-100
                  THEN sentinel_round_to((g.nmax - g.nmin) / (g.vmax - g.vmin),
                                         (g.nmax - g.nmin) / (g.vmax - g.vmin)) END AS scale OFFSET 0) ap
    CROSS JOIN LATERAL (
      SELECT CASE WHEN ap.scale BETWEEN 1e-100 AND 1e100
                  THEN sentinel_round_to(g.nmin - g.vmin * ap.scale, greatest(abs(g.nmin), abs(g.nmax))) END AS offs
      OFFSET 0) ao
    CROSS JOIN LATERAL (
      SELECT CASE WHEN abs(ao.offs) <= 1e100 THEN ap.scale END AS scale,
             CASE WHEN abs(ao.offs) <= 1e100 THEN ao.offs END AS offs OFFSET 0) af
    CROSS JOIN LATERAL (
      SELECT af.scale, af.offs,
             CASE WHEN af.offs IS NOT NULL THEN NOT EXISTS (SELECT 1 FROM unnest(g.vn, g.nn) AS u(v, x)
                  WHERE NOT sentinel_same_bits(u.v * af.scale + af.offs, u.x)) END AS exact
      OFFSET 0) a
    -- Native, when neither the value nor derived from it, as decimals the way the values are (a
    -- converted point's native is the device's clean decimal and its value is not one).
    CROSS JOIN LATERAL (
      SELECT CASE WHEN NOT g.native_is_value AND a.exact IS NOT TRUE AND g.nn IS NOT NULL AND g.all_ndec
                    AND g.nplaces IS NOT NULL AND g.nabs * power(10::double precision, g.nplaces) < 2147483647
                  THEN power(10::double precision, g.nplaces) END AS div OFFSET 0) ndp
    CROSS JOIN LATERAL (
      SELECT CASE WHEN ndp.div IS NOT NULL
                  THEN ARRAY(SELECT round(x * ndp.div)::integer FROM unnest(g.nn) AS x) END AS dec OFFSET 0) nde
    CROSS JOIN LATERAL (
      SELECT CASE WHEN nde.dec IS NOT NULL THEN NOT EXISTS (SELECT 1 FROM unnest(g.nn, nde.dec) AS u(x, k)
                  WHERE NOT sentinel_same_bits(u.k::double precision / ndp.div, u.x)) END AS exact
      OFFSET 0) nd
  $q$, tbl);
  GET DIAGNOSTICS written = ROW_COUNT;
  RETURN written;
END;
$$;

-- Makes the compacted partition of `cls` for the day starting at `day_from` (internal).
CREATE FUNCTION sentinel_ensure_compact_partition(cls text, day_from timestamptz) RETURNS void
LANGUAGE plpgsql
AS $$
DECLARE
  part text := format('observation_%s_compact_p%s', cls, to_char(day_from AT TIME ZONE 'UTC', 'YYYYMMDD'));
BEGIN
  IF to_regclass(part) IS NULL THEN
    EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L) WITH (toast_tuple_target = 128)',
      part, 'observation_' || cls || '_compact', day_from, day_from + interval '1 day');
  END IF;
END;
$$;

-- Compacts one closed day of one class table (issue 24 item 1): its hot rows, and the chunks
-- already there (a day that got hot rows again by a class move), become the day's chunks in one
-- transaction, fenced on (epoch, start identity), with one `compaction` control event. Refused,
-- before anything is written: a day not closed at `p_now`; a day that ended less than
-- `p_age_days` days before `p_now`; a day the stream may still hold a message of
-- (`p_stream_oldest`, the oldest message's ingested_at the caller read from the bus, before the
-- day's end). A day with no hot rows writes nothing (`rows` 0, `seq` NULL): idempotent.
CREATE FUNCTION sentinel_compact_day(epoch integer, p_core_start bigint, p_class text, p_day timestamptz,
  p_now timestamptz, p_age_days integer, p_stream_oldest timestamptz, principal text,
  OUT rows bigint, OUT chunks bigint, OUT bytes_before bigint, OUT bytes_after bigint, OUT seq bigint)
LANGUAGE plpgsql
AS $$
DECLARE
  day_to   timestamptz := p_day + interval '1 day';
  hot      text;
  packed   text;
  version  integer;
BEGIN
  PERFORM sentinel_rollup_fence(epoch, p_core_start);
  IF p_class IS NULL OR p_class NOT IN ('measurement', 'state', 'diagnostic') THEN
    RAISE EXCEPTION 'compaction: unknown retention class %', p_class;
  END IF;
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
  IF p_stream_oldest IS NOT NULL AND p_stream_oldest < day_to THEN
    RAISE EXCEPTION 'compaction refused: day % may still be in the stream (its oldest message was ingested at %)',
      to_char(p_day AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
      to_char(p_stream_oldest AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"');
  END IF;
  rows := 0; chunks := 0; bytes_before := 0; bytes_after := 0;
  hot := format('observation_%s_p%s', p_class, to_char(p_day AT TIME ZONE 'UTC', 'YYYYMMDD'));
  packed := format('observation_%s_compact_p%s', p_class, to_char(p_day AT TIME ZONE 'UTC', 'YYYYMMDD'));
  -- Serialises with partition creation and retention drops.
  PERFORM pg_advisory_xact_lock(7310598112409645057);
  IF to_regclass(hot) IS NULL THEN
    RETURN;
  END IF;
  EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE', hot);
  EXECUTE format('SELECT count(*) FROM %I', hot) INTO rows;
  IF rows = 0 THEN
    RETURN;
  END IF;
  bytes_before := pg_total_relation_size(hot) + COALESCE(pg_total_relation_size(to_regclass(packed)), 0);
  PERFORM sentinel_ensure_compact_partition(p_class, p_day);
  IF to_regclass('pg_temp.sentinel_compact_stage') IS NOT NULL THEN
    DROP TABLE pg_temp.sentinel_compact_stage;
  END IF;
  EXECUTE format('CREATE TEMP TABLE sentinel_compact_stage ON COMMIT DROP AS '
                 'SELECT * FROM %I WHERE ingested_day = $1 AND ingested_at >= $1 AND ingested_at < $2',
                 'observation_' || p_class || '_all') USING p_day, day_to;
  EXECUTE format('DELETE FROM %I', packed);
  EXECUTE format('TRUNCATE %I', hot);
  chunks := sentinel_compact_encode('observation_' || p_class || '_compact');
  DROP TABLE pg_temp.sentinel_compact_stage;
  bytes_after := pg_total_relation_size(hot) + pg_total_relation_size(packed);
  SELECT COALESCE(max(v.version), 0) INTO version FROM registry_version v;
  INSERT INTO control_event (occurred_at, kind, point_id, subject_key, principal, core_epoch, payload, registry_version)
    VALUES (p_now, 'compaction', NULL, 'observation_' || p_class, principal, epoch,
            jsonb_build_object('class', p_class, 'day', to_char(p_day AT TIME ZONE 'UTC', 'YYYY-MM-DD'),
              'rows', rows, 'chunks', chunks, 'bytes_before', bytes_before, 'bytes_after', bytes_after),
            version)
    RETURNING control_event.seq INTO seq;
END;
$$;

-- Retention of 0013, dropping a raw day's compacted partition with its hot one (one mark, one
-- event: the day is gone in both forms).
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
  IF cls IS NOT NULL THEN
    packed := format('%s_compact_p%s', tbl, to_char(part_from AT TIME ZONE 'UTC', 'YYYYMMDD'));
    IF to_regclass(packed) IS NOT NULL THEN
      EXECUTE format('DROP TABLE %I', packed);
    END IF;
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

-- The rollup recompute of 0014, reading hot and compacted rows.
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


-- The class move of 0014, moving a point's compacted rows too.
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
  n_packed  bigint;
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
                   'FROM %I WHERE point_key = $1', 'observation_' || cls || '_all')
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
    -- Hot rows move as they are; compacted ones are decoded and land hot in the target (its
    -- day may be compacted again).
    EXECUTE format('WITH gone AS (DELETE FROM %I WHERE point_key = $1 RETURNING *) '
                   'INSERT INTO %I SELECT * FROM gone', 'observation_' || cls, target) USING pkey;
    GET DIAGNOSTICS n = ROW_COUNT;
    EXECUTE format('INSERT INTO %I SELECT ingested_at, point_key, observed_at, device_time, value_num, '
                   'value_bool, value_text, native_num, native_text, unit_native, quality, reason, detail, '
                   'changed, registry_version, instance_key, source_epoch, source_seq, skew_flagged, applied '
                   'FROM %I WHERE point_key = $1', target, 'observation_' || cls || '_compacted') USING pkey;
    GET DIAGNOSTICS n_packed = ROW_COUNT;
    EXECUTE format('DELETE FROM %I WHERE point_key = $1', 'observation_' || cls || '_compact') USING pkey;
    n := n + n_packed;
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

-- Reprocess of 0014 on hot and compacted rows alike (ingest spec, "Reprocess":
-- "decompress-update-recompress"). Each update now also names its row's point and
-- `observed_at`, which find a compacted row's chunk by its primary key: the chunks holding any
-- of the rows are decoded, updated and encoded again in this transaction. The rollup
-- invalidations are those of a hot update.
DO $$
DECLARE
  grantee text;
BEGIN
  CREATE TEMP TABLE sentinel_0015_grantees AS
    SELECT a.grantee::regrole::text AS grantee FROM aclexplode((SELECT proacl FROM pg_proc
      WHERE oid = 'sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer)'::regprocedure)) a
    WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
      AND a.grantee <> (SELECT proowner FROM pg_proc WHERE oid = 'sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer)'::regprocedure);
END;
$$;
DROP FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer);
CREATE FUNCTION sentinel_reprocess_apply(p_epoch integer, p_core_start bigint, p_class text, p_instances text[],
  p_epochs integer[], p_seqs bigint[], p_ingested timestamptz[], p_value_num float8[],
  p_value_bool boolean[], p_value_text text[], p_native_fill text[], p_qualities text[],
  p_reasons text[], p_version integer, p_points text[], p_observed timestamptz[])
RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  updated bigint;
  packed_updated bigint;
  mark    timestamptz;
BEGIN
  PERFORM sentinel_rollup_fence(p_epoch, p_core_start);
  IF p_class IS NULL OR p_class NOT IN ('measurement', 'state', 'diagnostic') THEN
    RAISE EXCEPTION 'sentinel_reprocess_apply: unknown retention class %', p_class;
  END IF;
  SELECT claimed_to INTO mark FROM rollup_watermark WHERE singleton FOR SHARE;
  EXECUTE format($q$
    WITH changed AS (
      UPDATE %I o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = $11
      FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
        JOIN instance_key i ON i.driver_instance = u.di
      WHERE o.instance_key = i.key AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') FROM changed
        WHERE $12::timestamptz IS NULL OR observed_at < $12
    )
    SELECT count(*) FROM changed
  $q$, 'observation_' || p_class) INTO updated
    USING p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
          p_native_fill, p_qualities, p_reasons, p_version, mark;
  IF updated >= cardinality(p_seqs) THEN
    RETURN updated;
  END IF;
  -- The rest may be compacted: decode their chunks, update, encode them again.
  IF to_regclass('pg_temp.sentinel_compact_stage') IS NOT NULL THEN
    DROP TABLE pg_temp.sentinel_compact_stage;
  END IF;
  EXECUTE format($q$
    CREATE TEMP TABLE sentinel_compact_stage ON COMMIT DROP AS
    SELECT v.* FROM %I v
    WHERE (v.point_key, v.obs_hour, v.instance_key, v.source_epoch, v.ingested_day) IN (
      SELECT DISTINCT p.key, date_bin('1 hour', u.oa, TIMESTAMPTZ '1970-01-01 00:00:00+00'), i.key, u.se,
             date_bin('1 day', u.ia, TIMESTAMPTZ '1970-01-01 00:00:00+00')
      FROM unnest($1, $2, $3, $4, $5) AS u(pt, di, se, ia, oa)
        JOIN point_key p ON p.point_id = u.pt JOIN instance_key i ON i.driver_instance = u.di)
  $q$, 'observation_' || p_class || '_compacted')
    USING p_points, p_instances, p_epochs, p_ingested, p_observed;
  EXECUTE $q$
    WITH changed AS (
      UPDATE sentinel_compact_stage o SET value_num = u.vn, value_bool = u.vb, value_text = u.vt,
        native_text = COALESCE(o.native_text, u.nf), quality = u.q::quality, reason = u.r,
        registry_version = $11
      FROM unnest($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) AS u(di, se, ss, ia, vn, vb, vt, nf, q, r)
        JOIN instance_key i ON i.driver_instance = u.di
      WHERE o.instance_key = i.key AND o.source_epoch = u.se AND o.source_seq = u.ss
        AND o.ingested_at = u.ia
      RETURNING o.observed_at
    ), invalidated AS (
      INSERT INTO rollup_invalidation (bucket)
        SELECT DISTINCT date_bin('1 minute', observed_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') FROM changed
        WHERE $12::timestamptz IS NULL OR observed_at < $12
    )
    SELECT count(*) FROM changed
  $q$ INTO packed_updated
    USING p_instances, p_epochs, p_seqs, p_ingested, p_value_num, p_value_bool, p_value_text,
          p_native_fill, p_qualities, p_reasons, p_version, mark;
  IF packed_updated > 0 THEN
    EXECUTE format($q$
      DELETE FROM %I c USING (SELECT DISTINCT point_key, obs_hour, instance_key, source_epoch, ingested_day
                              FROM sentinel_compact_stage) s
      WHERE c.point_key = s.point_key AND c.hour = s.obs_hour AND c.instance_key = s.instance_key
        AND c.source_epoch = s.source_epoch AND c.day = s.ingested_day
    $q$, 'observation_' || p_class || '_compact');
    PERFORM sentinel_compact_encode('observation_' || p_class || '_compact');
  END IF;
  DROP TABLE pg_temp.sentinel_compact_stage;
  RETURN updated + packed_updated;
END;
$$;
ALTER FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer, text[], timestamptz[]) SECURITY DEFINER;
ALTER FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer, text[], timestamptz[]) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer, text[], timestamptz[]) FROM PUBLIC;
DO $$
DECLARE
  grantee text;
BEGIN
  FOR grantee IN SELECT g.grantee FROM sentinel_0015_grantees g LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], integer[], '
      'bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], integer, text[], timestamptz[]) TO %s', grantee);
  END LOOP;
END;
$$;
DROP TABLE sentinel_0015_grantees;

CREATE OR REPLACE FUNCTION sentinel_apply_reprocess_grants(writer text)
RETURNS void
LANGUAGE plpgsql
AS $$
BEGIN
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_reprocess_apply(integer, bigint, text, text[], '
    'integer[], bigint[], timestamptz[], float8[], boolean[], text[], text[], text[], text[], '
    'integer, text[], timestamptz[]) TO %I', writer);
END;
$$;
REVOKE EXECUTE ON FUNCTION sentinel_apply_reprocess_grants(text) FROM PUBLIC;

-- CREATE OR REPLACE resets these; their grants (ACLs) are kept.
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_move_point_class(integer, bigint, text, text, text, timestamptz) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SECURITY DEFINER;
ALTER FUNCTION sentinel_rollup_recompute(text, timestamptz, timestamptz) SET search_path FROM CURRENT;
ALTER FUNCTION sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text) SECURITY DEFINER;
ALTER FUNCTION sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text) SET search_path FROM CURRENT;
REVOKE EXECUTE ON FUNCTION sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION sentinel_compact_encode(text) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION sentinel_compact_in_order(bigint, bigint[]) FROM PUBLIC;
REVOKE EXECUTE ON FUNCTION sentinel_ensure_compact_partition(text, timestamptz) FROM PUBLIC;

-- Whoever reads the raw tables reads the compacted ones and the views over both; whoever may
-- drop a partition (the writer) may compact a day. So a database upgrades without granting again.
DO $$
DECLARE
  grantee text;
BEGIN
  FOR grantee IN
    SELECT DISTINCT a.grantee::regrole::text FROM pg_class c, aclexplode(c.relacl) a
    WHERE c.oid = 'observation_measurement'::regclass AND a.privilege_type = 'SELECT'
      AND a.grantee <> 0 AND a.grantee <> c.relowner
  LOOP
    EXECUTE format('GRANT SELECT ON observation_measurement_compact, observation_state_compact, '
                   'observation_diagnostic_compact, observation_measurement_compacted, '
                   'observation_state_compacted, observation_diagnostic_compacted, observation_measurement_all, '
                   'observation_state_all, observation_diagnostic_all TO %s', grantee);
  END LOOP;
  FOR grantee IN
    SELECT a.grantee::regrole::text FROM aclexplode((SELECT proacl FROM pg_proc
      WHERE oid = 'sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz)'::regprocedure)) a
    WHERE a.privilege_type = 'EXECUTE' AND a.grantee <> 0
      AND a.grantee <> (SELECT proowner FROM pg_proc WHERE oid = 'sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz)'::regprocedure)
  LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_compact_day(integer, bigint, text, timestamptz, '
                   'timestamptz, integer, timestamptz, text) TO %s', grantee);
  END LOOP;
END;
$$;

-- The grants list of 0014 with the compacted tables, their views and the compaction.
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
  EXECUTE format('GRANT EXECUTE ON FUNCTION sentinel_ensure_partitions(date, integer) TO %I', writer);
  EXECUTE format('GRANT SELECT ON rollup_1m, rollup_1h, rollup_1m_avg, rollup_1h_avg, '
                 'rollup_watermark, retention_mark TO %I', writer);
  EXECUTE format('GRANT EXECUTE ON FUNCTION '
                 'sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz), '
                 'sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer), '
                 'sentinel_rollup_apply(integer, bigint), '
                 'sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz), '
                 'sentinel_move_point_class(integer, bigint, text, text, text, timestamptz), '
                 'sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text) TO %I', writer);

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
