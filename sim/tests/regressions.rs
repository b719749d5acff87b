//! Every seed that ever failed, replayed by its literal seed (README, "Engineers": how to add
//! one). Each names what it caught; all must pass now.

mod common;

use sentinel_sim::Options;

fn passes(seed: u64) {
    let outcome = common::run_guarded(seed, &Options::default());
    assert!(outcome.violation.is_none(), "{}", common::describe(&outcome));
}

// Seeds 14, 63: the simulated driver retried a retry, so the second copy of a message reached
// the stream after the duplicate window and, after a core restart emptied the fast-path set,
// became a second row (invariant 1). Drivers now retry only within the window of the first
// accepted publish, as the driver contract says.
#[test]
fn seed_14_retry_of_a_retry_past_the_duplicate_window() {
    passes(14);
}

#[test]
fn seed_63_retry_of_a_retry_past_the_duplicate_window() {
    passes(63);
}

// Seeds 15, 25, 280: a retry came due between poll cycles but fired only at the next cycle,
// past the window (invariant 1). Drivers now wake for each retry.
#[test]
fn seed_15_retry_fired_late_past_the_duplicate_window() {
    passes(15);
}

#[test]
fn seed_25_retry_fired_late_past_the_duplicate_window() {
    passes(25);
}

#[test]
fn seed_280_retry_fired_late_past_the_duplicate_window() {
    passes(280);
}

// Seed 17137: the lock holder's bus had been failing (a bus partition) when a store partition
// killed its lock session; 400 ms later the runtime gave up on the bus, exit 6, before its lock
// check would have said 5. A fail-fast exit within the bound: invariant 15 now allows 6.
#[test]
fn seed_17137_bus_failure_exit_after_losing_the_lock() {
    passes(17137);
}

// Seeds 452, 488: a lossy database failover rolled back a committed row; the core that had
// derived a reading from it crashed after its commit, before the promotion, and the new core
// committed the reading from the stream (invariant 17: a trigger no commit inserted). Every
// core reading the stream took between the standby's copy and the promotion was derived on the
// lost primary and is now not judged against the promoted log, not only a running core's.
#[test]
fn seed_452_reading_of_a_crashed_core_of_a_lost_primary() {
    passes(452);
}

#[test]
fn seed_488_reading_of_a_crashed_core_of_a_lost_primary() {
    passes(488);
}
