//! The command plane's counters (issue 26 item 1, "commands by outcome"): what the pure core
//! counts for `sentinel_commands_total` and `sentinel_claims_total`, driven through the public
//! API only, so the counters follow the decisions and nothing is counted twice.

mod common;

use common::*;
use sentinel_core::metrics::CLAIM_OUTCOMES;
use sentinel_core::{CommandRequest, ControlReport, Effect, Input};

fn request(command_id: &str, principal: &str, value: serde_json::Value) -> CommandRequest {
    CommandRequest {
        command_id: command_id.into(),
        point_id: "plant.temp".into(),
        value,
        unit: None,
        for_s: None,
        release: false,
        principal: principal.into(),
        reply_to: None,
        band: None,
    }
}

/// Commits every event of the arbitration writes in `effects`.
fn commit_all(core: &mut sentinel_core::Core, now: sentinel_core::Micros, effects: Vec<Effect>) {
    for effect in effects {
        if let Effect::Arbitrate { events, .. } = effect {
            let seqs = (1..=events.len() as i64).collect();
            core.handle(now, Input::ControlCommitted(ControlReport { events, seqs }));
        }
    }
}

fn claims(core: &sentinel_core::Core) -> Vec<(&'static str, u64)> {
    CLAIM_OUTCOMES
        .iter()
        .copied()
        .zip(core.metrics().claims)
        .collect()
}

#[test]
fn claims_and_commands_are_counted_by_outcome() {
    let mut core = core();
    // ana claims (a command), bob claims the same value (no command), bob releases (none).
    core.handle(
        T0,
        Input::CommandRequested(request("c-1", "ana", serde_json::json!(25))),
    );
    let effects = drain(&mut core);
    commit_all(&mut core, T0, effects);
    core.handle(
        T0,
        Input::CommandRequested(request("c-2", "bob", serde_json::json!(25))),
    );
    let effects = drain(&mut core);
    commit_all(&mut core, T0, effects);
    let mut release = request("c-3", "bob", serde_json::Value::Null);
    release.release = true;
    core.handle(T0, Input::CommandRequested(release));
    let effects = drain(&mut core);
    commit_all(&mut core, T0, effects);
    assert_eq!(claims(&core), [("set", 2), ("released", 1), ("expired", 0)]);
    assert_eq!(
        (core.metrics().commands_issued, core.metrics().commands_refused),
        (1, 0)
    );

    // A refusal (a value outside the range) is a refused command and no claim.
    core.handle(
        T0,
        Input::CommandRequested(request("c-4", "ana", serde_json::json!(1e9))),
    );
    drain(&mut core);
    // ana's claim for a minute lapses: expired, and the point goes to its relinquish default.
    let mut short = request("c-5", "ana", serde_json::json!(30));
    short.for_s = Some(60);
    core.handle(T0, Input::CommandRequested(short));
    let effects = drain(&mut core);
    commit_all(&mut core, T0, effects);
    core.handle(T0.add_ms(60_000), Input::Tick);
    let effects = drain(&mut core);
    commit_all(&mut core, T0.add_ms(60_000), effects);
    assert_eq!(claims(&core), [("set", 3), ("released", 1), ("expired", 1)]);
    assert_eq!(
        (core.metrics().commands_issued, core.metrics().commands_refused),
        (3, 1),
        "ana's 25, ana's 30, the relinquish default"
    );
}
