//! Invariant 17 (derived points): every derived reading that commits equals the fold of its
//! committed inputs (DESIGN.md §5 invariant 11; registry README, "Derived points").
//!
//! Owns: each derived point's definition (from the run's registry), every committed row of
//! every input with its commit position (a counter over RETURNING sets, in the order the core
//! applies them), and the check run on every commit of a derived reading:
//!
//! - its trigger (the `trigger` key in its provenance) is a committed row of an input, that
//!   was committed before the reading;
//! - the trigger was its input's newest row, under the fold's order `(observed_at,
//!   ingested_at, key)`, among the rows committed up to it (a late row triggers nothing);
//! - its value is the fold of the rows committed up to the trigger: for a window op the
//!   input's `live` numeric rows with `observed_at` in `(t − window_s, t]`, for a pair op
//!   each input's newest row; no value where the trigger (or a pair's input) is not `live` or
//!   there is nothing to fold. Float folds are compared within 1e-9 relative.
//!
//! A reading the core derived from a row that never committed, or from a window holding one,
//! fails here. Rows are kept for the run (a run is bounded; inputs are a couple of points).

use std::collections::BTreeMap;
use std::sync::Arc;

use sentinel_core::registry::{DerivedOp, Descriptor};
use sentinel_core::{Micros, ObsKey, ObsRow, Quality};

use super::{Key3, key3};

/// One derived point as the registry defines it.
#[derive(Clone, Debug)]
pub struct DerivedDef {
    pub op: DerivedOp,
    pub inputs: Vec<Arc<str>>,
    pub window_us: i64,
}

/// The run's derived points by id, from its registry descriptors.
pub fn definitions(descriptors: &[Descriptor]) -> BTreeMap<Arc<str>, DerivedDef> {
    descriptors
        .iter()
        .filter_map(|d| {
            let derived = d.derived.as_ref()?;
            Some((
                Arc::from(d.id.as_str()),
                DerivedDef {
                    op: derived.op,
                    inputs: derived.inputs.iter().map(|i| Arc::from(i.as_str())).collect(),
                    window_us: i64::from(derived.window_s.unwrap_or(0)) * 1_000_000,
                },
            ))
        })
        .collect()
}

#[derive(Clone, Debug)]
struct InputRow {
    observed_at: Micros,
    ingested_at: Micros,
    key: ObsKey,
    quality: Quality,
    value: Option<f64>,
    /// Commit position: rows with a smaller one were applied before this one.
    position: u64,
}

impl InputRow {
    fn order(&self) -> (Micros, Micros, Key3) {
        (self.observed_at, self.ingested_at, key3(&self.key))
    }
}

#[derive(Default)]
pub struct DerivedModel {
    defs: Arc<BTreeMap<Arc<str>, DerivedDef>>,
    /// Per input point, its committed rows in commit order.
    rows: BTreeMap<Arc<str>, Vec<InputRow>>,
    /// Committed input rows by key: their point and index in `rows`.
    by_key: BTreeMap<Key3, (Arc<str>, usize)>,
    position: u64,
    /// Derived readings checked so far (the run's report shows it: a seed exercised them).
    pub checked: u64,
}

impl DerivedModel {
    pub fn new(defs: Arc<BTreeMap<Arc<str>, DerivedDef>>) -> DerivedModel {
        DerivedModel {
            defs,
            ..DerivedModel::default()
        }
    }

    fn is_input(&self, point: &str) -> bool {
        self.defs.values().any(|d| d.inputs.iter().any(|i| &**i == point))
    }

    /// One row of a RETURNING set, in the order the core applies them. Returns a violation's
    /// text when it is a derived reading that is not the fold of its committed inputs.
    pub fn on_committed(&mut self, row: &ObsRow) -> Option<String> {
        self.position += 1;
        let failure = self.check(row);
        if self.is_input(&row.point_id) {
            let rows = self.rows.entry(row.point_id.clone()).or_default();
            self.by_key
                .insert(key3(&row.key), (row.point_id.clone(), rows.len()));
            rows.push(InputRow {
                observed_at: row.observed_at,
                ingested_at: row.ingested_at,
                key: row.key.clone(),
                quality: row.quality,
                value: row.value.as_ref().and_then(|v| v.num()),
                position: self.position,
            });
        }
        failure
    }

    fn check(&mut self, row: &ObsRow) -> Option<String> {
        let def = self.defs.get(&row.point_id)?.clone();
        self.checked += 1;
        let point = &row.point_id;
        let Some(trigger) = trigger_of(row) else {
            return Some(format!(
                "derived reading of {point} without a trigger in its provenance"
            ));
        };
        let Some((input, index)) = self.by_key.get(&trigger).cloned() else {
            return Some(format!(
                "derived reading of {point} for trigger {trigger:?}, which no commit inserted \
                 before it"
            ));
        };
        let rows = &self.rows[&input];
        let t = &rows[index];
        let upto = |point: &str| -> Vec<&InputRow> {
            self.rows
                .get(point)
                .map(|rs| rs.iter().filter(|r| r.position <= t.position).collect())
                .unwrap_or_default()
        };
        let newest = |point: &str| upto(point).into_iter().max_by(|a, b| a.order().cmp(&b.order()));
        if newest(&input).is_some_and(|n| n.order() > t.order()) {
            return Some(format!(
                "derived reading of {point} for trigger {trigger:?}, a late row of {input} that \
                 triggers nothing"
            ));
        }
        let expected = if def.op.is_window() {
            if t.quality != Quality::Live {
                None
            } else {
                let from = t.observed_at.0.saturating_sub(def.window_us);
                let mut samples: Vec<&InputRow> = upto(&def.inputs[0])
                    .into_iter()
                    .filter(|r| r.quality == Quality::Live)
                    .filter(|r| r.value.is_some_and(f64::is_finite))
                    .filter(|r| r.observed_at.0 > from && r.observed_at <= t.observed_at)
                    .collect();
                samples.sort_by_key(|s| s.order());
                fold(def.op, &samples)
            }
        } else {
            let a = newest(&def.inputs[0]);
            let b = newest(&def.inputs[1]);
            match (a, b) {
                (Some(a), Some(b)) if a.quality == Quality::Live && b.quality == Quality::Live => {
                    match (a.value, b.value, def.op) {
                        (Some(x), Some(y), DerivedOp::Difference) => Some(x - y),
                        (Some(x), Some(y), DerivedOp::Ratio) if y != 0.0 => Some(x / y),
                        _ => None,
                    }
                }
                _ => None,
            }
        };
        let expected = expected.filter(|v| v.is_finite());
        let got = row.value.as_ref().and_then(|v| v.num());
        let equal = match (got, expected) {
            (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * (1.0 + a.abs().max(b.abs())),
            (None, None) => true,
            _ => false,
        };
        (!equal).then(|| {
            format!(
                "derived reading of {point} for trigger {trigger:?} (observed_at {}): the \
                 committed inputs fold to {expected:?}, the reading says {got:?}",
                t.observed_at.0
            )
        })
    }
}

fn fold(op: DerivedOp, samples: &[&InputRow]) -> Option<f64> {
    let values = samples.iter().filter_map(|s| s.value);
    match op {
        DerivedOp::Sum => Some(values.sum()),
        DerivedOp::Count => Some(samples.len() as f64),
        DerivedOp::Mean => (!samples.is_empty()).then(|| values.sum::<f64>() / samples.len() as f64),
        DerivedOp::Min => values.reduce(f64::min),
        DerivedOp::Max => values.reduce(f64::max),
        DerivedOp::RateOfChange => match (samples.first(), samples.last()) {
            (Some(first), Some(last)) if last.observed_at > first.observed_at => {
                let seconds = (last.observed_at.0 - first.observed_at.0) as f64 / 1e6;
                Some((last.value? - first.value?) / seconds)
            }
            _ => None,
        },
        DerivedOp::Difference | DerivedOp::Ratio => None,
    }
}

/// The triggering row's key a derived reading names in its provenance (`detail.trigger`).
fn trigger_of(row: &ObsRow) -> Option<Key3> {
    let detail: serde_json::Value = serde_json::from_str(row.detail.as_deref()?).ok()?;
    let trigger = detail.get("trigger")?.as_array()?;
    Some((
        Arc::from(trigger.first()?.as_str()?),
        u32::try_from(trigger.get(1)?.as_u64()?).ok()?,
        trigger.get(2)?.as_u64()?,
    ))
}
