//! The Bus port's conformance suite (DESIGN.md §6): every test body is written once, generic
//! over a [`Backend`], and runs against the in-memory model (`MemoryBus`, manual clock) and
//! against real JetStream (`NatsBus` on a private nats-server per test). The memory model is
//! trusted by the simulator only because these pass on both: redelivery after ack_wait with
//! the same stream sequence and timestamp and an incremented delivered_count, the duplicate
//! window, discard-new on a full stream, acks removing messages (WorkQueue) and lag counts,
//! re-binding after a crash, and core-side publishes bypassing the stream.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::{Delivery, DeliveryTag, Micros};
use sentinel_driver::{ObservationPublisher, ObservationSink, PublisherConfig, msg_id};
use sentinel_models::{MemoryBus, MemoryBusConfig};
use sentinel_ports::PublishAck;
use sentinel_ports::clock::Clock;
use sentinel_ports::{Bus, BusError, Consumer, Lag};
use sentinel_tests::nats::{NatsServer, subscribe_synced};

const ACK_WAIT_MS: u64 = 500;
/// Longer than ack_wait, so everything in flight is due again.
const PAST_ACK_WAIT_MS: u64 = 800;

/// Backend-specific setup; the test bodies below are generic over it.
trait Backend: Sized + Send + Sync {
    type Bus: Bus;
    type Capture: Send;

    /// A fresh stream and consumer with ack_wait 500 ms and at most `max_msgs` messages.
    fn new(max_msgs: u64) -> impl Future<Output = Self> + Send;
    fn bus(&self) -> &Self::Bus;
    /// A driver's publish with a message id.
    fn publish(
        &self,
        subject: &str,
        msg_id: &str,
        payload: &str,
    ) -> impl Future<Output = Result<PublishAck, BusError>> + Send;
    /// Lets `ms` of bus time pass (manual clock for the model, real time for NATS).
    fn advance_ms(&self, ms: u64) -> impl Future<Output = ()> + Send;
    /// A new bus handle as a restarted core would have it (the old one's tags are gone).
    fn restarted_bus(&self) -> impl Future<Output = Self::Bus> + Send;
    /// Starts capturing core-side publishes on `state.>`.
    fn capture_transitions(&self) -> impl Future<Output = Self::Capture> + Send;
    fn next_transition(
        &self,
        capture: &mut Self::Capture,
    ) -> impl Future<Output = Option<(String, Bytes)>> + Send;
    /// Whether `ingested_at` comes from a clock the test controls (exact assertions) or the
    /// server's wall clock (range assertions).
    fn now(&self) -> Micros;
}

// ---------------------------------------------------------------- the in-memory model

struct ManualClock(AtomicI64);

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        Micros(self.0.load(Ordering::SeqCst))
    }

    fn start_token(&self) -> u64 {
        1
    }
}

struct MemoryBackend {
    bus: MemoryBus,
    clock: Arc<ManualClock>,
}

impl Backend for MemoryBackend {
    type Bus = MemoryBus;
    type Capture = ();

    async fn new(max_msgs: u64) -> Self {
        // 2026-11-30T03:00:00Z: a fixed start, so runs are identical.
        let clock = Arc::new(ManualClock(AtomicI64::new(1_796_007_600_000_000)));
        let config = MemoryBusConfig {
            max_msgs,
            ack_wait_ms: ACK_WAIT_MS,
            ..MemoryBusConfig::default()
        };
        MemoryBackend {
            bus: MemoryBus::new(config, clock.clone()),
            clock,
        }
    }

    fn bus(&self) -> &MemoryBus {
        &self.bus
    }

    async fn publish(&self, subject: &str, msg_id: &str, payload: &str) -> Result<PublishAck, BusError> {
        ObservationSink::publish_observation(
            &self.bus,
            subject,
            msg_id,
            Bytes::copy_from_slice(payload.as_bytes()),
        )
        .await
    }

    async fn advance_ms(&self, ms: u64) {
        self.clock.0.fetch_add(ms as i64 * 1_000, Ordering::SeqCst);
        self.bus.poke();
    }

    async fn restarted_bus(&self) -> MemoryBus {
        self.bus.forget_tags();
        self.bus.clone()
    }

    async fn capture_transitions(&self) {
        self.bus.take_published();
    }

    async fn next_transition(&self, _capture: &mut ()) -> Option<(String, Bytes)> {
        let published = self.bus.take_published();
        assert!(published.len() <= 1, "one transition at a time in these tests");
        published
            .into_iter()
            .next()
            .map(|message| (message.subject, message.payload))
    }

    fn now(&self) -> Micros {
        self.clock.now()
    }
}

// ---------------------------------------------------------------- real JetStream

struct NatsBackend {
    config: NatsBusConfig,
    bus: NatsBus,
    publisher: ObservationPublisher,
    // Last: dropped after the clients, so they do not see the server vanish mid-test.
    server: NatsServer,
}

impl Backend for NatsBackend {
    type Bus = NatsBus;
    /// The client is kept with its subscription so the connection stays open.
    type Capture = (async_nats::Client, async_nats::Subscriber);

    async fn new(max_msgs: u64) -> Self {
        let server = NatsServer::start().await;
        let config = NatsBusConfig {
            url: server.url(),
            ack_wait_ms: ACK_WAIT_MS,
            max_msgs,
            // Small enough to fit a nearly full test disk; the tests bound by message count.
            max_bytes: 64 * 1024 * 1024,
            ..NatsBusConfig::default()
        };
        let bus = NatsBus::connect(config.clone())
            .await
            .expect("connect to the private nats-server");
        bus.ensure_stream().await.expect("create the observation stream");
        let publisher = ObservationPublisher::connect(&server.url(), PublisherConfig::default())
            .await
            .expect("connect the driver-side publisher");
        NatsBackend {
            config,
            bus,
            publisher,
            server,
        }
    }

    fn bus(&self) -> &NatsBus {
        &self.bus
    }

    async fn publish(&self, subject: &str, msg_id: &str, payload: &str) -> Result<PublishAck, BusError> {
        self.publisher
            .publish(subject, msg_id, Bytes::copy_from_slice(payload.as_bytes()))
            .await
    }

    async fn advance_ms(&self, ms: u64) {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }

    async fn restarted_bus(&self) -> NatsBus {
        let _ = &self.server;
        NatsBus::connect(self.config.clone())
            .await
            .expect("reconnect to the private nats-server")
    }

    async fn capture_transitions(&self) -> (async_nats::Client, async_nats::Subscriber) {
        let client = async_nats::connect(self.server.url())
            .await
            .expect("connect a subscriber");
        let subscriber = subscribe_synced(&client, "state.>", "state._sync", b"").await;
        (client, subscriber)
    }

    async fn next_transition(
        &self,
        (_client, subscriber): &mut (async_nats::Client, async_nats::Subscriber),
    ) -> Option<(String, Bytes)> {
        let message = tokio::time::timeout(Duration::from_secs(5), subscriber.next())
            .await
            .ok()??;
        Some((message.subject.to_string(), message.payload))
    }

    fn now(&self) -> Micros {
        sentinel_ports::clock::SystemClock.now()
    }
}

// ---------------------------------------------------------------- helpers

fn subject(n: u64) -> String {
    format!("obs.host-a.drv-{}", n % 2)
}

/// Publishes `count` observations with distinct ids, payload `p<i>`.
async fn publish_n<B: Backend>(backend: &B, count: u64) -> Vec<PublishAck> {
    let mut acks = Vec::new();
    for i in 1..=count {
        let ack = backend
            .publish(
                &subject(i),
                &msg_id(&format!("drv-{}", i % 2), 1, i),
                &format!("p{i}"),
            )
            .await
            .expect("publish into a stream with room");
        assert!(!ack.duplicate);
        acks.push(ack);
    }
    acks
}

/// Fetches until `count` deliveries arrived (JetStream may split them over pulls).
async fn fetch_n<C: Consumer>(consumer: &mut C, count: usize) -> Vec<Delivery> {
    let mut out = Vec::new();
    for _ in 0..20 {
        if out.len() >= count {
            break;
        }
        out.extend(consumer.fetch(count - out.len(), 500).await.expect("fetch"));
    }
    assert_eq!(
        out.len(),
        count,
        "expected {count} deliveries, got {:?}",
        seqs(&out)
    );
    out
}

fn seqs(deliveries: &[Delivery]) -> Vec<u64> {
    deliveries.iter().map(|d| d.stream_seq).collect()
}

fn tags(deliveries: &[Delivery]) -> Vec<DeliveryTag> {
    deliveries.iter().map(|d| d.tag).collect()
}

/// Waits until lag reports `pending` and `ack_pending` (plain JetStream acks are applied
/// asynchronously by the server).
async fn expect_lag<B: Bus>(bus: &B, pending: u64, ack_pending: u64) -> Lag {
    let mut lag = Lag::default();
    for _ in 0..100 {
        lag = bus.lag().await.expect("lag");
        if lag.pending == pending && lag.ack_pending == ack_pending {
            return lag;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("lag stayed at {lag:?}, expected pending {pending}, ack_pending {ack_pending}");
}

// ---------------------------------------------------------------- the bodies

/// Unacked deliveries come back after ack_wait with the same stream sequence and timestamp
/// and an incremented delivered_count; not before.
async fn redelivery_after_ack_wait<B: Backend>() {
    let backend = B::new(1_000).await;
    let before = backend.now();
    publish_n(&backend, 3).await;
    let after = backend.now();
    let mut consumer = backend.bus().bind().await.expect("bind");

    let first = fetch_n(&mut consumer, 3).await;
    assert_eq!(seqs(&first), vec![1, 2, 3]);
    for (i, delivery) in first.iter().enumerate() {
        assert_eq!(delivery.delivered_count, 1);
        assert_eq!(delivery.payload, Bytes::from(format!("p{}", i + 1)));
        assert_eq!(&*delivery.subject, subject(i as u64 + 1));
        assert!(delivery.ingested_at >= before.add_ms(-1) && delivery.ingested_at <= after.add_ms(1));
    }
    assert!(first.windows(2).all(|w| w[0].ingested_at <= w[1].ingested_at));

    // Still in flight: nothing to deliver before ack_wait passes.
    let early = consumer.fetch(10, 50).await.expect("fetch");
    assert!(
        early.is_empty(),
        "redelivered before ack_wait: {:?}",
        seqs(&early)
    );

    for round in 2..=3 {
        backend.advance_ms(PAST_ACK_WAIT_MS).await;
        let again = fetch_n(&mut consumer, 3).await;
        assert_eq!(seqs(&again), vec![1, 2, 3]);
        for (old, new) in first.iter().zip(&again) {
            assert_eq!(
                new.ingested_at, old.ingested_at,
                "timestamp changed on redelivery"
            );
            assert_eq!(new.payload, old.payload);
            assert_eq!(new.subject, old.subject);
            assert_eq!(new.delivered_count, round);
            assert_ne!(new.tag, old.tag);
        }
        if round == 3 {
            backend.bus().ack(tags(&again)).await.expect("ack");
        }
    }
    let lag = expect_lag(backend.bus(), 0, 0).await;
    assert_eq!(lag.oldest_unacked_age_ms, None);
}

/// A republish with the same Nats-Msg-Id inside the window is accepted and dropped, answering
/// with the original sequence; the stored message is the first one.
async fn duplicate_window_drops_republish<B: Backend>() {
    let backend = B::new(1_000).await;
    let id = msg_id("drv-0", 7, 42);
    let original = backend
        .publish("obs.host-a.drv-0", &id, "first")
        .await
        .expect("publish");
    assert!(!original.duplicate);
    backend.advance_ms(10).await;
    let retry = backend
        .publish("obs.host-a.drv-0", &id, "retry")
        .await
        .expect("republish");
    assert!(retry.duplicate, "republish not detected as duplicate");
    assert_eq!(retry.seq, original.seq);
    let other = backend
        .publish("obs.host-a.drv-0", &msg_id("drv-0", 7, 43), "next")
        .await
        .expect("publish");
    assert!(!other.duplicate);
    assert_eq!(other.seq, original.seq + 1);

    expect_lag(backend.bus(), 2, 0).await;
    let mut consumer = backend.bus().bind().await.expect("bind");
    let deliveries = fetch_n(&mut consumer, 2).await;
    assert_eq!(deliveries[0].payload, Bytes::from_static(b"first"));
    assert_eq!(deliveries[1].payload, Bytes::from_static(b"next"));
    assert!(consumer.fetch(10, 50).await.expect("fetch").is_empty());
}

/// A full stream rejects new publishes with StreamFull and keeps every accepted message; an
/// ack (WorkQueue) makes room again.
async fn full_stream_rejects_new<B: Backend>() {
    let backend = B::new(5).await;
    publish_n(&backend, 5).await;
    // The fill and the bounds the "stream nearly full" alert divides (issue 26).
    let lag = backend.bus().lag().await.expect("lag");
    assert_eq!((lag.stream_messages, lag.stream_messages_max), (5, 5));
    assert!(
        lag.stream_bytes > 0 && lag.stream_bytes <= lag.stream_bytes_max,
        "bytes held within the byte bound: {lag:?}"
    );
    let rejected = backend
        .publish("obs.host-a.drv-1", &msg_id("drv-1", 1, 6), "p6")
        .await;
    assert!(
        matches!(rejected, Err(BusError::StreamFull)),
        "expected StreamFull, got {rejected:?}"
    );

    let mut consumer = backend.bus().bind().await.expect("bind");
    let deliveries = fetch_n(&mut consumer, 5).await;
    assert_eq!(
        seqs(&deliveries),
        vec![1, 2, 3, 4, 5],
        "an accepted message was lost"
    );
    for (i, delivery) in deliveries.iter().enumerate() {
        assert_eq!(delivery.payload, Bytes::from(format!("p{}", i + 1)));
    }
    backend.bus().ack(vec![deliveries[0].tag]).await.expect("ack");
    expect_lag(backend.bus(), 0, 4).await;
    let accepted = backend
        .publish("obs.host-a.drv-1", &msg_id("drv-1", 1, 6), "p6")
        .await
        .expect("room again");
    assert_eq!(accepted.seq, 6);
}

/// Acks remove messages; lag's pending and ack_pending follow; unknown and repeated tags are
/// ignored; the oldest unacked age is reported while anything is left, and the stream's
/// front (its oldest message, restart step 5's hold on readings derived again) moves past
/// acked messages and is `None` once it is empty, the last sequence staying.
async fn ack_removes_and_lag_counts<B: Backend>() {
    let backend = B::new(1_000).await;
    publish_n(&backend, 10).await;
    let lag = expect_lag(backend.bus(), 10, 0).await;
    assert!(lag.oldest_unacked_age_ms.is_some());
    assert_eq!((lag.first_seq, lag.last_seq), (Some(1), 10));

    let mut consumer = backend.bus().bind().await.expect("bind");
    let four = fetch_n(&mut consumer, 4).await;
    assert_eq!(seqs(&four), vec![1, 2, 3, 4]);
    expect_lag(backend.bus(), 6, 4).await;

    backend.bus().ack(tags(&four)).await.expect("ack");
    let lag = expect_lag(backend.bus(), 6, 0).await;
    assert_eq!((lag.first_seq, lag.last_seq), (Some(5), 10));
    // Repeated and unknown tags are ignored.
    backend.bus().ack(tags(&four)).await.expect("repeat ack");
    backend
        .bus()
        .ack(vec![DeliveryTag(u64::MAX)])
        .await
        .expect("unknown tag");

    let rest = fetch_n(&mut consumer, 6).await;
    assert_eq!(seqs(&rest), vec![5, 6, 7, 8, 9, 10]);
    backend.bus().ack(tags(&rest)).await.expect("ack");
    let lag = expect_lag(backend.bus(), 0, 0).await;
    assert_eq!(lag.oldest_unacked_age_ms, None);
    assert_eq!((lag.first_seq, lag.last_seq), (None, 10));
    assert_eq!(
        (lag.stream_messages, lag.stream_bytes),
        (0, 0),
        "acked messages left the stream"
    );
    // Acked messages left the stream: nothing comes back after ack_wait.
    backend.advance_ms(PAST_ACK_WAIT_MS).await;
    assert!(consumer.fetch(10, 100).await.expect("fetch").is_empty());
}

/// After a core dies with deliveries in flight, a new core binds the same durable consumer
/// and gets the unacked ones again (only those), once ack_wait has passed.
async fn rebind_after_crash_redelivers_unacked<B: Backend>() {
    let backend = B::new(1_000).await;
    publish_n(&backend, 3).await;
    let first = {
        let mut consumer = backend.bus().bind().await.expect("bind");
        let first = fetch_n(&mut consumer, 3).await;
        backend.bus().ack(vec![first[0].tag]).await.expect("ack");
        expect_lag(backend.bus(), 0, 2).await;
        first
        // The consumer handle is dropped here: the core "crashed".
    };
    let bus = backend.restarted_bus().await;
    let mut consumer = bus.bind().await.expect("re-bind");
    backend.advance_ms(PAST_ACK_WAIT_MS).await;
    let again = fetch_n(&mut consumer, 2).await;
    assert_eq!(seqs(&again), vec![2, 3]);
    for (old, new) in first[1..].iter().zip(&again) {
        assert_eq!(new.ingested_at, old.ingested_at);
        assert_eq!(new.delivered_count, 2);
    }
    bus.ack(tags(&again)).await.expect("ack");
    expect_lag(&bus, 0, 0).await;
}

/// Core-side publishes (transitions) go to core NATS subscribers, not into the stream.
async fn publish_bypasses_stream<B: Backend>() {
    let backend = B::new(1_000).await;
    let mut capture = backend.capture_transitions().await;
    backend
        .bus()
        .publish("state.p1".to_owned(), Bytes::from_static(b"{\"v\":1}"))
        .await
        .expect("publish transition");
    let (subject, payload) = backend
        .next_transition(&mut capture)
        .await
        .expect("transition received");
    assert_eq!(subject, "state.p1");
    assert_eq!(payload, Bytes::from_static(b"{\"v\":1}"));
    expect_lag(backend.bus(), 0, 0).await;
}

macro_rules! conformance {
    ($($body:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $body() {
                    super::$body::<super::MemoryBackend>().await
                }
            )*
        }
        mod nats {
            $(
                #[tokio::test]
                async fn $body() {
                    super::$body::<super::NatsBackend>().await
                }
            )*
        }
    };
}

conformance!(
    redelivery_after_ack_wait,
    duplicate_window_drops_republish,
    full_stream_rejects_new,
    ack_removes_and_lag_counts,
    rebind_after_crash_redelivers_unacked,
    publish_bypasses_stream,
);

/// Real JetStream only: a pipelined load of 20k observations (with a republished tail the
/// duplicate window drops) drains through fetch(500) + ack with nothing left over. Checks
/// correctness of the bulk paths tests and benchmarks use; no timing is asserted.
#[tokio::test]
async fn nats_pipelined_load_drains() {
    const COUNT: u64 = 20_000;
    let backend = NatsBackend::new(100_000).await;
    let item = |i: u64| {
        (
            subject(i),
            msg_id("drv-load", 1, i),
            Bytes::from(format!("{{\"v\":{i}}}")),
        )
    };
    let report = backend
        .publisher
        .publish_pipelined((1..=COUNT).map(item), 1_000)
        .await
        .expect("pipelined load");
    assert_eq!(report.stored, COUNT);
    let again = backend
        .publisher
        .publish_pipelined((COUNT - 99..=COUNT).map(item), 50)
        .await
        .expect("republish");
    assert_eq!(again.duplicates, 100);
    assert_eq!(again.stored, 0);

    let mut consumer = backend.bus.bind().await.expect("bind");
    let mut received = 0u64;
    let mut last_seq = 0;
    while received < COUNT {
        let batch = consumer.fetch(500, 1_000).await.expect("fetch");
        assert!(!batch.is_empty(), "stalled after {received} deliveries");
        assert!(batch.iter().all(|d| d.delivered_count == 1));
        assert!(batch[0].stream_seq > last_seq);
        last_seq = batch[batch.len() - 1].stream_seq;
        received += batch.len() as u64;
        backend.bus.ack(tags(&batch)).await.expect("ack");
    }
    assert_eq!(received, COUNT);
    assert_eq!(backend.bus.tags_outstanding(), 0);
    expect_lag(&backend.bus, 0, 0).await;
}
