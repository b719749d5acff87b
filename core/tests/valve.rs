//! The valve through the core's public API (issue 21 item 7): the start assignments, a
//! registry version applied live (a poll interval, a point moved between instances of its
//! host), one that needs a restart, and one that is not newer.

mod common;

use std::sync::Arc;

use common::*;
use sentinel_core::wire::{AssignmentAck, CommandOutcome, DriverAssignment, ToDriver};
use sentinel_core::{ControlEvent, ControlReport, Core, Effect, Input, Registry, RestoredState};

/// The fixture's points at `version`, with `plant.temp` polled every `temp_s`, a second
/// instance on plant-b (`plant.spare` on `bacnet-2`), and `plant.rssi` on `rssi_instance`.
fn registry_at(version: i32, temp_s: f64, rssi_instance: &str, rssi_freshness_s: u32) -> Arc<Registry> {
    let mut descriptors: Vec<_> = registry()
        .points()
        .map(|(_, p)| {
            let mut d = p.descriptor.clone();
            match d.id.as_str() {
                "plant.temp" => d.manifest.poll_interval_s = Some(temp_s),
                "plant.rssi" => {
                    d.assignment.driver_instance = rssi_instance.into();
                    d.freshness_s = rssi_freshness_s;
                }
                _ => {}
            }
            d
        })
        .collect();
    descriptors.push(descriptor(
        "plant.spare",
        sentinel_core::registry::Kind::Number,
        sentinel_core::RetentionClass::Measurement,
        "plant-b",
        "bacnet-2",
    ));
    Arc::new(Registry::compile(version, "sha".into(), "hash".into(), descriptors).expect("compiles"))
}

fn controls(effects: &[Effect]) -> Vec<ControlEvent> {
    effects
        .iter()
        .flat_map(|e| match e {
            Effect::Control { events, .. } => events.clone(),
            _ => Vec::new(),
        })
        .collect()
}

fn sent(effects: &[Effect]) -> Vec<(String, DriverAssignment)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::SendAssignment { subject, payload, .. } => match serde_json::from_slice(payload) {
                Ok(ToDriver::Assignment(a)) => Some((subject.clone(), a)),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn commit(core: &mut Core, events: Vec<ControlEvent>, first_seq: i64) -> Vec<Effect> {
    let seqs = (first_seq..first_seq + events.len() as i64).collect();
    core.handle(T0, Input::ControlCommitted(ControlReport { events, seqs }));
    drain(core)
}

#[test]
fn a_poll_interval_and_a_move_apply_live_and_anything_else_needs_a_restart() {
    let mut core = Core::new(
        sentinel_core::Config::default(),
        registry_at(7, 10.0, "bacnet-1", 60),
        5,
        &RestoredState::default(),
        T0,
    )
    .expect("core");
    drain(&mut core);

    // Start: only plant-a/modbus-1 declares a poll interval.
    core.start_assignments();
    let started = controls(&drain(&mut core));
    assert_eq!(
        started.iter().map(|e| e.subject_key()).collect::<Vec<_>>(),
        [Some("plant-a.modbus-1".to_owned())]
    );
    let pushed = sent(&commit(&mut core, started, 100));
    assert_eq!(pushed.len(), 1);
    assert_eq!(pushed[0].0, "cmd.plant-a.modbus-1");
    assert_eq!(pushed[0].1.registry_version, 7);
    core.handle(
        T0,
        Input::AssignmentAcked {
            epoch: 5,
            seq: 100,
            ack: AssignmentAck {
                registry_version: 7,
                outcome: CommandOutcome::Applied,
                reason: None,
                highest_epoch_seen: 5,
            },
        },
    );
    assert_eq!(core.assignments()[0].acked_seq, Some(100));

    // Version 8: temp every 20 s, rssi moved to bacnet-2 of the same host. Applied live.
    core.handle(T0, Input::RegistryLoaded(registry_at(8, 20.0, "bacnet-2", 60)));
    assert_eq!(core.registry().version, 8);
    let reloaded = controls(&drain(&mut core));
    let keys: Vec<_> = reloaded.iter().filter_map(|e| e.subject_key()).collect();
    assert_eq!(
        keys,
        ["plant-a.modbus-1", "plant-b.bacnet-1", "plant-b.bacnet-2"],
        "each instance whose assignment changed, once"
    );
    assert!(reloaded.iter().all(|e| e.registry_version == 8));
    let pushed = sent(&commit(&mut core, reloaded, 200));
    assert_eq!(pushed.len(), 3);
    let bacnet_2 = &pushed[2].1;
    assert_eq!(
        bacnet_2
            .points
            .iter()
            .map(|p| p.point_id.as_str())
            .collect::<Vec<_>>(),
        ["plant.rssi", "plant.spare"]
    );
    // The moved point's rows are now bacnet-2's, not a wrong instance's, and make bacnet-2
    // (which said hello, and gets its assignment again for it) ready.
    core.handle(
        T0,
        Input::DriverHello {
            host: "plant-b".into(),
            hello: sentinel_core::wire::DriverHello {
                v: 1,
                driver_instance: "bacnet-2".into(),
                source_epoch: 1,
                highest_epoch_seen: 5,
                contract: sentinel_core::wire::DRIVER_CONTRACT,
                core_start: None,
            },
        },
    );
    let again = sent(&drain(&mut core));
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].0.as_str(), again[0].1.registry_version),
        ("cmd.plant-b.bacnet-2", 8)
    );
    let batch = deliver_and_flush(
        &mut core,
        vec![delivery(
            1,
            "obs.plant-b.bacnet-2",
            // Observed after the core started: current data, as readiness asks.
            &envelope("plant.rssi", "bacnet-2", 1, "-60", r#","unit":"dBm""#)
                .replace(&T0.add_ms(-1_000).to_rfc3339(), &T0.to_rfc3339()),
        )],
    );
    assert_eq!((batch.rows.len(), batch.quarantine.len()), (1, 0));
    let now = core.now();
    core.handle(now, Input::Committed(all_inserted(batch)));
    drain(&mut core);
    assert_eq!(
        core.drivers().view("plant-b", "bacnet-2").expect("known").state,
        sentinel_core::drivers::DriverState::Ready
    );

    // Version 9 also changes rssi's freshness: nothing applied, the reasons reported.
    core.handle(now, Input::RegistryLoaded(registry_at(9, 30.0, "bacnet-2", 30)));
    let effects = drain(&mut core);
    assert_eq!(
        effects,
        [Effect::RestartNeeded {
            version: 9,
            reasons: vec![
                r#"point "plant.rssi": freshness_s changed; only poll_interval_s and the driver instance change without a restart"#
                    .to_owned()
            ],
            omitted: 0,
        }]
    );
    assert_eq!(core.registry().version, 8, "the core keeps the version it runs");

    // A version that is not newer changes nothing.
    core.handle(now, Input::RegistryLoaded(registry_at(8, 40.0, "bacnet-2", 60)));
    assert_eq!(drain(&mut core), []);
}
