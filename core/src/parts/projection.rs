//! The projection part: the projection and its checkpoints (ingest spec, "Projection",
//! stage 13 and "Three ordering rules", rules 2 and 3; "Restart" steps 2–4; DESIGN.md §5
//! invariant 5).
//!
//! Owns: the [`Projection`] (every point's state, the fold, the event policy, the dirty sets
//! and the checkpoint policy, in [`crate::projection`]) and when the value-only checkpoint
//! scan last ran.
//!
//! Takes the RETURNING rows ingest hands the router, one at a time in batch order; the
//! watchdog's committed `quality_changed` events (with whether a newer row re-armed the point
//! meanwhile); the log heads of a finished reprocess; `Tick` (the checkpoint scan) and the
//! drained shutdown (everything dirty).
//!
//! Emits `Publish` on `state.<point_id>` (a transition, only for a committed row or a
//! committed control event) and `Checkpoint` (quality changes at once, value changes on the
//! scan).

use crate::control::ControlEvent;
use crate::effect::Effect;
use crate::gap::GapReason;
use crate::log::{Batch, ObsRow, Quality};
use crate::planted::PlantedBug;
use crate::projection::{Projection, Published};
use crate::registry::{PointIdx, Registry};
use crate::state::{LogHead, PointState, RestoredState};
use crate::time::Micros;

use super::context::{Ctx, Out};

/// How often dirty value-only points are considered for a checkpoint.
const CHECKPOINT_SCAN_INTERVAL_MS: i64 = 1_000;

#[derive(Debug)]
pub(crate) struct Projector {
    projection: Projection,
    last_checkpoint_scan_at: Micros,
}

impl Projector {
    /// Restart steps 2–3 (see [`Projection::restore`]); the forced `restored` qualities are
    /// dirty, for the router's first checkpoint.
    pub fn restore(ctx: &Ctx, restored: &RestoredState) -> Projector {
        Projector {
            projection: Projection::restore(&ctx.registry, restored, &ctx.config, ctx.now),
            last_checkpoint_scan_at: ctx.now,
        }
    }

    /// The projection, read-only (stage 10 reads edge values, the watchdog qualities).
    pub fn view(&self) -> &Projection {
        &self.projection
    }

    pub fn state(&self, point: PointIdx) -> &PointState {
        self.projection.state(point)
    }

    pub fn states(&self) -> impl Iterator<Item = &PointState> {
        self.projection.states()
    }

    /// The point's watchdog deadline, from its latest row.
    pub fn freshness_deadline(&self, point: PointIdx) -> Option<Micros> {
        self.projection.freshness_deadline(point)
    }

    /// Restart step 4: control events above each point's watermark advance it. Returns how
    /// many applied; events for points `registry` does not know are skipped.
    pub fn replay_control_events<'a>(
        &mut self,
        registry: &Registry,
        events: impl IntoIterator<Item = (&'a str, i64)>,
    ) -> usize {
        let mut applied = 0;
        for (point_id, seq) in events {
            if let Some(idx) = registry.resolve(point_id)
                && self.projection.advance_watermark(idx, seq)
            {
                applied += 1;
            }
        }
        applied
    }

    /// The lowest control-event watermark over all points (0 when any point has none).
    pub fn control_watermark(&self) -> i64 {
        self.projection
            .states()
            .map(|s| s.watermark_seq.unwrap_or(0))
            .min()
            .unwrap_or(0)
    }

    /// Stage 13 for one RETURNING row, and its transition published when the point's event
    /// policy raises one.
    pub fn apply_row(&mut self, row: &ObsRow, ctx: &Ctx, out: &mut Out) {
        // Planted: a time before every row, so every row looks current.
        let now = if ctx.planted(PlantedBug::LiveFromReplayedRow) {
            Micros(i64::MIN)
        } else {
            ctx.now
        };
        // Planted: the event policy ignored, every row raised.
        let published = if ctx.planted(PlantedBug::RaiseEveryRow) {
            self.projection
                .planted_apply_raising_every_row(row, ctx.epoch, now)
        } else {
            self.projection.apply(row, ctx.epoch, now)
        };
        if let Some(published) = published {
            publish(published, out);
        }
    }

    /// A committed `quality_changed` event from the watchdog: only now does the projection
    /// follow it, and only now is the transition published. A row that arrived while the event
    /// was at the store (the point's quality moved off `from`, or it `rearmed` the watchdog past
    /// now) superseded it: the event stays in the log, the projection does not go stale.
    #[expect(
        clippy::too_many_arguments,
        reason = "one committed event's fields, its seq and the watchdog's answer, plus the context"
    )]
    pub fn apply_quality_event(
        &mut self,
        point: PointIdx,
        event: &ControlEvent,
        from: Quality,
        to: Quality,
        reason: GapReason,
        seq: i64,
        rearmed: bool,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let current = self.projection.state(point).quality;
        let to = if current != from || rearmed { current } else { to };
        let published = self.projection.apply_quality_event(
            point,
            to,
            reason.as_str(),
            seq,
            ctx.now,
            ctx.epoch,
            event.registry_version,
        );
        if let Some(published) = published {
            publish(published, out);
        }
    }

    /// A finished reprocess's log heads replace the entries no newer row moved
    /// ([`Projection::replace_if_unmoved`]); nothing is published. Returns how many did.
    pub fn replace_unmoved(&mut self, registry: &Registry, heads: &[LogHead], now: Micros) -> usize {
        let mut replaced = 0;
        for head in heads {
            if let Some(idx) = registry.resolve(&head.state.point_id)
                && self.projection.replace_if_unmoved(idx, head, now)
            {
                replaced += 1;
            }
        }
        replaced
    }

    /// Points whose quality changed are checkpointed at once.
    pub fn checkpoint_quality_changes(&mut self, ctx: &Ctx, out: &mut Out) {
        if self.projection.has_dirty_quality() {
            let states = self.projection.take_quality_checkpoint(ctx.now);
            checkpoint(states, ctx, out);
        }
    }

    /// When the next checkpoint scan is due, while anything is dirty.
    pub fn checkpoint_deadline(&self) -> Option<Micros> {
        self.projection
            .has_dirty()
            .then(|| self.last_checkpoint_scan_at.add_ms(CHECKPOINT_SCAN_INTERVAL_MS))
    }

    /// The checkpoint scan, when due: value-only changes past their interval (and everything
    /// dirty on the full interval).
    pub fn on_tick(&mut self, ctx: &Ctx, out: &mut Out) {
        if self.checkpoint_deadline().is_some_and(|at| ctx.now >= at) {
            self.last_checkpoint_scan_at = ctx.now;
            let states = self.projection.take_due_checkpoint(ctx.now);
            checkpoint(states, ctx, out);
        }
    }

    /// The drained shutdown's last checkpoint: everything dirty.
    pub fn checkpoint_all(&mut self, ctx: &Ctx, out: &mut Out) {
        let states = self.projection.take_all_dirty(ctx.now);
        checkpoint(states, ctx, out);
    }

    /// Planted (rules 2 and 3 broken): every submitted row projected as the batch goes to the
    /// store, its transitions returned for the router to publish after the `Commit`.
    pub fn planted_apply_submitted(&mut self, batch: &Batch, ctx: &Ctx, early: &mut Vec<Effect>) {
        for row in &batch.rows {
            if let Some(published) = self.projection.apply(row, ctx.epoch, ctx.now) {
                early.push(Effect::Publish {
                    subject: published.subject,
                    payload: published.payload.into(),
                });
            }
        }
    }
}

fn publish(published: Published, out: &mut Out) {
    out.metrics.transitions_published += 1;
    out.push(Effect::Publish {
        subject: published.subject,
        payload: published.payload.into(),
    });
}

fn checkpoint(states: Vec<PointState>, ctx: &Ctx, out: &mut Out) {
    if !states.is_empty() {
        out.metrics.checkpoint_points += states.len() as u64;
        out.push(Effect::Checkpoint {
            epoch: ctx.epoch,
            states,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::{ControlDetail, PRINCIPAL_WATCHDOG};
    use crate::parts::context::testing::{T0, ctx, drain, row};

    fn publishes(effects: &[Effect]) -> Vec<&str> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Publish { subject, .. } => Some(subject.as_str()),
                _ => None,
            })
            .collect()
    }

    fn stale_event(ctx: &Ctx, point_id: &str) -> ControlEvent {
        let point = ctx.registry.resolve(point_id).expect("fixture point");
        ControlEvent {
            occurred_at: ctx.now,
            point: Some(point),
            point_id: point_id.into(),
            principal: PRINCIPAL_WATCHDOG.into(),
            core_epoch: ctx.epoch,
            registry_version: ctx.registry.version,
            detail: ControlDetail::QualityChanged {
                from: Quality::Live,
                to: Quality::Stale,
                reason: GapReason::Freshness,
                deadline: ctx.now,
            },
        }
    }

    #[test]
    fn a_committed_row_is_projected_published_and_checkpointed_for_its_quality() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut projector = Projector::restore(&ctx, &RestoredState::default());
        assert_eq!(
            projector.checkpoint_deadline(),
            None,
            "nothing restored, nothing dirty"
        );
        projector.apply_row(&row(&ctx, "plant.temp", 1, 20.0, T0), &ctx, &mut out);
        let point = ctx.registry.resolve("plant.temp").expect("fixture point");
        assert_eq!(projector.state(point).quality, Quality::Live);
        assert_eq!(projector.freshness_deadline(point), Some(T0.add_ms(60_000)));
        projector.checkpoint_quality_changes(&ctx, &mut out);
        let effects = drain(&mut out);
        assert_eq!(publishes(&effects), ["state.plant.temp"]);
        assert!(matches!(&effects[1], Effect::Checkpoint { states, .. } if states.len() == 1));
        assert_eq!(out.metrics.transitions_published, 1);
        assert_eq!(out.metrics.checkpoint_points, 1);
    }

    #[test]
    fn the_value_checkpoint_waits_for_the_scan() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut projector = Projector::restore(&ctx, &RestoredState::default());
        projector.apply_row(&row(&ctx, "plant.temp", 1, 20.0, T0), &ctx, &mut out);
        projector.checkpoint_quality_changes(&ctx, &mut out);
        ctx.now = T0.add_ms(10);
        projector.apply_row(&row(&ctx, "plant.temp", 2, 30.0, ctx.now), &ctx, &mut out);
        drain(&mut out);
        let scan = T0.add_ms(CHECKPOINT_SCAN_INTERVAL_MS);
        assert_eq!(projector.checkpoint_deadline(), Some(scan));
        projector.on_tick(&ctx, &mut out);
        assert!(drain(&mut out).is_empty(), "not yet");
        ctx.now = scan;
        projector.on_tick(&ctx, &mut out);
        assert!(
            drain(&mut out).is_empty(),
            "the point was checkpointed 1 s ago, within its value interval"
        );
        projector.checkpoint_all(&ctx, &mut out);
        assert!(matches!(&drain(&mut out)[..], [Effect::Checkpoint { states, .. }] if states.len() == 1));
        assert_eq!(projector.checkpoint_deadline(), None);
    }

    #[test]
    fn a_watchdog_event_moves_the_point_unless_a_row_superseded_it() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut projector = Projector::restore(&ctx, &RestoredState::default());
        projector.apply_row(&row(&ctx, "plant.temp", 1, 20.0, T0), &ctx, &mut out);
        projector.apply_row(&row(&ctx, "plant.flow", 2, 1.0, T0), &ctx, &mut out);
        drain(&mut out);
        ctx.now = T0.add_ms(70_000);
        let temp = stale_event(&ctx, "plant.temp");
        projector.apply_quality_event(
            temp.point.expect("a watchdog event names its point"),
            &temp,
            Quality::Live,
            Quality::Stale,
            GapReason::Freshness,
            7,
            false,
            &ctx,
            &mut out,
        );
        let flow = stale_event(&ctx, "plant.flow");
        projector.apply_quality_event(
            flow.point.expect("a watchdog event names its point"),
            &flow,
            Quality::Live,
            Quality::Stale,
            GapReason::Freshness,
            8,
            true,
            &ctx,
            &mut out,
        );
        assert_eq!(publishes(&drain(&mut out)), ["state.plant.temp"]);
        assert_eq!(
            projector.state(temp.point.expect("named")).quality,
            Quality::Stale
        );
        assert_eq!(
            projector.state(flow.point.expect("named")).quality,
            Quality::Live,
            "re-armed: superseded"
        );
        assert_eq!(
            projector.state(flow.point.expect("named")).watermark_seq,
            Some(8),
            "the event is applied all the same"
        );
        assert_eq!(projector.control_watermark(), 0, "points without events are at 0");
    }
}
