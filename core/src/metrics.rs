//! Counters the core keeps about itself: the figures the demo prints, `sentinel status` shows,
//! the self-points carry and the runtime exports to Prometheus (`runtime/src/telemetry.rs`,
//! issue 26). Counting happens where the fact is decided, so nothing is counted twice; the
//! exporter only reads a copy.
//!
//! Owns: the counters and gauges, and [`Histogram`], fixed buckets over whole numbers (the
//! core reads no clock: commit latency is the difference of two `now`s it was handed). Every
//! bucket set is a named constant with its unit last; counts only, never a value.

use crate::control::{ControlDetail, RELEASED_BY_HOLDER, RELEASED_EXPIRED};
use crate::log::QuarantineReason;
use crate::registry::RetentionClass;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Deliveries handed to the core, redeliveries included.
    pub delivered: u64,
    /// Rows inserted (in a RETURNING set), per retention class.
    pub rows_inserted: [u64; 3],
    /// Rows the unique index swallowed (redeliveries of committed rows).
    pub rows_conflicted: u64,
    /// Inserted rows with quality `bad` (stages 6–8).
    pub rows_bad: u64,
    /// Quarantine entries committed, per reason (redelivered entries counted again).
    pub quarantined: [u64; QuarantineReason::ALL.len()],
    /// Duplicates recognised by stage 3.
    pub duplicates_fast_path: u64,
    pub transitions_published: u64,
    /// Derived readings computed from committed rows and published into the stream.
    pub derived_readings: u64,
    pub batches_committed: u64,
    pub acks: u64,
    pub checkpoint_points: u64,
    /// Control events the core asked the store to write (watchdog quality changes, commands).
    pub control_events: u64,
    /// Commands published to drivers, after their `command_issued` event committed.
    pub commands_issued: u64,
    /// Command requests refused (unknown point, missing principal, bad id or value).
    pub commands_refused: u64,
    /// Partitions the running core made ahead (`partitions.rs`; not those made at startup or
    /// on demand for a batch), and its runs that found a parent table locked past the timeout.
    pub partitions_created: u64,
    pub partitions_lock_timeouts: u64,
    /// Days the running core compacted (`compaction.rs`; a day of one class with hot rows),
    /// the hot rows they held, and requests the stream held back or that failed (retried).
    pub compacted_days: u64,
    pub compacted_rows: u64,
    /// Days whose minute rollups the running core compacted alone, at their own age (a day
    /// with hot minute rollups), and the hot buckets they held.
    pub compacted_rollup_days: u64,
    pub compacted_rollup_buckets: u64,
    pub compaction_stream_holds: u64,
    pub compaction_failures: u64,
    /// Claims decided, by [`CLAIM_OUTCOMES`]: set, released by their holder, expired (each one
    /// arbitration write asked of the store).
    pub claims: [u64; CLAIM_OUTCOMES.len()],
    /// Driver hellos received (restart step 7), and of those: from an instance no point is
    /// assigned to, from an instance that has seen a newer core's epoch, and answered with the
    /// announcement again because the instance had not seen this core's.
    pub driver_hellos: u64,
    pub driver_hellos_unknown: u64,
    pub driver_hellos_ahead: u64,
    /// Of the hellos ahead, those at this core's own epoch echoing another start's identity
    /// (a repeated epoch, issue 25 item 3).
    pub driver_hellos_other_start: u64,
    pub driver_reannouncements: u64,
    /// Messages to drivers (commands, announcements) withheld while the store raised the
    /// epoch past a driver's (issue 25 item 3); the next core sends the commands again.
    pub commands_withheld: u64,
    /// Driver instances now connecting, connected, ready and lost (a gauge, as
    /// `DriverState::ALL` orders them).
    pub drivers: [u64; 4],
    /// `availability` control events written (issue 21 item 8).
    pub availability_events: u64,
    /// Driver state changes past an instance's rate bound, folded into a later
    /// `availability` event instead of written (`parts/drivers.rs`).
    pub availability_coalesced: u64,
    /// The last lag reading from the durable consumer: messages not yet delivered (the
    /// delivered-and-unacked count joins them only in the high-lag judgement).
    pub lag_pending: u64,
    pub lag_oldest_unacked_age_ms: u64,
    /// From a batch's `Commit` effect to the `now` its report was handed in with, in µs
    /// ([`COMMIT_LATENCY_BOUNDS_US`]).
    pub commit_latency_us: Histogram<{ COMMIT_LATENCY_BOUNDS_US.len() }>,
    /// Rows plus quarantine entries per batch sent to the store ([`BATCH_SIZE_BOUNDS`]).
    pub batch_size: Histogram<{ BATCH_SIZE_BOUNDS.len() }>,
    /// Drivers' answers written as `command_result` (issue 21 item 4).
    pub command_results: u64,
    /// Answers not written: for another core's epoch, for a command this core is not
    /// waiting on, or naming another command than the one its subject is for.
    pub command_answers_ignored: u64,
    /// Hellos from drivers whose contract cannot reply to commands.
    pub driver_hellos_mute: u64,
    /// Commands sent again: issued again at restart (the outbox), after a `command_timeout`,
    /// or to a driver instance that said hello.
    pub commands_resent: u64,
    /// Commands whose answer did not come within its wait (`command_timeout` written).
    pub commands_timed_out: u64,
    /// `stale_epoch` answers the store did not bear out (no newer epoch recorded): suspicious,
    /// like a `wrong_instance` message.
    pub stale_epoch_suspicious: u64,
    /// Applied commands whose point's live rows came within tolerance in time
    /// (`command_verified` written; issue 21 item 5).
    pub commands_verified: u64,
    /// Applied commands whose point did not (`command_diverged` written).
    pub commands_diverged: u64,
    /// Rules in each state, by [`RULE_STATES`] (a gauge, refreshed on ticks; issue 22).
    pub rules: [u64; RULE_STATES.len()],
    /// Rules' claim changes, by [`RULE_CLAIM_OUTCOMES`]: set and released as the claims part
    /// carried them out, refused by it, and changes a fight limit held back.
    pub rule_claims: [u64; RULE_CLAIM_OUTCOMES.len()],
}

/// The states of a rule, as the `state` label of `sentinel_rules`: each state's label, in the
/// order of the state self-point's codes 0, 1, 2, 3, -1, -2 (the rules part's tests check the
/// two lists are one).
pub const RULE_STATES: [&str; 6] = ["idle", "pending", "firing", "warmup", "held", "input_lost"];

/// The outcomes of a rule's claim change, as the `outcome` label of
/// `sentinel_rule_claims_total`.
pub const RULE_CLAIM_OUTCOMES: [&str; 4] = ["set", "released", "refused", "held"];

/// The outcomes of a claim, as the `outcome` label of `sentinel_claims_total`: its
/// `claim_set` event, or its `claim_released` event's `why`.
pub const CLAIM_OUTCOMES: [&str; 3] = ["set", RELEASED_BY_HOLDER, RELEASED_EXPIRED];

/// Commit latency buckets, µs: 1 ms to 10 s. A batch is one statement; the spec's budget for
/// the ingest path is well under a second, so the buckets are finest there.
pub const COMMIT_LATENCY_BOUNDS_US: [u64; 12] = [
    1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 10_000_000,
];

/// Batch size buckets, entries: up to the default `batch_rows_max` (500), where a busy core's
/// batches land; the flush interval's small batches fall in the first ones.
pub const BATCH_SIZE_BOUNDS: [u64; 9] = [1, 5, 10, 25, 50, 100, 250, 400, 500];

/// A histogram over fixed upper bounds (inclusive, as Prometheus's `le`): per-bucket counts,
/// not cumulative, plus the count above the last bound, the sum and the count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Histogram<const N: usize> {
    pub buckets: [u64; N],
    /// Observations above the last bound (the `+Inf` bucket's own share).
    pub over: u64,
    pub sum: u64,
    pub count: u64,
}

impl<const N: usize> Default for Histogram<N> {
    fn default() -> Self {
        Histogram {
            buckets: [0; N],
            over: 0,
            sum: 0,
            count: 0,
        }
    }
}

impl<const N: usize> Histogram<N> {
    /// Counts `value` into the first bucket whose bound is at least `value`.
    pub fn observe(&mut self, bounds: &[u64; N], value: u64) {
        match bounds.iter().position(|&bound| value <= bound) {
            Some(i) => self.buckets[i] += 1,
            None => self.over += 1,
        }
        self.sum = self.sum.saturating_add(value);
        self.count += 1;
    }
}

impl Metrics {
    pub fn rows_in(&self, class: RetentionClass) -> u64 {
        self.rows_inserted[class.index()]
    }

    pub fn quarantined_for(&self, reason: QuarantineReason) -> u64 {
        self.quarantined[reason as usize]
    }

    pub fn quarantined_total(&self) -> u64 {
        self.quarantined.iter().sum()
    }

    /// A claim's event, counted by its outcome; any other event counts nothing.
    pub fn count_claim(&mut self, event: &ControlDetail) {
        let outcome = match event {
            ControlDetail::ClaimSet { .. } => "set",
            ControlDetail::ClaimReleased { why, .. } => why,
            _ => return,
        };
        let index = CLAIM_OUTCOMES.iter().position(|o| *o == outcome);
        debug_assert!(
            index.is_some(),
            "a claim outcome outside the closed set: {outcome}"
        );
        if let Some(index) = index {
            self.claims[index] += 1;
        }
    }

    /// The security signal of stage 5, counted on its own (ingest spec, stage 5).
    pub fn wrong_instance(&self) -> u64 {
        self.quarantined_for(QuarantineReason::WrongInstance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_value_into_the_first_bound_at_or_above_it() {
        let mut h = Histogram::<3>::default();
        for v in [0, 1, 2, 10, 11, 1_000] {
            h.observe(&[1, 10, 100], v);
        }
        assert_eq!(h.buckets, [2, 2, 1]);
        assert_eq!((h.over, h.count, h.sum), (1, 6, 1_024));
    }
}
