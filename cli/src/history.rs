//! `sentinel history ID --from T --to T [--bucket raw|1m|1h] [--json]` (issue 9 item 6): a
//! point's values over a range with quality and gaps visible. Reads only — no lock, no write —
//! so it runs as the read-only role (`--database-url` with the reader's login; README,
//! "Reading it back").
//!
//! `raw`: every row from the point's class table (the newest registry version says which), with
//! value, quality and reason. `1m` / `1h`: every bucket of the range in order, stored or not:
//! count, live_count, min/max/avg over live rows (avg = sum / live_count, never stored), a
//! `gappy` mark where live_count < count and an `empty` line for a bucket with no row at all.

use std::process::ExitCode;

use anyhow::{Context, bail};
use sentinel_core::registry::canonical;
use sentinel_core::{CanonicalValue, Micros};
use sentinel_ports::{HISTORY_ROWS_MAX, RollupGrain, RollupRow, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig};

use crate::args::parse_instant;

/// Most buckets one `history` prints (stored or empty): a month of minutes.
const BUCKETS_MAX: i64 = 31 * 24 * 60;

#[derive(Copy, Clone, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Bucket {
    Raw,
    #[value(name = "1m")]
    Minute,
    #[value(name = "1h")]
    Hour,
}

fn value_json(value: &Option<CanonicalValue>) -> serde_json::Value {
    match value {
        None => serde_json::Value::Null,
        Some(CanonicalValue::Num(v)) => serde_json::json!(v),
        Some(CanonicalValue::Bool(v)) => serde_json::json!(v),
        Some(CanonicalValue::Text(v)) => serde_json::json!(&**v),
    }
}

fn value_text(value: &Option<CanonicalValue>) -> String {
    match value {
        None => "—".into(),
        Some(CanonicalValue::Num(v)) => v.to_string(),
        Some(CanonicalValue::Bool(v)) => v.to_string(),
        Some(CanonicalValue::Text(v)) => v.to_string(),
    }
}

pub async fn run(
    database_url: &str,
    point_id: &str,
    from: &str,
    to: &str,
    bucket: Bucket,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let (from, to) = (parse_instant(from)?, parse_instant(to)?);
    if from >= to {
        bail!("--from {from} must be before --to {to}");
    }
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    let registry = store
        .load_registry(None)
        .await?
        .context("no registry version is stored")?;
    let Some((_, descriptor)) = registry.descriptors.iter().find(|(id, _)| id == point_id) else {
        eprintln!(
            "sentinel: point {point_id} is not in registry version {}",
            registry.version
        );
        return Ok(ExitCode::from(1));
    };
    let class = canonical::parse_stored(descriptor)
        .with_context(|| format!("point {point_id} in registry version {}", registry.version))?
        .retention;
    match bucket {
        Bucket::Raw => {
            let rows = store
                .load_history(point_id, class, from, to, HISTORY_ROWS_MAX)
                .await?;
            let truncated = rows.len() == HISTORY_ROWS_MAX;
            if json {
                let list: Vec<_> = rows
                    .iter()
                    .map(|r| {
                        serde_json::json!({
                            "observed_at": r.observed_at.to_rfc3339(),
                            "ingested_at": r.ingested_at.to_rfc3339(),
                            "value": value_json(&r.value),
                            "quality": r.quality.as_str(),
                            "reason": r.reason,
                        })
                    })
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"point_id": point_id, "class": class.as_str(), "bucket": "raw",
                        "rows": list, "truncated": truncated})
                );
            } else {
                println!(
                    "{point_id} ({} table), raw rows observed in [{from}, {to}): {}",
                    class.as_str(),
                    rows.len()
                );
                for r in &rows {
                    println!(
                        "{}  {:>14}  {:<11} {}",
                        r.observed_at,
                        value_text(&r.value),
                        r.quality.as_str(),
                        r.reason.as_deref().unwrap_or("")
                    );
                }
                if truncated {
                    println!("(first {HISTORY_ROWS_MAX} rows only; narrow the range)");
                }
            }
        }
        Bucket::Minute | Bucket::Hour => {
            let grain = if bucket == Bucket::Minute {
                RollupGrain::Minute
            } else {
                RollupGrain::Hour
            };
            let (lo, hi) = (grain.floor(from), grain.ceil(to));
            let n = (hi.0 - lo.0) / grain.width_us();
            if n > BUCKETS_MAX {
                bail!(
                    "{n} buckets of {} in the range; at most {BUCKETS_MAX}",
                    grain.as_str()
                );
            }
            let stored = store.load_rollups(grain, lo, hi, Some(point_id)).await?;
            let mut stored = stored.into_iter().peekable();
            let mut buckets: Vec<(Micros, Option<RollupRow>)> = Vec::new();
            let mut t = lo;
            while t < hi {
                let row = stored.next_if(|r| r.bucket == t);
                buckets.push((t, row));
                t = Micros(t.0 + grain.width_us());
            }
            print_buckets(point_id, class.as_str(), grain, &buckets, json);
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn avg(row: &RollupRow) -> Option<f64> {
    row.sum
        .filter(|_| row.live_count > 0)
        .map(|s| s / row.live_count as f64)
}

fn print_buckets(
    point_id: &str,
    class: &str,
    grain: RollupGrain,
    buckets: &[(Micros, Option<RollupRow>)],
    json: bool,
) {
    if json {
        let list: Vec<_> = buckets
            .iter()
            .map(|(t, row)| match row {
                None => serde_json::json!({"bucket": t.to_rfc3339(), "empty": true}),
                Some(r) => serde_json::json!({
                    "bucket": t.to_rfc3339(),
                    "count": r.count,
                    "live_count": r.live_count,
                    "min": r.min,
                    "max": r.max,
                    "avg": avg(r),
                    "gappy": r.live_count < r.count,
                    "empty": false,
                }),
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({"point_id": point_id, "class": class, "bucket": grain.as_str(), "buckets": list})
        );
        return;
    }
    println!("{point_id} ({class}), rollup_{} buckets:", grain.as_str());
    println!(
        "{:<27} {:>6} {:>6} {:>12} {:>12} {:>12}",
        "bucket", "count", "live", "min", "max", "avg"
    );
    let num = |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{v:.4}"));
    for (t, row) in buckets {
        match row {
            None => println!("{:<27} {:>6}  empty: no row", t.to_rfc3339(), 0),
            Some(r) => println!(
                "{:<27} {:>6} {:>6} {:>12} {:>12} {:>12}{}",
                t.to_rfc3339(),
                r.count,
                r.live_count,
                num(r.min),
                num(r.max),
                num(avg(r)),
                if r.live_count < r.count { "  gappy" } else { "" }
            ),
        }
    }
}
