//! Stage 13 and the checkpoint: the authoritative in-memory projection of every point's value
//! and quality (ingest spec, "Projection"; DESIGN.md §5 invariant 5).
//!
//! Owns: per-point state, folding committed rows into it, deciding which folds are
//! transitions, and the checkpoint policy (quality changes at once, value changes at most every
//! `checkpoint_value_interval_ms` per point, everything dirty every
//! `checkpoint_full_interval_ms`).
//!
//! The fold is a function of the log, not of processing order: the quality, `observed_at` and
//! key are those of the greatest committed row under `(observed_at, ingested_at, key)`; the
//! value is that of the greatest committed row that carried one. A late observation is stored
//! but does not move the current value back. A degraded quality never nulls the value.

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::config::Config;
use crate::log::{CanonicalValue, ObsKey, ObsRow, Quality};
use crate::registry::{EventPolicy, Kind, PointIdx, Registry};
use crate::state::{LogHead, OrderKey, PointState, RestoredState};
use crate::time::Micros;
use crate::wire::{Transition, state_subject};

#[derive(Debug)]
struct Slot {
    state: PointState,
    /// Order key of the row that set `state.value`.
    value_key: Option<OrderKey>,
    /// The value at the last change past the deadband; stage 10 compares against it so slow
    /// drift still produces an edge once it exceeds the deadband.
    edge_value: Option<CanonicalValue>,
    deadband: f64,
    /// Which committed readings also raise a transition (see [`Projection::apply`]).
    event_policy: EventPolicy,
    /// The registry's `freshness_s`: a row is current while `observed_at` + this is ahead of
    /// the core's clock, and the watchdog deadline is `observed_at` + this.
    freshness_us: i64,
    /// How long after its latest reading the watchdog's deadline falls: the declared
    /// `heartbeat_s` of a point that has one (never longer than `freshness_s`), else
    /// `freshness_s`.
    deadline_us: i64,
    subject: String,
    last_checkpoint_at: Option<Micros>,
}

impl Slot {
    /// The point's current state as a transition, caused by the row `key` or the control
    /// event `control_seq`. `fallback` stands in for an `observed_at`/`ingested_at` the state
    /// does not have yet.
    fn transition(
        &self,
        fallback: (Micros, Micros),
        registry_version: i32,
        core_epoch: u32,
        key: Option<&ObsKey>,
        control_seq: Option<i64>,
    ) -> Published {
        let state = &self.state;
        let transition = Transition {
            point_id: &state.point_id,
            value: state.value.as_ref(),
            quality: state.quality,
            reason: state.reason.as_deref(),
            observed_at: state.observed_at.unwrap_or(fallback.0),
            ingested_at: state.ingested_at.unwrap_or(fallback.1),
            registry_version,
            core_epoch,
            key,
            control_seq,
        };
        Published {
            subject: self.subject.clone(),
            payload: transition.encode(),
        }
    }
}

/// A transition ready to publish.
#[derive(Clone, Debug, PartialEq)]
pub struct Published {
    pub subject: String,
    pub payload: Vec<u8>,
}

#[derive(Debug)]
pub struct Projection {
    slots: Vec<Slot>,
    dirty_value: BTreeSet<PointIdx>,
    dirty_quality: BTreeSet<PointIdx>,
    last_full_checkpoint_at: Micros,
    value_interval_us: i64,
    full_interval_us: i64,
    points_max: usize,
}

fn order_key_of(state: &PointState) -> Option<OrderKey> {
    state.order_key().map(|(o, i, k)| (o, i, k.clone()))
}

/// Is `new` a change past the deadband relative to `old`?
pub fn is_edge(old: Option<&CanonicalValue>, new: &CanonicalValue, deadband: f64) -> bool {
    match (old, new) {
        (Some(CanonicalValue::Num(a)), CanonicalValue::Num(b)) => (a - b).abs() > deadband,
        (Some(a), b) => a != b,
        (None, _) => true,
    }
}

impl Projection {
    /// Restart steps 2–3: the log heads are authoritative, the checkpoint supplies what the log
    /// does not hold; every quality but `unknown` is forced to `restored`. Every restored point
    /// is marked for a checkpoint so the forced quality is recorded.
    pub fn restore(
        registry: &Registry,
        restored: &RestoredState,
        config: &Config,
        now: Micros,
    ) -> Projection {
        let heads: FxHashMap<&str, &LogHead> = restored
            .log_heads
            .iter()
            .map(|h| (&*h.state.point_id, h))
            .collect();
        let checkpoints: FxHashMap<&str, &PointState> =
            restored.checkpoints.iter().map(|s| (&*s.point_id, s)).collect();
        let mut slots = Vec::with_capacity(registry.len());
        let mut dirty_quality = BTreeSet::new();
        for (idx, point) in registry.points() {
            let head = heads.get(&*point.id).copied();
            let checkpoint = checkpoints.get(&*point.id).copied();
            let (mut state, value_from_head) =
                merge(point.id.clone(), head.map(|h| &h.state), checkpoint, now);
            // The value's own position: exact when it came from the log head; a checkpoint's
            // value is bounded from above by the checkpoint's position; no value, no position,
            // so any valued row that arrives later is taken, as the fold would.
            let value_key = match head {
                Some(head) if value_from_head => head.value_order.clone(),
                _ if state.value.is_some() => order_key_of(&state),
                _ => None,
            };
            if state.quality != Quality::Unknown {
                state.quality = Quality::Restored;
                state.reason = None;
                state.quality_since = now;
                dirty_quality.insert(idx);
            }
            let deadband = if point.descriptor.kind == Kind::Number {
                point.descriptor.deadband
            } else {
                0.0
            };
            slots.push(Slot {
                value_key,
                edge_value: state.value.clone(),
                state,
                deadband,
                event_policy: point.descriptor.manifest.event_policy,
                freshness_us: i64::from(point.descriptor.freshness_s) * 1_000_000,
                deadline_us: i64::from(
                    point
                        .descriptor
                        .manifest
                        .heartbeat_s
                        .unwrap_or(point.descriptor.freshness_s)
                        .min(point.descriptor.freshness_s),
                ) * 1_000_000,
                subject: state_subject(&point.id),
                last_checkpoint_at: None,
            });
        }
        Projection {
            slots,
            dirty_value: BTreeSet::new(),
            dirty_quality,
            last_full_checkpoint_at: now,
            value_interval_us: config.checkpoint_value_interval_ms * 1_000,
            full_interval_us: config.checkpoint_full_interval_ms * 1_000,
            points_max: config.checkpoint_points_max,
        }
    }

    pub fn state(&self, point: PointIdx) -> &PointState {
        &self.slots[point.0 as usize].state
    }

    pub fn states(&self) -> impl Iterator<Item = &PointState> {
        self.slots.iter().map(|s| &s.state)
    }

    /// Stage 10's reference value for a point.
    pub fn edge_value(&self, point: PointIdx) -> Option<&CanonicalValue> {
        self.slots[point.0 as usize].edge_value.as_ref()
    }

    /// Restart step 4 for one control event: advances the point's `watermark_seq`. Returns
    /// false when the event is at or below the watermark already.
    pub fn advance_watermark(&mut self, point: PointIdx, seq: i64) -> bool {
        let slot = &mut self.slots[point.0 as usize];
        if slot.state.watermark_seq.is_some_and(|w| w >= seq) {
            return false;
        }
        slot.state.watermark_seq = Some(seq);
        self.dirty_value.insert(point);
        true
    }

    /// The point's watchdog deadline: its latest observation plus its heartbeat, if it
    /// declares one, else plus `freshness_s`.
    pub fn freshness_deadline(&self, point: PointIdx) -> Option<Micros> {
        let slot = &self.slots[point.0 as usize];
        slot.state
            .observed_at
            .map(|o| Micros(o.0.saturating_add(slot.deadline_us)))
    }

    /// Stage 13 for one row of a RETURNING set. Returns the transition to publish, as the
    /// point's `event_policy` says (sensor paradigm, "Record and raise are two verbs": every
    /// row is recorded and folded; the policy decides only what is raised):
    /// - `always`: one transition for every committed row, whether or not it changed anything
    ///   (the caller applies each row of a RETURNING set once, so at most once per row);
    /// - `on_change`: when the row changed the point's quality or moved its value past the
    ///   deadband;
    /// - `never`: only when the row changed the point's quality (a quality edge is a fact
    ///   about the point, not a reading, and consumers rely on it).
    ///
    /// Recovery rule (core runtime spec, "Draining"): a `live` row that is not current (its
    /// `observed_at` plus the point's freshness is not ahead of `now`, as for replayed backlog)
    /// moves the value and `observed_at` as any row does, but never raises the point to `live`;
    /// points reach `live` only from current data.
    pub fn apply(&mut self, row: &ObsRow, core_epoch: u32, now: Micros) -> Option<Published> {
        let idx = row.point;
        let slot = &mut self.slots[idx.0 as usize];
        debug_assert_eq!(
            &*slot.state.point_id, &*row.point_id,
            "row resolved against another registry"
        );
        let row_key = row.order_key();

        let mut value_edge = false;
        if let Some(value) = &row.value {
            let newer_value = slot
                .value_key
                .as_ref()
                .is_none_or(|(o, i, k)| row_key > (*o, *i, k));
            if newer_value {
                value_edge = is_edge(slot.edge_value.as_ref(), value, slot.deadband);
                slot.state.value = Some(value.clone());
                slot.value_key = Some((row.observed_at, row.ingested_at, row.key.clone()));
                if value_edge {
                    slot.edge_value = Some(value.clone());
                    slot.state.changed_at = Some(row.observed_at);
                }
                self.dirty_value.insert(idx);
            }
        }

        let mut quality_changed = false;
        let newer = slot.state.order_key().is_none_or(|current| row_key > current);
        if newer {
            let current = row.observed_at.0.saturating_add(slot.freshness_us) > now.0;
            let quality = if row.quality == Quality::Live && !current && slot.state.quality != Quality::Live {
                slot.state.quality
            } else {
                row.quality
            };
            quality_changed = slot.state.quality != quality;
            if quality == row.quality {
                // Otherwise the quality kept from before keeps its reason too.
                slot.state.reason = row.reason.as_deref().map(str::to_owned);
            }
            slot.state.quality = quality;
            slot.state.observed_at = Some(row.observed_at);
            slot.state.ingested_at = Some(row.ingested_at);
            slot.state.key = Some(row.key.clone());
            if quality_changed {
                slot.state.quality_since = row.observed_at;
                self.dirty_quality.insert(idx);
            } else {
                self.dirty_value.insert(idx);
            }
        }

        let raise = match slot.event_policy {
            EventPolicy::Always => true,
            EventPolicy::OnChange => quality_changed || value_edge,
            EventPolicy::Never => quality_changed,
        };
        if !raise {
            return None;
        }
        Some(slot.transition(
            (row.observed_at, row.ingested_at),
            row.registry_version,
            core_epoch,
            Some(&row.key),
            None,
        ))
    }

    /// Planted bug only ([`crate::PlantedBug::RaiseEveryRow`]): [`Self::apply`] as if the row's
    /// point had the event policy `always`.
    pub fn planted_apply_raising_every_row(
        &mut self,
        row: &ObsRow,
        core_epoch: u32,
        now: Micros,
    ) -> Option<Published> {
        let slot = &mut self.slots[row.point.0 as usize];
        let policy = std::mem::replace(&mut slot.event_policy, EventPolicy::Always);
        let published = self.apply(row, core_epoch, now);
        self.slots[row.point.0 as usize].event_policy = policy;
        published
    }

    /// Applies a committed watchdog control event: the point's quality becomes `to` (its
    /// value and `observed_at` stay; a degraded quality never nulls the value). Returns the
    /// transition to publish, identified by the event's `seq`.
    #[expect(
        clippy::too_many_arguments,
        reason = "one committed control event's fields plus the core's stamp; a struct would only rename them"
    )]
    pub fn apply_quality_event(
        &mut self,
        point: PointIdx,
        to: Quality,
        reason: &str,
        seq: i64,
        now: Micros,
        core_epoch: u32,
        registry_version: i32,
    ) -> Option<Published> {
        let slot = &mut self.slots[point.0 as usize];
        slot.state.watermark_seq = Some(seq);
        if slot.state.quality == to {
            self.dirty_value.insert(point);
            return None;
        }
        slot.state.quality = to;
        slot.state.reason = Some(reason.to_owned());
        slot.state.quality_since = now;
        self.dirty_quality.insert(point);
        Some(slot.transition((now, now), registry_version, core_epoch, None, Some(seq)))
    }

    /// Points whose quality changed: written at once (synchronously with the commit's effects).
    pub fn take_quality_checkpoint(&mut self, now: Micros) -> Vec<PointState> {
        let mut taken = Vec::new();
        while taken.len() < self.points_max {
            let Some(idx) = self.dirty_quality.pop_first() else {
                break;
            };
            self.dirty_value.remove(&idx);
            taken.push(self.mark_written(idx, now));
        }
        taken
    }

    /// Value-only changes whose per-point interval has passed, or every dirty point when the full
    /// interval has passed.
    pub fn take_due_checkpoint(&mut self, now: Micros) -> Vec<PointState> {
        let full = now.0 - self.last_full_checkpoint_at.0 >= self.full_interval_us;
        let mut taken = self.take_quality_checkpoint(now);
        let due: Vec<PointIdx> = self
            .dirty_value
            .iter()
            .copied()
            .filter(|idx| {
                full || self.slots[idx.0 as usize]
                    .last_checkpoint_at
                    .is_none_or(|at| now.0 - at.0 >= self.value_interval_us)
            })
            .take(self.points_max.saturating_sub(taken.len()))
            .collect();
        for idx in due {
            self.dirty_value.remove(&idx);
            taken.push(self.mark_written(idx, now));
        }
        if full && self.dirty_value.is_empty() {
            self.last_full_checkpoint_at = now;
        }
        taken
    }

    /// Everything dirty, for an orderly shutdown.
    pub fn take_all_dirty(&mut self, now: Micros) -> Vec<PointState> {
        let mut taken = self.take_quality_checkpoint(now);
        while let Some(idx) = self.dirty_value.pop_first() {
            taken.push(self.mark_written(idx, now));
        }
        taken
    }

    /// Reprocess by the running core (`reprocess_request`, "the projection rule"): the point
    /// takes the state rebuilt from `head` (its log head, read after the reprocess's row updates
    /// committed) only where the projection still sits on the same rows as the head, for the
    /// quality and for the value. Where a newer row moved the point since, that row wins and
    /// nothing changes. The recovery rule holds: a head row that is not current never raises
    /// the point to `live`. Publishes nothing; the point is checkpointed as usual. Returns
    /// whether the entry was replaced.
    pub fn replace_if_unmoved(&mut self, point: PointIdx, head: &LogHead, now: Micros) -> bool {
        let slot = &mut self.slots[point.0 as usize];
        if order_key_of(&slot.state) != order_key_of(&head.state) || slot.value_key != head.value_order {
            return false;
        }
        let mut rebuilt =
            crate::state::rebuild_state(slot.state.point_id.clone(), Some(head), Some(&slot.state), now);
        let current = head
            .state
            .observed_at
            .is_some_and(|o| o.0.saturating_add(slot.freshness_us) > now.0);
        if rebuilt.quality == Quality::Live && slot.state.quality != Quality::Live && !current {
            rebuilt.quality = slot.state.quality;
            rebuilt.reason = slot.state.reason.clone();
            rebuilt.quality_since = slot.state.quality_since;
        }
        if rebuilt.value != slot.state.value {
            slot.edge_value = rebuilt.value.clone();
        }
        let quality_changed = rebuilt.quality != slot.state.quality;
        slot.state = rebuilt;
        if quality_changed {
            self.dirty_quality.insert(point);
        } else {
            self.dirty_value.insert(point);
        }
        true
    }

    pub fn has_dirty(&self) -> bool {
        !(self.dirty_value.is_empty() && self.dirty_quality.is_empty())
    }

    pub fn has_dirty_quality(&self) -> bool {
        !self.dirty_quality.is_empty()
    }

    fn mark_written(&mut self, idx: PointIdx, now: Micros) -> PointState {
        let slot = &mut self.slots[idx.0 as usize];
        slot.last_checkpoint_at = Some(now);
        slot.state.clone()
    }
}

/// Merges a log head and a checkpoint for one point; the one with the greater order key sets
/// quality and position, and the value too when it has one (the log head on a tie), the other's
/// value standing in when it has none. Also says whether the value came from the log head.
fn merge(
    point_id: Arc<str>,
    head: Option<&PointState>,
    checkpoint: Option<&PointState>,
    now: Micros,
) -> (PointState, bool) {
    match (head, checkpoint) {
        (None, None) => (PointState::unknown(point_id, now), false),
        (Some(head), None) => (
            PointState {
                point_id,
                ..head.clone()
            },
            head.value.is_some(),
        ),
        (None, Some(checkpoint)) => (
            PointState {
                point_id,
                ..checkpoint.clone()
            },
            false,
        ),
        (Some(head), Some(checkpoint)) => {
            let checkpoint_newer = match (checkpoint.order_key(), head.order_key()) {
                (Some(c), Some(h)) => c > h,
                (Some(_), None) => true,
                _ => false,
            };
            let position = if checkpoint_newer { checkpoint } else { head };
            let value_from_head = !checkpoint_newer && head.value.is_some();
            let value = if value_from_head {
                head.value.clone()
            } else {
                checkpoint.value.clone()
            };
            let state = PointState {
                point_id,
                value: value.or_else(|| head.value.clone()),
                quality: position.quality,
                reason: position.reason.clone(),
                observed_at: position.observed_at,
                ingested_at: position.ingested_at,
                key: position.key.clone(),
                changed_at: checkpoint.changed_at,
                quality_since: checkpoint.quality_since,
                watermark_seq: checkpoint.watermark_seq,
            };
            (state, value_from_head)
        }
    }
}
