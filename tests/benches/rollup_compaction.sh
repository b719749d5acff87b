#!/usr/bin/env bash
# The rollup compaction benchmark (issue 24, disk; BENCHMARKS.md "Compacted days: the minute
# rollups"): one day of minute rollups for the stages bench's 4,000 points (5,760,000 buckets,
# every point every minute) in one hot daily partition, then compacted by
# `sentinel_compact_rollup_day` (migration 0016), measured with psql in one sitting: bytes per
# bucket (table plus indexes) hot and compacted, the compaction's time beside a sequential scan
# of the partition, and reads through `rollup_1m_all` (one point's day, every point's hour, the
# rollups load of `sentinel-store-pg`) beside the same reads on the hot copy. Then (branch
# roll24) a re-compaction: a recompute takes back 144 minutes (10%) of every point of the
# compacted day — hot rows with new values and the mask the recompute leaves, as
# `sentinel_rollup_recompute` writes them — and the day is compacted again, timed beside the
# first compaction, with the day's answer (count, sums) the same before and after it.
#
#   tests/benches/rollup_compaction.sh [regular|jitter]   (needs psql on 127.0.0.1 as postgres)
#
# `regular`: the 8 s periods of the raw benches (7 or 8 rows a minute, one minute in twenty with
# a stale row), values on a 0.25 grid; `jitter`: the same counts, values with two random
# decimals (the worse case for the sum, min and max columns). Databases: r24bench_hot,
# r24bench_packed.
set -euo pipefail
MIX=${1:-regular}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PSQL=(psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1)
mkdb() {
  "${PSQL[@]}" -qc "DROP DATABASE IF EXISTS $1" -c "CREATE DATABASE $1"
  for f in "$HERE"/migrations/*.sql; do "${PSQL[@]}" -d "$1" -q -1 -f "$f" >/dev/null; done
}
if [ "$MIX" = regular ]; then
  LO="20 + ((p * 7 + m) % 97) * 0.25"
  SPREAD="(m % 3) * 0.25"
else
  LO="round((18 + random() * 8)::numeric, 2)::float8"
  SPREAD="round((random() * 0.6)::numeric, 2)::float8"
fi
mkdb r24bench_hot
"${PSQL[@]}" -d r24bench_hot -q <<SQL
SELECT sentinel_ensure_partitions('2026-01-15', 1);
INSERT INTO point_key (point_id) SELECT 'site' || (p/100) || '.ahu' || (p%100) || '.supply_air_temp' FROM generate_series(0, 3999) p;
SELECT setseed(0.24);
INSERT INTO rollup_1m (point_id, bucket, retention_class, count, live_count, sum, min, max)
  SELECT 'site' || (p/100) || '.ahu' || (p%100) || '.supply_air_temp',
         TIMESTAMPTZ '2026-01-15' + m * interval '1 minute', 'measurement', c, l,
         round((lo * l + spread * (l - 1) / 2)::numeric, 2)::float8, lo, lo + spread
  FROM (SELECT p, m, 7 + (m + p) % 2 AS c, 7 + (m + p) % 2 - CASE WHEN (p + m) % 20 = 0 THEN 1 ELSE 0 END AS l,
               $LO AS lo, $SPREAD AS spread
        FROM generate_series(0, 3999) p, generate_series(0, 1439) m) s
  ORDER BY m, p;
VACUUM ANALYZE rollup_1m;
UPDATE core_epoch SET epoch = 1, core_start = 7;
SQL
"${PSQL[@]}" -qc "DROP DATABASE IF EXISTS r24bench_packed" -c "CREATE DATABASE r24bench_packed TEMPLATE r24bench_hot"
echo "== hot partition: buckets, total, heap, indexes (bytes)"
"${PSQL[@]}" -d r24bench_hot -Atc "SELECT count(*), pg_total_relation_size('rollup_1m_p20260115'), pg_relation_size('rollup_1m_p20260115'), pg_indexes_size('rollup_1m_p20260115') FROM rollup_1m_p20260115"
echo "== sequential scan, then the compaction"
"${PSQL[@]}" -d r24bench_packed -c '\timing on' -c "SELECT count(*), sum(sum) FROM rollup_1m_p20260115" \
  -c "SELECT * FROM sentinel_compact_rollup_day(1, 7, '2026-01-15', '2026-02-01', 7, 'bench')"
echo "== compacted partition: total, heap, toast, indexes (bytes); per-column bytes per chunk"
"${PSQL[@]}" -d r24bench_packed -Atc "SELECT pg_total_relation_size(c.oid), pg_relation_size(c.oid), pg_total_relation_size(c.reltoastrelid), pg_indexes_size(c.oid) FROM pg_class c WHERE relname = 'rollup_1m_compact_p20260115'" \
  -c "SELECT avg(n)::int, avg(COALESCE(pg_column_size(minutes), 0))::int, avg(pg_column_size(count))::int, avg(COALESCE(pg_column_size(live_count), 0))::int, avg(pg_column_size(sum))::int, avg(pg_column_size(min))::int, avg(pg_column_size(max))::int, avg(pg_column_size(k.*))::int FROM rollup_1m_compact_p20260115 k"
echo "== every answer the same: buckets differing between the hot and the compacted copies (0 expected)"
"${PSQL[@]}" -d r24bench_packed -Atc "CREATE EXTENSION IF NOT EXISTS dblink" >/dev/null
"${PSQL[@]}" -d r24bench_packed -Atc "SELECT count(*) FROM (
  (SELECT point_id, bucket, retention_class, count, live_count, sum, min, max FROM rollup_1m_all
   EXCEPT ALL SELECT * FROM dblink('dbname=r24bench_hot host=127.0.0.1 user=postgres',
     'SELECT point_id, bucket, retention_class, count, live_count, sum, min, max FROM rollup_1m')
     AS t(point_id text, bucket timestamptz, retention_class text, count bigint, live_count bigint, sum float8, min float8, max float8))
  UNION ALL
  (SELECT * FROM dblink('dbname=r24bench_hot host=127.0.0.1 user=postgres',
     'SELECT point_id, bucket, retention_class, count, live_count, sum, min, max FROM rollup_1m')
     AS t(point_id text, bucket timestamptz, retention_class text, count bigint, live_count bigint, sum float8, min float8, max float8)
   EXCEPT ALL SELECT point_id, bucket, retention_class, count, live_count, sum, min, max FROM rollup_1m_all)) d"
for db in r24bench_hot r24bench_packed; do
  echo "== $db: one point's day, every point's hour, the store's rollups load of one point's day (execution times, three runs)"
  "${PSQL[@]}" -d $db -f - <<'SQL' | grep -E "Execution Time|rows\\)"
PREPARE d(text) AS SELECT bucket, count, live_count, sum, min, max FROM rollup_1m_all WHERE point_id = $1 AND day = '2026-01-15' AND bucket >= '2026-01-15' AND bucket < '2026-01-16' ORDER BY bucket;
PREPARE h AS SELECT point_id, bucket, count, sum FROM rollup_1m_all WHERE day = '2026-01-15' AND bucket >= '2026-01-15 10:00' AND bucket < '2026-01-15 11:00';
PREPARE l(text) AS SELECT point_id, bucket, retention_class, count, live_count, sum, min, max FROM rollup_1m_all WHERE bucket >= '2026-01-15' AND bucket < '2026-01-16' AND day >= date_bin('1 day', TIMESTAMPTZ '2026-01-15', TIMESTAMPTZ '1970-01-01 00:00:00+00') AND day < '2026-01-16' AND ($1::text IS NULL OR point_id = $1) ORDER BY point_id, bucket LIMIT 100000;
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE d('site17.ahu42.supply_air_temp');
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE d('site17.ahu42.supply_air_temp');
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE d('site17.ahu42.supply_air_temp');
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE h;
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE h;
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE h;
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE l('site17.ahu42.supply_air_temp');
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE l('site17.ahu42.supply_air_temp');
EXPLAIN (ANALYZE, TIMING OFF) EXECUTE l('site17.ahu42.supply_air_temp');
SQL
done
echo "== re-compaction: 144 minutes of every point recomputed hot (576,000 buckets, 10%), then the day compacted again"
"${PSQL[@]}" -d r24bench_packed -q <<'SQL'
INSERT INTO rollup_1m (point_id, bucket, retention_class, count, live_count, sum, min, max)
  SELECT point_id, bucket, retention_class, count, live_count, sum + 1, min + 1, max + 1
  FROM rollup_1m_all WHERE day = '2026-01-15' AND bucket >= '2026-01-15 10:00' AND bucket < '2026-01-15 12:24';
INSERT INTO rollup_1m_compact_mask (day, from_ts, from_m, from_s, from_d, to_ts)
  VALUES ('2026-01-15', '2026-01-15 10:00', '2026-01-15 10:00', '2026-01-15 10:00', '2026-01-15 10:00', '2026-01-15 12:24');
VACUUM ANALYZE rollup_1m;
SQL
echo "-- the day's answer before: buckets, sum of counts, sum of sums"
"${PSQL[@]}" -d r24bench_packed -Atc "SELECT count(*), sum(count), round(sum(sum)::numeric, 2) FROM rollup_1m_all WHERE day = '2026-01-15'"
"${PSQL[@]}" -d r24bench_packed -c '\timing on' -c "SELECT count(*) FROM rollup_1m_p20260115" \
  -c "SELECT * FROM sentinel_compact_rollup_day(1, 7, '2026-01-15', '2026-02-01', 1, 'bench')"
echo "-- and after (the same expected), hot rows and masks left (0 and 0 expected)"
"${PSQL[@]}" -d r24bench_packed -Atc "SELECT count(*), sum(count), round(sum(sum)::numeric, 2) FROM rollup_1m_all WHERE day = '2026-01-15'" \
  -c "SELECT (SELECT count(*) FROM rollup_1m_p20260115), (SELECT count(*) FROM rollup_1m_compact_mask)"
uptime
