//! Lock first (core runtime spec, "Acquisition order at startup": the advisory lock "is taken
//! before anything else happens"; DESIGN.md §5 invariant 7), with real processes against a
//! private nats-server and a private PostgreSQL database per test.
//!
//! Owns what an operator who starts a second binary by mistake must be able to rely on, observed
//! at the servers rather than inferred from exit codes:
//! - a second `sentinel run` exits 10 at once naming the holder, with no connection ever made to
//!   nats-server (its monitoring endpoint lists every connection, closed ones included), no
//!   DDL run (an event trigger records every DDL command), and the migration table and the
//!   stream's configuration exactly as the first core left them;
//! - `sentinel migrate` takes the lock too: while it is held it exits 10 and applies nothing;
//! - `sentinel status` never migrates and says in words when the schema is absent, older or
//!   newer than the binary, as text and as JSON; `sentinel run` refuses a newer schema.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sentinel_store_pg::PgStore;
use sentinel_store_pg::PgStoreConfig;
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{
    Env, monitor, nats_connection_name, pg, spawn_core, terminate, wait_exit, wait_ready,
};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;

const EXIT_LOCK_HELD: i32 = 10;
/// The issue asks for "within 1 s"; a timed test asserts only a loose bound (figures come from
/// runs, not from timed tests) and prints what it measured.
const SECOND_CORE_EXIT_S: u64 = 10;

/// Every DDL command from now on, with the session that ran it.
const DDL_LOG: &str = "\
CREATE TABLE ddl_log (pid integer, application_name text, tag text, at timestamptz DEFAULT clock_timestamp());
CREATE FUNCTION ddl_log_record() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ddl_log (pid, application_name, tag)
    VALUES (pg_backend_pid(), current_setting('application_name'), tg_tag);
END $$;
CREATE EVENT TRIGGER ddl_log_trigger ON ddl_command_start EXECUTE FUNCTION ddl_log_record();";

async fn ddl_count(url: &str) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM ddl_log")
        .fetch_one(&mut pg(url).await)
        .await
        .expect("ddl_log")
}

/// The migration table as text, row by row.
async fn migrations(url: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT version || ' ' || description || ' ' || encode(checksum, 'hex') || ' ' || installed_on \
         FROM _sqlx_migrations ORDER BY version",
    )
    .fetch_all(&mut pg(url).await)
    .await
    .expect("_sqlx_migrations")
}

/// The observation stream's configuration as the server reports it.
async fn stream_config(server: &NatsServer) -> serde_json::Value {
    let jsz = monitor(server, "/jsz?streams=true&config=true").await;
    let streams = &jsz["account_details"][0]["stream_detail"];
    let obs = streams
        .as_array()
        .expect("streams")
        .iter()
        .find(|s| s["name"] == "OBS")
        .expect("the OBS stream exists");
    obs["config"].clone()
}

/// The names of every connection the server has seen, open or closed.
async fn connection_names(server: &NatsServer) -> Vec<String> {
    let connz = monitor(server, "/connz?state=all&limit=4096").await;
    connz["connections"]
        .as_array()
        .expect("connections")
        .iter()
        .filter_map(|c| c["name"].as_str().map(str::to_owned))
        .collect()
}

fn sentinel(args: &[&str], database_url: &str, nats_url: &str) -> Command {
    let mut command = Command::new(sentinel_bin());
    command
        .current_dir(workspace_root())
        .args(args)
        .env("SENTINEL_DATABASE_URL", database_url)
        .env("SENTINEL_NATS_URL", nats_url)
        .env_remove("SENTINEL_LOG")
        .stdin(Stdio::null());
    command
}

fn output(command: &mut Command) -> (Option<i32>, String, String) {
    let out = command.output().expect("run sentinel");
    (
        out.status.code(),
        String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        String::from_utf8(out.stderr).expect("UTF-8 stderr"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_core_exits_at_once_touching_neither_the_bus_nor_the_schema() {
    let env = Env::start(30_000).await;
    sqlx::raw_sql(DDL_LOG)
        .execute(&mut pg(&env.db.url).await)
        .await
        .expect("ddl log");

    let mut first = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    wait_ready(&env.store, 1).await;
    let first_name = nats_connection_name(&first);
    let names = connection_names(&env.nats).await;
    assert!(
        names.contains(&first_name),
        "positive control: the first core's connection is listed: {names:?}"
    );
    let migrations_before = migrations(&env.db.url).await;
    let stream_before = stream_config(&env.nats).await;
    let ddl_before = ddl_count(&env.db.url).await;
    let holder = env.store.lock_holder().await.expect("holder").expect("held");

    let started = Instant::now();
    let mut second: Child = sentinel(
        &["run", "--registry", "registry", "--self-points-interval-ms", "0"],
        &env.db.url,
        &env.nats.url(),
    )
    .stdout(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .expect("spawn the second core");
    let second_name = nats_connection_name(&second);
    let status = wait_exit(&mut second, Duration::from_secs(SECOND_CORE_EXIT_S))
        .await
        .expect("the second core exits at once");
    let took = started.elapsed();
    assert_eq!(status.code(), Some(EXIT_LOCK_HELD), "lock held: exit code 10");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut second.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    assert!(
        stderr.contains(&format!(
            "another core holds the single-writer lock: pid {}, application_name \"sentinel-core epoch 1\", epoch 1; \
             exiting before touching the bus or the schema",
            holder.backend_pid
        )),
        "the refusal names the holder: {stderr}"
    );

    // No connection from the second core, ever: the server lists closed connections too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let names = connection_names(&env.nats).await;
    assert!(
        !names.contains(&second_name),
        "the second core connected to nats-server: {names:?}"
    );
    // The test's own bus connection is named after the test process.
    let own = format!("sentinel-core pid {}", std::process::id());
    let cores: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("sentinel-core pid ") && **n != own)
        .collect();
    assert_eq!(cores, vec![&first_name], "only the first core ever connected");
    // Neither the schema nor the stream moved, and no DDL ran.
    assert_eq!(migrations(&env.db.url).await, migrations_before);
    assert_eq!(stream_config(&env.nats).await, stream_before);
    assert_eq!(
        ddl_count(&env.db.url).await,
        ddl_before,
        "the second core ran DDL"
    );
    assert_eq!(env.store.current_epoch().await.expect("epoch"), 1);
    assert!(
        wait_exit(&mut first, Duration::from_millis(200)).await.is_none(),
        "the first core keeps running"
    );
    eprintln!("second core exited with code 10 after {took:?}");
    terminate(first).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_while_the_lock_is_held_exits_10_and_applies_nothing() {
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    let supported = PgStore::supported_schema_version();
    // A core mid-startup on a database never migrated: it holds the lock.
    let lock = store.lock().await.expect("lock");

    let (code, stdout, stderr) = output(&mut sentinel(&["migrate"], &db.url, "nats://127.0.0.1:1"));
    assert_eq!(code, Some(EXIT_LOCK_HELD), "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains(&format!("pid {}", lock.backend_pid())),
        "names the holder: {stderr}"
    );
    let tables: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()")
            .fetch_one(&mut pg(&db.url).await)
            .await
            .expect("pg_tables");
    assert_eq!(
        tables, 0,
        "nothing was applied, not even sqlx's bookkeeping table"
    );

    lock.release().await.expect("release");
    let (code, stdout, _) = output(&mut sentinel(&["migrate"], &db.url, "nats://127.0.0.1:1"));
    assert_eq!(code, Some(0));
    // Every migration the binary carries, in order (the numbers need not be contiguous: a
    // branch may carry 0021 before 0020 is merged).
    let mut all: Vec<i64> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../migrations"))
        .expect("the migrations")
        .filter_map(|e| e.ok()?.file_name().to_str()?.get(..4)?.parse().ok())
        .collect();
    all.sort_unstable();
    assert_eq!(all.last(), Some(&supported));
    let all: Vec<String> = all.iter().map(i64::to_string).collect();
    assert_eq!(
        stdout.trim(),
        format!(
            "applied migrations {}; schema is now at version {supported} (this binary's)",
            all.join(", ")
        )
    );
    let (code, stdout, _) = output(&mut sentinel(&["migrate"], &db.url, "nats://127.0.0.1:1"));
    assert_eq!(code, Some(0));
    assert_eq!(
        stdout.trim(),
        format!("schema is up to date at version {supported}; nothing to apply")
    );
}

/// `sentinel rollup refresh` is a write: it runs only under the lock it takes itself, exits 10
/// naming the holder (refreshing nothing) while a core holds it, and refuses a backwards range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollup_refresh_runs_only_under_the_lock_it_takes() {
    use sentinel_ports::{Lease, Store};
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    sqlx::raw_sql(
        "SELECT sentinel_ensure_partitions('2026-01-15', 1); \
         INSERT INTO point_key (point_id) VALUES ('p') ON CONFLICT DO NOTHING; \
         INSERT INTO instance_key (driver_instance) VALUES ('i') ON CONFLICT DO NOTHING; \
         INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, \
           quality, changed, registry_version, instance_key, source_epoch, source_seq) \
         VALUES ('2026-01-15T10:00:05Z', (SELECT key FROM point_key WHERE point_id = 'p'), '2026-01-15T10:00:01Z', 1, 'live', true, 1, (SELECT key FROM instance_key WHERE driver_instance = 'i'), 1, 1), \
                ('2026-01-15T10:00:06Z', (SELECT key FROM point_key WHERE point_id = 'p'), '2026-01-15T10:00:02Z', 2, 'bad', true, 1, (SELECT key FROM instance_key WHERE driver_instance = 'i'), 1, 2)",
    )
    .execute(&mut pg(&db.url).await)
    .await
    .expect("arrange rows");
    let rollups = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM rollup_1m")
            .fetch_one(&mut pg(&db.url).await)
            .await
            .expect("count rollups")
    };
    let args = [
        "rollup",
        "refresh",
        "--from",
        "2026-01-15T10:00:30Z",
        "--to",
        "2026-01-15T10:00:31Z",
        "--json",
    ];

    let core = store.acquire().await.expect("a core holds the lock");
    let (code, stdout, stderr) = output(&mut sentinel(&args, &db.url, "nats://127.0.0.1:1"));
    assert_eq!(code, Some(EXIT_LOCK_HELD), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("refreshing nothing"), "{stderr}");
    assert_eq!(rollups().await, 0, "nothing refreshed beside a running core");
    let epoch = core.epoch();
    core.release().await.expect("release");

    let (code, stdout, stderr) = output(&mut sentinel(&args, &db.url, "nats://127.0.0.1:1"));
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(
        report["minute"]["from"], "2026-01-15T10:00:00.000000Z",
        "rounded outward: {report}"
    );
    assert_eq!(report["minute"]["to"], "2026-01-15T10:01:00.000000Z");
    assert_eq!(report["hour"]["to"], "2026-01-15T11:00:00.000000Z");
    assert_eq!(report["minute"]["buckets"], 1);
    let (count, live): (i64, i64) =
        sqlx::query_as("SELECT count, live_count FROM rollup_1m WHERE point_id = 'p'")
            .fetch_one(&mut pg(&db.url).await)
            .await
            .expect("the bucket");
    assert_eq!((count, live), (2, 1));
    assert_eq!(
        store.current_epoch().await.expect("epoch"),
        epoch + 1,
        "the command took the lock and its own epoch"
    );

    let backwards = ["rollup", "refresh", "--from", "2026-01-16", "--to", "2026-01-15"];
    let (code, _, stderr) = output(&mut sentinel(&backwards, &db.url, "nats://127.0.0.1:1"));
    assert_eq!(code, Some(1));
    assert!(stderr.contains("must be before"), "{stderr}");
    let (code, _, stderr) = output(&mut sentinel(
        &["rollup", "refresh", "--from", "yesterday", "--to", "2026-01-15"],
        &db.url,
        "nats://127.0.0.1:1",
    ));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("neither an RFC 3339 instant nor a date"),
        "{stderr}"
    );
}

/// `sentinel retention`: `--dry-run` only reads (it works beside a running core); a real run is
/// a write, so it runs only under the lock it takes itself and exits 10 naming the holder,
/// dropping nothing, while a core holds it. Each drop is a whole partition and one
/// `retention_drop` control event; horizons that break their own rule are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_only_under_the_lock_it_takes_and_a_dry_run_only_reads() {
    use sentinel_ports::Store;
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    // A day far past every horizon: its three raw partitions, its rollup_1m day and its
    // rollup_1h month, one row in it.
    sqlx::raw_sql(
        "SELECT sentinel_ensure_partitions('2000-01-01', 1); \
         INSERT INTO point_key (point_id) VALUES ('p') ON CONFLICT DO NOTHING; \
         INSERT INTO instance_key (driver_instance) VALUES ('i') ON CONFLICT DO NOTHING; \
         INSERT INTO observation_measurement (ingested_at, point_key, observed_at, value_num, \
           quality, changed, registry_version, instance_key, source_epoch, source_seq) \
         VALUES ('2000-01-01T10:00:05Z', (SELECT key FROM point_key WHERE point_id = 'p'), '2000-01-01T10:00:01Z', 1, 'live', true, 1, (SELECT key FROM instance_key WHERE driver_instance = 'i'), 1, 1)",
    )
    .execute(&mut pg(&db.url).await)
    .await
    .expect("arrange an old day");
    let rows = || async {
        sqlx::query_scalar::<_, i64>("SELECT count(*) FROM observation_measurement")
            .fetch_one(&mut pg(&db.url).await)
            .await
            .expect("count rows")
    };
    let nats = "nats://127.0.0.1:1";

    let core = store.acquire().await.expect("a core holds the lock");
    let (code, stdout, stderr) = output(&mut sentinel(
        &["retention", "--dry-run", "--json"],
        &db.url,
        nats,
    ));
    assert_eq!(code, Some(0), "a dry run reads only, beside a core: {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    let would: Vec<(String, String)> = report["would_drop"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|p| {
            (
                p["table"].as_str().unwrap_or("").to_owned(),
                p["from"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(would.len(), 5, "{report}");
    assert!(
        would.contains(&("rollup_1h".into(), "2000-01-01T00:00:00.000000Z".into())),
        "{report}"
    );
    let (code, stdout, stderr) = output(&mut sentinel(&["retention"], &db.url, nats));
    assert_eq!(code, Some(EXIT_LOCK_HELD), "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("dropping nothing"), "{stderr}");
    assert_eq!(rows().await, 1, "nothing dropped beside a running core");
    core.release().await.expect("release");

    let (code, stdout, stderr) = output(&mut sentinel(&["retention", "--json"], &db.url, nats));
    assert_eq!(code, Some(0), "stderr: {stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(report["dropped"].as_array().map(Vec::len), Some(5), "{report}");
    assert_eq!(rows().await, 0, "the old day went with its partition");
    let (events, principals): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(*) FILTER (WHERE principal = 'operator:sentinel-retention') \
         FROM control_event WHERE kind = 'retention_drop'",
    )
    .fetch_one(&mut pg(&db.url).await)
    .await
    .expect("events");
    assert_eq!((events, principals), (5, 5));
    let (code, stdout, _) = output(&mut sentinel(&["retention", "--dry-run"], &db.url, nats));
    assert_eq!(code, Some(0));
    assert_eq!(stdout.trim(), "nothing is past its horizon");

    let (code, _, stderr) = output(&mut sentinel(
        &["retention", "--dry-run", "--retention-rollup-1m-days", "5"],
        &db.url,
        nats,
    ));
    assert_eq!(code, Some(1));
    assert!(
        stderr.contains("must be at least the longest raw horizon"),
        "{stderr}"
    );
}

fn status_json(db_url: &str, nats_url: &str) -> serde_json::Value {
    let (code, stdout, stderr) = output(&mut sentinel(&["status", "--json"], db_url, nats_url));
    assert_eq!(code, Some(0), "status --json: {stderr}");
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("status --json is one JSON object ({e}): {stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_says_when_the_schema_is_not_this_binarys_and_never_migrates() {
    let nats = NatsServer::start().await;
    let db = TestDb::create().await.expect("test database");
    let supported = PgStore::supported_schema_version();

    let (code, stdout, stderr) = output(&mut sentinel(&["status"], &db.url, &nats.url()));
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stdout.contains(&format!(
            "schema: the database has no schema yet (this binary's is version {supported})\n  run `sentinel migrate`"
        )),
        "{stdout}"
    );
    assert!(
        stderr.is_empty(),
        "no library log lines beside the report: {stderr}"
    );
    let json = status_json(&db.url, &nats.url());
    assert_eq!(json["schema"]["relation"], "absent");
    assert_eq!(json["core_epoch"], serde_json::Value::Null);
    let migrated: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut pg(&db.url).await)
        .await
        .expect("regclass");
    assert!(!migrated, "status never migrates");

    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    let json = status_json(&db.url, &nats.url());
    assert_eq!(json["schema"]["relation"], "current");
    assert_eq!(json["schema"]["found"], supported);
    assert_eq!(json["core_epoch"], 0);
    assert_eq!(json["lock_holder"], serde_json::Value::Null);
    assert_eq!(json["quarantine"]["by_reason"]["wrong_instance"], 0);
    assert_eq!(json["rows"]["measurement"], 0);

    // A newer binary has migrated this database since.
    let newer = supported + 1;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, installed_on, success, checksum, execution_time) \
         VALUES ($1, 'from a newer binary', now(), true, '\\x00', 0)",
    )
    .bind(newer)
    .execute(&mut pg(&db.url).await)
    .await
    .expect("a newer migration");
    let (code, stdout, _) = output(&mut sentinel(&["status"], &db.url, &nats.url()));
    assert_eq!(code, Some(0));
    assert!(
        stdout.contains(&format!(
            "schema: the database schema is at version {newer}, newer than this binary's version {supported}"
        )),
        "{stdout}"
    );
    assert_eq!(status_json(&db.url, &nats.url())["schema"]["relation"], "newer");

    // And `sentinel run` refuses it, naming both versions, before the epoch moves.
    let (code, _, stderr) = output(&mut sentinel(
        &["run", "--registry", "registry"],
        &db.url,
        &nats.url(),
    ));
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "database schema version {newer} is newer than this binary's {supported}"
        )),
        "{stderr}"
    );
    assert_eq!(store.current_epoch().await.expect("epoch"), 0);
}
