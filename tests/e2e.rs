//! End-to-end: real nats-server and real PostgreSQL, each private to the test, driven by the
//! production startup sequence and runtime loop (in-process) or by the `sentinel` binary
//! (process tests). Checks the invariants the real system lets us observe (DESIGN.md §5):
//! exact counts per class, the view equals their sum, quarantine reasons, point_state, no
//! duplicate row and no transition published twice for the same key.

use std::time::Duration;

use sentinel_bus_nats::NatsBus;
use sentinel_core::{Config, Micros};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::clock::SystemClock;
use sentinel_ports::{Bus, BusError, Lag};
use sentinel_runtime::startup;
use sentinel_store_pg::PgStore;
use sentinel_tests::bin::sentinel_bin;
use sentinel_tests::harness::{
    DRAIN_TIMEOUT_S, Env, InProcessCore, Transitions, assert_exact_counts, committed, now, pg, spawn_core,
    terminate, wait_drained,
};
use sentinel_tests::traffic::{self, Traffic};

/// The exact-count oracle covers the traffic; self-points are tested on their own.
const NO_SELF_POINTS: &[&str] = &["--self-points-interval-ms", "0"];

async fn publish(env: &Env, traffic: &Traffic) {
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let items = traffic
        .messages
        .iter()
        .map(|m| (m.subject.clone(), m.msg_id.clone(), m.payload.clone()));
    let report = publisher
        .publish_pipelined(items, 256)
        .await
        .expect("publish traffic");
    assert_eq!(
        report.duplicates, traffic.expected.dropped_by_stream,
        "publisher retries dropped by the window"
    );
    assert_eq!(report.stored, traffic.expected.accepted());
}

async fn lag(bus: &NatsBus) -> Lag {
    bus.lag().await.unwrap_or_default()
}

/// Starts a core in-process over real adapters; returns a stop switch and its outcome.
async fn start_core<B: Bus>(bus: B, store: PgStore) -> InProcessCore {
    let started = startup::start(
        &store,
        startup::already_connected(&bus),
        Some(&traffic::sample_registry_dir()),
        // The exact-count oracle covers the traffic; self-points are tested on their own.
        Config {
            self_points_interval_ms: 0,
            ..Config::default()
        },
        &SystemClock,
    )
    .await
    .expect("core starts");
    InProcessCore::spawn(started, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_observations_with_every_bad_kind_land_exactly_once() {
    let env = Env::start(30_000).await;
    let bus = env.bus.clone();
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let traffic = traffic::generate(&traffic::sample_registry(), 10_000, 1, now());
    let core = start_core(bus.clone(), env.writer_store.clone()).await;
    let epoch = core.epoch;
    publish(&env, &traffic).await;
    wait_drained(&env, &traffic.expected).await;
    let outcome = core.stop().await;
    assert_exact_counts(&env, &traffic.expected).await;
    assert_eq!(
        outcome.metrics.wrong_instance(),
        traffic.expected.quarantine["wrong_instance"]
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    transitions.assert_at_most_once();
    let published_first = transitions.total();
    assert_eq!(published_first, outcome.metrics.transitions_published);
    assert!(published_first > 0);

    // Restart: the epoch moves on, nothing is redelivered, nothing is re-published.
    let core = start_core(bus.clone(), env.writer_store.clone()).await;
    let epoch2 = core.epoch;
    assert_eq!(epoch2, epoch + 1, "the epoch increments on each acquisition");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let outcome = core.stop().await;
    assert_eq!(outcome.metrics.delivered, 0);
    assert_exact_counts(&env, &traffic.expected).await;
    let mut conn = pg(&env.db.url).await;
    let restored: i64 = sqlx::query_scalar("SELECT count(*) FROM point_state WHERE quality = 'restored'")
        .fetch_one(&mut conn)
        .await
        .expect("restored");
    assert_eq!(
        restored as u64, traffic.expected.points_with_rows,
        "restart forces every known quality to restored"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        transitions.total(),
        published_first,
        "a restart publishes nothing again"
    );
}

/// A bus that loses every ack: a core over it commits and never acks, like a crash between
/// commit and ack on every batch.
#[derive(Clone)]
struct AckLosingBus(NatsBus);

impl Bus for AckLosingBus {
    type Consumer = <NatsBus as Bus>::Consumer;
    async fn bind(&self) -> Result<Self::Consumer, BusError> {
        self.0.bind().await
    }
    async fn ack(&self, _tags: Vec<sentinel_core::DeliveryTag>) -> Result<(), BusError> {
        Ok(())
    }
    async fn publish(&self, subject: String, payload: bytes::Bytes) -> Result<(), BusError> {
        self.0.publish(subject, payload).await
    }
    async fn publish_command(
        &self,
        subject: String,
        reply_to: String,
        payload: bytes::Bytes,
    ) -> Result<(), BusError> {
        self.0.publish_command(subject, reply_to, payload).await
    }
    async fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: bytes::Bytes,
    ) -> Result<sentinel_ports::PublishAck, BusError> {
        self.0.publish_observation(subject, msg_id, payload).await
    }

    async fn lag(&self) -> Result<Lag, BusError> {
        self.0.lag().await
    }

    async fn inbound(&self) -> Result<tokio::sync::mpsc::Receiver<sentinel_ports::Inbound>, BusError> {
        self.0.inbound().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_without_ack_is_redelivered_and_swallowed_by_the_unique_index() {
    let env = Env::start(1_000).await;
    let bus = env.bus.clone();
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let traffic = traffic::generate(&traffic::sample_registry(), 2_000, 1, now());
    let core = start_core(AckLosingBus(bus.clone()), env.writer_store.clone()).await;
    publish(&env, &traffic).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    while committed(&env.store).await < traffic.expected.accepted() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "first core did not commit everything"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = core.stop().await;
    assert_eq!(
        lag(&bus).await.pending + lag(&bus).await.ack_pending,
        traffic.expected.accepted(),
        "nothing was acked"
    );

    let core = start_core(bus.clone(), env.writer_store.clone()).await;
    wait_drained(&env, &traffic.expected).await;
    let second = core.stop().await;
    assert_exact_counts(&env, &traffic.expected).await;
    assert_eq!(
        second.metrics.rows_conflicted,
        traffic.expected.rows_total(),
        "every redelivered row was swallowed"
    );
    assert_eq!(second.metrics.rows_inserted.iter().sum::<u64>(), 0);
    assert_eq!(
        second.metrics.transitions_published, 0,
        "no transition for a row already committed"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    transitions.assert_at_most_once();
    assert_eq!(transitions.total(), first.metrics.transitions_published);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_then_restart_gives_the_same_exact_counts() {
    let bin = sentinel_bin();
    assert!(bin.exists(), "{} was built", bin.display());
    let env = Env::start(2_000).await;
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let traffic = traffic::generate(&traffic::sample_registry(), 10_000, 1, now());

    let mut core = spawn_core(&env, 2_000, NO_SELF_POINTS);
    publish(&env, &traffic).await;
    // Kill it mid-stream: some batches committed, some in flight, some not fetched.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    while committed(&env.store).await < traffic.expected.accepted() / 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first core made no progress"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    core.kill().expect("SIGKILL");
    let _ = core.wait();
    let at_kill = committed(&env.store).await;
    assert!(
        at_kill < traffic.expected.accepted(),
        "killed mid-stream (committed {at_kill})"
    );

    let core = spawn_core(&env, 2_000, NO_SELF_POINTS);
    wait_drained(&env, &traffic.expected).await;
    assert_exact_counts(&env, &traffic.expected).await;
    // SIGTERM: an orderly stop exits 0.
    terminate(core).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    transitions.assert_at_most_once();
}

/// One row of a derived point's input, or of a derived point, read back for the comparison.
struct LogRow {
    point_id: String,
    observed_us: i64,
    ingested_us: i64,
    instance: String,
    epoch: i32,
    seq: i64,
    quality: String,
    reason: Option<String>,
    value: Option<f64>,
    detail: Option<serde_json::Value>,
}

/// A class-table row as `log_rows` selects it, `applied` last.
type LogColumns = (
    String,
    i64,
    i64,
    String,
    i32,
    i64,
    String,
    Option<String>,
    Option<f64>,
    Option<String>,
    Option<i64>,
);

/// Rows of `points` from every class table, in the order the cores applied them (migration
/// 0007's `applied`, then the fold's order within a batch).
async fn log_rows(url: &str, points: &[String]) -> Vec<LogRow> {
    let mut conn = pg(url).await;
    let mut out = Vec::new();
    for table in [
        "observation_measurement",
        "observation_state",
        "observation_diagnostic",
    ] {
        let sql = format!(
            "SELECT point_id, (extract(epoch FROM observed_at) * 1000000)::bigint, \
             (extract(epoch FROM ingested_at) * 1000000)::bigint, driver_instance, source_epoch, \
             source_seq, quality::text, reason, value_num, detail::text, applied FROM {table}_named \
             WHERE point_id = ANY($1)"
        );
        let rows: Vec<LogColumns> = sqlx::query_as(sqlx::AssertSqlSafe(sql))
            .bind(points)
            .fetch_all(&mut conn)
            .await
            .expect("log rows");
        out.extend(rows.into_iter().map(|r| {
            (
                r.10,
                LogRow {
                    point_id: r.0,
                    observed_us: r.1,
                    ingested_us: r.2,
                    instance: r.3,
                    epoch: r.4,
                    seq: r.5,
                    quality: r.6,
                    reason: r.7,
                    value: r.8,
                    detail: r.9.map(|d| serde_json::from_str(&d).expect("detail is JSON")),
                },
            )
        }));
    }
    out.sort_by(|(a_applied, a), (b_applied, b)| {
        (
            a_applied.unwrap_or(i64::MIN),
            a.observed_us,
            a.ingested_us,
            &a.instance,
            a.epoch,
            a.seq,
        )
            .cmp(&(
                b_applied.unwrap_or(i64::MIN),
                b.observed_us,
                b.ingested_us,
                &b.instance,
                b.epoch,
                b.seq,
            ))
    });
    out.into_iter().map(|(_, row)| row).collect()
}

/// Issue 14: SIGKILL mid-stream, repeatedly, with the sample registry's derived points, then
/// drain: the derived points' rows are exactly those an uninterrupted run derives from the
/// same log in the order the cores applied it (same keys, values, gaps, `observed_at` and
/// provenance), none twice. Readings a kill lost between their trigger's commit and their
/// publish come back from restart step 5 (each restart logs how many it derived again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_then_restart_gives_the_derived_rows_of_an_uninterrupted_run() {
    use sentinel_core::derived::{Derivations, derived_key};
    use sentinel_core::registry::Registry;
    use sentinel_core::{CanonicalValue, DeliveryTag, ObsKey, ObsRow, Quality};
    use sentinel_tests::harness::spawn_core_on;
    use std::sync::Arc;

    let bin = sentinel_bin();
    assert!(bin.exists(), "{} was built", bin.display());
    let env = Env::start(2_000).await;
    let shipped = traffic::shipped_registry_dir();
    let traffic = traffic::generate(&traffic::sample_registry(), 10_000, 1, now());
    let log_dir = std::env::temp_dir().join(format!("sentinel-derived-kill-{}", std::process::id()));
    std::fs::create_dir_all(&log_dir).expect("log dir");
    let spawn = |n: usize| {
        let log = std::fs::File::create(log_dir.join(format!("core-{n}.log"))).expect("log file");
        spawn_core_on(&env, &shipped, 2_000, NO_SELF_POINTS, ("info", log.into()))
    };

    let mut core = spawn(0);
    publish(&env, &traffic).await;
    // Kill it three times mid-stream, each time after more has committed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    for kill in 1..=3u64 {
        while committed(&env.store).await < traffic.expected.accepted() * kill / 4 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "no progress before kill {kill}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        core.kill().expect("SIGKILL");
        let _ = core.wait();
        core = spawn(kill as usize);
    }
    // Drained: nothing pending and the log no longer growing (derived readings are published
    // after their trigger's commit).
    let mut last = 0;
    let mut stable = 0;
    while stable < 5 {
        assert!(tokio::time::Instant::now() < deadline, "not drained");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let lag = env.bus.lag().await.unwrap_or_default();
        let rows = committed(&env.store).await;
        if lag.pending == 0 && lag.ack_pending == 0 && rows == last && rows >= traffic.expected.accepted() {
            stable += 1;
        } else {
            stable = 0;
        }
        last = rows;
    }
    terminate(core).await;

    // The registry the cores ran, as stored.
    let mut conn = pg(&env.db.url).await;
    let version: i32 = sqlx::query_scalar("SELECT max(version) FROM registry_version")
        .fetch_one(&mut conn)
        .await
        .expect("registry version");
    let descriptors = sentinel_runtime::registry_dir::check_dir(&shipped).expect("shipped registry");
    let registry = Registry::compile(version, "test".into(), "test".into(), descriptors).expect("compiles");
    let derived: Vec<String> = registry
        .points()
        .filter(|(_, p)| p.descriptor.derived.is_some())
        .map(|(_, p)| p.id.to_string())
        .collect();
    let inputs: Vec<String> = registry
        .points()
        .filter_map(|(_, p)| p.descriptor.derived.as_ref())
        .flat_map(|d| d.inputs.clone())
        .collect();
    assert!(!derived.is_empty() && !inputs.is_empty());

    // The uninterrupted run: every committed input row, in the applied order, through one
    // `Derivations` that never restarts.
    let mut reference = Derivations::new(&registry);
    let mut expected = std::collections::BTreeMap::new();
    for row in log_rows(&env.db.url, &inputs).await {
        let point = registry.resolve(&row.point_id).expect("input point");
        let obs = ObsRow {
            point,
            point_id: Arc::from(row.point_id.as_str()),
            class: registry.point(point).descriptor.retention,
            ingested_at: Micros(row.ingested_us),
            observed_at: Micros(row.observed_us),
            device_time: None,
            value: row.value.map(CanonicalValue::Num),
            native_num: None,
            native_text: None,
            unit_native: None,
            quality: Quality::parse(&row.quality).expect("quality"),
            reason: None,
            detail: None,
            changed: true,
            registry_version: version,
            key: ObsKey {
                driver_instance: Arc::from(row.instance.as_str()),
                source_epoch: row.epoch as u32,
                source_seq: row.seq as u64,
            },
            skew_flagged: false,
            tag: DeliveryTag(0),
        };
        for reading in reference.on_committed(&obs) {
            let (epoch, seq) = derived_key(&reading.point_id, &reading.trigger);
            let key = (
                reading.point_id.to_string(),
                reading.instance.to_string(),
                epoch as i32,
                seq as i64,
            );
            let gap = reading.gap.map(|g| g.as_str().to_owned());
            let value = (
                reading.observed_at.0,
                reading.value,
                gap,
                reading.provenance.clone(),
            );
            assert!(
                expected.insert(key, value).is_none(),
                "one reading per trigger and point"
            );
        }
    }
    assert!(!expected.is_empty(), "the traffic triggered derived readings");

    // What the log holds for the derived points: exactly those, once each.
    let mut got = std::collections::BTreeMap::new();
    for row in log_rows(&env.db.url, &derived).await {
        let key = (row.point_id.clone(), row.instance.clone(), row.epoch, row.seq);
        let gap = (row.quality == "unavailable")
            .then(|| row.reason.clone())
            .flatten();
        let value = (
            row.observed_us,
            row.value,
            gap,
            row.detail.clone().unwrap_or(serde_json::Value::Null),
        );
        assert!(
            got.insert(key.clone(), value).is_none(),
            "a second row for {key:?}"
        );
    }
    let missing: Vec<_> = expected.keys().filter(|k| !got.contains_key(*k)).collect();
    let extra: Vec<_> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{} readings missing (first {:?}), {} not derived by the uninterrupted run (first {:?})",
        missing.len(),
        missing.first(),
        extra.len(),
        extra.first()
    );
    for (key, want) in &expected {
        assert_eq!(&got[key], want, "reading {key:?}");
    }
    let again: usize = (1..=3)
        .map(|n| {
            let log = std::fs::read_to_string(log_dir.join(format!("core-{n}.log"))).unwrap_or_default();
            log.lines()
                .filter_map(|l| l.split("derived_again=").nth(1))
                .filter_map(|v| v.split_whitespace().next()?.parse::<usize>().ok())
                .sum::<usize>()
        })
        .sum();
    eprintln!(
        "{} derived readings, each exactly as the uninterrupted run's; {again} derived again by restarts",
        expected.len()
    );
    let _ = std::fs::remove_dir_all(&log_dir);
}
