//! Rollup refresh cost (issue 9; DESIGN.md §8), against a private PostgreSQL database.
//!
//! Run: `cargo bench -p sentinel-tests --bench rollups [-- --hours H] [--rounds R]
//! [--day-rounds D] [--drop]`
//!
//! Fills `observation_measurement` with `--hours` hours (default 1) at the design rate of 500
//! observations a second (1.8M rows an hour; 4,000 points, one reading every 8 s each, 95% live,
//! half the points agg_safe), in ingest order, with both indexes, the BRIN on observed_at and the
//! invalidation trigger in place, then VACUUM ANALYZE. Each round then measures, on the same
//! rows:
//!   * `refresh`: `Store::refresh_rollups` over the first hour — both rollups, 1m and 1h, from
//!     raw, deleting what was there (every round after the first replaces a full hour);
//!   * `scan`: the comparison, a plain aggregate of the same hour's rows grouped by point
//!     (`count`, `sum`, `min`, `max` over `observed_at` in the hour): what one rollup's
//!     computation costs without writing anything.
//!     And with `--hours 24`, the same pair over the whole day (`--day-rounds`, default 1: a
//!     round takes minutes).
//!   * with `--drop` (and `--hours 24`), last: a retention drop of the first day
//!     (`Store::drop_expired`: one daily raw partition of 43.2M rows, its `retention_drop`
//!     event and mark), beside a sequential `count(*)` of the same day's rows and the size of
//!     the partition it removes.
//!
//! Prints each measurement's median, minimum and maximum and the load average.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::time::{Duration, Instant};

use sentinel_core::Micros;
use sentinel_ports::{Lease, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bench::{arg, load_average};
use sentinel_tests::pg::TestDb;
use sqlx::{Connection, PgConnection};

const POINTS: i64 = 4_000;
const RATE_PER_S: i64 = 500;
const START: &str = "2026-01-15T00:00:00Z";

fn summary(name: &str, rows: i64, samples: &mut [Duration]) {
    samples.sort();
    let median = samples[samples.len() / 2];
    println!(
        "{name:<28} median {:>8.3} s  min {:>8.3} s  max {:>8.3} s  ({:.0} rows/s at the median)",
        median.as_secs_f64(),
        samples[0].as_secs_f64(),
        samples[samples.len() - 1].as_secs_f64(),
        rows as f64 / median.as_secs_f64()
    );
}

/// The rows of `[START + from_h, START + to_h)` hours, in ingest order, one statement per hour.
async fn fill(conn: &mut PgConnection, hours: u64) {
    sqlx::query("SELECT sentinel_ensure_partitions(DATE '2026-01-15', $1)")
        .bind(i32::try_from(hours / 24 + 2).expect("days"))
        .execute(&mut *conn)
        .await
        .expect("partitions");
    // Registry: half the points agg_safe.
    sqlx::raw_sql(
        "INSERT INTO registry_version VALUES (1, now(), 'bench', 'bench'); \
         INSERT INTO descriptor_blob VALUES ('safe', '{\"agg_safe\":true}', '{}'), \
                                            ('raw', '{\"agg_safe\":false}', '{}'); \
         INSERT INTO point_descriptor \
           SELECT 1, 'bench.p' || i, CASE WHEN i % 2 = 0 THEN 'safe' ELSE 'raw' END \
           FROM generate_series(0, 3999) i; \
         INSERT INTO point_key (point_id) SELECT 'bench.p' || i FROM generate_series(0, 3999) i; \
         INSERT INTO instance_key (driver_instance) SELECT 'bench-' || i FROM generate_series(0, 15) i;",
    )
    .execute(&mut *conn)
    .await
    .expect("registry");
    let per_hour = RATE_PER_S * 3_600;
    for hour in 0..hours as i64 {
        let started = Instant::now();
        sqlx::query(
            "INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, \
               native_num, quality, changed, registry_version, instance_key, source_epoch, source_seq) \
             SELECT t + interval '150 milliseconds', pk.key, t, \
                    20 + (n % 97) * 0.25, 20 + (n % 97) * 0.25, \
                    CASE WHEN n % 20 = 0 THEN 'stale'::quality ELSE 'live'::quality END, \
                    true, 1, ik.key, 1, n \
             FROM (SELECT n, $1::text::timestamptz + n * interval '2 milliseconds' AS t \
                   FROM generate_series($2::bigint, $2::bigint + $4::bigint - 1) n) s \
             JOIN point_key pk ON pk.point_id = 'bench.p' || (s.n % $3) \
             JOIN instance_key ik ON ik.driver_instance = 'bench-' || (s.n % 16) \
             ORDER BY n",
        )
        .bind(START)
        .bind(hour * per_hour)
        .bind(POINTS)
        .bind(per_hour)
        .execute(&mut *conn)
        .await
        .expect("fill an hour");
        eprintln!(
            "filled hour {hour} ({per_hour} rows) in {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
    sqlx::raw_sql("VACUUM ANALYZE observation_measurement")
        .execute(&mut *conn)
        .await
        .expect("vacuum");
}

async fn scan(conn: &mut PgConnection, from: Micros, to: Micros) -> i64 {
    let rows: Vec<(String, i64, Option<f64>)> = sqlx::query_as(
        "SELECT point_key::text, count(*), sum(value_num) FILTER (WHERE quality = 'live') \
         FROM observation_measurement \
         WHERE observed_at >= to_timestamp($1 / 1e6) AND observed_at < to_timestamp($2 / 1e6) \
         GROUP BY point_key",
    )
    .bind(from.0 as f64)
    .bind(to.0 as f64)
    .fetch_all(&mut *conn)
    .await
    .expect("scan");
    rows.iter().map(|r| r.1).sum()
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let hours = arg("--hours", 1u64).clamp(1, 24 * 7);
    let rounds = arg("--rounds", 5u64).clamp(1, 50) as usize;
    let day_rounds = arg("--day-rounds", 1u64).clamp(1, 50) as usize;
    let drop = std::env::args().any(|a| a == "--drop");
    let db = TestDb::create().await.expect("test database");
    // A day's refresh is one statement of minutes: well past the store's default timeout.
    let config = PgStoreConfig {
        statement_timeout_ms: 3_600_000,
        ..PgStoreConfig::default()
    };
    let store = PgStore::connect(&db.url, config).await.expect("connect");
    store.migrate().await.expect("migrate");
    let mut conn = PgConnection::connect(&db.url).await.expect("connect raw");
    println!(
        "rollups bench: {hours} h at {RATE_PER_S}/s ({} rows), {rounds} rounds, load before filling {}",
        hours as i64 * RATE_PER_S * 3_600,
        load_average()
    );
    fill(&mut conn, hours).await;
    let lease = store.acquire().await.expect("acquire");
    let start = Micros::parse_rfc3339(START).expect("start");
    let mut ranges = vec![("one hour", start, Micros(start.0 + 3_600_000_000))];
    if hours >= 24 {
        ranges.push(("one day", start, Micros(start.0 + 86_400_000_000)));
    }
    println!("load before measuring {}", load_average());
    for (name, from, to) in ranges {
        let mut refresh = Vec::new();
        let mut scans = Vec::new();
        let mut rows = 0;
        let rounds = if name == "one day" { day_rounds } else { rounds };
        for _ in 0..rounds {
            let started = Instant::now();
            let done = store
                .refresh_rollups(lease.epoch(), from, to)
                .await
                .expect("refresh");
            refresh.push(started.elapsed());
            assert!(done.minute_buckets > 0, "the range holds rows");
            let started = Instant::now();
            rows = scan(&mut conn, from, to).await;
            scans.push(started.elapsed());
        }
        println!("{name}: {rows} rows");
        summary(&format!("  refresh ({name})"), rows, &mut refresh);
        summary(&format!("  scan ({name})"), rows, &mut scans);
    }
    if drop && hours >= 24 {
        retention_drop(&store, lease.epoch(), &mut conn, start).await;
    }
    println!("load after measuring {}", load_average());
    lease.release().await.expect("release");
}

/// The first day's raw partition dropped by retention, beside a sequential scan of its rows.
async fn retention_drop(store: &PgStore, epoch: u32, conn: &mut PgConnection, start: Micros) {
    use sentinel_ports::RetentionCutoffs;
    let day_end = Micros(start.0 + 86_400_000_000);
    let far_past = Micros::parse_rfc3339("2000-01-01T00:00:00Z").expect("instant");
    let (bytes, pretty): (i64, String) = sqlx::query_as(
        "SELECT pg_total_relation_size('observation_measurement_p20260115'),                 pg_size_pretty(pg_total_relation_size('observation_measurement_p20260115'))",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("partition size");
    let started = Instant::now();
    let rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM observation_measurement          WHERE ingested_at >= '2026-01-15T00:00:00Z' AND ingested_at < '2026-01-16T00:00:00Z'",
    )
    .fetch_one(&mut *conn)
    .await
    .expect("count the day");
    let scan = started.elapsed();
    let cutoffs = RetentionCutoffs {
        raw: [day_end, far_past, far_past],
        rollup_1m: far_past,
        rollup_1h: far_past,
    };
    let started = Instant::now();
    let run = store
        .drop_expired(epoch, cutoffs, 10, "bench", day_end)
        .await
        .expect("drop");
    let dropped = started.elapsed();
    assert_eq!(run.dropped.len(), 1, "exactly the first day's partition");
    println!("retention drop of one day: {rows} rows, partition {pretty} ({bytes} bytes)");
    println!(
        "  drop_expired (one partition + event)  {:>8.3} s",
        dropped.as_secs_f64()
    );
    println!(
        "  scan (count(*) of the same day)       {:>8.3} s",
        scan.as_secs_f64()
    );
}
