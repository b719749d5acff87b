//! `sentinel db pack [--after-days N] [--dry-run] [--json]` (issue 24 item 1, disk; migration
//! 0019; BENCHMARKS.md "Packing a closed hot day"): rebuilds the indexes of every hot daily
//! partition of the class tables that is due — its day ended at least `--after-days` days ago
//! (default 1), the stream's oldest message was ingested after the day ended (read from the bus
//! as `sentinel compact` reads it; an empty stream holds no day), it is not compacted and the
//! running core does not compact it within a day (`--compact-after-days`, 7, as `sentinel run`
//! takes it; `--no-compaction`), it holds rows, and it was not packed since its last write — with `REINDEX TABLE CONCURRENTLY`, one
//! at a time, oldest first, each recorded in `hot_day_pack`. A day filled in ingest order goes
//! from about 184 to about 174 bytes a row (235 to 195 before migrations 0020 and 0021); no row changes and no read answers differently.
//!
//! Run as the schema owner (PostgreSQL 15 lets only the owner REINDEX, and only outside a
//! transaction and a function); another role is refused with exit [`EXIT_NOT_OWNER`] before
//! anything is read from the bus. It takes no single-writer lock: it runs beside the core, whose
//! commits and reads the rebuild does not block (SHARE UPDATE EXCLUSIVE on the partition). A
//! `--dry-run` only reads, as any role that may read the catalogue and `hot_day_pack`.
//!
//! Owns: which partitions are due and why the others are not, the progress bar and the report.
//! The rebuild and its record: `sentinel_store_pg::pack`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Micros, RetentionClass};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::day_name;
use sentinel_store_pg::pack::{HotPartition, PackRecord};
use sentinel_store_pg::{PgStore, PgStoreConfig};

use crate::args::NatsArgs;

/// Exit code when the connected role does not own the class tables (nothing done).
pub const EXIT_NOT_OWNER: u8 = 14;
/// The most days `--after-days` may be.
pub const PACK_AFTER_DAYS_MAX: u32 = 400;
/// The default age a closed day is packed at.
pub const PACK_AFTER_DAYS_DEFAULT: u32 = 1;

pub struct PackArgs {
    pub after_days: u32,
    pub dry_run: bool,
    /// The running core's compaction age (`None`: no compaction).
    pub compact_after_days: Option<u32>,
    /// The instant to decide at (RFC 3339), instead of the clock's: for tests.
    pub now: Option<String>,
    pub json: bool,
}

/// Why a partition is not packed now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// Its day ended less than `--after-days` days ago (or has not ended).
    Young,
    /// Its day is compacted (migration 0015).
    Compacted,
    /// It holds no rows.
    Empty,
    /// Its day is compacted within a day (`--compact-after-days`): packing it is moot, and the
    /// compaction's TRUNCATE would wait for the rebuild (and every read of the day behind it).
    Compaction,
    /// Packed, and not written to since.
    Packed,
    /// The stream may still hold a message ingested on or before its day's end.
    Stream,
}

impl Skip {
    pub const ALL: [Skip; 6] = [
        Skip::Young,
        Skip::Compacted,
        Skip::Empty,
        Skip::Compaction,
        Skip::Packed,
        Skip::Stream,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Skip::Young => "young",
            Skip::Stream => "stream",
            Skip::Compacted => "compacted",
            Skip::Compaction => "compaction",
            Skip::Empty => "empty",
            Skip::Packed => "packed",
        }
    }
}

/// Whether `p` is due at `now` (`None`) or why not. The first reason in [`Skip::ALL`]'s order
/// wins. `compact_after_days`: the running core's compaction age (`None`: it compacts nothing).
pub fn due(
    p: &HotPartition,
    now: Micros,
    after_days: u32,
    compact_after_days: Option<u32>,
    stream_oldest: Option<Micros>,
) -> Option<Skip> {
    let day_end = Micros(p.day.0 + US_PER_DAY);
    if day_end.0 + i64::from(after_days) * US_PER_DAY > now.0 {
        return Some(Skip::Young);
    }
    if p.compacted {
        return Some(Skip::Compacted);
    }
    if p.empty {
        return Some(Skip::Empty);
    }
    // The core compacts a day once it ended `n` days ago: leave the day it takes within a day.
    if compact_after_days.is_some_and(|n| day_end.0 + i64::from(n.saturating_sub(1)) * US_PER_DAY <= now.0) {
        return Some(Skip::Compaction);
    }
    if p.packed_since_last_write() {
        return Some(Skip::Packed);
    }
    if stream_oldest.is_some_and(|oldest| oldest <= day_end) {
        return Some(Skip::Stream);
    }
    None
}

fn partition_json(class: RetentionClass, day: Micros, r: &PackRecord) -> serde_json::Value {
    serde_json::json!({
        "class": class.as_str(),
        "day": day_name(day),
        "partition": sentinel_store_pg::pack::partition_name(class, day),
        "rows": r.rows,
        "heap_bytes": r.heap_bytes,
        "index_bytes_before": r.index_bytes_before,
        "index_bytes_after": r.index_bytes_after,
        "bytes_before": r.heap_bytes + r.index_bytes_before,
        "bytes_after": r.heap_bytes + r.index_bytes_after,
        "seconds": r.duration_ms as f64 / 1e3,
    })
}

pub async fn run(database_url: &str, nats: &NatsArgs, args: &PackArgs) -> anyhow::Result<ExitCode> {
    if args.after_days > PACK_AFTER_DAYS_MAX {
        bail!(
            "--after-days must be within 0..={PACK_AFTER_DAYS_MAX}, got {}",
            args.after_days
        );
    }
    // A day of the spec's rate rebuilds for minutes: no statement timeout on this session.
    let store = PgStore::connect(
        database_url,
        PgStoreConfig {
            statement_timeout_ms: 0,
            ..PgStoreConfig::default()
        },
    )
    .await
    .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    if !args.dry_run {
        let owner = store.pack_owner().await?;
        if !owner.is_owner {
            eprintln!(
                "sentinel: db pack runs as the schema owner: role {} does not own the class tables \
                 (their owner is {}); connect as the role that runs `sentinel migrate`; packed nothing",
                owner.current_user, owner.owner
            );
            return Ok(ExitCode::from(EXIT_NOT_OWNER));
        }
    }
    let now = match &args.now {
        Some(text) => Micros::parse_rfc3339(text)
            .with_context(|| format!("--now {text:?} is not an RFC 3339 instant"))?,
        None => SystemClock.now(),
    };
    let oldest = crate::compact::stream_oldest(nats, now).await?;
    let forgotten = if args.dry_run {
        0
    } else {
        store.pack_forget_dropped().await?
    };
    let partitions = store.pack_candidates().await?;
    let mut skipped = [0usize; Skip::ALL.len()];
    let mut due_now: Vec<&HotPartition> = Vec::new();
    for p in &partitions {
        match due(p, now, args.after_days, args.compact_after_days, oldest) {
            Some(skip) => skipped[Skip::ALL.iter().position(|s| *s == skip).unwrap_or(0)] += 1,
            None => due_now.push(p),
        }
    }
    debug_assert!(due_now.windows(2).all(|w| w[0].day <= w[1].day), "oldest first");
    let started = Instant::now();
    let mut packed = Vec::new();
    if !args.dry_run {
        let bar = (!args.json && std::io::stderr().is_terminal()).then(|| {
            let bar = indicatif::ProgressBar::new(due_now.len() as u64);
            bar.set_message("packing closed days");
            bar
        });
        for p in &due_now {
            if let Some(bar) = &bar {
                bar.set_message(p.name());
            }
            let record = store
                .pack_partition(p.class, p.day)
                .await
                .with_context(|| format!("packing {}", p.name()))?;
            tracing::info!(partition = %p.name(), rows = record.rows, index_bytes_before = record.index_bytes_before,
                index_bytes_after = record.index_bytes_after, duration_ms = record.duration_ms, "packed a closed day");
            packed.push((p.class, p.day, record));
            if let Some(bar) = &bar {
                bar.inc(1);
            }
        }
        if let Some(bar) = bar {
            bar.finish_and_clear();
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let before: u64 = packed
        .iter()
        .map(|(_, _, r)| r.heap_bytes + r.index_bytes_before)
        .sum();
    let after: u64 = packed
        .iter()
        .map(|(_, _, r)| r.heap_bytes + r.index_bytes_after)
        .sum();
    let rows: u64 = packed.iter().map(|(_, _, r)| r.rows).sum();
    if args.json {
        let due_list: Vec<_> = due_now
            .iter()
            .map(|p| {
                serde_json::json!({
                    "class": p.class.as_str(),
                    "day": day_name(p.day),
                    "partition": p.name(),
                    "heap_bytes": p.heap_bytes,
                    "index_bytes": p.index_bytes,
                })
            })
            .collect();
        let skipped_json: serde_json::Map<String, serde_json::Value> = Skip::ALL
            .iter()
            .zip(skipped)
            .map(|(s, n)| (s.as_str().to_owned(), n.into()))
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "now": now.to_rfc3339(),
                "after_days": args.after_days,
                "compact_after_days": args.compact_after_days,
                "stream_oldest": oldest.map(Micros::to_rfc3339),
                "dry_run": args.dry_run,
                "due": due_list,
                "packed": packed.iter().map(|(c, d, r)| partition_json(*c, *d, r)).collect::<Vec<_>>(),
                "skipped": skipped_json,
                "forgotten": forgotten,
                "partitions": packed.len(),
                "rows": rows,
                "bytes_before": before,
                "bytes_after": after,
                "seconds": seconds,
            })
        );
    } else if args.dry_run {
        println!(
            "{} partition(s) due for packing (dry run: nothing rebuilt)",
            due_now.len()
        );
        for p in &due_now {
            println!(
                "  {:<11} {}  heap {} B, indexes {} B",
                p.class.as_str(),
                day_name(p.day),
                p.heap_bytes,
                p.index_bytes
            );
        }
    } else {
        println!(
            "packed {} partition(s), {} rows, {} → {} bytes in {:.1} s",
            packed.len(),
            rows,
            before,
            after,
            seconds
        );
        for (class, day, r) in &packed {
            println!(
                "  {:<11} {}  {} rows, indexes {} → {} bytes ({:.1} → {:.1} B a row), {:.1} s",
                class.as_str(),
                day_name(*day),
                r.rows,
                r.index_bytes_before,
                r.index_bytes_after,
                per_row(r.heap_bytes + r.index_bytes_before, r.rows),
                per_row(r.heap_bytes + r.index_bytes_after, r.rows),
                r.duration_ms as f64 / 1e3
            );
        }
    }
    if !args.json {
        let reasons: Vec<String> = Skip::ALL
            .iter()
            .zip(skipped)
            .filter(|(_, n)| *n > 0)
            .map(|(s, n)| format!("{n} {}", s.as_str()))
            .collect();
        if !reasons.is_empty() {
            println!("not due: {}", reasons.join(", "));
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn per_row(bytes: u64, rows: u64) -> f64 {
    if rows == 0 {
        0.0
    } else {
        bytes as f64 / rows as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Micros {
        Micros::parse_rfc3339(text).expect("instant")
    }

    fn partition(day: &str) -> HotPartition {
        HotPartition {
            class: RetentionClass::Measurement,
            day: at(&format!("{day}T00:00:00Z")),
            heap_bytes: 8_192,
            index_bytes: 16_384,
            writes: 10,
            compacted: false,
            packed: None,
            empty: false,
        }
    }

    #[test]
    fn a_day_is_due_once_old_enough_out_of_the_stream_uncompacted_populated_and_unpacked() {
        let now = at("2026-01-17T00:30:00Z");
        let p = partition("2026-01-15");
        // Ended at 01-16 00:00: one day old at 01-17 00:00, not a microsecond before.
        assert_eq!(due(&p, now, 1, None, None), None);
        assert_eq!(
            due(&p, at("2026-01-16T23:59:59.999999Z"), 1, None, None),
            Some(Skip::Young)
        );
        assert_eq!(due(&p, at("2026-01-17T00:00:00Z"), 1, None, None), None);
        assert_eq!(due(&p, now, 2, None, None), Some(Skip::Young));
        assert_eq!(due(&p, at("2026-01-16T00:00:00Z"), 0, None, None), None);
        // The stream's oldest message ingested at the day's end may still be redelivered.
        assert_eq!(
            due(&p, now, 1, None, Some(at("2026-01-16T00:00:00Z"))),
            Some(Skip::Stream)
        );
        assert_eq!(
            due(&p, now, 1, None, Some(at("2026-01-16T00:00:00.000001Z"))),
            None
        );
        // The core compacts at 7 days: the day it takes within a day is left to it. Day
        // 01-15 ended 01-16; compacted from 01-23, left alone from 01-22.
        assert_eq!(due(&p, at("2026-01-21T23:59:59Z"), 1, Some(7), None), None);
        assert_eq!(
            due(&p, at("2026-01-22T00:00:00Z"), 1, Some(7), None),
            Some(Skip::Compaction)
        );
        assert_eq!(
            due(&p, at("2026-03-01T00:00:00Z"), 1, None, None),
            None,
            "no compaction"
        );
        let compacted = HotPartition {
            compacted: true,
            ..p.clone()
        };
        assert_eq!(due(&compacted, now, 1, None, None), Some(Skip::Compacted));
        let empty = HotPartition {
            empty: true,
            ..p.clone()
        };
        assert_eq!(due(&empty, now, 1, None, None), Some(Skip::Empty));
        let record = PackRecord {
            packed_at: now,
            rows: 5,
            writes: 10,
            heap_bytes: 8_192,
            index_bytes_before: 16_384,
            index_bytes_after: 16_384,
            duration_ms: 3,
        };
        let packed = HotPartition {
            packed: Some(record.clone()),
            ..p.clone()
        };
        assert_eq!(due(&packed, now, 1, None, None), Some(Skip::Packed));
        // Written to since (a late row), or the statistics were reset: due again.
        let written = HotPartition {
            writes: 11,
            ..packed.clone()
        };
        assert_eq!(due(&written, now, 1, None, None), None);
        let reset = HotPartition { writes: 0, ..packed };
        assert_eq!(due(&reset, now, 1, None, None), None);
    }
}
