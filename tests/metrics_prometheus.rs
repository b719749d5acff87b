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
//!   no bus or store error, the lock held;
//! - the alert rules load against the live series: `SentinelWrongInstance` fires.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use sentinel_core::wire::{EnvelopeOut, queue_drops_point};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_tests::bin::workspace_root;
use sentinel_tests::harness::{Env, Transitions, now, spawn_core_on, terminate, wait_drained};
use sentinel_tests::prometheus::{PrometheusServer, free_port, http_get_with_headers};
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

    let metrics_port = free_port();
    let target = format!("127.0.0.1:{metrics_port}");
    let prometheus = PrometheusServer::start(std::slice::from_ref(&target)).await;
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let core = spawn_core_on(
        &env,
        &traffic::sample_registry_dir(),
        ACK_WAIT_MS,
        &[
            "--metrics-listen",
            &metrics_port.to_string(),
            // The exact-count oracle covers the traffic; self-points are tested on their own.
            "--self-points-interval-ms",
            "0",
        ],
        ("warn", Stdio::inherit()),
    );

    // The endpoint answers OpenMetrics on loopback.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let (head, body) = loop {
        if let Ok((200, head, body)) = http_get_with_headers(&target, "/metrics").await
            && body.contains("sentinel_core_epoch")
        {
            break (head, body);
        }
        assert!(tokio::time::Instant::now() < deadline, "no /metrics on {target}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(body.trim_end().ends_with("# EOF"));

    // The traffic, then one `queue_drops` reading of a driver instance, published last so it
    // is that instance's last committed one.
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let items = mix
        .messages
        .iter()
        .map(|m| (m.subject.clone(), m.msg_id.clone(), m.payload.clone()));
    publisher
        .publish_pipelined(items, 256)
        .await
        .expect("publish the traffic");
    let drops_point = registry
        .points()
        .map(|(_, p)| p)
        .find(|p| *p.id == *queue_drops_point(&p.host, &p.descriptor.assignment.driver_instance))
        .expect("the sample registry declares queue_drops points");
    let instance = drops_point.descriptor.assignment.driver_instance.clone();
    let mut drops = EnvelopeOut::new(
        &drops_point.id,
        &instance,
        2,
        1,
        now(),
        serde_json::json!(QUEUE_DROPS),
    );
    drops.unit = drops_point.unit_native.as_deref().map(str::to_owned);
    publisher
        .publish(
            &format!("obs.{}.{instance}", drops_point.host),
            &drops.msg_id(),
            Bytes::from(drops.to_bytes()),
        )
        .await
        .expect("publish the queue_drops reading");
    mix.expected.rows[drops_point.descriptor.retention.index()] += 1;
    // A few more misassigned messages than the traffic's (which sends one of each bad kind, so
    // wrong_instance alone would equal every other reason's count): a point of one host
    // published by another host's driver instance.
    let other = registry
        .points()
        .map(|(_, p)| p)
        .find(|p| p.host != drops_point.host && &*p.host != sentinel_core::registry::SELF_HOST)
        .expect("a point on another host");
    let other_instance = &other.descriptor.assignment.driver_instance;
    for seq in 1..=EXTRA_MISASSIGNED {
        let misassigned = EnvelopeOut::new(
            &drops_point.id,
            other_instance,
            3,
            seq,
            now(),
            serde_json::json!(1),
        );
        publisher
            .publish(
                &format!("obs.{}.{other_instance}", other.host),
                &misassigned.msg_id(),
                Bytes::from(misassigned.to_bytes()),
            )
            .await
            .expect("publish a misassigned reading");
    }
    *mix.expected.quarantine.entry("wrong_instance").or_default() += EXTRA_MISASSIGNED;
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
            drops_point.host
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
