//! Issue 26, "What it must show": a real Prometheus scraping a real `sentinel run` core on
//! loopback (`--metrics-listen`), against a private nats-server and PostgreSQL database, after
//! a known traffic mix (every bad-input kind, misassigned messages among them, and one driver
//! `queue_drops` reading). Everything is asserted through Prometheus's HTTP API, as an
//! operator's dashboards read it:
//!
//! - every metric `docs/operations.md` documents is present (or, where the table says so,
//!   absent until its event), so the documentation and the exporter cannot drift apart;
//! - the values agree with the traffic's independent oracle: rows per class, quarantine per
//!   reason, `wrong_instance` equal to the misassigned messages sent, bad rows, every accepted
//!   message in exactly one batch (the batch-size histogram's sum), one commit-latency
//!   observation per batch, the transitions a subscriber saw, the driver's reported drops;
//!   the lag drained to zero, the stream's bound, the partitions ahead, the rollup watermark,
//!   no bus or store error, the lock held; commands and claims by outcome after one refused
//!   and one admitted request;
//! - the alert rules load against the live series: `SentinelWrongInstance` fires.

use std::collections::BTreeSet;
use std::time::Duration;

use sentinel_tests::bin::workspace_root;
use sentinel_tests::harness::{Env, Transitions, command_request, now, terminate, wait_drained};
use sentinel_tests::prometheus::{OperatorTraffic, PrometheusServer, ScrapedCore, publish_operator_traffic};
use sentinel_tests::traffic;

const ACK_WAIT_MS: u64 = 30_000;
const MESSAGES: usize = 2_000;
/// Misassigned messages sent beside the traffic's.
const EXTRA_MISASSIGNED: u64 = 3;
/// The driver instance's reported disk-queue drops.
const QUEUE_DROPS: u64 = 7;
/// How long a figure may take to reach Prometheus (scrapes every second).
const SCRAPED_WITHIN_S: u64 = 60;

/// A metric as `docs/operations.md` documents it.
struct Documented {
    /// The series name Prometheus stores (counters with `_total`; a histogram's base name).
    name: String,
    histogram: bool,
    /// "absent until …" in its row: no series before that event.
    absent_until_event: bool,
}

fn documented_metrics() -> Vec<Documented> {
    let doc = std::fs::read_to_string(workspace_root().join("docs/operations.md"))
        .expect("docs/operations.md documents the metrics");
    let metrics: Vec<Documented> = doc
        .lines()
        .filter_map(|line| {
            let name = line.strip_prefix("| `")?.split('`').next()?;
            name.starts_with("sentinel_").then(|| Documented {
                name: name.to_owned(),
                histogram: line.contains("| histogram |"),
                absent_until_event: line.contains("absent until"),
            })
        })
        .collect();
    assert!(
        metrics.len() >= 30,
        "the metrics table of docs/operations.md: {}",
        metrics.len()
    );
    metrics
}

/// Waits until `promql` has exactly one series whose value satisfies `ok`; returns it.
async fn eventually(prometheus: &PrometheusServer, promql: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(SCRAPED_WITHIN_S);
    let mut last = None;
    loop {
        last = prometheus.value(promql).await.or(last);
        if let Some(value) = last
            && ok(value)
        {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{promql} stayed at {last:?}; Prometheus log: {}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scrapes_every_documented_metric_with_the_traffic_s_values() {
    let env = Env::start(ACK_WAIT_MS).await;
    let registry = traffic::sample_registry();
    let mut mix = traffic::generate(&registry, MESSAGES, 1, now());
    assert!(
        mix.expected.quarantine["wrong_instance"] > 0,
        "the traffic sends misassigned messages"
    );

    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let ScrapedCore {
        core,
        prometheus,
        first_scrape: (head, body),
        ..
    } = ScrapedCore::start(
        &env,
        ACK_WAIT_MS,
        // The exact-count oracle covers the traffic; self-points are tested on their own.
        &["--self-points-interval-ms", "0"],
    )
    .await;

    // The endpoint answers OpenMetrics on loopback.
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"));

    // The traffic, one `queue_drops` reading of a driver instance, and a few more misassigned
    // messages than the traffic's (which sends one of each bad kind, so wrong_instance alone
    // would equal every other reason's count).
    let OperatorTraffic {
        drops_host,
        drops_instance: instance,
    } = publish_operator_traffic(&env, &registry, &mut mix, QUEUE_DROPS, EXTRA_MISASSIGNED).await;
    let misassigned = mix.expected.quarantine["wrong_instance"];
    wait_drained(&env, &mix.expected).await;
    let expected = &mix.expected;

    // The misassigned messages, counted on their own, reach Prometheus.
    eventually(&prometheus, "sentinel_wrong_instance_total", |v| {
        v == misassigned as f64
    })
    .await;
    eventually(&prometheus, "sentinel_ingest_delivered_total", |v| {
        v >= expected.accepted() as f64
    })
    .await;
    eventually(&prometheus, "sentinel_consumer_pending_messages", |v| v == 0.0).await;
    eventually(
        &prometheus,
        &format!(
            "sentinel_driver_queue_drops_total{{host=\"{}\",driver_instance=\"{instance}\"}}",
            drops_host
        ),
        |v| v == QUEUE_DROPS as f64,
    )
    .await;
    // The first rollup step starts the watermark (steps run every 15 s).
    eventually(&prometheus, "sentinel_rollup_watermark_timestamp_seconds", |v| {
        v > 0.0
    })
    .await;

    // Every documented metric is there (or, as documented, not yet).
    let mut missing = Vec::new();
    for metric in documented_metrics() {
        let series = if metric.histogram {
            format!("{}_count", metric.name)
        } else {
            metric.name.clone()
        };
        let present = !prometheus.query(&series).await.is_empty();
        if present == metric.absent_until_event {
            missing.push(format!(
                "{series}: {}",
                if present {
                    "present before its event"
                } else {
                    "absent"
                }
            ));
        }
    }
    assert!(
        missing.is_empty(),
        "documented metrics not as documented: {missing:#?}"
    );

    // Values against the oracle.
    let value = |promql: &'static str| {
        let prometheus = &prometheus;
        async move {
            prometheus
                .value(promql)
                .await
                .unwrap_or_else(|| panic!("{promql}: no single series"))
        }
    };
    for class in sentinel_core::RetentionClass::ALL {
        let rows = prometheus
            .value(&format!(
                "sentinel_ingest_rows_total{{class=\"{}\"}}",
                class.as_str()
            ))
            .await;
        assert_eq!(
            rows,
            Some(expected.rows[class.index()] as f64),
            "rows of {}",
            class.as_str()
        );
    }
    for reason in sentinel_core::QuarantineReason::ALL {
        let entries = prometheus
            .value(&format!(
                "sentinel_ingest_quarantined_total{{reason=\"{}\"}}",
                reason.as_str()
            ))
            .await;
        let sent = expected.quarantine.get(reason.as_str()).copied().unwrap_or(0);
        assert_eq!(entries, Some(sent as f64), "quarantined as {}", reason.as_str());
    }
    assert_eq!(
        value("sentinel_ingest_rows_bad_total").await,
        expected.rows_bad as f64
    );
    assert_eq!(
        value("sentinel_commit_batch_entries_sum").await,
        expected.accepted() as f64,
        "every accepted message went to the store in exactly one batch"
    );
    let batches = value("sentinel_batches_committed_total").await;
    assert!(batches >= (expected.accepted() as f64 / 500.0).ceil());
    assert_eq!(value("sentinel_commit_latency_seconds_count").await, batches);
    assert_eq!(value("sentinel_commit_batch_entries_count").await, batches);
    let mean_latency = value("sentinel_commit_latency_seconds_sum").await
        / value("sentinel_commit_latency_seconds_count").await;
    assert!(
        mean_latency > 0.0 && mean_latency < 10.0,
        "mean commit latency {mean_latency} s"
    );
    assert_eq!(
        value("sentinel_commit_latency_seconds_bucket{le=\"+Inf\"}").await,
        batches,
        "the +Inf bucket counts every batch"
    );
    assert_eq!(value("sentinel_lock_held").await, 1.0);
    assert_eq!(value("sentinel_core_epoch").await, 1.0, "the first acquisition");
    assert_eq!(value("sum(sentinel_bus_errors_total)").await, 0.0);
    assert_eq!(value("sum(sentinel_store_errors_total)").await, 0.0);
    assert_eq!(value("sentinel_inflight_batches").await, 0.0);
    assert_eq!(
        value("sentinel_stream_messages").await,
        0.0,
        "WorkQueue: acked messages left"
    );
    assert!(value("sentinel_stream_limit_messages").await > 0.0);
    assert!(value("sentinel_stream_limit_bytes").await > 0.0);
    assert!(
        value("sentinel_partitions_ahead_seconds").await > 2.0 * 86_400.0,
        "partitions exist through today + 3"
    );
    let watermark_lag = value("sentinel_rollup_watermark_lag_seconds").await;
    assert!(
        (0.0..600.0).contains(&watermark_lag),
        "watermark lag {watermark_lag} s"
    );
    let instances: BTreeSet<_> = registry
        .points()
        .map(|(_, p)| p)
        .filter(|p| &*p.host != sentinel_core::registry::SELF_HOST)
        .map(|p| (p.host.clone(), p.descriptor.assignment.driver_instance.clone()))
        .collect();
    assert_eq!(
        value("sum(sentinel_drivers)").await,
        instances.len() as f64,
        "every driver instance of the registry, in one state"
    );
    let age = value(r#"max(sentinel_driver_last_commit_age_seconds)"#).await;
    assert!(
        (0.0..600.0).contains(&age),
        "the oldest instance's last commit is {age} s old"
    );
    assert!(value(r#"sentinel_points{quality="live"}"#).await > 0.0);
    assert_eq!(
        value("sentinel_derived_readings_total").await,
        0.0,
        "no derived points here"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    eventually(&prometheus, "sentinel_transitions_published_total", |v| {
        v == transitions.total() as f64
    })
    .await;
    assert!(transitions.total() > 0);

    // Commands by outcome: a request for a point that takes none is refused; one for a
    // writable point sets an operator claim and, once written, its command is issued.
    let operator = async_nats::connect(env.nats.url())
        .await
        .expect("operator connects");
    for (id, point, value) in [
        ("m-1", "boiler1.flow_temp", 60.0),
        ("m-2", "boiler1.setpoint", 65.0),
    ] {
        operator
            .publish(
                sentinel_core::wire::command_request_subject("metrics-test"),
                command_request(id, point, value).into(),
            )
            .await
            .expect("request");
    }
    operator.flush().await.expect("flush");
    for (series, expected) in [
        (r#"sentinel_commands_total{outcome="refused"}"#, 1.0),
        (r#"sentinel_commands_total{outcome="issued"}"#, 1.0),
        (r#"sentinel_claims_total{outcome="set"}"#, 1.0),
    ] {
        eventually(&prometheus, series, |v| v == expected).await;
    }
    assert_eq!(value(r#"sentinel_claims_total{outcome="released"}"#).await, 0.0);
    assert_eq!(value(r#"sentinel_claims_total{outcome="expired"}"#).await, 0.0);
    // No driver answers here, so nothing is verified or diverged; both outcomes are exported.
    assert_eq!(
        value(r#"sentinel_command_verifications_total{outcome="verified"}"#).await,
        0.0
    );
    assert_eq!(
        value(r#"sentinel_command_verifications_total{outcome="diverged"}"#).await,
        0.0
    );

    // The rules load against the live series, and the security signal fires.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(SCRAPED_WITHIN_S);
    loop {
        let firing = prometheus.firing().await;
        if firing.iter().any(|a| a == "SentinelWrongInstance") {
            assert!(
                !firing
                    .iter()
                    .any(|a| a == "SentinelCoreDown" || a == "SentinelCommitErrors"),
                "a healthy core raises neither: {firing:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "SentinelWrongInstance never fired: {firing:?}; log: {}",
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    terminate(core).await;
}
