-- Sentinel schema, version 17: a converted point's compacted values derived from its natives
-- (issue 24, "compacted ≤ 20": the cost of an observation; BENCHMARKS.md "Compacted days").
--
-- Migration 0015 stores a chunk's native derived from its value when it can (`native_is_value`,
-- `native_scale`/`native_offset`), but a converted point goes the other way: the core computes
-- the value from the device's reading (`Conversion::apply` in `core/src/registry/descriptor.rs`:
-- `native × factor + offset`, in f64, that order, no fused multiply-add), so the native is the
-- clean decimal (`native_dec`) and the value, no decimal, was stored whole as float8: about
-- 5 B of the converted mix's 20.8 B an observation. Now a chunk whose every value is
-- `native × value_scale + value_offset`, checked bit for bit on every row with the very
-- operations the core ran, stores only the two constants for its values (`value_num` and
-- `value_dec` NULL); the view computes them back from the decoded natives, the same
-- operations on the same bits.
--
-- The constants are recovered from the chunk, two candidates in turn, each checked on every
-- row (`sentinel_compact_encode` below says how):
--   * the inverse of 0015's native map: native ≈ value × f + o, f and o estimated from the
--     chunk's extremes and rounded to 10 significant digits (1.8 and 32), then
--     `value_scale = 1 / f`, `value_offset = 0 − o / f`: in float8 `1 / 1.8` is
--     0.5555555555555556 and `−32 / 1.8` −17.77777777777778, the registry's degF
--     (`core/src/registry/folder.rs`); likewise tenths (1/10 = 0.1) and kelvin (1, −273.15);
--   * else the value's own map rounded the same way (a factor such as 6.894757, whose
--     reciprocal is no short decimal).
-- A chunk any row of which either misses by a bit keeps 0015's forms, so nothing is lost:
-- a conversion whose constants neither rounding recovers, a NaN or infinite native or value,
-- magnitudes past 1e±100 (PostgreSQL raises on a float overflow or underflow), a row with a
-- value but no native.
--
-- What changes: two columns and two checks on each class's compacted table; the encoder
-- (`sentinel_compact_encode`, used by the compaction and by reprocess, which re-encodes the
-- chunks it updates); the decoding views `observation_<class>_compacted` (so `_all`, the
-- `_named` views, the class move, the rollup recompute and reprocess, which all read through
-- them, decode the new form unchanged). The late-duplicate probe (`store-pg/src/commit.rs`)
-- decodes only times and seqs. Grants: the functions and views are replaced in place, so
-- their owners and ACLs stay.

DO $$
DECLARE
  cls text;
  tbl text;
BEGIN
  FOREACH cls IN ARRAY ARRAY['measurement', 'state', 'diagnostic'] LOOP
    tbl := 'observation_' || cls || '_compact';
    EXECUTE format('ALTER TABLE %I ADD COLUMN value_scale double precision, '
                   'ADD COLUMN value_offset double precision', tbl);
    EXECUTE format('COMMENT ON COLUMN %I.value_scale IS %L', tbl,
                   'value_num = native × value_scale + value_offset, exactly (migration 0017); NULL unless derived');
    -- One form of the values: derived from native, or stored (and native then not derived
    -- from them, which would be circular).
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK ((value_scale IS NULL) = (value_offset IS NULL))',
                   tbl, tbl || '_value_map_pair');
    EXECUTE format('ALTER TABLE %I ADD CONSTRAINT %I CHECK (value_scale IS NULL OR (value_num IS NULL '
                   'AND value_dec IS NULL AND native_scale IS NULL AND NOT native_is_value))',
                   tbl, tbl || '_value_map_alone');
    -- The decoded chunks, with the hot table's columns in its order and the chunk's hour: as
    -- 0015's, with the values computed from the natives when the chunk derives them.
    EXECUTE format($v$
      CREATE OR REPLACE VIEW %I AS
      SELECT c.hour + (u.obs + COALESCE(u.lag, u.lag4)) * interval '1 microsecond' AS ingested_at,
             c.point_key,
             c.hour + u.obs * interval '1 microsecond' AS observed_at,
             c.hour + (u.obs + u.dev) * interval '1 microsecond' AS device_time,
             CASE WHEN c.value_scale IS NOT NULL
                    THEN COALESCE(u.native_num, u.native_dec::double precision / c.native_div) * c.value_scale + c.value_offset
                  ELSE COALESCE(u.value_num, u.value_dec::double precision / c.value_div) END AS value_num,
             u.value_bool, u.value_text,
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
      $v$, 'observation_' || cls || '_compacted', tbl);
  END LOOP;
END;
$$;

-- The encoder of 0015 (its comment there says how the rows reach the aggregates and each
-- column's narrow forms), with one more form for the values, tried only when native is not
-- derived from them (`native_is_value`, `native_scale`: those cost native nothing and the
-- values at most their own column):
--   * `value_scale`/`value_offset` when value = native × scale + offset to the bit for every
--     row (`sentinel_same_bits`, so a −0.0 that the sum turns into +0.0 fails it), tried when
--     every value and native is finite and between 1e-100 and 1e100 in magnitude, as the
--     native map is (so neither a product nor a sum can overflow or underflow); the constants
--     first `1 / f` and `0 − o / f` of 0015's rounded native map (f, o), else the value's own
--     map estimated from the extremes and rounded to 10 significant digits. Then
--     `value_num`/`value_dec` are not stored, and native keeps its own form (`native_dec` or
--     `native_num`), from which the view computes the values.
CREATE OR REPLACE FUNCTION sentinel_compact_encode(tbl text) RETURNS bigint
LANGUAGE plpgsql
AS $$
DECLARE
  written bigint;
BEGIN
  EXECUTE format($q$
    INSERT INTO %I (day, point_key, instance_key, source_epoch, hour, n, n_valued, seq_min, seq_max,
      observed_d, observed_d4, ingested_lag, ingested_lag4, device_lag, value_num, value_dec,
      value_div, value_scale, value_offset, value_bool, value_text, native_is_value, native_scale,
      native_offset, native_num, native_dec, native_div, native_text, unit_native, quality, reason,
      detail, changed, registry_version, seq_d, skew_flagged, applied)
    SELECT g.ingested_day, g.point_key, g.instance_key, g.source_epoch, g.obs_hour, g.n, g.n_valued,
      g.seq_min, g.seq_max,
      CASE WHEN NOT g.od_fits THEN g.od END, CASE WHEN g.od_fits THEN g.od::integer[] END,
      CASE WHEN NOT g.lag_fits THEN g.lag END, CASE WHEN g.lag_fits THEN g.lag::integer[] END,
      g.dev,
      CASE WHEN d.exact OR vf.exact THEN NULL ELSE g.vn END,
      CASE WHEN d.exact AND vf.exact IS NOT TRUE THEN de.dec END,
      CASE WHEN d.exact AND vf.exact IS NOT TRUE THEN dp.div END,
      CASE WHEN vf.exact THEN vf.scale END, CASE WHEN vf.exact THEN vf.offs END,
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
    -- The values as a conversion of native (0017), when native is not derived from them: first
    -- the inverse of the rounded native map (af: 1 / 1.8, 0 − 32 / 1.8, the registry's degF;
    -- within 1e±100, so the constants, the products and the sums stay finite and normal),
    -- checked on every row with the core's operations in its order.
    CROSS JOIN LATERAL (
      SELECT CASE WHEN a.exact IS NOT TRUE AND af.offs IS NOT NULL THEN 1 / af.scale END AS scale,
             CASE WHEN a.exact IS NOT TRUE AND af.offs IS NOT NULL THEN 0 - af.offs / af.scale END AS offs
      OFFSET 0) vi
    CROSS JOIN LATERAL (
      SELECT CASE WHEN vi.offs IS NOT NULL THEN NOT EXISTS (SELECT 1 FROM unnest(g.nn, g.vn) AS u(x, v)
                  WHERE NOT sentinel_same_bits(u.x * vi.scale + vi.offs, u.v)) END AS exact
      OFFSET 0) vic
    -- Else the value's own map, estimated from the extremes and rounded (a factor whose
    -- reciprocal is no short decimal), under the same guards as the native map.
    CROSS JOIN LATERAL (
      SELECT CASE WHEN a.exact IS NOT TRUE AND ap.scale IS NOT NULL AND vic.exact IS NOT TRUE
                  THEN sentinel_round_to((g.vmax - g.vmin) / (g.nmax - g.nmin),
                                         (g.vmax - g.vmin) / (g.nmax - g.nmin)) END AS scale OFFSET 0) vp
    CROSS JOIN LATERAL (
      SELECT CASE WHEN vp.scale BETWEEN 1e-100 AND 1e100
                  THEN sentinel_round_to(g.vmin - g.nmin * vp.scale, greatest(abs(g.vmin), abs(g.vmax))) END AS offs
      OFFSET 0) vo
    CROSS JOIN LATERAL (
      SELECT CASE WHEN abs(vo.offs) <= 1e100 THEN vp.scale END AS scale,
             CASE WHEN abs(vo.offs) <= 1e100 THEN vo.offs END AS offs OFFSET 0) vv
    CROSS JOIN LATERAL (
      SELECT CASE WHEN vv.offs IS NOT NULL THEN NOT EXISTS (SELECT 1 FROM unnest(g.nn, g.vn) AS u(x, v)
                  WHERE NOT sentinel_same_bits(u.x * vv.scale + vv.offs, u.v)) END AS exact
      OFFSET 0) vvc
    CROSS JOIN LATERAL (
      SELECT CASE WHEN vic.exact THEN vi.scale WHEN vvc.exact THEN vv.scale END AS scale,
             CASE WHEN vic.exact THEN vi.offs WHEN vvc.exact THEN vv.offs END AS offs,
             vic.exact IS TRUE OR vvc.exact IS TRUE AS exact
      OFFSET 0) vf
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
REVOKE EXECUTE ON FUNCTION sentinel_compact_encode(text) FROM PUBLIC;
