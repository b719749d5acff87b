#!/usr/bin/env bash
# The compaction benchmark (issue 24 item 1; BENCHMARKS.md "Compacted days"): a tenth of a
# design-rate day (4,320,000 rows at 500 obs/s over the stages bench's 4,000 points) in one hot
# daily partition, then compacted by `sentinel_compact_day`, measured with psql in one sitting:
# bytes per observation (table plus indexes) hot and compacted, the compaction's time beside a
# sequential scan of the partition, a compacted hour read for history and for rehydration beside
# the same read on the hot copy, restart's log heads of every point, and reprocess of 1,000,080
# rows (926 points' whole day) hot and compacted.
#
#   tests/benches/compaction.sh [regular|jitter|converted]   (needs psql on 127.0.0.1 as postgres)
#
# `regular` is the fill of BENCHMARKS.md "Integer ids" (exact 8 s periods, a constant 150 ms
# bus lag, values on a 0.25 grid, native = value × 1.8 + 32 in numeric); `jitter` the same mix
# with observed_at jittered ±40 ms, a 20–300 ms lag and values with two random decimals;
# `converted` the jitter mix as the core writes a degF device: native the device's two-decimal
# reading, value = native × 0.5555555555555556 + -17.77777777777778 in float8 (the core's
# `Conversion::apply`, operands in its order). Environment: `MIGRATIONS` (default this tree's:
# set it to another tree's to measure its encoder on the same fill), `BENCH_DB` (database
# prefix, default c24bench: databases BENCH_DB_hot and BENCH_DB_packed), `SIZES_ONLY=1` (stop
# after the compaction's bytes and time).
set -euo pipefail
MIX=${1:-regular}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
MIGRATIONS=${MIGRATIONS:-$HERE/migrations}
DB=${BENCH_DB:-c24bench}
PSQL=(psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1)
mkdb() {
  "${PSQL[@]}" -qc "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
  for f in "$MIGRATIONS"/*.sql; do "${PSQL[@]}" -d "$1" -q -1 -f "$f" >/dev/null; done
}
if [ "$MIX" = regular ]; then
  TIME="TIMESTAMPTZ '2026-01-15' + n * interval '2 milliseconds'"
  LAG="interval '150 milliseconds'"
  VALUE="20 + (n % 97) * 0.25"
  NATIVE="v * 1.8 + 32"
elif [ "$MIX" = jitter ] || [ "$MIX" = converted ]; then
  TIME="TIMESTAMPTZ '2026-01-15 00:00:01' + n * interval '2 milliseconds' + (random() * 80 - 40) * interval '1 millisecond'"
  LAG="(20 + random() * 280) * interval '1 millisecond'"
  VALUE="round((18 + random() * 8)::numeric, 2)::float8"
  NATIVE="v * 1.8 + 32"
  if [ "$MIX" = converted ]; then
    VALUE="round((64.4 + random() * 14.4)::numeric, 2)::float8"
    NATIVE="v"
    VALUE_OF="* 0.5555555555555556::float8 + -17.77777777777778::float8"
  fi
else
  echo "unknown mix $MIX (regular, jitter or converted)" >&2; exit 2
fi
VALUE_OF=${VALUE_OF:-}
mkdb ${DB}_hot
"${PSQL[@]}" -d ${DB}_hot -q <<SQL
SELECT sentinel_ensure_partitions('2026-01-15', 1);
INSERT INTO point_key (point_id) SELECT 'site' || (p/100) || '.ahu' || (p%100) || '.supply_air_temp' FROM generate_series(0, 3999) p;
INSERT INTO instance_key (driver_instance) SELECT 'modbus-' || i || '.plant-a' FROM generate_series(0, 15) i;
SELECT setseed(0.24);
INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, native_num,
    unit_native, quality, changed, registry_version, instance_key, source_epoch, source_seq)
  SELECT t + $LAG, pk.key, t, v $VALUE_OF, $NATIVE, 'degF',
    CASE WHEN n % 20 = 0 THEN 'stale'::quality ELSE 'live'::quality END, n % 3 = 0, 1, ik.key, 1, n
  FROM (SELECT n, n % 4000 AS p, $TIME AS t, $VALUE AS v FROM generate_series(0, 4319999) n) s
  JOIN point_key pk ON pk.point_id = 'site' || (s.p/100) || '.ahu' || (s.p%100) || '.supply_air_temp'
  JOIN instance_key ik ON ik.driver_instance = 'modbus-' || (s.p % 16) || '.plant-a' ORDER BY n;
VACUUM ANALYZE observation_measurement;
UPDATE core_epoch SET epoch = 1, core_start = 7;
SQL
"${PSQL[@]}" -qc "DROP DATABASE IF EXISTS ${DB}_packed" -c "CREATE DATABASE ${DB}_packed TEMPLATE ${DB}_hot"
echo "== hot partition: total, heap (bytes)"
"${PSQL[@]}" -d ${DB}_hot -Atc "SELECT pg_total_relation_size('observation_measurement_p20260115'), pg_relation_size('observation_measurement_p20260115')"
echo "== sequential scan, then the compaction"
"${PSQL[@]}" -d ${DB}_packed -c '\timing on' -c "SELECT count(*), sum(value_num) FROM observation_measurement_p20260115" \
  -c "SELECT * FROM sentinel_compact_day(1, 7, 'measurement', '2026-01-15', '2026-02-01', 7, NULL, 'bench')"
# An encoder with `native_dec` (native as decimals) counts its bytes as the native's too.
NATIVE_BYTES="COALESCE(pg_column_size(native_num), 0)"
if [ "$("${PSQL[@]}" -d ${DB}_packed -Atc "SELECT count(*) FROM pg_attribute WHERE attrelid = 'observation_measurement_compact'::regclass AND attname = 'native_dec'")" = 1 ]; then
  NATIVE_BYTES="COALESCE(pg_column_size(native_num), pg_column_size(native_dec), 0)"
fi
# An encoder with `value_scale` (values derived from native, migration 0017) counts such chunks.
DERIVED="'-'"
if [ "$("${PSQL[@]}" -d ${DB}_packed -Atc "SELECT count(*) FROM pg_attribute WHERE attrelid = 'observation_measurement_compact'::regclass AND attname = 'value_scale'")" = 1 ]; then
  DERIVED="count(*) FILTER (WHERE value_scale IS NOT NULL)"
fi
echo "== compacted partition: total, heap, toast, indexes (bytes); per chunk: rows, bytes of the deltas, lags, values (0 when derived; num or dec), native (0 when derived; num or dec), whole row"
"${PSQL[@]}" -d ${DB}_packed -Atc "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_total_relation_size(c.reltoastrelid), pg_indexes_size(c.oid) FROM pg_class c WHERE relname = 'observation_measurement_compact_p20260115'" \
  -c "SELECT avg(n)::int, avg(COALESCE(pg_column_size(observed_d), pg_column_size(observed_d4)))::int, avg(COALESCE(pg_column_size(ingested_lag), pg_column_size(ingested_lag4)))::int, avg(COALESCE(pg_column_size(value_num), pg_column_size(value_dec), 0))::int, avg($NATIVE_BYTES)::int, avg(pg_column_size(k.*))::int FROM observation_measurement_compact_p20260115 k" \
  -c "SELECT 'chunks with int8 deltas, int8 lags, float8 values, values derived from native, native whole: ' || count(*) FILTER (WHERE observed_d IS NOT NULL) || ', ' || count(*) FILTER (WHERE ingested_lag IS NOT NULL) || ', ' || count(*) FILTER (WHERE value_num IS NOT NULL) || ', ' || $DERIVED || ', ' || count(*) FILTER (WHERE native_num IS NOT NULL) || ' of ' || count(*) FROM observation_measurement_compact_p20260115"
if [ "${SIZES_ONLY:-0}" = 1 ]; then uptime; exit 0; fi
for db in ${DB}_hot ${DB}_packed; do
  echo "== $db: history of one point-hour, rehydration window, log heads of 4,000 points (execution times)"
  "${PSQL[@]}" -d $db -f - <<'SQL' | grep -E "Execution Time|rows\\)"
PREPARE h(text, timestamptz, timestamptz, bigint) AS SELECT observed_at, ingested_at, value_num, value_bool, value_text, quality::text, reason FROM observation_measurement_all o WHERE o.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = $1) AND observed_at >= $2 AND observed_at < $3 AND o.obs_hour >= date_bin('1 hour', $2, TIMESTAMPTZ '1970-01-01 00:00:00+00') AND o.obs_hour < $3 ORDER BY observed_at, ingested_at, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) COLLATE "C", source_epoch, source_seq LIMIT $4;
EXECUTE h('site0.ahu1.supply_air_temp', '2026-01-15T01:00:00Z', '2026-01-15T02:00:00Z', 100000) \g /dev/null
EXPLAIN (ANALYZE) EXECUTE h('site0.ahu1.supply_air_temp', '2026-01-15T01:00:00Z', '2026-01-15T02:00:00Z', 100000);
PREPARE w(text[], timestamptz[], int, bigint[]) AS SELECT w.point_id, o.observed_at, o.ingested_at, o.driver_instance, o.source_epoch, o.source_seq, o.quality::text, o.value_num, o.applied, o.value_bool, o.value_text FROM unnest($1::text[], $2::timestamptz[], $4::bigint[]) AS w(point_id, since, rows_min) CROSS JOIN LATERAL ((SELECT o.observed_at, o.ingested_at, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) AS driver_instance, o.source_epoch, o.source_seq, o.quality, o.value_num, o.applied, o.value_bool, o.value_text FROM observation_measurement_all o WHERE o.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = w.point_id) AND o.observed_at >= w.since AND o.obs_hour >= date_bin('1 hour', w.since, TIMESTAMPTZ '1970-01-01 00:00:00+00') ORDER BY o.observed_at DESC, o.ingested_at DESC, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) COLLATE "C" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT $3) UNION (SELECT o.observed_at, o.ingested_at, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) AS driver_instance, o.source_epoch, o.source_seq, o.quality, o.value_num, o.applied, o.value_bool, o.value_text FROM observation_measurement_all o WHERE o.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = w.point_id) ORDER BY o.observed_at DESC, o.ingested_at DESC, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) COLLATE "C" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT w.rows_min)) o;
EXECUTE w(ARRAY['site0.ahu1.supply_air_temp'], ARRAY['2026-01-15T01:00:00Z'::timestamptz], 450, ARRAY[0]) \g /dev/null
EXPLAIN (ANALYZE) EXECUTE w(ARRAY['site0.ahu1.supply_air_temp'], ARRAY['2026-01-15T01:00:00Z'::timestamptz], 450, ARRAY[0]);
PREPARE hd(text[]) AS SELECT p.point_id, h.quality::text, h.reason, h.observed_at, h.ingested_at, h.driver_instance, h.source_epoch, h.source_seq, v.value_num, v.value_bool, v.value_text, v.observed_at, v.ingested_at, v.driver_instance, v.source_epoch, v.source_seq
FROM (SELECT u.point_id, GREATEST((SELECT max(c.hour) FROM observation_measurement_compact c WHERE c.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = u.point_id)), (SELECT date_bin('1 hour', max(o.observed_at), TIMESTAMPTZ '1970-01-01 00:00:00+00') FROM observation_measurement o WHERE o.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = u.point_id)), '-infinity') AS newest_chunk,
  GREATEST((SELECT max(c.hour) FROM observation_measurement_compact c WHERE c.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = u.point_id) AND c.n_valued > 0), (SELECT date_bin('1 hour', max(o.observed_at), TIMESTAMPTZ '1970-01-01 00:00:00+00') FROM observation_measurement o WHERE o.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = u.point_id) AND (o.value_num IS NOT NULL OR o.value_bool IS NOT NULL OR o.value_text IS NOT NULL)), '-infinity') AS newest_valued_chunk FROM unnest($1::text[]) AS u(point_id)) p
CROSS JOIN LATERAL (SELECT o.quality, o.reason, o.observed_at, o.ingested_at, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) AS driver_instance, o.source_epoch, o.source_seq FROM observation_measurement_all o WHERE o.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = p.point_id) AND o.observed_at >= p.newest_chunk AND o.obs_hour >= p.newest_chunk ORDER BY o.observed_at DESC, o.ingested_at DESC, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) COLLATE "C" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT 1) h
LEFT JOIN LATERAL (SELECT o.value_num, o.value_bool, o.value_text, o.observed_at, o.ingested_at, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) AS driver_instance, o.source_epoch, o.source_seq FROM observation_measurement_all o WHERE o.point_key = (SELECT k.key FROM point_key k WHERE k.point_id = p.point_id) AND o.observed_at >= p.newest_valued_chunk AND o.obs_hour >= p.newest_valued_chunk AND (o.value_num IS NOT NULL OR o.value_bool IS NOT NULL OR o.value_text IS NOT NULL) ORDER BY o.observed_at DESC, o.ingested_at DESC, (SELECT i.driver_instance FROM instance_key i WHERE i.key = o.instance_key) COLLATE "C" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT 1) v ON true;
CREATE TEMP TABLE ids AS SELECT array_agg(point_id) a FROM point_key;
SELECT a FROM ids \gset
EXPLAIN (ANALYZE) EXECUTE hd(:'a');
SQL
done
for db in ${DB}_hot ${DB}_packed; do
  echo "== $db: reprocess of 1,000,080 rows (926 points' whole day), one apply per point"
  grep -v '^UPDATE' "$HERE/tests/benches/compaction_reprocess.sql" | "${PSQL[@]}" -d $db -f - 2>&1 | grep -E "Time|updated"
done
uptime
