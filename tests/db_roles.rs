//! Database roles (ARCHITECTURE.md, "Security model"; `migrations/0003_roles.sql`), against real
//! PostgreSQL: `sentinel db grants --writer W --reader R` gives the core's writer exactly what it
//! uses and the dashboards' reader only reads. The log is append-only for the writer: it cannot
//! drop, alter, truncate, delete or update observation rows, nor create anything; it makes
//! partitions only through the SECURITY DEFINER function. (That the whole core runs as the
//! writer is shown by every process and end-to-end test: `harness::Env` connects cores as it.)

use std::process::{Command, Stdio};

use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::pg;
use sentinel_tests::pg::{TestDb, TestRoles};

/// A migrated database with its two roles granted by the binary itself.
async fn granted() -> (TestDb, TestRoles) {
    let mut db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let roles = db.create_roles().await.expect("roles");
    let out = Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args([
            "db",
            "grants",
            "--writer",
            &roles.writer,
            "--reader",
            &roles.reader,
        ])
        .env("SENTINEL_DATABASE_URL", &db.url)
        .stdin(Stdio::null())
        .output()
        .expect("run sentinel db grants");
    assert!(
        out.status.success(),
        "db grants: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    (db, roles)
}

/// Runs `sql` as whoever `url` connects as; the error text when it is refused.
async fn refused(url: &str, sql: &str) -> Option<String> {
    match sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(&mut pg(url).await)
        .await
    {
        Ok(_) => None,
        Err(e) => Some(e.to_string()),
    }
}

/// A row as the commit writes it (migration 0014): the ids' keys first, then the row with them.
const ONE_ROW: &str = "INSERT INTO point_key (point_id) VALUES ('p'); \
     INSERT INTO instance_key (driver_instance) VALUES ('i'); \
     INSERT INTO observation_measurement (ingested_at, point_key, observed_at, \
     native_num, quality, changed, registry_version, instance_key, source_epoch, source_seq) \
     VALUES (now(), (SELECT key FROM point_key WHERE point_id = 'p'), now(), 1, 'live', true, 1, \
     (SELECT key FROM instance_key WHERE driver_instance = 'i'), 1, 1)";

/// [`ONE_ROW`]'s key again, ingested at the start of its day (the same partition).
const ROW_AGAIN: &str = "INSERT INTO observation_measurement (ingested_at, point_key, observed_at, \
     native_num, quality, changed, registry_version, instance_key, source_epoch, source_seq) \
     VALUES (date_trunc('day', now(), 'UTC'), (SELECT key FROM point_key WHERE point_id = 'p'), now(), 1, 'live', \
     true, 1, (SELECT key FROM instance_key WHERE driver_instance = 'i'), 1, 1)";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_writer_appends_but_cannot_rewrite_drop_or_create() {
    let (db, roles) = granted().await;
    // What the core does: partitions through the function, insert, read back.
    assert_eq!(
        refused(
            &roles.writer_url,
            "SELECT sentinel_ensure_partitions(current_date, 2)"
        )
        .await,
        None,
        "the writer makes partitions through the SECURITY DEFINER function"
    );
    assert_eq!(
        refused(&roles.writer_url, ONE_ROW).await,
        None,
        "the writer inserts"
    );
    // A hot partition made by hand has no dedup key; the writer's call of the function over
    // its day makes it, as the owner (migration 0022), as the boot does.
    sqlx::raw_sql(
        "CREATE TABLE observation_state_p20991230 PARTITION OF observation_state \
         FOR VALUES FROM ('2099-12-30 00:00+00') TO ('2099-12-31 00:00+00')",
    )
    .execute(&mut pg(&db.url).await)
    .await
    .expect("a partition by hand, as the owner");
    assert_eq!(
        refused(
            &roles.writer_url,
            "DO $$ BEGIN IF (SELECT has_key FROM sentinel_hot_partition_keys() \
               WHERE part = 'observation_state_p20991230') THEN RAISE 'has its key already'; END IF; END $$; \
             SELECT sentinel_ensure_partitions('2099-12-30', 1); \
             DO $$ BEGIN IF NOT (SELECT has_key FROM sentinel_hot_partition_keys() \
               WHERE part = 'observation_state_p20991230') THEN RAISE 'no key made'; END IF; END $$"
        )
        .await,
        None,
        "the writer has a hand-made partition's key made through the SECURITY DEFINER function"
    );
    // The partition the writer's call made has its dedup key (migration 0020, made by the
    // function as the owner): the row again, with another ingested_at the same day, is not
    // inserted with ON CONFLICT DO NOTHING and fails a plain insert.
    assert_eq!(
        refused(&roles.writer_url, &format!("{ROW_AGAIN} ON CONFLICT DO NOTHING")).await,
        None
    );
    let again = refused(&roles.writer_url, ROW_AGAIN)
        .await
        .expect("a plain insert of a stored key fails");
    assert!(again.contains("duplicate key"), "{again}");
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM observation_measurement")
        .fetch_one(&mut pg(&db.url).await)
        .await
        .expect("count");
    assert_eq!(rows, 1, "the redelivered row was not inserted");
    assert_eq!(
        refused(&roles.writer_url, "SELECT count(*) FROM observation").await,
        None
    );

    // Rollups (migrations/0004_rollups.sql): only through the functions, fenced on the epoch
    // and the start identity (epoch 0 in a database no core has locked yet; the identity 77
    // set by the owner as an acquisition records one, migration 0013); the insert above went
    // through the invalidation trigger, which the writer cannot write to either.
    sqlx::query("UPDATE core_epoch SET core_start = 77")
        .execute(&mut pg(&db.url).await)
        .await
        .expect("a holder's identity");
    for sql in [
        "SELECT * FROM sentinel_rollup_refresh_range(0, 77, now() - interval '1 hour', now())",
        "SELECT sentinel_rollup_claim(0, 77, now(), 60, 1000)",
        "SELECT * FROM sentinel_rollup_apply(0, 77)",
        "SELECT count(*) FROM rollup_1m_avg",
        "SELECT count(*) FROM rollup_1h",
        "SELECT refreshed_to FROM rollup_watermark",
        // Reprocess (migrations/0006_reprocess.sql): rows are updated only through the
        // function, fenced on the epoch like the rollups.
        REPROCESS_APPLY,
        // Retention and class moves (migrations/0005_retention.sql): only through the
        // fenced functions; a partition that does not exist is no drop (NULL).
        "SELECT sentinel_retention_drop(0, 77, 'rollup_1m', '2001-01-01', '2001-01-02', 'core:retention', now())",
        "SELECT * FROM sentinel_move_point_class(0, 77, 'nobody', 'state', 'operator:x', now())",
        "SELECT count(*) FROM retention_mark",
        // The command plane's desired values (migrations/0008_point_desired.sql): the
        // writer upserts them, always beside a fenced control event (Store::write_arbitration).
        "INSERT INTO point_desired (point_id, value, since, core_epoch, control_seq) \
         VALUES ('p', '1', now(), 0, 0) ON CONFLICT (point_id) DO UPDATE SET value = EXCLUDED.value",
        "SELECT count(*) FROM point_desired",
        // The pack record (migration 0019): read, never written (the owner packs).
        "SELECT count(*) FROM hot_day_pack",
    ] {
        assert_eq!(
            refused(&roles.writer_url, sql).await,
            None,
            "the writer may {sql}"
        );
    }
    let rollups: i64 = sqlx::query_scalar("SELECT count(*) FROM rollup_1m")
        .fetch_one(&mut pg(&db.url).await)
        .await
        .expect("count rollups");
    assert_eq!(rollups, 1, "the writer's refresh wrote the row's minute");

    for (what, sql) in [
        ("DELETE rollups", "DELETE FROM rollup_1m"),
        (
            "INSERT rollups",
            "INSERT INTO rollup_1h (point_id, bucket, retention_class, count, live_count) \
          VALUES ('p', now(), 'measurement', 1, 1)",
        ),
        (
            "UPDATE the watermark",
            "UPDATE rollup_watermark SET refreshed_to = now()",
        ),
        ("DELETE invalidations", "DELETE FROM rollup_invalidation"),
        ("DELETE desired values", "DELETE FROM point_desired"),
        (
            "record a pack",
            "INSERT INTO hot_day_pack VALUES ('observation_state_p20260115', now(), now(), 0, 0, 0, 0, 0, 0)",
        ),
        ("REINDEX the raw rows", "REINDEX TABLE observation_measurement"),
        (
            "DROP today's rollup partition",
            "DO $$ BEGIN EXECUTE format('DROP TABLE %I', \
             'rollup_1m_p' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')); END $$",
        ),
        (
            "UPDATE a retention mark",
            "UPDATE retention_mark SET kept_from = now()",
        ),
        (
            "recompute without the fence",
            "SELECT sentinel_rollup_recompute('1m', '2026-01-01', '2026-01-02')",
        ),
        ("DELETE", "DELETE FROM observation_measurement"),
        ("UPDATE", "UPDATE observation_measurement SET quality = 'bad'"),
        // A key is never reused nor reassigned (migration 0014).
        ("DELETE a point key", "DELETE FROM point_key"),
        ("UPDATE a point key", "UPDATE point_key SET point_id = 'q'"),
        ("DELETE an instance key", "DELETE FROM instance_key"),
        (
            "UPDATE an instance key",
            "UPDATE instance_key SET driver_instance = 'j'",
        ),
        ("TRUNCATE", "TRUNCATE observation_measurement"),
        ("DROP", "DROP TABLE observation_measurement"),
        ("ALTER", "ALTER TABLE observation_measurement ADD COLUMN x int"),
        ("DELETE from control_event", "DELETE FROM control_event"),
        (
            "grant itself the reprocess function",
            "SELECT sentinel_apply_reprocess_grants(current_user)",
        ),
        (
            "grant itself the command plane's grants",
            "SELECT sentinel_apply_command_grants(current_user, current_user)",
        ),
        ("CREATE", "CREATE TABLE sneaky (x int)"),
        (
            "make a dedup key itself",
            "SELECT sentinel_hot_partition_key('observation_state_p20991230')",
        ),
        (
            "index a partition by hand",
            "CREATE INDEX sneaky_key ON observation_state_p20991230 (source_seq)",
        ),
        (
            "a partition by hand",
            "CREATE TABLE observation_measurement_p20991231 PARTITION OF observation_measurement \
             FOR VALUES FROM ('2099-12-31') TO ('2100-01-01')",
        ),
    ] {
        let error = refused(&roles.writer_url, sql)
            .await
            .unwrap_or_else(|| panic!("the writer could {what}: {sql}"));
        assert!(
            error.contains("permission denied") || error.contains("must be owner"),
            "{what} refused for lack of privilege, got: {error}"
        );
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM observation_measurement")
        .fetch_one(&mut pg(&db.url).await)
        .await
        .expect("count");
    assert_eq!(rows, 1, "the row the writer inserted is still there");
}

/// An empty chunk through the reprocess function, fenced on epoch 0 (no core has locked yet).
const REPROCESS_APPLY: &str = "SELECT sentinel_reprocess_apply(0, 77, 'measurement', '{}', '{}', '{}', \
     '{}', '{}', '{}', '{}', '{}', '{}', '{}', 1, '{}', '{}')";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reader_reads_and_cannot_write_or_see_payloads() {
    let (db, roles) = granted().await;
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "SELECT sentinel_ensure_partitions(current_date, 2); {ONE_ROW}"
    )))
    .execute(&mut pg(&db.url).await)
    .await
    .expect("arrange a row as the owner");
    for sql in [
        "SELECT count(*) FROM observation",
        "SELECT count(*) FROM observation_measurement",
        "SELECT point_id, driver_instance FROM observation_measurement_named",
        "SELECT * FROM point_key, instance_key",
        "SELECT * FROM point_state",
        "SELECT * FROM control_event",
        "SELECT epoch FROM core_epoch",
        "SELECT reason, detail, payload_bytes FROM quarantine",
        "SELECT avg FROM rollup_1h_avg",
        "SELECT sum, live_count FROM rollup_1m",
        "SELECT refreshed_to FROM rollup_watermark",
        "SELECT * FROM point_desired",
        "SELECT * FROM hot_day_pack",
        // `sentinel storage`'s dedup key column (migration 0022): the catalogue only.
        "SELECT * FROM sentinel_hot_partition_keys()",
    ] {
        assert_eq!(
            refused(&roles.reader_url, sql).await,
            None,
            "the reader may {sql}"
        );
    }
    for sql in [
        ONE_ROW,
        "DELETE FROM observation_measurement",
        "UPDATE point_state SET quality = 'bad'",
        "INSERT INTO control_event (occurred_at, kind, principal, core_epoch, payload, registry_version) \
         VALUES (now(), 'x', 'me', 1, '{}', 1)",
        "UPDATE core_epoch SET epoch = 99",
        "SELECT payload FROM quarantine",
        "SELECT sentinel_ensure_partitions(current_date, 1)",
        "SELECT * FROM sentinel_rollup_refresh_range(0, 77, now() - interval '1 hour', now())",
        "DELETE FROM rollup_1m",
        REPROCESS_APPLY,
        "SELECT sentinel_retention_drop(0, 77, 'rollup_1m', '2001-01-01', '2001-01-02', 'me', now())",
        "SELECT * FROM sentinel_move_point_class(0, 77, 'p', 'state', 'me', now())",
        "INSERT INTO point_desired (point_id, since, core_epoch, control_seq) VALUES ('p', now(), 0, 0)",
    ] {
        let error = refused(&roles.reader_url, sql)
            .await
            .unwrap_or_else(|| panic!("the reader could: {sql}"));
        assert!(error.contains("permission denied"), "{sql}: {error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_refuse_one_role_for_both_and_a_missing_role() {
    let (db, roles) = granted().await;
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    let same = store
        .apply_grants(&roles.writer, &roles.writer)
        .await
        .expect_err("one role cannot be both");
    assert!(same.to_string().contains("two named roles"), "{same}");
    let missing = store
        .apply_grants("no_such_role_anywhere", &roles.reader)
        .await
        .expect_err("a missing role");
    assert!(missing.to_string().contains("does not exist"), "{missing}");
    // Idempotent: applying again changes nothing and succeeds.
    store
        .apply_grants(&roles.writer, &roles.reader)
        .await
        .expect("again");
}
