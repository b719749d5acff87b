//! The three ordering rules, batching, dedup, the projection fold and the checkpoint policy,
//! through the core's public API (ingest spec, "Three ordering rules", "Projection").

mod common;

use common::*;
use sentinel_core::{
    CanonicalValue, Config, DeliveryTag, Effect, ExitReason, Input, LogHead, ObsKey, PointState, Quality,
    RestoredState,
};

const A: &str = "obs.plant-a.modbus-1";

fn temp(seq: u64, value: &str) -> sentinel_core::Delivery {
    delivery(seq, A, &envelope("plant.temp", "modbus-1", seq, value, ""))
}

fn acks(effects: &[Effect]) -> Vec<DeliveryTag> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Ack(tags) => Some(tags.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn publishes(effects: &[Effect]) -> Vec<serde_json::Value> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish { payload, .. } => {
                Some(serde_json::from_slice(payload).expect("transition is JSON"))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn ack_and_publish_only_after_commit_in_that_order() {
    let mut core = core();
    core.handle(T0, Input::Delivered(vec![temp(1, "71.6")]));
    assert!(drain(&mut core).is_empty(), "nothing before the flush interval");
    core.handle(T0.add_ms(100), Input::Tick);
    let effects = drain(&mut core);
    assert!(matches!(effects.as_slice(), [Effect::Commit(_)]), "{effects:?}");
    let Effect::Commit(batch) = effects.into_iter().next().expect("commit") else {
        unreachable!()
    };
    assert_eq!(batch.epoch, 5, "the batch carries the core epoch for the fence");
    core.handle(T0.add_ms(150), Input::Committed(all_inserted(batch)));
    let effects = drain(&mut core);
    assert!(matches!(effects[0], Effect::Ack(_)), "ack first: {effects:?}");
    assert!(matches!(effects[1], Effect::Publish { ref subject, .. } if subject == "state.plant.temp"));
    let transition = &publishes(&effects)[0];
    assert_eq!(transition["quality"], "live");
    assert_eq!(transition["core_epoch"], 5);
    assert_eq!(transition["registry_version"], 7);
    assert_eq!(transition["key"]["driver_instance"], "modbus-1");
    assert_eq!(transition["key"]["source_seq"], 1);
    assert!(
        matches!(effects[2], Effect::Checkpoint { .. }),
        "quality change checkpointed at once"
    );
}

#[test]
fn rows_not_in_returning_are_acked_but_neither_projected_nor_published() {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![temp(1, "71.6"), temp(2, "80")]);
    let report = sentinel_core::CommitReport {
        batch,
        inserted: vec![],
        quarantine_inserted: 0,
    };
    core.handle(T0.add_ms(200), Input::Committed(report));
    let effects = drain(&mut core);
    assert_eq!(acks(&effects), vec![DeliveryTag(1), DeliveryTag(2)]);
    assert!(publishes(&effects).is_empty());
    assert_eq!(
        core.point_state("plant.temp").map(|s| s.quality),
        Some(Quality::Unknown)
    );
    assert_eq!(core.metrics().rows_conflicted, 2);
}

#[test]
fn a_duplicate_of_an_in_flight_key_is_acked_when_its_batch_commits() {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![temp(1, "71.6")]);
    // The same key again (a redelivery under another tag) while the batch is at the store.
    core.handle(
        T0.add_ms(120),
        Input::Delivered(vec![delivery(
            9,
            A,
            &envelope("plant.temp", "modbus-1", 1, "71.6", ""),
        )]),
    );
    assert!(drain(&mut core).is_empty(), "held until the batch commits");
    core.handle(T0.add_ms(300), Input::Tick);
    assert!(
        drain(&mut core).is_empty(),
        "a duplicate opens no batch of its own"
    );
    core.handle(T0.add_ms(400), Input::Committed(all_inserted(batch)));
    assert_eq!(acks(&drain(&mut core)), vec![DeliveryTag(1), DeliveryTag(9)]);
    // After the commit a duplicate is acked at once.
    core.handle(
        T0.add_ms(500),
        Input::Delivered(vec![delivery(
            10,
            A,
            &envelope("plant.temp", "modbus-1", 1, "71.6", ""),
        )]),
    );
    assert_eq!(acks(&drain(&mut core)), vec![DeliveryTag(10)]);
    assert_eq!(core.metrics().duplicates_fast_path, 2);
}

#[test]
fn batches_flush_at_the_row_bound_and_respect_the_in_flight_bound() {
    let config = Config {
        batch_rows_max: 3,
        inflight_batches_max: 2,
        ..Config::default()
    };
    let mut core = core_with(config);
    assert_eq!(core.accept_budget(), 3 + 2 * 3);
    let deliveries: Vec<_> = (1..=9).map(|seq| temp(seq, "70")).collect();
    core.handle(T0, Input::Delivered(deliveries));
    let commits: Vec<_> = drain(&mut core)
        .into_iter()
        .filter_map(|e| match e {
            Effect::Commit(b) => Some(b),
            _ => None,
        })
        .collect();
    assert_eq!(commits.len(), 2, "two in flight, the third batch waits");
    assert!(commits.iter().all(|b| b.len() == 3));
    assert_eq!(core.accept_budget(), 0);
    assert_eq!(
        core.next_deadline(),
        None,
        "a full pipeline waits for a commit, not a timer"
    );
    let first = commits.into_iter().next().expect("batch");
    core.handle(T0.add_ms(10), Input::Committed(all_inserted(first)));
    let effects = drain(&mut core);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::Commit(b) if b.len() == 3)),
        "the waiting batch goes out"
    );
}

#[test]
fn a_failed_commit_exits_without_acking() {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![temp(1, "70")]);
    core.handle(
        T0.add_ms(200),
        Input::CommitFailed {
            batch: batch.id,
            fenced: true,
        },
    );
    assert_eq!(drain(&mut core), vec![Effect::Exit(ExitReason::FENCED)]);
    assert!(core.has_exited());
    core.handle(T0.add_ms(300), Input::Committed(all_inserted(batch)));
    assert!(drain(&mut core).is_empty(), "an exited core does nothing more");
}

#[test]
fn a_late_observation_is_stored_but_does_not_move_the_value_back() {
    let mut core = core();
    let newer = envelope("plant.temp", "modbus-1", 2, "80", "");
    let older = envelope("plant.temp", "modbus-1", 1, "60", "")
        .replace(&T0.add_ms(-1_000).to_rfc3339(), &T0.add_ms(-60_000).to_rfc3339());
    let batch = deliver_and_flush(&mut core, vec![delivery(1, A, &newer)]);
    core.handle(T0.add_ms(200), Input::Committed(all_inserted(batch)));
    drain(&mut core);
    let batch = deliver_and_flush(&mut core, vec![delivery(2, A, &older)]);
    assert_eq!(batch.rows.len(), 1, "the late row is written");
    core.handle(T0.add_ms(400), Input::Committed(all_inserted(batch)));
    assert!(publishes(&drain(&mut core)).is_empty());
    let state = core.point_state("plant.temp").expect("state");
    let celsius = state.value.as_ref().and_then(CanonicalValue::num).expect("value");
    assert!((celsius - (80.0 - 32.0) * 5.0 / 9.0).abs() < 1e-9);
}

#[test]
fn a_degraded_quality_never_nulls_the_value() {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![temp(1, "71.6")]);
    core.handle(T0.add_ms(200), Input::Committed(all_inserted(batch)));
    drain(&mut core);
    let unavailable = envelope("plant.temp", "modbus-1", 2, "null", r#","quality":"unavailable""#)
        .replace(&T0.add_ms(-1_000).to_rfc3339(), &T0.to_rfc3339());
    let batch = deliver_and_flush(&mut core, vec![delivery(2, A, &unavailable)]);
    core.handle(T0.add_ms(400), Input::Committed(all_inserted(batch)));
    let effects = drain(&mut core);
    let transition = &publishes(&effects)[0];
    assert_eq!(transition["quality"], "unavailable");
    assert!((transition["value"].as_f64().expect("value kept") - 22.0).abs() < 1e-9);
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Checkpoint { .. })),
        "quality change is synchronous"
    );
}

#[test]
fn value_changes_checkpoint_at_most_every_five_seconds() {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![temp(1, "70")]);
    core.handle(T0.add_ms(200), Input::Committed(all_inserted(batch)));
    drain(&mut core); // includes the quality checkpoint (unknown -> live)
    let batch = deliver_and_flush(&mut core, vec![temp(2, "90")]);
    core.handle(T0.add_ms(400), Input::Committed(all_inserted(batch)));
    let effects = drain(&mut core);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Checkpoint { .. })),
        "value change waits"
    );
    core.handle(T0.add_ms(2_000), Input::Tick);
    assert!(
        drain(&mut core).is_empty(),
        "not yet five seconds since the last write"
    );
    core.handle(T0.add_ms(5_300), Input::Tick);
    let effects = drain(&mut core);
    assert!(
        matches!(effects.as_slice(), [Effect::Checkpoint { states, .. }] if states.len() == 1),
        "{effects:?}"
    );
}

#[test]
fn restore_prefers_the_log_and_forces_restored() {
    let key = ObsKey {
        driver_instance: "modbus-1".into(),
        source_epoch: 1,
        source_seq: 9,
    };
    let head = PointState {
        value: Some(CanonicalValue::Num(30.0)),
        quality: Quality::Live,
        observed_at: Some(T0),
        ingested_at: Some(T0),
        key: Some(key),
        ..PointState::unknown("plant.temp".into(), T0)
    };
    let checkpoint = PointState {
        value: Some(CanonicalValue::Num(20.0)),
        quality: Quality::Bad,
        observed_at: Some(T0.add_ms(-10_000)),
        ingested_at: Some(T0.add_ms(-10_000)),
        key: Some(ObsKey {
            driver_instance: "modbus-1".into(),
            source_epoch: 1,
            source_seq: 3,
        }),
        watermark_seq: Some(42),
        ..PointState::unknown("plant.temp".into(), T0)
    };
    let restored = RestoredState {
        checkpoints: vec![checkpoint],
        log_heads: vec![LogHead {
            state: head,
            value_order: None,
        }],
    };
    let mut core = sentinel_core::Core::new(Config::default(), registry(), 6, &restored, T0).expect("core");
    let state = core.point_state("plant.temp").expect("state").clone();
    assert_eq!(
        state.value,
        Some(CanonicalValue::Num(30.0)),
        "the log is authoritative"
    );
    assert_eq!(state.quality, Quality::Restored);
    assert_eq!(
        state.watermark_seq,
        Some(42),
        "watermark comes from the checkpoint"
    );
    assert_eq!(
        core.point_state("plant.door").map(|s| s.quality),
        Some(Quality::Unknown),
        "unknown stays unknown"
    );
    let effects = drain(&mut core);
    assert!(matches!(effects.as_slice(), [Effect::Checkpoint { epoch: 6, states }] if states.len() == 1));
}

#[test]
fn shutdown_drains_in_flight_then_checkpoints_and_exits_cleanly() {
    let mut core = core();
    let batch = deliver_and_flush(&mut core, vec![temp(1, "70")]);
    core.handle(T0.add_ms(150), Input::Shutdown);
    assert!(drain(&mut core).is_empty(), "waits for the batch in flight");
    core.handle(T0.add_ms(160), Input::Delivered(vec![temp(2, "71")]));
    assert!(drain(&mut core).is_empty(), "no new work while draining");
    core.handle(T0.add_ms(200), Input::Committed(all_inserted(batch)));
    let effects = drain(&mut core);
    assert_eq!(effects.last(), Some(&Effect::Exit(ExitReason::CLEAN)));
    assert!(effects.iter().any(|e| matches!(e, Effect::Ack(_))));
}
