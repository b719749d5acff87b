//! The driver's disk queue against a real nats-server (core runtime spec, "Where the loss goes
//! when it has to go somewhere"): a full discard-new stream rejects, the publisher queues on
//! disk, the queue survives a driver restart, and once the core frees the stream every queued
//! observation reaches it exactly once and in order.

use std::collections::BTreeSet;

use bytes::Bytes;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::Micros;
use sentinel_driver::disk_queue::{DiskQueue, DiskQueueConfig, Published, QueuedPublisher};
use sentinel_driver::{ObservationPublisher, PublisherConfig, msg_id};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, Consumer};
use sentinel_tests::harness::bus_with_stream;
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
