//! The operator's command plane with real processes (issue 21 items 8 and 10, and the first
//! "must show" bullet): a real `sentinel run` over real PostgreSQL and nats-server, a driver
//! instance over the driver library (applying and answering as `driver/examples/
//! simulated_device.rs` does, its applies counted from outside), and the `sentinel` binary's
//! `command set`, `command release`, `desired --json` and `why --json`, each a process.
//!
//! - An automation-band claim (injected through the test-only path: the core's build with
//!   feature `failpoints` and `SENTINEL_TEST_AUTOMATION_PRINCIPAL=rules` makes the requests of
//!   principal `rules` automation claims; see runtime/src/failpoint.rs) sets 60; an operator's
//!   `command set … 65` overrides it; the operator's `command release` restores 60. Exactly one
//!   command per change of value: three `command_issued` ids, three applies, values 60, 65, 60.
//! - `desired --json` shows both claims, the operator's winning, and the observed value;
//!   `why --json` gives the chain of each command back to its claim and principal.
//! - Each refusal, with its exact message: a value out of range, a point that is not writable,
//!   a release with no claim (exit 12), an unknown command id for `why` (exit 1).
//! - The driver's hello is an `availability` event about no point, keyed by the instance.
//!
//! (A driver that is offline gets the pending value when it returns: `tests/command_outbox.rs`.)

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::driver;
use sentinel_tests::harness::{Env, pg, terminate, wait_ready};
use tokio::task::JoinHandle;

const HOST: &str = "plant-a";
/// The instance of the sample registry's writable `boiler1.setpoint` (range 20 to 90 degC).
const INSTANCE: &str = "modbus-boiler";
const POINT: &str = "boiler1.setpoint";

/// `sentinel run` over the sample registry, with the test-only automation principal `rules`.
fn spawn_core_with_rules(env: &Env) -> Child {
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
        .env("SENTINEL_TEST_AUTOMATION_PRINCIPAL", "rules")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn sentinel run")
}

/// One `sentinel` CLI run: (exit code, stdout, stderr).
async fn sentinel(env: &Env, args: &[&str]) -> (i32, String, String) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let (nats, db) = (env.nats.url().to_owned(), env.db.url.clone());
    tokio::task::spawn_blocking(move || {
        let out = Command::new(sentinel_bin())
            .current_dir(workspace_root())
            .args(&args)
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

/// `command set`/`release` that must be accepted: the command id from its JSON answer.
async fn accepted(env: &Env, args: &[&str]) -> String {
    let (code, out, err) = sentinel(env, args).await;
    assert_eq!(code, 0, "{args:?}: {out} {err}");
    let answer: serde_json::Value = serde_json::from_str(out.trim()).expect("a JSON answer");
    assert_eq!(answer["outcome"], "accepted", "{answer}");
    answer["command_id"].as_str().expect("an id").to_owned()
}

/// The test's driver instance, recording every command it applies (id, value) in `applies`.
async fn start_driver(
    env: &Env,
    state_file: &Path,
    applies: Arc<Mutex<Vec<(String, f64)>>>,
) -> JoinHandle<()> {
    driver::start_driver(&env.nats.url(), HOST, INSTANCE, state_file, move |command| {
        let value = command.value.as_f64().expect("a number");
        applies
            .lock()
            .expect("lock")
            .push((command.command_id.clone(), value));
    })
    .await
}

fn state_file() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sentinel-command-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("driver.state");
    let _ = std::fs::remove_file(&path);
    path
}

/// `(kind, command_id, principal)` of every command and claim event, in log order.
async fn command_events(url: &str) -> Vec<(String, String, String)> {
    let mut conn = pg(url).await;
    sqlx::query_as(
        "SELECT kind, payload->>'command_id', principal FROM control_event \
         WHERE kind IN ('claim_set', 'claim_released', 'command_issued', 'command_result', 'command_refused') \
         ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("control events")
}

async fn wait_for_results(url: &str, count: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let events = command_events(url).await;
        if events.iter().filter(|e| e.0 == "command_result").count() >= count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} answers: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_overrides_automation_and_its_release_restores_it_one_command_per_change() {
    let env = Env::start(30_000).await;
    let applies: Arc<Mutex<Vec<(String, f64)>>> = Arc::default();
    let core = spawn_core_with_rules(&env);
    wait_ready(&env.store, 1).await;
    let driver = start_driver(&env, &state_file(), applies.clone()).await;

    // The rules engine's stand-in: an automation claim of 60.
    let auto = accepted(
        &env,
        &["command", "set", POINT, "60", "--principal", "rules", "--json"],
    )
    .await;
    wait_for_results(&env.db.url, 1).await;
    // The operator overrides it for 15 minutes.
    let set = accepted(
        &env,
        &[
            "command",
            "set",
            POINT,
            "65",
            "--for",
            "15m",
            "--principal",
            "ana",
            "--json",
        ],
    )
    .await;
    wait_for_results(&env.db.url, 2).await;

    let (code, out, err) = sentinel(&env, &["desired", POINT, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let view: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(view["point_id"], POINT);
    assert_eq!(view["desired"], serde_json::json!(65.0));
    assert_eq!(
        (&view["winner"]["holder"], &view["winner"]["band"]),
        (&serde_json::json!("ana"), &serde_json::json!("operator"))
    );
    let claims: Vec<(String, String, f64)> = view["claims"]
        .as_array()
        .expect("claims")
        .iter()
        .map(|c| {
            (
                c["holder"].as_str().expect("holder").to_owned(),
                c["band"].as_str().expect("band").to_owned(),
                c["value"].as_f64().expect("value"),
            )
        })
        .collect();
    assert_eq!(
        claims,
        [
            ("rules".to_owned(), "automation".to_owned(), 60.0),
            ("ana".to_owned(), "operator".to_owned(), 65.0)
        ],
        "every open claim"
    );
    assert_eq!(view["verification"], serde_json::Value::Null, "none yet");

    // The operator lets go: back to the automation value.
    let release = accepted(
        &env,
        &["command", "release", POINT, "--principal", "ana", "--json"],
    )
    .await;
    wait_for_results(&env.db.url, 3).await;
    // Nothing more goes out: give a stray fourth command time to show.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let events = command_events(&env.db.url).await;
    let issued: Vec<&str> = events
        .iter()
        .filter(|e| e.0 == "command_issued")
        .map(|e| e.1.as_str())
        .collect();
    assert_eq!(
        issued,
        [auto.as_str(), set.as_str(), release.as_str()],
        "one command per change of value"
    );
    assert_eq!(
        *applies.lock().expect("lock"),
        [(auto.clone(), 60.0), (set.clone(), 65.0), (release.clone(), 60.0)],
        "each applied once, in order"
    );

    // The chain behind the operator's command and behind the release's.
    let (code, out, err) = sentinel(&env, &["why", &set, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let why: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
    assert_eq!(why["principal"], "ana");
    assert_eq!(why["point_id"], POINT);
    let kinds: Vec<&str> = why["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| e["kind"].as_str().expect("kind"))
        .collect();
    assert_eq!(kinds, ["claim_set", "command_issued", "command_result"]);
    assert_eq!(why["events"][0]["payload"]["band"], "operator");
    assert_eq!(why["events"][2]["payload"]["outcome"], "applied");
    let (code, out, _) = sentinel(&env, &["why", &release, "--json"]).await;
    assert_eq!(code, 0);
    let why: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON");
    let chain: Vec<(&str, &str)> = why["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().expect("kind"),
                e["principal"].as_str().expect("principal"),
            )
        })
        .collect();
    assert_eq!(
        chain,
        [
            ("claim_released", "ana"),
            ("command_issued", "rules"),
            ("command_result", "driver-plant-a")
        ],
        "released by ana; the command speaks for the automation claim that wins again"
    );

    // The driver's hello is on the record as its instance's availability, about no point.
    let mut conn = pg(&env.db.url).await;
    let availability: Vec<(Option<String>, Option<String>, String, String)> = sqlx::query_as(
        "SELECT point_id, subject_key, payload->>'from', payload->>'to' FROM control_event \
         WHERE kind = 'availability' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("availability events");
    assert_eq!(
        availability.first(),
        Some(&(
            None,
            Some("plant-a.modbus-boiler".to_owned()),
            "connecting".to_owned(),
            "connected".to_owned()
        )),
        "{availability:?}"
    );

    terminate(core).await;
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_refusal_names_what_is_wrong() {
    let env = Env::start(30_000).await;
    let core = spawn_core_with_rules(&env);
    wait_ready(&env.store, 1).await;

    let refused = |args: &'static [&'static str], reason: &'static str| {
        let env = &env;
        async move {
            let (code, out, err) = sentinel(env, args).await;
            assert_eq!(code, 12, "{args:?}: {out} {err}");
            let answer: serde_json::Value = serde_json::from_str(out.trim()).expect("JSON answer");
            assert_eq!(answer["outcome"], "refused");
            assert_eq!(answer["reason"], reason, "{args:?}");
            let id = answer["command_id"].as_str().expect("id");
            assert_eq!(
                err.trim(),
                format!("sentinel: the core refused {id}: {reason}"),
                "{args:?}"
            );
        }
    };
    refused(
        &["command", "set", POINT, "1000", "--principal", "ana", "--json"],
        "the value 1000 degC is outside the point's range 20 to 90 degC",
    )
    .await;
    refused(
        &[
            "command",
            "set",
            "boiler1.flow_temp",
            "60",
            "--principal",
            "ana",
            "--json",
        ],
        "point \"boiler1.flow_temp\" is not writable",
    )
    .await;
    refused(
        &["command", "release", POINT, "--principal", "bob", "--json"],
        "\"bob\" holds no claim on point \"boiler1.setpoint\"",
    )
    .await;
    let refusals: Vec<(String, String, String)> = command_events(&env.db.url).await;
    assert_eq!(
        refusals.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(),
        ["command_refused"; 3],
        "each on the record, nothing sent"
    );

    let (code, _, err) = sentinel(&env, &["why", "no-such-id"]).await;
    assert_eq!(
        (code, err.trim()),
        (1, "sentinel: no control event names command id no-such-id")
    );
    let (code, _, err) = sentinel(&env, &["desired", "boiler1.flow_temp"]).await;
    assert_eq!(
        (code, err.trim()),
        (
            1,
            "sentinel: point boiler1.flow_temp has no desired value (not writable, or never claimed)"
        )
    );
    terminate(core).await;
}
