//! `sentinel storage [--exact] [--json]` (issue 24 item 6): what the database holds and what the
//! configured horizons will hold. Rows, heap and index bytes per retained table and partition
//! (the raw classes and both rollups), each class's compacted days (issue 24: `<class> packed`,
//! days, observations, bytes per observation) and the minute rollup's (`rollup_1m packed`,
//! days, buckets, bytes per bucket), each class's hot days whose indexes `sentinel db pack`
//! rebuilt (`<class> idx packed`; in JSON, `packed` and `packed_at` on each raw partition), the control log and the quarantine, bytes per row;
//! each hot partition's dedup key (in JSON, `dedup_key` on each raw partition and
//! `hot_partitions_without_dedup_key`, every one by name; in text, a line per partition
//! without one, after the tables); then
//! the projection: each table's rows per day at the newest registry version's declared rates,
//! times its horizon (the flags `sentinel run` and `sentinel retention` take), times its bytes
//! per row — measured here when the table holds enough rows to say, else the storage format's
//! measured cost (`crate::disk`, which `registry plan` shares). Reads only; connect as the
//! read-only role.
//!
//! Owns: the report's text and JSON. The sizes come from
//! `sentinel_store_pg::PgStore::storage_report`, the projection from `crate::disk`.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use indicatif::{ProgressBar, ProgressStyle};
use sentinel_core::RetentionClass;
use sentinel_core::registry::canonical;
use sentinel_ports::{RetainedTable, Store};
use sentinel_store_pg::pack::PackRecord;
use sentinel_store_pg::{PgStore, PgStoreConfig, StorageReport, TableSize};

use crate::args::RetentionArgs;
use crate::disk::{self, Projection, bytes_per_row, human_bytes, project, table_name};

/// Sizes summed per class: (class, days, rows and bytes), one day per item.
fn totals_by_class<'a>(
    days: impl Iterator<Item = (RetentionClass, &'a TableSize)> + Clone,
) -> Vec<(RetentionClass, usize, TableSize)> {
    RetentionClass::ALL
        .into_iter()
        .map(|class| {
            let mut size = TableSize {
                rows_exact: true,
                ..TableSize::default()
            };
            let mut count = 0;
            for (_, day) in days.clone().filter(|(c, _)| *c == class) {
                size.add(day);
                count += 1;
            }
            (class, count, size)
        })
        .collect()
}

/// Each class's compacted days summed: (class, days, rows and bytes).
fn compacted_totals(report: &StorageReport) -> Vec<(RetentionClass, usize, TableSize)> {
    totals_by_class(report.compacted.iter().map(|c| (c.class, &c.size)))
}

/// The pack records of the raw partitions this report holds, by (class, day).
type Packs = std::collections::BTreeMap<(usize, i64), PackRecord>;

/// The pack record of a raw partition, if `sentinel db pack` packed it.
fn pack_of(packs: &Packs, table: RetainedTable, from: sentinel_core::Micros) -> Option<&PackRecord> {
    let class = table.class()?;
    packs.get(&(class.index(), from.0))
}

/// Each class's hot partitions with packed indexes summed: (class, days, rows and bytes).
fn packed_totals(report: &StorageReport, packs: &Packs) -> Vec<(RetentionClass, usize, TableSize)> {
    totals_by_class(report.partitions.iter().filter_map(|p| {
        let class = p.partition.table.class()?; // a raw partition
        pack_of(packs, p.partition.table, p.partition.from).map(|_| (class, &p.size))
    }))
}

/// The minute rollup's compacted days summed: (days, buckets and bytes).
fn compacted_rollup_total(report: &StorageReport) -> (usize, TableSize) {
    let mut size = TableSize {
        rows_exact: true,
        ..TableSize::default()
    };
    for c in &report.compacted_rollups {
        size.add(&c.size);
    }
    (report.compacted_rollups.len(), size)
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

pub async fn run(
    database_url: &str,
    horizons: &RetentionArgs,
    ages: crate::disk::CompactAges,
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
    let packs: Packs = store
        .pack_records()
        .await?
        .into_iter()
        .map(|(class, day, record)| ((class.index(), day.0), record))
        .collect();
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
    let projections = project(&descriptors, &config, ages, &totals);
    let mut observations: TableSize = totals.iter().filter(|(t, _, _)| t.class().is_some()).fold(
        TableSize {
            rows_exact: true,
            ..TableSize::default()
        },
        |mut sum, (_, _, size)| {
            sum.add(size);
            sum
        },
    );
    for (_, _, size) in &compacted_totals(&report) {
        observations.add(size);
    }
    let version = registry.as_ref().map(|r| r.version);
    let out = if json {
        json_text(&report, &packs, &totals, &observations, &projections, version)
    } else {
        text(&report, &packs, &totals, &observations, &projections, version)
    };
    crate::write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

fn json_text(
    report: &StorageReport,
    packs: &Packs,
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
            if p.partition.table.class().is_some() {
                let pack = pack_of(packs, p.partition.table, p.partition.from);
                v["packed"] = pack.is_some().into();
                v["packed_at"] = pack.map(|r| r.packed_at.to_rfc3339()).into();
                v["dedup_key"] = p.dedup_key.into();
            }
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
    let compacted: Vec<_> = report
        .compacted
        .iter()
        .map(|c| {
            let mut v = size_json(&c.size);
            v["class"] = c.class.as_str().into();
            v["day"] = c.day.to_rfc3339().chars().take(10).collect::<String>().into();
            v["chunks"] = c.chunks.into();
            v
        })
        .collect();
    let compacted_tables: Vec<_> = compacted_totals(report)
        .iter()
        .map(|(class, days, size)| {
            let mut v = size_json(size);
            v["class"] = class.as_str().into();
            v["days"] = (*days).into();
            v
        })
        .collect();
    let compacted_rollups: Vec<_> = report
        .compacted_rollups
        .iter()
        .map(|c| {
            let mut v = size_json(&c.size);
            v["table"] = "rollup_1m".into();
            v["day"] = c.day.to_rfc3339().chars().take(10).collect::<String>().into();
            v["chunks"] = c.chunks.into();
            v
        })
        .collect();
    let (rollup_days, rollup_size) = compacted_rollup_total(report);
    let mut compacted_rollup_table = size_json(&rollup_size);
    compacted_rollup_table["table"] = "rollup_1m".into();
    compacted_rollup_table["days"] = rollup_days.into();
    let mut projection = disk::json(projections);
    projection["registry_version"] = version.into();
    format!(
        "{}\n",
        serde_json::json!({
            "tables": tables,
            "partitions": partitions,
            "partitions_left_out": report.partitions_left_out,
            "hot_partitions_without_dedup_key": report.hot_partitions_without_key,
            "compacted": compacted,
            "compacted_tables": compacted_tables,
            "compacted_rollups": compacted_rollups,
            "compacted_rollup_table": compacted_rollup_table,
            "observations": size_json(observations),
            "control_event": size_json(&report.control_log),
            "quarantine": size_json(&report.quarantine),
            "projection": projection,
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
        "{name:<22} {:>10} {rows:>14} {:>10} {:>10} {:>9}",
        partitions.map_or_else(|| "-".to_owned(), |n| n.to_string()),
        human_bytes(size.heap_bytes as f64),
        human_bytes(size.index_bytes as f64),
        bytes_per_row(size).map_or_else(|| "-".to_owned(), |b| format!("{b:.0}")),
    )
}

fn text(
    report: &StorageReport,
    packs: &Packs,
    totals: &[(RetainedTable, usize, TableSize)],
    observations: &TableSize,
    projections: &[Projection],
    version: Option<i32>,
) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<22} {:>10} {:>14} {:>10} {:>10} {:>9}",
        "table", "partitions", "rows", "heap", "indexes", "bytes/row"
    );
    for (table, count, size) in totals {
        let _ = writeln!(out, "{}", row_text(&table.label(), Some(*count), size));
    }
    for (class, days, size) in packed_totals(report, packs) {
        if days > 0 {
            let name = format!("{} idx packed", class.as_str());
            let _ = writeln!(out, "{}", row_text(&name, Some(days), &size));
        }
    }
    for (class, days, size) in compacted_totals(report) {
        if days > 0 {
            let name = format!("{} packed", class.as_str());
            let _ = writeln!(out, "{}", row_text(&name, Some(days), &size));
        }
    }
    let (rollup_days, rollup_size) = compacted_rollup_total(report);
    if rollup_days > 0 {
        let _ = writeln!(
            out,
            "{}",
            row_text("rollup_1m packed", Some(rollup_days), &rollup_size)
        );
    }
    let _ = writeln!(out, "{}", row_text("control_event", None, &report.control_log));
    let _ = writeln!(out, "{}", row_text("quarantine", None, &report.quarantine));
    let _ = writeln!(out, "{}", row_text("observations", None, observations));
    for part in &report.hot_partitions_without_key {
        let _ = writeln!(
            out,
            "NO DEDUP KEY: hot partition {part} has no unique (instance_key, source_epoch, source_seq) \
             index, so a redelivered message would be stored twice there; the next `sentinel run` \
             or `sentinel migrate` makes it, or refuses to start if the partition holds duplicate keys"
        );
    }
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
    out.push_str(&disk::text(projections));
    if totals.iter().any(|(_, _, s)| !s.rows_exact) || !report.control_log.rows_exact {
        let _ = writeln!(
            out,
            "rows marked ~ are PostgreSQL's estimates; --exact counts them"
        );
    }
    out
}
