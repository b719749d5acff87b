//! Issue 22, "What it must show", second bullet: `for_s` through a SIGKILL of the core, with
//! real processes (a `sentinel run` over a private nats-server and PostgreSQL, killed and
//! started again; this test publishing the devices' readings every half second, as live
//! devices do, through the outage too):
//!
//! - `boiler1.pending_across_restart`: its condition began before the SIGKILL and comes due
//!   after the restart; it fires at the instant the log gives (the first true row's
//!   `observed_at` plus `for_s`), not `for_s` after the restart.
//! - `pump2.due_in_downtime`: its `for_s` came due while the core was down and current data
//!   still holds it: it fires once, after its warmup ended, never before.
//! - `meter.cleared_in_downtime`: its `for_s` came due while the core was down, but the data
//!   turned false during the downtime and its true rows are no longer current at the restart
//!   (`meter-main.active_power` is fresh for 10 s): it does not fire.
//! - `meter.stopped_in_downtime`: its input stopped arriving at the SIGKILL (and is not current
//!   at the restart): it does not fire.
//!
//! Counted from outside with SQL on `control_event`: no claim in the first core's epoch,
//! exactly the two claims above in the second's. (The sans-IO versions: `core/tests/rules.rs`.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use sentinel_core::Micros;
use sentinel_core::registry::{CompiledPoint, Registry};
use sentinel_core::wire::EnvelopeOut;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_tests::harness::{self, Env, now, pg, wait_exit, wait_ready};
use sentinel_tests::traffic;

const ACK_WAIT_MS: u64 = 30_000;
const DRIVER_EPOCH: u32 = 1;
/// How often the devices publish.
const PUBLISH_EVERY_MS: u64 = 500;
/// The pending rule's `for_s`: long enough that the restart (with its startup) falls inside it.
const PENDING_FOR_S: i64 = 30;
/// After the first true rows, the SIGKILL; the downtime; then the restart.
const KILL_AFTER_MS: i64 = 2_500;
/// Longer than the meter's points' freshness (10 s): their rows from before the SIGKILL are
/// not current at the restart. Shorter than the other inputs' (60 s).
const DOWNTIME_MS: i64 = 13_000;
/// How far off the log-time instant a claim may be written (a tick, a fenced write).
const ON_TIME_MS: i64 = 1_500;

const RULES: &str = r#"
[[rule]]
id = "boiler1.pending_across_restart"
inputs = ["boiler1.flow_temp"]
when = "boiler1.flow_temp > 85"
for_s = 30
claim = { point = "boiler1.setpoint", value = 60, band = "automation" }
otherwise = "release"
on_input_loss = "release"

[[rule]]
id = "pump2.due_in_downtime"
inputs = ["pump2.speed"]
when = "pump2.speed > 2000"
for_s = 4
claim = { point = "ahu1.supply_temp_setpoint", value = 16, band = "automation" }
otherwise = "release"
on_input_loss = "release"

[[rule]]
id = "meter.cleared_in_downtime"
inputs = ["meter-main.active_power"]
when = "meter-main.active_power > 1000"
for_s = 4
claim = { point = "ahu1.occupied", value = false, band = "automation" }
otherwise = "release"
on_input_loss = "release"

[[rule]]
id = "meter.stopped_in_downtime"
inputs = ["meter-main.frequency"]
when = "meter-main.frequency > 55"
for_s = 4
claim = { point = "boiler1.setpoint", value = 55, band = "automation", priority = 2 }
otherwise = "release"
on_input_loss = "release"
"#;

/// Where the test is: the frequency meter stops at the SIGKILL; the power drops during the
/// downtime.
#[derive(Default)]
struct Script {
    meter_stopped: AtomicBool,
    power_dropped: AtomicBool,
    done: AtomicBool,
}

fn envelope(
    point: &CompiledPoint,
    seq: u64,
    observed: Micros,
    value: serde_json::Value,
) -> (String, String, Bytes) {
    let instance = &point.descriptor.assignment.driver_instance;
    let mut envelope = EnvelopeOut::new(&point.id, instance, DRIVER_EPOCH, seq, observed, value);
    envelope.unit = point.unit_native.as_deref().map(str::to_owned);
    (
        format!("obs.{}.{instance}", point.host),
        envelope.msg_id(),
        Bytes::from(envelope.to_bytes()),
    )
}

/// The devices: every [`PUBLISH_EVERY_MS`], each input's reading as `script` says.
fn spawn_devices(
    registry: Arc<Registry>,
    publisher: ObservationPublisher,
    script: Arc<Script>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let point = |id: &str| {
            let idx = registry.resolve(id).expect("a fixture point");
            registry.point(idx)
        };
        let (flow, pump2, power, meter) = (
            point("boiler1.flow_temp"),
            point("pump2.speed"),
            point("meter-main.active_power"),
            point("meter-main.frequency"),
        );
        let mut seq = 0u64;
        while !script.done.load(Ordering::SeqCst) {
            let at = now();
            let mut batch = Vec::new();
            let mut push = |p: &CompiledPoint, v: serde_json::Value| {
                seq += 1;
                batch.push(envelope(p, seq, at, v));
            };
            push(flow, serde_json::json!(95.0 * 9.0 / 5.0 + 32.0)); // 95 °C, sent in °F
            push(pump2, serde_json::json!(2_500.0));
            // In kW, its native unit: 5,000 W, then 500 W.
            let kw = if script.power_dropped.load(Ordering::SeqCst) {
                0.5
            } else {
                5.0
            };
            push(power, serde_json::json!(kw));
            if !script.meter_stopped.load(Ordering::SeqCst) {
                push(meter, serde_json::json!(60.0));
            }
            publisher.publish_pipelined(batch, 16).await.expect("publish");
            tokio::time::sleep(Duration::from_millis(PUBLISH_EVERY_MS)).await;
        }
    })
}

/// A rule event of the control log: (seq, kind, epoch, occurred_at, payload).
type Event = (i64, String, i32, i64, serde_json::Value);

async fn rule_events(conn: &mut sqlx::PgConnection) -> Vec<Event> {
    sqlx::query_as(
        "SELECT seq, kind, core_epoch, (extract(epoch FROM occurred_at) * 1e6)::bigint, payload \
         FROM control_event WHERE kind IN ('rule_warmup_ended', 'claim_set', 'claim_released', \
         'rule_held', 'rule_claim_refused') ORDER BY seq",
    )
    .fetch_all(conn)
    .await
    .expect("rule events")
}

/// The rule an event is about: a claim's holder, or a rule event's `rule`.
fn rule_of(payload: &serde_json::Value) -> String {
    payload["holder"]
        .as_str()
        .and_then(|h| h.strip_prefix("rule:"))
        .or_else(|| payload["rule"].as_str())
        .unwrap_or_default()
        .to_owned()
}

async fn first_observed(conn: &mut sqlx::PgConnection, point: &str) -> Micros {
    let at: i64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM min(observed_at)) * 1e6)::bigint FROM observation WHERE point_id = $1",
    )
    .bind(point)
    .fetch_one(conn)
    .await
    .expect("first observation");
    Micros(at)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn for_s_through_a_sigkill_fires_at_its_log_instant_after_warmup_on_current_data_only() {
    let env = Env::start(ACK_WAIT_MS).await;
    let registry_dir = traffic::rules_registry_dir("restart", RULES);
    let registry = Arc::new(traffic::compile_registry(&registry_dir));
    let mut conn = pg(&env.db.url).await;
    let spawn = || {
        harness::spawn_core_on(
            &env,
            &registry_dir,
            ACK_WAIT_MS,
            &["--startup-grace-ms", "0", "--self-points-interval-ms", "1000"],
            ("warn", std::process::Stdio::inherit()),
        )
    };

    let mut first = spawn();
    wait_ready(&env.store, 1).await;
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let script = Arc::new(Script::default());
    let devices = spawn_devices(registry.clone(), publisher, script.clone());

    // The first core sees the conditions begin: every rule leaves warmup on live inputs and
    // pends (no `for_s` is due before the SIGKILL).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ended = rule_events(&mut conn)
            .await
            .iter()
            .filter(|(_, kind, epoch, ..)| kind == "rule_warmup_ended" && *epoch == 1)
            .count();
        if ended == 4 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first core's rules left warmup: {ended} of 4"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let began = first_observed(&mut conn, "boiler1.flow_temp").await;
    let kill_at = began.add_ms(KILL_AFTER_MS);
    assert!(
        now() < kill_at,
        "the first core took too long to evaluate: a for_s of 4 s could come due"
    );
    while now() < kill_at {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.kill().expect("SIGKILL");
    script.meter_stopped.store(true, Ordering::SeqCst);
    wait_exit(&mut first, Duration::from_secs(10))
        .await
        .expect("killed");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    script.power_dropped.store(true, Ordering::SeqCst);
    while now() < kill_at.add_ms(DOWNTIME_MS) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let restart_at = now();
    let mut second = spawn();
    wait_ready(&env.store, 2).await;
    let due = began.add_ms(PENDING_FOR_S * 1_000);
    assert!(
        now() < due,
        "the second core started after the pending rule's due instant: the test proves nothing"
    );
    // Past the log-time instant by the tolerance, and past every short `for_s` after the
    // restart: whatever was to fire has.
    while now() < due.add_ms(ON_TIME_MS + 1_000) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    script.done.store(true, Ordering::SeqCst);
    devices.await.expect("devices");
    second.kill().expect("SIGKILL");
    wait_exit(&mut second, Duration::from_secs(10))
        .await
        .expect("killed");

    let events = rule_events(&mut conn).await;
    let claims = |epoch: i32| -> Vec<&Event> {
        events
            .iter()
            .filter(|(_, kind, e, ..)| kind == "claim_set" && *e == epoch)
            .collect()
    };
    assert!(
        claims(1).is_empty(),
        "no for_s came due before the SIGKILL: {events:#?}"
    );
    let fired: Vec<String> = claims(2).iter().map(|(.., p)| rule_of(p)).collect();
    assert_eq!(
        fired,
        ["pump2.due_in_downtime", "boiler1.pending_across_restart"],
        "exactly these claims, in this order: {events:#?}"
    );
    let others: Vec<_> = events
        .iter()
        .filter(|(_, kind, ..)| kind != "rule_warmup_ended" && kind != "claim_set")
        .collect();
    assert!(others.is_empty(), "no release, hold or refusal: {others:#?}");

    // The pending rule: at the log's instant, not `for_s` after the restart.
    let (_, _, _, at, _) = claims(2)[1];
    let late_ms = Micros(*at).saturating_sub(due) / 1_000;
    assert!(
        (0..=ON_TIME_MS).contains(&late_ms),
        "fired {late_ms} ms after its log-time instant (first true row {began:?} + {PENDING_FOR_S} s); \
         restart + for_s would be {} ms after it",
        restart_at.add_ms(PENDING_FOR_S * 1_000).saturating_sub(due) / 1_000
    );

    // The one due during the downtime: after its warmup ended in the second core, on a
    // current row.
    let (claim_seq, _, _, claim_at, claim) = claims(2)[0];
    let warmup = events
        .iter()
        .find(|(_, kind, e, _, p)| {
            kind == "rule_warmup_ended" && *e == 2 && rule_of(p) == "pump2.due_in_downtime"
        })
        .unwrap_or_else(|| panic!("pump2.due_in_downtime left warmup in the second core: {events:#?}"));
    assert!(
        warmup.0 < *claim_seq && warmup.3 <= *claim_at,
        "fired after warmup: {warmup:?} then {claim}"
    );
    assert!(Micros(*claim_at) > restart_at, "fired after the restart");
    let row_seq = claim["provenance"]["rows"][0]["source_seq"]
        .as_i64()
        .expect("a provenance row");
    let row_observed: i64 = sqlx::query_scalar(
        "SELECT (extract(epoch FROM observed_at) * 1e6)::bigint FROM observation \
         WHERE point_id = 'pump2.speed' AND source_seq = $1",
    )
    .bind(row_seq)
    .fetch_one(&mut conn)
    .await
    .expect("the provenance row is in the log");
    assert!(
        row_observed + 60_000_000 > *claim_at,
        "decided on a row current when it fired (freshness 60 s): {claim}"
    );
}
