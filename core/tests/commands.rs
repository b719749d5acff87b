//! The command plane through the core's public API (core runtime spec, "Fencing the bus";
//! DESIGN.md §2; issue 21 items 1 and 2): a request for a writable point and a value it can
//! take becomes an operator claim, written with the `command_issued` it causes and the
//! `point_desired` row in one fenced write, and the command goes to its driver only once that
//! write is committed; any other request is written as `command_refused` with a one-line
//! reason, and nothing is sent.

mod common;

use common::*;
use sentinel_core::arbitration::{Band, Claim};
use sentinel_core::registry::CommandValue;
use sentinel_core::wire::ToDriver;
use sentinel_core::{CommandRequest, ControlDetail, ControlEvent, ControlReport, Effect, Input};

/// The events of the one arbitration write `effects` hold, and its row's desired value.
fn arbitration(effects: &[Effect]) -> (Vec<ControlEvent>, Option<CommandValue>) {
    let [
        Effect::Arbitrate {
            epoch: 5,
            events,
            desired,
        },
    ] = effects
    else {
        panic!("one arbitration write at epoch 5: {effects:?}");
    };
    (events.clone(), desired[0].desired.value.clone())
}

fn kinds(events: &[ControlEvent]) -> Vec<&'static str> {
    events.iter().map(|e| e.kind().as_str()).collect()
}

/// Commits `events` (seqs from 1) and returns the commands published for them.
fn commit(
    core: &mut sentinel_core::Core,
    events: Vec<ControlEvent>,
) -> Vec<sentinel_core::wire::CommandEnvelope> {
    let seqs = (1..=events.len() as i64).collect();
    core.handle(T0, Input::ControlCommitted(ControlReport { events, seqs }));
    drain(core)
        .into_iter()
        .filter_map(|e| match e {
            Effect::SendCommand { payload, .. } => match serde_json::from_slice(&payload) {
                Ok(ToDriver::Command(command)) => Some(command),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

fn request(point: &str, principal: &str) -> CommandRequest {
    CommandRequest {
        command_id: "c-1".into(),
        point_id: point.into(),
        value: serde_json::json!("on"),
        unit: None,
        for_s: None,
        release: false,
        principal: principal.into(),
        reply_to: None,
        band: None,
    }
}

#[test]
fn a_command_is_written_before_it_is_sent_and_carries_the_epoch() {
    let mut core = core();
    core.handle(
        T0,
        Input::CommandRequested(request("plant.pump", "operator:alice")),
    );
    let (events, desired) = arbitration(&drain(&mut core));
    assert_eq!(kinds(&events), ["claim_set", "command_issued"]);
    assert_eq!(desired, Some(CommandValue::Member("on".into())));
    for event in &events {
        assert_eq!((event.core_epoch, &*event.principal), (5, "operator:alice"));
    }
    assert!(
        matches!(&events[0].detail, ControlDetail::ClaimSet { band: Band::Operator, until: Some(until), .. }
        if *until == T0.add_ms(3_600_000)),
        "an operator claim for the default hour: {:?}",
        events[0]
    );
    assert!(
        matches!(&events[1].detail, ControlDetail::CommandIssued { command_id, .. } if command_id == "c-1")
    );
    assert_eq!(
        core.metrics().commands_issued,
        0,
        "nothing sent before the write commits"
    );

    core.handle(
        T0,
        Input::ControlCommitted(ControlReport {
            events: events.clone(),
            seqs: vec![12, 13],
        }),
    );
    let effects = drain(&mut core);
    let [
        Effect::SendCommand {
            subject,
            reply_to,
            payload,
        },
    ] = effects.as_slice()
    else {
        panic!("the command, once written: {effects:?}");
    };
    assert_eq!(subject, "cmd.plant-a.modbus-1");
    assert_eq!(
        reply_to, "_INBOX_sentinel-core.cmd.5.13",
        "answered on its own subject: this core's epoch and its command_issued seq"
    );
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

/// Issue 21's scenario in the core: an operator claim overrides an automation claim (set
/// through the test-only path, until rules exist) and its release restores the automation
/// value, with exactly one command per change of value and none for a change of winner alone.
#[test]
fn an_operator_claim_overrides_automation_and_its_release_restores_it() {
    let mut core = core();
    core.set_claim(
        T0,
        "plant.temp",
        Claim {
            holder: "rule:heat".into(),
            band: Band::Automation,
            priority: 0,
            value: CommandValue::Number(60.0),
            since: T0,
            until: None,
        },
        "auto-1",
    )
    .expect("plant.temp is writable");
    let (events, desired) = arbitration(&drain(&mut core));
    assert_eq!(desired, Some(CommandValue::Number(60.0)));
    let sent = commit(&mut core, events);
    assert_eq!(
        sent.iter().map(|c| c.value.clone()).collect::<Vec<_>>(),
        [serde_json::json!(60.0)]
    );

    let mut operator = request("plant.temp", "ana");
    operator.command_id = "op-1".into();
    operator.value = serde_json::json!(21.5);
    core.handle(T0, Input::CommandRequested(operator.clone()));
    let (events, desired) = arbitration(&drain(&mut core));
    assert_eq!(
        desired,
        Some(CommandValue::Number(21.5)),
        "the operator band wins"
    );
    assert_eq!(commit(&mut core, events).len(), 1);

    // The same value again, by another operator: a new winner, no command.
    let mut bob = operator.clone();
    bob.principal = "bob".into();
    bob.command_id = "op-2".into();
    core.handle(T0, Input::CommandRequested(bob));
    let (events, _) = arbitration(&drain(&mut core));
    assert_eq!(kinds(&events), ["claim_set"]);
    assert!(commit(&mut core, events).is_empty());

    for (who, id, after, commands) in [("bob", "op-3", 21.5, 0), ("ana", "op-4", 60.0, 1)] {
        let mut release = request("plant.temp", who);
        release.command_id = id.into();
        release.release = true;
        release.value = serde_json::Value::Null;
        core.handle(T0, Input::CommandRequested(release));
        let (events, desired) = arbitration(&drain(&mut core));
        assert_eq!(desired, Some(CommandValue::Number(after)), "{who} released");
        assert_eq!(commit(&mut core, events).len(), commands, "{who} released");
    }
    assert_eq!(
        core.desired("plant.temp")
            .and_then(|d| d.winner.as_ref())
            .map(|w| w.holder.to_string()),
        Some("rule:heat".to_owned())
    );

    // A release without a claim is refused on the record.
    let mut again = request("plant.temp", "ana");
    again.release = true;
    core.handle(T0, Input::CommandRequested(again));
    let effects = drain(&mut core);
    let [Effect::Control { events, .. }] = effects.as_slice() else {
        panic!("a refusal: {effects:?}");
    };
    assert!(
        matches!(&events[0].detail, ControlDetail::CommandRefused { reason, .. }
        if reason == "\"ana\" holds no claim on point \"plant.temp\""),
        "{:?}",
        events[0]
    );
}

/// An operator claim lapses after its duration and the point goes back to its relinquish
/// default (plant.temp: 20), one command.
#[test]
fn an_operator_claim_lapses_after_its_duration() {
    let mut core = core();
    let mut short = request("plant.temp", "ana");
    short.value = serde_json::json!(25);
    short.for_s = Some(60);
    core.handle(T0, Input::CommandRequested(short));
    let (events, _) = arbitration(&drain(&mut core));
    commit(&mut core, events);
    let arbitrations = |core: &mut sentinel_core::Core| -> Vec<Effect> {
        drain(core)
            .into_iter()
            .filter(|e| matches!(e, Effect::Arbitrate { .. }))
            .collect()
    };
    core.handle(T0.add_ms(59_999), Input::Tick);
    assert!(arbitrations(&mut core).is_empty(), "not lapsed yet");
    assert!(
        core.next_deadline().is_some_and(|at| at <= T0.add_ms(60_000)),
        "the core wakes for it"
    );
    core.handle(T0.add_ms(60_000), Input::Tick);
    let (events, desired) = arbitration(&arbitrations(&mut core));
    assert_eq!(kinds(&events), ["claim_released", "command_issued"]);
    assert_eq!(desired, Some(CommandValue::Number(20.0)));
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
            !effects
                .iter()
                .any(|e| matches!(e, Effect::Publish { .. } | Effect::SendCommand { .. })),
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
        let (events, _) = arbitration(&drain(&mut core));
        assert_eq!(kinds(&events), ["claim_set", "command_issued"], "{point}");
    }
}

#[test]
fn requests_without_a_principal_are_only_counted() {
    let mut core = core();
    core.handle(T0, Input::CommandRequested(request("plant.pump", "")));
    assert!(drain(&mut core).is_empty());
    assert_eq!(core.metrics().commands_refused, 1);
}

/// The answer a request's asker gets (issue 21 item 10), from the effects.
fn answers(effects: &[Effect]) -> Vec<(String, sentinel_core::control::RequestAnswer)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::RequestAnswer { reply_to, payload } => Some((
                reply_to.clone(),
                serde_json::from_slice(payload).expect("an answer"),
            )),
            _ => None,
        })
        .collect()
}

/// A request with a reply subject is answered once its event commits: `accepted` for its
/// claim, `refused` with the recorded reason; one that cannot be recorded is refused at once;
/// a request without a reply subject gets nothing. A request's band (never from the bus) makes
/// an automation claim the operator's overrides.
#[test]
fn requests_are_answered_once_their_event_commits() {
    use sentinel_core::control::RequestAnswer;
    let mut core = core();
    let mut auto = request("plant.temp", "rule-test");
    auto.command_id = "a-1".into();
    auto.value = serde_json::json!(60);
    auto.band = Some(Band::Automation);
    auto.reply_to = Some("_INBOX_rule-test.1".into());
    core.handle(T0, Input::CommandRequested(auto));
    let (events, _) = arbitration(&drain(&mut core));
    assert!(
        matches!(
            &events[0].detail,
            ControlDetail::ClaimSet {
                band: Band::Automation,
                ..
            }
        ),
        "{:?}",
        events[0]
    );
    core.handle(
        T0,
        Input::ControlCommitted(ControlReport {
            events,
            seqs: vec![7, 8],
        }),
    );
    assert_eq!(
        answers(&drain(&mut core)),
        [(
            "_INBOX_rule-test.1".to_owned(),
            RequestAnswer {
                command_id: "a-1".into(),
                outcome: "accepted".into(),
                reason: None,
                seq: Some(7),
            }
        )]
    );

    let mut op = request("plant.temp", "ana");
    op.command_id = "op-1".into();
    op.value = serde_json::json!(21);
    op.reply_to = Some("_INBOX_ana.1".into());
    core.handle(T0, Input::CommandRequested(op));
    let (events, desired) = arbitration(&drain(&mut core));
    assert_eq!(desired, Some(CommandValue::Number(21.0)), "the operator wins");
    commit(&mut core, events);

    let mut refused = request("plant.flow", "ana");
    refused.command_id = "op-2".into();
    refused.reply_to = Some("_INBOX_ana.2".into());
    core.handle(T0, Input::CommandRequested(refused));
    let effects = drain(&mut core);
    assert!(answers(&effects).is_empty(), "not before its event commits");
    let [Effect::Control { events, .. }] = effects.as_slice() else {
        panic!("a refusal: {effects:?}");
    };
    core.handle(
        T0,
        Input::ControlCommitted(ControlReport {
            events: events.clone(),
            seqs: vec![11],
        }),
    );
    assert_eq!(
        answers(&drain(&mut core)),
        [(
            "_INBOX_ana.2".to_owned(),
            RequestAnswer {
                command_id: "op-2".into(),
                outcome: "refused".into(),
                reason: Some("point \"plant.flow\" is not in registry version 7".into()),
                seq: Some(11),
            }
        )]
    );

    let mut nameless = request("plant.temp", "ana");
    nameless.command_id = String::new();
    nameless.reply_to = Some("_INBOX_ana.3".into());
    core.handle(T0, Input::CommandRequested(nameless));
    let answered = answers(&drain(&mut core));
    assert_eq!(
        answered[0].1.reason.as_deref(),
        Some(
            "a request needs a command id of 1 to 128 bytes, a principal of 1 to 256 bytes and a point id of at most 128 bytes"
        )
    );
    assert_eq!(answered[0].1.outcome, "refused");
}
