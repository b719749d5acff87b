//! Migration 0014 on a populated database (issue 24 item 1): a database at version 13 with rows
//! in every class over two days, a registry version, rollups and a reprocessed row with its
//! control event upgrades to integer ids, and every read path answers as before: the
//! `observation` view, the rollups (and a recompute of them), the storage report's row counts,
//! and `load_history`, `load_state` and `load_windows` answer exactly what a database that got
//! the same rows at version 14 answers.
//!
//! Before it, `sentinel migrate --dry-run` on that database, while another session holds the
//! single-writer lock: the migrations it would apply, the hot tables' size and the time and
//! free disk their rewrites need (store-pg `upgrade`), and nothing changed; a dry run refuses a
//! database from a newer binary as `migrate` does.

use std::sync::Arc;

use sentinel_core::derived::WindowRequest;
use sentinel_core::{Micros, RetentionClass};
use sentinel_ports::{Lease, Store};
use sentinel_store_pg::{LOCK_KEY, PgStore, PgStoreConfig};
use sentinel_tests::bin::sentinel_against_db;
use sentinel_tests::pg::{TestDb, exec, text};
use serde_json::Value;
use sqlx::{Connection, PgConnection, PgPool};

/// 2026-06-01T00:00:00Z and two days on, in µs.
const DAY1_US: i64 = 1_780_272_000_000_000;
const DAY3_US: i64 = DAY1_US + 2 * 86_400_000_000;

const CLASSES: [(&str, RetentionClass, &str); 3] = [
    ("measurement", RetentionClass::Measurement, "m"),
    ("state", RetentionClass::State, "s"),
    ("diagnostic", RetentionClass::Diagnostic, "d"),
];

/// Version 13's rows: 400 per class over two days, five points and three driver instances per
/// class, every column used, some rows `bad` with a reason.
async fn populate_13(pool: &PgPool) {
    exec(pool, "SELECT sentinel_ensure_partitions('2026-06-01', 3)").await;
    for (class, _, p) in CLASSES {
        exec(
            pool,
            &format!(
                "INSERT INTO observation_{class} (ingested_at, point_id, observed_at, device_time, \
                   value_num, value_bool, value_text, native_num, native_text, unit_native, quality, \
                   reason, detail, changed, registry_version, driver_instance, source_epoch, \
                   source_seq, skew_flagged, applied) \
                 SELECT TIMESTAMPTZ '2026-06-01 00:00:00+00' + g * interval '7 minutes', \
                   '{p}.point' || (g % 5), \
                   TIMESTAMPTZ '2026-06-01 00:00:00+00' + g * interval '7 minutes' - (g % 4) * interval '1 second', \
                   CASE WHEN g % 3 = 0 THEN TIMESTAMPTZ '2026-06-01 00:00:00+00' + g * interval '7 minutes' END, \
                   CASE WHEN g % 2 = 0 THEN g * 1.5 END, CASE WHEN g % 5 = 1 THEN g % 2 = 1 END, \
                   CASE WHEN g % 5 = 3 THEN 'open' END, g * 1.5, CASE WHEN g % 5 = 3 THEN 'OPEN' END, 'degC', \
                   (CASE WHEN g % 7 = 0 THEN 'bad' ELSE 'live' END)::quality, \
                   CASE WHEN g % 7 = 0 THEN 'device_offline' END, \
                   CASE WHEN g % 11 = 0 THEN '{{\"poll_ms\": 12}}'::jsonb END, g % 2 = 0, 1, \
                   'drv-{p}' || (g % 3), 1 + g % 2, g, g % 13 = 0, CASE WHEN g > 10 THEN g END \
                 FROM generate_series(1, 400) g"
            ),
        )
        .await;
    }
    // A registry version naming the measurement points (agg_safe) and an instance with no rows.
    exec(
        pool,
        "INSERT INTO registry_version VALUES (1, now(), 'sha', 'content'); \
         INSERT INTO descriptor_blob (hash, descriptor, canonical) \
           SELECT 'h' || g, d::jsonb, d FROM generate_series(0, 4) g, LATERAL (SELECT format( \
             '{\"agg_safe\":true,\"assignment\":{\"driver_instance\":\"%s\",\"host\":\"h\"},\"id\":\"m.point%s\",\"retention\":\"measurement\"}', \
             CASE WHEN g = 4 THEN 'drv-idle' ELSE 'drv-m' || (g % 3) END, g) AS d) x; \
         INSERT INTO point_descriptor SELECT 1, 'm.point' || g, 'h' || g FROM generate_series(0, 4) g; \
         INSERT INTO point_state (point_id, quality, quality_since, driver_instance, source_epoch, source_seq) \
           VALUES ('m.point1', 'live', now(), 'drv-m1', 1, 1)",
    )
    .await;
    // Rollups, a reprocessed row and its event, through version 13's fenced functions.
    exec(
        pool,
        "UPDATE core_epoch SET core_start = 77; \
         SELECT * FROM sentinel_rollup_refresh_range(0, 77, '2026-06-01', '2026-06-03'); \
         SELECT sentinel_reprocess_apply(0, 77, 'measurement', ARRAY['drv-m1'], ARRAY[2], ARRAY[1::bigint], \
           ARRAY[TIMESTAMPTZ '2026-06-01 00:07:00+00'], ARRAY[99.5::float8], ARRAY[NULL::boolean], \
           ARRAY[NULL::text], ARRAY[NULL::text], ARRAY['live'], ARRAY[NULL::text], 1); \
         INSERT INTO control_event (occurred_at, kind, principal, core_epoch, payload, registry_version) \
           VALUES (now(), 'reprocess', 'operator:test', 0, '{\"rows\": 1}', 1); \
         SELECT * FROM sentinel_rollup_refresh_range(0, 77, '2026-06-01', '2026-06-03')",
    )
    .await;
}

/// Everything the upgrade must keep, as text: the view, both rollup grains, the control log.
async fn snapshot(pool: &PgPool) -> [String; 4] {
    [
        text(
            pool,
            "SELECT string_agg(o::text, E'\\n' ORDER BY o::text) FROM observation o",
        )
        .await,
        text(
            pool,
            "SELECT string_agg(r::text, E'\\n' ORDER BY r::text) FROM rollup_1m r",
        )
        .await,
        text(
            pool,
            "SELECT string_agg(r::text, E'\\n' ORDER BY r::text) FROM rollup_1h r",
        )
        .await,
        text(
            pool,
            "SELECT string_agg(c::text, E'\\n' ORDER BY c.seq) FROM control_event c",
        )
        .await,
    ]
}

/// Row counts per partition holding rows (the bytes change: that is the point of the
/// migration; `migrate` creates today's empty partitions ahead).
async fn row_counts(store: &PgStore) -> Vec<(String, u64)> {
    store
        .storage_report(true, |_, _| {})
        .await
        .expect("storage report")
        .partitions
        .iter()
        .filter(|p| p.size.rows > 0)
        .map(|p| (format!("{:?}", p.partition), p.size.rows))
        .collect()
}

/// The store's read paths over every point of every class.
async fn reads(store: &PgStore) -> String {
    let points: Vec<(String, RetentionClass)> = CLASSES
        .iter()
        .flat_map(|(_, class, p)| (0..5).map(move |i| (format!("{p}.point{i}"), *class)))
        .collect();
    let mut out = String::new();
    for (point, class) in &points {
        let history = store
            .load_history(point, *class, Micros(DAY1_US), Micros(DAY3_US), 10_000)
            .await
            .expect("history");
        assert!(!history.is_empty(), "{point} has history");
        out.push_str(&format!("{point} history {history:?}\n"));
    }
    let state = store.load_state(&points).await.expect("load_state");
    assert_eq!(state.log_heads.len(), points.len());
    out.push_str(&format!("state {state:?}\n"));
    let requests: Vec<WindowRequest> = points
        .iter()
        .map(|(point, class)| WindowRequest {
            point_id: Arc::from(point.as_str()),
            class: *class,
            since: Micros(DAY1_US + 36 * 3_600_000_000),
            rows_min: 3,
        })
        .collect();
    let windows = store.load_windows(&requests, 1_000).await.expect("load_windows");
    // In no particular order (the port's contract): compared as a sorted set.
    let mut windows: Vec<String> = windows.iter().map(|w| format!("{w:?}")).collect();
    windows.sort_unstable();
    out.push_str(&format!("windows {windows:?}\n"));
    out
}

/// `sentinel migrate --dry-run --json`'s object; it must exit 0.
fn dry_run_json(url: &str) -> Value {
    let out = sentinel_against_db(&["migrate", "--dry-run", "--json"], url);
    assert!(
        out.status.success(),
        "migrate --dry-run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

fn pending_versions(plan: &Value) -> Vec<i64> {
    plan["pending"]
        .as_array()
        .expect("pending")
        .iter()
        .map(|m| m["version"].as_i64().expect("a version"))
        .collect()
}

/// A session of its own holding the single-writer lock, as a running core's does.
async fn hold_lock(url: &str) -> PgConnection {
    let mut conn = PgConnection::connect(url).await.expect("a lock session");
    let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(LOCK_KEY)
        .fetch_one(&mut conn)
        .await
        .expect("try the lock");
    assert!(locked, "nobody else holds the lock");
    conn
}

async fn applied_max(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations")
        .fetch_one(pool)
        .await
        .expect("the applied migrations")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_populated_database_upgrades_to_integer_ids_with_every_answer_kept() {
    let db = TestDb::create().await.expect("test database");
    let pool = PgPool::connect(&db.url).await.expect("connect as the owner");
    db.migrate_up_to(&pool, 13).await;
    populate_13(&pool).await;
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect the store");
    let before = snapshot(&pool).await;
    let counts_before = row_counts(&store).await;
    assert_eq!(
        counts_before.len(),
        3 * 2 + 2 + 1,
        "two days of each class, two of rollup_1m, a month of rollup_1h"
    );
    assert!(before[0].lines().count() == 1_200 && !before[1].is_empty() && !before[2].is_empty());
    // The rows as version 13 holds them, for the reference database below.
    let mut exported = Vec::new();
    for (class, _, _) in CLASSES {
        exported.push(
            text(
                &pool,
                &format!("SELECT json_agg(o)::text FROM observation_{class} o"),
            )
            .await,
        );
    }

    // `sentinel migrate --dry-run` while another session holds the lock (it takes none): what
    // would be applied, and the time and disk the hot tables' rewrites need at their size.
    let holder = hold_lock(&db.url).await;
    let starts: i64 = sqlx::query_scalar("SELECT count(*) FROM core_start")
        .fetch_one(&pool)
        .await
        .expect("core starts");
    let hot_bytes: i64 = sqlx::query_scalar(
        "SELECT sum(pg_total_relation_size(oid))::bigint FROM pg_class \
         WHERE relname ~ '^observation_(measurement|state|diagnostic)_p[0-9]{8}$' AND relkind = 'r'",
    )
    .fetch_one(&pool)
    .await
    .expect("the hot partitions' size");
    let plan = dry_run_json(&db.url);
    assert_eq!(plan["schema_version"], 13);
    assert_eq!(plan["supported_version"], PgStore::supported_schema_version());
    assert_eq!(
        pending_versions(&plan),
        (14..=PgStore::supported_schema_version()).collect::<Vec<_>>()
    );
    assert!(hot_bytes > 0);
    assert_eq!(plan["hot_raw_bytes"], hot_bytes, "{plan:#}");
    // 0014, 0018, 0020 and 0021: 34 + 10 + 2.4 + 10 s per GB; 0014's and 0021's rewrites need
    // twice the tables' size free.
    let estimated_s = plan["estimated_seconds"].as_f64().expect("seconds");
    assert!(
        (estimated_s - 56.4 * hot_bytes as f64 / 1e9).abs() < 1e-9,
        "{plan:#}"
    );
    assert_eq!(plan["free_disk_bytes"], 2 * hot_bytes, "{plan:#}");
    assert!(
        plan["pending"][0]["hot_tables"]
            .as_str()
            .expect("0014's work")
            .contains("rewrites every hot row")
    );
    assert_eq!(
        plan["pending"][1]["hot_tables"],
        Value::Null,
        "0015 changes no hot row"
    );
    let text_out = sentinel_against_db(&["migrate", "--dry-run"], &db.url);
    let text_plan = String::from_utf8_lossy(&text_out.stdout);
    assert!(
        text_out.status.success(),
        "{}",
        String::from_utf8_lossy(&text_out.stderr)
    );
    for line in [
        "version 13",
        "\n  0014 integer ids: rewrites every hot row",
        "\n  0015 compaction\n",
        "\nnothing applied (--dry-run)\n",
    ] {
        assert!(text_plan.contains(line), "{line:?} in {text_plan}");
    }
    // It changed nothing, and `sentinel migrate` itself is refused while the lock is held.
    assert_eq!(applied_max(&pool).await, 13);
    assert_eq!(snapshot(&pool).await, before);
    let refused = sentinel_against_db(&["migrate"], &db.url);
    assert_eq!(
        refused.status.code(),
        Some(10),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    drop(holder);
    let after_starts: i64 = sqlx::query_scalar("SELECT count(*) FROM core_start")
        .fetch_one(&pool)
        .await
        .expect("core starts");
    assert_eq!(after_starts, starts, "no acquisition");

    // The upgrade itself, by `sentinel migrate`: each migration logged as it starts (with its
    // estimate when it rewrites the hot tables) and when it is done, in order.
    let out = sentinel_against_db(&["migrate"], &db.url);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("applied migrations 14, 15, 16, 17, 18, 19, 20, 21, 22;"),
        "the integer ids, then the compacted days, the compacted minute rollups, the values \
         derived from native (0017) the point indexes (0018), the pack record (0019) and the \
         per-partition dedup keys (0020) and the hot row's column order (0021) and the dedup key \
         check (0022): {stdout}"
    );
    let lines: Vec<&str> = stderr.lines().collect();
    let mut at = 0;
    for version in 14..=22 {
        let field = format!("version={version}");
        let find = |from: usize, what: &str| {
            from + lines[from..]
                .iter()
                .position(|l| l.contains(what) && l.contains(&field))
                .unwrap_or_else(|| panic!("{what:?} for {version} after line {from}: {stderr}"))
        };
        let starting = find(at, "applying migration");
        assert_eq!(
            lines[starting].contains("estimated_s="),
            [14, 18, 20, 21].contains(&version),
            "{}",
            lines[starting]
        );
        at = find(starting, "migration applied") + 1;
    }
    let plan = dry_run_json(&db.url);
    assert_eq!(pending_versions(&plan), Vec::<i64>::new(), "{plan:#}");
    assert_eq!(plan["schema_version"], PgStore::supported_schema_version());
    assert_eq!(
        snapshot(&pool).await,
        before,
        "the view, rollups and control log are unchanged"
    );
    assert_eq!(row_counts(&store).await, counts_before);
    let unkeyed: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT driver_instance FROM instance_key WHERE driver_instance = 'drv-idle' \
         UNION ALL SELECT point_id FROM point_key WHERE point_id = 'm.point4') k",
    )
    .fetch_one(&pool)
    .await
    .expect("keys");
    assert_eq!(unkeyed, 2, "the registry's ids have keys, rows or not");

    // A recompute of the rollups over the keyed rows gives exactly version 13's.
    let lease = store.acquire().await.expect("acquire");
    store
        .refresh_rollups(lease.epoch(), Micros(DAY1_US), Micros(DAY3_US))
        .await
        .expect("recompute the rollups");
    assert_eq!(
        snapshot(&pool).await,
        before,
        "the recomputed rollups are version 13's"
    );
    let upgraded = reads(&store).await;

    // The same rows in a database created at version 14: every read answers the same.
    let reference_db = TestDb::create().await.expect("reference database");
    let reference = PgStore::connect(&reference_db.url, PgStoreConfig::default())
        .await
        .expect("connect the reference");
    reference.migrate().await.expect("migrate the reference");
    let reference_pool = PgPool::connect(&reference_db.url).await.expect("reference pool");
    exec(
        &reference_pool,
        "SELECT sentinel_ensure_partitions('2026-06-01', 3)",
    )
    .await;
    for ((class, _, _), rows) in CLASSES.iter().zip(&exported) {
        let import = format!(
            "WITH r AS (SELECT * FROM json_populate_recordset(NULL::observation_{class}_named, $1::json)), \
             p AS (INSERT INTO point_key (point_id) SELECT DISTINCT point_id FROM r RETURNING point_id, key), \
             i AS (INSERT INTO instance_key (driver_instance) SELECT DISTINCT driver_instance FROM r \
               RETURNING driver_instance, key) \
             INSERT INTO observation_{class} (ingested_at, point_key, observed_at, device_time, value_num, \
               value_bool, value_text, native_num, native_text, unit_native, quality, reason, detail, \
               changed, registry_version, instance_key, source_epoch, source_seq, skew_flagged, applied) \
             SELECT r.ingested_at, p.key, r.observed_at, r.device_time, r.value_num, r.value_bool, \
               r.value_text, r.native_num, r.native_text, r.unit_native, r.quality, r.reason, r.detail, \
               r.changed, r.registry_version, i.key, r.source_epoch, r.source_seq, r.skew_flagged, r.applied \
             FROM r JOIN p USING (point_id) JOIN i USING (driver_instance)"
        );
        sqlx::query(sqlx::AssertSqlSafe(import))
            .bind(rows)
            .execute(&reference_pool)
            .await
            .expect("import the rows");
    }
    let state: String = text(&pool, "SELECT json_agg(s)::text FROM point_state s").await;
    sqlx::query("INSERT INTO point_state SELECT * FROM json_populate_recordset(NULL::point_state, $1::json)")
        .bind(state)
        .execute(&reference_pool)
        .await
        .expect("import the checkpoint");
    assert_eq!(
        text(
            &reference_pool,
            "SELECT string_agg(o::text, E'\\n' ORDER BY o::text) FROM observation o"
        )
        .await,
        before[0],
        "the reference holds the same rows"
    );
    assert_eq!(
        upgraded,
        reads(&reference).await,
        "every read path answers as at version 14"
    );
    lease.release().await.expect("release");
}

/// A dry run refuses a database a newer binary migrated, as `migrate` does, naming its version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_refuses_a_database_from_a_newer_binary() {
    let db = TestDb::create().await.expect("test database");
    let pool = PgPool::connect(&db.url).await.expect("connect as the owner");
    db.migrate_up_to(&pool, PgStore::supported_schema_version() as u32)
        .await;
    exec(
        &pool,
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (999, 'from the future', true, '\\x00', 0)",
    )
    .await;
    for args in [&["migrate", "--dry-run"][..], &["migrate"][..]] {
        let out = sentinel_against_db(args, &db.url);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains("999"), "{args:?} names the version: {stderr}");
    }
}
