//! Invariant 21, the event policy (sensor paradigm spec, "record vs raise": every reading is
//! recorded, the policy decides what is raised; registry README, "Event policy"): every
//! transition a core emits for a committed row agrees with its point's `event_policy`,
//! judged against the committed rows that core applied, in the order it applied them:
//!
//! - `always`: one transition for every committed row;
//! - `on_change`: a transition only for a row that changed the point's quality or moved its
//!   value past the deadband (numbers; any change for other kinds) relative to the last edge
//!   value, and one for every row that moved it;
//! - `never`: a transition only for a row that changed the point's quality.
//!
//! Written from the spec, not from the core's projection. Owns, per core epoch and point, the
//! reference view ([`View`]): the last edge value and the position of the value (a late row
//! does not move the value, so it is no edge), and the point's quality as that epoch's
//! transitions said it. The view starts from what the epoch's restore read (the log head's
//! value, else the checkpoint's: restart step 2, "the log is authoritative"), with the quality
//! `restored` or `unknown`.
//!
//! When the check runs: on every row transition a core emits (published or not). A core
//! applies its commits in batch order and each RETURNING set in order, and emits a row's
//! transition as it applies it, so every row of that epoch committed before the transition's
//! row (in that order) was applied, and one with no transition of its own was applied without
//! raising one; those are judged then too. A committed row applied last in its epoch, with no
//! later transition, cannot be told from one never applied (the core died first), and is not
//! judged.
//!
//! What it cannot see it does not guess: a row whose quality the core held back or changed
//! silently is the quality invariant's (13); after a reprocess rewrote a point's rows (the
//! running core rebuilds that point's state without publishing), the point's edge and quality
//! are unknown to the view until a transition tells them again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::{FxHashMap, FxHashSet};
use sentinel_core::registry::{Descriptor, EventPolicy, Kind};
use sentinel_core::{CanonicalValue, CommitReport, Micros, ObsKey, Quality, RestoredState};

use super::{Key3, key3};

/// What invariant 21 needs of a point: its policy, and its deadband under each registry
/// version of the run (version 1, and every later version, which the run stores as `v2`).
#[derive(Clone, Debug, PartialEq)]
pub struct EventDef {
    pub policy: EventPolicy,
    /// The deadband of a number point under version 1 and under later versions; 0 for other
    /// kinds (any change is an edge).
    pub deadband: [f64; 2],
}

impl EventDef {
    fn deadband(&self, registry_version: i32) -> f64 {
        self.deadband[usize::from(registry_version > 1)]
    }
}

/// The definitions of invariant 21 for every point of either registry version.
pub fn definitions(v1: &[Descriptor], v2: &[Descriptor]) -> BTreeMap<Arc<str>, EventDef> {
    let deadband = |d: &Descriptor| if d.kind == Kind::Number { d.deadband } else { 0.0 };
    let mut defs: BTreeMap<Arc<str>, EventDef> = BTreeMap::new();
    for d in v2 {
        defs.insert(
            Arc::from(d.id.as_str()),
            EventDef {
                policy: d.manifest.event_policy,
                deadband: [deadband(d); 2],
            },
        );
    }
    for d in v1 {
        let def = defs.entry(Arc::from(d.id.as_str())).or_insert(EventDef {
            policy: d.manifest.event_policy,
            deadband: [deadband(d); 2],
        });
        def.deadband[0] = deadband(d);
    }
    defs
}

/// `(observed_at, ingested_at, key)`: the log's total order.
type Order = (Micros, Micros, ObsKey);

/// What the view knows of the point's quality.
#[derive(Clone, Copy, Debug, PartialEq)]
enum QualityView {
    /// Since the restore, no transition: `restored` or `unknown` (a row never moves a point to
    /// either, so a row's transition with another quality changed it).
    FromRestore,
    Known(Quality),
    /// Rebuilt by a reprocess without a transition.
    Unsure,
}

/// The reference view of one point in one core epoch.
#[derive(Clone, Debug)]
struct View {
    /// The last edge value, `None` inside when the point has had no value; `None` when a
    /// reprocess left it unknown.
    edge: Option<Option<CanonicalValue>>,
    /// The position of the row that set the current value (`None`: no value yet).
    value_order: Option<Order>,
    quality: QualityView,
}

impl View {
    fn fresh() -> View {
        View {
            edge: Some(None),
            value_order: None,
            quality: QualityView::FromRestore,
        }
    }
}

/// A committed row waiting for its core to apply it.
#[derive(Clone, Debug)]
struct Pending {
    key: Key3,
    point: Arc<str>,
    order: Order,
    value: Option<CanonicalValue>,
    registry_version: i32,
}

/// Is `new` an edge relative to `edge`: a number moved by more than the deadband, another
/// value changed, or the first value.
fn moves_edge(edge: Option<&CanonicalValue>, new: &CanonicalValue, deadband: f64) -> bool {
    match (edge, new) {
        (None, _) => true,
        (Some(CanonicalValue::Num(a)), CanonicalValue::Num(b)) => (a - b).abs() > deadband,
        (Some(old), new) => old != new,
    }
}

#[derive(Clone)]
pub struct EventModel {
    defs: Arc<BTreeMap<Arc<str>, EventDef>>,
    /// Epochs whose restore the checker saw: only those are judged.
    restored: BTreeSet<u32>,
    /// Looked up by (epoch, point), and walked only to mark views unknown (in no order that
    /// matters): hashed, as a restart inserts a view for every point.
    views: FxHashMap<(u32, Arc<str>), View>,
    /// Per epoch, its committed rows not yet known applied, in the order it applies them:
    /// (batch id, position in the RETURNING set).
    pending: BTreeMap<u32, BTreeMap<(u64, u32), Pending>>,
    /// Where each pending row waits. Looked up, never iterated (so hashed).
    position: FxHashMap<Key3, (u32, (u64, u32))>,
    /// Rows judged (for the run's statistics).
    pub judged: u64,
}

impl EventModel {
    pub fn new(defs: Arc<BTreeMap<Arc<str>, EventDef>>) -> EventModel {
        EventModel {
            defs,
            restored: BTreeSet::new(),
            views: FxHashMap::default(),
            pending: BTreeMap::new(),
            position: FxHashMap::default(),
            judged: 0,
        }
    }

    /// Epoch `epoch`'s core read `restored` at its restart: every point's view starts from
    /// it. The value is the log head's when the log holds one, else the checkpoint's (whose
    /// position is the newer of the two); the edge is that value.
    pub fn on_restored(&mut self, epoch: u32, restored: &RestoredState) {
        self.restored.insert(epoch);
        let checkpoints: FxHashMap<&str, &sentinel_core::PointState> =
            restored.checkpoints.iter().map(|s| (&*s.point_id, s)).collect();
        let order = |s: &sentinel_core::PointState| -> Option<Order> {
            Some((s.observed_at?, s.ingested_at?, s.key.clone()?))
        };
        let mut seen = FxHashSet::default();
        for head in &restored.log_heads {
            let point = head.state.point_id.clone();
            seen.insert(point.clone());
            let checkpoint = checkpoints.get(&*point).copied();
            let view = match (&head.state.value, checkpoint) {
                (Some(value), _) => View {
                    edge: Some(Some(value.clone())),
                    value_order: head.value_order.clone(),
                    quality: QualityView::FromRestore,
                },
                (None, Some(c)) if c.value.is_some() => View {
                    edge: Some(c.value.clone()),
                    value_order: order(&head.state).max(order(c)),
                    quality: QualityView::FromRestore,
                },
                _ => View::fresh(),
            };
            self.views.insert((epoch, point), view);
        }
        for c in &restored.checkpoints {
            if seen.contains(&c.point_id) {
                continue;
            }
            let view = match &c.value {
                Some(value) => View {
                    edge: Some(Some(value.clone())),
                    value_order: order(c),
                    quality: QualityView::FromRestore,
                },
                None => View::fresh(),
            };
            self.views.insert((epoch, c.point_id.clone()), view);
        }
    }

    /// A commit landed: its RETURNING rows wait for their core (the batch's epoch) to apply
    /// them.
    pub fn on_commit(&mut self, report: &CommitReport) {
        let epoch = report.batch.epoch;
        if !self.restored.contains(&epoch) {
            return;
        }
        let queue = self.pending.entry(epoch).or_default();
        for (n, &ordinal) in report.inserted.iter().enumerate() {
            let row = &report.batch.rows[ordinal as usize];
            let at = (report.batch.id.0, n as u32);
            let key = key3(&row.key);
            self.position.insert(key.clone(), (epoch, at));
            queue.insert(
                at,
                Pending {
                    key,
                    point: row.point_id.clone(),
                    order: (row.observed_at, row.ingested_at, row.key.clone()),
                    value: row.value.clone(),
                    registry_version: row.registry_version,
                },
            );
        }
    }

    /// A reprocess rewrote `points`' rows: a running core rebuilds their state without a
    /// transition, so their edge and quality are unknown until a transition says them.
    pub fn on_rewritten(&mut self, points: &BTreeSet<Arc<str>>) {
        for ((_, point), view) in &mut self.views {
            if points.contains(point) {
                view.edge = None;
                view.quality = QualityView::Unsure;
            }
        }
    }

    /// A control event's transition of `point` to `quality`, emitted by epoch `epoch`.
    pub fn on_control_transition(&mut self, epoch: u32, point: &Arc<str>, quality: Quality) {
        if self.restored.contains(&epoch) {
            self.view(epoch, point).quality = QualityView::Known(quality);
        }
    }

    fn view(&mut self, epoch: u32, point: &Arc<str>) -> &mut View {
        self.views
            .entry((epoch, point.clone()))
            .or_insert_with(View::fresh)
    }

    /// Invariant 21 for the transition epoch `epoch` emitted for row `key` with `quality`: the
    /// rows it applied before without a transition, then this row. `Err` names the first row
    /// whose raise (or silence) its point's policy forbids.
    pub fn on_row_transition(&mut self, epoch: u32, key: &Key3, quality: Quality) -> Result<(), String> {
        let Some(&(committed_by, at)) = self.position.get(key) else {
            // Not committed, or committed before its epoch's restore was seen: invariant 4
            // judges the first.
            return Ok(());
        };
        if committed_by != epoch {
            return Ok(());
        }
        // The rows up to this one leave the queue one at a time, each judged as it leaves (no
        // list of them is built: this runs for every row transition).
        let mut failure = Ok(());
        while let Some(entry) = self.pending.get_mut(&epoch).and_then(|q| q.first_entry()) {
            if *entry.key() > at {
                break;
            }
            let (position, row) = entry.remove_entry();
            self.position.remove(&row.key);
            let judged = self.apply(epoch, &row, (position == at).then_some(quality));
            if failure.is_ok() {
                failure = judged;
            }
        }
        failure
    }

    /// Folds `row` into its view, `raised` with the transition's quality or not, and judges
    /// it against its point's policy.
    fn apply(&mut self, epoch: u32, row: &Pending, raised: Option<Quality>) -> Result<(), String> {
        let Some(def) = self.defs.get(&row.point).cloned() else {
            return Ok(());
        };
        self.judged += 1;
        let deadband = def.deadband(row.registry_version);
        let view = self.view(epoch, &row.point);

        // The value: only a row newer than the one that set the current value moves it.
        // `Some(true)`: an edge; `Some(false)`: none; `None`: unknown (the edge is).
        let mut edge = Some(false);
        if let Some(value) = &row.value
            && view.value_order.as_ref().is_none_or(|o| row.order > *o)
        {
            edge = view
                .edge
                .as_ref()
                .map(|e| moves_edge(e.as_ref(), value, deadband));
            view.value_order = Some(row.order.clone());
            if edge == Some(true) {
                view.edge = Some(Some(value.clone()));
            }
        }

        let Some(quality) = raised else {
            // Silent: the row changed no quality (the core raises every quality change, which
            // invariant 13 judges), so the view's quality stands.
            return match def.policy {
                EventPolicy::Always => Err(format!(
                    "epoch {epoch}: row {:?} of point {} (event policy always) was applied without a \
                     transition (a later row's transition came)",
                    row.key, row.point
                )),
                EventPolicy::OnChange if edge == Some(true) => Err(format!(
                    "epoch {epoch}: row {:?} moved point {} (event policy on_change) past its deadband \
                     {deadband} without a transition",
                    row.key, row.point
                )),
                _ => Ok(()),
            };
        };
        let changed = match view.quality {
            QualityView::Known(previous) => Some(previous != quality),
            QualityView::FromRestore => Some(!matches!(quality, Quality::Restored | Quality::Unknown)),
            QualityView::Unsure => None,
        };
        view.quality = QualityView::Known(quality);
        if edge.is_none() && changed == Some(false) && row.value.is_some() {
            // An on_change transition with no quality change is a value edge: the edge is
            // this row's value again.
            if def.policy == EventPolicy::OnChange {
                view.edge = row.value.clone().map(Some);
            }
        }
        let policy = match def.policy {
            EventPolicy::Always => return Ok(()),
            EventPolicy::OnChange if changed == Some(false) && edge == Some(false) => "on_change",
            EventPolicy::Never if changed == Some(false) => "never",
            _ => return Ok(()),
        };
        Err(format!(
            "epoch {epoch}: row {:?} of point {} (event policy {policy}) raised a transition ({}) \
             although it changed neither the point's quality{}",
            row.key,
            row.point,
            quality.as_str(),
            if policy == "never" {
                ""
            } else {
                " nor its value past the deadband"
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(seq: u64) -> ObsKey {
        ObsKey {
            driver_instance: Arc::from("d"),
            source_epoch: 1,
            source_seq: seq,
        }
    }

    fn pending(seq: u64, value: f64) -> Pending {
        let k = key(seq);
        Pending {
            key: key3(&k),
            point: Arc::from("p"),
            order: (Micros(seq as i64), Micros(seq as i64), k),
            value: Some(CanonicalValue::Num(value)),
            registry_version: 1,
        }
    }

    fn model(policy: EventPolicy) -> EventModel {
        let defs = BTreeMap::from([(
            Arc::from("p"),
            EventDef {
                policy,
                deadband: [1.0, 1.0],
            },
        )]);
        let mut model = EventModel::new(Arc::new(defs));
        model.restored.insert(1);
        model
    }

    #[test]
    fn on_change_raises_only_past_the_deadband_from_the_last_edge() {
        let mut m = model(EventPolicy::OnChange);
        assert_eq!(m.apply(1, &pending(1, 10.0), Some(Quality::Live)), Ok(()));
        // Drift within the deadband, twice: silent is right, a raise is not.
        assert_eq!(m.apply(1, &pending(2, 10.6), None), Ok(()));
        assert!(m.apply(1, &pending(3, 10.9), Some(Quality::Live)).is_err());
        // 11.2 is past the deadband from the edge (10.0), though not from the last value.
        assert!(m.apply(1, &pending(4, 11.2), None).is_err());
    }

    #[test]
    fn never_raises_only_on_a_quality_change_and_always_on_every_row() {
        let mut m = model(EventPolicy::Never);
        assert_eq!(m.apply(1, &pending(1, 10.0), Some(Quality::Live)), Ok(()));
        assert!(m.apply(1, &pending(2, 50.0), Some(Quality::Live)).is_err());
        assert_eq!(m.apply(1, &pending(3, 50.0), Some(Quality::Bad)), Ok(()));
        let mut m = model(EventPolicy::Always);
        assert_eq!(m.apply(1, &pending(1, 10.0), Some(Quality::Live)), Ok(()));
        assert!(m.apply(1, &pending(2, 10.0), None).is_err());
    }

    #[test]
    fn a_late_row_is_no_edge() {
        let mut m = model(EventPolicy::OnChange);
        assert_eq!(m.apply(1, &pending(5, 10.0), Some(Quality::Live)), Ok(()));
        // Older than the value's row: it does not move the value, so silence is right.
        assert_eq!(m.apply(1, &pending(2, 90.0), None), Ok(()));
        assert!(m.apply(1, &pending(3, 90.0), Some(Quality::Live)).is_err());
    }
}
