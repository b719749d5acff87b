//! Migration 0018 (issue 24 item 1, "hot ≤ 120 B"; BENCHMARKS.md "The hot row's bytes"): each
//! class table's point index is `(point_key, observed_at)` ascending at fillfactor 100, on the
//! parent, on every hot partition a populated database had and on every partition made after.
//! A day filled in ingest order keeps that index's leaves packed (the descending index it
//! replaces ended about half full), every read of a point's rows answers as before, and the
//! reads of a point's newest rows scan the index backward.

use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::pg::{TestDb, exec, fill_ingest_order, index_bytes_per_row_of_fill, text};
use sqlx::PgPool;

const CLASSES: [&str; 3] = ["measurement", "state", "diagnostic"];

/// Rows and points of the ingest-order fill: 4,000 rows a point, more than a dozen leaf pages
/// of each point's entries, as a design-rate day gives a point.
const FILL_ROWS: i64 = 200_000;
const FILL_POINTS: i64 = 50;
/// The point index's bytes per row that fill may cost. Measured (BENCHMARKS.md): 31.1 B
/// ascending at fillfactor 100, 55.7 B with the descending index of migrations 0001–0017;
/// a packed entry is 28 B (an 8-byte tuple header, 4-byte key, 4 bytes of padding, 8-byte
/// timestamp, 4-byte line pointer).
const FILL_POINT_INDEX_BYTES_PER_ROW_MAX: f64 = 40.0;

/// Every point's newest row and ten seconds of one point's rows, per class, in the readers'
/// orders: what must not change with the index under them.
async fn answers(pool: &PgPool) -> Vec<String> {
    let mut out = Vec::new();
    for class in CLASSES {
        out.push(
            text(
                pool,
                &format!(
                    "SELECT json_agg(h ORDER BY k)::text FROM (SELECT DISTINCT point_key AS k FROM observation_{class}) p \
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
                    "SELECT json_agg(o ORDER BY o.point_key, o.observed_at, o.ingested_at, o.source_seq)::text \
                     FROM observation_{class}_all o WHERE o.point_key IN (SELECT min(point_key) FROM observation_{class}) \
                     AND o.observed_at >= TIMESTAMPTZ '2026-01-15 00:00:10' AND o.observed_at < TIMESTAMPTZ '2026-01-15 00:00:20'"
                ),
            )
            .await,
        );
    }
    out
}

/// The point index of every class table and of each of its hot partitions: (index, definition).
async fn point_indexes(pool: &PgPool) -> Vec<(String, String)> {
    sqlx::query_as(
        "SELECT c.relname::text, pg_get_indexdef(c.oid) FROM pg_class c JOIN pg_index i ON i.indexrelid = c.oid \
         JOIN pg_class t ON t.oid = i.indrelid \
         WHERE t.relname ~ '^observation_(measurement|state|diagnostic)(_p[0-9]{8})?$' \
           AND pg_get_indexdef(c.oid) LIKE '%(point_key%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .expect("the point indexes")
}

fn assert_ascending_packed(indexes: &[(String, String)], partitions: usize) {
    assert_eq!(indexes.len(), 3 + partitions, "{indexes:#?}");
    for (name, def) in indexes {
        assert!(
            def.ends_with("USING btree (point_key, observed_at) WITH (fillfactor='100')"),
            "{name}: {def}"
        );
    }
}

async fn hot_partitions(pool: &PgPool) -> usize {
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class WHERE relname ~ '^observation_(measurement|state|diagnostic)_p[0-9]{8}$'",
    )
    .fetch_one(pool)
    .await
    .expect("partitions");
    usize::try_from(n).expect("a count")
}

#[tokio::test]
async fn a_populated_database_upgrades_to_the_ascending_point_index_with_every_answer_kept() {
    let db = TestDb::create().await.expect("test database");
    let pool = PgPool::connect(&db.url).await.expect("connect as the owner");
    // Every migration before 0018 (0017, the compaction encoder's, where the tree has it).
    db.migrate_up_to(&pool, 17).await;
    exec(&pool, "SELECT sentinel_ensure_partitions('2026-01-15', 2)").await;
    for class in CLASSES {
        fill_ingest_order(&pool, class, 20_000, 40).await;
    }
    // A late row: older than its point's newest, so it lands inside the point's entries.
    exec(
        &pool,
        "INSERT INTO observation_state (ingested_at, point_key, observed_at, value_num, quality, changed, \
           registry_version, instance_key, source_epoch, source_seq) \
         SELECT TIMESTAMPTZ '2026-01-15 00:10', key, TIMESTAMPTZ '2026-01-15 00:00:30', 7, 'live', true, 1, \
           (SELECT min(key) FROM instance_key), 2, 1 FROM point_key WHERE point_id = 'state.p3'",
    )
    .await;
    exec(&pool, "ANALYZE").await;
    let before = answers(&pool).await;
    let lengths: Vec<usize> = before.iter().map(String::len).collect();
    assert!(
        lengths.iter().all(|n| *n > 100),
        "every answer holds rows: {lengths:?}"
    );

    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect the store");
    let report = store.migrate().await.expect("upgrade");
    assert_eq!(
        report.applied,
        vec![18, 19, 20, 21, 22],
        "the point indexes of 0018, the pack record of 0019, the per-partition dedup keys of 0020, the column order of 0021 and the dedup key check of 0022"
    );

    let partitions = hot_partitions(&pool).await;
    assert!(
        partitions >= 6,
        "two days of three classes at least: {partitions}"
    );
    assert_ascending_packed(&point_indexes(&pool).await, partitions);
    assert!(
        answers(&pool).await == before,
        "every answer as before the upgrade"
    );

    // A day made after the upgrade inherits the definition and the fillfactor.
    exec(&pool, "SELECT sentinel_ensure_partitions('2026-03-01', 1)").await;
    let more = hot_partitions(&pool).await;
    assert_eq!(more, partitions + 3);
    assert_ascending_packed(&point_indexes(&pool).await, more);

    // A point's newest rows are read by scanning its entries backward (an index or index-only
    // scan), with no sort of its rows.
    exec(&pool, "ANALYZE").await;
    let mut explain = String::new();
    let lines: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT o.observed_at FROM observation_measurement_p20260115 o \
         WHERE o.point_key = (SELECT key FROM point_key WHERE point_id = 'measurement.p7') \
         ORDER BY o.observed_at DESC LIMIT 5",
    )
    .fetch_all(&pool)
    .await
    .expect("explain");
    for line in lines {
        explain.push_str(&line);
        explain.push('\n');
    }
    assert!(
        explain.contains("Scan Backward using observation_measurement_p20260115_point_key_observed_at_idx"),
        "{explain}"
    );
    assert!(!explain.contains("Sort"), "{explain}");
}

#[tokio::test]
async fn a_day_filled_in_ingest_order_keeps_its_point_index_packed() {
    let per_row = index_bytes_per_row_of_fill(
        "observation_measurement_p20260115_point_key_observed_at_idx",
        FILL_ROWS,
        FILL_POINTS,
    )
    .await;
    assert!(
        per_row <= FILL_POINT_INDEX_BYTES_PER_ROW_MAX,
        "a day filled in ingest order costs {per_row:.1} B a row in its point index, \
         over the {FILL_POINT_INDEX_BYTES_PER_ROW_MAX} B a packed index costs"
    );
}
