//! Derived points (`sentinel_core::derived`): every reading equals a reference computed from
//! the log, for any sequence of committed rows (DESIGN.md §5 invariant 11); quality
//! propagates as typed gaps; keys are a function of the triggering row alone.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::descriptor;
use proptest::prelude::*;
use sentinel_core::derived::{Derivations, DerivedReading, derived_key};
use sentinel_core::registry::{Archetype, Derived, DerivedOp, Kind, Registry, RetentionClass};
use sentinel_core::{CanonicalValue, DeliveryTag, GapReason, Micros, ObsKey, ObsRow, Quality};

const T0: Micros = Micros(1_796_000_000_000_000);
const WINDOW_S: u32 = 10;

fn derived_point(id: &str, op: DerivedOp, inputs: &[&str]) -> sentinel_core::registry::Descriptor {
    let mut d = descriptor(
        id,
        Kind::Number,
        RetentionClass::Measurement,
        "sentinel",
        "derived",
    );
    d.manifest.archetype = Archetype::Derived;
    d.derived = Some(Derived {
        op,
        inputs: inputs.iter().map(|s| s.to_string()).collect(),
        window_s: op.is_window().then_some(WINDOW_S),
    });
    d
}

/// Inputs `in.x` and `in.y`; one derived point per op (window ops over `in.x`, pair ops over
/// `in.x`, `in.y`).
fn registry() -> Arc<Registry> {
    let mut points = vec![
        descriptor(
            "in.x",
            Kind::Number,
            RetentionClass::Measurement,
            "plant",
            "dev-1",
        ),
        descriptor(
            "in.y",
            Kind::Number,
            RetentionClass::Measurement,
            "plant",
            "dev-2",
        ),
    ];
    for op in DerivedOp::ALL {
        let inputs: &[&str] = if op.is_window() {
            &["in.x"]
        } else {
            &["in.x", "in.y"]
        };
        points.push(derived_point(&format!("d.{}", op.as_str()), op, inputs));
    }
    Arc::new(Registry::compile(3, "sha".into(), "hash".into(), points).expect("compiles"))
}

/// A committed row as it comes out of a RETURNING set.
#[derive(Clone, Debug)]
struct Committed {
    input: usize, // 0: in.x, 1: in.y
    observed_ms: i64,
    seq: u64,
    quality: Quality,
    value: f64,
}

fn row(registry: &Registry, c: &Committed) -> ObsRow {
    let id = ["in.x", "in.y"][c.input];
    let point = registry.resolve(id).expect("input");
    let at = T0.add_ms(c.observed_ms);
    ObsRow {
        point,
        point_id: Arc::from(id),
        class: RetentionClass::Measurement,
        ingested_at: at.add_ms(5),
        observed_at: at,
        device_time: None,
        value: (c.quality == Quality::Live || c.quality == Quality::Bad)
            .then_some(CanonicalValue::Num(c.value)),
        native_num: None,
        native_text: None,
        unit_native: None,
        quality: c.quality,
        reason: None,
        detail: None,
        changed: true,
        registry_version: 3,
        key: ObsKey {
            driver_instance: Arc::from(["dev-1", "dev-2"][c.input]),
            source_epoch: 1,
            source_seq: c.seq,
        },
        skew_flagged: false,
        tag: DeliveryTag(c.seq),
    }
}

type Order = (i64, i64, u64);

fn order(c: &Committed) -> Order {
    (c.observed_ms, c.observed_ms + 5, c.seq)
}

/// The reference: what every derived point must say after `log[..=i]`, computed from the log
/// prefix alone, independently of the module's windows and eviction.
fn reference(log: &[Committed], i: usize) -> BTreeMap<String, (Option<f64>, Option<GapReason>)> {
    let r = &log[i];
    let mut out = BTreeMap::new();
    let prefix = &log[..=i];
    let is_newest = prefix
        .iter()
        .filter(|c| c.input == r.input)
        .all(|c| order(c) <= order(r));
    if !is_newest {
        return out; // a late row triggers nothing
    }
    if r.input == 0 {
        let from = r.observed_ms - i64::from(WINDOW_S) * 1_000;
        let mut samples: Vec<&Committed> = prefix
            .iter()
            .filter(|c| c.input == 0 && c.quality == Quality::Live)
            .filter(|c| c.observed_ms > from && c.observed_ms <= r.observed_ms)
            .collect();
        samples.sort_by_key(|c| order(c));
        let values: Vec<f64> = samples.iter().map(|c| c.value).collect();
        for op in DerivedOp::ALL.into_iter().filter(|op| op.is_window()) {
            let value = if r.quality != Quality::Live {
                None
            } else {
                match op {
                    DerivedOp::Sum => Some(values.iter().sum()),
                    DerivedOp::Count => Some(values.len() as f64),
                    DerivedOp::Mean => {
                        (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
                    }
                    DerivedOp::Min => values.iter().copied().reduce(f64::min),
                    DerivedOp::Max => values.iter().copied().reduce(f64::max),
                    DerivedOp::RateOfChange => {
                        let (f, l) = (samples.first(), samples.last());
                        match (f, l) {
                            (Some(f), Some(l)) if l.observed_ms > f.observed_ms => {
                                Some((l.value - f.value) / ((l.observed_ms - f.observed_ms) as f64 / 1e3))
                            }
                            _ => None,
                        }
                    }
                    _ => unreachable!(),
                }
            };
            let gap = match (value, r.quality) {
                (_, q) if q != Quality::Live => Some(GapReason::InputNotLive),
                (None, _) => Some(GapReason::Missing),
                _ => None,
            };
            out.insert(format!("d.{}", op.as_str()), (value, gap));
        }
    }
    // Pair ops read each input's newest row in the prefix.
    let newest = |input: usize| {
        prefix
            .iter()
            .filter(|c| c.input == input)
            .max_by_key(|c| order(c))
    };
    for op in [DerivedOp::Difference, DerivedOp::Ratio] {
        let result = match (newest(0), newest(1)) {
            (Some(a), Some(b)) if a.quality != Quality::Live || b.quality != Quality::Live => {
                (None, Some(GapReason::InputNotLive))
            }
            (Some(a), Some(b)) => {
                let v = match op {
                    DerivedOp::Difference => Some(a.value - b.value),
                    _ => (b.value != 0.0).then(|| a.value / b.value),
                };
                (v, v.is_none().then_some(GapReason::Missing))
            }
            _ => (None, Some(GapReason::Missing)),
        };
        out.insert(format!("d.{}", op.as_str()), result);
    }
    out
}

fn close(a: Option<f64>, b: Option<f64>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs())),
        (None, None) => true,
        _ => false,
    }
}

fn committed() -> impl Strategy<Value = Vec<Committed>> {
    proptest::collection::vec(
        (
            0usize..2,
            // Whole seconds often, so readings land exactly on window edges.
            prop_oneof![(0i64..60).prop_map(|s| s * 1_000), 0i64..60_000],
            prop_oneof![8 => Just(Quality::Live), 1 => Just(Quality::Unavailable), 1 => Just(Quality::Bad)],
            prop_oneof![Just(0.0), -100.0f64..100.0],
        ),
        1..60,
    )
    .prop_map(|rows| {
        rows.into_iter()
            .enumerate()
            .map(|(i, (input, observed_ms, quality, value))| Committed {
                input,
                observed_ms,
                seq: i as u64 + 1,
                quality,
                value,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// For any sequence of committed rows (late ones, degraded ones, both inputs interleaved),
    /// every reading equals the reference fold of the log prefix up to its trigger, and the
    /// rows that trigger are exactly those the reference says.
    #[test]
    fn every_derived_value_equals_the_reference_fold_of_the_log(log in committed()) {
        let registry = registry();
        let mut derivations = Derivations::new(&registry);
        prop_assert_eq!(derivations.len(), DerivedOp::ALL.len());
        for i in 0..log.len() {
            let readings = derivations.on_committed(&row(&registry, &log[i]));
            let expected = reference(&log, i);
            let got: BTreeMap<String, (Option<f64>, Option<GapReason>)> = readings
                .iter()
                .map(|r| (r.point_id.to_string(), (r.value, r.gap)))
                .collect();
            prop_assert_eq!(got.keys().collect::<Vec<_>>(), expected.keys().collect::<Vec<_>>(), "row {}", i);
            for (point, (value, gap)) in &expected {
                let (v, g) = got[point];
                prop_assert!(close(v, *value), "row {} {}: got {:?}, reference {:?}", i, point, v, value);
                prop_assert_eq!(g, *gap, "row {} {}", i, point);
            }
        }
    }
}

#[test]
fn a_reading_is_keyed_by_its_trigger_alone_and_carries_provenance() {
    let registry = registry();
    let c = Committed {
        input: 0,
        observed_ms: 1_000,
        seq: 7,
        quality: Quality::Live,
        value: 21.5,
    };
    let first: Vec<DerivedReading> = Derivations::new(&registry).on_committed(&row(&registry, &c));
    // A restarted core deriving the same committed row again: same keys, same payloads.
    let again: Vec<DerivedReading> = Derivations::new(&registry).on_committed(&row(&registry, &c));
    assert_eq!(first, again);
    let mean = first.iter().find(|r| &*r.point_id == "d.mean").expect("mean");
    let (subject, msg_id, payload) = mean.to_observation();
    assert_eq!(subject, "obs.sentinel.derived");
    let (epoch, seq) = derived_key("d.mean", &mean.trigger);
    assert_eq!(msg_id, format!("derived:{epoch}:{seq}"));
    assert!(
        epoch <= i32::MAX as u32 && seq <= i64::MAX as u64,
        "fits the store's signed columns"
    );
    assert_ne!(
        derived_key("d.sum", &mean.trigger),
        (epoch, seq),
        "each derived point its own key"
    );
    let json: serde_json::Value = serde_json::from_slice(&payload).expect("JSON");
    assert_eq!(json["value"], 21.5);
    assert_eq!(json["detail"]["registry_version"], 3);
    assert_eq!(json["detail"]["op"], "mean");
    assert_eq!(json["detail"]["trigger"], serde_json::json!(["dev-1", 1, 7]));
    assert_eq!(json["detail"]["inputs"][0]["point"], "in.x");
    assert_eq!(json["detail"]["inputs"][0]["rows"], 1);
    // And stage 2 reads it back as an ordinary envelope.
    let env = sentinel_core::wire::decode_envelope(&payload).expect("a valid envelope");
    assert_eq!(env.source_seq, seq);
}

#[test]
fn a_degraded_trigger_gives_a_typed_gap_not_a_value() {
    let registry = registry();
    let mut derivations = Derivations::new(&registry);
    let live = Committed {
        input: 0,
        observed_ms: 1_000,
        seq: 1,
        quality: Quality::Live,
        value: 5.0,
    };
    derivations.on_committed(&row(&registry, &live));
    let down = Committed {
        observed_ms: 2_000,
        seq: 2,
        quality: Quality::Unavailable,
        ..live
    };
    let readings = derivations.on_committed(&row(&registry, &down));
    let mean = readings.iter().find(|r| &*r.point_id == "d.mean").expect("mean");
    assert_eq!((mean.value, mean.gap), (None, Some(GapReason::InputNotLive)));
    let (_, _, payload) = mean.to_observation();
    let json: serde_json::Value = serde_json::from_slice(&payload).expect("JSON");
    assert_eq!(json["quality"], "unavailable");
    assert_eq!(json["reason"], "input_not_live");
    assert!(json["value"].is_null());
}

/// Through the core: a derived reading is published only for a row in the RETURNING set,
/// after the commit, on the derived point's subject with its derived key.
#[test]
fn the_core_derives_from_the_returning_set_only() {
    use sentinel_core::{CommitReport, Config, Core, Effect, Input, RestoredState};
    let registry = registry();
    let deliver = |core: &mut Core, seq: u64| {
        let payload = format!(
            r#"{{"v":1,"point_id":"in.x","driver_instance":"dev-1","source_epoch":1,"source_seq":{seq},"observed_at":"{}","value":4.0}}"#,
            T0.add_ms(-1_000).to_rfc3339()
        );
        common::deliver_and_flush(core, vec![common::delivery(seq, "obs.plant.dev-1", &payload)])
    };
    let derived_publishes = |effects: &[Effect]| -> Vec<String> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::PublishObservation { subject, msg_id, .. } if subject == "obs.sentinel.derived" => {
                    Some(msg_id.clone())
                }
                _ => None,
            })
            .collect()
    };

    let mut core = Core::new(
        Config::default(),
        registry.clone(),
        1,
        &RestoredState::default(),
        T0,
    )
    .expect("core");
    let batch = deliver(&mut core, 1);
    assert!(
        derived_publishes(&common::drain(&mut core)).is_empty(),
        "nothing before the commit"
    );
    let key = batch.rows[0].key.clone();
    let now = core.now();
    core.handle(now, Input::Committed(common::all_inserted(batch)));
    let published = derived_publishes(&common::drain(&mut core));
    // One per window op over in.x, plus the two pair ops (gaps: in.y has no row yet).
    assert_eq!(published.len(), DerivedOp::ALL.len());
    let (epoch, seq) = derived_key("d.mean", &key);
    assert!(
        published.contains(&format!("derived:{epoch}:{seq}")),
        "{published:?}"
    );
    assert_eq!(core.metrics().derived_readings, DerivedOp::ALL.len() as u64);

    // The same row again, swallowed by the unique index (absent from RETURNING): nothing.
    let mut core = Core::new(Config::default(), registry, 2, &RestoredState::default(), T0).expect("core");
    let batch = deliver(&mut core, 1);
    let now = core.now();
    core.handle(
        now,
        Input::Committed(CommitReport {
            batch,
            inserted: vec![],
            quarantine_inserted: 0,
        }),
    );
    assert!(derived_publishes(&common::drain(&mut core)).is_empty());
}

/// What the log holds after a crash: the input rows of `log` (row `i` applied at position `i`,
/// one batch each) and, as rows of the derived points, the readings `stored`.
fn stored_rows(
    registry: &Registry,
    log: &[Committed],
    stored: &[DerivedReading],
) -> Vec<sentinel_core::derived::WindowRow> {
    let inputs = log.iter().enumerate().map(|(i, c)| {
        let r = row(registry, c);
        sentinel_core::derived::WindowRow {
            point_id: r.point_id.clone(),
            observed_at: r.observed_at,
            ingested_at: r.ingested_at,
            key: r.key.clone(),
            quality: r.quality,
            value: r.value.as_ref().and_then(CanonicalValue::num),
            value_bool: None,
            value_text: None,
            applied: Some(i as i64),
        }
    });
    let readings = stored.iter().enumerate().map(|(i, d)| {
        let (epoch, seq) = derived_key(&d.point_id, &d.trigger);
        sentinel_core::derived::WindowRow {
            point_id: d.point_id.clone(),
            observed_at: d.observed_at,
            ingested_at: d.observed_at.add_ms(7),
            key: ObsKey {
                driver_instance: d.instance.clone(),
                source_epoch: epoch,
                source_seq: seq,
            },
            quality: if d.gap.is_some() {
                Quality::Unavailable
            } else {
                Quality::Live
            },
            value: d.value,
            value_bool: None,
            value_text: None,
            applied: Some((log.len() + i) as i64),
        }
    });
    inputs.chain(readings).collect()
}

/// The rows a store would return for `requests` (restart step 5): per request, its point's
/// rows at or after the bound, and its newest `rows_min` whatever their age.
fn answer(
    rows: &[sentinel_core::derived::WindowRow],
    requests: &[sentinel_core::derived::WindowRequest],
) -> Vec<sentinel_core::derived::WindowRow> {
    let mut out = Vec::new();
    for q in requests {
        let mut mine: Vec<&sentinel_core::derived::WindowRow> =
            rows.iter().filter(|r| r.point_id == q.point_id).collect();
        mine.sort_by(|a, b| {
            (b.observed_at, b.ingested_at, &b.key).cmp(&(a.observed_at, a.ingested_at, &a.key))
        });
        let since = mine.iter().take_while(|r| r.observed_at >= q.since).count();
        let take = since.max(mine.len().min(q.rows_min as usize));
        out.extend(mine.into_iter().take(take).cloned());
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// A crash after any prefix of the log, with the readings of any suffix of that prefix
    /// lost (committed triggers whose readings were never published), then a restart
    /// rehydrated from the rows restart step 5 asks for: it derives again exactly the lost
    /// readings (values, gaps, keys, provenance; nothing the log holds), and then exactly
    /// what an uninterrupted run derives from the rest of the log.
    #[test]
    fn a_restart_at_any_point_derives_the_lost_readings_and_then_the_uninterrupted_values(
        log in committed(),
        cut in any::<proptest::sample::Index>(),
        lost in any::<proptest::sample::Index>(),
    ) {
        let registry = registry();
        let k = cut.index(log.len() + 1);
        let j = lost.index(k + 1);
        let mut uninterrupted = Derivations::new(&registry);
        let mut per_row = Vec::new();
        for c in &log {
            per_row.push(uninterrupted.on_committed(&row(&registry, c)));
        }
        let stored: Vec<DerivedReading> = per_row[..j].iter().flatten().cloned().collect();
        let lost_readings: Vec<DerivedReading> = per_row[j..k].iter().flatten().cloned().collect();
        let expected = &per_row[k..];

        let prefix = &log[..k];
        let in_log = stored_rows(&registry, prefix, &stored);
        let mut restarted = Derivations::new(&registry);
        let newest = |idx: sentinel_core::registry::PointIdx| {
            in_log
                .iter()
                .filter(|r| registry.resolve(&r.point_id) == Some(idx))
                .map(|r| r.observed_at)
                .max()
        };
        let requests = restarted.window_requests(&registry, newest);
        let rows = answer(&in_log, &requests);
        let (_, again) = restarted.rehydrate(&registry, &requests, rows, usize::MAX);
        // Every lost reading comes back (a pair op's inputs here are always within the
        // newest `REPLAY_ROWS_MIN` rows, which restart step 5 always reads), and nothing else.
        prop_assert_eq!(again, lost_readings);
        let got: Vec<_> = log[k..].iter().map(|c| restarted.on_committed(&row(&registry, c))).collect();
        prop_assert_eq!(&got[..], expected);
    }
}

/// Readings restart step 5 derives again are held while the stream may still hold their
/// originals (published before the crash, not yet consumed): one whose original commits is
/// dropped, the rest go out once the stream's oldest message is past what it held at startup;
/// with an empty stream they go out at once.
#[test]
fn readings_derived_again_wait_until_the_stream_has_moved_past_its_startup_contents() {
    use sentinel_core::derived::WindowRow;
    use sentinel_core::{Config, Core, Effect, Input, RestoredState};
    let registry = registry();
    let derived_publishes = |effects: &[Effect]| -> Vec<String> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::PublishObservation { subject, msg_id, .. } if subject == "obs.sentinel.derived" => {
                    Some(msg_id.clone())
                }
                _ => None,
            })
            .collect()
    };
    // The log: one committed row of in.x and no reading of it (a crash lost them all).
    let logged = [Committed {
        input: 0,
        observed_ms: 0,
        seq: 1,
        quality: Quality::Live,
        value: 4.0,
    }];
    let restart = |stream: (Option<u64>, u64)| {
        let mut core = Core::new(
            Config::default(),
            registry.clone(),
            2,
            &RestoredState::default(),
            T0,
        )
        .expect("core");
        let rows: Vec<WindowRow> = stored_rows(&registry, &logged, &[]);
        let requests = core.derived_window_requests();
        // No log heads restored here, so ask as the store would for every point read.
        let requests = if requests.is_empty() {
            registry
                .points()
                .map(|(_, p)| sentinel_core::derived::WindowRequest {
                    point_id: p.id.clone(),
                    class: p.descriptor.retention,
                    since: Micros(0),
                    rows_min: 0,
                })
                .collect()
        } else {
            requests
        };
        let (_, again) = core.rehydrate_derived(&requests, rows, 1_000, stream);
        (core, again)
    };

    // An empty stream: published at once.
    let (mut core, again) = restart((None, 40));
    assert_eq!(again, DerivedOp::ALL.len());
    assert_eq!(derived_publishes(&common::drain(&mut core)).len(), again);

    // Messages up to 40 in the stream: held while its front is at or below 40.
    let (mut core, again) = restart((Some(31), 40));
    assert!(derived_publishes(&common::drain(&mut core)).is_empty());
    let now = core.now();
    core.handle(now, Input::StreamFront { first_seq: Some(40) });
    assert!(derived_publishes(&common::drain(&mut core)).is_empty());
    // The original of d.mean's reading was still in the stream and commits: dropped.
    let trigger = row(&registry, &logged[0]).key;
    let (epoch, seq) = derived_key("d.mean", &trigger);
    let payload = format!(
        r#"{{"v":1,"point_id":"d.mean","driver_instance":"derived","source_epoch":{epoch},"source_seq":{seq},"observed_at":"{}","value":4.0}}"#,
        T0.to_rfc3339()
    );
    let batch = common::deliver_and_flush(
        &mut core,
        vec![common::delivery(35, "obs.sentinel.derived", &payload)],
    );
    assert_eq!(batch.rows.len(), 1, "the original is a row");
    let now = core.now();
    core.handle(now, Input::Committed(common::all_inserted(batch)));
    common::drain(&mut core);
    core.handle(now, Input::StreamFront { first_seq: Some(41) });
    let published = derived_publishes(&common::drain(&mut core));
    assert_eq!(published.len(), again - 1, "{published:?}");
    assert!(!published.contains(&format!("derived:{epoch}:{seq}")));
    // Released once: a later front publishes nothing again.
    core.handle(now, Input::StreamFront { first_seq: None });
    assert!(derived_publishes(&common::drain(&mut core)).is_empty());
}
