//! `sentinel rollup refresh --from T --to T [--json]`: recompute both rollups over a range on
//! demand (ingest spec, "Retention and rollups"; issue 9). A write, so it runs only under the
//! single-writer lock, taken by the command itself: never beside a running core (exit 10,
//! naming the holder, when one runs). The range is rounded outward to each rollup's buckets.

use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, bail};

use crate::args::parse_instant;
use sentinel_ports::{Lease, Store, StoreError};
use sentinel_store_pg::{PgStore, PgStoreConfig};

pub async fn refresh(database_url: &str, from: &str, to: &str, json: bool) -> anyhow::Result<ExitCode> {
    let (from, to) = (parse_instant(from)?, parse_instant(to)?);
    if from >= to {
        bail!("--from {from} must be before --to {to}");
    }
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    let lease = match store.acquire().await {
        Ok(lease) => lease,
        Err(StoreError::LockHeld) => {
            return crate::args::lock_held(
                &store,
                "refreshing nothing (a running core refreshes closed buckets itself)",
            )
            .await;
        }
        Err(e) => return Err(e.into()),
    };
    let started = Instant::now();
    let refresh = store.refresh_rollups(lease.epoch(), from, to).await?;
    let duration_us = started.elapsed().as_micros() as u64;
    crate::db::finish_under_lock(&store, lease, "rollup refresh", duration_us).await?;
    if json {
        println!(
            "{}",
            serde_json::json!({
                "minute": {
                    "from": refresh.minute_range.0.to_rfc3339(),
                    "to": refresh.minute_range.1.to_rfc3339(),
                    "buckets": refresh.minute_buckets,
                },
                "hour": {
                    "from": refresh.hour_range.0.to_rfc3339(),
                    "to": refresh.hour_range.1.to_rfc3339(),
                    "buckets": refresh.hour_buckets,
                },
                "duration_us": duration_us,
            })
        );
    } else {
        println!(
            "rollup_1m refreshed over [{}, {}): {} buckets",
            refresh.minute_range.0, refresh.minute_range.1, refresh.minute_buckets
        );
        println!(
            "rollup_1h refreshed over [{}, {}): {} buckets",
            refresh.hour_range.0, refresh.hour_range.1, refresh.hour_buckets
        );
        println!("in {:.3} s", duration_us as f64 / 1e6);
    }
    Ok(ExitCode::SUCCESS)
}
