//! The ingest part: from deliveries to committed batches (ingest spec, "Ingest pipeline"
//! stages 1–12 and "Three ordering rules", rule 1; core runtime spec, "Backpressure").
//!
//! Owns: stage 3's dedup set; the open batch and the batch ids; the batches at the store
//! (in flight), each with its rows' dedup keys and the acks of duplicates that arrived while
//! it was there; commit reports that came before an earlier batch's, held until every earlier
//! batch is applied (commits run concurrently; the log records batch order, migration 0007, so
//! derived readings are a function of the log); the accept budget; the flush deadline.
//!
//! Takes `Delivered` (stages 2–10 run by [`crate::pipeline`], against a read-only view of the
//! projection for stage 10's deadband), `Committed`, `CommitFailed`, and the router's flushes
//! on `Tick`, on `Shutdown` and after a commit.
//!
//! Emits `Ack`, and only this part does: for a batch's rows, quarantine entries and held
//! duplicates once its report is applied (rule 1: ack only after commit), or at once for a
//! duplicate of a key already committed. It hands the router each batch to commit (the router
//! emits its `Commit`, followed, only with a planted bug, by the batch projected or derived
//! early) and, once its report applies, the batch with its RETURNING ordinals, in batch order.

use std::collections::BTreeMap;

use crate::config::Config;
use crate::dedup::{DedupSet, Seen};
use crate::delivery::{Delivery, DeliveryTag};
use crate::effect::Effect;
use crate::log::{Batch, BatchId, CommitReport, Quality};
use crate::metrics::{BATCH_SIZE_BOUNDS, COMMIT_LATENCY_BOUNDS_US, Metrics};
use crate::pipeline::{self, Outcome};
use crate::planted::PlantedBug;
use crate::projection::Projection;
use crate::time::Micros;

use super::context::{Ctx, Out};

/// A batch's bookkeeping that stays in the core while the batch is at the store.
#[derive(Debug, Default)]
struct Pending {
    /// Packed dedup keys of the batch's rows, to mark committed.
    keys: Vec<u128>,
    /// Deliveries recognised as duplicates of this batch's rows, acked when it commits.
    duplicate_acks: Vec<DeliveryTag>,
    /// When its `Commit` was emitted (the commit latency histogram).
    submitted_at: Micros,
}

#[derive(Debug)]
struct Open {
    batch: Batch,
    pending: Pending,
    opened_at: Micros,
}

/// A committed batch whose report applies now (every earlier batch's did): its deliveries are
/// acked; the router hands the rows `inserted` names to the other parts.
#[derive(Debug)]
pub(crate) struct Applied {
    pub batch: Batch,
    /// The RETURNING ordinals, ascending.
    pub inserted: Vec<u32>,
}

#[derive(Debug)]
pub(crate) struct Ingest {
    dedup: DedupSet,
    open: Option<Open>,
    next_batch_id: u64,
    in_flight: BTreeMap<BatchId, Pending>,
    /// Commit reports that arrived before an earlier batch's.
    reported: BTreeMap<BatchId, CommitReport>,
}

impl Ingest {
    pub fn new(config: &Config) -> Ingest {
        Ingest {
            dedup: DedupSet::with_presize(config.dedup_keys_max, config.dedup_presize_keys_max),
            open: None,
            next_batch_id: 1,
            in_flight: BTreeMap::new(),
            reported: BTreeMap::new(),
        }
    }

    /// How many deliveries fit without exceeding the in-flight bound (for a running core).
    pub fn accept_budget(&self, config: &Config) -> usize {
        let open_len = self.open.as_ref().map_or(0, |o| o.batch.len());
        let room_in_open = config.batch_rows_max.saturating_sub(open_len);
        let free_batches = config.inflight_batches_max.saturating_sub(self.in_flight.len());
        room_in_open + free_batches * config.batch_rows_max
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Every in-flight slot is taken: the open batch waits for a commit.
    pub fn pipeline_full(&self, config: &Config) -> bool {
        self.in_flight.len() >= config.inflight_batches_max
    }

    /// No batch is at the store.
    pub fn drained(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// The open batch holds rows or quarantine entries.
    pub fn has_open_rows(&self) -> bool {
        self.open.as_ref().is_some_and(|o| !o.batch.is_empty())
    }

    /// When the open batch is due to flush. None when it is empty, or when the pipeline is
    /// full: that flushes on the next commit, not on time (a past deadline would make the
    /// caller spin).
    pub fn flush_deadline(&self, config: &Config) -> Option<Micros> {
        let open = self.open.as_ref()?;
        (!open.batch.is_empty() && !self.pipeline_full(config))
            .then(|| open.opened_at.add_ms(config.flush_interval_ms))
    }

    /// The open batch has been open for the flush interval.
    pub fn flush_due(&self, ctx: &Ctx) -> bool {
        self.open
            .as_ref()
            .is_some_and(|open| ctx.now >= open.opened_at.add_ms(ctx.config.flush_interval_ms))
    }

    /// Stages 2–10 for `deliveries`, each into the open batch (opened as needed), until the
    /// open batch is full — then returns true, for the router to flush and call again — or
    /// the deliveries run out (false). Duplicates of committed keys collect in `ack_now`
    /// (see [`Self::ack_now`]); those of a batch in flight are acked with it.
    pub fn fill(
        &mut self,
        ctx: &Ctx,
        projection: &Projection,
        deliveries: &mut std::vec::IntoIter<Delivery>,
        ack_now: &mut Vec<DeliveryTag>,
        metrics: &mut Metrics,
    ) -> bool {
        for mut delivery in deliveries.by_ref() {
            metrics.delivered += 1;
            if ctx.planted(PlantedBug::IngestedAtFromCoreClock) {
                delivery.ingested_at = ctx.now;
            }
            if self.open.is_none() {
                debug_assert!(self.next_batch_id < crate::log::BATCH_IDS_PER_EPOCH);
                let id = BatchId(self.next_batch_id);
                self.next_batch_id += 1;
                self.open = Some(Open {
                    batch: Batch {
                        id,
                        epoch: ctx.epoch,
                        rows: Vec::new(),
                        quarantine: Vec::new(),
                    },
                    pending: Pending::default(),
                    opened_at: ctx.now,
                });
            }
            let stages = pipeline::Context {
                registry: &ctx.registry,
                config: &ctx.config,
                dedup: &self.dedup,
                projection,
            };
            let outcome = pipeline::process(&stages, delivery);
            let open = self.open.as_mut().expect("invariant: opened above");
            match outcome {
                Outcome::Row(row, key) => {
                    self.dedup.insert_in_flight(key, open.batch.id);
                    open.pending.keys.push(key);
                    open.batch.rows.push(row);
                }
                Outcome::Quarantine(entry) => open.batch.quarantine.push(entry),
                Outcome::Duplicate { tag, seen } => {
                    metrics.duplicates_fast_path += 1;
                    match seen {
                        Seen::Committed => ack_now.push(tag),
                        Seen::InFlight(batch) if batch == open.batch.id => {
                            open.pending.duplicate_acks.push(tag)
                        }
                        Seen::InFlight(batch) => match self.in_flight.get_mut(&batch) {
                            Some(pending) => pending.duplicate_acks.push(tag),
                            // Not reachable: commits mark their keys committed. Acking is still
                            // right, because a key is only in flight after its row exists.
                            None => ack_now.push(tag),
                        },
                    }
                }
            }
            if open.batch.len() >= ctx.config.batch_rows_max {
                return true;
            }
        }
        false
    }

    /// Acks the duplicates of committed keys [`Self::fill`] collected.
    pub fn ack_now(&self, ack_now: Vec<DeliveryTag>, out: &mut Out) {
        if !ack_now.is_empty() {
            out.metrics.acks += ack_now.len() as u64;
            out.push(Effect::Ack(ack_now));
        }
    }

    /// The open batch, if the in-flight bound lets it go to the store now; it is in flight
    /// from here on, and the router emits its `Commit`. An empty open batch is dropped.
    pub fn flush(&mut self, ctx: &Ctx, out: &mut Out) -> Option<Batch> {
        if self.pipeline_full(&ctx.config) {
            return None;
        }
        let open = self.open.take()?;
        if open.batch.is_empty() {
            return None;
        }
        debug_assert!(open.batch.len() <= ctx.config.batch_rows_max + 1);
        if ctx.planted(PlantedBug::AckBeforeCommit) {
            let tags = open.batch.rows.iter().map(|r| r.tag);
            let tags = tags.chain(open.batch.quarantine.iter().map(|q| q.tag)).collect();
            out.push(Effect::Ack(tags));
        }
        out.metrics
            .batch_size
            .observe(&BATCH_SIZE_BOUNDS, open.batch.len() as u64);
        let mut pending = open.pending;
        pending.submitted_at = ctx.now;
        self.in_flight.insert(open.batch.id, pending);
        debug_assert!(self.in_flight.len() <= ctx.config.inflight_batches_max);
        Some(open.batch)
    }

    /// A commit report, held until every earlier batch's is applied. False (and ignored) for
    /// a batch that is not in flight.
    pub fn report(&mut self, report: CommitReport, now: Micros, metrics: &mut Metrics) -> bool {
        let Some(pending) = self.in_flight.get(&report.batch.id) else {
            debug_assert!(false, "commit report for unknown batch {:?}", report.batch.id);
            return false;
        };
        let latency_us = u64::try_from(now.saturating_sub(pending.submitted_at)).unwrap_or(0);
        metrics
            .commit_latency_us
            .observe(&COMMIT_LATENCY_BOUNDS_US, latency_us);
        self.reported.insert(report.batch.id, report);
        true
    }

    /// The oldest batch in flight, if its report came: its keys are marked committed and its
    /// deliveries acked (rule 1: only now are its rows and quarantine entries durable). The
    /// core applies commits in batch order, the order the log records.
    pub fn next_applied(&mut self, ctx: &Ctx, out: &mut Out) -> Option<Applied> {
        let (&first, _) = self.in_flight.first_key_value()?;
        let CommitReport {
            batch,
            inserted,
            quarantine_inserted: _,
        } = self.reported.remove(&first)?;
        let pending = self
            .in_flight
            .remove(&first)
            .expect("invariant: the first in flight");
        // The store's side of the boundary: ordinals ascending and in range.
        debug_assert!(
            inserted.windows(2).all(|w| w[0] < w[1]),
            "RETURNING ordinals not ascending"
        );
        debug_assert!(
            inserted.iter().all(|&i| (i as usize) < batch.rows.len()),
            "RETURNING ordinal out of range"
        );
        debug_assert_eq!(pending.keys.len(), batch.rows.len());

        for key in &pending.keys {
            self.dedup.mark_committed(*key);
        }

        let mut acks: Vec<DeliveryTag> = Vec::with_capacity(batch.len() + pending.duplicate_acks.len());
        acks.extend(batch.rows.iter().map(|r| r.tag));
        acks.extend(batch.quarantine.iter().map(|q| q.tag));
        acks.extend(pending.duplicate_acks);
        let metrics = &mut out.metrics;
        metrics.acks += acks.len() as u64;
        metrics.batches_committed += 1;
        if !acks.is_empty() {
            out.push(Effect::Ack(acks));
        }

        let metrics = &mut out.metrics;
        for entry in &batch.quarantine {
            metrics.quarantined[entry.reason as usize] += 1;
        }
        metrics.rows_conflicted += (batch.rows.len() - inserted.len().min(batch.rows.len())) as u64;

        // Planted (rules 2 and 3 broken): the submitted rows were projected at the flush, so no
        // RETURNING row is handed on.
        let inserted = if ctx.planted(PlantedBug::ProjectSubmittedBatch) {
            Vec::new()
        } else {
            inserted
        };
        for &ordinal in &inserted {
            if let Some(row) = batch.rows.get(ordinal as usize) {
                metrics.rows_inserted[row.class.index()] += 1;
                if row.quality == Quality::Bad {
                    metrics.rows_bad += 1;
                }
            }
        }
        Some(Applied { batch, inserted })
    }

    /// A batch's commit failed: the router stops the core.
    pub fn commit_failed(&mut self, batch: BatchId) {
        self.in_flight.remove(&batch);
    }

    /// The core stopped: the open batch is dropped (its deliveries are unacked and redelivered).
    pub fn abandon(&mut self) {
        self.open = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parts::context::testing::{T0, ctx_with, delivery, drain};
    use crate::projection::Projection;
    use crate::state::RestoredState;

    fn config(batch_rows_max: usize, inflight_batches_max: usize) -> Config {
        Config {
            batch_rows_max,
            inflight_batches_max,
            ..Config::default()
        }
    }

    fn projection(ctx: &Ctx) -> Projection {
        Projection::restore(&ctx.registry, &RestoredState::default(), &ctx.config, ctx.now)
    }

    /// Fills `deliveries`, flushing every full batch; returns the batches flushed and the acks
    /// of committed duplicates.
    fn take(ingest: &mut Ingest, ctx: &Ctx, out: &mut Out, deliveries: Vec<Delivery>) -> Vec<Batch> {
        let projection = projection(ctx);
        let mut ack_now = Vec::new();
        let mut deliveries = deliveries.into_iter();
        let mut batches = Vec::new();
        while ingest.fill(ctx, &projection, &mut deliveries, &mut ack_now, &mut out.metrics) {
            batches.extend(ingest.flush(ctx, out));
        }
        ingest.ack_now(ack_now, out);
        batches
    }

    fn all_inserted(batch: Batch) -> CommitReport {
        CommitReport {
            inserted: (0..batch.rows.len() as u32).collect(),
            quarantine_inserted: batch.quarantine.len() as u32,
            batch,
        }
    }

    fn acks(effects: &[Effect]) -> Vec<Vec<u64>> {
        effects
            .iter()
            .filter_map(|e| match e {
                Effect::Ack(tags) => Some(tags.iter().map(|t| t.0).collect()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_full_batch_stops_the_fill_and_the_in_flight_bound_holds_the_next() {
        let ctx = ctx_with(config(2, 1));
        let mut out = Out::default();
        let mut ingest = Ingest::new(&ctx.config);
        assert_eq!(ingest.accept_budget(&ctx.config), 4);
        let batches = take(
            &mut ingest,
            &ctx,
            &mut out,
            (1..=4)
                .map(|seq| delivery(seq, "plant.temp", seq as f64, T0))
                .collect(),
        );
        assert_eq!(batches.len(), 1, "one slot in flight");
        assert_eq!(batches[0].rows.len(), 2);
        assert!(ingest.pipeline_full(&ctx.config));
        assert!(ingest.has_open_rows(), "the second batch waits, full");
        assert_eq!(
            ingest.flush_deadline(&ctx.config),
            None,
            "a full pipeline flushes on a commit"
        );
        assert_eq!(ingest.accept_budget(&ctx.config), 0);
        assert!(drain(&mut out).is_empty(), "nothing acked before its commit");
    }

    #[test]
    fn reports_apply_in_batch_order_and_ack_only_then() {
        let ctx = ctx_with(config(1, 3));
        let mut out = Out::default();
        let mut ingest = Ingest::new(&ctx.config);
        let mut batches = take(
            &mut ingest,
            &ctx,
            &mut out,
            (1..=3)
                .map(|seq| delivery(seq, "plant.temp", seq as f64, T0))
                .collect(),
        );
        assert_eq!(batches.len(), 3);
        let third = batches.pop().expect("three");
        let second = batches.pop().expect("three");
        let first = batches.pop().expect("three");
        assert!(ingest.report(all_inserted(third), ctx.now, &mut out.metrics));
        assert!(
            ingest.next_applied(&ctx, &mut out).is_none(),
            "held for the first"
        );
        assert!(ingest.report(all_inserted(first), ctx.now, &mut out.metrics));
        let applied = ingest.next_applied(&ctx, &mut out).expect("the first applies");
        assert_eq!((applied.batch.id, applied.inserted), (BatchId(1), vec![0]));
        assert!(
            ingest.next_applied(&ctx, &mut out).is_none(),
            "the third waits for the second"
        );
        assert!(ingest.report(all_inserted(second), ctx.now, &mut out.metrics));
        let order: Vec<BatchId> = std::iter::from_fn(|| ingest.next_applied(&ctx, &mut out))
            .map(|a| a.batch.id)
            .collect();
        assert_eq!(order, [BatchId(2), BatchId(3)]);
        assert_eq!(acks(&drain(&mut out)), [vec![1], vec![2], vec![3]]);
        assert!(ingest.drained());
        assert_eq!(out.metrics.batches_committed, 3);
        assert_eq!(out.metrics.rows_inserted.iter().sum::<u64>(), 3);
    }

    #[test]
    fn each_batch_counts_its_size_when_sent_and_its_latency_when_reported() {
        let mut ctx = ctx_with(config(10, 2));
        let mut out = Out::default();
        let mut ingest = Ingest::new(&ctx.config);
        take(
            &mut ingest,
            &ctx,
            &mut out,
            (1..=7)
                .map(|seq| delivery(seq, "plant.temp", seq as f64, T0))
                .collect(),
        );
        let batch = ingest.flush(&ctx, &mut out).expect("seven rows open");
        assert_eq!(out.metrics.batch_size.buckets[2], 1, "7 rows: the `le 10` bucket");
        assert_eq!(out.metrics.commit_latency_us.count, 0, "not reported yet");
        ctx.now = ctx.now.add_ms(40);
        assert!(ingest.report(all_inserted(batch), ctx.now, &mut out.metrics));
        let latency = &out.metrics.commit_latency_us;
        assert_eq!((latency.count, latency.sum), (1, 40_000));
        assert_eq!(latency.buckets[5], 1, "40 ms: the `le 50 ms` bucket");
    }

    #[test]
    fn a_duplicate_is_acked_with_its_batch_or_at_once_once_committed() {
        let ctx = ctx_with(config(10, 2));
        let mut out = Out::default();
        let mut ingest = Ingest::new(&ctx.config);
        take(
            &mut ingest,
            &ctx,
            &mut out,
            vec![delivery(1, "plant.temp", 1.0, T0)],
        );
        let batch = ingest.flush(&ctx, &mut out).expect("one row open");
        // The same message again, as a redelivery with another tag.
        let mut again = delivery(1, "plant.temp", 1.0, T0);
        again.tag = DeliveryTag(11);
        take(&mut ingest, &ctx, &mut out, vec![again]);
        assert!(!ingest.has_open_rows(), "a duplicate adds no row");
        assert!(drain(&mut out).is_empty(), "held with its batch");
        assert!(ingest.report(all_inserted(batch), ctx.now, &mut out.metrics));
        ingest.next_applied(&ctx, &mut out).expect("applies");
        assert_eq!(acks(&drain(&mut out)), [vec![1, 11]]);
        let mut third = delivery(1, "plant.temp", 1.0, T0);
        third.tag = DeliveryTag(12);
        take(&mut ingest, &ctx, &mut out, vec![third]);
        assert_eq!(acks(&drain(&mut out)), [vec![12]], "committed: acked at once");
        assert_eq!(out.metrics.duplicates_fast_path, 2);
    }

    #[test]
    fn the_open_batch_flushes_on_its_interval_and_an_exit_drops_it() {
        let mut ctx = ctx_with(config(10, 2));
        let mut out = Out::default();
        let mut ingest = Ingest::new(&ctx.config);
        assert_eq!(ingest.flush_deadline(&ctx.config), None);
        take(
            &mut ingest,
            &ctx,
            &mut out,
            vec![delivery(1, "plant.temp", 1.0, T0)],
        );
        let due = T0.add_ms(ctx.config.flush_interval_ms);
        assert_eq!(ingest.flush_deadline(&ctx.config), Some(due));
        assert!(!ingest.flush_due(&ctx));
        ctx.now = due;
        assert!(ingest.flush_due(&ctx));
        ingest.abandon();
        assert!(!ingest.has_open_rows());
        assert_eq!(ingest.flush(&ctx, &mut out).map(|b| b.id), None);
    }
}
