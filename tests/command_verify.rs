//! Verification and restart of the command plane, with real processes (issue 21 items 5 and
//! 6): a real `sentinel run` over real PostgreSQL and nats-server, and a driver instance built
//! on the driver library (its command intake and publisher, as `driver/examples/
//! simulated_device.rs` uses them) that publishes `boiler1.setpoint` readings and applies the
//! commands it is sent — following them (it then reports the commanded value) or not (it
//! answers `applied` and keeps reporting what it did).
//!
//! - A driver that follows gets `command_verified`; one that does not gets `command_diverged`
//!   after `verify_s`, and the point's convergence self-point says so.
//! - An operator claim outlives a restart: after it, another operator's override and release
//!   goes back to the restored claim's value (not the relinquish default), and the restored
//!   claim's expiry still releases it, written by the successor.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sentinel_core::CommandRequest;
use sentinel_core::wire::{EnvelopeOut, command_request_subject, obs_subject};
use sentinel_driver::commands::CommandIntake;
use sentinel_driver::{EpochFloor, ObservationPublisher, PublisherConfig};
use sentinel_tests::harness::{Env, now, pg, spawn_core_on, terminate, wait_ready};
use tokio::task::JoinHandle;

const HOST: &str = "plant-a";
const INSTANCE: &str = "modbus-boiler";
const POINT: &str = "boiler1.setpoint";
const CONVERGENCE: &str = "sentinel.point.boiler1.setpoint.convergence";
/// The test registry's `verify_s` for the point (the sample registry's is 300).
const VERIFY_S: u64 = 6;

/// The sample registry (without derived points) with `boiler1.setpoint`'s `verify_s` cut to
/// [`VERIFY_S`], in a scratch folder of its own.
fn short_verify_registry(name: &str) -> PathBuf {
    let target = std::env::temp_dir().join(format!("sentinel-verify-{}-{name}", std::process::id()));
    copy(&sentinel_tests::traffic::sample_registry_dir(), &target);
    let plant = target.join("hosts/plant-a.toml");
    let text = std::fs::read_to_string(&plant).expect("plant-a.toml");
    let declared = "writable = { relinquish_default = 70.0, verify_s = 300, tolerance = 1.0 }";
    assert!(text.contains(declared), "the sample registry's boiler1.setpoint");
    let text = text.replace(
        declared,
        &format!("writable = {{ relinquish_default = 70.0, verify_s = {VERIFY_S}, tolerance = 1.0 }}"),
    );
    std::fs::write(&plant, text).expect("write plant-a.toml");
    target
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the registry copy");
    for entry in std::fs::read_dir(from).expect("read the registry") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a registry file");
        }
    }
}

/// A core that is killed if the test fails before it stops it (so no orphan outlives the test).
struct Core(Option<std::process::Child>);

impl Core {
    async fn terminate(mut self) {
        terminate(self.0.take().expect("running")).await;
    }
}

impl Drop for Core {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn spawn(env: &Env, registry: &Path) -> Core {
    Core(Some(spawn_core_on(
        env,
        registry,
        30_000,
        &[
            "--startup-grace-ms",
            "0",
            "--self-points-interval-ms",
            "1000",
            "--health-points-interval-ms",
            "1000",
        ],
        ("warn", std::process::Stdio::inherit()),
    )))
}

/// The driver: publishes the device's value every 200 ms, and applies each admitted command
/// (answering `applied`); while `follow` holds, the device then reports the commanded value.
async fn start_driver(env: &Env, follow: Arc<AtomicBool>) -> JoinHandle<()> {
    let client = async_nats::connect(env.nats.url())
        .await
        .expect("driver connects");
    let mut intake = CommandIntake::subscribe(client, HOST, INSTANCE, 1, EpochFloor::default())
        .await
        .expect("subscribe");
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let device = Arc::new(Mutex::new(70.0_f64));
    let reporting = device.clone();
    let readings = tokio::spawn(async move {
        for seq in 1.. {
            let value = *reporting.lock().expect("lock");
            let envelope = EnvelopeOut::new(POINT, INSTANCE, 1, seq, now(), serde_json::json!(value));
            publisher
                .publish(
                    &obs_subject(HOST, INSTANCE),
                    &envelope.msg_id(),
                    envelope.to_bytes().into(),
                )
                .await
                .expect("publish a reading");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    tokio::spawn(async move {
        while let Some(received) = intake.next().await {
            let received = received.expect("intake");
            if let Some(command) = received.admitted() {
                if follow.load(Ordering::SeqCst) {
                    *device.lock().expect("lock") = command.value.as_f64().expect("a number");
                }
                intake.mark_applied(&command.command_id);
                intake.answer(&received, Ok(())).await.expect("answer");
            }
        }
        readings.abort();
    })
}

async fn ask(
    operator: &async_nats::Client,
    principal: &str,
    id: &str,
    value: Option<f64>,
    for_s: Option<u64>,
) {
    let request = CommandRequest {
        command_id: id.to_owned(),
        point_id: POINT.to_owned(),
        value: value.map_or(serde_json::Value::Null, |v| serde_json::json!(v)),
        unit: None,
        for_s,
        release: value.is_none(),
        principal: String::new(),
        reply_to: None,
        band: None,
    };
    operator
        .publish(
            command_request_subject(principal),
            serde_json::to_vec(&request).expect("encode").into(),
        )
        .await
        .expect("request");
}

/// One control event of the point: `(kind, epoch, command_id, outcome or why, value)`.
type Event = (String, i32, Option<String>, Option<String>, Option<String>);

async fn events(url: &str) -> Vec<Event> {
    let mut conn = pg(url).await;
    sqlx::query_as(
        "SELECT kind, core_epoch, payload->>'command_id', \
         coalesce(payload->>'outcome', payload->>'why'), payload->>'value' FROM control_event \
         WHERE point_id = $1 AND kind IN ('command_issued', 'command_result', 'command_verified', \
           'command_diverged', 'claim_released') ORDER BY seq",
    )
    .bind(POINT)
    .fetch_all(&mut conn)
    .await
    .expect("control events")
}

/// Waits (at most `within`) until an event of `kind` for `command_id` is in the log.
async fn wait_for(url: &str, kind: &str, command_id: &str, within: Duration) -> Vec<Event> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let events = events(url).await;
        if events
            .iter()
            .any(|e| e.0 == kind && e.2.as_deref() == Some(command_id))
        {
            return events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {kind} for {command_id} within {within:?}: {events:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn kinds(events: &[Event]) -> Vec<(&str, &str)> {
    events
        .iter()
        .map(|e| (e.0.as_str(), e.2.as_deref().unwrap_or("")))
        .collect()
}

/// The newest committed value of the point's convergence self-point, once it is `want`.
async fn wait_for_convergence(url: &str, want: f64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let mut conn = pg(url).await;
        let newest: Option<(Option<f64>,)> = sqlx::query_as(
            "SELECT value_num FROM observation WHERE point_id = $1 ORDER BY observed_at DESC LIMIT 1",
        )
        .bind(CONVERGENCE)
        .fetch_optional(&mut conn)
        .await
        .expect("convergence rows");
        if newest == Some((Some(want),)) {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the convergence point never read {want}: {newest:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_reports_converged_for_a_driver_that_follows_and_diverged_for_one_that_does_not() {
    let env = Env::start(30_000).await;
    let registry = short_verify_registry("verdicts");
    let follow = Arc::new(AtomicBool::new(true));
    let driver = start_driver(&env, follow.clone()).await;
    let operator = async_nats::connect(env.nats.url()).await.expect("operator");
    let core = spawn(&env, &registry);
    wait_ready(&env.store, 1).await;

    ask(&operator, "ana", "r-1", Some(65.0), None).await;
    let log = wait_for(&env.db.url, "command_verified", "r-1", Duration::from_secs(20)).await;
    assert_eq!(
        kinds(&log),
        [
            ("command_issued", "r-1"),
            ("command_result", "r-1"),
            ("command_verified", "r-1")
        ],
        "the device reported 65 within verify_s"
    );
    wait_for_convergence(&env.db.url, 1.0).await;

    // The device stops following: it answers `applied` and keeps reporting 65.
    follow.store(false, Ordering::SeqCst);
    let asked = std::time::Instant::now();
    ask(&operator, "ana", "r-2", Some(50.0), None).await;
    let log = wait_for(
        &env.db.url,
        "command_diverged",
        "r-2",
        Duration::from_secs(VERIFY_S + 20),
    )
    .await;
    assert!(
        asked.elapsed() >= Duration::from_secs(VERIFY_S),
        "diverged only after verify_s"
    );
    assert_eq!(
        kinds(&log)[3..],
        [
            ("command_issued", "r-2"),
            ("command_result", "r-2"),
            ("command_diverged", "r-2")
        ]
    );
    wait_for_convergence(&env.db.url, -1.0).await;
    core.terminate().await;
    driver.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_operator_claim_survives_a_restart_and_its_expiry_still_releases_it() {
    let env = Env::start(30_000).await;
    let registry = short_verify_registry("claims");
    let driver = start_driver(&env, Arc::new(AtomicBool::new(true))).await;
    let operator = async_nats::connect(env.nats.url()).await.expect("operator");
    let first = spawn(&env, &registry);
    wait_ready(&env.store, 1).await;

    // Ana holds 65 for 40 s.
    let claimed = std::time::Instant::now();
    ask(&operator, "ana", "ana-1", Some(65.0), Some(40)).await;
    wait_for(&env.db.url, "command_verified", "ana-1", Duration::from_secs(20)).await;
    first.terminate().await;

    let second = spawn(&env, &registry);
    wait_ready(&env.store, 2).await;
    // Bob overrides (the newer claim of the same band wins) and lets go: the point goes back
    // to Ana's 65, which only a restored claim can give (no claim: the relinquish default, 70).
    ask(&operator, "bob", "bob-1", Some(60.0), Some(600)).await;
    wait_for(&env.db.url, "command_result", "bob-1", Duration::from_secs(20)).await;
    ask(&operator, "bob", "bob-2", None, None).await;
    let log = wait_for(&env.db.url, "command_issued", "bob-2", Duration::from_secs(20)).await;
    let back = log
        .iter()
        .find(|e| e.0 == "command_issued" && e.2.as_deref() == Some("bob-2"))
        .expect("bob's release");
    assert_eq!(
        (back.1, back.4.as_deref()),
        (2, Some("65.0")),
        "back to Ana's restored claim: {log:?}"
    );
    assert!(
        claimed.elapsed() < Duration::from_secs(40),
        "before Ana's claim lapsed"
    );

    // Ana's claim lapses 40 s after she set it: released as expired by the successor, and the
    // point goes to its relinquish default.
    let log = wait_for(
        &env.db.url,
        "claim_released",
        "lapse-2-1",
        Duration::from_secs(60),
    )
    .await;
    let released = log
        .iter()
        .find(|e| e.0 == "claim_released" && e.2.as_deref() == Some("lapse-2-1"))
        .expect("the lapse");
    assert_eq!((released.1, released.3.as_deref()), (2, Some("expired")));
    assert!(claimed.elapsed() >= Duration::from_secs(40));
    let log = wait_for(
        &env.db.url,
        "command_issued",
        "lapse-2-1",
        Duration::from_secs(10),
    )
    .await;
    let relinquished = log
        .iter()
        .find(|e| e.0 == "command_issued" && e.2.as_deref() == Some("lapse-2-1"))
        .expect("the lapse's command");
    assert_eq!(relinquished.4.as_deref(), Some("70.0"), "the relinquish default");
    let mut conn = pg(&env.db.url).await;
    let (value, holder): (String, Option<String>) =
        sqlx::query_as("SELECT value::text, winner_holder FROM point_desired WHERE point_id = $1")
            .bind(POINT)
            .fetch_one(&mut conn)
            .await
            .expect("point_desired");
    assert_eq!((value.as_str(), holder), ("70.0", None));
    second.terminate().await;
    driver.abort();
}
