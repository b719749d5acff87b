//! The database failover shapes (issue 25, "What it must show"; `sim/src/failover.rs`): seeds
//! that run them, with every invariant holding and the shape really exercised.

mod common;

use sentinel_sim::Options;

/// Seed 0: `database_failover` (synchronous replication) fires while a core holds the lock;
/// the core exits on the lost lock, the next takes a higher epoch, nothing is lost.
#[test]
fn seed_0_synchronous_failover_loses_nothing() {
    let outcome = common::run_guarded(0, &Options::default());
    assert!(outcome.violation.is_none(), "{}", common::describe(&outcome));
    let s = &outcome.stats;
    assert!(s.failovers > 0, "seed 0 ran no failover: {s:?}");
    assert_eq!(
        (
            s.failover_rows_rolled_back,
            s.failover_epochs_lost,
            s.failover_observations_lost
        ),
        (0, 0, 0),
        "a synchronous failover lost something"
    );
}

/// Seed 44: `database_failover_lost_commits` (asynchronous replication) rolls back acked rows
/// (lost for good, counted) and, at 313 s, an acquisition: the next core takes epoch 7 again,
/// the drivers refuse its announcement (another start's identity at their floor), it raises
/// the epoch and exits 7, and the one after commands at epoch 9. (With both the core's raise
/// on an echoed identity and the guard's identity check broken, the new core's command at
/// epoch 7 is applied and invariant 16 fails at 345 s.)
#[test]
fn seed_44_lossy_failover_repeats_an_epoch_and_loses_only_acked_rows() {
    let outcome = common::run_guarded(44, &Options::default());
    assert!(outcome.violation.is_none(), "{}", common::describe(&outcome));
    let s = &outcome.stats;
    assert!(s.failover_epochs_lost > 0, "no epoch was lost: {s:?}");
    assert!(s.failover_observations_lost > 0, "nothing acked was lost: {s:?}");
}
