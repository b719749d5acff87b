//! The derived part: derived points, computed from committed rows and published as
//! observations (sensor paradigm, "a rolling window derived from another sensor's history" is
//! a sensor; DESIGN.md §5 invariant 11; ingest spec, "Restart" step 5).
//!
//! Owns: the [`Derivations`] (each derived point's definition and its inputs' windows, in
//! [`crate::derived`]), and the readings restart step 5 derived again, held by key until the
//! stream has moved past `held_through_seq` (the last message it held at startup): one of them
//! may still be there, published before the crash and not yet consumed, and publishing it
//! again past the stream's duplicate window would write it twice. One that commits meanwhile
//! is dropped; the rest are published when the stream's oldest message is newer.
//!
//! Takes each committed batch's RETURNING rows, folded in the fold's order `(observed_at,
//! ingested_at, key)` — which the log holds, as it holds the batch order (`applied`), so a
//! restart replays exactly this order — the replay at restart, and `StreamFront`.
//!
//! Emits `PublishObservation`: each reading on its derived point's own subject, keyed by the
//! triggering row, so it goes back through the stream and ingest like any observation.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::derived::{Derivations, WindowRequest, WindowRow, derived_key};
use crate::effect::Effect;
use crate::log::{Batch, ObsRow};
use crate::planted::PlantedBug;
use crate::projection::Projection;
use crate::registry::Registry;

use super::context::{Ctx, Out};

#[derive(Debug)]
pub(crate) struct DerivedPoints {
    derivations: Derivations,
    /// Readings derived again at restart, by the key of the row they would be: instance,
    /// epoch, seq.
    held: BTreeMap<(Arc<str>, u32, u64), Effect>,
    held_through_seq: u64,
}

impl DerivedPoints {
    pub fn new(registry: &Registry) -> DerivedPoints {
        DerivedPoints {
            derivations: Derivations::new(registry),
            held: BTreeMap::new(),
            held_through_seq: 0,
        }
    }

    /// Restart step 5, the question (see [`Derivations::window_requests`]), each input
    /// bounded by its newest committed row in the restored projection.
    pub fn window_requests(&self, registry: &Registry, projection: &Projection) -> Vec<WindowRequest> {
        self.derivations
            .window_requests(registry, |idx| projection.state(idx).observed_at)
    }

    /// Restart step 5, the answer (see [`Derivations::rehydrate`]): the readings derived again
    /// are held until the stream is past `stream.1`, or published at once when the stream,
    /// whose oldest message is `stream.0`, is empty. Returns how many rows were folded and how
    /// many readings were derived again.
    pub fn rehydrate(
        &mut self,
        registry: &Registry,
        requests: &[WindowRequest],
        rows: Vec<WindowRow>,
        rows_max_per_point: usize,
        stream: (Option<u64>, u64),
        out: &mut Out,
    ) -> (usize, usize) {
        let (folded, readings) = self
            .derivations
            .rehydrate(registry, requests, rows, rows_max_per_point);
        let again = readings.len();
        for reading in readings {
            let (epoch, seq) = derived_key(&reading.point_id, &reading.trigger);
            let (subject, msg_id, payload) = reading.to_observation();
            self.held.insert(
                (reading.instance.clone(), epoch, seq),
                Effect::PublishObservation {
                    subject,
                    msg_id,
                    payload,
                },
            );
        }
        self.held_through_seq = stream.1;
        self.release_held(stream.0, out);
        (folded, again)
    }

    /// Publishes the held readings once the stream's oldest message (`None`: empty) is newer
    /// than every message it held at startup.
    pub fn release_held(&mut self, first_seq: Option<u64>, out: &mut Out) {
        if self.held.is_empty() || first_seq.is_some_and(|f| f <= self.held_through_seq) {
            return;
        }
        let held = std::mem::take(&mut self.held);
        out.metrics.derived_readings += held.len() as u64;
        out.extend(held.into_values());
    }

    /// A committed batch's RETURNING rows (`inserted`): a held reading whose original was
    /// still in the stream has now committed, and is dropped; then the rows are folded in the
    /// fold's order and each reading they trigger is published.
    pub fn on_committed(&mut self, batch: &Batch, inserted: &[u32], ctx: &Ctx, out: &mut Out) {
        if !self.held.is_empty() {
            for &ordinal in inserted {
                if let Some(row) = batch.rows.get(ordinal as usize) {
                    self.held.remove(&(
                        row.key.driver_instance.clone(),
                        row.key.source_epoch,
                        row.key.source_seq,
                    ));
                }
            }
        }
        if ctx.planted(PlantedBug::DeriveFromSubmittedBatch) {
            return; // derived when submitted instead (see `planted_derive_submitted`)
        }
        // Only the rows some derived point reads, so a batch of other points' rows is neither
        // collected nor sorted (issue 24 item 3: the sort of every batch was about 1% of the
        // drain's own CPU). The rest fold and derive nothing; the stable sort keeps the order
        // of those that remain.
        let mut order: Vec<&ObsRow> = inserted
            .iter()
            .filter_map(|&ordinal| batch.rows.get(ordinal as usize))
            .filter(|row| self.derivations.reads(row.point))
            .collect();
        order.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
        for row in order {
            for reading in self.derivations.on_committed(row) {
                let (subject, msg_id, payload) = reading.to_observation();
                out.metrics.derived_readings += 1;
                out.push(Effect::PublishObservation {
                    subject,
                    msg_id,
                    payload,
                });
            }
        }
    }

    /// Planted (derived from the submitted batch, not the RETURNING set): every submitted row
    /// folded as the batch goes to the store, its readings returned for the router to publish
    /// after the `Commit`.
    pub fn planted_derive_submitted(&mut self, batch: &Batch, early: &mut Vec<Effect>) {
        for row in &batch.rows {
            for reading in self.derivations.on_committed(row) {
                let (subject, msg_id, payload) = reading.to_observation();
                early.push(Effect::PublishObservation {
                    subject,
                    msg_id,
                    payload,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{BatchId, ObsKey};
    use crate::parts::context::testing::{EPOCH, T0, ctx, drain, row};

    fn batch(rows: Vec<ObsRow>) -> Batch {
        Batch {
            id: BatchId(1),
            epoch: EPOCH,
            rows,
            quarantine: Vec::new(),
        }
    }

    fn observations(effects: &[Effect]) -> Vec<&str> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::PublishObservation { msg_id, .. } => Some(msg_id.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn only_returning_rows_are_folded_in_the_folds_order() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut derived = DerivedPoints::new(&ctx.registry);
        // Submitted out of order; the second (earlier) is not in the RETURNING set.
        let late = row(&ctx, "plant.temp", 1, 10.0, T0.add_ms(2_000));
        let lost = row(&ctx, "plant.temp", 2, 99.0, T0);
        let early = row(&ctx, "plant.temp", 3, 20.0, T0.add_ms(1_000));
        derived.on_committed(&batch(vec![late, lost, early]), &[0, 2], &ctx, &mut out);
        let effects = drain(&mut out);
        assert_eq!(
            observations(&effects).len(),
            2,
            "one mean per trigger, in fold order"
        );
        let Effect::PublishObservation { payload, .. } = &effects[1] else {
            panic!("an observation");
        };
        let reading: serde_json::Value = serde_json::from_slice(payload).expect("an envelope");
        assert_eq!(
            reading["value"],
            serde_json::json!(15.0),
            "the mean of 20 and 10, without 99"
        );
        assert_eq!(out.metrics.derived_readings, 2);
    }

    #[test]
    fn rows_nothing_derives_from_are_skipped_and_the_rest_keep_the_folds_order() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut derived = DerivedPoints::new(&ctx.registry);
        let temp = ctx.registry.resolve("plant.temp").expect("fixture point");
        let flow = ctx.registry.resolve("plant.flow").expect("fixture point");
        assert!(
            derived.derivations.reads(temp),
            "plant.temp_mean reads plant.temp"
        );
        assert!(
            !derived.derivations.reads(flow),
            "nothing derives from plant.flow"
        );
        assert!(
            !derived.derivations.reads(crate::registry::PointIdx(u32::MAX)),
            "a point past the registry's end is read by nothing"
        );
        // Other points' rows between and before the input's, which arrive out of order.
        let rows = vec![
            row(&ctx, "plant.flow", 1, 500.0, T0),
            row(&ctx, "plant.temp", 2, 10.0, T0.add_ms(2_000)),
            row(&ctx, "plant.flow", 3, 700.0, T0.add_ms(1_500)),
            row(&ctx, "plant.temp", 4, 20.0, T0.add_ms(1_000)),
        ];
        derived.on_committed(&batch(rows), &[0, 1, 2, 3], &ctx, &mut out);
        let effects = drain(&mut out);
        assert_eq!(
            observations(&effects).len(),
            2,
            "one mean per plant.temp row, none for plant.flow's"
        );
        let means: Vec<serde_json::Value> = effects
            .iter()
            .map(|e| {
                let Effect::PublishObservation { payload, .. } = e else {
                    panic!("an observation");
                };
                serde_json::from_slice::<serde_json::Value>(payload).expect("an envelope")["value"].clone()
            })
            .collect();
        assert_eq!(
            means,
            [serde_json::json!(20.0), serde_json::json!(15.0)],
            "folded in the fold's order (20 first, then 10), without plant.flow's values"
        );
    }

    #[test]
    fn held_readings_wait_for_the_stream_and_one_that_commits_is_dropped() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut derived = DerivedPoints::new(&ctx.registry);
        let committed = row(&ctx, "plant.temp", 1, 10.0, T0);
        let other = ObsKey {
            source_seq: 2,
            ..committed.key.clone()
        };
        for (seq, key) in [(1, committed.key.clone()), (2, other)] {
            derived.held.insert(
                (key.driver_instance.clone(), key.source_epoch, key.source_seq),
                Effect::PublishObservation {
                    subject: "obs.sentinel.derived".into(),
                    msg_id: format!("held-{seq}"),
                    payload: Default::default(),
                },
            );
        }
        derived.held_through_seq = 40;
        derived.release_held(Some(40), &mut out);
        assert!(drain(&mut out).is_empty(), "the stream still holds message 40");
        derived.on_committed(&batch(vec![committed]), &[0], &ctx, &mut out);
        drain(&mut out);
        derived.release_held(Some(41), &mut out);
        assert_eq!(observations(&drain(&mut out)), ["held-2"]);
        assert_eq!(
            out.metrics.derived_readings, 2,
            "one derived from the row, one released"
        );
    }
}
