//! The drivers part: the core's view of its driver instances, restart step 7, "Start drivers;
//! instances go connecting → connected → ready" (ingest spec, "Restart"), and the announcement
//! half of bus fencing (core runtime spec, "Fencing the bus").
//!
//! Owns: the table of driver instances the registry assigns points to (one entry per
//! `(host, driver_instance)`, so bounded by the registry), each instance's state as this core
//! sees it, its last committed driver-library counts (`queue_drops`, `queue_depth`,
//! `publish_failures`, for the host health points), and the `core_started` announcement.
//!
//! - **connecting**: the core has announced its epoch to the instance (on
//!   `cmd.<host>.<driver_instance>`) and has not heard back at that epoch.
//! - **connected**: the instance said hello (on `drv.<host>.<driver_instance>`) with this
//!   core's epoch as the highest it has seen. From then on it refuses every command of an older
//!   core, whether or not this core has commanded it yet: that is what closes the dangerous
//!   window for a driver the new core has no reason to command.
//! - **ready**: connected, and an observation of the instance that was made after this core
//!   started has committed. Replayed backlog does not count, for the same reason it does not
//!   make a point `live` (Watchdog & Derived Points, the recovery rule). The test is
//!   deliberately coarser than that rule's per-point freshness: it asks whether the instance
//!   is delivering now, not whether each of its points is current.
//! - **lost**: connected or ready, and silent — no hello and no committed row observed after
//!   this core started — for [`LOST_AFTER_SILENT_MS`] (drivers say hello only when they start
//!   or hear an announcement, so their data is what says they are alive). Not while the
//!   watchdog's suppression holds (startup grace or high ingest lag: a slow core must not call
//!   a healthy driver lost; the silence is counted again from then). A lost instance is ready
//!   again with its next current row, connected again with a hello.
//!
//! **Availability** (issue 21 item 8): every change of an instance's state is an
//! `availability` control event (`point_id` NULL, `subject_key` `<host>.<driver_instance>`,
//! payload from, to, reason), written through the ordered control-event path
//! (`Effect::Control`), except the first `connecting` of each instance at startup (implied by
//! the core's start, `core_start`). The rate is bounded per instance: at most
//! [`AVAILABILITY_EVENTS_PER_WINDOW`] events per [`AVAILABILITY_WINDOW_MS`]; a change past that
//! is counted (`Metrics::availability_coalesced`) and not written, and when the window ends one
//! event goes from the state last written to the state now, its `coalesced` saying how many
//! changes it folds in (none when the instance flapped back to the state last written: the
//! count then rides on its next event). So a flapping instance writes at most
//! [`AVAILABILITY_EVENTS_PER_WINDOW`] + 1 events a window, and the log's last word on every
//! instance is its state at most one window ago.
//!
//! Driver processes run on the driver hosts and are not started by the core; what the core
//! "starts" is their relationship with this incarnation. The smallest real version of the
//! Driver Contract's part (not in `spec/`; DESIGN.md §2 lists the subjects): a hello whose
//! highest epoch is below this core's gets the announcement again, so a driver that restarted
//! or missed it learns the epoch before this core's first command to it. A hello above this
//! core's epoch means either a newer core has announced itself, or this core's epoch repeats
//! one the drivers have already seen: a failover of the database that lost its last commits
//! (asynchronous replication, a cancelled synchronous wait) can lose epoch increments too
//! (issue 25 item 3). Either way this core must not command with its epoch. It asks the store
//! to raise the recorded epoch to the hello's, fenced on its own (`Effect::RaiseEpoch`, once):
//! refused, a newer core holds the lock and this one exits fenced; raised, this core is fenced
//! from now on and exits ([`crate::ExitReason::EPOCH_RAISED`]) so that its supervisor starts
//! the next, whose acquisition takes an epoch above every one the drivers have seen. Until
//! then nothing is commanded: the router withholds every message to the drivers (the commands
//! stay unanswered in the control log, and the next core's outbox sends them again under its
//! epoch). Why an exit rather than an epoch changed in place: every write in flight (commits,
//! checkpoints, control events, maintenance) carries the old epoch under an equality fence,
//! and a restart is the one place the epoch already changes safely.
//!
//! **A repeated epoch** (issue 25 item 3, the equal-epoch gap): a failover that lost the
//! `core_start` row of epoch N, with its increment, gives the next core N again, and a hello
//! from a driver that heard the lost core says N, which is not above. So every announcement
//! and command carries this core's start identity (`CoreStarted::core_start`, a random number
//! the runtime took at process start, [`crate::Core::set_core_start`]) and a driver's hello
//! echoes the identity of the core at its floor: a hello at this core's epoch with another
//! start's identity is ahead too, and takes the same path with the floor one above this epoch
//! (raising the recorded epoch to N + 1 also fences a deposed core of the lost N that
//! reconnects to the promoted database, whose equality fence N would still pass). A hello
//! without an identity, or a core given none, compares epochs only (drivers and cores from
//! before identities).
//!
//! Takes `DriverHello`, each RETURNING row (the point's instance may become ready) and `Tick`
//! (silence, and the availability windows). Emits `Publish` of the announcement again, to an
//! instance whose hello showed it had not seen this core's epoch (the first announcements go
//! out through [`crate::Core::start_drivers`]), and `Control` (`availability`).
//! Keeps the `drivers` gauge of [`crate::Metrics`].

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;

use crate::control::{ControlDetail, ControlEvent};
use crate::effect::Effect;
use crate::log::ObsRow;
use crate::log::Quality;
use crate::metrics::Metrics;
use crate::registry::{CompiledPoint, PointIdx, Registry};
use crate::time::Micros;
use crate::wire::{
    CoreStarted, DriverHello, ToDriver, cmd_subject, publish_failures_point, queue_depth_point,
    queue_drops_point,
};

use super::context::{Ctx, Out};

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DriverState {
    Connecting,
    Connected,
    Ready,
    Lost,
}

impl DriverState {
    pub const ALL: [DriverState; 4] = [
        DriverState::Connecting,
        DriverState::Connected,
        DriverState::Ready,
        DriverState::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DriverState::Connecting => "connecting",
            DriverState::Connected => "connected",
            DriverState::Ready => "ready",
            DriverState::Lost => "lost",
        }
    }
}

/// A connected or ready instance with no hello and no current committed row for this long is
/// lost: five minutes, past any poll interval a registry declares today and past a NATS
/// reconnect, short enough that an operator hears of a dead driver host before its points'
/// own freshness deadlines pile up.
pub const LOST_AFTER_SILENT_MS: i64 = 300_000;
/// At most this many `availability` events per instance per [`AVAILABILITY_WINDOW_MS`]; the
/// rest are coalesced (module docs).
pub const AVAILABILITY_EVENTS_PER_WINDOW: u32 = 4;
pub const AVAILABILITY_WINDOW_MS: i64 = 60_000;

/// The principal of availability events.
pub const PRINCIPAL_DRIVERS: &str = "core:drivers";

/// Why an instance changed state (the `reason` of its `availability` event).
pub const REASON_HELLO: &str = "hello";
pub const REASON_HELLO_BEHIND: &str = "hello_without_this_epoch";
pub const REASON_CURRENT_DATA: &str = "current_data_committed";
pub const REASON_SILENT: &str = "silent";
pub const REASON_COALESCED: &str = "coalesced";

/// One instance's availability record: what was last written and the rate window.
#[derive(Clone, Debug)]
struct Availability {
    /// The state the log last recorded (`connecting` before any event: the start).
    written: DriverState,
    window_start: Micros,
    written_in_window: u32,
    /// Changes not written since the last event.
    coalesced: u32,
    /// The last hello, or the last committed row observed after this core started, by the
    /// core's clock (silence is counted from here).
    heard_at: Micros,
}

/// One driver instance as this core sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct DriverView {
    pub host: Arc<str>,
    pub driver_instance: Arc<str>,
    pub state: DriverState,
    /// The driver's own `source_epoch` from its last hello.
    pub source_epoch: Option<u32>,
    /// The newest `ingested_at` of a committed row of the instance (a host gone quiet shows
    /// here before its points go stale).
    pub last_committed_at: Option<Micros>,
    /// The instance's last committed `queue_drops` self-point (driver contract v1: the disk
    /// queue's drop count since it opened). The driver library's own health count, not device
    /// data: the one reading the core exports, because it is where the spec drops data.
    pub queue_drops: Option<u64>,
    /// The instance's last committed `queue_depth` self-point: observations waiting in its
    /// disk queue when it reported.
    pub queue_depth: Option<u64>,
    /// The instance's last committed `publish_failures` self-point: observations the stream
    /// did not accept when first published, since its publisher started.
    pub publish_failures: Option<u64>,
    /// When the instance's latest hello reached this core (the host's `last_hello_age` health
    /// point, `registry::health`).
    pub last_hello_at: Option<Micros>,
}

/// What a hello did to the table.
#[derive(Clone, Debug, PartialEq)]
pub enum HelloOutcome {
    /// The instance knows this core's epoch: it is connected (or already ready).
    Current,
    /// The instance has not seen this core's epoch: announce it again.
    Reannounce(Announcement),
    /// The instance has seen a newer core than this one.
    Ahead,
    /// No point of the registry is assigned to this `(host, driver_instance)`.
    Unknown,
}

/// One `core_started` message to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Announcement {
    pub subject: String,
    pub payload: Bytes,
}

const NO_SLOT: u32 = u32::MAX;

/// The driver library's own counts each instance reports as self-points (driver contract v1;
/// named in [`crate::wire`]), which the table keeps for the host health points.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum InstanceFigure {
    QueueDrops,
    QueueDepth,
    PublishFailures,
}

impl InstanceFigure {
    const ALL: [InstanceFigure; 3] = [
        InstanceFigure::QueueDrops,
        InstanceFigure::QueueDepth,
        InstanceFigure::PublishFailures,
    ];

    fn point(self, host: &str, instance: &str) -> String {
        match self {
            InstanceFigure::QueueDrops => queue_drops_point(host, instance),
            InstanceFigure::QueueDepth => queue_depth_point(host, instance),
            InstanceFigure::PublishFailures => publish_failures_point(host, instance),
        }
    }
}

#[derive(Debug)]
pub struct Drivers {
    views: Vec<DriverView>,
    /// Per slot of `views`, its availability record.
    availability: Vec<Availability>,
    /// Per point, its instance's slot in `views` ([`NO_SLOT`] for the core's own points).
    slot_of_point: Vec<u32>,
    /// Per point, which of its instance's driver-library self-points it is, if any.
    figure_of_point: Vec<Option<InstanceFigure>>,
    /// Observations made before this are backlog (the core's start time).
    current_from: Micros,
    epoch: u32,
    registry_version: i32,
    /// This core's start identity, once the runtime gave it one (module docs).
    core_start: Option<u64>,
    /// The floor this core asked the store to raise the recorded epoch to, once asked
    /// (issue 25 item 3): from then on it commands nothing.
    epoch_raise: Option<u32>,
}

impl Drivers {
    /// The table for every `(host, driver_instance)` the registry assigns a point to, except
    /// `skip_host` (the core's own self-points, which it publishes itself). Every instance
    /// starts `connecting`.
    pub fn new(registry: &Registry, skip_host: &str, epoch: u32, now: Micros) -> Drivers {
        let instance_of = |point: &CompiledPoint| {
            (&*point.host != skip_host)
                .then(|| (point.host.clone(), registry.instance_name(point.instance).clone()))
        };
        // Slots in (host, instance) order, so announcements and reports are deterministic.
        let mut slots: BTreeMap<(Arc<str>, Arc<str>), u32> = registry
            .points()
            .filter_map(|(_, p)| instance_of(p))
            .map(|key| (key, 0))
            .collect();
        for (slot, value) in slots.values_mut().enumerate() {
            *value = slot as u32;
        }
        let slot_of_point: Vec<u32> = registry
            .points()
            .map(|(_, p)| instance_of(p).map_or(NO_SLOT, |key| slots[&key]))
            .collect();
        let figure_of_point: Vec<Option<InstanceFigure>> = registry
            .points()
            .map(|(_, p)| {
                let (host, instance) = instance_of(p)?;
                // Only an id under `<host>.<instance>.` can name one (every restart asks this
                // of every point: formatting three names each was 1.3 % of a simulated seed).
                p.id.strip_prefix(&*host)
                    .and_then(|rest| rest.strip_prefix('.'))
                    .and_then(|rest| rest.strip_prefix(&*instance))
                    .and_then(|rest| rest.strip_prefix('.'))?;
                InstanceFigure::ALL
                    .into_iter()
                    .find(|figure| *p.id == *figure.point(&host, &instance))
            })
            .collect();
        let views: Vec<DriverView> = slots
            .into_keys()
            .map(|(host, driver_instance)| DriverView {
                host,
                driver_instance,
                state: DriverState::Connecting,
                source_epoch: None,
                last_committed_at: None,
                queue_drops: None,
                queue_depth: None,
                publish_failures: None,
                last_hello_at: None,
            })
            .collect();
        debug_assert_eq!(slot_of_point.len(), registry.len());
        debug_assert!(
            slot_of_point
                .iter()
                .all(|&s| s == NO_SLOT || (s as usize) < views.len())
        );
        let availability = vec![
            Availability {
                written: DriverState::Connecting,
                window_start: now,
                written_in_window: 0,
                coalesced: 0,
                heard_at: now,
            };
            views.len()
        ];
        Drivers {
            views,
            availability,
            slot_of_point,
            figure_of_point,
            current_from: now,
            epoch,
            registry_version: registry.version,
            core_start: None,
            epoch_raise: None,
        }
    }

    /// This core's start identity, carried by every announcement from now on and compared
    /// with the one each hello at this epoch echoes.
    pub fn set_core_start(&mut self, core_start: u64) {
        self.core_start = Some(core_start);
    }

    /// Whether `hello` shows a core newer than this one: an epoch above this core's, or this
    /// epoch announced by another start (a repeated epoch; module docs). Only when both sides
    /// carry an identity are they compared.
    fn is_ahead(&self, hello: &DriverHello) -> bool {
        hello.highest_epoch_seen > self.epoch
            || (hello.highest_epoch_seen == self.epoch
                && matches!((hello.core_start, self.core_start), (Some(theirs), Some(mine)) if theirs != mine))
    }

    /// The floor asked of the store once a known instance's hello showed an epoch above this
    /// core's; while set, nothing may be sent to the drivers.
    pub fn epoch_raise(&self) -> Option<u32> {
        self.epoch_raise
    }

    /// A registry version applied live (issue 21 item 7): the same points and the same
    /// instances (`registry/reload.rs` refuses anything else), a point perhaps on another
    /// instance of its host. Which instance each point is on is read again, so a moved
    /// point's rows make its new instance ready; events and announcements carry the new
    /// version.
    pub fn reassign(&mut self, registry: &Registry) {
        debug_assert_eq!(self.slot_of_point.len(), registry.len());
        let slot_of_point: Vec<u32> = registry
            .points()
            .map(|(_, p)| {
                self.slot(&p.host, registry.instance_name(p.instance))
                    .map_or(NO_SLOT, |slot| slot as u32)
            })
            .collect();
        debug_assert!(
            slot_of_point
                .iter()
                .zip(&self.slot_of_point)
                .all(|(new, old)| (*new == NO_SLOT) == (*old == NO_SLOT)),
            "a live reload keeps every point's host"
        );
        self.slot_of_point = slot_of_point;
        self.registry_version = registry.version;
    }

    /// Restart step 7: one announcement per instance, in `(host, instance)` order.
    pub fn announcements(&self) -> Vec<Announcement> {
        self.views.iter().map(|v| self.announcement(v)).collect()
    }

    fn announcement(&self, view: &DriverView) -> Announcement {
        let message = ToDriver::CoreStarted(CoreStarted {
            v: 1,
            core_epoch: self.epoch,
            registry_version: self.registry_version,
            core_start: self.core_start,
        });
        Announcement {
            subject: cmd_subject(&view.host, &view.driver_instance),
            payload: message.to_bytes(),
        }
    }

    /// A driver's hello from `drv.<host>.<driver_instance>`, at `now`; a change of state is
    /// written as an `availability` event into `out`.
    fn on_hello(&mut self, host: &str, hello: &DriverHello, now: Micros, out: &mut Out) -> HelloOutcome {
        let Some(slot) = self.slot(host, &hello.driver_instance) else {
            return HelloOutcome::Unknown;
        };
        if self.is_ahead(hello) {
            return HelloOutcome::Ahead;
        }
        self.views[slot].source_epoch = Some(hello.source_epoch);
        self.availability[slot].heard_at = now;
        if hello.highest_epoch_seen < self.epoch {
            // A driver that restarted without our epoch, or missed the announcement. It is
            // connecting again until it answers at this epoch.
            self.transition(slot, DriverState::Connecting, REASON_HELLO_BEHIND, now, out);
            return HelloOutcome::Reannounce(self.announcement(&self.views[slot]));
        }
        if matches!(
            self.views[slot].state,
            DriverState::Connecting | DriverState::Lost
        ) {
            self.transition(slot, DriverState::Connected, REASON_HELLO, now, out);
        }
        HelloOutcome::Current
    }

    /// A row of `point` observed at `observed_at` committed at `now`. Returns whether this made
    /// its instance `ready` (from connected, or back from lost). Called for every committed
    /// row, so it only indexes.
    fn on_row(&mut self, point: PointIdx, observed_at: Micros, now: Micros, out: &mut Out) -> bool {
        let Some(&slot) = self.slot_of_point.get(point.0 as usize) else {
            return false;
        };
        if slot == NO_SLOT || observed_at < self.current_from {
            return false;
        }
        let slot = slot as usize;
        self.availability[slot].heard_at = now;
        if !matches!(self.views[slot].state, DriverState::Connected | DriverState::Lost) {
            return false;
        }
        self.transition(slot, DriverState::Ready, REASON_CURRENT_DATA, now, out);
        true
    }

    /// Moves instance `slot` to `to` for `reason`, writing its `availability` event unless the
    /// instance is past its rate bound this window (then it is coalesced; module docs).
    fn transition(&mut self, slot: usize, to: DriverState, reason: &'static str, now: Micros, out: &mut Out) {
        if self.views[slot].state == to {
            return;
        }
        self.views[slot].state = to;
        let record = &mut self.availability[slot];
        if record.window_start.add_ms(AVAILABILITY_WINDOW_MS) <= now {
            record.window_start = now;
            record.written_in_window = 0;
        }
        if record.written_in_window >= AVAILABILITY_EVENTS_PER_WINDOW {
            record.coalesced = record.coalesced.saturating_add(1);
            out.metrics.availability_coalesced += 1;
            return;
        }
        self.write_availability(slot, reason, now, out);
    }

    /// Writes instance `slot`'s `availability` event: from the state last written to its
    /// state now, folding in the changes coalesced since.
    fn write_availability(&mut self, slot: usize, reason: &'static str, now: Micros, out: &mut Out) {
        let view = &self.views[slot];
        let record = &mut self.availability[slot];
        debug_assert_ne!(
            record.written, view.state,
            "an availability event changes the state"
        );
        debug_assert!(record.written_in_window < AVAILABILITY_EVENTS_PER_WINDOW);
        let event = ControlEvent {
            occurred_at: now,
            point: None,
            point_id: "".into(),
            principal: PRINCIPAL_DRIVERS.into(),
            core_epoch: self.epoch,
            registry_version: self.registry_version,
            detail: ControlDetail::Availability {
                host: view.host.clone(),
                driver_instance: view.driver_instance.clone(),
                from: record.written.as_str(),
                to: view.state.as_str(),
                reason,
                coalesced: record.coalesced,
            },
        };
        record.written = view.state;
        record.written_in_window += 1;
        record.coalesced = 0;
        out.metrics.availability_events += 1;
        out.metrics.control_events += 1;
        out.push(Effect::Control {
            epoch: self.epoch,
            events: vec![event],
        });
    }

    /// When the next instance falls silent, or the next coalescing window with changes left
    /// unwritten ends.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.views
            .iter()
            .zip(&self.availability)
            .filter_map(|(view, record)| {
                let silent = matches!(view.state, DriverState::Connected | DriverState::Ready)
                    .then(|| record.heard_at.add_ms(LOST_AFTER_SILENT_MS));
                let window = (record.written != view.state)
                    .then(|| record.window_start.add_ms(AVAILABILITY_WINDOW_MS));
                silent.into_iter().chain(window).min()
            })
            .min()
    }

    /// Time passed: instances silent past [`LOST_AFTER_SILENT_MS`] are lost (unless
    /// `suppressed`: then their silence counts again from now), and each instance whose window
    /// ended with its state not yet written gets its coalesced event.
    pub(crate) fn on_tick(&mut self, suppressed: bool, ctx: &Ctx, out: &mut Out) {
        let now = ctx.now;
        let mut changed = false;
        for slot in 0..self.views.len() {
            let state = self.views[slot].state;
            let record = &mut self.availability[slot];
            if matches!(state, DriverState::Connected | DriverState::Ready)
                && record.heard_at.add_ms(LOST_AFTER_SILENT_MS) <= now
            {
                if suppressed {
                    record.heard_at = now;
                } else {
                    self.transition(slot, DriverState::Lost, REASON_SILENT, now, out);
                    changed = true;
                }
            }
            let record = &mut self.availability[slot];
            if record.written != self.views[slot].state
                && record.window_start.add_ms(AVAILABILITY_WINDOW_MS) <= now
            {
                record.window_start = now;
                record.written_in_window = 0;
                self.write_availability(slot, REASON_COALESCED, now, out);
            }
        }
        if changed {
            self.gauge(&mut out.metrics);
        }
    }

    /// How many instances are in `state` (one pass over the instances, which the registry
    /// bounds; called only when a state changed).
    pub fn count(&self, state: DriverState) -> usize {
        self.views.iter().filter(|v| v.state == state).count()
    }

    pub fn view(&self, host: &str, driver_instance: &str) -> Option<&DriverView> {
        self.slot(host, driver_instance).map(|slot| &self.views[slot])
    }

    /// A hello, counted by its outcome; an instance that has not seen this core's epoch is
    /// sent the announcement again; one that has seen a higher epoch makes this core ask the
    /// store to raise the recorded epoch to it (once). Returns whether the hello was ahead.
    pub(crate) fn hello(&mut self, host: &str, hello: &DriverHello, now: Micros, out: &mut Out) -> bool {
        out.metrics.driver_hellos += 1;
        if let Some(slot) = self.slot(host, &hello.driver_instance) {
            self.views[slot].last_hello_at = Some(now);
        }
        let ahead = match self.on_hello(host, hello, now, out) {
            HelloOutcome::Current => false,
            HelloOutcome::Reannounce(Announcement { subject, payload }) => {
                out.metrics.driver_reannouncements += 1;
                out.push(Effect::Publish { subject, payload });
                false
            }
            // A newer core announced itself to this driver, or this core's epoch repeats one
            // the driver saw before a lossy failover: the store tells which, when asked to
            // raise the recorded epoch past it, fenced on this core's. A hello at this epoch
            // from another start asks for one above it: the driver has seen a core at this
            // epoch that is not this one.
            HelloOutcome::Ahead => {
                out.metrics.driver_hellos_ahead += 1;
                let other_start = hello.highest_epoch_seen == self.epoch;
                if other_start {
                    out.metrics.driver_hellos_other_start += 1;
                }
                if self.epoch_raise.is_none() {
                    debug_assert!(hello.highest_epoch_seen >= self.epoch);
                    let floor = if other_start {
                        self.epoch.saturating_add(1)
                    } else {
                        hello.highest_epoch_seen
                    };
                    self.epoch_raise = Some(floor);
                    out.push(Effect::RaiseEpoch {
                        epoch: self.epoch,
                        floor,
                    });
                }
                true
            }
            HelloOutcome::Unknown => {
                out.metrics.driver_hellos_unknown += 1;
                false
            }
        };
        self.gauge(&mut out.metrics);
        ahead
    }

    /// Every instance, in `(host, driver_instance)` order (bounded by the registry).
    pub fn views(&self) -> &[DriverView] {
        &self.views
    }

    /// A RETURNING row, committed at `now`: its instance's last commit (and a driver-library
    /// count, for its `queue_drops`, `queue_depth` or `publish_failures` point) moves, and it
    /// may now be ready.
    pub(crate) fn row_committed(&mut self, row: &ObsRow, now: Micros, out: &mut Out) {
        self.note_row(row);
        if self.on_row(row.point, row.observed_at, now, out) {
            self.gauge(&mut out.metrics);
        }
    }

    fn note_row(&mut self, row: &ObsRow) {
        let index = row.point.0 as usize;
        let Some(&slot) = self.slot_of_point.get(index) else {
            return;
        };
        if slot == NO_SLOT {
            return;
        }
        let view = &mut self.views[slot as usize];
        view.last_committed_at = Some(
            view.last_committed_at
                .map_or(row.ingested_at, |t| t.max(row.ingested_at)),
        );
        if let Some(figure) = self.figure_of_point.get(index).copied().flatten()
            && row.quality == Quality::Live
            && let Some(count) = row.value.as_ref().and_then(|v| v.num())
            && count.is_finite()
            && count >= 0.0
        {
            let count = Some(count as u64);
            match figure {
                InstanceFigure::QueueDrops => view.queue_drops = count,
                InstanceFigure::QueueDepth => view.queue_depth = count,
                InstanceFigure::PublishFailures => view.publish_failures = count,
            }
        }
    }

    /// The `drivers` gauge: instances in each state.
    pub(crate) fn gauge(&self, metrics: &mut Metrics) {
        metrics.drivers = DriverState::ALL.map(|state| self.count(state) as u64);
    }

    /// Views are sorted by `(host, driver_instance)`.
    fn slot(&self, host: &str, driver_instance: &str) -> Option<usize> {
        self.views
            .binary_search_by(|v| (&*v.host, &*v.driver_instance).cmp(&(host, driver_instance)))
            .ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parts::context::testing::{EPOCH, HOST, INSTANCE, T0, ctx, drain, row};
    use crate::registry::SELF_HOST;

    fn hello(highest_epoch_seen: u32) -> DriverHello {
        DriverHello {
            v: 1,
            driver_instance: INSTANCE.into(),
            source_epoch: 1,
            highest_epoch_seen,
            contract: crate::wire::DRIVER_CONTRACT,
            core_start: None,
        }
    }

    /// The `availability` events among `effects`: (from, to, reason, coalesced).
    fn availability(effects: &[Effect]) -> Vec<(&'static str, &'static str, &'static str, u32)> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Control { events, .. } => Some(events),
                _ => None,
            })
            .flatten()
            .filter_map(|e| match &e.detail {
                ControlDetail::Availability {
                    from,
                    to,
                    reason,
                    coalesced,
                    ..
                } => Some((*from, *to, *reason, *coalesced)),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_instance_goes_connecting_connected_ready_and_the_gauge_follows() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut drivers = Drivers::new(&ctx.registry, SELF_HOST, EPOCH, T0);
        assert_eq!(drivers.announcements().len(), 1, "the core's own host is skipped");
        drivers.gauge(&mut out.metrics);
        assert_eq!(out.metrics.drivers, [1, 0, 0, 0]);
        drivers.hello(HOST, &hello(EPOCH), T0, &mut out);
        assert_eq!(out.metrics.drivers, [0, 1, 0, 0]);
        // Backlog observed before this core started does not make it ready.
        drivers.row_committed(&row(&ctx, "plant.temp", 1, 1.0, T0.add_ms(-1)), T0, &mut out);
        assert_eq!(out.metrics.drivers, [0, 1, 0, 0]);
        let current = row(&ctx, "plant.temp", 2, 1.0, T0);
        drivers.row_committed(&current, T0, &mut out);
        assert_eq!(out.metrics.drivers, [0, 0, 1, 0]);
        assert_eq!(drivers.views()[0].last_committed_at, Some(current.ingested_at));
        assert_eq!(
            drivers.views()[0].queue_drops,
            None,
            "plant.temp is no queue_drops point"
        );
        let effects = drain(&mut out);
        assert_eq!(
            availability(&effects),
            vec![
                ("connecting", "connected", REASON_HELLO, 0),
                ("connected", "ready", REASON_CURRENT_DATA, 0)
            ],
            "each change is on the record, the startup's connecting is not"
        );
        let Effect::Control { events, .. } = &effects[0] else {
            panic!("{effects:?}");
        };
        assert_eq!(
            (
                events[0].point_column(),
                events[0].subject_key().as_deref(),
                &*events[0].principal
            ),
            (None, Some("plant-a.modbus-1"), PRINCIPAL_DRIVERS),
            "about no point, keyed by the instance"
        );
        assert_eq!(
            events[0].payload_json(),
            r#"{"coalesced":0,"from":"connecting","reason":"hello","to":"connected"}"#
        );
    }

    #[test]
    fn a_silent_instance_is_lost_unless_suppressed_and_its_data_brings_it_back() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut drivers = Drivers::new(&ctx.registry, SELF_HOST, EPOCH, T0);
        drivers.hello(HOST, &hello(EPOCH), T0, &mut out);
        drivers.row_committed(&row(&ctx, "plant.temp", 1, 1.0, T0), T0.add_ms(1_000), &mut out);
        drain(&mut out);
        assert_eq!(
            drivers.next_deadline(),
            Some(T0.add_ms(1_000 + LOST_AFTER_SILENT_MS))
        );
        ctx.now = T0.add_ms(LOST_AFTER_SILENT_MS);
        drivers.on_tick(false, &ctx, &mut out);
        assert!(drain(&mut out).is_empty(), "not yet silent long enough");
        // While the watchdog's suppression holds, silence is not judged: it counts from now.
        ctx.now = T0.add_ms(1_000 + LOST_AFTER_SILENT_MS);
        drivers.on_tick(true, &ctx, &mut out);
        assert!(drain(&mut out).is_empty());
        assert_eq!(out.metrics.drivers, [0, 0, 1, 0]);
        assert_eq!(
            drivers.next_deadline(),
            Some(ctx.now.add_ms(LOST_AFTER_SILENT_MS))
        );
        ctx.now = ctx.now.add_ms(LOST_AFTER_SILENT_MS);
        drivers.on_tick(false, &ctx, &mut out);
        assert_eq!(
            availability(&drain(&mut out)),
            vec![("ready", "lost", REASON_SILENT, 0)]
        );
        assert_eq!(out.metrics.drivers, [0, 0, 0, 1]);
        assert_eq!(drivers.next_deadline(), None, "a lost instance has nothing due");
        // Its next current row: ready again.
        let back = row(&ctx, "plant.temp", 2, 1.0, ctx.now);
        drivers.row_committed(&back, ctx.now, &mut out);
        assert_eq!(
            availability(&drain(&mut out)),
            vec![("lost", "ready", REASON_CURRENT_DATA, 0)]
        );
        assert_eq!(out.metrics.drivers, [0, 0, 1, 0]);
    }

    #[test]
    fn a_flapping_instance_writes_a_bounded_number_of_events_and_its_last_state() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut drivers = Drivers::new(&ctx.registry, SELF_HOST, EPOCH, T0);
        // Restarting without this epoch, then answering at it: connected, connecting, ...
        for n in 0..10 {
            let at = T0.add_ms(n * 100);
            drivers.hello(HOST, &hello(EPOCH - 1), at, &mut out);
            drivers.hello(HOST, &hello(EPOCH), at.add_ms(50), &mut out);
        }
        let written = availability(&drain(&mut out));
        assert_eq!(
            written.len(),
            AVAILABILITY_EVENTS_PER_WINDOW as usize,
            "{written:?}"
        );
        // 19 changes (the first hello behind changes nothing: it is connecting already).
        assert_eq!(out.metrics.availability_coalesced, 19 - 4);
        assert_eq!(out.metrics.availability_events, 4);
        // The last written was `connected` → `connecting`; the instance is connected now. When
        // the window ends, one event catches the log up, with the count it folds in.
        assert_eq!(drivers.next_deadline(), Some(T0.add_ms(AVAILABILITY_WINDOW_MS)));
        ctx.now = T0.add_ms(AVAILABILITY_WINDOW_MS);
        drivers.on_tick(false, &ctx, &mut out);
        assert_eq!(
            availability(&drain(&mut out)),
            vec![("connecting", "connected", REASON_COALESCED, 15)]
        );
        // That event opened a new window. A flap that ends back at the state last written
        // writes nothing at the window's end; its count rides on the next event.
        for _ in 0..2 {
            drivers.hello(HOST, &hello(EPOCH - 1), ctx.now, &mut out);
            drivers.hello(HOST, &hello(EPOCH), ctx.now, &mut out);
        }
        drivers.hello(HOST, &hello(EPOCH - 1), ctx.now, &mut out);
        assert_eq!(
            availability(&drain(&mut out)).last(),
            Some(&("connected", "connecting", REASON_HELLO_BEHIND, 0)),
            "three more written in the window"
        );
        assert_eq!(drivers.count(DriverState::Connecting), 1);
        ctx.now = ctx.now.add_ms(AVAILABILITY_WINDOW_MS);
        assert_eq!(drivers.next_deadline(), None, "nothing left to write");
        drivers.on_tick(false, &ctx, &mut out);
        assert!(availability(&drain(&mut out)).is_empty());
        drivers.hello(HOST, &hello(EPOCH), ctx.now, &mut out);
        assert_eq!(
            availability(&drain(&mut out)),
            vec![("connecting", "connected", REASON_HELLO, 2)]
        );
    }

    #[test]
    fn a_hello_behind_gets_the_announcement_again_one_ahead_is_counted() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut drivers = Drivers::new(&ctx.registry, SELF_HOST, EPOCH, T0);
        drivers.hello(HOST, &hello(EPOCH - 1), T0, &mut out);
        let effects = drain(&mut out);
        assert!(
            matches!(&effects[..], [Effect::Publish { subject, .. }] if subject == "cmd.plant-a.modbus-1"),
            "{effects:?}"
        );
        drivers.hello(HOST, &hello(EPOCH + 1), T0, &mut out);
        drivers.hello("plant-z", &hello(EPOCH), T0, &mut out);
        assert_eq!(
            drain(&mut out),
            [Effect::RaiseEpoch {
                epoch: EPOCH,
                floor: EPOCH + 1
            }],
            "a hello ahead asks the store to raise the recorded epoch past it"
        );
        let m = &out.metrics;
        assert_eq!(
            (
                m.driver_hellos,
                m.driver_reannouncements,
                m.driver_hellos_ahead,
                m.driver_hellos_unknown
            ),
            (3, 1, 1, 1)
        );
        assert_eq!(m.drivers, [1, 0, 0, 0]);
    }

    /// Issue 25 item 3: the raise is asked once, for the first hello ahead; an unknown
    /// instance's word moves nothing.
    #[test]
    fn the_epoch_raise_is_asked_once_and_only_for_a_known_instance() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut drivers = Drivers::new(&ctx.registry, SELF_HOST, EPOCH, T0);
        assert!(!drivers.hello("plant-z", &hello(EPOCH + 9), T0, &mut out));
        assert!(drain(&mut out).is_empty());
        assert_eq!(drivers.epoch_raise(), None);
        assert!(drivers.hello(HOST, &hello(EPOCH + 5), T0, &mut out));
        assert!(drivers.hello(HOST, &hello(EPOCH + 7), T0, &mut out));
        assert_eq!(
            drain(&mut out),
            [Effect::RaiseEpoch {
                epoch: EPOCH,
                floor: EPOCH + 5
            }]
        );
        assert_eq!(drivers.epoch_raise(), Some(EPOCH + 5));
        assert_eq!(out.metrics.driver_hellos_ahead, 2);
    }

    /// Issue 25 item 3, the repeated epoch: this core's announcement carries its start
    /// identity; a hello at this epoch echoing it, or echoing none, is current; one echoing
    /// another start's is ahead and asks the store for the epoch above this one, once.
    #[test]
    fn a_hello_at_this_epoch_from_another_start_is_ahead() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut drivers = Drivers::new(&ctx.registry, SELF_HOST, EPOCH, T0);
        drivers.set_core_start(41);
        assert_eq!(
            drivers.announcements(),
            [Announcement {
                subject: "cmd.plant-a.modbus-1".into(),
                payload: Bytes::from(format!(
                    r#"{{"kind":"core_started","v":1,"core_epoch":5,"registry_version":{},"core_start":41}}"#,
                    ctx.registry.version
                )),
            }]
        );
        let at = |core_start| DriverHello {
            core_start,
            ..hello(EPOCH)
        };
        assert!(!drivers.hello(HOST, &at(Some(41)), T0, &mut out), "this start");
        assert!(
            !drivers.hello(HOST, &at(None), T0, &mut out),
            "a driver without identities"
        );
        assert_eq!(out.metrics.drivers, [0, 1, 0, 0]);
        drain(&mut out);
        assert!(
            drivers.hello(HOST, &at(Some(40)), T0, &mut out),
            "another start at 5"
        );
        assert!(drivers.hello(HOST, &at(Some(40)), T0, &mut out));
        assert_eq!(
            drain(&mut out),
            [Effect::RaiseEpoch {
                epoch: EPOCH,
                floor: EPOCH + 1
            }],
            "the epoch above this one: the driver saw a core at this epoch that is not this one"
        );
        assert_eq!(drivers.epoch_raise(), Some(EPOCH + 1));
        let m = &out.metrics;
        assert_eq!((m.driver_hellos_ahead, m.driver_hellos_other_start), (2, 2));
    }

    /// A core given no identity compares epochs only, whatever the hello echoes.
    #[test]
    fn a_core_without_an_identity_compares_epochs_only() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut drivers = Drivers::new(&ctx.registry, SELF_HOST, EPOCH, T0);
        let hello = DriverHello {
            core_start: Some(40),
            ..hello(EPOCH)
        };
        assert!(!drivers.hello(HOST, &hello, T0, &mut out));
        assert_eq!(drivers.epoch_raise(), None);
        assert!(
            !String::from_utf8_lossy(&drivers.announcements()[0].payload).contains(r#""core_start":"#),
            "no identity on the wire"
        );
    }
}
