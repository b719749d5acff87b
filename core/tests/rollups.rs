//! The running core's rollup schedule through the public API (core/src/rollup.rs; issue 9):
//! a step is asked for once the interval has passed, bounded and settled, one at a time, never
//! while every in-flight slot is taken or the lag is high, and a fenced step stops the core.

mod common;

use common::*;
use sentinel_core::rollup::{RollupConfig, RollupStepOutcome, RollupStepRequest};
use sentinel_core::{Config, Effect, ExitReason, Input};

fn steps(effects: &[Effect]) -> Vec<RollupStepRequest> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RefreshRollups(step) => Some(*step),
            _ => None,
        })
        .collect()
}

#[test]
fn a_step_is_asked_for_after_the_interval_one_at_a_time() {
    let mut core = core();
    let due = T0.add_ms(RollupConfig::default().refresh_interval_ms);
    core.handle(T0.add_ms(1), Input::Tick);
    assert!(steps(&drain(&mut core)).is_empty(), "not before the interval");
    assert_eq!(core.next_deadline(), Some(due));
    core.handle(due, Input::Tick);
    let asked = steps(&drain(&mut core));
    assert_eq!(
        asked,
        vec![RollupStepRequest {
            epoch: 5,
            closed_before: due.add_ms(-RollupConfig::default().settle_ms),
            step_minutes_max: RollupConfig::default().step_minutes_max,
            invalidations_max: RollupConfig::default().invalidations_max,
        }]
    );
    core.handle(due.add_ms(60_000), Input::Tick);
    assert!(steps(&drain(&mut core)).is_empty(), "one in flight at most");
    core.handle(
        due.add_ms(60_000),
        Input::RollupStepped(RollupStepOutcome::Done { behind: true }),
    );
    core.handle(due.add_ms(61_000), Input::Tick);
    assert_eq!(steps(&drain(&mut core)).len(), 1, "behind: the next follows soon");
}

#[test]
fn no_step_while_the_lag_is_high() {
    let mut core = core_with(Config::default());
    core.handle(
        T0,
        Input::Lag {
            pending: 1_000_000,
            ack_pending: 0,
            oldest_unacked_age_ms: Some(600_000),
        },
    );
    drain(&mut core);
    core.handle(T0.add_ms(60_000), Input::Tick);
    assert!(steps(&drain(&mut core)).is_empty());
    core.handle(
        T0.add_ms(61_000),
        Input::Lag {
            pending: 0,
            ack_pending: 0,
            oldest_unacked_age_ms: None,
        },
    );
    assert_eq!(steps(&drain(&mut core)).len(), 1, "once ingest has caught up");
}

#[test]
fn a_fenced_step_stops_the_core() {
    let mut core = core();
    core.handle(T0.add_ms(15_000), Input::Tick);
    assert_eq!(steps(&drain(&mut core)).len(), 1);
    core.handle(T0.add_ms(15_001), Input::RollupStepFenced);
    assert!(drain(&mut core).contains(&Effect::Exit(ExitReason::FENCED)));
    assert!(core.has_exited());
}
