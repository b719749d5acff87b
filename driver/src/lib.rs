//! `sentinel-driver`: what a device driver links (driver contract v1, DESIGN.md §2). It depends
//! on `sentinel-core`'s wire types and async-nats, never on a database client: a driver host
//! needs no PostgreSQL library (checked by `tests/architecture.rs`).
//!
//! Owns: how a driver (or a test, benchmark or the demo fleet) puts observations on the bus —
//! the message id (`Nats-Msg-Id: <driver_instance>:<source_epoch>:<source_seq>`) that lets
//! the stream's duplicate window drop publisher retries, confirming each publish by awaiting
//! its ack (a publish is only accepted when the stream says so; a full discard-new stream
//! shows up there, as [`BusError::StreamFull`]), retrying a timed-out publish with the same id
//! inside the duplicate window, and pipelined publishing for loading large backlogs fast.
//!
//! [`ObservationSink`] is the one interface the demo fleet and tests publish through; it is
//! implemented by [`ObservationPublisher`] (real JetStream) and, in `sentinel-models`, by the
//! in-memory bus model; it and the error types are the port's (`sentinel-ports`).
//!
//! [`EpochGuard`] is the driver's half of bus fencing (core runtime spec, "Fencing the bus"):
//! it remembers the highest core epoch seen, with that core's start identity ([`EpochFloor`]),
//! and refuses commands from a lower epoch, or from the floor's epoch sent by another start
//! (an epoch repeated after a database failover, issue 25 item 3), with outcome `rejected`,
//! reason `stale_epoch`.
//!
//! [`commands`] is the driver's command intake: subscribe, check the epoch, apply only what was
//! admitted, answer every command (driver contract 2), and answer a command it already applied
//! `applied` again without handing it over. [`state`] is what an instance persists across its
//! restarts: its source epoch, the epoch floor and the ids of the commands it applied.
//!
//! [`gaps`] is how a driver says there is no reading and why: an `unavailable` observation
//! whose reason comes from the closed vocabulary ([`sentinel_core::GapReason`]).
//!
//! [`disk_queue`] is the second buffer: where a publish goes when the stream is full, bounded
//! by size and age, with a drop count, a depth and a publish-failure count for the driver's
//! `queue_drops`, `queue_depth` and `publish_failures` self-points.

pub mod commands;
pub mod connect;
pub mod disk_queue;
pub mod gaps;
pub mod state;

pub use gaps::gap_observation;

use std::collections::VecDeque;
use std::future::IntoFuture;
use std::time::Duration;

use async_nats::jetstream::{self, context::PublishErrorKind, message::PublishMessage};
use bytes::Bytes;

use sentinel_core::wire::{CommandEnvelope, CommandOutcome, CommandReply, STALE_EPOCH};

/// The bus's errors and a stream's answer to a publish: the port's types, which both sides of
/// the bus speak (`sentinel-ports`).
pub use sentinel_ports::{BusError, PublishAck};

pub use connect::{BusConnection, Credentials, Refusals, RefusedOp};

/// The message id of an observation: `"<driver_instance>:<source_epoch>:<source_seq>"`.
pub use sentinel_core::wire::msg_id;

/// Anything observations can be published into: real JetStream ([`ObservationPublisher`]) or
/// the in-memory model (`sentinel-models`).
pub use sentinel_ports::ObservationSink;

/// Retry and timeout policy for [`ObservationPublisher`].
///
/// A publish is retried, always with the same message id, while it fails transiently: its ack
/// timed out, the stream had no responder ("no responders": a replicated stream between a
/// killed leader and the election of the next, 4–9 s), the connection broke, or the cluster
/// said JetStream is temporarily unavailable. Retries go on for `retry_for_ms` from the first
/// attempt (longer than several elections), with a pause doubling from `retry_backoff_ms` to
/// `retry_backoff_max_ms`; the whole span stays inside the duplicate window, so a retry of a
/// publish that did land is dropped by the stream, never stored twice.
#[derive(Clone, Debug)]
pub struct PublisherConfig {
    /// How long to wait for one publish's ack before retrying it.
    pub ack_timeout_ms: u64,
    /// How long after the first attempt a transient failure is still retried.
    pub retry_for_ms: u64,
    /// The first pause between attempts; it doubles on each further one.
    pub retry_backoff_ms: u64,
    /// The longest pause between attempts.
    pub retry_backoff_max_ms: u64,
    /// The stream's duplicate window. Retries must all happen inside it, or a retry of a
    /// publish that did land would be stored twice; [`ObservationPublisher::new`] refuses a
    /// policy that could outlast it.
    pub duplicate_window_ms: u64,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        PublisherConfig {
            ack_timeout_ms: 5_000,
            retry_for_ms: 30_000,
            retry_backoff_ms: 250,
            retry_backoff_max_ms: 2_000,
            duplicate_window_ms: 120_000,
        }
    }
}

impl PublisherConfig {
    /// The longest a publish can take from the first attempt to the last ack wait: the last
    /// attempt starts at most `retry_for_ms` plus one pause after the first, and waits at most
    /// `ack_timeout_ms`.
    pub fn retry_span_ms(&self) -> u64 {
        self.retry_for_ms
            .saturating_add(self.retry_backoff_max_ms)
            .saturating_add(self.ack_timeout_ms)
    }

    /// The pause after the `attempt`th (1-based) failed attempt.
    pub fn backoff_ms(&self, attempt: u32) -> u64 {
        let doubled = self
            .retry_backoff_ms
            .saturating_mul(1u64 << attempt.saturating_sub(1).min(20));
        doubled.min(self.retry_backoff_max_ms)
    }
}

/// The most publishes [`ObservationPublisher::publish_pipelined`] keeps in flight. Each
/// un-awaited ack future holds one of the JetStream context's ack permits (5,000 by default,
/// `ContextBuilder::max_ack_inflight`); a window at or above that would wait for a permit that
/// only awaiting an earlier future releases, i.e. forever.
pub const PIPELINE_WINDOW_MAX: usize = 4_096;

/// What a pipelined load did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct PipelineReport {
    /// Accepted and stored.
    pub stored: u64,
    /// Accepted and dropped by the duplicate window.
    pub duplicates: u64,
}

/// Publishes observations into the JetStream observation stream.
#[derive(Clone)]
pub struct ObservationPublisher {
    jetstream: jetstream::Context,
    config: PublisherConfig,
    /// The connection's permission refusals, when it was made through [`BusConnection`]: a
    /// refused publish fails at once with [`BusError::PermissionDenied`] instead of looking
    /// like a lost ack.
    refusals: Option<Refusals>,
}

impl ObservationPublisher {
    pub fn new(
        jetstream: jetstream::Context,
        config: PublisherConfig,
    ) -> Result<ObservationPublisher, BusError> {
        if config.retry_span_ms() >= config.duplicate_window_ms {
            return Err(BusError::Other(format!(
                "publisher retries span {} ms, not inside the {} ms duplicate window",
                config.retry_span_ms(),
                config.duplicate_window_ms
            )));
        }
        Ok(ObservationPublisher {
            jetstream,
            config,
            refusals: None,
        })
    }

    /// Publishes over a connection made as a principal, whose refusals it reports.
    pub fn on(connection: &BusConnection, config: PublisherConfig) -> Result<ObservationPublisher, BusError> {
        let mut publisher = ObservationPublisher::new(jetstream::new(connection.client.clone()), config)?;
        publisher.refusals = Some(connection.refusals.clone());
        Ok(publisher)
    }

    /// Connects its own client to `url`, one URL or a comma-separated list
    /// ([`connect::server_addrs`]); no credentials.
    pub async fn connect(url: &str, config: PublisherConfig) -> Result<ObservationPublisher, BusError> {
        let client = async_nats::connect(connect::server_addrs(url)?)
            .await
            .map_err(|error| BusError::Connection(error.to_string()))?;
        ObservationPublisher::new(jetstream::new(client), config)
    }

    /// Sends one publish and returns its ack future (not yet awaited); `Ok(None)` when the
    /// send failed transiently ([`is_transient`]) and is worth retrying.
    async fn send(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
    ) -> Result<Option<jetstream::context::PublishAckFuture>, BusError> {
        match self
            .jetstream
            .send_publish(
                subject.to_owned(),
                PublishMessage::build().payload(payload).message_id(msg_id),
            )
            .await
        {
            Ok(ack) => Ok(Some(ack)),
            Err(error) if is_transient(&error) => {
                tracing::debug!(subject, %error, "publish send failed transiently");
                Ok(None)
            }
            Err(error) => Err(map_publish_error(error)),
        }
    }

    /// Refusals of publishes on `subject` so far (0 without a [`BusConnection`]).
    fn refused_so_far(&self, subject: &str) -> u64 {
        self.refusals
            .as_ref()
            .map_or(0, |r| r.count(RefusedOp::Publish, subject))
    }

    /// When an ack for a publish sent now is given up on.
    fn ack_deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_millis(self.config.ack_timeout_ms)
    }

    /// Awaits one ack until `deadline` (its send plus this publisher's ack timeout: a pipelined
    /// ack awaited late does not get a fresh timeout, or a window of lost acks would take the
    /// window times the timeout). `Ok(None)` means it timed out or failed transiently
    /// ([`is_transient`]: worth retrying with the same id). A refusal of a publish on `subject`
    /// reported after `refused_before` ends the wait at once.
    async fn await_ack(
        &self,
        ack: jetstream::context::PublishAckFuture,
        subject: &str,
        refused_before: u64,
        deadline: tokio::time::Instant,
    ) -> Result<Option<PublishAck>, BusError> {
        let timed = tokio::time::timeout_at(deadline, ack.into_future());
        let refused = async {
            match &self.refusals {
                Some(refusals) => {
                    refusals
                        .refused_after(RefusedOp::Publish, subject, refused_before)
                        .await
                }
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            outcome = timed => outcome,
            () = refused => {
                return Err(BusError::PermissionDenied {
                    operation: "publish",
                    subject: subject.to_owned(),
                });
            }
        };
        match outcome {
            Err(_elapsed) => Ok(None),
            Ok(Err(error)) if is_transient(&error) => {
                tracing::debug!(subject, %error, "publish ack failed transiently");
                Ok(None)
            }
            Ok(Err(error)) => Err(map_publish_error(error)),
            Ok(Ok(ack)) => Ok(Some(PublishAck {
                seq: ack.sequence,
                duplicate: ack.duplicate,
            })),
        }
    }

    /// Publishes one observation and waits for the stream to accept it. An attempt that
    /// fails transiently (timed out, no responders during a stream leader election, broken
    /// connection) is retried with the same message id for `retry_for_ms` with a doubling
    /// pause, so if an earlier attempt did land the retry is dropped as a duplicate. A full
    /// stream is [`BusError::StreamFull`] at once (not retried here: the driver's local queue
    /// is the place to wait).
    pub async fn publish(&self, subject: &str, msg_id: &str, payload: Bytes) -> Result<PublishAck, BusError> {
        let started = tokio::time::Instant::now();
        let retry_for = Duration::from_millis(self.config.retry_for_ms);
        let mut attempt = 0u32;
        loop {
            attempt = attempt.saturating_add(1);
            let refused_before = self.refused_so_far(subject);
            let deadline = self.ack_deadline();
            if let Some(ack) = self.send(subject, msg_id, payload.clone()).await?
                && let Some(ack) = self.await_ack(ack, subject, refused_before, deadline).await?
            {
                if attempt > 1 {
                    tracing::debug!(subject, attempt, "publish acknowledged after retrying");
                }
                return Ok(ack);
            }
            if started.elapsed() >= retry_for {
                return Err(BusError::Unacknowledged(format!(
                    "publish on {subject} not acknowledged after {attempt} attempts over {} ms",
                    started.elapsed().as_millis()
                )));
            }
            tracing::debug!(
                subject,
                attempt,
                "publish not acknowledged; retrying with the same msg id"
            );
            tokio::time::sleep(Duration::from_millis(self.config.backoff_ms(attempt))).await;
        }
    }

    /// Publishes many observations keeping up to `window` publishes in flight, then awaits
    /// every ack. Stops at the first error (a full stream is [`BusError::StreamFull`]);
    /// everything acked before it stays stored. A timed-out ack is retried through
    /// [`Self::publish`] with the same id.
    pub async fn publish_pipelined<I>(&self, items: I, window: usize) -> Result<PipelineReport, BusError>
    where
        I: IntoIterator<Item = (String, String, Bytes)>,
    {
        let window = window.clamp(1, PIPELINE_WINDOW_MAX);
        let mut report = PipelineReport::default();
        let mut in_flight: VecDeque<InFlight> = VecDeque::with_capacity(window);
        for (subject, msg_id, payload) in items {
            if in_flight.len() >= window
                && let Some(entry) = in_flight.pop_front()
            {
                self.settle(entry, &mut report).await?;
            }
            let refused_before = self.refused_so_far(&subject);
            let deadline = self.ack_deadline();
            let ack = self.send(&subject, &msg_id, payload.clone()).await?;
            in_flight.push_back(InFlight {
                ack,
                subject,
                msg_id,
                payload,
                refused_before,
                deadline,
            });
        }
        while let Some(entry) = in_flight.pop_front() {
            self.settle(entry, &mut report).await?;
        }
        Ok(report)
    }

    async fn settle(&self, entry: InFlight, report: &mut PipelineReport) -> Result<(), BusError> {
        let acked = match entry.ack {
            Some(ack) => {
                self.await_ack(ack, &entry.subject, entry.refused_before, entry.deadline)
                    .await?
            }
            None => None,
        };
        let ack = match acked {
            Some(ack) => ack,
            None => self.publish(&entry.subject, &entry.msg_id, entry.payload).await?,
        };
        if ack.duplicate {
            report.duplicates += 1;
        } else {
            report.stored += 1;
        }
        Ok(())
    }
}

/// One pipelined publish whose ack is not yet settled.
struct InFlight {
    /// `None` when the send itself failed transiently: settled by [`ObservationPublisher::publish`].
    ack: Option<jetstream::context::PublishAckFuture>,
    subject: String,
    msg_id: String,
    payload: Bytes,
    refused_before: u64,
    /// Its send plus the ack timeout.
    deadline: tokio::time::Instant,
}

impl ObservationSink for ObservationPublisher {
    async fn publish_observation(
        &self,
        subject: &str,
        msg_id: &str,
        payload: Bytes,
    ) -> Result<PublishAck, BusError> {
        self.publish(subject, msg_id, payload).await
    }
}

/// Whether a failed publish is worth retrying with the same message id: its ack timed out,
/// nothing answered on the stream's subject (async-nats reports "no responders" as
/// `StreamNotFound`: between a replicated stream's killed leader and the next one's election,
/// or a server restarting), the connection broke, or the cluster answered that JetStream is
/// temporarily unavailable (error code 10008), or a replicated stream answered that a publish
/// with the same message id is still being proposed ("duplicate message id is in process",
/// 10158: the retry is then acked as the duplicate it is). A truly missing stream looks like
/// no responders and is given up on when the retry time runs out.
pub fn is_transient(error: &jetstream::context::PublishError) -> bool {
    use std::error::Error as _;
    match error.kind() {
        PublishErrorKind::TimedOut | PublishErrorKind::StreamNotFound | PublishErrorKind::BrokenPipe => true,
        _ => error
            .source()
            .and_then(|source| source.downcast_ref::<jetstream::Error>())
            .is_some_and(|js| {
                js.error_code() == jetstream::ErrorCode::CLUSTER_NOT_AVAILABLE
                    || js.error_code() == jetstream::ErrorCode::STREAM_DUPLICATE_MESSAGE_CONFLICT
                    || js.to_string().contains("temporarily unavailable")
            }),
    }
}

/// A full discard-new stream answers a publish with JetStream error 10077 ("maximum messages
/// exceeded" / "maximum bytes exceeded"); older servers name the limit only in the text.
fn map_publish_error(error: jetstream::context::PublishError) -> BusError {
    use std::error::Error as _;
    if let Some(js) = error
        .source()
        .and_then(|source| source.downcast_ref::<jetstream::Error>())
    {
        let text = js.to_string();
        if js.error_code() == jetstream::ErrorCode::STREAM_STORE_FAILED
            || text.contains("maximum messages")
            || text.contains("maximum bytes")
        {
            return BusError::StreamFull;
        }
    }
    match error.kind() {
        PublishErrorKind::BrokenPipe => BusError::Connection(error.to_string()),
        _ => BusError::Other(format!("publish: {error}")),
    }
}

/// What an instance's epoch guard holds and persists: the highest core epoch it has seen and
/// the start identity of the core that announced or commanded it
/// ([`sentinel_core::wire::CoreStarted::core_start`]; `None` when that core sent none, or the
/// floor comes from a state file older than identities).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpochFloor {
    pub epoch: u32,
    pub core_start: Option<u64>,
}

impl EpochFloor {
    /// A floor at `epoch` whose core's identity is not known.
    pub fn epoch(epoch: u32) -> EpochFloor {
        EpochFloor {
            epoch,
            core_start: None,
        }
    }
}

/// The highest core epoch a driver has seen, and the start identity of the core that had it;
/// commands from a lower epoch, or from that epoch and another identity, are refused. A driver
/// keeps one per driver instance and should persist its [`EpochFloor`] across its own restarts
/// (start from the persisted value with [`EpochGuard::restore`]), or a deposed core could slip
/// a command in right after a driver restart.
///
/// Why the identity (issue 25 item 3): a database failover that lost the last commits can give
/// the next core the epoch of the core it lost. The guard keeps the first identity it saw at
/// its floor: the new core's announcement at that epoch is not current (the hello then echoes
/// the old identity and the core moves its epoch past it), and its commands are refused until
/// a higher epoch arrives. A message without an identity, at the floor's epoch, is current (a
/// core from before identities); a floor without one takes the first identity heard at it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EpochGuard {
    highest_seen: u32,
    core_start: Option<u64>,
    /// Always `None` unless a simulator test planted a bug (feature `planted-bugs`).
    #[cfg(feature = "planted-bugs")]
    planted: Option<sentinel_core::PlantedBug>,
    /// The planted bug's floor: the highest epoch among commands only.
    #[cfg(feature = "planted-bugs")]
    planted_command_floor: u32,
}

impl EpochGuard {
    /// A guard whose floor is `highest_seen`, its core's identity unknown.
    pub fn new(highest_seen: u32) -> EpochGuard {
        EpochGuard::restore(EpochFloor::epoch(highest_seen))
    }

    /// A guard from the floor persisted before a restart.
    pub fn restore(floor: EpochFloor) -> EpochGuard {
        let highest_seen = floor.epoch;
        EpochGuard {
            highest_seen,
            core_start: floor.core_start,
            #[cfg(feature = "planted-bugs")]
            planted: None,
            #[cfg(feature = "planted-bugs")]
            planted_command_floor: highest_seen,
        }
    }

    /// Plants a known bug (simulator tests only): only
    /// [`sentinel_core::PlantedBug::GuardIgnoresAnnouncements`] lives here.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: sentinel_core::PlantedBug) {
        self.planted = Some(bug);
    }

    /// The planted bug's check: against the highest epoch among commands only, as if
    /// announcements raised the floor the driver reports but not the one it checks. `None`
    /// when the bug is not planted.
    #[cfg(feature = "planted-bugs")]
    fn planted_check(&mut self, core_epoch: u32) -> Option<bool> {
        if self.planted != Some(sentinel_core::PlantedBug::GuardIgnoresAnnouncements) {
            return None;
        }
        let admitted = core_epoch >= self.planted_command_floor;
        if admitted {
            self.planted_command_floor = core_epoch;
            self.highest_seen = self.highest_seen.max(core_epoch);
        }
        Some(admitted)
    }

    #[cfg(not(feature = "planted-bugs"))]
    fn planted_check(&mut self, _core_epoch: u32) -> Option<bool> {
        None
    }

    pub fn highest_seen(&self) -> u32 {
        self.highest_seen
    }

    /// The start identity of the core at the floor, when known.
    pub fn core_start(&self) -> Option<u64> {
        self.core_start
    }

    /// What to persist: the floor and its core's identity.
    pub fn floor(&self) -> EpochFloor {
        EpochFloor {
            epoch: self.highest_seen,
            core_start: self.core_start,
        }
    }

    /// Takes note of a core's epoch and start identity (its `core_started` announcement, or a
    /// command): a newer epoch raises the floor and takes its identity. Returns whether the
    /// core is current: above the floor, or at it with the floor's identity (or either
    /// unknown: a floor without one takes this one).
    pub fn observe(&mut self, core_epoch: u32, core_start: Option<u64>) -> bool {
        if core_epoch > self.highest_seen {
            self.highest_seen = core_epoch;
            self.core_start = core_start;
            return true;
        }
        if core_epoch < self.highest_seen {
            return false;
        }
        match (self.core_start, core_start) {
            (Some(floor), Some(theirs)) => floor == theirs,
            (None, Some(theirs)) => {
                self.core_start = Some(theirs);
                true
            }
            (_, None) => true,
        }
    }

    /// Admits a command from the current or a newer core (a newer one raises the floor) and
    /// refuses one from an older core, or from another start at the floor's epoch. Epochs
    /// never go backwards, so equal is current when the identity is the floor's.
    pub fn check(&mut self, command: &CommandEnvelope) -> CommandReply {
        let admitted = match self.planted_check(command.core_epoch) {
            Some(admitted) => admitted,
            None => self.observe(command.core_epoch, command.core_start),
        };
        CommandReply {
            command_id: command.command_id.clone(),
            outcome: if admitted {
                CommandOutcome::Accepted
            } else {
                CommandOutcome::Rejected
            },
            reason: (!admitted).then(|| STALE_EPOCH.to_owned()),
            highest_epoch_seen: self.highest_seen,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn msg_id_is_instance_epoch_seq() {
        assert_eq!(msg_id("plc-7", 3, 42), "plc-7:3:42");
    }

    #[test]
    fn default_retries_fit_the_duplicate_window() {
        let config = PublisherConfig::default();
        assert!(config.retry_span_ms() < config.duplicate_window_ms);
    }

    /// Issue 25: a stream leader election takes 4–9 s; the default retries outlast several.
    #[test]
    fn default_retries_outlast_an_election_with_a_bounded_doubling_pause() {
        let config = PublisherConfig::default();
        assert!(config.retry_for_ms >= 3 * 9_000);
        assert_eq!(config.backoff_ms(1), 250);
        assert_eq!(config.backoff_ms(2), 500);
        assert_eq!(config.backoff_ms(4), 2_000);
        assert_eq!(config.backoff_ms(u32::MAX), 2_000);
    }

    fn command(epoch: u32, id: &str) -> CommandEnvelope {
        CommandEnvelope {
            v: 1,
            command_id: id.to_owned(),
            core_epoch: epoch,
            point_id: "pump1.state".to_owned(),
            value: serde_json::json!(1),
            principal: "rule:frost-protection".to_owned(),
            core_start: None,
        }
    }

    fn command_from(epoch: u32, core_start: u64, id: &str) -> CommandEnvelope {
        CommandEnvelope {
            core_start: Some(core_start),
            ..command(epoch, id)
        }
    }

    /// Issue 25 item 3: after a failover that lost epoch 5's increment, a second core takes 5
    /// again. The guard keeps the first start it saw at its floor and refuses the other's
    /// announcement and commands, until a higher epoch comes.
    #[test]
    fn a_repeated_epoch_from_another_start_is_refused_until_a_higher_one() {
        let mut guard = EpochGuard::new(4);
        assert!(guard.observe(5, Some(111)), "the first core at 5");
        assert_eq!(
            guard.floor(),
            EpochFloor {
                epoch: 5,
                core_start: Some(111)
            }
        );
        assert!(!guard.observe(5, Some(222)), "another start at 5 is not current");
        let refused = guard.check(&command_from(5, 222, "repeat"));
        assert_eq!(refused.outcome, CommandOutcome::Rejected);
        assert_eq!(refused.reason.as_deref(), Some("stale_epoch"));
        assert_eq!(refused.highest_epoch_seen, 5);
        assert_eq!(
            guard.core_start(),
            Some(111),
            "the floor keeps the first identity"
        );
        assert_eq!(
            guard.check(&command_from(5, 111, "same")).outcome,
            CommandOutcome::Accepted,
            "the floor's own core"
        );
        assert_eq!(
            guard.check(&command(5, "unknown")).outcome,
            CommandOutcome::Accepted,
            "a core from before identities compares epochs only"
        );
        assert!(guard.observe(6, Some(333)), "the next core, above the repeat");
        assert_eq!(
            guard.check(&command_from(5, 111, "old")).outcome,
            CommandOutcome::Rejected
        );
        assert_eq!(guard.core_start(), Some(333));
    }

    /// A floor restored without an identity (a state file older than identities) takes the
    /// first one heard at its epoch, and holds it from then on.
    #[test]
    fn a_floor_without_an_identity_takes_the_first_one_at_its_epoch() {
        let mut guard = EpochGuard::restore(EpochFloor::epoch(5));
        assert!(guard.observe(5, Some(7)));
        assert!(!guard.observe(5, Some(8)));
        assert_eq!(
            guard.floor(),
            EpochFloor {
                epoch: 5,
                core_start: Some(7)
            }
        );
        let mut restored = EpochGuard::restore(guard.floor());
        assert_eq!(
            restored.check(&command_from(5, 8, "x")).reason.as_deref(),
            Some("stale_epoch"),
            "the identity survives a restart"
        );
    }

    #[test]
    fn a_command_from_an_older_epoch_is_rejected_as_stale() {
        let mut guard = EpochGuard::default();
        assert_eq!(guard.check(&command(3, "a")).outcome, CommandOutcome::Accepted);
        assert_eq!(guard.highest_seen(), 3);
        assert_eq!(
            guard.check(&command(3, "b")).outcome,
            CommandOutcome::Accepted,
            "equal is current"
        );
        let stale = guard.check(&command(2, "c"));
        assert_eq!(stale.outcome, CommandOutcome::Rejected);
        assert_eq!(stale.reason.as_deref(), Some("stale_epoch"));
        assert_eq!((stale.command_id.as_str(), stale.highest_epoch_seen), ("c", 3));
        assert_eq!(
            guard.check(&command(4, "d")).outcome,
            CommandOutcome::Accepted,
            "a newer core"
        );
        assert_eq!(
            guard.check(&command(3, "e")).outcome,
            CommandOutcome::Rejected,
            "the floor moved"
        );
    }

    #[test]
    fn an_announcement_raises_the_floor_before_any_command() {
        let mut guard = EpochGuard::new(3);
        assert!(guard.observe(5, None), "a newer core's announcement");
        assert!(!guard.observe(4, None), "an older core's is not current");
        assert_eq!(guard.highest_seen(), 5);
        assert_eq!(
            guard.check(&command(4, "late")).reason.as_deref(),
            Some("stale_epoch")
        );
    }

    #[test]
    fn a_restarted_driver_keeps_its_floor() {
        let mut guard = EpochGuard::new(7);
        assert_eq!(
            guard.check(&command(6, "a")).reason.as_deref(),
            Some("stale_epoch")
        );
    }

    #[test]
    fn replies_are_json_in_the_contract_shape() {
        let mut guard = EpochGuard::new(5);
        let reply = guard.check(&command(4, "cmd-9"));
        let json = serde_json::to_value(&reply).expect("reply serialises");
        assert_eq!(
            json,
            serde_json::json!({"command_id": "cmd-9", "outcome": "rejected", "reason": "stale_epoch", "highest_epoch_seen": 5})
        );
        let accepted = serde_json::to_value(guard.check(&command(5, "cmd-10"))).expect("serialises");
        assert!(
            accepted.get("reason").is_none(),
            "no reason on an accepted command"
        );
        let envelope: CommandEnvelope =
            serde_json::from_value(serde_json::to_value(command(5, "x")).expect("ser")).expect("round trip");
        assert_eq!(envelope.core_epoch, 5);
    }
}
