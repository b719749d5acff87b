//! [`Core`]: the sans-IO state machine, a router over its parts (DESIGN.md §1, "The core API"
//! and "Growing the house"). Like quinn-proto's `Connection`: [`Core::handle`] takes time and an
//! [`Input`], effects queue up for [`Core::poll_effect`], and [`Core::next_deadline`] says
//! when to send `Input::Tick`. It never blocks, never reads a clock, never does I/O.
//!
//! Like str0m's `Rtc`, `Core` owns only the clock (kept monotonic), the mode (running,
//! draining, exited), the epoch, the registry and the config, the one effect queue, the exit,
//! the routing of each input to the parts (`crate::parts`, each with its own state and tests),
//! the earliest deadline over the parts, and the sequences that span parts. Parts never call
//! each other: the router hands each what it needs and each writes into the one queue, in
//! the order the router calls them, so effects come out in the order they always have.
//!
//! The ordering rules (ingest spec, "Three ordering rules"), as checks across parts:
//! - only ingest emits `Ack`: for a batch once its commit report is applied, or at once for a
//!   duplicate of a key already committed (rule 1);
//! - the projection, the drivers, the watchdog and the derived points see only the rows of a
//!   RETURNING set, which ingest hands the router batch by batch, in batch order, and the
//!   router hands them row by row (rules 2 and 3: project and publish only what inserted);
//! - the rules part decides only on those rows, after the projection applied each, and only
//!   on current ones, on committed `quality_changed` events and on its own wakes, never while
//!   staleness is suppressed; its claim changes go to the claims part through the router;
//! - the watchdog's `quality_changed` and a command's `command_issued` act only once their
//!   control write commits: the projection follows the watchdog only through
//!   `ControlCommitted`, and commands publish only from it; a claim's `command_issued` is
//!   written with the claim's event and its `point_desired` row (`Effect::Arbitrate`).

use std::sync::Arc;

use crate::arbitration::{Claim, Desired, DesiredRow};
use crate::config::Config;
use crate::control::{
    CONTROL_EVENTS_PER_WRITE_MAX, ControlDetail, ControlEvent, ControlReport, IssuedCommand, OpenVerification,
};
use crate::delivery::Delivery;
use crate::derived::{WindowRequest, WindowRow};
use crate::effect::{Deadline, Effect, EpochRaise, ExitReason, Input};
use crate::log::{Batch, CommitReport, Quality};
use crate::metrics::Metrics;
use crate::parts::assignments::{AssignmentView, Assignments};
use crate::parts::claims::{Asker, Claims};
use crate::parts::commands::{Admitted, Commands};
use crate::parts::context::{Ctx, Out};
use crate::parts::derived::DerivedPoints;
use crate::parts::drivers::{Announcement, DriverState, Drivers};
use crate::parts::health::{Health, InstanceFacts};
use crate::parts::ingest::{Applied, Ingest};
use crate::parts::maintenance::Maintenance;
use crate::parts::projection::Projector;
use crate::parts::rules::{RuleRequest, Rules};
use crate::parts::self_points::{SELF_HOST, SelfPoints};
use crate::parts::verification::{Convergence, RestoredVerification, Verification};
use crate::parts::watchdog::Watchdog;
use crate::planted::PlantedBug;
use crate::registry::Registry;
use crate::reprocess_request::{JobOutcome, ReprocessFinished, ReprocessReply};
use crate::state::{PointState, RestoredState};
use crate::time::Micros;

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Mode {
    Running,
    /// Shutdown requested: no new deliveries; finish in-flight batches, checkpoint, exit.
    Draining,
    Exited,
}

#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    #[error("invalid core configuration: {0}")]
    Config(String),
}

pub struct Core {
    /// The clock, the epoch, the registry, the config and the planted bug: what parts read.
    ctx: Ctx,
    mode: Mode,
    /// The one effect queue, and the counters.
    out: Out,
    ingest: Ingest,
    projection: Projector,
    watchdog: Watchdog,
    commands: Commands,
    claims: Claims,
    verification: Verification,
    drivers: Drivers,
    assignments: Assignments,
    derived: DerivedPoints,
    rules: Rules,
    maintenance: Maintenance,
    self_points: SelfPoints,
    health: Health,
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
        let ctx = Ctx {
            now,
            epoch,
            core_start: None,
            registry,
            config,
            planted: None,
        };
        let registry = &ctx.registry;
        let config = &ctx.config;
        let projection = Projector::restore(&ctx, restored);
        let mut core = Core {
            ingest: Ingest::new(config),
            rules: Rules::new(registry, projection.view(), now),
            projection,
            watchdog: Watchdog::new(registry.len(), now.add_ms(config.startup_grace_ms)),
            commands: Commands::default(),
            claims: Claims::new(registry),
            verification: Verification::new(registry, now),
            drivers: Drivers::new(registry, SELF_HOST, epoch, now),
            assignments: Assignments::new(registry, SELF_HOST),
            derived: DerivedPoints::new(registry),
            maintenance: Maintenance::new(config, now),
            self_points: SelfPoints::new(config.self_points_interval_ms, registry, now),
            // Health points are self-points: turning self-points off turns them off too.
            health: Health::new(
                if config.self_points_interval_ms == 0 {
                    0
                } else {
                    config.health_points_interval_ms
                },
                registry,
                now,
            ),
            mode: Mode::Running,
            out: Out::default(),
            ctx,
        };
        core.drivers.gauge(&mut core.out.metrics);
        core.projection
            .checkpoint_quality_changes(&core.ctx, &mut core.out);
        Ok(core)
    }

    /// Restart step 4: control events above each point's watermark. Point qualities stay
    /// `restored` (step 2 is deliberately pessimistic); each applied event advances its point's
    /// `watermark_seq`, so the next checkpoint records how far the log was applied. Events for
    /// points this registry does not know are skipped. Returns how many were applied.
    pub fn replay_control_events<'a>(&mut self, events: impl IntoIterator<Item = (&'a str, i64)>) -> usize {
        self.projection.replay_control_events(&self.ctx.registry, events)
    }

    /// The lowest control-event watermark over all points (0 when any point has none): restart
    /// step 4 reads the control log from there.
    pub fn control_watermark(&self) -> i64 {
        self.projection.control_watermark()
    }

    /// Restart step 5, the question: which rows of which class tables rebuild the derived
    /// points' windows, each input bounded by its newest committed row (from the restored log
    /// heads) minus the longest window reading it. Empty when nothing is derived.
    pub fn derived_window_requests(&self) -> Vec<WindowRequest> {
        self.derived
            .window_requests(&self.ctx.registry, self.projection.view())
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
        requests: &[WindowRequest],
        rows: Vec<WindowRow>,
        rows_max_per_point: usize,
        stream: (Option<u64>, u64),
    ) -> (usize, usize) {
        let registry = &self.ctx.registry;
        self.derived.rehydrate(
            registry,
            requests,
            rows,
            rows_max_per_point,
            stream,
            &mut self.out,
        )
    }

    /// Restart step 6: the freshness deadlines, one per point that has an observation, from
    /// the restored projection. Returns how many were armed. Expiries wait for the startup
    /// grace to pass.
    pub fn rehydrate_timers(&mut self) -> usize {
        for (idx, _) in self.ctx.registry.points() {
            if let Some(deadline) = self.projection.freshness_deadline(idx) {
                self.watchdog.arm(idx, deadline);
            }
        }
        self.watchdog.armed()
    }

    /// This core's start identity (issue 25 item 3): a random number the runtime took when the
    /// process started (`Clock::start_token`; the core reads no RNG), at most
    /// [`crate::wire::CORE_START_MAX`] and never 0. It rides on every announcement and command
    /// so a driver can tell two starts at one epoch apart (an epoch repeated after a database
    /// failover that lost its increment), and a hello at this epoch that echoes another start's
    /// identity is treated as ahead (`parts/drivers.rs`). Set it before
    /// [`Self::start_drivers`]; a core never given one sends none and compares none.
    pub fn set_core_start(&mut self, core_start: u64) {
        debug_assert!(
            (1..=crate::wire::CORE_START_MAX).contains(&core_start),
            "a start identity is within JSON's exact integers and not 0"
        );
        self.ctx.core_start = Some(core_start);
        self.drivers.set_core_start(core_start);
    }

    pub fn core_start(&self) -> Option<u64> {
        self.ctx.core_start
    }

    /// Restart step 7: this core's epoch announcement for every driver instance the registry
    /// assigns points to, for the runtime to publish. Every instance is `connecting` until it
    /// answers with a hello at this epoch (see [`crate::drivers`]).
    pub fn start_drivers(&self) -> Vec<Announcement> {
        self.drivers.announcements()
    }

    /// Restart step 7, after the announcements: the valve's assignments (issue 21 item 7).
    /// Each driver instance with a declared poll interval gets an `assignment` event, queued
    /// (written once the loop runs) and published to the instance once committed.
    pub fn start_assignments(&mut self) {
        if self.mode != Mode::Running {
            return;
        }
        self.assignments.start(&self.ctx, &mut self.out);
    }

    /// Each driver instance's assignment as this core sees it: its points and poll intervals,
    /// the seq recorded and the seq acknowledged.
    pub fn assignments(&self) -> &[AssignmentView] {
        self.assignments.views()
    }

    /// Restart: the `point_desired` rows as last written, so a claim for the value a point
    /// already has issues no command. Returns how many writable points were restored.
    pub fn restore_desired(&mut self, rows: impl IntoIterator<Item = DesiredRow>) -> usize {
        let restored = self.claims.restore(&self.ctx.registry, rows);
        // The rules' own claims among them stay as they are until each rule leaves warmup.
        let claims = &self.claims;
        let held = self
            .ctx
            .registry
            .points()
            .flat_map(|(idx, _)| claims.claims(idx).map(move |c| (idx, c)));
        self.rules.restore(held);
        restored
    }

    /// Restart step 8, the question: the rules' inputs' committed rows over each input's
    /// readers' longest `for_s` plus one freshness before now, as the derived points ask
    /// ([`Self::derived_window_requests`]). Empty when there are no rules.
    pub fn rule_window_requests(&self) -> Vec<WindowRequest> {
        self.rules.window_requests(&self.ctx.registry, self.ctx.now)
    }

    /// Restart step 8, the answer: the rows read for [`Self::rule_window_requests`], replayed
    /// in log order through the rules (issue 22 item 5): a condition that began before the
    /// restart keeps its start instant from the log, a gap in the log starts it again, and
    /// nothing fires (a `for_s` due fires only after warmup, on current data). Returns how
    /// many rows were replayed.
    pub fn rehydrate_rules(&mut self, rows: Vec<WindowRow>) -> usize {
        self.rules.replay(&self.ctx.registry, rows)
    }

    /// When a rule's pending condition comes due (its start instant plus `for_s`), if it is
    /// pending: the start instant may come from the log (restart step 8).
    pub fn rule_due(&self, rule_id: &str) -> Option<Micros> {
        self.rules.due(rule_id)
    }

    /// How many rules this core runs.
    pub fn rules_count(&self) -> usize {
        self.rules.len()
    }

    /// A rule's state, as its state self-point reports it.
    pub fn rule_state(&self, rule_id: &str) -> Option<crate::registry::health::RuleStateCode> {
        self.rules.state(rule_id)
    }

    /// Restart, the outbox (issue 21 item 3): each point's newest `command_issued` with no
    /// answer (`Store::load_unanswered_commands`), read after [`Self::restore_desired`]. A
    /// command whose value is still its point's desired value is issued again with the same
    /// id: a `command_issued` event under this core's epoch (fenced like every control write),
    /// and, once that commits, the command itself, stamped with this epoch — so a command a
    /// driver applies is always one committed under the epoch it carries. A core that died
    /// between the commit and the publish thereby has its command published. Any other (the
    /// point left the registry, or its desired value moved on) is not. Returns how many were
    /// issued again.
    pub fn resend_unanswered(&mut self, commands: impl IntoIterator<Item = IssuedCommand>) -> usize {
        if self.mode != Mode::Running {
            return 0;
        }
        let (ctx, out) = (&self.ctx, &mut self.out);
        let mut events = Vec::new();
        for command in commands {
            let Some(point) = ctx.registry.resolve(&command.point_id) else {
                continue;
            };
            if !still_desired(&self.claims, point, &command.value) {
                continue;
            }
            events.push(ControlEvent {
                occurred_at: ctx.now,
                point: Some(point),
                point_id: ctx.registry.point(point).id.clone(),
                principal: command.principal.as_str().into(),
                core_epoch: ctx.epoch,
                registry_version: ctx.registry.version,
                detail: ControlDetail::CommandIssued {
                    command_id: command.command_id,
                    value: command.value,
                    first_issued_at: Some(command.first_issued_at),
                },
            });
        }
        let resent = events.len();
        out.metrics.commands_resent += resent as u64;
        out.metrics.control_events += resent as u64;
        let mut events = events.into_iter().peekable();
        while events.peek().is_some() {
            out.push(Effect::Control {
                epoch: ctx.epoch,
                events: events.by_ref().take(CONTROL_EVENTS_PER_WRITE_MAX).collect(),
            });
        }
        resent
    }

    /// Restart step 4, the open verifications (issue 21 items 5 and 6): each point's newest
    /// `command_issued` answered `applied` with no verdict after it
    /// (`Store::load_open_verifications`), its deadline `applied_at + verify_s` again. Returns
    /// how many were restored.
    pub fn restore_verifications(&mut self, opens: impl IntoIterator<Item = OpenVerification>) -> usize {
        self.verification.restore(opens, &self.ctx.registry)
    }

    /// Restart step 6, the command plane's durable timers: claims whose `until` passed while
    /// the core was down are released as expired now (queued, written once the loop runs), and
    /// every restored verification is returned with its window, for the runtime to read its
    /// committed rows and hand them to [`Self::resolve_restored_verification`]. Returns
    /// (claims still open with an expiry armed, the restored verifications' windows).
    pub fn rehydrate_command_timers(&mut self) -> (usize, Vec<RestoredVerification>) {
        if self.mode != Mode::Running {
            return (0, Vec::new());
        }
        self.claims.expire(&self.ctx, &mut self.out);
        let armed = self.claims.expiries_armed();
        (
            armed,
            self.verification
                .restored_windows(&self.ctx.registry, self.ctx.now),
        )
    }

    /// Restart step 6, one restored verification judged on the log's evidence: the point's
    /// committed rows observed in its window, `(observed_at, quality, value)`. Verified on a
    /// row that shows the value; diverged when it came due with none; else it runs on.
    pub fn resolve_restored_verification(
        &mut self,
        point_id: &str,
        rows: impl IntoIterator<Item = (Micros, Quality, Option<crate::log::CanonicalValue>)>,
    ) {
        self.verification
            .resolve_restored(point_id, rows, &self.ctx, &mut self.out);
    }

    /// A writable point's convergence, as its self-point reports it.
    pub fn convergence(&self, point_id: &str) -> Option<Convergence> {
        self.verification.state(self.ctx.registry.resolve(point_id)?)
    }

    /// How many applied commands await their verification.
    pub fn verifications_open(&self) -> usize {
        self.verification.open_count()
    }

    /// A writable point's desired value, as the resolver last chose it.
    pub fn desired(&self, point_id: &str) -> Option<&Desired> {
        self.claims.desired(self.ctx.registry.resolve(point_id)?)
    }

    /// A writable point's claims, in holder order.
    pub fn claims(&self, point_id: &str) -> Vec<&Claim> {
        self.ctx
            .registry
            .resolve(point_id)
            .map(|idx| self.claims.claims(idx).collect())
            .unwrap_or_default()
    }

    /// Sets a claim of any band on a writable point at `now`: a test-only path (an automation
    /// claim beside an operator's); rules claim through the rules part. `Err` with the
    /// reason for a point that is not writable or cannot take another holder.
    pub fn set_claim(
        &mut self,
        now: Micros,
        point_id: &str,
        claim: Claim,
        command_id: &str,
    ) -> Result<(), String> {
        debug_assert!(
            now >= self.ctx.now,
            "time passed to the core must not go backwards"
        );
        self.ctx.now = self.ctx.now.max(now);
        if self.mode != Mode::Running {
            return Err("the core is stopping".to_owned());
        }
        let point = self.ctx.registry.resolve(point_id).ok_or_else(|| {
            format!(
                "point {point_id:?} is not in registry version {}",
                self.ctx.registry.version
            )
        })?;
        let asker = Asker {
            principal: claim.holder.clone(),
            command_id: command_id.to_owned(),
            provenance: None,
        };
        self.claims.set(point, claim, asker, &self.ctx, &mut self.out)
    }

    /// Whether `host`'s `driver_instance` said hello with a contract that cannot answer
    /// commands (its commands await no answer, so they are never re-sent).
    pub fn driver_is_mute(&self, host: &str, driver_instance: &str) -> bool {
        self.commands.is_mute(host, driver_instance)
    }

    /// How many commands this core sent and awaits an answer to.
    pub fn commands_awaiting(&self) -> usize {
        self.commands.awaiting()
    }

    /// The driver instances as this core sees them.
    pub fn drivers(&self) -> &Drivers {
        &self.drivers
    }

    /// Whether the watchdog is currently holding staleness back (startup grace or high lag).
    pub fn staleness_suppressed(&self) -> bool {
        self.watchdog.suppressed(self.ctx.now)
    }

    /// Plants a known bug (simulator tests only; see [`PlantedBug`]).
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&mut self, bug: PlantedBug) {
        self.ctx.planted = Some(bug);
    }

    /// Whether `bug` is planted (the runtime reads its own planted bug here).
    #[cfg(feature = "planted-bugs")]
    pub fn is_planted(&self, bug: PlantedBug) -> bool {
        self.ctx.planted(bug)
    }

    /// The routing table: each input goes to the part that owns it, or to a sequence across
    /// parts below. Time only moves forward; after the exit nothing is taken.
    pub fn handle(&mut self, now: Micros, input: Input) {
        debug_assert!(
            now >= self.ctx.now,
            "time passed to the core must not go backwards"
        );
        self.ctx.now = self.ctx.now.max(now);
        if self.mode == Mode::Exited {
            return;
        }
        let (ctx, out) = (&self.ctx, &mut self.out);
        match input {
            Input::Delivered(deliveries) => self.on_delivered(deliveries),
            Input::Committed(report) => self.on_committed(report),
            Input::CommitFailed { batch, fenced } => {
                self.ingest.commit_failed(batch);
                self.exit(ExitReason::write_failed(fenced));
            }
            Input::CheckpointFailed { fenced } | Input::ControlFailed { fenced } => {
                self.exit(ExitReason::write_failed(fenced))
            }
            Input::ControlCommitted(report) => self.on_control_committed(report),
            Input::CommandRequested(request) => {
                let running = self.mode == Mode::Running;
                if let Some(admitted) = self.commands.on_request(request, running, ctx, out) {
                    self.on_admitted(admitted);
                }
            }
            Input::Lag {
                pending,
                ack_pending,
                oldest_unacked_age_ms,
            } => {
                let high = self
                    .maintenance
                    .on_lag(pending, ack_pending, oldest_unacked_age_ms, ctx, out);
                self.watchdog.set_lag_high(high);
                self.on_tick();
            }
            Input::StreamFront { first_seq } => self.derived.release_held(first_seq, out),
            Input::DriverHello { host, hello } => {
                // A hello ahead of this core's epoch re-sends nothing: the core stops
                // commanding until the epoch is raised (issue 25 item 3).
                if !self.drivers.hello(&host, &hello, ctx.now, out) {
                    let claims = &self.claims;
                    let wins = |point, value: &serde_json::Value| still_desired(claims, point, value);
                    self.commands.on_hello(&host, &hello, wins, ctx, out);
                    self.assignments.hello(&host, &hello, ctx, out);
                }
            }
            Input::EpochRaised(raise) => self.exit(match raise {
                EpochRaise::Raised { .. } => ExitReason::EPOCH_RAISED,
                EpochRaise::Fenced => ExitReason::FENCED,
                EpochRaise::Failed => ExitReason::COMMIT_FAILED,
            }),
            Input::CommandAnswered { epoch, seq, reply } => {
                self.commands.on_answer(epoch, seq, &reply, ctx, out)
            }
            Input::AssignmentAcked { epoch, seq, ack } => {
                self.assignments.acked(epoch, seq, &ack, ctx);
            }
            Input::RegistryLoaded(registry) => self.on_registry_loaded(registry),
            Input::EpochRecorded { epoch } => {
                if self.commands.on_epoch_recorded(epoch, ctx, out) {
                    self.exit(ExitReason::FENCED);
                }
            }
            Input::RollupStepped(outcome) => {
                self.maintenance.on_rollup_stepped(ctx.now, outcome);
                self.on_tick();
            }
            Input::RetentionRan(outcome) => {
                self.maintenance.on_retention_ran(ctx.now, outcome);
                self.on_tick();
            }
            Input::DayCompacted(outcome) => {
                self.maintenance.on_day_compacted(outcome, ctx, out);
                self.on_tick();
            }
            Input::PartitionsEnsured(outcome) => {
                self.maintenance.on_partitions_ensured(outcome, ctx, out);
                self.on_tick();
            }
            Input::RollupStepFenced | Input::RetentionFenced | Input::CompactionFenced => {
                self.exit(ExitReason::FENCED)
            }
            Input::ReprocessRequested { ask, reply_to } => {
                let running = self.mode == Mode::Running;
                self.maintenance
                    .on_reprocess_requested(ask, reply_to, running, ctx, out);
            }
            Input::ReprocessFinished(finished) => self.on_reprocess_finished(finished),
            Input::Tick => self.on_tick(),
            Input::Shutdown => {
                self.mode = Mode::Draining;
                self.flush();
                self.finish_if_drained();
            }
        }
    }

    /// The next effect. Once the drivers part asked the store to raise the epoch (issue 25
    /// item 3), nothing goes to the drivers any more: commands and announcements on
    /// `cmd.<host>.<instance>` are withheld and counted (`commands_withheld`); the commands
    /// stay unanswered in the control log and the next core's outbox sends them.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        loop {
            let effect = self.out.pop()?;
            if self.drivers.epoch_raise().is_some() && to_drivers(&effect) {
                self.out.metrics.commands_withheld += 1;
                continue;
            }
            return Some(effect);
        }
    }

    /// When the caller should next send `Input::Tick`, if anything is waiting on time.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.next_deadline_reason().map(|(at, _)| at)
    }

    /// [`Self::next_deadline`], with the part that asked for it (the first in routing order
    /// when two ask for the same instant).
    pub fn next_deadline_reason(&self) -> Option<(Micros, Deadline)> {
        if self.mode == Mode::Exited {
            return None;
        }
        let mut earliest: Option<(Micros, Deadline)> = None;
        let mut consider = |at: Option<Micros>, part: Deadline| {
            if let Some(at) = at
                && earliest.is_none_or(|(e, _)| at < e)
            {
                earliest = Some((at, part));
            }
        };
        let config = &self.ctx.config;
        consider(self.ingest.flush_deadline(config), Deadline::Ingest);
        consider(self.projection.checkpoint_deadline(), Deadline::Projection);
        if self.mode == Mode::Running {
            consider(self.watchdog.next_deadline(&self.ctx), Deadline::Watchdog);
            consider(self.self_points.next_deadline(), Deadline::SelfPoints);
            consider(self.health.next_deadline(), Deadline::SelfPoints);
            let pipeline_full = self.ingest.pipeline_full(config);
            consider(
                self.maintenance.next_deadline(pipeline_full),
                Deadline::Maintenance,
            );
            consider(self.claims.next_deadline(), Deadline::Claims);
            consider(self.commands.next_deadline(), Deadline::Commands);
            consider(self.drivers.next_deadline(), Deadline::Drivers);
            consider(self.verification.next_deadline(), Deadline::Verification);
            consider(self.rules.next_deadline(), Deadline::Rules);
        }
        earliest
    }

    /// How many deliveries the core can take now without exceeding its in-flight bound. The
    /// runtime fetches no more than this.
    pub fn accept_budget(&self) -> usize {
        if self.mode != Mode::Running {
            return 0;
        }
        self.ingest.accept_budget(&self.ctx.config)
    }

    pub fn metrics(&self) -> &Metrics {
        &self.out.metrics
    }

    /// The latest time the core was handed.
    pub fn now(&self) -> Micros {
        self.ctx.now
    }

    pub fn epoch(&self) -> u32 {
        self.ctx.epoch
    }

    pub fn config(&self) -> &Config {
        &self.ctx.config
    }

    pub fn registry(&self) -> &Arc<Registry> {
        &self.ctx.registry
    }

    pub fn in_flight_batches(&self) -> usize {
        self.ingest.in_flight()
    }

    pub fn has_exited(&self) -> bool {
        self.mode == Mode::Exited
    }

    /// The projection's current state of a point.
    pub fn point_state(&self, point_id: &str) -> Option<&PointState> {
        self.ctx
            .registry
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

    /// Deliveries go to ingest, which stops at each full batch for the router to flush.
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
        let mut deliveries = deliveries.into_iter();
        while self.ingest.fill(
            &self.ctx,
            self.projection.view(),
            &mut deliveries,
            &mut ack_now,
            &mut self.out.metrics,
        ) {
            self.flush();
        }
        self.ingest.ack_now(ack_now, &mut self.out);
    }

    /// A commit report: each batch it lets apply, in batch order (see [`Self::apply_committed`]);
    /// then the quality checkpoint, the next flush, and the end of a drain.
    fn on_committed(&mut self, report: CommitReport) {
        if !self.ingest.report(report, self.ctx.now, &mut self.out.metrics) {
            return;
        }
        while let Some(applied) = self.ingest.next_applied(&self.ctx, &mut self.out) {
            self.apply_committed(&applied);
        }
        self.projection
            .checkpoint_quality_changes(&self.ctx, &mut self.out);
        self.flush();
        self.finish_if_drained();
    }

    /// The cross-part sequence for one committed batch, whose `Ack` ingest has emitted: each
    /// RETURNING row in turn goes through the projection (and its `Publish`), the drivers and
    /// the watchdog's re-armed deadline, the verification and the rules (which record it),
    /// before the next row; then the rules decide once, on what the whole batch left in the
    /// projection (their claim changes handed to the claims part), and the derived points fold
    /// the batch's rows and publish their readings.
    fn apply_committed(&mut self, applied: &Applied) {
        let (ctx, out) = (&self.ctx, &mut self.out);
        for &ordinal in &applied.inserted {
            let Some(row) = applied.batch.rows.get(ordinal as usize) else {
                continue;
            };
            self.projection.apply_row(row, ctx, out);
            self.drivers.row_committed(row, ctx.now, out);
            let deadline = self.projection.freshness_deadline(row.point);
            self.watchdog.rearm(row.point, deadline);
            self.verification.on_row(row, ctx, out);
            // A stopping core claims nothing new: its rules are frozen as if suppressed.
            let suppressed = self.watchdog.suppressed(ctx.now) || self.mode != Mode::Running;
            let requests = self
                .rules
                .on_row(row, suppressed, self.projection.view(), ctx, out);
            hand_to_claims(requests, &mut self.claims, &mut self.rules, ctx, out);
        }
        // Rules decide once per batch, on what the whole batch left in the projection.
        let requests = self.rules.on_batch_end(self.projection.view(), ctx, out);
        hand_to_claims(requests, &mut self.claims, &mut self.rules, ctx, out);
        self.derived
            .on_committed(&applied.batch, &applied.inserted, ctx, out);
    }

    /// An admitted request goes to the claims part: an operator claim (band `operator`,
    /// priority 0, for the request's duration) or a release. What the claims part cannot carry
    /// out is refused on the record.
    fn on_admitted(&mut self, admitted: Admitted) {
        let (ctx, out) = (&self.ctx, &mut self.out);
        match admitted {
            Admitted::Claim {
                band,
                point,
                value,
                principal,
                command_id,
                for_s,
            } => {
                let claim = Claim {
                    holder: principal.clone(),
                    band,
                    priority: 0,
                    value,
                    since: ctx.now,
                    until: Some(
                        ctx.now
                            .add_ms(i64::try_from(for_s).unwrap_or(i64::MAX).saturating_mul(1_000)),
                    ),
                };
                let asker = Asker {
                    principal: principal.clone(),
                    command_id: command_id.clone(),
                    provenance: None,
                };
                if let Err(reason) = self.claims.set(point, claim, asker, ctx, out) {
                    self.commands
                        .refuse(point, principal, command_id, reason, ctx, out);
                } else if self.ctx.planted(PlantedBug::PublishBeforeCommit) {
                    self.planted_publish_before_commit();
                }
            }
            Admitted::Release {
                point,
                principal,
                command_id,
            } => {
                let asker = Asker {
                    principal: principal.clone(),
                    command_id: command_id.clone(),
                    provenance: None,
                };
                if let Err(reason) = self.claims.release(point, &principal, asker, ctx, out) {
                    self.commands
                        .refuse(point, principal, command_id, reason, ctx, out);
                }
            }
        }
    }

    /// Planted bug only (the outbox's order broken): the command of the arbitration write just
    /// queued goes out now, before that write commits.
    fn planted_publish_before_commit(&mut self) {
        let Some(Effect::Arbitrate { events, .. }) = self.out.last() else {
            return;
        };
        let events = events.clone();
        for event in &events {
            if let ControlDetail::CommandIssued {
                command_id, value, ..
            } = &event.detail
            {
                self.commands
                    .planted_send_early(event, command_id, value, &self.ctx, &mut self.out);
            }
        }
    }

    /// The open batch to the store, if the in-flight bound allows.
    fn flush(&mut self) {
        let Some(batch) = self.ingest.flush(&self.ctx, &mut self.out) else {
            return;
        };
        let early = self.planted_publishes_at_submit(&batch);
        self.out.push(Effect::Commit(batch));
        self.out.extend(early);
    }

    /// Planted bugs only (rules 2 and 3 broken): the submitted batch projected and derived as it
    /// goes to the store, published right after its `Commit`. Empty otherwise.
    fn planted_publishes_at_submit(&mut self, batch: &Batch) -> Vec<Effect> {
        let mut early = Vec::new();
        if self.ctx.planted(PlantedBug::ProjectSubmittedBatch) {
            self.projection
                .planted_apply_submitted(batch, &self.ctx, &mut early);
        }
        if self.ctx.planted(PlantedBug::DeriveFromSubmittedBatch) {
            self.derived.planted_derive_submitted(batch, &mut early);
        }
        early
    }

    /// A control write committed, split by event kind: a `quality_changed` goes to the watchdog
    /// (no longer pending; was it re-armed meanwhile?) and then the projection; a
    /// `command_issued` to commands.
    fn on_control_committed(&mut self, report: ControlReport) {
        debug_assert_eq!(
            report.events.len(),
            report.seqs.len(),
            "one seq per control event"
        );
        let (ctx, out) = (&self.ctx, &mut self.out);
        for (event, &seq) in report.events.iter().zip(&report.seqs) {
            self.commands.answer(event, seq, out);
            match &event.detail {
                ControlDetail::QualityChanged { from, to, reason, .. } => {
                    // The watchdog writes these only for points it watches.
                    let Some(point) = event.point else {
                        continue;
                    };
                    let rearmed = self.watchdog.answered(point, ctx.now);
                    self.projection
                        .apply_quality_event(point, event, *from, *to, *reason, seq, rearmed, ctx, out);
                    let suppressed = self.watchdog.suppressed(ctx.now) || self.mode != Mode::Running;
                    let requests = self
                        .rules
                        .on_quality(point, suppressed, self.projection.view(), ctx, out);
                    hand_to_claims(requests, &mut self.claims, &mut self.rules, ctx, out);
                }
                ControlDetail::CommandIssued {
                    command_id,
                    value,
                    first_issued_at,
                } => {
                    if let Some(point) = event.point {
                        let issued_at = first_issued_at.unwrap_or(event.occurred_at);
                        self.verification.on_issued(point, command_id, value, issued_at);
                    }
                    self.commands.on_issued(event, seq, command_id, value, ctx, out)
                }
                ControlDetail::CommandResult {
                    command_id, outcome, ..
                } => {
                    if let Some(point) = event.point {
                        let current = self.projection.state(point);
                        self.verification
                            .on_result(point, command_id, *outcome, seq, current, ctx, out);
                    }
                }
                // On the record; nothing was sent and nothing follows. A claim's change took
                // effect in the claims part when it was emitted.
                ControlDetail::CommandTimeout {
                    command_id,
                    issued_seq,
                    resend,
                    ..
                } => self
                    .commands
                    .on_timeout_committed(*issued_seq, command_id, *resend, ctx, out),
                ControlDetail::CommandRefused { .. }
                | ControlDetail::CommandVerified { .. }
                | ControlDetail::CommandDiverged { .. }
                | ControlDetail::ClaimSet { .. }
                | ControlDetail::ClaimReleased { .. }
                | ControlDetail::Rule { .. }
                | ControlDetail::Availability { .. } => {}
                ControlDetail::Assignment { .. } => self.assignments.committed(event, seq, ctx, out),
            }
        }
        self.projection.checkpoint_quality_changes(ctx, out);
    }

    /// A registry version loaded while this core runs (issue 21 item 7): applied live when
    /// only poll intervals and assignments between known instances changed
    /// (`registry/reload.rs`): the registry is swapped (the point set is the same, so every
    /// part's `PointIdx` still means the same point), the drivers part re-reads which
    /// instance each point is on, and the assignments part records and pushes what changed.
    /// Anything else: `Effect::RestartNeeded` with the reasons, and nothing applied.
    fn on_registry_loaded(&mut self, loaded: Arc<Registry>) {
        use crate::registry::reload::{Reload, compare};
        if self.mode != Mode::Running {
            return;
        }
        match compare(&self.ctx.registry, &loaded) {
            Reload::NotNewer => {}
            Reload::RestartNeeded { reasons, omitted } => self.out.push(Effect::RestartNeeded {
                version: loaded.version,
                reasons,
                omitted,
            }),
            Reload::Live(changes) => {
                debug_assert_eq!(loaded.len(), self.ctx.registry.len());
                debug_assert!(
                    loaded
                        .points()
                        .zip(self.ctx.registry.points())
                        .all(|((_, a), (_, b))| a.id == b.id),
                    "a live reload keeps every PointIdx"
                );
                self.ctx.registry = loaded;
                self.drivers.reassign(&self.ctx.registry);
                self.assignments.reload(&changes, &self.ctx, &mut self.out);
            }
        }
    }

    /// Time passed: for a running core, the watchdog's expiries, the self-points, and the
    /// maintenance due; then a due flush and the checkpoint scan.
    fn on_tick(&mut self) {
        if self.mode == Mode::Running {
            let (ctx, out) = (&self.ctx, &mut self.out);
            self.watchdog.expire(self.projection.view(), ctx, out);
            self.self_points.on_tick(ctx, out);
            let instances = self.drivers.views().iter().map(|v| InstanceFacts {
                host: &v.host,
                connected: matches!(v.state, DriverState::Connected | DriverState::Ready),
                last_hello_at: v.last_hello_at,
                publish_failures: v.publish_failures,
                queue_depth: v.queue_depth,
                queue_drops: v.queue_drops,
            });
            // The writable points' convergence points are generated health points too, due with
            // the others.
            let health_due = self.health.next_deadline().is_some_and(|at| ctx.now >= at);
            let mut health = self.health.take_due(ctx.now, instances, self.projection.view());
            if health_due {
                health.extend(self.verification.readings(&ctx.registry));
                health.extend(self.rules.readings(&ctx.registry));
            }
            self.self_points.publish_health(health, ctx, out);
            let pipeline_full = self.ingest.pipeline_full(&ctx.config);
            self.maintenance.on_tick(pipeline_full, ctx, out);
            self.claims.expire(ctx, out);
            // Frozen exactly while the watchdog holds staleness back.
            let suppressed = self.watchdog.suppressed(ctx.now);
            let requests = self.rules.on_tick(suppressed, self.projection.view(), ctx, out);
            hand_to_claims(requests, &mut self.claims, &mut self.rules, ctx, out);
            self.rules.gauge(&mut out.metrics);
            // Paused exactly while the watchdog holds staleness back.
            self.verification
                .set_suppressed(self.watchdog.suppressed(ctx.now), ctx.now);
            self.verification.expire(ctx, out);
            let claims = &self.claims;
            let wins = |point, value: &serde_json::Value| still_desired(claims, point, value);
            self.commands.expire(wins, ctx, out);
            let suppressed = self.watchdog.suppressed(ctx.now);
            self.drivers.on_tick(suppressed, ctx, out);
        }
        if self.ingest.flush_due(&self.ctx) {
            self.flush();
        }
        self.projection.on_tick(&self.ctx, &mut self.out);
    }

    /// A draining core with nothing at the store flushes what is open, or, with nothing open,
    /// checkpoints everything dirty and exits 0.
    fn finish_if_drained(&mut self) {
        if self.mode != Mode::Draining || !self.ingest.drained() {
            return;
        }
        if self.ingest.has_open_rows() {
            self.flush();
            return;
        }
        self.projection.checkpoint_all(&self.ctx, &mut self.out);
        self.exit(ExitReason::CLEAN);
    }

    /// The reprocess job answered: its log heads replace projection entries that no newer row
    /// moved (no transition is published), then the asker is answered. A fenced run stops the
    /// core like every fenced write.
    fn on_reprocess_finished(&mut self, finished: ReprocessFinished) {
        let Some(reply_to) = self.maintenance.finish_reprocess(&finished.request_id) else {
            return;
        };
        let epoch = self.ctx.epoch;
        let (reply, fenced) = match finished.outcome {
            JobOutcome::Read { reply } => (reply, false),
            JobOutcome::Done { heads, report } => {
                let replaced = self
                    .projection
                    .replace_unmoved(&self.ctx.registry, &heads, self.ctx.now);
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
        self.maintenance.reply(reply_to, &reply, &mut self.out);
        if fenced {
            self.exit(ExitReason::FENCED);
        }
    }

    /// The core stops: a reprocess in flight is answered, the open batch dropped (its
    /// deliveries are redelivered to the next incarnation), and `Exit` is the last effect.
    fn exit(&mut self, reason: ExitReason) {
        self.maintenance
            .abandon_reprocess(reason.why, &self.ctx, &mut self.out);
        self.mode = Mode::Exited;
        self.ingest.abandon();
        self.out.push(Effect::Exit(reason));
    }
}

/// The rules' claim changes, handed to the claims part in order; each answer goes back to the
/// rules part (a refusal is on the record there, never a panic).
fn hand_to_claims(
    requests: Vec<RuleRequest>,
    claims: &mut Claims,
    rules: &mut Rules,
    ctx: &Ctx,
    out: &mut Out,
) {
    for request in requests {
        debug_assert!(
            request.holder.starts_with("rule:"),
            "a rule claims as rule:<id>, never as an operator"
        );
        debug_assert!(
            request
                .claim
                .as_ref()
                .is_none_or(|c| c.band != crate::arbitration::Band::Operator),
            "a rule never claims in the operator band"
        );
        let asker = Asker {
            principal: request.holder.clone(),
            command_id: request.command_id.clone(),
            provenance: request.provenance.clone(),
        };
        let answer = match &request.claim {
            Some(claim) => claims.set(request.point, claim.clone(), asker, ctx, out),
            None => claims.release(request.point, &request.holder, asker, ctx, out),
        };
        rules.answered(&request, answer, ctx, out);
    }
}

/// Whether `effect` is a message to a driver (a command or an announcement).
fn to_drivers(effect: &Effect) -> bool {
    match effect {
        Effect::SendCommand { .. } | Effect::SendAssignment { .. } => true,
        Effect::Publish { subject, .. } => crate::wire::parse_cmd_subject(subject).is_some(),
        _ => false,
    }
}

/// Whether `value` (a command's, as JSON) is still `point`'s desired value: a command is sent
/// again only while it is.
fn still_desired(claims: &Claims, point: crate::registry::PointIdx, value: &serde_json::Value) -> bool {
    claims
        .desired(point)
        .and_then(|desired| desired.value.as_ref())
        .is_some_and(|desired| desired.to_json() == *value)
}
