//! `sentinel reprocess` (ingest spec, "Reprocess"; issue 9 item 3): the CLI edge of
//! `sentinel_runtime::reprocess`.
//!
//! A real reprocess is a write, so it is single-writer: when no core runs, the command takes
//! the lock and runs it itself; while a core holds the lock, the command asks that core over
//! the bus (`sentinel.reprocess.request`, request/reply, as the operator principal) and the core
//! runs it under its own epoch and registry version (`sentinel_core::reprocess_request`), a
//! dry run too ([`over_bus`]). A scope that reaches
//! past a class's raw horizon exits [`EXIT_REFUSED`] on either path, naming every offending
//! point, and changes nothing.

use std::io::IsTerminal;
use std::process::ExitCode;

use std::time::{Duration, Instant};

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};
use sentinel_core::control::PRINCIPAL_REPROCESS_CLI;
use sentinel_core::{Config, Micros};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Lease, Store, StoreError};

use sentinel_runtime::reprocess::{self, Plan, ReprocessError, Request};
use sentinel_runtime::reprocess_job::{plan_json, report_json};

pub mod over_bus;
pub mod shared;

use crate::args::parse_instant;
pub use shared::{EXIT_REFUSED, ReprocessArgs};
use shared::{connect, print_offenders, print_report, registry};

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
            return over_bus::ask(&args, registry.version).await;
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
            return over_bus::ask(&args, registry.version).await;
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
    crate::db::finish_under_lock(&store, lease, "reprocess", duration_us).await?;
    let json = report_json(&report, plan.points.len(), registry.version, duration_us);
    print_report(&json, args.json);
    Ok(ExitCode::SUCCESS)
}

fn scope_error(e: ReprocessError) -> anyhow::Error {
    anyhow::Error::new(e)
}
