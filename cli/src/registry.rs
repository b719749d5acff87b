//! `sentinel registry check`, `load` and `nats-config` (ingest spec, "The registry is versioned
//! data"; DESIGN.md §4): admission over a folder, storing a version (and, with
//! `--move-class`, moving class histories under the lock), and the bus permissions derived from
//! the registry. `registry plan` is `plan.rs`.

use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use sentinel_bus_nats::NatsBusConfig;
use sentinel_bus_nats::auth as nats_auth;
use sentinel_core::registry::plan::Admission;
use sentinel_ports::StoreError;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_runtime::registry_dir;
use sentinel_store_pg::{PgStore, PgStoreConfig};

use crate::args::{DbArgs, lock_held};

/// `sentinel registry check`: every admission check over the folder; with a database, the
/// class changes it would make.
pub async fn check(
    dir: &Path,
    admission: &Admission,
    database_url: Option<&str>,
    move_class: bool,
) -> anyhow::Result<ExitCode> {
    match registry_dir::check_dir_with(dir, admission) {
        Ok(descriptors) => {
            if let Some(url) = database_url {
                let store = PgStore::connect(url, PgStoreConfig::default())
                    .await
                    .context("connecting to PostgreSQL")?;
                store.require_current_schema().await?;
                let changes = registry_dir::stored_class_changes(&store, &descriptors).await?;
                if !changes.is_empty() && !move_class {
                    eprintln!("{}", registry_dir::RegistryDirError::ClassChanges(changes));
                    return Ok(ExitCode::from(1));
                }
                for change in &changes {
                    println!("{change} (to be moved by `registry load --move-class`)");
                }
            }
            println!(
                "{}: {} points, all admission checks passed",
                dir.display(),
                descriptors.len()
            );
            Ok(ExitCode::SUCCESS)
        }
        Err(report) => {
            eprintln!("{report}");
            Ok(ExitCode::from(1))
        }
    }
}

/// `sentinel registry load`: stores the folder as a new version when its content is new.
pub async fn load(dir: &Path, db: &DbArgs, move_class: bool) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default()).await?;
    store.require_current_schema().await?;
    if move_class {
        return load_moving(&store, dir).await;
    }
    let load = match registry_dir::load_dir(&store, dir).await {
        Ok(load) => load,
        Err(e @ registry_dir::RegistryDirError::ClassChanges(_)) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    if load.created {
        println!("registry version {} stored", load.version);
    } else {
        println!("registry unchanged; current version stays {}", load.version);
    }
    Ok(ExitCode::SUCCESS)
}

/// `sentinel registry load --move-class`: under the lock the command takes (exit 10 while a
/// core runs), store the folder and move every changed point's history.
async fn load_moving(store: &PgStore, dir: &std::path::Path) -> anyhow::Result<ExitCode> {
    use sentinel_ports::{Lease, Store};
    let lease = match store.acquire().await {
        Ok(lease) => lease,
        Err(StoreError::LockHeld) => {
            return lock_held(
                store,
                "loading nothing (stop the running core to move class histories)",
            )
            .await;
        }
        Err(e) => return Err(e.into()),
    };
    let now = SystemClock.now();
    let started = std::time::Instant::now();
    let moving =
        registry_dir::load_dir_moving(store, dir, lease.epoch(), "operator:sentinel-registry-load", now)
            .await?;
    store
        .record_cold_start(
            lease.epoch(),
            None,
            vec![sentinel_ports::StartupStep {
                step: "registry load --move-class".into(),
                duration_us: started.elapsed().as_micros() as u64,
            }],
        )
        .await?;
    lease.release().await?;
    if moving.load.created {
        println!("registry version {} stored", moving.load.version);
    } else {
        println!(
            "registry unchanged; current version stays {}",
            moving.load.version
        );
    }
    for (change, moved) in &moving.moves {
        println!("{change}: {} rows moved", moved.rows);
    }
    Ok(ExitCode::SUCCESS)
}

/// `sentinel registry nats-config`: the registry's driver hosts and the operator's principals
/// into a nats-server authorization block.
pub fn nats_config(
    dir: &std::path::Path,
    principals: &std::path::Path,
    out: Option<&std::path::Path>,
) -> anyhow::Result<ExitCode> {
    let descriptors = match registry_dir::check_dir(dir) {
        Ok(descriptors) => descriptors,
        Err(report) => {
            eprintln!("{report}");
            return Ok(ExitCode::from(1));
        }
    };
    let hosts = nats_auth::driver_hosts(&descriptors);
    let principals = nats_auth::PrincipalsFile::read(principals)?;
    let defaults = NatsBusConfig::default();
    let block = nats_auth::authorization_block(
        &hosts,
        &principals,
        &defaults.stream_name,
        &defaults.consumer_name,
        &|var| std::env::var(var).ok(),
    )?;
    match out {
        Some(path) => {
            std::fs::write(path, &block).with_context(|| format!("writing {}", path.display()))?;
            eprintln!(
                "wrote the authorization block for {} driver host(s) to {}",
                hosts.len(),
                path.display()
            );
        }
        None => print!("{block}"),
    }
    Ok(ExitCode::SUCCESS)
}
