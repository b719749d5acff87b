#!/usr/bin/env bash
# Packing a closed hot day (issue 24 item 1, disk; migration 0019; BENCHMARKS.md "Packing a
# closed hot day"): a day partition filled in ingest order (the regular mix of
# tests/benches/compaction.sh: 4,000 points, 16 driver instances, one row every 2 ms), then
# `sentinel db pack` as the owner, measured in one sitting: bytes a row (heap, point index,
# dedup key) before and after, the pack's time beside a sequential scan of the partition, and
# the latency of a read of one point-hour and of a commit of a late row into the same
# partition, run by pgbench at 20 a second each before, during and after the pack (its
# per-transaction log, split at the pack's start and end).
#
#   tests/benches/pack.sh [ROWS]   (default 4320000; psql and pgbench on 127.0.0.1 as postgres)
#
# The day is in January 2026: `--no-compaction` (a core compacting at 7 days would take it).
# Environment: SENTINEL (the binary, default target/debug/sentinel: the work is PostgreSQL's),
# SENTINEL_NATS_SERVER (nats-server, started with JetStream on a free port; the stream is
# created empty, so no day is in its reach), BENCH_DB (default pack24bench).
set -euo pipefail
ROWS=${1:-4320000}
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
SENTINEL=${SENTINEL:-$HERE/target/debug/sentinel}
NATS_SERVER=${SENTINEL_NATS_SERVER:-nats-server}
DB=${BENCH_DB:-pack24bench}
URL=postgres://postgres@127.0.0.1:5432/$DB
PSQL=(psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1)
PART=observation_measurement_p20260115
WORK=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$NATS_SERVER" -js -sd "$WORK/js" -a 127.0.0.1 -p "$PORT" >"$WORK/nats.log" 2>&1 &
NATS_PID=$!
trap 'kill $NATS_PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
sleep 1
# The stream a core makes (bus-nats `stream_config`: OBS on obs.>, work queue), created by the
# JetStream API directly; `db pack` reads only its state.
python3 - "$PORT" <<'PY'
import json, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.recv(4096)
body = json.dumps({"name": "OBS", "subjects": ["obs.>"], "retention": "workqueue", "storage": "file",
                   "discard": "new", "max_msgs": 8000000, "max_bytes": 4294967296, "duplicate_window": 120000000000}).encode()
s.sendall(b'CONNECT {"verbose":false}\r\nSUB _INBOX.pack 1\r\nPUB $JS.API.STREAM.CREATE.OBS _INBOX.pack %d\r\n%s\r\nPING\r\n' % (len(body), body))
reply = b""
while b"MSG _INBOX.pack" not in reply or not reply.endswith(b"\r\n"):
    reply += s.recv(65536)
assert b'"error"' not in reply, reply
PY
"${PSQL[@]}" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
"$SENTINEL" migrate --database-url "$URL" >/dev/null
echo "== fill: $ROWS rows in ingest order"
"${PSQL[@]}" -d $DB -q <<SQL
\timing on
SELECT sentinel_ensure_partitions('2026-01-15', 1);
INSERT INTO point_key (point_id) SELECT 'site' || (p/100) || '.ahu' || (p%100) || '.supply_air_temp' FROM generate_series(0, 3999) p;
INSERT INTO instance_key (driver_instance) SELECT 'modbus-' || i || '.plant-a' FROM generate_series(0, 15) i;
INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, native_num,
    unit_native, quality, changed, registry_version, instance_key, source_epoch, source_seq)
  SELECT t + interval '150 milliseconds', pk.key, t, v, v * 1.8 + 32, 'degF',
    CASE WHEN n % 20 = 0 THEN 'stale'::quality ELSE 'live'::quality END, n % 3 = 0, 1, ik.key, 1, n
  FROM (SELECT n, n % 4000 AS p, TIMESTAMPTZ '2026-01-15' + n * interval '2 milliseconds' AS t, 20 + (n % 97) * 0.25 AS v
        FROM generate_series(0, $ROWS - 1) n) s
  JOIN point_key pk ON pk.point_id = 'site' || (s.p/100) || '.ahu' || (s.p%100) || '.supply_air_temp'
  JOIN instance_key ik ON ik.driver_instance = 'modbus-' || (s.p % 16) || '.plant-a' ORDER BY n;
VACUUM ANALYZE observation_measurement;
SQL
SIZES="SELECT count(*) AS rows, pg_table_size('$PART') AS heap,
  pg_indexes_size('$PART') AS indexes, round(pg_table_size('$PART')::numeric / count(*), 1) AS heap_b_row,
  round(pg_indexes_size('$PART')::numeric / count(*), 1) AS idx_b_row,
  round((pg_table_size('$PART') + pg_indexes_size('$PART'))::numeric / count(*), 1) AS b_row FROM $PART"
echo "== indexes of the partition: name, bytes, bytes a row, method, leaf density (before)"
IDX="CREATE EXTENSION IF NOT EXISTS pgstattuple; SELECT c.relname, pg_relation_size(c.oid), round(pg_relation_size(c.oid)::numeric / $ROWS, 1), a.amname, CASE WHEN a.amname = 'btree' THEN (pgstatindex(c.oid::regclass::text)).avg_leaf_density END FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = '$PART'::regclass ORDER BY 1"
"${PSQL[@]}" -d $DB -Atc "$IDX"
"${PSQL[@]}" -d $DB -c "$SIZES"
echo "== sequential scan of the partition (second of two)"
"${PSQL[@]}" -d $DB -c '\timing on' -c "SELECT count(*), sum(value_num) FROM $PART" -c "SELECT count(*), sum(value_num) FROM $PART" | grep Time | tail -1
cat >"$WORK/read.sql" <<'SQL'
\set p random(0, 3999)
SELECT count(*), max(value_num) FROM observation_measurement WHERE point_key = (SELECT key FROM point_key WHERE point_id = 'site' || (:p / 100) || '.ahu' || (:p % 100) || '.supply_air_temp') AND observed_at >= TIMESTAMPTZ '2026-01-15 01:00' AND observed_at < TIMESTAMPTZ '2026-01-15 02:00';
SQL
cat >"$WORK/commit.sql" <<'SQL'
\set s random(1, 2000000000)
INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, quality, changed, registry_version, instance_key, source_epoch, source_seq) VALUES (TIMESTAMPTZ '2026-01-15 03:00', (SELECT key FROM point_key WHERE point_id = 'site0.ahu1.supply_air_temp'), TIMESTAMPTZ '2026-01-15 02:59', 1, 'live', true, 1, (SELECT min(key) FROM instance_key), 2, :s) ON CONFLICT DO NOTHING;
SQL
PROBE_S=${PROBE_S:-120}
( cd "$WORK" && pgbench -h 127.0.0.1 -U postgres -n -c 2 -j 2 -R 40 -T "$PROBE_S" -l --log-prefix=probe \
    -f read.sql@1 -f commit.sql@1 $DB >"$WORK/pgbench.out" 2>&1 ) &
PROBE=$!
sleep 10
echo "== sentinel db pack"
START=$(date +%s.%N)
"$SENTINEL" db pack --no-compaction --database-url "$URL" --nats-url "nats://127.0.0.1:$PORT" --json | tee "$WORK/pack.json"
END=$(date +%s.%N)
echo "pack wall time: $(python3 -c "print(round($END - $START, 2))") s"
"${PSQL[@]}" -d $DB -Atc "$IDX"
"${PSQL[@]}" -d $DB -c "$SIZES"
wait $PROBE || true
echo "== again, after the probe: the probe's late rows made the day due; then nothing is"
for run in 1 2; do
  "$SENTINEL" db pack --no-compaction --database-url "$URL" --nats-url "nats://127.0.0.1:$PORT" --json | python3 -c 'import json,sys; j=json.load(sys.stdin); print("packed", len(j["packed"]), "skipped", j["skipped"], "seconds", round(j["seconds"], 3))'
done
echo "== probe latency (ms) by phase: script (0 read, 1 commit), n, median, p99, max"
python3 - "$WORK" "$START" "$END" <<'PY'
import glob, sys
work, start, end = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
rows = {}
for f in glob.glob(work + "/probe*"):
    for line in open(f):
        c = line.split()
        lat_ms, script, done = int(c[2]) / 1e3, int(c[3]), int(c[4]) + int(c[5]) / 1e6
        lag_ms = int(c[6]) / 1e3 if len(c) > 6 else 0.0
        began = done - lat_ms / 1e3
        phase = "before" if done < start else ("during" if began < end else "after")
        rows.setdefault((script, phase), []).append(lat_ms - lag_ms)
for (script, phase), v in sorted(rows.items()):
    v.sort()
    print(f"{['read', 'commit'][script]:<6} {phase:<6} n={len(v):>5} median={v[len(v)//2]:8.2f} p99={v[int(len(v)*0.99)]:8.2f} max={v[-1]:8.2f}")
PY
tail -3 "$WORK/pgbench.out"
uptime; date -u
