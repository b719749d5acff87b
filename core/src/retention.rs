//! How long the log keeps what (ingest spec, "The horizon is per class, and partial reprocess is
//! refused" and "Retention and rollups"; DESIGN.md §3; issue 9). The spec leaves the figures to
//! Retention & Compaction, which is not in `spec/`; these are the smallest real version.
//!
//! Owns: the horizons — per retention class for raw rows, and one for each rollup table — and
//! the arithmetic that turns a horizon and "now" into the first UTC day still kept. Raw rows
//! live in daily partitions on `ingested_at`, so a horizon is whole days: the partition of day
//! `today − horizon_days` is the oldest kept, everything before it goes by dropping partitions.
//! Reprocess refuses a range that reaches before its class's first kept day; retention drops
//! what lies before it. Both read the same [`RetentionConfig`], so they cannot disagree.
//!
//! Also owns the running core's retention schedule ([`RetentionSchedule`], like `rollup.rs`:
//! time passed in, one run in flight at most): once a day (and a first time an hour after the
//! core starts) it asks the store to drop every partition wholly before the cut-offs
//! ([`Effect::DropExpired`](crate::Effect::DropExpired)), at most `partitions_per_run_max` per
//! run, the next run soon while more are waiting; none while ingest is behind, since dropping a
//! partition briefly locks its parent table. The store drops whole partitions only, each with
//! an epoch-stamped `retention_drop` control event in the same fenced transaction.

use crate::registry::RetentionClass;
use crate::time::{Micros, US_PER_DAY};

/// Horizons in whole days, units last. Defaults (documented in the README):
///   raw measurement 30 d, raw state 90 d, raw diagnostic 7 d, rollup_1m 90 d, rollup_1h 730 d.
/// A rollup outlives the raw rows it summarises: that is what it is for (validated: each
/// rollup horizon is at least every raw one, so a bucket that can still be recomputed from raw
/// rows is never in a dropped rollup partition).
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionConfig {
    /// Raw rows kept per class, indexed by [`RetentionClass::index`] (1..=3650 each).
    pub raw_days: [u32; 3],
    /// 1-minute rollup buckets kept (1..=3650).
    pub rollup_1m_days: u32,
    /// 1-hour rollup buckets kept (1..=3650).
    pub rollup_1h_days: u32,
    /// How often the running core drops expired partitions (0: never; default daily).
    pub run_interval_ms: i64,
    /// The first run after the core starts.
    pub first_run_delay_ms: i64,
    /// The next run after one that left partitions waiting, or that failed.
    pub catch_up_interval_ms: i64,
    /// Most partitions one run drops (1..=400).
    pub partitions_per_run_max: u32,
}

/// Most partitions one retention run drops.
pub const PARTITIONS_PER_RUN_MAX: u32 = 400;

/// No horizon may exceed ten years: a limit on everything.
pub const HORIZON_DAYS_MAX: u32 = 3650;

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            raw_days: [30, 90, 7],
            rollup_1m_days: 90,
            rollup_1h_days: 730,
            run_interval_ms: 24 * 3_600_000,
            first_run_delay_ms: 3_600_000,
            catch_up_interval_ms: 60_000,
            partitions_per_run_max: 50,
        }
    }
}

impl RetentionConfig {
    pub fn validate(&self) -> Result<(), String> {
        let named = [
            ("retention.raw_days.measurement", self.raw_days[0]),
            ("retention.raw_days.state", self.raw_days[1]),
            ("retention.raw_days.diagnostic", self.raw_days[2]),
            ("retention.rollup_1m_days", self.rollup_1m_days),
            ("retention.rollup_1h_days", self.rollup_1h_days),
        ];
        for (name, days) in named {
            if !(1..=HORIZON_DAYS_MAX).contains(&days) {
                return Err(format!(
                    "{name} must be within 1..={HORIZON_DAYS_MAX}, got {days}"
                ));
            }
        }
        let raw_max = self.raw_days.iter().copied().max().unwrap_or(0);
        for (name, days) in [
            ("retention.rollup_1m_days", self.rollup_1m_days),
            ("retention.rollup_1h_days", self.rollup_1h_days),
        ] {
            if days < raw_max {
                return Err(format!(
                    "{name} ({days}) must be at least the longest raw horizon ({raw_max}): a rollup outlives its raw rows"
                ));
            }
        }
        if self.run_interval_ms < 0 || self.first_run_delay_ms < 0 || self.catch_up_interval_ms <= 0 {
            return Err(
                "retention.run_interval_ms and first_run_delay_ms must not be negative, \
                 catch_up_interval_ms must be positive"
                    .into(),
            );
        }
        if !(1..=PARTITIONS_PER_RUN_MAX).contains(&self.partitions_per_run_max) {
            return Err(format!(
                "retention.partitions_per_run_max must be within 1..={PARTITIONS_PER_RUN_MAX}, got {}",
                self.partitions_per_run_max
            ));
        }
        Ok(())
    }

    /// Every table's first kept instant at `now`: what a retention run drops before.
    pub fn cutoffs(&self, now: Micros) -> RetentionCutoffs {
        RetentionCutoffs {
            raw: RetentionClass::ALL.map(|class| self.raw_kept_from(class, now)),
            rollup_1m: self.rollup_1m_kept_from(now),
            rollup_1h: self.rollup_1h_kept_from(now),
        }
    }

    pub fn raw_horizon_days(&self, class: RetentionClass) -> u32 {
        self.raw_days[class.index()]
    }

    /// The first instant (a UTC midnight) whose raw rows of `class` are still kept at `now`:
    /// the start of day `today − horizon_days`. Rows ingested before it may be gone.
    pub fn raw_kept_from(&self, class: RetentionClass, now: Micros) -> Micros {
        kept_from(self.raw_horizon_days(class), now)
    }

    /// The first instant whose 1-minute rollup buckets are still kept at `now`.
    pub fn rollup_1m_kept_from(&self, now: Micros) -> Micros {
        kept_from(self.rollup_1m_days, now)
    }

    /// The first instant whose 1-hour rollup buckets are still kept at `now`.
    pub fn rollup_1h_kept_from(&self, now: Micros) -> Micros {
        kept_from(self.rollup_1h_days, now)
    }
}

/// The first instant each table keeps: partitions ending at or before it go.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RetentionCutoffs {
    /// Per class, indexed by [`RetentionClass::index`].
    pub raw: [Micros; 3],
    pub rollup_1m: Micros,
    pub rollup_1h: Micros,
}

/// What the core asks the store for: one retention run.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RetentionRequest {
    pub epoch: u32,
    /// The run's instant (the control events' `occurred_at`).
    pub at: Micros,
    pub cutoffs: RetentionCutoffs,
    pub partitions_max: u32,
}

/// A run's outcome, as the core needs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RetentionOutcome {
    /// Done; `more` when expired partitions are still waiting.
    Done { dropped: u32, more: bool },
    /// Failed (not fenced): retried after the catch-up interval. Every drop that committed
    /// stays dropped, with its event; the next run continues from there.
    Failed,
}

/// When the running core drops expired partitions.
#[derive(Debug)]
pub struct RetentionSchedule {
    config: RetentionConfig,
    in_flight: bool,
    next_at: Micros,
}

impl RetentionSchedule {
    pub fn new(config: RetentionConfig, now: Micros) -> RetentionSchedule {
        let next_at = now.add_ms(config.first_run_delay_ms);
        RetentionSchedule {
            config,
            in_flight: false,
            next_at,
        }
    }

    fn enabled(&self) -> bool {
        self.config.run_interval_ms > 0
    }

    /// The run to ask for now, if one is due. `ingest_behind` holds runs back.
    pub fn poll(&mut self, now: Micros, epoch: u32, ingest_behind: bool) -> Option<RetentionRequest> {
        if !self.enabled() || self.in_flight || now < self.next_at || ingest_behind {
            return None;
        }
        self.in_flight = true;
        Some(RetentionRequest {
            epoch,
            at: now,
            cutoffs: self.config.cutoffs(now),
            partitions_max: self.config.partitions_per_run_max,
        })
    }

    pub fn on_run(&mut self, now: Micros, outcome: RetentionOutcome) {
        debug_assert!(
            self.in_flight,
            "a retention run answered that was never asked for"
        );
        self.in_flight = false;
        let wait_ms = match outcome {
            RetentionOutcome::Done { more: false, .. } => self.config.run_interval_ms,
            RetentionOutcome::Done { more: true, .. } | RetentionOutcome::Failed => {
                self.config.catch_up_interval_ms
            }
        };
        self.next_at = now.add_ms(wait_ms);
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// When the next run is due, if one can be asked for.
    pub fn next_deadline(&self) -> Option<Micros> {
        (self.enabled() && !self.in_flight).then_some(self.next_at)
    }
}

/// Midnight (UTC) of day `today − days`.
fn kept_from(days: u32, now: Micros) -> Micros {
    debug_assert!((1..=HORIZON_DAYS_MAX).contains(&days));
    let today = now.0.div_euclid(US_PER_DAY);
    let kept = Micros((today - i64::from(days)) * US_PER_DAY);
    debug_assert!(kept <= now && kept.0 % US_PER_DAY == 0);
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Micros {
        Micros::parse_rfc3339(text).expect("test instant")
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let config = RetentionConfig::default();
        assert_eq!(config.validate(), Ok(()));
        assert_eq!(config.raw_horizon_days(RetentionClass::Measurement), 30);
        assert_eq!(config.raw_horizon_days(RetentionClass::State), 90);
        assert_eq!(config.raw_horizon_days(RetentionClass::Diagnostic), 7);
    }

    #[test]
    fn kept_from_is_a_midnight_whole_days_back() {
        let config = RetentionConfig::default();
        let now = at("2026-06-10T13:45:00Z");
        assert_eq!(
            config.raw_kept_from(RetentionClass::Diagnostic, now),
            at("2026-06-03T00:00:00Z")
        );
        assert_eq!(
            config.raw_kept_from(RetentionClass::Measurement, now),
            at("2026-05-11T00:00:00Z")
        );
        // At midnight itself, today is the day starting now.
        let midnight = at("2026-06-10T00:00:00Z");
        assert_eq!(
            config.raw_kept_from(RetentionClass::Diagnostic, midnight),
            at("2026-06-03T00:00:00Z")
        );
    }

    #[test]
    fn cutoffs_name_every_table() {
        let config = RetentionConfig::default();
        let now = at("2026-06-10T13:45:00Z");
        let cut = config.cutoffs(now);
        assert_eq!(
            cut.raw[RetentionClass::Diagnostic.index()],
            at("2026-06-03T00:00:00Z")
        );
        assert_eq!(cut.raw[RetentionClass::State.index()], at("2026-03-12T00:00:00Z"));
        assert_eq!(cut.rollup_1m, at("2026-03-12T00:00:00Z"));
        assert_eq!(cut.rollup_1h, config.rollup_1h_kept_from(now));
    }

    #[test]
    fn a_run_a_day_one_at_a_time_catching_up_and_held_back_while_behind() {
        let t0 = at("2026-06-10T13:45:00Z");
        let mut s = RetentionSchedule::new(RetentionConfig::default(), t0);
        assert_eq!(s.poll(t0, 2, false), None, "not at once");
        let first = t0.add_ms(3_600_000);
        assert_eq!(s.next_deadline(), Some(first));
        assert_eq!(s.poll(first, 2, true), None, "held back while ingest is behind");
        let run = s.poll(first, 2, false).expect("due");
        assert_eq!(run.epoch, 2);
        assert_eq!(run.at, first);
        assert_eq!(run.cutoffs, RetentionConfig::default().cutoffs(first));
        assert_eq!(run.partitions_max, 50);
        assert_eq!(s.poll(first.add_ms(1), 2, false), None, "one in flight at most");
        assert_eq!(s.next_deadline(), None);
        s.on_run(
            first,
            RetentionOutcome::Done {
                dropped: 50,
                more: true,
            },
        );
        assert_eq!(s.next_deadline(), Some(first.add_ms(60_000)), "catching up");
        assert!(s.poll(first.add_ms(60_000), 2, false).is_some());
        s.on_run(first.add_ms(60_000), RetentionOutcome::Failed);
        assert_eq!(
            s.next_deadline(),
            Some(first.add_ms(120_000)),
            "a failure retries soon"
        );
        assert!(s.poll(first.add_ms(120_000), 2, false).is_some());
        s.on_run(
            first.add_ms(120_000),
            RetentionOutcome::Done {
                dropped: 3,
                more: false,
            },
        );
        assert_eq!(
            s.next_deadline(),
            Some(first.add_ms(120_000 + 24 * 3_600_000)),
            "then daily"
        );
        let off = RetentionSchedule::new(
            RetentionConfig {
                run_interval_ms: 0,
                ..RetentionConfig::default()
            },
            t0,
        );
        assert_eq!(off.next_deadline(), None);
    }

    #[test]
    fn a_rollup_may_not_be_kept_shorter_than_raw_rows() {
        let config = RetentionConfig {
            rollup_1m_days: 29,
            ..RetentionConfig::default()
        };
        assert!(
            config
                .validate()
                .unwrap_err()
                .starts_with("retention.rollup_1m_days (29) must be at least the longest raw horizon (90)")
        );
    }

    #[test]
    fn out_of_bounds_horizons_are_refused_by_name() {
        let mut config = RetentionConfig::default();
        config.raw_days[2] = 0;
        assert_eq!(
            config.validate(),
            Err("retention.raw_days.diagnostic must be within 1..=3650, got 0".into())
        );
        config.raw_days[2] = 7;
        config.rollup_1h_days = 4000;
        assert!(
            config
                .validate()
                .unwrap_err()
                .starts_with("retention.rollup_1h_days")
        );
    }
}
