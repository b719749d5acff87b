//! Cold start for 4,000 points of which 1,000 derived, per startup step (core runtime spec,
//! exit criteria: "Cold-start duration, per startup step", and "Scale targets"; DESIGN.md §8;
//! issue 14), against a private nats-server and PostgreSQL database.
//!
//! Run: `cargo bench -p sentinel-tests --bench cold_start [-- --hours H] [--keep-db]
//! [--reuse-db URL]` (after
//! `scripts/test` has installed a current nats-server, or with SENTINEL_NATS_SERVER set).
//!
//! The history a restart finds: a registry of 4,000 points (the stages benchmark's mix: 70%
//! numbers, a fifth in °F; bool, enum, text, diagnostics; 16 hosts) whose last 1,000 are
//! derived points (host `sentinel`, the eight ops in turn, windows of 60 s, 5 min, 15 min and
//! 1 h in turn, each reading a different number point); `--hours` hours (default 24) of
//! history at the design rate, 500 rows/s (every point one reading every 8 s, 5% of them
//! stale), generated in the database by one `INSERT … SELECT generate_series` per hour and
//! class into the class tables with every index and trigger in place, then VACUUM ANALYZE; on
//! top, ten readings per source point through the real path (a core ingests them and derives
//! from them, and its clean stop writes the checkpoint), and 4,000 control events above the
//! checkpoint's watermarks. Then `startup::start` runs `ROUNDS` times, each a full acquisition
//! (lock, epoch, registry, restore, connect, bind, restart steps 4–8), and each step's median,
//! minimum, maximum and first round are printed, with the 59-point sample registry's cold
//! start measured in the same run for comparison. The database is dropped at the end, unless
//! `--keep-db` (to EXPLAIN its queries; drop it by hand after); `--reuse-db URL` measures
//! again over such a kept database, migrated by this binary, without building the history.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::time::{Duration, Instant};

use bytes::Bytes;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::registry::{Archetype, Derived, DerivedOp, Descriptor, Kind, RetentionClass, canonical};
use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{Config, ControlDetail, ControlEvent, Micros, Quality, registry::PointIdx};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, Lease, Store, StoreError};
use sentinel_runtime::startup::{self, StartError};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bench::{arg, flag, load_average};
use sentinel_tests::harness::{InProcessCore, bus_with_stream};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use sentinel_tests::traffic;
use sqlx::{Connection, PgConnection};

/// The stages benchmark's 4,000-point mix.
#[path = "../../core/benches/shared/fleet_4000.rs"]
mod fleet_4000;

use fleet_4000::{POINTS, descriptors};

const READINGS_PER_POINT: usize = 10;
const ROUNDS: usize = 7;
/// The last `DERIVED` points of the fleet are derived.
const DERIVED: usize = 1_000;
/// The design rate (core runtime spec, "Scale targets").
const RATE_PER_S: i64 = 500;
/// The sliding windows derived points take in turn.
const WINDOWS_S: [u32; 4] = [60, 300, 900, 3_600];

/// The fleet with its last [`DERIVED`] points made derived: point `3000 + j` computes
/// `DerivedOp::ALL[j % 8]` over window `WINDOWS_S[(j / 8) % 4]`, reading the `j`-th number
/// point of the first 3,000 (pair ops also the `j + 1000`-th), so 1,000 inputs are read.
fn derived_fleet() -> Vec<Descriptor> {
    let mut descriptors = descriptors();
    let sources = POINTS - DERIVED;
    let numbers: Vec<String> = descriptors[..sources]
        .iter()
        .filter(|d| d.kind == Kind::Number && d.agg_safe)
        .map(|d| d.id.clone())
        .collect();
    assert!(numbers.len() >= 2 * DERIVED, "enough number points to read");
    for (j, d) in descriptors[sources..].iter_mut().enumerate() {
        let op = DerivedOp::ALL[j % DerivedOp::ALL.len()];
        let inputs = if op.is_window() {
            vec![numbers[j].clone()]
        } else {
            vec![numbers[j].clone(), numbers[j + DERIVED].clone()]
        };
        let window_s = op
            .is_window()
            .then_some(WINDOWS_S[(j / DerivedOp::ALL.len()) % WINDOWS_S.len()]);
        let mut derived = Descriptor {
            unit: Some("degC".to_owned()),
            agg_safe: true,
            derived: Some(Derived { op, inputs, window_s }),
            ..Descriptor::new(
                &format!("sentinel.derived.d{j}"),
                Kind::Number,
                RetentionClass::Measurement,
                sentinel_core::self_points::SELF_HOST,
                "derived",
            )
        };
        derived.manifest.archetype = Archetype::Derived;
        *d = derived;
    }
    descriptors
}

/// `hours` of history at the design rate ending at `end`, every point one reading every 8 s,
/// generated inside the database (one statement per hour and class), then VACUUM ANALYZE.
async fn fill_history(url: &str, descriptors: &[Descriptor], end: sentinel_core::Micros, hours: u64) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::query("SELECT sentinel_ensure_partitions(($1::timestamptz - interval '2 days')::date, 4)")
        .bind(end.to_rfc3339())
        .execute(&mut conn)
        .await
        .expect("partitions");
    sqlx::raw_sql(
        "CREATE TABLE bench_point (idx integer PRIMARY KEY, id text NOT NULL, kind text NOT NULL,          class text NOT NULL, instance text NOT NULL)",
    )
    .execute(&mut conn)
    .await
    .expect("bench_point");
    for (i, d) in descriptors.iter().enumerate() {
        let kind = match d.kind {
            Kind::Number => "number",
            Kind::Bool => "bool",
            Kind::Enum => "enum",
            Kind::Text => "text",
        };
        sqlx::query("INSERT INTO bench_point VALUES ($1, $2, $3, $4, $5)")
            .bind(i as i32)
            .bind(&d.id)
            .bind(kind)
            .bind(d.retention.as_str())
            .bind(&d.assignment.driver_instance)
            .execute(&mut conn)
            .await
            .expect("bench point");
    }
    let per_hour = RATE_PER_S * 3_600;
    let start = Micros(end.0 - hours as i64 * 3_600_000_000);
    for hour in 0..hours as i64 {
        let started = Instant::now();
        for (class, table) in [
            ("measurement", "observation_measurement"),
            ("state", "observation_state"),
            ("diagnostic", "observation_diagnostic"),
        ] {
            // The table name is one of three literals above.
            let sql = format!(
                "INSERT INTO {table} (ingested_at, point_id, observed_at, value_num, value_bool, value_text, \
                   native_num, quality, changed, registry_version, driver_instance, source_epoch, source_seq) \
                 SELECT s.t + interval '150 milliseconds', p.id, s.t, \
                        CASE WHEN p.kind = 'number' THEN 20 + (s.n % 97) * 0.25 END, \
                        CASE WHEN p.kind = 'bool' THEN s.n % 2 = 0 END, \
                        CASE p.kind WHEN 'enum' THEN (ARRAY['off','on','fault'])[1 + (s.n / 4000) % 3] \
                                    WHEN 'text' THEN 'ok' END, \
                        CASE WHEN p.kind = 'number' THEN 20 + (s.n % 97) * 0.25 END, \
                        CASE WHEN (s.n / 4000) % 20 = 0 THEN 'stale'::quality ELSE 'live'::quality END, \
                        true, 1, p.instance, 0, s.n \
                 FROM (SELECT n, $1::timestamptz + n * interval '2 milliseconds' AS t \
                       FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) n) s \
                 JOIN bench_point p ON p.idx = (s.n % {POINTS}) \
                 WHERE p.class = '{class}'"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(start.to_rfc3339())
                .bind(hour * per_hour)
                .bind(per_hour)
                .execute(&mut conn)
                .await
                .expect("fill an hour");
        }
        eprintln!(
            "filled hour {hour} ({per_hour} rows) in {:.1} s, load {}",
            started.elapsed().as_secs_f64(),
            load_average()
        );
    }
    let started = Instant::now();
    sqlx::raw_sql("VACUUM ANALYZE observation_measurement, observation_state, observation_diagnostic")
        .execute(&mut conn)
        .await
        .expect("vacuum");
    eprintln!("VACUUM ANALYZE in {:.1} s", started.elapsed().as_secs_f64());
    let _ = conn.close().await;
}

fn reading(d: &Descriptor, seq: u64, now: sentinel_core::Micros) -> (String, String, Bytes) {
    let value = match d.kind {
        Kind::Number => serde_json::json!(20.0 + (seq % 10) as f64),
        Kind::Bool => serde_json::json!(seq.is_multiple_of(2)),
        Kind::Enum => serde_json::json!(seq % 3),
        Kind::Text => serde_json::json!("ok"),
    };
    let instance = &d.assignment.driver_instance;
    let mut e = EnvelopeOut::new(&d.id, instance, 1, seq, now.add_ms(-1_000), value);
    e.unit = d.unit_native.clone();
    (
        format!("obs.{}.{instance}", d.assignment.host),
        e.msg_id(),
        Bytes::from(e.to_bytes()),
    )
}

/// Starts and drains one core over the published history, then stops it cleanly (which
/// writes the full checkpoint).
async fn ingest_history(bus: &NatsBus, store: &PgStore, total: u64) {
    let started = start_when_free(bus, store).await;
    let core = InProcessCore::spawn(started, store.clone());
    loop {
        let lag = bus.lag().await.expect("lag");
        let rows = store.row_counts().await.expect("rows").total();
        if rows >= total && lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    core.stop().await;
}

/// `startup::start`, retrying while the previous holder's session is still being released.
async fn start_when_free(bus: &NatsBus, store: &PgStore) -> startup::Started<NatsBus, PgStore> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match startup::start(
            store,
            startup::already_connected(bus),
            None,
            Config::default(),
            &SystemClock,
        )
        .await
        {
            Ok(started) => return started,
            Err(StartError::LockHeld) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("start: {e}"),
        }
    }
}

/// Per step: every round's duration in µs, in step order.
async fn measure(bus: &NatsBus, store: &PgStore) -> Vec<(String, Vec<u64>)> {
    let mut steps: Vec<(String, Vec<u64>)> = Vec::new();
    for _ in 0..ROUNDS {
        let started = start_when_free(bus, store).await;
        for (i, (step, us)) in started.timings.steps.iter().enumerate() {
            if steps.len() <= i {
                steps.push(((*step).to_owned(), Vec::new()));
            }
            steps[i].1.push(*us);
        }
        let startup::Started { lease, consumer, .. } = started;
        drop(consumer);
        lease.release().await.expect("release");
    }
    steps
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

async fn setup(nats: &NatsServer) -> (TestDb, PgStore, NatsBus) {
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    })
    .await;
    (db, store, bus)
}

/// The 4,000-point history: the registry, ten readings per source point through a core, the
/// day of history, 4,000 control events.
async fn build_history(nats: &NatsServer, hours: u64) -> (TestDb, PgStore, NatsBus) {
    let (db, store, bus) = setup(nats).await;
    let descriptors = derived_fleet();
    store
        .store_registry(&canonical::snapshot("bench", &descriptors))
        .await
        .expect("registry");
    let publisher = ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let now = SystemClock.now();
    // Keys must be unique per driver instance, which many points share: the point's index in
    // the high bits, the reading's number in the low ones.
    let sources = &descriptors[..POINTS - DERIVED];
    let items: Vec<_> = (0..READINGS_PER_POINT)
        .flat_map(|r| sources.iter().enumerate().map(move |(i, d)| (r, i, d)))
        .map(|(r, i, d)| reading(d, (i as u64) << 8 | (r as u64 + 1), now))
        .collect();
    let total = publisher
        .publish_pipelined(items, 1024)
        .await
        .expect("publish")
        .stored;
    ingest_history(&bus, &store, total).await;
    // The day before those readings, older than all of them.
    let fill_started = Instant::now();
    fill_history(&db.url, &descriptors, now.add_ms(-2_000), hours).await;
    let history_rows = store.row_counts().await.expect("rows").total();
    eprintln!(
        "history: {history_rows} rows in {:.0} s",
        fill_started.elapsed().as_secs_f64()
    );

    // 4,000 control events above the checkpoint's watermarks, written by a later epoch.
    let lease = loop {
        match store.acquire().await {
            Ok(lease) => break lease,
            Err(StoreError::LockHeld) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("acquire: {e}"),
        }
    };
    let events: Vec<ControlEvent> = descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| ControlEvent {
            occurred_at: now,
            point: Some(PointIdx(i as u32)),
            point_id: d.id.as_str().into(),
            principal: "core:watchdog".into(),
            core_epoch: lease.epoch(),
            registry_version: 1,
            detail: ControlDetail::QualityChanged {
                from: Quality::Live,
                to: Quality::Stale,
                reason: sentinel_core::GapReason::Freshness,
                deadline: now,
            },
        })
        .collect();
    for chunk in events.chunks(sentinel_core::control::CONTROL_EVENTS_PER_WRITE_MAX) {
        store
            .write_control_events(lease.epoch(), chunk.to_vec())
            .await
            .expect("control events");
    }
    lease.release().await.expect("release");
    println!(
        "cold start bench: {POINTS} points ({DERIVED} derived), {history_rows} rows ({hours} h at {RATE_PER_S}/s + {total} published), \
         {POINTS} checkpoint rows, {} control events; {ROUNDS} rounds; load {}",
        events.len(),
        load_average()
    );
    (db, store, bus)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let hours = arg("--hours", 24u64);
    let nats = NatsServer::start().await;
    // `--reuse-db URL`: measure over a database an earlier run kept (`--keep-db`), migrated
    // by this binary's startup, instead of building the history again (a day takes minutes).
    let reuse = std::env::args().skip_while(|a| a != "--reuse-db").nth(1);
    let (db, store, bus) = match &reuse {
        None => {
            let (db, store, bus) = build_history(&nats, hours).await;
            (Some(db), store, bus)
        }
        Some(url) => {
            let store = PgStore::connect(url, PgStoreConfig::default())
                .await
                .expect("store");
            store.migrate().await.expect("migrate");
            let bus = bus_with_stream(NatsBusConfig {
                url: nats.url(),
                ..NatsBusConfig::default()
            })
            .await;
            println!(
                "cold start bench over the kept database {url}: {} rows; load {}",
                store.row_counts().await.expect("rows").total(),
                load_average()
            );
            (None, store, bus)
        }
    };
    let large = measure(&bus, &store).await;

    // The same, for the 59-point sample registry, in the same run.
    let (_db_small, store_small, bus_small) = {
        let nats_small = &nats;
        let (db, store, _) = setup(nats_small).await;
        // A separate stream would collide on the name; reuse the bus, whose consumer is free.
        (db, store, bus.clone())
    };
    sentinel_runtime::registry_dir::load_dir(&store_small, &traffic::sample_registry_dir())
        .await
        .expect("sample registry");
    let small = measure(&bus_small, &store_small).await;

    println!(
        "  {:<28} {:>12} {:>10} {:>10} {:>10}   {:>14}",
        "step", "median ms", "min ms", "max ms", "first ms", "59 points (ms)"
    );
    let mut total_large = 0;
    let mut total_small = 0;
    for ((step, us), (_, small_us)) in large.iter().zip(&small) {
        let (m, s) = (median(us), median(small_us));
        total_large += m;
        total_small += s;
        println!(
            "  {step:<28} {:>12.2} {:>10.2} {:>10.2} {:>10.2}   {:>14.2}",
            m as f64 / 1e3,
            *us.iter().min().expect("rounds") as f64 / 1e3,
            *us.iter().max().expect("rounds") as f64 / 1e3,
            us[0] as f64 / 1e3,
            s as f64 / 1e3
        );
    }
    println!(
        "RESULT cold start, sum of step medians: {:.1} ms for {POINTS} points; {:.1} ms for the 59-point sample registry",
        total_large as f64 / 1e3,
        total_small as f64 / 1e3
    );
    println!("load after: {}", load_average());
    if let Some(db) = db
        && flag("--keep-db")
    {
        println!("kept database: {}", db.url);
        std::mem::forget(db);
    }
}
