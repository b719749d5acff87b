//! `sentinel migrate` and `sentinel db grants`: the schema under the single-writer lock (exit 10
//! beside a running core) and the roles' privileges (migrations/0003_roles.sql).

use std::process::ExitCode;

use anyhow::Context;
use sentinel_ports::StoreError;
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
