//! Daily partitions made ahead while the core runs (DESIGN.md §3: raw rows live in daily
//! partitions on `ingested_at`, made ahead of need; issue 26, "partitions created ahead" and
//! the `SentinelPartitionsNotCreatedAhead` alert).
//!
//! Owns: the running core's partitions schedule ([`PartitionsSchedule`], like the retention
//! schedule: time passed in, one run in flight at most). The store makes yesterday through
//! today + 3 at startup and a batch's missing day on demand; without this a core that runs for
//! days would see its horizon shrink until only on-demand creation is left, on the commit
//! path. So every `interval_ms` (an hour), and sooner whenever the horizon the last run
//! reported is under `horizon_min_days`, the core asks the store to make today − 1 through
//! today + `days_ahead` ([`Effect::EnsurePartitions`](crate::Effect::EnsurePartitions)).
//!
//! The store runs it OFF the commit path, in its own transaction with a short `lock_timeout`:
//! making a partition locks its parent table, and waiting behind an open transaction on the
//! parent would hold up every commit queued behind the DDL. A lock timeout is an outcome, not
//! an error: counted (`Metrics::partitions_lock_timeouts`), retried after `retry_ms`, never
//! fatal. Not asked for while ingest is behind, like the other maintenance.

use crate::time::{Micros, US_PER_DAY};

/// When and how far ahead the running core makes partitions. Units last.
#[derive(Clone, Debug, PartialEq)]
pub struct PartitionsConfig {
    /// How often the running core makes partitions ahead (0: never; default hourly).
    pub interval_ms: i64,
    /// Partitions are made through today + this many days (1..=30; default 3, as at startup).
    pub days_ahead: u32,
    /// Asked for early whenever the last reported horizon is less than this many days ahead
    /// (0..=`days_ahead`; default 2).
    pub horizon_min_days: u32,
    /// The next run after a lock timeout or a failure.
    pub retry_ms: i64,
    /// How long the store's DDL may wait for a lock on a parent table (1..=10,000 ms).
    pub lock_timeout_ms: u32,
}

/// The furthest ahead a core makes partitions on its own.
pub const DAYS_AHEAD_MAX: u32 = 30;
/// A lock wait longer than this would hold up commits noticeably.
pub const LOCK_TIMEOUT_MS_MAX: u32 = 10_000;

impl Default for PartitionsConfig {
    fn default() -> Self {
        PartitionsConfig {
            interval_ms: 3_600_000,
            days_ahead: 3,
            horizon_min_days: 2,
            retry_ms: 60_000,
            lock_timeout_ms: 200,
        }
    }
}

impl PartitionsConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.interval_ms < 0 || self.retry_ms <= 0 {
            return Err(
                "partitions.interval_ms must not be negative and partitions.retry_ms must be positive".into(),
            );
        }
        if !(1..=DAYS_AHEAD_MAX).contains(&self.days_ahead) {
            return Err(format!(
                "partitions.days_ahead must be within 1..={DAYS_AHEAD_MAX}, got {}",
                self.days_ahead
            ));
        }
        if self.horizon_min_days > self.days_ahead {
            return Err(format!(
                "partitions.horizon_min_days ({}) must not exceed days_ahead ({})",
                self.horizon_min_days, self.days_ahead
            ));
        }
        if !(1..=LOCK_TIMEOUT_MS_MAX).contains(&self.lock_timeout_ms) {
            return Err(format!(
                "partitions.lock_timeout_ms must be within 1..={LOCK_TIMEOUT_MS_MAX}, got {}",
                self.lock_timeout_ms
            ));
        }
        Ok(())
    }
}

/// What the core asks the store for: make the daily partitions of every raw class table (and
/// the rollups') from the day before `today` through `today + days_ahead`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PartitionsRequest {
    /// The run's instant; its UTC day is "today".
    pub today: Micros,
    pub days_ahead: u32,
    pub lock_timeout_ms: u32,
}

/// A run's outcome, as the core needs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PartitionsOutcome {
    /// Done: `created` partitions made; every raw class table now reaches `until`.
    Done { created: u32, until: Option<Micros> },
    /// A parent table stayed locked past the lock timeout: nothing made this time.
    LockTimedOut,
    /// Failed otherwise (counted as a store error by the runtime).
    Failed,
}

/// When the running core asks for partitions ahead.
#[derive(Debug)]
pub struct PartitionsSchedule {
    config: PartitionsConfig,
    next_at: Micros,
    /// How far the last successful run said partitions reach.
    until: Option<Micros>,
    in_flight: bool,
}

impl PartitionsSchedule {
    /// The first run one interval after `now` (the store made them at startup).
    pub fn new(config: PartitionsConfig, now: Micros) -> PartitionsSchedule {
        PartitionsSchedule {
            next_at: now.add_ms(config.interval_ms),
            config,
            until: None,
            in_flight: false,
        }
    }

    fn enabled(&self) -> bool {
        self.config.interval_ms > 0
    }

    /// When the horizon the last run reported falls under `horizon_min_days` ahead.
    fn horizon_due_at(&self) -> Option<Micros> {
        let until = self.until?;
        Some(Micros(
            until.0 - i64::from(self.config.horizon_min_days) * US_PER_DAY,
        ))
    }

    fn due_at(&self) -> Micros {
        self.horizon_due_at()
            .map_or(self.next_at, |at| at.min(self.next_at))
    }

    /// The run due at `now`, if any: none while one is in flight or ingest is `behind`.
    pub fn poll(&mut self, now: Micros, behind: bool) -> Option<PartitionsRequest> {
        if !self.enabled() || self.in_flight || behind || now < self.due_at() {
            return None;
        }
        self.in_flight = true;
        Some(PartitionsRequest {
            today: now,
            days_ahead: self.config.days_ahead,
            lock_timeout_ms: self.config.lock_timeout_ms,
        })
    }

    pub fn on_run(&mut self, now: Micros, outcome: PartitionsOutcome) {
        debug_assert!(
            self.in_flight,
            "a partitions run answered that was never asked for"
        );
        self.in_flight = false;
        let wait_ms = match outcome {
            PartitionsOutcome::Done { until, .. } => {
                if until.is_some() {
                    self.until = until;
                }
                self.config.interval_ms
            }
            PartitionsOutcome::LockTimedOut | PartitionsOutcome::Failed => self.config.retry_ms,
        };
        self.next_at = now.add_ms(wait_ms);
        // A horizon still short after a run that made what it could (today + days_ahead is
        // always beyond it) must not make the core spin: the earliest next run is one retry
        // interval away.
        if self.horizon_due_at().is_some_and(|at| at < self.next_at) {
            self.until = None;
            self.next_at = self.next_at.min(now.add_ms(self.config.retry_ms));
        }
    }

    /// When the next run is due, if one can be asked for.
    pub fn next_deadline(&self) -> Option<Micros> {
        (self.enabled() && !self.in_flight).then(|| self.due_at())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Micros {
        Micros::parse_rfc3339(text).expect("test instant")
    }

    #[test]
    fn hourly_one_at_a_time_and_held_back_while_behind() {
        let t0 = at("2026-06-10T13:45:00Z");
        let mut s = PartitionsSchedule::new(PartitionsConfig::default(), t0);
        assert_eq!(s.poll(t0, false), None, "the store made them at startup");
        let first = t0.add_ms(3_600_000);
        assert_eq!(s.next_deadline(), Some(first));
        assert_eq!(s.poll(first, true), None, "held back while ingest is behind");
        let run = s.poll(first, false).expect("due");
        assert_eq!(
            run,
            PartitionsRequest {
                today: first,
                days_ahead: 3,
                lock_timeout_ms: 200
            }
        );
        assert_eq!(s.poll(first.add_ms(1), false), None, "one in flight at most");
        assert_eq!(s.next_deadline(), None);
        let until = at("2026-06-14T00:00:00Z");
        s.on_run(
            first,
            PartitionsOutcome::Done {
                created: 3,
                until: Some(until),
            },
        );
        assert_eq!(s.next_deadline(), Some(first.add_ms(3_600_000)), "then hourly");
    }

    #[test]
    fn a_lock_timeout_retries_soon_and_a_short_horizon_asks_early() {
        let t0 = at("2026-06-10T13:45:00Z");
        let config = PartitionsConfig::default();
        let mut s = PartitionsSchedule::new(config.clone(), t0);
        let first = t0.add_ms(config.interval_ms);
        s.poll(first, false).expect("due");
        s.on_run(first, PartitionsOutcome::LockTimedOut);
        assert_eq!(
            s.next_deadline(),
            Some(first.add_ms(60_000)),
            "retried at the next tick"
        );
        let second = first.add_ms(60_000);
        s.poll(second, false).expect("retried");
        // Partitions reach the end of June 13: under two days ahead from 22:30 on June 11.
        s.on_run(
            second,
            PartitionsOutcome::Done {
                created: 0,
                until: Some(at("2026-06-14T00:00:00Z")),
            },
        );
        assert_eq!(s.next_deadline(), Some(second.add_ms(3_600_000)));
        // The core ran on without another run (say ingest was behind all along): the
        // horizon, not the hour, makes it due.
        let late = at("2026-06-12T00:00:01Z");
        assert_eq!(s.next_deadline(), Some(second.add_ms(3_600_000)));
        assert!(s.poll(late, false).is_some(), "past the hour as well");
        s.on_run(
            late,
            PartitionsOutcome::Done {
                created: 3,
                until: Some(at("2026-06-16T00:00:00Z")),
            },
        );
        assert_eq!(
            s.next_deadline(),
            Some(late.add_ms(3_600_000)),
            "four days ahead again: hourly"
        );
        let mut short = PartitionsSchedule::new(config, t0);
        let run_at = t0.add_ms(3_600_000);
        short.poll(run_at, false).expect("due");
        short.on_run(
            run_at,
            PartitionsOutcome::Done {
                created: 0,
                until: Some(at("2026-06-11T00:00:00Z")),
            },
        );
        assert_eq!(
            short.next_deadline(),
            Some(run_at.add_ms(60_000)),
            "a horizon already short: asked again after the retry interval, not in a spin"
        );
    }

    #[test]
    fn config_bounds() {
        assert_eq!(PartitionsConfig::default().validate(), Ok(()));
        let bad = PartitionsConfig {
            days_ahead: 0,
            ..PartitionsConfig::default()
        };
        assert!(bad.validate().is_err());
        let bad = PartitionsConfig {
            lock_timeout_ms: 0,
            ..PartitionsConfig::default()
        };
        assert!(bad.validate().is_err());
    }
}
