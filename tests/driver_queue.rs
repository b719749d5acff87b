//! The driver's disk queue against a real nats-server (core runtime spec, "Where the loss goes
//! when it has to go somewhere"): a full discard-new stream rejects, the publisher queues on
//! disk, the queue survives a driver restart, and once the core frees the stream every queued
//! observation reaches it exactly once and in order. While it queues, the driver reports its
//! queue's depth and its publish failures, and a real core turns them into its host's health
//! points in PostgreSQL.

use std::collections::BTreeSet;

use bytes::Bytes;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::Micros;
use sentinel_driver::Credentials;
use sentinel_driver::disk_queue::{DiskQueue, DiskQueueConfig, Published, QueuedPublisher};
use sentinel_driver::{ObservationPublisher, PublisherConfig, msg_id};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, Consumer, ObservationSink};
use sentinel_tests::harness::{Env, bus_with_stream, pg, spawn_core, terminate};
use sentinel_tests::nats::NatsServer;

const STREAM_MSGS_MAX: u64 = 50;
const MESSAGES: u64 = 120;

fn queue_config(dir: &std::path::Path) -> DiskQueueConfig {
    DiskQueueConfig {
        dir: dir.to_owned(),
        bytes_max: 16 << 20,
        age_max_ms: 3_600_000,
    }
}

/// Fetches and acks everything the stream holds; returns the message ids in delivery order.
async fn consume_all(consumer: &mut impl Consumer, bus: &NatsBus) -> Vec<String> {
    let mut ids = Vec::new();
    loop {
        let deliveries = consumer.fetch(500, 500).await.expect("fetch");
        if deliveries.is_empty() {
            return ids;
        }
        for d in &deliveries {
            let envelope: serde_json::Value = serde_json::from_slice(&d.payload).expect("JSON");
            ids.push(msg_id(
                envelope["driver_instance"].as_str().expect("instance"),
                envelope["source_epoch"].as_u64().expect("epoch") as u32,
                envelope["source_seq"].as_u64().expect("seq"),
            ));
        }
        bus.ack(deliveries.iter().map(|d| d.tag).collect())
            .await
            .expect("ack");
    }
}

/// The newest stored value of `point_id`, if any.
async fn value_of(conn: &mut sqlx::PgConnection, point_id: &str) -> Option<f64> {
    sqlx::query_scalar::<_, Option<f64>>(
        "SELECT value_num FROM observation WHERE point_id = $1 ORDER BY ingested_at DESC LIMIT 1",
    )
    .bind(point_id)
    .fetch_optional(conn)
    .await
    .expect("query")
    .flatten()
}

fn payload(seq: u64) -> Bytes {
    Bytes::from(format!(
        r#"{{"v":1,"point_id":"pump1.speed","driver_instance":"modbus-pumps","source_epoch":1,"source_seq":{seq},"observed_at":"2026-11-30T10:00:00Z","value":{seq}}}"#
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_sends_publishes_to_disk_and_they_arrive_once_in_order() {
    let nats = NatsServer::start().await;
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        max_msgs: STREAM_MSGS_MAX,
        ..NatsBusConfig::default()
    })
    .await;
    let dir = std::env::temp_dir().join(format!("sentinel-driver-queue-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let now = || -> Micros { SystemClock.now() };
    let subject = "obs.plant-a.modbus-pumps";

    // The core is down: the stream fills at STREAM_MSGS_MAX and the rest goes to disk.
    let mut publisher = QueuedPublisher::new(
        ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
            .await
            .expect("publisher"),
        DiskQueue::open(queue_config(&dir)).expect("queue"),
    );
    let mut to_stream = 0;
    for seq in 1..=MESSAGES {
        let id = msg_id("modbus-pumps", 1, seq);
        match publisher
            .publish(subject, &id, payload(seq), now())
            .await
            .expect("publish")
        {
            Published::Stream(ack) => {
                assert!(!ack.duplicate);
                to_stream += 1;
            }
            Published::Queued => {}
        }
    }
    assert_eq!(
        to_stream, STREAM_MSGS_MAX,
        "the stream took what its bound allows"
    );
    assert_eq!(publisher.queue().len() as u64, MESSAGES - STREAM_MSGS_MAX);
    drop(publisher);

    // The driver restarts: its queue is still on disk.
    let mut publisher = QueuedPublisher::new(
        ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
            .await
            .expect("publisher"),
        DiskQueue::open(queue_config(&dir)).expect("reopen queue"),
    );
    assert_eq!(
        publisher.queue().len() as u64,
        MESSAGES - STREAM_MSGS_MAX,
        "recovered"
    );

    // A core comes back and consumes; each drain refills the freed stream, oldest first.
    let mut consumer = bus.bind().await.expect("bind");
    let mut received = Vec::new();
    while !publisher.queue().is_empty() {
        received.extend(consume_all(&mut consumer, &bus).await);
        let sent = publisher.drain(now()).await.expect("drain");
        assert!(sent > 0, "a freed stream takes queued messages");
    }
    received.extend(consume_all(&mut consumer, &bus).await);

    let expected: Vec<String> = (1..=MESSAGES).map(|seq| msg_id("modbus-pumps", 1, seq)).collect();
    assert_eq!(received, expected, "every observation once, in publish order");

    // The drop count goes out as the instance's queue_drops self-point.
    let published = publisher
        .publish_drop_count("plant-a", "modbus-pumps", 1, MESSAGES + 1, now())
        .await
        .expect("drop count");
    assert!(matches!(published, Published::Stream(_)));
    let deliveries = consumer.fetch(10, 1_000).await.expect("fetch");
    let envelope: serde_json::Value = serde_json::from_slice(&deliveries[0].payload).expect("JSON");
    assert_eq!(
        envelope["point_id"], "plant-a.modbus-pumps.queue_drops",
        "as the registry names it"
    );
    assert_eq!(envelope["value"], 0);
    assert_eq!(
        publisher.queue().dropped_total(),
        0,
        "nothing hit the queue's bounds"
    );
    assert_eq!(received.iter().collect::<BTreeSet<_>>().len() as u64, MESSAGES);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 26 item 4: a driver whose stream is full reports its queue's depth and its publish
/// failures as self-points (through the queue, like any observation); once the stream takes
/// them, a real core ingests them and sums them into its host's generated health points,
/// which reach PostgreSQL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_stream_shows_as_queue_depth_and_publish_failures_in_the_hosts_health_points() {
    const QUEUED: u64 = 5;
    const ACK_WAIT_MS: u64 = 30_000;
    let nats = NatsServer::start().await;
    let stream_name = NatsBusConfig::default().stream_name;
    let dir = std::env::temp_dir().join(format!("sentinel-driver-health-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let now = || -> Micros { SystemClock.now() };
    let subject = "obs.plant-a.modbus-pumps";

    // The core is down and the stream is full: a tiny stream, filled by someone else.
    let tiny = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        max_msgs: STREAM_MSGS_MAX,
        ..NatsBusConfig::default()
    })
    .await;
    let filler = ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
        .await
        .expect("filler");
    for seq in 1..=STREAM_MSGS_MAX {
        filler
            .publish_observation("obs.plant-a.filler", &msg_id("filler", 1, seq), payload(seq))
            .await
            .expect("fill");
    }
    drop(tiny);

    let mut publisher = QueuedPublisher::new(
        ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
            .await
            .expect("publisher"),
        DiskQueue::open(queue_config(&dir)).expect("queue"),
    );
    for seq in 1..=QUEUED {
        let id = msg_id("modbus-pumps", 1, seq);
        let published = publisher
            .publish(subject, &id, payload(seq), now())
            .await
            .expect("publish");
        assert_eq!(published, Published::Queued, "the stream is full");
    }
    assert_eq!(publisher.publish_failures(), QUEUED);
    let failures = publisher
        .publish_failure_count("plant-a", "modbus-pumps", 1, QUEUED + 1, now())
        .await
        .expect("failure count");
    let depth = publisher
        .publish_queue_depth("plant-a", "modbus-pumps", 1, QUEUED + 2, now())
        .await
        .expect("queue depth");
    assert_eq!((failures, depth), (Published::Queued, Published::Queued));
    assert_eq!(publisher.queue().len() as u64, QUEUED + 2);

    // The operator makes room (a stream of the core's own size), and a core starts.
    let client = async_nats::connect(nats.url()).await.expect("connect");
    async_nats::jetstream::new(client)
        .delete_stream(&stream_name)
        .await
        .expect("delete the full stream");
    let env = Env::start_on(nats, ACK_WAIT_MS, Credentials::None).await;
    let sent = publisher.drain(now()).await.expect("drain");
    assert_eq!(sent, QUEUED + 2, "every queued message reached the stream");
    let core = spawn_core(
        &env,
        ACK_WAIT_MS,
        &[
            "--self-points-interval-ms",
            "1000",
            "--health-points-interval-ms",
            "1000",
        ],
    );

    let mut conn = pg(&env.db.url).await;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    let (host_depth, host_failures) = loop {
        let depth = value_of(&mut conn, "sentinel.host.plant-a.disk_queue_depth").await;
        let failures = value_of(&mut conn, "sentinel.host.plant-a.publish_failures").await;
        if let (Some(depth), Some(failures)) = (depth, failures) {
            break (depth, failures);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no host health readings of depth and failures: {depth:?} {failures:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    terminate(core).await;
    // The instance's own readings, as the driver sent them (its failure count is the one
    // before its own publish; its depth counts that queued reading too).
    assert_eq!(
        value_of(&mut conn, "plant-a.modbus-pumps.publish_failures").await,
        Some(QUEUED as f64)
    );
    assert_eq!(
        value_of(&mut conn, "plant-a.modbus-pumps.queue_depth").await,
        Some((QUEUED + 1) as f64)
    );
    // Summed over the host's instances: only modbus-pumps reported.
    assert_eq!(
        host_failures, QUEUED as f64,
        "publish failures reached PostgreSQL"
    );
    assert_eq!(host_depth, (QUEUED + 1) as f64, "queue depth reached PostgreSQL");
    let _ = std::fs::remove_dir_all(&dir);
}
