//! The in-memory JetStream model: the `Bus` the demo and the simulator run on.
//!
//! Owns: one observation stream and its single durable pull consumer, with the semantics the
//! core relies on (DESIGN.md §6; core runtime spec, "Buffer sizing", "Backpressure"; ingest
//! spec, "Where ingested_at comes from"):
//! - limits `max_msgs` / `max_bytes`, discard-new: a full stream rejects with
//!   [`BusError::StreamFull`] and never drops an accepted message; never bounded by age;
//! - WorkQueue retention: an ack removes the message;
//! - a duplicate window keyed by `Nats-Msg-Id` over `duplicate_window_ms` of the clock: a
//!   duplicate is accepted-and-dropped and answers with the original sequence;
//! - timestamps assigned at publish from the injected [`Clock`], strictly increasing
//!   (`max(now, last + 1 µs)`), identical on every redelivery;
//! - delivery in stream order, redelivery of unacked messages after `ack_wait_ms` (due
//!   redeliveries first, as JetStream does) with `delivered_count` incremented;
//!   `max_ack_pending` caps unacked deliveries;
//! - `bind()` may be called again after a core crash: in-flight messages stay in flight and
//!   become redeliverable when their ack deadline passes;
//! - a log of core-side publishes (`state.<point_id>` transitions) for tests and the demo.
//!
//! Deterministic: time only from the [`Clock`]; waiting inside `fetch` only through
//! `tokio::time::sleep` (simulated under turmoil); no hash-map iteration affects output.
//! `tests/bus_conformance.rs` runs the same bodies against this model and real JetStream.
//!
//! Fault hooks for the simulator: [`MemoryBus::drop_next_acks`] (lost acks),
//! [`MemoryBus::expire_in_flight`] (forced redelivery), [`MemoryBus::forget_tags`] (a dead
//! core's connection).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use rustc_hash::FxHashMap;
use sentinel_core::{Delivery, DeliveryTag, Micros};

use sentinel_ports::clock::Clock;
use sentinel_ports::{Bus, BusError, Consumer, INBOUND_QUEUED_MAX, Inbound, Lag};
use sentinel_ports::{FETCH_MAX, PublishAck, TagTable};

/// Limits and timings of the model; defaults match [`super::NatsBusConfig`]'s.
#[derive(Clone, Debug)]
pub struct MemoryBusConfig {
    pub max_msgs: u64,
    pub max_bytes: u64,
    pub duplicate_window_ms: u64,
    pub ack_wait_ms: u64,
    pub max_ack_pending: u64,
    /// Bound on remembered `Nats-Msg-Id`s; the oldest is forgotten first. JetStream bounds the
    /// set only by the window; a model needs a hard limit too.
    pub duplicate_ids_max: usize,
    /// Bound on issued, not yet acked delivery tags (see [`TagTable`]).
    pub tags_max: usize,
    /// Bound on the core-side publish log; the oldest entries are dropped first and counted.
    pub published_log_max: usize,
    /// How often a waiting `fetch` re-checks for due redeliveries (the clock may be advanced
    /// by someone else while it waits).
    pub fetch_poll_ms: u64,
}

impl Default for MemoryBusConfig {
    fn default() -> Self {
        MemoryBusConfig {
            max_msgs: 8_000_000,
            max_bytes: 4 * 1024 * 1024 * 1024,
            duplicate_window_ms: 120_000,
            ack_wait_ms: 30_000,
            max_ack_pending: 20_000,
            duplicate_ids_max: 1_000_000,
            tags_max: 2 * 20_000 + FETCH_MAX,
            published_log_max: 1_000_000,
            fetch_poll_ms: 5,
        }
    }
}

/// One core-side publish (a transition on `state.<point_id>`, or a command with the reply
/// subject its driver answers on), as the model logged it.
#[derive(Clone, Debug, PartialEq)]
pub struct PublishedMessage {
    pub subject: String,
    pub payload: Bytes,
    pub reply_to: Option<String>,
}

/// A message as the stream holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredMessage {
    pub subject: String,
    pub payload: Bytes,
    /// Shared with the duplicate window's two entries: one allocation per message.
    pub msg_id: Arc<str>,
    pub ingested_at: Micros,
    /// 0 until first delivered.
    pub delivered_count: u64,
    /// When an unacked delivery becomes redeliverable; `None` before first delivery.
    pub ack_deadline: Option<Micros>,
    size_bytes: u64,
}

/// The in-memory bus. Clones share one stream.
#[derive(Clone)]
pub struct MemoryBus {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
    /// Wakes waiting fetches when something is published.
    published: Arc<tokio::sync::Notify>,
}

/// A handle on the durable consumer, from [`MemoryBus::bind`].
pub struct MemoryConsumer {
    bus: MemoryBus,
}

struct State {
    config: MemoryBusConfig,
    messages: BTreeMap<u64, StoredMessage>,
    bytes: u64,
    last_seq: u64,
    last_ingested_at: Micros,
    /// msg id → (seq, publish time). Only looked up, never iterated.
    duplicate_ids: FxHashMap<Arc<str>, (u64, Micros)>,
    /// Publish order of the ids above, for expiry.
    duplicate_order: VecDeque<(Micros, Arc<str>)>,
    /// Highest stream sequence delivered at least once (JetStream's `delivered.stream_seq`).
    delivered_cursor: u64,
    /// Delivered and not acked.
    ack_pending: u64,
    /// (ack deadline, seq) of every delivered, unacked message.
    deadlines: BTreeSet<(Micros, u64)>,
    tags: TagTable<u64>,
    published_log: VecDeque<PublishedMessage>,
    published_dropped_total: u64,
    /// Subscribers of [`Bus::inbound`]; [`MemoryBus::send_inbound`] reaches each open one.
    inbound: Vec<tokio::sync::mpsc::Sender<Inbound>>,
    faults: Faults,
}

#[derive(Default)]
struct Faults {
    /// Acks to lose before they reach the stream.
    drop_acks: u64,
}

impl MemoryBus {
    pub fn new(config: MemoryBusConfig, clock: Arc<dyn Clock>) -> MemoryBus {
        let tags = TagTable::new(config.tags_max);
        MemoryBus {
            state: Arc::new(Mutex::new(State {
                config,
                messages: BTreeMap::new(),
                bytes: 0,
                last_seq: 0,
                last_ingested_at: Micros(i64::MIN),
                duplicate_ids: FxHashMap::default(),
                duplicate_order: VecDeque::new(),
                delivered_cursor: 0,
                ack_pending: 0,
                deadlines: BTreeSet::new(),
                tags,
                published_log: VecDeque::new(),
                published_dropped_total: 0,
                inbound: Vec::new(),
                faults: Faults::default(),
            })),
            clock,
            published: Arc::new(tokio::sync::Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state is only mutated in short non-panicking sections; a poisoned lock can only
        // come from a panicking test thread, and its data is still consistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The `ingested_at` the stream stamped on message `seq`, while the stream holds it (the
    /// simulator's checker reads it right after a publish).
    pub fn ingested_at_of(&self, seq: u64) -> Option<Micros> {
        self.lock().messages.get(&seq).map(|m| m.ingested_at)
    }

    /// A driver's publish into the stream. Duplicate check first (as JetStream does), then
    /// the discard-new limits.
    pub fn publish_observation(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
    ) -> Result<PublishAck, BusError> {
        if !subject.starts_with("obs.") {
            return Err(BusError::Other(format!("no stream listens on subject {subject}")));
        }
        let now = self.clock.now();
        let mut state = self.lock();
        state.expire_duplicate_ids(now);
        if let Some(&(seq, _)) = state.duplicate_ids.get(msg_id) {
            return Ok(PublishAck { seq, duplicate: true });
        }
        let size_bytes = (subject.len() + payload.len() + msg_id.len()) as u64;
        if state.messages.len() as u64 >= state.config.max_msgs
            || state.bytes.saturating_add(size_bytes) > state.config.max_bytes
        {
            return Err(BusError::StreamFull);
        }
        let ingested_at = Micros(now.0.max(state.last_ingested_at.0.saturating_add(1)));
        state.last_ingested_at = ingested_at;
        state.last_seq += 1;
        let seq = state.last_seq;
        state.bytes += size_bytes;
        let msg_id: Arc<str> = Arc::from(msg_id);
        state.messages.insert(
            seq,
            StoredMessage {
                subject: subject.to_owned(),
                payload,
                msg_id: msg_id.clone(),
                ingested_at,
                delivered_count: 0,
                ack_deadline: None,
                size_bytes,
            },
        );
        if !msg_id.is_empty() {
            if state.duplicate_order.len() >= state.config.duplicate_ids_max
                && let Some((_, oldest)) = state.duplicate_order.pop_front()
            {
                state.duplicate_ids.remove(&oldest);
            }
            state.duplicate_ids.insert(msg_id.clone(), (seq, now));
            state.duplicate_order.push_back((now, msg_id));
        }
        drop(state);
        self.published.notify_waiters();
        Ok(PublishAck {
            seq,
            duplicate: false,
        })
    }

    /// Messages in the stream (undelivered plus unacked).
    pub fn stream_len(&self) -> u64 {
        self.lock().messages.len() as u64
    }

    /// Bytes the stream accounts for (subject + payload + msg id per message).
    pub fn stream_bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// The highest sequence ever assigned.
    pub fn last_seq(&self) -> u64 {
        self.lock().last_seq
    }

    /// A message still in the stream, by sequence.
    pub fn message(&self, seq: u64) -> Option<StoredMessage> {
        self.lock().messages.get(&seq).cloned()
    }

    /// Every sequence still in the stream, ascending.
    pub fn stream_seqs(&self) -> Vec<u64> {
        self.lock().messages.keys().copied().collect()
    }

    /// The core-side publish log, oldest first.
    pub fn published(&self) -> Vec<PublishedMessage> {
        self.lock().published_log.iter().cloned().collect()
    }

    /// Takes and clears the core-side publish log.
    pub fn take_published(&self) -> Vec<PublishedMessage> {
        self.lock().published_log.drain(..).collect()
    }

    /// Core-side publishes dropped from the log to keep its bound.
    pub fn published_dropped_total(&self) -> u64 {
        self.lock().published_dropped_total
    }

    /// A command request or driver hello on a plain subject: reaches every open
    /// [`Bus::inbound`] subscription that has room (a plain subject drops for a slow
    /// consumer). Returns how many it reached.
    pub fn send_inbound(&self, message: Inbound) -> usize {
        let mut state = self.lock();
        state.inbound.retain(|tx| !tx.is_closed());
        state
            .inbound
            .iter()
            .filter(|tx| tx.try_send(message.clone()).is_ok())
            .count()
    }

    /// Fault hook: the next `count` acks are lost before they reach the stream.
    pub fn drop_next_acks(&self, count: u64) {
        self.lock().faults.drop_acks = count;
    }

    /// Fault hook: every in-flight message becomes due for redelivery now (forced ack_wait
    /// expiry).
    pub fn expire_in_flight(&self) {
        let now = self.clock.now();
        let mut state = self.lock();
        let due: Vec<(Micros, u64)> = state.deadlines.iter().copied().collect();
        state.deadlines.clear();
        for (_, seq) in due {
            if let Some(message) = state.messages.get_mut(&seq) {
                message.ack_deadline = Some(now);
            }
            state.deadlines.insert((now, seq));
        }
        drop(state);
        self.published.notify_waiters();
    }

    /// Fault hook: forget every issued tag, as when the core that held them dies with its
    /// connection. Their acks become no-ops; the messages come back after ack_wait.
    pub fn forget_tags(&self) {
        self.lock().tags.clear();
    }

    /// Wakes fetches waiting for messages; call after advancing a manual clock so a waiting
    /// fetch notices due redeliveries at once.
    pub fn poke(&self) {
        self.published.notify_waiters();
    }

    fn take_deliveries(&self, max: usize) -> Vec<Delivery> {
        let now = self.clock.now();
        let mut state = self.lock();
        state.take_deliveries(now, max)
    }
}

impl State {
    fn expire_duplicate_ids(&mut self, now: Micros) {
        let window_us = i64::try_from(self.config.duplicate_window_ms)
            .unwrap_or(i64::MAX)
            .saturating_mul(sentinel_core::time::US_PER_MS);
        while let Some((published_at, _)) = self.duplicate_order.front() {
            if now.saturating_sub(*published_at) < window_us {
                break;
            }
            if let Some((published_at, id)) = self.duplicate_order.pop_front()
                && self
                    .duplicate_ids
                    .get(&id)
                    .is_some_and(|&(_, at)| at == published_at)
            {
                self.duplicate_ids.remove(&id);
            }
        }
    }

    fn take_deliveries(&mut self, now: Micros, max: usize) -> Vec<Delivery> {
        let ack_wait_ms = i64::try_from(self.config.ack_wait_ms).unwrap_or(i64::MAX);
        let deadline = now.add_ms(ack_wait_ms);
        let mut out = Vec::new();
        // New deadlines are inserted after the scan so a zero ack_wait cannot loop.
        let mut rescheduled: Vec<u64> = Vec::new();

        // Due redeliveries first, in deadline then sequence order.
        while out.len() < max {
            let Some(&(due_at, seq)) = self.deadlines.first() else {
                break;
            };
            if due_at > now {
                break;
            }
            self.deadlines.pop_first();
            let Some(message) = self.messages.get_mut(&seq) else {
                continue;
            };
            message.delivered_count += 1;
            message.ack_deadline = Some(deadline);
            rescheduled.push(seq);
            let delivery = Delivery {
                tag: DeliveryTag(0),
                stream_seq: seq,
                subject: message.subject.as_str().into(),
                payload: message.payload.clone(),
                ingested_at: message.ingested_at,
                delivered_count: message.delivered_count,
            };
            out.push(delivery);
        }

        // Then new messages in stream order, within max_ack_pending.
        while out.len() < max && self.ack_pending < self.config.max_ack_pending {
            let cursor = self.delivered_cursor;
            let Some((&seq, message)) = self.messages.range_mut(cursor + 1..).next() else {
                break;
            };
            self.delivered_cursor = seq;
            self.ack_pending += 1;
            message.delivered_count = 1;
            message.ack_deadline = Some(deadline);
            rescheduled.push(seq);
            out.push(Delivery {
                tag: DeliveryTag(0),
                stream_seq: seq,
                subject: message.subject.as_str().into(),
                payload: message.payload.clone(),
                ingested_at: message.ingested_at,
                delivered_count: 1,
            });
        }

        for seq in rescheduled {
            self.deadlines.insert((deadline, seq));
        }
        for delivery in &mut out {
            delivery.tag = self.tags.insert(delivery.stream_seq);
        }
        out
    }

    fn ack(&mut self, tags: &[DeliveryTag]) {
        for &tag in tags {
            let Some(seq) = self.tags.remove(tag) else {
                continue;
            };
            if self.faults.drop_acks > 0 {
                self.faults.drop_acks -= 1;
                continue;
            }
            // Acking a stale delivery of a message that was redelivered since still acks it,
            // as JetStream does: the ack names the stream sequence.
            let Some(message) = self.messages.remove(&seq) else {
                continue;
            };
            self.bytes -= message.size_bytes;
            if let Some(deadline) = message.ack_deadline {
                self.deadlines.remove(&(deadline, seq));
                self.ack_pending -= 1;
            }
        }
    }
}

/// Drivers in the demo and the simulator publish into the model through the driver library's
/// one interface.
impl sentinel_ports::ObservationSink for MemoryBus {
    async fn publish_observation(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
    ) -> Result<PublishAck, BusError> {
        MemoryBus::publish_observation(self, subject, msg_id, payload)
    }
}

impl MemoryBus {
    /// Keeps a core-side publish in the bounded log, dropping the oldest past its bound.
    fn log_published(&self, message: PublishedMessage) {
        let mut state = self.lock();
        if state.published_log.len() >= state.config.published_log_max {
            state.published_log.pop_front();
            state.published_dropped_total += 1;
        }
        state.published_log.push_back(message);
    }
}

impl Bus for MemoryBus {
    type Consumer = MemoryConsumer;

    async fn bind(&self) -> Result<MemoryConsumer, BusError> {
        Ok(MemoryConsumer { bus: self.clone() })
    }

    async fn ack(&self, tags: Vec<DeliveryTag>) -> Result<(), BusError> {
        self.lock().ack(&tags);
        Ok(())
    }

    async fn publish(&self, subject: String, payload: Bytes) -> Result<(), BusError> {
        self.log_published(PublishedMessage {
            subject,
            payload,
            reply_to: None,
        });
        Ok(())
    }

    async fn publish_command(
        &self,
        subject: String,
        reply_to: String,
        payload: Bytes,
    ) -> Result<(), BusError> {
        self.log_published(PublishedMessage {
            subject,
            payload,
            reply_to: Some(reply_to),
        });
        Ok(())
    }

    async fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
    ) -> Result<PublishAck, BusError> {
        MemoryBus::publish_observation(self, &subject, &msg_id, payload)
    }

    async fn lag(&self) -> Result<Lag, BusError> {
        let now = self.clock.now();
        let state = self.lock();
        let total = state.messages.len() as u64;
        // WorkQueue: every message still in the stream is either delivered-and-unacked or not
        // yet delivered, so the oldest one is the oldest unacked.
        let oldest_unacked_age_ms = state
            .messages
            .first_key_value()
            .map(|(_, message)| (now.saturating_sub(message.ingested_at).max(0) / 1_000) as u64);
        Ok(Lag {
            pending: total - state.ack_pending,
            ack_pending: state.ack_pending,
            oldest_unacked_age_ms,
            first_seq: state.messages.first_key_value().map(|(&seq, _)| seq),
            last_seq: state.last_seq,
            stream_messages: total,
            stream_bytes: state.bytes,
            stream_messages_max: state.config.max_msgs,
            stream_bytes_max: state.config.max_bytes,
        })
    }

    async fn inbound(&self) -> Result<tokio::sync::mpsc::Receiver<Inbound>, BusError> {
        let (tx, rx) = tokio::sync::mpsc::channel(INBOUND_QUEUED_MAX);
        self.lock().inbound.push(tx);
        Ok(rx)
    }
}

impl Consumer for MemoryConsumer {
    async fn fetch(&mut self, max: usize, wait_ms: u64) -> Result<Vec<Delivery>, BusError> {
        let max = max.min(FETCH_MAX);
        if max == 0 {
            return Ok(Vec::new());
        }
        let poll_ms = self.bus.lock().config.fetch_poll_ms.max(1);
        // One overall deadline, so a stream of wake-ups that deliver nothing (max_ack_pending
        // reached) cannot stretch the wait.
        let overall = tokio::time::sleep(Duration::from_millis(wait_ms));
        tokio::pin!(overall);
        loop {
            // Register for the wake-up before looking, so a publish in between is not missed.
            let notified = self.bus.published.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deliveries = self.bus.take_deliveries(max);
            if !deliveries.is_empty() || wait_ms == 0 || overall.is_elapsed() {
                return Ok(deliveries);
            }
            tokio::select! {
                biased;
                _ = &mut overall => {}
                _ = &mut notified => {}
                _ = tokio::time::sleep(Duration::from_millis(poll_ms)) => {}
            }
        }
    }
}
