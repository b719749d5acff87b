//! Single writer, with real processes (core runtime spec, "Single writer is a requirement",
//! "Acquisition order at startup", "Losing the lock while running", "Fencing the bus", exit
//! criteria; DESIGN.md §5 invariants 6 and 7): the `sentinel` binary against a private
//! nats-server and a private PostgreSQL database per test.
//!
//! Owns the exit criteria that need a process and a server to observe (a second core that
//! touches neither the bus nor the schema is `tests/lock_first.rs`):
//! - losing the lock session mid-stream stops the core within a few lock-check intervals, and
//!   the next core finishes the stream with exact counts and no transition published twice;
//! - the epoch increments only on acquisition, and each acquisition's cold start is recorded;
//! - `sentinel status` shows the epoch, the lock holder and the cold-start step durations.

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sentinel_ports::{ColdStart, lock_session_name};
use sentinel_store_pg::{LOCK_KEY, PgStore};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{
    self, DRAIN_TIMEOUT_S, Env, Transitions, assert_exact_counts, committed, now, pg, publish_paced,
    terminate, wait_drained, wait_exit, wait_ready,
};
use sentinel_tests::traffic;

/// How often the cores under test check their lock; lock loss must be noticed within a few.
const LOCK_CHECK_INTERVAL_MS: u64 = 200;
/// A core that loses its lock exits within this many check intervals (plus process teardown).
const LOCK_LOSS_EXIT_INTERVALS_MAX: u64 = 10;
/// Exit codes of `sentinel run` (io/src/main.rs, runtime::RunOutcome::LOCK_LOST).
const EXIT_LOCK_HELD: i32 = 10;
const EXIT_LOCK_LOST: i32 = 5;
/// "At once": the second core connects to PostgreSQL, finds the lock taken and exits.
const SECOND_CORE_EXIT_S: u64 = 10;
/// Pacing of the lock-loss test's traffic: 8,000 messages over about four seconds.
/// The startup steps `startup::start` records, in order: the core runtime spec's acquisition
/// order, then the ingest spec's restart steps 4–8.
const STARTUP_STEPS: [&str; 11] = [
    "lock_and_epoch",
    "registry",
    "restore_projection",
    "connect_bus",
    "bind_consumer",
    "replay_control_events",
    "restore_desired",
    "rehydrate_derived_windows",
    "rehydrate_timers",
    "start_drivers",
    "warmup",
];

/// `sentinel run` checking its lock every [`LOCK_CHECK_INTERVAL_MS`].
fn spawn_core(env: &Env, ack_wait_ms: u64) -> Child {
    harness::spawn_core(
        env,
        ack_wait_ms,
        // The exact-count oracle covers the traffic, not the core's own self-points.
        &[
            "--lock-check-interval-ms",
            &LOCK_CHECK_INTERVAL_MS.to_string(),
            "--self-points-interval-ms",
            "0",
        ],
    )
}

/// The epochs of the recorded cold starts, oldest first.
async fn recorded_epochs(store: &PgStore) -> Vec<u32> {
    store
        .cold_starts()
        .await
        .expect("cold starts")
        .iter()
        .map(|s| s.epoch)
        .collect()
}

/// The lock session's pid straight from pg_locks (this database only: advisory locks are per
/// database and other tests run the same key), independent of the adapter's own query.
async fn lock_session_pid(url: &str) -> Option<i32> {
    let mut conn = pg(url).await;
    sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
         AND classid::bigint = ($1::bigint >> 32) AND objid::bigint = ($1::bigint & 4294967295)",
    )
    .bind(LOCK_KEY)
    .fetch_optional(&mut conn)
    .await
    .expect("pg_locks")
}

/// Exit criterion: "Drop the advisory-lock connection and assert the core stops publishing
/// commands, stops consuming, and exits non-zero, with any uncommitted batch redelivered on the
/// next start rather than half-applied."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_lock_mid_stream_exits_and_the_next_core_finishes_exactly() {
    let bin = sentinel_bin();
    assert!(bin.exists(), "{} was built", bin.display());
    let ack_wait_ms = 2_000;
    let env = Env::start(ack_wait_ms).await;
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let traffic = Arc::new(traffic::generate(&traffic::sample_registry(), 8_000, 1, now()));

    let mut first = spawn_core(&env, ack_wait_ms);
    wait_ready(&env.store, 1).await;
    let publisher = tokio::spawn(publish_paced(env.nats.url(), traffic.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    while committed(&env.store).await < traffic.expected.accepted() / 4 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first core made no progress"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let pid = lock_session_pid(&env.db.url)
        .await
        .expect("the first core holds the lock");
    let holder = env.store.lock_holder().await.expect("lock holder").expect("held");
    assert_eq!(holder.backend_pid, pid);
    let mut admin = pg(&env.db.url).await;
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(pid)
        .fetch_one(&mut admin)
        .await
        .expect("pg_terminate_backend");
    assert!(terminated, "the lock session was terminated");
    let killed_at = tokio::time::Instant::now();

    let bound = Duration::from_millis(LOCK_CHECK_INTERVAL_MS * LOCK_LOSS_EXIT_INTERVALS_MAX);
    let status = wait_exit(&mut first, bound)
        .await
        .unwrap_or_else(|| panic!("the core did not exit within {bound:?} of losing its lock"));
    let exited_after = killed_at.elapsed();
    assert_eq!(status.code(), Some(EXIT_LOCK_LOST), "lock lost: exit code 5");
    let at_exit = committed(&env.store).await;
    assert!(
        at_exit < traffic.expected.accepted(),
        "the lock was lost mid-stream (committed {at_exit} of {})",
        traffic.expected.accepted()
    );

    // Stopped publishing: nothing more arrives from epoch 1 once the process is gone.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let published_by_first = transitions.of_epoch(1);
    assert!(published_by_first > 0, "the first core published transitions");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(transitions.of_epoch(1), published_by_first);
    // Losing the lock is not an acquisition.
    assert_eq!(env.store.current_epoch().await.expect("epoch"), 1);

    let stored = publisher.await.expect("publisher task");
    assert_eq!(
        stored,
        traffic.expected.accepted(),
        "the stream accepted every message"
    );
    let second = spawn_core(&env, ack_wait_ms);
    let start = wait_ready(&env.store, 2).await;
    assert_eq!(start.epoch, 2);
    wait_drained(&env, &traffic.expected).await;
    assert_exact_counts(&env, &traffic.expected).await;
    terminate(second).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    transitions.assert_at_most_once();
    assert_eq!(transitions.of_epoch(1), published_by_first);
    assert!(transitions.of_epoch(2) > 0, "the second core published the rest");
    eprintln!("lock-losing core exited after {exited_after:?}");
}

async fn status_output(env: &Env) -> String {
    let output = tokio::process::Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .arg("status")
        .env("SENTINEL_DATABASE_URL", &env.db.url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env("SENTINEL_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run sentinel status");
    assert!(output.status.success(), "sentinel status exits 0");
    String::from_utf8(output.stdout).expect("UTF-8 status")
}

fn assert_recorded(start: &ColdStart, epoch: u32, pid: i32) {
    assert_eq!(start.epoch, epoch);
    assert_eq!(start.backend_pid, i64::from(pid), "recorded by the lock session");
    assert_eq!(start.application_name, lock_session_name(epoch));
    let ready_at = start.ready_at.expect("ready");
    assert!(ready_at >= start.started_at);
    let steps: Vec<&str> = start.steps.iter().map(|s| s.step.as_str()).collect();
    assert_eq!(steps, STARTUP_STEPS, "every startup step, in order");
}

/// Exit criterion: "The epoch never goes backwards, increments only on lock acquisition", and
/// the cold-start duration per step is recorded; `sentinel status` shows it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_epoch_moves_only_on_acquisition_and_status_shows_the_holder_and_cold_start() {
    let bin = sentinel_bin();
    assert!(bin.exists(), "{} was built", bin.display());
    let env = Env::start(30_000).await;
    assert_eq!(env.store.current_epoch().await.expect("epoch"), 0);
    assert!(env.store.cold_starts().await.expect("cold starts").is_empty());

    let first = spawn_core(&env, 30_000);
    let start = wait_ready(&env.store, 1).await;
    let pid = lock_session_pid(&env.db.url).await.expect("held");
    assert_recorded(&start, 1, pid);

    let status = status_output(&env).await;
    let expect_line = |needle: String| {
        assert!(status.contains(&needle), "status shows {needle:?}:\n{status}");
    };
    expect_line("core epoch: 1\n".to_owned());
    expect_line("schema: the database schema is at version ".to_owned());
    expect_line(format!(
        "lock holder: pid {pid}, application_name {:?}, epoch 1\n",
        lock_session_name(1)
    ));
    expect_line("consumer lag: pending ".to_owned());
    expect_line("  wrong_instance: 0\n".to_owned());
    expect_line("rows in observation_measurement: 0\n".to_owned());
    expect_line(format!(
        "last cold start: epoch 1, started_at {}",
        start.started_at.to_rfc3339()
    ));
    for step in &start.steps {
        expect_line(format!("  {}: {} us\n", step.step, step.duration_us));
    }

    // A start that finds the lock taken moves nothing.
    let mut refused = spawn_core(&env, 30_000);
    let exit = wait_exit(&mut refused, Duration::from_secs(SECOND_CORE_EXIT_S))
        .await
        .expect("refused at once");
    assert_eq!(exit.code(), Some(EXIT_LOCK_HELD));
    assert_eq!(env.store.current_epoch().await.expect("epoch"), 1);
    assert_eq!(env.store.cold_starts().await.expect("cold starts").len(), 1);

    terminate(first).await;
    // The server frees the lock when it sees the session's socket close, just after the exit.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while lock_session_pid(&env.db.url).await.is_some() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "an orderly stop frees the lock"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(status_output(&env).await.contains("lock holder: none\n"));
    // Stopping is not an acquisition either.
    assert_eq!(env.store.current_epoch().await.expect("epoch"), 1);

    let next = spawn_core(&env, 30_000);
    let start = wait_ready(&env.store, 2).await;
    let pid = lock_session_pid(&env.db.url).await.expect("held");
    assert_recorded(&start, 2, pid);
    assert_eq!(env.store.current_epoch().await.expect("epoch"), 2);
    let epochs = recorded_epochs(&env.store).await;
    assert_eq!(epochs, vec![1, 2], "one recorded cold start per acquisition");
    let status = status_output(&env).await;
    assert!(status.contains("core epoch: 2\n"), "{status}");
    assert!(
        status.contains(&format!("application_name {:?}, epoch 2", lock_session_name(2))),
        "{status}"
    );
    terminate(next).await;
}
