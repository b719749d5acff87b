//! Invariant 10 (DESIGN.md §5; ingest spec, "Retention and rollups"): every refreshed, closed
//! rollup bucket equals the aggregate of its raw rows.
//!
//! Owns: the checker's own aggregate of every committed row, per point and 1-minute and 1-hour
//! bucket (count, live_count, and sum/min/max over live numeric rows of `agg_safe` points:
//! the definition in `migrations/0004_rollups.sql`, computed here from the commits the checker
//! saw, not from the store's tables), and the comparison with what the store's rollup tables
//! hold:
//!
//! - after an on-demand refresh, every bucket in the ranges it reports (rounded outward) equals
//!   the aggregate of the rows committed so far, and no other bucket is stored there;
//! - after a step of the running core's refresh that leaves no invalidation behind (`more` is
//!   false), every 1-minute bucket below the watermark's `refreshed_to` and every 1-hour bucket
//!   that ends at or below it does. Only the buckets that can have changed since the last such
//!   check are compared: from the lowest minute a commit touched since then, or the last
//!   watermark, whichever is lower.
//!
//! The memory store runs each refresh action under its one mutex and the simulator reports
//! commits synchronously, so "the rows committed so far" is exactly what the refresh read.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rustc_hash::FxHashMap;
use sentinel_core::{Micros, ObsRow, Quality, RetentionClass};
use sentinel_ports::{RollupGrain, RollupRow, RollupWatermark};

/// One bucket's aggregate, as the rollup tables define it.
#[derive(Clone, Debug, Default, PartialEq)]
struct Agg {
    class: Option<RetentionClass>,
    count: u64,
    live_count: u64,
    sum: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
}

/// `agg_safe` by point id: looked up on every commit, never walked, so hashed (a string key in
/// an ordered map was a string comparison per tree level).
pub type AggSafe = FxHashMap<Arc<str>, bool>;

/// Buckets by `(bucket, point)`, so a time range is a range of the map.
type Table = BTreeMap<(Micros, Arc<str>), Agg>;

#[derive(Clone)]
pub struct RollupModel {
    /// `agg_safe` of every point any registry version of the run knows (the same in each).
    agg_safe: Arc<AggSafe>,
    minute: Table,
    hour: Table,
    /// Minute buckets a commit touched since the last watermark check.
    touched: BTreeSet<Micros>,
    /// `refreshed_to` at the last watermark check: everything below it was equal then.
    verified_to: Option<Micros>,
    /// Buckets compared, for the run's statistics.
    pub checked: u64,
}

impl RollupModel {
    pub fn new(agg_safe: Arc<AggSafe>) -> RollupModel {
        RollupModel {
            agg_safe,
            minute: Table::new(),
            hour: Table::new(),
            touched: BTreeSet::new(),
            verified_to: None,
            checked: 0,
        }
    }

    /// A row a commit inserted.
    pub fn on_committed(&mut self, row: &ObsRow) {
        let safe = self.agg_safe.get(&row.point_id).copied().unwrap_or(false);
        let value = match (&row.value, row.quality) {
            (Some(v), Quality::Live) if safe => v.num(),
            _ => None,
        };
        for (grain, table) in [
            (RollupGrain::Minute, &mut self.minute),
            (RollupGrain::Hour, &mut self.hour),
        ] {
            let agg = table
                .entry((grain.floor(row.observed_at), row.point_id.clone()))
                .or_default();
            agg.class = Some(row.class);
            agg.count += 1;
            if row.quality == Quality::Live {
                agg.live_count += 1;
            }
            if let Some(v) = value {
                agg.sum = Some(agg.sum.unwrap_or(0.0) + v);
                agg.min = Some(agg.min.map_or(v, |m| m.min(v)));
                agg.max = Some(agg.max.map_or(v, |m| m.max(v)));
            }
        }
        self.touched.insert(RollupGrain::Minute.floor(row.observed_at));
    }

    /// Rows of `points` were rewritten in place (a reprocess): their aggregates are rebuilt
    /// from `rows`, every row the log now holds for them, and every minute they touch is due
    /// for the next watermark check.
    pub fn on_rewritten(&mut self, points: &BTreeSet<Arc<str>>, rows: &[ObsRow]) {
        for table in [&mut self.minute, &mut self.hour] {
            table.retain(|(_, point), _| !points.contains(point));
        }
        for row in rows {
            debug_assert!(points.contains(&row.point_id));
            self.on_committed(row);
        }
    }

    /// An on-demand refresh reported `range` for `grain`; `stored` is what the store holds in
    /// it now. `None` when they agree, else what differs.
    pub fn check_refreshed(
        &mut self,
        grain: RollupGrain,
        range: (Micros, Micros),
        stored: &[RollupRow],
    ) -> Option<String> {
        self.compare(grain, range, stored)
            .map(|what| format!("after an on-demand refresh of [{}, {}): {what}", range.0, range.1))
    }

    /// The lower end of what a watermark check must compare: the lowest minute touched since
    /// the last check, or the last check's watermark.
    pub fn check_from(&self, watermark: RollupWatermark) -> Micros {
        let touched = self.touched.first().copied().unwrap_or(watermark.refreshed_to);
        touched.min(self.verified_to.unwrap_or(watermark.refreshed_from))
    }

    /// A step left no invalidation behind: every closed bucket below `watermark.refreshed_to`
    /// from `from` (= [`Self::check_from`]) on must equal its aggregate. `minutes` and `hours`
    /// are what the store holds in `[from, refreshed_to)` and in the hours that closed there.
    pub fn check_watermark(
        &mut self,
        watermark: RollupWatermark,
        from: Micros,
        minutes: &[RollupRow],
        hours: &[RollupRow],
    ) -> Option<String> {
        let to = watermark.refreshed_to;
        let minute_range = (RollupGrain::Minute.floor(from), to);
        let hour_range = (RollupGrain::Hour.floor(from), RollupGrain::Hour.floor(to));
        let failure = self
            .compare(RollupGrain::Minute, minute_range, minutes)
            .or_else(|| self.compare(RollupGrain::Hour, hour_range, hours));
        // Touched minutes at or past the watermark wait for a later check; so do the hours
        // still open (the next check starts at or below this watermark's hour).
        self.touched = self.touched.split_off(&to);
        self.verified_to = Some(RollupGrain::Hour.floor(to));
        failure.map(|what| {
            format!(
                "with the watermark at {to} and no invalidation left (compared from {}): {what}",
                minute_range.0
            )
        })
    }

    /// The hour range [`Self::check_watermark`] compares for `from` and `watermark`.
    pub fn watermark_hours(from: Micros, watermark: RollupWatermark) -> (Micros, Micros) {
        (
            RollupGrain::Hour.floor(from),
            RollupGrain::Hour.floor(watermark.refreshed_to),
        )
    }

    /// Compares the store's buckets of `grain` in `[lo, hi)` with the aggregates.
    fn compare(
        &mut self,
        grain: RollupGrain,
        (lo, hi): (Micros, Micros),
        stored: &[RollupRow],
    ) -> Option<String> {
        if lo >= hi {
            return None;
        }
        let table = match grain {
            RollupGrain::Minute => &self.minute,
            RollupGrain::Hour => &self.hour,
        };
        let lower = (lo, Arc::<str>::from(""));
        let expected: Vec<(&(Micros, Arc<str>), &Agg)> = table
            .range(lower..)
            .take_while(|((bucket, _), _)| *bucket < hi)
            .collect();
        // The stored buckets in range, by key (hashed: this runs after every refresh step, and
        // sorting them by key was most of its cost). For a key stored twice the later row
        // counts, as a map's insert would keep it.
        let mut stored_by_key: FxHashMap<(Micros, &str), (&RollupRow, bool)> = FxHashMap::default();
        for row in stored.iter().filter(|row| row.bucket >= lo && row.bucket < hi) {
            stored_by_key.insert((row.bucket, row.point_id.as_str()), (row, false));
        }
        self.checked += expected.len() as u64;
        for ((bucket, point), agg) in &expected {
            let Some((row, matched)) = stored_by_key.get_mut(&(*bucket, &**point)) else {
                return Some(format!(
                    "{} bucket {bucket} of {point} is missing; its raw rows say count {} live_count {}",
                    grain.as_str(),
                    agg.count,
                    agg.live_count
                ));
            };
            *matched = true;
            if let Some(what) = differs(agg, row) {
                return Some(format!("{} bucket {bucket} of {point}: {what}", grain.as_str()));
            }
        }
        // The first unmatched stored bucket in (bucket, point) order, if any.
        stored_by_key
            .iter()
            .filter(|(_, (_, matched))| !*matched)
            .min_by_key(|(key, _)| **key)
            .map(|((bucket, point), (row, _))| {
                format!(
                    "{} bucket {bucket} of {point} is stored (count {}) but no committed row falls in it",
                    grain.as_str(),
                    row.count
                )
            })
    }
}

/// What differs between an aggregate and a stored bucket, if anything. Sums compare within a
/// relative 1e-9: the store may add in another order.
fn differs(agg: &Agg, row: &RollupRow) -> Option<String> {
    let close = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => (a - b).abs() <= 1e-9 * a.abs().max(b.abs()).max(1.0),
        _ => false,
    };
    if agg.count != row.count || agg.live_count != row.live_count {
        return Some(format!(
            "stored count {} live_count {}, the raw rows say {} and {}",
            row.count, row.live_count, agg.count, agg.live_count
        ));
    }
    if agg.class.is_some_and(|class| class != row.class) {
        return Some(format!(
            "stored in class {}, the rows are {:?}",
            row.class.as_str(),
            agg.class
        ));
    }
    if !close(agg.sum, row.sum) || !close(agg.min, row.min) || !close(agg.max, row.max) {
        return Some(format!(
            "stored sum/min/max {:?}/{:?}/{:?}, the raw rows say {:?}/{:?}/{:?}",
            row.sum, row.min, row.max, agg.sum, agg.min, agg.max
        ));
    }
    None
}

/// `agg_safe` of every point in `descriptors`.
pub fn agg_safe_points<'a>(
    descriptors: impl Iterator<Item = &'a sentinel_core::registry::Descriptor>,
) -> AggSafe {
    descriptors
        .map(|d| (Arc::from(d.id.as_str()), d.agg_safe))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(count: u64, live: u64, sum: Option<f64>) -> Agg {
        Agg {
            class: Some(RetentionClass::Measurement),
            count,
            live_count: live,
            sum,
            min: sum,
            max: sum,
        }
    }

    fn stored(count: u64, live: u64, sum: Option<f64>) -> RollupRow {
        RollupRow {
            point_id: "p".into(),
            bucket: Micros(0),
            class: RetentionClass::Measurement,
            count,
            live_count: live,
            sum,
            min: sum,
            max: sum,
        }
    }

    #[test]
    fn equal_buckets_agree_within_rounding() {
        assert_eq!(
            differs(&agg(2, 1, Some(0.3)), &stored(2, 1, Some(0.1 + 0.2))),
            None
        );
    }

    #[test]
    fn a_gappy_or_wrong_bucket_is_named() {
        assert!(differs(&agg(2, 1, Some(1.0)), &stored(2, 2, Some(1.0))).is_some());
        assert!(differs(&agg(2, 1, Some(1.0)), &stored(2, 1, Some(1.5))).is_some());
        assert!(differs(&agg(2, 1, None), &stored(2, 1, Some(1.0))).is_some());
    }
}
