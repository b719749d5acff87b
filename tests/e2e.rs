//! End-to-end: real nats-server and real PostgreSQL, each private to the test, driven by the
//! production startup sequence and runtime loop (in-process) or by the `sentinel` binary
//! (process tests). Checks the invariants the real system lets us observe (DESIGN.md §5):
//! exact counts per class, the view equals their sum, quarantine reasons, point_state, no
//! duplicate row and no transition published twice for the same key.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use sentinel_core::{Config, Micros, RetentionClass};
use sentinel_io::bus::nats::{NatsBus, NatsBusConfig};
use sentinel_io::clock::{Clock, SystemClock};
use sentinel_io::driver::{ObservationPublisher, PublisherConfig};
use sentinel_io::ports::{Bus, BusError, Lag};
use sentinel_io::runtime::{self, RunOutcome, RuntimeConfig};
use sentinel_io::startup;
use sentinel_io::store::postgres::{PgStore, PgStoreConfig};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use sentinel_tests::traffic::{self, Expected, Traffic};
use tokio::sync::oneshot;

const DRAIN_TIMEOUT_S: u64 = 120;

struct Env {
    nats: NatsServer,
    db: TestDb,
    store: PgStore,
}

async fn env() -> Env {
    let nats = NatsServer::start().await;
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect store");
    store.migrate().await.expect("migrate");
    Env { nats, db, store }
}

fn bus_config(url: String, ack_wait_ms: u64) -> NatsBusConfig {
    NatsBusConfig {
        url,
        ack_wait_ms,
        ..NatsBusConfig::default()
    }
}

async fn bus(env: &Env, ack_wait_ms: u64) -> NatsBus {
    let bus = NatsBus::connect(bus_config(env.nats.url(), ack_wait_ms))
        .await
        .expect("connect bus");
    bus.ensure_stream().await.expect("stream");
    bus
}

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

/// Counts transitions on `state.>` by message key, from before the first core starts.
#[derive(Clone, Default)]
struct Transitions(Arc<Mutex<BTreeMap<(String, u64, u64), u32>>>);

impl Transitions {
    async fn subscribe(url: &str) -> Transitions {
        let client = async_nats::connect(url).await.expect("subscriber connects");
        let mut sub = client.subscribe("state.>").await.expect("subscribe");
        // `flush()` does not wait for the server; a probe on this connection does (the server
        // handles one connection's SUB and PUB in order).
        client
            .publish("state._sync", bytes::Bytes::new())
            .await
            .expect("probe");
        let probe = tokio::time::timeout(Duration::from_secs(10), sub.next())
            .await
            .expect("probe returns")
            .expect("subscription open");
        assert_eq!(probe.subject.as_str(), "state._sync");
        let counts = Transitions::default();
        let sink = counts.clone();
        tokio::spawn(async move {
            let _client = client;
            while let Some(message) = sub.next().await {
                let t: serde_json::Value =
                    serde_json::from_slice(&message.payload).expect("transition is JSON");
                let key = (
                    t["key"]["driver_instance"]
                        .as_str()
                        .expect("key.driver_instance")
                        .to_owned(),
                    t["key"]["source_epoch"].as_u64().expect("key.source_epoch"),
                    t["key"]["source_seq"].as_u64().expect("key.source_seq"),
                );
                *sink.0.lock().expect("lock").entry(key).or_default() += 1;
            }
        });
        counts
    }

    fn total(&self) -> u64 {
        self.0.lock().expect("lock").values().map(|&n| u64::from(n)).sum()
    }

    fn assert_at_most_once(&self) {
        let counts = self.0.lock().expect("lock");
        let twice: Vec<_> = counts.iter().filter(|&(_, &n)| n > 1).take(5).collect();
        assert!(
            twice.is_empty(),
            "transitions published more than once: {twice:?}"
        );
    }
}

async fn committed(store: &PgStore) -> u64 {
    let rows = store.row_counts().await.expect("row counts").total();
    let quarantined: u64 = store
        .quarantine_counts()
        .await
        .expect("quarantine")
        .iter()
        .map(|(_, n)| n)
        .sum();
    rows + quarantined
}

async fn lag(bus: &NatsBus) -> Lag {
    bus.lag().await.unwrap_or_default()
}

/// Waits until everything accepted is committed and the consumer has nothing pending.
async fn wait_drained(store: &PgStore, bus: &NatsBus, expected: &Expected) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    loop {
        let done = committed(store).await;
        let lag = lag(bus).await;
        if done == expected.accepted() && lag.pending == 0 && lag.ack_pending == 0 {
            return;
        }
        assert!(
            done <= expected.accepted(),
            "more committed ({done}) than accepted ({})",
            expected.accepted()
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "not drained: {done}/{} committed, {lag:?}",
            expected.accepted()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn assert_exact_counts(env: &Env, expected: &Expected) {
    let rows = env.store.row_counts().await.expect("row counts");
    for class in RetentionClass::ALL {
        assert_eq!(
            rows.get(class),
            expected.rows[class.index()],
            "rows in observation_{}",
            class.as_str()
        );
    }
    let mut conn = sqlx_connect(&env.db.url).await;
    let view: i64 = sqlx::query_scalar("SELECT count(*) FROM observation")
        .fetch_one(&mut conn)
        .await
        .expect("view");
    assert_eq!(
        view as u64,
        rows.total(),
        "the observation view equals the sum of the three"
    );
    let distinct: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT DISTINCT driver_instance, source_epoch, source_seq FROM observation) k",
    )
    .fetch_one(&mut conn)
    .await
    .expect("distinct keys");
    assert_eq!(distinct as u64, rows.total(), "no two rows share a message key");
    let bad: i64 = sqlx::query_scalar("SELECT count(*) FROM observation WHERE quality = 'bad'")
        .fetch_one(&mut conn)
        .await
        .expect("bad rows");
    assert_eq!(bad as u64, expected.rows_bad);
    let unavailable: i64 =
        sqlx::query_scalar("SELECT count(*) FROM observation WHERE quality = 'unavailable'")
            .fetch_one(&mut conn)
            .await
            .expect("unavailable rows");
    assert_eq!(unavailable as u64, expected.rows_unavailable);
    let converted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM observation WHERE unit_native = 'degF' AND quality = 'live' \
         AND abs(value_num - (native_num - 32) * 5.0 / 9.0) > 1e-9",
    )
    .fetch_one(&mut conn)
    .await
    .expect("conversion check");
    assert_eq!(
        converted, 0,
        "every °F reading is stored in °C beside its native value"
    );
    let quarantine: BTreeMap<&'static str, u64> = env
        .store
        .quarantine_counts()
        .await
        .expect("quarantine")
        .into_iter()
        .map(|(reason, n)| (reason.as_str(), n))
        .collect();
    assert_eq!(quarantine, expected.quarantine, "quarantine by reason");
    let full_payloads: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM quarantine WHERE reason <> 'oversized' AND length(payload) <> payload_bytes",
    )
    .fetch_one(&mut conn)
    .await
    .expect("payloads");
    assert_eq!(full_payloads, 0, "quarantine keeps the full native payload");
    let states: i64 = sqlx::query_scalar("SELECT count(*) FROM point_state WHERE quality <> 'unknown'")
        .fetch_one(&mut conn)
        .await
        .expect("point_state");
    assert_eq!(
        states as u64, expected.points_with_rows,
        "a checkpointed state for every point that has rows"
    );
}

async fn sqlx_connect(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url).await.expect("connect")
}

/// Starts a core in-process over real adapters; returns a stop switch and its outcome.
async fn start_core<B: Bus>(
    bus: B,
    store: PgStore,
) -> (oneshot::Sender<()>, tokio::task::JoinHandle<RunOutcome>, u32) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started = startup::start(
        &bus,
        &store,
        Some(&traffic::sample_registry_dir()),
        Config::default(),
        clock.as_ref(),
    )
    .await
    .expect("core starts");
    let epoch = started.core.epoch();
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let handle = tokio::spawn(runtime::run(
        started.core,
        bus,
        started.consumer,
        store,
        started.lease,
        clock,
        RuntimeConfig::default(),
        async move {
            let _ = stop_rx.await;
        },
    ));
    (stop_tx, handle, epoch)
}

async fn stop(stop_tx: oneshot::Sender<()>, handle: tokio::task::JoinHandle<RunOutcome>) -> RunOutcome {
    let _ = stop_tx.send(());
    let outcome = tokio::time::timeout(Duration::from_secs(30), handle)
        .await
        .expect("core stops")
        .expect("join");
    assert_eq!(outcome.exit.code, 0, "orderly stop: {}", outcome.exit.why);
    outcome
}

fn now() -> Micros {
    SystemClock.now()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_observations_with_every_bad_kind_land_exactly_once() {
    let env = env().await;
    let bus = bus(&env, 30_000).await;
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let traffic = traffic::generate(&traffic::sample_registry(), 10_000, 1, now());
    let (stop_tx, handle, epoch) = start_core(bus.clone(), env.store.clone()).await;
    publish(&env, &traffic).await;
    wait_drained(&env.store, &bus, &traffic.expected).await;
    let outcome = stop(stop_tx, handle).await;
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
    let (stop_tx, handle, epoch2) = start_core(bus.clone(), env.store.clone()).await;
    assert_eq!(epoch2, epoch + 1, "the epoch increments on each acquisition");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let outcome = stop(stop_tx, handle).await;
    assert_eq!(outcome.metrics.delivered, 0);
    assert_exact_counts(&env, &traffic.expected).await;
    let mut conn = sqlx_connect(&env.db.url).await;
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
    async fn lag(&self) -> Result<Lag, BusError> {
        self.0.lag().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_without_ack_is_redelivered_and_swallowed_by_the_unique_index() {
    let env = env().await;
    let bus = bus(&env, 1_000).await;
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let traffic = traffic::generate(&traffic::sample_registry(), 2_000, 1, now());
    let (stop_tx, handle, _) = start_core(AckLosingBus(bus.clone()), env.store.clone()).await;
    publish(&env, &traffic).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    while committed(&env.store).await < traffic.expected.accepted() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "first core did not commit everything"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let first = stop(stop_tx, handle).await;
    assert_eq!(
        lag(&bus).await.pending + lag(&bus).await.ack_pending,
        traffic.expected.accepted(),
        "nothing was acked"
    );

    let (stop_tx, handle, _) = start_core(bus.clone(), env.store.clone()).await;
    wait_drained(&env.store, &bus, &traffic.expected).await;
    let second = stop(stop_tx, handle).await;
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

fn spawn_core(env: &Env, ack_wait_ms: u64) -> Child {
    Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args([
            "run",
            "--registry",
            "registry",
            "--ack-wait-ms",
            &ack_wait_ms.to_string(),
        ])
        .env("SENTINEL_DATABASE_URL", &env.db.url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env("SENTINEL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sentinel run")
}

fn wait_exit(child: &mut Child, timeout: Duration) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_stream_then_restart_gives_the_same_exact_counts() {
    let bin = sentinel_bin();
    assert!(bin.exists(), "{} was built", bin.display());
    let env = env().await;
    let bus = bus(&env, 2_000).await;
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let traffic = traffic::generate(&traffic::sample_registry(), 10_000, 1, now());

    let mut core = spawn_core(&env, 2_000);
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

    let mut core = spawn_core(&env, 2_000);
    wait_drained(&env.store, &bus, &traffic.expected).await;
    assert_exact_counts(&env, &traffic.expected).await;
    // SIGTERM: an orderly stop exits 0.
    let pid = core.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = wait_exit(&mut core, Duration::from_secs(30)).expect("core exits after SIGTERM");
    assert!(status.success(), "orderly stop exits 0, got {status}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    transitions.assert_at_most_once();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_core_exits_non_zero_at_once() {
    let bin = sentinel_bin();
    assert!(bin.exists());
    let env = env().await;
    let bus = bus(&env, 30_000).await;
    let mut first = spawn_core(&env, 30_000);
    // Wait until the first core holds the lock and has bound the consumer.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let stream = bus.jetstream().get_stream("OBS").await.expect("stream");
    while stream.consumer_info("sentinel-core").await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "first core never bound its consumer"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut second = spawn_core(&env, 30_000);
    let status = wait_exit(&mut second, Duration::from_secs(30)).expect("the second core exits at once");
    assert_eq!(status.code(), Some(10), "lock held: exit code 10");
    assert!(
        wait_exit(&mut first, Duration::from_millis(200)).is_none(),
        "the first core keeps running"
    );
    first.kill().expect("kill first");
    let _ = first.wait();
}
