//! Drivers' answers to commands through the core's public API (issue 21 item 4): each command
//! goes out with its own reply subject (this core's epoch and its `command_issued` seq); an
//! answer on it that names the command is written as a `command_result` control event, fenced
//! like every control write, with a rejection's reason from the closed vocabulary; any other
//! answer is only counted; a driver whose hello speaks a contract that cannot reply awaits
//! none.

mod common;

use common::*;
use sentinel_core::wire::{
    CommandOutcome, CommandReply, DRIVER_CONTRACT, DriverHello, command_reply_subject,
    parse_command_reply_subject,
};
use sentinel_core::{ControlDetail, ControlEvent, Core, Effect, Input};

/// Asks for `value` on `plant.pump` (host `plant-a`, instance `modbus-1`) as `principal`,
/// commits the arbitration write with its `command_issued` at `seq`, and returns the reply
/// subject the command went out with.
fn issue(core: &mut Core, command_id: &str, value: &str, seq: i64) -> String {
    let effects = request_and_commit(core, T0, command_id, value, seq);
    let [Effect::SendCommand { reply_to, .. }] = effects.as_slice() else {
        panic!("one command: {effects:?}");
    };
    reply_to.clone()
}

fn reply(command_id: &str, outcome: CommandOutcome, reason: Option<&str>) -> CommandReply {
    CommandReply {
        command_id: command_id.into(),
        outcome,
        reason: reason.map(str::to_owned),
        highest_epoch_seen: 5,
    }
}

fn answer(core: &mut Core, epoch: u32, seq: i64, reply: CommandReply) -> Vec<Effect> {
    core.handle(T0, Input::CommandAnswered { epoch, seq, reply });
    drain(core)
}

/// The one `command_result` event `effects` write, at epoch 5.
fn result(effects: &[Effect]) -> ControlEvent {
    let [Effect::Control { epoch: 5, events }] = effects else {
        panic!("one control write at epoch 5: {effects:?}");
    };
    let [event] = events.as_slice() else {
        panic!("one event: {events:?}");
    };
    assert_eq!(event.kind().as_str(), "command_result");
    event.clone()
}

fn hello(contract: u32) -> Input {
    Input::DriverHello {
        host: "plant-a".into(),
        hello: DriverHello {
            v: 1,
            driver_instance: "modbus-1".into(),
            source_epoch: 1,
            highest_epoch_seen: 5,
            contract,
            core_start: None,
        },
    }
}

#[test]
fn an_answer_is_written_as_a_command_result_once() {
    let mut core = core();
    let reply_to = issue(&mut core, "c-1", "on", 13);
    assert_eq!(reply_to, command_reply_subject(5, 13));
    assert_eq!(parse_command_reply_subject(&reply_to), Some((5, 13)));
    assert_eq!(core.commands_awaiting(), 1);

    let event = result(&answer(
        &mut core,
        5,
        13,
        reply("c-1", CommandOutcome::Applied, None),
    ));
    assert_eq!(
        (&*event.point_id, &*event.principal, event.core_epoch),
        ("plant.pump", "driver-plant-a", 5),
        "on the point's record, in the name of the driver host that answered"
    );
    assert_eq!(
        event.detail,
        ControlDetail::CommandResult {
            command_id: "c-1".into(),
            outcome: CommandOutcome::Applied,
            reason: None,
        }
    );
    let payload: serde_json::Value = serde_json::from_str(&event.payload_json()).expect("JSON");
    assert_eq!(
        payload,
        serde_json::json!({"command_id": "c-1", "outcome": "applied", "reason": null})
    );
    assert_eq!(core.commands_awaiting(), 0);

    // The same answer again (a driver's retry, a duplicate on the bus) is not written twice.
    assert!(answer(&mut core, 5, 13, reply("c-1", CommandOutcome::Applied, None)).is_empty());
    assert_eq!(
        (
            core.metrics().command_results,
            core.metrics().command_answers_ignored
        ),
        (1, 1)
    );
}

#[test]
fn answers_that_are_not_for_a_command_this_core_awaits_are_only_counted() {
    let mut core = core();
    issue(&mut core, "c-1", "on", 13);
    for (epoch, seq, command_id) in [
        // Another core's command (a takeover: both subscribe below the core's inbox).
        (4, 13, "c-1"),
        // A command this core never sent.
        (5, 14, "c-1"),
        // The right subject naming another command: a driver host answering for another's.
        (5, 13, "c-2"),
    ] {
        let effects = answer(
            &mut core,
            epoch,
            seq,
            reply(command_id, CommandOutcome::Applied, None),
        );
        assert!(
            effects.is_empty(),
            "{epoch}/{seq}/{command_id}: nothing written: {effects:?}"
        );
    }
    assert_eq!(core.metrics().command_answers_ignored, 3);
    // None of them took the real answer's place.
    assert_eq!(core.commands_awaiting(), 1);
    result(&answer(
        &mut core,
        5,
        13,
        reply("c-1", CommandOutcome::Applied, None),
    ));
}

#[test]
fn a_rejection_is_written_with_its_reason_from_the_vocabulary_only() {
    let mut core = core();
    issue(&mut core, "c-1", "on", 13);
    issue(&mut core, "c-2", "off", 15);
    issue(&mut core, "c-3", "on", 17);
    let cases = [
        (13, "c-1", Some("device_error"), Some("device_error")),
        (15, "c-2", Some("out_of_range"), Some("out_of_range")),
        // A driver's own words never reach the log.
        (17, "c-3", Some("the relay said <no>"), Some("unrecognised")),
    ];
    for (seq, command_id, given, recorded) in cases {
        let event = result(&answer(
            &mut core,
            5,
            seq,
            reply(command_id, CommandOutcome::Rejected, given),
        ));
        assert_eq!(
            event.detail,
            ControlDetail::CommandResult {
                command_id: command_id.into(),
                outcome: CommandOutcome::Rejected,
                reason: recorded,
            }
        );
    }
}

#[test]
fn a_driver_whose_contract_cannot_reply_is_marked_and_awaits_no_answer() {
    let mut core = core();
    core.handle(T0, hello(1));
    drain(&mut core);
    assert!(core.driver_is_mute("plant-a", "modbus-1"));
    assert_eq!(core.metrics().driver_hellos_mute, 1);
    issue(&mut core, "c-1", "on", 13);
    assert_eq!(core.commands_awaiting(), 0, "no answer is awaited from it");
    assert!(answer(&mut core, 5, 13, reply("c-1", CommandOutcome::Accepted, None)).is_empty());

    // The instance restarts speaking the contract that replies.
    core.handle(T0, hello(DRIVER_CONTRACT));
    drain(&mut core);
    assert!(!core.driver_is_mute("plant-a", "modbus-1"));
    issue(&mut core, "c-2", "off", 15);
    assert_eq!(core.commands_awaiting(), 1);
}

/// A hello without `contract` is from a driver that predates replies.
#[test]
fn a_hello_without_a_contract_is_contract_one() {
    let hello: DriverHello = serde_json::from_str(
        r#"{"v":1,"driver_instance":"modbus-1","source_epoch":2,"highest_epoch_seen":5}"#,
    )
    .expect("an old hello decodes");
    assert_eq!(hello.contract, 1);
}

/// A `stale_epoch` answer is a claim that this core was replaced: the core asks the store
/// (one check at a time) before writing it, and stops with the fenced code only if a newer
/// epoch is recorded; otherwise the answers are written, counted as suspicious, and the core
/// runs on. A store that does not answer decides nothing: the answers are written (a replaced
/// core's write is fenced).
#[test]
fn a_stale_epoch_answer_is_checked_against_the_store_before_it_is_written() {
    let stale = |id: &str| reply(id, CommandOutcome::Rejected, Some("stale_epoch"));
    for (recorded, replaced) in [(Some(6), true), (Some(5), false), (None, false)] {
        let mut core = core();
        issue(&mut core, "c-1", "on", 13);
        issue(&mut core, "c-2", "off", 15);
        let effects = answer(&mut core, 5, 13, stale("c-1"));
        assert!(
            matches!(effects.as_slice(), [Effect::CheckEpoch]),
            "the store asked first: {effects:?}"
        );
        // A second claim while the first is being checked asks nothing more.
        assert!(answer(&mut core, 5, 15, stale("c-2")).is_empty());

        core.handle(T0, Input::EpochRecorded { epoch: recorded });
        let effects = drain(&mut core);
        assert_eq!(core.has_exited(), replaced, "recorded {recorded:?}");
        if replaced {
            assert!(
                matches!(effects.as_slice(), [Effect::Exit(reason)] if reason.code == 4),
                "the fenced exit, nothing written: {effects:?}"
            );
        } else {
            let [Effect::Control { epoch: 5, events }] = effects.as_slice() else {
                panic!("both answers written: {effects:?}");
            };
            let written: Vec<_> = events.iter().map(|e| e.detail.clone()).collect();
            assert_eq!(
                written,
                ["c-1", "c-2"].map(|id| ControlDetail::CommandResult {
                    command_id: id.into(),
                    outcome: CommandOutcome::Rejected,
                    reason: Some("stale_epoch"),
                })
            );
        }
        assert_eq!(
            core.metrics().stale_epoch_suspicious,
            if recorded == Some(5) { 2 } else { 0 },
            "recorded {recorded:?}"
        );
    }
}
