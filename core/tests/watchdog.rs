//! The freshness watchdog through the core's public API (core runtime spec, "A slow core must
//! not look like a dead fleet", "Draining"; ingest spec, "Two logs": quality transitions from
//! the watchdog go in `control_event`).

mod common;

use common::*;
use sentinel_core::{
    ControlDetail, ControlKind, ControlReport, Core, Effect, GapReason, Input, LogHead, Micros, ObsKey,
    PointState, Quality, RestoredState,
};

const A: &str = "obs.plant-a.modbus-1";
/// `Descriptor::new`'s freshness, which the fixture registry keeps.
const FRESHNESS_MS: i64 = 60_000;
const GRACE_MS: i64 = 60_000;

fn temp_at(seq: u64, value: &str, observed: Micros, ingested: Micros) -> sentinel_core::Delivery {
    let payload = format!(
        r#"{{"v":1,"point_id":"plant.temp","driver_instance":"modbus-1","source_epoch":1,"source_seq":{seq},"observed_at":"{}","value":{value}}}"#,
        observed.to_rfc3339()
    );
    delivery_at(seq, A, &payload, ingested)
}

/// The consumer reports no lag: the watchdog may fire once the grace has passed.
fn no_lag(core: &mut Core, now: Micros) {
    core.handle(
        now,
        Input::Lag {
            pending: 0,
            ack_pending: 0,
            oldest_unacked_age_ms: None,
        },
    );
}

/// Delivers, commits everything, and returns the effects of the commit.
fn ingest(core: &mut Core, delivery: sentinel_core::Delivery) -> Vec<Effect> {
    let batch = deliver_and_flush(core, vec![delivery]);
    let now = core.now();
    core.handle(now, Input::Committed(all_inserted(batch)));
    drain(core)
}

fn controls(effects: &[Effect]) -> Vec<sentinel_core::ControlEvent> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Control { events, .. } => Some(events.clone()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn published(effects: &[Effect]) -> Vec<serde_json::Value> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Publish { payload, .. } => Some(serde_json::from_slice(payload).expect("JSON")),
            _ => None,
        })
        .collect()
}

/// A core of epoch 6 started at T0 over a log whose only head says `plant.temp` was live an
/// hour ago (a restart after an outage).
fn restarted_after_an_hour() -> Core {
    let an_hour_ago = T0.add_ms(-3_600_000);
    let head = PointState {
        observed_at: Some(an_hour_ago),
        ingested_at: Some(an_hour_ago),
        key: Some(ObsKey {
            driver_instance: "modbus-1".into(),
            source_epoch: 1,
            source_seq: 1,
        }),
        quality: Quality::Live,
        ..PointState::unknown("plant.temp".into(), an_hour_ago)
    };
    let restored = RestoredState {
        checkpoints: vec![],
        log_heads: vec![LogHead {
            state: head,
            value_order: None,
        }],
    };
    Core::new(watchdog_config(), registry(), 6, &restored, T0).expect("core")
}

#[test]
fn an_expired_deadline_writes_a_control_event_before_the_point_goes_stale() {
    let mut core = core_with(watchdog_config());
    no_lag(&mut core, T0);
    ingest(&mut core, temp_at(1, "71.6", T0, T0));
    assert_eq!(
        core.point_state("plant.temp").expect("point").quality,
        Quality::Live
    );
    assert_eq!(
        core.next_deadline(),
        Some(T0.add_ms(FRESHNESS_MS)),
        "the deadline is armed"
    );

    let expired_at = T0.add_ms(FRESHNESS_MS + 1);
    core.handle(expired_at, Input::Tick);
    let effects = drain(&mut core);
    let events = controls(&effects);
    assert_eq!(events.len(), 1, "{effects:?}");
    let event = &events[0];
    assert_eq!(event.kind(), ControlKind::QualityChanged);
    assert_eq!(event.core_epoch, 5, "stamped with the writer's epoch");
    assert!(matches!(
        event.detail,
        ControlDetail::QualityChanged {
            from: Quality::Live,
            to: Quality::Stale,
            reason: GapReason::Freshness,
            ..
        }
    ));
    assert!(
        event.payload_json().contains(r#""reason":"freshness""#),
        "the typed reason's stable string form is what the log stores"
    );
    assert!(
        published(&effects).is_empty(),
        "nothing is published before the event commits"
    );
    assert_eq!(
        core.point_state("plant.temp").expect("point").quality,
        Quality::Live,
        "nor does the projection move"
    );

    core.handle(
        expired_at,
        Input::ControlCommitted(ControlReport {
            events,
            seqs: vec![41],
        }),
    );
    let effects = drain(&mut core);
    let transitions = published(&effects);
    assert_eq!(transitions.len(), 1);
    assert_eq!(transitions[0]["quality"], "stale");
    assert_eq!(
        transitions[0]["control_seq"], 41,
        "identified by the control event"
    );
    assert!(transitions[0].get("key").is_none());
    assert_eq!(
        transitions[0]["value"], 22.0,
        "a degraded quality never nulls the value"
    );
    let state = core.point_state("plant.temp").expect("point");
    assert_eq!((state.quality, state.watermark_seq), (Quality::Stale, Some(41)));
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::Checkpoint { states, .. } if states[0].quality == Quality::Stale)),
        "the quality change is checkpointed at once"
    );
}

#[test]
fn high_lag_suppresses_staleness_until_it_clears() {
    let mut core = core_with(watchdog_config());
    ingest(&mut core, temp_at(1, "71.6", T0, T0));
    core.handle(
        T0.add_ms(1_000),
        Input::Lag {
            pending: 1_000_000,
            ack_pending: 0,
            oldest_unacked_age_ms: Some(600_000),
        },
    );
    assert!(core.staleness_suppressed());
    core.handle(T0.add_ms(10 * FRESHNESS_MS), Input::Tick);
    assert!(
        controls(&drain(&mut core)).is_empty(),
        "no staleness cascade while lag is high"
    );
    assert_eq!(
        core.point_state("plant.temp").expect("point").quality,
        Quality::Live
    );

    core.handle(
        T0.add_ms(10 * FRESHNESS_MS + 1),
        Input::Lag {
            pending: 0,
            ack_pending: 0,
            oldest_unacked_age_ms: None,
        },
    );
    assert_eq!(
        controls(&drain(&mut core)).len(),
        1,
        "the held-back expiry fires once lag clears"
    );
}

/// Issue 26 (tests/drain.rs flaked): the messages the consumer delivered and the core has not
/// yet committed and acked are backlog too. With few left to deliver but a full in-flight
/// window, the lag is still high and staleness stays suppressed; once the in-flight messages
/// are committed, the held-back expiry fires.
#[test]
fn delivered_but_uncommitted_messages_keep_staleness_suppressed() {
    let config = watchdog_config();
    let bound = config.lag_high_pending;
    let mut core = core_with(config);
    ingest(&mut core, temp_at(1, "71.6", T0, T0));
    core.handle(
        T0.add_ms(1_000),
        Input::Lag {
            pending: 1,
            ack_pending: bound - 1,
            oldest_unacked_age_ms: Some(0),
        },
    );
    assert!(
        core.staleness_suppressed(),
        "pending {} + in flight {} reach the bound {bound}",
        1,
        bound - 1
    );
    core.handle(T0.add_ms(10 * FRESHNESS_MS), Input::Tick);
    assert!(
        controls(&drain(&mut core)).is_empty(),
        "no staleness while the in-flight backlog is uncommitted"
    );
    core.handle(
        T0.add_ms(10 * FRESHNESS_MS + 1),
        Input::Lag {
            pending: 1,
            ack_pending: bound - 2,
            oldest_unacked_age_ms: Some(0),
        },
    );
    assert!(!core.staleness_suppressed(), "one below the bound is not high");
    assert_eq!(controls(&drain(&mut core)).len(), 1, "the held-back expiry fires");
}

#[test]
fn replayed_observations_do_not_make_a_point_live_and_current_data_does() {
    // A restart after an outage: the point was live an hour ago.
    let mut core = restarted_after_an_hour();
    assert_eq!(core.rehydrate_timers(), 1);
    drain(&mut core);
    assert_eq!(
        core.point_state("plant.temp").expect("point").quality,
        Quality::Restored
    );

    // The backlog: observed 50 minutes ago, delivered now.
    let effects = ingest(
        &mut core,
        temp_at(2, "72.0", T0.add_ms(-3_000_000), T0.add_ms(-3_000_000)),
    );
    let state = core.point_state("plant.temp").expect("point");
    assert_eq!(
        state.observed_at,
        Some(T0.add_ms(-3_000_000)),
        "the value and time move"
    );
    assert_eq!(
        state.quality,
        Quality::Restored,
        "but a replayed reading does not make it live"
    );
    assert!(published(&effects).iter().all(|t| t["quality"] != "live"));

    // Genuinely current data does.
    ingest(&mut core, temp_at(3, "72.5", T0.add_ms(-500), T0));
    assert_eq!(
        core.point_state("plant.temp").expect("point").quality,
        Quality::Live
    );
}

#[test]
fn the_startup_grace_holds_restored_points_back() {
    let mut core = restarted_after_an_hour();
    core.rehydrate_timers();
    no_lag(&mut core, T0);
    drain(&mut core);
    core.handle(T0.add_ms(GRACE_MS - 1), Input::Tick);
    assert!(controls(&drain(&mut core)).is_empty(), "within the grace");
    assert_eq!(
        core.next_deadline(),
        Some(T0.add_ms(GRACE_MS)),
        "wakes when the grace ends"
    );
    core.handle(T0.add_ms(GRACE_MS), Input::Tick);
    let events = controls(&drain(&mut core));
    assert_eq!(events.len(), 1);
    assert!(matches!(
        events[0].detail,
        ControlDetail::QualityChanged {
            from: Quality::Restored,
            to: Quality::Stale,
            ..
        }
    ));
}

#[test]
fn a_row_that_lands_while_the_event_is_at_the_store_supersedes_it() {
    let mut core = core_with(watchdog_config());
    no_lag(&mut core, T0);
    ingest(&mut core, temp_at(1, "71.6", T0, T0));
    let expired_at = T0.add_ms(FRESHNESS_MS + 1);
    core.handle(expired_at, Input::Tick);
    let events = controls(&drain(&mut core));
    assert_eq!(events.len(), 1);
    // Fresh data commits before the control write answers.
    ingest(&mut core, temp_at(2, "72.0", expired_at, expired_at));
    core.handle(
        expired_at.add_ms(200),
        Input::ControlCommitted(ControlReport {
            events,
            seqs: vec![7],
        }),
    );
    let effects = drain(&mut core);
    assert!(published(&effects).is_empty(), "{effects:?}");
    let state = core.point_state("plant.temp").expect("point");
    assert_eq!((state.quality, state.watermark_seq), (Quality::Live, Some(7)));
}

#[test]
fn no_staleness_before_the_first_lag_reading() {
    let mut core = core_with(watchdog_config());
    ingest(&mut core, temp_at(1, "71.6", T0, T0));
    core.handle(T0.add_ms(10 * FRESHNESS_MS), Input::Tick);
    assert!(
        controls(&drain(&mut core)).is_empty(),
        "lag unknown: maybe draining a backlog"
    );
    no_lag(&mut core, T0.add_ms(10 * FRESHNESS_MS));
    assert_eq!(controls(&drain(&mut core)).len(), 1);
}

#[test]
fn a_failed_control_write_exits_like_a_failed_commit() {
    let mut core = core_with(watchdog_config());
    core.handle(T0, Input::ControlFailed { fenced: true });
    let effects = drain(&mut core);
    assert!(
        matches!(effects.as_slice(), [Effect::Exit(r)] if r.code == 4),
        "{effects:?}"
    );
}

/// Ingests a good reading observed at T0+1 s, then lets its deadline pass: the expiry's
/// `quality_changed` event is handed to the store and not yet answered. Returns it.
fn live_then_expired(core: &mut Core) -> sentinel_core::ControlEvent {
    no_lag(core, T0);
    ingest(core, temp_at(1, "71.6", T0.add_ms(1_000), T0));
    core.handle(T0.add_ms(FRESHNESS_MS + 2_000), Input::Tick);
    let events = controls(&drain(core));
    assert_eq!(events.len(), 1, "the expiry's event");
    events.into_iter().next().expect("one event")
}

#[test]
fn a_point_whose_event_is_at_the_store_gets_no_second_one() {
    let mut core = core_with(watchdog_config());
    live_then_expired(&mut core);
    // A late row (observed before the latest) commits meanwhile: it arms the same deadline,
    // which has passed, so the next tick finds it expired again.
    let now = core.now();
    let effects = ingest(&mut core, temp_at(2, "71.0", T0, now));
    assert!(controls(&effects).is_empty(), "{effects:?}");
    let now = core.now();
    core.handle(now.add_ms(1_000), Input::Tick);
    let effects = drain(&mut core);
    assert!(
        controls(&effects).is_empty(),
        "one event per point at the store at a time: {effects:?}"
    );
}

#[test]
fn a_bad_row_that_lands_while_the_event_is_at_the_store_keeps_the_point_bad() {
    let mut core = core_with(watchdog_config());
    let event = live_then_expired(&mut core);
    // Out of range (500 °F), observed after the latest but already past its own deadline.
    let observed = T0.add_ms(30_000);
    core.handle(T0.add_ms(FRESHNESS_MS + 40_000), Input::Tick);
    drain(&mut core);
    let now = core.now();
    ingest(&mut core, temp_at(2, "500", observed, now));
    assert_eq!(
        core.point_state("plant.temp").expect("point").quality,
        Quality::Bad
    );
    let now = core.now();
    core.handle(
        now,
        Input::ControlCommitted(ControlReport {
            events: vec![event],
            seqs: vec![1],
        }),
    );
    drain(&mut core);
    assert_eq!(
        core.point_state("plant.temp").expect("point").quality,
        Quality::Bad,
        "the event from live to stale does not overwrite what the row said"
    );
}

/// A report-on-change point declares a heartbeat: the watchdog's deadline is its latest
/// reading plus the heartbeat, not plus its (longer) freshness, and the gap it writes says
/// `heartbeat_missed`.
#[test]
fn a_heartbeat_point_goes_stale_when_its_heartbeat_is_missed() {
    use sentinel_core::registry::{Kind, Registry, Reporting, RetentionClass};
    const HEARTBEAT_MS: i64 = 10_000;
    let mut temp = descriptor(
        "plant.temp",
        Kind::Number,
        RetentionClass::Measurement,
        "plant-a",
        "modbus-1",
    );
    temp.manifest.reporting = Some(Reporting::OnChange);
    temp.manifest.heartbeat_s = Some((HEARTBEAT_MS / 1_000) as u32);
    let registry =
        std::sync::Arc::new(Registry::compile(1, "sha".into(), "hash".into(), vec![temp]).expect("compiles"));
    let mut core = Core::new(watchdog_config(), registry, 5, &RestoredState::default(), T0).expect("core");
    let after_grace = T0.add_ms(GRACE_MS);
    no_lag(&mut core, after_grace);
    ingest(&mut core, temp_at(1, "71.6", after_grace, after_grace));
    assert_eq!(core.next_deadline(), Some(after_grace.add_ms(HEARTBEAT_MS)));
    const {
        assert!(
            HEARTBEAT_MS < FRESHNESS_MS,
            "the heartbeat is the tighter deadline"
        )
    };

    core.handle(after_grace.add_ms(HEARTBEAT_MS - 1), Input::Tick);
    assert!(controls(&drain(&mut core)).is_empty(), "not yet due");
    core.handle(after_grace.add_ms(HEARTBEAT_MS + 1), Input::Tick);
    let events = controls(&drain(&mut core));
    assert_eq!(events.len(), 1);
    assert!(matches!(
        events[0].detail,
        ControlDetail::QualityChanged {
            from: Quality::Live,
            to: Quality::Stale,
            reason: GapReason::HeartbeatMissed,
            ..
        }
    ));
}

/// The default configuration with the core's own rollup steps off: these tests read
/// `next_deadline()` as the watchdog's, and a rollup step (every 15 s by default) would come
/// first.
fn watchdog_config() -> sentinel_core::Config {
    let mut config = sentinel_core::Config::default();
    config.rollups.refresh_interval_ms = 0;
    config
}
