//! `sentinel reprocess` while a core holds the lock: the request goes to that core over the bus
//! (`sentinel.reprocess.request.<operator>`, request/reply, as that operator principal; issue 9
//! item 3, issue 21 item 2) and
//! the core runs it (`sentinel_core::reprocess_request`, `sentinel_runtime::reprocess_job`). Prints
//! the same report as the lock-taking path and exits with the same codes, plus
//! [`EXIT_CORE_REFUSED`] (the core would not start it) and [`EXIT_NO_CORE`] (no core answered
//! in time).

use anyhow::{Context, bail};
use sentinel_bus_nats::{RequestFailed, request_reply};
use sentinel_core::control::PRINCIPAL_REPROCESS_CLI;
use sentinel_core::reprocess_request::{ReprocessAsk, ReprocessReply};
use sentinel_core::wire::{is_principal_name, reprocess_request_subject};

use sentinel_driver::connect::BusConnection;
use std::process::ExitCode;

pub use super::shared::BusArgs;
use super::shared::{EXIT_REFUSED, ReprocessArgs, print_report};
use crate::args::parse_instant;

/// Exit code when the running core would not start the reprocess: another one runs (`busy`),
/// it runs another registry version than the one asked (`version`), it is stopping, or it
/// found the request malformed.
pub const EXIT_CORE_REFUSED: u8 = 12;
/// Exit code when a core holds the lock but none answered on the bus in time.
pub const EXIT_NO_CORE: u8 = 13;

/// Longest wait accepted for the core's answer.
pub const REPLY_TIMEOUT_MS_MAX: u64 = 24 * 3_600_000;

/// Asks the running core; `version` is the registry version the operator asked for, resolved
/// (`current` is the newest stored).
pub async fn ask(args: &ReprocessArgs, version: i32) -> anyhow::Result<ExitCode> {
    if !(1..=REPLY_TIMEOUT_MS_MAX).contains(&args.bus.reply_timeout_ms) {
        bail!("--reply-timeout-ms must be within 1..={REPLY_TIMEOUT_MS_MAX}");
    }
    if !is_principal_name(&args.bus.operator) {
        bail!("--operator must be 1 to 64 ASCII letters, digits, '_' or '-' (a principal's subject token)");
    }
    let from = parse_instant(&args.from)?;
    let to = args.to.as_deref().map(parse_instant).transpose()?;
    let ask = ReprocessAsk {
        request_id: format!("cli-{}-{}", std::process::id(), from.0),
        // The core records the principal the subject names; this says who sent it by hand.
        principal: PRINCIPAL_REPROCESS_CLI.to_owned(),
        glob: args.glob.clone(),
        from_us: from.0,
        to_us: to.map(|t| t.0),
        registry_version: version,
        dry_run: args.dry_run,
        chunk_rows: args.chunk_rows,
    };
    let payload = serde_json::to_vec(&ask).context("encoding the reprocess request")?;
    let connection = BusConnection::connect(&args.bus.nats_url, &args.bus.operator, &args.bus.credentials)
        .await
        .context("connecting to NATS to ask the running core")?;
    if !args.json {
        eprintln!(
            "sentinel: a core holds the single-writer lock; asking it to {} over the bus",
            if args.dry_run {
                "plan the reprocess"
            } else {
                "reprocess"
            }
        );
    }
    let payload = match request_reply(
        &connection,
        &reprocess_request_subject(&args.bus.operator),
        payload.into(),
        args.bus.reply_timeout_ms,
    )
    .await
    {
        Ok(payload) => payload,
        Err(e) => {
            let why = match e {
                RequestFailed::NoResponders(_) => {
                    "nothing listens on the bus for it (the lock holder may be another \
                     command rather than a core, or the core is not connected to this server)"
                        .to_owned()
                }
                RequestFailed::TimedOut(ms) => format!(
                    "no answer within {ms} ms (a real run answers when it is done: raise \
                     --reply-timeout-ms; the core's log and `reprocess` control event say whether it finished)"
                ),
                RequestFailed::Other(why) => why,
            };
            eprintln!("sentinel: a core holds the lock but did not answer the reprocess request: {why}");
            return Ok(ExitCode::from(EXIT_NO_CORE));
        }
    };
    let reply: ReprocessReply =
        serde_json::from_slice(&payload).context("the core's answer is not a reprocess reply")?;
    Ok(print_reply(reply, args.json))
}

fn print_reply(reply: ReprocessReply, json: bool) -> ExitCode {
    let refused_by_core = |why: String, reply: &ReprocessReply| {
        if json {
            println!("{}", serde_json::to_value(reply).unwrap_or_default());
        }
        eprintln!("sentinel: the running core refused the reprocess, nothing changed: {why}");
        ExitCode::from(EXIT_CORE_REFUSED)
    };
    match &reply {
        ReprocessReply::Planned { plan, .. } => {
            if json {
                println!("{plan}");
            } else {
                print_plan_json(plan);
            }
            ExitCode::SUCCESS
        }
        ReprocessReply::Refused { plan, .. } => {
            if json {
                println!("{plan}");
            }
            let offenders = plan["offenders"].as_array().cloned().unwrap_or_default();
            eprintln!(
                "sentinel: reprocess refused, nothing changed: {} point(s) reach past their class's raw horizon \
                 (narrow the glob or the range):",
                offenders.len()
            );
            for o in &offenders {
                eprintln!(
                    "  {}: needs rows ingested from {}; class {} keeps raw rows {} days, from {} ({})",
                    o["point_id"].as_str().unwrap_or("?"),
                    o["needs_from"].as_str().unwrap_or("?"),
                    o["class"].as_str().unwrap_or("?"),
                    o["horizon_days"],
                    o["kept_from"].as_str().unwrap_or("?"),
                    o["beyond"].as_str().unwrap_or("?"),
                );
            }
            ExitCode::from(EXIT_REFUSED)
        }
        ReprocessReply::Done {
            report,
            points_replaced,
            points_kept,
            ..
        } => {
            print_report(report, json);
            if !json {
                println!(
                    "the running core's projection took {points_replaced} rebuilt point(s); \
                     {points_kept} kept a newer row"
                );
            }
            ExitCode::SUCCESS
        }
        ReprocessReply::Busy { running, .. } => refused_by_core(
            format!("another reprocess ({running}) is running; ask again when it is done"),
            &reply,
        ),
        ReprocessReply::Version {
            core_version, asked, ..
        } => refused_by_core(
            format!(
                "it runs registry version {core_version}, not {asked}; a running core reprocesses only to the \
                 version it runs (stop it to reprocess to another)"
            ),
            &reply,
        ),
        ReprocessReply::Invalid { why, .. } => refused_by_core(format!("malformed request: {why}"), &reply),
        ReprocessReply::Draining { .. } => refused_by_core("it is stopping".to_owned(), &reply),
        ReprocessReply::Failed { why, epoch } => {
            if json {
                println!("{}", serde_json::to_value(&reply).unwrap_or_default());
            }
            eprintln!(
                "sentinel: the running core's reprocess failed (epoch {epoch}): {why}; whole chunks may be done, \
                 run the same command again to complete it"
            );
            ExitCode::FAILURE
        }
    }
}

/// A dry run's report as text, from the plan JSON the core sent.
fn print_plan_json(plan: &serde_json::Value) {
    println!(
        "scope: {} point(s) under registry version {}, {} row(s), versions seen {}",
        plan["points"], plan["registry_version"], plan["rows"], plan["old_versions"]
    );
    for class in plan["classes"].as_array().into_iter().flatten() {
        println!(
            "  class {}: {} row(s); raw horizon {} days (kept from {})",
            class["class"].as_str().unwrap_or("?"),
            class["rows"],
            class["horizon_days"],
            class["kept_from"].as_str().unwrap_or("?")
        );
    }
    match (plan["rollup_1m"].as_object(), plan["rollup_1h"].as_object()) {
        (Some(m), Some(h)) => {
            println!("would refresh rollup_1m over [{}, {})", m["from"], m["to"]);
            println!("would refresh rollup_1h over [{}, {})", h["from"], h["to"]);
        }
        _ => println!("no row in the range: no rollup to refresh"),
    }
    println!(
        "estimate: about {:.1} s",
        plan["estimate_ms"].as_f64().unwrap_or(0.0) / 1e3
    );
}
