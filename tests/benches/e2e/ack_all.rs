//! A bench-only bus for issue 24 item 3's end-to-end A/B: the observation stream with interest
//! retention and a durable consumer with `AckPolicy::All`, under Sentinel's real startup,
//! runtime and core. Not the production adapter (that stays `sentinel_bus_nats::NatsBus`, work
//! queue and explicit acks); this exists only to measure what adopting cumulative acks would
//! buy before the semantics, the models and the migration are built for it.
//!
//! Owns: the interest stream's and the AckAll consumer's shape (today's `OBS` configuration
//! with only the retention and the ack policy changed), and the translation of the core's
//! per-delivery `Effect::Ack` into cumulative acks that never cover a delivery still in flight:
//! the delivered and not yet acked stream sequences are kept in order, an ack marks its
//! sequences, and one `+ACK` goes to the highest sequence below which every delivery is acked
//! (the core acks a duplicate of a committed key at once, ahead of batches still at the store,
//! so an ack of the highest sequence acked would cover those batches).
//!
//! Everything else (publishing, lag, the core's plain subjects) is the production adapter's.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::Subject;
use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::StreamExt;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::{Delivery, DeliveryTag, Micros};
use sentinel_ports::{Bus, BusError, Consumer, FETCH_MAX, Inbound, Lag, PublishAck};

/// The stream `sentinel run` creates, with interest retention: a message stays until every
/// consumer acked it (one consumer here: until the core acked it).
pub fn interest_stream(config: &NatsBusConfig) -> stream::Config {
    stream::Config {
        retention: stream::RetentionPolicy::Interest,
        ..config.stream_config()
    }
}

/// The core's durable consumer, acking cumulatively.
pub fn ack_all_consumer(config: &NatsBusConfig) -> consumer::pull::Config {
    consumer::pull::Config {
        ack_policy: consumer::AckPolicy::All,
        ..config.consumer_config()
    }
}

/// Creates the interest stream and its consumer, consumer first in effect: under interest
/// retention a message published while no consumer exists is deleted on arrival, so both
/// must exist before any driver publishes.
pub async fn create(config: &NatsBusConfig) {
    let client = async_nats::connect(&config.url).await.expect("connect");
    let js = jetstream::new(client);
    let stream = js
        .create_stream(interest_stream(config))
        .await
        .expect("interest stream");
    stream
        .create_consumer(ack_all_consumer(config))
        .await
        .expect("AckAll consumer");
}

/// Delivered, not yet acked, by stream sequence.
#[derive(Default)]
struct Outstanding {
    /// Stream sequence → the latest delivery's reply subject and whether the core acked it.
    by_seq: BTreeMap<u64, (Subject, bool)>,
    /// Cumulative acks sent, and the deliveries the core acked.
    acks_sent: u64,
    acked: u64,
}

impl Outstanding {
    /// Marks `tags` acked and takes the reply subject of the highest sequence below which
    /// every delivery is acked, if the floor moved.
    fn ack(&mut self, tags: &[DeliveryTag]) -> Option<Subject> {
        for tag in tags {
            if let Some((_, acked)) = self.by_seq.get_mut(&tag.0) {
                self.acked += u64::from(!*acked);
                *acked = true;
            }
        }
        let mut floor = None;
        while let Some(entry) = self.by_seq.first_entry() {
            if !entry.get().1 {
                break;
            }
            floor = Some(entry.remove().0);
        }
        self.acks_sent += u64::from(floor.is_some());
        floor
    }
}

#[derive(Clone)]
pub struct AckAllBus {
    nats: NatsBus,
    outstanding: Arc<Mutex<Outstanding>>,
}

impl AckAllBus {
    /// Over a connected production bus whose stream [`create`] made (never `ensure_stream`:
    /// it refuses the interest retention).
    pub fn over(nats: NatsBus) -> AckAllBus {
        AckAllBus {
            nats,
            outstanding: Arc::default(),
        }
    }

    /// (cumulative acks sent, deliveries acked, deliveries outstanding).
    pub fn ack_counts(&self) -> (u64, u64, usize) {
        let o = self.outstanding.lock().expect("outstanding");
        (o.acks_sent, o.acked, o.by_seq.len())
    }
}

pub struct AckAllConsumer {
    consumer: consumer::PullConsumer,
    /// The consumer's `max_ack_pending`: the server delivers no more above the ack floor, so
    /// the outstanding deliveries never exceed it (the floor this side sent is at or above the
    /// server's).
    outstanding_max: usize,
    outstanding: Arc<Mutex<Outstanding>>,
    subjects: HashSet<Arc<str>>,
}

impl Bus for AckAllBus {
    type Consumer = AckAllConsumer;

    async fn bind(&self) -> Result<AckAllConsumer, BusError> {
        let config = self.nats.config();
        let stream = self
            .nats
            .jetstream()
            .get_stream(&config.stream_name)
            .await
            .map_err(|e| BusError::Other(format!("get stream: {e}")))?;
        let found = &stream.cached_info().config;
        assert_eq!(found.retention, stream::RetentionPolicy::Interest);
        let consumer: consumer::PullConsumer = stream
            .get_consumer(&config.consumer_name)
            .await
            .map_err(|e| BusError::Other(format!("get consumer: {e}")))?;
        assert_eq!(consumer.cached_info().config.ack_policy, consumer::AckPolicy::All);
        let outstanding_max = usize::try_from(consumer.cached_info().config.max_ack_pending)
            .expect("a bounded max_ack_pending");
        Ok(AckAllConsumer {
            consumer,
            outstanding_max,
            outstanding: self.outstanding.clone(),
            subjects: HashSet::new(),
        })
    }

    async fn ack(&self, tags: Vec<DeliveryTag>) -> Result<(), BusError> {
        let floor = self.outstanding.lock().expect("outstanding").ack(&tags);
        let Some(reply) = floor else {
            return Ok(());
        };
        self.nats
            .client()
            .publish(reply, Bytes::from_static(b"+ACK"))
            .await
            .map_err(|e| BusError::Connection(format!("ack: {e}")))?;
        self.nats.flush().await
    }

    async fn publish(&self, subject: String, payload: Bytes) -> Result<(), BusError> {
        self.nats.publish(subject, payload).await
    }

    async fn publish_command(
        &self,
        subject: String,
        reply_to: String,
        payload: Bytes,
    ) -> Result<(), BusError> {
        self.nats.publish_command(subject, reply_to, payload).await
    }

    async fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
    ) -> Result<PublishAck, BusError> {
        self.nats.publish_observation(subject, msg_id, payload).await
    }

    async fn lag(&self) -> Result<Lag, BusError> {
        self.nats.lag().await
    }

    async fn inbound(&self) -> Result<tokio::sync::mpsc::Receiver<Inbound>, BusError> {
        self.nats.inbound().await
    }
}

/// One pull's messages; a 409 (max ack pending) or an early end keeps what came.
async fn drain(batch: &mut consumer::pull::Batch, out: &mut Vec<jetstream::Message>) -> Result<(), BusError> {
    let before = out.len();
    while let Some(message) = batch.next().await {
        match message {
            Ok(message) => out.push(message),
            Err(error) => {
                let text = error.to_string();
                if out.len() > before || text.contains("409") {
                    return Ok(());
                }
                return Err(BusError::Other(format!("fetch: {text}")));
            }
        }
    }
    Ok(())
}

impl Consumer for AckAllConsumer {
    /// As the production consumer: a pull that returns at once, and only when it is empty one
    /// waiting for a single message, then a top-up.
    async fn fetch(&mut self, max: usize, wait_ms: u64) -> Result<Vec<Delivery>, BusError> {
        let max = max.min(FETCH_MAX);
        if max == 0 {
            return Ok(Vec::new());
        }
        let fetch_err = |e: async_nats::error::Error<_>| BusError::Other(format!("fetch: {e}"));
        let mut messages = Vec::with_capacity(max);
        let mut pull = self
            .consumer
            .fetch()
            .max_messages(max)
            .messages()
            .await
            .map_err(fetch_err)?;
        drain(&mut pull, &mut messages).await?;
        if messages.is_empty() && wait_ms > 0 {
            let mut pull = self
                .consumer
                .batch()
                .max_messages(1)
                .expires(Duration::from_millis(wait_ms))
                .messages()
                .await
                .map_err(|e| BusError::Other(format!("fetch: {e}")))?;
            drain(&mut pull, &mut messages).await?;
            if !messages.is_empty() && max > 1 {
                let mut pull = self
                    .consumer
                    .fetch()
                    .max_messages(max - 1)
                    .messages()
                    .await
                    .map_err(|e| BusError::Other(format!("fetch: {e}")))?;
                drain(&mut pull, &mut messages).await?;
            }
        }
        let mut out = Vec::with_capacity(messages.len());
        let mut outstanding = self.outstanding.lock().expect("outstanding");
        for message in messages {
            let info = message
                .info()
                .map_err(|e| BusError::Other(format!("ack subject: {e}")))?;
            let (stream_seq, delivered, published) = (info.stream_sequence, info.delivered, info.published);
            let jetstream::Message { message, .. } = message;
            let reply = message
                .reply
                .ok_or_else(|| BusError::Other("JetStream message without a reply subject".to_owned()))?;
            // A redelivery keeps its place and takes the newer reply subject.
            outstanding.by_seq.insert(stream_seq, (reply, false));
            assert!(
                outstanding.by_seq.len() <= self.outstanding_max,
                "more deliveries outstanding than max_ack_pending"
            );
            let subject = match self.subjects.get(message.subject.as_str()) {
                Some(shared) => shared.clone(),
                None => {
                    let shared: Arc<str> = message.subject.as_str().into();
                    self.subjects.insert(shared.clone());
                    shared
                }
            };
            out.push(Delivery {
                // The stream sequence is the tag: unique in the stream, the same on a redelivery.
                tag: DeliveryTag(stream_seq),
                stream_seq,
                subject,
                payload: message.payload,
                ingested_at: Micros::from_unix_nanos(published.unix_timestamp_nanos()),
                delivered_count: u64::try_from(delivered).unwrap_or(1).max(1),
            });
        }
        Ok(out)
    }
}

/// The hold, checked once per run before it is measured: an ack of later deliveries never
/// moves the cumulative ack past an earlier one still in flight, and the floor moves to the
/// highest sequence below which all are acked once the earlier one is.
pub fn self_check() {
    let mut o = Outstanding::default();
    let reply = |n: u64| Subject::from(format!("$JS.ACK.reply.{n}"));
    for seq in 1..=5 {
        o.by_seq.insert(seq, (reply(seq), false));
    }
    // 3 and 4 (a later batch, or duplicates acked at once) while 1..=2 are at the store.
    assert_eq!(
        o.ack(&[DeliveryTag(3), DeliveryTag(4)]),
        None,
        "an ack past an unacked delivery"
    );
    assert_eq!(o.ack(&[DeliveryTag(1)]), Some(reply(1)));
    assert_eq!(
        o.ack(&[DeliveryTag(2)]),
        Some(reply(4)),
        "the floor takes the acked run after 2"
    );
    assert_eq!(o.ack(&[DeliveryTag(9)]), None, "an unknown tag is ignored");
    assert_eq!(o.by_seq.len(), 1);
    assert_eq!((o.acks_sent, o.acked), (2, 4));
}
