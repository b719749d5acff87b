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

use crate::registry::RetentionClass;
use crate::time::{Micros, US_PER_DAY};

/// Horizons in whole days, units last. Defaults (documented in the README):
///   raw measurement 30 d, raw state 90 d, raw diagnostic 7 d, rollup_1m 90 d, rollup_1h 730 d.
/// A rollup outlives the raw rows it summarises: that is what it is for.
#[derive(Clone, Debug, PartialEq)]
pub struct RetentionConfig {
    /// Raw rows kept per class, indexed by [`RetentionClass::index`] (1..=3650 each).
    pub raw_days: [u32; 3],
    /// 1-minute rollup buckets kept (1..=3650).
    pub rollup_1m_days: u32,
    /// 1-hour rollup buckets kept (1..=3650).
    pub rollup_1h_days: u32,
}

/// No horizon may exceed ten years: a limit on everything.
pub const HORIZON_DAYS_MAX: u32 = 3650;

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            raw_days: [30, 90, 7],
            rollup_1m_days: 90,
            rollup_1h_days: 730,
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
        Ok(())
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
