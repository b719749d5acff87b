//! `sentinel migrate` and `sentinel db grants`: the schema under the single-writer lock (exit 10
//! beside a running core), what an upgrade would apply and cost (`--dry-run`, no lock), and the
//! roles' privileges (migrations/0003_roles.sql).

use std::process::ExitCode;

use anyhow::Context;
use sentinel_ports::StoreError;
use sentinel_store_pg::upgrade::UpgradePlan;
use sentinel_store_pg::{PgStore, PgStoreConfig};

use crate::args::{DbArgs, lock_held};

/// `sentinel migrate`: pending migrations, under the lock.
pub async fn migrate(db: &DbArgs) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    match store.migrate().await {
        Ok(report) => {
            println!("{report}");
            Ok(ExitCode::SUCCESS)
        }
        Err(StoreError::LockHeld) => {
            lock_held(&store, "applying nothing (stop the running core, then migrate)").await
        }
        Err(e) => Err(e.into()),
    }
}

/// `sentinel migrate --dry-run`: what `migrate` would apply and what it would cost, read
/// without the lock (store-pg `upgrade`).
pub async fn migrate_dry_run(db: &DbArgs, json_out: bool) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    let plan = store.upgrade_plan().await?;
    if json_out {
        println!("{}", serde_json::to_string_pretty(&plan_json(&plan))?);
    } else {
        print!("{}", plan_text(&plan));
    }
    Ok(ExitCode::SUCCESS)
}

fn plan_json(plan: &UpgradePlan) -> serde_json::Value {
    serde_json::json!({
        "schema_version": plan.schema.found,
        "supported_version": plan.schema.supported,
        "hot_raw_bytes": plan.hot_raw_bytes,
        "pending": plan.pending.iter().map(|m| serde_json::json!({
            "version": m.version,
            "description": m.description,
            "hot_tables": m.hot_work.map(|w| w.does),
            "seconds_per_gb": m.hot_work.and_then(|w| w.seconds_per_gb),
            "free_disk_per_gb": m.hot_work.map(|w| w.free_disk_per_gb),
        })).collect::<Vec<_>>(),
        "estimated_seconds": plan.estimated_s(),
        "free_disk_bytes": plan.free_disk_bytes(),
        "unmeasured": plan.unmeasured(),
    })
}

fn plan_text(plan: &UpgradePlan) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(out, "{}", plan.schema.describe());
    if plan.pending.is_empty() {
        let _ = writeln!(out, "nothing to apply");
        return out;
    }
    let gb = plan.hot_raw_bytes as f64 / 1e9;
    let _ = writeln!(out, "hot raw tables (heap and indexes): {gb:.2} GB");
    let _ = writeln!(out, "would apply, in order, under the single-writer lock:");
    for m in &plan.pending {
        match m.hot_work {
            Some(work) => {
                let cost = work
                    .estimated_s(plan.hot_raw_bytes)
                    .map_or_else(|| "not measured".to_owned(), duration_text);
                let _ = writeln!(
                    out,
                    "  {:04} {}: {} ({cost})",
                    m.version, m.description, work.does
                );
            }
            None => {
                let _ = writeln!(out, "  {:04} {}", m.version, m.description);
            }
        }
    }
    let _ = writeln!(
        out,
        "estimated time under the lock, no core running: {} (BENCHMARKS.md's seconds per GB \
         on a 2-core VM, at today's size){}",
        duration_text(plan.estimated_s()),
        match plan.unmeasured().as_slice() {
            [] => String::new(),
            versions => format!(
                ", plus one read of every hot row for {}",
                versions
                    .iter()
                    .map(|v| format!("{v:04}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    );
    let _ = writeln!(
        out,
        "free disk needed while it runs: about {:.2} GB",
        plan.free_disk_bytes() as f64 / 1e9
    );
    let _ = writeln!(out, "nothing applied (--dry-run)");
    out
}

/// A time an operator plans around: "under 1 s", "about 40 s", "about 12 min", "about 3.5 h".
fn duration_text(s: f64) -> String {
    if s < 1.0 {
        "under 1 s".to_owned()
    } else if s < 120.0 {
        format!("about {s:.0} s")
    } else if s < 7_200.0 {
        format!("about {:.0} min", s / 60.0)
    } else {
        format!("about {:.1} h", s / 3_600.0)
    }
}

/// `sentinel db grants`: the writer's and the reader's privileges.
pub async fn grants(db: &DbArgs, writer: &str, reader: &str) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.apply_grants(writer, reader).await?;
    println!("granted the writer role {writer} and the reader role {reader} their privileges");
    Ok(ExitCode::SUCCESS)
}

/// Ends an operator command's run under the single-writer lock: records what the epoch it
/// acquired was for (one step, `step`, of `duration_us`, in the acquisition's cold-start record)
/// and releases the lock. `sentinel compact`, `retention`, `rollup refresh`, `reprocess` and
/// `registry load --move-class` end this way.
pub async fn finish_under_lock(
    store: &PgStore,
    lease: sentinel_store_pg::PgLease,
    step: &str,
    duration_us: u64,
) -> anyhow::Result<()> {
    use sentinel_ports::{Lease, Store};
    store
        .record_cold_start(
            lease.epoch(),
            None,
            vec![sentinel_ports::StartupStep {
                step: step.into(),
                duration_us,
            }],
        )
        .await?;
    lease.release().await?;
    Ok(())
}
