//! Issue 25 item 3 through the core's public API: a driver's hello carrying an epoch above the
//! core's (the epoch repeated after a database failover that lost its last commits, or a newer
//! core exists) makes the core ask the store to raise the recorded epoch past it, once; nothing
//! goes to the drivers until the store answers; raised, the core exits with
//! `ExitReason::EPOCH_RAISED` so its supervisor starts a core above every epoch the drivers have
//! seen; refused by the fence, it exits fenced.

mod common;

use common::*;
use sentinel_core::wire::{DRIVER_CONTRACT, DriverHello};
use sentinel_core::{Core, Effect, EpochRaise, ExitReason, Input};

fn hello(highest_epoch_seen: u32) -> Input {
    Input::DriverHello {
        host: "plant-a".into(),
        hello: DriverHello {
            v: 1,
            driver_instance: "modbus-1".into(),
            source_epoch: 1,
            highest_epoch_seen,
            contract: DRIVER_CONTRACT,
            core_start: None,
        },
    }
}

/// A core of epoch 5 that heard a hello of epoch 11.
fn raising() -> Core {
    let mut core = core();
    core.handle(T0, hello(11));
    assert_eq!(drain(&mut core), [Effect::RaiseEpoch { epoch: 5, floor: 11 }]);
    core
}

#[test]
fn a_hello_ahead_asks_for_the_raise_once_and_withholds_commands_until_the_answer() {
    let mut core = raising();
    core.handle(T0, hello(12));
    assert!(drain(&mut core).is_empty(), "asked once");

    // A command asked meanwhile is committed as issued but not sent: the next core's outbox
    // sends it under an epoch the drivers accept.
    let effects = request_and_commit(&mut core, T0, "c-1", "on", 13);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::SendCommand { .. })),
        "{effects:?}"
    );
    assert_eq!(core.metrics().commands_withheld, 1);
    // A hello behind would get the announcement again and the awaited command re-sent; not
    // while raising.
    core.handle(T0, hello(4));
    assert!(drain(&mut core).is_empty());
    assert_eq!(core.metrics().commands_withheld, 3);

    core.handle(T0, Input::EpochRaised(EpochRaise::Raised { epoch: 11 }));
    assert_eq!(drain(&mut core), [Effect::Exit(ExitReason::EPOCH_RAISED)]);
    assert_eq!(ExitReason::EPOCH_RAISED.code, 7);
    assert!(core.has_exited());
}

#[test]
fn a_raise_the_fence_refuses_is_a_fenced_exit_and_one_that_fails_an_unknown_outcome() {
    let mut core = raising();
    core.handle(T0, Input::EpochRaised(EpochRaise::Fenced));
    assert_eq!(drain(&mut core), [Effect::Exit(ExitReason::FENCED)]);

    let mut core = raising();
    core.handle(T0, Input::EpochRaised(EpochRaise::Failed));
    assert_eq!(drain(&mut core), [Effect::Exit(ExitReason::COMMIT_FAILED)]);
}

#[test]
fn hellos_at_or_below_the_epoch_ask_for_nothing() {
    let mut core = core();
    for seen in [5, 4, 0] {
        core.handle(T0, hello(seen));
    }
    let effects = drain(&mut core);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::RaiseEpoch { .. })),
        "{effects:?}"
    );
    assert_eq!(core.metrics().driver_hellos_ahead, 0);
}

/// The equal-epoch gap (issue 25 item 3): after a failover that lost epoch 5's `core_start`
/// row, this core took 5 again. Its commands carry its start identity; a hello at 5 echoing
/// the lost core's identity asks the store for epoch 6, and nothing is sent meanwhile.
#[test]
fn a_hello_at_this_epoch_from_another_start_raises_past_it_before_any_command() {
    let mut core = core();
    core.set_core_start(41);
    assert_eq!(core.core_start(), Some(41));
    let effects = request_and_commit(&mut core, T0, "c-1", "on", 13);
    let sent: Vec<_> = effects
        .iter()
        .filter_map(|e| match e {
            Effect::SendCommand { payload, .. } => Some(payload.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        sent,
        [bytes::Bytes::from_static(
            br#"{"kind":"command","v":1,"command_id":"c-1","core_epoch":5,"point_id":"plant.pump","value":"on","principal":"operator:alice","core_start":41}"#
        )],
        "the command carries this start's identity"
    );
    let at_five = |core_start| Input::DriverHello {
        host: "plant-a".into(),
        hello: DriverHello {
            v: 1,
            driver_instance: "modbus-1".into(),
            source_epoch: 1,
            highest_epoch_seen: 5,
            contract: DRIVER_CONTRACT,
            core_start,
        },
    };
    core.handle(T0, at_five(Some(41)));
    assert!(
        !drain(&mut core)
            .iter()
            .any(|e| matches!(e, Effect::RaiseEpoch { .. })),
        "its own identity echoed: current"
    );
    core.handle(T0, at_five(Some(40)));
    assert_eq!(drain(&mut core), [Effect::RaiseEpoch { epoch: 5, floor: 6 }]);
    let effects = request_and_commit(&mut core, T0, "c-2", "off", 16);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::SendCommand { .. })),
        "nothing sent while the epoch is raised: {effects:?}"
    );
    core.handle(T0, Input::EpochRaised(EpochRaise::Raised { epoch: 6 }));
    assert_eq!(drain(&mut core), [Effect::Exit(ExitReason::EPOCH_RAISED)]);
}
