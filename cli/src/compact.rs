//! `sentinel compact [--from DAY] [--through DAY] [--class CLASS]… [--compact-after-days N]
//! [--json]` (issue 24 items 1 and 4; core runtime spec, "compression from day seven"):
//! compacts every closed day of the chosen class tables in `[--from, --through]` that is old
//! enough and out of the stream's reach, oldest first, one fenced transaction and one
//! `compaction` control event per day (`Store::compact_day`). A write, so it runs only under
//! the single-writer lock the command takes itself (exit 10, naming the holder, while a core
//! runs). The stream's oldest message is read from the bus first (its age, through the durable
//! consumer's lag): a day that may still be redelivered is refused, and the command stops at
//! the first refusal of that kind (every later day is refused too). Days already compacted or
//! empty write nothing. Each day's minute rollups are compacted with it (migration 0016, their
//! own `compaction` event), also a day whose raw rows retention already dropped.
//!
//! `--rollups-only` compacts only the days' minute rollups (`Store::compact_rollup_day`), at
//! their own age (`--compact-after-days`, 1 by default then), without reading the stream: a
//! recompute of a compacted minute writes a hot row that wins over it. `--json` names each
//! day's `rollup_1m` compaction.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Micros, RetentionClass};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{
    COMPACT_AFTER_DAYS_MAX, Compaction, CompactionRequest, Lease, RollupCompaction, RollupCompactionRequest,
    Store, StoreError, day_name,
};
use sentinel_store_pg::{PgStore, PgStoreConfig};

use crate::args::NatsArgs;

/// Who the command's compactions are recorded as.
const PRINCIPAL: &str = "operator:sentinel-compact";
/// The most days one run walks (each is one call per class; an empty day costs a probe).
pub const COMPACT_DAYS_MAX: i64 = 400;

/// The days and classes to compact.
pub struct CompactArgs {
    /// The first day (`YYYY-MM-DD`); `None`: `COMPACT_DAYS_MAX` days before `--through`.
    pub from: Option<String>,
    /// The last day; `None`: the newest day old enough at `--compact-after-days`.
    pub through: Option<String>,
    /// Empty: every class.
    pub classes: Vec<RetentionClass>,
    pub compact_after_days: u32,
    /// Only the days' minute rollups (`Store::compact_rollup_day`); `classes` is empty.
    pub rollups_only: bool,
    pub json: bool,
}

fn parse_day(text: &str) -> anyhow::Result<Micros> {
    Micros::parse_rfc3339(&format!("{text}T00:00:00Z"))
        .with_context(|| format!("{text:?} is not a day (YYYY-MM-DD)"))
}

/// The stream's oldest message's `ingested_at`, a millisecond early (the bus reports its age in
/// whole milliseconds), so a refusal is never missed; `None` when the stream is empty.
pub(crate) async fn stream_oldest(nats: &NatsArgs, now: Micros) -> anyhow::Result<Option<Micros>> {
    let bus = NatsBus::connect(NatsBusConfig {
        url: nats.nats_url.clone(),
        credentials: nats.credentials()?,
        ..NatsBusConfig::default()
    })
    .await
    .context("connecting to NATS to read the stream's oldest message")?;
    let lag = sentinel_ports::Bus::lag(&bus)
        .await
        .context("reading the stream's state")?;
    if lag.stream_messages == 0 {
        return Ok(None);
    }
    let Some(age_ms) = lag.oldest_unacked_age_ms else {
        bail!(
            "the stream holds {} message(s) but reports no oldest",
            lag.stream_messages
        );
    };
    let age_us = i64::try_from(age_ms.saturating_add(1)).unwrap_or(i64::MAX / 2) * 1_000;
    Ok(Some(Micros(now.0.saturating_sub(age_us))))
}

fn compaction_json(class: RetentionClass, day: Micros, c: &Compaction) -> serde_json::Value {
    serde_json::json!({
        "class": class.as_str(),
        "day": day_name(day),
        "rows": c.rows,
        "chunks": c.chunks,
        "bytes_before": c.bytes_before,
        "bytes_after": c.bytes_after,
        "seq": c.seq,
        "rollup_1m": {
            "buckets": c.rollups.buckets,
            "chunks": c.rollups.chunks,
            "bytes_before": c.rollups.bytes_before,
            "bytes_after": c.rollups.bytes_after,
            "seq": c.rollups.seq,
        },
    })
}

fn rollup_json(day: Micros, r: &RollupCompaction) -> serde_json::Value {
    serde_json::json!({
        "table": "rollup_1m",
        "day": day_name(day),
        "buckets": r.buckets,
        "chunks": r.chunks,
        "bytes_before": r.bytes_before,
        "bytes_after": r.bytes_after,
        "seq": r.seq,
    })
}

/// One day's answer: a class's rows (with the day's rollups), or the rollups alone.
enum Done {
    Rows(RetentionClass, Compaction),
    Rollups(RollupCompaction),
}

impl Done {
    fn wrote(&self) -> bool {
        match self {
            Done::Rows(_, c) => c.rows > 0 || c.rollups.buckets > 0,
            Done::Rollups(r) => r.buckets > 0,
        }
    }
}

fn print_rollups(day: Micros, r: &RollupCompaction) {
    println!(
        "  {:<11} {}  {} buckets → {} chunks, {} → {} bytes  (control event {})",
        "rollup_1m",
        day_name(day),
        r.buckets,
        r.chunks,
        r.bytes_before,
        r.bytes_after,
        r.seq.unwrap_or_default()
    );
}

pub async fn run(database_url: &str, nats: &NatsArgs, args: &CompactArgs) -> anyhow::Result<ExitCode> {
    if !(1..=COMPACT_AFTER_DAYS_MAX).contains(&args.compact_after_days) {
        bail!(
            "--compact-after-days must be within 1..={COMPACT_AFTER_DAYS_MAX}, got {}",
            args.compact_after_days
        );
    }
    let now = SystemClock.now();
    let newest_due = Micros((now.day() - 1 - i64::from(args.compact_after_days)) * US_PER_DAY);
    let through = match &args.through {
        Some(text) => parse_day(text)?,
        None => newest_due,
    };
    let from = match &args.from {
        Some(text) => parse_day(text)?,
        None => Micros(through.0 - (COMPACT_DAYS_MAX - 1) * US_PER_DAY),
    };
    if from > through || (through.0 - from.0) / US_PER_DAY >= COMPACT_DAYS_MAX {
        bail!("--from must be at most {COMPACT_DAYS_MAX} days before --through, and not after it");
    }
    let classes: Vec<RetentionClass> = if args.classes.is_empty() {
        RetentionClass::ALL.to_vec()
    } else {
        args.classes.clone()
    };
    // The minute rollups alone need no stream rule: the bus is not asked.
    let oldest = if args.rollups_only {
        None
    } else {
        stream_oldest(nats, now).await?
    };
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    let lease = match store.acquire().await {
        Ok(lease) => lease,
        Err(StoreError::LockHeld) => {
            return crate::args::lock_held(&store, "compacting nothing").await;
        }
        Err(e) => return Err(e.into()),
    };
    let started = Instant::now();
    let days = (through.0 - from.0) / US_PER_DAY + 1;
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(days as u64);
        bar.set_message("compacting days");
        bar
    });
    let mut done = Vec::new();
    let mut stopped = None;
    'days: for i in 0..days {
        let day = Micros(from.0 + i * US_PER_DAY);
        if args.rollups_only {
            let request = RollupCompactionRequest {
                day,
                now,
                compact_after_days: args.compact_after_days,
                principal: PRINCIPAL,
            };
            match store.compact_rollup_day(lease.epoch(), request).await {
                Ok(r) => done.push((day, Done::Rollups(r))),
                Err(StoreError::Other(refusal)) if refusal.starts_with("compaction refused") => {
                    stopped = Some(refusal);
                    break 'days;
                }
                Err(e) => return Err(e.into()),
            }
        }
        for &class in classes.iter().filter(|_| !args.rollups_only) {
            let request = CompactionRequest {
                class,
                day,
                now,
                compact_after_days: args.compact_after_days,
                stream_oldest: oldest,
                principal: PRINCIPAL,
            };
            match store.compact_day(lease.epoch(), request).await {
                Ok(c) => done.push((day, Done::Rows(class, c))),
                // Every later day is refused the same way: stop, and say why.
                Err(e @ StoreError::StreamHoldsDay { .. }) => {
                    stopped = Some(e.to_string());
                    break 'days;
                }
                Err(StoreError::Other(refusal)) if refusal.starts_with("compaction refused") => {
                    stopped = Some(refusal);
                    break 'days;
                }
                Err(e) => return Err(e.into()),
            }
        }
        if let Some(bar) = &bar {
            bar.inc(1);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let duration_us = started.elapsed().as_micros() as u64;
    crate::db::finish_under_lock(&store, lease, "compaction", duration_us).await?;
    let compacted: Vec<_> = done.iter().filter(|(_, d)| d.wrote()).collect();
    if args.json {
        let list: Vec<_> = compacted
            .iter()
            .map(|(day, d)| match d {
                Done::Rows(class, c) => compaction_json(*class, *day, c),
                Done::Rollups(r) => rollup_json(*day, r),
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "now": now.to_rfc3339(),
                "from": day_name(from),
                "through": day_name(through),
                "rollups_only": args.rollups_only,
                "stream_oldest": oldest.map(Micros::to_rfc3339),
                "compacted": list,
                "stopped": stopped,
                "duration_us": duration_us,
            })
        );
    } else {
        println!(
            "compacted {} day(s) of [{}, {}] in {:.3} s",
            compacted.len(),
            day_name(from),
            day_name(through),
            duration_us as f64 / 1e6
        );
        for (day, d) in &compacted {
            match d {
                Done::Rows(class, c) => {
                    println!(
                        "  {:<11} {}  {} rows → {} chunks, {} → {} bytes  (control event {})",
                        class.as_str(),
                        day_name(*day),
                        c.rows,
                        c.chunks,
                        c.bytes_before,
                        c.bytes_after,
                        c.seq.unwrap_or_default()
                    );
                    if c.rollups.buckets > 0 {
                        print_rollups(*day, &c.rollups);
                    }
                }
                Done::Rollups(r) => print_rollups(*day, r),
            }
        }
        if let Some(why) = &stopped {
            println!("stopped: {why}");
        }
    }
    Ok(ExitCode::SUCCESS)
}
