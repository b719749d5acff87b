//! The store's fence on (epoch, start identity) in the Store port's conformance suite (issue 25
//! item 3; migration 0013): the same body against the memory model and PostgreSQL.
//!
//! A database failover that lost the last acquisition (its epoch increment was never
//! replicated) lets the next core take the same epoch N again. The deposed core's handle, its
//! pool reconnected to the new primary, still writes at N: every one of its fenced writes must
//! be refused, naming both starts, while the new holder's succeed.

use sentinel_core::arbitration::{Desired, DesiredRow};
use sentinel_core::registry::{CommandValue, PointIdx};
use sentinel_core::reprocess::{ReprocessRecord, RowUpdate};
use sentinel_core::{
    CanonicalValue, ControlDetail, ControlEvent, Micros, PointState, Quality, RetentionClass,
};
use sentinel_ports::{Lease, RetentionCutoffs, RollupStepLimits, StartupStep, Store, StoreError};
use std::sync::Arc;

use super::{Backend, RowSpec, at, batch, row, snapshot};

const D1: &str = "2026-01-15T00:00:00Z";
const D2: &str = "2026-01-16T00:00:00Z";
const D4: &str = "2026-01-18T00:00:00Z";
const FAR_PAST: &str = "2000-01-01T00:00:00Z";
const DAY_US: i64 = 86_400_000_000;
const LIMITS: RollupStepLimits = RollupStepLimits {
    step_minutes_max: 45,
    invalidations_max: 4,
};

fn registry() -> sentinel_core::RegistrySnapshot {
    snapshot(
        "sha-fence",
        "content-fence",
        &[
            (
                "f.flow",
                "h-flow",
                r#"{"agg_safe":true,"id":"f.flow","retention":"measurement"}"#,
            ),
            (
                "f.valve",
                "h-valve",
                r#"{"agg_safe":false,"id":"f.valve","retention":"state"}"#,
            ),
        ],
    )
}

/// One `f.flow` row at 10:00 on each of D1..D3.
fn rows(seq_from: u64) -> Vec<sentinel_core::ObsRow> {
    (0..3i64)
        .map(|day| {
            let t = Micros(at(D1).0 + day * DAY_US + 10 * 3_600_000_000);
            row(RowSpec {
                point: "f.flow",
                seq: seq_from + day as u64,
                ingested_at: t,
                observed_at: t,
                value: Some(CanonicalValue::Num(day as f64)),
                ..RowSpec::default()
            })
        })
        .collect()
}

fn event(epoch: u32, occurred_at: Micros) -> ControlEvent {
    ControlEvent {
        occurred_at,
        point: Some(PointIdx(0)),
        point_id: "f.flow".into(),
        principal: "core:watchdog".into(),
        core_epoch: epoch,
        registry_version: 1,
        detail: ControlDetail::QualityChanged {
            from: Quality::Live,
            to: Quality::Stale,
            reason: sentinel_core::GapReason::Freshness,
            deadline: occurred_at,
        },
    }
}

fn desired(since: Micros) -> DesiredRow {
    DesiredRow {
        point_id: "f.valve".into(),
        desired: Desired {
            value: Some(CommandValue::Bool(true)),
            winner: None,
            since,
        },
        claims: Vec::new(),
    }
}

fn record(epoch: u32) -> ReprocessRecord {
    ReprocessRecord {
        glob: "f.*".into(),
        from: D1.into(),
        to: None,
        points: 1,
        classes: vec!["measurement"],
        old_versions: vec![1],
        new_version: 1,
        rows: 1,
        rollup_1m: None,
        rollup_1h: None,
        epoch,
    }
}

fn cutoffs() -> RetentionCutoffs {
    // Measurement keeps from D2: its D1 partition is expired; the rest keep everything.
    RetentionCutoffs {
        raw: [at(D2), at(FAR_PAST), at(FAR_PAST)],
        rollup_1m: at(FAR_PAST),
        rollup_1h: at(FAR_PAST),
    }
}

/// Asserts `result` is the lost start's refusal: epoch `epoch` with `lost`'s identity is not
/// the holder, which is epoch `epoch` with `holder`'s.
#[track_caller]
fn refused<T: std::fmt::Debug>(
    what: &str,
    result: Result<T, StoreError>,
    epoch: u32,
    lost: u64,
    holder: u64,
) {
    match result {
        Err(StoreError::Fenced {
            epoch: e,
            current,
            start,
            current_start,
        }) => assert_eq!(
            (e, current, start, current_start),
            (epoch, epoch, Some(lost), Some(holder)),
            "{what}: the refusal names both starts"
        ),
        other => panic!("{what} of the lost start at epoch {epoch} was not fenced: {other:?}"),
    }
}

/// Issue 25 item 3: after a failover that lost the acquisition of epoch N, a second handle
/// takes N again under another identity. Every fenced write of the first handle at N is
/// refused (a commit, a checkpoint, control events, an arbitration write, the epoch raise, both
/// rollup refreshes, a reprocess chunk and its event, a retention drop, a class move, the cold
/// start's record) and writes nothing; the second's succeed.
pub(super) async fn a_repeated_epoch_is_fenced_on_the_start_identity<B: Backend>(b: &B) {
    let lost_store = b.store();
    let lost = lost_store.acquire().await.expect("the first start acquires");
    let epoch = lost.epoch();
    lost_store.store_registry(&registry()).await.expect("registry");
    lost_store
        .commit(batch(1, epoch, rows(1), vec![]))
        .await
        .expect("the first start commits");
    lost_store
        .refresh_rollups(epoch, at(D1), at(D4))
        .await
        .expect("the first start refreshes");

    // The primary dies with the lock session on it; the promoted standby never saw the
    // increment.
    b.kill_session(&lost).await;
    assert_eq!(b.lose_last_acquisition().await, epoch - 1);
    let holder_store = b.another_handle();
    let holder = holder_store.acquire().await.expect("the second start acquires");
    assert_eq!(holder.epoch(), epoch, "the epoch repeats");
    let (lost_start, holder_start) = (lost.core_start(), holder.core_start());
    assert_ne!(lost_start, holder_start, "two starts, two identities");

    let counts = b.counts().await;
    let events = lost_store
        .load_control_events(0, 1_000)
        .await
        .expect("events")
        .len();
    let expired = lost_store
        .expired_partitions(cutoffs(), 10)
        .await
        .expect("expired");
    assert_eq!(expired.len(), 1, "the measurement day D1");
    let page = lost_store
        .load_reprocess_rows(RetentionClass::Measurement, "f.flow", at(D1), None, None, 10)
        .await
        .expect("rows");
    let update = |stored: &sentinel_core::reprocess::StoredObservation| RowUpdate {
        key: stored.key.clone(),
        ingested_at: stored.ingested_at,
        point_id: stored.point_id.clone(),
        observed_at: stored.observed_at,
        value: Some(CanonicalValue::Num(42.0)),
        native_text_fill: None,
        quality: Quality::Live,
        reason: None,
        registry_version: 1,
    };
    let t = at(D4);
    let steps = || {
        vec![StartupStep {
            step: "lock_and_epoch".into(),
            duration_us: 1,
        }]
    };
    let state = || vec![PointState::unknown(Arc::from("f.flow"), t)];
    let (l, h) = (lost_start, holder_start);

    // The lost start: everything refused, naming both.
    let commit = lost_store.commit(batch(2, epoch, rows(10), vec![])).await;
    refused("commit", commit.map_err(|e| e.source), epoch, l, h);
    refused(
        "checkpoint",
        lost_store.checkpoint(epoch, state()).await,
        epoch,
        l,
        h,
    );
    refused(
        "control events",
        lost_store
            .write_control_events(epoch, vec![event(epoch, t)])
            .await,
        epoch,
        l,
        h,
    );
    refused(
        "arbitration",
        lost_store
            .write_arbitration(epoch, vec![event(epoch, t)], vec![desired(t)])
            .await,
        epoch,
        l,
        h,
    );
    refused(
        "epoch raise",
        lost_store.raise_epoch(epoch, epoch + 5).await,
        epoch,
        l,
        h,
    );
    refused(
        "rollup refresh",
        lost_store.refresh_rollups(epoch, at(D1), at(D4)).await,
        epoch,
        l,
        h,
    );
    refused(
        "rollup step",
        lost_store.refresh_closed_rollups(epoch, t, LIMITS).await,
        epoch,
        l,
        h,
    );
    refused(
        "reprocess chunk",
        lost_store
            .apply_reprocess(epoch, RetentionClass::Measurement, vec![update(&page[0])])
            .await,
        epoch,
        l,
        h,
    );
    refused(
        "reprocess event",
        lost_store
            .write_reprocess_event(epoch, t, "operator:test", &record(epoch))
            .await,
        epoch,
        l,
        h,
    );
    refused(
        "retention drop",
        lost_store.drop_expired(epoch, cutoffs(), 10, "test", t).await,
        epoch,
        l,
        h,
    );
    refused(
        "class move",
        lost_store
            .move_point_class(epoch, "f.flow", RetentionClass::Measurement, "test", t)
            .await,
        epoch,
        l,
        h,
    );
    refused(
        "cold start",
        lost_store.record_cold_start(epoch, None, steps()).await,
        epoch,
        l,
        h,
    );
    let message = lost_store
        .checkpoint(epoch, state())
        .await
        .expect_err("fenced")
        .to_string();
    assert_eq!(
        message,
        format!("fenced: epoch {epoch} start {l} is not the holder (epoch {epoch} start {h})")
    );

    // Nothing of it was written.
    assert_eq!(b.counts().await, counts, "no row from the lost start");
    assert_eq!(
        lost_store
            .load_control_events(0, 1_000)
            .await
            .expect("events")
            .len(),
        events,
        "no control event from the lost start"
    );
    assert_eq!(
        lost_store
            .expired_partitions(cutoffs(), 10)
            .await
            .expect("expired"),
        expired,
        "no partition dropped by the lost start"
    );
    assert_eq!(b.epoch().await, epoch, "the lost start raised nothing");
    assert!(
        lost_store.load_point_desired().await.expect("desired").is_empty(),
        "no point_desired row from the lost start"
    );

    // The holder: every one of them goes through.
    holder_store
        .commit(batch(2, epoch, rows(10), vec![]))
        .await
        .expect("commit");
    holder_store.checkpoint(epoch, state()).await.expect("checkpoint");
    holder_store
        .write_control_events(epoch, vec![event(epoch, t)])
        .await
        .expect("control events");
    holder_store
        .write_arbitration(epoch, vec![event(epoch, t)], vec![desired(t)])
        .await
        .expect("arbitration");
    holder_store
        .refresh_rollups(epoch, at(D1), at(D4))
        .await
        .expect("rollup refresh");
    holder_store
        .refresh_closed_rollups(epoch, t, LIMITS)
        .await
        .expect("rollup step");
    assert_eq!(
        holder_store
            .apply_reprocess(epoch, RetentionClass::Measurement, vec![update(&page[0])])
            .await
            .expect("reprocess chunk"),
        1
    );
    holder_store
        .write_reprocess_event(epoch, t, "operator:test", &record(epoch))
        .await
        .expect("reprocess event");
    let run = holder_store
        .drop_expired(epoch, cutoffs(), 10, "test", t)
        .await
        .expect("retention drop");
    assert_eq!(run.dropped.len(), 1);
    holder_store
        .move_point_class(epoch, "f.flow", RetentionClass::Measurement, "test", t)
        .await
        .expect("class move (nothing to move)");
    holder_store
        .record_cold_start(epoch, None, steps())
        .await
        .expect("cold start");
    assert_eq!(
        holder_store
            .raise_epoch(epoch, epoch + 5)
            .await
            .expect("epoch raise"),
        epoch + 5,
        "the raise keeps the holder's identity"
    );
    // The raised epoch is still the holder's: the identity stayed.
    holder_store
        .checkpoint(epoch + 5, state())
        .await
        .expect("a write at the raised epoch");
    let starts = b.cold_starts().await;
    assert_eq!(
        starts.iter().map(|s| (s.epoch, s.core_start)).collect::<Vec<_>>(),
        [(epoch, Some(holder_start))],
        "the lost acquisition's record went with it; the holder's names its identity"
    );
    b.release(holder).await;
    drop(lost);
}
