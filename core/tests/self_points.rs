//! The core's self-points (core runtime spec, "Backpressure": lag read from the consumer and
//! published as self-points; DESIGN.md §2: they travel through ingest like any observation).

mod common;

use std::sync::Arc;

use common::*;
use sentinel_core::registry::{Conversion, Descriptor, Kind, RetentionClass};
use sentinel_core::{Config, Core, Delivery, DeliveryTag, Effect, Input, Registry, RestoredState};

fn registry() -> Arc<Registry> {
    let lag = Descriptor::new(
        "sentinel.core.lag_pending",
        Kind::Number,
        RetentionClass::Diagnostic,
        "sentinel",
        "core",
    );
    let mut age = Descriptor::new(
        "sentinel.core.oldest_unacked_age",
        Kind::Number,
        RetentionClass::Diagnostic,
        "sentinel",
        "core",
    );
    age.unit_native = Some("ms".into());
    age.unit = Some("s".into());
    age.conversion = Conversion {
        factor: 0.001,
        offset: 0.0,
    };
    Arc::new(Registry::compile(3, "test".into(), "test".into(), vec![lag, age]).expect("registry"))
}

fn observations(effects: &[Effect]) -> Vec<(String, String, serde_json::Value)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::PublishObservation {
                subject,
                msg_id,
                payload,
            } => Some((
                subject.clone(),
                msg_id.clone(),
                serde_json::from_slice(payload).expect("envelope JSON"),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn lag_is_published_as_self_points_that_come_back_through_ingest() {
    let config = Config {
        self_points_interval_ms: 5_000,
        ..Config::default()
    };
    let mut core = Core::new(config, registry(), 9, &RestoredState::default(), T0).expect("core");
    core.handle(
        T0.add_ms(100),
        Input::Lag {
            pending: 42,
            ack_pending: 0,
            oldest_unacked_age_ms: Some(1_500),
        },
    );
    assert!(
        observations(&drain(&mut core)).is_empty(),
        "not before the interval"
    );
    assert!(core.next_deadline().is_some_and(|d| d <= T0.add_ms(5_000)));

    core.handle(T0.add_ms(5_000), Input::Tick);
    let published = observations(&drain(&mut core));
    assert_eq!(
        published.len(),
        2,
        "only the self-points the registry declares: {published:?}"
    );
    let (subject, msg_id, lag) = &published[0];
    assert_eq!(subject, "obs.sentinel.core");
    assert_eq!(
        msg_id, "core:9:1",
        "keyed by the core's instance, its epoch and a sequence"
    );
    assert_eq!(lag["point_id"], "sentinel.core.lag_pending");
    assert_eq!(lag["value"], 42);
    let (_, age_id, age) = &published[1];
    assert_eq!(age_id, "core:9:2");
    assert_eq!(
        (age["value"].as_u64(), age["unit"].as_str()),
        (Some(1_500), Some("ms"))
    );

    // The stream hands them back like any other observation.
    let back: Vec<Delivery> = published
        .iter()
        .enumerate()
        .map(|(i, (subject, _, envelope))| Delivery {
            tag: DeliveryTag(100 + i as u64),
            stream_seq: 100 + i as u64,
            subject: subject.as_str().into(),
            payload: serde_json::to_vec(envelope).expect("JSON").into(),
            ingested_at: T0.add_ms(5_001),
            delivered_count: 1,
        })
        .collect();
    let batch = deliver_and_flush(&mut core, back);
    assert!(batch.quarantine.is_empty(), "{:?}", batch.quarantine);
    core.handle(core.now(), Input::Committed(all_inserted(batch)));
    drain(&mut core);
    let age = core
        .point_state("sentinel.core.oldest_unacked_age")
        .expect("point");
    assert_eq!(
        age.value.as_ref().and_then(|v| v.num()),
        Some(1.5),
        "stored in seconds"
    );
    assert_eq!(age.observed_at, Some(T0.add_ms(5_000)));

    // The next readings come one interval later, with the next sequence numbers.
    core.handle(T0.add_ms(10_000), Input::Tick);
    let again = observations(&drain(&mut core));
    assert_eq!(again[0].1, "core:9:3");
}

#[test]
fn an_interval_of_zero_turns_them_off() {
    let mut config = Config {
        self_points_interval_ms: 0,
        ..Config::default()
    };
    // The daily retention run, the hourly partitions run and compaction have deadlines of
    // their own; this test is about self-points.
    config.retention.run_interval_ms = 0;
    config.partitions.interval_ms = 0;
    config.compaction.after_days = None;
    let mut core = Core::new(config, registry(), 9, &RestoredState::default(), T0).expect("core");
    core.handle(T0.add_ms(60_000), Input::Tick);
    assert!(observations(&drain(&mut core)).is_empty());
    assert_eq!(core.next_deadline(), None);
}
