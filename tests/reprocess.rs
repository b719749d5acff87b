//! Reprocess and reinterpretation against real PostgreSQL through the `sentinel` binary (issue
//! 9 items 3 and 5; ingest spec, "Reprocess", "The horizon is per class, and partial reprocess
//! is refused", "Exit criteria"). The binary runs as the writer role, with the privileges
//! `sentinel db grants` gives it, as an operator would run it.
//!
//! - Refusal: a glob spanning the three classes, the diagnostic point's rows in partitions
//!   older than its raw horizon (made with `sentinel_ensure_partitions`): the dry run and the
//!   real run both exit 11 naming that point, its class and horizon; every class table, both
//!   rollup tables, the watermark, `point_state` and `control_event` are byte-for-byte as before.
//! - A real run fixes a wrong scale: the rollups over the range equal an aggregate computed
//!   here in SQL from the corrected rows.
//! - Reinterpretation under the older version reproduces the value ingest stored, from native.

use std::process::{Command, Output, Stdio};

use sentinel_core::{CanonicalValue, Micros, ObsRow};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Lease, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::pg::TestDb;
use sentinel_tests::reprocess::{self as rp, LEVEL, PRESSURE, RSSI, Sent};
use sqlx::PgPool;

const EXIT_REFUSED: i32 = 11;
const DAY_US: i64 = 86_400_000_000;
const S: i64 = 1_000_000;

fn sentinel(database_url: &str, args: &[&str]) -> Output {
    Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args(args)
        .env("SENTINEL_DATABASE_URL", database_url)
        .env_remove("SENTINEL_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run sentinel")
}

struct Db {
    store: PgStore,
    raw: PgPool,
    writer_url: String,
    _db: TestDb,
}

async fn db() -> Db {
    let mut db = TestDb::create().await.expect("database");
    let roles = db.create_roles().await.expect("roles");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    store
        .apply_grants(&roles.writer, &roles.reader)
        .await
        .expect("grants");
    let raw = PgPool::connect(&db.url).await.expect("raw pool");
    Db {
        store,
        raw,
        writer_url: roles.writer_url,
        _db: db,
    }
}

fn sent(point: &'static str, seq: u64, t: Micros, native: f64) -> Sent {
    Sent {
        point,
        seq,
        ingested_at: Micros(t.0 + 1),
        observed_at: t,
        native: Some(native),
        asserted: None,
        reason: None,
    }
}

/// Commits `sents` under version 1 (stored first), refreshes the rollups over them, stores
/// version 2, and releases the lock. Returns the rows as ingest wrote them.
async fn ingest(db: &Db, sents: &[Sent]) -> Vec<ObsRow> {
    let lease = db.store.acquire().await.expect("acquire");
    let v1 = rp::load(&db.store, 1).await;
    let rows: Vec<ObsRow> = sents.iter().map(|s| rp::row(&v1, s)).collect();
    db.store
        .commit(sentinel_core::Batch {
            id: sentinel_core::BatchId(1),
            epoch: lease.epoch(),
            rows: rows.clone(),
            quarantine: vec![],
        })
        .await
        .expect("commit");
    let from = sents.iter().map(|s| s.observed_at).min().expect("rows");
    let to = sents.iter().map(|s| s.observed_at).max().expect("rows");
    db.store
        .refresh_rollups(lease.epoch(), from, Micros(to.0 + 1))
        .await
        .expect("refresh");
    rp::load(&db.store, 2).await;
    lease.release().await.expect("release");
    rows
}

/// Every row of every table a reprocess could touch, as text, in a fixed order.
async fn contents(raw: &PgPool) -> Vec<String> {
    let mut out = Vec::new();
    for sql in [
        "SELECT to_jsonb(o)::text FROM observation_measurement o ORDER BY 1",
        "SELECT to_jsonb(o)::text FROM observation_state o ORDER BY 1",
        "SELECT to_jsonb(o)::text FROM observation_diagnostic o ORDER BY 1",
        "SELECT to_jsonb(r)::text FROM rollup_1m r ORDER BY 1",
        "SELECT to_jsonb(r)::text FROM rollup_1h r ORDER BY 1",
        "SELECT to_jsonb(w)::text FROM rollup_watermark w ORDER BY 1",
        "SELECT to_jsonb(i)::text FROM rollup_invalidation i ORDER BY 1",
        "SELECT to_jsonb(p)::text FROM point_state p ORDER BY 1",
        "SELECT to_jsonb(c)::text FROM control_event c ORDER BY 1",
    ] {
        let rows: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_all(raw)
            .await
            .expect("dump");
        out.push(format!("{sql}: {rows:?}"));
    }
    out
}

fn midnight(t: Micros) -> Micros {
    Micros(t.0.div_euclid(DAY_US) * DAY_US)
}

#[tokio::test]
async fn a_glob_spanning_classes_with_one_point_past_its_horizon_is_refused_and_changes_nothing() {
    let db = db().await;
    let today = midnight(SystemClock.now());
    // Ten days ago: inside the measurement (30 d) and state (90 d) horizons, outside the
    // diagnostic one (7 d). Partitions that old exist only because they are made here.
    let old = Micros(today.0 - 10 * DAY_US);
    let first_day = time::OffsetDateTime::from_unix_timestamp((old.0 - DAY_US) / S)
        .expect("date")
        .date();
    let made: i32 = sqlx::query_scalar("SELECT sentinel_ensure_partitions($1, 12)")
        .bind(first_day)
        .fetch_one(&db.raw)
        .await
        .expect("old partitions");
    assert!(made > 0, "the old partitions are new");
    let t = Micros(old.0 + 3_600 * S);
    ingest(
        &db,
        &[
            sent(PRESSURE, 1, t, 101.5),
            sent(LEVEL, 2, Micros(t.0 + 10 * S), 55.0),
            sent(RSSI, 3, Micros(t.0 + 20 * S), -70.0),
        ],
    )
    .await;
    let before = contents(&db.raw).await;
    let from = t.to_rfc3339();

    for dry_run in [true, false] {
        let mut args = vec![
            "reprocess",
            "--point-glob",
            "rp.boiler.*",
            "--from",
            &from,
            "--registry-version",
            "current",
        ];
        if dry_run {
            args.push("--dry-run");
        }
        let out = sentinel(&db.writer_url, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(EXIT_REFUSED),
            "dry run {dry_run}: {stderr}"
        );
        assert!(stderr.contains("refused, nothing changed"), "{stderr}");
        assert!(
            stderr.contains(RSSI) && stderr.contains("class diagnostic keeps raw rows 7 days"),
            "names the point, its class and horizon: {stderr}"
        );
        assert!(
            !stderr.contains(PRESSURE) && !stderr.contains(LEVEL),
            "names only the offending point: {stderr}"
        );
        assert_eq!(
            contents(&db.raw).await,
            before,
            "dry run {dry_run} changed something"
        );
    }

    // The same refusal as JSON, for a script.
    let out = sentinel(
        &db.writer_url,
        &[
            "reprocess",
            "--point-glob",
            "rp.boiler.*",
            "--from",
            &from,
            "--registry-version",
            "2",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(out.status.code(), Some(EXIT_REFUSED));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(plan["refused"], true);
    assert_eq!(plan["offenders"][0]["point_id"], RSSI);
    assert_eq!(plan["offenders"][0]["class"], "diagnostic");
    assert_eq!(plan["offenders"][0]["horizon_days"], 7);
    assert_eq!(plan["offenders"].as_array().map(Vec::len), Some(1));
    assert_eq!(contents(&db.raw).await, before);

    // Narrowed to the points in horizon, it runs.
    let out = sentinel(
        &db.writer_url,
        &[
            "reprocess",
            "--point-glob",
            "rp.boiler.[pl]*",
            "--from",
            &from,
            "--registry-version",
            "current",
        ],
    );
    assert_ne!(
        out.status.code(),
        Some(0),
        "`[` is not a glob class: no point matches"
    );
    let out = sentinel(
        &db.writer_url,
        &[
            "reprocess",
            "--point-glob",
            "rp.boiler.pressure",
            "--from",
            &from,
            "--registry-version",
            "current",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn a_real_run_fixes_a_wrong_scale_and_reinterpretation_gives_back_the_original() {
    let db = db().await;
    let t = Micros(midnight(SystemClock.now()).0 - 2 * DAY_US + 600 * S);
    let mut sents = Vec::new();
    for i in 0..40u64 {
        let at = Micros(t.0 + i as i64 * 97 * S);
        sents.push(sent(PRESSURE, i + 1, at, 100.0 + i as f64 * 0.5));
        sents.push(sent(LEVEL, 1_000 + i, at, 40.0 + i as f64));
    }
    let rows = ingest(&db, &sents).await;
    let original = rows[0].value.clone();
    assert_eq!(
        original,
        Some(CanonicalValue::Num(0.1)),
        "version 1's wrong scale"
    );

    // Dry run: counts, classes with horizons, ranges, an estimate.
    let from = t.to_rfc3339();
    let out = sentinel(
        &db.writer_url,
        &[
            "reprocess",
            "--point-glob",
            "rp.boiler.*",
            "--from",
            &from,
            "--registry-version",
            "current",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(plan["rows"], 80);
    assert_eq!(plan["old_versions"], serde_json::json!([1]));
    assert_eq!(plan["classes"].as_array().map(Vec::len), Some(3));
    assert!(plan["rollup_1h"]["from"].is_string() && plan["estimate_ms"].is_u64());
    let untouched: i64 =
        sqlx::query_scalar("SELECT count(*) FROM observation_measurement WHERE registry_version = 1")
            .fetch_one(&db.raw)
            .await
            .expect("count");
    assert_eq!(untouched, 40, "a dry run writes nothing");

    let out = sentinel(
        &db.writer_url,
        &[
            "reprocess",
            "--point-glob",
            "rp.boiler.*",
            "--from",
            &from,
            "--registry-version",
            "current",
            "--json",
            "--chunk-rows",
            "16",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(report["rows"], 80);

    // The rows: corrected from native; native, ingested_at untouched.
    let wrong: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM observation_measurement WHERE value_num IS DISTINCT FROM native_num \
         OR registry_version <> 2",
    )
    .fetch_one(&db.raw)
    .await
    .expect("count");
    assert_eq!(wrong, 0, "every pressure row is native × 1 under version 2");

    // Rollups over the range equal the aggregate of the corrected rows, computed here.
    for (table, width) in [("rollup_1m", "1 minute"), ("rollup_1h", "1 hour")] {
        let sql = format!(
            "WITH raw AS ( \
               SELECT point_id, date_bin('{width}', observed_at, TIMESTAMPTZ '1970-01-01 00:00:00+00') AS b, \
                 count(*) AS n, count(*) FILTER (WHERE quality = 'live') AS live, \
                 sum(value_num) FILTER (WHERE quality = 'live') AS s, \
                 min(value_num) FILTER (WHERE quality = 'live') AS lo, \
                 max(value_num) FILTER (WHERE quality = 'live') AS hi \
               FROM (SELECT * FROM observation_measurement_named UNION ALL SELECT * FROM observation_state_named) o \
               GROUP BY 1, 2) \
             SELECT count(*) FROM raw FULL JOIN {table} r ON r.point_id = raw.point_id AND r.bucket = raw.b \
             WHERE r.point_id IS NULL OR raw.point_id IS NULL OR r.count <> raw.n OR r.live_count <> raw.live \
               OR r.sum IS DISTINCT FROM raw.s OR r.min IS DISTINCT FROM raw.lo OR r.max IS DISTINCT FROM raw.hi"
        );
        let differing: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
            .fetch_one(&db.raw)
            .await
            .expect("compare");
        assert_eq!(differing, 0, "{table} differs from the corrected rows");
    }

    // One reprocess event, written by the command's own epoch.
    let (kind, point, payload): (String, Option<String>, serde_json::Value) =
        sqlx::query_as("SELECT kind, point_id, payload FROM control_event ORDER BY seq DESC LIMIT 1")
            .fetch_one(&db.raw)
            .await
            .expect("event");
    assert_eq!((kind.as_str(), point), ("reprocess", None));
    assert_eq!(payload["rows"], 80);
    assert_eq!(payload["new_version"], 2);

    // Reinterpretation under version 1 gives back the value ingest stored, from native.
    let at = t.to_rfc3339();
    let out = sentinel(
        &db.writer_url,
        &[
            "reinterpret",
            "--point",
            PRESSURE,
            "--at",
            &at,
            "--registry-version",
            "1",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(
        shown["rows"][0]["under"]["value"],
        serde_json::json!(0.1),
        "the original value"
    );
    assert_eq!(shown["rows"][0]["under"]["registry_version"], 1);
    assert_eq!(shown["rows"][0]["stored"]["value"], serde_json::json!(100.0));
    assert_eq!(shown["rows"][0]["stored"]["registry_version"], 2);
}
