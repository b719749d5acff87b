//! What a running core shows Prometheus (issue 26; core runtime spec, "Backpressure" and
//! "Where the loss goes"; ingest spec, stage 5's `wrong_instance` "belongs in the alerting
//! path"). The binary serves [`Telemetry::encode`] on `--metrics-listen`
//! (`cli/src/metrics_http.rs`); this module names no HTTP framework.
//!
//! Owns: the `prometheus-client` registry (OpenMetrics text, no global state) and one collector
//! over three sources, each fact counted in exactly one place:
//!
//! - a copy of the pure core's own counters ([`sentinel_core::Metrics`]), its drivers table and
//!   its points by quality, taken by the runtime loop at most every
//!   [`SNAPSHOT_INTERVAL_MS`] (and once more when it stops); the core counts, this only reads;
//! - what only the runtime sees: bus and store errors by operation and kind, the lock held,
//!   the consumer's lag and the stream's fill (read by the loop's lag task), the rollup
//!   watermark (from each step);
//! - gauges read from the store every [`STORE_GAUGES_INTERVAL_MS`] by a task of the loop's:
//!   the retention marks and how far ahead daily partitions exist.
//!
//! Names follow Prometheus conventions: base units last (`_seconds`, `_bytes`, `_messages`),
//! counters end in `_total` (the encoder adds it), labels come from closed sets (outcome,
//! class, quarantine reason, state, error kind, operation) or from the registry (`host`,
//! `driver_instance`, bounded by its driver instances). No point value, payload or descriptor
//! content is ever a value or a label, with one declared exception: the driver library's
//! `queue_drops` self-point, the count of the one place the spec drops data, exported as
//! `sentinel_driver_queue_drops_total`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use sentinel_core::drivers::DriverState;
use sentinel_core::metrics::{
    BATCH_SIZE_BOUNDS, CLAIM_OUTCOMES, COMMIT_LATENCY_BOUNDS_US, Histogram, RULE_CLAIM_OUTCOMES, RULE_STATES,
};
use sentinel_core::{Core, Metrics, Micros, Quality, QuarantineReason, RetentionClass};
use sentinel_ports::clock::Clock;
use sentinel_ports::{BusError, Lag, RetainedTable, StoreError};

/// The content type of [`Telemetry::encode`]'s text (OpenMetrics 1.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The loop copies the core's counters at most this often (a scrape sees them at most this
/// old); the copy is a few hundred bytes plus one row per driver instance.
pub const SNAPSHOT_INTERVAL_MS: i64 = 250;

/// How often the store gauges (retention marks, partitions ahead) are read. Both move at most
/// daily; one cheap catalog read per interval.
pub const STORE_GAUGES_INTERVAL_MS: u64 = 15_000;

/// The bus operations whose errors are counted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum BusOp {
    Fetch,
    Ack,
    Publish,
    PublishObservation,
    Lag,
}

impl BusOp {
    const ALL: [BusOp; 5] = [
        BusOp::Fetch,
        BusOp::Ack,
        BusOp::Publish,
        BusOp::PublishObservation,
        BusOp::Lag,
    ];

    fn as_str(self) -> &'static str {
        match self {
            BusOp::Fetch => "fetch",
            BusOp::Ack => "ack",
            BusOp::Publish => "publish",
            BusOp::PublishObservation => "publish_observation",
            BusOp::Lag => "lag",
        }
    }
}

const BUS_KINDS: [&str; 5] = [
    "connection",
    "stream_full",
    "permission_denied",
    "timeout",
    "other",
];

fn bus_kind(error: Option<&BusError>) -> usize {
    match error {
        Some(BusError::Connection(_)) => 0,
        Some(BusError::StreamFull) => 1,
        Some(BusError::PermissionDenied { .. }) => 2,
        None | Some(BusError::Unacknowledged(_)) => 3,
        Some(BusError::Other(_)) => 4,
    }
}

/// The store operations whose errors are counted.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum StoreOp {
    Commit,
    Checkpoint,
    Control,
    Rollup,
    Retention,
    Compaction,
    Lease,
    Gauges,
    Partitions,
}

impl StoreOp {
    const ALL: [StoreOp; 9] = [
        StoreOp::Commit,
        StoreOp::Checkpoint,
        StoreOp::Control,
        StoreOp::Rollup,
        StoreOp::Retention,
        StoreOp::Compaction,
        StoreOp::Lease,
        StoreOp::Gauges,
        StoreOp::Partitions,
    ];

    fn as_str(self) -> &'static str {
        match self {
            StoreOp::Commit => "commit",
            StoreOp::Checkpoint => "checkpoint",
            StoreOp::Control => "control",
            StoreOp::Rollup => "rollup",
            StoreOp::Retention => "retention",
            StoreOp::Compaction => "compaction",
            StoreOp::Lease => "lease",
            StoreOp::Gauges => "gauges",
            StoreOp::Partitions => "partitions",
        }
    }
}

const STORE_KINDS: [&str; 5] = ["fenced", "lock_held", "schema_from_future", "lock_lost", "other"];

fn store_kind(error: Option<&StoreError>) -> usize {
    match error {
        Some(StoreError::Fenced { .. }) => 0,
        Some(StoreError::LockHeld) => 1,
        Some(StoreError::SchemaFromFuture { .. }) => 2,
        None => 3,
        // A compaction waiting for the stream is not a failure and is never counted; were it
        // reported, it would be among the rest.
        Some(StoreError::Other(_) | StoreError::StreamHoldsDay { .. }) => 4,
    }
}

/// One driver instance as exported (from the core's drivers table).
#[derive(Clone, Debug)]
struct DriverRow {
    host: Arc<str>,
    driver_instance: Arc<str>,
    state: DriverState,
    last_committed_at: Option<Micros>,
    queue_drops: Option<u64>,
}

/// What the loop copied from the core, and what it read from the bus and the store.
#[derive(Clone, Debug, Default)]
struct Snapshot {
    /// Whether the core was copied at all yet (a scrape during startup sees no core series).
    core_seen: bool,
    taken_at: Micros,
    metrics: Metrics,
    epoch: u32,
    registry_version: i32,
    in_flight_batches: usize,
    points_by_quality: [u64; Quality::ALL.len()],
    drivers: Vec<DriverRow>,
    lock_held: bool,
    lag: Option<Lag>,
    rollup_watermark: Option<Micros>,
    retention_marks: [Option<Micros>; 5],
    partitions_created_until: Option<Micros>,
}

struct Inner {
    clock: Arc<dyn Clock>,
    snapshot: Mutex<Snapshot>,
    bus_errors: [[AtomicU64; BUS_KINDS.len()]; BusOp::ALL.len()],
    store_errors: [[AtomicU64; STORE_KINDS.len()]; StoreOp::ALL.len()],
    /// Self-point and derived-reading publishes the loop dropped because the ordered
    /// publisher's queue was full (or the publisher had stopped).
    observations_dropped: AtomicU64,
}

impl Inner {
    fn snapshot(&self) -> MutexGuard<'_, Snapshot> {
        self.snapshot
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The exporter's state: cheap to clone, shared by the loop (which writes) and the endpoint
/// (which encodes).
#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
    registry: Arc<Registry>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

impl Telemetry {
    /// A registry with the core's collector; `clock` dates the scrape-time ages.
    pub fn new(clock: Arc<dyn Clock>) -> Telemetry {
        let inner = Arc::new(Inner {
            clock,
            snapshot: Mutex::new(Snapshot::default()),
            bus_errors: Default::default(),
            store_errors: Default::default(),
            observations_dropped: AtomicU64::new(0),
        });
        let mut registry = Registry::default();
        registry.register_collector(Box::new(CoreCollector(inner.clone())));
        Telemetry {
            inner,
            registry: Arc::new(registry),
        }
    }

    /// Copies the core's counters, drivers and qualities, unless the last copy is younger than
    /// [`SNAPSHOT_INTERVAL_MS`] (`force`: always, for the last one).
    pub fn observe_core(&self, core: &Core, now: Micros, force: bool) {
        let mut snapshot = self.inner.snapshot();
        if !force
            && snapshot.core_seen
            && now.saturating_sub(snapshot.taken_at) < SNAPSHOT_INTERVAL_MS * 1_000
        {
            return;
        }
        snapshot.core_seen = true;
        snapshot.taken_at = now;
        snapshot.metrics.clone_from(core.metrics());
        snapshot.epoch = core.epoch();
        snapshot.registry_version = core.registry().version;
        snapshot.in_flight_batches = core.in_flight_batches();
        snapshot.points_by_quality = core.quality_counts();
        let views = core.drivers().views();
        snapshot.drivers.clear();
        snapshot.drivers.extend(views.iter().map(|v| DriverRow {
            host: v.host.clone(),
            driver_instance: v.driver_instance.clone(),
            state: v.state,
            last_committed_at: v.last_committed_at,
            queue_drops: v.queue_drops,
        }));
    }

    pub fn set_lock_held(&self, held: bool) {
        self.inner.snapshot().lock_held = held;
    }

    pub fn record_lag(&self, lag: &Lag) {
        self.inner.snapshot().lag = Some(*lag);
    }

    pub fn record_rollup_watermark(&self, refreshed_to: Micros) {
        self.inner.snapshot().rollup_watermark = Some(refreshed_to);
    }

    pub fn record_store_gauges(&self, marks: [Option<Micros>; 5], partitions_created_until: Option<Micros>) {
        let mut snapshot = self.inner.snapshot();
        snapshot.retention_marks = marks;
        snapshot.partitions_created_until = partitions_created_until;
    }

    /// A bus operation failed (`None`: it timed out).
    pub fn bus_error(&self, op: BusOp, error: Option<&BusError>) {
        let op = BusOp::ALL.iter().position(|o| *o == op).unwrap_or(0);
        self.inner.bus_errors[op][bus_kind(error)].fetch_add(1, Ordering::Relaxed);
    }

    /// The loop dropped a self-point or derived-reading publish: its queue was full.
    pub fn observation_dropped(&self) {
        self.inner.observations_dropped.fetch_add(1, Ordering::Relaxed);
    }

    /// A store operation failed (`None`: the lock was found gone).
    pub fn store_error(&self, op: StoreOp, error: Option<&StoreError>) {
        let op = StoreOp::ALL.iter().position(|o| *o == op).unwrap_or(0);
        self.inner.store_errors[op][store_kind(error)].fetch_add(1, Ordering::Relaxed);
    }

    /// The OpenMetrics text of every series, `# EOF` last.
    pub fn encode(&self) -> Result<String, std::fmt::Error> {
        let mut text = String::with_capacity(16 * 1024);
        prometheus_client::encoding::text::encode(&mut text, &self.registry)?;
        Ok(text)
    }
}

#[derive(Debug)]
struct CoreCollector(Arc<Inner>);

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner").finish_non_exhaustive()
    }
}

type Labels<'a> = [(&'static str, &'a str)];

/// One metric family, written series by series.
struct Family<'e, 'a> {
    encoder: &'e mut DescriptorEncoder<'a>,
}

impl Family<'_, '_> {
    fn counter(&mut self, name: &str, help: &str, series: &[(&Labels<'_>, u64)]) -> std::fmt::Result {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Counter)?;
        for (labels, value) in series {
            let labels: Vec<(&str, &str)> = labels.to_vec();
            ConstCounter::new(*value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn gauge(&mut self, name: &str, help: &str, series: &[(&Labels<'_>, f64)]) -> std::fmt::Result {
        let mut family = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Gauge)?;
        for (labels, value) in series {
            let labels: Vec<(&str, &str)> = labels.to_vec();
            ConstGauge::new(*value).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn histogram<const N: usize>(
        &mut self,
        name: &str,
        help: &str,
        bounds: &[u64; N],
        scale: f64,
        histogram: &Histogram<N>,
    ) -> std::fmt::Result {
        let mut metric = self
            .encoder
            .encode_descriptor(name, help, None, MetricType::Histogram)?;
        let mut buckets: Vec<(f64, u64)> = bounds
            .iter()
            .zip(histogram.buckets)
            .map(|(&bound, count)| (bound as f64 * scale, count))
            .collect();
        buckets.push((f64::INFINITY, histogram.over));
        metric.encode_histogram::<prometheus_client::encoding::NoLabelSet>(
            histogram.sum as f64 * scale,
            histogram.count,
            &buckets,
            None,
        )
    }
}

fn seconds(at: Micros) -> f64 {
    at.0 as f64 / 1e6
}

impl Collector for CoreCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let s = self.0.snapshot().clone();
        let now = self.0.clock.now();
        let mut f = Family {
            encoder: &mut encoder,
        };

        f.gauge(
            "sentinel_lock_held",
            "1 while this process holds the single-writer lock and runs the core",
            &[(&[], if s.lock_held { 1.0 } else { 0.0 })],
        )?;
        if s.core_seen {
            encode_core(&mut f, &s, now)?;
        }
        encode_bus_and_store(&mut f, &self.0, &s, now)
    }
}

fn encode_core(f: &mut Family<'_, '_>, s: &Snapshot, now: Micros) -> std::fmt::Result {
    let m = &s.metrics;
    f.gauge(
        "sentinel_core_epoch",
        "The core epoch this process runs under (incremented on each lock acquisition)",
        &[(&[], f64::from(s.epoch))],
    )?;
    f.gauge(
        "sentinel_registry_version",
        "The registry version the core runs",
        &[(&[], f64::from(s.registry_version))],
    )?;
    f.counter(
        "sentinel_ingest_delivered",
        "Deliveries handed to the core, redeliveries included",
        &[(&[], m.delivered)],
    )?;
    let classes: Vec<_> = RetentionClass::ALL
        .iter()
        .map(|c| [("class", c.as_str())])
        .collect();
    let rows: Vec<(&Labels<'_>, u64)> = classes
        .iter()
        .zip(RetentionClass::ALL)
        .map(|(labels, c)| (labels.as_slice(), m.rows_in(c)))
        .collect();
    f.counter(
        "sentinel_ingest_rows",
        "Rows the store inserted (in a RETURNING set), by retention class",
        &rows,
    )?;
    f.counter(
        "sentinel_ingest_rows_bad",
        "Inserted rows with quality bad (stages 6-8)",
        &[(&[], m.rows_bad)],
    )?;
    let reasons: Vec<_> = QuarantineReason::ALL
        .iter()
        .map(|r| [("reason", r.as_str())])
        .collect();
    let quarantined: Vec<(&Labels<'_>, u64)> = reasons
        .iter()
        .zip(QuarantineReason::ALL)
        .map(|(labels, r)| (labels.as_slice(), m.quarantined_for(r)))
        .collect();
    f.counter(
        "sentinel_ingest_quarantined",
        "Quarantine entries committed, by reason",
        &quarantined,
    )?;
    f.counter(
        "sentinel_ingest_duplicates",
        "Duplicates: recognised by the dedup set (stage 3) or swallowed by the unique index",
        &[
            (&[("detected_by", "dedup_set")], m.duplicates_fast_path),
            (&[("detected_by", "unique_index")], m.rows_conflicted),
        ],
    )?;
    f.counter(
        "sentinel_wrong_instance",
        "Observations quarantined as wrong_instance (stage 5): a host publishing for an instance \
         the registry assigns elsewhere; the security signal, alert on any",
        &[(&[], m.wrong_instance())],
    )?;
    f.counter(
        "sentinel_batches_committed",
        "Batches committed and applied",
        &[(&[], m.batches_committed)],
    )?;
    f.histogram(
        "sentinel_commit_latency_seconds",
        "From a batch's Commit to its report reaching the core",
        &COMMIT_LATENCY_BOUNDS_US,
        1e-6,
        &m.commit_latency_us,
    )?;
    f.histogram(
        "sentinel_commit_batch_entries",
        "Rows plus quarantine entries per batch sent to the store",
        &BATCH_SIZE_BOUNDS,
        1.0,
        &m.batch_size,
    )?;
    f.gauge(
        "sentinel_inflight_batches",
        "Batches at the store now",
        &[(&[], s.in_flight_batches as f64)],
    )?;
    f.counter(
        "sentinel_acks",
        "Deliveries acked after their commit",
        &[(&[], m.acks)],
    )?;
    f.counter(
        "sentinel_transitions_published",
        "Transitions published on state.<point_id>",
        &[(&[], m.transitions_published)],
    )?;
    f.counter(
        "sentinel_derived_readings",
        "Derived readings computed from committed rows and published",
        &[(&[], m.derived_readings)],
    )?;
    f.counter(
        "sentinel_checkpoint_points",
        "Point states checkpointed",
        &[(&[], m.checkpoint_points)],
    )?;
    f.counter(
        "sentinel_control_events",
        "Control events the core asked the store to write",
        &[(&[], m.control_events)],
    )?;
    f.counter(
        "sentinel_partitions_created",
        "Daily partitions the running core made ahead (not those made at startup or on demand)",
        &[(&[], m.partitions_created)],
    )?;
    f.counter(
        "sentinel_partitions_lock_timeouts",
        "Partitions-ahead runs that found a parent table locked past the lock timeout (retried)",
        &[(&[], m.partitions_lock_timeouts)],
    )?;
    f.counter(
        "sentinel_compacted_days",
        "Closed days of a class the running core compacted (one compaction control event each)",
        &[(&[], m.compacted_days)],
    )?;
    f.counter(
        "sentinel_compacted_rows",
        "Hot rows the running core compacted",
        &[(&[], m.compacted_rows)],
    )?;
    f.counter(
        "sentinel_compacted_rollup_days",
        "Closed days whose minute rollups the running core compacted alone, at their own age (one compaction control event each)",
        &[(&[], m.compacted_rollup_days)],
    )?;
    f.counter(
        "sentinel_compacted_rollup_buckets",
        "Hot minute rollup buckets the running core compacted alone",
        &[(&[], m.compacted_rollup_buckets)],
    )?;
    f.counter(
        "sentinel_compaction_deferred",
        "Compaction requests deferred, by why: stream (a message ingested on the day may still be redelivered), failed (retried)",
        &[
            (&[("why", "stream")], m.compaction_stream_holds),
            (&[("why", "failed")], m.compaction_failures),
        ],
    )?;
    f.counter(
        "sentinel_commands",
        "Commands, by outcome: issued, refused, resent (outbox at restart, after a timeout, on a driver's hello), timed_out",
        &[
            (&[("outcome", "issued")], m.commands_issued),
            (&[("outcome", "refused")], m.commands_refused),
            (&[("outcome", "resent")], m.commands_resent),
            (&[("outcome", "timed_out")], m.commands_timed_out),
        ],
    )?;
    f.counter(
        "sentinel_command_verifications",
        "Verifications of applied commands, by outcome: verified (the point's live rows came within tolerance within verify_s) or diverged",
        &[
            (&[("outcome", "verified")], m.commands_verified),
            (&[("outcome", "diverged")], m.commands_diverged),
        ],
    )?;
    f.counter(
        "sentinel_command_answers",
        "Drivers' answers to commands: recorded as command_result, or ignored (another epoch, a command not awaited, a mismatched id)",
        &[
            (&[("outcome", "recorded")], m.command_results),
            (&[("outcome", "ignored")], m.command_answers_ignored),
        ],
    )?;
    f.counter(
        "sentinel_stale_epoch_suspicious",
        "stale_epoch answers the store did not bear out (no newer epoch recorded)",
        &[(&[], m.stale_epoch_suspicious)],
    )?;
    f.counter(
        "sentinel_driver_hellos_mute",
        "Hellos from drivers whose contract cannot answer commands (their commands are never retried)",
        &[(&[], m.driver_hellos_mute)],
    )?;
    let claim_labels: Vec<_> = CLAIM_OUTCOMES.iter().map(|o| [("outcome", *o)]).collect();
    let claims: Vec<(&Labels<'_>, u64)> = claim_labels
        .iter()
        .zip(m.claims)
        .map(|(labels, n)| (labels.as_slice(), n))
        .collect();
    f.counter(
        "sentinel_claims",
        "Claims on writable points decided, by outcome (set, released by the holder, expired)",
        &claims,
    )?;
    let rule_claim_labels: Vec<_> = RULE_CLAIM_OUTCOMES.iter().map(|o| [("outcome", *o)]).collect();
    let rule_claims: Vec<(&Labels<'_>, u64)> = rule_claim_labels
        .iter()
        .zip(m.rule_claims)
        .map(|(labels, n)| (labels.as_slice(), n))
        .collect();
    f.counter(
        "sentinel_rule_claims",
        "Rules' claim changes, by outcome (set, released, refused by the claims part, held by a fight limit)",
        &rule_claims,
    )?;
    let rule_state_labels: Vec<_> = RULE_STATES.iter().map(|s| [("state", *s)]).collect();
    let rules: Vec<(&Labels<'_>, f64)> = rule_state_labels
        .iter()
        .zip(m.rules)
        .map(|(labels, n)| (labels.as_slice(), n as f64))
        .collect();
    f.gauge(
        "sentinel_rules",
        "Rules by state (idle, pending, firing, warmup, held, input_lost)",
        &rules,
    )?;
    f.counter(
        "sentinel_driver_hellos",
        "Driver hellos received, by what they showed",
        &[
            (
                &[("outcome", "current")],
                m.driver_hellos.saturating_sub(
                    m.driver_hellos_unknown + m.driver_hellos_ahead + m.driver_reannouncements,
                ),
            ),
            (&[("outcome", "reannounced")], m.driver_reannouncements),
            (&[("outcome", "unknown_instance")], m.driver_hellos_unknown),
            (
                &[("outcome", "newer_core")],
                m.driver_hellos_ahead.saturating_sub(m.driver_hellos_other_start),
            ),
            (&[("outcome", "other_start")], m.driver_hellos_other_start),
        ],
    )?;
    f.counter(
        "sentinel_driver_availability",
        "Driver state changes, by outcome (written as availability control events, or coalesced past an instance's rate bound)",
        &[
            (&[("outcome", "written")], m.availability_events),
            (&[("outcome", "coalesced")], m.availability_coalesced),
        ],
    )?;
    let states = ["connecting", "connected", "ready", "lost"];
    f.gauge(
        "sentinel_drivers",
        "Driver instances by state (connecting, connected, ready, lost)",
        &[
            (&[("state", states[0])], m.drivers[0] as f64),
            (&[("state", states[1])], m.drivers[1] as f64),
            (&[("state", states[2])], m.drivers[2] as f64),
            (&[("state", states[3])], m.drivers[3] as f64),
        ],
    )?;
    let qualities: Vec<_> = Quality::ALL.iter().map(|q| [("quality", q.as_str())]).collect();
    let by_quality: Vec<(&Labels<'_>, f64)> = qualities
        .iter()
        .zip(s.points_by_quality)
        .map(|(labels, n)| (labels.as_slice(), n as f64))
        .collect();
    f.gauge(
        "sentinel_points",
        "Points by the quality the projection holds",
        &by_quality,
    )?;

    // Per driver instance: bounded by the registry's instances.
    let driver_labels: Vec<[(&'static str, &str); 2]> = s
        .drivers
        .iter()
        .map(|d| [("host", &*d.host), ("driver_instance", &*d.driver_instance)])
        .collect();
    let up: Vec<(&Labels<'_>, f64)> = driver_labels
        .iter()
        .zip(&s.drivers)
        .map(|(labels, d)| {
            (
                labels.as_slice(),
                if d.state == DriverState::Ready { 1.0 } else { 0.0 },
            )
        })
        .collect();
    f.gauge(
        "sentinel_driver_ready",
        "1 once the instance said hello at this epoch and its current data committed",
        &up,
    )?;
    let last: Vec<(&Labels<'_>, f64)> = driver_labels
        .iter()
        .zip(&s.drivers)
        .filter_map(|(labels, d)| d.last_committed_at.map(|at| (labels.as_slice(), seconds(at))))
        .collect();
    f.gauge(
        "sentinel_driver_last_commit_timestamp_seconds",
        "Ingest time of the newest committed row of the instance (absent before its first)",
        &last,
    )?;
    let age: Vec<(&Labels<'_>, f64)> = driver_labels
        .iter()
        .zip(&s.drivers)
        .filter_map(|(labels, d)| {
            d.last_committed_at
                .map(|at| (labels.as_slice(), now.saturating_sub(at).max(0) as f64 / 1e6))
        })
        .collect();
    f.gauge(
        "sentinel_driver_last_commit_age_seconds",
        "Seconds since the newest committed row of the instance, at scrape time",
        &age,
    )?;
    let drops: Vec<(&Labels<'_>, u64)> = driver_labels
        .iter()
        .zip(&s.drivers)
        .filter_map(|(labels, d)| d.queue_drops.map(|n| (labels.as_slice(), n)))
        .collect();
    f.counter(
        "sentinel_driver_queue_drops",
        "Observations the instance's disk queue dropped since it opened, as its queue_drops \
         self-point last reported (resets when the driver restarts)",
        &drops,
    )
}

fn encode_bus_and_store(
    f: &mut Family<'_, '_>,
    inner: &Inner,
    s: &Snapshot,
    now: Micros,
) -> std::fmt::Result {
    if let Some(lag) = &s.lag {
        f.gauge(
            "sentinel_consumer_pending_messages",
            "Messages in the stream not yet delivered to the core's durable consumer",
            &[(&[], lag.pending as f64)],
        )?;
        f.gauge(
            "sentinel_consumer_ack_pending_messages",
            "Messages delivered and not yet acked",
            &[(&[], lag.ack_pending as f64)],
        )?;
        f.gauge(
            "sentinel_consumer_oldest_unacked_age_seconds",
            "Age of the oldest unacked message (0 when none waits)",
            &[(&[], lag.oldest_unacked_age_ms.unwrap_or(0) as f64 / 1e3)],
        )?;
        f.gauge(
            "sentinel_stream_messages",
            "Messages the observation stream holds",
            &[(&[], lag.stream_messages as f64)],
        )?;
        f.gauge(
            "sentinel_stream_limit_messages",
            "The observation stream's message bound (discard-new: a full stream refuses)",
            &[(&[], lag.stream_messages_max as f64)],
        )?;
        f.gauge(
            "sentinel_stream_bytes",
            "Bytes the observation stream holds",
            &[(&[], lag.stream_bytes as f64)],
        )?;
        f.gauge(
            "sentinel_stream_limit_bytes",
            "The observation stream's byte bound",
            &[(&[], lag.stream_bytes_max as f64)],
        )?;
    }
    if let Some(watermark) = s.rollup_watermark {
        f.gauge(
            "sentinel_rollup_watermark_timestamp_seconds",
            "The rollup refresh watermark: buckets before it are refreshed",
            &[(&[], seconds(watermark))],
        )?;
        f.gauge(
            "sentinel_rollup_watermark_lag_seconds",
            "How far the rollup watermark is behind the clock, at scrape time",
            &[(&[], now.saturating_sub(watermark).max(0) as f64 / 1e6)],
        )?;
    }
    let tables: Vec<[(&'static str, String); 1]> = RetainedTable::ALL
        .iter()
        .map(|t| [("table", t.label().replace(' ', "_"))])
        .collect();
    let table_labels: Vec<[(&'static str, &str); 1]> =
        tables.iter().map(|[(k, v)]| [(*k, v.as_str())]).collect();
    let marks: Vec<(&Labels<'_>, f64)> = table_labels
        .iter()
        .zip(s.retention_marks)
        .filter_map(|(labels, mark)| mark.map(|m| (labels.as_slice(), seconds(m))))
        .collect();
    f.gauge(
        "sentinel_retention_mark_timestamp_seconds",
        "Per retained table, the first instant kept after its partition drops (absent before the first drop)",
        &marks,
    )?;
    if let Some(until) = s.partitions_created_until {
        f.gauge(
            "sentinel_partitions_created_until_timestamp_seconds",
            "Every raw class table has daily partitions up to this instant",
            &[(&[], seconds(until))],
        )?;
        f.gauge(
            "sentinel_partitions_ahead_seconds",
            "How far ahead of the clock daily partitions exist, at scrape time (negative: behind)",
            &[(&[], until.saturating_sub(now) as f64 / 1e6)],
        )?;
    }

    let mut bus = Vec::new();
    for (i, op) in BusOp::ALL.iter().enumerate() {
        for (k, kind) in BUS_KINDS.iter().enumerate() {
            bus.push((
                [("op", op.as_str()), ("kind", *kind)],
                inner.bus_errors[i][k].load(Ordering::Relaxed),
            ));
        }
    }
    let bus: Vec<(&Labels<'_>, u64)> = bus.iter().map(|(l, n)| (l.as_slice(), *n)).collect();
    f.counter(
        "sentinel_bus_errors",
        "Failed bus operations, by operation and kind",
        &bus,
    )?;
    f.counter(
        "sentinel_observation_publishes_dropped",
        "Self-point and derived-reading publishes dropped because the ordered publisher's queue was full",
        &[(&[], inner.observations_dropped.load(Ordering::Relaxed))],
    )?;
    let mut store = Vec::new();
    for (i, op) in StoreOp::ALL.iter().enumerate() {
        for (k, kind) in STORE_KINDS.iter().enumerate() {
            store.push((
                [("op", op.as_str()), ("kind", *kind)],
                inner.store_errors[i][k].load(Ordering::Relaxed),
            ));
        }
    }
    let store: Vec<(&Labels<'_>, u64)> = store.iter().map(|(l, n)| (l.as_slice(), *n)).collect();
    f.counter(
        "sentinel_store_errors",
        "Failed store operations, by operation and kind (commit: the core exits)",
        &store,
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sentinel_ports::clock::SystemClock;

    #[test]
    fn before_the_core_is_copied_only_process_series_are_shown_and_the_text_is_openmetrics() {
        let telemetry = Telemetry::new(Arc::new(SystemClock));
        telemetry.set_lock_held(true);
        telemetry.store_error(StoreOp::Commit, Some(&StoreError::Other("x".into())));
        let text = telemetry.encode().expect("encode");
        assert!(text.contains("sentinel_lock_held 1"), "{text}");
        assert!(
            text.contains(r#"sentinel_store_errors_total{op="commit",kind="other"} 1"#),
            "{text}"
        );
        assert!(!text.contains("sentinel_ingest_rows"), "no core yet: {text}");
        assert!(text.trim_end().ends_with("# EOF"), "{text}");
    }
}
