//! The invariant checker (DESIGN.md §5; ARCHITECTURE.md, "sim/"). The adapters and the
//! controller report every event that matters — a message accepted by the stream, a commit's
//! RETURNING set, an ack, a transition, a lock acquisition or loss, a consumer bind, a lag
//! reading, a command reaching a driver, a core's exit — and the checker tests the invariants
//! against what it has seen, at the moment it happens:
//!
//! 1. no two rows share `(driver_instance, source_epoch, source_seq)`, and a row's `ingested_at`
//!    is the stream's stamp on a message that carried its key (ingest spec, "Where ingested_at
//!    comes from") — on every commit;
//! 2. nothing accepted is lost — at the end of the liveness phase;
//! 3. ack implies durable — on every ack;
//! 4. a transition only for a committed row or committed control event, at most once across
//!    incarnations — on every publish;
//! 5. the projection's value and observed_at equal the fold of the log — from the runtime's
//!    observer whenever the current writer has no batch at the store (at most once per
//!    simulated second per core; idle wake-ups included, so the settled state is checked);
//! 6. epochs strictly increase with each acquisition, no write lands unless its writer holds
//!    the lock (its epoch and its handle's start identity are the holder's, [`fence`]) — a
//!    commit, a checkpoint, a control event, and every maintenance write, the running core's
//!    rollup claims and applies and retention drops and the operator's rollup refreshes and
//!    reprocess chunks alike ([`fence::Maintenance`]) — every control event carries its
//!    writer's epoch, and a driver applies only commands committed under the epoch they
//!    carry — on every acquisition, write and applied command;
//! 7. a core that never took the lock never binds the consumer — on every bind;
//! 8. checked by the determinism test (same seed, same trace hash);
//! 9. liveness: everything drains within a bounded time once faults stop, a run ends within
//!    its step bound, and no simulated instant holds more than its event bound — by the
//!    controller and the simulated clock ([`crate::world::SimClock`]);
//! 10. rollups ([`rollups`]): every refreshed, closed rollup bucket equals the aggregate of
//!     the committed rows that fall in it — after every on-demand refresh, over its ranges, and
//!     after every step of the running core's refresh that leaves no invalidation behind, below
//!     its watermark;
//! 12. ([`commands`]) each change of a writable point's winning value (by the reference
//!     arbitration) is written with exactly one `command_issued`, for that value, with a new
//!     id; no write without a change carries one; a re-send repeats an issued command that is
//!     still desired — on every control write (DESIGN.md's 12, its command half);
//! 13. quality ([`quality`]): a point becomes `live` only from a row that was current when
//!     applied, unless it was live already; every transition's quality is the fold's — on
//!     every transition a core emits;
//! 14. staleness ([`quality`]): a point goes stale only past its core's startup grace, after
//!     its first lag reading, with lag below both thresholds, and with no accepted, unacked,
//!     current observation for it waiting in the stream — on every stale transition;
//! 15. lock ownership ([`ownership`]): an incarnation whose lock session is gone commits,
//!     acks, publishes and binds nothing later than the lock-check interval plus one tick
//!     after losing it, and exits with code 5 (3 or 4 when a failed write stopped it first, 6
//!     when repeated bus failures did) —
//!     on every such call, every exit and every controller step;
//! 16. command epochs: a driver never applies a command whose epoch is below one already
//!     announced to it, nor, at that epoch, one of another core start than the first it heard
//!     there (an epoch repeated after a lossy database failover, issue 25), by the checker's
//!     own record of announcements and applied commands — on every command a driver applies;
//! 17. derived points ([`derived`]): every derived reading that commits equals the fold of
//!     its committed inputs up to its trigger, and its trigger is a committed row that was
//!     its input's newest — on every commit of a derived reading;
//! 18. arbitration ([`commands`]): every `point_desired` row equals the reference
//!     arbitration (written independently of the core's) of the claims the log holds open,
//!     and snapshots exactly those claims — on every arbitration write;
//! 19. commands applied ([`commands`]): a command a driver applies is a committed command, with
//!     its committed point and value, that was the winning value when written — on every
//!     command a driver applies;
//! 20. verification ([`commands`]): each `command_verified` / `command_diverged` agrees with
//!     the committed live rows of its point — on every control write;
//! 21. event policy ([`events`]): every transition a core emits for a row agrees with its
//!     point's `event_policy` against the committed rows it applied — `always`, one for every
//!     row; `on_change`, only (and always) for a row that moved the value past the deadband
//!     from the last edge value, or for one that changed the quality; `never`, only for a
//!     quality change — on every transition a core emits.
//!
//! 22–25. rules ([`rules`], issue 22): a rule's claim derives from no input row older than
//!     its freshness (22); no rule claims in warmup, and each warmup ends as the reference
//!     allows (23); a rule's claim state is the reference evaluation's of the committed log
//!     (24); a `for_s` fires no earlier than its log-time instant (25) — on every control
//!     write; and a rule whose condition held long enough fired in time (26) — at the end
//!     of the run;
//! 27. compaction ([`compaction`], issue 24): no committed row is lost or changed by a
//!     compaction — the rows of each compactable day (the previous deployment's log the
//!     scenario seeds), read back through the store's read paths (the class table's rows,
//!     every column, and each point's history), are exactly those committed — after every
//!     compaction the operator runs (landed, refused or cut off) and at the end of the run.
//!
//! (11 and 12 are DESIGN.md's derived-point and rules invariants; 11 is checked as 17, 12's
//! command half as 12 above and its rules half as 22–25.)
//! The first violation is kept; the controller stops the run on it.

pub mod commands;
pub mod compaction;
pub mod derived;
pub mod events;
pub mod failover;
pub mod fence;
pub mod ownership;
pub mod quality;
pub mod rollups;
pub mod rules;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;

use sentinel_core::{CanonicalValue, CommitReport, Core, Micros, ObsKey, Quality};

pub use failover::FailoverCopy;
pub use ownership::IncarnationId;

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

/// The figures the checker judges against: the registry's freshness per point and the core
/// and runtime configuration every core of the run uses.
#[derive(Clone, Debug)]
pub struct CheckerConfig {
    /// `freshness_s` of every point any registry version of the run knows, in µs.
    pub freshness_us: Arc<BTreeMap<Arc<str>, i64>>,
    /// The cores' `startup_grace_ms`, in µs.
    pub startup_grace_us: i64,
    /// The cores' `lag_high_pending` and `lag_high_age_ms`.
    pub lag_high_pending: u64,
    pub lag_high_age_ms: u64,
    /// The runtime's `lag_poll_interval_ms`, in µs.
    pub lag_poll_interval_us: i64,
    /// Invariant 15's bound: the lock-check interval plus one turmoil tick, in µs.
    pub lock_loss_bound_us: i64,
    /// Invariant 17: the run's derived points.
    pub derived: Arc<BTreeMap<Arc<str>, derived::DerivedDef>>,
    /// Invariant 10: `agg_safe` of every point of the run.
    pub agg_safe: Arc<rollups::AggSafe>,
    /// Invariants 12 and 18–20: the writable points of the run.
    pub writable: Arc<BTreeMap<Arc<str>, commands::WritableDef>>,
    /// Invariant 21: the event policy and deadbands of every point of the run.
    pub events: Arc<BTreeMap<Arc<str>, events::EventDef>>,
    /// Invariants 22–25: the run's rules, by id, and the points they read.
    pub rules: Arc<BTreeMap<String, sentinel_core::registry::rule::Rule>>,
    pub rule_inputs: Arc<BTreeMap<Arc<str>, rules::InputDef>>,
}

/// The fold of the log for one point (invariant 5's total order: observed_at, ingested_at,
/// key).
#[derive(Clone, Debug, Default)]
struct FoldHead {
    latest: Option<(Micros, Micros, ObsKey)>,
    valued: Option<((Micros, Micros, ObsKey), CanonicalValue)>,
}

/// What the checker keeps of a committed row.
#[derive(Clone, Debug)]
struct RowFacts {
    point: Arc<str>,
    observed_at: Micros,
    quality: Quality,
    /// When the store committed it: the core applied it at this time or later.
    committed_at: Micros,
}

/// A message the stream accepted.
#[derive(Clone, Debug)]
struct Accepted {
    /// `None`: no parseable key.
    key: Option<Key3>,
    /// The point and `observed_at` of a message that is an observation of a registered point
    /// (not malformed, not for an unknown or misassigned point).
    observation: Option<(Arc<str>, Micros)>,
    accepted_at: Micros,
}

/// What a transition says about itself (DESIGN.md §2), read once per publish.
#[derive(Clone, Debug)]
pub struct TransitionFacts {
    identity: Identity,
    quality: Option<Quality>,
    core_epoch: u32,
}

/// A key's stamps ([`Checker`]'s `stamps`): nearly always one, held inline, so an accepted
/// message costs no allocation here; the rare later copies' stamps follow in `more`.
#[derive(Clone, Debug)]
struct Stamps {
    first: Micros,
    more: Vec<Micros>,
}

impl Stamps {
    fn contains(&self, stamp: Micros) -> bool {
        self.first == stamp || self.more.contains(&stamp)
    }

    fn iter(&self) -> impl Iterator<Item = Micros> + '_ {
        std::iter::once(self.first).chain(self.more.iter().copied())
    }
}

#[derive(Clone, Debug)]
enum Identity {
    Row(Key3),
    Control(i64),
}

pub struct Checker {
    config: CheckerConfig,
    /// Stream sequence → what the message carries.
    accepted: BTreeMap<u64, Accepted>,
    /// Every accepted message below this stream sequence is covered ([`Self::all_covered`]).
    covered_below: u64,
    /// Looked up, never iterated (so hashed: the ordered map's string comparisons of the
    /// driver instance were about 1 % of a seed, BENCHMARKS.md "Simulator seeds per minute").
    committed: FxHashMap<Key3, RowFacts>,
    /// Invariant 1's other half: each key's stamps, the `ingested_at` the stream gave each
    /// message that carried it (more than one when a publisher's copy outlived the duplicate
    /// window). Since migration 0020 a day's key refuses a same-day copy at another ingest
    /// time, so a core that stamped rows from its own clock no longer shows as a second row.
    stamps: FxHashMap<Key3, Stamps>,
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
    /// Per driver command subject, the highest core epoch announced to it (invariant 16) and
    /// the start identity first heard at that epoch, from the announcements the bus delivered
    /// and the commands the driver applied, not from the driver's guard.
    announced: BTreeMap<String, (u32, Option<u64>)>,
    quality: quality::QualityModel,
    ownership: ownership::Ownership,
    pub derived: derived::DerivedModel,
    pub rollups: rollups::RollupModel,
    /// Invariants 12 and 18–20: the reference arbitration and the commands it allows.
    pub commands: commands::CommandModel,
    /// Invariant 21: each epoch's reference view of its points' edges and qualities.
    pub events: events::EventModel,
    /// Invariants 22–25: the reference evaluation of the rules.
    pub rules: rules::RulesModel,
    /// Keys of observations the core published that the bus refused (a partition, a full
    /// stream): a derived reading among them is lost to the bus, not to a crash.
    refused_publishes: BTreeSet<Key3>,
    pub commands_applied: u64,
    /// Applied while a newer epoch held the lock (committed before the takeover, delivered
    /// before the driver heard the new epoch: allowed).
    pub commands_applied_deposed: u64,
    pub commands_refused: u64,
    /// `command_issued` writes that never reached the store (a core cut off from it).
    pub command_writes_refused: u64,
    /// What lossy database failovers rolled back, and the acked messages lost with it.
    pub failover: failover::Losses,
    /// Invariant 6's maintenance writes: landed (each judged) and refused, by kind.
    pub maintenance: fence::MaintenanceRecord,
    /// Invariant 27: the committed rows of the compactable days.
    pub compaction: compaction::CompactionModel,
}

impl Checker {
    pub fn new(config: CheckerConfig) -> Checker {
        let derived = derived::DerivedModel::new(config.derived.clone());
        let rollups = rollups::RollupModel::new(config.agg_safe.clone());
        let commands = commands::CommandModel::new(config.writable.clone());
        let events = events::EventModel::new(config.events.clone());
        let rules = rules::RulesModel::new(config.rules.clone(), config.rule_inputs.clone());
        Checker {
            events,
            rules,
            commands,
            derived,
            rollups,
            refused_publishes: BTreeSet::new(),
            config,
            accepted: BTreeMap::new(),
            covered_below: 0,
            committed: FxHashMap::default(),
            stamps: FxHashMap::default(),
            quarantined_seqs: BTreeSet::new(),
            published_keys: BTreeSet::new(),
            committed_controls: BTreeSet::new(),
            published_controls: BTreeSet::new(),
            fold: BTreeMap::new(),
            last_epoch: 0,
            last_full_check: BTreeMap::new(),
            violation: None,
            transitions: 0,
            committed_commands: BTreeSet::new(),
            announced: BTreeMap::new(),
            quality: quality::QualityModel::default(),
            ownership: ownership::Ownership::default(),
            commands_applied: 0,
            commands_applied_deposed: 0,
            commands_refused: 0,
            command_writes_refused: 0,
            failover: failover::Losses::default(),
            maintenance: fence::MaintenanceRecord::default(),
            compaction: compaction::CompactionModel::default(),
        }
    }

    pub fn violation(&self) -> Option<&Violation> {
        self.violation.as_ref()
    }

    pub fn fail(&mut self, invariant: u8, at: Micros, what: String) {
        if self.violation.is_none() {
            self.violation = Some(Violation { invariant, what, at });
        }
    }

    /// The stream accepted message `seq` at `at` and stamped it `stamp` (its `ingested_at`).
    /// `observation` is the point and `observed_at` of a message that will be a row of a
    /// registered point.
    pub fn on_accepted(
        &mut self,
        seq: u64,
        key: Option<Key3>,
        observation: Option<(Arc<str>, Micros)>,
        stamp: Micros,
        at: Micros,
    ) {
        if let Some(key) = &key {
            match self.stamps.entry(key.clone()) {
                std::collections::hash_map::Entry::Occupied(mut stamps) => stamps.get_mut().more.push(stamp),
                std::collections::hash_map::Entry::Vacant(slot) => {
                    slot.insert(Stamps {
                        first: stamp,
                        more: Vec::new(),
                    });
                }
            }
        }
        self.covered_below = self.covered_below.min(seq);
        self.accepted.insert(
            seq,
            Accepted {
                key,
                observation,
                accepted_at: at,
            },
        );
    }

    pub fn accepted_total(&self) -> u64 {
        self.accepted.len() as u64
    }

    fn freshness_us(&self, point: &str) -> i64 {
        // Every point a row or control event can name is in a registry version of the run.
        self.config.freshness_us.get(point).copied().unwrap_or(i64::MAX)
    }

    /// A message is covered once its own quarantine entry or a row with its key is committed
    /// (a duplicate of a committed key is acked without a row of its own), or once a lossy
    /// failover rolled that back after it was acked ([`failover`]: lost for good, excused).
    fn covered(&self, seq: u64) -> bool {
        if self.quarantined_seqs.contains(&seq) || self.failover.is_lost(seq) {
            return true;
        }
        matches!(self.accepted.get(&seq), Some(Accepted { key: Some(key), .. }) if self.committed.contains_key(key))
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

    /// Invariants 1 and 6 (fence) and the fold, for a commit the store accepted: `start` is
    /// the writing handle's start identity, `holder` the fence the store recorded just before.
    pub fn on_commit(&mut self, report: &CommitReport, start: Option<u64>, holder: fence::Fence, at: Micros) {
        if report.batch.epoch != holder.0 {
            self.fail(
                6,
                at,
                format!(
                    "batch {} of deposed epoch {} committed while epoch {} is current",
                    report.batch.id.0, report.batch.epoch, holder.0
                ),
            );
        } else if let Err(what) = fence::judge("a commit", (report.batch.epoch, start), holder) {
            self.fail(6, at, format!("batch {}: {what}", report.batch.id.0));
        }
        // Invariant 17's positions: the batch's `applied`, then its rank under the fold's
        // order, the order the core folds a batch's rows for derived points.
        let applied = report.batch.applied();
        let mut ranked: Vec<u32> = report.inserted.clone();
        ranked.sort_by(|&a, &b| {
            let (a, b) = (&report.batch.rows[a as usize], &report.batch.rows[b as usize]);
            a.order_key().cmp(&b.order_key())
        });
        // Each ordinal's rank, looked up per row (a search of `ranked` per row was quadratic
        // in the batch).
        let mut ranks = vec![0u32; report.batch.rows.len()];
        for (n, &ordinal) in ranked.iter().enumerate() {
            ranks[ordinal as usize] = n as u32;
        }
        let rank = |ordinal: u32| ranks[ordinal as usize];
        for &ordinal in &report.inserted {
            let row = &report.batch.rows[ordinal as usize];
            let key = key3(&row.key);
            let facts = RowFacts {
                point: row.point_id.clone(),
                observed_at: row.observed_at,
                quality: row.quality,
                committed_at: at,
            };
            if self.committed.insert(key.clone(), facts).is_some() {
                self.fail(
                    1,
                    at,
                    format!("a second row for key {key:?} (ingested_at {})", row.ingested_at.0),
                );
            }
            if let Some(stamps) = self.stamps.get(&key)
                && !stamps.contains(row.ingested_at)
            {
                self.fail(
                    1,
                    at,
                    format!(
                        "the row for key {key:?} has ingested_at {}, not the stream's stamp {:?}",
                        row.ingested_at.0,
                        stamps.iter().map(|s| s.0).collect::<Vec<_>>()
                    ),
                );
            }
            fold_in(&mut self.fold, row);
            self.commands.on_row(row, at);
            if let Some(what) = self.derived.on_committed(row, (applied, rank(ordinal)))
                && self.failover.judges_reading(&key)
            {
                self.fail(17, at, what);
            }
            self.rollups.on_committed(row);
        }
        self.rules.on_commit(
            report.batch.epoch,
            report.batch.id.0,
            report.inserted.iter().map(|&o| &report.batch.rows[o as usize]),
            at,
        );
        for entry in &report.batch.quarantine {
            self.quarantined_seqs.insert(entry.stream_seq);
        }
        self.events.on_commit(report);
    }

    /// Rows of `points` were rewritten in place by a reprocess (canonical value, quality and
    /// version; never the key, `observed_at` or `ingested_at`). `rows` is every row the log
    /// now holds for those points: the fold (invariant 5) and the rollup aggregates
    /// (invariant 10) of those points are rebuilt from it, since the log is the truth they
    /// are judged against. Derived inputs are never in a simulated reprocess's scope, so
    /// invariant 17's windows stay as they were.
    pub fn on_rows_rewritten(&mut self, points: &BTreeSet<Arc<str>>, rows: &[sentinel_core::ObsRow]) {
        for point in points {
            self.fold.remove(point);
        }
        for row in rows {
            let key = key3(&row.key);
            if let Some(facts) = self.committed.get_mut(&key) {
                facts.quality = row.quality;
            }
            fold_in(&mut self.fold, row);
        }
        self.rules.on_rows_rewritten(rows);
        self.rollups.on_rewritten(points, rows);
        self.events.on_rewritten(points);
    }

    /// Whether `key` is the latest committed row of `point` under the fold's order.
    fn is_latest(&self, point: &str, key: &Key3) -> bool {
        self.fold
            .get(point)
            .and_then(|head| head.latest.as_ref())
            .is_some_and(|(_, _, latest)| key3(latest) == *key)
    }

    /// Invariant 6 for checkpoints and other fenced writes the store accepted ([`fence`]).
    pub fn on_write(&mut self, what: &str, writer: fence::Fence, holder: fence::Fence, at: Micros) {
        if let Err(what) = fence::judge(what, writer, holder) {
            self.fail(6, at, what);
        }
    }

    /// Invariant 6 for a maintenance write the store accepted: judged as a commit is.
    pub fn on_maintenance(
        &mut self,
        kind: fence::Maintenance,
        writer: fence::Fence,
        holder: fence::Fence,
        at: Micros,
    ) {
        self.maintenance.on_landed(kind);
        self.on_write(kind.what(), writer, holder, at);
    }

    /// Invariant 6 for control events: written under the current epoch, each stamped with
    /// its writer's epoch. `qualities` are the watchdog's `quality_changed` events among them
    /// (by position), for invariants 13 and 14.
    #[allow(clippy::too_many_arguments)] // one write's whole record, each part one thing
    pub fn on_control_events(
        &mut self,
        epoch: u32,
        stamps: &[u32],
        commands: &[String],
        qualities: &[Option<quality::ControlFacts>],
        seqs: &[i64],
        (start, holder): (Option<u64>, fence::Fence),
        at: Micros,
    ) {
        self.on_write("a control-event write", (epoch, start), holder, at);
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
        for (facts, &seq) in qualities.iter().zip(seqs) {
            if let Some(facts) = facts {
                self.quality.controls.insert(seq, facts.clone());
            }
        }
    }

    /// Invariants 12, 18 and 20 for a committed control write: `desired` holds its
    /// `point_desired` rows when it is an arbitration ([`commands`]).
    pub fn on_command_plane(
        &mut self,
        events: &[sentinel_core::ControlEvent],
        desired: Option<&[sentinel_core::arbitration::DesiredRow]>,
        seqs: &[i64],
        at: Micros,
    ) {
        if let Err((invariant, what)) = self.commands.on_write(events, desired, seqs, at) {
            self.fail(invariant, at, what);
        }
        if let Err((invariant, what)) = self.rules.on_write(events, at) {
            self.fail(invariant, at, what);
        }
    }

    /// Invariant 16's record: a core's `core_started` announcement (or a command the driver
    /// applied) from core start `core_start` at `core_epoch` reached the driver instance of
    /// command subject `subject`.
    pub fn on_announcement(&mut self, subject: &str, core_epoch: u32, core_start: Option<u64>) {
        let floor = self.announced.entry(subject.to_owned()).or_default();
        if core_epoch > floor.0 {
            *floor = (core_epoch, core_start);
        } else if core_epoch == floor.0 && floor.1.is_none() {
            floor.1 = core_start;
        }
    }

    /// Invariants 6 and 16 for commands: a driver applies only a command whose
    /// `command_issued` event its core committed under the epoch the command carries (i.e.
    /// while that core held the lock; the fence saw to that), and never one whose epoch is
    /// below one already announced to it.
    pub fn on_command_applied(
        &mut self,
        subject: &str,
        command: &sentinel_core::wire::CommandEnvelope,
        current_epoch: u32,
        at: Micros,
    ) {
        self.commands_applied += 1;
        if command.core_epoch < current_epoch {
            self.commands_applied_deposed += 1;
        }
        if let Some(&(floor, floor_start)) = self.announced.get(subject) {
            if command.core_epoch < floor {
                self.fail(
                    16,
                    at,
                    format!(
                        "driver {subject} applied command {} of epoch {} after epoch {floor} had \
                         been announced to it",
                        command.command_id, command.core_epoch
                    ),
                );
            } else if command.core_epoch == floor
                && let (Some(first), Some(theirs)) = (floor_start, command.core_start)
                && first != theirs
            {
                self.fail(
                    16,
                    at,
                    format!(
                        "driver {subject} applied command {} of epoch {floor} from core start \
                         {theirs} after hearing start {first} at that epoch (a repeated epoch)",
                        command.command_id
                    ),
                );
            }
        }
        self.on_announcement(subject, command.core_epoch, command.core_start);
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

    /// Invariant 4, as a transition reaches the bus. `facts` is `None` for a payload that is
    /// not a transition.
    pub fn on_transition(&mut self, facts: Option<&TransitionFacts>, at: Micros) {
        self.transitions += 1;
        let key = match facts.map(|f| &f.identity) {
            Some(Identity::Row(key)) => key,
            Some(Identity::Control(seq)) => {
                let seq = *seq;
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
        if !self.committed.contains_key(key) {
            self.fail(
                4,
                at,
                format!("transition for key {key:?}, which no commit inserted"),
            );
        } else if !self.published_keys.insert(key.clone()) {
            self.fail(4, at, format!("a second transition for key {key:?}"));
        }
    }

    /// Invariant 10 after an on-demand refresh: `minutes` and `hours` are what the store holds
    /// in the ranges the refresh reported.
    pub fn on_rollup_refresh(
        &mut self,
        refresh: &sentinel_ports::RollupRefresh,
        minutes: &[sentinel_ports::RollupRow],
        hours: &[sentinel_ports::RollupRow],
        at: Micros,
    ) {
        use sentinel_ports::RollupGrain;
        let failure = self
            .rollups
            .check_refreshed(RollupGrain::Minute, refresh.minute_range, minutes)
            .or_else(|| {
                self.rollups
                    .check_refreshed(RollupGrain::Hour, refresh.hour_range, hours)
            });
        if let Some(what) = failure {
            self.fail(10, at, what);
        }
    }

    /// Invariant 10 after a step of the running core's refresh that left no invalidation:
    /// `minutes` and `hours` are what the store holds from `from`
    /// ([`rollups::RollupModel::check_from`]) up to the watermark.
    pub fn on_rollup_step(
        &mut self,
        watermark: sentinel_ports::RollupWatermark,
        from: Micros,
        minutes: &[sentinel_ports::RollupRow],
        hours: &[sentinel_ports::RollupRow],
        at: Micros,
    ) {
        if let Some(what) = self.rollups.check_watermark(watermark, from, minutes, hours) {
            self.fail(10, at, what);
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
        self.quality.acquired_at.insert(epoch, at);
        self.rules.on_acquire(epoch, at);
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
        // The core's states come in its registry's order, which is by point id (the registry
        // compiles its points sorted), as the fold's are: one merge of the two, not a lookup
        // by id per point (those were about 1 % of a seed).
        // If that order ever changed, the merge would skip points without a word, so it is
        // asserted as the states go by: the checker's own bug, not the system's.
        let mut previous: Option<&str> = None;
        let mut states = core
            .point_states()
            .inspect(|s| {
                assert!(
                    previous.is_none_or(|p| p < &*s.point_id),
                    "invariant 5's merge needs the core's point states in point-id order: {:?} came after {:?}",
                    s.point_id,
                    previous
                );
                previous = Some(&*s.point_id);
            })
            .peekable();
        for (point, head) in &self.fold {
            while states.next_if(|s| *s.point_id < **point).is_some() {}
            // A point added by a later registry version is unknown to an older core.
            let Some(state) = states.next_if(|s| s.point_id == *point) else {
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

    /// A publish of an observation (a self-point or a derived reading) the bus refused.
    pub fn on_publish_refused(&mut self, key: Key3) {
        self.refused_publishes.insert(key);
    }

    /// Invariant 17 at the end of a run: every trigger's readings committed (or refused by
    /// the bus), so none a crash lost stayed lost.
    pub fn check_derived_complete(&mut self, at: Micros) {
        let (committed, losses) = (&self.committed, &self.failover);
        if let Some(what) = self.derived.missing(
            |key| committed.contains_key(key) || losses.is_lost_key(key),
            &self.refused_publishes,
        ) {
            self.fail(17, at, what);
        }
    }

    /// Invariant 2's drain test, asked at every controller step once traffic is done: whether
    /// every accepted message is covered. A covered message stays covered (rows and quarantine
    /// entries are never taken back but by a lossy failover, which moves the scan's start
    /// back, [`Checker::on_promoted`]), so the scan resumes at the first message it last found
    /// uncovered instead of walking every accepted message again.
    pub fn all_covered(&mut self) -> bool {
        let first = self
            .accepted
            .range(self.covered_below..)
            .map(|(&seq, _)| seq)
            .find(|&seq| !self.covered(seq));
        match first {
            Some(seq) => {
                self.covered_below = seq;
                false
            }
            None => {
                self.covered_below = self.accepted.last_key_value().map_or(0, |(&seq, _)| seq + 1);
                true
            }
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

/// Folds one committed row into its point's head under invariant 5's total order.
fn fold_in(fold: &mut BTreeMap<Arc<str>, FoldHead>, row: &sentinel_core::ObsRow) {
    let head = fold.entry(row.point_id.clone()).or_default();
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

/// Reads what a transition says about itself: what caused it (a row's message key or a
/// control event's seq, DESIGN.md §2), its quality and its core's epoch. `None` for a payload
/// that names neither or both causes.
pub fn transition_facts(payload: &[u8]) -> Option<TransitionFacts> {
    #[derive(serde::Deserialize)]
    struct Wire<'a> {
        #[serde(borrow)]
        key: Option<KeyWire<'a>>,
        control_seq: Option<i64>,
        #[serde(borrow)]
        quality: &'a str,
        core_epoch: u32,
    }
    #[derive(serde::Deserialize)]
    struct KeyWire<'a> {
        driver_instance: &'a str,
        source_epoch: u32,
        source_seq: u64,
    }
    let wire: Wire<'_> = serde_json::from_slice(payload).ok()?;
    let identity = match (wire.key, wire.control_seq) {
        (Some(key), None) => {
            Identity::Row((Arc::from(key.driver_instance), key.source_epoch, key.source_seq))
        }
        (None, Some(seq)) => Identity::Control(seq),
        _ => return None,
    };
    Some(TransitionFacts {
        identity,
        quality: Quality::parse(wire.quality),
        core_epoch: wire.core_epoch,
    })
}
