//! The NATS JetStream adapter: the production `Bus`.
//!
//! Owns: the observation stream's and the durable consumer's configuration, checking that an
//! existing one matches it, pulling deliveries, acking them, publishing transitions and
//! reading lag (core runtime spec, "Buffer sizing", "Backpressure", "Enforcement: an advisory
//! lock"; ingest spec, stage 1 and "Where ingested_at comes from"; DESIGN.md §2, §10).
//!
//! - Stream `OBS` on `obs.>`: file storage, WorkQueue retention (an ack removes the message,
//!   so "full" means backlog), discard-new (a full stream rejects the publisher, it never
//!   drops accepted data), bounded by messages and bytes and NEVER by age, a duplicate window
//!   for `Nats-Msg-Id`.
//! - One durable pull consumer: explicit acks, deliver all, unlimited redeliveries,
//!   `max_ack_pending` set explicitly (the server default of 1000 stalls a pipeline).
//! - The stream's replica count and its two bounds are configuration
//!   ([`NatsBusConfig::replicas`], `max_msgs`, `max_bytes`: `sentinel run` takes them from the
//!   configuration admission reads, issue 24 item 4; 1 replica on one server, 3 on a three-node
//!   cluster, issue 25, docs/deploy.md). They are the fields nats-server changes in place
//!   without touching the data, so an existing stream with other figures is updated to the
//!   configured ones (logged at INFO) — except a bound below what the stream holds, which
//!   nats-server would enforce by deleting the oldest messages: that is refused, naming the
//!   field, the bound and the contents.
//! - An existing stream or consumer whose configuration differs in any other field we rely on
//!   is a [`NatsSetupError::ConfigMismatch`] naming every differing field; we never update it. Why:
//!   the stream is shared with every driver and holds the only copy of accepted, uncommitted
//!   observations; retention and storage cannot be changed in place anyway; and silently
//!   changing `ack_wait` or `max_ack_pending` under a running fleet hides a deployment mistake.
//!   `ensure_stream` runs after the single-writer lock is taken (the startup order), so only the
//!   core that holds the lock updates anything.
//! - `fetch` uses `fetch()` (returns at once with what is there) and, only when that is empty,
//!   a one-message `batch()` that waits up to `wait_ms`, then tops up without waiting. Acks
//!   are plain `+ACK` publishes, pipelined, with one flush per call (no per-message round
//!   trip; DESIGN.md §10).

pub mod auth;

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream};
use async_nats::{Client, Subject};
use bytes::Bytes;
use futures::StreamExt;
use sentinel_core::{Delivery, DeliveryTag, Micros};

use sentinel_driver::connect::{Credentials, Refusals, connect_options};

use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, BusError, Consumer, INBOUND_QUEUED_MAX, Inbound, Lag};
use sentinel_ports::{FETCH_MAX, TagTable};

/// Subjects the observation stream listens on and the consumer filters on (driver contract v1).
pub const OBS_SUBJECTS: &str = "obs.>";

/// Where and how to reach the bus; defaults sized per the core runtime spec (a 4-hour outage
/// at the design rate with margin: ~8M messages, 4 GiB).
#[derive(Clone, Debug)]
pub struct NatsBusConfig {
    /// One server URL or a comma-separated list of a cluster's
    /// ([`sentinel_driver::connect::server_addrs`]).
    pub url: String,
    pub stream_name: String,
    pub consumer_name: String,
    pub ack_wait_ms: u64,
    pub max_ack_pending: u64,
    pub max_msgs: u64,
    pub max_bytes: u64,
    pub duplicate_window_ms: u64,
    /// The observation stream's replica count, 1..=[`STREAM_REPLICAS_MAX`]: 1 on one server, 3
    /// on a three-node cluster (a publish is acked once a quorum stored it).
    pub replicas: usize,
    /// Bound on JetStream API requests (stream/consumer info, create).
    pub request_timeout_ms: u64,
    /// Bound on issued, not yet acked delivery tags; see [`TagTable`].
    pub tags_max: usize,
    /// Who the core is on the bus (ARCHITECTURE.md, "Security model"); `None` on a server
    /// without an authorization block.
    pub credentials: Credentials,
}

/// The core's principal on the bus: its reply inbox is `_INBOX_sentinel-core`, the only one its
/// generated permissions let it subscribe below.
pub const CORE_PRINCIPAL: &str = "sentinel-core";

/// The most replicas nats-server allows a stream.
pub const STREAM_REPLICAS_MAX: usize = 5;

impl Default for NatsBusConfig {
    fn default() -> Self {
        NatsBusConfig {
            url: "nats://127.0.0.1:4222".to_owned(),
            stream_name: "OBS".to_owned(),
            consumer_name: "sentinel-core".to_owned(),
            ack_wait_ms: 30_000,
            max_ack_pending: 20_000,
            max_msgs: 8_000_000,
            max_bytes: 4 * 1024 * 1024 * 1024,
            duplicate_window_ms: 120_000,
            replicas: 1,
            request_timeout_ms: 10_000,
            tags_max: 2 * 20_000 + FETCH_MAX,
            credentials: Credentials::None,
        }
    }
}

impl NatsBusConfig {
    /// The stream configuration this adapter creates and expects.
    pub fn stream_config(&self) -> stream::Config {
        stream::Config {
            name: self.stream_name.clone(),
            subjects: vec![OBS_SUBJECTS.to_owned()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::WorkQueue,
            discard: stream::DiscardPolicy::New,
            max_messages: clamp_i64(self.max_msgs),
            max_bytes: clamp_i64(self.max_bytes),
            // Never bounded by age: max_age deletes unconsumed data silently.
            max_age: Duration::ZERO,
            duplicate_window: Duration::from_millis(self.duplicate_window_ms),
            num_replicas: self.replicas,
            ..Default::default()
        }
    }

    /// The durable pull consumer configuration this adapter creates and expects.
    pub fn consumer_config(&self) -> consumer::pull::Config {
        consumer::pull::Config {
            durable_name: Some(self.consumer_name.clone()),
            filter_subject: OBS_SUBJECTS.to_owned(),
            ack_policy: consumer::AckPolicy::Explicit,
            deliver_policy: consumer::DeliverPolicy::All,
            ack_wait: Duration::from_millis(self.ack_wait_ms),
            max_ack_pending: clamp_i64(self.max_ack_pending),
            // Unlimited: a message is never given up on; dedup makes redelivery harmless.
            max_deliver: -1,
            ..Default::default()
        }
    }
}

fn clamp_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Errors from connecting and from creating or checking the stream and consumer.
#[derive(Debug, thiserror::Error)]
pub enum NatsSetupError {
    #[error("cannot connect to NATS at {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("JetStream request failed: {0}")]
    Request(String),
    /// An existing stream or consumer differs from what this binary relies on.
    #[error(
        "existing {what} has a configuration this core does not accept: {differences}; \
         change it deliberately (e.g. `nats stream edit` / `nats consumer edit`) or fix the core's config"
    )]
    ConfigMismatch { what: String, differences: String },
    /// The configuration itself cannot work (e.g. a duplicate window shorter than the
    /// self-point publisher's retries).
    #[error("bus configuration: {0}")]
    Config(String),
}

impl From<NatsSetupError> for BusError {
    fn from(error: NatsSetupError) -> BusError {
        match error {
            NatsSetupError::Connect { .. } => BusError::Connection(error.to_string()),
            _ => BusError::Other(error.to_string()),
        }
    }
}

/// The JetStream bus handle. Clones share one connection and one tag table.
#[derive(Clone)]
pub struct NatsBus {
    inner: Arc<Inner>,
}

struct Inner {
    config: NatsBusConfig,
    client: Client,
    jetstream: jetstream::Context,
    /// Tag → the message's `$JS.ACK...` reply subject.
    tags: Mutex<TagTable<Subject>>,
    clock: Arc<dyn Clock>,
    /// The driver library's publisher, for the core's self-points: message id set, ack
    /// awaited, retried inside the duplicate window.
    self_points: sentinel_driver::ObservationPublisher,
    /// What the server refused this connection (its permissions), counted.
    refusals: Refusals,
}

/// The bound durable consumer, from [`NatsBus::bind`].
pub struct NatsConsumer {
    consumer: consumer::PullConsumer,
    bus: NatsBus,
    subjects: Subjects,
}

const ACK_PAYLOAD: &[u8] = b"+ACK";

/// Distinct subjects a consumer keeps shared before it starts over: far above a fleet's
/// `obs.<host>.<driver_instance>` count, small beside the stream.
pub const SUBJECTS_INTERNED_MAX: usize = 4_096;

/// The observation subjects a consumer has seen, one shared `Arc<str>` each, so a delivery's
/// subject costs a lookup instead of an allocation (issue 24 item 3; async-nats's `Subject`
/// cannot give up its bytes without a copy). Bounded by [`SUBJECTS_INTERNED_MAX`]: a stream of
/// ever-new subjects empties the set rather than grows it.
#[derive(Default)]
struct Subjects {
    set: HashSet<Arc<str>>,
}

impl Subjects {
    fn intern(&mut self, subject: &str) -> Arc<str> {
        if let Some(shared) = self.set.get(subject) {
            return shared.clone();
        }
        if self.set.len() >= SUBJECTS_INTERNED_MAX {
            self.set.clear();
        }
        let shared: Arc<str> = subject.into();
        self.set.insert(shared.clone());
        shared
    }
}

impl NatsBus {
    /// Connects with the system clock (used only for `oldest_unacked_age_ms`).
    pub async fn connect(config: NatsBusConfig) -> Result<NatsBus, NatsSetupError> {
        NatsBus::connect_with_clock(config, Arc::new(SystemClock)).await
    }

    pub async fn connect_with_clock(
        config: NatsBusConfig,
        clock: Arc<dyn Clock>,
    ) -> Result<NatsBus, NatsSetupError> {
        if !(1..=STREAM_REPLICAS_MAX).contains(&config.replicas) {
            return Err(NatsSetupError::Config(format!(
                "stream replicas {} is outside 1..={STREAM_REPLICAS_MAX}",
                config.replicas
            )));
        }
        let addrs = sentinel_driver::connect::server_addrs(&config.url)
            .map_err(|error| NatsSetupError::Config(error.to_string()))?;
        let refusals = Refusals::default();
        let client = connect_options(
            &format!("sentinel-core pid {}", std::process::id()),
            CORE_PRINCIPAL,
            &config.credentials,
            refusals.clone(),
        )
        .request_timeout(Some(Duration::from_millis(config.request_timeout_ms)))
        .connect(addrs)
        .await
        .map_err(|error| NatsSetupError::Connect {
            url: config.url.clone(),
            reason: error.to_string(),
        })?;
        let jetstream = jetstream::new(client.clone());
        let tags = Mutex::new(TagTable::new(config.tags_max));
        // Built once, so a duplicate window too short for its retries fails here, at connect.
        let self_points = sentinel_driver::ObservationPublisher::on(
            &sentinel_driver::BusConnection {
                client: client.clone(),
                refusals: refusals.clone(),
            },
            sentinel_driver::PublisherConfig {
                duplicate_window_ms: config.duplicate_window_ms,
                ..sentinel_driver::PublisherConfig::default()
            },
        )
        .map_err(|error| NatsSetupError::Config(error.to_string()))?;
        Ok(NatsBus {
            inner: Arc::new(Inner {
                config,
                client,
                jetstream,
                tags,
                clock,
                self_points,
                refusals,
            }),
        })
    }

    pub fn config(&self) -> &NatsBusConfig {
        &self.inner.config
    }

    /// Operations the server refused this connection under its permissions.
    pub fn refusals(&self) -> &Refusals {
        &self.inner.refusals
    }

    /// The underlying client (for tests and tools; the runtime needs only the `Bus` methods).
    pub fn client(&self) -> &Client {
        &self.inner.client
    }

    pub fn jetstream(&self) -> &jetstream::Context {
        &self.inner.jetstream
    }

    /// Creates the observation stream if missing, or checks an existing one matches. Allowed
    /// before the single-writer lock: it never touches the consumer.
    pub async fn ensure_stream(&self) -> Result<stream::Stream, NatsSetupError> {
        let config = &self.inner.config;
        let expected = config.stream_config();
        let stream = match self.inner.jetstream.get_stream(&config.stream_name).await {
            Ok(stream) => stream,
            Err(error) if is_stream_not_found(&error) => {
                tracing::info!(stream = %config.stream_name, "creating observation stream");
                self.inner
                    .jetstream
                    .create_stream(expected.clone())
                    .await
                    .map_err(|error| NatsSetupError::Request(format!("create stream: {error}")))?
            }
            Err(error) => return Err(NatsSetupError::Request(format!("get stream: {error}"))),
        };
        let found = stream.cached_info().config.clone();
        let differences = stream_differences(&expected, &found);
        if !differences.is_empty() {
            return Err(NatsSetupError::ConfigMismatch {
                what: format!("stream {}", config.stream_name),
                differences: differences.join("; "),
            });
        }
        let bounds_change =
            found.max_messages != expected.max_messages || found.max_bytes != expected.max_bytes;
        if bounds_change {
            // A bound below what the stream holds would make nats-server delete the oldest
            // messages on the update, whatever the discard policy: never silently.
            let state = &stream.cached_info().state;
            let held = bound_refusals(&expected, state.messages, state.bytes);
            if !held.is_empty() {
                return Err(NatsSetupError::ConfigMismatch {
                    what: format!("stream {}", config.stream_name),
                    differences: held.join("; "),
                });
            }
        }
        if found.num_replicas != expected.num_replicas || bounds_change {
            // Only the replica count and the bounds change (the fields nats-server updates in
            // place); the rest is the server's own record.
            tracing::info!(
                stream = %config.stream_name,
                replicas_from = found.num_replicas,
                replicas_to = expected.num_replicas,
                max_msgs_from = found.max_messages,
                max_msgs_to = expected.max_messages,
                max_bytes_from = found.max_bytes,
                max_bytes_to = expected.max_bytes,
                "updating the observation stream's replica count and bounds in place"
            );
            let replicas_change = found.num_replicas != expected.num_replicas;
            let updated = stream::Config {
                num_replicas: expected.num_replicas,
                max_messages: expected.max_messages,
                max_bytes: expected.max_bytes,
                ..found
            };
            self.inner
                .jetstream
                .update_stream(&updated)
                .await
                .map_err(|error| NatsSetupError::Request(format!("update stream: {error}")))?;
            if replicas_change {
                return self.wait_replicas_current().await;
            }
            return self
                .inner
                .jetstream
                .get_stream(&config.stream_name)
                .await
                .map_err(|error| NatsSetupError::Request(format!("get stream after update: {error}")));
        }
        Ok(stream)
    }

    /// After a change of the replica count: waits (bounded by `request_timeout_ms`) until the
    /// stream reports every new replica current, since a consumer created while the stream's
    /// group is still forming is refused ("insufficient resources"). Past the bound it goes on
    /// with the stream as it is; the consumer's creation then says what is wrong.
    async fn wait_replicas_current(&self) -> Result<stream::Stream, NatsSetupError> {
        let config = &self.inner.config;
        let deadline = tokio::time::Instant::now() + Duration::from_millis(config.request_timeout_ms);
        loop {
            let stream = self
                .inner
                .jetstream
                .get_stream(&config.stream_name)
                .await
                .map_err(|error| NatsSetupError::Request(format!("get stream: {error}")))?;
            let peers_current = stream.cached_info().cluster.as_ref().map_or(0, |cluster| {
                cluster.replicas.iter().filter(|peer| peer.current).count()
            });
            if peers_current + 1 >= config.replicas || tokio::time::Instant::now() >= deadline {
                if peers_current + 1 < config.replicas {
                    tracing::warn!(
                        stream = %config.stream_name,
                        current = peers_current + 1,
                        replicas = config.replicas,
                        "the stream's new replicas are not all current yet"
                    );
                }
                return Ok(stream);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Publishes pending core-side messages and acks and waits until the server has them.
    pub async fn flush(&self) -> Result<(), BusError> {
        self.inner
            .client
            .flush()
            .await
            .map_err(|error| BusError::Connection(error.to_string()))
    }

    fn tags(&self) -> MutexGuard<'_, TagTable<Subject>> {
        // Only short, non-panicking sections hold this lock; a poisoned table is still sound.
        self.inner
            .tags
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Delivery tags issued and not yet acked (holes included); for self-points and tests.
    pub fn tags_outstanding(&self) -> usize {
        self.tags().len()
    }

    /// Tags evicted to keep the tag table's bound (their acks were lost).
    pub fn tags_evicted_total(&self) -> u64 {
        self.tags().evicted_total()
    }
}

fn is_stream_not_found(error: &jetstream::context::GetStreamError) -> bool {
    matches!(
        error.kind(),
        jetstream::context::GetStreamErrorKind::JetStream(ref e)
            if e.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
    )
}

fn is_consumer_not_found(error: &jetstream::context::ConsumerInfoError) -> bool {
    match error.kind() {
        jetstream::context::ConsumerInfoErrorKind::NotFound => true,
        jetstream::context::ConsumerInfoErrorKind::JetStream(e) => {
            e.error_code() == jetstream::ErrorCode::CONSUMER_NOT_FOUND
        }
        _ => false,
    }
}

fn differ<T: std::fmt::Debug + PartialEq>(out: &mut Vec<String>, field: &str, expected: T, found: T) {
    if expected != found {
        out.push(format!("{field}: expected {expected:?}, found {found:?}"));
    }
}

/// The differences between the stream the core expects and the one it found that the core
/// refuses: every field but the replica count and the two bounds, which `ensure_stream`
/// updates in place (nats-server changes them without recreating the stream).
fn stream_differences(expected: &stream::Config, found: &stream::Config) -> Vec<String> {
    let mut out = Vec::new();
    differ(&mut out, "subjects", &expected.subjects, &found.subjects);
    differ(&mut out, "storage", &expected.storage, &found.storage);
    differ(&mut out, "retention", &expected.retention, &found.retention);
    differ(&mut out, "discard", &expected.discard, &found.discard);
    differ(&mut out, "max_age", expected.max_age, found.max_age);
    differ(
        &mut out,
        "duplicate_window",
        expected.duplicate_window,
        found.duplicate_window,
    );
    out
}

/// Why the stream cannot take `expected`'s bounds now: a bound below the messages or bytes it
/// holds (nats-server would delete the oldest to fit). Each names the field, the configured
/// bound and what the stream holds; empty when both fit.
fn bound_refusals(expected: &stream::Config, messages: u64, bytes: u64) -> Vec<String> {
    let mut out = Vec::new();
    let below = |bound: i64, held: u64| bound >= 0 && u64::try_from(bound).is_ok_and(|bound| bound < held);
    if below(expected.max_messages, messages) {
        out.push(format!(
            "max_msgs: the configured bound {} is below the {messages} messages the stream holds; \
             lowering it would delete the oldest (let the core drain the stream first)",
            expected.max_messages
        ));
    }
    if below(expected.max_bytes, bytes) {
        out.push(format!(
            "max_bytes: the configured bound {} is below the {bytes} bytes the stream holds; \
             lowering it would delete the oldest (let the core drain the stream first)",
            expected.max_bytes
        ));
    }
    out
}

fn consumer_differences(expected: &consumer::pull::Config, found: &consumer::Config) -> Vec<String> {
    let mut out = Vec::new();
    differ(
        &mut out,
        "pull (no deliver_subject)",
        None,
        found.deliver_subject.as_deref(),
    );
    differ(&mut out, "ack_policy", &expected.ack_policy, &found.ack_policy);
    differ(
        &mut out,
        "deliver_policy",
        &expected.deliver_policy,
        &found.deliver_policy,
    );
    differ(&mut out, "ack_wait", expected.ack_wait, found.ack_wait);
    differ(
        &mut out,
        "max_ack_pending",
        expected.max_ack_pending,
        found.max_ack_pending,
    );
    // The server reports "unlimited" as -1 or 0 depending on version.
    differ(&mut out, "max_deliver unlimited", true, found.max_deliver <= 0);
    let filter_ok = found.filter_subject == expected.filter_subject
        || (found.filter_subject.is_empty() && found.filter_subjects == [expected.filter_subject.clone()]);
    if !filter_ok {
        out.push(format!(
            "filter: expected {:?}, found {:?} / {:?}",
            expected.filter_subject, found.filter_subject, found.filter_subjects
        ));
    }
    out
}

impl Bus for NatsBus {
    type Consumer = NatsConsumer;

    /// Creates the durable pull consumer if missing (checking an existing one matches) and
    /// binds it. Must only run while holding the single-writer lock.
    async fn bind(&self) -> Result<NatsConsumer, BusError> {
        let stream = self.ensure_stream().await?;
        let config = &self.inner.config;
        let expected = config.consumer_config();
        let found = match stream.consumer_info(&config.consumer_name).await {
            Ok(info) => info.config,
            Err(error) if is_consumer_not_found(&error) => {
                tracing::info!(consumer = %config.consumer_name, "creating durable consumer");
                let created: consumer::PullConsumer = stream
                    .create_consumer(expected.clone())
                    .await
                    .map_err(|error| BusError::Other(format!("create consumer: {error}")))?;
                created.cached_info().config.clone()
            }
            Err(error) => return Err(BusError::Other(format!("consumer info: {error}"))),
        };
        let differences = consumer_differences(&expected, &found);
        if !differences.is_empty() {
            return Err(NatsSetupError::ConfigMismatch {
                what: format!(
                    "consumer {} on stream {}",
                    config.consumer_name, config.stream_name
                ),
                differences: differences.join("; "),
            }
            .into());
        }
        let consumer: consumer::PullConsumer = stream
            .get_consumer(&config.consumer_name)
            .await
            .map_err(|error| BusError::Other(format!("get consumer: {error}")))?;
        tracing::info!(consumer = %config.consumer_name, "bound durable consumer");
        Ok(NatsConsumer {
            consumer,
            bus: self.clone(),
            subjects: Subjects::default(),
        })
    }

    async fn ack(&self, tags: Vec<DeliveryTag>) -> Result<(), BusError> {
        let replies: Vec<Subject> = {
            let mut table = self.tags();
            tags.into_iter().filter_map(|tag| table.remove(tag)).collect()
        };
        if replies.is_empty() {
            return Ok(());
        }
        // Plain acks, pipelined, then one flush so they have left this process when we return.
        // The server does not confirm a plain ack; a lost one means a harmless redelivery.
        for reply in replies {
            self.inner
                .client
                .publish(reply, Bytes::from_static(ACK_PAYLOAD))
                .await
                .map_err(|error| BusError::Connection(format!("ack: {error}")))?;
        }
        self.flush().await
    }

    async fn publish(&self, subject: String, payload: Bytes) -> Result<(), BusError> {
        self.inner
            .client
            .publish(subject, payload)
            .await
            .map_err(|error| BusError::Connection(format!("publish: {error}")))
    }

    async fn publish_command(
        &self,
        subject: String,
        reply_to: String,
        payload: Bytes,
    ) -> Result<(), BusError> {
        self.inner
            .client
            .publish_with_reply(subject, reply_to, payload)
            .await
            .map_err(|error| BusError::Connection(format!("publish a command: {error}")))
    }

    async fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
    ) -> Result<sentinel_ports::PublishAck, BusError> {
        self.inner.self_points.publish(&subject, &msg_id, payload).await
    }

    async fn lag(&self) -> Result<Lag, BusError> {
        let config = &self.inner.config;
        // Consumer first, then the stream, so an ack the consumer has seen is also reflected in
        // the stream. The stream's state carries the first (oldest) message's timestamp, which
        // under WorkQueue retention is the oldest unacked or pending message: two requests, no
        // message get.
        let stream = self
            .inner
            .jetstream
            .get_stream_no_info(&config.stream_name)
            .await
            .map_err(|error| BusError::Other(format!("stream: {error}")))?;
        let (pending, ack_pending) = match stream.consumer_info(&config.consumer_name).await {
            Ok(info) => (info.num_pending, info.num_ack_pending as u64),
            // Not bound yet (e.g. read before the lock): a deliver-all consumer would have
            // everything in the stream pending.
            Err(error) if is_consumer_not_found(&error) => (u64::MAX, 0),
            Err(error) => return Err(BusError::Other(format!("consumer info: {error}"))),
        };
        let stream_info = stream
            .get_info()
            .await
            .map_err(|error| BusError::Other(format!("stream info: {error}")))?;
        let state = &stream_info.state;
        let pending = if pending == u64::MAX {
            state.messages
        } else {
            pending
        };
        let oldest_unacked_age_ms = (state.messages > 0 && pending + ack_pending > 0).then(|| {
            let first = Micros::from_unix_nanos(state.first_timestamp.unix_timestamp_nanos());
            (self.inner.clock.now().saturating_sub(first).max(0) / 1_000) as u64
        });
        Ok(Lag {
            pending,
            ack_pending,
            oldest_unacked_age_ms,
            first_seq: (state.messages > 0).then_some(state.first_sequence),
            last_seq: state.last_sequence,
            stream_messages: state.messages,
            stream_bytes: state.bytes,
            // The stream is always bounded (`ensure_stream`); -1 would mean unlimited.
            stream_messages_max: u64::try_from(stream_info.config.max_messages).unwrap_or(0),
            stream_bytes_max: u64::try_from(stream_info.config.max_bytes).unwrap_or(0),
        })
    }

    async fn inbound(&self) -> Result<tokio::sync::mpsc::Receiver<Inbound>, BusError> {
        use futures::StreamExt as _;
        use sentinel_core::wire::{
            ASSIGNMENT_REPLY_WILDCARD, COMMAND_REPLY_WILDCARD, COMMAND_REQUEST_WILDCARD,
            DRIVER_HELLO_WILDCARD, REGISTRY_LOADED_WILDCARD, REPROCESS_REQUEST_WILDCARD,
        };
        let client = &self.inner.client;
        let subscribe = |subject: &'static str| async move {
            client
                .subscribe(subject)
                .await
                .map_err(|error| BusError::Connection(format!("subscribe to {subject}: {error}")))
        };
        // Every principal's requests: the principal is the subject's last token.
        let requests = subscribe(COMMAND_REQUEST_WILDCARD).await?;
        let hellos = subscribe(DRIVER_HELLO_WILDCARD).await?;
        let reprocess = subscribe(REPROCESS_REQUEST_WILDCARD).await?;
        // Drivers' answers to this core's commands, below its own inbox.
        let replies = subscribe(COMMAND_REPLY_WILDCARD).await?;
        // Drivers' acknowledgements of this core's assignments (issue 21 item 7), likewise.
        let acks = subscribe(ASSIGNMENT_REPLY_WILDCARD).await?;
        // `sentinel registry load`'s announcements of a new version (issue 21 item 7).
        let loaded = subscribe(REGISTRY_LOADED_WILDCARD).await?;
        // One stream of all, so the runtime has one channel to read.
        let mut merged = futures::stream::select(
            futures::stream::select(requests, futures::stream::select(hellos, loaded)),
            futures::stream::select(reprocess, futures::stream::select(replies, acks)),
        );
        let (tx, rx) = tokio::sync::mpsc::channel(INBOUND_QUEUED_MAX);
        tokio::spawn(async move {
            while let Some(message) = merged.next().await {
                let subject = message.subject.as_str();
                // A status from the server, not a message: "no responders" on a command's
                // reply subject when no instance is subscribed (it is sent again on its hello).
                if let Some(status) = message.status {
                    tracing::debug!(subject, status = %status, "server status on an inbound subject");
                    continue;
                }
                let decoded = Inbound::decode(subject, &message.payload, message.reply.as_deref());
                match decoded {
                    Ok(inbound) => {
                        if tx.send(inbound).await.is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        // Subject, size and why only: a request may carry a value.
                        let bytes = message.payload.len();
                        tracing::warn!(error, subject, bytes, "undecodable inbound message")
                    }
                }
            }
        });
        Ok(rx)
    }
}

impl NatsConsumer {
    /// One pull that returns at once with what is there (possibly nothing).
    async fn pull_now(&self, max: usize, out: &mut Vec<jetstream::Message>) -> Result<(), BusError> {
        let mut batch = self
            .consumer
            .fetch()
            .max_messages(max)
            .messages()
            .await
            .map_err(|error| BusError::Other(format!("fetch: {error}")))?;
        drain_pull(&mut batch, out, 0).await
    }

    /// One pull for a single message, waiting up to `wait_ms` for it.
    async fn pull_one_waiting(
        &self,
        wait_ms: u64,
        out: &mut Vec<jetstream::Message>,
    ) -> Result<(), BusError> {
        let mut batch = self
            .consumer
            .batch()
            .max_messages(1)
            .expires(Duration::from_millis(wait_ms))
            .messages()
            .await
            .map_err(|error| BusError::Other(format!("fetch: {error}")))?;
        drain_pull(&mut batch, out, wait_ms).await
    }

    fn make_deliveries(&mut self, messages: Vec<jetstream::Message>) -> Result<Vec<Delivery>, BusError> {
        let mut out = Vec::with_capacity(messages.len());
        let mut table = self.bus.tags();
        for message in messages {
            let (stream_seq, delivered, published) = {
                let info = message
                    .info()
                    .map_err(|error| BusError::Other(format!("ack subject: {error}")))?;
                (info.stream_sequence, info.delivered, info.published)
            };
            let jetstream::Message { message, .. } = message;
            let reply = message
                .reply
                .ok_or_else(|| BusError::Other("JetStream message without a reply subject".to_owned()))?;
            let tag = table.insert(reply);
            out.push(Delivery {
                tag,
                stream_seq,
                subject: self.subjects.intern(message.subject.as_str()),
                payload: message.payload,
                ingested_at: Micros::from_unix_nanos(published.unix_timestamp_nanos()),
                delivered_count: u64::try_from(delivered).unwrap_or(1).max(1),
            });
        }
        Ok(out)
    }
}

/// How long a pull may go without a word from the server beyond its own wait before it is
/// given up as lost: a pull request sent to a consumer leader that was killed before answering
/// is never answered (a `fetch()` has no expiry of its own), and the replacement leader knows
/// nothing of it. The caller re-issues the pull.
pub const PULL_SILENCE_MS: u64 = 2_000;

/// Collects one pull's messages. A status that ends the pull early (409: max ack pending
/// reached, request limits, leadership change) must not throw away messages already
/// delivered to us — they would only come back after ack_wait — so they are kept, and a 409
/// with nothing in hand is simply "nothing now" (backpressure, not a failure). A pull left
/// unanswered for [`PULL_SILENCE_MS`] past `wait_ms` (the missed heartbeat of a lost pull
/// request) ends with what it has; with nothing it is a transient [`BusError::Connection`].
async fn drain_pull(
    batch: &mut consumer::pull::Batch,
    out: &mut Vec<jetstream::Message>,
    wait_ms: u64,
) -> Result<(), BusError> {
    let before = out.len();
    let silence_ms = wait_ms.saturating_add(PULL_SILENCE_MS);
    // One timer for the whole pull, not one per message (issue 24 item 3: a `timeout_at` per
    // message registered and dropped a timer entry for each of the 500).
    let deadline = tokio::time::sleep(Duration::from_millis(silence_ms));
    tokio::pin!(deadline);
    loop {
        let next = tokio::select! {
            biased;
            next = batch.next() => next,
            () = &mut deadline => {
                if out.len() > before {
                    return Ok(());
                }
                return Err(BusError::Connection(format!(
                    "pull unanswered for {silence_ms} ms (a lost pull request or a consumer leader change); re-issuing"
                )));
            }
        };
        let Some(message) = next else {
            return Ok(());
        };
        match message {
            Ok(message) => out.push(message),
            Err(error) => {
                let text = error.to_string();
                if out.len() > before || text.contains("409") {
                    tracing::debug!(error = %text, kept = out.len() - before, "pull ended early");
                    return Ok(());
                }
                return Err(BusError::Other(format!("fetch: {text}")));
            }
        }
    }
}

impl Consumer for NatsConsumer {
    async fn fetch(&mut self, max: usize, wait_ms: u64) -> Result<Vec<Delivery>, BusError> {
        let max = max.min(FETCH_MAX);
        if max == 0 {
            return Ok(Vec::new());
        }
        let mut messages = Vec::with_capacity(max);
        self.pull_now(max, &mut messages).await?;
        if messages.is_empty() && wait_ms > 0 {
            // Wait only for the first message; a batch() for `max` would hold the caller until
            // the batch filled or `wait_ms` passed, even with messages in hand.
            self.pull_one_waiting(wait_ms, &mut messages).await?;
            if !messages.is_empty() && max > 1 {
                self.pull_now(max - 1, &mut messages).await?;
            }
        }
        self.make_deliveries(messages)
    }
}

/// Why a request on a plain subject got no answer ([`request_reply`]).
#[derive(Debug, thiserror::Error)]
pub enum RequestFailed {
    #[error("nothing listens on {0}")]
    NoResponders(String),
    #[error("no answer within {0} ms")]
    TimedOut(u64),
    #[error("{0}")]
    Other(String),
}

/// One request/reply on a plain subject as `connection`'s principal (the answer comes to its
/// inbox), waiting at most `timeout_ms`. The operator's tools ask the running core this way
/// (`sentinel reprocess` while a core holds the lock).
pub async fn request_reply(
    connection: &sentinel_driver::connect::BusConnection,
    subject: &str,
    payload: Bytes,
    timeout_ms: u64,
) -> Result<Bytes, RequestFailed> {
    let request = async_nats::Request::new()
        .payload(payload)
        .timeout(Some(Duration::from_millis(timeout_ms)));
    match connection.client.send_request(subject.to_owned(), request).await {
        Ok(message) => Ok(message.payload),
        Err(e) => Err(match e.kind() {
            async_nats::RequestErrorKind::NoResponders => RequestFailed::NoResponders(subject.to_owned()),
            async_nats::RequestErrorKind::TimedOut => RequestFailed::TimedOut(timeout_ms),
            _ => RequestFailed::Other(e.to_string()),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_is_shared_once_seen_and_the_set_stays_bounded() {
        let mut subjects = Subjects::default();
        let first = subjects.intern("obs.plant-a.modbus-1");
        let again = subjects.intern("obs.plant-a.modbus-1");
        assert!(
            Arc::ptr_eq(&first, &again),
            "a second delivery on a subject shares the first's"
        );
        assert_eq!(&*subjects.intern("obs.plant-b.modbus-1"), "obs.plant-b.modbus-1");
        for n in 0..2 * SUBJECTS_INTERNED_MAX {
            assert_eq!(&*subjects.intern(&format!("obs.h.d{n}")), format!("obs.h.d{n}"));
            assert!(subjects.set.len() <= SUBJECTS_INTERNED_MAX);
        }
    }
}
