//! The stream and the admission figures from one configuration (issue 24 item 4), with real
//! processes against a private nats-server and a private PostgreSQL database per test.
//!
//! Owns what an operator changing the capacity must be able to rely on, observed at the servers:
//! - `sentinel run` gives the stream the configured bounds and, restarted with other bounds,
//!   updates the existing stream in place with nothing lost: every message waiting in it lands
//!   exactly once;
//! - a bound below what the stream holds is refused (exit 1, naming the field, the bound and
//!   the contents) and the stream keeps every message and its old bound;
//! - any other difference in the stream is refused, naming the field;
//! - `registry check`, `registry load` and `sentinel run` read the same ingest budget (flag or
//!   environment), so a registry refused by one is refused by all, including a stored version
//!   a core starts on without a folder; `registry plan` prints the configuration it recommends.

use std::process::{Command, Stdio};
use std::time::Duration;

use async_nats::jetstream::stream;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::Store as _;
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{
    Env, assert_exactly_once, now, output_within, spawn_core_on, terminate, wait_drained, wait_exit,
    wait_ready,
};
use sentinel_tests::traffic::{self, Expected, Traffic};

const ACK_WAIT_MS: u64 = 30_000;
/// Self-points off: the exact-count oracle covers the published traffic only.
const QUIET: [&str; 2] = ["--self-points-interval-ms", "0"];

/// The stream's configured message bound and the messages it holds, from the server.
async fn stream_state(env: &Env) -> (i64, u64) {
    let mut stream = env.bus.jetstream().get_stream("OBS").await.expect("OBS");
    let info = stream.info().await.expect("stream info");
    (info.config.max_messages, info.state.messages)
}

async fn publish(env: &Env, traffic: &Traffic) {
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let items = traffic
        .messages
        .iter()
        .map(|m| (m.subject.clone(), m.msg_id.clone(), m.payload.clone()));
    let report = publisher.publish_pipelined(items, 256).await.expect("publish");
    assert_eq!(report.stored, traffic.expected.accepted());
}

fn sum(a: &Expected, b: &Expected) -> Expected {
    let mut out = a.clone();
    for (i, rows) in b.rows.iter().enumerate() {
        out.rows[i] += rows;
    }
    out.rows_bad += b.rows_bad;
    out.rows_unavailable += b.rows_unavailable;
    for (reason, n) in &b.quarantine {
        *out.quarantine.entry(reason).or_default() += n;
    }
    out.dropped_by_stream += b.dropped_by_stream;
    out
}

/// `sentinel run` over `env` with the sample registry and `args`, stderr captured.
fn spawn_run(env: &Env, args: &[&str]) -> std::process::Child {
    let mut all = QUIET.to_vec();
    all.extend_from_slice(args);
    spawn_core_on(
        env,
        &traffic::sample_registry_dir(),
        ACK_WAIT_MS,
        &all,
        ("warn", Stdio::piped()),
    )
}

/// Runs a core that must refuse to start: its exit code and stderr.
async fn refused_run(env: &Env, args: &[&str]) -> (Option<i32>, String) {
    let mut child = spawn_run(env, args);
    let status = wait_exit(&mut child, Duration::from_secs(60))
        .await
        .expect("a refused start exits");
    let mut stderr = String::new();
    use std::io::Read as _;
    child
        .stderr
        .take()
        .expect("piped")
        .read_to_string(&mut stderr)
        .expect("stderr");
    (status.code(), stderr)
}

/// The sample registry declares 15.07 obs/s at peak: a 60 s outage leaves 905 messages.
const FITS_1000: [&str; 4] = ["--outage-s", "60", "--stream-max-msgs", "1000"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_bound_updates_the_stream_in_place_and_loses_nothing() {
    let env = Env::start(ACK_WAIT_MS).await;
    assert_eq!(
        stream_state(&env).await.0,
        8_000_000,
        "the test's bus made the default stream"
    );

    // The first core shrinks the empty stream to its configured bound.
    let first = spawn_run(&env, &FITS_1000);
    wait_ready(&env.store, 1).await;
    assert_eq!(stream_state(&env).await, (1_000, 0));
    terminate(first).await;

    // While no core runs, about 600 messages wait in the stream (the traffic's publisher
    // retries inside the duplicate window are not stored).
    let waiting = traffic::generate(&traffic::sample_registry(), 600, 1, now());
    publish(&env, &waiting).await;
    let held = waiting.expected.accepted();
    assert!(held > 500, "{held}");
    assert_eq!(stream_state(&env).await, (1_000, held));

    // A bound below the contents is refused before anything changes (a 20 s outage needs 302
    // messages, so admission lets 400 through and the stream is what refuses).
    let (code, stderr) = refused_run(&env, &["--outage-s", "20", "--stream-max-msgs", "400"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "max_msgs: the configured bound 400 is below the {held} messages the stream holds; lowering it \
             would delete the oldest (let the core drain the stream first)"
        )),
        "{stderr}"
    );
    assert_eq!(
        stream_state(&env).await,
        (1_000, held),
        "nothing deleted, the bound unchanged"
    );

    // A larger bound: updated in place, and the waiting messages land exactly once.
    let second = spawn_run(&env, &["--outage-s", "60", "--stream-max-msgs", "5000"]);
    wait_drained(&env, &waiting.expected).await;
    assert_eq!(stream_state(&env).await, (5_000, 0));
    let live = traffic::generate(&traffic::sample_registry(), 600, 2, now());
    publish(&env, &live).await;
    let both = sum(&waiting.expected, &live.expected);
    wait_drained(&env, &both).await;
    terminate(second).await;
    assert_exactly_once(&env.store, &env.db.url, &both).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_other_difference_in_the_stream_is_refused_naming_the_field() {
    let env = Env::start(ACK_WAIT_MS).await;
    let mut config = env.bus.config().stream_config();
    config.max_age = Duration::from_secs(3_600);
    env.bus
        .jetstream()
        .update_stream(&stream::Config { ..config })
        .await
        .expect("an operator bounds the stream by age");
    let (code, stderr) = refused_run(&env, &[]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("max_age: expected 0ns, found 3600s"), "{stderr}");
}

fn sentinel(env: &Env, args: &[&str], vars: &[(&str, &str)]) -> (Option<i32>, String, String) {
    let mut command = Command::new(sentinel_bin());
    command
        .current_dir(workspace_root())
        .args(args)
        .env("SENTINEL_DATABASE_URL", &env.db.url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env("SENTINEL_LOG", "warn")
        .stdin(Stdio::null());
    for (key, value) in vars {
        command.env(key, value);
    }
    let out = output_within(&mut command, Duration::from_secs(60));
    (
        out.status.code(),
        String::from_utf8(out.stdout).expect("UTF-8"),
        String::from_utf8(out.stderr).expect("UTF-8"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_load_and_run_read_one_ingest_budget() {
    let env = Env::start(ACK_WAIT_MS).await;
    let budget = [("SENTINEL_INGEST_BUDGET_OBS_S", "10")];
    let refusal = "above the ingest budget of 10 obs/s";

    let (code, _, err) = sentinel(&env, &["registry", "check", "registry"], &budget);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(refusal), "check, from the environment: {err}");
    let (code, _, err) = sentinel(
        &env,
        &["registry", "check", "registry", "--ingest-budget-obs-s", "10"],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(refusal), "check, from the flag: {err}");

    let (code, _, err) = sentinel(&env, &["registry", "load", "registry"], &budget);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(refusal), "load: {err}");
    assert_eq!(
        env.store
            .load_registry(None)
            .await
            .expect("read")
            .map(|r| r.version),
        None
    );

    let (code, _, err) = sentinel(&env, &["run", "--registry", "registry"], &budget);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(refusal), "run with a folder: {err}");

    // A version stored under the default budget is refused by a core configured for less.
    let (code, out, err) = sentinel(&env, &["registry", "load", "registry"], &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("registry version 1 stored"), "{out}");
    let (code, _, err) = sentinel(&env, &["run"], &budget);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(
            "registry version 1 declares 15.1 obs/s at peak, above the configured ingest budget of 10 obs/s \
             (SENTINEL_INGEST_BUDGET_OBS_S)"
        ),
        "run on the stored version: {err}"
    );

    // The plan prints the configuration that would pass: the lines the three commands read.
    let (code, out, err) = sentinel(
        &env,
        &["registry", "plan", "registry", "--outage-s", "86400"],
        &[],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains(
            "  SENTINEL_INGEST_BUDGET_OBS_S=500\n  SENTINEL_OUTAGE_S=86400\n  SENTINEL_STREAM_MAX_MSGS=8000000\n"
        ),
        "{out}"
    );
    let (code, _, err) = sentinel(
        &env,
        &["registry", "check", "registry", "--ingest-budget-obs-s", "NaN"],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("--ingest-budget-obs-s must be a positive number of observations per second, not NaN"),
        "{err}"
    );
}
