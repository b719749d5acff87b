//! The checker can fail (simulator issue): each planted bug, alone, must be caught within
//! 500 seeds, by the invariant it breaks. Needs `--features planted-bugs`.

mod common;

use sentinel_core::PlantedBug;
use sentinel_sim::Options;

fn caught_by(bug: PlantedBug, invariant: u8) {
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
    assert_eq!(
        failure.violation.invariant,
        invariant,
        "{} was caught by invariant {} ({}), expected invariant {invariant}",
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
