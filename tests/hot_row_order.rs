//! Migration 0021 on a populated database (issue 24, disk; BENCHMARKS.md "The hot row's heap
//! tuple in alignment order"): each class table is rewritten with its columns 8-byte first, and
//! nothing else changes. Two databases get the same rows at the version before 0021 — every
//! column used, three days of every class, a registry version, rollups, a reprocessed row, one
//! day compacted — and one of them is upgraded. Then:
//!   * the upgraded tables have the new column order, and the same partitions, indexes (with
//!     their names, definitions and attachments), triggers, owners, grants and comments, and the
//!     same views over them, as before the upgrade;
//!   * every row (the `observation` view, each class's hot and compacted rows, the rollups, the
//!     control log) and every store read (history, log heads, windows for rehydration, the rows
//!     reprocess reads, the storage report's row counts) answers exactly as the database that
//!     stayed at that version;
//!   * the SQL write paths that touch the hot tables — reprocess of a hot and a compacted row, a
//!     class move that takes compacted rows (the one function that inserted by position),
//!     compaction of another day, the rollup recompute, a retention drop — run on both and leave
//!     both with the same rows, rollups and control log.

use std::sync::Arc;

use sentinel_core::derived::WindowRequest;
use sentinel_core::{Micros, RetentionClass};
use sentinel_ports::Store;
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::pg::{TestDb, exec, text};
use sqlx::PgPool;

/// 2026-06-01T00:00:00Z and three days on, in µs.
const DAY1_US: i64 = 1_780_272_000_000_000;
const DAY4_US: i64 = DAY1_US + 3 * 86_400_000_000;

const CLASSES: [(&str, RetentionClass, &str); 3] = [
    ("measurement", RetentionClass::Measurement, "m"),
    ("state", RetentionClass::State, "s"),
    ("diagnostic", RetentionClass::Diagnostic, "d"),
];

/// The hot row's columns after migration 0021, in `attnum` order.
const NEW_ORDER: [&str; 20] = [
    "ingested_at",
    "observed_at",
    "source_seq",
    "value_num",
    "native_num",
    "device_time",
    "applied",
    "point_key",
    "instance_key",
    "source_epoch",
    "registry_version",
    "quality",
    "changed",
    "skew_flagged",
    "value_bool",
    "unit_native",
    "value_text",
    "native_text",
    "reason",
    "detail",
];

/// The rows, at the version before 0021: 600 per class over three days, five points and three driver instances per
/// class, every column used; a registry version; rollups; a reprocessed row; day one of the
/// measurement and state classes compacted. The fence is epoch 0 with core start 77.
async fn populate(pool: &PgPool) {
    exec(pool, "SELECT sentinel_ensure_partitions('2026-06-01', 4)").await;
    for (class, _, p) in CLASSES {
        exec(
            pool,
            &format!(
                "INSERT INTO point_key (point_id) SELECT '{p}.point' || g FROM generate_series(0, 4) g; \
                 INSERT INTO instance_key (driver_instance) SELECT 'drv-{p}' || g FROM generate_series(0, 2) g; \
                 INSERT INTO observation_{class} (ingested_at, point_key, observed_at, device_time, \
                   value_num, value_bool, value_text, native_num, native_text, unit_native, quality, \
                   reason, detail, changed, registry_version, instance_key, source_epoch, \
                   source_seq, skew_flagged, applied) \
                 SELECT TIMESTAMPTZ '2026-06-01 00:00:00+00' + g * interval '7 minutes', pk.key, \
                   TIMESTAMPTZ '2026-06-01 00:00:00+00' + g * interval '7 minutes' - (g % 4) * interval '1 second', \
                   CASE WHEN g % 3 = 0 THEN TIMESTAMPTZ '2026-06-01 00:00:00+00' + g * interval '7 minutes' END, \
                   CASE WHEN g % 2 = 0 THEN g * 1.5 END, CASE WHEN g % 5 = 1 THEN g % 2 = 1 END, \
                   CASE WHEN g % 5 = 3 THEN 'open' END, g * 2.7 + 32, CASE WHEN g % 5 = 3 THEN 'OPEN' END, \
                   CASE WHEN g % 2 = 0 THEN 'degF' END, \
                   (CASE WHEN g % 7 = 0 THEN 'bad' ELSE 'live' END)::quality, \
                   CASE WHEN g % 7 = 0 THEN 'device_offline' END, \
                   CASE WHEN g % 11 = 0 THEN '{{\"poll_ms\": 12}}'::jsonb END, g % 2 = 0, 1, ik.key, \
                   1 + g % 2, g, g % 13 = 0, CASE WHEN g > 10 THEN (1::bigint << 32) + g / 7 END \
                 FROM generate_series(1, 600) g \
                 JOIN point_key pk ON pk.point_id = '{p}.point' || (g % 5) \
                 JOIN instance_key ik ON ik.driver_instance = 'drv-{p}' || (g % 3)"
            ),
        )
        .await;
    }
    exec(
        pool,
        "INSERT INTO registry_version VALUES (1, '2026-06-01', 'sha', 'content'); \
         INSERT INTO descriptor_blob (hash, descriptor, canonical) \
           SELECT 'h' || g, d::jsonb, d FROM generate_series(0, 4) g, LATERAL (SELECT format( \
             '{\"agg_safe\":true,\"assignment\":{\"driver_instance\":\"drv-m%s\",\"host\":\"h\"},\"id\":\"m.point%s\",\"retention\":\"measurement\"}', \
             g % 3, g) AS d) x; \
         INSERT INTO point_descriptor SELECT 1, 'm.point' || g, 'h' || g FROM generate_series(0, 4) g; \
         INSERT INTO point_state (point_id, quality, quality_since, driver_instance, source_epoch, source_seq) \
           VALUES ('m.point1', 'live', '2026-06-01', 'drv-m1', 2, 1); \
         UPDATE core_epoch SET core_start = 77; \
         SELECT * FROM sentinel_rollup_refresh_range(0, 77, '2026-06-01', '2026-06-04'); \
         SELECT sentinel_compact_day(0, 77, 'measurement', '2026-06-01', '2026-06-20', 7, '2026-06-19', 'operator:test'); \
         SELECT sentinel_compact_day(0, 77, 'state', '2026-06-01', '2026-06-20', 7, '2026-06-19', 'operator:test')",
    )
    .await;
    reprocess(pool, "source_seq IN (7, 200)", 1_000.0).await;
}

/// Reprocess of the measurement rows `filter` selects (hot or compacted): value + `add`, live.
async fn reprocess(pool: &PgPool, filter: &str, add: f64) {
    exec(
        pool,
        &format!(
            "SELECT sentinel_reprocess_apply(0, 77, 'measurement', array_agg(driver_instance), \
               array_agg(source_epoch), array_agg(source_seq), array_agg(ingested_at), \
               array_agg(COALESCE(value_num, 0) + {add}), array_agg(value_bool), array_agg(value_text), \
               array_agg(NULL::text), array_agg('live'::text), array_agg(NULL::text), 1, \
               array_agg(point_id), array_agg(observed_at)) \
             FROM observation_measurement_named WHERE {filter}; \
             INSERT INTO control_event (occurred_at, kind, principal, core_epoch, payload, registry_version) \
               VALUES ('2026-06-20', 'reprocess', 'operator:test', 0, '{{\"add\": {add}}}', 1)"
        ),
    )
    .await;
}

/// The write paths over the hot tables, run on both databases after the upgrade of one.
async fn write_paths(pool: &PgPool) {
    reprocess(pool, "source_seq IN (9, 300, 301)", 0.5).await;
    exec(
        pool,
        "SELECT * FROM sentinel_move_point_class(0, 77, 'm.point2', 'diagnostic', 'operator:test', '2026-06-20'); \
         SELECT * FROM sentinel_move_point_class(0, 77, 's.point1', 'measurement', 'operator:test', '2026-06-20'); \
         SELECT sentinel_compact_day(0, 77, 'diagnostic', '2026-06-02', '2026-06-20', 7, '2026-06-19', 'operator:test'); \
         SELECT * FROM sentinel_rollup_refresh_range(0, 77, '2026-06-01', '2026-06-04'); \
         SELECT sentinel_retention_drop(0, 77, 'observation_state', '2026-06-01', '2026-06-02', 'operator:test', '2026-06-20')",
    )
    .await;
}

/// Every row, as text: the view, each class's rows hot and compacted (through `_all`, with the
/// decoded compacted rows), the chunks themselves, both rollup grains, the control log (but for
/// a compaction's byte counts), the rollup invalidations (written by the tables' insert trigger
/// and by reprocess).
async fn rows(pool: &PgPool) -> Vec<String> {
    let mut out = vec![
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
            // A compaction's event records its partition's bytes, which are what 0021 changes.
            "SELECT string_agg(format('%s %s %s %s %s %s %s %s %s', c.seq, c.occurred_at, c.kind, c.point_id, \
               c.subject_key, c.principal, c.core_epoch, c.payload - 'bytes_before' - 'bytes_after', \
               c.registry_version), E'\\n' ORDER BY c.seq) FROM control_event c",
        )
        .await,
        text(
            pool,
            "SELECT string_agg(r::text, E'\\n' ORDER BY r::text) FROM rollup_invalidation r",
        )
        .await,
    ];
    for (class, _, _) in CLASSES {
        for sql in [
            format!("SELECT string_agg(o::text, E'\\n' ORDER BY o::text) FROM observation_{class}_all o"),
            format!("SELECT string_agg(o::text, E'\\n' ORDER BY o::text) FROM observation_{class}_compact o"),
            format!(
                "SELECT string_agg(o::text, E'\\n' ORDER BY o::text) FROM (SELECT tableoid::regclass AS part, \
                   ingested_at, point_key, observed_at, device_time, value_num, value_bool, value_text, native_num, \
                   native_text, unit_native, quality, reason, detail, changed, registry_version, instance_key, \
                   source_epoch, source_seq, skew_flagged, applied FROM observation_{class}) o"
            ),
        ] {
            out.push(text(pool, &sql).await);
        }
    }
    out
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
            .load_history(point, *class, Micros(DAY1_US), Micros(DAY4_US), 10_000)
            .await
            .expect("history");
        out.push_str(&format!("{point} history {history:?}\n"));
        let reprocess = store
            .load_reprocess_rows(*class, point, Micros(DAY1_US), None, None, 10_000)
            .await
            .expect("reprocess rows");
        out.push_str(&format!("{point} reprocess {reprocess:?}\n"));
    }
    let extent = store
        .reprocess_extent(&points, Micros(DAY1_US), None)
        .await
        .expect("reprocess extent");
    out.push_str(&format!("extent {extent:?}\n"));
    let state = store.load_state(&points).await.expect("load_state");
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
    let mut windows: Vec<String> = windows.iter().map(|w| format!("{w:?}")).collect();
    windows.sort_unstable();
    out.push_str(&format!("windows {windows:?}\n"));
    let counts: Vec<String> = store
        .storage_report(true, |_, _| {})
        .await
        .expect("storage report")
        .partitions
        .iter()
        .filter(|p| p.size.rows > 0)
        .map(|p| format!("{:?} {}", p.partition, p.size.rows))
        .collect();
    out.push_str(&format!("rows {counts:?}\n"));
    out
}

/// What the class tables are besides their rows, by name (never by column position): columns
/// with type, nullability and default; partitions and bounds; indexes with definitions and the
/// parent index each is attached to; triggers; owners, grants, comments, storage parameters;
/// the views over them with their definitions, owners and grants.
async fn catalog(pool: &PgPool) -> Vec<String> {
    // The days populated (`migrate` creates today's and the next days' partitions).
    let tables = "c.relname ~ '^observation_(measurement|state|diagnostic)(_p202606[0-9]{2})?$'";
    let mut out = Vec::new();
    for sql in [
        format!(
            "SELECT string_agg(format('%s.%s %s %s %s %s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod), \
               a.attnotnull, pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum)), E'\\n' ORDER BY c.relname, a.attname) \
             FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
             LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum WHERE {tables}"
        ),
        format!(
            "SELECT string_agg(format('%s %s %s %s %s %s %s', c.relname, c.relkind, pg_get_userbyid(c.relowner), c.relacl, \
               obj_description(c.oid, 'pg_class'), c.reloptions, pg_get_expr(c.relpartbound, c.oid)), E'\\n' ORDER BY c.relname) \
             FROM pg_class c WHERE {tables}"
        ),
        format!(
            "SELECT string_agg(format('%s %s %s %s', i.relname, pg_get_indexdef(i.oid), x.indisvalid, \
               (SELECT p.relname FROM pg_inherits h JOIN pg_class p ON p.oid = h.inhparent WHERE h.inhrelid = i.oid)), \
               E'\\n' ORDER BY i.relname) \
             FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class c ON c.oid = x.indrelid WHERE {tables}"
        ),
        format!(
            "SELECT string_agg(format('%s %s %s', t.tgname, pg_get_triggerdef(t.oid), t.tgenabled), E'\\n' ORDER BY t.tgname, c.relname) \
             FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE {tables}"
        ),
        "SELECT string_agg(format('%s %s %s %s', c.relname, pg_get_viewdef(c.oid), pg_get_userbyid(c.relowner), c.relacl), \
           E'\\n' ORDER BY c.relname) FROM pg_class c WHERE c.relkind = 'v' AND c.relnamespace = 'public'::regnamespace"
            .to_owned(),
    ] {
        out.push(text(pool, &sql).await);
    }
    out
}

/// `after` is `before`, else a panic naming the lines only one of them has.
fn assert_same(after: &[String], before: &[String], what: &str) {
    for (a, b) in after.iter().zip(before) {
        let only_after: Vec<&str> = a.lines().filter(|l| !b.lines().any(|m| m == *l)).collect();
        let only_before: Vec<&str> = b.lines().filter(|l| !a.lines().any(|m| m == *l)).collect();
        assert!(
            a == b,
            "{what} changed: only after {only_after:#?}, only before {only_before:#?}"
        );
    }
    assert_eq!(after.len(), before.len());
}

async fn column_order(pool: &PgPool, class: &str) -> Vec<String> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT attname::text FROM pg_attribute WHERE attrelid = 'observation_{class}'::regclass \
         AND attnum > 0 AND NOT attisdropped ORDER BY attnum"
    )))
    .fetch_all(pool)
    .await
    .expect("columns")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_populated_database_upgrades_to_the_new_column_order_with_every_answer_kept() {
    let mut upgraded_db = TestDb::create().await.expect("test database");
    let roles = upgraded_db.create_roles().await.expect("roles");
    let reference_db = TestDb::create().await.expect("reference database");
    let pool = PgPool::connect(&upgraded_db.url)
        .await
        .expect("connect as the owner");
    let reference_pool = PgPool::connect(&reference_db.url).await.expect("reference pool");
    for (db, pool) in [(&upgraded_db, &pool), (&reference_db, &reference_pool)] {
        // Every migration before 0021 (0020, the per-partition dedup key, where the tree has it).
        db.migrate_up_to(pool, 20).await;
        populate(pool).await;
    }
    exec(
        &pool,
        &format!(
            "SELECT sentinel_apply_grants('{}', '{}'); \
             COMMENT ON TABLE observation_state IS 'the state class'; \
             COMMENT ON COLUMN observation_state.quality IS 'the row''s quality'; \
             COMMENT ON TABLE observation_measurement_p20260602 IS 'a day'",
            roles.writer, roles.reader
        ),
    )
    .await;
    let store = PgStore::connect(&upgraded_db.url, PgStoreConfig::default())
        .await
        .expect("connect the store");
    let reference = PgStore::connect(&reference_db.url, PgStoreConfig::default())
        .await
        .expect("connect the reference");

    let rows_before = rows(&pool).await;
    assert_eq!(
        rows_before,
        rows(&reference_pool).await,
        "the two databases hold the same rows"
    );
    assert_eq!(rows_before[0].lines().count(), 1_800, "600 rows in each class");
    assert!(
        rows_before[6].lines().count() > 10 && rows_before[9].lines().count() > 10,
        "day one of measurement and state is compacted"
    );
    let reads_before = reads(&store).await;
    assert_eq!(reads_before, reads(&reference).await);
    let catalog_before = catalog(&pool).await;
    assert_eq!(
        column_order(&pool, "measurement").await[..3],
        ["ingested_at", "point_key", "observed_at"],
        "the order before 0021"
    );

    let report = store.migrate().await.expect("upgrade");
    assert_eq!(
        report.applied,
        vec![21, 22],
        "the column order of 0021, then 0022's dedup key check"
    );
    for (class, _, _) in CLASSES {
        assert_eq!(column_order(&pool, class).await, NEW_ORDER, "{class}");
    }
    assert_same(
        &catalog(&pool).await,
        &catalog_before,
        "partitions, indexes, grants, views",
    );
    assert_same(&rows(&pool).await, &rows_before, "every row");
    assert_eq!(reads(&store).await, reads_before, "every read answers as before");

    // The hot row is smaller: the same rows take fewer bytes a tuple.
    let tuple_bytes = |pool: PgPool| async move {
        sqlx::query_scalar::<_, f64>(
            "SELECT avg(pg_column_size(o.*))::float8 FROM observation_measurement_p20260602 o",
        )
        .fetch_one(&pool)
        .await
        .expect("tuple bytes")
    };
    let (after, before) = (
        tuple_bytes(pool.clone()).await,
        tuple_bytes(reference_pool.clone()).await,
    );
    assert!(
        after + 8.0 <= before,
        "a tuple of {after:.1} B after, {before:.1} B before"
    );

    // The write paths over the hot tables do on the upgraded database what they do before 0021.
    write_paths(&pool).await;
    write_paths(&reference_pool).await;
    let rows_after = rows(&pool).await;
    assert_same(
        &rows_after,
        &rows(&reference_pool).await,
        "the rows after the same writes",
    );
    assert_ne!(rows_after, rows_before, "the writes changed rows");
    assert_eq!(reads(&store).await, reads(&reference).await);

    // A day made after the upgrade has the new order and the indexes a day made before it has
    // (its parent's, and whatever per-partition index `sentinel_ensure_partitions` makes).
    exec(&pool, "SELECT sentinel_ensure_partitions('2026-07-01', 1)").await;
    assert_eq!(column_order(&pool, "state_p20260701").await, NEW_ORDER);
    let index_columns = |table: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(format!(
                "SELECT string_agg(d, ', ' ORDER BY d) FROM (SELECT regexp_replace(pg_get_indexdef(indexrelid), \
                   '^.* USING ', '') AS d FROM pg_index WHERE indrelid = '{table}'::regclass) i"
            )))
            .fetch_one(&pool)
            .await
            .expect("indexes")
        }
    };
    assert_eq!(
        index_columns("observation_state_p20260701").await,
        index_columns("observation_state_p20260603").await,
        "a new day's indexes are an upgraded day's"
    );
}
