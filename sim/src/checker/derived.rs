//! Invariant 17 (derived points): every derived reading that commits equals the fold of its
//! committed inputs (DESIGN.md §5 invariant 11; registry README, "Derived points").
//!
//! Owns: each derived point's definition (from the run's registry), every committed row of
//! every input with its position in the order the cores applied it (the log's `applied`
//! column, migration 0007: batch order, then the fold's order within a batch; commits run
//! concurrently, so this is not the order they reach the store), and the check run on every
//! commit of a derived reading:
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
//! And at the end of a run ([`DerivedModel::missing`]): every committed row that triggered
//! (was its input's newest among the rows applied up to it) has each reader's reading
//! committed, keyed by [`derived_key`] — so a reading a crash lost between its trigger's commit
//! and its publish must have been derived again by a restart. Readings the bus refused (a
//! partition, a full stream) are lost to the bus, not a crash, and are not asked for.
//!
//! A reading the core derived from a row that never committed, or from a window holding one,
//! fails here. Rows are kept for the run (a run is bounded; inputs are a couple of points).

use std::collections::BTreeMap;
use std::sync::Arc;

use std::collections::BTreeSet;

use sentinel_core::derived::derived_key;
use sentinel_core::registry::{DerivedOp, Descriptor};
use sentinel_core::{Micros, ObsKey, ObsRow, Quality};

use super::{Key3, key3};

/// One derived point as the registry defines it.
#[derive(Clone, Debug)]
pub struct DerivedDef {
    /// The driver instance its readings are keyed under.
    pub instance: Arc<str>,
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
                    instance: Arc::from(d.assignment.driver_instance.as_str()),
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
    /// Applied position (`applied`, then rank in the batch under the fold's order): rows with
    /// a smaller one were applied before this one.
    position: (i64, u32),
}

impl InputRow {
    fn order(&self) -> (Micros, Micros, Key3) {
        (self.observed_at, self.ingested_at, key3(&self.key))
    }
}

#[derive(Clone, Default)]
pub struct DerivedModel {
    defs: Arc<BTreeMap<Arc<str>, DerivedDef>>,
    /// Per input point, its committed rows in commit order.
    rows: BTreeMap<Arc<str>, Vec<InputRow>>,
    /// Committed input rows by key: their point and index in `rows`.
    by_key: BTreeMap<Key3, (Arc<str>, usize)>,
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

    /// One row of a RETURNING set with its applied position. Returns a violation's text when
    /// it is a derived reading that is not the fold of its committed inputs.
    pub fn on_committed(&mut self, row: &ObsRow, position: (i64, u32)) -> Option<String> {
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
                position,
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

impl DerivedModel {
    /// The end of a run: the first trigger whose reading (for some reader) is neither
    /// committed (`committed`) nor refused by the bus (`refused`), as a violation's text.
    pub fn missing(&self, committed: impl Fn(&Key3) -> bool, refused: &BTreeSet<Key3>) -> Option<String> {
        for (point, rows) in &self.rows {
            let mut by_position: Vec<&InputRow> = rows.iter().collect();
            by_position.sort_by_key(|r| r.position);
            let readers: Vec<(&Arc<str>, &DerivedDef)> = self
                .defs
                .iter()
                .filter(|(_, d)| d.inputs.iter().any(|i| i == point))
                .collect();
            let mut newest: Option<(Micros, Micros, Key3)> = None;
            for row in by_position {
                let order = row.order();
                if newest.as_ref().is_some_and(|n| *n > order) {
                    continue;
                }
                newest = Some(order);
                for (id, def) in &readers {
                    let (epoch, seq) = derived_key(id, &row.key);
                    let key: Key3 = (def.instance.clone(), epoch, seq);
                    if !committed(&key) && !refused.contains(&key) {
                        return Some(format!(
                            "row {:?} of {point} (observed_at {}) triggered a reading of {id}, \
                             which never committed (key {key:?})",
                            key3(&row.key),
                            row.observed_at.0
                        ));
                    }
                }
            }
        }
        None
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
