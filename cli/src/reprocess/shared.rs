//! What both paths of `sentinel reprocess` share — the lock-taking run ([`super`]) and the ask
//! of a running core ([`super::over_bus`]) — and `sentinel reinterpret` too: the arguments,
//! the refusal's exit code, connecting, resolving a registry version, and printing the
//! offenders and the report. Below both paths, so neither imports the other.

use std::sync::Arc;

use anyhow::Context;
use sentinel_core::Registry;
use sentinel_ports::Store;
use sentinel_runtime::registry_dir;
use sentinel_store_pg::{PgStore, PgStoreConfig};

use sentinel_driver::Credentials;

/// How to reach the running core.
pub struct BusArgs {
    pub nats_url: String,
    pub credentials: Credentials,
    /// How long to wait for the answer (a real run answers when it is done).
    pub reply_timeout_ms: u64,
    /// The operator principal asking (its inbox and its request subject).
    pub operator: String,
}

/// Exit code of a reprocess refused because its scope reaches past a raw horizon.
pub const EXIT_REFUSED: u8 = 11;

/// What `sentinel reprocess` was asked.
pub struct ReprocessArgs {
    pub database_url: String,
    /// How to reach a running core, and how long to wait for its answer.
    pub bus: BusArgs,
    pub glob: String,
    pub from: String,
    pub to: Option<String>,
    pub version: String,
    pub dry_run: bool,
    pub json: bool,
    pub chunk_rows: usize,
    /// The raw horizons the refusal checks when the command runs it itself.
    pub retention: sentinel_core::retention::RetentionConfig,
}

pub(crate) async fn connect(database_url: &str) -> anyhow::Result<PgStore> {
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    Ok(store)
}

/// `current` or a version number.
pub(crate) async fn registry(store: &PgStore, version: &str) -> anyhow::Result<Arc<Registry>> {
    let wanted = match version {
        "current" => None,
        n => Some(n.parse::<i32>().ok().filter(|n| *n > 0).with_context(|| {
            format!("--registry-version must be `current` or a positive number, got {n:?}")
        })?),
    };
    let stored = store.load_registry(wanted).await?.with_context(|| match wanted {
        Some(n) => format!("registry version {n} is not stored"),
        None => "no registry version is stored (run `sentinel registry load` first)".to_owned(),
    })?;
    Ok(registry_dir::compile_stored_shared(stored)?)
}

pub(crate) fn print_offenders(offenders: &[sentinel_core::reprocess::Offender]) {
    eprintln!(
        "sentinel: reprocess refused, nothing changed: {} point(s) reach past their class's raw horizon \
         (narrow the glob or the range):",
        offenders.len()
    );
    for o in offenders {
        let why = match o.beyond {
            sentinel_core::reprocess::Beyond::Horizon => format!(
                "class {} keeps raw rows {} days, from {}",
                o.class.as_str(),
                o.horizon_days,
                o.kept_from
            ),
            sentinel_core::reprocess::Beyond::OldestPartition => format!(
                "class {} (horizon {} days, kept from {}): its oldest partition starts {}",
                o.class.as_str(),
                o.horizon_days,
                o.kept_from,
                o.oldest_partition
                    .map_or_else(|| "-".to_owned(), |t| t.to_string())
            ),
        };
        eprintln!(
            "  {}: needs rows ingested from {}; {why}",
            o.point_id, o.needs_from
        );
    }
}

/// A real run's report, as JSON (`--json`) or text; the same on both paths.
pub(crate) fn print_report(report: &serde_json::Value, json: bool) {
    if json {
        println!("{report}");
        return;
    }
    let field = |name: &str| report.get(name).cloned().unwrap_or(serde_json::Value::Null);
    println!(
        "reprocessed {} row(s) of {} point(s) to registry version {} (from versions {}) under epoch {}",
        field("rows"),
        field("points"),
        field("registry_version"),
        field("old_versions"),
        field("epoch")
    );
    for grain in ["rollup_1m", "rollup_1h"] {
        if let Some(r) = report.get(grain).filter(|r| !r.is_null()) {
            println!(
                "{grain} refreshed over [{}, {}): {} buckets",
                r["from"].as_str().unwrap_or("?"),
                r["to"].as_str().unwrap_or("?"),
                r["buckets"]
            );
        }
    }
    println!(
        "point_state rebuilt for {} point(s); control event {}; in {:.3} s",
        field("points_rebuilt"),
        field("control_event_seq"),
        field("duration_us").as_f64().unwrap_or(0.0) / 1e6
    );
}
