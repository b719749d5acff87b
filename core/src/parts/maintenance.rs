//! The maintenance part: the running core's work on the log that is not ingest — the rollup
//! refresh and retention schedules, and the one reprocess asked over the bus (ingest spec,
//! "Retention and rollups", "Reprocess"; core runtime spec, "Backpressure").
//!
//! Owns: the [`RollupSchedule`], the [`RetentionSchedule`], the [`CompactionSchedule`] and the
//! [`PartitionsSchedule`] (in [`crate::rollup`], [`crate::retention`], [`crate::compaction`]
//! and [`crate::partitions`]), the [`ReprocessSlot`] (in [`crate::reprocess_request`]), and whether
//! the last lag reading was high. Ingest needs the database more than maintenance does: while
//! the lag is high or every in-flight slot is taken ("ingest behind", which the router tells
//! from the ingest part's pipeline), no rollup step, retention run or compaction is asked for, so they
//! never starve ingest.
//!
//! Takes `Tick`, `Lag`, `RollupStepped`, `RetentionRan`, `DayCompacted` (counted),
//! `PartitionsEnsured` (counted: the
//! partitions made, the lock timeouts), `ReprocessRequested` and the slot's
//! side of `ReprocessFinished` and of the core's exit (the fenced inputs stop the core in the
//! router).
//!
//! Emits `RefreshRollups`, `DropExpired`, `CompactDay`, `EnsurePartitions`, `Reprocess` and
//! `ReprocessReply`.

use crate::compaction::{CompactionOutcome, CompactionSchedule, CompactionTarget};
use crate::config::Config;
use crate::effect::Effect;
use crate::partitions::{PartitionsOutcome, PartitionsSchedule};
use crate::reprocess_request::{Admission, ReprocessAsk, ReprocessReply, ReprocessSlot};
use crate::retention::{RetentionOutcome, RetentionSchedule};
use crate::rollup::{RollupSchedule, RollupStepOutcome};
use crate::time::Micros;

use super::context::{Ctx, Out};

#[derive(Debug)]
pub(crate) struct Maintenance {
    rollups: RollupSchedule,
    retention: RetentionSchedule,
    compaction: CompactionSchedule,
    partitions: PartitionsSchedule,
    reprocess: ReprocessSlot,
    /// The last lag reading was high.
    lag_high: bool,
}

impl Maintenance {
    pub fn new(config: &Config, now: Micros) -> Maintenance {
        Maintenance {
            rollups: RollupSchedule::new(config.rollups.clone(), now),
            retention: RetentionSchedule::new(config.retention.clone(), now),
            compaction: CompactionSchedule::new(config.compaction.clone(), now),
            partitions: PartitionsSchedule::new(config.partitions.clone(), now),
            reprocess: ReprocessSlot::default(),
            lag_high: false,
        }
    }

    /// A lag reading from the durable consumer, recorded for the self-points. Returns whether
    /// it is high (past either bound of the config).
    ///
    /// The backlog the pending bound is held against is everything the log has not committed:
    /// `pending` (not yet delivered) plus `ack_pending` (delivered to the core, not yet
    /// committed and acked — up to the consumer's `max_ack_pending`). Judging by `pending`
    /// alone would lift the staleness suppression while a drain's last tens of thousands of
    /// messages are still in flight. The `lag_pending` self-point keeps its meaning: not yet
    /// delivered.
    pub fn on_lag(
        &mut self,
        pending: u64,
        ack_pending: u64,
        oldest_unacked_age_ms: Option<u64>,
        ctx: &Ctx,
        out: &mut Out,
    ) -> bool {
        let config = &ctx.config;
        let uncommitted = pending.saturating_add(ack_pending);
        let high = uncommitted >= config.lag_high_pending
            || oldest_unacked_age_ms.is_some_and(|age| age >= config.lag_high_age_ms);
        out.metrics.lag_pending = pending;
        out.metrics.lag_oldest_unacked_age_ms = oldest_unacked_age_ms.unwrap_or(0);
        self.lag_high = high;
        high
    }

    /// Ingest needs the database more than the rollups do: the lag is high or (`pipeline_full`)
    /// every in-flight slot is taken.
    fn ingest_behind(&self, pipeline_full: bool) -> bool {
        self.lag_high || pipeline_full
    }

    /// For a running core: the rollup step and the retention run that are due, unless ingest
    /// is behind.
    pub fn on_tick(&mut self, pipeline_full: bool, ctx: &Ctx, out: &mut Out) {
        let behind = self.ingest_behind(pipeline_full);
        if let Some(step) = self.rollups.poll(ctx.now, ctx.epoch, behind) {
            out.push(Effect::RefreshRollups(step));
        }
        if let Some(run) = self.retention.poll(ctx.now, ctx.epoch, behind) {
            out.push(Effect::DropExpired(run));
        }
        if let Some(day) = self
            .compaction
            .poll(ctx.now, ctx.epoch, behind, &ctx.config.retention)
        {
            out.push(Effect::CompactDay(day));
        }
        if let Some(run) = self.partitions.poll(ctx.now, behind) {
            out.push(Effect::EnsurePartitions(run));
        }
    }

    /// When the running core should next tick for a rollup step or a retention run: never
    /// while ingest is behind (a lag reading or a commit wakes the core anyway).
    pub fn next_deadline(&self, pipeline_full: bool) -> Option<Micros> {
        if self.ingest_behind(pipeline_full) {
            return None;
        }
        [
            self.rollups.next_deadline(),
            self.retention.next_deadline(),
            self.compaction.next_deadline(),
            self.partitions.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn on_rollup_stepped(&mut self, now: Micros, outcome: RollupStepOutcome) {
        self.rollups.on_step(now, outcome);
    }

    pub fn on_retention_ran(&mut self, now: Micros, outcome: RetentionOutcome) {
        self.retention.on_run(now, outcome);
    }

    /// A day's compaction answered: counted, and the schedule moves (a stream refusal and a
    /// failure wait; the runtime logged them, without values).
    pub fn on_day_compacted(&mut self, outcome: CompactionOutcome, ctx: &Ctx, out: &mut Out) {
        let rollups = self.compaction.in_flight_target() == Some(CompactionTarget::MinuteRollups);
        match outcome {
            CompactionOutcome::Done { rows } if rows > 0 && rollups => {
                out.metrics.compacted_rollup_days += 1;
                out.metrics.compacted_rollup_buckets += rows;
            }
            CompactionOutcome::Done { rows } if rows > 0 => {
                out.metrics.compacted_days += 1;
                out.metrics.compacted_rows += rows;
            }
            CompactionOutcome::Done { .. } => {}
            CompactionOutcome::StreamHolds => out.metrics.compaction_stream_holds += 1,
            CompactionOutcome::Failed => out.metrics.compaction_failures += 1,
        }
        self.compaction.on_compacted(ctx.now, outcome);
    }

    /// A partitions-ahead run answered: counted, and the schedule moves.
    pub fn on_partitions_ensured(&mut self, outcome: PartitionsOutcome, ctx: &Ctx, out: &mut Out) {
        match outcome {
            PartitionsOutcome::Done { created, .. } => out.metrics.partitions_created += u64::from(created),
            PartitionsOutcome::LockTimedOut => out.metrics.partitions_lock_timeouts += 1,
            PartitionsOutcome::Failed => {}
        }
        self.partitions.on_run(ctx.now, outcome);
    }

    /// A reprocess asked over the bus: started as an effect the runtime runs off the loop, or
    /// refused at once (see [`ReprocessSlot::admit`]).
    pub fn on_reprocess_requested(
        &mut self,
        ask: ReprocessAsk,
        reply_to: String,
        running: bool,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        match self
            .reprocess
            .admit(ask, reply_to.clone(), ctx.epoch, ctx.registry.version, !running)
        {
            Admission::Start(job) => out.push(Effect::Reprocess(job)),
            Admission::Refuse(reply) => out.push(Effect::ReprocessReply {
                reply_to,
                payload: reply.to_bytes(),
            }),
        }
    }

    /// The running reprocess named `request_id` finished: frees the slot and returns where to
    /// reply (`None` for an answer to no running request, ignored).
    pub fn finish_reprocess(&mut self, request_id: &str) -> Option<String> {
        self.reprocess.finish(request_id)
    }

    pub fn reply(&self, reply_to: String, reply: &ReprocessReply, out: &mut Out) {
        out.push(Effect::ReprocessReply {
            reply_to,
            payload: reply.to_bytes(),
        });
    }

    /// The core stops: a reprocess in flight is abandoned (the runtime stops its task; whole
    /// chunks stay done), and its asker hears so now rather than waiting out its timeout.
    pub fn abandon_reprocess(&mut self, why: &str, ctx: &Ctx, out: &mut Out) {
        if let Some(reply_to) = self.reprocess.abandon() {
            let reply = ReprocessReply::Failed {
                epoch: ctx.epoch,
                why: format!("the core stopped ({why}) before the reprocess finished"),
            };
            self.reply(reply_to, &reply, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parts::context::testing::{T0, ctx, drain};
    use crate::registry::RetentionClass;

    fn ask(request_id: &str, registry_version: i32) -> ReprocessAsk {
        ReprocessAsk {
            request_id: request_id.into(),
            principal: "operator:ana".into(),
            glob: "plant.*".into(),
            from_us: 0,
            to_us: None,
            registry_version,
            dry_run: false,
            chunk_rows: 100,
        }
    }

    fn kinds(effects: &[Effect]) -> Vec<&'static str> {
        effects
            .iter()
            .map(|e| match e {
                Effect::RefreshRollups(_) => "rollups",
                Effect::DropExpired(_) => "retention",
                Effect::CompactDay(_) => "compaction",
                Effect::EnsurePartitions(_) => "partitions",
                Effect::Reprocess(_) => "reprocess",
                Effect::ReprocessReply { .. } => "reply",
                other => panic!("not maintenance's: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn nothing_is_asked_while_ingest_is_behind() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut maintenance = Maintenance::new(&ctx.config, T0);
        let rollup_due = T0.add_ms(ctx.config.rollups.refresh_interval_ms);
        assert_eq!(
            maintenance.next_deadline(false),
            Some(rollup_due),
            "the rollups come first"
        );
        assert_eq!(maintenance.next_deadline(true), None, "a full pipeline");
        let high = maintenance.on_lag(ctx.config.lag_high_pending, 0, None, &ctx, &mut out);
        assert!(high);
        assert_eq!(out.metrics.lag_pending, ctx.config.lag_high_pending);
        ctx.now = T0.add_ms(ctx.config.retention.first_run_delay_ms);
        maintenance.on_tick(false, &ctx, &mut out);
        assert!(drain(&mut out).is_empty(), "lag is high");
        assert!(!maintenance.on_lag(0, 0, Some(0), &ctx, &mut out));
        maintenance.on_tick(false, &ctx, &mut out);
        assert_eq!(
            kinds(&drain(&mut out)),
            ["rollups", "retention", "compaction", "partitions"]
        );
        assert_eq!(maintenance.next_deadline(false), None, "all four in flight");
        maintenance.on_rollup_stepped(ctx.now, RollupStepOutcome::Done { behind: true });
        let catch_up = ctx.now.add_ms(ctx.config.rollups.catch_up_interval_ms);
        assert_eq!(maintenance.next_deadline(false), Some(catch_up));
    }

    #[test]
    fn partitions_runs_are_counted_and_a_lock_timeout_is_retried_not_fatal() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut maintenance = Maintenance::new(&ctx.config, T0);
        ctx.now = T0.add_ms(ctx.config.partitions.interval_ms);
        maintenance.on_tick(false, &ctx, &mut out);
        assert!(kinds(&drain(&mut out)).contains(&"partitions"));
        maintenance.on_partitions_ensured(PartitionsOutcome::LockTimedOut, &ctx, &mut out);
        assert_eq!(
            (
                out.metrics.partitions_lock_timeouts,
                out.metrics.partitions_created
            ),
            (1, 0)
        );
        let retry_at = ctx.now.add_ms(ctx.config.partitions.retry_ms);
        ctx.now = retry_at;
        maintenance.on_tick(false, &ctx, &mut out);
        let effects = drain(&mut out);
        let run = effects
            .iter()
            .find_map(|e| match e {
                Effect::EnsurePartitions(run) => Some(*run),
                _ => None,
            })
            .expect("retried at the next tick after the retry interval");
        assert_eq!((run.today, run.days_ahead), (retry_at, 3));
        maintenance.on_partitions_ensured(
            PartitionsOutcome::Done {
                created: 4,
                until: None,
            },
            &ctx,
            &mut out,
        );
        assert_eq!(
            (
                out.metrics.partitions_lock_timeouts,
                out.metrics.partitions_created
            ),
            (1, 4)
        );
        assert!(drain(&mut out).is_empty(), "counted only; nothing else to do");
    }

    #[test]
    fn compaction_asks_a_day_at_a_time_counts_what_it_did_and_waits_on_the_stream() {
        let mut ctx = ctx();
        // The raw rows alone here; the minute rollups' own cursor in the next test.
        ctx.config.compaction.rollup_after_days = None;
        let mut out = Out::default();
        let mut maintenance = Maintenance::new(&ctx.config, T0);
        let compaction_of = |effects: Vec<Effect>| {
            effects.into_iter().find_map(|e| match e {
                Effect::CompactDay(day) => Some(day),
                _ => None,
            })
        };
        ctx.now = T0.add_ms(ctx.config.compaction.first_run_delay_ms);
        assert!(maintenance.on_lag(ctx.config.lag_high_pending, 0, None, &ctx, &mut out));
        maintenance.on_tick(false, &ctx, &mut out);
        assert_eq!(compaction_of(drain(&mut out)), None, "ingest is behind");
        assert!(!maintenance.on_lag(0, 0, None, &ctx, &mut out));
        maintenance.on_tick(true, &ctx, &mut out);
        assert_eq!(compaction_of(drain(&mut out)), None, "the pipeline is full");
        maintenance.on_tick(false, &ctx, &mut out);
        let first = compaction_of(drain(&mut out)).expect("a day is due");
        // The oldest day any class still keeps (state's, a 90-day horizon), asked first.
        let kept_from = ctx.config.retention.raw_kept_from(RetentionClass::State, ctx.now);
        assert_eq!(
            (first.target, first.day, first.epoch, first.at),
            (
                CompactionTarget::Rows(RetentionClass::State),
                kept_from,
                ctx.epoch,
                ctx.now
            )
        );
        assert_eq!(first.after_days, 7);
        maintenance.on_tick(false, &ctx, &mut out);
        assert_eq!(compaction_of(drain(&mut out)), None, "one in flight");
        maintenance.on_day_compacted(CompactionOutcome::StreamHolds, &ctx, &mut out);
        assert_eq!(out.metrics.compaction_stream_holds, 1);
        assert!(drain(&mut out).is_empty(), "a stream refusal is quiet: no effect");
        ctx.now = ctx.now.add_ms(ctx.config.compaction.run_interval_ms);
        maintenance.on_tick(false, &ctx, &mut out);
        let again = compaction_of(drain(&mut out)).expect("a run interval later");
        assert_eq!(again.day, first.day, "the same day again");
        maintenance.on_day_compacted(CompactionOutcome::Done { rows: 40 }, &ctx, &mut out);
        ctx.now = ctx.now.add_ms(ctx.config.compaction.catch_up_interval_ms);
        maintenance.on_tick(false, &ctx, &mut out);
        let next = compaction_of(drain(&mut out)).expect("the next day");
        assert_eq!(next.day, Micros(first.day.0 + crate::time::US_PER_DAY));
        maintenance.on_day_compacted(CompactionOutcome::Done { rows: 0 }, &ctx, &mut out);
        assert_eq!(
            (out.metrics.compacted_days, out.metrics.compacted_rows),
            (1, 40),
            "an empty or already compacted day is not counted"
        );
    }

    #[test]
    fn a_days_minute_rollups_are_asked_alone_and_counted_apart() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut maintenance = Maintenance::new(&ctx.config, T0);
        let compaction_of = |effects: Vec<Effect>| {
            effects.into_iter().find_map(|e| match e {
                Effect::CompactDay(day) => Some(day),
                _ => None,
            })
        };
        ctx.now = T0.add_ms(ctx.config.compaction.first_run_delay_ms);
        assert!(!maintenance.on_lag(0, 0, None, &ctx, &mut out));
        maintenance.on_tick(false, &ctx, &mut out);
        let first = compaction_of(drain(&mut out)).expect("a day is due");
        assert!(matches!(first.target, CompactionTarget::Rows(_)), "{first:?}");
        maintenance.on_day_compacted(CompactionOutcome::Done { rows: 40 }, &ctx, &mut out);
        ctx.now = ctx.now.add_ms(ctx.config.compaction.catch_up_interval_ms);
        maintenance.on_tick(false, &ctx, &mut out);
        let rollups = compaction_of(drain(&mut out)).expect("the rollups of the same day");
        assert_eq!(
            (rollups.target, rollups.day, rollups.after_days),
            (CompactionTarget::MinuteRollups, first.day, 1)
        );
        maintenance.on_day_compacted(CompactionOutcome::Done { rows: 1_440 }, &ctx, &mut out);
        assert_eq!(
            (
                out.metrics.compacted_days,
                out.metrics.compacted_rows,
                out.metrics.compacted_rollup_days,
                out.metrics.compacted_rollup_buckets
            ),
            (1, 40, 1, 1_440)
        );
    }

    #[test]
    fn one_reprocess_at_a_time_and_an_exit_answers_it() {
        let ctx = ctx();
        let mut out = Out::default();
        let mut maintenance = Maintenance::new(&ctx.config, T0);
        let version = ctx.registry.version;
        maintenance.on_reprocess_requested(ask("r-1", version), "reply.1".into(), true, &ctx, &mut out);
        maintenance.on_reprocess_requested(ask("r-2", version), "reply.2".into(), true, &ctx, &mut out);
        assert_eq!(
            kinds(&drain(&mut out)),
            ["reprocess", "reply"],
            "the second is busy"
        );
        assert_eq!(maintenance.finish_reprocess("r-2"), None, "not the running one");
        maintenance.abandon_reprocess("fenced", &ctx, &mut out);
        let effects = drain(&mut out);
        let [Effect::ReprocessReply { reply_to, payload }] = &effects[..] else {
            panic!("one reply: {effects:?}");
        };
        assert_eq!(reply_to, "reply.1");
        let reply: ReprocessReply = serde_json::from_slice(payload).expect("a reply");
        assert!(matches!(reply, ReprocessReply::Failed { why, .. } if why.contains("fenced")));
        assert_eq!(maintenance.finish_reprocess("r-1"), None, "the slot is free");
        maintenance.on_reprocess_requested(ask("r-3", version), "reply.3".into(), false, &ctx, &mut out);
        assert_eq!(kinds(&drain(&mut out)), ["reply"], "a draining core starts none");
    }
}
