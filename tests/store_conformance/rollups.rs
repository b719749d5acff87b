//! Rollups in the Store port's conformance suite (issue 9; ingest spec, "Retention and
//! rollups"; migrations/0004_rollups.sql): the same bodies against the memory model and
//! PostgreSQL.
//!
//! The property: for random rows (every quality, late arrivals, early ones from a skewed device
//! clock, points that are not `agg_safe`) committed between random steps of the running core's
//! refresh, steps cut off between their claim and their apply (a crash), and random on-demand
//! refreshes, once the watermark has passed every row, every stored
//! bucket equals an aggregate computed here from the rows committed, every such bucket from the
//! watermark's start on is stored, and a second refresh changes nothing. Values are multiples of
//! 0.5 so every summation order gives the same sum exactly.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use sentinel_core::{CanonicalValue, Micros, ObsRow, Quality, RetentionClass};
use sentinel_ports::{Lease, RollupGrain, RollupRow, RollupStepLimits, Store, StoreError};

use super::{Backend, Mem, Pg, RowSpec, at, batch, row, snapshot};

const START: &str = "2026-01-15T10:00:00Z";
const MINUTE_US: i64 = 60_000_000;

/// `(point, agg_safe)`. One point of each kind per class, and a second agg_safe measurement.
const POINTS: [(&str, bool, RetentionClass); 5] = [
    ("r.flow", true, RetentionClass::Measurement),
    ("r.temp", true, RetentionClass::Measurement),
    ("r.rssi", false, RetentionClass::Diagnostic),
    ("r.valve", false, RetentionClass::State),
    ("r.pump", true, RetentionClass::State),
];

fn registry() -> sentinel_core::RegistrySnapshot {
    let entries: Vec<(String, String, String)> = POINTS
        .iter()
        .map(|(id, safe, class)| {
            (
                id.to_string(),
                format!("hash-{id}"),
                format!(
                    r#"{{"agg_safe":{safe},"id":"{id}","retention":"{}"}}"#,
                    class.as_str()
                ),
            )
        })
        .collect();
    let borrowed: Vec<(&str, &str, &str)> = entries
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    snapshot("sha-rollups", "content-rollups", &borrowed)
}

#[derive(Clone, Debug)]
struct GenRow {
    point: usize,
    quality: Quality,
    /// Half-units, so sums are exact.
    halves: Option<i32>,
    /// observed_at relative to the op's time: negative is late, positive is a device clock ahead.
    offset_s: i64,
}

#[derive(Clone, Debug)]
enum Op {
    /// Time passes by this many seconds, then these rows commit with ingested_at = now.
    Commit { advance_s: i64, rows: Vec<GenRow> },
    /// One step of the running core's refresh, closed before `now - settle_s`.
    Step { settle_s: i64 },
    /// A step whose core dies after its claim commits, before its apply: the next step must
    /// finish the claim, and nothing committed in between may be skipped.
    ClaimOnly { settle_s: i64 },
    /// An on-demand refresh of `[now - back_s, now - back_s + len_s)`.
    Refresh { back_s: i64, len_s: i64 },
}

fn gen_row() -> impl Strategy<Value = GenRow> {
    (
        0..POINTS.len(),
        prop::sample::select(Quality::ALL.to_vec()),
        prop::option::weighted(0.9, -2000..2000i32),
        prop_oneof![
            6 => -90..5i64,          // on time or a little late
            2 => -3 * 3600..-90i64,  // late: a driver host replaying its buffer
            1 => 5..400i64,          // a device clock ahead
        ],
    )
        .prop_map(|(point, quality, halves, offset_s)| GenRow {
            point,
            quality,
            halves,
            offset_s,
        })
}

fn gen_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..600i64, prop::collection::vec(gen_row(), 1..12))
            .prop_map(|(advance_s, rows)| Op::Commit { advance_s, rows }),
        3 => (0..180i64).prop_map(|settle_s| Op::Step { settle_s }),
        1 => (0..180i64).prop_map(|settle_s| Op::ClaimOnly { settle_s }),
        1 => (0..4 * 3600i64, 1..3 * 3600i64).prop_map(|(back_s, len_s)| Op::Refresh { back_s, len_s }),
    ]
}

/// The aggregate of `rows`, computed directly: what every stored bucket must hold.
fn oracle(rows: &[ObsRow], grain: RollupGrain) -> BTreeMap<(String, Micros), RollupRow> {
    let mut out: BTreeMap<(String, Micros), (Micros, RollupRow)> = BTreeMap::new();
    for r in rows {
        let bucket = grain.floor(r.observed_at);
        let safe = POINTS.iter().any(|(id, safe, _)| *id == &*r.point_id && *safe);
        let (newest, e) = out.entry((r.point_id.to_string(), bucket)).or_insert((
            r.observed_at,
            RollupRow {
                point_id: r.point_id.to_string(),
                bucket,
                class: r.class,
                count: 0,
                live_count: 0,
                sum: None,
                min: None,
                max: None,
            },
        ));
        // The class is the registry's (every generated row is written to its point's class).
        if r.observed_at >= *newest {
            *newest = r.observed_at;
        }
        e.class = POINTS
            .iter()
            .find(|(id, _, _)| *id == &*r.point_id)
            .map_or(r.class, |(_, _, class)| *class);
        e.count += 1;
        if r.quality == Quality::Live {
            e.live_count += 1;
            if let (true, Some(v)) = (safe, r.value.as_ref().and_then(CanonicalValue::num)) {
                e.sum = Some(e.sum.unwrap_or(0.0) + v);
                e.min = Some(e.min.map_or(v, |m: f64| m.min(v)));
                e.max = Some(e.max.map_or(v, |m: f64| m.max(v)));
            }
        }
    }
    out.into_iter().map(|(k, (_, v))| (k, v)).collect()
}

async fn all_rollups<S: Store>(store: &S, grain: RollupGrain) -> Vec<RollupRow> {
    store
        .load_rollups(grain, Micros(0), at("2100-01-01T00:00:00Z"), None)
        .await
        .expect("load rollups")
}

const LIMITS: RollupStepLimits = RollupStepLimits {
    step_minutes_max: 45,
    invalidations_max: 4,
};

/// Runs one generated history against `b` and checks the property.
async fn check_history<B: Backend>(b: &B, ops: &[Op]) -> Result<(), TestCaseError> {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    store
        .store_registry(&registry())
        .await
        .expect("store the registry");

    let mut now = at(START);
    let mut committed: Vec<ObsRow> = Vec::new();
    let mut seq = 0u64;
    let mut refreshed_to = Micros(i64::MIN);
    // claimed_to of a claim left open by a ClaimOnly: the next step finishes it first.
    let mut open_claim_to = Micros(i64::MIN);
    for (batch_id, op) in ops.iter().enumerate() {
        match op {
            Op::Commit { advance_s, rows } => {
                now = Micros(now.0 + advance_s * 1_000_000 + 1);
                let rows: Vec<ObsRow> = rows
                    .iter()
                    .map(|g| {
                        seq += 1;
                        let (point, _, class) = POINTS[g.point];
                        row(RowSpec {
                            point,
                            class,
                            seq,
                            ingested_at: Micros(now.0 + seq as i64),
                            observed_at: Micros(now.0 + g.offset_s * 1_000_000 + seq as i64),
                            value: g.halves.map(|h| CanonicalValue::Num(f64::from(h) / 2.0)),
                            quality: g.quality,
                            ..RowSpec::default()
                        })
                    })
                    .collect();
                let report = store
                    .commit(batch(batch_id as u64, epoch, rows, vec![]))
                    .await
                    .expect("commit");
                prop_assert_eq!(report.inserted.len(), report.batch.rows.len());
                committed.extend(report.batch.rows);
            }
            Op::Step { settle_s } => {
                let closed_before = Micros(now.0 - settle_s * 1_000_000);
                let step = store
                    .refresh_closed_rollups(epoch, closed_before, LIMITS)
                    .await
                    .expect("a rollup step");
                // The watermark never moves back and never past what is closed (or where it was).
                prop_assert!(step.watermark.refreshed_to >= refreshed_to);
                prop_assert!(
                    step.watermark.refreshed_to <= refreshed_to.max(closed_before).max(open_claim_to)
                );
                refreshed_to = step.watermark.refreshed_to;
                open_claim_to = Micros(i64::MIN);
                prop_assert!(step.minutes_advanced <= LIMITS.step_minutes_max);
                prop_assert!(step.invalidated_minutes <= LIMITS.invalidations_max);
            }
            Op::ClaimOnly { settle_s } => {
                let closed_before = Micros(now.0 - settle_s * 1_000_000);
                b.rollup_claim(epoch, closed_before, LIMITS)
                    .await
                    .expect("a rollup claim");
                let watermark = store
                    .rollup_watermark()
                    .await
                    .expect("watermark")
                    .expect("a claim starts the marks");
                // A claim moves only claimed_to, never refreshed_to.
                prop_assert!(refreshed_to == Micros(i64::MIN) || watermark.refreshed_to == refreshed_to);
                prop_assert!(watermark.claimed_to >= watermark.refreshed_to);
                refreshed_to = watermark.refreshed_to;
                open_claim_to = open_claim_to.max(watermark.claimed_to);
            }
            Op::Refresh { back_s, len_s } => {
                let from = Micros(now.0 - back_s * 1_000_000);
                let to = Micros(from.0 + len_s * 1_000_000);
                let refresh = store.refresh_rollups(epoch, from, to).await.expect("refresh");
                // Rounded outward, each to its own buckets.
                prop_assert_eq!(refresh.minute_range.0, RollupGrain::Minute.floor(from));
                prop_assert_eq!(refresh.minute_range.1, RollupGrain::Minute.ceil(to));
                prop_assert_eq!(refresh.hour_range.0, RollupGrain::Hour.floor(from));
                prop_assert_eq!(refresh.hour_range.1, RollupGrain::Hour.ceil(to));
                // Right away, every bucket in the rounded ranges is the raw rows' aggregate.
                for (grain, (lo, hi)) in [
                    (RollupGrain::Minute, refresh.minute_range),
                    (RollupGrain::Hour, refresh.hour_range),
                ] {
                    let stored = store.load_rollups(grain, lo, hi, None).await.expect("load");
                    let expected: Vec<RollupRow> = oracle(&committed, grain)
                        .into_values()
                        .filter(|r| r.bucket >= lo && r.bucket < hi)
                        .collect();
                    prop_assert_eq!(
                        stored,
                        expected,
                        "{:?} after refreshing [{}, {})",
                        grain,
                        from,
                        to
                    );
                }
            }
        }
    }

    // Let the watermark pass every row and drain the invalidations.
    let last_observed = committed.iter().map(|r| r.observed_at).max().unwrap_or(now);
    let end = Micros(now.max(last_observed).0 + 2 * 3_600_000_000);
    let mut steps = 0;
    loop {
        let step = store
            .refresh_closed_rollups(epoch, end, LIMITS)
            .await
            .expect("a rollup step");
        steps += 1;
        prop_assert!(steps < 10_000, "the steps do not converge");
        if step.watermark.refreshed_to >= RollupGrain::Minute.floor(end) && !step.more {
            break;
        }
    }
    let watermark = store
        .rollup_watermark()
        .await
        .expect("watermark")
        .expect("started");

    for grain in RollupGrain::ALL {
        let expected = oracle(&committed, grain);
        let stored = all_rollups(store, grain).await;
        for r in &stored {
            prop_assert_eq!(
                Some(r),
                expected.get(&(r.point_id.clone(), r.bucket)),
                "stored {:?} bucket differs from its raw rows",
                grain
            );
        }
        let start = grain.floor(watermark.refreshed_from);
        let stored_keys: Vec<(String, Micros)> =
            stored.iter().map(|r| (r.point_id.clone(), r.bucket)).collect();
        for key in expected.keys().filter(|(_, bucket)| *bucket >= start) {
            prop_assert!(
                stored_keys.contains(key),
                "{:?} bucket {:?} from the watermark's start on is missing",
                grain,
                key
            );
        }
    }

    // A second refresh over everything changes nothing.
    let first = committed.iter().map(|r| r.observed_at).min().unwrap_or(now);
    let before = (
        all_rollups(store, RollupGrain::Minute).await,
        all_rollups(store, RollupGrain::Hour).await,
    );
    store.refresh_rollups(epoch, first, end).await.expect("refresh");
    store
        .refresh_rollups(epoch, first, end)
        .await
        .expect("refresh again");
    let after = (
        all_rollups(store, RollupGrain::Minute).await,
        all_rollups(store, RollupGrain::Hour).await,
    );
    // Buckets before the watermark's start may appear (history refreshed on demand), but none
    // that existed changes.
    for (grain, (old, new)) in [
        (RollupGrain::Minute, (&before.0, &after.0)),
        (RollupGrain::Hour, (&before.1, &after.1)),
    ] {
        for r in old {
            prop_assert!(
                new.contains(r),
                "{:?} bucket changed on a second refresh: {:?}",
                grain,
                r
            );
        }
        let expected = oracle(&committed, grain);
        prop_assert_eq!(
            new.len(),
            expected.len(),
            "{:?}: a full refresh stores every bucket",
            grain
        );
    }
    b.release(lease).await;
    Ok(())
}

/// Runs the property with `cases` cases, each on a fresh backend.
fn run_property<B: Backend>(cases: u32) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&prop::collection::vec(gen_op(), 1..40), |ops| {
        rt.block_on(async {
            let b = B::fresh().await;
            check_history(&b, &ops).await
        })
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn rollups_equal_the_aggregate_of_their_raw_rows_memory() {
    run_property::<Mem>(128);
}

#[test]
fn rollups_equal_the_aggregate_of_their_raw_rows_postgres() {
    // A fresh database per case: fewer cases, the same histories' shapes.
    run_property::<Pg>(12);
}

// ---------------------------------------------------------------------------------------------
// Example-based bodies, run against both stores by `conformance!`.

/// Counts only for a point that is not agg_safe, even when its live rows carry numbers; live
/// rows only in sum/min/max; a gappy bucket shows it in live_count.
pub(super) async fn rollups_keep_counts_only_for_points_not_agg_safe<B: Backend>(b: &B) {
    let store = b.store();
    let lease = store.acquire().await.expect("acquire");
    let epoch = lease.epoch();
    store.store_registry(&registry()).await.expect("registry");
    let t = at(START);
    let spec = |point, class, seq: u64, q, v: f64| {
        row(RowSpec {
            point,
            class,
            seq,
            ingested_at: Micros(t.0 + seq as i64),
            observed_at: Micros(t.0 + seq as i64 * 1_000_000),
            value: Some(CanonicalValue::Num(v)),
            quality: q,
            ..RowSpec::default()
        })
    };
    let rows = vec![
        spec("r.flow", RetentionClass::Measurement, 1, Quality::Live, 2.0),
        spec("r.flow", RetentionClass::Measurement, 2, Quality::Live, 4.0),
        spec("r.flow", RetentionClass::Measurement, 3, Quality::Bad, 1000.0),
        spec("r.rssi", RetentionClass::Diagnostic, 4, Quality::Live, -70.0),
        spec("r.rssi", RetentionClass::Diagnostic, 5, Quality::Live, -60.0),
    ];
    store.commit(batch(1, epoch, rows, vec![])).await.expect("commit");
    let refresh = store
        .refresh_rollups(epoch, Micros(t.0 + 30_000_000), Micros(t.0 + 31_000_000))
        .await
        .expect("refresh");
    assert_eq!(
        refresh.minute_range,
        (t, Micros(t.0 + MINUTE_US)),
        "rounded outward"
    );
    let minute = store
        .load_rollups(RollupGrain::Minute, t, Micros(t.0 + MINUTE_US), None)
        .await
        .expect("load");
    let flow = RollupRow {
        point_id: "r.flow".into(),
        bucket: t,
        class: RetentionClass::Measurement,
        count: 3,
        live_count: 2,
        sum: Some(6.0),
        min: Some(2.0),
        max: Some(4.0),
    };
    let rssi = RollupRow {
        point_id: "r.rssi".into(),
        bucket: t,
        class: RetentionClass::Diagnostic,
        count: 2,
        live_count: 2,
        sum: None,
        min: None,
        max: None,
    };
    assert_eq!(minute, vec![flow.clone(), rssi.clone()]);
    let hour = store
        .load_rollups(RollupGrain::Hour, t, Micros(t.0 + 3_600_000_000), Some("r.rssi"))
        .await
        .expect("load");
    assert_eq!(hour, vec![rssi]);
    b.release(lease).await;
}

/// Every rollup write is fenced like every other write, and a fenced one writes nothing.
pub(super) async fn rollup_writes_are_fenced<B: Backend>(b: &B) {
    let store = b.store();
    let old = store.acquire().await.expect("acquire");
    let stale = old.epoch();
    store.store_registry(&registry()).await.expect("registry");
    let t = at(START);
    store
        .commit(batch(
            1,
            stale,
            vec![row(RowSpec {
                point: "r.flow",
                ..RowSpec::default()
            })],
            vec![],
        ))
        .await
        .expect("commit");
    b.release(old).await;
    let new = store.acquire().await.expect("acquire again");
    let far = Micros(t.0 + 3_600_000_000);
    assert!(matches!(
        store.refresh_rollups(stale, t, far).await,
        Err(StoreError::Fenced { epoch, current, .. }) if epoch == stale && current == new.epoch()
    ));
    assert!(matches!(
        store.refresh_closed_rollups(stale, far, LIMITS).await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(store.rollup_watermark().await.expect("watermark"), None);
    assert!(all_rollups(store, RollupGrain::Minute).await.is_empty());
    // The current epoch writes, and the first step starts the watermark and recomputes the
    // rows committed before it.
    let step = store
        .refresh_closed_rollups(new.epoch(), far, LIMITS)
        .await
        .expect("step");
    assert_eq!(step.watermark.refreshed_from, far);
    assert_eq!(step.invalidated_minutes, 1);
    assert_eq!(all_rollups(store, RollupGrain::Minute).await.len(), 1);
    assert_eq!(all_rollups(store, RollupGrain::Hour).await.len(), 1);
    b.release(new).await;
}
