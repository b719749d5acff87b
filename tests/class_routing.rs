//! The ingest spec's exit criterion "Class routing" against real PostgreSQL (issue 9 item 4):
//! one point per retention class, each in its own table, the `observation` view counting their
//! sum; and a point whose class changes between registry versions is not silently split across
//! two tables — the load is refused, naming the point and both classes, and with the explicit
//! move all of its rows are in the new table and none in the old.
//!
//! Drives the same `registry_dir` functions `sentinel registry load [--move-class]` and a
//! starting core (`startup::start` loads through `load_dir`) use, on a copy of the sample
//! registry with one point's class edited.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sentinel_core::registry::PointIdx;
use sentinel_core::registry::plan::Admission;
use sentinel_core::{
    Batch, BatchId, CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass,
};
use sentinel_ports::{Lease, Store};
use sentinel_runtime::registry_dir::{self, RegistryDirError};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::pg::TestDb;

const MOVING: &str = "ahu1.supply_air_temp";

fn copy_dir(from: &Path, to: &Path) {
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

/// A copy of the sample registry; with `moved`, `ahu1.supply_air_temp` (the first point of
/// `hosts/ahu-east.toml`, class measurement) becomes diagnostic.
fn registry_copy(name: &str, moved: bool) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sentinel-class-routing-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&registry_dir::sample_dir(), &dir);
    if moved {
        let file = dir.join("hosts/ahu-east.toml");
        let text = std::fs::read_to_string(&file).expect("read");
        let first = text
            .find("retention = \"measurement\"")
            .expect("the first point's class");
        assert!(text[..first].contains(MOVING), "the first point is {MOVING}");
        let edited = text.replacen("retention = \"measurement\"", "retention = \"diagnostic\"", 1);
        std::fs::write(&file, edited).expect("write");
    }
    dir
}

fn row(point: &str, class: RetentionClass, seq: u64) -> ObsRow {
    let t =
        Micros(Micros::parse_rfc3339("2026-01-15T10:00:00Z").expect("instant").0 + seq as i64 * 1_000_000);
    ObsRow {
        point: PointIdx(0),
        point_id: Arc::from(point),
        class,
        ingested_at: t,
        observed_at: t,
        device_time: None,
        value: Some(CanonicalValue::Num(seq as f64)),
        native_num: Some(seq as f64),
        native_text: None,
        unit_native: None,
        quality: Quality::Live,
        reason: None::<Cow<'static, str>>,
        detail: None,
        changed: true,
        registry_version: 1,
        key: ObsKey {
            driver_instance: Arc::from("drv-routing"),
            source_epoch: 1,
            source_seq: seq,
        },
        skew_flagged: false,
        tag: DeliveryTag(seq),
    }
}

async fn view_count(db: &TestDb) -> i64 {
    let pool = sqlx::PgPool::connect(&db.url).await.expect("connect");
    let n = sqlx::query_scalar("SELECT count(*) FROM observation")
        .fetch_one(&pool)
        .await
        .expect("count the view");
    pool.close().await;
    n
}

#[tokio::test]
async fn one_point_per_class_in_its_own_table_and_a_class_change_is_refused_or_moved_whole() {
    use RetentionClass::{Diagnostic, Measurement, State};
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let before = registry_copy("before", false);
    let after = registry_copy("after", true);
    let v1 = registry_dir::load_dir(&store, &before)
        .await
        .expect("load the sample");

    // One point per class: ahu1.supply_air_temp (measurement), ahu1.mode (state),
    // gateway.rssi (diagnostic) — checked against the stored version's descriptors.
    let points = [
        (MOVING, Measurement, 5u64),
        ("ahu1.mode", State, 3),
        ("gateway.rssi", Diagnostic, 2),
    ];
    let registry =
        registry_dir::compile_stored(store.load_registry(None).await.expect("load").expect("stored"))
            .expect("compile");
    let mut rows = Vec::new();
    let mut seq = 0;
    for (point, class, n) in points {
        let idx = registry.resolve(point).expect("in the sample registry");
        assert_eq!(registry.point(idx).descriptor.retention, class, "{point}");
        for _ in 0..n {
            seq += 1;
            rows.push(row(point, class, seq));
        }
    }
    store
        .commit(Batch {
            id: BatchId(1),
            epoch,
            rows,
            quarantine: vec![],
        })
        .await
        .expect("commit");
    let counts = store.row_counts().await.expect("counts");
    assert_eq!(
        (counts.get(Measurement), counts.get(State), counts.get(Diagnostic)),
        (5, 3, 2),
        "each point in its own class table"
    );
    assert_eq!(
        view_count(&db).await,
        10,
        "the UNION ALL view counts the sum of the three"
    );

    // The edited folder moves MOVING to diagnostic: refused, naming the point and both classes,
    // storing nothing and moving nothing.
    let refused = registry_dir::load_dir(&store, &after).await;
    let Err(RegistryDirError::ClassChanges(changes)) = &refused else {
        panic!("a class change must be refused, got {refused:?}");
    };
    assert_eq!(changes.len(), 1);
    let message = refused.as_ref().expect_err("refused").to_string();
    assert!(
        message.starts_with(&format!(
            "point {MOVING} moves from retention class measurement to diagnostic\n"
        )),
        "{message}"
    );
    let newest = store.load_registry(None).await.expect("load").expect("stored");
    assert_eq!(newest.version, v1.version, "no version stored");
    assert_eq!(store.row_counts().await.expect("counts").get(Measurement), 5);

    // With the explicit move: the version is stored and every row of the point is in the
    // diagnostic table, none in the measurement table.
    let moving = registry_dir::load_dir_moving(
        &store,
        &after,
        &Admission::default(),
        epoch,
        "operator:test",
        Micros(0),
    )
    .await
    .expect("load --move-class");
    assert!(moving.load.created);
    assert_eq!(moving.moves.len(), 1);
    assert_eq!(moving.moves[0].1.rows, 5);
    let far = (
        Micros::parse_rfc3339("2026-01-01T00:00:00Z").expect("instant"),
        Micros::parse_rfc3339("2026-02-01T00:00:00Z").expect("instant"),
    );
    assert!(
        store
            .load_history(MOVING, Measurement, far.0, far.1, 100)
            .await
            .expect("history")
            .is_empty(),
        "no row of the point stays in its old table"
    );
    assert_eq!(
        store
            .load_history(MOVING, Diagnostic, far.0, far.1, 100)
            .await
            .expect("history")
            .len(),
        5
    );
    let counts = store.row_counts().await.expect("counts");
    assert_eq!(
        (counts.get(Measurement), counts.get(State), counts.get(Diagnostic)),
        (0, 3, 7)
    );
    assert_eq!(view_count(&db).await, 10);
    // Loading the same folder again is neither refused nor moves anything more.
    registry_dir::load_dir(&store, &after)
        .await
        .expect("unchanged load");
    let again = registry_dir::load_dir_moving(
        &store,
        &after,
        &Admission::default(),
        epoch,
        "operator:test",
        Micros(0),
    )
    .await
    .expect("re-run");
    assert!(again.moves.iter().all(|(_, m)| m.rows == 0), "{:?}", again.moves);
    lease.release().await.expect("release");
    let _ = std::fs::remove_dir_all(before);
    let _ = std::fs::remove_dir_all(after);
}
