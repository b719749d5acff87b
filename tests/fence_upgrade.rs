//! Migration 0013 on a populated database (issue 25 item 3): a database at version 12, its
//! epoch taken by an older core (no start identity anywhere) and its writer role granted the
//! epoch-only functions, upgrades safely. The epoch stays with no identity, which fences every
//! write until the next acquisition records one; the writer keeps its rights on the functions'
//! new signatures and the epoch-only ones are gone; the next acquisition takes the next epoch
//! with an identity, an old-epoch writer is refused as before, and the holder writes, through
//! the SQL functions too, as the writer role.

use std::sync::Arc;

use sentinel_core::{Micros, PointState};
use sentinel_ports::{Lease, Store, StoreError};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::pg::TestDb;
use sqlx::PgPool;

/// As of the newest migration (0015 gave reprocess each row's point and `observed_at`, and
/// granted the compaction to whoever may drop a partition; 0016 the minute rollups'
/// compaction to whoever may compact a day).
const FENCED_FUNCTIONS: [&str; 8] = [
    "sentinel_rollup_refresh_range(integer, bigint, timestamptz, timestamptz)",
    "sentinel_rollup_claim(integer, bigint, timestamptz, integer, integer)",
    "sentinel_rollup_apply(integer, bigint)",
    "sentinel_retention_drop(integer, bigint, text, timestamptz, timestamptz, text, timestamptz)",
    "sentinel_move_point_class(integer, bigint, text, text, text, timestamptz)",
    "sentinel_reprocess_apply(integer, bigint, text, text[], integer[], bigint[], timestamptz[], \
     float8[], boolean[], text[], text[], text[], text[], integer, text[], timestamptz[])",
    "sentinel_compact_day(integer, bigint, text, timestamptz, timestamptz, integer, timestamptz, text)",
    "sentinel_compact_rollup_day(integer, bigint, timestamptz, timestamptz, integer, text)",
];

fn state() -> Vec<PointState> {
    vec![PointState::unknown(Arc::from("u.flow"), Micros(0))]
}

#[tokio::test]
async fn a_populated_database_upgrades_to_the_identity_fence() {
    let mut db = TestDb::create().await.expect("test database");
    let pool = PgPool::connect(&db.url).await.expect("connect as the owner");
    db.migrate_up_to(&pool, 12).await;
    let roles = db.create_roles().await.expect("roles");
    for grant in [
        "SELECT sentinel_apply_grants($1, $2)",
        "SELECT sentinel_apply_reprocess_grants($1)",
        "SELECT sentinel_apply_command_grants($1, $2)",
    ] {
        let query = sqlx::query(grant).bind(&roles.writer);
        let query = if grant.contains("$2") {
            query.bind(&roles.reader)
        } else {
            query
        };
        query.execute(&pool).await.expect("grants at version 12");
    }
    // An older core's three acquisitions: no identity recorded anywhere.
    sqlx::query(
        "INSERT INTO core_start (epoch, started_at, backend_pid, application_name) \
         SELECT e, now(), 1, 'sentinel-core epoch ' || e FROM generate_series(1, 3) e",
    )
    .execute(&pool)
    .await
    .expect("old acquisitions");
    sqlx::query("UPDATE core_epoch SET epoch = 3")
        .execute(&pool)
        .await
        .expect("old epoch");

    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect the store");
    let report = store.migrate().await.expect("upgrade");
    assert_eq!(
        report.applied,
        vec![13, 14, 15, 16, 17, 18, 19, 20, 21, 22],
        "0013, then the integer ids of 0014, the compacted days of 0015, the compacted \
         minute rollups of 0016, the values derived from native of 0017 the point indexes of 0018, the pack record of 0019 and the per-partition dedup keys of 0020 and the hot row's column order of 0021 and the dedup key check of 0022"
    );
    let holder: (i32, Option<i64>) = sqlx::query_as("SELECT epoch, core_start FROM core_epoch")
        .fetch_one(&pool)
        .await
        .expect("the holder");
    assert_eq!(holder, (3, None), "the epoch stays, with no identity");

    // No identity matches nothing: the old epoch's writer (a handle with no identity, as an
    // old core's is) is refused even at the recorded epoch.
    match store.checkpoint(3, state()).await {
        Err(StoreError::Fenced {
            epoch: 3,
            current: 3,
            start: None,
            current_start: None,
        }) => {}
        other => panic!("a write at the epoch with no identity went through: {other:?}"),
    }

    // The writer's rights moved to the new signatures; the epoch-only ones are gone.
    for function in FENCED_FUNCTIONS {
        let granted: bool = sqlx::query_scalar("SELECT has_function_privilege($1, $2, 'EXECUTE')")
            .bind(&roles.writer)
            .bind(function)
            .fetch_one(&pool)
            .await
            .expect("privilege");
        assert!(granted, "the writer may execute {function} after the upgrade");
    }
    let old_left: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_proc WHERE proname IN ('sentinel_rollup_fence', \
         'sentinel_rollup_refresh_range', 'sentinel_rollup_claim', 'sentinel_rollup_apply', \
         'sentinel_retention_drop', 'sentinel_move_point_class', 'sentinel_reprocess_apply') \
         AND (pronargs < 2 OR proargtypes[1] <> 'bigint'::regtype)",
    )
    .fetch_one(&pool)
    .await
    .expect("old functions");
    assert_eq!(old_left, 0, "no function fences on the epoch alone");

    // The writer role's core: the next acquisition records an identity with epoch 4.
    let writer = PgStore::connect(&roles.writer_url, PgStoreConfig::default())
        .await
        .expect("connect as the writer");
    let lease = writer.acquire().await.expect("acquire as the writer");
    assert_eq!(lease.epoch(), 4);
    let holder: (i32, Option<i64>) = sqlx::query_as("SELECT epoch, core_start FROM core_epoch")
        .fetch_one(&pool)
        .await
        .expect("the holder");
    assert_eq!(holder, (4, Some(lease.core_start() as i64)));
    // An old-epoch writer is refused as before; the holder writes, through a function too.
    assert!(matches!(
        writer.checkpoint(3, state()).await,
        Err(StoreError::Fenced {
            epoch: 3,
            current: 4,
            ..
        })
    ));
    writer
        .checkpoint(4, state())
        .await
        .expect("the holder's checkpoint");
    writer
        .refresh_rollups(4, Micros(0), Micros(3_600_000_000))
        .await
        .expect("the holder's rollup refresh, as the writer");
    lease.release().await.expect("release");
}
