//! Invariant 15, lock ownership (core runtime spec, "Losing the lock while running": fail
//! fast, no draining, no finishing the batch in flight, exit non-zero).
//!
//! Owns, per core incarnation: when its lock session died (the controller kills sessions:
//! `lock_session_killed`, a store partition, the dangerous window) and whether it has ended
//! (exited or crashed). From the loss on, the incarnation may commit, write, ack, publish or
//! bind only until the lock-check interval plus one turmoil tick has passed (a call made
//! before that and still in flight is not judged again); it must have ended by then, and its
//! exit code must be 5 (lock lost), or 3 or 4 when a failed or fenced write stopped it first,
//! or 6 when repeated bus failures stopped it first (each is a fail-fast exit, none drains).

use std::collections::{BTreeMap, BTreeSet};

use sentinel_core::Micros;

use super::Checker;

/// A core host (0 `core-a`, 1 `core-b`) and its incarnation number.
pub type IncarnationId = (u8, u32);

/// Exit codes allowed for an incarnation whose lock session died: 5 (the lock check saw it),
/// 3 (a write failed first: the store link is gone), 4 (fenced: a newer epoch took over), 6
/// (its bus had been failing and the runtime gave up on it first: seed 17137, a bus partition
/// followed by a store partition 400 ms before the exit).
const EXIT_CODES_AFTER_LOSS: [i32; 4] = [5, 3, 4, 6];

#[derive(Default)]
pub struct Ownership {
    lost_at: BTreeMap<IncarnationId, Micros>,
    ended: BTreeSet<IncarnationId>,
}

fn host(incarnation: IncarnationId) -> String {
    let name = if incarnation.0 == 0 { "core-a" } else { "core-b" };
    format!("{name} #{}", incarnation.1)
}

impl Checker {
    /// The lock session of `incarnation` died at `at`.
    pub fn on_lock_lost(&mut self, incarnation: IncarnationId, at: Micros) {
        self.ownership.lost_at.entry(incarnation).or_insert(at);
    }

    /// `incarnation` is about to `what` (commit, write, ack, publish, bind) at `at`.
    pub fn on_core_action(&mut self, incarnation: IncarnationId, what: &str, at: Micros) {
        let Some(&lost_at) = self.ownership.lost_at.get(&incarnation) else {
            return;
        };
        let late_us = at.saturating_sub(lost_at);
        if late_us > self.config.lock_loss_bound_us {
            self.fail(
                15,
                at,
                format!(
                    "{} {what} {} ms after its lock session died (bound: {} ms)",
                    host(incarnation),
                    late_us / 1_000,
                    self.config.lock_loss_bound_us / 1_000
                ),
            );
        }
    }

    /// `incarnation` ended at `at`: exited with `code`, or (`None`) crashed or never started.
    pub fn on_core_end(&mut self, incarnation: IncarnationId, code: Option<i32>, at: Micros) {
        self.ownership.ended.insert(incarnation);
        if let (Some(code), Some(lost_at)) = (code, self.ownership.lost_at.get(&incarnation))
            && !EXIT_CODES_AFTER_LOSS.contains(&code)
        {
            self.fail(
                15,
                at,
                format!(
                    "{} exited with code {code} {} ms after its lock session died; expected 5 (or 3, 4, 6)",
                    host(incarnation),
                    at.saturating_sub(*lost_at) / 1_000
                ),
            );
        }
    }

    /// From the controller after every step: no incarnation still runs later than the bound
    /// after its lock session died.
    pub fn check_lock_losers_ended(&mut self, now: Micros) {
        let bound_us = self.config.lock_loss_bound_us;
        let running = self
            .ownership
            .lost_at
            .iter()
            .find(|(id, lost_at)| {
                !self.ownership.ended.contains(id) && now.saturating_sub(**lost_at) > bound_us
            })
            .map(|(&id, &lost_at)| (id, lost_at));
        if let Some((incarnation, lost_at)) = running {
            self.fail(
                15,
                now,
                format!(
                    "{} still runs {} ms after its lock session died (bound: {} ms)",
                    host(incarnation),
                    now.saturating_sub(lost_at) / 1_000,
                    bound_us / 1_000
                ),
            );
        }
    }
}
