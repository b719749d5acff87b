//! The rollups' shapes (ingest spec, "Retention and rollups"; DESIGN.md §3; migrations/0004).

use sentinel_core::{Micros, RetentionClass};

/// A rollup's bucket width (ingest spec, "Retention and rollups"; DESIGN.md §3). Both are
/// computed directly from the raw class tables, never one from the other.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RollupGrain {
    Minute,
    Hour,
}

impl RollupGrain {
    pub const ALL: [RollupGrain; 2] = [RollupGrain::Minute, RollupGrain::Hour];

    pub fn width_us(self) -> i64 {
        match self {
            RollupGrain::Minute => 60 * sentinel_core::time::US_PER_S,
            RollupGrain::Hour => 3_600 * sentinel_core::time::US_PER_S,
        }
    }

    /// The start of the bucket holding `at` (UTC, from the Unix epoch).
    pub fn floor(self, at: Micros) -> Micros {
        Micros(at.0.div_euclid(self.width_us()) * self.width_us())
    }

    /// The smallest bucket boundary at or after `at`.
    pub fn ceil(self, at: Micros) -> Micros {
        let floor = self.floor(at);
        if floor == at {
            at
        } else {
            Micros(floor.0 + self.width_us())
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RollupGrain::Minute => "1m",
            RollupGrain::Hour => "1h",
        }
    }
}

/// One rollup bucket of one point, as stored. `sum`, `min` and `max` are over the live rows'
/// canonical numbers and are `None` for a point that is not `agg_safe` (or has no live number);
/// there is no average: a reader divides `sum` by `live_count`.
#[derive(Clone, Debug, PartialEq)]
pub struct RollupRow {
    pub point_id: String,
    pub bucket: Micros,
    pub class: RetentionClass,
    pub count: u64,
    pub live_count: u64,
    pub sum: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// What an on-demand refresh did: each grain's range, rounded outward to its buckets, and the
/// buckets (point × bucket) it wrote.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupRefresh {
    pub minute_range: (Micros, Micros),
    pub minute_buckets: u64,
    pub hour_range: (Micros, Micros),
    pub hour_buckets: u64,
}

/// The refresh watermark (migrations/0004_rollups.sql): every minute bucket in
/// `[refreshed_from, refreshed_to)`, and every hour bucket there that ends by `refreshed_to`,
/// has been computed, and a row committed since with `observed_at` below `claimed_to` left an
/// invalidation that the next step recomputes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupWatermark {
    pub refreshed_from: Micros,
    pub refreshed_to: Micros,
    pub claimed_to: Micros,
}

/// Bounds of one step of the running core's refresh of closed buckets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupStepLimits {
    /// How far past the watermark one step may go (1..=1440).
    pub step_minutes_max: u32,
    /// Most invalidations (late rows' minutes) one step recomputes (1..=100,000).
    pub invalidations_max: u32,
}

/// What one step did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupStep {
    pub watermark: RollupWatermark,
    pub minutes_advanced: u32,
    pub invalidated_minutes: u32,
    pub buckets_written: u64,
    /// Invalidations are already waiting for another step.
    pub more: bool,
}

/// Most rollup rows one [`Store::load_rollups`] call returns.
pub const ROLLUPS_LOAD_MAX: usize = 1_000_000;
