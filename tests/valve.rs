//! The valve with real processes (issue 21 item 7): a real `sentinel run` over real PostgreSQL
//! and nats-server, a driver instance over the driver library (its intake applying assignments
//! as `driver/examples/simulated_device.rs` does), and the `sentinel` binary's `registry load`.
//!
//! - The core starts on a registry whose `boiler1.flow_temp` is polled every 30 s: the driver
//!   gets that assignment (an `assignment` event, cause `start`) and acknowledges it.
//! - `registry load` of a version that polls it every 15 s: the loading command announces the
//!   version, the running core applies it live, records exactly one `assignment` event under
//!   the new version (cause `reload`, naming the change) and pushes it; the same driver intake
//!   (same source epoch: it never restarted) applies 15 s and acknowledges.
//! - `registry load` of a version that also changes the point's `freshness_s`: the core reports
//!   "restart needed" naming the point and the field, records nothing, pushes nothing.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sentinel_core::wire::CommandOutcome;
use sentinel_driver::EpochFloor;
use sentinel_driver::commands::{Assigned, CommandIntake, Received};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{Env, pg, spawn_core_on, terminate, wait_ready};
use tokio::sync::watch;

const HOST: &str = "plant-a";
const INSTANCE: &str = "modbus-boiler";
const POINT: &str = "boiler1.flow_temp";

/// The sample registry (without derived points) with `POINT` polled every `poll_s` seconds and
/// fresh for `freshness_s`, in its own folder `name`.
fn registry_with(name: &str, poll_s: f64, freshness_s: u32) -> PathBuf {
    let source = sentinel_tests::traffic::sample_registry_dir();
    let target = std::env::temp_dir().join(format!("sentinel-valve-{}-{name}", std::process::id()));
    copy_dir(&source, &target);
    let host_file = target.join("hosts/plant-a.toml");
    let text = std::fs::read_to_string(&host_file).expect("plant-a.toml");
    let marker = format!("id = \"{POINT}\"\n");
    let at = text.find(&marker).expect("the point in plant-a.toml") + marker.len();
    let (head, tail) = text.split_at(at);
    let tail = tail.replacen("freshness_s = 60\n", &format!("freshness_s = {freshness_s}\n"), 1);
    std::fs::write(&host_file, format!("{head}poll_interval_s = {poll_s:?}\n{tail}")).expect("write");
    target
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).expect("create");
    for entry in std::fs::read_dir(from).expect("read") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// `sentinel registry load DIR`, announcing to the running core: (exit code, stdout, stderr).
async fn registry_load(env: &Env, dir: &Path) -> (i32, String, String) {
    let (nats, db, dir) = (env.nats.url().to_owned(), env.db.url.clone(), dir.to_owned());
    tokio::task::spawn_blocking(move || {
        let out = Command::new(sentinel_bin())
            .current_dir(workspace_root())
            .args(["registry", "load", dir.to_str().expect("UTF-8")])
            .env("SENTINEL_NATS_URL", nats)
            .env("SENTINEL_DATABASE_URL", db)
            .env_remove("SENTINEL_OPERATOR")
            .output()
            .expect("run sentinel");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .expect("the CLI ran")
}

/// The core's stderr, line by line, kept for the test to read.
fn capture_stderr(core: &mut Child) -> Arc<Mutex<Vec<String>>> {
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let stderr = core.stderr.take().expect("piped stderr");
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            eprintln!("core: {line}");
            sink.lock().expect("lock").push(line);
        }
    });
    lines
}

/// What the test's driver instance saw: each assignment's (registry version, outcome), and
/// the source epoch it runs under (one start, never restarted).
#[derive(Default)]
struct Seen {
    assignments: Vec<(i32, CommandOutcome)>,
}

/// One driver instance on the library's intake; its poll loop's view is the returned watch.
async fn start_driver(
    env: &Env,
    seen: Arc<Mutex<Seen>>,
) -> (watch::Receiver<Assigned>, tokio::task::JoinHandle<()>) {
    let client = async_nats::connect(env.nats.url())
        .await
        .expect("driver connects");
    let mut intake = CommandIntake::subscribe(client, HOST, INSTANCE, 1, EpochFloor::default())
        .await
        .expect("subscribe");
    let assigned = intake.assignment();
    let task = tokio::spawn(async move {
        while let Some(received) = intake.next().await {
            if let Ok(Received::Assignment { assignment, ack }) = received {
                seen.lock()
                    .expect("lock")
                    .assignments
                    .push((assignment.registry_version, ack.outcome));
            }
        }
    });
    (assigned, task)
}

/// `(registry_version, subject_key, cause, changes)` of every `assignment` event, in log order.
async fn assignment_events(url: &str) -> Vec<(i32, Option<String>, String, serde_json::Value)> {
    let mut conn = pg(url).await;
    sqlx::query_as::<_, (i32, Option<String>, String, serde_json::Value)>(
        "SELECT registry_version, subject_key, payload->>'cause', payload->'changes' FROM control_event \
         WHERE kind = 'assignment' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("assignment events")
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_poll_interval_is_pushed_live_and_anything_else_needs_a_restart() {
    let env = Env::start(30_000).await;
    let v1 = registry_with("v1", 30.0, 60);
    let seen: Arc<Mutex<Seen>> = Arc::default();
    // The driver first, so the start assignment finds it subscribed.
    let (mut assigned, driver) = start_driver(&env, seen.clone()).await;
    let mut core = spawn_core_on(
        &env,
        &v1,
        30_000,
        &["--self-points-interval-ms", "0"],
        ("warn,sentinel_runtime=info", Stdio::piped()),
    );
    let log = capture_stderr(&mut core);
    wait_ready(&env.store, 1).await;

    // At start: the assignment of version 1, applied and acknowledged.
    wait_until("the start assignment", || {
        seen.lock()
            .expect("lock")
            .assignments
            .contains(&(1, CommandOutcome::Applied))
    })
    .await;
    assert_eq!(assigned.borrow_and_update().poll_interval_s(POINT, 1.0), 30.0);
    let events = assignment_events(&env.db.url).await;
    assert_eq!(
        events,
        vec![(
            1,
            Some(format!("{HOST}.{INSTANCE}")),
            "start".to_owned(),
            serde_json::json!([])
        )]
    );

    // Version 2 polls every 15 s: announced, applied live, pushed, acknowledged.
    let (code, out, err) = registry_load(&env, &registry_with("v2", 15.0, 60)).await;
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("registry version 2 stored"), "{out}");
    assert!(
        out.contains("registry version 2 announced to a running core"),
        "{out}"
    );
    wait_until("the version 2 assignment", || {
        seen.lock()
            .expect("lock")
            .assignments
            .contains(&(2, CommandOutcome::Applied))
    })
    .await;
    assert_eq!(
        assigned.borrow_and_update().poll_interval_s(POINT, 1.0),
        15.0,
        "the same intake, never restarted, polls at the new interval"
    );
    let events = assignment_events(&env.db.url).await;
    assert_eq!(events.len(), 2, "exactly one more assignment event: {events:?}");
    assert_eq!(
        events[1],
        (
            2,
            Some(format!("{HOST}.{INSTANCE}")),
            "reload".to_owned(),
            serde_json::json!([{ "point_id": POINT, "poll_interval_s": [30.0, 15.0] }])
        )
    );

    // Version 3 also changes the freshness: a restart is needed; nothing is applied or pushed.
    let (code, out, err) = registry_load(&env, &registry_with("v3", 15.0, 50)).await;
    assert_eq!(code, 0, "{out} {err}");
    assert!(out.contains("registry version 3 stored"), "{out}");
    wait_until("the restart-needed report", || {
        log.lock().expect("lock").iter().any(|l| {
            l.contains("restart needed")
                && l.contains(POINT)
                && l.contains("freshness_s changed; only poll_interval_s and the driver instance change without a restart")
        })
    })
    .await;
    // Give a stray push time to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        assignment_events(&env.db.url).await.len(),
        2,
        "nothing recorded for version 3"
    );
    assert!(
        !seen
            .lock()
            .expect("lock")
            .assignments
            .iter()
            .any(|(v, _)| *v == 3),
        "nothing pushed for version 3"
    );
    assert_eq!(assigned.borrow().registry_version, 2);

    terminate(core).await;
    driver.abort();
}
