//! [`Core`]: the sans-IO state machine that owns the pipeline, the dedup set, the open and
//! in-flight batches and the projection, and keeps the ingest spec's three ordering rules:
//! ack after commit, publish after commit, project only what inserted (DESIGN.md §1).
//!
//! Like quinn-proto's `Connection`: [`Core::handle`] takes time and an [`Input`], effects queue
//! up for [`Core::poll_effect`], and [`Core::next_deadline`] says when to send `Input::Tick`.
//! It never blocks, never reads a clock, never does I/O.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::config::Config;
use crate::control::{
    COMMAND_ID_BYTES_MAX, CONTROL_EVENTS_PER_WRITE_MAX, CommandRequest, ControlDetail, ControlEvent,
    ControlReport, PRINCIPAL_BYTES_MAX, PRINCIPAL_WATCHDOG,
};
use crate::dedup::{DedupSet, Seen};
use crate::delivery::{Delivery, DeliveryTag};
use crate::derived::Derivations;
use crate::effect::{Effect, ExitReason, Input};
use crate::gap::GapReason;
use crate::log::{Batch, BatchId, CommitReport, Quality};
use crate::metrics::Metrics;
use crate::parts::drivers::{Announcement, DriverState, Drivers, HelloOutcome};
use crate::parts::self_points::{self, SelfPoints};
use crate::parts::watchdog::Watchdog;
use crate::pipeline::{self, Outcome};
use crate::planted::PlantedBug;
use crate::projection::Projection;
use crate::registry::Registry;
use crate::rollup::RollupSchedule;
use crate::state::{PointState, RestoredState};
use crate::time::Micros;
use crate::wire::{DriverHello, ToDriver};

/// How often dirty value-only points are considered for a checkpoint.
const CHECKPOINT_SCAN_INTERVAL_MS: i64 = 1_000;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Mode {
    Running,
    /// Shutdown requested: no new deliveries; finish in-flight batches, checkpoint, exit.
    Draining,
    Exited,
}

/// A batch's bookkeeping that stays in the core while the batch is at the store.
#[derive(Debug, Default)]
struct Pending {
    /// Packed dedup keys of the batch's rows, to mark committed.
    keys: Vec<u128>,
    /// Deliveries recognised as duplicates of this batch's rows, acked when it commits.
    duplicate_acks: Vec<DeliveryTag>,
}

#[derive(Debug)]
struct Open {
    batch: Batch,
    pending: Pending,
    opened_at: Micros,
}

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("invalid core configuration: {0}")]
    Config(String),
}

pub struct Core {
    config: Config,
    registry: Arc<Registry>,
    epoch: u32,
    now: Micros,
    mode: Mode,
    dedup: DedupSet,
    projection: Projection,
    open: Option<Open>,
    next_batch_id: u64,
    in_flight: BTreeMap<BatchId, Pending>,
    /// Commit reports that arrived before an earlier batch's: applied once every earlier
    /// batch's report is (commits run concurrently; the log records batch order, migration
    /// 0007, so derived readings are a function of the log).
    reported: BTreeMap<BatchId, CommitReport>,
    effects: VecDeque<Effect>,
    metrics: Metrics,
    last_checkpoint_scan_at: Micros,
    /// Freshness deadlines ([`Core::rehydrate_timers`] arms them from the restored projection).
    watchdog: Watchdog,
    /// When the next self-point readings are due, and their sequence.
    self_points: SelfPoints,
    drivers: Drivers,
    /// When the next step of the rollup refresh is due (`rollup.rs`).
    rollups: RollupSchedule,
    /// When the next retention run is due (`retention.rs`).
    retention: crate::retention::RetentionSchedule,
    /// The last lag reading was high: rollup steps wait.
    lag_high: bool,
    /// Points with a `quality_changed` event at the store, not yet answered.
    control_pending: std::collections::BTreeSet<crate::registry::PointIdx>,
    /// Derived points: computed from committed rows, published as observations.
    derived: Derivations,
    /// Readings restart step 5 derived again, by key, held until the stream has moved past
    /// `held_through_seq` (the last message it held at startup): one of them may still be
    /// there, published before the crash and not yet consumed, and publishing it again past
    /// the stream's duplicate window would write it twice. One that commits meanwhile is
    /// dropped; the rest are published when the stream's oldest message is newer.
    held: BTreeMap<(Arc<str>, u32, u64), Effect>,
    held_through_seq: u64,
    /// The one reprocess asked over the bus that runs (`reprocess_request.rs`).
    reprocess: crate::reprocess_request::ReprocessSlot,
    /// Always `None` unless a simulator test planted a bug (feature `planted-bugs`).
    planted: Option<PlantedBug>,
}

impl Core {
    /// A core for `epoch` over `registry`, its projection restored from `restored` (restart
    /// steps 2–3). The forced `restored` qualities are checkpointed at once.
    pub fn new(
        config: Config,
        registry: Arc<Registry>,
        epoch: u32,
        restored: &RestoredState,
        now: Micros,
    ) -> Result<Core, CoreError> {
        config.validate().map_err(CoreError::Config)?;
        let projection = Projection::restore(&registry, restored, &config, now);
        let watchdog = Watchdog::new(registry.len(), now.add_ms(config.startup_grace_ms));
        let self_points = SelfPoints::new(config.self_points_interval_ms, &registry, now);
        let drivers = Drivers::new(&registry, self_points::SELF_HOST, epoch, now);
        let rollups = RollupSchedule::new(config.rollups.clone(), now);
        let retention = crate::retention::RetentionSchedule::new(config.retention.clone(), now);
        let derived = Derivations::new(&registry);
        let mut core = Core {
            dedup: DedupSet::new(config.dedup_keys_max),
            projection,
            config,
            registry,
            epoch,
            now,
            mode: Mode::Running,
            open: None,
            next_batch_id: 1,
            in_flight: BTreeMap::new(),
            reported: BTreeMap::new(),
            effects: VecDeque::new(),
            metrics: Metrics::default(),
            last_checkpoint_scan_at: now,
            watchdog,
            self_points,
            drivers,
            rollups,
            retention,
            lag_high: false,
            control_pending: std::collections::BTreeSet::new(),
            derived,
            held: BTreeMap::new(),
            held_through_seq: 0,
            reprocess: Default::default(),
            planted: None,
        };
        core.count_drivers();
        core.checkpoint_quality_changes();
        Ok(core)
    }

    /// Restart step 4: control events above each point's watermark. Point qualities stay
    /// `restored` (step 2 is deliberately pessimistic); each applied event advances its point's
    /// `watermark_seq`, so the next checkpoint records how far the log was applied. Events for
    /// points this registry does not know are skipped. Returns how many were applied.
    pub fn replay_control_events<'a>(&mut self, events: impl IntoIterator<Item = (&'a str, i64)>) -> usize {
        let mut applied = 0;
        for (point_id, seq) in events {
            if let Some(idx) = self.registry.resolve(point_id)
                && self.projection.advance_watermark(idx, seq)
            {
                applied += 1;
            }
        }
        applied
    }

    /// The lowest control-event watermark over all points (0 when any point has none): restart
    /// step 4 reads the control log from there.
    pub fn control_watermark(&self) -> i64 {
        self.projection
            .states()
            .map(|s| s.watermark_seq.unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    /// Restart step 5, the question: which rows of which class tables rebuild the derived
    /// points' windows, each input bounded by its newest committed row (from the restored log
    /// heads) minus the longest window reading it. Empty when nothing is derived.
    pub fn derived_window_requests(&self) -> Vec<crate::derived::WindowRequest> {
        self.derived
            .window_requests(&self.registry, |idx| self.projection.state(idx).observed_at)
    }

    /// Restart step 5, the answer: replays the rows read for [`Self::derived_window_requests`]
    /// in the order the cores applied them (migration 0007) into the windows, and derives
    /// again the readings of rows that triggered one not in the log (a crash between a commit
    /// and the publish of its readings lost them; see
    /// [`crate::derived::Derivations::rehydrate`]). `stream` is the stream's oldest message
    /// and last sequence now: when it is empty they are published at once; otherwise they are
    /// held until an [`Input::StreamFront`] shows the stream past that last sequence, dropping
    /// any that commits meanwhile (it was still in the stream). Returns how many rows were
    /// folded and how many readings were derived again.
    pub fn rehydrate_derived(
        &mut self,
        requests: &[crate::derived::WindowRequest],
        rows: Vec<crate::derived::WindowRow>,
        rows_max_per_point: usize,
        stream: (Option<u64>, u64),
    ) -> (usize, usize) {
        let (folded, readings) = self
            .derived
            .rehydrate(&self.registry, requests, rows, rows_max_per_point);
        let again = readings.len();
        for reading in readings {
            let (epoch, seq) = crate::derived::derived_key(&reading.point_id, &reading.trigger);
            let (subject, msg_id, payload) = reading.to_observation();
            self.held.insert(
                (reading.instance.clone(), epoch, seq),
                Effect::PublishObservation {
                    subject,
                    msg_id,
                    payload,
                },
            );
        }
        self.held_through_seq = stream.1;
        self.release_held(stream.0);
        (folded, again)
    }

    /// Publishes the held readings once the stream's oldest message (`None`: empty) is newer
    /// than every message it held at startup.
    fn release_held(&mut self, first_seq: Option<u64>) {
        if self.held.is_empty() || first_seq.is_some_and(|f| f <= self.held_through_seq) {
            return;
        }
        let held = std::mem::take(&mut self.held);
        self.metrics.derived_readings += held.len() as u64;
        self.effects.extend(held.into_values());
    }

    /// Restart step 6: the freshness deadlines, one per point that has an observation, from
    /// the restored projection. Returns how many were armed. Expiries wait for the startup
    /// grace to pass.
    pub fn rehydrate_timers(&mut self) -> usize {
        for (idx, _) in self.registry.points() {
            if let Some(deadline) = self.projection.freshness_deadline(idx) {
                self.watchdog.arm(idx, deadline);
            }
        }
        self.watchdog.armed()
    }

    /// Restart step 7: this core's epoch announcement for every driver instance the registry
    /// assigns points to, for the runtime to publish. Every instance is `connecting` until it
    /// answers with a hello at this epoch (see [`crate::drivers`]).
    pub fn start_drivers(&self) -> Vec<Announcement> {
        self.drivers.announcements()
    }

    /// The driver instances as this core sees them.
    pub fn drivers(&self) -> &Drivers {
        &self.drivers
    }

    /// Whether the watchdog is currently holding staleness back (startup grace or high lag).
    pub fn staleness_suppressed(&self) -> bool {
        self.watchdog.suppressed(self.now)
    }

    /// Plants a known bug (simulator tests only; see [`PlantedBug`]).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: PlantedBug) {
        self.planted = Some(bug);
    }

    /// Whether `bug` is planted (the runtime reads its own planted bug here).
    #[cfg(feature = "planted-bugs")]
    pub fn is_planted(&self, bug: PlantedBug) -> bool {
        self.planted(bug)
    }

    /// Whether `bug` is planted. Always false without the `planted-bugs` feature, so a
    /// release build compiles the checks away.
    fn planted(&self, bug: PlantedBug) -> bool {
        cfg!(feature = "planted-bugs") && self.planted == Some(bug)
    }

    pub fn handle(&mut self, now: Micros, input: Input) {
        debug_assert!(now >= self.now, "time passed to the core must not go backwards");
        self.now = self.now.max(now);
        if self.mode == Mode::Exited {
            return;
        }
        match input {
            Input::Delivered(deliveries) => self.on_delivered(deliveries),
            Input::Committed(report) => self.on_committed(report),
            Input::CommitFailed { batch, fenced } => {
                self.in_flight.remove(&batch);
                self.exit(ExitReason::write_failed(fenced));
            }
            Input::CheckpointFailed { fenced } | Input::ControlFailed { fenced } => {
                self.exit(ExitReason::write_failed(fenced))
            }
            Input::ControlCommitted(report) => self.on_control_committed(report),
            Input::CommandRequested(request) => self.on_command_requested(request),
            Input::Lag {
                pending,
                oldest_unacked_age_ms,
            } => {
                let high = pending >= self.config.lag_high_pending
                    || oldest_unacked_age_ms.is_some_and(|age| age >= self.config.lag_high_age_ms);
                self.metrics.lag_pending = pending;
                self.metrics.lag_oldest_unacked_age_ms = oldest_unacked_age_ms.unwrap_or(0);
                self.watchdog.set_lag_high(high);
                self.lag_high = high;
                self.on_tick();
            }
            Input::StreamFront { first_seq } => self.release_held(first_seq),
            Input::DriverHello { host, hello } => self.on_driver_hello(&host, &hello),
            Input::RollupStepped(outcome) => {
                self.rollups.on_step(self.now, outcome);
                self.on_tick();
            }
            Input::RollupStepFenced => self.exit(ExitReason::FENCED),
            Input::RetentionRan(outcome) => {
                self.retention.on_run(self.now, outcome);
                self.on_tick();
            }
            Input::RetentionFenced => self.exit(ExitReason::FENCED),
            Input::ReprocessRequested { ask, reply_to } => self.on_reprocess_requested(ask, reply_to),
            Input::ReprocessFinished(finished) => self.on_reprocess_finished(finished),
            Input::Tick => self.on_tick(),
            Input::Shutdown => {
                self.mode = Mode::Draining;
                self.try_flush();
                self.finish_if_drained();
            }
        }
    }

    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// When the caller should next send `Input::Tick`, if anything is waiting on time.
    pub fn next_deadline(&self) -> Option<Micros> {
        if self.mode == Mode::Exited {
            return None;
        }
        let mut deadline: Option<Micros> = None;
        let mut consider = |at: Micros| deadline = Some(deadline.map_or(at, |d| d.min(at)));
        if let Some(open) = &self.open {
            // A full pipeline flushes on the next commit, not on time; no deadline then, or the
            // caller would spin on a past deadline.
            if !open.batch.is_empty() && self.in_flight.len() < self.config.inflight_batches_max {
                consider(open.opened_at.add_ms(self.config.flush_interval_ms));
            }
        }
        if self.projection.has_dirty() {
            consider(self.last_checkpoint_scan_at.add_ms(CHECKPOINT_SCAN_INTERVAL_MS));
        }
        if self.mode == Mode::Running
            && let Some(at) = self.watchdog.next_deadline()
        {
            consider(at);
        }
        if self.mode == Mode::Running
            && self.planted(PlantedBug::WakeForSuppressedDeadline)
            && let Some(at) = self.watchdog.earliest()
        {
            consider(at);
        }
        if self.mode == Mode::Running
            && let Some(at) = self.self_points.next_deadline()
        {
            consider(at);
        }
        if self.mode == Mode::Running
            && !self.ingest_behind()
            && let Some(at) = self.rollups.next_deadline()
        {
            consider(at);
        }
        if self.mode == Mode::Running
            && !self.ingest_behind()
            && let Some(at) = self.retention.next_deadline()
        {
            consider(at);
        }
        deadline
    }

    /// How many deliveries the core can take now without exceeding its in-flight bound. The
    /// runtime fetches no more than this.
    /// Ingest needs the database more than the rollups do: the lag is high or every in-flight
    /// slot is taken. Rollup steps wait then, so they never starve ingest.
    fn ingest_behind(&self) -> bool {
        self.lag_high || self.in_flight.len() >= self.config.inflight_batches_max
    }

    pub fn accept_budget(&self) -> usize {
        if self.mode != Mode::Running {
            return 0;
        }
        let open_len = self.open.as_ref().map_or(0, |o| o.batch.len());
        let room_in_open = self.config.batch_rows_max.saturating_sub(open_len);
        let free_batches = self
            .config
            .inflight_batches_max
            .saturating_sub(self.in_flight.len());
        room_in_open + free_batches * self.config.batch_rows_max
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The latest time the core was handed.
    pub fn now(&self) -> Micros {
        self.now
    }

    pub fn epoch(&self) -> u32 {
        self.epoch
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    pub fn in_flight_batches(&self) -> usize {
        self.in_flight.len()
    }

    pub fn has_exited(&self) -> bool {
        self.mode == Mode::Exited
    }

    /// The projection's current state of a point.
    pub fn point_state(&self, point_id: &str) -> Option<&PointState> {
        self.registry
            .resolve(point_id)
            .map(|idx| self.projection.state(idx))
    }

    pub fn point_states(&self) -> impl Iterator<Item = &PointState> {
        self.projection.states()
    }

    /// Points currently at each quality, for status and self-points.
    pub fn quality_counts(&self) -> [u64; Quality::ALL.len()] {
        let mut counts = [0u64; Quality::ALL.len()];
        for state in self.projection.states() {
            counts[state.quality as usize] += 1;
        }
        counts
    }

    fn on_delivered(&mut self, deliveries: Vec<Delivery>) {
        if self.mode != Mode::Running {
            // Unacked, so the bus redelivers them to whoever runs next.
            return;
        }
        debug_assert!(
            deliveries.len() <= self.accept_budget(),
            "runtime fetched past the accept budget"
        );
        let mut ack_now = Vec::new();
        for mut delivery in deliveries {
            self.metrics.delivered += 1;
            if self.planted(PlantedBug::IngestedAtFromCoreClock) {
                delivery.ingested_at = self.now;
            }
            if self.open.is_none() {
                debug_assert!(self.next_batch_id < crate::log::BATCH_IDS_PER_EPOCH);
                let id = BatchId(self.next_batch_id);
                self.next_batch_id += 1;
                self.open = Some(Open {
                    batch: Batch {
                        id,
                        epoch: self.epoch,
                        rows: Vec::new(),
                        quarantine: Vec::new(),
                    },
                    pending: Pending::default(),
                    opened_at: self.now,
                });
            }
            let ctx = pipeline::Context {
                registry: &self.registry,
                config: &self.config,
                dedup: &self.dedup,
                projection: &self.projection,
            };
            let outcome = pipeline::process(&ctx, delivery);
            let open = self.open.as_mut().expect("invariant: opened above");
            match outcome {
                Outcome::Row(row, key) => {
                    self.dedup.insert_in_flight(key, open.batch.id);
                    open.pending.keys.push(key);
                    open.batch.rows.push(row);
                }
                Outcome::Quarantine(entry) => open.batch.quarantine.push(entry),
                Outcome::Duplicate { tag, seen } => {
                    self.metrics.duplicates_fast_path += 1;
                    match seen {
                        Seen::Committed => ack_now.push(tag),
                        Seen::InFlight(batch) if batch == open.batch.id => {
                            open.pending.duplicate_acks.push(tag)
                        }
                        Seen::InFlight(batch) => match self.in_flight.get_mut(&batch) {
                            Some(pending) => pending.duplicate_acks.push(tag),
                            // Not reachable: commits mark their keys committed. Acking is still
                            // right, because a key is only in flight after its row exists.
                            None => ack_now.push(tag),
                        },
                    }
                }
            }
            if open.batch.len() >= self.config.batch_rows_max {
                self.try_flush();
            }
        }
        if !ack_now.is_empty() {
            self.metrics.acks += ack_now.len() as u64;
            self.effects.push_back(Effect::Ack(ack_now));
        }
    }

    /// A commit report: applied at once if every earlier batch's was, else held until they
    /// are (the core applies commits in batch order, the order the log records).
    fn on_committed(&mut self, report: CommitReport) {
        if !self.in_flight.contains_key(&report.batch.id) {
            debug_assert!(false, "commit report for unknown batch {:?}", report.batch.id);
            return;
        }
        self.reported.insert(report.batch.id, report);
        while let Some((&first, _)) = self.in_flight.first_key_value() {
            let Some(report) = self.reported.remove(&first) else {
                break;
            };
            self.apply_committed(report);
        }
        self.checkpoint_quality_changes();
        self.try_flush();
        self.finish_if_drained();
    }

    fn apply_committed(&mut self, report: CommitReport) {
        let CommitReport {
            batch,
            inserted,
            quarantine_inserted: _,
        } = report;
        let Some(pending) = self.in_flight.remove(&batch.id) else {
            debug_assert!(false, "commit report for unknown batch {:?}", batch.id);
            return;
        };
        // The store's side of the boundary: ordinals ascending and in range.
        debug_assert!(
            inserted.windows(2).all(|w| w[0] < w[1]),
            "RETURNING ordinals not ascending"
        );
        debug_assert!(
            inserted.iter().all(|&i| (i as usize) < batch.rows.len()),
            "RETURNING ordinal out of range"
        );
        debug_assert_eq!(pending.keys.len(), batch.rows.len());

        for key in &pending.keys {
            self.dedup.mark_committed(*key);
        }

        // Rule 1: ack only now that the rows and quarantine entries are durable.
        let mut acks: Vec<DeliveryTag> = Vec::with_capacity(batch.len() + pending.duplicate_acks.len());
        acks.extend(batch.rows.iter().map(|r| r.tag));
        acks.extend(batch.quarantine.iter().map(|q| q.tag));
        acks.extend(pending.duplicate_acks);
        self.metrics.acks += acks.len() as u64;
        self.metrics.batches_committed += 1;
        if !acks.is_empty() {
            self.effects.push_back(Effect::Ack(acks));
        }

        for entry in &batch.quarantine {
            self.metrics.quarantined[entry.reason as usize] += 1;
        }
        self.metrics.rows_conflicted += (batch.rows.len() - inserted.len().min(batch.rows.len())) as u64;

        // Rules 2 and 3: project and publish only what the RETURNING set says was inserted.
        let inserted: &[u32] = if self.planted(PlantedBug::ProjectSubmittedBatch) {
            &[] // projected when submitted instead (see try_flush)
        } else {
            &inserted
        };
        for &ordinal in inserted {
            let Some(row) = batch.rows.get(ordinal as usize) else {
                continue;
            };
            self.metrics.rows_inserted[row.class.index()] += 1;
            if row.quality == Quality::Bad {
                self.metrics.rows_bad += 1;
            }
            // Planted: a time before every row, so every row looks current.
            let apply_now = if self.planted(PlantedBug::LiveFromReplayedRow) {
                Micros(i64::MIN)
            } else {
                self.now
            };
            let published = self.projection.apply(row, self.epoch, apply_now);
            if self.drivers.on_row(row.point, row.observed_at) {
                self.count_drivers();
            }
            if let Some(deadline) = self.projection.freshness_deadline(row.point)
                && self.watchdog.deadline(row.point) != Some(deadline)
            {
                self.watchdog.arm(row.point, deadline);
            }
            if let Some(published) = published {
                self.publish_transition(published);
            }
        }
        // Derived points read only what RETURNING says was inserted; their readings go back
        // through the stream and ingest like any observation, keyed by the triggering row.
        // Within a batch the rows are folded in the fold's order `(observed_at, ingested_at,
        // key)`, which the log holds, as it holds the batch order (`applied`): a restart
        // replays exactly this order.
        // A held reading whose original was still in the stream has now committed.
        if !self.held.is_empty() {
            for &ordinal in inserted {
                if let Some(row) = batch.rows.get(ordinal as usize) {
                    self.held.remove(&(
                        row.key.driver_instance.clone(),
                        row.key.source_epoch,
                        row.key.source_seq,
                    ));
                }
            }
        }
        if self.planted(PlantedBug::DeriveFromSubmittedBatch) {
            return; // derived when submitted instead (see try_flush)
        }
        let mut order: Vec<&crate::log::ObsRow> = inserted
            .iter()
            .filter_map(|&ordinal| batch.rows.get(ordinal as usize))
            .collect();
        order.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        for row in order {
            for reading in self.derived.on_committed(row) {
                let (subject, msg_id, payload) = reading.to_observation();
                self.metrics.derived_readings += 1;
                self.effects.push_back(Effect::PublishObservation {
                    subject,
                    msg_id,
                    payload,
                });
            }
        }
    }

    /// Watchdog expiries: each live, restored or assumed point whose deadline passed gets a
    /// `quality_changed` event to `stale`, written before the projection changes. Its reason
    /// is `heartbeat_missed` for a point that declares a heartbeat (its deadline is the
    /// heartbeat's), else `freshness`.
    fn expire_deadlines(&mut self) {
        if self.mode != Mode::Running {
            return;
        }
        let max = self
            .config
            .watchdog_expiries_per_tick_max
            .min(CONTROL_EVENTS_PER_WRITE_MAX);
        let mut events = Vec::new();
        let expired = if self.planted(PlantedBug::StaleWhileSuppressed) {
            self.watchdog.pop_due(self.now, max)
        } else {
            self.watchdog.expired(self.now, max)
        };
        for (point, deadline) in expired {
            let state = self.projection.state(point);
            if !matches!(
                state.quality,
                Quality::Live | Quality::Restored | Quality::Assumed
            ) || self.control_pending.contains(&point)
            {
                continue;
            }
            self.control_pending.insert(point);
            events.push(ControlEvent {
                occurred_at: self.now,
                point,
                point_id: state.point_id.clone(),
                principal: PRINCIPAL_WATCHDOG.into(),
                core_epoch: self.epoch,
                registry_version: self.registry.version,
                detail: ControlDetail::QualityChanged {
                    from: state.quality,
                    to: Quality::Stale,
                    reason: if self
                        .registry
                        .point(point)
                        .descriptor
                        .manifest
                        .heartbeat_s
                        .is_some()
                    {
                        GapReason::HeartbeatMissed
                    } else {
                        GapReason::Freshness
                    },
                    deadline,
                },
            });
        }
        if !events.is_empty() {
            self.metrics.control_events += events.len() as u64;
            self.effects.push_back(Effect::Control {
                epoch: self.epoch,
                events,
            });
        }
    }

    /// A control write committed: only now does the projection follow it, and only now is
    /// the transition published (the ordering rules, applied to the control log).
    fn on_control_committed(&mut self, report: ControlReport) {
        debug_assert_eq!(
            report.events.len(),
            report.seqs.len(),
            "one seq per control event"
        );
        for (event, &seq) in report.events.iter().zip(&report.seqs) {
            let (from, to, reason) = match &event.detail {
                ControlDetail::QualityChanged { from, to, reason, .. } => (*from, *to, *reason),
                ControlDetail::CommandIssued { command_id, value } => {
                    self.send_command(event, command_id, value);
                    continue;
                }
            };
            self.control_pending.remove(&event.point);
            // A row that arrived while the event was at the store re-armed the deadline and
            // superseded it: the event stays in the log, the projection does not go stale.
            let current = self.projection.state(event.point).quality;
            let superseded =
                current != from || self.watchdog.deadline(event.point).is_some_and(|d| d > self.now);
            let to = if superseded { current } else { to };
            let published = self.projection.apply_quality_event(
                event.point,
                to,
                reason.as_str(),
                seq,
                self.now,
                self.epoch,
                event.registry_version,
            );
            if let Some(published) = published {
                self.publish_transition(published);
            }
        }
        self.checkpoint_quality_changes();
    }

    fn publish_transition(&mut self, published: crate::projection::Published) {
        self.metrics.transitions_published += 1;
        self.effects.push_back(Effect::Publish {
            subject: published.subject,
            payload: published.payload.into(),
        });
    }

    /// A command request: validated, then written as a `command_issued` control event. The
    /// command goes to its driver only once that write commits ([`Self::send_command`]), so a
    /// core the fence refuses (deposed, or cut off from the store) never sends one.
    fn on_command_requested(&mut self, request: CommandRequest) {
        let point = self.registry.resolve(&request.point_id);
        let valid = self.mode == Mode::Running
            && point.is_some()
            && !request.command_id.is_empty()
            && request.command_id.len() <= COMMAND_ID_BYTES_MAX
            && !request.principal.is_empty()
            && request.principal.len() <= PRINCIPAL_BYTES_MAX
            && (request.value.is_number() || request.value.is_boolean() || request.value.is_string());
        let Some(point) = point.filter(|_| valid) else {
            self.metrics.commands_refused += 1;
            return;
        };
        self.metrics.control_events += 1;
        self.effects.push_back(Effect::Control {
            epoch: self.epoch,
            events: vec![ControlEvent {
                occurred_at: self.now,
                point,
                point_id: self.registry.point(point).id.clone(),
                principal: request.principal.as_str().into(),
                core_epoch: self.epoch,
                registry_version: self.registry.version,
                detail: ControlDetail::CommandIssued {
                    command_id: request.command_id,
                    value: request.value,
                },
            }],
        });
    }

    fn on_driver_hello(&mut self, host: &str, hello: &DriverHello) {
        self.metrics.driver_hellos += 1;
        match self.drivers.on_hello(host, hello) {
            HelloOutcome::Current => {}
            HelloOutcome::Reannounce(Announcement { subject, payload }) => {
                self.metrics.driver_reannouncements += 1;
                self.effects.push_back(Effect::Publish { subject, payload });
            }
            // A newer core has announced itself to this driver, so this one has been replaced;
            // the lock check stops it. Until then the driver refuses its commands anyway.
            HelloOutcome::Ahead => self.metrics.driver_hellos_ahead += 1,
            HelloOutcome::Unknown => self.metrics.driver_hellos_unknown += 1,
        }
        self.count_drivers();
    }

    fn count_drivers(&mut self) {
        self.metrics.drivers = DriverState::ALL.map(|state| self.drivers.count(state) as u64);
    }

    /// The command's `command_issued` event is committed: publish it to the point's driver,
    /// stamped with this core's epoch.
    fn send_command(&mut self, event: &ControlEvent, command_id: &str, value: &serde_json::Value) {
        let point = self.registry.point(event.point);
        let message = ToDriver::Command(crate::wire::CommandEnvelope {
            v: 1,
            command_id: command_id.to_owned(),
            core_epoch: self.epoch,
            point_id: point.id.to_string(),
            value: value.clone(),
            principal: event.principal.to_string(),
        });
        self.metrics.commands_issued += 1;
        self.effects.push_back(Effect::Publish {
            subject: crate::wire::cmd_subject(&point.host, &point.descriptor.assignment.driver_instance),
            payload: message.to_bytes(),
        });
    }

    fn on_tick(&mut self) {
        self.expire_deadlines();
        if self.mode == Mode::Running {
            for o in self
                .self_points
                .take_due(self.now, self.epoch, &self.registry, &self.metrics)
            {
                self.effects.push_back(Effect::PublishObservation {
                    subject: o.subject,
                    msg_id: o.msg_id,
                    payload: o.payload,
                });
            }
            let behind = self.ingest_behind();
            if let Some(step) = self.rollups.poll(self.now, self.epoch, behind) {
                self.effects.push_back(Effect::RefreshRollups(step));
            }
            if let Some(run) = self.retention.poll(self.now, self.epoch, behind) {
                self.effects.push_back(Effect::DropExpired(run));
            }
        }

        if let Some(open) = &self.open
            && self.now >= open.opened_at.add_ms(self.config.flush_interval_ms)
        {
            self.try_flush();
        }
        if self.projection.has_dirty()
            && self.now >= self.last_checkpoint_scan_at.add_ms(CHECKPOINT_SCAN_INTERVAL_MS)
        {
            self.last_checkpoint_scan_at = self.now;
            let states = self.projection.take_due_checkpoint(self.now);
            self.emit_checkpoint(states);
        }
    }

    /// Hands the open batch to the store if the in-flight bound allows.
    fn try_flush(&mut self) {
        if self.in_flight.len() >= self.config.inflight_batches_max {
            return;
        }
        let Some(open) = self.open.take() else { return };
        if open.batch.is_empty() {
            return;
        }
        debug_assert!(open.batch.len() <= self.config.batch_rows_max + 1);
        if self.planted(PlantedBug::AckBeforeCommit) {
            let tags = open.batch.rows.iter().map(|r| r.tag);
            let tags = tags.chain(open.batch.quarantine.iter().map(|q| q.tag)).collect();
            self.effects.push_back(Effect::Ack(tags));
        }
        self.in_flight.insert(open.batch.id, open.pending);
        let mut early_publishes = Vec::new();
        if self.planted(PlantedBug::ProjectSubmittedBatch) {
            for row in &open.batch.rows {
                if let Some(published) = self.projection.apply(row, self.epoch, self.now) {
                    early_publishes.push(Effect::Publish {
                        subject: published.subject,
                        payload: published.payload.into(),
                    });
                }
            }
        }
        if self.planted(PlantedBug::DeriveFromSubmittedBatch) {
            for row in &open.batch.rows {
                for reading in self.derived.on_committed(row) {
                    let (subject, msg_id, payload) = reading.to_observation();
                    early_publishes.push(Effect::PublishObservation {
                        subject,
                        msg_id,
                        payload,
                    });
                }
            }
        }
        self.effects.push_back(Effect::Commit(open.batch));
        self.effects.extend(early_publishes);
        debug_assert!(self.in_flight.len() <= self.config.inflight_batches_max);
    }

    fn checkpoint_quality_changes(&mut self) {
        if self.projection.has_dirty_quality() {
            let states = self.projection.take_quality_checkpoint(self.now);
            self.emit_checkpoint(states);
        }
    }

    fn emit_checkpoint(&mut self, states: Vec<PointState>) {
        if !states.is_empty() {
            self.metrics.checkpoint_points += states.len() as u64;
            self.effects.push_back(Effect::Checkpoint {
                epoch: self.epoch,
                states,
            });
        }
    }

    fn finish_if_drained(&mut self) {
        if self.mode != Mode::Draining || !self.in_flight.is_empty() {
            return;
        }
        if self.open.as_ref().is_some_and(|o| !o.batch.is_empty()) {
            self.try_flush();
            return;
        }
        let states = self.projection.take_all_dirty(self.now);
        self.emit_checkpoint(states);
        self.exit(ExitReason::CLEAN);
    }

    /// A reprocess asked over the bus: started as an effect the runtime runs off the loop, or
    /// refused at once (`reprocess_request.rs`).
    fn on_reprocess_requested(&mut self, ask: crate::reprocess_request::ReprocessAsk, reply_to: String) {
        use crate::reprocess_request::Admission;
        let draining = self.mode != Mode::Running;
        match self
            .reprocess
            .admit(ask, reply_to.clone(), self.epoch, self.registry.version, draining)
        {
            Admission::Start(job) => self.effects.push_back(Effect::Reprocess(job)),
            Admission::Refuse(reply) => self.effects.push_back(Effect::ReprocessReply {
                reply_to,
                payload: reply.to_bytes(),
            }),
        }
    }

    /// The reprocess job answered: its log heads replace projection entries that no newer row
    /// moved (no transition is published), then the asker is answered. A fenced run stops the
    /// core like every fenced write.
    fn on_reprocess_finished(&mut self, finished: crate::reprocess_request::ReprocessFinished) {
        use crate::reprocess_request::{JobOutcome, ReprocessReply};
        let Some(reply_to) = self.reprocess.finish(&finished.request_id) else {
            return;
        };
        let epoch = self.epoch;
        let (reply, fenced) = match finished.outcome {
            JobOutcome::Read { reply } => (reply, false),
            JobOutcome::Done { heads, report } => {
                let mut replaced = 0;
                for head in &heads {
                    if let Some(idx) = self.registry.resolve(&head.state.point_id)
                        && self.projection.replace_if_unmoved(idx, head, self.now)
                    {
                        replaced += 1;
                    }
                }
                let reply = ReprocessReply::Done {
                    epoch,
                    report,
                    points_replaced: replaced,
                    points_kept: heads.len() - replaced,
                };
                (reply, false)
            }
            JobOutcome::Failed { why, fenced } => (ReprocessReply::Failed { epoch, why }, fenced),
        };
        self.effects.push_back(Effect::ReprocessReply {
            reply_to,
            payload: reply.to_bytes(),
        });
        if fenced {
            self.exit(ExitReason::FENCED);
        }
    }

    fn exit(&mut self, reason: ExitReason) {
        // A reprocess in flight is abandoned (the runtime stops its task; whole chunks stay
        // done): its asker hears so now rather than waiting out its timeout.
        if let Some(reply_to) = self.reprocess.abandon() {
            let reply = crate::reprocess_request::ReprocessReply::Failed {
                epoch: self.epoch,
                why: format!("the core stopped ({}) before the reprocess finished", reason.why),
            };
            self.effects.push_back(Effect::ReprocessReply {
                reply_to,
                payload: reply.to_bytes(),
            });
        }
        self.mode = Mode::Exited;
        self.open = None;
        self.effects.push_back(Effect::Exit(reason));
    }
}
