//! `sentinel reprocess` and `sentinel reinterpret` (ingest spec, "Reprocess"; issue 9 items 3
//! and 5): the CLI edge of `sentinel_runtime::reprocess`.
//!
//! A real reprocess is a write, so it is single-writer: when no core runs, the command takes
//! the lock and runs it itself; while a core holds the lock, the command asks that core over
//! the bus (`sentinel.reprocess.request`, request/reply, as the operator principal) and the core
//! runs it under its own epoch and registry version (`sentinel_core::reprocess_request`), a
//! dry run too (`bus_ask.rs`). `reinterpret` only reads and takes no lock. A scope that reaches
//! past a class's raw horizon exits [`EXIT_REFUSED`] on either path, naming every offending
//! point, and changes nothing.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use indicatif::{ProgressBar, ProgressStyle};
use sentinel_core::control::PRINCIPAL_REPROCESS_CLI;
use sentinel_core::{CanonicalValue, Config, Micros, Registry};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Lease, StartupStep, Store, StoreError};
use sentinel_runtime::registry_dir;
use sentinel_runtime::reprocess::{self, Plan, ReprocessError, Request};
use sentinel_runtime::reprocess_job::{plan_json, report_json};
use sentinel_store_pg::{PgStore, PgStoreConfig};

use super::rollup::parse_instant;

/// Exit code of a reprocess refused because its scope reaches past a raw horizon.
pub const EXIT_REFUSED: u8 = 11;

pub struct ReprocessArgs {
    pub database_url: String,
    /// How to reach a running core, and how long to wait for its answer.
    pub bus: super::bus_ask::BusArgs,
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

async fn connect(database_url: &str) -> anyhow::Result<PgStore> {
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    Ok(store)
}

/// `current` or a version number.
async fn registry(store: &PgStore, version: &str) -> anyhow::Result<Arc<Registry>> {
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

pub(crate) fn print_plan(plan: &Plan, config: &Config, now: Micros) {
    println!(
        "scope: {} point(s) under registry version {}, {} row(s), versions seen {:?}",
        plan.points.len(),
        plan.version,
        plan.rows,
        plan.old_versions
    );
    for e in &plan.extents {
        println!(
            "  class {}: {} row(s); raw horizon {} days (kept from {})",
            e.class.as_str(),
            e.rows,
            config.retention.raw_horizon_days(e.class),
            config.retention.raw_kept_from(e.class, now)
        );
    }
    match (plan.minute_range, plan.hour_range) {
        (Some(m), Some(h)) => {
            println!("would refresh rollup_1m over [{}, {})", m.0, m.1);
            println!("would refresh rollup_1h over [{}, {})", h.0, h.1);
        }
        _ => println!("no row in the range: no rollup to refresh"),
    }
    println!("estimate: about {:.1} s", plan.estimate_ms as f64 / 1e3);
}

fn print_refusal(plan: &Plan, json: bool, config: &Config, now: Micros) {
    if json {
        println!("{}", plan_json(plan, config, now));
    }
    print_offenders(&plan.offenders);
}

/// The refusal's message on stderr, naming every offender.
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

fn progress_bar(json: bool, rows: u64) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(rows);
    let style = ProgressStyle::with_template("reprocess {bar:40} {pos}/{len} rows ({elapsed}, eta {eta})")
        .unwrap_or_else(|_| ProgressStyle::default_bar());
    bar.set_style(style);
    bar.enable_steady_tick(Duration::from_millis(250));
    bar
}

pub async fn reprocess(args: ReprocessArgs) -> anyhow::Result<ExitCode> {
    let from = parse_instant(&args.from)?;
    let to = args.to.as_deref().map(parse_instant).transpose()?;
    if to.is_some_and(|to| to <= from) {
        bail!("--to must be after --from");
    }
    if !(1..=reprocess::CHUNK_ROWS_MAX).contains(&args.chunk_rows) {
        bail!("--chunk-rows must be within 1..={}", reprocess::CHUNK_ROWS_MAX);
    }
    let config = Config {
        retention: args.retention.clone(),
        ..Config::default()
    };
    let store = connect(&args.database_url).await?;
    let request = Request {
        glob: args.glob.clone(),
        from,
        to,
        chunk_rows: args.chunk_rows,
    };

    if args.dry_run {
        let registry = registry(&store, &args.version).await?;
        if let Ok(Some(_holder)) = store.lock_holder().await {
            // A core runs: it plans under its own registry version (the version rule).
            return super::bus_ask::ask(&args, registry.version).await;
        }
        let now = SystemClock.now();
        let plan = reprocess::plan(&store, &registry, &config, &request, now)
            .await
            .map_err(scope_error)?;
        if plan.refused() {
            print_refusal(&plan, args.json, &config, now);
            return Ok(ExitCode::from(EXIT_REFUSED));
        }
        if args.json {
            println!("{}", plan_json(&plan, &config, now));
        } else {
            print_plan(&plan, &config, now);
        }
        return Ok(ExitCode::SUCCESS);
    }

    // A write: under the lock, and the scope is validated under it, so nothing moves between
    // the check and the run.
    let lease = match store.acquire().await {
        Ok(lease) => lease,
        Err(StoreError::LockHeld) => {
            // A core runs: it performs the reprocess, asked over the bus.
            let registry = registry(&store, &args.version).await?;
            return super::bus_ask::ask(&args, registry.version).await;
        }
        Err(e) => return Err(e.into()),
    };
    let registry = registry(&store, &args.version).await?;
    let now = SystemClock.now();
    let plan = reprocess::plan(&store, &registry, &config, &request, now)
        .await
        .map_err(scope_error)?;
    if plan.refused() {
        lease.release().await?;
        print_refusal(&plan, args.json, &config, now);
        return Ok(ExitCode::from(EXIT_REFUSED));
    }
    let started = Instant::now();
    let bar = progress_bar(args.json, plan.rows);
    let mut progress = |done: u64| bar.set_position(done);
    let report = reprocess::run(
        &store,
        lease.epoch(),
        &registry,
        &config,
        &request,
        &plan,
        PRINCIPAL_REPROCESS_CLI,
        now,
        reprocess::Projecting::Checkpoint,
        &mut progress,
    )
    .await
    .map_err(scope_error)?;
    bar.finish_and_clear();
    let duration_us = started.elapsed().as_micros() as u64;
    store
        .record_cold_start(
            lease.epoch(),
            vec![StartupStep {
                step: "reprocess".into(),
                duration_us,
            }],
        )
        .await?;
    lease.release().await?;
    let json = report_json(&report, plan.points.len(), registry.version, duration_us);
    print_report(&json, args.json);
    Ok(ExitCode::SUCCESS)
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

fn scope_error(e: ReprocessError) -> anyhow::Error {
    anyhow::Error::new(e)
}

fn value_json(value: &Option<CanonicalValue>) -> serde_json::Value {
    match value {
        None => serde_json::Value::Null,
        Some(CanonicalValue::Num(v)) => serde_json::json!(v),
        Some(CanonicalValue::Bool(v)) => serde_json::json!(v),
        Some(CanonicalValue::Text(v)) => serde_json::json!(&**v),
    }
}

pub async fn reinterpret(
    database_url: &str,
    point: &str,
    at: &str,
    version: &str,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let at = parse_instant(at)?;
    let store = connect(database_url).await?;
    let registry = registry(&store, version).await?;
    let config = Config::default();
    let found = reprocess::reinterpret(&store, &registry, &config, point, at).await?;
    if found.is_empty() {
        bail!("no stored row of {point} was observed at {at}");
    }
    if json {
        let rows: Vec<serde_json::Value> = found
            .iter()
            .map(|r| {
                serde_json::json!({
                    "key": {
                        "driver_instance": &*r.stored.key.driver_instance,
                        "source_epoch": r.stored.key.source_epoch,
                        "source_seq": r.stored.key.source_seq,
                    },
                    "ingested_at": r.stored.ingested_at.to_rfc3339(),
                    "class": r.stored.class.as_str(),
                    "native": { "num": r.stored.native_num, "text": &r.stored.native_text,
                                "unit": &r.stored.unit_native },
                    "stored": { "value": value_json(&r.stored.value), "quality": r.stored.quality.as_str(),
                                "reason": &r.stored.reason, "registry_version": r.stored.registry_version },
                    "under": { "value": value_json(&r.under.value), "quality": r.under.quality.as_str(),
                               "reason": &r.under.reason, "registry_version": r.under.registry_version },
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "point_id": point, "observed_at": at.to_rfc3339(), "rows": rows })
        );
    } else {
        for r in &found {
            println!(
                "{point} observed {at}, ingested {} ({}:{}:{}), class {}",
                r.stored.ingested_at,
                r.stored.key.driver_instance,
                r.stored.key.source_epoch,
                r.stored.key.source_seq,
                r.stored.class.as_str()
            );
            println!(
                "  native: {} {}",
                r.stored
                    .native_num
                    .map(|n| n.to_string())
                    .or_else(|| r.stored.native_text.clone())
                    .unwrap_or_else(|| "(see stored text)".into()),
                r.stored.unit_native.as_deref().unwrap_or("")
            );
            println!(
                "  stored under v{}: value {} quality {} reason {}",
                r.stored.registry_version,
                value_json(&r.stored.value),
                r.stored.quality.as_str(),
                r.stored.reason.as_deref().unwrap_or("-")
            );
            println!(
                "  under v{}:  value {} quality {} reason {}",
                r.under.registry_version,
                value_json(&r.under.value),
                r.under.quality.as_str(),
                r.under.reason.as_deref().unwrap_or("-")
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
