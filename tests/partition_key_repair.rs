//! No hot partition runs without its dedup key (migration 0022; issue 24 follow-up to 0020),
//! against real PostgreSQL and the `sentinel` binary:
//! - a hot partition made by hand (with the daily name, or any other name over several days)
//!   has no key; `sentinel storage` says so per partition and lists it, as JSON and in words;
//! - the boot under the lock (`sentinel migrate` and `sentinel run` share it) makes the key,
//!   logging at WARN which partition got it, and a redelivered row there is then refused, as
//!   `sentinel storage` now reports;
//! - a hand-made partition already holding duplicate keys cannot have one: `sentinel run` exits
//!   1 before the epoch moves, naming the partition and how many keys are duplicated (never a
//!   key's values), while a clean partition of another day got its key; once the duplicates are
//!   deleted the next acquisition makes it.

use sentinel_ports::{Lease, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bin::sentinel_against_db;
use sentinel_tests::pg::{TestDb, exec};
use serde_json::Value;
use sqlx::PgPool;

/// Nothing listens here: a boot that reached the bus would fail on it, not on the store.
/// A raw row's columns in the order the selects below give them.
const COLUMNS: &str = "ingested_at, point_key, observed_at, native_num, quality, changed, registry_version, \
    instance_key, source_epoch, source_seq";

/// `sentinel storage ARGS`'s standard output; the command must succeed.
fn storage(args: &[&str], url: &str) -> Vec<u8> {
    let out = sentinel_against_db(&[&["storage"], args].concat(), url);
    assert!(
        out.status.success(),
        "sentinel storage: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn storage_json(url: &str) -> Value {
    serde_json::from_slice(&storage(&["--json"], url)).expect("one JSON object")
}

fn storage_text(url: &str) -> String {
    String::from_utf8(storage(&[], url)).expect("UTF-8")
}

/// The `dedup_key` of the raw partition of `table` starting at `from` in a storage report.
fn dedup_key(report: &Value, table: &str, from: &str) -> Value {
    report["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .find(|p| p["table"] == table && p["from"] == from)
        .unwrap_or_else(|| panic!("no {table} partition from {from}: {report:#}"))["dedup_key"]
        .clone()
}

/// The hot partitions without their key, as the store finds them.
async fn without_key(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar("SELECT part FROM sentinel_hot_partition_keys() WHERE NOT has_key ORDER BY part")
        .fetch_all(pool)
        .await
        .expect("the hot partitions without their key")
}

/// A migrated database (today's partitions made by the store) with one point and one instance,
/// and the owner's pool.
async fn migrated() -> (TestDb, PgStore, PgPool) {
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect the store");
    store.migrate().await.expect("migrate");
    let pool = PgPool::connect(&db.url).await.expect("connect as the owner");
    exec(
        &pool,
        "INSERT INTO point_key (point_id) VALUES ('p'); INSERT INTO instance_key (driver_instance) VALUES ('i')",
    )
    .await;
    assert_eq!(
        without_key(&pool).await,
        Vec::<String>::new(),
        "the store's own partitions have their key"
    );
    (db, store, pool)
}

/// `n` rows of `class` ingested from `at` a second apart, seqs `first..first + n`.
async fn insert_rows(pool: &PgPool, class: &str, at: &str, first: i64, n: i64) {
    exec(
        pool,
        &format!(
            "INSERT INTO observation_{class} ({COLUMNS}) SELECT TIMESTAMPTZ '{at}' + g * interval '1 second', 1, \
               TIMESTAMPTZ '{at}', g, 'live', true, 1, 1, 1, {first} + g FROM generate_series(0, {n} - 1) g"
        ),
    )
    .await;
}

/// Rows `INSERT … ON CONFLICT DO NOTHING` (no conflict target, as the commit writes it)
/// inserts again from `class`'s rows ingested in `[from, to)`: the same rows, then the same
/// keys an hour later the same day.
async fn redelivered_rows_inserted(pool: &PgPool, class: &str, from: &str, to: &str) -> u64 {
    let mut inserted = 0;
    for shift in ["0", "1 hour"] {
        inserted += sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO observation_{class} ({COLUMNS}) SELECT ingested_at + interval '{shift}', point_key, \
               observed_at, native_num, quality, changed, registry_version, instance_key, source_epoch, source_seq \
             FROM observation_{class} WHERE ingested_at >= '{from}' AND ingested_at < '{to}' \
             ON CONFLICT DO NOTHING"
        )))
        .execute(pool)
        .await
        .expect("a redelivery")
        .rows_affected();
    }
    inserted
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_made_by_hand_gets_its_key_at_boot_and_then_refuses_a_redelivery() {
    let (db, _store, pool) = migrated().await;
    // An operator's partition with the daily name, and a restore's over three days under a
    // name of its own.
    exec(
        &pool,
        "CREATE TABLE observation_measurement_p20260301 PARTITION OF observation_measurement \
           FOR VALUES FROM ('2026-03-01 00:00+00') TO ('2026-03-02 00:00+00'); \
         CREATE TABLE restored_state_march PARTITION OF observation_state \
           FOR VALUES FROM ('2026-03-05 00:00+00') TO ('2026-03-08 00:00+00')",
    )
    .await;
    insert_rows(&pool, "measurement", "2026-03-01 08:00+00", 1, 20).await;
    insert_rows(&pool, "state", "2026-03-06 08:00+00", 1, 20).await;
    assert_eq!(
        without_key(&pool).await,
        ["observation_measurement_p20260301", "restored_state_march"]
    );

    // `sentinel storage` reports both missing, the daily one on its partition too.
    let before = storage_json(&db.url);
    assert_eq!(
        dedup_key(&before, "raw_measurement", "2026-03-01T00:00:00.000000Z"),
        Value::Bool(false)
    );
    assert_eq!(
        before["hot_partitions_without_dedup_key"],
        serde_json::json!(["observation_measurement_p20260301", "restored_state_march"])
    );
    let text = storage_text(&db.url);
    for part in ["observation_measurement_p20260301", "restored_state_march"] {
        assert!(
            text.contains(&format!("NO DEDUP KEY: hot partition {part} ")),
            "{text}"
        );
    }

    // The boot under the lock makes both keys and says which.
    let out = sentinel_against_db(&["migrate"], &db.url);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    for part in ["observation_measurement_p20260301", "restored_state_march"] {
        let naming: Vec<&str> = stderr.lines().filter(|l| l.contains(part)).collect();
        assert!(
            naming.len() == 1 && naming[0].contains("WARN") && naming[0].contains("no dedup key"),
            "one WARN line, and only one line, names {part}: {stderr}"
        );
    }
    assert_eq!(without_key(&pool).await, Vec::<String>::new());
    let def: String =
        sqlx::query_scalar("SELECT pg_get_indexdef('observation_measurement_p20260301_key'::regclass)")
            .fetch_one(&pool)
            .await
            .expect("the key");
    assert!(
        def.ends_with("USING btree (instance_key, source_epoch, source_seq) WITH (fillfactor='100')")
            && def.starts_with("CREATE UNIQUE INDEX"),
        "{def}"
    );

    // A redelivered row is refused in both, and nothing else changed.
    assert_eq!(
        redelivered_rows_inserted(&pool, "measurement", "2026-03-01", "2026-03-02").await,
        0
    );
    assert_eq!(
        redelivered_rows_inserted(&pool, "state", "2026-03-05", "2026-03-08").await,
        0
    );
    let rows: i64 = sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM observation_measurement) + (SELECT count(*) FROM observation_state)",
    )
    .fetch_one(&pool)
    .await
    .expect("count");
    assert_eq!(rows, 40);

    let after = storage_json(&db.url);
    assert_eq!(
        dedup_key(&after, "raw_measurement", "2026-03-01T00:00:00.000000Z"),
        Value::Bool(true)
    );
    assert_eq!(after["hot_partitions_without_dedup_key"], serde_json::json!([]));
    assert!(!storage_text(&db.url).contains("NO DEDUP KEY"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_made_partition_holding_duplicate_keys_refuses_the_boot_naming_it() {
    let (db, store, pool) = migrated().await;
    exec(
        &pool,
        "CREATE TABLE observation_state_p20260302 PARTITION OF observation_state \
           FOR VALUES FROM ('2026-03-02 00:00+00') TO ('2026-03-03 00:00+00'); \
         CREATE TABLE observation_diagnostic_p20260304 PARTITION OF observation_diagnostic \
           FOR VALUES FROM ('2026-03-04 00:00+00') TO ('2026-03-05 00:00+00')",
    )
    .await;
    // Seqs 1..=10, then 4..=6 again: three keys stored twice, as a redelivery would have
    // stored them without the key.
    insert_rows(&pool, "state", "2026-03-02 08:00+00", 1, 10).await;
    insert_rows(&pool, "state", "2026-03-02 09:00+00", 4, 3).await;
    insert_rows(&pool, "diagnostic", "2026-03-04 08:00+00", 1, 10).await;

    let out = sentinel_against_db(&["run", "--registry", "registry"], &db.url);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("refusing to start")
            && stderr.contains("hot partition observation_state_p20260302 holds 3 duplicated dedup keys"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("Key ("),
        "no key's values in the refusal: {stderr}"
    );
    assert!(
        !stderr.contains("127.0.0.1:1"),
        "refused before the bus: {stderr}"
    );
    assert_eq!(
        store.current_epoch().await.expect("epoch"),
        0,
        "refused before the epoch moved"
    );
    // The clean partition of another day got its key; the other did not.
    assert_eq!(without_key(&pool).await, ["observation_state_p20260302"]);
    assert_eq!(
        redelivered_rows_inserted(&pool, "diagnostic", "2026-03-04", "2026-03-05").await,
        0
    );

    // The operator deletes the later copies; the next acquisition makes the key.
    exec(
        &pool,
        "DELETE FROM observation_state_p20260302 o USING observation_state_p20260302 e \
         WHERE (o.instance_key, o.source_epoch, o.source_seq) = (e.instance_key, e.source_epoch, e.source_seq) \
           AND (o.ingested_at, o.ctid) > (e.ingested_at, e.ctid)",
    )
    .await;
    let lease = store.acquire().await.expect("the boot after the fix");
    assert_eq!(lease.epoch(), 1);
    assert_eq!(without_key(&pool).await, Vec::<String>::new());
    assert_eq!(
        redelivered_rows_inserted(&pool, "state", "2026-03-02", "2026-03-03").await,
        0
    );
    lease.release().await.expect("release");
}
