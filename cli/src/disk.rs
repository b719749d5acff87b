//! The disk a registry needs (issue 24 item 6): each retained table's rows per day at the
//! registry's declared rates, times its horizon (the flags `sentinel run` and `sentinel
//! retention` take), times its bytes per row. `registry plan` sizes every table at the storage
//! format's measured cost per row ([`RAW_ROW_BYTES`], [`ROLLUP_ROW_BYTES`]); `sentinel storage`
//! uses a table's own bytes per row once it holds [`MEASURED_ROWS_MIN`] rows. A raw table's
//! days past the compaction age (`--compact-after-days`, 7 by default; `--no-compaction`) are
//! sized at the compacted format's cost, [`COMPACT_ROW_BYTES`]; so are the minute rollup's
//! days past their own, shorter age (`--rollup-compact-after-days`, 1 by default: compacted
//! alone, `Store::compact_rollup_day`), at [`COMPACT_ROLLUP_BUCKET_BYTES`] a bucket. The
//! hourly rollup is never compacted. Of a raw table's hot days, the [`UNPACKED_HOT_DAYS`]
//! newest (today's and yesterday's) are at the hot cost and the rest at [`PACKED_ROW_BYTES`]
//! (the closed days `sentinel db pack` rebuilds daily, migration 0019) when the table is sized
//! at the format's cost; a table measured in this database keeps its own cost for every hot
//! day, packed or not as it is.
//!
//! Owns: the projection arithmetic ([`project`]), its text table and JSON, and how bytes read.
//! A point's declared `row_bytes` is not used here: it is the sensor's declared write size for
//! the write budget (sensor paradigm, "Write-budget sizing"), not what PostgreSQL stores.

use sentinel_core::registry::Descriptor;
use sentinel_core::retention::RetentionConfig;
use sentinel_ports::{RetainedTable, RollupGrain};
use sentinel_store_pg::{
    COMPACT_ROLLUP_BUCKET_BYTES, COMPACT_ROW_BYTES, PACKED_ROW_BYTES, RAW_ROW_BYTES, ROLLUP_ROW_BYTES,
    TableSize,
};

/// A table's bytes per row are its own once it holds at least this many rows; below, page and
/// index overhead of a nearly empty table would say nothing about a full one.
pub const MEASURED_ROWS_MIN: u64 = 10_000;
/// A raw table's hot days not yet packed: today's, and yesterday's until `sentinel db pack`'s
/// default age (`--after-days 1`) has passed since it ended.
pub const UNPACKED_HOT_DAYS: u32 = 1 + crate::pack::PACK_AFTER_DAYS_DEFAULT;
const SECONDS_PER_DAY: f64 = 86_400.0;
/// A rollup bucket a point reports in at most: one a minute, one an hour.
const MINUTES_PER_DAY: f64 = 1_440.0;
const HOURS_PER_DAY: f64 = 24.0;

/// The ages past which days are held compacted (`sentinel run`'s): the raw tables' and the
/// minute rollup's (at most the raw age; `None` with the raw age: nothing is compacted).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CompactAges {
    pub raw_days: Option<u32>,
    pub rollup_1m_days: Option<u32>,
}

impl CompactAges {
    /// Both ages from the flags `sentinel run` takes, as `registry plan` and `sentinel
    /// storage` size the days they hold compacted.
    pub fn of(args: &crate::args::CompactionAgeArgs) -> anyhow::Result<CompactAges> {
        Ok(CompactAges {
            raw_days: args.after_days(),
            rollup_1m_days: args.rollup_after_days()?,
        })
    }

    /// The minute rollup's days are compacted alone at `rollup_1m_days`, or with the raw days.
    pub fn rollup_1m(self) -> Option<u32> {
        self.raw_days
            .map(|raw| self.rollup_1m_days.map_or(raw, |r| r.min(raw)))
    }
}

/// Where a projection's bytes per row came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowBytesFrom {
    /// The table's own, in this database.
    Measured,
    /// The storage format's measured cost per row.
    Format,
}

impl RowBytesFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            RowBytesFrom::Measured => "measured",
            RowBytesFrom::Format => "format",
        }
    }
}

/// One table's projected size over its horizon.
#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    pub table: RetainedTable,
    pub horizon_days: u32,
    /// Of `horizon_days`, the days held compacted, at [`compact_row_bytes`] a row (a raw table
    /// or the minute rollup whose horizon is past the compaction age; 0 for every other).
    pub compacted_days: u32,
    /// Of the hot days, the closed ones sized packed, at [`PACKED_ROW_BYTES`] a row (a raw
    /// table sized at the format's cost; 0 for every other).
    pub packed_days: u32,
    pub rows_per_day: f64,
    pub bytes_per_row: f64,
    pub bytes_per_row_from: RowBytesFrom,
    pub bytes: f64,
}

/// A table's bytes per row, if it holds any.
pub fn bytes_per_row(size: &TableSize) -> Option<f64> {
    (size.rows > 0).then(|| size.bytes() as f64 / size.rows as f64)
}

/// The projected size of each retained table over its horizon in `config`, at the declared
/// rates of `descriptors`, with the bytes per row `measured` holds for a table when it holds
/// at least [`MEASURED_ROWS_MIN`] rows, else the format's. A raw table's days older than
/// `ages.raw_days`, and the minute rollup's older than [`CompactAges::rollup_1m`] (none when
/// `None`), are at [`compact_row_bytes`] a row. A rollup has
/// one row per point per bucket the point reports in: a point slower than a bucket fills only
/// some.
pub fn project(
    descriptors: &[Descriptor],
    config: &RetentionConfig,
    ages: CompactAges,
    measured: &[(RetainedTable, usize, TableSize)],
) -> Vec<Projection> {
    RetainedTable::ALL
        .into_iter()
        .map(|table| {
            let rows_per_day: f64 = descriptors
                .iter()
                .map(|d| {
                    let rate = d.manifest.peak_rate_hz;
                    let rows = if rate.is_finite() && rate > 0.0 {
                        rate * SECONDS_PER_DAY
                    } else {
                        0.0
                    };
                    match table {
                        RetainedTable::Raw(class) if class == d.retention => rows,
                        RetainedTable::Raw(_) => 0.0,
                        RetainedTable::Rollup(RollupGrain::Minute) => rows.min(MINUTES_PER_DAY),
                        RetainedTable::Rollup(RollupGrain::Hour) => rows.min(HOURS_PER_DAY),
                    }
                })
                .sum();
            let size = measured
                .iter()
                .find(|(t, _, _)| *t == table)
                .map(|(_, _, size)| *size)
                .unwrap_or_default();
            let (bytes_per_row, bytes_per_row_from) = match bytes_per_row(&size) {
                Some(b) if size.rows >= MEASURED_ROWS_MIN => (b, RowBytesFrom::Measured),
                _ => (format_row_bytes(table), RowBytesFrom::Format),
            };
            let horizon_days = horizon_days(config, table);
            let age = match table {
                RetainedTable::Raw(_) => ages.raw_days,
                RetainedTable::Rollup(RollupGrain::Minute) => ages.rollup_1m(),
                RetainedTable::Rollup(RollupGrain::Hour) => None,
            };
            let compacted_days = age.map_or(0, |after| horizon_days.saturating_sub(after));
            debug_assert!(compacted_days <= horizon_days);
            let hot_days = horizon_days - compacted_days;
            let packed_days = match (table, bytes_per_row_from) {
                (RetainedTable::Raw(_), RowBytesFrom::Format) => hot_days.saturating_sub(UNPACKED_HOT_DAYS),
                _ => 0,
            };
            debug_assert!(packed_days <= hot_days);
            let bytes = rows_per_day
                * (f64::from(hot_days - packed_days) * bytes_per_row
                    + f64::from(packed_days) * PACKED_ROW_BYTES
                    + f64::from(compacted_days) * compact_row_bytes(table));
            debug_assert!(bytes.is_finite() && bytes >= 0.0, "a projection is a size");
            Projection {
                table,
                horizon_days,
                compacted_days,
                packed_days,
                rows_per_day,
                bytes_per_row,
                bytes_per_row_from,
                bytes,
            }
        })
        .collect()
}

/// The storage format's measured cost of one row of `table`, table and indexes.
pub fn format_row_bytes(table: RetainedTable) -> f64 {
    match table {
        RetainedTable::Raw(_) => RAW_ROW_BYTES,
        RetainedTable::Rollup(_) => ROLLUP_ROW_BYTES,
    }
}

/// The compacted format's measured cost of one row of `table` (a compacted raw row, a
/// compacted minute bucket; the hourly rollup is never compacted: its hot cost).
pub fn compact_row_bytes(table: RetainedTable) -> f64 {
    match table {
        RetainedTable::Raw(_) => COMPACT_ROW_BYTES,
        RetainedTable::Rollup(RollupGrain::Minute) => COMPACT_ROLLUP_BUCKET_BYTES,
        RetainedTable::Rollup(RollupGrain::Hour) => ROLLUP_ROW_BYTES,
    }
}

fn horizon_days(config: &RetentionConfig, table: RetainedTable) -> u32 {
    match table {
        RetainedTable::Raw(class) => config.raw_days[class.index()],
        RetainedTable::Rollup(RollupGrain::Minute) => config.rollup_1m_days,
        RetainedTable::Rollup(RollupGrain::Hour) => config.rollup_1h_days,
    }
}

/// The table's name in the database's terms: `raw_measurement`, `rollup_1m`.
pub fn table_name(table: RetainedTable) -> String {
    match table {
        RetainedTable::Raw(class) => format!("raw_{}", class.as_str()),
        RetainedTable::Rollup(grain) => format!("rollup_{}", grain.as_str()),
    }
}

/// The projection as a table of text, one line per table and a total.
pub fn text(projections: &[Projection]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<17} {:>26} {:>14} {:>20} {:>10}",
        "table", "days", "rows/day", "bytes/row (hot)", "size"
    );
    for p in projections {
        let _ = writeln!(
            out,
            "{:<17} {:>26} {:>14.0} {:>20} {:>10}",
            p.table.label(),
            days_text(p),
            p.rows_per_day,
            format!("{:.0} ({})", p.bytes_per_row, p.bytes_per_row_from.as_str()),
            human_bytes(p.bytes)
        );
    }
    let _ = writeln!(
        out,
        "{:<17} {:>26} {:>14} {:>20} {:>10}",
        "total",
        "",
        "",
        "",
        human_bytes(projections.iter().map(|p| p.bytes).sum())
    );
    out
}

/// `90`, `90 (83 compact)`, `90 (5 packed, 83 compact)`.
fn days_text(p: &Projection) -> String {
    let mut parts = Vec::new();
    if p.packed_days > 0 {
        parts.push(format!("{} packed", p.packed_days));
    }
    if p.compacted_days > 0 {
        parts.push(format!("{} compact", p.compacted_days));
    }
    if parts.is_empty() {
        p.horizon_days.to_string()
    } else {
        format!("{} ({})", p.horizon_days, parts.join(", "))
    }
}

/// The projection for `--json`: each table and the total bytes.
pub fn json(projections: &[Projection]) -> serde_json::Value {
    let tables: Vec<_> = projections
        .iter()
        .map(|p| {
            serde_json::json!({
                "table": table_name(p.table),
                "horizon_days": p.horizon_days,
                "compacted_days": p.compacted_days,
                "compacted_bytes_per_row": compact_row_bytes(p.table),
                "packed_days": p.packed_days,
                "packed_bytes_per_row": PACKED_ROW_BYTES,
                "rows_per_day": p.rows_per_day,
                "bytes_per_row": p.bytes_per_row,
                "bytes_per_row_from": p.bytes_per_row_from.as_str(),
                "bytes": p.bytes,
            })
        })
        .collect();
    serde_json::json!({
        "tables": tables,
        "bytes": projections.iter().map(|p| p.bytes).sum::<f64>(),
    })
}

/// Bytes as an operator reads them: B, kB, MB, GB, TB (powers of 1000, as disks are sold).
pub fn human_bytes(bytes: f64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes.max(0.0);
    let mut unit = 0;
    while value >= 1_000.0 && unit + 1 < UNITS.len() {
        value /= 1_000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{value:.0} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sentinel_core::RetentionClass;
    use sentinel_core::registry::Kind;

    fn point(id: &str, class: RetentionClass, rate_hz: f64, row_bytes: u32) -> Descriptor {
        let mut d = Descriptor::new(id, Kind::Number, class, "h", "i");
        d.manifest.peak_rate_hz = rate_hz;
        d.manifest.row_bytes = row_bytes;
        d
    }

    #[test]
    fn projection_is_rate_times_horizon_times_bytes_per_row_measured_when_there_are_enough_rows() {
        let points = [
            point("a", RetentionClass::Measurement, 1.0, 100),
            point("b", RetentionClass::Measurement, 0.5, 200),
            point("c", RetentionClass::State, 0.001, 80),
        ];
        let config = RetentionConfig::default();
        let measured_size = TableSize {
            rows: MEASURED_ROWS_MIN,
            rows_exact: true,
            heap_bytes: 900_000,
            index_bytes: 300_000,
        };
        let too_few = TableSize {
            rows: MEASURED_ROWS_MIN - 1,
            rows_exact: true,
            heap_bytes: 10_000_000,
            index_bytes: 0,
        };
        let measured = [
            (RetainedTable::Raw(RetentionClass::Measurement), 1, measured_size),
            (RetainedTable::Raw(RetentionClass::State), 1, too_few),
        ];
        let p = project(&points, &config, CompactAges::default(), &measured);
        let m = &p[0];
        assert_eq!(m.rows_per_day, 1.5 * 86_400.0);
        assert_eq!(
            (m.bytes_per_row, m.bytes_per_row_from),
            (120.0, RowBytesFrom::Measured)
        );
        // A table measured here keeps its own cost on every hot day (packed or not, as it is).
        assert_eq!(m.packed_days, 0);
        assert_eq!(m.bytes, 1.5 * 86_400.0 * 30.0 * 120.0);
        // State: too few rows measured, so the format's cost, not the declared row size.
        let s = &p[1];
        assert_eq!(
            (s.bytes_per_row, s.bytes_per_row_from),
            (RAW_ROW_BYTES, RowBytesFrom::Format)
        );
        assert!((s.rows_per_day - 86.4).abs() < 1e-9);
        assert_eq!(s.horizon_days, 90);
        assert_eq!(
            s.packed_days, 88,
            "at the format's cost, every closed hot day is packed"
        );
        assert!((s.bytes - 86.4 * (2.0 * RAW_ROW_BYTES + 88.0 * PACKED_ROW_BYTES)).abs() < 1e-6);
        // Rollups: one row per point per minute it reports in, at most 1,440 a day.
        let minute = &p[3];
        assert!((minute.rows_per_day - (1_440.0 + 1_440.0 + 86.4)).abs() < 1e-9);
        assert_eq!(
            (minute.bytes_per_row, minute.bytes_per_row_from),
            (ROLLUP_ROW_BYTES, RowBytesFrom::Format)
        );
        let hour = &p[4];
        assert!((hour.rows_per_day - (24.0 + 24.0 + 24.0)).abs() < 1e-9);
        assert_eq!(hour.horizon_days, 730);
    }

    #[test]
    fn the_spec_estate_at_the_format_cost() {
        // The core runtime spec's estate: ~19M raw rows a day from about 4,000 points, each
        // reporting at least once a minute, under 90 days of measurement retention. The spec
        // puts it at ~40 GB with compression from day seven; this format, uncompressed, is
        // about 19M × (2 × 184 + 88 × 174) B ≈ 298 GB raw with its closed days packed (315 GB
        // as ingest fills them) plus the minute rollup's 5.76M rows a day.
        let rate_hz = 19_000_000.0 / 86_400.0 / 4_000.0;
        let points: Vec<_> = (0..4_000)
            .map(|i| point(&format!("p{i}"), RetentionClass::Measurement, rate_hz, 100))
            .collect();
        let config = RetentionConfig {
            raw_days: [90, 90, 7],
            ..RetentionConfig::default()
        };
        let p = project(&points, &config, CompactAges::default(), &[]);
        assert!((p[0].rows_per_day - 19e6).abs() < 1.0);
        // Today's and yesterday's rows as ingest fills them, the 88 closed days packed
        // (`sentinel db pack`): 19M × (2 × 184 + 88 × 174) B ≈ 298 GB.
        assert_eq!(p[0].packed_days, 88);
        assert!((p[0].bytes - 19e6 * (2.0 * RAW_ROW_BYTES + 88.0 * PACKED_ROW_BYTES)).abs() < 1e3);
        assert!((p[3].rows_per_day - 5_760_000.0).abs() < 1e-3);
        assert!(p.iter().all(|p| p.bytes_per_row_from == RowBytesFrom::Format));
        assert!(p.iter().all(|p| p.compacted_days == 0));
        // Compacted from day seven, as the spec has it: 7 hot days (today's and yesterday's
        // unpacked, 5 packed) and 83 compacted, about 19M × (2 × 184 + 5 × 174 + 83 × 17) B
        // ≈ 50.3 GB of raw rows (51.3 GB unpacked; the spec says ~40 GB). The minute rollups
        // here with the raw days (their own age set to the raw one).
        let with_raw = CompactAges {
            raw_days: Some(7),
            rollup_1m_days: None,
        };
        let p = project(&points, &config, with_raw, &[]);
        assert_eq!(
            (p[0].horizon_days, p[0].packed_days, p[0].compacted_days),
            (90, 5, 83)
        );
        assert!(
            (p[0].bytes - 19e6 * (2.0 * RAW_ROW_BYTES + 5.0 * PACKED_ROW_BYTES + 83.0 * COMPACT_ROW_BYTES))
                .abs()
                < 1e3
        );
        // The diagnostic class's 7-day horizon: 2 unpacked, 5 packed, none compacted.
        assert_eq!((p[2].packed_days, p[2].compacted_days), (5, 0));
        // Rollups are never packed.
        assert_eq!((p[3].packed_days, p[4].packed_days), (0, 0));
        // A horizon within the age is all hot; the minute rollup is compacted with the raw
        // days (7 hot, 83 compacted: 5.76M × (7 × 231 + 83 × COMPACT_ROLLUP_BUCKET_BYTES) B),
        // the hourly one never.
        assert_eq!(p[2].compacted_days, 0);
        assert_eq!((p[3].compacted_days, p[4].compacted_days), (83, 0));
        assert!(
            (p[3].bytes - 5.76e6 * (7.0 * ROLLUP_ROW_BYTES + 83.0 * COMPACT_ROLLUP_BUCKET_BYTES)).abs() < 1e3
        );
        let q = project(&points, &config, CompactAges::default(), &[]);
        assert!(
            p[0].bytes < q[0].bytes / 4.0,
            "compaction shrinks the raw table's projection"
        );
        assert!(p[3].bytes < q[3].bytes / 4.0, "and the minute rollup's");
        assert_eq!(p[4].bytes, q[4].bytes, "the hourly rollup is never compacted");
        // The defaults: the minute rollup compacted alone a day after the day ended (1 hot day,
        // 89 compacted); the raw rows as before.
        let defaults = CompactAges {
            raw_days: Some(7),
            rollup_1m_days: Some(1),
        };
        let r = project(&points, &config, defaults, &[]);
        assert_eq!((r[0].compacted_days, r[3].compacted_days), (83, 89));
        assert_eq!(r[0].bytes, p[0].bytes, "the raw rows wait for their own age");
        assert!((r[3].bytes - 5.76e6 * (ROLLUP_ROW_BYTES + 89.0 * COMPACT_ROLLUP_BUCKET_BYTES)).abs() < 1e3);
        let six_days = 6.0 * 5.76e6 * (ROLLUP_ROW_BYTES - COMPACT_ROLLUP_BUCKET_BYTES);
        assert!(
            (p[3].bytes - r[3].bytes - six_days).abs() < 1e3,
            "six of the hot week's minute rollup days compacted"
        );
        // Never past the raw age; nothing at all when compaction is off.
        let past = CompactAges {
            raw_days: Some(3),
            rollup_1m_days: Some(5),
        };
        assert_eq!(past.rollup_1m(), Some(3));
        let off = CompactAges {
            raw_days: None,
            rollup_1m_days: Some(1),
        };
        assert_eq!(off.rollup_1m(), None);
        assert_eq!(project(&points, &config, off, &[])[3].compacted_days, 0);
    }

    #[test]
    fn bytes_read_in_powers_of_a_thousand() {
        assert_eq!(human_bytes(999.0), "999 B");
        assert_eq!(human_bytes(1_500.0), "1.5 kB");
        assert_eq!(human_bytes(40e9), "40.0 GB");
        assert_eq!(human_bytes(2.5e12), "2.5 TB");
    }
}
