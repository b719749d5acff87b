//! The running core's retention schedule through the public API (core/src/retention.rs; issue 9
//! item 2): a run is asked for an hour after the core starts and daily after that, with every
//! table's cut-off from `Config::retention` and the core's epoch, one at a time, soon again
//! while partitions wait, never while the lag is high; a fenced run stops the core.

mod common;

use common::*;
use sentinel_core::retention::{RetentionConfig, RetentionOutcome, RetentionRequest};
use sentinel_core::{Config, Effect, ExitReason, Input};

fn runs(effects: &[Effect]) -> Vec<RetentionRequest> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::DropExpired(run) => Some(*run),
            _ => None,
        })
        .collect()
}

fn no_rollups() -> Config {
    let mut config = Config::default();
    config.rollups.refresh_interval_ms = 0;
    config
}

#[test]
fn a_run_an_hour_after_start_then_daily_with_the_configured_cutoffs() {
    let mut config = no_rollups();
    config.retention.raw_days = [10, 20, 3];
    let mut core = core_with(config.clone());
    let first = T0.add_ms(RetentionConfig::default().first_run_delay_ms);
    core.handle(T0.add_ms(1), Input::Tick);
    assert!(runs(&drain(&mut core)).is_empty(), "not at once");
    core.handle(first, Input::Tick);
    let asked = runs(&drain(&mut core));
    assert_eq!(
        asked,
        vec![RetentionRequest {
            epoch: 5,
            at: first,
            cutoffs: config.retention.cutoffs(first),
            partitions_max: config.retention.partitions_per_run_max,
        }]
    );
    core.handle(first.add_ms(120_000), Input::Tick);
    assert!(runs(&drain(&mut core)).is_empty(), "one in flight at most");
    core.handle(
        first.add_ms(121_000),
        Input::RetentionRan(RetentionOutcome::Done {
            dropped: 50,
            more: true,
        }),
    );
    let soon = first.add_ms(121_000 + config.retention.catch_up_interval_ms);
    core.handle(soon, Input::Tick);
    assert_eq!(
        runs(&drain(&mut core)).len(),
        1,
        "more waiting: the next follows soon"
    );
    core.handle(
        soon,
        Input::RetentionRan(RetentionOutcome::Done {
            dropped: 2,
            more: false,
        }),
    );
    core.handle(soon.add_ms(3_600_000), Input::Tick);
    assert!(runs(&drain(&mut core)).is_empty(), "then not before a day");
    core.handle(soon.add_ms(config.retention.run_interval_ms), Input::Tick);
    assert_eq!(runs(&drain(&mut core)).len(), 1, "daily");
}

#[test]
fn no_run_while_the_lag_is_high_and_a_fenced_run_stops_the_core() {
    let mut core = core_with(no_rollups());
    core.handle(
        T0,
        Input::Lag {
            pending: 1_000_000,
            ack_pending: 0,
            oldest_unacked_age_ms: Some(600_000),
        },
    );
    drain(&mut core);
    let first = T0.add_ms(RetentionConfig::default().first_run_delay_ms);
    core.handle(first, Input::Tick);
    assert!(runs(&drain(&mut core)).is_empty(), "ingest is behind");
    core.handle(
        first,
        Input::Lag {
            pending: 0,
            ack_pending: 0,
            oldest_unacked_age_ms: None,
        },
    );
    assert_eq!(runs(&drain(&mut core)).len(), 1, "once ingest has caught up");
    core.handle(first.add_ms(1), Input::RetentionFenced);
    assert!(drain(&mut core).contains(&Effect::Exit(ExitReason::FENCED)));
    assert!(core.has_exited());
}
