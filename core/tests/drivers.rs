//! Restart step 7 (ingest spec, "Restart": instances go connecting → connected → ready) and
//! the announcement half of bus fencing (core runtime spec, "Fencing the bus"): the core
//! announces its epoch to every driver instance the registry names, tracks each instance's
//! state from its hellos and its committed current data, and announces again to an instance
//! that has not seen its epoch.

mod common;

use common::*;
use sentinel_core::drivers::DriverState;
use sentinel_core::wire::{DriverHello, ToDriver};
use sentinel_core::{Effect, Input};

fn hello(instance: &str, highest_epoch_seen: u32) -> DriverHello {
    DriverHello {
        v: 1,
        driver_instance: instance.into(),
        source_epoch: 3,
        highest_epoch_seen,
        contract: sentinel_core::wire::DRIVER_CONTRACT,
        core_start: None,
    }
}

fn state(core: &sentinel_core::Core, host: &str, instance: &str) -> DriverState {
    core.drivers().view(host, instance).expect("known instance").state
}

#[test]
fn the_core_announces_its_epoch_to_every_assigned_instance_once() {
    let core = core();
    let announcements = core.start_drivers();
    let subjects: Vec<&str> = announcements.iter().map(|a| a.subject.as_str()).collect();
    assert_eq!(
        subjects,
        [
            "cmd.plant-a.modbus-1",
            "cmd.plant-b.bacnet-1",
            "cmd.plant-c.opc-1"
        ],
        "one per (host, instance), in order"
    );
    for a in &announcements {
        let ToDriver::CoreStarted(started) = serde_json::from_slice(&a.payload).expect("JSON") else {
            panic!("an announcement, not a command");
        };
        assert_eq!((started.core_epoch, started.registry_version), (5, 7));
    }
    assert_eq!(core.drivers().count(DriverState::Connecting), 3);
    assert_eq!(core.metrics().drivers, [3, 0, 0, 0]);
}

#[test]
fn instances_go_connecting_connected_ready_on_a_hello_and_current_data() {
    let mut core = core();
    core.handle(
        T0,
        Input::DriverHello {
            host: "plant-a".into(),
            hello: hello("modbus-1", 5),
        },
    );
    let effects = drain(&mut core);
    assert!(
        matches!(&effects[..], [Effect::Control { events, .. }]
            if events[0].kind() == sentinel_core::ControlKind::Availability
                && events[0].subject_key().as_deref() == Some("plant-a.modbus-1")),
        "nothing to send to a driver that knows the epoch, its availability written: {effects:?}"
    );
    assert_eq!(state(&core, "plant-a", "modbus-1"), DriverState::Connected);
    assert_eq!(
        core.drivers()
            .view("plant-a", "modbus-1")
            .and_then(|v| v.source_epoch),
        Some(3)
    );

    // Replayed backlog (observed before this core started) does not make it ready.
    let old = deliver_and_flush(
        &mut core,
        vec![delivery(
            1,
            "obs.plant-a.modbus-1",
            &envelope("plant.temp", "modbus-1", 1, "70", ""),
        )],
    );
    let now = core.now();
    core.handle(now, Input::Committed(all_inserted(old)));
    drain(&mut core);
    assert_eq!(state(&core, "plant-a", "modbus-1"), DriverState::Connected);

    // An observation made after the core started does.
    let current = format!(
        r#"{{"v":1,"point_id":"plant.pump","driver_instance":"modbus-1","source_epoch":3,"source_seq":2,"observed_at":"{}","value":1}}"#,
        T0.add_ms(500).to_rfc3339()
    );
    core.handle(T0.add_ms(1_000), Input::Tick);
    let batch = deliver_and_flush(
        &mut core,
        vec![delivery_at(2, "obs.plant-a.modbus-1", &current, T0.add_ms(600))],
    );
    let now = core.now();
    core.handle(now, Input::Committed(all_inserted(batch)));
    drain(&mut core);
    assert_eq!(state(&core, "plant-a", "modbus-1"), DriverState::Ready);
    assert_eq!(core.metrics().drivers, [2, 0, 1, 0]);
}

#[test]
fn data_from_an_instance_that_never_said_hello_does_not_make_it_ready() {
    let mut core = core();
    let current = format!(
        r#"{{"v":1,"point_id":"plant.door","driver_instance":"bacnet-1","source_epoch":1,"source_seq":1,"observed_at":"{}","value":true}}"#,
        T0.add_ms(10).to_rfc3339()
    );
    core.handle(T0.add_ms(20), Input::Tick);
    let batch = deliver_and_flush(
        &mut core,
        vec![delivery_at(1, "obs.plant-b.bacnet-1", &current, T0.add_ms(20))],
    );
    let now = core.now();
    core.handle(now, Input::Committed(all_inserted(batch)));
    drain(&mut core);
    assert_eq!(
        state(&core, "plant-b", "bacnet-1"),
        DriverState::Connecting,
        "it has not confirmed this core's epoch"
    );
}

#[test]
fn an_instance_behind_the_epoch_is_announced_to_again() {
    let mut core = core();
    core.handle(
        T0,
        Input::DriverHello {
            host: "plant-b".into(),
            hello: hello("bacnet-1", 5),
        },
    );
    assert_eq!(state(&core, "plant-b", "bacnet-1"), DriverState::Connected);
    // The driver restarted without its floor (or missed the announcement).
    core.handle(
        T0,
        Input::DriverHello {
            host: "plant-b".into(),
            hello: hello("bacnet-1", 4),
        },
    );
    let effects: Vec<Effect> = drain(&mut core)
        .into_iter()
        .filter(|e| !matches!(e, Effect::Control { .. }))
        .collect();
    let [Effect::Publish { subject, payload }] = effects.as_slice() else {
        panic!("the announcement again: {effects:?}");
    };
    assert_eq!(subject, "cmd.plant-b.bacnet-1");
    assert!(matches!(
        serde_json::from_slice(payload).expect("JSON"),
        ToDriver::CoreStarted(s) if s.core_epoch == 5
    ));
    assert_eq!(state(&core, "plant-b", "bacnet-1"), DriverState::Connecting);
    assert_eq!(core.metrics().driver_reannouncements, 1);
}

#[test]
fn unknown_hellos_change_nothing_and_one_ahead_asks_for_an_epoch_raise() {
    let mut core = core();
    // An instance no point is assigned to, and a known instance under the wrong host.
    for (host, instance) in [("plant-a", "ghost"), ("plant-c", "modbus-1")] {
        core.handle(
            T0,
            Input::DriverHello {
                host: host.into(),
                hello: hello(instance, 5),
            },
        );
    }
    // A driver that has seen a newer core: this one has been replaced.
    core.handle(
        T0,
        Input::DriverHello {
            host: "plant-c".into(),
            hello: hello("opc-1", 6),
        },
    );
    // ... or this core's epoch repeats one the driver saw (issue 25 item 3): the store is
    // asked to raise the recorded epoch past it, fenced on this core's.
    assert_eq!(drain(&mut core), [Effect::RaiseEpoch { epoch: 5, floor: 6 }]);
    let m = core.metrics();
    assert_eq!(
        (m.driver_hellos, m.driver_hellos_unknown, m.driver_hellos_ahead),
        (3, 2, 1)
    );
    assert_eq!(m.drivers, [3, 0, 0, 0]);
}

#[test]
fn commands_travel_as_the_command_kind() {
    let message = ToDriver::Command(sentinel_core::wire::CommandEnvelope {
        v: 1,
        command_id: "c".into(),
        core_epoch: 2,
        point_id: "p".into(),
        value: serde_json::json!(1),
        principal: "operator:x".into(),
        core_start: None,
    });
    let json: serde_json::Value = serde_json::from_slice(&message.to_bytes()).expect("JSON");
    assert_eq!(json["kind"], "command");
    assert_eq!(message.core_epoch(), 2);
    let started = serde_json::json!({"kind": "core_started", "v": 1, "core_epoch": 9, "registry_version": 3});
    let decoded: ToDriver = serde_json::from_value(started).expect("decodes");
    assert_eq!(decoded.core_epoch(), 9);
}
