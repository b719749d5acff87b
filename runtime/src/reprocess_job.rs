//! A reprocess run by the running core's runtime, asked over the bus (issue 9 item 3; ingest
//! spec, "Reprocess"), and the JSON both reprocess paths report.
//!
//! Owns: [`run_job`], which turns the core's `Effect::Reprocess` into its
//! `Input::ReprocessFinished`: plan and validate the scope under the core's registry, then, for
//! a real run, [`crate::reprocess::run`] fenced on the core's epoch with
//! [`Projecting::RunningCore`] (nothing is checkpointed here; the core's projection takes the
//! log heads where no newer row moved the point). No rule runs and nothing is published.
//! Also [`plan_json`] and [`report_json`]: the objects `sentinel reprocess --json` prints, the
//! same whether the command ran it under the lock or a core did.

use std::sync::Arc;

use sentinel_core::reprocess::Offender;
use sentinel_core::reprocess_request::{JobOutcome, ReprocessFinished, ReprocessJob, ReprocessReply};
use sentinel_core::{Config, Micros, Registry};

use crate::reprocess::{self, Plan, Projecting, Report, ReprocessError, Request};
use sentinel_ports::{Store, StoreError};

pub fn offender_json(o: &Offender) -> serde_json::Value {
    serde_json::json!({
        "point_id": &*o.point_id,
        "class": o.class.as_str(),
        "horizon_days": o.horizon_days,
        "kept_from": o.kept_from.to_rfc3339(),
        "oldest_partition": o.oldest_partition.map(|t| t.to_rfc3339()),
        "needs_from": o.needs_from.to_rfc3339(),
        "beyond": o.beyond,
    })
}

fn range_json(range: Option<(Micros, Micros)>) -> serde_json::Value {
    range.map_or(
        serde_json::Value::Null,
        |(from, to)| serde_json::json!({ "from": from.to_rfc3339(), "to": to.to_rfc3339() }),
    )
}

/// A dry run's (or a refusal's) report.
pub fn plan_json(plan: &Plan, config: &Config, now: Micros) -> serde_json::Value {
    serde_json::json!({
        "registry_version": plan.version,
        "points": plan.points.len(),
        "rows": plan.rows,
        "old_versions": plan.old_versions,
        "classes": plan.extents.iter().map(|e| serde_json::json!({
            "class": e.class.as_str(),
            "rows": e.rows,
            "horizon_days": config.retention.raw_horizon_days(e.class),
            "kept_from": config.retention.raw_kept_from(e.class, now).to_rfc3339(),
            "oldest_partition": e.oldest_partition.map(|t| t.to_rfc3339()),
        })).collect::<Vec<_>>(),
        "rollup_1m": range_json(plan.minute_range),
        "rollup_1h": range_json(plan.hour_range),
        "estimate_ms": plan.estimate_ms,
        "refused": plan.refused(),
        "offenders": plan.offenders.iter().map(offender_json).collect::<Vec<_>>(),
    })
}

/// A real run's report.
pub fn report_json(report: &Report, points: usize, version: i32, duration_us: u64) -> serde_json::Value {
    serde_json::json!({
        "rows": report.rows,
        "points": points,
        "registry_version": version,
        "old_versions": report.record.old_versions,
        "rollup_1m": report.refresh.map(|r| serde_json::json!({
            "from": r.minute_range.0.to_rfc3339(), "to": r.minute_range.1.to_rfc3339(),
            "buckets": r.minute_buckets })),
        "rollup_1h": report.refresh.map(|r| serde_json::json!({
            "from": r.hour_range.0.to_rfc3339(), "to": r.hour_range.1.to_rfc3339(),
            "buckets": r.hour_buckets })),
        "points_rebuilt": report.states.len(),
        "control_event_seq": report.event_seq,
        "epoch": report.record.epoch,
        "duration_us": duration_us,
    })
}

/// Runs the core's reprocess job. `now` reads the runtime's clock (the run's `now` and its
/// duration).
pub async fn run_job<S: Store>(
    store: &S,
    registry: Arc<Registry>,
    config: &Config,
    job: ReprocessJob,
    now: &(dyn Fn() -> Micros + Send + Sync),
) -> ReprocessFinished {
    let request_id = job.ask.request_id.clone();
    let outcome = match job_outcome(store, &registry, config, &job, now).await {
        Ok(outcome) => outcome,
        Err(e) => {
            let fenced = matches!(e, ReprocessError::Store(StoreError::Fenced { .. }));
            tracing::error!(request_id, error = %e, fenced, "reprocess asked over the bus failed");
            JobOutcome::Failed {
                why: e.to_string(),
                fenced,
            }
        }
    };
    ReprocessFinished { request_id, outcome }
}

async fn job_outcome<S: Store>(
    store: &S,
    registry: &Registry,
    config: &Config,
    job: &ReprocessJob,
    now: &(dyn Fn() -> Micros + Send + Sync),
) -> Result<JobOutcome, ReprocessError> {
    let ask = &job.ask;
    let request = Request {
        glob: ask.glob.clone(),
        from: Micros(ask.from_us),
        to: ask.to_us.map(Micros),
        chunk_rows: ask.chunk_rows,
    };
    let started = now();
    let plan = reprocess::plan(store, registry, config, &request, started).await?;
    let plan_report = plan_json(&plan, config, started);
    if plan.refused() {
        return Ok(JobOutcome::Read {
            reply: ReprocessReply::Refused {
                epoch: job.epoch,
                plan: plan_report,
            },
        });
    }
    if ask.dry_run {
        return Ok(JobOutcome::Read {
            reply: ReprocessReply::Planned {
                epoch: job.epoch,
                plan: plan_report,
            },
        });
    }
    tracing::info!(
        request_id = ask.request_id,
        rows = plan.rows,
        epoch = job.epoch,
        "reprocess asked over the bus"
    );
    let report = reprocess::run(
        store,
        job.epoch,
        registry,
        config,
        &request,
        &plan,
        &ask.principal,
        started,
        Projecting::RunningCore,
        &mut |_| {},
    )
    .await?;
    let duration_us = now().saturating_sub(started).max(0) as u64;
    let json = report_json(&report, plan.points.len(), registry.version, duration_us);
    Ok(JobOutcome::Done {
        heads: report.heads,
        report: json,
    })
}
