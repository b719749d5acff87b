//! Compaction in the Store port's conformance suite (issue 24 items 1 and 2): the same bodies
//! against the memory model and PostgreSQL.
//!
//! - the refusals, word for word and changing nothing: a day not closed, a day younger than
//!   the age, a day the stream may still hold a message of (named), a fenced handle; then one
//!   compaction with its `compaction` event, and again: nothing (idempotent);
//! - reprocess on compacted rows (decompress-update-recompress), a class move that takes
//!   compacted rows with it, and retention dropping a compacted day;
//! - the property: random rows over several days, any subset of the closed days compacted →
//!   every read path (history, log heads, derived windows, reprocess extent and pages, both
//!   rollups recomputed, the row counts and, on PostgreSQL, the `observation` view) answers
//!   exactly as before; the minute rollups read the same from their compacted chunks, after a
//!   refresh rewrote them hot, and compacted again; reprocess then compaction equals
//!   compaction then reprocess; and late rows into compacted minutes, each minute refreshed
//!   alone, read as the same rows never compacted (migration 0016). Some days' minute rollups
//!   are compacted alone first (`Store::compact_rollup_day`), before their raw rows;
//! - a day's minute rollups compacted alone: the refusals (not closed, younger than the rollup
//!   age, a fenced handle) word for word, one `rollup_1m` event, the raw rows left hot, every
//!   read as before; then a late row and a reprocess recompute the day, and compacting it again
//!   (alone, then with the raw day) reads as the same rows never compacted.

use std::borrow::Cow;
use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use sentinel_core::derived::{WindowRequest, WindowRow};
use sentinel_core::registry::PointIdx;
use sentinel_core::reprocess::{RowUpdate, StoredObservation};
use sentinel_core::time::US_PER_DAY;
use sentinel_core::{CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass};
use sentinel_ports::{
    ClassExtent, CompactionRequest, HistoryRow, Lease, RetentionCutoffs, RollupCompactionRequest,
    RollupGrain, RollupRow, Store, StoreError,
};

use super::{Backend, Mem, Pg, at, batch};

/// 2026-01-15, 2026-01-16, 2026-01-17: the days the rows are ingested on.
const DAY0: &str = "2026-01-15T00:00:00Z";
const EARLIEST: &str = "2000-01-01T00:00:00Z";
const LATEST: &str = "2100-01-01T00:00:00Z";
const S: i64 = 1_000_000;
const H: i64 = 3_600 * S;
const POINTS: [(&str, RetentionClass); 3] = [
    ("c.ahu.temp", RetentionClass::Measurement),
    ("c.ahu.fan", RetentionClass::State),
    ("c.ahu.rssi", RetentionClass::Diagnostic),
];

fn day(i: i64) -> Micros {
    Micros(at(DAY0).0 + i * US_PER_DAY)
}

/// A "now" at which every test day is closed and older than the default age.
fn late() -> Micros {
    day(30)
}

fn request(
    class: RetentionClass,
    day: Micros,
    now: Micros,
    stream_oldest: Option<Micros>,
) -> CompactionRequest<'static> {
    CompactionRequest {
        class,
        day,
        now,
        compact_after_days: sentinel_ports::COMPACT_AFTER_DAYS_DEFAULT,
        stream_oldest,
        principal: "test",
    }
}

fn rollup_request(day: Micros, now: Micros, compact_after_days: u32) -> RollupCompactionRequest<'static> {
    RollupCompactionRequest {
        day,
        now,
        compact_after_days,
        principal: "test",
    }
}

/// What one generated row varies.
#[derive(Clone, Debug)]
struct Gen {
    point: usize,
    instance: usize,
    /// The row's ingest time, µs from DAY0 (three days).
    ingested_us: i64,
    /// How long before its ingest it was observed, µs (up to two hours: rows cross hours and days).
    lag_us: i64,
    value: Option<i32>,
    quality: Quality,
    device_time: bool,
    reason: bool,
    native_text: bool,
}

fn gen_row() -> impl Strategy<Value = Gen> {
    (
        0..POINTS.len(),
        0..2usize,
        0..3 * US_PER_DAY,
        0..2 * H,
        prop::option::of(-500..500i32),
        prop::sample::select(vec![Quality::Live, Quality::Live, Quality::Bad, Quality::Stale]),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(point, instance, ingested_us, lag_us, value, quality, device_time, reason, native_text)| Gen {
                point,
                instance,
                ingested_us,
                lag_us,
                value,
                quality,
                device_time,
                reason,
                native_text,
            },
        )
}

fn obs_row(g: &Gen, seq: u64) -> ObsRow {
    let (point_id, class) = POINTS[g.point];
    let ingested_at = Micros(at(DAY0).0 + g.ingested_us);
    let observed_at = Micros(ingested_at.0 - g.lag_us);
    let value = g.value.map(|v| match class {
        RetentionClass::State => CanonicalValue::Bool(v > 0),
        _ => CanonicalValue::Num(f64::from(v) * 0.25),
    });
    ObsRow {
        point: PointIdx(g.point as u32),
        point_id: Arc::from(point_id),
        class,
        ingested_at,
        observed_at,
        device_time: g.device_time.then_some(Micros(observed_at.0 - 1_500)),
        native_num: g.value.map(|v| f64::from(v) * 0.45),
        native_text: g.native_text.then(|| format!("raw {seq}").into_boxed_str()),
        unit_native: Some(Arc::from("degF")),
        value,
        quality: g.quality,
        reason: g.reason.then_some(Cow::Borrowed("device_offline")),
        detail: g.reason.then(|| r#"{"poll_ms": 12}"#.into()),
        changed: seq.is_multiple_of(3),
        registry_version: 1,
        key: ObsKey {
            driver_instance: Arc::from(["drv-a", "drv-b"][g.instance]),
            source_epoch: 2,
            source_seq: seq,
        },
        skew_flagged: seq.is_multiple_of(5),
        tag: DeliveryTag(seq),
    }
}

/// Commits the rows in batches of at most 16, in the order given.
async fn commit_all<S: Store>(store: &S, epoch: u32, rows: Vec<ObsRow>) {
    for (i, chunk) in rows.chunks(16).enumerate() {
        store
            .commit(batch(i as u64 + 1, epoch, chunk.to_vec(), vec![]))
            .await
            .expect("commit");
    }
}

/// Every read path's answer over the test points.
#[derive(Debug, PartialEq)]
struct Reads {
    history: Vec<Vec<HistoryRow>>,
    heads: Vec<sentinel_core::LogHead>,
    windows: Vec<WindowRow>,
    extent: Vec<ClassExtent>,
    pages: Vec<StoredObservation>,
    rollups_1m: Vec<RollupRow>,
    rollups_1h: Vec<RollupRow>,
    counts: [u64; 3],
    view: Option<u64>,
}

async fn reads<B: Backend>(b: &B, epoch: u32) -> Reads {
    let store = b.store();
    let (earliest, latest) = (at(EARLIEST), at(LATEST));
    let mut history = Vec::new();
    for (point, class) in POINTS {
        history.push(
            store
                .load_history(point, class, earliest, latest, 10_000)
                .await
                .expect("history"),
        );
    }
    let points: Vec<(String, RetentionClass)> = POINTS.iter().map(|(p, c)| (p.to_string(), *c)).collect();
    let heads = store.load_state(&points).await.expect("load state").log_heads;
    let requests: Vec<WindowRequest> = POINTS
        .iter()
        .enumerate()
        .map(|(i, (p, c))| WindowRequest {
            point_id: Arc::from(*p),
            class: *c,
            since: Micros(day(1).0 + i as i64 * 5 * H),
            rows_min: i as u32 * 2,
        })
        .collect();
    let mut windows = store.load_windows(&requests, 7).await.expect("windows");
    windows.sort_by(|a, b| {
        (&a.point_id, a.observed_at, a.ingested_at, &a.key).cmp(&(
            &b.point_id,
            b.observed_at,
            b.ingested_at,
            &b.key,
        ))
    });
    let extent = store
        .reprocess_extent(&points, Micros(day(0).0 + 7 * H), Some(day(2)))
        .await
        .expect("extent");
    let mut pages = Vec::new();
    for (point, class) in POINTS {
        let mut after: Option<StoredObservation> = None;
        loop {
            let page = store
                .load_reprocess_rows(class, point, earliest, None, after.as_ref(), 5)
                .await
                .expect("reprocess rows");
            let done = page.len() < 5;
            after = page.last().cloned();
            pages.extend(page);
            if done {
                break;
            }
        }
    }
    store
        .refresh_rollups(epoch, Micros(day(-1).0), day(4))
        .await
        .expect("refresh rollups");
    let rollups_1m = store
        .load_rollups(RollupGrain::Minute, earliest, latest, None)
        .await
        .expect("1m");
    let rollups_1h = store
        .load_rollups(RollupGrain::Hour, earliest, latest, None)
        .await
        .expect("1h");
    Reads {
        history,
        heads,
        windows,
        extent,
        pages,
        rollups_1m,
        rollups_1h,
        counts: b.counts().await.0,
        view: b.view_count().await,
    }
}

/// A refusal's words; anything else (a success, another error) fails the test.
fn refused<T: std::fmt::Debug>(result: Result<T, StoreError>) -> String {
    match result {
        Err(StoreError::Other(message)) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

pub(super) async fn compaction_refuses_exactly_and_writes_once<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let gens: Vec<Gen> = (0..24)
        .map(|i| Gen {
            point: i % 3,
            instance: i % 2,
            ingested_us: i as i64 * H + 17 * S,
            lag_us: 150_000,
            value: Some(i as i32),
            quality: Quality::Live,
            device_time: i % 2 == 0,
            reason: false,
            native_text: false,
        })
        .collect();
    let rows: Vec<ObsRow> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| obs_row(g, i as u64 + 1))
        .collect();
    commit_all(store, epoch, rows).await;
    let m = RetentionClass::Measurement;
    let before = reads(b, epoch).await;
    let events = || async { store.load_control_events(0, 1_000).await.expect("events") };
    let events_before = events().await;

    // Not closed: now is inside the day.
    let message = refused(
        store
            .compact_day(epoch, request(m, day(0), Micros(day(0).0 + 23 * H), None))
            .await,
    );
    assert_eq!(
        message,
        "compaction refused: day 2026-01-15 is not closed (it ends after now)"
    );
    // Closed, but younger than seven days.
    let message = refused(
        store
            .compact_day(epoch, request(m, day(0), Micros(day(7).0 + H), None))
            .await,
    );
    assert_eq!(
        message,
        "compaction refused: day 2026-01-15 is younger than 7 days"
    );
    // The stream still holds a message ingested on the day.
    let oldest = Micros(day(0).0 + 20 * H + 5);
    // Typed, so a running core can wait it out quietly without reading the words.
    match store
        .compact_day(epoch, request(m, day(0), late(), Some(oldest)))
        .await
    {
        Err(refusal @ StoreError::StreamHoldsDay { day: d, oldest: o }) if d == day(0) && o == oldest => {
            assert_eq!(
                refusal.to_string(),
                "compaction refused: day 2026-01-15 may still be in the stream (its oldest message was ingested at 2026-01-15T20:00:00.000005Z)"
            );
        }
        other => panic!("expected the stream refusal of day 0, got {other:?}"),
    }
    // A handle that does not hold the lock is fenced.
    let other = b.another_handle();
    match other.compact_day(epoch, request(m, day(0), late(), None)).await {
        Err(StoreError::Fenced { .. }) => {}
        other => panic!("expected a fence, got {other:?}"),
    }
    assert_eq!(events().await, events_before, "a refusal writes nothing");

    // The stream's oldest message is the next day's: allowed.
    let done = store
        .compact_day(epoch, request(m, day(0), late(), Some(day(1))))
        .await
        .expect("compact");
    assert_eq!(done.rows, 8, "the measurement rows of day 0");
    assert_eq!(
        done.chunks, 8,
        "one chunk per point, instance, epoch and hour: one row each here"
    );
    assert!(done.bytes_before > 0 && done.bytes_after > 0);
    let after = events().await;
    assert_eq!(
        after.len(),
        events_before.len() + 2,
        "the class's event, then the day's minute rollups'"
    );
    let event = &after[after.len() - 2];
    assert_eq!(Some(event.seq), done.seq);
    assert_eq!(event.kind, "compaction");
    assert_eq!(event.occurred_at, late());
    assert_eq!(event.core_epoch, epoch);
    let payload: serde_json::Value = serde_json::from_str(&event.payload).expect("payload");
    assert_eq!(payload["class"], "measurement");
    assert_eq!(payload["day"], "2026-01-15");
    assert_eq!(payload["rows"], 8);
    assert_eq!(payload["chunks"], 8);
    // The day's minute rollups (every class's: the refresh in `reads` wrote them), in the
    // same transaction: 24 rows in 24 minutes, one chunk per point.
    assert_eq!(
        (done.rollups.buckets, done.rollups.chunks),
        (24, 3),
        "{:?}",
        done.rollups
    );
    assert!(done.rollups.bytes_before > 0 && done.rollups.bytes_after > 0);
    let event = after.last().expect("the rollups' event");
    assert_eq!(Some(event.seq), done.rollups.seq);
    assert_eq!(event.kind, "compaction");
    assert_eq!(event.occurred_at, late());
    let payload: serde_json::Value = serde_json::from_str(&event.payload).expect("payload");
    assert_eq!(payload["table"], "rollup_1m");
    assert_eq!(payload["day"], "2026-01-15");
    assert_eq!(payload["buckets"], 24);
    assert_eq!(payload["chunks"], 3);

    // Again: nothing to do, nothing written.
    let again = store
        .compact_day(epoch, request(m, day(0), late(), None))
        .await
        .expect("again");
    assert_eq!((again.rows, again.seq), (0, None));
    assert_eq!((again.rollups.buckets, again.rollups.seq), (0, None));
    assert_eq!(events().await.len(), after.len());
    assert_eq!(reads(b, epoch).await, before, "every read answers as before");
    b.release(lease).await;
}

fn update(row: &StoredObservation, value: f64) -> RowUpdate {
    RowUpdate {
        key: row.key.clone(),
        ingested_at: row.ingested_at,
        point_id: row.point_id.clone(),
        observed_at: row.observed_at,
        value: Some(CanonicalValue::Num(value)),
        native_text_fill: Some("filled".into()),
        quality: Quality::Live,
        reason: None,
        registry_version: 2,
    }
}

pub(super) async fn compacted_rows_are_reprocessed_moved_and_dropped<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let gens: Vec<Gen> = (0..30)
        .map(|i| Gen {
            point: 0,
            instance: i % 2,
            ingested_us: (i as i64 % 3) * US_PER_DAY + i as i64 * 7 * S,
            lag_us: 2 * S,
            value: Some(i as i32),
            quality: Quality::Bad,
            device_time: true,
            reason: true,
            native_text: i % 2 == 0,
        })
        .collect();
    let rows: Vec<ObsRow> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| obs_row(g, i as u64 + 1))
        .collect();
    commit_all(store, epoch, rows).await;
    store
        .refresh_rollups(epoch, Micros(day(-1).0), day(4))
        .await
        .expect("refresh rollups");
    let minutes = load_1m(b).await;
    assert!(!minutes.is_empty());
    let m = RetentionClass::Measurement;
    for d in 0..2 {
        let done = store
            .compact_day(epoch, request(m, day(d), late(), None))
            .await
            .expect("compact");
        assert_eq!(done.rows, 10);
        assert!(done.rollups.buckets > 0, "the day's minute rollups with it");
    }
    assert_eq!(load_1m(b).await, minutes, "compacted minute rollups read as hot");
    // Reprocess every row: days 0 and 1 compacted, day 2 hot.
    let (point, _) = POINTS[0];
    let page = store
        .load_reprocess_rows(m, point, at(EARLIEST), None, None, 100)
        .await
        .expect("rows");
    assert_eq!(page.len(), 30);
    let updates: Vec<RowUpdate> = page
        .iter()
        .map(|r| update(r, 1_000.0 + r.key.source_seq as f64))
        .collect();
    let updated = store.apply_reprocess(epoch, m, updates).await.expect("reprocess");
    assert_eq!(updated, 30, "hot and compacted rows alike");
    let again = store
        .load_reprocess_rows(m, point, at(EARLIEST), None, None, 100)
        .await
        .expect("rows");
    for (old, new) in page.iter().zip(&again) {
        assert_eq!(
            (&new.key, new.ingested_at, new.observed_at),
            (&old.key, old.ingested_at, old.observed_at)
        );
        assert_eq!(
            new.value,
            Some(CanonicalValue::Num(1_000.0 + old.key.source_seq as f64))
        );
        assert_eq!(new.quality, Quality::Live);
        assert_eq!(new.reason, None);
        assert_eq!(new.registry_version, 2);
        assert_eq!(
            new.native_num, old.native_num,
            "native values are never rewritten"
        );
        let expected_text = old.native_text.clone().or(Some("filled".into()));
        assert_eq!(
            new.native_text, expected_text,
            "native_text is filled only where it was NULL"
        );
    }
    // The day's compacted rows stay compacted: the day has no hot rows to compact.
    let redo = store
        .compact_day(epoch, request(m, day(0), late(), None))
        .await
        .expect("idempotent");
    assert_eq!(redo.rows, 0);

    // A class move takes the compacted rows with it.
    let moved = store
        .move_point_class(epoch, point, RetentionClass::State, "test", late())
        .await
        .expect("move");
    assert_eq!(moved.rows, 30);
    let in_state = store
        .load_reprocess_rows(RetentionClass::State, point, at(EARLIEST), None, None, 100)
        .await
        .expect("rows");
    assert_eq!(in_state.len(), 30);
    let left = store
        .load_history(point, m, at(EARLIEST), at(LATEST), 100)
        .await
        .expect("history");
    assert!(left.is_empty(), "nothing left in the old class, hot or compacted");
    // The move recomputed the point's minutes over its compacted rollup days: the new class,
    // the reprocessed values, exactly what a refresh of everything gives.
    let moved_minutes = load_1m(b).await;
    assert_eq!(moved_minutes.len(), minutes.len());
    assert!(moved_minutes.iter().all(|r| r.class == RetentionClass::State));
    store
        .refresh_rollups(epoch, Micros(day(-1).0), day(4))
        .await
        .expect("refresh rollups");
    assert_eq!(load_1m(b).await, moved_minutes);
    // Compact the moved rows' first day in their new class, then retention drops it whole.
    let done = store
        .compact_day(epoch, request(RetentionClass::State, day(0), late(), None))
        .await
        .expect("compact the moved day");
    assert_eq!(done.rows, 10);
    assert!(done.rollups.buckets > 0, "the refresh's minutes merged back");
    assert_eq!(load_1m(b).await, moved_minutes);
    let cutoffs = RetentionCutoffs {
        raw: [day(1), day(1), day(1)],
        rollup_1m: day(1),
        rollup_1h: at(EARLIEST),
    };
    let run = store
        .drop_expired(epoch, cutoffs, 10, "test", late())
        .await
        .expect("drop");
    assert!(!run.dropped.is_empty());
    assert_eq!(
        b.counts().await.0,
        [0, 20, 0],
        "day 0 went, compacted rows included"
    );
    let kept: Vec<RollupRow> = moved_minutes.into_iter().filter(|r| r.bucket >= day(1)).collect();
    assert_eq!(
        load_1m(b).await,
        kept,
        "the minute rollups' day 0 went, hot and compacted"
    );
    b.release(lease).await;
}

/// The property, for one backend and one generated case.
async fn check_property<B: Backend>(
    gens: &[Gen],
    compact: &[(usize, i64)],
    rollup_days: &[i64],
    reprocess_every: u64,
) -> Result<(), TestCaseError> {
    let rows: Vec<ObsRow> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| obs_row(g, i as u64 + 1))
        .collect();
    let classes = RetentionClass::ALL;
    // Compaction, reads before and after.
    let b = B::fresh().await;
    let lease = b.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    commit_all(b.store(), epoch, rows.clone()).await;
    let before = reads(&b, epoch).await;
    compact_all(&b, epoch, compact, rollup_days).await?;
    // The minute rollups as compaction left them, before any refresh takes a minute back.
    prop_assert_eq!(
        &load_1m(&b).await,
        &before.rollups_1m,
        "a compacted minute rollup reads as it did hot"
    );
    let after = reads(&b, epoch).await;
    prop_assert_eq!(&after, &before, "every read answers as it did before compaction");
    // The refresh in `reads` rewrote every minute hot over the compacted ones; compacting the
    // same days again merges them back into the chunks.
    compact_all(&b, epoch, compact, rollup_days).await?;
    prop_assert_eq!(
        &load_1m(&b).await,
        &before.rollups_1m,
        "compacting again merges the rewritten minutes"
    );
    // Reprocess after compaction...
    reprocess_some(&b, epoch, reprocess_every).await;
    let compacted_then_reprocessed = reads(&b, epoch).await;
    // Late rows into the days' minutes, each minute refreshed alone (as the core's step
    // refreshes an invalidated minute), then the days compacted again...
    let late_rows = late_copies(gens, rows.len() as u64);
    commit_all(b.store(), epoch, late_rows.clone()).await;
    for row in &late_rows {
        let minute = RollupGrain::Minute.floor(row.observed_at);
        b.store()
            .refresh_rollups(epoch, minute, Micros(minute.0 + 60 * S))
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let late_compacted = load_1m(&b).await;
    compact_all(&b, epoch, compact, rollup_days).await?;
    prop_assert_eq!(
        &load_1m(&b).await,
        &late_compacted,
        "compacting after late rows changes no minute"
    );
    b.release(lease).await;
    // ...against the same rows never compacted, on a store of its own.
    let d = B::fresh().await;
    let lease = d.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    commit_all(d.store(), epoch, rows.clone()).await;
    reprocess_some(&d, epoch, reprocess_every).await;
    commit_all(d.store(), epoch, late_rows).await;
    d.store()
        .refresh_rollups(epoch, Micros(day(-1).0), day(5))
        .await
        .expect("refresh rollups");
    prop_assert_eq!(
        &load_1m(&d).await,
        &late_compacted,
        "a late row's minute refreshed after compaction reads as without compaction"
    );
    d.release(lease).await;
    // ...against reprocess before compaction, on a store of its own.
    let c = B::fresh().await;
    let lease = c.store().acquire().await.expect("acquire");
    let epoch = lease.epoch();
    commit_all(c.store(), epoch, rows).await;
    reprocess_some(&c, epoch, reprocess_every).await;
    for &d in rollup_days {
        c.store()
            .compact_rollup_day(epoch, rollup_request(day(d), late(), 1))
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    for &(class, d) in compact {
        c.store()
            .compact_day(epoch, request(classes[class], day(d), late(), None))
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    let reprocessed_then_compacted = reads(&c, epoch).await;
    prop_assert_eq!(
        &compacted_then_reprocessed,
        &reprocessed_then_compacted,
        "reprocess then compaction equals compaction then reprocess"
    );
    c.release(lease).await;
    Ok(())
}

/// Compacts the minute rollups of each day of `rollup_days` alone, then each (class, day) of
/// `compact` (its day's minute rollups with it).
async fn compact_all<B: Backend>(
    b: &B,
    epoch: u32,
    compact: &[(usize, i64)],
    rollup_days: &[i64],
) -> Result<(), TestCaseError> {
    for &d in rollup_days {
        b.store()
            .compact_rollup_day(epoch, rollup_request(day(d), late(), 1))
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    for &(class, d) in compact {
        b.store()
            .compact_day(epoch, request(RetentionClass::ALL[class], day(d), late(), None))
            .await
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
    }
    Ok(())
}

/// Every stored minute rollup, as the store reads it (no refresh first).
async fn load_1m<B: Backend>(b: &B) -> Vec<RollupRow> {
    b.store()
        .load_rollups(RollupGrain::Minute, at(EARLIEST), at(LATEST), None)
        .await
        .expect("1m")
}

/// Copies of the first rows observed when they were, ingested late on day 3 (never compacted
/// here) with new sequence numbers from `seq_after` and other values: each lands in a minute
/// the earlier rows filled.
fn late_copies(gens: &[Gen], seq_after: u64) -> Vec<ObsRow> {
    gens.iter()
        .take(6)
        .enumerate()
        .map(|(i, g)| {
            let ingested_us = 3 * US_PER_DAY + i as i64 * S;
            let observed_us = g.ingested_us - g.lag_us;
            let copy = Gen {
                ingested_us,
                lag_us: ingested_us - observed_us,
                value: Some(g.value.unwrap_or(0).wrapping_add(7)),
                quality: Quality::Live,
                ..g.clone()
            };
            obs_row(&copy, seq_after + 1 + i as u64)
        })
        .collect()
}

/// Rewrites every row whose seq is a multiple of `every`, through the port's reprocess writes.
async fn reprocess_some<B: Backend>(b: &B, epoch: u32, every: u64) {
    for (point, class) in POINTS {
        let rows = b
            .store()
            .load_reprocess_rows(class, point, at(EARLIEST), None, None, 10_000)
            .await
            .expect("rows");
        let updates: Vec<RowUpdate> = rows
            .iter()
            .filter(|r| r.key.source_seq % every == 0)
            .map(|r| update(r, r.key.source_seq as f64 * 0.5))
            .collect();
        let n = updates.len() as u64;
        let updated = b
            .store()
            .apply_reprocess(epoch, class, updates)
            .await
            .expect("apply");
        assert_eq!(updated, n, "every update found its row");
    }
}

fn run_property<B: Backend>(cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        max_shrink_iters: 16,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let strategy = (
        prop::collection::vec(gen_row(), 1..80),
        prop::collection::btree_set((0..3usize, 0..3i64), 0..9),
        prop::collection::btree_set(-1..4i64, 0..5),
        1..4u64,
    );
    let result = runner.run(&strategy, |(gens, compact, rollup_days, every)| {
        let compact: Vec<(usize, i64)> = compact.into_iter().collect();
        let rollup_days: Vec<i64> = rollup_days.into_iter().collect();
        rt.block_on(check_property::<B>(&gens, &compact, &rollup_days, every))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn every_read_is_unchanged_by_compaction_and_reprocess_commutes_with_it_memory() {
    run_property::<Mem>(64);
}

#[test]
fn every_read_is_unchanged_by_compaction_and_reprocess_commutes_with_it_postgres() {
    run_property::<Pg>(10);
}

/// The encoder's guard (migration 0015): a chunk whose rows reached its aggregates in any order
/// but 1..n is refused, so a planner that stops feeding them sorted fails the compaction rather
/// than store columns that disagree.
#[tokio::test]
async fn postgres_the_encoder_refuses_a_chunk_out_of_order() {
    let b = <Pg as Backend>::fresh().await;
    let in_order: i32 = sqlx::query_scalar("SELECT sentinel_compact_in_order(3, '{1,2,3}')")
        .fetch_one(&b.raw)
        .await
        .expect("in order");
    assert_eq!(in_order, 3);
    for (n, rns) in [(3i64, vec![1i64, 3, 2]), (3, vec![1, 2]), (2, vec![1, 2, 3])] {
        let refused = sqlx::query_scalar::<_, i32>("SELECT sentinel_compact_in_order($1, $2)")
            .bind(n)
            .bind(&rns)
            .fetch_one(&b.raw)
            .await
            .expect_err("out of order");
        assert!(refused.to_string().contains("out of order"), "{refused}");
    }
}

/// The late-duplicate check (issue 25 item 2) sees compacted days: a driver's replay of a
/// reading whose first copy was ingested on a day compacted since (a cut-off longer than the
/// compaction age) is not stored again, while a late reading with a new key is.
pub(super) async fn a_late_copy_of_a_compacted_key_is_not_inserted<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let gens: Vec<Gen> = (0..6i32)
        .map(|i| Gen {
            point: 0,
            instance: 0,
            ingested_us: i64::from(i) * H + 17 * S,
            lag_us: 150_000,
            value: Some(i),
            quality: Quality::Live,
            device_time: false,
            reason: false,
            native_text: false,
        })
        .collect();
    let rows: Vec<ObsRow> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| obs_row(g, i as u64 + 1))
        .collect();
    commit_all(store, epoch, rows.clone()).await;
    let m = RetentionClass::Measurement;
    let done = store
        .compact_day(epoch, request(m, day(0), late(), None))
        .await
        .expect("compact");
    assert_eq!(done.rows, 6);

    // The replay, twenty days later: the same keys and readings, a new ingest time.
    let replayed_at = day(20);
    let mut copies: Vec<ObsRow> = rows[2..4]
        .iter()
        .map(|row| ObsRow {
            ingested_at: replayed_at,
            ..row.clone()
        })
        .collect();
    // And one late reading of the same driver that was never stored.
    copies.push(ObsRow {
        ingested_at: replayed_at,
        key: ObsKey {
            source_seq: 1_000,
            ..rows[0].key.clone()
        },
        ..rows[0].clone()
    });
    let report = store
        .commit(batch(100, epoch, copies, vec![]))
        .await
        .expect("commit");
    assert_eq!(
        report.inserted,
        vec![2],
        "only the reading with a new key is stored; the copies of compacted rows are not"
    );
    assert_eq!(
        b.counts().await.0,
        [7, 0, 0],
        "six compacted rows and the one new reading"
    );
}

/// One measurement row of an encoding case: `point_id`'s `seq`, observed and ingested at the
/// given µs from DAY0, with its value and native number as given (bit for bit).
fn edge_row(
    point_id: &str,
    seq: u64,
    observed_us: i64,
    ingested_us: i64,
    value: Option<f64>,
    native: Option<f64>,
) -> ObsRow {
    let base = obs_row(
        &Gen {
            point: 0,
            instance: 0,
            ingested_us,
            lag_us: ingested_us - observed_us,
            value: None,
            quality: Quality::Live,
            device_time: false,
            reason: false,
            native_text: false,
        },
        seq,
    );
    ObsRow {
        point: PointIdx(100),
        point_id: Arc::from(point_id),
        value: value.map(CanonicalValue::Num),
        native_num: native,
        ..base
    }
}

/// A stored row with its floats as bits (−0.0 is not 0.0, and NaN is itself).
fn exact(rows: &[StoredObservation]) -> Vec<String> {
    rows.iter()
        .map(|r| {
            let value = match r.value {
                Some(CanonicalValue::Num(v)) => Some(v.to_bits()),
                _ => None,
            };
            format!(
                "{} {:?} {} {} {:?} {:?} {:?} {:?}",
                r.point_id,
                r.key,
                r.observed_at.0,
                r.ingested_at.0,
                value,
                r.native_num.map(f64::to_bits),
                r.quality,
                r.unit_native
            )
        })
        .collect()
}

/// The encoder's narrow forms (migration 0015) round-trip every edge exactly, and each falls
/// back to the wide form for its chunk alone: a value that is no exact decimal among decimals;
/// a value past int4 once scaled; a −0.0 among decimals; −0.0, NaN, ±inf, the largest and the smallest doubles; a
/// native that is the value but for the sign of zero; a native off the unit conversion by one
/// ulp in one row; a converted point (the native a decimal, the value computed from it as the
/// core does: migration 0017 derives the values from the natives), and the same with one
/// native that is no decimal or one −0.0 (native whole, values still derived), with one value
/// one ulp off the conversion, with a NaN or an infinite native (values whole), with a
/// conversion whose constants no rounding recovers (values whole) and with a factor found by
/// rounding the value's own map (psi to kPa); a time delta and a bus lag past int4. Each case
/// is one chunk (its own point); every row reads back after compaction with the very bits it
/// had hot, and on PostgreSQL each chunk holds the form the case is about.
pub(super) async fn each_encoding_round_trips_its_edges_exactly<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let mut rows = Vec::new();
    let mut seq = 0;
    let mut push = |rows: &mut Vec<ObsRow>,
                    point: &str,
                    observed_us: i64,
                    lag_us: i64,
                    value: Option<f64>,
                    native: Option<f64>| {
        seq += 1;
        rows.push(edge_row(
            point,
            seq,
            observed_us,
            observed_us + lag_us,
            value,
            native,
        ));
    };
    // The jittered mix: µs times, a 20–300 ms lag, two decimals, native = value × 1.8 + 32.
    let jittered = |k: i64| {
        (
            H + k * 8 * S + (k * 37_813) % 80_000,
            20_000 + (k * 53_987) % 280_000,
        )
    };
    let decimal = |k: i64| (1_800 + (k * 37) % 800) as f64 / 100.0;
    for k in 0..40 {
        let (obs, lag) = jittered(k);
        let v = decimal(k);
        push(&mut rows, "e.affine", obs, lag, Some(v), Some(v * 1.8 + 32.0));
        // The same with one value that is no decimal of four places.
        let v = if k == 17 { 0.1 + 0.2 } else { v };
        push(
            &mut rows,
            "e.not_decimal",
            obs,
            lag,
            Some(v),
            Some(v * 1.8 + 32.0),
        );
        // Native off the conversion by one ulp in one row.
        let v = decimal(k);
        let n = if k == 29 {
            f64::from_bits((v * 1.8 + 32.0).to_bits() + 1)
        } else {
            v * 1.8 + 32.0
        };
        push(&mut rows, "e.not_affine", obs, lag, Some(v), Some(n));
        // Decimals but for one −0.0, which divides back as +0.0.
        let v = if k == 5 { -0.0 } else { decimal(k) };
        push(&mut rows, "e.negative_zero", obs, lag, Some(v), Some(v));
        // A converted point as the core computes it (`native × factor + offset`, degF to degC):
        // native the device's two-decimal reading, the value no decimal and no map of it.
        let to_c = |f: f64| f * 0.5555555555555556 + -17.77777777777778;
        let f = decimal(k) * 1.8 + 32.0;
        let f = (f * 100.0).round() / 100.0;
        push(&mut rows, "e.converted", obs, lag, Some(to_c(f)), Some(f));
        // The same with one native that is no decimal of four places.
        let f = if k == 23 { 64.00001 } else { f };
        push(
            &mut rows,
            "e.native_not_decimal",
            obs,
            lag,
            Some(to_c(f)),
            Some(f),
        );
        // Decimal natives but for one −0.0 (a device at zero), which divides back as +0.0.
        let f = if k == 11 {
            -0.0
        } else {
            (decimal(k) * 100.0).round() / 100.0
        };
        push(
            &mut rows,
            "e.native_negative_zero",
            obs,
            lag,
            Some(to_c(f)),
            Some(f),
        );
        // Converted points whose values the chunk must keep (migration 0017 derives a
        // converted value from its native only when every row is reproduced bit for bit):
        // one value one ulp off the conversion; a NaN native, an infinite one (the value
        // computed from each as the core would); a conversion whose constants neither rounding
        // recovers (0.123456789123 and 1: the factor has 12 significant digits).
        let f = (decimal(k) * 1.8 + 32.0) * 100.0;
        let f = f.round() / 100.0;
        let v = if k == 29 {
            f64::from_bits(to_c(f).to_bits() + 1)
        } else {
            to_c(f)
        };
        push(&mut rows, "e.degf_ulp", obs, lag, Some(v), Some(f));
        let n = if k == 5 { f64::NAN } else { f };
        push(&mut rows, "e.degf_nan", obs, lag, Some(to_c(n)), Some(n));
        let n = if k == 5 { f64::INFINITY } else { f };
        push(&mut rows, "e.degf_inf", obs, lag, Some(to_c(n)), Some(n));
        let odd = |x: f64| x * 0.123456789123 + 1.0;
        push(&mut rows, "e.unrecoverable", obs, lag, Some(odd(f)), Some(f));
        // A conversion whose factor has no short reciprocal (psi to kPa): the value's own
        // map, rounded, is what the chunk finds.
        let kpa = |x: f64| x * 6.894757 + 0.0;
        push(&mut rows, "e.psi", obs, lag, Some(kpa(f)), Some(f));
    }
    let specials = [
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::MAX,
        f64::from_bits(1),
        2.5,
    ];
    for (k, v) in specials.into_iter().enumerate() {
        let (obs, lag) = jittered(k as i64);
        // Native is the value but for the sign of a zero.
        let n = if v == 0.0 { 0.0 } else { v };
        push(&mut rows, "e.special", obs, lag, Some(v), Some(n));
        push(&mut rows, "e.same", obs, lag, Some(v), Some(v));
    }
    // 02:50 is 3.0e9 µs into its hour, past int4; ingested three hours later, a lag past int4.
    // 300,000,000.25 is a decimal of two places, past int4 once scaled.
    push(
        &mut rows,
        "e.wide",
        2 * H + 50 * 60 * S,
        3 * H,
        Some(300_000_000.25),
        Some(300_000_000.25),
    );
    push(
        &mut rows,
        "e.wide",
        2 * H + 51 * 60 * S,
        150_000,
        Some(1.5),
        Some(1.5),
    );
    // A whole number of places: 1e7, exactly, as scaled integers with no places.
    for k in 0..10 {
        push(
            &mut rows,
            "e.integers",
            H + k * 8 * S,
            150_000,
            Some(1e7 + k as f64),
            Some(1e7 + k as f64),
        );
    }
    rows.sort_by_key(|r| r.ingested_at);
    commit_all(store, epoch, rows).await;
    let points = [
        "e.affine",
        "e.not_decimal",
        "e.not_affine",
        "e.negative_zero",
        "e.special",
        "e.same",
        "e.wide",
        "e.integers",
        "e.converted",
        "e.native_not_decimal",
        "e.native_negative_zero",
        "e.degf_ulp",
        "e.degf_nan",
        "e.degf_inf",
        "e.unrecoverable",
        "e.psi",
    ];
    let m = RetentionClass::Measurement;
    let read = || async {
        let mut all = Vec::new();
        let mut history = Vec::new();
        for point in points {
            let page = store
                .load_reprocess_rows(m, point, at(EARLIEST), None, None, 1_000)
                .await
                .expect("rows");
            all.extend(exact(&page));
            let h = store
                .load_history(point, m, at(EARLIEST), at(LATEST), 1_000)
                .await
                .expect("history");
            history.push(format!("{h:?}"));
        }
        (all, history)
    };
    let before = read().await;
    assert_eq!(before.0.len(), 40 * 12 + 7 * 2 + 2 + 10, "every row was stored");
    let done = store
        .compact_day(epoch, request(m, day(0), late(), None))
        .await
        .expect("compact");
    assert_eq!(done.rows as usize, before.0.len());
    let after = read().await;
    for (a, b) in after.0.iter().zip(&before.0) {
        assert_eq!(a, b, "a row reads back with the bits it had hot");
    }
    assert_eq!(after, before, "every row reads back exactly");
    if let Some(forms) = b.compact_forms().await {
        assert_eq!(
            forms,
            [
                "e.affine: int4 deltas, int4 lags, values × 100, native = value × 1.8 + 32",
                "e.converted: int4 deltas, int4 lags, \
                 values = native × 0.5555555555555556 + -17.77777777777778, native × 100",
                "e.degf_inf: int4 deltas, int4 lags, float8 values, native whole",
                "e.degf_nan: int4 deltas, int4 lags, float8 values, native whole",
                "e.degf_ulp: int4 deltas, int4 lags, float8 values, native × 100",
                "e.integers: int4 deltas, int4 lags, values × 1, native = value",
                // The −0.0 native and the one no decimal keep native whole; the values, which
                // the conversion reproduces from them, are still derived.
                "e.native_negative_zero: int4 deltas, int4 lags, \
                 values = native × 0.5555555555555556 + -17.77777777777778, native whole",
                "e.native_not_decimal: int4 deltas, int4 lags, \
                 values = native × 0.5555555555555556 + -17.77777777777778, native whole",
                "e.negative_zero: int4 deltas, int4 lags, float8 values, native = value",
                "e.not_affine: int4 deltas, int4 lags, values × 100, native whole",
                "e.not_decimal: int4 deltas, int4 lags, float8 values, native = value × 1.8 + 32",
                "e.psi: int4 deltas, int4 lags, values = native × 6.894757 + 0, native × 100",
                "e.same: int4 deltas, int4 lags, float8 values, native = value",
                "e.special: int4 deltas, int4 lags, float8 values, native whole",
                "e.unrecoverable: int4 deltas, int4 lags, float8 values, native × 100",
                "e.wide: int8 deltas, int8 lags, float8 values, native = value",
            ]
        );
    }
    // Reprocess decodes a chunk, updates it and encodes it again: a converted point
    // re-converted (its factor corrected to tenths) keeps its values derived, with the new
    // constants; one whose new values miss the conversion by an ulp in one row keeps them whole.
    let mut expected = Vec::new();
    let mut updates = Vec::new();
    for (point, off_by_an_ulp) in [("e.converted", None), ("e.psi", Some(7))] {
        let page = store
            .load_reprocess_rows(m, point, at(EARLIEST), None, None, 1_000)
            .await
            .expect("rows");
        assert_eq!(page.len(), 40);
        for (i, r) in page.iter().enumerate() {
            let v = r.native_num.expect("a native") * 0.1 + 0.0;
            let v = if off_by_an_ulp == Some(i) {
                f64::from_bits(v.to_bits() + 1)
            } else {
                v
            };
            expected.push((point, r.key.source_seq, Some(v.to_bits())));
            updates.push(update(r, v));
        }
    }
    let updated = store.apply_reprocess(epoch, m, updates).await.expect("reprocess");
    assert_eq!(updated, 80);
    let mut got = Vec::new();
    for point in ["e.converted", "e.psi"] {
        let page = store
            .load_reprocess_rows(m, point, at(EARLIEST), None, None, 1_000)
            .await
            .expect("rows");
        got.extend(page.iter().map(|r| {
            let bits = match r.value {
                Some(CanonicalValue::Num(v)) => Some(v.to_bits()),
                _ => None,
            };
            (point, r.key.source_seq, bits)
        }));
    }
    assert_eq!(got, expected, "reprocessed rows read back with the bits written");
    if let Some(forms) = b.compact_forms().await {
        let forms: Vec<&String> = forms
            .iter()
            .filter(|f| f.starts_with("e.converted:") || f.starts_with("e.psi:"))
            .collect();
        assert_eq!(
            forms,
            [
                "e.converted: int4 deltas, int4 lags, values = native × 0.1 + 0, native × 100",
                "e.psi: int4 deltas, int4 lags, float8 values, native × 100",
            ]
        );
    }
    b.release(lease).await;
}

/// A recompute that finds no rows left for a minute of a compacted rollup day takes the
/// minute away, as it would from a hot day (migration 0016's mask; the model takes it out of
/// its chunk): a row observed just after midnight but ingested just before it (a device clock
/// ahead) goes with its ingested day's raw partition, and the refresh after the drop leaves its
/// minute empty.
pub(super) async fn a_minute_that_lost_its_rows_is_gone_from_a_compacted_rollup_day<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let row_gen = |ingested_us: i64, lag_us: i64| Gen {
        point: 0,
        instance: 0,
        ingested_us,
        lag_us,
        value: Some(4),
        quality: Quality::Live,
        device_time: false,
        reason: false,
        native_text: false,
    };
    // Ingested on day 0 and observed on day 1; then a row of day 1 in both.
    let ahead = obs_row(&row_gen(US_PER_DAY - 100_000, -200_000), 1);
    let kept = obs_row(&row_gen(US_PER_DAY + H, 0), 2);
    commit_all(store, epoch, vec![ahead, kept]).await;
    store
        .refresh_rollups(epoch, day(0), day(2))
        .await
        .expect("refresh rollups");
    let buckets = |rows: Vec<RollupRow>| rows.into_iter().map(|r| r.bucket).collect::<Vec<_>>();
    assert_eq!(buckets(load_1m(b).await), vec![day(1), Micros(day(1).0 + H)]);
    let done = store
        .compact_day(epoch, request(RetentionClass::Measurement, day(1), late(), None))
        .await
        .expect("compact");
    assert_eq!((done.rows, done.rollups.buckets), (1, 2));
    // Raw day 0 goes (the row observed on day 1 with it); the rollups stay.
    let cutoffs = RetentionCutoffs {
        raw: [day(1), day(1), day(1)],
        rollup_1m: at(EARLIEST),
        rollup_1h: at(EARLIEST),
    };
    store
        .drop_expired(epoch, cutoffs, 10, "test", late())
        .await
        .expect("drop");
    assert_eq!(
        buckets(load_1m(b).await),
        vec![day(1), Micros(day(1).0 + H)],
        "a drop of raw rows recomputes nothing"
    );
    store
        .refresh_rollups(epoch, day(1), day(2))
        .await
        .expect("refresh rollups");
    assert_eq!(
        buckets(load_1m(b).await),
        vec![Micros(day(1).0 + H)],
        "the minute whose rows went is gone, compacted or not"
    );
    // Compacting the day again keeps it gone.
    let again = store
        .compact_day(epoch, request(RetentionClass::Measurement, day(1), late(), None))
        .await
        .expect("compact again");
    assert_eq!(again.rollups.buckets, 1, "the refreshed minute, merged back");
    assert_eq!(buckets(load_1m(b).await), vec![Micros(day(1).0 + H)]);
    b.release(lease).await;
}

/// A day's minute rollups compacted alone, at their own age (issue 24, disk): refused word for
/// word as `compact_day` is (not closed, younger than the age) and when fenced, writing
/// nothing; then one `rollup_1m` event, the raw rows left hot and every read as before; a late
/// row and a reprocess recompute the day's minutes over the chunks, and compacting the day again
/// (its rollups alone, then with the raw rows) reads as the same rows never compacted.
pub(super) async fn a_days_minute_rollups_compact_alone_and_again_after_a_recompute<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let gens: Vec<Gen> = (0..24)
        .map(|i| Gen {
            point: i % 3,
            instance: i % 2,
            ingested_us: i as i64 * H + 17 * S,
            lag_us: 150_000,
            value: Some(i as i32),
            quality: Quality::Live,
            device_time: false,
            reason: false,
            native_text: false,
        })
        .collect();
    let rows: Vec<ObsRow> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| obs_row(g, i as u64 + 1))
        .collect();
    commit_all(store, epoch, rows.clone()).await;
    let before = reads(b, epoch).await;
    let events = || async { store.load_control_events(0, 1_000).await.expect("events") };
    let events_before = events().await;

    let message = refused(
        store
            .compact_rollup_day(epoch, rollup_request(day(0), Micros(day(0).0 + 23 * H), 1))
            .await,
    );
    assert_eq!(
        message,
        "compaction refused: day 2026-01-15 is not closed (it ends after now)"
    );
    // Closed, but not a day old: it ended at day(1), and a day later is day(2).
    let message = refused(
        store
            .compact_rollup_day(epoch, rollup_request(day(0), Micros(day(2).0 - 1), 1))
            .await,
    );
    assert_eq!(
        message,
        "compaction refused: day 2026-01-15 is younger than 1 days"
    );
    let other = b.another_handle();
    match other
        .compact_rollup_day(epoch, rollup_request(day(0), day(2), 1))
        .await
    {
        Err(StoreError::Fenced { .. }) => {}
        other => panic!("expected a fence, got {other:?}"),
    }
    assert_eq!(events().await, events_before, "a refusal writes nothing");

    // A day old: allowed, with no stream to ask.
    let done = store
        .compact_rollup_day(epoch, rollup_request(day(0), day(2), 1))
        .await
        .expect("compact the rollups");
    assert_eq!((done.buckets, done.chunks), (24, 3), "{done:?}");
    assert!(done.bytes_before > 0 && done.bytes_after > 0);
    let after = events().await;
    assert_eq!(after.len(), events_before.len() + 1, "one event");
    let event = after.last().expect("the rollups' event");
    assert_eq!(Some(event.seq), done.seq);
    assert_eq!(
        (event.kind.as_str(), event.occurred_at, event.core_epoch),
        ("compaction", day(2), epoch)
    );
    let payload: serde_json::Value = serde_json::from_str(&event.payload).expect("payload");
    assert_eq!(payload["table"], "rollup_1m");
    assert_eq!(payload["day"], "2026-01-15");
    assert_eq!(payload["buckets"], 24);
    assert_eq!(payload["chunks"], 3);
    assert_eq!(
        load_1m(b).await,
        before.rollups_1m,
        "the chunks read as the hot rows did"
    );
    let again = store
        .compact_rollup_day(epoch, rollup_request(day(0), day(2), 1))
        .await
        .expect("again");
    assert_eq!(
        (again.buckets, again.seq),
        (0, None),
        "nothing hot: nothing written"
    );
    assert_eq!(events().await.len(), after.len());
    assert_eq!(reads(b, epoch).await, before, "every read answers as before");

    // A late row into a compacted minute, and a reprocess of some of the day's rows: their
    // minutes are recomputed hot over the chunks.
    let late_rows = late_copies(&gens, rows.len() as u64);
    commit_all(store, epoch, late_rows.clone()).await;
    reprocess_some(b, epoch, 3).await;
    store
        .refresh_rollups(epoch, Micros(day(-1).0), day(5))
        .await
        .expect("refresh rollups");
    let recomputed = load_1m(b).await;
    assert_ne!(
        recomputed, before.rollups_1m,
        "the recompute changed some minutes"
    );
    // The same rows never compacted, on a store of their own.
    let d = B::fresh().await;
    let d_lease = d.store().acquire().await.expect("acquire");
    let d_epoch = d_lease.epoch();
    commit_all(d.store(), d_epoch, rows).await;
    commit_all(d.store(), d_epoch, late_rows).await;
    reprocess_some(&d, d_epoch, 3).await;
    d.store()
        .refresh_rollups(d_epoch, Micros(day(-1).0), day(5))
        .await
        .expect("refresh rollups");
    let never = load_1m(&d).await;
    d.release(d_lease).await;
    assert_eq!(
        recomputed, never,
        "recomputed over chunks reads as never compacted"
    );
    // Compacted again, alone: the recomputed minutes merged into the chunks.
    let merged = store
        .compact_rollup_day(epoch, rollup_request(day(0), late(), 1))
        .await
        .expect("again, after a recompute");
    assert!(merged.buckets > 0 && merged.seq.is_some(), "{merged:?}");
    assert_eq!(
        load_1m(b).await,
        never,
        "merged back, every minute as never compacted"
    );
    // Recomputed again, then the raw day compacted with its rollups.
    store
        .refresh_rollups(epoch, Micros(day(-1).0), day(5))
        .await
        .expect("refresh rollups");
    let with_rows = store
        .compact_day(epoch, request(RetentionClass::Measurement, day(0), late(), None))
        .await
        .expect("the raw day");
    // The raw rows stayed hot through the rollups' compactions: the 8 measurement rows of day 0.
    assert_eq!(with_rows.rows, 8, "{with_rows:?}");
    assert!(with_rows.rollups.buckets > 0, "{with_rows:?}");
    assert_eq!(
        load_1m(b).await,
        never,
        "and with the raw day, still the same minutes"
    );
    b.release(lease).await;
}
