//! Invariants 13 (quality) and 14 (staleness): what the checker knows about when a point may
//! be `live` and when it may go `stale` (core runtime spec, "Draining" and "A slow core must
//! not look like a dead fleet"; ingest spec, "Projection").
//!
//! Owns, per core epoch: the quality of the last transition the epoch's core emitted for each
//! point (every quality change of the projection is a transition, so this is the projection's
//! quality as the outside world can know it), when the epoch took the lock, and the lag
//! readings its bus returned; and the committed `quality_changed` events by seq. The checks
//! run on every transition a core emits, published or not (a cut bus loses the publish, not
//! the projection's change):
//!
//! - 13, a row's transition: `live` from a not-`live` point only through a `live` row whose
//!   `observed_at` plus the point's freshness was ahead of the time the store committed it
//!   (the core applies a row no earlier than that); the quality is the row's, or the point's
//!   previous one, and the previous one only when the row is not the point's latest in the
//!   log or the recovery rule held it back (a `live` row not current when applied);
//! - 13, a control event's transition: the quality is the event's `to`, and it changes
//!   something;
//! - 14, a transition to `stale`: the core decided it (the event's `occurred_at`) at least the
//!   startup grace after its epoch took the lock, with at least one lag reading taken, not
//!   every reading it could hold at that time high, and no accepted, unacked message with a
//!   current observation of the point in the stream that had waited past the lag-age
//!   threshold by then (a shorter wait is lag the design tolerates: see [`Checker::waited_us`]).
//!
//! The checks are sound against timing the checker cannot see: a core's clock at apply lies
//! between the commit and the publish, and of the lag readings its bus returned, the core
//! holds one of the last [`LAG_READINGS_IN_REACH`] (the runtime's lag channel holds one).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use sentinel_core::{Micros, Quality};

use super::{Checker, Identity, Key3, TransitionFacts};

/// Of the lag readings a core's bus returned by some time, the core holds one of the last
/// this many: one handled, one in the runtime's channel (capacity 1), one the reader waits
/// to send.
const LAG_READINGS_IN_REACH: usize = 3;
/// Lag readings kept per epoch (one per `lag_poll_interval_ms`); a stale decision is checked
/// against readings at most this many polls old.
const LAG_READINGS_KEPT_MAX: usize = 64;

/// A committed watchdog event: its point, the quality it moves the point to, and when the core
/// decided it.
#[derive(Clone, Debug)]
pub struct ControlFacts {
    pub point: Arc<str>,
    pub to: Quality,
    pub occurred_at: Micros,
}

#[derive(Clone, Copy, Debug)]
struct LagReading {
    at: Micros,
    pending: u64,
    /// Delivered to the core, not yet committed and acked: backlog too, as the core counts it.
    ack_pending: u64,
    oldest_unacked_age_ms: Option<u64>,
}

#[derive(Clone, Default)]
pub struct QualityModel {
    /// (epoch, point) → quality of the last transition that epoch's core emitted for it.
    last: BTreeMap<(u32, Arc<str>), Quality>,
    pub(super) controls: BTreeMap<i64, ControlFacts>,
    pub(super) acquired_at: BTreeMap<u32, Micros>,
    lag: BTreeMap<u32, VecDeque<LagReading>>,
}

fn seconds(at: Micros) -> f64 {
    (at.0 - crate::settings::START_UNIX_S as i64 * 1_000_000) as f64 / 1e6
}

impl Checker {
    /// A lag reading epoch `epoch`'s bus returned at `at`.
    pub fn on_lag_reading(
        &mut self,
        epoch: u32,
        pending: u64,
        ack_pending: u64,
        oldest_unacked_age_ms: Option<u64>,
        at: Micros,
    ) {
        let readings = self.quality.lag.entry(epoch).or_default();
        if readings.len() == LAG_READINGS_KEPT_MAX {
            readings.pop_front();
        }
        readings.push_back(LagReading {
            at,
            pending,
            ack_pending,
            oldest_unacked_age_ms,
        });
    }

    /// How long an accepted, current observation must have waited unacked before a stale
    /// decision for its point breaks invariant 14: the lag-age threshold, plus the polls it
    /// takes a reading to reach the core. Waiting less is the design's tolerated lag (the
    /// literal "any waiting observation" fails about one seed in six: a reading accepted a
    /// fraction of a second before the deadline, not yet committed).
    fn waited_us(&self) -> i64 {
        self.config.lag_high_age_ms as i64 * 1_000
            + (LAG_READINGS_IN_REACH as i64 + 1) * self.config.lag_poll_interval_us
    }

    fn lag_high(&self, reading: &LagReading) -> bool {
        reading.pending.saturating_add(reading.ack_pending) >= self.config.lag_high_pending
            || reading
                .oldest_unacked_age_ms
                .is_some_and(|age| age >= self.config.lag_high_age_ms)
    }

    /// Invariants 13 and 14 for a transition a core emitted at `at`. `stream_seqs` lists the
    /// messages still in the stream (asked only for a transition to `stale`).
    pub fn on_transition_emitted(
        &mut self,
        facts: &TransitionFacts,
        at: Micros,
        stream_seqs: impl FnOnce() -> Vec<u64>,
    ) {
        let Some(quality) = facts.quality else {
            self.fail(13, at, "a transition with an unknown quality".into());
            return;
        };
        let point = match &facts.identity {
            Identity::Row(key) => self.check_row_transition(key, quality, facts.core_epoch, at),
            Identity::Control(seq) => {
                self.check_control_transition(*seq, quality, facts.core_epoch, at, stream_seqs)
            }
        };
        // Invariant 21: a row's transition against its point's event policy; a control
        // event's tells the policy's view the point's quality.
        match (&facts.identity, &point) {
            (Identity::Row(key), _) => {
                if let Err(what) = self.events.on_row_transition(facts.core_epoch, key, quality) {
                    self.fail(21, at, what);
                }
            }
            (Identity::Control(_), Some(point)) => {
                self.events
                    .on_control_transition(facts.core_epoch, point, quality);
            }
            (Identity::Control(_), None) => {}
        }
        if let Some(point) = point {
            self.quality.last.insert((facts.core_epoch, point), quality);
        }
    }

    /// Returns the transition's point, or `None` when the row is not committed (invariant 4
    /// judges that).
    fn check_row_transition(
        &mut self,
        key: &Key3,
        quality: Quality,
        epoch: u32,
        at: Micros,
    ) -> Option<Arc<str>> {
        let row = self.committed.get(key)?.clone();
        let previous = self.quality.last.get(&(epoch, row.point.clone())).copied();
        let current_until = Micros(row.observed_at.0.saturating_add(self.freshness_us(&row.point)));
        if quality == Quality::Live && previous != Some(Quality::Live) {
            if row.quality != Quality::Live {
                self.fail(
                    13,
                    at,
                    format!(
                        "epoch {epoch}: point {} went live through row {key:?}, whose quality is {}",
                        row.point,
                        row.quality.as_str()
                    ),
                );
            } else if current_until <= row.committed_at {
                self.fail(
                    13,
                    at,
                    format!(
                        "epoch {epoch}: point {} was raised to live by row {key:?}, which was not current \
                         when applied: observed at {:.3} s, current until {:.3} s, committed at {:.3} s",
                        row.point,
                        seconds(row.observed_at),
                        seconds(current_until),
                        seconds(row.committed_at)
                    ),
                );
            }
        }
        if quality != row.quality {
            // A restarted core's points start `restored` or `unknown`, never `live`.
            let kept = match previous {
                Some(previous) => quality == previous,
                None => matches!(quality, Quality::Restored | Quality::Unknown),
            };
            // The recovery rule: a `live` row that was not current when applied (not known to
            // be current at the publish, which is no earlier) keeps the old quality.
            let held_back =
                row.quality == Quality::Live && previous != Some(Quality::Live) && current_until <= at;
            if !kept {
                self.fail(
                    13,
                    at,
                    format!(
                        "epoch {epoch}: the transition for row {key:?} of point {} says {}; the fold \
                         gives the row's {} or the point's previous {}",
                        row.point,
                        quality.as_str(),
                        row.quality.as_str(),
                        previous.map_or("restored/unknown", Quality::as_str)
                    ),
                );
            } else if self.is_latest(&row.point, key) && !held_back {
                self.fail(
                    13,
                    at,
                    format!(
                        "epoch {epoch}: point {} kept quality {} although row {key:?}, the latest in \
                         the log, is {} and current",
                        row.point,
                        quality.as_str(),
                        row.quality.as_str()
                    ),
                );
            }
        }
        Some(row.point)
    }

    fn check_control_transition(
        &mut self,
        seq: i64,
        quality: Quality,
        epoch: u32,
        at: Micros,
        stream_seqs: impl FnOnce() -> Vec<u64>,
    ) -> Option<Arc<str>> {
        let control = self.quality.controls.get(&seq)?.clone();
        let previous = self.quality.last.get(&(epoch, control.point.clone())).copied();
        if quality != control.to {
            self.fail(
                13,
                at,
                format!(
                    "epoch {epoch}: the transition for control event {seq} says {}, the event {}",
                    quality.as_str(),
                    control.to.as_str()
                ),
            );
        } else if previous == Some(quality) {
            self.fail(
                13,
                at,
                format!(
                    "epoch {epoch}: control event {seq} published a transition of point {} to {}, \
                     which it already was",
                    control.point,
                    quality.as_str()
                ),
            );
        }
        if quality == Quality::Stale {
            self.check_staleness(&control, epoch, at, stream_seqs);
        }
        Some(control.point)
    }

    /// Invariant 14 for a point going stale by `control`, decided by epoch `epoch`'s core.
    fn check_staleness(
        &mut self,
        control: &ControlFacts,
        epoch: u32,
        at: Micros,
        stream_seqs: impl FnOnce() -> Vec<u64>,
    ) {
        let decided = control.occurred_at;
        let point = &control.point;
        if let Some(&acquired) = self.quality.acquired_at.get(&epoch)
            && decided.saturating_sub(acquired) < self.config.startup_grace_us
        {
            self.fail(
                14,
                at,
                format!(
                    "epoch {epoch}: point {point} went stale by a decision at {:.3} s, inside the startup \
                     grace ({} s from the lock at {:.3} s)",
                    seconds(decided),
                    self.config.startup_grace_us / 1_000_000,
                    seconds(acquired)
                ),
            );
            return;
        }
        let readings = self.quality.lag.get(&epoch);
        if readings
            .is_some_and(|r| r.len() == LAG_READINGS_KEPT_MAX && r.front().is_some_and(|f| f.at > decided))
        {
            // Decided before the oldest reading kept: which one the core held is unknown.
            return;
        }
        let in_reach: Vec<LagReading> = readings
            .map(|readings| {
                let taken = readings.iter().filter(|r| r.at <= decided).count();
                let first = taken.saturating_sub(LAG_READINGS_IN_REACH);
                readings.iter().skip(first).take(taken - first).copied().collect()
            })
            .unwrap_or_default();
        let Some(last) = in_reach.last().copied() else {
            self.fail(
                14,
                at,
                format!(
                    "epoch {epoch}: point {point} went stale by a decision at {:.3} s, before the core's \
                     first lag reading",
                    seconds(decided)
                ),
            );
            return;
        };
        if in_reach.iter().all(|r| self.lag_high(r)) {
            self.fail(
                14,
                at,
                format!(
                    "epoch {epoch}: point {point} went stale by a decision at {:.3} s while lag was high \
                     (the last reading: {} pending, {} in flight, oldest unacked {:?} ms; thresholds {} and {} ms)",
                    seconds(decided),
                    last.pending,
                    last.ack_pending,
                    last.oldest_unacked_age_ms,
                    self.config.lag_high_pending,
                    self.config.lag_high_age_ms
                ),
            );
            return;
        }
        let freshness_us = self.freshness_us(point);
        let waited_us = self.waited_us();
        if freshness_us <= waited_us {
            // An observation accepted that long ago was observed no later, so it is no longer
            // current: nothing in the stream can count.
            return;
        }
        // Stream sequences ascend with acceptance time (up to the hosts' skew inside one step):
        // stop at the first one too recent.
        let waiting = stream_seqs()
            .into_iter()
            .filter_map(|seq| self.accepted.get(&seq).map(|message| (seq, message)))
            .take_while(|(_, message)| decided.saturating_sub(message.accepted_at) >= waited_us)
            .find(|(_, message)| {
                message.observation.as_ref().is_some_and(|(p, observed_at)| {
                    p == point && observed_at.0.saturating_add(freshness_us) > decided.0
                })
            })
            .map(|(seq, _)| seq);
        if let Some(seq) = waiting {
            let accepted_at = self.accepted[&seq].accepted_at;
            self.fail(
                14,
                at,
                format!(
                    "epoch {epoch}: point {point} went stale by a decision at {:.3} s while a current \
                     observation of it, stream seq {seq} accepted at {:.3} s, had waited unacked in the \
                     stream for over {} ms",
                    seconds(decided),
                    seconds(accepted_at),
                    waited_us / 1_000
                ),
            );
        }
    }
}
