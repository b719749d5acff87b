//! `sentinel status`: what an operator needs to see about the single writer and the backlog
//! (core runtime spec, "Backpressure": lag is the consumer's pending count and its oldest unacked
//! age; exit criteria: cold-start duration per step), as text or as one JSON object.
//!
//! Owns: gathering the report (read-only: it never migrates, never takes the lock, never binds
//! the consumer) and printing it. A database whose schema is not this binary's is said in words,
//! and the parts that need the schema are left out rather than failing.

use anyhow::Context;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::{QuarantineReason, RetentionClass};
use sentinel_ports::Lag;
use sentinel_store_pg::{PgStore, PgStoreConfig, SchemaState};
use serde_json::{Value, json};

use crate::args::{DbArgs, NatsArgs};

/// Everything `status` reports; `None` where the part could not be read, with the reason.
struct Report {
    /// The host of the database URL this report read (the writable one when the URL names
    /// several, docs/deploy.md).
    database_host: String,
    schema: SchemaState,
    epoch: Option<u32>,
    lock_holder: Option<sentinel_store_pg::LockHolder>,
    lag: Result<Lag, String>,
    quarantine: Option<Vec<(QuarantineReason, u64)>>,
    rows: Option<[u64; 3]>,
    cold_start: Option<sentinel_ports::ColdStart>,
}

pub async fn status(db: DbArgs, nats: NatsArgs, json_out: bool) -> anyhow::Result<std::process::ExitCode> {
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    let schema = store.schema_state().await?;
    // The tables this report reads exist from version 2 on; a newer schema may have changed
    // them, so only a current one is read further.
    let readable = schema.found == Some(schema.supported);
    let lag = match NatsBus::connect(NatsBusConfig {
        url: nats.nats_url.clone(),
        credentials: nats.credentials()?,
        ..NatsBusConfig::default()
    })
    .await
    {
        Ok(bus) => sentinel_ports::Bus::lag(&bus)
            .await
            .map_err(|e| format!("unavailable ({e})")),
        Err(e) => Err(format!("NATS unreachable ({e})")),
    };
    let report = Report {
        database_host: store.host().to_owned(),
        schema,
        epoch: if readable {
            Some(store.current_epoch().await?)
        } else {
            None
        },
        lock_holder: store.lock_holder().await?,
        lag,
        quarantine: if readable {
            Some(store.quarantine_counts().await?)
        } else {
            None
        },
        rows: if readable {
            Some(store.row_counts().await?.0)
        } else {
            None
        },
        cold_start: if readable {
            store.cold_starts().await?.pop()
        } else {
            None
        },
    };
    if json_out {
        println!("{}", serde_json::to_string_pretty(&to_json(&report))?);
    } else {
        print_text(&report);
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Quarantine counts with `wrong_instance` always present: it is a misconfigured driver host,
/// not bad data, so its absence must read as zero rather than as "not checked".
fn quarantine_with_wrong_instance(counts: &[(QuarantineReason, u64)]) -> Vec<(QuarantineReason, u64)> {
    let mut all = counts.to_vec();
    if !all.iter().any(|(r, _)| *r == QuarantineReason::WrongInstance) {
        all.push((QuarantineReason::WrongInstance, 0));
        all.sort();
    }
    all
}

fn print_text(report: &Report) {
    println!("database host: {}", report.database_host);
    println!("schema: {}", report.schema.describe());
    if report.schema.relation() == "older" || report.schema.relation() == "absent" {
        println!("  run `sentinel migrate` (as the schema owner, with no core running)");
    }
    if let Some(epoch) = report.epoch {
        println!("core epoch: {epoch}");
    }
    match &report.lock_holder {
        Some(holder) => println!("lock holder: {}", holder.describe()),
        None => println!("lock holder: none"),
    }
    match &report.lag {
        Ok(lag) => println!(
            "consumer lag: pending {}, ack pending {}, oldest unacked age {}",
            lag.pending,
            lag.ack_pending,
            lag.oldest_unacked_age_ms
                .map_or("n/a".to_owned(), |ms| format!("{ms} ms"))
        ),
        Err(why) => println!("consumer lag: {why}"),
    }
    if let Some(quarantine) = &report.quarantine {
        println!("quarantine: {}", quarantine.iter().map(|(_, n)| n).sum::<u64>());
        for (reason, count) in quarantine_with_wrong_instance(quarantine) {
            println!("  {}: {count}", reason.as_str());
        }
    }
    if let Some(rows) = &report.rows {
        for class in RetentionClass::ALL {
            println!("rows in observation_{}: {}", class.as_str(), rows[class.index()]);
        }
    }
    if report.schema.found == Some(report.schema.supported) {
        match &report.cold_start {
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
    }
}

fn to_json(report: &Report) -> Value {
    json!({
        "database_host": report.database_host,
        "schema": {
            "found": report.schema.found,
            "supported": report.schema.supported,
            "relation": report.schema.relation(),
        },
        "core_epoch": report.epoch,
        "lock_holder": report.lock_holder.as_ref().map(|h| json!({
            "backend_pid": h.backend_pid,
            "application_name": h.application_name,
            "epoch": h.epoch(),
            "backend_start": h.backend_start.map(|t| t.to_rfc3339()),
        })),
        "consumer_lag": match &report.lag {
            Ok(lag) => json!({
                "pending": lag.pending,
                "ack_pending": lag.ack_pending,
                "oldest_unacked_age_ms": lag.oldest_unacked_age_ms,
            }),
            Err(why) => json!({ "error": why }),
        },
        "quarantine": report.quarantine.as_ref().map(|q| {
            let by_reason: serde_json::Map<String, Value> = quarantine_with_wrong_instance(q)
                .into_iter()
                .map(|(reason, n)| (reason.as_str().to_owned(), json!(n)))
                .collect();
            json!({ "total": q.iter().map(|(_, n)| n).sum::<u64>(), "by_reason": by_reason })
        }),
        "rows": report.rows.map(|rows| {
            let by_class: serde_json::Map<String, Value> = RetentionClass::ALL
                .iter()
                .map(|c| (c.as_str().to_owned(), json!(rows[c.index()])))
                .collect();
            Value::Object(by_class)
        }),
        "last_cold_start": report.cold_start.as_ref().map(|s| json!({
            "epoch": s.epoch,
            "started_at": s.started_at.to_rfc3339(),
            "backend_pid": s.backend_pid,
            "application_name": s.application_name,
            "ready_at": s.ready_at.map(|t| t.to_rfc3339()),
            "steps": s.steps.iter().map(|st| json!({"step": st.step, "duration_us": st.duration_us})).collect::<Vec<_>>(),
            "total_us": s.steps.iter().map(|st| st.duration_us).sum::<u64>(),
        })),
    })
}
