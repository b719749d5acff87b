//! The `sentinel` binary: the CLI edge (clap). Errors become messages and exit codes here;
//! everything else lives in the library.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use sentinel_core::{Config, QuarantineReason, RetentionClass};
use sentinel_io::bus::nats::{NatsBus, NatsBusConfig};
use sentinel_io::clock::{Clock, SystemClock};
use sentinel_io::ports::Bus;
use sentinel_io::runtime::{self, RuntimeConfig};
use sentinel_io::startup::{self, StartError};
use sentinel_io::store::postgres::{PgStore, PgStoreConfig};
use sentinel_io::{demo, registry_dir};
use tracing::{error, info};

/// Exit code of a core that could not take the single-writer lock.
const EXIT_LOCK_HELD: u8 = 10;

#[derive(Parser)]
#[command(
    name = "sentinel",
    version,
    about = "Sentinel core: telemetry ingest, exactly once, one writer"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
}

#[derive(clap::Args, Clone)]
struct DbArgs {
    /// PostgreSQL connection URL.
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
}

#[derive(Subcommand)]
enum Command {
    /// Apply pending migrations (refuses a database newer than this binary).
    Migrate {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Check or load a registry folder.
    Registry {
        #[command(subcommand)]
        command: RegistryCommand,
    },
    /// Run the core: lock, epoch, registry, projection, consumer, ingest until stopped.
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
    /// Print the epoch, lock holder, consumer lag, quarantine and row counts, last cold start.
    Status {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        nats: NatsArgs,
    },
}

#[derive(Subcommand)]
enum RegistryCommand {
    /// Run every admission check; exit 1 and list the issues if any.
    Check { dir: PathBuf },
    /// Check, then store as a new version if the content changed.
    Load {
        dir: PathBuf,
        #[command(flatten)]
        db: DbArgs,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo prints its own progress; its logs stay at warnings unless asked for.
    let default_filter = if matches!(cli.command, Command::Demo { .. }) {
        "warn"
    } else {
        "info"
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SENTINEL_LOG")
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
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
            let store = PgStore::connect(&db.database_url, PgStoreConfig::default()).await?;
            let report = store.migrate().await?;
            println!("migrations: {report:?}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Registry {
            command: RegistryCommand::Check { dir },
        } => match registry_dir::check_dir(&dir) {
            Ok(descriptors) => {
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
            command: RegistryCommand::Load { dir, db },
        } => {
            let store = PgStore::connect(&db.database_url, PgStoreConfig::default()).await?;
            store.migrate().await?;
            let load = registry_dir::load_dir(&store, &dir).await?;
            if load.created {
                println!("registry version {} stored", load.version);
            } else {
                println!("registry unchanged; current version stays {}", load.version);
            }
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
        Command::Status { db, nats } => status(db, nats).await,
    }
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
    let report = store.migrate().await.context("migrating")?;
    info!(?report, "schema ready");
    let bus_config = NatsBusConfig {
        url: nats.nats_url.clone(),
        ack_wait_ms,
        ..NatsBusConfig::default()
    };
    let bus = NatsBus::connect(bus_config).await.context("connecting to NATS")?;
    // The stream may be created before the lock; the consumer may not be bound before it.
    bus.ensure_stream()
        .await
        .context("ensuring the observation stream")?;
    let config = Config {
        inflight_batches_max,
        startup_grace_ms: i64::try_from(tuning.startup_grace_ms).context("--startup-grace-ms")?,
        lag_high_pending: tuning.lag_high_pending,
        lag_high_age_ms: tuning.lag_high_age_ms,
        self_points_interval_ms: i64::try_from(tuning.self_points_interval_ms)
            .context("--self-points-interval-ms")?,
        ..Config::default()
    };
    let started = match startup::start(&bus, &store, registry.as_deref(), config, clock.as_ref()).await {
        Ok(started) => started,
        Err(StartError::LockHeld) => {
            error!("another core holds the single-writer lock; exiting without binding the consumer");
            return Ok(ExitCode::from(EXIT_LOCK_HELD));
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
        bus,
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

/// Prints what an operator needs to see about the single writer and the backlog (core runtime
/// spec, "Backpressure": lag is the consumer's pending count and its oldest unacked age; exit
/// criteria: cold-start duration per step). Reads only; never binds the consumer.
async fn status(db: DbArgs, nats: NatsArgs) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    println!("core epoch: {}", store.current_epoch().await?);
    match store.lock_holder().await? {
        Some(holder) => println!(
            "lock holder: pid {}, application_name {}, backend_start {}",
            holder.backend_pid,
            holder.application_name.as_deref().unwrap_or("(not visible)"),
            holder
                .backend_start
                .map_or("(not visible)".to_owned(), |t| t.to_rfc3339())
        ),
        None => println!("lock holder: none"),
    }
    match NatsBus::connect(NatsBusConfig {
        url: nats.nats_url,
        ..NatsBusConfig::default()
    })
    .await
    {
        Ok(bus) => match bus.lag().await {
            Ok(lag) => println!(
                "consumer lag: pending {}, ack pending {}, oldest unacked age {}",
                lag.pending,
                lag.ack_pending,
                lag.oldest_unacked_age_ms
                    .map_or("n/a".to_owned(), |ms| format!("{ms} ms"))
            ),
            Err(e) => println!("consumer lag: unavailable ({e})"),
        },
        Err(e) => println!("consumer lag: NATS unreachable ({e})"),
    }
    let quarantine = store.quarantine_counts().await?;
    println!("quarantine: {}", quarantine.iter().map(|(_, n)| n).sum::<u64>());
    // wrong_instance is a misconfigured driver host, not bad data: always shown, so its absence
    // reads as zero rather than as "not checked".
    if !quarantine
        .iter()
        .any(|(reason, _)| *reason == QuarantineReason::WrongInstance)
    {
        println!("  {}: 0", QuarantineReason::WrongInstance.as_str());
    }
    for (reason, count) in quarantine {
        println!("  {}: {count}", reason.as_str());
    }
    let rows = store.row_counts().await?;
    for class in RetentionClass::ALL {
        println!("rows in observation_{}: {}", class.as_str(), rows.get(class));
    }
    match store.cold_starts().await?.pop() {
        None => println!("last cold start: none recorded"),
        Some(start) => {
            println!(
                "last cold start: epoch {}, started_at {}, lock session pid {} ({}), {}",
                start.epoch,
                start.started_at.to_rfc3339(),
                start.backend_pid,
                start.application_name,
                start
                    .ready_at
                    .map_or("never became ready".to_owned(), |t| format!(
                        "ready_at {}",
                        t.to_rfc3339()
                    ))
            );
            for step in &start.steps {
                println!("  {}: {} us", step.step, step.duration_us);
            }
            if !start.steps.is_empty() {
                let total_us: u64 = start.steps.iter().map(|s| s.duration_us).sum();
                println!("  total: {total_us} us");
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
