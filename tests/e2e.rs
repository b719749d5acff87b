//! End-to-end: real nats-server and real PostgreSQL, each private to the test, driven by the
//! production startup sequence and runtime loop (in-process) or by the `sentinel` binary
//! (process tests). Checks the invariants the real system lets us observe (DESIGN.md §5):
//! exact counts per class, the view equals their sum, quarantine reasons, point_state, no
//! duplicate row and no transition published twice for the same key.

use std::time::Duration;

use sentinel_core::Config;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_io::bus::nats::NatsBus;
use sentinel_io::clock::SystemClock;
use sentinel_io::ports::{Bus, BusError, Lag};
use sentinel_io::startup;
use sentinel_io::store::postgres::PgStore;
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
    async fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: bytes::Bytes,
    ) -> Result<sentinel_io::bus::PublishAck, BusError> {
        self.0.publish_observation(subject, msg_id, payload).await
    }

    async fn lag(&self) -> Result<Lag, BusError> {
        self.0.lag().await
    }

    async fn inbound(&self) -> Result<tokio::sync::mpsc::Receiver<sentinel_io::ports::Inbound>, BusError> {
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
