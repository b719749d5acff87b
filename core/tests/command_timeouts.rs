//! Timeouts and re-sends through the core's public API (issue 21 item 4): a command with no
//! answer within its wait is written as `command_timeout`; while its value is still the
//! point's desired value the same command goes out again once that event commits, each wait
//! doubled (bounded); a superseded one is no longer awaited; an answer ends the waiting; a
//! driver's hello sends its awaited commands again at once. Time is passed in.

mod common;

use common::*;
use sentinel_core::wire::{CommandOutcome, CommandReply, DRIVER_CONTRACT, DriverHello, ToDriver};
use sentinel_core::{ControlDetail, ControlEvent, ControlReport, Core, Effect, Input, Micros};

/// Asks for `value` on `plant.pump` as alice and commits the write with `command_issued` at
/// `seq`; returns nothing but leaves the command sent.
fn issue(core: &mut Core, at: Micros, command_id: &str, value: &str, seq: i64) {
    let sent = sent(&request_and_commit(core, at, command_id, value, seq));
    assert_eq!(sent.len(), 1, "the command goes out");
}

/// `(command_id, reply_to)` of every command `effects` send.
fn sent(effects: &[Effect]) -> Vec<(String, String)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::SendCommand {
                reply_to, payload, ..
            } => match serde_json::from_slice(payload) {
                Ok(ToDriver::Command(command)) => Some((command.command_id, reply_to.clone())),
                _ => None,
            },
            _ => None,
        })
        .collect()
}

/// The `command_timeout` events `effects` write.
fn timeouts(effects: &[Effect]) -> Vec<ControlEvent> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Control { events, .. } => Some(events.clone()),
            _ => None,
        })
        .flatten()
        .filter(|e| matches!(e.detail, ControlDetail::CommandTimeout { .. }))
        .collect()
}

fn detail(event: &ControlEvent) -> (String, i64, u32, bool) {
    let ControlDetail::CommandTimeout {
        command_id,
        issued_seq,
        attempt,
        resend,
    } = &event.detail
    else {
        panic!("a command_timeout: {event:?}");
    };
    (command_id.clone(), *issued_seq, *attempt, *resend)
}

fn commit(core: &mut Core, at: Micros, events: Vec<ControlEvent>, first_seq: i64) -> Vec<Effect> {
    let seqs = (first_seq..first_seq + events.len() as i64).collect();
    core.handle(at, Input::ControlCommitted(ControlReport { events, seqs }));
    drain(core)
}

fn tick(core: &mut Core, at: Micros) -> Vec<Effect> {
    core.handle(at, Input::Tick);
    drain(core)
}

#[test]
fn an_unanswered_command_times_out_and_goes_out_again_once_that_is_written() {
    let mut core = core();
    issue(&mut core, T0, "c-1", "on", 13);
    let reply_to = "_INBOX_sentinel-core.cmd.5.13".to_owned();
    // Not before its wait.
    assert!(timeouts(&tick(&mut core, T0.add_ms(9_999))).is_empty());

    let mut at = T0;
    for (seq, (attempt, wait_ms)) in (100..).zip([(1, 10_000), (2, 20_000), (3, 40_000)]) {
        at = at.add_ms(wait_ms);
        let effects = tick(&mut core, at);
        assert!(
            sent(&effects).is_empty(),
            "nothing sent before the timeout commits"
        );
        let written = timeouts(&effects);
        assert_eq!(written.len(), 1, "attempt {attempt}: {effects:?}");
        assert_eq!(detail(&written[0]), ("c-1".into(), 13, attempt, true));
        assert_eq!(
            (
                &*written[0].point_id,
                &*written[0].principal,
                written[0].core_epoch
            ),
            ("plant.pump", "core:commands", 5)
        );
        // Written: the same command, the same reply subject, again.
        let effects = commit(&mut core, at, written, seq);
        assert_eq!(sent(&effects), [("c-1".to_owned(), reply_to.clone())]);
        // The next wait is doubled: nothing one ms before it.
        assert!(timeouts(&tick(&mut core, at.add_ms(2 * wait_ms - 1))).is_empty());
    }
    let at = at.add_ms(2 * 40_000 - 1);
    assert_eq!(
        (core.metrics().commands_timed_out, core.metrics().commands_resent),
        (3, 3)
    );

    // An answer ends the waiting: no timeout after it.
    core.handle(
        at,
        Input::CommandAnswered {
            epoch: 5,
            seq: 13,
            reply: CommandReply {
                command_id: "c-1".into(),
                outcome: CommandOutcome::Applied,
                reason: None,
                highest_epoch_seen: 5,
            },
        },
    );
    drain(&mut core);
    assert!(timeouts(&tick(&mut core, at.add_ms(600_000))).is_empty());
    assert_eq!(core.commands_awaiting(), 0);
}

#[test]
fn a_superseded_command_times_out_without_going_out_again() {
    let mut core = core();
    issue(&mut core, T0, "c-1", "on", 13);
    // The same holder changes its mind: c-2 carries the desired value now.
    issue(&mut core, T0, "c-2", "off", 15);
    let written = timeouts(&tick(&mut core, T0.add_ms(10_000)));
    let mut details: Vec<_> = written.iter().map(detail).collect();
    details.sort();
    assert_eq!(
        details,
        [("c-1".into(), 13, 1, false), ("c-2".into(), 15, 1, true)]
    );
    let effects = commit(&mut core, T0.add_ms(10_000), written, 100);
    assert_eq!(
        sent(&effects),
        [("c-2".to_owned(), "_INBOX_sentinel-core.cmd.5.15".to_owned())],
        "only the command that still wins"
    );
    assert_eq!(core.commands_awaiting(), 1, "c-1 is no longer awaited");
}

#[test]
fn a_timeout_written_after_the_answer_came_sends_nothing() {
    let mut core = core();
    issue(&mut core, T0, "c-1", "on", 13);
    let written = timeouts(&tick(&mut core, T0.add_ms(10_000)));
    core.handle(
        T0.add_ms(10_001),
        Input::CommandAnswered {
            epoch: 5,
            seq: 13,
            reply: CommandReply {
                command_id: "c-1".into(),
                outcome: CommandOutcome::Applied,
                reason: None,
                highest_epoch_seen: 5,
            },
        },
    );
    drain(&mut core);
    assert!(sent(&commit(&mut core, T0.add_ms(10_002), written, 100)).is_empty());
}

#[test]
fn a_driver_that_says_hello_gets_its_awaited_commands_at_once() {
    let mut core = core();
    issue(&mut core, T0, "c-1", "on", 13);
    core.handle(
        T0.add_ms(1_000),
        Input::DriverHello {
            host: "plant-a".into(),
            hello: DriverHello {
                v: 1,
                driver_instance: "modbus-1".into(),
                source_epoch: 2,
                highest_epoch_seen: 5,
                contract: DRIVER_CONTRACT,
                core_start: None,
            },
        },
    );
    assert_eq!(
        sent(&drain(&mut core)),
        [("c-1".to_owned(), "_INBOX_sentinel-core.cmd.5.13".to_owned())]
    );
    // Another instance's hello sends nothing of plant-a's.
    core.handle(
        T0.add_ms(1_000),
        Input::DriverHello {
            host: "plant-b".into(),
            hello: DriverHello {
                v: 1,
                driver_instance: "bacnet-1".into(),
                source_epoch: 2,
                highest_epoch_seen: 5,
                contract: DRIVER_CONTRACT,
                core_start: None,
            },
        },
    );
    assert!(sent(&drain(&mut core)).is_empty());
}
