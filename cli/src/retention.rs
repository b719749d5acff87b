//! `sentinel retention [--dry-run] [--json]` (issue 9 item 2; ingest spec, "Retention and
//! rollups"): lists, or drops, every partition wholly before its table's horizon. The horizons
//! are the flags `sentinel run` takes (`args::RetentionArgs`), mapped into
//! `sentinel_core::retention::RetentionConfig`. A dry run only reads; a real one is a write, so it
//! runs only under the single-writer lock the command takes itself (exit 10, naming the holder,
//! while a core runs: the running core drops daily on its own). Each drop is its own fenced
//! transaction with a `retention_drop` control event; never a row DELETE.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::Context;
use sentinel_core::Micros;
use sentinel_core::retention::PARTITIONS_PER_RUN_MAX;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{EXPIRED_PARTITIONS_LIST_MAX, Lease, Partition, Store, StoreError};
use sentinel_store_pg::{PgStore, PgStoreConfig};

use crate::args::RetentionArgs;

/// Who the command's drops are recorded as.
const PRINCIPAL: &str = "operator:sentinel-retention";

fn partition_json(p: &Partition, seq: Option<i64>) -> serde_json::Value {
    serde_json::json!({
        "table": p.table.kind_str(),
        "class": p.table.class().map(|c| c.as_str()),
        "from": p.from.to_rfc3339(),
        "to": p.to.to_rfc3339(),
        "seq": seq,
    })
}

fn partition_line(p: &Partition) -> String {
    format!("{:<17} [{}, {})", p.table.label(), day(p.from), day(p.to))
}

fn day(at: Micros) -> String {
    at.to_rfc3339().chars().take(10).collect()
}

pub async fn run(
    database_url: &str,
    args: &RetentionArgs,
    dry_run: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    let now = SystemClock.now();
    let cutoffs = config.cutoffs(now);
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    if dry_run {
        let expired = store
            .expired_partitions(cutoffs, EXPIRED_PARTITIONS_LIST_MAX)
            .await?;
        if json {
            let list: Vec<_> = expired.iter().map(|p| partition_json(p, None)).collect();
            println!(
                "{}",
                serde_json::json!({ "dry_run": true, "now": now.to_rfc3339(), "would_drop": list })
            );
        } else if expired.is_empty() {
            println!("nothing is past its horizon");
        } else {
            println!("would drop {} partition(s):", expired.len());
            for p in &expired {
                println!("  {}", partition_line(p));
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let lease = match store.acquire().await {
        Ok(lease) => lease,
        Err(StoreError::LockHeld) => {
            return crate::args::lock_held(
                &store,
                "dropping nothing (the running core drops expired partitions daily itself)",
            )
            .await;
        }
        Err(e) => return Err(e.into()),
    };
    let started = Instant::now();
    let total = store
        .expired_partitions(cutoffs, EXPIRED_PARTITIONS_LIST_MAX)
        .await?
        .len();
    let bar = std::io::stderr().is_terminal().then(|| {
        let bar = indicatif::ProgressBar::new(total as u64);
        bar.set_message("dropping expired partitions");
        bar
    });
    let mut dropped = Vec::new();
    loop {
        let run = store
            .drop_expired(lease.epoch(), cutoffs, PARTITIONS_PER_RUN_MAX, PRINCIPAL, now)
            .await?;
        if let Some(bar) = &bar {
            bar.inc(run.dropped.len() as u64);
        }
        let more = run.more && !run.dropped.is_empty();
        dropped.extend(run.dropped);
        if !more {
            break;
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let duration_us = started.elapsed().as_micros() as u64;
    crate::db::finish_under_lock(&store, lease, "retention", duration_us).await?;
    if json {
        let list: Vec<_> = dropped
            .iter()
            .map(|d| partition_json(&d.partition, Some(d.seq)))
            .collect();
        println!(
            "{}",
            serde_json::json!({ "dry_run": false, "now": now.to_rfc3339(), "dropped": list, "duration_us": duration_us })
        );
    } else {
        println!(
            "dropped {} partition(s) in {:.3} s",
            dropped.len(),
            duration_us as f64 / 1e6
        );
        for d in &dropped {
            println!("  {}  (control event {})", partition_line(&d.partition), d.seq);
        }
    }
    Ok(ExitCode::SUCCESS)
}
