//! The outbox at restart through the core's public API (issue 21 item 3): the store hands the
//! core each point's newest unanswered `command_issued`; the core issues again, with the same
//! id, exactly those whose value is still the point's desired value — a new `command_issued`
//! under its own epoch, and the command once that commits — and awaits their answers like any
//! command's.

mod common;

use common::*;
use sentinel_core::arbitration::{Desired, DesiredRow};
use sentinel_core::registry::CommandValue;
use sentinel_core::wire::{CommandOutcome, CommandReply, ToDriver};
use sentinel_core::{ControlDetail, ControlReport, Effect, Input, IssuedCommand, Micros};

fn desired(point: &str, value: &str) -> DesiredRow {
    DesiredRow {
        point_id: point.into(),
        desired: Desired {
            value: Some(CommandValue::Member(value.into())),
            winner: None,
            since: T0,
        },
        claims: Vec::new(),
    }
}

fn unanswered(seq: i64, point: &str, id: &str, value: serde_json::Value) -> IssuedCommand {
    IssuedCommand {
        seq,
        point_id: point.into(),
        principal: "operator:alice".into(),
        command_id: id.into(),
        value,
        first_issued_at: FIRST_ISSUED,
    }
}

/// When the unanswered commands were first issued, by the core that died.
const FIRST_ISSUED: Micros = Micros(T0.0 - 60_000_000);

#[test]
fn an_unanswered_command_that_still_wins_is_sent_again_with_its_id() {
    let mut core = core();
    core.restore_desired([desired("plant.pump", "on")]);
    let resent = core.resend_unanswered([
        unanswered(13, "plant.pump", "c-1", serde_json::json!("on")),
        // The desired value moved on since: not this command's to set any more.
        unanswered(14, "plant.door", "c-2", serde_json::json!(true)),
        // A point the registry no longer holds.
        unanswered(15, "plant.gone", "c-3", serde_json::json!(1)),
    ]);
    assert_eq!(resent, 1);
    let effects = drain(&mut core);
    let [Effect::Control { epoch: 5, events }] = effects.as_slice() else {
        panic!("written before it is sent: {effects:?}");
    };
    assert_eq!(events.len(), 1);
    assert_eq!(
        (&*events[0].principal, events[0].core_epoch),
        ("operator:alice", 5)
    );
    assert_eq!(
        events[0].detail,
        ControlDetail::CommandIssued {
            command_id: "c-1".into(),
            value: serde_json::json!("on"),
            first_issued_at: Some(FIRST_ISSUED),
        },
        "the same id, issued under this core's epoch, carrying when it was first issued"
    );
    let stored =
        IssuedCommand::from_stored(40, T0, "plant.pump", "operator:alice", &events[0].payload_json())
            .expect("the re-send reads back");
    assert_eq!(
        stored.first_issued_at, FIRST_ISSUED,
        "a re-send of the re-send keeps the first issue"
    );
    core.handle(
        T0,
        Input::ControlCommitted(ControlReport {
            events: events.clone(),
            seqs: vec![40],
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
        panic!("one command: {effects:?}");
    };
    assert_eq!(subject, "cmd.plant-a.modbus-1");
    assert_eq!(
        reply_to, "_INBOX_sentinel-core.cmd.5.40",
        "answered on the subject of its new event"
    );
    let Ok(ToDriver::Command(command)) = serde_json::from_slice(payload) else {
        panic!("a command message");
    };
    assert_eq!(
        (
            command.command_id.as_str(),
            command.core_epoch,
            command.principal.as_str(),
            &command.value
        ),
        ("c-1", 5, "operator:alice", &serde_json::json!("on")),
        "the same id, stamped with this core's epoch"
    );
    assert_eq!((core.metrics().commands_resent, core.commands_awaiting()), (1, 1));

    // Its answer is written like any other.
    core.handle(
        T0,
        Input::CommandAnswered {
            epoch: 5,
            seq: 40,
            reply: CommandReply {
                command_id: "c-1".into(),
                outcome: CommandOutcome::Applied,
                reason: None,
                highest_epoch_seen: 5,
            },
        },
    );
    let effects = drain(&mut core);
    assert!(
        matches!(effects.as_slice(), [Effect::Control { events, .. }] if events[0].kind().as_str() == "command_result"),
        "{effects:?}"
    );
}

#[test]
fn a_command_for_a_value_no_longer_desired_is_not_sent_again() {
    let mut core = core();
    core.restore_desired([desired("plant.pump", "off")]);
    assert_eq!(
        core.resend_unanswered([unanswered(13, "plant.pump", "c-1", serde_json::json!("on"))]),
        0
    );
    // Nothing desired at all.
    let mut core = common::core();
    assert_eq!(
        core.resend_unanswered([unanswered(13, "plant.pump", "c-1", serde_json::json!("on"))]),
        0
    );
    assert!(drain(&mut core).is_empty());
}

#[test]
fn an_issued_command_reads_back_from_its_stored_payload() {
    // A first issue: first issued when the event occurred.
    assert_eq!(
        IssuedCommand::from_stored(
            7,
            FIRST_ISSUED,
            "plant.pump",
            "ana",
            r#"{"command_id":"c-1","value":"on"}"#
        ),
        Some(unanswered(7, "plant.pump", "c-1", serde_json::json!("on")).with_principal("ana"))
    );
    // A re-send (written later) carries its first issue on.
    let resent = format!(
        r#"{{"command_id":"c-1","value":"on","first_issued_at":"{}"}}"#,
        FIRST_ISSUED.to_rfc3339()
    );
    assert_eq!(
        IssuedCommand::from_stored(9, T0, "plant.pump", "ana", &resent),
        Some(
            IssuedCommand {
                seq: 9,
                ..unanswered(7, "plant.pump", "c-1", serde_json::json!("on"))
            }
            .with_principal("ana")
        )
    );
    // So does an open verification read back from it: rows since the first issue count.
    let open = sentinel_core::OpenVerification::from_stored(
        "plant.pump",
        (T0, &resent),
        (10, T0, r#"{"command_id":"c-1","outcome":"applied"}"#),
    )
    .expect("an open verification");
    assert_eq!(open.issued_at, FIRST_ISSUED);
    for bad in [
        "",
        "{}",
        r#"{"command_id":1,"value":"on"}"#,
        r#"{"command_id":"c"}"#,
    ] {
        assert_eq!(
            IssuedCommand::from_stored(7, T0, "p", "ana", bad),
            None,
            "{bad:?}"
        );
    }
}

trait WithPrincipal {
    fn with_principal(self, principal: &str) -> Self;
}

impl WithPrincipal for IssuedCommand {
    fn with_principal(mut self, principal: &str) -> Self {
        self.principal = principal.into();
        self
    }
}
