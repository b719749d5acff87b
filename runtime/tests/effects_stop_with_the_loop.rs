//! Effects run in emitted order and stop with the loop (ARCHITECTURE.md, "The runtime executes
//! effects in emitted order"; core runtime spec, "Losing the lock while running": the core
//! stops publishing and exits). Self-points and derived readings (`Effect::PublishObservation`)
//! go out through one ordered publisher that the loop stops when it exits, never as detached
//! tasks that outlive it.
//!
//! The bus here is the memory model behind a gate: a publish of an observation is *attempted*
//! when the runtime calls the bus, and *lands* only once the gate lets it through, as a slow
//! NATS connection would hold it. Both tests fail when `Effect::PublishObservation` is run as a
//! `tokio::spawn`ed task again: the first because the held publishes land after the loop
//! returned, the second because the later publishes overtake the held first one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sentinel_core::registry::{Descriptor, Kind, Registry, RetentionClass, SELF_HOST, SELF_INSTANCE};
use sentinel_core::{Config, Core, DeliveryTag, RestoredState, self_points};
use sentinel_models::bus::{MemoryBus, MemoryBusConfig, MemoryConsumer};
use sentinel_models::store::MemoryStore;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, BusError, Inbound, Lag, Lease as _, PublishAck, Store};
use sentinel_runtime::{RunOutcome, RuntimeConfig, run};
use tokio::sync::Semaphore;

/// Which observation publishes wait at the gate.
#[derive(Copy, Clone, Debug)]
enum Hold {
    /// Every one, until the test opens the gate.
    All,
    /// Only the first; the rest pass at once.
    First,
}

/// The memory bus with a gate in front of `publish_observation`.
#[derive(Clone)]
struct GatedBus {
    inner: MemoryBus,
    hold: Hold,
    gate: Arc<Semaphore>,
    attempted: Arc<AtomicU64>,
    /// Message ids in the order they reached the stream.
    landed: Arc<Mutex<Vec<String>>>,
}

impl GatedBus {
    fn new(inner: MemoryBus, hold: Hold) -> GatedBus {
        GatedBus {
            inner,
            hold,
            gate: Arc::new(Semaphore::new(0)),
            attempted: Arc::new(AtomicU64::new(0)),
            landed: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn open(&self) {
        self.gate.add_permits(Semaphore::MAX_PERMITS / 2);
    }

    fn attempted(&self) -> u64 {
        self.attempted.load(Ordering::SeqCst)
    }

    fn landed(&self) -> Vec<String> {
        self.landed.lock().expect("not poisoned").clone()
    }
}

impl Bus for GatedBus {
    type Consumer = MemoryConsumer;

    async fn bind(&self) -> Result<MemoryConsumer, BusError> {
        self.inner.bind().await
    }

    async fn ack(&self, tags: Vec<DeliveryTag>) -> Result<(), BusError> {
        self.inner.ack(tags).await
    }

    async fn publish(&self, subject: String, payload: Bytes) -> Result<(), BusError> {
        self.inner.publish(subject, payload).await
    }

    async fn publish_command(
        &self,
        subject: String,
        reply_to: String,
        payload: Bytes,
    ) -> Result<(), BusError> {
        self.inner.publish_command(subject, reply_to, payload).await
    }

    async fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
    ) -> Result<PublishAck, BusError> {
        let attempt = self.attempted.fetch_add(1, Ordering::SeqCst);
        if matches!(self.hold, Hold::All) || attempt == 0 {
            self.gate
                .acquire()
                .await
                .map_err(|_| BusError::Other("gate closed".into()))?
                .forget();
        }
        self.landed.lock().expect("not poisoned").push(msg_id.clone());
        Bus::publish_observation(&self.inner, subject, msg_id, payload).await
    }

    async fn lag(&self) -> Result<Lag, BusError> {
        self.inner.lag().await
    }

    async fn inbound(&self) -> Result<tokio::sync::mpsc::Receiver<Inbound>, BusError> {
        self.inner.inbound().await
    }
}

/// A registry of the core's five self-points and nothing else.
fn registry() -> Arc<Registry> {
    let descriptors = [
        self_points::LAG_PENDING,
        self_points::OLDEST_UNACKED_AGE,
        self_points::THROUGHPUT,
        self_points::QUARANTINE_COUNT,
        self_points::WRONG_INSTANCE_COUNT,
    ]
    .into_iter()
    .map(|id| {
        Descriptor::new(
            id,
            Kind::Number,
            RetentionClass::Diagnostic,
            SELF_HOST,
            SELF_INSTANCE,
        )
    })
    .collect();
    Arc::new(Registry::compile(1, "sha".into(), "hash".into(), descriptors).expect("a valid registry"))
}

/// A core holding a real lease of the memory store, publishing its self-points every 20 ms.
async fn start(
    hold: Hold,
) -> (
    GatedBus,
    MemoryStore,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<RunOutcome>,
) {
    start_with(hold, RuntimeConfig::default()).await
}

/// As [`start`], over `runtime` (its lock-check and drain bounds set here).
async fn start_with(
    hold: Hold,
    runtime: RuntimeConfig,
) -> (
    GatedBus,
    MemoryStore,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<RunOutcome>,
) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let bus = GatedBus::new(MemoryBus::new(MemoryBusConfig::default(), clock.clone()), hold);
    let store = MemoryStore::new("OBS", clock.clone());
    let lease = store.acquire().await.expect("the lock is free");
    let config = Config {
        self_points_interval_ms: 20,
        ..Config::default()
    };
    let core = Core::new(
        config,
        registry(),
        lease.epoch(),
        &RestoredState::default(),
        clock.now(),
    )
    .expect("a valid core");
    let consumer = bus.bind().await.expect("bound");
    let runtime = RuntimeConfig {
        lock_check_interval_ms: 20,
        drain_observations_ms: 2_000,
        ..runtime
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let handle = tokio::spawn(run(
        core,
        bus.clone(),
        consumer,
        store.clone(),
        lease,
        clock,
        runtime,
        async move {
            let _ = stop_rx.await;
        },
    ));
    (bus, store, stop_tx, handle)
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..500 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_observation_is_published_after_the_loop_stopped_on_a_lost_lock() {
    let (bus, store, _stop, handle) = start(Hold::All).await;
    // The first reading is held at the bus, and several rounds (five readings every 20 ms)
    // are emitted behind it.
    wait_for("a held publish", || bus.attempted() >= 1).await;
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(bus.landed().is_empty(), "the gate holds every publish");

    assert!(store.kill_lock_holder(), "the core held the lock");
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("the loop stops at its next lock check")
        .expect("the loop did not panic");
    assert_eq!(outcome.exit.code, 5, "{:?}", outcome.exit);

    // The bus would now let every held publish through: none may land, since the loop that
    // emitted them has stopped.
    bus.open();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        bus.landed(),
        Vec::<String>::new(),
        "a publish landed after the loop had stopped"
    );
    assert_eq!(bus.inner.last_seq(), 0, "nothing reached the stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observations_reach_the_bus_in_emitted_order_and_an_orderly_stop_sends_them_all() {
    let (bus, _store, stop, handle) = start(Hold::First).await;
    // The first reading is held; at least two more rounds are emitted behind it.
    wait_for("the first reading held", || bus.attempted() >= 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    bus.open();
    wait_for("some readings landed", || bus.landed().len() >= 10).await;
    stop.send(()).expect("the loop is running");
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("an orderly stop")
        .expect("the loop did not panic");
    assert_eq!(outcome.exit.code, 0, "{:?}", outcome.exit);

    let landed = bus.landed();
    let seqs: Vec<u64> = landed
        .iter()
        .map(|id| {
            id.rsplit(':')
                .next()
                .and_then(|seq| seq.parse().ok())
                .expect("a self-point message id ends with its sequence")
        })
        .collect();
    // Sequences are given in emitted order, from 1, with no gap: every reading emitted before
    // the stop landed, in that order.
    let expected: Vec<u64> = (1..=seqs.len() as u64).collect();
    assert_eq!(
        seqs, expected,
        "readings landed out of emitted order or went missing"
    );
    assert_eq!(bus.attempted(), landed.len() as u64, "every attempt landed");
}

/// A bus too slow for the core's own readings fills the publisher's bounded queue: the loop
/// drops what does not fit rather than wait (its lock checks must go on), and counts each drop
/// in the exporter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_publisher_queue_drops_and_counts_without_holding_up_the_loop() {
    let telemetry = sentinel_runtime::telemetry::Telemetry::new(Arc::new(SystemClock));
    let runtime = RuntimeConfig {
        observations_queued_max: 2,
        telemetry: Some(telemetry.clone()),
        ..RuntimeConfig::default()
    };
    let (bus, store, _stop, handle) = start_with(Hold::All, runtime).await;
    wait_for("a held publish", || bus.attempted() >= 1).await;
    // Five readings every 20 ms behind one held publish and a queue of two.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let dropped = |text: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix("sentinel_observation_publishes_dropped_total{} "))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("the drop counter is exported:\n{text}"))
    };
    let text = telemetry.encode().expect("encodes");
    assert!(dropped(&text) >= 10, "drops counted: {}", dropped(&text));
    // The loop went on: it still notices a lost lock at its next check.
    assert!(store.kill_lock_holder(), "the core held the lock");
    let outcome = tokio::time::timeout(Duration::from_secs(10), handle)
        .await
        .expect("the loop was not held up by the full queue")
        .expect("the loop did not panic");
    assert_eq!(outcome.exit.code, 5, "{:?}", outcome.exit);
}
