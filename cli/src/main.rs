//! The `sentinel` binary: the CLI edge (clap). Errors become messages and exit codes here;
//! everything else lives in the library. `status.rs` gathers and prints `sentinel status`;
//! `plan.rs` prints `sentinel registry plan`; `reprocess.rs` runs `sentinel reprocess` under the
//! lock and `bus_ask.rs` asks the running core for it instead while one holds the lock.

mod bus_ask;
mod demo;
mod history;
mod plan;
mod reprocess;
mod retention;
mod rollup;
mod status;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use sentinel_bus_nats::auth as nats_auth;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::Config;
use sentinel_driver::Credentials;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{BusError, StoreError};
use sentinel_runtime::registry_dir;
use sentinel_runtime::startup::{self, StartError};
use sentinel_runtime::{self as runtime, RuntimeConfig};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use tracing::info;

/// Exit code of a core (or `migrate`) that could not take the single-writer lock.
const EXIT_LOCK_HELD: u8 = 10;

#[derive(Parser)]
#[command(
    name = "sentinel",
    version,
    about = "Sentinel core: telemetry ingest, exactly once, one writer"
)]
struct Cli {
    /// Log format on stderr: `text` (colour only on a terminal) or `json` (one object a line,
    /// for production log shippers).
    #[arg(long, global = true, env = "SENTINEL_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

/// The watchdog's suppression (core runtime spec, "A slow core must not look like a dead
/// fleet") and the self-point interval.
#[derive(clap::Args, Clone)]
struct CoreTuningArgs {
    /// No staleness for this long after the core starts.
    #[arg(long, default_value_t = 60_000)]
    startup_grace_ms: u64,
    /// Staleness is suppressed while at least this many messages are pending...
    #[arg(long, default_value_t = 5_000)]
    lag_high_pending: u64,
    /// ...or while the oldest unacked message is at least this old.
    #[arg(long, default_value_t = 30_000)]
    lag_high_age_ms: u64,
    /// How often the core publishes its self-points (lag, oldest unacked age, throughput,
    /// quarantine counts) into the stream; 0 turns them off.
    #[arg(long, default_value_t = 5_000)]
    self_points_interval_ms: u64,
    /// How long raw rows and rollups are kept (the core drops what is past them daily).
    #[command(flatten)]
    retention: retention::RetentionArgs,
}

#[derive(clap::Args, Clone)]
struct DbArgs {
    /// PostgreSQL connection URL (`sentinel run` connects as the writer role, `migrate` and
    /// `db grants` as the schema owner).
    #[arg(
        long,
        env = "SENTINEL_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/sentinel"
    )]
    database_url: String,
}

#[derive(clap::Args, Clone)]
struct NatsArgs {
    /// NATS server URL.
    #[arg(long, env = "SENTINEL_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// NATS user, with --nats-password-file (a server with an authorization block).
    #[arg(long, env = "SENTINEL_NATS_USER")]
    nats_user: Option<String>,
    /// File holding the NATS user's password.
    #[arg(long, env = "SENTINEL_NATS_PASSWORD_FILE", requires = "nats_user")]
    nats_password_file: Option<PathBuf>,
    /// File holding an nkey seed (`SU…`), instead of a user and password.
    #[arg(long, env = "SENTINEL_NATS_NKEY_SEED_FILE", conflicts_with = "nats_user")]
    nats_nkey_seed_file: Option<PathBuf>,
}

impl NatsArgs {
    fn credentials(&self) -> anyhow::Result<Credentials> {
        Credentials::from_files(
            self.nats_user.as_deref(),
            self.nats_password_file.as_deref(),
            self.nats_nkey_seed_file.as_deref(),
        )
        .context("NATS credentials")
    }
}

#[derive(Subcommand)]
enum Command {
    /// Take the single-writer lock and apply pending migrations under it (exit 10, applying
    /// nothing, while a core runs; refuses a database newer than this binary).
    Migrate {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Check, load or derive bus permissions from a registry folder.
    Registry {
        #[command(subcommand)]
        command: RegistryCommand,
    },
    /// Database roles.
    Db {
        #[command(subcommand)]
        command: DbCommand,
    },
    /// Run the core: lock, schema, epoch, registry, projection, then NATS; ingest until stopped.
    Run {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        nats: NatsArgs,
        /// Registry folder to load before starting (unchanged content creates no version).
        #[arg(long, env = "SENTINEL_REGISTRY")]
        registry: Option<PathBuf>,
        /// Redelivery delay for unacked messages.
        #[arg(long, default_value_t = 30_000)]
        ack_wait_ms: u64,
        /// Batches at the store at once.
        #[arg(long, default_value_t = 4)]
        inflight_batches_max: usize,
        /// How often the core checks it still holds the single-writer lock; a lost lock is
        /// noticed within about this long (core runtime spec, "Losing the lock while running").
        #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..))]
        lock_check_interval_ms: u64,
        #[command(flatten)]
        tuning: CoreTuningArgs,
    },
    /// Run the whole core on in-memory models with a synthetic fleet; needs no services.
    Demo {
        /// Registry folder the fleet is generated from.
        #[arg(long, default_value = "registry")]
        registry: PathBuf,
        #[arg(long, default_value_t = 20_000)]
        messages: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
    /// Rollups (1 minute, 1 hour) over the raw class tables.
    Rollup {
        #[command(subcommand)]
        command: RollupCommand,
    },
    /// Recompute the canonical columns of stored rows from native under a registry version,
    /// then refresh the rollups over the range, rebuild the points' state and record one
    /// `reprocess` control event. Validates the whole scope first: exit 11, changing nothing,
    /// when any point's range reaches past its class's raw horizon. Under the single-writer
    /// lock the command takes; while a core holds it, that core is asked over the bus and runs
    /// it (dry runs too) to the registry version it runs: exit 12 when it refuses (busy,
    /// another version, stopping), 13 when none answers in time. `--dry-run` changes nothing.
    Reprocess {
        #[command(flatten)]
        db: DbArgs,
        /// Points by id: `*` any run of characters, `?` one character.
        #[arg(long)]
        point_glob: String,
        /// Start, by observed_at: an RFC 3339 instant or a UTC date (YYYY-MM-DD).
        #[arg(long)]
        from: String,
        /// End (exclusive), as --from; no upper bound when absent.
        #[arg(long)]
        to: Option<String>,
        /// `current` or a stored version number.
        #[arg(long)]
        registry_version: String,
        /// Report the row count, classes and horizons, rollup ranges and a time estimate;
        /// change nothing.
        #[arg(long)]
        dry_run: bool,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
        /// Rows per fenced transaction.
        #[arg(long, default_value_t = sentinel_core::reprocess::CHUNK_ROWS_DEFAULT)]
        chunk_rows: usize,
        /// Where the running core is asked, when one holds the lock (as the operator principal).
        #[command(flatten)]
        nats: NatsArgs,
        /// How long to wait for a running core's answer (a real run answers when it is done).
        #[arg(long, default_value_t = 600_000)]
        reply_timeout_ms: u64,
        /// The raw horizons the refusal checks (the same flags and defaults as `sentinel run`;
        /// a running core asked over the bus checks its own).
        #[command(flatten)]
        horizons: retention::RetentionArgs,
    },
    /// What the stored rows of a point observed at an instant mean under a registry version,
    /// from native, beside the stored canonical values. Reads only.
    Reinterpret {
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        point: String,
        /// The row's observed_at, RFC 3339.
        #[arg(long)]
        at: String,
        /// `current` or a stored version number.
        #[arg(long)]
        registry_version: String,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List (--dry-run) or drop every partition wholly past its horizon: raw days per class,
    /// rollup_1m days, rollup_1h months. Dropping takes the single-writer lock (exit 10 while a
    /// core runs: it drops daily itself); each drop is a `retention_drop` control event.
    Retention {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        horizons: retention::RetentionArgs,
        /// Only list what would go; reads only, takes no lock.
        #[arg(long)]
        dry_run: bool,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// A point's values over [--from, --to) with quality and gaps visible: raw rows (value,
    /// quality, reason) or rollup buckets (count, live_count, min/max/avg; gappy and empty
    /// buckets marked). Reads only: connect as the read-only role.
    History {
        /// The point id.
        point_id: String,
        #[command(flatten)]
        db: DbArgs,
        /// Start (observed time): an RFC 3339 instant or a UTC date (YYYY-MM-DD).
        #[arg(long)]
        from: String,
        /// End (exclusive), as --from.
        #[arg(long)]
        to: String,
        /// `raw` rows, or the `1m` / `1h` rollup buckets.
        #[arg(long, value_enum, default_value_t = history::Bucket::Raw)]
        bucket: history::Bucket,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print the schema version, epoch, lock holder, consumer lag, quarantine and row counts,
    /// last cold start. Reads only: never migrates, never takes the lock.
    Status {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        nats: NatsArgs,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum RegistryCommand {
    /// Run every admission check; exit 1 and list the issues if any. With --database-url it
    /// also compares the folder with the newest version stored there and refuses (exit 1) a
    /// point that changes retention class, one line per point, unless --move-class is given.
    Check {
        dir: PathBuf,
        #[command(flatten)]
        admission: plan::AdmissionArgs,
        /// Compare with the newest registry version in this database (reads only). Without
        /// it the check cannot know the stored version and does not look for class changes.
        #[arg(long)]
        database_url: Option<String>,
        /// Class changes are intended (`registry load --move-class` will move them): list them
        /// and pass.
        #[arg(long, requires = "database_url")]
        move_class: bool,
    },
    /// Print the declared load per retention class (rows/day, bytes/day), the stream an outage
    /// needs against its bound, and the derived points in dependency order (exit 1 if the
    /// folder fails its checks).
    Plan {
        dir: PathBuf,
        #[command(flatten)]
        admission: plan::AdmissionArgs,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Check, then store as a new version if the content changed (the schema must be current).
    /// A point that changes retention class is refused (exit 1, one line per point) unless
    /// --move-class is given.
    Load {
        dir: PathBuf,
        #[command(flatten)]
        db: DbArgs,
        /// Move the history of every point whose class changes to its new class table, each in
        /// one fenced transaction with its rollups recomputed and a `class_moved` control
        /// event. Takes the single-writer lock (exit 10 while a core runs).
        #[arg(long)]
        move_class: bool,
    },
    /// Write the nats-server authorization block for the registry's driver hosts: each may
    /// publish only `obs.<host>.>` and `drv.<host>.>` and subscribe only to `cmd.<host>.>`.
    NatsConfig {
        dir: PathBuf,
        /// The operator's principals file (TOML: `core`, `reader`, optional `operator`, and
        /// `[hosts.<host>]`, each with a password, password_file, password_env or nkey).
        #[arg(long, env = "SENTINEL_NATS_PRINCIPALS")]
        principals: PathBuf,
        /// Where to write the block; stdout when absent.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum RollupCommand {
    /// Recompute both rollups over [--from, --to), each rounded outward to its buckets, under
    /// the single-writer lock (exit 10 while a core runs: it refreshes closed buckets itself).
    Refresh {
        #[command(flatten)]
        db: DbArgs,
        /// Start: an RFC 3339 instant or a UTC date (YYYY-MM-DD).
        #[arg(long)]
        from: String,
        /// End (exclusive), as --from; at most 400 days after it.
        #[arg(long)]
        to: String,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum DbCommand {
    /// Grant the core's writer role and a read-only role exactly what they use (run as the
    /// schema owner; both roles must exist). See ARCHITECTURE.md, "Security model".
    Grants {
        #[command(flatten)]
        db: DbArgs,
        /// The role `sentinel run` connects as.
        #[arg(long)]
        writer: String,
        /// The read-only role for dashboards.
        #[arg(long)]
        reader: String,
    },
}

/// Logs go to stderr, coloured only on a terminal. Commands that print a report on stdout log
/// only warnings by default, so library INFO lines never interleave with what they print.
fn init_logging(format: LogFormat, command: &Command) {
    let default_filter = match command {
        Command::Run { .. } => "info",
        _ => "warn",
    };
    let filter =
        tracing_subscriber::EnvFilter::try_from_env("SENTINEL_LOG").unwrap_or_else(|_| default_filter.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format, &cli.command);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sentinel: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("sentinel: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate { db } => {
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
        Command::Registry {
            command:
                RegistryCommand::Check {
                    dir,
                    admission,
                    database_url,
                    move_class,
                },
        } => match registry_dir::check_dir_with(&dir, &admission.admission()) {
            Ok(descriptors) => {
                if let Some(url) = database_url {
                    let store = PgStore::connect(&url, PgStoreConfig::default())
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
        },
        Command::Registry {
            command: RegistryCommand::Plan { dir, admission, json },
        } => plan::run(&dir, &admission.admission(), json),
        Command::Registry {
            command: RegistryCommand::Load { dir, db, move_class },
        } => {
            let store = PgStore::connect(&db.database_url, PgStoreConfig::default()).await?;
            store.require_current_schema().await?;
            if move_class {
                return load_moving(&store, &dir).await;
            }
            let load = match registry_dir::load_dir(&store, &dir).await {
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
        Command::Registry {
            command: RegistryCommand::NatsConfig { dir, principals, out },
        } => nats_config(&dir, &principals, out.as_deref()),
        Command::Rollup {
            command: RollupCommand::Refresh { db, from, to, json },
        } => rollup::refresh(&db.database_url, &from, &to, json).await,
        Command::Reprocess {
            db,
            point_glob,
            from,
            to,
            registry_version,
            dry_run,
            json,
            chunk_rows,
            nats,
            reply_timeout_ms,
            horizons,
        } => {
            reprocess::reprocess(reprocess::ReprocessArgs {
                retention: horizons.config()?,
                database_url: db.database_url,
                bus: bus_ask::BusArgs {
                    credentials: nats.credentials()?,
                    nats_url: nats.nats_url,
                    reply_timeout_ms,
                },
                glob: point_glob,
                from,
                to,
                version: registry_version,
                dry_run,
                json,
                chunk_rows,
            })
            .await
        }
        Command::Reinterpret {
            db,
            point,
            at,
            registry_version,
            json,
        } => reprocess::reinterpret(&db.database_url, &point, &at, &registry_version, json).await,
        Command::Db {
            command: DbCommand::Grants { db, writer, reader },
        } => {
            let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
                .await
                .context("connecting to PostgreSQL")?;
            store.apply_grants(&writer, &reader).await?;
            println!("granted the writer role {writer} and the reader role {reader} their privileges");
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            db,
            nats,
            registry,
            ack_wait_ms,
            inflight_batches_max,
            lock_check_interval_ms,
            tuning,
        } => {
            let runtime_config = RuntimeConfig {
                lock_check_interval_ms,
                ..RuntimeConfig::default()
            };
            run(
                db,
                nats,
                registry,
                ack_wait_ms,
                inflight_batches_max,
                tuning,
                runtime_config,
            )
            .await
        }
        Command::Demo {
            registry,
            messages,
            seed,
        } => {
            let config = demo::DemoConfig {
                registry_dir: registry,
                messages,
                seed,
                publish_chunk: 500,
                timeout_s: 600,
            };
            let summary = demo::run(config).await.context("demo failed")?;
            println!("{summary}");
            Ok(if summary.exit_code == 0 {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        Command::Status { db, nats, json } => status::status(db, nats, json).await,
        Command::Retention {
            db,
            horizons,
            dry_run,
            json,
        } => retention::run(&db.database_url, &horizons, dry_run, json).await,
        Command::History {
            point_id,
            db,
            from,
            to,
            bucket,
            json,
        } => history::run(&db.database_url, &point_id, &from, &to, bucket, json).await,
    }
}

/// `sentinel registry nats-config`: the registry's driver hosts and the operator's principals
/// into a nats-server authorization block.
fn nats_config(
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

async fn run(
    db: DbArgs,
    nats: NatsArgs,
    registry: Option<PathBuf>,
    ack_wait_ms: u64,
    inflight_batches_max: usize,
    tuning: CoreTuningArgs,
    runtime_config: RuntimeConfig,
) -> anyhow::Result<ExitCode> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    let config = Config {
        inflight_batches_max,
        startup_grace_ms: i64::try_from(tuning.startup_grace_ms).context("--startup-grace-ms")?,
        lag_high_pending: tuning.lag_high_pending,
        lag_high_age_ms: tuning.lag_high_age_ms,
        self_points_interval_ms: i64::try_from(tuning.self_points_interval_ms)
            .context("--self-points-interval-ms")?,
        retention: tuning.retention.config()?,
        ..Config::default()
    };
    let bus_config = NatsBusConfig {
        url: nats.nats_url.clone(),
        ack_wait_ms,
        credentials: nats.credentials()?,
        ..NatsBusConfig::default()
    };
    // Startup order (core runtime spec, "Acquisition order at startup"): the lock, then the
    // schema under it, the epoch, the registry, the restored projection; only then NATS.
    let connect_bus = || async move {
        let bus = NatsBus::connect(bus_config)
            .await
            .map_err(|e| BusError::Connection(e.to_string()))?;
        bus.ensure_stream()
            .await
            .map_err(|e| BusError::Other(format!("ensuring the observation stream: {e}")))?;
        Ok(bus)
    };
    let started = match startup::start(&store, connect_bus, registry.as_deref(), config, clock.as_ref()).await
    {
        Ok(started) => started,
        Err(StartError::LockHeld) => {
            return lock_held(&store, "exiting before touching the bus or the schema").await;
        }
        Err(e) => return Err(e.into()),
    };
    info!(
        epoch = started.core.epoch(),
        points = started.core.registry().len(),
        "core started"
    );
    let shutdown = async {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    };
    let outcome = runtime::run_observed(
        started.core,
        started.bus,
        started.consumer,
        store,
        started.lease,
        clock,
        runtime_config,
        shutdown,
        started.inbound,
        |_| {},
    )
    .await;
    let m = &outcome.metrics;
    info!(
        code = outcome.exit.code,
        why = outcome.exit.why,
        delivered = m.delivered,
        rows = m.rows_inserted.iter().sum::<u64>(),
        quarantined = m.quarantined_total(),
        transitions = m.transitions_published,
        "core stopped"
    );
    Ok(ExitCode::from(u8::try_from(outcome.exit.code).unwrap_or(1)))
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

/// Exit 10, naming the session that holds the lock so the operator can find the other core.
async fn lock_held(store: &PgStore, what_now: &str) -> anyhow::Result<ExitCode> {
    let holder = match store.lock_holder().await {
        Ok(Some(holder)) => holder.describe(),
        Ok(None) => "a session that has released it since".to_owned(),
        Err(e) => format!("a session this role cannot see ({e})"),
    };
    eprintln!("sentinel: another core holds the single-writer lock: {holder}; {what_now}");
    Ok(ExitCode::from(EXIT_LOCK_HELD))
}
