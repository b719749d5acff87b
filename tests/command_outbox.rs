//! The command outbox, with real processes (issue 21 item 3): a real `sentinel run` that dies
//! at a named, test-only failpoint (runtime/src/failpoint.rs, aborting like a SIGKILL) between
//! two steps of a command's life, a real successor, real PostgreSQL and nats-server, and a
//! driver instance (the library's command intake, persisting its state file as the example
//! driver does) whose applies the test counts from outside.
//!
//! - Between the commit of `command_issued` and its publish: the successor finds the command
//!   unanswered and still the desired value, and issues it again with the same id (written
//!   under its own epoch, then sent); the driver applies it once and the successor writes its
//!   answer.
//! - A command for a driver instance that is offline goes out when the instance says hello.
//! - After the driver applied and answered, before the core wrote the answer, and with the
//!   driver restarted in between: the successor sends the command again; the restarted driver
//!   finds its id in its state file and answers `applied` without applying it twice.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sentinel_core::wire::command_request_subject;
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::driver;
use sentinel_tests::harness::{Env, command_request, pg, spawn_core, terminate, wait_exit, wait_ready};
use tokio::task::JoinHandle;

const HOST: &str = "plant-a";
/// The instance of the sample registry's writable `boiler1.setpoint`.
const INSTANCE: &str = "modbus-boiler";
const POINT: &str = "boiler1.setpoint";

/// `sentinel run` as [`spawn_core`] starts it, with the failpoint `failpoint` armed.
fn spawn_core_failing_at(env: &Env, failpoint: &str) -> Child {
    Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args([
            "run",
            "--registry",
            sentinel_tests::traffic::sample_registry_dir()
                .to_str()
                .expect("a UTF-8 path"),
            "--ack-wait-ms",
            "30000",
            "--self-points-interval-ms",
            "0",
        ])
        .env("SENTINEL_DATABASE_URL", &env.roles.writer_url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env("SENTINEL_LOG", "warn")
        .env("SENTINEL_FAILPOINT", failpoint)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn sentinel run")
}

/// The test's driver instance, counting every command it applies in `applies`.
async fn start_driver(env: &Env, state_file: &Path, applies: Arc<Mutex<Vec<String>>>) -> JoinHandle<()> {
    driver::start_driver(&env.nats.url(), HOST, INSTANCE, state_file, move |command| {
        applies.lock().expect("lock").push(command.command_id.clone())
    })
    .await
}

fn request(id: &str, value: f64) -> Vec<u8> {
    command_request(id, POINT, value)
}

/// `(kind, core_epoch, command_id, outcome)` of every command event, in log order.
async fn command_events(url: &str) -> Vec<(String, i32, String, Option<String>)> {
    let mut conn = pg(url).await;
    sqlx::query_as(
        "SELECT kind, core_epoch, payload->>'command_id', payload->>'outcome' FROM control_event \
         WHERE kind IN ('command_issued', 'command_result') ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("control events")
}

async fn wait_for_events(url: &str, count: usize) -> Vec<(String, i32, String, Option<String>)> {
    wait_for_events_within(url, count, Duration::from_secs(30)).await
}

async fn wait_for_events_within(
    url: &str,
    count: usize,
    within: Duration,
) -> Vec<(String, i32, String, Option<String>)> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let events = command_events(url).await;
        if events.len() >= count {
            return events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} command events: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The core dies at `failpoint`: aborted, not an orderly exit.
async fn dies_at_the_failpoint(core: &mut Child) {
    let status = wait_exit(core, Duration::from_secs(30))
        .await
        .expect("the core dies at its failpoint");
    assert!(!status.success(), "aborted, not stopped: {status:?}");
}

fn state_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sentinel-outbox-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("driver.state");
    let _ = std::fs::remove_file(&path);
    path
}

fn issued(epoch: i32, id: &str) -> (String, i32, String, Option<String>) {
    ("command_issued".to_owned(), epoch, id.to_owned(), None)
}

fn applied(epoch: i32, id: &str) -> (String, i32, String, Option<String>) {
    (
        "command_result".to_owned(),
        epoch,
        id.to_owned(),
        Some("applied".to_owned()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_that_dies_between_the_commit_and_the_publish_publishes_after_restart() {
    let env = Env::start(30_000).await;
    let applies: Arc<Mutex<Vec<String>>> = Arc::default();
    let state = state_file("commit");
    let driver = start_driver(&env, &state, applies.clone()).await;
    let operator = async_nats::connect(env.nats.url())
        .await
        .expect("operator connects");

    let mut first = spawn_core_failing_at(&env, "command_committed_not_sent");
    wait_ready(&env.store, 1).await;
    operator
        .publish(command_request_subject("test"), request("r-1", 65.0).into())
        .await
        .expect("request");
    dies_at_the_failpoint(&mut first).await;
    assert_eq!(
        command_events(&env.db.url).await,
        [issued(1, "r-1")],
        "committed, never sent"
    );
    assert!(applies.lock().expect("lock").is_empty());

    let second = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    wait_ready(&env.store, 2).await;
    assert_eq!(
        wait_for_events(&env.db.url, 3).await,
        [issued(1, "r-1"), issued(2, "r-1"), applied(2, "r-1")],
        "issued again by the successor, with its id, sent and answered"
    );
    terminate(second).await;
    driver.abort();
    assert_eq!(*applies.lock().expect("lock"), ["r-1"], "applied exactly once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_applied_but_not_recorded_is_not_applied_again_by_a_restarted_driver() {
    let env = Env::start(30_000).await;
    let applies: Arc<Mutex<Vec<String>>> = Arc::default();
    let state = state_file("answer");
    let driver = start_driver(&env, &state, applies.clone()).await;
    let operator = async_nats::connect(env.nats.url())
        .await
        .expect("operator connects");

    let mut first = spawn_core_failing_at(&env, "command_answer_not_recorded");
    wait_ready(&env.store, 1).await;
    operator
        .publish(command_request_subject("test"), request("r-1", 65.0).into())
        .await
        .expect("request");
    dies_at_the_failpoint(&mut first).await;
    assert_eq!(
        command_events(&env.db.url).await,
        [issued(1, "r-1")],
        "applied and answered, the answer never written"
    );
    assert_eq!(*applies.lock().expect("lock"), ["r-1"]);

    // The driver restarts while no core runs, from its state file.
    driver.abort();
    let _ = driver.await;
    let driver = start_driver(&env, &state, applies.clone()).await;

    let second = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    wait_ready(&env.store, 2).await;
    assert_eq!(
        wait_for_events(&env.db.url, 3).await,
        [issued(1, "r-1"), issued(2, "r-1"), applied(2, "r-1")],
        "issued again, answered applied from the driver's record"
    );
    terminate(second).await;
    driver.abort();
    assert_eq!(
        *applies.lock().expect("lock"),
        ["r-1"],
        "applied exactly once across the driver's restart"
    );
}

/// A command for a driver instance that is offline waits for it: the core sends it again when
/// the instance says hello, and it is applied once (issue 21 item 4).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_that_was_offline_gets_the_command_when_it_says_hello() {
    let env = Env::start(30_000).await;
    let applies: Arc<Mutex<Vec<String>>> = Arc::default();
    let operator = async_nats::connect(env.nats.url())
        .await
        .expect("operator connects");
    let core = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    wait_ready(&env.store, 1).await;
    operator
        .publish(command_request_subject("test"), request("r-1", 65.0).into())
        .await
        .expect("request");
    // Written and sent to nobody: the instance is not running.
    wait_for_events(&env.db.url, 1).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(command_events(&env.db.url).await, [issued(1, "r-1")]);

    let state = state_file("offline");
    let driver = start_driver(&env, &state, applies.clone()).await;
    // Well before the answer's wait runs out (10 s, which would send it again too): the hello
    // is what sent it.
    assert_eq!(
        wait_for_events_within(&env.db.url, 2, Duration::from_secs(5)).await,
        [issued(1, "r-1"), applied(1, "r-1")],
        "sent again on its hello, applied and answered"
    );
    terminate(core).await;
    driver.abort();
    assert_eq!(*applies.lock().expect("lock"), ["r-1"]);
}
