//! The running core's compaction schedule through the public API (core/src/compaction.rs;
//! issue 24 item 1): the first day is asked for `first_run_delay_ms` after the core starts,
//! with the core's epoch, the configured age and the oldest day the class still keeps; the
//! next day follows once it is answered, never while the lag is high; a day the stream holds
//! waits; `--no-compaction` asks nothing; a fenced compaction stops the core.

mod common;

use common::*;
use sentinel_core::compaction::{CompactionDayRequest, CompactionOutcome, CompactionTarget};
use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Config, Effect, ExitReason, Input, Micros, RetentionClass};

fn asked(effects: &[Effect]) -> Vec<CompactionDayRequest> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::CompactDay(day) => Some(*day),
            _ => None,
        })
        .collect()
}

fn config() -> Config {
    let mut config = Config::default();
    config.rollups.refresh_interval_ms = 0;
    config.retention.run_interval_ms = 0;
    config.compaction.after_days = Some(3);
    // The raw rows' walk here; the minute rollups' own cursor is core/src/compaction.rs's.
    config.compaction.rollup_after_days = None;
    config
}

#[test]
fn days_one_at_a_time_oldest_first_after_the_first_delay_and_a_stream_hold_waits() {
    let config = config();
    let mut core = core_with(config.clone());
    let first = T0.add_ms(config.compaction.first_run_delay_ms);
    core.handle(T0.add_ms(1), Input::Tick);
    assert!(asked(&drain(&mut core)).is_empty(), "not at once");
    core.handle(first, Input::Tick);
    // The state class keeps the longest (90 days): its oldest kept day is the oldest day.
    let kept_from = config.retention.raw_kept_from(RetentionClass::State, first);
    assert_eq!(
        asked(&drain(&mut core)),
        vec![CompactionDayRequest {
            epoch: 5,
            target: CompactionTarget::Rows(RetentionClass::State),
            day: kept_from,
            at: first,
            after_days: 3,
        }]
    );
    core.handle(first.add_ms(10), Input::Tick);
    assert!(asked(&drain(&mut core)).is_empty(), "one in flight at most");
    core.handle(
        first.add_ms(20),
        Input::DayCompacted(CompactionOutcome::Done { rows: 9 }),
    );
    let soon = first.add_ms(20 + config.compaction.catch_up_interval_ms);
    core.handle(soon, Input::Tick);
    let next = asked(&drain(&mut core));
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].day, Micros(kept_from.0 + US_PER_DAY), "the next day");
    assert_eq!(core.metrics().compacted_days, 1);
    core.handle(soon, Input::DayCompacted(CompactionOutcome::StreamHolds));
    core.handle(soon.add_ms(config.compaction.run_interval_ms - 1), Input::Tick);
    assert!(
        asked(&drain(&mut core)).is_empty(),
        "the stream holds it: a run later"
    );
    core.handle(soon.add_ms(config.compaction.run_interval_ms), Input::Tick);
    assert_eq!(
        asked(&drain(&mut core))[0].day,
        next[0].day,
        "then the same day again"
    );
}

#[test]
fn nothing_while_the_lag_is_high_none_when_off_and_a_fenced_compaction_stops_the_core() {
    let mut off = config();
    off.compaction.after_days = None;
    let mut quiet = core_with(off.clone());
    quiet.handle(T0.add_ms(30 * 86_400_000), Input::Tick);
    assert!(asked(&drain(&mut quiet)).is_empty(), "--no-compaction");

    let config = config();
    let mut core = core_with(config.clone());
    core.handle(
        T0,
        Input::Lag {
            pending: 1_000_000,
            ack_pending: 0,
            oldest_unacked_age_ms: Some(600_000),
        },
    );
    drain(&mut core);
    let first = T0.add_ms(config.compaction.first_run_delay_ms);
    core.handle(first, Input::Tick);
    assert!(asked(&drain(&mut core)).is_empty(), "ingest is behind");
    core.handle(
        first,
        Input::Lag {
            pending: 0,
            ack_pending: 0,
            oldest_unacked_age_ms: None,
        },
    );
    assert_eq!(asked(&drain(&mut core)).len(), 1, "once ingest has caught up");
    core.handle(first.add_ms(1), Input::CompactionFenced);
    assert!(drain(&mut core).contains(&Effect::Exit(ExitReason::FENCED)));
    assert!(core.has_exited());
}
