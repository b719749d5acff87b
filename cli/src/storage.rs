//! `sentinel storage [--exact] [--json]` (issue 24 item 6): what the database holds and what the
//! configured horizons will hold. Rows, heap and index bytes per retained table and partition
//! (the raw classes and both rollups), the control log and the quarantine, bytes per row; then
//! the projection: each table's rows per day at the newest registry version's declared rates,
//! times its horizon (the flags `sentinel run` and `sentinel retention` take), times its bytes
//! per row — measured here when the table holds enough rows to say, else the registry's
//! declared `row_bytes` (raw) or [`ROLLUP_ROW_BYTES_ESTIMATE`] (rollups). Reads only; connect
//! as the read-only role.
//!
//! Owns: the projection arithmetic ([`project`]) and the report's text and JSON. The sizes come
//! from `sentinel_store_pg::PgStore::storage_report`.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use sentinel_core::registry::Descriptor;
use sentinel_core::registry::canonical;
use sentinel_core::retention::RetentionConfig;
use sentinel_ports::{RetainedTable, RollupGrain, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig, StorageReport, TableSize};

use crate::args::RetentionArgs;

/// A table's bytes per row are its own once it holds at least this many rows; below, page and
/// index overhead of a nearly empty table would say nothing about a full one.
pub const MEASURED_ROWS_MIN: u64 = 10_000;
/// Bytes per rollup row (table and indexes) when the database holds too few to measure:
/// 231 measured over a day of 1,000 points' minutes (126 heap, 105 index: the primary key and
/// the bucket index), with point ids of 25–30 bytes (BENCHMARKS.md, "`sentinel storage`").
pub const ROLLUP_ROW_BYTES_ESTIMATE: f64 = 231.0;
const SECONDS_PER_DAY: f64 = 86_400.0;

/// Where a projection's bytes per row came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowBytesFrom {
    Measured,
    Declared,
    Estimate,
}

impl RowBytesFrom {
    fn as_str(self) -> &'static str {
        match self {
            RowBytesFrom::Measured => "measured",
            RowBytesFrom::Declared => "declared",
            RowBytesFrom::Estimate => "estimate",
        }
    }
}

/// One table's projected size over its horizon.
#[derive(Clone, Debug, PartialEq)]
pub struct Projection {
    pub table: RetainedTable,
    pub horizon_days: u32,
    pub rows_per_day: f64,
    pub bytes_per_row: f64,
    pub bytes_per_row_from: RowBytesFrom,
    pub bytes: f64,
}

/// Each retained table's rows and bytes summed over its partitions.
fn totals(report: &StorageReport) -> Vec<(RetainedTable, usize, TableSize)> {
    RetainedTable::ALL
        .into_iter()
        .map(|table| {
            let mut size = TableSize {
                rows_exact: true,
                ..TableSize::default()
            };
            let mut partitions = 0;
            for p in report.partitions.iter().filter(|p| p.partition.table == table) {
                size.add(&p.size);
                partitions += 1;
            }
            (table, partitions, size)
        })
        .collect()
}

fn bytes_per_row(size: &TableSize) -> Option<f64> {
    (size.rows > 0).then(|| size.bytes() as f64 / size.rows as f64)
}

/// The projected size of each retained table over its horizon in `config`, at the declared
/// rates of `descriptors`, with the bytes per row `measured` holds when it holds at least
/// [`MEASURED_ROWS_MIN`] rows. A rollup has one row per point per bucket the point reports
/// in: a point slower than a bucket fills only some.
pub fn project(
    descriptors: &[Descriptor],
    config: &RetentionConfig,
    measured: &[(RetainedTable, usize, TableSize)],
) -> Vec<Projection> {
    RetainedTable::ALL
        .into_iter()
        .map(|table| {
            let (mut rows_per_day, mut declared_bytes_per_day) = (0.0, 0.0);
            for d in descriptors {
                let rate = d.manifest.peak_rate_hz;
                let rate = if rate.is_finite() && rate > 0.0 { rate } else { 0.0 };
                let rows = match table {
                    RetainedTable::Raw(class) if class == d.retention => rate * SECONDS_PER_DAY,
                    RetainedTable::Raw(_) => 0.0,
                    RetainedTable::Rollup(RollupGrain::Minute) => (rate * SECONDS_PER_DAY).min(1_440.0),
                    RetainedTable::Rollup(RollupGrain::Hour) => (rate * SECONDS_PER_DAY).min(24.0),
                };
                rows_per_day += rows;
                declared_bytes_per_day += rows * f64::from(d.manifest.row_bytes);
            }
            let size = measured
                .iter()
                .find(|(t, _, _)| *t == table)
                .map(|(_, _, size)| *size)
                .unwrap_or_default();
            let (bytes_per_row, bytes_per_row_from) = match bytes_per_row(&size) {
                Some(b) if size.rows >= MEASURED_ROWS_MIN => (b, RowBytesFrom::Measured),
                _ => match table {
                    RetainedTable::Raw(_) if rows_per_day > 0.0 => {
                        (declared_bytes_per_day / rows_per_day, RowBytesFrom::Declared)
                    }
                    // Nothing declared in the class: nothing to size.
                    RetainedTable::Raw(_) => (0.0, RowBytesFrom::Declared),
                    RetainedTable::Rollup(_) => (ROLLUP_ROW_BYTES_ESTIMATE, RowBytesFrom::Estimate),
                },
            };
            let horizon_days = horizon(config, table);
            Projection {
                table,
                horizon_days,
                rows_per_day,
                bytes_per_row,
                bytes_per_row_from,
                bytes: rows_per_day * f64::from(horizon_days) * bytes_per_row,
            }
        })
        .collect()
}

fn horizon(config: &RetentionConfig, table: RetainedTable) -> u32 {
    match table {
        RetainedTable::Raw(class) => config.raw_days[class.index()],
        RetainedTable::Rollup(RollupGrain::Minute) => config.rollup_1m_days,
        RetainedTable::Rollup(RollupGrain::Hour) => config.rollup_1h_days,
    }
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

fn progress_bar(json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let style =
        ProgressStyle::with_template("storage {bar:40} {pos}/{len} tables and partitions ({elapsed})")
            .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar
}

fn size_json(size: &TableSize) -> serde_json::Value {
    serde_json::json!({
        "rows": size.rows,
        "rows_exact": size.rows_exact,
        "heap_bytes": size.heap_bytes,
        "index_bytes": size.index_bytes,
        "bytes": size.bytes(),
        "bytes_per_row": bytes_per_row(size),
    })
}

fn table_name(table: RetainedTable) -> String {
    match table {
        RetainedTable::Raw(class) => format!("raw_{}", class.as_str()),
        RetainedTable::Rollup(grain) => format!("rollup_{}", grain.as_str()),
    }
}

pub async fn run(
    database_url: &str,
    horizons: &RetentionArgs,
    exact: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let config = horizons.config()?;
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    let bar = progress_bar(json);
    let report = store
        .storage_report(exact, |done, total| {
            bar.set_length(total as u64);
            bar.set_position(done as u64);
        })
        .await?;
    bar.finish_and_clear();
    let registry = store.load_registry(None).await?;
    let descriptors = match &registry {
        Some(stored) => stored
            .descriptors
            .iter()
            .map(|(id, text)| {
                canonical::parse_stored(text)
                    .with_context(|| format!("point {id} in registry version {}", stored.version))
            })
            .collect::<anyhow::Result<Vec<_>>>()?,
        None => Vec::new(),
    };
    let totals = totals(&report);
    let projections = project(&descriptors, &config, &totals);
    let observations: TableSize = totals.iter().filter(|(t, _, _)| t.class().is_some()).fold(
        TableSize {
            rows_exact: true,
            ..TableSize::default()
        },
        |mut sum, (_, _, size)| {
            sum.add(size);
            sum
        },
    );
    let version = registry.as_ref().map(|r| r.version);
    let out = if json {
        json_text(&report, &totals, &observations, &projections, version)
    } else {
        text(&report, &totals, &observations, &projections, version)
    };
    write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

/// Writes the report; a reader that stopped early (`| head`) is not an error.
fn write_stdout(out: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing the report"),
        _ => Ok(()),
    }
}

fn json_text(
    report: &StorageReport,
    totals: &[(RetainedTable, usize, TableSize)],
    observations: &TableSize,
    projections: &[Projection],
    version: Option<i32>,
) -> String {
    let partitions: Vec<_> = report
        .partitions
        .iter()
        .map(|p| {
            let mut v = size_json(&p.size);
            v["table"] = table_name(p.partition.table).into();
            v["from"] = p.partition.from.to_rfc3339().into();
            v["to"] = p.partition.to.to_rfc3339().into();
            v
        })
        .collect();
    let tables: Vec<_> = totals
        .iter()
        .map(|(table, count, size)| {
            let mut v = size_json(size);
            v["table"] = table_name(*table).into();
            v["partitions"] = (*count).into();
            v
        })
        .collect();
    let projected: Vec<_> = projections
        .iter()
        .map(|p| {
            serde_json::json!({
                "table": table_name(p.table),
                "horizon_days": p.horizon_days,
                "rows_per_day": p.rows_per_day,
                "bytes_per_row": p.bytes_per_row,
                "bytes_per_row_from": p.bytes_per_row_from.as_str(),
                "bytes": p.bytes,
            })
        })
        .collect();
    format!(
        "{}\n",
        serde_json::json!({
            "tables": tables,
            "partitions": partitions,
            "partitions_left_out": report.partitions_left_out,
            "observations": size_json(observations),
            "control_event": size_json(&report.control_log),
            "quarantine": size_json(&report.quarantine),
            "projection": {
                "registry_version": version,
                "tables": projected,
                "bytes": projections.iter().map(|p| p.bytes).sum::<f64>(),
            },
        })
    )
}

fn row_text(name: &str, partitions: Option<usize>, size: &TableSize) -> String {
    let rows = if size.rows_exact {
        size.rows.to_string()
    } else {
        format!("~{}", size.rows)
    };
    format!(
        "{name:<17} {:>10} {rows:>14} {:>10} {:>10} {:>9}",
        partitions.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        human_bytes(size.heap_bytes as f64),
        human_bytes(size.index_bytes as f64),
        bytes_per_row(size).map_or_else(|| "-".to_owned(), |b| format!("{b:.0}")),
    )
}

fn text(
    report: &StorageReport,
    totals: &[(RetainedTable, usize, TableSize)],
    observations: &TableSize,
    projections: &[Projection],
    version: Option<i32>,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<17} {:>10} {:>14} {:>10} {:>10} {:>9}",
        "table", "partitions", "rows", "heap", "indexes", "bytes/row"
    );
    for (table, count, size) in totals {
        let _ = writeln!(out, "{}", row_text(&table.label(), Some(*count), size));
    }
    let _ = writeln!(out, "{}", row_text("control_event", None, &report.control_log));
    let _ = writeln!(out, "{}", row_text("quarantine", None, &report.quarantine));
    let _ = writeln!(out, "{}", row_text("observations", None, observations));
    if report.partitions_left_out > 0 {
        let _ = writeln!(
            out,
            "({} partitions beyond the first {} are left out)",
            report.partitions_left_out,
            sentinel_store_pg::STORAGE_PARTITIONS_MAX
        );
    }
    let _ = writeln!(out);
    let _ = match version {
        Some(v) => writeln!(
            out,
            "projected at registry version {v}'s declared rates over the configured horizons:"
        ),
        None => writeln!(
            out,
            "no registry version is stored: nothing is declared to project"
        ),
    };
    let _ = writeln!(
        out,
        "{:<17} {:>6} {:>14} {:>20} {:>10}",
        "table", "days", "rows/day", "bytes/row", "size"
    );
    for p in projections {
        let _ = writeln!(
            out,
            "{:<17} {:>6} {:>14.0} {:>20} {:>10}",
            p.table.label(),
            p.horizon_days,
            p.rows_per_day,
            format!("{:.0} ({})", p.bytes_per_row, p.bytes_per_row_from.as_str()),
            human_bytes(p.bytes)
        );
    }
    let _ = writeln!(
        out,
        "{:<17} {:>6} {:>14} {:>20} {:>10}",
        "total",
        "",
        "",
        "",
        human_bytes(projections.iter().map(|p| p.bytes).sum())
    );
    if totals.iter().any(|(_, _, s)| !s.rows_exact) || !report.control_log.rows_exact {
        let _ = writeln!(
            out,
            "rows marked ~ are PostgreSQL's estimates; --exact counts them"
        );
    }
    out
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
        let measured = [(RetainedTable::Raw(RetentionClass::Measurement), 1, measured_size)];
        let p = project(&points, &config, &measured);
        let m = &p[0];
        assert_eq!(m.rows_per_day, 1.5 * 86_400.0);
        assert_eq!(
            (m.bytes_per_row, m.bytes_per_row_from),
            (120.0, RowBytesFrom::Measured)
        );
        assert_eq!(m.bytes, 1.5 * 86_400.0 * 30.0 * 120.0);
        // State: too few rows measured, so the declared row size.
        let s = &p[1];
        assert_eq!(
            (s.bytes_per_row, s.bytes_per_row_from),
            (80.0, RowBytesFrom::Declared)
        );
        assert!((s.rows_per_day - 86.4).abs() < 1e-9);
        assert_eq!(s.horizon_days, 90);
        // Rollups: one row per point per minute it reports in, at most 1,440 a day.
        let minute = &p[3];
        assert!((minute.rows_per_day - (1_440.0 + 1_440.0 + 86.4)).abs() < 1e-9);
        assert_eq!(minute.bytes_per_row_from, RowBytesFrom::Estimate);
        let hour = &p[4];
        assert!((hour.rows_per_day - (24.0 + 24.0 + 24.0)).abs() < 1e-9);
        assert_eq!(hour.horizon_days, 730);
    }

    #[test]
    fn bytes_read_in_powers_of_a_thousand() {
        assert_eq!(human_bytes(999.0), "999 B");
        assert_eq!(human_bytes(1_500.0), "1.5 kB");
        assert_eq!(human_bytes(40e9), "40.0 GB");
        assert_eq!(human_bytes(2.5e12), "2.5 TB");
    }
}
