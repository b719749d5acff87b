//! The running core's retention against real PostgreSQL (issue 9 item 2): the production
//! startup and runtime, a core whose first retention run is due at once, drops every partition
//! of a day far past its horizons through the effect → store → input path, each with a
//! `retention_drop` event stamped with that core's epoch and principal `core:retention`. And a
//! core started on a registry folder that moves a point to another class refuses to start,
//! naming the point and both classes (ingest spec, "Class routing").

use std::sync::Arc;
use std::time::Duration;

use sentinel_core::Config;
use sentinel_models::bus::{MemoryBus, MemoryBusConfig};
use sentinel_ports::clock::SystemClock;
use sentinel_runtime::registry_dir;
use sentinel_runtime::startup::{self, StartError, already_connected};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::harness::InProcessCore;
use sentinel_tests::pg::TestDb;

fn config() -> Config {
    let mut config = Config::default();
    config.rollups.refresh_interval_ms = 0;
    config.retention.first_run_delay_ms = 0;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_core_drops_expired_partitions_with_its_epoch_on_each_event() {
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let pool = sqlx::PgPool::connect(&db.url).await.expect("raw pool");
    sqlx::raw_sql(
        "SELECT sentinel_ensure_partitions('2000-01-01', 1); \
         INSERT INTO point_key (point_id) VALUES ('p') ON CONFLICT DO NOTHING; \
         INSERT INTO instance_key (driver_instance) VALUES ('i') ON CONFLICT DO NOTHING; \
         INSERT INTO observation_state (ingested_at, point_key, observed_at, value_num, \
           quality, changed, registry_version, instance_key, source_epoch, source_seq) \
         VALUES ('2000-01-01T10:00:05Z', (SELECT key FROM point_key WHERE point_id = 'p'), '2000-01-01T10:00:01Z', 1, 'live', true, 1, (SELECT key FROM instance_key WHERE driver_instance = 'i'), 1, 1)",
    )
    .execute(&pool)
    .await
    .expect("an old day");
    let clock = Arc::new(SystemClock);
    let bus = MemoryBus::new(MemoryBusConfig::default(), clock.clone());
    let started = startup::start(
        &store,
        already_connected(&bus),
        Some(&registry_dir::sample_dir()),
        config(),
        clock.as_ref(),
    )
    .await
    .unwrap_or_else(|e| panic!("start: {e}"));
    let core = InProcessCore::spawn(started, store.clone());
    let epoch = core.epoch;

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let events: Vec<(i32, String, String)> = loop {
        let events = sqlx::query_as(
            "SELECT core_epoch, principal, payload::text FROM control_event \
             WHERE kind = 'retention_drop' ORDER BY seq",
        )
        .fetch_all(&pool)
        .await
        .expect("events");
        if events.len() >= 5 {
            break events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no retention run within 30 s: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    core.stop().await;
    assert_eq!(
        events.len(),
        5,
        "three raw days, a rollup_1m day, a rollup_1h month: {events:?}"
    );
    for (event_epoch, principal, _) in &events {
        assert_eq!(*event_epoch as u32, epoch);
        assert_eq!(principal, "core:retention");
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM observation_state")
        .fetch_one(&pool)
        .await
        .expect("count");
    assert_eq!(rows, 0, "the old day went with its partition");
    let left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class WHERE relname LIKE '%\\_p20000101' OR relname LIKE '%\\_p200001'",
    )
    .fetch_one(&pool)
    .await
    .expect("partitions");
    assert_eq!(left, 0, "no partition of the old day is left");
    pool.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_refuses_to_start_on_a_folder_that_moves_a_point_to_another_class() {
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    registry_dir::load_dir(&store, &registry_dir::sample_dir())
        .await
        .expect("the sample registry");
    let moved = std::env::temp_dir().join(format!("sentinel-retention-core-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&moved);
    copy_dir(&registry_dir::sample_dir(), &moved);
    let file = moved.join("hosts/ahu-east.toml");
    let text = std::fs::read_to_string(&file).expect("read");
    std::fs::write(
        &file,
        text.replacen("retention = \"measurement\"", "retention = \"state\"", 1),
    )
    .expect("write");

    let clock = Arc::new(SystemClock);
    let bus = MemoryBus::new(MemoryBusConfig::default(), clock.clone());
    let refused = startup::start(
        &store,
        already_connected(&bus),
        Some(&moved),
        config(),
        clock.as_ref(),
    )
    .await;
    let Err(StartError::Registry(message)) = refused else {
        panic!("the core must refuse to start");
    };
    assert!(
        message.contains("point ahu1.supply_air_temp moves from retention class measurement to state"),
        "{message}"
    );
    let _ = std::fs::remove_dir_all(&moved);
}

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
