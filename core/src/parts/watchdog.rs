//! The freshness watchdog: one timer structure holding every point's freshness deadline
//! (core runtime spec, "A slow core must not look like a dead fleet", "Draining"; the
//! smallest real version of Watchdog & Derived Points the exit criteria need).
//!
//! Owns: each point's deadline (`observed_at` of its latest row plus the registry's
//! `freshness_s`, or plus its `heartbeat_s` when a report-on-change point declares one: such a
//! point promises a reading that often even when nothing changed, so a missed heartbeat is the
//! earliest sign it is dead), and when expiries may fire. Expiry is suppressed during the startup grace,
//! until the first lag reading arrives (a core that has not yet asked the consumer does not
//! know whether it is draining a backlog), and while ingest lag is high: in both cases the absence of data is a fact about the core,
//! not about the device, and reporting it as device staleness would be a lie. A suppressed
//! deadline is not lost; it fires once suppression ends, if no current data arrived.
//!
//! The timer structure is an ordered set of `(deadline, point)`: O(log n) arm (re-arming moves the entry) and pop
//! for the ~4,000 points of the scale targets, and deterministic order on ties.

use std::collections::BTreeSet;

use crate::registry::PointIdx;
use crate::time::Micros;

#[derive(Debug)]
pub struct Watchdog {
    deadlines: BTreeSet<(Micros, PointIdx)>,
    by_point: Vec<Option<Micros>>,
    /// No expiry fires before this (startup grace).
    grace_until: Micros,
    /// The last lag reading said lag is high (`None`: no reading yet). Either way no expiry
    /// fires.
    lag_high: Option<bool>,
}

impl Watchdog {
    pub fn new(points: usize, grace_until: Micros) -> Watchdog {
        Watchdog {
            deadlines: BTreeSet::new(),
            by_point: vec![None; points],
            grace_until,
            lag_high: None,
        }
    }

    /// Sets (or moves) a point's deadline.
    pub fn arm(&mut self, point: PointIdx, deadline: Micros) {
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

    pub fn deadline(&self, point: PointIdx) -> Option<Micros> {
        self.by_point[point.0 as usize]
    }

    pub fn set_lag_high(&mut self, high: bool) {
        self.lag_high = Some(high);
    }

    /// High, or not yet known.
    fn lag_high(&self) -> bool {
        self.lag_high != Some(false)
    }

    pub fn suppressed(&self, now: Micros) -> bool {
        self.lag_high() || now < self.grace_until
    }

    /// When the caller should next tick for the watchdog: the earliest deadline, or the end
    /// of the grace if that is later; nothing while lag holds expiries back (a lag reading
    /// wakes the core anyway).
    pub fn next_deadline(&self) -> Option<Micros> {
        if self.lag_high() {
            return None;
        }
        let (earliest, _) = self.deadlines.first()?;
        Some((*earliest).max(self.grace_until))
    }

    /// Pops every deadline due at `now`, unless expiry is suppressed. At most `max` at once,
    /// so one tick's work is bounded; the rest stay due for the next tick.
    pub fn expired(&mut self, now: Micros, max: usize) -> Vec<(PointIdx, Micros)> {
        if self.suppressed(now) {
            return Vec::new();
        }
        self.pop_due(now, max)
    }

    /// The earliest deadline armed, suppressed or not.
    pub fn earliest(&self) -> Option<Micros> {
        self.deadlines.first().map(|(deadline, _)| *deadline)
    }

    /// Pops every deadline due at `now`, at most `max`, whether or not expiry is suppressed
    /// ([`Self::expired`] is the suppressed-aware caller; a planted bug calls this directly).
    pub(crate) fn pop_due(&mut self, now: Micros, max: usize) -> Vec<(PointIdx, Micros)> {
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

    pub fn armed(&self) -> usize {
        self.deadlines.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Micros = Micros(1_000_000_000);

    #[test]
    fn deadlines_fire_in_order_and_only_once_due() {
        let mut w = Watchdog::new(3, T0);
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
        let mut w = Watchdog::new(1, T0.add_ms(60_000));
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
        let mut w = Watchdog::new(5, T0);
        w.set_lag_high(false);
        for i in 0..5 {
            w.arm(PointIdx(i), T0.add_ms(i as i64));
        }
        assert_eq!(w.expired(T0.add_ms(10), 2).len(), 2);
        assert_eq!(w.expired(T0.add_ms(10), 10).len(), 3);
    }
}
