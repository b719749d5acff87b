//! The core's vocabulary with the outside world: what it is told ([`Input`]) and what it asks
//! for ([`Effect`]). DESIGN.md §1, "The core API".
//!
//! The runtime executes effects in the order they were emitted, and none after the core's
//! `Exit` (`PublishObservation` goes through one ordered publisher the runtime stops with its
//! loop). The ordering rules (ack after commit, publish after commit, project only what
//! inserted) are the core's to keep.

use bytes::Bytes;

use crate::control::{ControlEvent, ControlReport};
use crate::delivery::{Delivery, DeliveryTag};
use crate::log::{BatchId, CommitReport};
use crate::state::PointState;

#[derive(Debug)]
pub enum Input {
    /// Stage 1: messages fetched from the durable consumer.
    Delivered(Vec<Delivery>),
    /// A batch's transaction committed; carries the RETURNING set.
    Committed(CommitReport),
    /// A batch's transaction failed. The outcome may be unknown, so the core fails fast:
    /// everything unacked is redelivered to the next incarnation.
    CommitFailed { batch: BatchId, fenced: bool },
    /// The oldest message still in the stream (`None`: it is empty), read with the lag.
    /// Readings restart step 5 derived again are held until the stream has moved past what
    /// it held at startup (see [`crate::Core::rehydrate_derived`]).
    StreamFront { first_seq: Option<u64> },
    /// A checkpoint write failed (it is fenced like every write).
    CheckpointFailed { fenced: bool },
    /// Control events were written; carries the `seq` the log gave each.
    ControlCommitted(ControlReport),
    /// A control-event write failed (fenced like every write).
    ControlFailed { fenced: bool },
    /// Someone asks the core to command a point (the smallest real command plane).
    CommandRequested(crate::control::CommandRequest),
    /// The durable consumer's lag, read by the runtime (core runtime spec, "Backpressure":
    /// the pending count and the age of the oldest unacked message, never a watermark table).
    /// `pending` is what the consumer has not yet delivered, `ack_pending` what it delivered
    /// and the core has not yet committed and acked: both are backlog the log does not hold.
    Lag {
        pending: u64,
        ack_pending: u64,
        oldest_unacked_age_ms: Option<u64>,
    },
    /// A driver instance said hello on `drv.<host>.<driver_instance>` (restart step 7).
    DriverHello {
        host: String,
        hello: crate::wire::DriverHello,
    },
    /// A driver answered a command on its reply subject
    /// ([`crate::wire::command_reply_subject`]): `epoch` and `seq` are the subject's (the core
    /// that sent it and its `command_issued` event), `reply` the driver's word.
    CommandAnswered {
        epoch: u32,
        seq: i64,
        reply: crate::wire::CommandReply,
    },
    /// A driver acknowledged an assignment on its reply subject
    /// ([`crate::wire::assignment_reply_subject`]): `epoch` and `seq` are the subject's (the
    /// core that sent it and its `assignment` event).
    AssignmentAcked {
        epoch: u32,
        seq: i64,
        ack: crate::wire::AssignmentAck,
    },
    /// A registry version was loaded while this core runs (issue 21 item 7): the runtime
    /// read it from the store on `sentinel registry load`'s announcement. The core applies it
    /// live if `registry/reload.rs` says it can, else answers `Effect::RestartNeeded`.
    RegistryLoaded(std::sync::Arc<crate::registry::Registry>),
    /// The store's answer to `Effect::CheckEpoch`: the epoch recorded now (`None`: the store
    /// did not answer).
    EpochRecorded { epoch: Option<u32> },
    /// The store's answer to `Effect::RaiseEpoch` (issue 25 item 3).
    EpochRaised(EpochRaise),
    /// A rollup refresh step answered (`Effect::RefreshRollups`).
    RollupStepped(crate::rollup::RollupStepOutcome),
    /// The epoch fence refused a rollup step: a newer core holds the lock.
    RollupStepFenced,
    /// A retention run answered (`Effect::DropExpired`).
    RetentionRan(crate::retention::RetentionOutcome),
    /// The epoch fence refused a retention drop: a newer core holds the lock.
    RetentionFenced,
    /// A day's compaction answered (`Effect::CompactDay`).
    DayCompacted(crate::compaction::CompactionOutcome),
    /// The epoch fence refused a compaction: a newer core holds the lock.
    CompactionFenced,
    /// A partitions-ahead run answered (`Effect::EnsurePartitions`).
    PartitionsEnsured(crate::partitions::PartitionsOutcome),
    /// A reprocess is asked over the bus; `reply_to` is where the answer goes (opaque here).
    ReprocessRequested {
        ask: crate::reprocess_request::ReprocessAsk,
        reply_to: String,
    },
    /// The reprocess job (`Effect::Reprocess`) answered.
    ReprocessFinished(crate::reprocess_request::ReprocessFinished),
    /// Time passed; due flushes and checkpoints happen.
    Tick,
    /// Orderly stop: flush, wait for in-flight batches, write a final checkpoint, exit 0.
    Shutdown,
}

/// What `Effect::RaiseEpoch` did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EpochRaise {
    /// The recorded epoch is now `epoch` (at least the floor asked for).
    Raised { epoch: u32 },
    /// This core's epoch was no longer the recorded one: a newer core holds the lock.
    Fenced,
    /// The store did not answer, or refused the floor (above what it records).
    Failed,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Effect {
    /// Write this batch in one fenced transaction and answer with `Input::Committed`.
    Commit(crate::log::Batch),
    /// Ack these deliveries. Emitted only after their rows or quarantine entries committed.
    Ack(Vec<DeliveryTag>),
    /// Publish a transition (stage 13), only for rows in a RETURNING set or committed
    /// control events; a command on `cmd.<host>.<instance>`, only once its
    /// `command_issued` event committed; or this core's epoch announcement again, to a driver
    /// whose hello showed it had not seen it.
    Publish { subject: String, payload: Bytes },
    /// Ask the store for the epoch recorded now and answer with `Input::EpochRecorded`: a
    /// driver answered `stale_epoch`, a claim that this core was replaced.
    CheckEpoch,
    /// Raise the recorded epoch to `floor`, fenced on `epoch` (`Store::raise_epoch`), and
    /// answer with `Input::EpochRaised`: a driver said hello with a higher epoch than this
    /// core's, which a failover that lost the last commits can cause (issue 25 item 3).
    RaiseEpoch { epoch: u32, floor: u32 },
    /// Publish a command on `cmd.<host>.<instance>` with the reply subject its driver answers
    /// on (`Input::CommandAnswered`), only once its `command_issued` event committed.
    SendCommand {
        subject: String,
        reply_to: String,
        payload: Bytes,
    },
    /// Publish an assignment on `cmd.<host>.<instance>` with the reply subject its driver
    /// acknowledges on (`Input::AssignmentAcked`), only once its `assignment` event committed.
    SendAssignment {
        subject: String,
        reply_to: String,
        payload: Bytes,
    },
    /// A loaded registry version differs from the running one in more than what applies live
    /// (`registry/reload.rs`): nothing of it was applied; the runtime reports the reasons (one
    /// line each, `omitted` more) and keeps running the version it has.
    RestartNeeded {
        version: i32,
        reasons: Vec<String>,
        omitted: usize,
    },
    /// Write these point states to `point_state`, fenced on `epoch`.
    Checkpoint { epoch: u32, states: Vec<PointState> },
    /// Write these control events in one transaction fenced on `epoch` and answer with
    /// `Input::ControlCommitted`. Their effects on the projection wait for that answer.
    Control { epoch: u32, events: Vec<ControlEvent> },
    /// Write these control events (a claim's, and the `command_issued` it causes) and upsert
    /// these `point_desired` rows in one transaction fenced on `epoch`, in order with every
    /// other control write, and answer with `Input::ControlCommitted`. A command is published
    /// only once that answer comes.
    Arbitrate {
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Vec<crate::arbitration::DesiredRow>,
    },
    /// Publish an observation of the core's own into the observation stream (a self-point),
    /// with this message id; it comes back through ingest like any other.
    PublishObservation {
        subject: String,
        msg_id: String,
        payload: Bytes,
    },
    /// Run one bounded step of the refresh of closed rollup buckets, fenced on the request's
    /// epoch, and answer with `Input::RollupStepped` (or `RollupStepFenced`). Not ordered with
    /// commits: the store's watermark and invalidations make any interleaving correct.
    RefreshRollups(crate::rollup::RollupStepRequest),
    /// Drop every partition wholly before the request's cut-offs (at most `partitions_max`),
    /// each in its own transaction fenced on the request's epoch with its `retention_drop`
    /// control event, and answer with `Input::RetentionRan` (or `RetentionFenced`). Not
    /// ordered with commits: no commit writes below a cut-off.
    DropExpired(crate::retention::RetentionRequest),
    /// Compact the request's closed day of its class (`Store::compact_day`: one transaction
    /// fenced on the request's epoch, with its `compaction` control event), given the
    /// `ingested_at` of the oldest message the stream holds, read from the bus for this
    /// request — when the bus does not answer, compact nothing — and answer with
    /// `Input::DayCompacted` (or `CompactionFenced`). Not ordered with commits: no commit
    /// writes a day that old, and a day the stream may still redeliver is refused.
    CompactDay(crate::compaction::CompactionDayRequest),
    /// Make the daily partitions of yesterday through today + `days_ahead`, off the commit
    /// path, in its own transaction with the request's `lock_timeout`, and answer with
    /// `Input::PartitionsEnsured` (a lock timeout is an outcome, not an error). Not ordered
    /// with commits and not fenced: it writes no row, and the store makes the same
    /// partitions on demand for any batch that needs them.
    EnsurePartitions(crate::partitions::PartitionsRequest),
    /// Run this reprocess off the ingest loop, fenced on the job's epoch, under the core's
    /// registry, and answer with `Input::ReprocessFinished`. Not ordered with commits: the rows
    /// it writes are fenced and the projection takes its result only where no newer row moved
    /// it (`reprocess_request`).
    Reprocess(crate::reprocess_request::ReprocessJob),
    /// Answer a reprocess request at its reply address.
    ReprocessReply { reply_to: String, payload: Bytes },
    /// Answer a command request at its reply address (a [`crate::control::RequestAnswer`]),
    /// once its control event committed.
    RequestAnswer { reply_to: String, payload: Bytes },
    /// Stop the process with this code.
    Exit(ExitReason),
}

/// Which part of the core asked to be woken at [`crate::Core::next_deadline`] (str0m's
/// `Reason`): for logs and tests; the runtime sends `Input::Tick` whichever it is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Deadline {
    /// The open batch's flush interval.
    Ingest,
    /// The checkpoint scan, while points are dirty.
    Projection,
    /// A freshness deadline, or the end of the startup grace.
    Watchdog,
    /// The next self-point readings.
    SelfPoints,
    /// The next rollup step or retention run.
    Maintenance,
    /// A claim's lapse.
    Claims,
    /// A command's answer is due.
    Commands,
    /// A driver instance falls silent, or an availability window ends.
    Drivers,
    /// An applied command's verification is due.
    Verification,
    /// A rule's `for_s` comes due, its warmup deadline passes, or an input it reads stops
    /// being current.
    Rules,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExitReason {
    pub code: i32,
    pub why: &'static str,
}

impl ExitReason {
    pub const CLEAN: ExitReason = ExitReason {
        code: 0,
        why: "shutdown requested",
    };
    pub const COMMIT_FAILED: ExitReason = ExitReason {
        code: 3,
        why: "commit failed; outcome unknown",
    };
    pub const FENCED: ExitReason = ExitReason {
        code: 4,
        why: "epoch fence refused the write: a newer core holds the lock",
    };

    /// A driver had seen a higher epoch than this core's (a failover that lost the last
    /// commits let the epoch repeat): the recorded epoch was raised past it, so this core is
    /// fenced from now on; started again, the next core takes an epoch above every one the
    /// drivers have seen (issue 25 item 3).
    pub const EPOCH_RAISED: ExitReason = ExitReason {
        code: 7,
        why: "a driver has seen a higher core epoch; the recorded epoch was raised past it, restart",
    };

    /// A write (commit, checkpoint or control events) failed: fenced, or with an unknown
    /// outcome.
    pub fn write_failed(fenced: bool) -> ExitReason {
        if fenced {
            ExitReason::FENCED
        } else {
            ExitReason::COMMIT_FAILED
        }
    }
}
