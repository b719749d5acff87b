//! The invariant checker (DESIGN.md §5). The adapters and the controller report every event
//! that matters — a message accepted by the stream, a commit's RETURNING set, an ack, a
//! transition, a lock acquisition, a consumer bind — and the checker tests the invariants
//! against what it has seen, at the moment it happens:
//!
//! 1. no two rows share `(driver_instance, source_epoch, source_seq)` — on every commit;
//! 2. nothing accepted is lost — at the end of the liveness phase;
//! 3. ack implies durable — on every ack;
//! 4. a transition only for a committed row or committed control event, at most once across
//!    incarnations — on every publish;
//! 5. the projection's value and observed_at equal the fold of the log — from the runtime's
//!    observer whenever the current writer has no batch at the store (at most once per
//!    simulated second per core; idle wake-ups included, so the settled state is checked);
//! 6. epochs strictly increase with each acquisition, no write by a deposed epoch lands, and
//!    every control event carries its writer's epoch — on every acquisition and every write
//!    (the command half waits for the command plane);
//! 7. a core that never took the lock never binds the consumer — on every bind;
//! 8. checked by the determinism test (same seed, same trace hash);
//! 9. everything drains within a bounded time once faults stop — by the controller.
//!
//! The first violation is kept; the controller stops the run on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sentinel_core::{CanonicalValue, CommitReport, Core, Micros, ObsKey};

/// `(driver_instance, source_epoch, source_seq)`.
pub type Key3 = (Arc<str>, u32, u64);

fn key3(key: &ObsKey) -> Key3 {
    (key.driver_instance.clone(), key.source_epoch, key.source_seq)
}

#[derive(Clone, Debug, PartialEq)]
pub struct Violation {
    pub invariant: u8,
    pub what: String,
    pub at: Micros,
}

/// The fold of the log for one point (invariant 5's total order: observed_at, ingested_at,
/// key).
#[derive(Clone, Debug, Default)]
struct FoldHead {
    latest: Option<(Micros, Micros, ObsKey)>,
    valued: Option<((Micros, Micros, ObsKey), CanonicalValue)>,
}

#[derive(Default)]
pub struct Checker {
    /// Stream sequence → the key its message carries (`None`: no parseable key).
    accepted: BTreeMap<u64, Option<Key3>>,
    committed_keys: BTreeSet<Key3>,
    quarantined_seqs: BTreeSet<u64>,
    published_keys: BTreeSet<Key3>,
    /// `seq`s of committed control events, and those a transition was published for.
    committed_controls: BTreeSet<i64>,
    published_controls: BTreeSet<i64>,
    fold: BTreeMap<Arc<str>, FoldHead>,
    last_epoch: u32,
    /// Per core epoch, when its projection was last fully checked.
    last_full_check: BTreeMap<u32, Micros>,
    violation: Option<Violation>,
    pub transitions: u64,
    /// `(command_id, epoch)` of every committed `command_issued` event.
    committed_commands: BTreeSet<(String, u32)>,
    pub commands_applied: u64,
    /// Applied while a newer epoch held the lock (committed before the takeover, delivered
    /// before the driver saw the new epoch).
    pub commands_applied_deposed: u64,
    pub commands_refused: u64,
    /// `command_issued` writes that never reached the store (a core cut off from it).
    pub command_writes_refused: u64,
}

impl Checker {
    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    pub fn fail(&mut self, invariant: u8, at: Micros, what: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation { invariant, what, at });
        }
    }

    pub fn on_accepted(&mut self, seq: u64, key: Option<Key3>) {
        self.accepted.insert(seq, key);
    }

    pub fn accepted_total(&self) -> u64 {
        self.accepted.len() as u64
    }

    /// A message is covered once its own quarantine entry or a row with its key is committed
    /// (a duplicate of a committed key is acked without a row of its own).
    fn covered(&self, seq: u64) -> bool {
        if self.quarantined_seqs.contains(&seq) {
            return true;
        }
        matches!(self.accepted.get(&seq), Some(Some(key)) if self.committed_keys.contains(key))
    }

    /// Invariant 3, at the moment an ack reaches the stream.
    pub fn on_ack(&mut self, seq: u64, at: Micros) {
        if !self.covered(seq) {
            self.fail(
                3,
                at,
                format!("stream seq {seq} acked before its row or quarantine entry was committed"),
            );
        }
    }

    /// Invariants 1 and 6 (fence) and the fold, for a commit the store accepted.
    pub fn on_commit(&mut self, report: &CommitReport, epoch_at_commit: u32, at: Micros) {
        if report.batch.epoch != epoch_at_commit {
            self.fail(
                6,
                at,
                format!(
                    "batch {} of deposed epoch {} committed while epoch {} is current",
                    report.batch.id.0, report.batch.epoch, epoch_at_commit
                ),
            );
        }
        for &ordinal in &report.inserted {
            let row = &report.batch.rows[ordinal as usize];
            let key = key3(&row.key);
            if !self.committed_keys.insert(key.clone()) {
                self.fail(
                    1,
                    at,
                    format!("a second row for key {key:?} (ingested_at {})", row.ingested_at.0),
                );
            }
            let head = self.fold.entry(row.point_id.clone()).or_default();
            let order = (row.observed_at, row.ingested_at, row.key.clone());
            if head.latest.as_ref().is_none_or(|l| order > *l) {
                head.latest = Some(order.clone());
            }
            if let Some(value) = &row.value
                && head.valued.as_ref().is_none_or(|(o, _)| order > *o)
            {
                head.valued = Some((order, value.clone()));
            }
        }
        for entry in &report.batch.quarantine {
            self.quarantined_seqs.insert(entry.stream_seq);
        }
    }

    /// Invariant 6 for checkpoints and other fenced writes.
    pub fn on_write(&mut self, what: &str, epoch: u32, epoch_at_write: u32, at: Micros) {
        if epoch != epoch_at_write {
            self.fail(
                6,
                at,
                format!("{what} of deposed epoch {epoch} landed while epoch {epoch_at_write} is current"),
            );
        }
    }

    /// Invariant 6 for control events: written under the current epoch, each stamped with
    /// its writer's epoch.
    pub fn on_control_events(
        &mut self,
        epoch: u32,
        stamps: &[u32],
        commands: &[String],
        seqs: &[i64],
        epoch_at_write: u32,
        at: Micros,
    ) {
        self.on_write("a control-event write", epoch, epoch_at_write, at);
        if let Some(stamp) = stamps.iter().find(|&&s| s != epoch) {
            self.fail(
                6,
                at,
                format!("a control event stamped with epoch {stamp} written by epoch {epoch}"),
            );
        }
        self.committed_controls.extend(seqs.iter().copied());
        self.committed_commands
            .extend(commands.iter().map(|id| (id.clone(), epoch)));
    }

    /// Invariant 6 for commands: a driver applies only a command whose `command_issued`
    /// event its core committed under the epoch the command carries, i.e. while that core
    /// held the lock (the fence saw to that).
    pub fn on_command_applied(
        &mut self,
        command: &sentinel_core::wire::CommandEnvelope,
        current_epoch: u32,
        at: Micros,
    ) {
        self.commands_applied += 1;
        if command.core_epoch < current_epoch {
            self.commands_applied_deposed += 1;
        }
        if !self
            .committed_commands
            .contains(&(command.command_id.clone(), command.core_epoch))
        {
            self.fail(
                6,
                at,
                format!(
                    "a driver applied command {} of epoch {}, which no core committed under that epoch",
                    command.command_id, command.core_epoch
                ),
            );
        }
    }

    /// Invariant 4, as a transition reaches the bus.
    pub fn on_transition(&mut self, payload: &[u8], at: Micros) {
        self.transitions += 1;
        let key = match transition_identity(payload) {
            Some(Identity::Row(key)) => key,
            Some(Identity::Control(seq)) => {
                if !self.committed_controls.contains(&seq) {
                    self.fail(
                        4,
                        at,
                        format!("transition for control event {seq}, which is not committed"),
                    );
                } else if !self.published_controls.insert(seq) {
                    self.fail(4, at, format!("a second transition for control event {seq}"));
                }
                return;
            }
            None => {
                self.fail(4, at, "a transition with neither a key nor a control seq".into());
                return;
            }
        };
        if !self.committed_keys.contains(&key) {
            self.fail(
                4,
                at,
                format!("transition for key {key:?}, which no commit inserted"),
            );
        } else if !self.published_keys.insert(key.clone()) {
            self.fail(4, at, format!("a second transition for key {key:?}"));
        }
    }

    /// Invariant 6: each acquisition's epoch is above every earlier one.
    pub fn on_acquire(&mut self, epoch: u32, at: Micros) {
        if epoch <= self.last_epoch {
            self.fail(
                6,
                at,
                format!("epoch {epoch} acquired after epoch {}", self.last_epoch),
            );
        }
        self.last_epoch = self.last_epoch.max(epoch);
    }

    /// Invariant 5 for the current writer, at most once per simulated second per epoch.
    pub fn check_projection(&mut self, core: &Core, at: Micros) {
        let last = self.last_full_check.get(&core.epoch()).copied();
        if last.is_some_and(|last| at.saturating_sub(last) < 1_000_000) {
            return;
        }
        self.last_full_check.insert(core.epoch(), at);
        self.check_projection_now(core, at);
    }

    fn check_projection_now(&mut self, core: &Core, at: Micros) {
        let mut failure = None;
        for (point, head) in &self.fold {
            // A point added by a later registry version is unknown to an older core.
            let Some(state) = core.point_state(point) else {
                continue;
            };
            let observed_at = head.latest.as_ref().map(|l| l.0);
            let value = head.valued.as_ref().map(|(_, v)| v);
            if state.observed_at != observed_at || state.value.as_ref() != value {
                failure = Some(format!(
                    "epoch {}: point {point} projects observed_at {:?}, the log's fold says {:?} \
                     (values equal: {})",
                    core.epoch(),
                    state.observed_at.map(|m| m.0),
                    observed_at.map(|m| m.0),
                    state.value.as_ref() == value
                ));
                break;
            }
        }
        if let Some(what) = failure {
            self.fail(5, at, what);
        }
    }

    /// Invariant 2: every accepted message is a row or a quarantine entry. Returns how many
    /// are not (yet).
    pub fn uncovered(&self) -> Vec<u64> {
        self.accepted
            .keys()
            .copied()
            .filter(|&seq| !self.covered(seq))
            .collect()
    }
}

enum Identity {
    Row(Key3),
    Control(i64),
}

/// What caused a transition: a row's message key or a control event's seq (DESIGN.md §2).
fn transition_identity(payload: &[u8]) -> Option<Identity> {
    #[derive(serde::Deserialize)]
    struct Wire<'a> {
        #[serde(borrow)]
        key: Option<KeyWire<'a>>,
        control_seq: Option<i64>,
    }
    #[derive(serde::Deserialize)]
    struct KeyWire<'a> {
        driver_instance: &'a str,
        source_epoch: u32,
        source_seq: u64,
    }
    let wire: Wire<'_> = serde_json::from_slice(payload).ok()?;
    match (wire.key, wire.control_seq) {
        (Some(key), None) => Some(Identity::Row((
            Arc::from(key.driver_instance),
            key.source_epoch,
            key.source_seq,
        ))),
        (None, Some(seq)) => Some(Identity::Control(seq)),
        _ => None,
    }
}
