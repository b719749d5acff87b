//! The `healthlog` command line (issue 10 "Commands"): argument model, output formatting and
//! exit codes. Paths and the database come from flags or the environment with defaults.
//!
//! Exit codes: 0 done; 1 error; 2 usage (clap); 3 the database schema refused (from the future,
//! or not equal on a read-only open); 4 done, but some delivery failed or was left pending.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

pub const EXIT_OK: u8 = 0;
pub const EXIT_ERROR: u8 = 1;
pub const EXIT_SCHEMA: u8 = 3;
pub const EXIT_DELIVERY_NOT_FOLDED: u8 = 4;

#[derive(Debug, Parser)]
#[command(
    name = "healthlog",
    version,
    about = "A store for Health Auto Export deliveries: journal, archive, hourly objects."
)]
pub struct Cli {
    /// The SQLite store.
    #[arg(long, env = "HEALTHLOG_DB", default_value = "healthlog.db", global = true)]
    pub db: PathBuf,
    /// The folder of archived delivery bodies.
    #[arg(
        long,
        env = "HEALTHLOG_ARCHIVE",
        default_value = "healthlog-archive",
        global = true
    )]
    pub archive: PathBuf,
    /// Print JSON for scripts instead of text.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the store or migrate it to this binary's schema (refuses a newer schema).
    Migrate,
    /// Archive and journal each FILE, then fold everything pending; prints id, status, counters.
    Ingest {
        /// The layer these deliveries belong to (e.g. minute, hour): HAE bodies do not carry it.
        #[arg(long)]
        layer: String,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Fold every pending delivery in journal order.
    Fold,
    /// List journal rows.
    Deliveries {
        /// Only rows with this parse status: pending, parsed, partial or failed.
        #[arg(long)]
        status: Option<String>,
    },
    /// Layers of a metric with their bounds and point counts (read from the covering index).
    Catalog {
        #[arg(long)]
        metric: String,
    },
    /// The store's fingerprint (read-only; the schema must equal this binary's).
    Fingerprint,
    /// Refold the whole journal into a fresh store at NEW (same archive).
    Rebuild {
        #[arg(long)]
        into: PathBuf,
    },
    /// Write a deterministic sample corpus (HAE JSON) and its oracle.
    Sample {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 14)]
        days: u32,
        #[arg(long)]
        out: PathBuf,
    },
}

/// A progress bar on stderr when it is a terminal and the output is for people; hidden otherwise.
pub fn progress(json: bool, what: &str) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(0);
    let style = ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} deliveries ({elapsed})")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.set_message(what.to_string());
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}
