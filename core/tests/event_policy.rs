//! Event policy at runtime (sensor paradigm, "Record and raise are two verbs"; registry
//! README, `event_policy`): every committed row is recorded and folded, and the point's policy
//! alone decides which of them also raise a transition on `state.<point_id>`.

mod common;

use std::sync::Arc;

use common::*;
use sentinel_core::registry::{EventPolicy, Kind, Registry, RetentionClass};
use sentinel_core::{CommitReport, Config, Core, Effect, Input, Micros, RestoredState};

const POLICIES: [(&str, EventPolicy); 3] = [
    ("p.always", EventPolicy::Always),
    ("p.on_change", EventPolicy::OnChange),
    ("p.never", EventPolicy::Never),
];

fn registry() -> Arc<Registry> {
    let descriptors = POLICIES
        .iter()
        .map(|(id, policy)| {
            let mut d = descriptor(
                id,
                Kind::Number,
                RetentionClass::Measurement,
                "plant-a",
                "modbus-1",
            );
            d.deadband = 0.5;
            d.manifest.event_policy = *policy;
            d
        })
        .collect();
    Arc::new(Registry::compile(1, "sha".into(), "hash".into(), descriptors).expect("compiles"))
}

/// One reading: the value (JSON) and any extra envelope fields. Observed a second apart, so
/// each is newer than the one before.
const READINGS: [(&str, &str); 6] = [
    ("10.0", ""),                            // unknown → live: quality edge
    ("10.0", ""),                            // same value: nothing changed
    ("10.2", ""),                            // inside the 0.5 deadband
    ("12.0", ""),                            // past the deadband: value edge
    ("null", r#","quality":"unavailable""#), // quality edge
    ("12.0", ""),                            // back to live: quality edge, same value
];

fn deliveries() -> Vec<sentinel_core::Delivery> {
    let mut out = Vec::new();
    let mut seq = 0;
    for (point, _) in POLICIES {
        for (i, (value, extra)) in READINGS.iter().enumerate() {
            seq += 1;
            let observed = T0.add_ms(-10_000 + 1_000 * i as i64);
            let payload = format!(
                r#"{{"v":1,"point_id":"{point}","driver_instance":"modbus-1","source_epoch":1,"source_seq":{seq},"observed_at":"{}","value":{value}{extra}}}"#,
                observed.to_rfc3339()
            );
            out.push(delivery(seq, "obs.plant-a.modbus-1", &payload));
        }
    }
    out
}

/// Transitions published per point after the batch commits with `inserted` as its RETURNING
/// set (`None`: every row).
fn transitions(inserted: Option<Vec<u32>>) -> Vec<(String, usize)> {
    let mut core = Core::new(Config::default(), registry(), 1, &RestoredState::default(), T0).expect("core");
    let batch = deliver_and_flush(&mut core, deliveries());
    assert_eq!(batch.rows.len(), POLICIES.len() * READINGS.len());
    let report = match inserted {
        None => all_inserted(batch),
        Some(inserted) => CommitReport {
            batch,
            inserted,
            quarantine_inserted: 0,
        },
    };
    let now: Micros = core.now();
    core.handle(now, Input::Committed(report));
    let effects = drain(&mut core);
    POLICIES
        .iter()
        .map(|(point, _)| {
            let subject = format!("state.{point}");
            let n = effects
                .iter()
                .filter(|e| matches!(e, Effect::Publish { subject: s, .. } if *s == subject))
                .count();
            (point.to_string(), n)
        })
        .collect()
}

#[test]
fn always_raises_per_row_on_change_per_edge_never_per_quality_edge() {
    assert_eq!(
        transitions(None),
        vec![
            ("p.always".to_owned(), 6),    // every committed reading
            ("p.on_change".to_owned(), 4), // quality edges and the value edge
            ("p.never".to_owned(), 3),     // the three quality edges only
        ]
    );
}

/// `always` is per committed row, not per delivery: rows the unique index swallowed (absent
/// from RETURNING, as on a redelivery after a crash) raise nothing, so a row raises at most
/// once across incarnations.
#[test]
fn always_raises_only_for_rows_in_the_returning_set() {
    // Only the `always` point's second and fourth rows are new.
    let got = transitions(Some(vec![1, 3]));
    assert_eq!(got[0], ("p.always".to_owned(), 2));
    assert_eq!(got[1].1 + got[2].1, 0);
    // Every row of every point conflicted: nothing at all.
    let none = transitions(Some(vec![]));
    assert!(none.iter().all(|(_, n)| *n == 0), "{none:?}");
}
