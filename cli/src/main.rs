//! The `sentinel` binary: the CLI edge (clap). Errors become messages and exit codes here;
//! everything else lives in the library crates. This file holds the command line's shape and
//! routes each subcommand to its own file: `run.rs` (`sentinel run`, serving
//! `--metrics-listen` through `metrics_http.rs`), `demo.rs`, `db.rs`
//! (`migrate`, `db grants`), `registry.rs` (`registry check|load|nats-config`), `plan.rs`
//! (`registry plan`), `rollup.rs`, `retention.rs`, `reprocess/` (under the lock, or asking the
//! running core over the bus: `reprocess/over_bus.rs`), `reinterpret.rs`, `history.rs` and
//! `status.rs`; the command plane's `command.rs` (`command set|release`, over the bus),
//! `desired.rs` and `why.rs` (reads of the database). What several of them share — connection flags, tuning, the "lock held" exit —
//! is `args.rs`, below them all, so no subcommand file imports this one.

mod args;
mod command;
mod compact;
mod db;
mod demo;
mod desired;
mod disk;
mod history;
mod metrics_http;
mod pack;
mod plan;
mod registry;
mod reinterpret;
mod reprocess;
mod retention;
mod rollup;
mod run;
mod status;
mod storage;
mod why;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use sentinel_runtime::RuntimeConfig;

use args::{CompactionAgeArgs, CoreTuningArgs, DbArgs, NatsArgs, RetentionArgs};

/// mimalloc, not glibc's malloc (issue 24 item 3): draining a backlog allocates and frees
/// small blocks per message in async-nats, tokio, sqlx and the commit path, where glibc's
/// malloc and free were about a seventh of Sentinel's own CPU. Alternated with glibc in the
/// e2e bench's drain (BENCHMARKS.md, "the allocator end to end"), Sentinel's own CPU was lower
/// in 9 of 13 pairs and higher in 1: medians 4.05 against 4.35 µs a message over the ten
/// drain-only pairs. Nothing depends on addresses or on which allocator frees what.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// A retention class on the command line.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum ClassArg {
    Measurement,
    State,
    Diagnostic,
}

impl ClassArg {
    fn class(self) -> sentinel_core::RetentionClass {
        match self {
            ClassArg::Measurement => sentinel_core::RetentionClass::Measurement,
            ClassArg::State => sentinel_core::RetentionClass::State,
            ClassArg::Diagnostic => sentinel_core::RetentionClass::Diagnostic,
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Take the single-writer lock and apply pending migrations under it (exit 10, applying
    /// nothing, while a core runs; refuses a database newer than this binary). `--dry-run`
    /// lists what would be applied, with the time under the lock and the free disk the
    /// migrations that rewrite the hot tables need at their present size; no lock, no write.
    Migrate {
        #[command(flatten)]
        db: DbArgs,
        /// List the pending migrations and their cost; take no lock, change nothing.
        #[arg(long)]
        dry_run: bool,
        /// With --dry-run: one JSON object on stdout instead of text.
        #[arg(long, requires = "dry_run")]
        json: bool,
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
        /// Serve Prometheus metrics (OpenMetrics) on `GET /metrics` at ADDR: `HOST:PORT`, or a
        /// bare port for loopback only (`9464` is `127.0.0.1:9464`). Off by default.
        #[arg(long, env = "SENTINEL_METRICS_LISTEN", value_name = "ADDR", value_parser = metrics_http::parse_listen)]
        metrics_listen: Option<std::net::SocketAddr>,
        #[command(flatten)]
        tuning: CoreTuningArgs,
        /// The capacity the registry must fit and the stream's bounds (the same configuration
        /// `registry check`, `plan` and `load` read).
        #[command(flatten)]
        admission: plan::AdmissionArgs,
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
        /// The operator principal to ask as (its name in the principals file); the core records
        /// it from the request's subject, `sentinel.reprocess.request.<operator>`.
        #[arg(long, env = "SENTINEL_OPERATOR", default_value = "operator")]
        operator: String,
        /// The raw horizons the refusal checks (the same flags and defaults as `sentinel run`;
        /// a running core asked over the bus checks its own).
        #[command(flatten)]
        horizons: RetentionArgs,
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
        horizons: RetentionArgs,
        /// Only list what would go; reads only, takes no lock.
        #[arg(long)]
        dry_run: bool,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Compact every closed day in [--from, --through] older than --compact-after-days and no
    /// longer in the stream: its rows become column-wise chunks (one per point and hour), every
    /// read sees them as before. Takes the single-writer lock (exit 10 while a core runs); one
    /// `compaction` control event per day; days already compacted write nothing.
    Compact {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        nats: NatsArgs,
        /// First day (YYYY-MM-DD); default: 400 days before --through.
        #[arg(long)]
        from: Option<String>,
        /// Last day (YYYY-MM-DD); default: the newest day old enough.
        #[arg(long)]
        through: Option<String>,
        /// Only these class tables (repeatable); default: all three.
        #[arg(long = "class", value_enum)]
        classes: Vec<ClassArg>,
        /// How many days a closed day waits before it is compacted (default 7; with
        /// --rollups-only, 1).
        #[arg(long)]
        compact_after_days: Option<u32>,
        /// Only the days' minute rollups, at their own age (no stream rule): the raw rows
        /// are left hot.
        #[arg(long, conflicts_with = "classes")]
        rollups_only: bool,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Rows, heap and index bytes per retained table and partition (raw classes and rollups),
    /// the control log and the quarantine, bytes per row; and the size the configured horizons
    /// will take at the newest registry version's declared rates. Reads only: connect as the
    /// read-only role. Row counts are PostgreSQL's estimates unless --exact.
    Storage {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        horizons: RetentionArgs,
        /// The compaction age to size the raw tables' older days for (as `sentinel run`).
        #[command(flatten)]
        compaction: CompactionAgeArgs,
        /// Count every table's rows (a scan of each) instead of reading the planner's estimates.
        #[arg(long)]
        exact: bool,
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
    /// Ask the running core for an operator claim on a writable point, or its release
    /// (over the bus as --principal; waits for the core's answer: exit 12 refused, 13 no answer).
    #[command(name = "command")]
    Claim {
        #[command(subcommand)]
        command: CommandCommand,
    },
    /// Each writable point's desired value, the claim that wins, every open claim, the newest
    /// observation and the last verification (reads the database).
    Desired {
        /// Only this point.
        point: Option<String>,
        #[command(flatten)]
        db: DbArgs,
        #[arg(long)]
        json: bool,
    },
    /// The chain behind a command: its claim, principal and every control event naming its id.
    Why {
        command_id: String,
        #[command(flatten)]
        db: DbArgs,
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
    /// Print the declared load per retention class (rows/day, bytes/day), the disk the
    /// configured horizons need at the storage format's measured cost per row, the stream an
    /// outage needs against its bound, and the derived points and rules in dependency order
    /// (exit 1 if the folder fails its checks).
    Plan {
        dir: PathBuf,
        #[command(flatten)]
        admission: plan::AdmissionArgs,
        /// The horizons to size the disk for (the flags `sentinel run` and `retention` take).
        #[command(flatten)]
        horizons: RetentionArgs,
        /// The compaction age to size the raw tables' older days for (as `sentinel run`).
        #[command(flatten)]
        compaction: CompactionAgeArgs,
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
        #[command(flatten)]
        admission: plan::AdmissionArgs,
        /// Move the history of every point whose class changes to its new class table, each in
        /// one fenced transaction with its rollups recomputed and a `class_moved` control
        /// event. Takes the single-writer lock (exit 10 while a core runs).
        #[arg(long)]
        move_class: bool,
        #[command(flatten)]
        notify: registry::NotifyArgs,
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
enum CommandCommand {
    /// Claim VALUE on POINT (true/false, a number in the point's unit, or a codebook member)
    /// for --for (default one hour; at most a week; 90, 15m, 2h, 1d).
    Set {
        point: String,
        value: String,
        #[arg(long = "for", value_parser = command::parse_duration_s)]
        for_s: Option<u64>,
        #[command(flatten)]
        ask: command::AskArgs,
    },
    /// Release --principal's claim on POINT.
    Release {
        point: String,
        #[command(flatten)]
        ask: command::AskArgs,
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
    /// Pack the indexes of every closed hot day out of the stream's reach, not compacted and
    /// not packed since its last write (`REINDEX TABLE CONCURRENTLY`, oldest first; about 184
    /// to 174 bytes a row). Run as the schema owner (exit 14 for another role), beside the
    /// running core: it takes no lock and blocks no commit or read.
    Pack {
        #[command(flatten)]
        db: DbArgs,
        #[command(flatten)]
        nats: NatsArgs,
        /// Pack a day once it ended at least this many days ago (0..=400).
        #[arg(long, default_value_t = pack::PACK_AFTER_DAYS_DEFAULT)]
        after_days: u32,
        /// The running core's compaction age: a day it compacts within a day is not packed.
        #[command(flatten)]
        compaction: CompactionAgeArgs,
        /// List what is due; rebuild nothing (any role that reads the catalogue).
        #[arg(long)]
        dry_run: bool,
        /// Decide as at this instant instead of the clock's (RFC 3339; tests replay a day's
        /// close with it).
        #[arg(long, hide = true)]
        now: Option<String>,
        /// One JSON object on stdout instead of text.
        #[arg(long)]
        json: bool,
    },
}

/// Logs go to stderr, coloured only on a terminal. Commands that print a report on stdout log
/// only warnings by default, so library INFO lines never interleave with what they print;
/// `migrate` logs INFO, each migration as it starts and ends, because an upgrade can hold the
/// lock for minutes and prints its report only at the end.
fn init_logging(format: LogFormat, command: &Command) {
    let default_filter = match command {
        Command::Run { .. } | Command::Migrate { dry_run: false, .. } => "info",
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
    quiet_on_closed_stdout(&cli.command);
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

/// A report piped into a reader that stops early (`sentinel status | head`) ends quietly, as
/// `ls | head` does, instead of panicking on "Broken pipe" in `println!`: the report commands
/// take SIGPIPE's default action (Rust ignores it, so a closed stdout is an error every print
/// would panic on). Sockets are unaffected (the standard library sends with `MSG_NOSIGNAL`).
/// The commands that run a core (`run`, `demo`) keep Rust's default, so nothing but an
/// explicit signal ends a daemon.
fn quiet_on_closed_stdout(command: &Command) {
    if matches!(command, Command::Run { .. } | Command::Demo { .. }) {
        return;
    }
    // SAFETY: called first thing in `main`, before any thread exists; `signal` with SIG_DFL
    // installs no handler code.
    #[cfg(unix)]
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

async fn dispatch(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate {
            db, dry_run: false, ..
        } => db::migrate(&db).await,
        Command::Migrate {
            db,
            dry_run: true,
            json,
        } => db::migrate_dry_run(&db, json).await,
        Command::Registry {
            command:
                RegistryCommand::Check {
                    dir,
                    admission,
                    database_url,
                    move_class,
                },
        } => registry::check(&dir, &admission.validated()?, database_url.as_deref(), move_class).await,
        Command::Registry {
            command:
                RegistryCommand::Plan {
                    dir,
                    admission,
                    horizons,
                    compaction,
                    json,
                },
        } => plan::run(
            &dir,
            &admission.validated()?,
            &horizons.config()?,
            disk::CompactAges::of(&compaction)?,
            json,
        ),
        Command::Registry {
            command:
                RegistryCommand::Load {
                    dir,
                    db,
                    admission,
                    move_class,
                    notify,
                },
        } => registry::load(&dir, &db, &admission.validated()?, move_class, &notify).await,
        Command::Registry {
            command: RegistryCommand::NatsConfig { dir, principals, out },
        } => registry::nats_config(&dir, &principals, out.as_deref()),
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
            operator,
            horizons,
        } => {
            reprocess::reprocess(reprocess::ReprocessArgs {
                retention: horizons.config()?,
                database_url: db.database_url,
                bus: reprocess::over_bus::BusArgs {
                    credentials: nats.credentials()?,
                    nats_url: nats.nats_url,
                    reply_timeout_ms,
                    operator,
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
        } => reinterpret::reinterpret(&db.database_url, &point, &at, &registry_version, json).await,
        Command::Db {
            command: DbCommand::Grants { db, writer, reader },
        } => db::grants(&db, &writer, &reader).await,
        Command::Db {
            command:
                DbCommand::Pack {
                    db,
                    nats,
                    after_days,
                    compaction,
                    dry_run,
                    now,
                    json,
                },
        } => {
            let args = pack::PackArgs {
                after_days,
                compact_after_days: compaction.after_days(),
                dry_run,
                now,
                json,
            };
            pack::run(&db.database_url, &nats, &args).await
        }
        Command::Run {
            db,
            nats,
            registry,
            ack_wait_ms,
            inflight_batches_max,
            lock_check_interval_ms,
            metrics_listen,
            tuning,
            admission,
        } => {
            let runtime_config = RuntimeConfig {
                lock_check_interval_ms,
                ..RuntimeConfig::default()
            };
            run::run(
                db,
                nats,
                registry,
                ack_wait_ms,
                inflight_batches_max,
                tuning,
                &admission.validated()?,
                runtime_config,
                metrics_listen,
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
        Command::Claim {
            command:
                CommandCommand::Set {
                    point,
                    value,
                    for_s,
                    ask,
                },
        } => command::run(&point, command::Ask::Set { value, for_s }, &ask).await,
        Command::Claim {
            command: CommandCommand::Release { point, ask },
        } => command::run(&point, command::Ask::Release, &ask).await,
        Command::Desired { point, db, json } => desired::run(&db.database_url, point.as_deref(), json).await,
        Command::Why { command_id, db, json } => why::run(&db.database_url, &command_id, json).await,
        Command::Retention {
            db,
            horizons,
            dry_run,
            json,
        } => retention::run(&db.database_url, &horizons, dry_run, json).await,
        Command::Compact {
            db,
            nats,
            from,
            through,
            classes,
            compact_after_days,
            rollups_only,
            json,
        } => {
            let default_days = if rollups_only {
                sentinel_ports::ROLLUP_COMPACT_AFTER_DAYS_DEFAULT
            } else {
                sentinel_ports::COMPACT_AFTER_DAYS_DEFAULT
            };
            let args = compact::CompactArgs {
                from,
                through,
                classes: classes.into_iter().map(ClassArg::class).collect(),
                compact_after_days: compact_after_days.unwrap_or(default_days),
                rollups_only,
                json,
            };
            compact::run(&db.database_url, &nats, &args).await
        }
        Command::Storage {
            db,
            horizons,
            compaction,
            exact,
            json,
        } => {
            storage::run(
                &db.database_url,
                &horizons,
                disk::CompactAges::of(&compaction)?,
                exact,
                json,
            )
            .await
        }
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

/// Writes the report; a reader that stopped early (`| head`) is not an error.
pub(crate) fn write_stdout(out: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    match std::io::stdout().lock().write_all(out.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing the report"),
        _ => Ok(()),
    }
}
