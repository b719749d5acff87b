//! Acceptance over the generated corpus (issue 10 "What it must show"): live ingest, a rebuild
//! of the journal, and a rebuild from a shuffled journal give one fingerprint; re-ingesting the
//! corpus writes 0 objects; every counter equals the oracle's; and nothing logged at INFO or
//! above over the whole corpus carries one of its values.
//!
//! Size: the full corpus is 92 days (~118 deliveries, ~400,000 coordinates), which a release
//! build runs in seconds. A debug build (`scripts/test`) runs 21 days by default to keep CI
//! short; `HEALTHLOG_ACCEPTANCE_DAYS` sets it, e.g. the full size in debug:
//! `HEALTHLOG_ACCEPTANCE_DAYS=92 cargo test -p healthlog --test acceptance`, or optimised:
//! `cargo test --release -p healthlog --test acceptance` (or `--profile bench`, reusing the
//! benchmark's build).

mod common;

use std::collections::BTreeSet;

use common::{Env, capture_logs, counters};
use healthlog::fold::{self, DeliveryResult};
use healthlog::journal;
use healthlog_core::object;
use healthlog_core::sample;

const SEED: u64 = 20_261_130;

fn days() -> u32 {
    match std::env::var("HEALTHLOG_ACCEPTANCE_DAYS") {
        Ok(v) => v.parse().expect("HEALTHLOG_ACCEPTANCE_DAYS is a number of days"),
        Err(_) if cfg!(debug_assertions) => 14,
        Err(_) => 92,
    }
}

#[tokio::test]
async fn corpus_live_rebuilt_and_shuffled_agree_with_the_oracle() {
    let corpus = sample::generate(SEED, days());
    let oracle = &corpus.oracle;
    let env = Env::new().await;
    let bar = indicatif::ProgressBar::hidden();

    // Live: each delivery journaled and folded as it arrives, with the logs captured at INFO.
    let (logs, guard) = capture_logs();
    let mut results: Vec<DeliveryResult> = Vec::new();
    for d in &corpus.deliveries {
        let j = journal::ingest_body(&env.store, &env.archive, d.layer, &d.body, 1)
            .await
            .expect("journals");
        results.push(env.fold_result(j.id).await);
    }
    drop(guard);

    // Every counter equals the oracle's.
    assert_eq!(results.len(), oracle.deliveries.len());
    for (r, o) in results.iter().zip(&oracle.deliveries) {
        let DeliveryResult::Folded {
            status,
            uncovered,
            counters,
            ..
        } = r
        else {
            panic!("{}: {r:?}", o.name);
        };
        assert_eq!(status, &o.status, "{}", o.name);
        assert_eq!(uncovered, &o.uncovered, "{}", o.name);
        assert_eq!(counters.metrics, o.metrics, "{}", o.name);
        assert_eq!(counters.points, o.points, "{}", o.name);
        assert_eq!(counters.coordinates, o.coordinates, "{}", o.name);
        if let Some(new) = o.objects_new {
            assert_eq!(
                (counters.objects_written, counters.objects_unchanged),
                (new, 0),
                "{}",
                o.name
            );
        }
        assert_eq!(counters.unit_mismatches, o.unit_mismatches, "{}", o.name);
        assert_eq!(counters.incomparable, o.incomparable, "{}", o.name);
        assert_eq!(counters.entities, o.entities, "{}", o.name);
        assert_eq!(
            counters.entities_written, o.entities,
            "{}: every entity id is new",
            o.name
        );
        assert_eq!(counters.skipped_entities, 0, "{}", o.name);
    }
    let entities = env.store.all_entities().await.expect("entities");
    assert_eq!(
        entities.len() as u64,
        oracle.deliveries.iter().map(|d| d.entities).sum::<u64>(),
        "entities"
    );
    let rows = env.store.all_objects().await.expect("objects");
    assert_eq!(rows.len() as u64, oracle.objects, "objects");
    assert_eq!(
        rows.iter().map(|r| r.point_count as u64).sum::<u64>(),
        oracle.coordinates,
        "coordinates"
    );
    let (mut with_context, mut with_min) = (0u64, 0u64);
    let mut seen_coordinates = BTreeSet::new();
    for row in &rows {
        for p in object::decode(&row.payload, row.hour_us).expect("decodes") {
            assert!(seen_coordinates.insert((row.metric.clone(), row.layer.clone(), p.start_us, p.end_us)));
            let v: serde_json::Value = serde_json::from_str(&p.raw).expect("stored points are JSON");
            with_context += u64::from(row.metric == "heart_rate" && v.get("context").is_some());
            with_min +=
                u64::from(row.metric == "step_count" && row.layer == "minute" && v.get("Min").is_some());
        }
    }
    assert_eq!(
        with_context, oracle.points_with_context,
        "rich fields survive poorer copies"
    );
    assert_eq!(
        with_min, oracle.points_with_empty_min,
        "keys with empty values survive"
    );
    let units = |u: &str| {
        rows.iter()
            .filter(|r| r.metric == "weight_body_mass" && r.units == u)
            .count() as u64
    };
    assert_eq!(
        (units("kg"), units("lb")),
        (oracle.objects_in_kg, oracle.objects_in_lb)
    );
    let (live, _) = env.store.fingerprint().await.expect("fingerprint");

    // Rebuilt from the journal, and from the journal shuffled.
    let rebuilt = env.sibling("rebuilt.db").await;
    fold::rebuild_into(&env.store, &rebuilt, &env.archive, &env.options, None, &bar)
        .await
        .expect("rebuilds");
    assert_eq!(
        rebuilt.fingerprint().await.expect("fingerprint").0,
        live,
        "rebuilt == live"
    );
    let mut ids: Vec<i64> = env
        .store
        .journal(None)
        .await
        .expect("journal")
        .iter()
        .map(|e| e.id)
        .collect();
    let mut s = SEED;
    for i in (1..ids.len()).rev() {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ids.swap(i, (s >> 33) as usize % (i + 1));
    }
    let shuffled = env.sibling("shuffled.db").await;
    fold::rebuild_into(
        &env.store,
        &shuffled,
        &env.archive,
        &env.options,
        Some(&ids),
        &bar,
    )
    .await
    .expect("rebuilds");
    assert_eq!(
        shuffled.fingerprint().await.expect("fingerprint").0,
        live,
        "shuffled rebuild == live"
    );

    // Re-ingesting the whole corpus writes nothing.
    for d in &corpus.deliveries {
        let j = journal::ingest_body(&env.store, &env.archive, d.layer, &d.body, 2)
            .await
            .expect("journals");
        assert_eq!(counters(&env.fold_result(j.id).await).objects_written, 0);
    }
    assert_eq!(env.store.fingerprint().await.expect("fingerprint").0, live);

    // No value of the corpus in the logs.
    let text = logs.text();
    let folded = text
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains("delivery folded"))
        .count();
    assert_eq!(folded, corpus.deliveries.len(), "the capture saw every delivery");
    assert!(!oracle.secret_values.is_empty());
    for secret in &oracle.secret_values {
        assert!(!text.contains(secret.as_str()), "{secret:?} appears in the logs");
    }
    eprintln!(
        "acceptance: {} days, {} deliveries, {} coordinates, {} objects, fingerprint {live}",
        oracle.days,
        corpus.deliveries.len(),
        oracle.coordinates,
        oracle.objects
    );
}
