//! The checker can fail (simulator issue, issue 11): each planted bug, alone, must be caught
//! within 500 seeds, by the invariant it breaks; a planted livelock must end in a liveness
//! violation with its replay command, not a hang. Needs `--features planted-bugs`.

mod common;

use sentinel_core::PlantedBug;
use sentinel_sim::Options;

fn caught_by(bug: PlantedBug, invariant: u8) {
    caught_by_one_of(bug, &[invariant]);
}

/// Caught within 500 seeds by one of `invariants`.
fn caught_by_one_of(bug: PlantedBug, invariants: &[u8]) {
    let options = Options {
        plant: Some(bug),
        ..Options::default()
    };
    let outcomes = common::run_seeds(0..500, &options, true);
    let first = outcomes
        .iter()
        .find(|o| o.violation.is_some())
        .unwrap_or_else(|| panic!("planted bug {} survived 500 seeds", bug.name()));
    let failure = first.violation.as_ref().expect("found above");
    println!("{} caught at {}", bug.name(), common::describe(first));
    assert!(
        invariants.contains(&failure.violation.invariant),
        "{} was caught by invariant {} ({}), expected one of {invariants:?}",
        bug.name(),
        failure.violation.invariant,
        failure.violation.what
    );
}

#[test]
fn ack_before_commit_is_caught_by_invariant_3() {
    caught_by(PlantedBug::AckBeforeCommit, 3);
}

#[test]
fn ingested_at_from_the_core_clock_is_caught_by_invariant_1() {
    caught_by(PlantedBug::IngestedAtFromCoreClock, 1);
}

#[test]
fn projecting_the_submitted_batch_is_caught_by_invariant_4() {
    caught_by(PlantedBug::ProjectSubmittedBatch, 4);
}

#[test]
fn commit_without_the_epoch_fence_is_caught_by_invariant_6() {
    caught_by(PlantedBug::CommitWithoutFence, 6);
}

/// Issue 24: a deposed writer's maintenance (the operator's reprocess chunk after its session
/// died, a core's rollup step after it lost the lock) is judged as a commit is.
#[test]
fn maintenance_without_the_fence_is_caught_by_invariant_6() {
    let options = Options {
        plant: Some(PlantedBug::MaintenanceWithoutFence),
        ..Options::default()
    };
    let outcomes = common::run_seeds(0..500, &options, true);
    let first = outcomes
        .iter()
        .find(|o| o.violation.is_some())
        .expect("a deposed writer's maintenance write survived 500 seeds");
    let failure = first.violation.as_ref().expect("found above");
    println!("maintenance-without-fence caught at {}", common::describe(first));
    assert_eq!(failure.violation.invariant, 6, "{}", failure.violation.what);
    // By a maintenance write, not a commit: only maintenance lost its fence.
    let what = &failure.violation.what;
    assert!(
        sentinel_sim::checker::fence::Maintenance::ALL
            .iter()
            .any(|kind| what.starts_with(kind.what())),
        "invariant 6 named something other than a maintenance write: {what}"
    );
}

#[test]
fn a_replayed_row_raising_its_point_to_live_is_caught_by_invariant_13() {
    caught_by(PlantedBug::LiveFromReplayedRow, 13);
}

#[test]
fn staleness_during_the_grace_or_high_lag_is_caught_by_invariant_14() {
    caught_by(PlantedBug::StaleWhileSuppressed, 14);
}

#[test]
fn a_core_carrying_on_after_losing_its_lock_is_caught_by_invariant_15() {
    caught_by(PlantedBug::LockLossIgnored, 15);
}

#[test]
fn a_driver_applying_a_command_below_an_announced_epoch_is_caught_by_invariant_16() {
    caught_by(PlantedBug::GuardIgnoresAnnouncements, 16);
}

#[test]
fn deriving_from_the_submitted_batch_is_caught_by_invariant_17() {
    caught_by(PlantedBug::DeriveFromSubmittedBatch, 17);
}

#[test]
fn a_rollup_trigger_that_ignores_late_rows_is_caught_by_invariant_10() {
    caught_by(PlantedBug::RollupIgnoresLateRows, 10);
}

#[test]
fn publishing_a_command_before_its_write_commits_is_caught_by_invariant_6() {
    caught_by(PlantedBug::PublishBeforeCommit, 6);
}

#[test]
fn a_resolver_that_ignores_the_band_is_caught_by_invariant_18() {
    caught_by(PlantedBug::ResolverIgnoresBand, 18);
}

/// A decision on replayed data shows as a claim derived from a row older than its input's
/// freshness (22), or as a claim or release the current log contradicts (24).
#[test]
fn a_rule_deciding_on_replayed_data_is_caught_by_invariant_22_or_24() {
    caught_by_one_of(PlantedBug::RuleOnReplayedData, &[22, 24]);
}

#[test]
fn a_warmup_deadline_that_counts_suppressed_time_is_caught_by_invariant_23() {
    caught_by(PlantedBug::WarmupIgnoresSuppression, 23);
}

/// The livelock spins at one simulated instant from the first freshness deadline a core holds
/// back (its startup grace), in every seed: the run must end, within the wall-clock guard, as
/// a violation of invariant 9 that names the instant and prints the replay command.
#[test]
#[allow(clippy::disallowed_methods)] // reports the wall-clock time the run took; asserts none
fn a_planted_livelock_ends_in_a_liveness_violation_with_its_replay_command() {
    let options = Options {
        plant: Some(PlantedBug::WakeForSuppressedDeadline),
        ..Options::default()
    };
    let started = std::time::Instant::now();
    let outcome = common::run_guarded(0, &options);
    let report = outcome
        .failure_report()
        .expect("the livelocked seed ends in a violation");
    println!(
        "ended after {:.1} s of wall time:\n{report}",
        started.elapsed().as_secs_f64()
    );
    let failure = outcome
        .violation
        .as_ref()
        .expect("a failure report has a violation");
    assert_eq!(failure.violation.invariant, 9, "{report}");
    assert!(failure.violation.what.contains("livelock"), "{report}");
    assert!(
        report.contains("replay: cargo run --release -p sentinel-sim --features planted-bugs -- --seed 0 --plant wake-for-suppressed-deadline"),
        "{report}"
    );
}

#[test]
fn raising_every_row_whatever_its_event_policy_is_caught_by_invariant_21() {
    caught_by(PlantedBug::RaiseEveryRow, 21);
}

/// A `for_s` that asks for no wake at its due instant fires only when a later row happens to
/// evaluate its rule: seconds late (past the two ticks allowed after `for_s`) or never, in a
/// window where its condition held on usable, current inputs (invariant 26).
#[test]
fn a_for_s_without_its_timer_wake_is_caught_by_invariant_26() {
    caught_by(PlantedBug::ForSWithoutWake, 26);
}

/// A compaction that forgets the `detail` column: the first compaction of an old day holding a
/// `bad` row with a detail reads back a changed row (invariant 27).
#[test]
fn a_compaction_that_drops_a_column_is_caught_by_invariant_27() {
    caught_by(PlantedBug::CompactionDropsDetail, 27);
}

/// A minute-rollup compaction that forgets a day's first bucket: the day's minute rollups read
/// back with one bucket fewer after the compaction than before (invariant 27).
#[test]
fn a_rollup_compaction_that_drops_a_bucket_is_caught_by_invariant_27() {
    caught_by(PlantedBug::RollupCompactionDropsBucket, 27);
}
