//! Properties of the fold against a real SQLite file (issue 10 "What it must show"):
//! - the store after folding has the same fingerprint for every permutation of the same
//!   points and every split of them across deliveries;
//! - folding the journal twice changes nothing;
//! - a fault injected after k object writes, for every k, leaves no object of that delivery,
//!   and a later fold completes it;
//! - entities: over random journals of growing, degraded and equal versions of one workout,
//!   folding in journal order and in any other order gives the same fingerprint and the
//!   journal's expected content, and every retention of a poorer version is counted.

mod common;

use common::{Env, body, counters};
use healthlog::fold::DeliveryResult;
use healthlog_core::time::format_hae;
use proptest::prelude::*;

/// 2026-01-05T10:00:00Z.
const HOUR_10_US: i64 = 1_767_607_200_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A point at one of 6 coordinates over 3 hours, in one of several shapes and values, with
/// noise (key order, last digit, source) that must not matter and differences that must.
fn arb_point() -> impl Strategy<Value = String> {
    (0i64..3, 0i64..2, 0u8..5, 1u8..4, any::<bool>()).prop_map(|(hour, slot, shape, v, reorder)| {
        let at = format_hae(HOUR_10_US + hour * 3_600_000_000 + slot * 1_800_000_000, 60);
        // The same number one ULP away (a last-digit difference) must not matter.
        let base = f64::from(v) + 0.1;
        let qty = if reorder {
            format!("{}", f64::from_bits(base.to_bits() + 1))
        } else {
            format!("{base}")
        };
        match shape {
            0 => format!(r#"{{"date":"{at}","qty":{qty}}}"#),
            1 => format!(r#"{{"date":"{at}","qty":{qty},"Min":0,"Max":0}}"#),
            2 => format!(r#"{{"qty":{qty},"source":"Watch {v}","date":"{at}"}}"#),
            3 => format!(r#"{{"date":"{at}","qty":{qty},"context":"c{v}"}}"#),
            _ => format!(r#"{{"date":"{at}","qty":{qty},"Avg":{v},"series":[]}}"#),
        }
    })
}

async fn fold_in_deliveries(chunks: &[Vec<String>]) -> (Env, String) {
    let env = Env::new().await;
    for chunk in chunks {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        env.deliver("minute", &body(&[("heart_rate", "count/min", &refs)]))
            .await;
    }
    let fp = env.fingerprint().await;
    (env, fp)
}

fn split(points: &[String], cuts: &[usize]) -> Vec<Vec<String>> {
    let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (points.len() + 1)).collect();
    bounds.push(0);
    bounds.push(points.len());
    bounds.sort_unstable();
    bounds.dedup();
    bounds.windows(2).map(|w| points[w[0]..w[1]].to_vec()).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn fingerprint_is_the_same_for_every_permutation_and_split(
        points in prop::collection::vec(arb_point(), 1..14),
        shuffled_seed in any::<u64>(),
        cuts in prop::collection::vec(0usize..15, 0..5),
    ) {
        let rt = runtime();
        let (_, reference) = rt.block_on(fold_in_deliveries(std::slice::from_ref(&points)));
        // A deterministic permutation from the seed (Fisher-Yates over SplitMix-like steps).
        let mut permuted = points.clone();
        let mut s = shuffled_seed;
        for i in (1..permuted.len()).rev() {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            permuted.swap(i, (s >> 33) as usize % (i + 1));
        }
        let chunks = split(&permuted, &cuts);
        let (env, fp) = rt.block_on(fold_in_deliveries(&chunks));
        prop_assert_eq!(&fp, &reference, "{} deliveries", chunks.len());

        // Folding the same journal twice changes nothing, not even a byte.
        rt.block_on(async {
            let before = env.store.all_objects().await.expect("objects");
            env.store.mark_all_pending().await.expect("requeue");
            let (summary, _) = healthlog::fold::fold_pending(&env.store, &env.archive, &env.options, &indicatif::ProgressBar::hidden())
                .await
                .expect("refold");
            assert_eq!(summary.totals.objects_written, 0);
            assert_eq!(env.store.all_objects().await.expect("objects"), before);
            assert_eq!(env.fingerprint().await, reference);
        });
    }

    #[test]
    fn a_fault_after_k_objects_leaves_nothing_and_a_later_fold_completes(
        earlier in prop::collection::vec(arb_point(), 0..6),
        target in prop::collection::vec(arb_point(), 1..10),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let (_, reference) = fold_in_deliveries(&[earlier.clone(), target.clone()]).await;
            let refs: Vec<&str> = target.iter().map(String::as_str).collect();
            let target_body = body(&[("heart_rate", "count/min", &refs)]);
            // How many objects the target writes on top of `earlier`.
            let (probe, _) = fold_in_deliveries(std::slice::from_ref(&earlier)).await;
            let writes = counters(&probe.deliver("minute", &target_body).await).objects_written as usize;
            for k in 0..writes {
                let (mut env, before) = fold_in_deliveries(std::slice::from_ref(&earlier)).await;
                let objects_before = env.store.all_objects().await.expect("objects");
                env.options.fail_after_objects = Some(k);
                let r = env.deliver("minute", &target_body).await;
                assert!(matches!(r, DeliveryResult::LeftPending { .. }), "k={k}: {r:?}");
                assert_eq!(env.fingerprint().await, before, "k={k}: nothing of the delivery is visible");
                assert_eq!(env.store.all_objects().await.expect("objects"), objects_before, "k={k}");
                env.options.fail_after_objects = None;
                let done = env.fold_result(r.id()).await;
                assert_eq!(counters(&done).objects_written as usize, writes, "k={k}");
                assert_eq!(env.fingerprint().await, reference, "k={k}: the later fold completes it");
            }
        });
    }
}

/// A version of workout W1: a route of `len` points (longer is growing, shorter degraded),
/// an `extra` key from length 2 on (so shapes grow with the route and never become
/// incomparable), and a recounted value `kcal`, never 0 (which is empty: a version without it
/// would be incomparable) — equal shapes, different values.
fn workout_version(len: usize, kcal: u8) -> String {
    let route: Vec<String> = (0..len)
        .map(|i| format!(r#"{{"latitude":{}.5}}"#, 40 + i))
        .collect();
    let extra = if len >= 2 { r#","extra":{"qty":1}"# } else { "" };
    format!(
        r#"{{"data":{{"workouts":[{{"id":"W1","start":"2026-01-05 10:00:00 +0000","kcal":{kcal},"route":[{}]{extra}}}]}}}}"#,
        route.join(",")
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn entity_fold_order_does_not_matter_and_every_retention_is_counted(
        journal in prop::collection::vec((1usize..4, 1u8..3), 1..8),
        seed in any::<u64>(),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let bodies: Vec<String> = journal.iter().map(|(l, k)| workout_version(*l, *k)).collect();
            // In journal order.
            let live = Env::new().await;
            for b in &bodies {
                live.deliver("minute", b).await;
            }
            // In another order, journal positions fixed.
            let env = Env::new().await;
            let mut ids = Vec::new();
            for b in &bodies {
                ids.push(healthlog::journal::ingest_body(&env.store, &env.archive, "minute", b.as_bytes(), 1).await.expect("journals").id);
            }
            let mut order: Vec<usize> = (0..ids.len()).collect();
            let mut s = seed;
            for i in (1..order.len()).rev() {
                s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
                order.swap(i, (s >> 33) as usize % (i + 1));
            }
            let fold_ids: Vec<i64> = order.iter().map(|&i| ids[i]).collect();
            let results = healthlog::fold::fold_in_order(&env.store, &env.archive, &fold_ids, &env.options).await.expect("folds");
            assert_eq!(env.fingerprint().await, live.fingerprint().await, "order {order:?} of {journal:?}");
            // The journal's outcome: the longest route, and among those the latest position.
            let longest = journal.iter().map(|v| v.0).max().expect("non-empty");
            let last = journal.iter().rposition(|v| v.0 == longest).expect("present");
            let stored = &env.store.all_entities().await.expect("entities")[0].content;
            let want = workout_version(journal[last].0, journal[last].1);
            assert!(want.contains(std::str::from_utf8(stored).expect("utf-8")), "expected content");
            // Every arrival poorer than what was stored at its fold is counted, nothing else.
            let mut at: Option<(usize, u8, usize)> = None; // (len, kcal, position)
            let mut expected = 0u64;
            for &i in &order {
                let (l, k) = journal[i];
                at = Some(match at {
                    None => (l, k, i),
                    Some((sl, sk, sp)) if (sl, sk) == (l, k) => (sl, sk, sp.max(i)),
                    Some((sl, _, _)) if l > sl => (l, k, i),
                    Some(st @ (sl, _, _)) if l < sl => { expected += 1; st }
                    Some((_, _, sp)) if i > sp => (l, k, i),
                    Some(st) => st,
                });
            }
            let counted: u64 = results.iter().map(|r| counters(r).versions_retained).sum();
            assert_eq!(counted, expected, "order {order:?} of {journal:?}");
        });
    }
}
