//! Reprocess cost (issue 9 item 3; DESIGN.md §8), against a private PostgreSQL database.
//!
//! Run: `cargo bench -p sentinel-tests --bench reprocess [-- --rows N] [--rounds R] [--chunk-rows C]`
//!
//! Fills `observation_measurement` with `--rows` rows (default 1,000,000) of the reprocess test
//! registry's measurement point (`rp.boiler.pressure`, version 1's wrong `Pa` scale), one every
//! 100 ms of observed time (about 28 hours), 95% live and 5% `unavailable` asserted by the driver,
//! in ingest order, then VACUUM ANALYZE. Each round then measures, on the same rows:
//!   * `scan`: the comparison, a sequential aggregate of the same rows (`count`, `sum` of
//!     `native_num` over the scope's point and range): reading them once, writing nothing;
//!   * `read`: the reprocess's own read path alone, every page of `Store::load_reprocess_rows`;
//!   * `reprocess`: `sentinel_runtime::reprocess::run` end to end, as `sentinel reprocess` runs it:
//!     pages read, stages 6–8 recomputed, chunks updated through `sentinel_reprocess_apply`
//!     (each its own fenced transaction), then both rollups refreshed over the whole range, the
//!     point's state rebuilt and one control event. Rounds alternate between version 2 and
//!     version 1 so every round rewrites every row; VACUUM runs between rounds, untimed.
//!   * `refresh`: the rollup refresh over the same range alone (the part a reprocess shares
//!     with `sentinel rollup refresh`).
//!
//! Prints each measurement's median, minimum and maximum and the load average.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::time::{Duration, Instant};

use sentinel_core::{Config, Micros};
use sentinel_ports::{Lease, Store};
use sentinel_runtime::reprocess::{self, Request};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bench::{arg, load_average};
use sentinel_tests::pg::TestDb;
use sentinel_tests::reprocess::{self as rp, PRESSURE};
use sqlx::{Connection, PgConnection};

const START: &str = "2026-01-15T00:00:00Z";

fn summary(name: &str, rows: u64, samples: &mut [Duration]) {
    samples.sort();
    let median = samples[samples.len() / 2];
    println!(
        "{name:<12} median {:>8.3} s  min {:>8.3} s  max {:>8.3} s  ({:.0} rows/s at the median)",
        median.as_secs_f64(),
        samples[0].as_secs_f64(),
        samples[samples.len() - 1].as_secs_f64(),
        rows as f64 / median.as_secs_f64()
    );
}

async fn fill(conn: &mut PgConnection, rows: u64) {
    let days = i32::try_from(rows / 864_000 + 3).expect("days");
    // From the day before: a row observed at START may have been ingested up to the future-skew
    // bound earlier, so a scope from START needs that day's partition to exist (the refusal).
    sqlx::query("SELECT sentinel_ensure_partitions(DATE '2026-01-14', $1)")
        .bind(days)
        .execute(&mut *conn)
        .await
        .expect("partitions");
    // The ids' keys (migration 0014), as a registry load assigns them.
    sqlx::query(
        "WITH p AS (INSERT INTO point_key (point_id) VALUES ($1) ON CONFLICT DO NOTHING) \
         INSERT INTO instance_key (driver_instance) VALUES ('rp-drv') ON CONFLICT DO NOTHING",
    )
    .bind(PRESSURE)
    .execute(&mut *conn)
    .await
    .expect("keys");
    let started = Instant::now();
    sqlx::query(
        "INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, \
           native_num, unit_native, quality, reason, changed, registry_version, instance_key, \
           source_epoch, source_seq) \
         SELECT t + interval '150 milliseconds', (SELECT key FROM point_key WHERE point_id = $3), t, \
                CASE WHEN n % 20 = 0 THEN NULL ELSE (90 + (n % 97) * 0.25) * 0.001 END, \
                90 + (n % 97) * 0.25, 'Pa', \
                CASE WHEN n % 20 = 0 THEN 'unavailable'::quality ELSE 'live'::quality END, \
                CASE WHEN n % 20 = 0 THEN 'source_down' END, \
                true, 1, (SELECT key FROM instance_key WHERE driver_instance = 'rp-drv'), 1, n \
         FROM (SELECT n, $1::text::timestamptz + n * interval '100 milliseconds' AS t \
               FROM generate_series(0::bigint, $2::bigint - 1) n) s",
    )
    .bind(START)
    .bind(i64::try_from(rows).expect("rows"))
    .bind(PRESSURE)
    .execute(&mut *conn)
    .await
    .expect("fill");
    eprintln!("filled {rows} rows in {:.1} s", started.elapsed().as_secs_f64());
    vacuum(conn).await;
}

async fn vacuum(conn: &mut PgConnection) {
    sqlx::raw_sql("VACUUM ANALYZE observation_measurement")
        .execute(&mut *conn)
        .await
        .expect("vacuum");
}

async fn scan(conn: &mut PgConnection, from: Micros) -> u64 {
    let (n, _sum): (i64, Option<f64>) = sqlx::query_as(
        "SELECT count(*), sum(native_num) FROM observation_measurement \
         WHERE point_id = $1 AND observed_at >= to_timestamp($2 / 1e6)",
    )
    .bind(PRESSURE)
    .bind(from.0 as f64)
    .fetch_one(&mut *conn)
    .await
    .expect("scan");
    n as u64
}

async fn read_all(store: &PgStore, from: Micros, chunk: usize) -> u64 {
    let mut after = None;
    let mut n = 0;
    loop {
        let page = store
            .load_reprocess_rows(
                sentinel_core::RetentionClass::Measurement,
                PRESSURE,
                from,
                None,
                after.as_ref(),
                chunk,
            )
            .await
            .expect("page");
        n += page.len() as u64;
        if page.len() < chunk {
            return n;
        }
        after = page.last().cloned();
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let rows = arg("--rows", 1_000_000u64).clamp(1_000, 20_000_000);
    let rounds = arg("--rounds", 3u64).clamp(1, 20) as usize;
    let chunk_rows = arg(
        "--chunk-rows",
        sentinel_core::reprocess::CHUNK_ROWS_DEFAULT as u64,
    )
    .clamp(1, reprocess::CHUNK_ROWS_MAX as u64) as usize;
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let mut conn = PgConnection::connect(&db.url).await.expect("connect raw");
    println!(
        "reprocess bench: {rows} rows, {rounds} rounds, chunks of {chunk_rows}, load before filling {}",
        load_average()
    );
    let lease = store.acquire().await.expect("acquire");
    let v1 = rp::load(&store, 1).await;
    let v2 = rp::load(&store, 2).await;
    fill(&mut conn, rows).await;
    let from = Micros::parse_rfc3339(START).expect("start");
    let config = Config::default();
    let request = Request {
        glob: "rp.boiler.*".into(),
        from,
        to: None,
        chunk_rows,
    };
    // "now": a day after the last row, inside every horizon.
    let now = Micros(from.0 + (rows as i64 / 10 + 86_400) * 1_000_000);
    println!("load before measuring {}", load_average());
    let (mut scans, mut reads, mut runs, mut refreshes) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let started = Instant::now();
        let n = scan(&mut conn, from).await;
        scans.push(started.elapsed());
        assert_eq!(n, rows);

        let started = Instant::now();
        let n = read_all(&store, from, chunk_rows).await;
        reads.push(started.elapsed());
        assert_eq!(n, rows);

        let registry = if round % 2 == 0 { &v2 } else { &v1 };
        let plan = reprocess::plan(&store, registry, &config, &request, now)
            .await
            .expect("plan");
        assert!(!plan.refused());
        let started = Instant::now();
        let report = reprocess::run(
            &store,
            lease.epoch(),
            registry,
            &config,
            &request,
            &plan,
            "operator:bench",
            now,
            reprocess::Projecting::Checkpoint,
            &mut |_| {},
        )
        .await
        .expect("reprocess");
        runs.push(started.elapsed());
        assert_eq!(report.rows, rows);

        let (rf, rt) = plan.minute_range.expect("range");
        let started = Instant::now();
        store
            .refresh_rollups(lease.epoch(), rf, rt)
            .await
            .expect("refresh");
        refreshes.push(started.elapsed());
        vacuum(&mut conn).await;
    }
    summary("scan", rows, &mut scans);
    summary("read", rows, &mut reads);
    summary("reprocess", rows, &mut runs);
    summary("refresh", rows, &mut refreshes);
    println!("load after measuring {}", load_average());
    lease.release().await.expect("release");
}
