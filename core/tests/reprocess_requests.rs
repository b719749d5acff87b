//! A reprocess asked of the running core over the bus (issue 9 item 3;
//! `sentinel_core::reprocess_request`): one at a time, the job fenced on the core's epoch, the
//! projection replaced only where no newer row moved the point, no transition published.

mod common;

use common::*;
use sentinel_core::reprocess_request::{JobOutcome, ReprocessAsk, ReprocessFinished, ReprocessReply};
use sentinel_core::{CanonicalValue, Effect, Input, LogHead, Micros};

fn ask(id: &str, version: i32) -> ReprocessAsk {
    ReprocessAsk {
        request_id: id.into(),
        principal: "operator:cli".into(),
        glob: "plant.*".into(),
        from_us: 0,
        to_us: None,
        registry_version: version,
        dry_run: false,
        chunk_rows: 1_000,
    }
}

fn replies(effects: &[Effect]) -> Vec<(String, ReprocessReply)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::ReprocessReply { reply_to, payload } => Some((
                reply_to.clone(),
                serde_json::from_slice(payload).expect("a reprocess reply"),
            )),
            _ => None,
        })
        .collect()
}

fn request(core: &mut sentinel_core::Core, id: &str, version: i32) -> Vec<Effect> {
    core.handle(
        core.now(),
        Input::ReprocessRequested {
            ask: ask(id, version),
            reply_to: format!("_INBOX_operator.{id}"),
        },
    );
    drain(core)
}

/// Commits one plant.rssi reading (seq, value) ingested at `ingested_at`.
fn commit_rssi(core: &mut sentinel_core::Core, seq: u64, value: &str, ingested_at: Micros) {
    let payload = envelope("plant.rssi", "bacnet-1", seq, value, "");
    let batch = deliver_and_flush(
        core,
        vec![delivery_at(seq, "obs.plant-b.bacnet-1", &payload, ingested_at)],
    );
    core.handle(core.now(), Input::Committed(all_inserted(batch)));
    drain(core);
}

/// The log head a reprocess would read back for plant.rssi sitting on its current row, with
/// the value the new version gives that row.
fn head_of_current(core: &sentinel_core::Core, value: f64) -> LogHead {
    let mut state = core.point_state("plant.rssi").expect("point").clone();
    state.value = Some(CanonicalValue::Num(value));
    let order = state.order_key().map(|(o, i, k)| (o, i, k.clone()));
    LogHead {
        state,
        value_order: order,
    }
}

fn finish(core: &mut sentinel_core::Core, id: &str, heads: Vec<LogHead>) -> Vec<Effect> {
    core.handle(
        core.now(),
        Input::ReprocessFinished(ReprocessFinished {
            request_id: id.into(),
            outcome: JobOutcome::Done {
                heads,
                report: serde_json::json!({"rows": 1}),
            },
        }),
    );
    drain(core)
}

#[test]
fn the_job_is_fenced_on_the_core_epoch_and_a_second_request_is_busy() {
    let mut core = core();
    let effects = request(&mut core, "a", 7);
    let [Effect::Reprocess(job)] = effects.as_slice() else {
        panic!("only the job: {effects:?}");
    };
    assert_eq!((job.epoch, job.ask.request_id.as_str()), (5, "a"));

    let effects = request(&mut core, "b", 7);
    assert_eq!(
        replies(&effects),
        vec![(
            "_INBOX_operator.b".to_owned(),
            ReprocessReply::Busy {
                epoch: 5,
                running: "a".into()
            }
        )]
    );
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Reprocess(_))),
        "{effects:?}"
    );

    // Once the first answers, the asker gets its reply and the next may start.
    let effects = finish(&mut core, "a", Vec::new());
    assert!(matches!(
        replies(&effects).as_slice(),
        [(to, ReprocessReply::Done { epoch: 5, .. })] if to == "_INBOX_operator.a"
    ));
    assert!(matches!(
        request(&mut core, "b", 7).as_slice(),
        [Effect::Reprocess(_)]
    ));
}

#[test]
fn another_registry_version_is_refused_naming_both() {
    let mut core = core();
    let effects = request(&mut core, "a", 6);
    assert_eq!(
        replies(&effects),
        vec![(
            "_INBOX_operator.a".to_owned(),
            ReprocessReply::Version {
                epoch: 5,
                core_version: 7,
                asked: 6
            }
        )]
    );
}

#[test]
fn an_unmoved_point_takes_the_rebuilt_state_and_nothing_is_published() {
    let mut core = core();
    commit_rssi(&mut core, 1, "-50", T0);
    request(&mut core, "a", 7);
    let head = head_of_current(&core, -40.0);
    let effects = finish(&mut core, "a", vec![head]);
    assert!(
        !effects.iter().any(|e| matches!(e, Effect::Publish { .. })),
        "no transition for historical rows: {effects:?}"
    );
    assert!(matches!(
        replies(&effects).as_slice(),
        [(
            _,
            ReprocessReply::Done {
                points_replaced: 1,
                points_kept: 0,
                ..
            }
        )]
    ));
    let state = core.point_state("plant.rssi").expect("point");
    assert_eq!(state.value, Some(CanonicalValue::Num(-40.0)));
}

#[test]
fn a_newer_row_committed_during_the_run_wins_over_the_rebuilt_head() {
    let mut core = core();
    commit_rssi(&mut core, 1, "-50", T0);
    request(&mut core, "a", 7);
    // The run read this head after its updates...
    let head = head_of_current(&core, -40.0);
    // ...while ingest committed a newer row of the point.
    commit_rssi(&mut core, 2, "-60", T0.add_ms(10));
    let effects = finish(&mut core, "a", vec![head]);
    assert!(matches!(
        replies(&effects).as_slice(),
        [(
            _,
            ReprocessReply::Done {
                points_replaced: 0,
                points_kept: 1,
                ..
            }
        )]
    ));
    let state = core.point_state("plant.rssi").expect("point");
    assert_eq!(
        state.value,
        Some(CanonicalValue::Num(-60.0)),
        "the newer row wins"
    );
    assert_eq!(state.key.as_ref().map(|k| k.source_seq), Some(2));
}

#[test]
fn a_fenced_run_answers_and_stops_the_core() {
    let mut core = core();
    request(&mut core, "a", 7);
    core.handle(
        core.now(),
        Input::ReprocessFinished(ReprocessFinished {
            request_id: "a".into(),
            outcome: JobOutcome::Failed {
                why: "fenced".into(),
                fenced: true,
            },
        }),
    );
    let effects = drain(&mut core);
    assert!(matches!(
        replies(&effects).as_slice(),
        [(_, ReprocessReply::Failed { epoch: 5, .. })]
    ));
    assert!(
        matches!(effects.last(), Some(Effect::Exit(r)) if r.code == 4),
        "{effects:?}"
    );
}

#[test]
fn a_core_that_stops_mid_run_tells_the_asker_before_it_exits() {
    let mut core = core();
    request(&mut core, "a", 7);
    core.handle(core.now(), Input::Shutdown);
    let effects = drain(&mut core);
    assert!(matches!(
        replies(&effects).as_slice(),
        [(to, ReprocessReply::Failed { epoch: 5, .. })] if to == "_INBOX_operator.a"
    ));
    let reply_at = effects
        .iter()
        .position(|e| matches!(e, Effect::ReprocessReply { .. }));
    let exit_at = effects.iter().position(|e| matches!(e, Effect::Exit(_)));
    assert!(reply_at < exit_at, "the reply goes before the exit: {effects:?}");
}
