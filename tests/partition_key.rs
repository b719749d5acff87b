//! Migration 0020 (issue 24, disk: the hot row; BENCHMARKS.md "The dedup key per hot
//! partition"): the class tables' partitioned unique index `(instance_key, source_epoch,
//! source_seq, ingested_at)` is replaced by a unique index `<partition>_key (instance_key,
//! source_epoch, source_seq)` at fillfactor 100 on every hot partition, made with each
//! partition from then on. A populated database keeps every row and answer across the upgrade;
//! a redelivered row (`INSERT … ON CONFLICT DO NOTHING` with no conflict target, as the commit
//! writes it, and a plain insert) is refused after it, in every class and in a partition made
//! after it, and so is a copy with another `ingested_at` on the same day; a copy on another day
//! is another partition's row, as before; the late-duplicate probe reads the new index; and a
//! day filled in ingest order keeps the index packed.

use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::pg::{TestDb, exec, fill_ingest_order, index_bytes_per_row_of_fill, text};
use sqlx::PgPool;

const CLASSES: [&str; 3] = ["measurement", "state", "diagnostic"];

/// Rows and points of the ingest-order fill (16 driver instances, as BENCHMARKS.md's).
const FILL_ROWS: i64 = 200_000;
const FILL_POINTS: i64 = 50;
/// The dedup key's bytes per row that fill may cost. Measured (BENCHMARKS.md): 28.6 B over
/// 4,320,000 rows in ingest order; a packed entry is 28 B (an 8-byte tuple header, 4-byte
/// instance, 4-byte epoch, 8-byte seq, 4-byte line pointer). The four-column index of
/// migrations 0001–0019 cost 70.9 B in the same order.
const FILL_KEY_BYTES_PER_ROW_MAX: f64 = 32.0;

/// Every row of each class (all columns, through the `_all` view of hot and compacted rows, in
/// key order, as a digest), each point's newest row, the `observation` view's count per point
/// and a key lookup by the full key (reprocess's address): what must not change across the
/// upgrade.
async fn answers(pool: &PgPool) -> Vec<String> {
    // Rows as jsonb, whose keys sort by name: migration 0021 reorders the tables' columns.
    let mut out = Vec::new();
    for class in CLASSES {
        out.push(
            text(
                pool,
                &format!(
                    "SELECT count(*) || ' ' || md5(string_agg(to_jsonb(o)::text, '|' ORDER BY o.instance_key, o.source_epoch, \
                       o.source_seq, o.ingested_at)) FROM observation_{class}_all o"
                ),
            )
            .await,
        );
        out.push(
            text(
                pool,
                &format!(
                    "SELECT jsonb_agg(h ORDER BY k)::text FROM (SELECT DISTINCT point_key AS k FROM observation_{class}) p \
                     CROSS JOIN LATERAL (SELECT o.* FROM observation_{class}_all o WHERE o.point_key = p.k \
                       ORDER BY o.observed_at DESC, o.ingested_at DESC, o.instance_key DESC, o.source_epoch DESC, \
                       o.source_seq DESC LIMIT 1) h"
                ),
            )
            .await,
        );
        out.push(
            text(
                pool,
                &format!(
                    "SELECT jsonb_agg(o ORDER BY o.ingested_at)::text FROM observation_{class} o \
                     WHERE (o.instance_key, o.source_epoch, o.source_seq) = \
                       ((SELECT key FROM instance_key WHERE driver_instance = 'drv3'), 1, 19)"
                ),
            )
            .await,
        );
    }
    out.push(
        text(
            pool,
            "SELECT json_agg(c ORDER BY point_id)::text FROM (SELECT point_id, count(*), max(observed_at) \
             FROM observation GROUP BY point_id) c",
        )
        .await,
    );
    out
}

/// Every unique index of the class tables and of their hot partitions: (table, definition).
async fn unique_indexes(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT t.relname::text, pg_get_indexdef(c.oid) FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid \
         JOIN pg_class t ON t.oid = i.indrelid \
         WHERE t.relname ~ '^observation_(measurement|state|diagnostic)(_p[0-9]{8})?$' AND i.indisunique \
         ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("the unique indexes")
}

async fn hot_partitions(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT relname::text FROM pg_class WHERE relname ~ '^observation_(measurement|state|diagnostic)_p[0-9]{8}$' \
         AND relkind = 'r' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("partitions")
}

/// Exactly one unique index on each hot partition, the three-column key at fillfactor 100, and
/// none on the parents.
async fn assert_one_key_per_partition(pool: &PgPool) {
    let partitions = hot_partitions(pool).await;
    let indexes = unique_indexes(pool).await;
    let tables: Vec<&str> = indexes.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(tables, partitions, "{indexes:#?}");
    for (table, def) in &indexes {
        assert!(
            def.ends_with(&format!(
                "{table}_key ON public.{table} USING btree (instance_key, source_epoch, source_seq) \
                 WITH (fillfactor='100')"
            )),
            "{table}: {def}"
        );
    }
}

/// A raw row's columns in the order the selects below give them (migration 0021 reorders the
/// table's, so every insert here names them).
const COLUMNS: &str = "ingested_at, point_key, observed_at, device_time, value_num, value_bool, \
    value_text, native_num, native_text, unit_native, quality, reason, detail, changed, \
    registry_version, instance_key, source_epoch, source_seq, skew_flagged, applied";

/// Rows `INSERT … ON CONFLICT DO NOTHING` (no conflict target, as the commit) inserts into
/// `class` from `select`, which gives [`COLUMNS`].
async fn on_conflict_inserts(pool: &PgPool, class: &str, select: &str) -> u64 {
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "INSERT INTO observation_{class} ({COLUMNS}) {select} ON CONFLICT DO NOTHING"
    )))
    .execute(pool)
    .await
    .unwrap_or_else(|e| panic!("{class}: {select}: {e}"))
    .rows_affected()
}

/// Redelivered rows of every class are refused on the day they were stored: the same rows, and
/// the same keys with another `ingested_at` that day, with `ON CONFLICT DO NOTHING` and plainly.
async fn assert_redeliveries_refused(pool: &PgPool, day: &str) {
    for class in CLASSES {
        let part = format!("observation_{class}_p{}", day.replace('-', ""));
        let same = format!("SELECT {COLUMNS} FROM {part} ORDER BY source_seq LIMIT 50");
        assert_eq!(
            on_conflict_inserts(pool, class, &same).await,
            0,
            "{part}: a redelivered row is not inserted"
        );
        let moved = format!(
            "SELECT ingested_at + (CASE WHEN ingested_at < TIMESTAMPTZ '{day} 12:00+00' THEN 1 ELSE -1 END) \
               * interval '1 second', point_key, observed_at, device_time, value_num, value_bool, value_text, \
               native_num, native_text, unit_native, quality, reason, detail, changed, registry_version, \
               instance_key, source_epoch, source_seq, skew_flagged, applied \
             FROM {part} ORDER BY source_seq LIMIT 50"
        );
        assert_eq!(
            on_conflict_inserts(pool, class, &moved).await,
            0,
            "{part}: a copy with another ingested_at the same day is not inserted"
        );
        let plain = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "INSERT INTO observation_{class} ({COLUMNS}) {moved}"
        )))
        .execute(pool)
        .await
        .expect_err("a plain insert of a stored key fails");
        assert!(
            plain.to_string().contains(&format!("\"{part}_key\"")),
            "{part}: refused by the partition's key: {plain}"
        );
    }
}

#[tokio::test]
async fn a_populated_database_upgrades_to_a_dedup_key_per_partition_with_every_answer_kept() {
    let db = TestDb::create().await.expect("test database");
    let pool = PgPool::connect(&db.url).await.expect("connect as the owner");
    db.migrate_up_to(&pool, 19).await;
    exec(&pool, "SELECT sentinel_ensure_partitions('2026-01-15', 2)").await;
    for class in CLASSES {
        fill_ingest_order(&pool, class, 20_000, 40).await;
        // The same keys stored again the next day (the bus's duplicate window long past): rows of
        // another partition, which the upgrade must keep.
        exec(
            &pool,
            &format!(
                "INSERT INTO observation_{class} ({COLUMNS}) SELECT ingested_at + interval '1 day', point_key, observed_at, \
                   device_time, value_num, value_bool, value_text, native_num, native_text, unit_native, quality, \
                   reason, detail, changed, registry_version, instance_key, source_epoch, source_seq, skew_flagged, \
                   applied FROM observation_{class}_p20260115 WHERE source_seq % 100 = 19"
            ),
        )
        .await;
    }
    exec(&pool, "ANALYZE").await;
    let before = answers(&pool).await;
    let lengths: Vec<usize> = before.iter().map(String::len).collect();
    assert!(
        lengths.iter().all(|n| *n > 30),
        "every answer holds rows: {lengths:?}"
    );

    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect the store");
    let report = store.migrate().await.expect("upgrade");
    assert_eq!(
        report.applied,
        vec![20, 21, 22],
        "the per-partition dedup keys of 0020, then 0021's column order and 0022's dedup key check"
    );

    // Two days of three classes, and whatever days the store made ahead of today.
    let partitions = hot_partitions(&pool).await.len();
    assert!(partitions >= 6, "{partitions} partitions");
    assert_one_key_per_partition(&pool).await;
    assert!(
        answers(&pool).await == before,
        "every row and answer as before the upgrade"
    );
    assert_redeliveries_refused(&pool, "2026-01-15").await;
    assert_redeliveries_refused(&pool, "2026-01-16").await;
    assert!(answers(&pool).await == before, "nothing was inserted");

    // A day made after the upgrade gets its key with the partition; a row redelivered there
    // is refused, and a copy of a key stored on another day is that day's row.
    exec(&pool, "SELECT sentinel_ensure_partitions('2026-03-01', 1)").await;
    assert_eq!(hot_partitions(&pool).await.len(), partitions + 3);
    assert_one_key_per_partition(&pool).await;
    for class in CLASSES {
        let copy = format!(
            "SELECT ingested_at + interval '45 days', point_key, observed_at, device_time, value_num, value_bool, \
               value_text, native_num, native_text, unit_native, quality, reason, detail, changed, registry_version, \
               instance_key, source_epoch, source_seq, skew_flagged, applied \
             FROM observation_{class}_p20260115 ORDER BY source_seq LIMIT 50"
        );
        assert_eq!(
            on_conflict_inserts(&pool, class, &copy).await,
            50,
            "{class}: another day's partition"
        );
    }
    assert_redeliveries_refused(&pool, "2026-03-01").await;

    // The late-duplicate probe (store-pg `stored_copy_in!`, its hot half) looks the key up in
    // the partition's new index.
    exec(&pool, "ANALYZE").await;
    let plan: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT 1 FROM observation_measurement o WHERE o.instance_key = 4 AND o.source_epoch = 1 \
           AND o.source_seq = 19 AND o.ingested_at >= TIMESTAMPTZ '2026-01-15 00:00' \
           AND o.ingested_at < TIMESTAMPTZ '2026-01-15 06:00'",
    )
    .fetch_all(&pool)
    .await
    .expect("explain");
    let plan = plan.join("\n");
    assert!(
        plan.contains("using observation_measurement_p20260115_key"),
        "{plan}"
    );
}

#[tokio::test]
async fn a_day_filled_in_ingest_order_keeps_its_dedup_key_packed() {
    let per_row =
        index_bytes_per_row_of_fill("observation_measurement_p20260115_key", FILL_ROWS, FILL_POINTS).await;
    assert!(
        per_row <= FILL_KEY_BYTES_PER_ROW_MAX,
        "a day filled in ingest order costs {per_row:.1} B a row in its dedup key, \
         over the {FILL_KEY_BYTES_PER_ROW_MAX} B a packed key costs"
    );
}
