//! Reprocess in the Store port's conformance suite (issue 9 item 3; ingest spec, "Reprocess",
//! "The horizon is per class, and partial reprocess is refused"): the same bodies against the
//! memory model and PostgreSQL, driven through `sentinel_runtime::reprocess` exactly as the
//! `sentinel reprocess` command drives it.
//!
//! - a real run fixes a wrong scale: rows recomputed from native under version 2, native
//!   columns, `ingested_at` and keys untouched, assertions kept, rollups over the range equal
//!   the aggregate of the corrected rows, `point_state` rebuilt, one `reprocess` event; and
//!   reinterpretation under version 1 gives back the value ingest stored;
//! - a refused scope (a glob spanning classes, one class out of horizon) changes nothing:
//!   rows, rollups, watermark and control log as before;
//! - the property: for random rows and a random reprocess range, after the run every rollup
//!   bucket of the refreshed range equals the aggregate of the raw rows as they now are.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};
use sentinel_core::reprocess::{Beyond, StoredObservation};
use sentinel_core::{CanonicalValue, Config, Micros, ObsRow, Quality, RetentionClass};
use sentinel_ports::{Lease, RollupGrain, RollupRow, Store};
use sentinel_runtime::reprocess::{self, ReprocessError, Request};
use sentinel_tests::reprocess::{self as rp, LEVEL, POINTS, PRESSURE, RSSI, Sent};

use super::{Backend, Mem, Pg, at, batch};

const T0: &str = "2026-01-15T10:00:00Z";
const S: i64 = 1_000_000;
const EARLIEST: &str = "2000-01-01T00:00:00Z";
const LATEST: &str = "2100-01-01T00:00:00Z";

/// Every row of the test points, class by class and point by point, in the adapter's page
/// order (pages of three, so ties and page boundaries are crossed).
async fn all_rows<S: Store>(store: &S) -> Vec<StoredObservation> {
    let mut out = Vec::new();
    for class in RetentionClass::ALL {
        for point in POINTS {
            let mut after: Option<StoredObservation> = None;
            loop {
                let page = store
                    .load_reprocess_rows(class, point, at(EARLIEST), None, after.as_ref(), 3)
                    .await
                    .expect("load rows");
                let done = page.len() < 3;
                after = page.last().cloned();
                out.extend(page);
                if done {
                    break;
                }
            }
        }
    }
    out
}

async fn all_rollups<S: Store>(store: &S, grain: RollupGrain) -> Vec<RollupRow> {
    store
        .load_rollups(grain, at(EARLIEST), at(LATEST), None)
        .await
        .expect("load rollups")
}

fn request(from: Micros, to: Option<Micros>) -> Request {
    Request {
        glob: "rp.boiler.*".into(),
        from,
        to,
        chunk_rows: 7, // several chunks even for a handful of rows
    }
}

/// The aggregate of `rows` per (point, bucket), as the rollup definition says: counts of all
/// rows; sum, min, max over live rows with a value, only for agg_safe points.
fn oracle(rows: &[StoredObservation], grain: RollupGrain) -> BTreeMap<(String, Micros), RollupRow> {
    let mut out: BTreeMap<(String, Micros), RollupRow> = BTreeMap::new();
    for r in rows {
        let bucket = grain.floor(r.observed_at);
        let e = out
            .entry((r.point_id.clone(), bucket))
            .or_insert_with(|| RollupRow {
                point_id: r.point_id.clone(),
                bucket,
                class: r.class,
                count: 0,
                live_count: 0,
                sum: None,
                min: None,
                max: None,
            });
        e.count += 1;
        if r.quality == Quality::Live {
            e.live_count += 1;
            if r.point_id != RSSI
                && let Some(CanonicalValue::Num(v)) = r.value
            {
                e.sum = Some(e.sum.unwrap_or(0.0) + v);
                e.min = Some(e.min.map_or(v, |m: f64| m.min(v)));
                e.max = Some(e.max.map_or(v, |m: f64| m.max(v)));
            }
        }
    }
    out
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0),
        _ => false,
    }
}

fn same_bucket(stored: &RollupRow, expected: &RollupRow) -> bool {
    stored.point_id == expected.point_id
        && stored.bucket == expected.bucket
        && stored.class == expected.class
        && stored.count == expected.count
        && stored.live_count == expected.live_count
        && close(stored.sum, expected.sum)
        && close(stored.min, expected.min)
        && close(stored.max, expected.max)
}

/// Rollups of every bucket in `[from, to)` against the oracle of `rows`, both ways.
async fn rollups_match<S: Store>(
    store: &S,
    rows: &[StoredObservation],
    grain: RollupGrain,
    (from, to): (Micros, Micros),
) -> Result<(), String> {
    let stored = store
        .load_rollups(grain, from, to, None)
        .await
        .map_err(|e| e.to_string())?;
    let expected: Vec<RollupRow> = oracle(rows, grain)
        .into_values()
        .filter(|r| r.bucket >= from && r.bucket < to)
        .collect();
    if stored.len() != expected.len() || !stored.iter().all(|s| expected.iter().any(|e| same_bucket(s, e))) {
        return Err(format!(
            "{grain:?} over [{from}, {to}): stored {stored:?}\nexpected {expected:?}"
        ));
    }
    Ok(())
}

fn sent(point: &'static str, seq: u64, t: Micros, native: Option<f64>, asserted: Option<Quality>) -> Sent {
    Sent {
        point,
        seq,
        ingested_at: Micros(t.0 + seq as i64),
        observed_at: t,
        native,
        asserted,
        reason: asserted.map(|_| "source_down"),
    }
}

pub(super) async fn reprocess_fixes_a_wrong_scale_and_the_rollups_over_it<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let v1 = rp::load(store, 1).await;
    let t = at(T0);
    let sents = [
        sent(PRESSURE, 1, t, Some(101.5), None),
        sent(PRESSURE, 2, Micros(t.0 + 20 * S), Some(102.0), None),
        sent(PRESSURE, 3, Micros(t.0 + 70 * S), Some(99.5), None),
        // The driver said unavailable, with a number: kept as its assertion.
        sent(
            PRESSURE,
            4,
            Micros(t.0 + 80 * S),
            Some(98.0),
            Some(Quality::Unavailable),
        ),
        // Missing value, no assertion: bad by stage 7, and again under version 2.
        sent(PRESSURE, 5, Micros(t.0 + 90 * S), None, None),
        sent(LEVEL, 6, Micros(t.0 + 10 * S), Some(55.0), None),
        sent(LEVEL, 7, Micros(t.0 + 3_700 * S), Some(150.0), None), // out of range
        sent(RSSI, 8, Micros(t.0 + 30 * S), Some(-70.0), None),
    ];
    let rows: Vec<ObsRow> = sents.iter().map(|s| rp::row(&v1, s)).collect();
    assert_eq!(
        rows[0].value,
        Some(CanonicalValue::Num(101.5 * 0.001)),
        "version 1's wrong scale"
    );
    let originals: BTreeMap<u64, Option<CanonicalValue>> =
        rows.iter().map(|r| (r.key.source_seq, r.value.clone())).collect();
    store.commit(batch(1, epoch, rows, vec![])).await.expect("commit");
    store
        .refresh_rollups(epoch, t, Micros(t.0 + 7_200 * S))
        .await
        .expect("the wrong rollups");
    let before = all_rows(store).await;
    let events_before = store.load_control_events(0, 1_000).await.expect("events").len();

    let v2 = rp::load(store, 2).await;
    assert_eq!(v2.version, 2);
    let config = Config::default();
    let now = Micros(t.0 + 86_400 * S);
    let req = request(t, None);
    let plan = reprocess::plan(store, &v2, &config, &req, now)
        .await
        .expect("plan");
    assert!(!plan.refused(), "{:?}", plan.offenders);
    assert_eq!(plan.rows, 8);
    assert_eq!(plan.old_versions, vec![1]);
    assert_eq!(plan.minute_range, Some((t, Micros(t.0 + 62 * 60 * S))));
    assert_eq!(plan.hour_range, Some((t, Micros(t.0 + 2 * 3_600 * S))));
    let mut seen = Vec::new();
    let report = reprocess::run(
        store,
        epoch,
        &v2,
        &config,
        &req,
        &plan,
        "operator:test",
        now,
        reprocess::Projecting::Checkpoint,
        &mut |n| seen.push(n),
    )
    .await
    .expect("run");
    assert_eq!(report.rows, 8);
    assert_eq!(seen.last(), Some(&8), "progress reaches every row");
    assert!(seen.len() >= 2, "chunks of 7 rows: {seen:?}");

    let after = all_rows(store).await;
    assert_eq!(after.len(), before.len());
    for (old, new) in before.iter().zip(&after) {
        // Never rewritten: native, ingested_at, observed_at, key, unit.
        assert_eq!(
            (
                &old.point_id,
                old.observed_at,
                old.ingested_at,
                &old.key,
                old.native_num,
                &old.unit_native
            ),
            (
                &new.point_id,
                new.observed_at,
                new.ingested_at,
                &new.key,
                new.native_num,
                &new.unit_native
            )
        );
        assert!(
            old.native_text.is_none() || old.native_text == new.native_text,
            "native_text is only ever filled: {old:?} → {new:?}"
        );
        assert_eq!(new.registry_version, 2);
    }
    let by_seq: BTreeMap<u64, &StoredObservation> = after.iter().map(|r| (r.key.source_seq, r)).collect();
    assert_eq!(
        by_seq[&1].value,
        Some(CanonicalValue::Num(101.5)),
        "the corrected scale"
    );
    assert_eq!(by_seq[&1].quality, Quality::Live);
    assert_eq!(by_seq[&4].value, Some(CanonicalValue::Num(98.0)));
    assert_eq!(
        (by_seq[&4].quality, by_seq[&4].reason.as_deref()),
        (Quality::Unavailable, Some("source_down")),
        "the driver's assertion is kept"
    );
    assert_eq!(
        (by_seq[&5].quality, by_seq[&5].reason.as_deref()),
        (Quality::Bad, Some("missing_value"))
    );
    assert_eq!(
        (by_seq[&7].quality, by_seq[&7].reason.as_deref()),
        (Quality::Bad, Some("out_of_range"))
    );
    assert_eq!(by_seq[&6].value, Some(CanonicalValue::Num(55.0)));

    // The rollups over the range are the aggregate of the corrected rows.
    for (grain, range) in [
        (RollupGrain::Minute, plan.minute_range.expect("range")),
        (RollupGrain::Hour, plan.hour_range.expect("range")),
    ] {
        rollups_match(store, &after, grain, range)
            .await
            .expect("rollups match");
    }
    let hour = store
        .load_rollups(RollupGrain::Hour, t, Micros(t.0 + 3_600 * S), Some(PRESSURE))
        .await
        .expect("load");
    assert_eq!(
        hour[0].sum,
        Some(101.5 + 102.0 + 99.5),
        "three live rows, corrected"
    );

    // point_state: the fold of the corrected rows.
    let state = store
        .load_state(&[(PRESSURE.to_string(), RetentionClass::Measurement)])
        .await
        .expect("state");
    let checkpoint = state
        .checkpoints
        .iter()
        .find(|c| &*c.point_id == PRESSURE)
        .expect("a rebuilt checkpoint");
    assert_eq!(
        checkpoint.key.as_ref().map(|k| k.source_seq),
        Some(5),
        "the newest row"
    );
    assert_eq!(
        checkpoint.value,
        Some(CanonicalValue::Num(98.0)),
        "the newest value, corrected"
    );

    // One reprocess event, about the scope.
    let events = store.load_control_events(0, 1_000).await.expect("events");
    assert_eq!(events.len(), events_before + 1);
    let event = events.last().expect("event");
    assert_eq!(
        (event.kind.as_str(), event.point_id.as_deref()),
        ("reprocess", None)
    );
    assert_eq!((event.core_epoch, event.registry_version), (epoch, 2));
    let payload: serde_json::Value = serde_json::from_str(&event.payload).expect("json");
    assert_eq!(payload["old_versions"], serde_json::json!([1]));
    assert_eq!(payload["new_version"], 2);
    assert_eq!(payload["rows"], 8);
    assert_eq!(payload["epoch"], epoch);
    assert!(payload["rollup_1h"].is_array());

    // Reinterpretation under version 1 gives back what ingest stored, from native.
    let v1_again = {
        let stored = store.load_registry(Some(1)).await.expect("read").expect("v1");
        sentinel_runtime::registry_dir::compile_stored(stored).expect("compile")
    };
    for r in &after {
        let found = reprocess::reinterpret(store, &v1_again, &config, &r.point_id, r.observed_at)
            .await
            .expect("reinterpret");
        let mine = found
            .iter()
            .find(|f| f.stored.key == r.key)
            .expect("the row itself");
        assert_eq!(
            mine.under.value, originals[&r.key.source_seq],
            "seq {}",
            r.key.source_seq
        );
        assert_eq!(mine.stored.value, r.value, "stored values are shown beside");
    }
    b.release(lease).await;
}

pub(super) async fn a_refused_reprocess_changes_nothing<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let v1 = rp::load(store, 1).await;
    let t = at(T0);
    let sents = [
        sent(PRESSURE, 1, t, Some(101.5), None),
        sent(LEVEL, 2, Micros(t.0 + 10 * S), Some(55.0), None),
        sent(RSSI, 3, Micros(t.0 + 30 * S), Some(-70.0), None),
    ];
    let rows: Vec<ObsRow> = sents.iter().map(|s| rp::row(&v1, s)).collect();
    store.commit(batch(1, epoch, rows, vec![])).await.expect("commit");
    store
        .refresh_rollups(epoch, t, Micros(t.0 + 3_600 * S))
        .await
        .expect("refresh");
    let v2 = rp::load(store, 2).await;
    let config = Config::default();
    // Ten days on: the diagnostic class (7 days) has let these rows go, the others have not.
    let now = Micros(t.0 + 10 * 86_400 * S);
    let snapshot = || async {
        (
            all_rows(store).await,
            all_rollups(store, RollupGrain::Minute).await,
            all_rollups(store, RollupGrain::Hour).await,
            store.rollup_watermark().await.expect("watermark"),
            store.load_control_events(0, 1_000).await.expect("events"),
            store
                .load_state(&[(PRESSURE.to_string(), RetentionClass::Measurement)])
                .await
                .expect("state")
                .checkpoints,
        )
    };
    let before = snapshot().await;

    let req = request(t, None);
    let plan = reprocess::plan(store, &v2, &config, &req, now)
        .await
        .expect("plan");
    assert!(plan.refused());
    let named: Vec<(&str, RetentionClass, Beyond)> = plan
        .offenders
        .iter()
        .map(|o| (&*o.point_id, o.class, o.beyond))
        .collect();
    assert_eq!(named, vec![(RSSI, RetentionClass::Diagnostic, Beyond::Horizon)]);
    assert_eq!(plan.offenders[0].horizon_days, 7);
    let outcome = reprocess::run(
        store,
        epoch,
        &v2,
        &config,
        &req,
        &plan,
        "operator:test",
        now,
        reprocess::Projecting::Checkpoint,
        &mut |_| {},
    )
    .await;
    assert!(matches!(outcome, Err(ReprocessError::Refused(ref o)) if o.len() == 1));

    // Before the oldest row's day, every class is refused: nothing older exists.
    let early = request(Micros(t.0 - 2 * 86_400 * S), None);
    let plan = reprocess::plan(store, &v2, &config, &early, Micros(t.0 + 86_400 * S))
        .await
        .expect("plan");
    let named: Vec<(&str, Beyond)> = plan.offenders.iter().map(|o| (&*o.point_id, o.beyond)).collect();
    assert_eq!(
        named,
        vec![
            (LEVEL, Beyond::OldestPartition),
            (PRESSURE, Beyond::OldestPartition),
            (RSSI, Beyond::OldestPartition)
        ]
    );

    let after = snapshot().await;
    assert!(before == after, "a refused reprocess changed something");
    // A glob that names nothing is an error, not an empty success.
    let none = Request {
        glob: "nothing.*".into(),
        ..request(t, None)
    };
    assert!(matches!(
        reprocess::plan(store, &v2, &config, &none, now).await,
        Err(ReprocessError::Scope(_))
    ));
    b.release(lease).await;
}

pub(super) async fn reprocess_writes_are_fenced<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let v1 = rp::load(store, 1).await;
    let t = at(T0);
    let rows = vec![rp::row(&v1, &sent(PRESSURE, 1, t, Some(101.5), None))];
    store.commit(batch(1, epoch, rows, vec![])).await.expect("commit");
    b.kill_session(&lease).await;
    let next = store.acquire().await.expect("a newer core");
    let v2 = rp::load(store, 2).await;
    let config = Config::default();
    let req = request(t, None);
    let plan = reprocess::plan(store, &v2, &config, &req, Micros(t.0 + 86_400 * S))
        .await
        .expect("plan");
    let before = all_rows(store).await;
    let outcome = reprocess::run(
        store,
        epoch,
        &v2,
        &config,
        &req,
        &plan,
        "operator:test",
        t,
        reprocess::Projecting::Checkpoint,
        &mut |_| {},
    )
    .await;
    assert!(
        matches!(
            outcome,
            Err(ReprocessError::Store(sentinel_ports::StoreError::Fenced { .. }))
        ),
        "{outcome:?}"
    );
    assert_eq!(all_rows(store).await, before, "a deposed epoch updates nothing");
    b.release(next).await;
}

// ---------------------------------------------------------------------------------------------
// The property.

#[derive(Clone, Debug)]
struct GenSent {
    point: usize,
    offset_s: i64,
    halves: Option<i32>,
    asserted: Option<Quality>,
}

fn gen_sent() -> impl Strategy<Value = GenSent> {
    (
        0..POINTS.len(),
        0..3 * 3_600i64,
        prop::option::weighted(0.9, -400..400i32),
        prop::option::weighted(
            0.2,
            prop::sample::select(vec![Quality::Unavailable, Quality::Bad]),
        ),
    )
        .prop_map(|(point, offset_s, halves, asserted)| GenSent {
            point,
            offset_s,
            halves,
            asserted,
        })
}

async fn check_reprocess<B: Backend>(
    b: &B,
    gens: &[GenSent],
    (from_s, len_s): (i64, Option<i64>),
) -> Result<(), TestCaseError> {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let v1 = rp::load(store, 1).await;
    let t = at(T0);
    let rows: Vec<ObsRow> = gens
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let point = POINTS[g.point];
            // Level's range is 0..100: some generated values fall outside it.
            let native = g
                .halves
                .map(|h| f64::from(h) / 2.0 + if point == LEVEL { 50.0 } else { 0.0 });
            rp::row(
                &v1,
                &sent(
                    point,
                    i as u64 + 1,
                    Micros(t.0 + g.offset_s * S),
                    native,
                    g.asserted,
                ),
            )
        })
        .collect();
    store.commit(batch(1, epoch, rows, vec![])).await.expect("commit");
    store
        .refresh_rollups(epoch, t, Micros(t.0 + 4 * 3_600 * S))
        .await
        .expect("refresh");
    let v2 = rp::load(store, 2).await;
    let config = Config::default();
    let from = Micros(t.0 + from_s * S);
    let to = len_s.map(|l| Micros(from.0 + l * S));
    let req = request(from, to);
    let plan = reprocess::plan(store, &v2, &config, &req, Micros(t.0 + 86_400 * S))
        .await
        .expect("plan");
    prop_assert!(!plan.refused());
    let report = reprocess::run(
        store,
        epoch,
        &v2,
        &config,
        &req,
        &plan,
        "operator:test",
        t,
        reprocess::Projecting::Checkpoint,
        &mut |_| {},
    )
    .await
    .expect("run");
    prop_assert_eq!(report.rows, plan.rows);

    let after = all_rows(store).await;
    for r in &after {
        let inside = r.observed_at >= from && to.is_none_or(|to| r.observed_at < to);
        prop_assert_eq!(r.registry_version, if inside { 2 } else { 1 }, "row {:?}", r.key);
    }
    if let (Some(m), Some(h)) = (plan.minute_range, plan.hour_range) {
        for (grain, range) in [(RollupGrain::Minute, m), (RollupGrain::Hour, h)] {
            if let Err(e) = rollups_match(store, &after, grain, range).await {
                return Err(TestCaseError::fail(e));
            }
        }
    }
    b.release(lease).await;
    Ok(())
}

fn run_property<B: Backend>(cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut runner = TestRunner::new(RunnerConfig {
        cases,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let strategy = (
        prop::collection::vec(gen_sent(), 1..60),
        (0..3 * 3_600i64, prop::option::of(1..2 * 3_600i64)),
    );
    let result = runner.run(&strategy, |(gens, range)| {
        rt.block_on(async {
            let b = B::fresh().await;
            check_reprocess(&b, &gens, range).await
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn after_reprocess_the_rollups_match_the_corrected_rows_memory() {
    run_property::<Mem>(48);
}

#[test]
fn after_reprocess_the_rollups_match_the_corrected_rows_postgres() {
    run_property::<Pg>(12);
}

/// A reprocess that dies between its row updates and its rollup refresh (the process killed,
/// the lock lost) leaves the minutes of the rows it updated invalidated, so the running core's
/// steps bring the rollups back to the aggregate of the rows as they now are: no bucket stays
/// stale until someone runs the command again.
pub(super) async fn a_reprocess_cut_off_before_its_refresh_is_healed_by_the_core_steps<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    let v1 = rp::load(store, 1).await;
    let t = at(T0);
    let sents = [
        sent(PRESSURE, 1, t, Some(101.5), None),
        sent(PRESSURE, 2, Micros(t.0 + 20 * S), Some(102.0), None),
        sent(PRESSURE, 3, Micros(t.0 + 3_000 * S), Some(99.5), None),
    ];
    let rows: Vec<ObsRow> = sents.iter().map(|s| rp::row(&v1, s)).collect();
    store.commit(batch(1, epoch, rows, vec![])).await.expect("commit");
    // The core's steps pass every row: the rollups hold version 1's wrong scale.
    let closed_before = Micros(t.0 + 3 * 3_600 * S);
    let limits = sentinel_ports::RollupStepLimits {
        step_minutes_max: 1_440,
        invalidations_max: 1_000,
    };
    let drain = || async {
        for _ in 0..100 {
            let step = store
                .refresh_closed_rollups(epoch, closed_before, limits)
                .await
                .expect("a rollup step");
            if !step.more && step.watermark.refreshed_to >= RollupGrain::Minute.floor(closed_before) {
                return;
            }
        }
        panic!("the rollup steps do not converge");
    };
    // The first step only starts the marks; later rows are covered by the range it advances.
    store
        .refresh_rollups(epoch, t, closed_before)
        .await
        .expect("history refreshed on demand");
    drain().await;
    let hour = |rows: Vec<RollupRow>| rows.first().and_then(|r| r.sum);
    let wrong = store
        .load_rollups(RollupGrain::Hour, t, Micros(t.0 + 3_600 * S), Some(PRESSURE))
        .await
        .expect("load");
    let wrong = hour(wrong);
    assert!(
        close(wrong, Some(0.303)),
        "version 1's scale in the rollup: {wrong:?}"
    );

    // The reprocess's updates commit, and its process dies before the refresh.
    let v2 = rp::load(store, 2).await;
    let point = v2.point(v2.resolve(PRESSURE).expect("in version 2"));
    let page = store
        .load_reprocess_rows(RetentionClass::Measurement, PRESSURE, t, None, None, 100)
        .await
        .expect("the rows");
    assert_eq!(page.len(), 3);
    let updates = page
        .iter()
        .map(|row| sentinel_core::reprocess::recompute(point, &Config::default(), v2.version, row))
        .collect();
    let updated = store
        .apply_reprocess(epoch, RetentionClass::Measurement, updates)
        .await
        .expect("the updates");
    assert_eq!(updated, 3);

    // The core's next steps recompute the rewritten minutes and their closed hours.
    drain().await;
    let after = all_rows(store).await;
    for (grain, range) in [
        (RollupGrain::Minute, (t, Micros(t.0 + 3_600 * S))),
        (RollupGrain::Hour, (t, Micros(t.0 + 3_600 * S))),
    ] {
        rollups_match(store, &after, grain, range)
            .await
            .unwrap_or_else(|e| panic!("not healed by the core's steps: {e}"));
    }
    let healed = store
        .load_rollups(RollupGrain::Hour, t, Micros(t.0 + 3_600 * S), Some(PRESSURE))
        .await
        .expect("load");
    let healed = hour(healed);
    assert!(
        close(healed, Some(303.0)),
        "the corrected scale in the rollup: {healed:?}"
    );
    b.release(lease).await;
}
