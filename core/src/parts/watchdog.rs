//! The watchdog part: freshness deadlines and the `quality_changed` events they cause (core
//! runtime spec, "A slow core must not look like a dead fleet", "Draining"; the smallest real
//! version of Watchdog & Derived Points).
//!
//! Owns: one timer set holding each point's deadline (`observed_at` of its latest row plus
//! the registry's `freshness_s`, or plus its `heartbeat_s` when a report-on-change point
//! declares one: such a point promises a reading that often even when nothing changed, so a
//! missed heartbeat is the earliest sign it is dead); when expiries may fire; and the points
//! whose `quality_changed` event is at the store, not yet answered. Expiry is suppressed
//! during the startup grace, until the first lag reading arrives (a core that has not yet
//! asked the consumer does not know whether it is draining a backlog), and while ingest lag
//! is high: in both cases the absence of data is a fact about the core, not about the device,
//! and reporting it as device staleness would be a lie. A suppressed deadline is not lost; it
//! fires once suppression ends, if no current data arrived.
//!
//! The timer set is an ordered set of `(deadline, point)`: O(log n) arm (re-arming moves the
//! entry) and pop for the ~4,000 points of the scale targets, and deterministic order on ties.
//!
//! Takes `Tick` (expiries, against a read-only view of the projection), `Lag` (suppression),
//! each RETURNING row's new deadline (re-arm), and its own events in `ControlCommitted`.
//!
//! Emits `Control` with `quality_changed` events to `stale`, written before the projection
//! moves: the projection follows only once the event is committed (the ordering rules,
//! applied to the control log).

use std::collections::BTreeSet;

use crate::control::{CONTROL_EVENTS_PER_WRITE_MAX, ControlDetail, ControlEvent, PRINCIPAL_WATCHDOG};
use crate::effect::Effect;
use crate::gap::GapReason;
use crate::log::Quality;
use crate::planted::PlantedBug;
use crate::projection::Projection;
use crate::registry::PointIdx;
use crate::time::Micros;

use super::context::{Ctx, Out};

#[derive(Debug)]
pub(crate) struct Watchdog {
    timers: Timers,
    /// Points with a `quality_changed` event at the store, not yet answered.
    pending: BTreeSet<PointIdx>,
}

impl Watchdog {
    /// No expiry fires before `grace_until` (the startup grace).
    pub fn new(points: usize, grace_until: Micros) -> Watchdog {
        Watchdog {
            timers: Timers::new(points, grace_until),
            pending: BTreeSet::new(),
        }
    }

    /// Sets (or moves) a point's deadline (restart step 6).
    pub fn arm(&mut self, point: PointIdx, deadline: Micros) {
        self.timers.arm(point, deadline);
    }

    /// A committed row moved the point's deadline to `deadline` (its freshness from the
    /// projection): re-armed if it changed.
    pub fn rearm(&mut self, point: PointIdx, deadline: Option<Micros>) {
        if let Some(deadline) = deadline
            && self.timers.deadline(point) != Some(deadline)
        {
            self.timers.arm(point, deadline);
        }
    }

    pub fn armed(&self) -> usize {
        self.timers.armed()
    }

    pub fn set_lag_high(&mut self, high: bool) {
        self.timers.set_lag_high(high);
    }

    /// Whether staleness is held back now (startup grace, no lag reading yet, or high lag).
    pub fn suppressed(&self, now: Micros) -> bool {
        self.timers.suppressed(now)
    }

    /// When the running core should next tick for the watchdog.
    pub fn next_deadline(&self, ctx: &Ctx) -> Option<Micros> {
        let due = self.timers.next_deadline();
        // Planted (a livelock): woken for a deadline suppression is holding back.
        if ctx.planted(PlantedBug::WakeForSuppressedDeadline)
            && let Some(at) = self.timers.earliest()
        {
            return Some(due.map_or(at, |d| d.min(at)));
        }
        due
    }

    /// Expiries, for a running core: each live, restored or assumed point whose deadline
    /// passed gets a `quality_changed` event to `stale`, at most a bounded number per tick.
    /// Its reason is `heartbeat_missed` for a point that declares a heartbeat (its deadline is
    /// the heartbeat's), else `freshness`. A point whose event is still at the store gets none.
    pub fn expire(&mut self, projection: &Projection, ctx: &Ctx, out: &mut Out) {
        let max = ctx
            .config
            .watchdog_expiries_per_tick_max
            .min(CONTROL_EVENTS_PER_WRITE_MAX);
        let mut events = Vec::new();
        let expired = if ctx.planted(PlantedBug::StaleWhileSuppressed) {
            self.timers.pop_due(ctx.now, max)
        } else {
            self.timers.expired(ctx.now, max)
        };
        for (point, deadline) in expired {
            let state = projection.state(point);
            if !matches!(
                state.quality,
                Quality::Live | Quality::Restored | Quality::Assumed
            ) || self.pending.contains(&point)
            {
                continue;
            }
            self.pending.insert(point);
            let heartbeat = ctx
                .registry
                .point(point)
                .descriptor
                .manifest
                .heartbeat_s
                .is_some();
            events.push(ControlEvent {
                occurred_at: ctx.now,
                point: Some(point),
                point_id: state.point_id.clone(),
                principal: PRINCIPAL_WATCHDOG.into(),
                core_epoch: ctx.epoch,
                registry_version: ctx.registry.version,
                detail: ControlDetail::QualityChanged {
                    from: state.quality,
                    to: Quality::Stale,
                    reason: if heartbeat {
                        GapReason::HeartbeatMissed
                    } else {
                        GapReason::Freshness
                    },
                    deadline,
                },
            });
        }
        if !events.is_empty() {
            out.metrics.control_events += events.len() as u64;
            out.push(Effect::Control {
                epoch: ctx.epoch,
                events,
            });
        }
    }

    /// The point's `quality_changed` event committed. Returns whether a row that arrived
    /// meanwhile re-armed its deadline past `now` (the event is superseded then).
    pub fn answered(&mut self, point: PointIdx, now: Micros) -> bool {
        self.pending.remove(&point);
        self.timers.deadline(point).is_some_and(|d| d > now)
    }
}

/// Every point's deadline, in one ordered set, and when expiries may fire.
#[derive(Debug)]
struct Timers {
    deadlines: BTreeSet<(Micros, PointIdx)>,
    by_point: Vec<Option<Micros>>,
    /// No expiry fires before this (startup grace).
    grace_until: Micros,
    /// The last lag reading said lag is high (`None`: no reading yet). Either way no expiry
    /// fires.
    lag_high: Option<bool>,
}

impl Timers {
    fn new(points: usize, grace_until: Micros) -> Timers {
        Timers {
            deadlines: BTreeSet::new(),
            by_point: vec![None; points],
            grace_until,
            lag_high: None,
        }
    }

    /// Sets (or moves) a point's deadline.
    fn arm(&mut self, point: PointIdx, deadline: Micros) {
        let slot = &mut self.by_point[point.0 as usize];
        if let Some(old) = slot.replace(deadline) {
            self.deadlines.remove(&(old, point));
        }
        self.deadlines.insert((deadline, point));
        debug_assert!(
            self.deadlines.len() <= self.by_point.len(),
            "one deadline per point at most"
        );
    }

    fn deadline(&self, point: PointIdx) -> Option<Micros> {
        self.by_point[point.0 as usize]
    }

    fn set_lag_high(&mut self, high: bool) {
        self.lag_high = Some(high);
    }

    /// High, or not yet known.
    fn lag_high(&self) -> bool {
        self.lag_high != Some(false)
    }

    fn suppressed(&self, now: Micros) -> bool {
        self.lag_high() || now < self.grace_until
    }

    /// When the caller should next tick for the watchdog: the earliest deadline, or the end
    /// of the grace if that is later; nothing while lag holds expiries back (a lag reading
    /// wakes the core anyway).
    fn next_deadline(&self) -> Option<Micros> {
        if self.lag_high() {
            return None;
        }
        let (earliest, _) = self.deadlines.first()?;
        Some((*earliest).max(self.grace_until))
    }

    /// Pops every deadline due at `now`, unless expiry is suppressed. At most `max` at once,
    /// so one tick's work is bounded; the rest stay due for the next tick.
    fn expired(&mut self, now: Micros, max: usize) -> Vec<(PointIdx, Micros)> {
        if self.suppressed(now) {
            return Vec::new();
        }
        self.pop_due(now, max)
    }

    /// The earliest deadline armed, suppressed or not.
    fn earliest(&self) -> Option<Micros> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    /// Pops every deadline due at `now`, at most `max`, whether or not expiry is suppressed
    /// ([`Self::expired`] is the suppressed-aware caller; a planted bug calls this directly).
    fn pop_due(&mut self, now: Micros, max: usize) -> Vec<(PointIdx, Micros)> {
        let mut out = Vec::new();
        while out.len() < max {
            let Some(&(deadline, point)) = self.deadlines.first() else {
                break;
            };
            if deadline > now {
                break;
            }
            self.deadlines.pop_first();
            self.by_point[point.0 as usize] = None;
            out.push((point, deadline));
        }
        out
    }

    fn armed(&self) -> usize {
        self.deadlines.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Micros = Micros(1_000_000_000);

    #[test]
    fn deadlines_fire_in_order_and_only_once_due() {
        let mut w = Timers::new(3, T0);
        w.set_lag_high(false);
        w.arm(PointIdx(2), T0.add_ms(200));
        w.arm(PointIdx(0), T0.add_ms(100));
        w.arm(PointIdx(1), T0.add_ms(300));
        w.arm(PointIdx(1), T0.add_ms(150)); // moved, not duplicated
        assert_eq!(w.armed(), 3);
        assert_eq!(w.next_deadline(), Some(T0.add_ms(100)));
        assert!(w.expired(T0.add_ms(99), 10).is_empty());
        let fired: Vec<_> = w
            .expired(T0.add_ms(160), 10)
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(fired, vec![PointIdx(0), PointIdx(1)]);
        assert_eq!(w.deadline(PointIdx(1)), None);
        assert_eq!(w.expired(T0.add_ms(1_000), 10).len(), 1);
        assert_eq!(w.next_deadline(), None);
    }

    #[test]
    fn grace_and_lag_hold_expiries_back_without_losing_them() {
        let mut w = Timers::new(1, T0.add_ms(60_000));
        w.arm(PointIdx(0), T0.add_ms(10));
        assert!(w.expired(T0.add_ms(30_000), 10).is_empty(), "no lag reading yet");
        assert_eq!(w.next_deadline(), None);
        w.set_lag_high(false);
        assert!(w.expired(T0.add_ms(30_000), 10).is_empty(), "grace");
        assert_eq!(
            w.next_deadline(),
            Some(T0.add_ms(60_000)),
            "wakes when grace ends"
        );
        w.set_lag_high(true);
        assert!(w.expired(T0.add_ms(90_000), 10).is_empty(), "lag");
        assert_eq!(w.next_deadline(), None);
        w.set_lag_high(false);
        assert_eq!(
            w.expired(T0.add_ms(90_000), 10).len(),
            1,
            "fires once suppression ends"
        );
    }

    #[test]
    fn one_tick_fires_at_most_max() {
        let mut w = Timers::new(5, T0);
        w.set_lag_high(false);
        for i in 0..5 {
            w.arm(PointIdx(i), T0.add_ms(i as i64));
        }
        assert_eq!(w.expired(T0.add_ms(10), 2).len(), 2);
        assert_eq!(w.expired(T0.add_ms(10), 10).len(), 3);
    }

    mod part {
        use super::super::*;
        use crate::parts::context::testing::{self, ctx, drain, row};
        use crate::state::RestoredState;

        /// Live `plant.temp` and `plant.flow` seen at `T0`, their deadlines armed, lag known low.
        fn watched(ctx: &Ctx) -> (Watchdog, Projection) {
            let mut projection =
                Projection::restore(&ctx.registry, &RestoredState::default(), &ctx.config, ctx.now);
            let mut watchdog = Watchdog::new(ctx.registry.len(), ctx.now);
            watchdog.set_lag_high(false);
            for (seq, id) in [(1, "plant.temp"), (2, "plant.flow")] {
                let row = row(ctx, id, seq, 1.0, testing::T0);
                projection.apply(&row, ctx.epoch, ctx.now);
                watchdog.rearm(row.point, projection.freshness_deadline(row.point));
            }
            (watchdog, projection)
        }

        fn reasons(effects: &[Effect]) -> Vec<(&str, GapReason)> {
            effects
                .iter()
                .flat_map(|e| match e {
                    Effect::Control { events, .. } => events.as_slice(),
                    _ => &[],
                })
                .map(|e| match &e.detail {
                    ControlDetail::QualityChanged { reason, .. } => (&*e.point_id, *reason),
                    other => panic!("not a quality change: {other:?}"),
                })
                .collect()
        }

        #[test]
        fn a_missed_heartbeat_and_a_lost_freshness_each_get_one_event() {
            let mut ctx = ctx();
            let mut out = Out::default();
            let (mut watchdog, projection) = watched(&ctx);
            assert_eq!(
                watchdog.next_deadline(&ctx),
                Some(testing::T0.add_ms(10_000)),
                "the heartbeat first"
            );
            ctx.now = testing::T0.add_ms(61_000);
            watchdog.expire(&projection, &ctx, &mut out);
            assert_eq!(
                reasons(&drain(&mut out)),
                [
                    ("plant.flow", GapReason::HeartbeatMissed),
                    ("plant.temp", GapReason::Freshness)
                ]
            );
            assert_eq!(out.metrics.control_events, 2);
            let flow = ctx.registry.resolve("plant.flow").expect("fixture point");
            // Re-armed while the event was at the store, then expired again: still one event.
            watchdog.arm(flow, ctx.now);
            watchdog.expire(&projection, &ctx, &mut out);
            assert!(drain(&mut out).is_empty(), "its first event is still pending");
            assert!(!watchdog.answered(flow, ctx.now), "no deadline armed past now");
        }

        #[test]
        fn a_row_that_arrived_meanwhile_supersedes_the_event() {
            let mut ctx = ctx();
            let mut out = Out::default();
            let (mut watchdog, projection) = watched(&ctx);
            ctx.now = testing::T0.add_ms(61_000);
            watchdog.expire(&projection, &ctx, &mut out);
            let temp = ctx.registry.resolve("plant.temp").expect("fixture point");
            watchdog.rearm(temp, Some(ctx.now.add_ms(60_000)));
            assert!(watchdog.answered(temp, ctx.now));
        }

        #[test]
        fn nothing_expires_while_suppressed() {
            let mut ctx = ctx();
            let mut out = Out::default();
            let (mut watchdog, projection) = watched(&ctx);
            watchdog.set_lag_high(true);
            assert!(watchdog.suppressed(ctx.now));
            assert_eq!(watchdog.next_deadline(&ctx), None);
            ctx.now = testing::T0.add_ms(61_000);
            watchdog.expire(&projection, &ctx, &mut out);
            assert!(drain(&mut out).is_empty());
            assert_eq!(watchdog.armed(), 2, "held, not lost");
        }
    }
}
