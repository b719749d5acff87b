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

/// How `sentinel registry load` tells a running core about a new version (issue 21 item 7):
/// on `sentinel.registry.loaded.<principal>`, best effort. A core that is not running reads the
/// newest version when it starts, so a failed announcement is reported, not an error.
#[derive(clap::Args, Clone)]
pub struct NotifyArgs {
    /// The operator principal announcing (its own subject).
    #[arg(long, env = "SENTINEL_OPERATOR", default_value = "operator")]
    pub principal: String,
    #[command(flatten)]
    pub nats: crate::args::NatsArgs,
    /// Store the version without announcing it to a running core.
    #[arg(long)]
    pub no_notify: bool,
}

/// How long the announcement may take (connect and flush) before it is given up.
pub const NOTIFY_TIMEOUT_MS: u64 = 5_000;

/// Announces `version` to a running core; says on stdout what happened.
async fn notify(version: i32, args: &NotifyArgs) {
    use sentinel_core::wire::{RegistryLoaded, is_principal_name, registry_loaded_subject};
    if args.no_notify {
        return;
    }
    if !is_principal_name(&args.principal) {
        println!("not announced: --principal must be 1 to 64 ASCII letters, digits, '_' or '-'");
        return;
    }
    let announce = async {
        let credentials = args.nats.credentials().map_err(|e| e.to_string())?;
        let connection = sentinel_driver::connect::BusConnection::connect(
            &args.nats.nats_url,
            &args.principal,
            &credentials,
        )
        .await
        .map_err(|e| e.to_string())?;
        let payload = serde_json::to_vec(&RegistryLoaded { version }).map_err(|e| e.to_string())?;
        connection
            .client
            .publish(registry_loaded_subject(&args.principal), payload.into())
            .await
            .map_err(|e| e.to_string())?;
        connection.client.flush().await.map_err(|e| e.to_string())
    };
    match tokio::time::timeout(std::time::Duration::from_millis(NOTIFY_TIMEOUT_MS), announce).await {
        Ok(Ok(())) => println!("registry version {version} announced to a running core"),
        Ok(Err(e)) => {
            println!("registry version {version} not announced ({e}); a core takes it at its next start")
        }
        Err(_) => println!(
            "registry version {version} not announced (no answer from NATS within {NOTIFY_TIMEOUT_MS} ms); a core \
             takes it at its next start"
        ),
    }
}

/// `sentinel registry load`: stores the folder as a new version when its content is new, and
/// announces a new version to a running core. The folder is checked against `admission`, the
/// installation's configured capacity, as `registry check` and a starting core check it.
pub async fn load(
    dir: &Path,
    db: &DbArgs,
    admission: &Admission,
    move_class: bool,
    notify_args: &NotifyArgs,
) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default()).await?;
    store.require_current_schema().await?;
    if move_class {
        return load_moving(&store, dir, admission).await;
    }
    let load = match registry_dir::load_dir_with(&store, dir, admission).await {
        Ok(load) => load,
        Err(e @ registry_dir::RegistryDirError::ClassChanges(_)) => {
            eprintln!("{e}");
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e.into()),
    };
    if load.created {
        println!("registry version {} stored", load.version);
        notify(load.version, notify_args).await;
    } else {
        println!("registry unchanged; current version stays {}", load.version);
    }
    Ok(ExitCode::SUCCESS)
}

/// `sentinel registry load --move-class`: under the lock the command takes (exit 10 while a
/// core runs), store the folder and move every changed point's history.
async fn load_moving(
    store: &PgStore,
    dir: &std::path::Path,
    admission: &Admission,
) -> anyhow::Result<ExitCode> {
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
    let moving = registry_dir::load_dir_moving(
        store,
        dir,
        admission,
        lease.epoch(),
        "operator:sentinel-registry-load",
        now,
    )
    .await?;
    crate::db::finish_under_lock(
        store,
        lease,
        "registry load --move-class",
        started.elapsed().as_micros() as u64,
    )
    .await?;
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
