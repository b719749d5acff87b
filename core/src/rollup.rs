//! When the running core refreshes its closed rollup buckets (ingest spec, "Retention and
//! rollups"; DESIGN.md §3; issue 9). The refresh itself, the watermark and the late-row
//! invalidations live in the store (migrations/0004_rollups.sql); this module only decides when
//! to ask for the next step and how big it may be.
//!
//! Owns: the schedule — one step in flight at a most, each bounded in minutes of data and in
//! invalidations, none while ingest is behind (high lag: the database belongs to the backlog
//! then), the next one soon when the last step says there is more, otherwise after the interval.
//! A bucket counts as closed once `settle_ms` has passed its end, so rows still on their way
//! through the pipeline land before their bucket is first computed (a later one only costs an
//! invalidation). A failed step is retried after the interval: the step is idempotent and an
//! unfinished claim is finished by the next one, so rollups never stop ingest; a fenced one
//! stops the core like every fenced write.

use crate::time::Micros;

/// The schedule's bounds, units last.
#[derive(Clone, Debug, PartialEq)]
pub struct RollupConfig {
    /// How often a step is asked for when the last one found nothing more (0: never).
    pub refresh_interval_ms: i64,
    /// How soon the next step follows one that left work behind.
    pub catch_up_interval_ms: i64,
    /// A bucket is closed once this long has passed its end.
    pub settle_ms: i64,
    /// Most minutes of data one step moves the watermark over (1..=1440).
    pub step_minutes_max: u32,
    /// Most invalidated minutes one step recomputes (1..=100,000).
    pub invalidations_max: u32,
}

impl Default for RollupConfig {
    fn default() -> Self {
        RollupConfig {
            refresh_interval_ms: 15_000,
            catch_up_interval_ms: 1_000,
            settle_ms: 120_000,
            step_minutes_max: 10,
            invalidations_max: 1_000,
        }
    }
}

impl RollupConfig {
    pub fn validate(&self) -> Result<(), String> {
        if self.refresh_interval_ms < 0 {
            return Err("rollups.refresh_interval_ms must not be negative (0 turns them off)".into());
        }
        if self.catch_up_interval_ms <= 0 || self.settle_ms < 0 {
            return Err("rollups.catch_up_interval_ms must be positive and settle_ms not negative".into());
        }
        if !(1..=1440).contains(&self.step_minutes_max) {
            return Err(format!(
                "rollups.step_minutes_max must be within 1..=1440, got {}",
                self.step_minutes_max
            ));
        }
        if !(1..=100_000).contains(&self.invalidations_max) {
            return Err(format!(
                "rollups.invalidations_max must be within 1..=100000, got {}",
                self.invalidations_max
            ));
        }
        Ok(())
    }
}

/// What the core asks the store for: one step of the refresh of closed buckets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupStepRequest {
    pub epoch: u32,
    /// Buckets ending at or before this are closed.
    pub closed_before: Micros,
    pub step_minutes_max: u32,
    pub invalidations_max: u32,
}

/// The step's outcome, as the core needs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RollupStepOutcome {
    /// Done; `behind` when the watermark is still short of `closed_before` or invalidations
    /// wait.
    Done { behind: bool },
    /// Failed with an outcome the next step repairs.
    Failed,
}

#[derive(Debug)]
pub struct RollupSchedule {
    config: RollupConfig,
    in_flight: bool,
    next_at: Micros,
}

impl RollupSchedule {
    /// The first step comes one interval after the core starts, once the backlog it may have
    /// found has had the database first.
    pub fn new(config: RollupConfig, now: Micros) -> RollupSchedule {
        let next_at = now.add_ms(config.refresh_interval_ms);
        RollupSchedule {
            config,
            in_flight: false,
            next_at,
        }
    }

    fn enabled(&self) -> bool {
        self.config.refresh_interval_ms > 0
    }

    /// The step to ask for now, if one is due. `ingest_behind` holds steps back (high lag).
    pub fn poll(&mut self, now: Micros, epoch: u32, ingest_behind: bool) -> Option<RollupStepRequest> {
        if !self.enabled() || self.in_flight || now < self.next_at || ingest_behind {
            return None;
        }
        self.in_flight = true;
        Some(RollupStepRequest {
            epoch,
            closed_before: Micros(now.0 - self.config.settle_ms * crate::time::US_PER_MS),
            step_minutes_max: self.config.step_minutes_max,
            invalidations_max: self.config.invalidations_max,
        })
    }

    pub fn on_step(&mut self, now: Micros, outcome: RollupStepOutcome) {
        debug_assert!(self.in_flight, "a rollup step answered that was never asked for");
        self.in_flight = false;
        let wait_ms = match outcome {
            RollupStepOutcome::Done { behind: true } => self.config.catch_up_interval_ms,
            RollupStepOutcome::Done { behind: false } | RollupStepOutcome::Failed => {
                self.config.refresh_interval_ms
            }
        };
        self.next_at = now.add_ms(wait_ms);
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// When the next step is due, if one can be asked for.
    pub fn next_deadline(&self) -> Option<Micros> {
        (self.enabled() && !self.in_flight).then_some(self.next_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T0: Micros = Micros(1_700_000_000_000_000);

    fn schedule() -> RollupSchedule {
        RollupSchedule::new(RollupConfig::default(), T0)
    }

    #[test]
    fn one_step_at_a_time_bounded_and_settled() {
        let mut s = schedule();
        assert_eq!(s.poll(T0, 3, false), None, "not before the first interval");
        let due = T0.add_ms(15_000);
        assert_eq!(s.next_deadline(), Some(due));
        let step = s.poll(due, 3, false).expect("due");
        assert_eq!(
            step,
            RollupStepRequest {
                epoch: 3,
                closed_before: due.add_ms(-120_000),
                step_minutes_max: 10,
                invalidations_max: 1_000,
            }
        );
        assert_eq!(
            s.poll(due.add_ms(60_000), 3, false),
            None,
            "one in flight at most"
        );
        assert_eq!(s.next_deadline(), None);
        s.on_step(due, RollupStepOutcome::Done { behind: true });
        assert_eq!(s.next_deadline(), Some(due.add_ms(1_000)), "catching up");
        assert!(s.poll(due.add_ms(1_000), 3, false).is_some());
        s.on_step(due.add_ms(1_000), RollupStepOutcome::Failed);
        assert_eq!(
            s.next_deadline(),
            Some(due.add_ms(16_000)),
            "a failure waits an interval"
        );
    }

    #[test]
    fn no_step_while_ingest_is_behind_or_when_turned_off() {
        let mut s = schedule();
        let due = T0.add_ms(15_000);
        assert_eq!(s.poll(due, 1, true), None);
        assert!(s.poll(due, 1, false).is_some());
        let mut off = RollupSchedule::new(
            RollupConfig {
                refresh_interval_ms: 0,
                ..RollupConfig::default()
            },
            T0,
        );
        assert_eq!(off.next_deadline(), None);
        assert_eq!(off.poll(due.add_ms(1_000_000), 1, false), None);
    }

    #[test]
    fn limits_are_validated() {
        assert!(RollupConfig::default().validate().is_ok());
        for bad in [
            RollupConfig {
                step_minutes_max: 0,
                ..RollupConfig::default()
            },
            RollupConfig {
                step_minutes_max: 1441,
                ..RollupConfig::default()
            },
            RollupConfig {
                invalidations_max: 0,
                ..RollupConfig::default()
            },
            RollupConfig {
                catch_up_interval_ms: 0,
                ..RollupConfig::default()
            },
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
