//! Rules through the core's public API, sans-IO (issue 22 items 3, 4 and 5; core runtime spec,
//! "Drain behaves"): a drain whose replayed rows would trigger a rule, and restarts whose
//! `for_s` began before them, came due during the downtime, or whose inputs stopped arriving.
//!
//! The registry, built in code: `plant.temp` (a number, fresh for 60 s, `fail_closed`) and
//! `plant.valve` (a writable bool, relinquished to false), which the rule `frost` claims
//! `true` while `plant.temp < 5` has held for `for_s`, releasing otherwise and on input loss.

mod common;

use std::sync::Arc;

use common::*;
use sentinel_core::registry::health::RuleStateCode;
use sentinel_core::registry::rule::{
    CompareOp, Condition, MissingData, Rule, RuleBand, RuleClaim, RuleFallback,
};
use sentinel_core::registry::{CommandValue, Descriptor, Kind, Registry, RetentionClass, Writable};
use sentinel_core::{
    Config, ControlDetail, Core, Effect, Input, LogHead, Micros, ObsKey, PointState, Quality, RestoredState,
    derived::WindowRow,
};

const A: &str = "obs.plant-a.modbus-1";
const GRACE_MS: i64 = 1_000;

fn registry(for_s: u32) -> Arc<Registry> {
    registry_with(for_s, |_| {})
}

/// [`registry`] with `plant.valve`'s descriptor (which carries the rule) changed by `change`.
fn registry_with(for_s: u32, change: impl FnOnce(&mut Descriptor)) -> Arc<Registry> {
    let mut temp = Descriptor::new(
        "plant.temp",
        Kind::Number,
        RetentionClass::Measurement,
        "plant-a",
        "modbus-1",
    );
    temp.missing_data = Some(MissingData::FailClosed);
    let mut valve = Descriptor::new(
        "plant.valve",
        Kind::Bool,
        RetentionClass::State,
        "plant-a",
        "modbus-1",
    );
    valve.writable = Some(Writable {
        relinquish_default: Some(CommandValue::Bool(false)),
        verify_s: 60,
        tolerance: 0.0,
        min_on_s: None,
        min_off_s: None,
    });
    valve.rules = vec![Rule {
        id: "frost".into(),
        inputs: vec!["plant.temp".into()],
        when: Condition::Compare {
            point: "plant.temp".into(),
            op: CompareOp::Lt,
            value: CommandValue::Number(5.0),
        },
        until: None,
        for_s,
        point: "plant.valve".into(),
        claim: RuleClaim {
            band: RuleBand::Automation,
            priority: 0,
            value: CommandValue::Bool(true),
        },
        otherwise: RuleFallback::Release,
        on_input_loss: RuleFallback::Release,
        warmup_deadline_s: 60,
        fight: None,
    }];
    change(&mut valve);
    Arc::new(Registry::compile(4, "sha".into(), "hash".into(), vec![temp, valve]).expect("compiles"))
}

fn config() -> Config {
    Config {
        startup_grace_ms: GRACE_MS,
        // Each reading is its own batch, committed at the instant it is delivered.
        batch_rows_max: 1,
        ..Config::default()
    }
}

fn key(seq: u64) -> ObsKey {
    ObsKey {
        driver_instance: "modbus-1".into(),
        source_epoch: 1,
        source_seq: seq,
    }
}

/// A core restarted at T0 whose log head says `plant.temp` read `value` at `head_at`.
fn restarted(for_s: u32, head_at: Micros, value: f64) -> Core {
    let head = PointState {
        value: Some(sentinel_core::CanonicalValue::Num(value)),
        observed_at: Some(head_at),
        ingested_at: Some(head_at),
        key: Some(key(1_000)),
        quality: Quality::Live,
        ..PointState::unknown("plant.temp".into(), head_at)
    };
    let restored = RestoredState {
        checkpoints: Vec::new(),
        log_heads: vec![LogHead {
            value_order: head.order_key().map(|(o, i, k)| (o, i, k.clone())),
            state: head,
        }],
    };
    Core::new(config(), registry(for_s), 6, &restored, T0).expect("core")
}

/// The log's rows of `plant.temp` at each of `at`, all reading `value`, applied in order.
fn log_rows(at: &[Micros], value: f64) -> Vec<WindowRow> {
    at.iter()
        .enumerate()
        .map(|(i, &t)| WindowRow {
            point_id: "plant.temp".into(),
            observed_at: t,
            ingested_at: t,
            key: key(i as u64 + 1),
            quality: Quality::Live,
            value: Some(value),
            value_bool: None,
            value_text: None,
            applied: Some(i as i64),
        })
        .collect()
}

fn lag(core: &mut Core, now: Micros, pending: u64) -> Vec<Effect> {
    core.handle(
        now,
        Input::Lag {
            pending,
            ack_pending: 0,
            oldest_unacked_age_ms: None,
        },
    );
    drain(core)
}

/// `plant.temp` reads `value`, observed at `observed`, delivered and committed at `now`.
fn reading(core: &mut Core, seq: u64, value: f64, observed: Micros, now: Micros) -> Vec<Effect> {
    let payload = format!(
        r#"{{"v":1,"point_id":"plant.temp","driver_instance":"modbus-1","source_epoch":1,"source_seq":{seq},"observed_at":"{}","value":{value}}}"#,
        observed.to_rfc3339()
    );
    core.handle(now, Input::Delivered(vec![delivery_at(seq, A, &payload, now)]));
    let mut effects = drain(core);
    if !effects.iter().any(|e| matches!(e, Effect::Commit(_))) {
        core.handle(now.add_ms(100), Input::Tick);
        effects.extend(drain(core));
    }
    let batch = effects
        .into_iter()
        .find_map(|e| match e {
            Effect::Commit(b) => Some(b),
            _ => None,
        })
        .expect("a batch");
    let at = core.now();
    core.handle(at, Input::Committed(all_inserted(batch)));
    drain(core)
}

fn tick(core: &mut Core, now: Micros) -> Vec<Effect> {
    core.handle(now, Input::Tick);
    drain(core)
}

/// The rule's claims set in `effects`, each with when it was written.
fn claims_set(effects: &[Effect]) -> Vec<(Micros, CommandValue)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Arbitrate { events, .. } => Some(events),
            _ => None,
        })
        .flatten()
        .filter_map(|e| match &e.detail {
            ControlDetail::ClaimSet { holder, value, .. } if &**holder == "rule:frost" => {
                Some((e.occurred_at, value.clone()))
            }
            _ => None,
        })
        .collect()
}

fn rule_events(effects: &[Effect]) -> Vec<String> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Control { events, .. } => Some(events),
            _ => None,
        })
        .flatten()
        .filter(|e| matches!(e.detail, ControlDetail::Rule { .. }))
        .map(|e| format!("{} {}", e.kind().as_str(), e.payload_json()))
        .collect()
}

#[test]
fn a_drain_of_triggering_backlog_claims_nothing_and_fires_once_from_current_data() {
    let mut core = Core::new(config(), registry(0), 6, &RestoredState::default(), T0).expect("core");
    let mut effects = lag(&mut core, T0, 100_000);
    // Two hours of backlog that would trigger the rule, drained while lag is high, long past
    // the grace and the rule's 60 s warmup deadline.
    for i in 0..40u64 {
        let observed = T0.add_ms(-7_200_000 + i as i64 * 60_000);
        let now = T0.add_ms(i as i64 * 5_000);
        effects.extend(reading(&mut core, i + 1, 1.0, observed, now));
        effects.extend(tick(&mut core, now.add_ms(1_000)));
    }
    assert!(core.staleness_suppressed());
    assert!(claims_set(&effects).is_empty(), "no claim during the drain");
    assert!(
        rule_events(&effects).is_empty(),
        "no rule left warmup: {:?}",
        rule_events(&effects)
    );
    assert_eq!(
        core.rule_state("frost"),
        Some(RuleStateCode::Warmup),
        "still in warmup"
    );
    // Caught up: lag low, and the backlog's last rows are not current, so warmup goes on.
    let caught_up = T0.add_ms(250_000);
    let effects = lag(&mut core, caught_up, 0);
    assert!(claims_set(&effects).is_empty() && rule_events(&effects).is_empty());
    assert_eq!(core.rule_state("frost"), Some(RuleStateCode::Warmup));
    // Current data that holds the condition: warmup ends (its inputs live) and it fires once.
    let mut effects = reading(
        &mut core,
        100,
        1.0,
        caught_up.add_ms(500),
        caught_up.add_ms(1_000),
    );
    for i in 1..5u64 {
        let at = caught_up.add_ms(1_000 + i as i64 * 5_000);
        effects.extend(reading(&mut core, 100 + i, 2.0, at.add_ms(-500), at));
        effects.extend(tick(&mut core, at.add_ms(1_000)));
    }
    assert_eq!(
        claims_set(&effects),
        [(caught_up.add_ms(1_000), CommandValue::Bool(true))],
        "fires exactly once"
    );
    let events = rule_events(&effects);
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].starts_with("rule_warmup_ended") && events[0].contains(r#""reason":"inputs_live""#));
    assert_eq!(core.rule_state("frost"), Some(RuleStateCode::Firing));
}

#[test]
fn a_for_s_that_began_before_the_restart_fires_at_its_log_time_instant() {
    let mut core = restarted(60, T0.add_ms(-5_000), 1.0);
    let before: Vec<Micros> = (0..8).map(|i| T0.add_ms(-40_000 + i * 5_000)).collect();
    assert_eq!(core.rule_window_requests().len(), 1);
    assert_eq!(core.rehydrate_rules(log_rows(&before, 1.0)), 8);
    let mut effects = lag(&mut core, T0.add_ms(GRACE_MS), 0);
    // Current rows that keep holding it, every 5 s.
    for i in 0..4 {
        let at = T0.add_ms(2_000 + i * 5_000);
        effects.extend(reading(&mut core, 10 + i as u64, 1.0, at.add_ms(-100), at));
    }
    assert!(claims_set(&effects).is_empty(), "not due before T0 + 20 s");
    assert_eq!(core.rule_state("frost"), Some(RuleStateCode::Pending), "pending");
    let effects = tick(&mut core, T0.add_ms(19_999));
    assert!(claims_set(&effects).is_empty(), "not a moment before");
    let effects = tick(&mut core, T0.add_ms(20_000));
    assert_eq!(
        claims_set(&effects),
        [(T0.add_ms(20_000), CommandValue::Bool(true))]
    );
}

#[test]
fn a_for_s_due_during_the_downtime_fires_only_after_warmup_and_on_current_data() {
    let before: Vec<Micros> = (0..8).map(|i| T0.add_ms(-100_000 + i * 10_000)).collect();
    for (now_holds, fires) in [(1.0, true), (10.0, false)] {
        let mut core = restarted(60, T0.add_ms(-30_000), 1.0);
        core.rehydrate_rules(log_rows(&before, 1.0));
        let mut effects = lag(&mut core, T0.add_ms(GRACE_MS), 0);
        effects.extend(tick(&mut core, T0.add_ms(3_000)));
        assert!(claims_set(&effects).is_empty(), "never before warmup ends");
        assert_eq!(core.rule_state("frost"), Some(RuleStateCode::Warmup));
        let at = T0.add_ms(5_000);
        let effects = reading(&mut core, 20, now_holds, at.add_ms(-100), at);
        let expected = if fires {
            vec![(at, CommandValue::Bool(true))]
        } else {
            Vec::new()
        };
        assert_eq!(claims_set(&effects), expected, "current data reads {now_holds}");
        assert!(rule_events(&effects)[0].starts_with("rule_warmup_ended"));
    }
}

#[test]
fn a_rule_whose_inputs_stopped_arriving_during_the_downtime_does_not_fire() {
    let before: Vec<Micros> = (0..11).map(|i| T0.add_ms(-300_000 + i * 10_000)).collect();
    let mut core = restarted(60, T0.add_ms(-200_000), 1.0);
    core.rehydrate_rules(log_rows(&before, 1.0));
    let mut effects = lag(&mut core, T0.add_ms(GRACE_MS), 0);
    let mut now = T0.add_ms(GRACE_MS);
    while now < T0.add_ms(100_000) {
        now = core
            .next_deadline()
            .map_or(now.add_ms(1_000), |d| d.min(now.add_ms(1_000)));
        effects.extend(tick(&mut core, now));
    }
    assert!(claims_set(&effects).is_empty());
    let events = rule_events(&effects);
    assert!(
        events.len() == 1 && events[0].contains(r#""reason":"deadline""#),
        "{events:?}"
    );
    assert_eq!(
        core.rule_state("frost"),
        Some(RuleStateCode::InputLost),
        "its input is lost"
    );
    // Its input comes back after a gap of 5 minutes in the log: the condition starts again
    // from this row, so it does not fire at once, only 60 s of current data later.
    let at = T0.add_ms(100_000);
    let effects = reading(&mut core, 30, 1.0, at.add_ms(-100), at);
    assert!(claims_set(&effects).is_empty(), "the gap restarted the condition");
    assert_eq!(core.rule_state("frost"), Some(RuleStateCode::Pending));
    let mut effects = Vec::new();
    for i in 1..=12 {
        let at = T0.add_ms(100_000 + i * 5_000);
        effects.extend(reading(&mut core, 30 + i as u64, 1.0, at.add_ms(-100), at));
    }
    assert_eq!(
        claims_set(&effects).len(),
        1,
        "fires once its for_s passed on current data"
    );
}

#[test]
fn an_interlock_rule_refused_at_a_partitionable_site_is_on_the_record_not_a_panic() {
    let registry = registry_with(0, |valve| {
        valve.rules[0].claim.band = RuleBand::Interlock;
        valve.assignment.site = Some(sentinel_core::registry::Site {
            name: "barn".into(),
            partitionable: true,
        });
    });
    let mut core = Core::new(config(), registry, 6, &RestoredState::default(), T0).expect("core");
    let mut effects = lag(&mut core, T0.add_ms(GRACE_MS), 0);
    for i in 0..3 {
        let at = T0.add_ms(2_000 + i * 1_000);
        effects.extend(reading(&mut core, 1 + i as u64, 1.0, at, at));
    }
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Arbitrate { .. })),
        "nothing claimed"
    );
    let events = rule_events(&effects);
    let refused: Vec<_> = events
        .iter()
        .filter(|e| e.starts_with("rule_claim_refused"))
        .collect();
    assert_eq!(refused.len(), 1, "refused once, not asked again: {events:?}");
    assert!(refused[0].contains("partitionable site"), "{}", refused[0]);
    assert_eq!(core.metrics().rule_claims, [0, 0, 1, 0]);
}
