//! The command plane's front door (core runtime spec, "Fencing the bus"; DESIGN.md §2; issue 21
//! item 1): a request for a writable point and a value it can take becomes an epoch-stamped
//! `command_issued` control event, and the command goes to its driver only once that event is
//! committed; any other request is written as `command_refused` with a one-line reason, and
//! nothing is sent.

mod common;

use common::*;
use sentinel_core::wire::ToDriver;
use sentinel_core::{CommandRequest, ControlDetail, ControlReport, Effect, Input};

fn request(point: &str, principal: &str) -> CommandRequest {
    CommandRequest {
        command_id: "c-1".into(),
        point_id: point.into(),
        value: serde_json::json!("on"),
        unit: None,
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
    assert_eq!(command.value, serde_json::json!("on"));
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

/// Every refusal, with its exact message: written as `command_refused` (point, principal,
/// command id, value, reason), and once that commits nothing is sent.
#[test]
fn each_refusal_is_written_with_its_exact_reason_and_nothing_is_sent() {
    let cases: [(&str, serde_json::Value, Option<&str>, &str); 10] = [
        (
            "no.such.point",
            serde_json::json!(1),
            None,
            r#"point "no.such.point" is not in registry version 7"#,
        ),
        (
            "plant.rssi",
            serde_json::json!(-60),
            None,
            r#"point "plant.rssi" is not writable"#,
        ),
        (
            "plant.label",
            serde_json::json!("hello"),
            None,
            r#"point "plant.label" is not writable"#,
        ),
        (
            "plant.temp",
            serde_json::json!(200),
            None,
            "the value 200 degC is outside the point's range -40 to 150 degC",
        ),
        (
            "plant.temp",
            serde_json::json!(21.5),
            Some("degF"),
            r#"the request's unit "degF" is not the point's unit "degC""#,
        ),
        (
            "plant.temp",
            serde_json::json!([21.5]),
            None,
            "the value is not a number, bool or string of at most 256 bytes",
        ),
        (
            "plant.pump",
            serde_json::json!("purple"),
            None,
            r#""purple" is not a member of the point's codebook (fault, off, on)"#,
        ),
        (
            "plant.pump",
            serde_json::json!(1),
            None,
            "the value is not a codebook member (a string)",
        ),
        (
            "plant.door",
            serde_json::json!("open"),
            None,
            "the value is not a bool (true or false)",
        ),
        (
            "plant.door",
            serde_json::json!(true),
            Some("V"),
            r#"the request gives the unit "V", but the point has none"#,
        ),
    ];
    for (i, (point, value, unit, reason)) in cases.into_iter().enumerate() {
        let mut core = core();
        let mut asked = request(point, "operator:alice");
        asked.command_id = format!("c-{i}");
        asked.value = value.clone();
        asked.unit = unit.map(str::to_owned);
        core.handle(T0, Input::CommandRequested(asked));
        let effects = drain(&mut core);
        let [Effect::Control { epoch: 5, events }] = effects.as_slice() else {
            panic!("{point}: one control write: {effects:?}");
        };
        let event = &events[0];
        assert_eq!(
            (&*event.point_id, &*event.principal, event.kind().as_str()),
            (point, "operator:alice", "command_refused"),
            "{point}"
        );
        let ControlDetail::CommandRefused {
            command_id,
            value: written,
            reason: why,
        } = &event.detail
        else {
            panic!("{point}: a refusal: {event:?}");
        };
        assert_eq!(why, reason, "{point} {value}");
        assert_eq!(command_id, &format!("c-{i}"));
        let kept = if value.is_array() {
            serde_json::Value::Null
        } else {
            value
        };
        assert_eq!(written, &kept);
        let payload: serde_json::Value = serde_json::from_str(&event.payload_json()).expect("JSON");
        assert_eq!(payload["reason"], serde_json::json!(reason));

        core.handle(
            T0,
            Input::ControlCommitted(ControlReport {
                events: events.clone(),
                seqs: vec![1],
            }),
        );
        let effects = drain(&mut core);
        assert!(
            !effects.iter().any(|e| matches!(e, Effect::Publish { .. })),
            "{point}: nothing is sent for a refusal: {effects:?}"
        );
        assert_eq!(
            (core.metrics().commands_refused, core.metrics().commands_issued),
            (1, 0)
        );
    }
}

#[test]
fn values_within_the_point_are_admitted() {
    for (point, value, unit) in [
        ("plant.temp", serde_json::json!(-40), Some("degC")),
        ("plant.temp", serde_json::json!(150.0), None),
        ("plant.pump", serde_json::json!("fault"), None),
        ("plant.door", serde_json::json!(false), None),
    ] {
        let mut core = core();
        let mut asked = request(point, "operator:alice");
        asked.value = value;
        asked.unit = unit.map(str::to_owned);
        core.handle(T0, Input::CommandRequested(asked));
        let effects = drain(&mut core);
        assert!(
            matches!(effects.as_slice(), [Effect::Control { events, .. }]
                if matches!(events[0].detail, ControlDetail::CommandIssued { .. })),
            "{point}: {effects:?}"
        );
    }
}

#[test]
fn requests_without_a_principal_are_only_counted() {
    let mut core = core();
    core.handle(T0, Input::CommandRequested(request("plant.pump", "")));
    assert!(drain(&mut core).is_empty());
    assert_eq!(core.metrics().commands_refused, 1);
}
