//! `sentinel db pack` against real PostgreSQL and a real nats-server (issue 24 item 1, disk;
//! migration 0019), run as a process: a closed day's partition filled in ingest order is
//! packed — its index bytes go down, its rows and every read's answers do not change (history,
//! the log heads, a redelivered row and a late copy of one still refused as duplicates) — and
//! recorded, so a second run packs nothing until the partition is written to again; a day the
//! stream may still hold is not packed, nor one the core compacts within a day; a role that
//! does not own the tables is refused with exit 14; `sentinel storage` shows the partition
//! packed, and its record goes once the day is compacted.

use std::borrow::Cow;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::registry::PointIdx;
use sentinel_core::{
    Batch, BatchId, CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass,
};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::{Lease, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bin::sentinel_bin;
use sentinel_tests::harness::output_within;
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use serde_json::Value;

const POINTS: u64 = 40;
const INSTANCES: u64 = 2;
/// Rows on the day, one every 4 s of ingest, round-robin over the points (ingest order).
const ROWS: u64 = 20_000;
const BATCH_ROWS: u64 = 2_000;
const DAY: &str = "2026-01-15";
const PARTITION: &str = "observation_measurement_p20260115";

fn point(seq: u64) -> String {
    format!("pk.ahu{}.temp", seq % POINTS)
}

fn day_start() -> Micros {
    Micros::parse_rfc3339(&format!("{DAY}T00:00:00Z")).expect("instant")
}

/// Row `seq` (1-based): ingested `2 min + seq × 4 s` into the day, observed 90 s before, by instance
/// `seq % INSTANCES` with its own ascending sequence.
fn row(seq: u64, ingested_late_by_us: i64) -> ObsRow {
    let ingested = day_start().0 + 120_000_000 + seq as i64 * 4_000_000;
    ObsRow {
        point: PointIdx(0),
        point_id: Arc::from(point(seq)),
        class: RetentionClass::Measurement,
        ingested_at: Micros(ingested + ingested_late_by_us),
        // The first row was observed on the day before: the partition (and its count) is by
        // `ingested_at`, the bus-accept time.
        observed_at: Micros(ingested - 150_000_000),
        device_time: None,
        value: Some(CanonicalValue::Num(seq as f64 * 0.25)),
        native_num: Some(seq as f64),
        native_text: None,
        unit_native: None,
        quality: Quality::Live,
        reason: None::<Cow<'static, str>>,
        detail: None,
        changed: true,
        registry_version: 1,
        key: ObsKey {
            driver_instance: Arc::from(format!("drv-pack-{}", seq % INSTANCES)),
            source_epoch: 1,
            source_seq: seq / INSTANCES,
        },
        skew_flagged: false,
        tag: DeliveryTag(seq),
    }
}

fn pack(url: &str, nats_url: &str, extra: &[&str]) -> (std::process::Output, Option<Value>) {
    let mut args = vec![
        "db",
        "pack",
        "--database-url",
        url,
        "--nats-url",
        nats_url,
        "--json",
    ];
    args.extend_from_slice(extra);
    let out = output_within(Command::new(sentinel_bin()).args(&args), Duration::from_secs(180));
    let json = serde_json::from_slice(&out.stdout).ok();
    (out, json)
}

fn succeeded(out: &std::process::Output, json: Option<Value>) -> Value {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    json.expect("one JSON object on stdout")
}

/// Waits until PostgreSQL's statistics count `writes` inserted and updated tuples in the
/// partition (a session reports its counts when it goes idle, within seconds).
async fn writes_reported(pool: &sqlx::PgPool, writes: i64) {
    let started = Instant::now();
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT pg_stat_get_tuples_inserted(c.oid) + pg_stat_get_tuples_updated(c.oid) \
             FROM pg_class c WHERE c.relname = 'observation_measurement_p20260115'",
        )
        .fetch_one(pool)
        .await
        .expect("statistics");
        if n >= writes {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the statistics report {n} writes, not {writes}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn index_bytes(pool: &sqlx::PgPool) -> i64 {
    sqlx::query_scalar("SELECT pg_indexes_size('observation_measurement_p20260115')")
        .fetch_one(pool)
        .await
        .expect("index size")
}

/// The partition's indexes, by name and definition.
async fn index_definitions(pool: &sqlx::PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT indexname || ': ' || indexdef FROM pg_indexes \
         WHERE tablename = 'observation_measurement_p20260115' ORDER BY indexname",
    )
    .fetch_all(pool)
    .await
    .expect("indexes")
}

/// What the reads answer about the day: history of three points, the log heads of every
/// point, and the newest row of each point through the `observation` view.
async fn answers(store: &PgStore, pool: &sqlx::PgPool) -> String {
    let mut out = String::new();
    for p in 0..3 {
        let history = store
            .load_history(
                &point(p),
                RetentionClass::Measurement,
                day_start(),
                Micros(day_start().0 + 86_400_000_000),
                100_000,
            )
            .await
            .expect("history");
        assert!(
            history.len() as u64 >= ROWS / POINTS - 1,
            "history holds the point's rows"
        );
        out.push_str(&format!("{history:?}\n"));
    }
    let points: Vec<(String, RetentionClass)> = (0..POINTS)
        .map(|p| (point(p), RetentionClass::Measurement))
        .collect();
    let state = store.load_state(&points).await.expect("log heads");
    assert_eq!(state.log_heads.len() as u64, POINTS, "a head per point");
    out.push_str(&format!("{:?}\n", state.log_heads));
    let newest: Vec<String> = sqlx::query_scalar(
        "SELECT DISTINCT ON (point_id) point_id || ' ' || observed_at || ' ' || value_num \
         FROM observation ORDER BY point_id, observed_at DESC",
    )
    .fetch_all(pool)
    .await
    .expect("newest rows");
    out.push_str(&newest.join("\n"));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_day_is_packed_once_with_every_answer_kept() {
    let mut db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let roles = db.create_roles().await.expect("roles");
    store
        .apply_grants(&roles.writer, &roles.reader)
        .await
        .expect("grants");
    let nats = NatsServer::start().await;
    let bus = NatsBus::connect(NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    })
    .await
    .expect("connect the bus");
    bus.ensure_stream().await.expect("the stream");

    let lease = store.acquire().await.expect("acquire");
    for first in (1..=ROWS).step_by(BATCH_ROWS as usize) {
        store
            .commit(Batch {
                id: BatchId(first),
                epoch: lease.epoch(),
                rows: (first..first + BATCH_ROWS).map(|seq| row(seq, 0)).collect(),
                quarantine: vec![],
            })
            .await
            .expect("commit");
    }
    let pool = sqlx::PgPool::connect(&db.url).await.expect("pool");
    writes_reported(&pool, ROWS as i64).await;

    // The core's writer does not own the tables: refused, nothing packed.
    let (refused, _) = pack(&roles.writer_url, &nats.url(), &[]);
    assert_eq!(
        refused.status.code(),
        Some(14),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("does not own the class tables"), "{stderr}");
    // A day the stream may still hold: at its close, with a message in the stream, the
    // stream's oldest message was ingested before the day ended.
    let publisher = ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    publisher
        .publish(
            "obs.host-a.drv-pack-0",
            "drv-pack-0:1:999999",
            Bytes::from_static(b"{}"),
        )
        .await
        .expect("publish");
    let (held, json) = pack(
        &db.url,
        &nats.url(),
        &["--after-days", "0", "--now", "2026-01-16T00:00:00Z"],
    );
    let held = succeeded(&held, json);
    assert_eq!(held["packed"].as_array().map(Vec::len), Some(0), "{held}");
    assert_eq!(held["skipped"]["stream"], 1, "{held}");
    let packed_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM hot_day_pack")
        .fetch_one(&pool)
        .await
        .expect("records");
    assert_eq!(
        packed_rows, 0,
        "neither the writer nor a held day packed anything"
    );

    let before = answers(&store, &pool).await;
    let index_before = index_bytes(&pool).await;
    let definitions = index_definitions(&pool).await;
    assert!(
        definitions.len() >= 2,
        "the point index and the dedup key at least: {definitions:?}"
    );

    // Now the stream's oldest message is newer than the day's end; but a core compacting at 7
    // days (the default) compacts the day: not packed.
    let (left, json) = pack(&db.url, &nats.url(), &[]);
    let left = succeeded(&left, json);
    assert_eq!(left["packed"].as_array().map(Vec::len), Some(0), "{left}");
    assert_eq!(left["skipped"]["compaction"], 1, "{left}");
    // An estate whose core does not compact: packed.
    let (out, json) = pack(&db.url, &nats.url(), &["--no-compaction"]);
    let json = succeeded(&out, json);
    let packed = json["packed"].as_array().expect("packed");
    assert_eq!(packed.len(), 1, "{json}");
    let p = &packed[0];
    assert_eq!(
        (p["class"].as_str(), p["day"].as_str()),
        (Some("measurement"), Some(DAY))
    );
    assert_eq!(p["partition"], PARTITION);
    assert_eq!(p["rows"], ROWS);
    let (i_before, i_after) = (
        p["index_bytes_before"].as_i64().expect("before"),
        p["index_bytes_after"].as_i64().expect("after"),
    );
    assert_eq!(i_before, index_before);
    assert!(
        i_after < i_before * 9 / 10,
        "the indexes shrink by more than a tenth: {i_before} -> {i_after}"
    );
    assert_eq!(index_bytes(&pool).await, i_after);
    assert_eq!(
        json["bytes_before"].as_i64().expect("bytes") - json["bytes_after"].as_i64().expect("bytes"),
        i_before - i_after,
        "only the indexes change"
    );
    assert_eq!(json["partitions"], 1);
    assert!(json["seconds"].as_f64().expect("seconds") >= 0.0);
    // Every read answers as before, and both indexes are valid and in use.
    assert_eq!(answers(&store, &pool).await, before);
    let invalid: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_index WHERE indrelid = 'observation_measurement_p20260115'::regclass \
         AND NOT (indisvalid AND indisready)",
    )
    .fetch_one(&pool)
    .await
    .expect("indexes");
    assert_eq!(invalid, 0);
    assert_eq!(
        index_definitions(&pool).await,
        definitions,
        "the same indexes, nothing left over"
    );

    // Again: nothing to do.
    let (again, json) = pack(&db.url, &nats.url(), &["--no-compaction"]);
    let again = succeeded(&again, json);
    assert_eq!(again["packed"].as_array().map(Vec::len), Some(0), "{again}");
    assert_eq!(again["skipped"]["packed"], 1, "{again}");

    // A redelivered row (same key and ingested_at) and a late copy of one (same key, ingested
    // ten minutes later: the late-duplicate probe) are still refused after the rebuild.
    let report = store
        .commit(Batch {
            id: BatchId(ROWS + 1),
            epoch: lease.epoch(),
            rows: vec![row(ROWS / 2, 0), row(ROWS / 3, 600_000_000)],
            quarantine: vec![],
        })
        .await
        .expect("commit the copies");
    assert!(report.inserted.is_empty(), "duplicates: {:?}", report.inserted);
    // A new late row for the day is a write: the partition is due again.
    let report = store
        .commit(Batch {
            id: BatchId(ROWS + 2),
            epoch: lease.epoch(),
            rows: vec![row(ROWS + 1, 600_000_000)],
            quarantine: vec![],
        })
        .await
        .expect("commit a late row");
    assert_eq!(report.inserted, vec![0]);
    lease.release().await.expect("release");
    store.close().await;
    writes_reported(&pool, ROWS as i64 + 1).await;
    let (dry, json) = pack(&db.url, &nats.url(), &["--dry-run", "--no-compaction"]);
    let dry = succeeded(&dry, json);
    assert_eq!(dry["due"].as_array().map(Vec::len), Some(1), "{dry}");
    assert_eq!(dry["due"][0]["partition"], PARTITION);
    assert_eq!(
        dry["packed"].as_array().map(Vec::len),
        Some(0),
        "a dry run packs nothing"
    );

    // `sentinel storage`, as the reader, shows the partition packed.
    let report = output_within(
        Command::new(sentinel_bin()).args(["storage", "--database-url", &roles.reader_url, "--json"]),
        Duration::from_secs(60),
    );
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: Value = serde_json::from_slice(&report.stdout).expect("JSON");
    let partitions = report["partitions"].as_array().expect("partitions");
    let day = partitions
        .iter()
        .find(|p| p["table"] == "raw_measurement" && p["from"].as_str().is_some_and(|f| f.starts_with(DAY)))
        .expect("the day's partition");
    assert_eq!(day["packed"], true, "{day}");
    assert!(
        partitions
            .iter()
            .filter(|p| p["table"] == "raw_state")
            .all(|p| p["packed"] == false),
        "no other partition is packed"
    );

    // Compacted, the day's record goes with it: the next run forgets it and skips the day.
    let compact = output_within(
        Command::new(sentinel_bin()).args([
            "compact",
            "--database-url",
            &db.url,
            "--nats-url",
            &nats.url(),
            "--from",
            DAY,
            "--through",
            DAY,
            "--json",
        ]),
        Duration::from_secs(120),
    );
    assert!(
        compact.status.success(),
        "{}",
        String::from_utf8_lossy(&compact.stderr)
    );
    let (after, json) = pack(&db.url, &nats.url(), &["--no-compaction"]);
    let after = succeeded(&after, json);
    assert_eq!(after["forgotten"], 1, "{after}");
    assert_eq!(after["skipped"]["compacted"], 1, "{after}");
    let records: i64 = sqlx::query_scalar("SELECT count(*) FROM hot_day_pack")
        .fetch_one(&pool)
        .await
        .expect("records");
    assert_eq!(records, 0);
    drop(db);
    drop(nats);
}
