//! Retention's shapes (ingest spec, "Retention and rollups"; migrations/0005_retention.sql):
//! old data goes only with whole partitions.

use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Micros, RetentionClass};

use super::rollups::RollupGrain;

// ---------------------------------------------------------------------------------------------
// Retention (issue 9 item 2; migrations/0005_retention.sql): whole partitions only.

pub use sentinel_core::retention::RetentionCutoffs;

/// A table retention drops partitions of: a raw class table (daily partitions on
/// `ingested_at`), `rollup_1m` (daily on `bucket`) or `rollup_1h` (monthly on `bucket`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RetainedTable {
    Raw(RetentionClass),
    Rollup(RollupGrain),
}

impl RetainedTable {
    pub const ALL: [RetainedTable; 5] = [
        RetainedTable::Raw(RetentionClass::Measurement),
        RetainedTable::Raw(RetentionClass::State),
        RetainedTable::Raw(RetentionClass::Diagnostic),
        RetainedTable::Rollup(RollupGrain::Minute),
        RetainedTable::Rollup(RollupGrain::Hour),
    ];

    /// The `table` of a `retention_drop` event's payload: `raw` (with its class beside it),
    /// `rollup_1m` or `rollup_1h`. Only the PostgreSQL adapter knows the physical names.
    pub fn kind_str(self) -> &'static str {
        match self {
            RetainedTable::Raw(_) => "raw",
            RetainedTable::Rollup(RollupGrain::Minute) => "rollup_1m",
            RetainedTable::Rollup(RollupGrain::Hour) => "rollup_1h",
        }
    }

    /// How an operator reads it: `raw measurement`, `rollup_1m`, …
    pub fn label(self) -> String {
        match self {
            RetainedTable::Raw(class) => format!("raw {}", class.as_str()),
            RetainedTable::Rollup(grain) => format!("rollup_{}", grain.as_str()),
        }
    }

    pub fn class(self) -> Option<RetentionClass> {
        match self {
            RetainedTable::Raw(class) => Some(class),
            RetainedTable::Rollup(_) => None,
        }
    }

    /// The first instant this table keeps under `cutoffs`.
    pub fn kept_from(self, cutoffs: &RetentionCutoffs) -> Micros {
        match self {
            RetainedTable::Raw(class) => cutoffs.raw[class.index()],
            RetainedTable::Rollup(RollupGrain::Minute) => cutoffs.rollup_1m,
            RetainedTable::Rollup(RollupGrain::Hour) => cutoffs.rollup_1h,
        }
    }

    /// The partition holding `at`: its UTC day, or for `rollup_1h` its UTC month.
    pub fn partition_of(self, at: Micros) -> (Micros, Micros) {
        let day = Micros(at.0.div_euclid(US_PER_DAY) * US_PER_DAY);
        match self {
            RetainedTable::Rollup(RollupGrain::Hour) => month_of(at),
            _ => (day, Micros(day.0 + US_PER_DAY)),
        }
    }
}

/// The UTC month holding `at`, as `[first midnight, next month's first midnight)`.
pub fn month_of(at: Micros) -> (Micros, Micros) {
    // Civil-from-days (H. Hinnant), on whole days since 1970-01-01.
    let days = at.0.div_euclid(US_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let first = days - (d - 1);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let next = days_from_civil(ny, nm, 1);
    (Micros(first * US_PER_DAY), Micros(next * US_PER_DAY))
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One partition: `[from, to)` of `table`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition {
    pub table: RetainedTable,
    pub from: Micros,
    pub to: Micros,
}

/// A partition a run dropped, and the `seq` of its `retention_drop` control event.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DroppedPartition {
    pub partition: Partition,
    pub seq: i64,
}

/// What one retention run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionRun {
    /// In the order dropped: oldest first.
    pub dropped: Vec<DroppedPartition>,
    /// Expired partitions are still waiting (the run stopped at its limit).
    pub more: bool,
}

/// The furthest ahead [`Store::ensure_partitions_ahead`] makes partitions.
pub const PARTITIONS_DAYS_AHEAD_MAX: u32 = 30;

/// What one partitions-ahead run did ([`Store::ensure_partitions_ahead`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PartitionsAhead {
    /// `created` partitions made (0: they all existed); every raw class table now has
    /// partitions reaching `until` ([`Store::partitions_created_until`]).
    Ensured { created: u32, until: Option<Micros> },
    /// A parent table stayed locked longer than the lock timeout: nothing was made (the
    /// transaction rolled back), nothing else waited longer than that for it.
    LockTimedOut,
}

/// Most partitions one [`Store::expired_partitions`] call lists.
pub const EXPIRED_PARTITIONS_LIST_MAX: usize = 10_000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_are_calendar_months_in_utc() {
        let at = |t: &str| Micros::parse_rfc3339(t).expect("instant");
        for (inside, first, next) in [
            (
                "2026-12-31T23:59:59Z",
                "2026-12-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
            ),
            (
                "2028-02-29T12:00:00Z",
                "2028-02-01T00:00:00Z",
                "2028-03-01T00:00:00Z",
            ),
            (
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:00Z",
                "2026-02-01T00:00:00Z",
            ),
            (
                "1969-12-15T00:00:00Z",
                "1969-12-01T00:00:00Z",
                "1970-01-01T00:00:00Z",
            ),
        ] {
            assert_eq!(month_of(at(inside)), (at(first), at(next)), "{inside}");
        }
        let day = RetainedTable::Raw(RetentionClass::State).partition_of(at("2026-06-01T13:00:00Z"));
        assert_eq!(day, (at("2026-06-01T00:00:00Z"), at("2026-06-02T00:00:00Z")));
    }
}
