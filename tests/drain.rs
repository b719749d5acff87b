//! Exit criterion "Drain behaves" (core runtime spec, "Draining", "A slow core must not look
//! like a dead fleet"): build a backlog while no core runs, start a core, and assert that no
//! point reaches `live` from replayed observations and that no staleness cascade happens while
//! lag is high. Real `sentinel run` processes against a private nats-server and a private
//! PostgreSQL database.
//!
//! The backlog is built so that both failures would show: every device point was live before
//! the outage with data whose freshness deadline passes during the outage, so a watchdog that
//! ignored lag would mark the whole fleet stale the moment the new core starts (its startup
//! grace is set to zero here); and the backlog's readings are newer than that data but no
//! longer current, so a projection that took them at face value would make points live.
//! Current readings follow at the back of the stream, as live devices keep publishing.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;

use bytes::Bytes;
use sentinel_core::Micros;
use sentinel_core::registry::{CompiledPoint, Kind, Registry};
use sentinel_core::wire::EnvelopeOut;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::Bus;
use sentinel_tests::harness::{self, DRAIN_TIMEOUT_S, Env, Transitions, committed, now, pg, terminate};
use sentinel_tests::traffic;

/// Readings in the backlog; large enough that the drain lasts well past the core's first lag
/// readings (one per second).
const BACKLOG: usize = 60_000;
/// The drain core treats lag as high at this many pending messages.
const LAG_HIGH_PENDING: u64 = 1_000;
/// The pre-outage data stops being current this long after it is published.
const FRESH_FOR_MS: i64 = 5_000;
const ACK_WAIT_MS: u64 = 30_000;
const DRIVER_EPOCH: u32 = 1;

/// Points a device driver publishes (the core's own self-points are not in the backlog).
fn device_points(registry: &Registry) -> Vec<&CompiledPoint> {
    registry
        .points()
        .map(|(_, p)| p)
        .filter(|p| &*p.host != "sentinel")
        .collect()
}

/// A valid reading of `point`, observed at `observed`.
fn reading(point: &CompiledPoint, seq: u64, observed: Micros) -> (String, String, Bytes) {
    let d = &point.descriptor;
    let value = match d.kind {
        Kind::Number => {
            let canonical = d.range.map_or(1.0, |r| (r.min + r.max) / 2.0);
            serde_json::json!((canonical - d.conversion.offset) / d.conversion.factor)
        }
        Kind::Bool => serde_json::json!(true),
        Kind::Enum => {
            let code = d
                .codebook
                .as_ref()
                .and_then(|c| c.keys().next().cloned())
                .expect("an enum point has a codebook");
            code.parse::<i64>()
                .map_or_else(|_| serde_json::json!(code), |n| serde_json::json!(n))
        }
        Kind::Text => serde_json::json!("ok"),
    };
    let instance = &d.assignment.driver_instance;
    let mut envelope = EnvelopeOut::new(&point.id, instance, DRIVER_EPOCH, seq, observed, value);
    envelope.unit = point.unit_native.as_deref().map(str::to_owned);
    (
        format!("obs.{}.{instance}", point.host),
        envelope.msg_id(),
        Bytes::from(envelope.to_bytes()),
    )
}

async fn wait_committed(env: &Env, total: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    while committed(&env.store).await < total {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not drained in {DRAIN_TIMEOUT_S} s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn freshness_ms(point: &CompiledPoint) -> i64 {
    i64::from(point.descriptor.freshness_s) * 1_000
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_neither_revives_points_from_replayed_data_nor_cascades_into_staleness() {
    let env = Env::start(ACK_WAIT_MS).await;
    let registry = traffic::sample_registry();
    let points = device_points(&registry);
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let mut seq = 0u64;
    let mut next_seq = || {
        seq += 1;
        seq
    };

    // Before the outage: every device point reports data that is current for FRESH_FOR_MS more.
    let t1 = now();
    let before: Vec<_> = points
        .iter()
        .map(|p| reading(p, next_seq(), t1.add_ms(FRESH_FOR_MS - freshness_ms(p))))
        .collect();
    let mut total = before.len() as u64;
    publisher.publish_pipelined(before, 256).await.expect("publish");
    let first = harness::spawn_core(&env, ACK_WAIT_MS, &["--startup-grace-ms", "0"]);
    wait_committed(&env, total).await;
    terminate(first).await;

    // The outage: readings pile up, each newer than the last one committed but already past
    // its point's deadline by the time any core sees it.
    let backlog: Vec<_> = (0..BACKLOG)
        .map(|i| {
            let p = points[i % points.len()];
            let step_ms = (i / points.len()) as i64 / 10 + 1;
            reading(p, next_seq(), t1.add_ms(FRESH_FOR_MS - freshness_ms(p) + step_ms))
        })
        .collect();
    total += backlog.len() as u64;
    publisher
        .publish_pipelined(backlog, 1_024)
        .await
        .expect("publish backlog");
    // Live devices keep publishing: current data lands behind the backlog.
    let current_from = now();
    let current: Vec<_> = points.iter().map(|p| reading(p, next_seq(), now())).collect();
    total += current.len() as u64;
    publisher
        .publish_pipelined(current, 256)
        .await
        .expect("publish current");
    let last_backlog_deadline = t1.add_ms(FRESH_FOR_MS + (BACKLOG / points.len()) as i64 / 10 + 1);
    while now() <= last_backlog_deadline.add_ms(500) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The drain, watched from the subscriber and from the consumer's pending count.
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let pending_high = LAG_HIGH_PENDING.to_string();
    let second = harness::spawn_core(
        &env,
        ACK_WAIT_MS,
        &[
            "--startup-grace-ms",
            "0",
            "--lag-high-pending",
            &pending_high,
            "--self-points-interval-ms",
            "1000",
            "--health-points-interval-ms",
            "1000",
        ],
    );
    // The last moment the consumer still held at least LAG_HIGH_PENDING messages. Nothing is
    // published during the drain, so pending only falls: every lag reading the core took
    // before this moment said "high".
    let mut last_high = std::time::Instant::now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    loop {
        let lag = env.bus.lag().await.expect("lag");
        if lag.pending + lag.ack_pending >= LAG_HIGH_PENDING {
            last_high = std::time::Instant::now();
        }
        if committed(&env.store).await >= total && lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not drained: {lag:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Once drained, a device point that stops reporting goes stale for real: the watchdog
    // writes an epoch-stamped control event first (core runtime spec: the epoch "appears on
    // every control_event written").
    let mut conn = pg(&env.db.url).await;
    let shortest_freshness_ms = points.iter().map(|p| freshness_ms(p)).min().expect("points");
    let deadline = tokio::time::Instant::now() + Duration::from_millis(shortest_freshness_ms as u64 + 15_000);
    let events: Vec<(i64, String, i32, String, String)> = loop {
        let events = sqlx::query_as(
            "SELECT seq, kind, core_epoch, principal, payload->>'to' FROM control_event ORDER BY seq",
        )
        .fetch_all(&mut conn)
        .await
        .expect("control events");
        if !events.is_empty() {
            break events;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no point went stale {shortest_freshness_ms} ms after its last reading"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (seq, kind, epoch, principal, to) in &events {
        assert_eq!(
            (kind.as_str(), *epoch, principal.as_str(), to.as_str()),
            ("quality_changed", 2, "core:watchdog", "stale"),
            "control event {seq}"
        );
    }
    // Each of those events' stale transition is published, naming it (polled: a loaded machine
    // publishes later than a quiet one; CI once saw only later events' transitions after a fixed
    // 500 ms), and every stale transition published names a watchdog event of this epoch in the
    // log (read again: more points may have gone stale since the first read).
    let stale_published = |transitions: &Transitions| -> Vec<i64> {
        transitions
            .seen()
            .iter()
            .filter(|t| t.quality == "stale")
            .filter_map(|t| t.control_seq)
            .collect()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !events
        .iter()
        .all(|(seq, ..)| stale_published(&transitions).contains(seq))
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let published = stale_published(&transitions);
    let unpublished: Vec<i64> = events
        .iter()
        .map(|(seq, ..)| *seq)
        .filter(|seq| !published.contains(seq))
        .collect();
    assert!(
        unpublished.is_empty(),
        "each stale event's transition names it: {unpublished:?} never seen (seen {published:?}; the \
         subscriber's client reported {} slow-consumer drops)",
        transitions.dropped()
    );
    assert_eq!(transitions.dropped(), 0, "the subscriber dropped no transition");
    let stale_events: Vec<i64> = sqlx::query_scalar(
        "SELECT seq FROM control_event WHERE kind = 'quality_changed' AND core_epoch = 2 \
         AND principal = 'core:watchdog' AND payload->>'to' = 'stale' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("stale events");
    assert!(
        published.iter().all(|seq| stale_events.contains(seq)),
        "each stale transition names its control event: published {published:?}, logged {stale_events:?}"
    );
    terminate(second).await;

    let seen: Vec<_> = transitions
        .seen()
        .into_iter()
        .filter(|t| t.core_epoch == 2)
        .collect();
    assert!(!seen.is_empty(), "the drain published transitions");
    let early_stale: Vec<_> = seen
        .iter()
        .filter(|t| t.quality == "stale" && t.received_at <= last_high)
        .map(|t| t.point_id.as_str())
        .collect();
    assert!(
        early_stale.is_empty(),
        "staleness while lag was high ({} points): {early_stale:?}",
        early_stale.len()
    );
    let revived: Vec<_> = seen
        .iter()
        .filter(|t| t.quality == "live")
        .filter(|t| Micros::parse_rfc3339(&t.observed_at).expect("observed_at") < current_from.add_ms(-1_000))
        .map(|t| (t.point_id.as_str(), t.observed_at.as_str()))
        .collect();
    assert!(revived.is_empty(), "live from replayed observations: {revived:?}");

    // Current data made every device point live, and the checkpoint records where each
    // point ended up (live, or stale once its freshness passed after the drain) with the
    // current reading as its latest: the first core's checkpoint already said live or stale,
    // so only the observation time shows the drain core got there.
    let ids: Vec<String> = points.iter().map(|p| p.id.to_string()).collect();
    let live: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM point_state WHERE quality IN ('live', 'stale') AND point_id = ANY($1) \
         AND observed_at >= to_timestamp($2)",
    )
    .bind(&ids)
    .bind(current_from.add_ms(-1_000).0 as f64 / 1e6)
    .fetch_one(&mut conn)
    .await
    .expect("count live");
    assert_eq!(
        live,
        points.len() as i64,
        "every device point live from current data"
    );
    // The drain core's self-points went through ingest like any observation: keyed by the
    // core's own instance and epoch, the age converted from ms to s as the registry says.
    let self_points: Vec<(String, i32, Option<f64>, Option<f64>)> = sqlx::query_as(
        "SELECT point_id, source_epoch, native_num, value_num FROM observation \
         WHERE driver_instance = 'core' ORDER BY point_id, source_seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("self-point rows");
    assert!(
        self_points
            .iter()
            .any(|(p, e, _, _)| p == "sentinel.core.lag_pending" && *e == 2),
        "the drain core published its lag as a self-point: {self_points:?}"
    );
    for (point, epoch, native, value) in &self_points {
        assert_eq!(*epoch, 2, "{point}: keyed by the publishing core's epoch");
        if point == "sentinel.core.oldest_unacked_age" {
            let (native, value) = (native.expect("native"), value.expect("value"));
            assert!((value - native / 1_000.0).abs() < 1e-9, "ms stored as s");
        }
    }

    // The health points the registry generates went the same way: the device's newest reading
    // is seconds old, not hours; no driver said hello (this test's publisher is no driver), so
    // the host shows no connected instance, and no hello age is invented.
    let value_of = |id: &str| -> Vec<f64> {
        self_points
            .iter()
            .filter(|(p, _, _, _)| p == id)
            .filter_map(|(_, _, _, v)| *v)
            .collect()
    };
    let ages = value_of("sentinel.device.boiler1.last_reading_age");
    assert!(
        !ages.is_empty() && ages.iter().all(|a| (0.0..600.0).contains(a)),
        "the device's last reading age reached PostgreSQL: {ages:?}"
    );
    let shares = value_of("sentinel.device.boiler1.non_live_share");
    assert!(
        !shares.is_empty() && shares.iter().all(|s| (0.0..=100.0).contains(s)),
        "{shares:?}"
    );
    let connected = value_of("sentinel.host.plant-a.connected_instances");
    assert!(
        !connected.is_empty() && connected.iter().all(|c| *c == 0.0),
        "{connected:?}"
    );
    assert!(value_of("sentinel.host.plant-a.last_hello_age").is_empty());

    let lived_from_current = seen.iter().filter(|t| t.quality == "live").count();
    assert!(
        lived_from_current >= points.len(),
        "each point went live once its current reading landed"
    );
}

/// The rules of the drain with rules: each reads one input the backlog drives across its
/// threshold, claims a point of its own and has a warmup deadline far shorter than the drain,
/// so a deadline that counted while lag was high would end warmup during the drain.
const DRAIN_RULES: &str = r#"
[[rule]]
id = "boiler1.overheat_cutback"
inputs = ["boiler1.flow_temp"]
when = "boiler1.flow_temp > 85"
until = "boiler1.flow_temp < 80"
for_s = 1
claim = { point = "boiler1.setpoint", value = 60, band = "automation" }
otherwise = "release"
on_input_loss = "release"
warmup = { deadline_s = 2 }

[[rule]]
id = "ahu1.unoccupied_setback"
inputs = ["ahu1.occupied"]
when = "ahu1.occupied == false"
claim = { point = "ahu1.supply_temp_setpoint", value = 16, band = "automation" }
otherwise = "release"
on_input_loss = "release"
warmup = { deadline_s = 2 }
"#;

/// The drain with rules treats lag as high at this many pending messages: the first third of
/// the backlog drains while lag is high (everything frozen), the rest after a lag reading has
/// said low, so replayed rows reach rules that are no longer frozen (lag is read once a second;
/// the whole drain takes a few seconds).
const RULES_LAG_HIGH_PENDING: u64 = 40_000;

/// The rule ids of [`DRAIN_RULES`] with the point each claims and the subject its commands go on.
const DRAIN_RULE_CLAIMS: [(&str, &str, &str); 2] = [
    (
        "boiler1.overheat_cutback",
        "boiler1.setpoint",
        "cmd.plant-a.modbus-boiler",
    ),
    (
        "ahu1.unoccupied_setback",
        "ahu1.supply_temp_setpoint",
        "cmd.ahu-east.bacnet-ahu1",
    ),
];

/// A reading of `point` as [`reading`] makes it, except the rules' inputs: `boiler1.flow_temp`
/// at `flow_c` °C (sent in °F, its native unit) and `ahu1.occupied` = `occupied`.
fn rule_reading(
    point: &CompiledPoint,
    seq: u64,
    observed: Micros,
    (flow_c, occupied): (f64, bool),
) -> (String, String, Bytes) {
    let value = match &*point.id {
        "boiler1.flow_temp" => serde_json::json!(flow_c * 9.0 / 5.0 + 32.0),
        "ahu1.occupied" => serde_json::json!(occupied),
        _ => return reading(point, seq, observed),
    };
    let d = &point.descriptor;
    let instance = &d.assignment.driver_instance;
    let mut envelope = EnvelopeOut::new(&point.id, instance, DRIVER_EPOCH, seq, observed, value);
    envelope.unit = point.unit_native.as_deref().map(str::to_owned);
    (
        format!("obs.{}.{instance}", point.host),
        envelope.msg_id(),
        Bytes::from(envelope.to_bytes()),
    )
}

/// Device rows committed (the core's own self-points left out).
async fn device_rows(conn: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM observation WHERE driver_instance <> 'core'")
        .fetch_one(conn)
        .await
        .expect("count rows")
}

/// Commands on `cmd.>` as a subscriber saw them: (subject, command id, when received).
type CommandsSeen = Arc<Mutex<Vec<(String, String, Micros)>>>;

async fn watch_commands(url: &str) -> CommandsSeen {
    let client = async_nats::connect(url).await.expect("subscriber connects");
    let mut sub = sentinel_tests::nats::subscribe_synced(&client, "cmd.>", "cmd._sync", b"").await;
    let seen = CommandsSeen::default();
    let sink = seen.clone();
    tokio::spawn(async move {
        let _client = client;
        while let Some(message) = sub.next().await {
            if message.subject.as_str() == "cmd._sync" {
                continue;
            }
            let body: serde_json::Value =
                serde_json::from_slice(&message.payload).expect("a command is JSON");
            if body["kind"] == "command" {
                let id = body["command_id"].as_str().unwrap_or_default().to_owned();
                sink.lock()
                    .expect("lock")
                    .push((message.subject.to_string(), id, now()));
            }
        }
    });
    seen
}

/// Issue 22, "What it must show", first bullet: a backlog whose replayed data would trigger
/// rules. During the drain no rule leaves warmup (no `rule_warmup_ended`, so no warmup
/// deadline expired while lag was high), no claim is made, no command is issued; after
/// catch-up each rule fires exactly once, from current data (its `claim_set` names rows of
/// the current readings), one `command_issued` and one command on the bus per rule. Counted
/// from outside: SQL on `control_event`, a subscriber on `cmd.>`.
///
/// Before the outage the rules' inputs are below their thresholds (a first core sees them
/// current: its rules leave warmup idle); the backlog and the current readings are above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_of_triggering_data_keeps_rules_in_warmup_and_each_fires_once_from_current_data() {
    const BELOW: (f64, bool) = (40.0, true);
    const ABOVE: (f64, bool) = (95.0, false);
    let env = Env::start(ACK_WAIT_MS).await;
    let registry_dir = sentinel_tests::traffic::rules_registry_dir("drain", DRAIN_RULES);
    let registry = sentinel_tests::traffic::compile_registry(&registry_dir);
    let points = device_points(&registry);
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let mut conn = pg(&env.db.url).await;
    let spawn = |args: &[&str]| {
        harness::spawn_core_on(&env, &registry_dir, ACK_WAIT_MS, args, ("warn", Stdio::inherit()))
    };
    let mut seq = 0u64;
    let mut next_seq = || {
        seq += 1;
        seq
    };

    let t1 = now();
    let before: Vec<_> = points
        .iter()
        .map(|p| rule_reading(p, next_seq(), t1.add_ms(FRESH_FOR_MS - freshness_ms(p)), BELOW))
        .collect();
    let mut total = before.len() as i64;
    publisher.publish_pipelined(before, 256).await.expect("publish");
    let first = spawn(&["--startup-grace-ms", "0"]);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    while device_rows(&mut conn).await < total {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not committed in {DRAIN_TIMEOUT_S} s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    terminate(first).await;

    let backlog: Vec<_> = (0..BACKLOG)
        .map(|i| {
            let p = points[i % points.len()];
            let step_ms = (i / points.len()) as i64 / 10 + 1;
            rule_reading(
                p,
                next_seq(),
                t1.add_ms(FRESH_FOR_MS - freshness_ms(p) + step_ms),
                ABOVE,
            )
        })
        .collect();
    total += backlog.len() as i64;
    publisher
        .publish_pipelined(backlog, 1_024)
        .await
        .expect("publish backlog");
    let current_from_seq = (points.len() + BACKLOG) as u64 + 1;
    let current: Vec<_> = points
        .iter()
        .map(|p| rule_reading(p, next_seq(), now(), ABOVE))
        .collect();
    total += current.len() as i64;
    publisher
        .publish_pipelined(current, 256)
        .await
        .expect("publish current");
    let last_backlog_deadline = t1.add_ms(FRESH_FOR_MS + (BACKLOG / points.len()) as i64 / 10 + 1);
    while now() <= last_backlog_deadline.add_ms(500) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let commands = watch_commands(&env.nats.url()).await;
    let pending_high = RULES_LAG_HIGH_PENDING.to_string();
    let second = spawn(&[
        "--startup-grace-ms",
        "0",
        "--lag-high-pending",
        &pending_high,
        "--self-points-interval-ms",
        "1000",
    ]);
    // The last wall-clock instant the consumer still held RULES_LAG_HIGH_PENDING messages or more:
    // every lag reading the core took before it said "high".
    let mut last_high = now();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    loop {
        let lag = env.bus.lag().await.expect("lag");
        if lag.pending + lag.ack_pending >= RULES_LAG_HIGH_PENDING {
            last_high = now();
        }
        if lag.pending == 0 && lag.ack_pending == 0 && device_rows(&mut conn).await >= total {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "not drained: {lag:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        last_high.saturating_sub(t1) > 0,
        "the drain held lag high for a while"
    );

    // After catch-up: each rule's claim, from the current readings (bounded wait, then a
    // settling time in which nothing more may come).
    let claims_sql = "SELECT seq, payload FROM control_event \
                      WHERE core_epoch = 2 AND kind = 'claim_set' ORDER BY seq";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM control_event WHERE core_epoch = 2 AND kind = 'claim_set'",
        )
        .fetch_one(&mut conn)
        .await
        .expect("count claims");
        if n >= DRAIN_RULE_CLAIMS.len() as i64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the rules did not fire within 30 s of catch-up ({n} claims)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    terminate(second).await;

    let rule_events: Vec<(String, i64, serde_json::Value)> = sqlx::query_as(
        "SELECT kind, (extract(epoch FROM occurred_at) * 1e6)::bigint, payload FROM control_event \
         WHERE core_epoch = 2 AND kind IN ('rule_warmup_ended', 'claim_set', 'claim_released', \
         'command_issued', 'rule_held', 'rule_claim_refused') ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("rule events");
    let early: Vec<_> = rule_events
        .iter()
        .filter(|(_, at, _)| Micros(*at) <= last_high)
        .map(|(kind, at, payload)| format!("{kind} at {at}: {payload}"))
        .collect();
    assert!(early.is_empty(), "while lag was high: {early:#?}");
    // A warmup deadline counts only time not suppressed: none of the drain while lag was high
    // (the core's startup grace is zero and it took its first lag reading while high).
    for (_, at, payload) in rule_events.iter().filter(|(k, ..)| k == "rule_warmup_ended") {
        let counted_ms = payload["counted_ms"].as_i64().expect("counted_ms");
        let since_high_ms = Micros(*at).saturating_sub(last_high) / 1_000;
        assert!(
            counted_ms <= since_high_ms + 200,
            "a warmup deadline counted {counted_ms} ms, but lag was high until {since_high_ms} ms before: {payload}"
        );
    }
    let count = |kind: &str| rule_events.iter().filter(|(k, ..)| k == kind).count();
    assert_eq!(
        count("rule_warmup_ended"),
        DRAIN_RULE_CLAIMS.len(),
        "each rule left warmup once: {rule_events:#?}"
    );
    assert_eq!(
        count("claim_set"),
        DRAIN_RULE_CLAIMS.len(),
        "each rule fired once: {rule_events:#?}"
    );
    assert_eq!(
        count("command_issued"),
        DRAIN_RULE_CLAIMS.len(),
        "one command per rule: {rule_events:#?}"
    );
    for kind in ["claim_released", "rule_held", "rule_claim_refused"] {
        assert_eq!(count(kind), 0, "{kind}: {rule_events:#?}");
    }
    let claims: Vec<(i64, serde_json::Value)> = sqlx::query_as(claims_sql)
        .fetch_all(&mut conn)
        .await
        .expect("claims");
    for (rule, point, subject) in DRAIN_RULE_CLAIMS {
        let holder = format!("rule:{rule}");
        let (_, claim) = claims
            .iter()
            .find(|(_, c)| c["holder"] == holder.as_str())
            .unwrap_or_else(|| panic!("no claim by {holder}: {claims:?}"));
        let rows = claim["provenance"]["rows"].as_array().expect("provenance rows");
        assert_eq!(claim["provenance"]["rule"], rule);
        assert!(!rows.is_empty(), "{rule}: provenance names its rows");
        for row in rows {
            let source_seq = row["source_seq"].as_u64().expect("source_seq");
            assert!(
                source_seq >= current_from_seq,
                "{rule}: fired from row {row} of the backlog, not from current data (current from seq {current_from_seq})"
            );
        }
        let issued: Vec<_> = rule_events
            .iter()
            .filter(|(k, _, p)| k == "command_issued" && p["command_id"] == claim["command_id"])
            .collect();
        assert_eq!(
            issued.len(),
            1,
            "{rule}: one command_issued for its claim on {point}"
        );
        let seen = commands.lock().expect("lock").clone();
        let ids: BTreeSet<&str> = seen
            .iter()
            .filter(|(s, ..)| s == subject)
            .map(|(_, id, _)| id.as_str())
            .collect();
        assert_eq!(ids.len(), 1, "{rule}: one command on {subject}: {seen:?}");
    }
    let seen = commands.lock().expect("lock").clone();
    assert!(
        seen.iter().all(|(_, _, at)| *at > last_high),
        "no command while lag was high: {seen:?}"
    );
}
