//! The `healthlog` command line (issue 10 "Commands"): argument model, output formatting and
//! exit codes. Paths and the database come from flags or the environment with defaults.
//!
//! Exit codes: 0 done; 1 error; 2 usage (clap); 3 the database schema refused (from the future,
//! or not equal on a read-only open); 4 done, but some delivery failed or was left pending;
//! 5 `status`: no delivery arrived within `--stale-after`.

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressStyle};

pub const EXIT_OK: u8 = 0;
pub const EXIT_ERROR: u8 = 1;
pub const EXIT_SCHEMA: u8 = 3;
pub const EXIT_DELIVERY_NOT_FOLDED: u8 = 4;
pub const EXIT_STALE: u8 = 5;

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
    /// How long a statement waits on a locked database before it counts as busy.
    #[arg(
        long,
        env = "HEALTHLOG_BUSY_TIMEOUT_MS",
        default_value_t = 5_000,
        global = true
    )]
    pub busy_timeout_ms: u64,
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
    /// Receive Health Auto Export deliveries over HTTP(S): POST /hae/{layer}, GET /healthz.
    /// Answers 200 only after the body is archived (fsynced) and journaled; folds in the
    /// background; SIGTERM stops gracefully (exit 0).
    Serve {
        /// Address to listen on, e.g. 127.0.0.1:8080 (behind a reverse proxy) or 0.0.0.0:8443 (TLS).
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// A file holding the bearer token HAE sends (`Authorization: Bearer TOKEN`), at least 16 bytes.
        #[arg(long)]
        token_file: PathBuf,
        /// PEM certificate chain: serve HTTPS. Needs --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<PathBuf>,
        /// PEM private key for --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<PathBuf>,
        /// The intake spool (default: `.intake` inside the archive folder).
        #[arg(long)]
        spool: Option<PathBuf>,
        /// Receive and journal only; fold with `healthlog fold` (from cron, or a second machine
        /// reading a copy). Deliveries stay `pending` until then.
        #[arg(long)]
        no_fold: bool,
    },
    /// The last delivery per automation, the newest point per metric and layer; exits 5 when
    /// no delivery arrived within --stale-after (for cron).
    Status {
        /// e.g. 90s, 45m, 26h, 8d.
        #[arg(long, default_value = "26h")]
        stale_after: String,
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
