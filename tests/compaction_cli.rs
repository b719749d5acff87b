//! `sentinel compact` and `sentinel storage` against real PostgreSQL and a real nats-server
//! (issue 24 items 1, 4 and 6), run as processes: a day old enough is compacted under the lock
//! with its `compaction` event, every row still counted and now reported as compacted by
//! `sentinel storage` (rows, chunks, bytes per observation); a second run writes nothing; a
//! run while another session holds the lock exits 10 and compacts nothing; a run against a bus
//! without the stream fails rather than take the stream for empty.

use std::borrow::Cow;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::registry::PointIdx;
use sentinel_core::{
    Batch, BatchId, CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass,
};
use sentinel_ports::{Lease, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bin::sentinel_bin;
use sentinel_tests::harness::output_within;
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use serde_json::Value;

const ROWS: u64 = 600;

fn row(at: Micros, seq: u64) -> ObsRow {
    ObsRow {
        point: PointIdx(0),
        point_id: Arc::from(["cc.ahu.temp", "cc.ahu.flow"][(seq % 2) as usize]),
        class: RetentionClass::Measurement,
        ingested_at: at,
        observed_at: Micros(at.0 - 120_000),
        device_time: None,
        value: Some(CanonicalValue::Num(seq as f64 * 0.5)),
        native_num: Some(seq as f64),
        native_text: None,
        unit_native: Some(Arc::from("degF")),
        quality: Quality::Live,
        reason: None::<Cow<'static, str>>,
        detail: None,
        changed: seq.is_multiple_of(4),
        registry_version: 1,
        key: ObsKey {
            driver_instance: Arc::from("drv-compact"),
            source_epoch: 1,
            source_seq: seq,
        },
        skew_flagged: false,
        tag: DeliveryTag(seq),
    }
}

/// Commits the test's day, 2026-01-15: `ROWS` rows a minute apart, in one batch; returns the day.
async fn commit_the_day(store: &PgStore, epoch: u32) -> Micros {
    let day = Micros::parse_rfc3339("2026-01-15T00:00:00Z").expect("instant");
    let rows: Vec<ObsRow> = (1..=ROWS)
        .map(|seq| row(Micros(day.0 + seq as i64 * 60_000_000), seq))
        .collect();
    store
        .commit(Batch {
            id: BatchId(1),
            epoch,
            rows,
            quarantine: vec![],
        })
        .await
        .expect("commit");
    day
}

fn compact(db_url: &str, nats_url: &str) -> (std::process::Output, Option<Value>) {
    let out = output_within(
        Command::new(sentinel_bin()).args([
            "compact",
            "--database-url",
            db_url,
            "--nats-url",
            nats_url,
            "--from",
            "2026-01-10",
            "--through",
            "2026-01-20",
            "--json",
        ]),
        Duration::from_secs(120),
    );
    let json = serde_json::from_slice(&out.stdout).ok();
    (out, json)
}

#[tokio::test]
async fn a_day_is_compacted_under_the_lock_and_reported_by_storage() {
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let nats = NatsServer::start().await;
    // The stream a core would have made (the command reads its oldest message; a missing
    // stream is an error, never "empty").
    let bus = NatsBus::connect(NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    })
    .await
    .expect("connect the bus");
    bus.ensure_stream().await.expect("the stream");
    let no_stream = NatsServer::start().await;
    let (missing, _) = compact(&db.url, &no_stream.url());
    assert_eq!(missing.status.code(), Some(1), "no stream: an error");
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("stream not found"),
        "{}",
        String::from_utf8_lossy(&missing.stderr)
    );
    drop(no_stream);
    let lease = store.acquire().await.expect("acquire");
    commit_the_day(&store, lease.epoch()).await;

    // While another session holds the lock: exit 10, nothing compacted.
    let (held, _) = compact(&db.url, &nats.url());
    assert_eq!(
        held.status.code(),
        Some(10),
        "{}",
        String::from_utf8_lossy(&held.stderr)
    );
    lease.release().await.expect("release");

    let (out, json) = compact(&db.url, &nats.url());
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json = json.expect("one JSON object");
    let compacted = json["compacted"].as_array().expect("compacted");
    assert_eq!(compacted.len(), 1, "{json}");
    assert_eq!(compacted[0]["class"], "measurement");
    assert_eq!(compacted[0]["day"], "2026-01-15");
    assert_eq!(compacted[0]["rows"], ROWS);
    // Two points over 10 hours of observed_at, one instance and epoch: a chunk per point-hour.
    assert_eq!(compacted[0]["chunks"], 2 * 10);
    assert!(json["stopped"].is_null(), "{json}");
    assert!(json["stream_oldest"].is_null(), "an empty stream holds no day");
    assert_eq!(store.row_counts().await.expect("counts").0, [ROWS, 0, 0]);
    let events = store.load_control_events(0, 100).await.expect("events");
    assert_eq!(events.iter().filter(|e| e.kind == "compaction").count(), 1);

    // Again: nothing to do.
    let (again, json) = compact(&db.url, &nats.url());
    assert!(again.status.success());
    assert_eq!(json.expect("JSON")["compacted"].as_array().map(Vec::len), Some(0));

    let report = output_within(
        Command::new(sentinel_bin()).args(["storage", "--database-url", &db.url, "--json"]),
        Duration::from_secs(60),
    );
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let report: Value = serde_json::from_slice(&report.stdout).expect("JSON");
    let days = report["compacted"].as_array().expect("compacted days");
    assert_eq!(days.len(), 1, "{report}");
    assert_eq!(days[0]["class"], "measurement");
    assert_eq!(days[0]["day"], "2026-01-15");
    assert_eq!(days[0]["rows"], ROWS);
    assert_eq!(days[0]["chunks"], 20);
    assert!(days[0]["bytes"].as_u64().expect("bytes") > 0);
    assert_eq!(
        report["observations"]["rows"], ROWS,
        "compacted rows are observations"
    );
    drop(nats);
}

/// `sentinel compact --rollups-only`: a day's minute rollups alone, without asking the bus (the
/// URL given answers nothing), one `rollup_1m` event, named in `--json`; the raw rows stay hot.
#[tokio::test]
async fn rollups_only_compacts_the_minute_rollups_alone_without_the_bus() {
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let lease = store.acquire().await.expect("acquire");
    let day = commit_the_day(&store, lease.epoch()).await;
    store
        .refresh_rollups(lease.epoch(), day, Micros(day.0 + 86_400_000_000))
        .await
        .expect("refresh the day's rollups");
    let minutes_before = store
        .load_rollups(
            sentinel_ports::RollupGrain::Minute,
            day,
            Micros(day.0 + 86_400_000_000),
            None,
        )
        .await
        .expect("minutes");
    lease.release().await.expect("release");

    let run = || {
        output_within(
            Command::new(sentinel_bin()).args([
                "compact",
                "--database-url",
                &db.url,
                "--nats-url",
                "nats://127.0.0.1:1",
                "--from",
                "2026-01-10",
                "--through",
                "2026-01-20",
                "--rollups-only",
                "--json",
            ]),
            Duration::from_secs(120),
        )
    };
    let out = run();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    assert_eq!(json["rollups_only"], true);
    let compacted = json["compacted"].as_array().expect("compacted");
    assert_eq!(compacted.len(), 1, "{json}");
    assert_eq!(compacted[0]["table"], "rollup_1m");
    assert_eq!(compacted[0]["day"], "2026-01-15");
    // One row a minute for 600 minutes, two points alternating: a bucket each, a chunk a point.
    assert_eq!(
        (compacted[0]["buckets"].as_u64(), compacted[0]["chunks"].as_u64()),
        (Some(ROWS), Some(2))
    );
    assert!(json["stopped"].is_null(), "{json}");
    let events = store.load_control_events(0, 100).await.expect("events");
    let compactions: Vec<_> = events.iter().filter(|e| e.kind == "compaction").collect();
    assert_eq!(compactions.len(), 1, "only the rollups' event");
    assert!(
        compactions[0].payload.contains("\"rollup_1m\""),
        "{}",
        compactions[0].payload
    );
    let minutes_after = store
        .load_rollups(
            sentinel_ports::RollupGrain::Minute,
            day,
            Micros(day.0 + 86_400_000_000),
            None,
        )
        .await
        .expect("minutes");
    assert_eq!(
        minutes_after, minutes_before,
        "the compacted minutes read as the hot ones"
    );
    let raw = sqlx::PgPool::connect(&db.url).await.expect("a raw connection");
    let hot_rows: i64 = sqlx::query_scalar("SELECT count(*) FROM observation_measurement")
        .fetch_one(&raw)
        .await
        .expect("hot rows");
    assert_eq!(hot_rows, ROWS as i64, "the raw rows stay hot");
    // Again: nothing hot, nothing written.
    let again: Value = serde_json::from_slice(&run().stdout).expect("JSON");
    assert_eq!(again["compacted"].as_array().map(Vec::len), Some(0), "{again}");
}
