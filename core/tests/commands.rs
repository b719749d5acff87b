//! The smallest real command plane (core runtime spec, "Fencing the bus"; DESIGN.md §2): a
//! request becomes an epoch-stamped `command_issued` control event, and the command goes to
//! its driver only once that event is committed.

mod common;

use common::*;
use sentinel_core::wire::ToDriver;
use sentinel_core::{CommandRequest, ControlDetail, ControlReport, Effect, Input};

fn request(point: &str, principal: &str) -> CommandRequest {
    CommandRequest {
        command_id: "c-1".into(),
        point_id: point.into(),
        value: serde_json::json!(1),
        principal: principal.into(),
    }
}

#[test]
fn a_command_is_written_before_it_is_sent_and_carries_the_epoch() {
    let mut core = core();
    core.handle(
        T0,
        Input::CommandRequested(request("plant.pump", "operator:alice")),
    );
    let effects = drain(&mut core);
    let [Effect::Control { epoch, events }] = effects.as_slice() else {
        panic!("only the control write: {effects:?}");
    };
    assert_eq!(*epoch, 5);
    let event = &events[0];
    assert_eq!((event.core_epoch, &*event.principal), (5, "operator:alice"));
    assert!(matches!(&event.detail, ControlDetail::CommandIssued { command_id, .. } if command_id == "c-1"));

    core.handle(
        T0,
        Input::ControlCommitted(ControlReport {
            events: events.clone(),
            seqs: vec![12],
        }),
    );
    let effects = drain(&mut core);
    let [Effect::Publish { subject, payload }] = effects.as_slice() else {
        panic!("the command, once written: {effects:?}");
    };
    assert_eq!(subject, "cmd.plant-a.modbus-1");
    let Ok(ToDriver::Command(command)) = serde_json::from_slice(payload) else {
        panic!("a command message");
    };
    assert_eq!((command.core_epoch, command.command_id.as_str()), (5, "c-1"));
    assert_eq!(command.principal, "operator:alice");
    assert_eq!(core.metrics().commands_issued, 1);
}

#[test]
fn a_fenced_command_write_sends_nothing_and_exits() {
    let mut core = core();
    core.handle(
        T0,
        Input::CommandRequested(request("plant.pump", "operator:alice")),
    );
    drain(&mut core);
    core.handle(T0, Input::ControlFailed { fenced: true });
    let effects = drain(&mut core);
    assert!(
        matches!(effects.as_slice(), [Effect::Exit(r)] if r.code == 4),
        "{effects:?}"
    );
    assert_eq!(core.metrics().commands_issued, 0);
}

#[test]
fn requests_without_a_known_point_or_a_principal_are_refused() {
    let mut core = core();
    core.handle(
        T0,
        Input::CommandRequested(request("no.such.point", "operator:alice")),
    );
    core.handle(T0, Input::CommandRequested(request("plant.pump", "")));
    let mut nested = request("plant.pump", "operator:alice");
    nested.value = serde_json::json!({"not": "a scalar"});
    core.handle(T0, Input::CommandRequested(nested));
    assert!(drain(&mut core).is_empty());
    assert_eq!(core.metrics().commands_refused, 3);
}
