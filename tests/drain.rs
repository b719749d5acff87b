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

use std::time::Duration;

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
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stale_published: Vec<i64> = transitions
        .seen()
        .iter()
        .filter(|t| t.quality == "stale")
        .filter_map(|t| t.control_seq)
        .collect();
    assert!(
        events.iter().any(|(seq, ..)| stale_published.contains(seq)),
        "the stale transition names its control event: {stale_published:?}"
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
