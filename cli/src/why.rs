//! `sentinel why COMMAND_ID [--json]` (issue 21 item 10): the chain from a command back to
//! what caused it, from `control_event`: every event the id names in log order — the request's
//! `claim_set` or `claim_released` (or its `command_refused`), the `command_issued` (again with
//! the same id when the outbox re-sent it), the driver's `command_result`, `command_timeout`s and
//! the verification — each with its principal; and, for a command the core issued on its own
//! (a lapse, `lapse-…`, or the end of a minimum on/off hold, `hold-…`), the `claim_set` of the
//! holder it was issued for. A rule's claim (issue 22 item 7) shows its provenance: the rule,
//! the registry version it was evaluated under and the keys of the committed rows that made its
//! condition true (`provenance` in `--json`). Reads only. Exit 1 when the log names the id
//! nowhere.

use std::process::ExitCode;

use anyhow::Context;
use sentinel_ports::StoredControlEvent;
use sentinel_store_pg::{PgStore, PgStoreConfig};

pub async fn run(database_url: &str, command_id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    let events = store.events_of_command(command_id).await?;
    if events.is_empty() {
        eprintln!("sentinel: no control event names command id {command_id}");
        return Ok(ExitCode::from(1));
    }
    let has_claim = events
        .iter()
        .any(|e| e.kind == "claim_set" || e.kind == "claim_released");
    let cause = match events.iter().find(|e| e.kind == "command_issued") {
        Some(issued) if !has_claim => match &issued.point_id {
            Some(point) => store.claim_before(point, &issued.principal, issued.seq).await?,
            None => None,
        },
        _ => None,
    };
    let principal = events
        .iter()
        .find(|e| {
            matches!(
                e.kind.as_str(),
                "claim_set" | "claim_released" | "command_refused"
            )
        })
        .or(cause.as_ref())
        .map(|e| e.principal.clone());
    // The rule's reasons, from the claim_set that set it (or caused the command).
    let provenance = events
        .iter()
        .chain(cause.as_ref())
        .filter(|e| e.kind == "claim_set")
        .find_map(|e| {
            let payload: serde_json::Value = serde_json::from_str(&e.payload).ok()?;
            payload.get("provenance").cloned()
        });
    if json {
        let chain = serde_json::json!({
            "command_id": command_id,
            "point_id": events[0].point_id,
            "principal": principal,
            "caused_by": cause.as_ref().map(event_json),
            "provenance": provenance,
            "events": events.iter().map(event_json).collect::<Vec<_>>(),
        });
        println!("{chain}");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "command {command_id} on {}, asked by {}",
        events[0].point_id.as_deref().unwrap_or("-"),
        principal.as_deref().unwrap_or("the core itself")
    );
    if let Some(provenance) = &provenance {
        println!("{}", provenance_line(provenance));
    }
    if let Some(cause) = &cause {
        println!("  issued for the claim of seq {}:", cause.seq);
        print_event(cause);
    }
    for event in &events {
        print_event(event);
    }
    Ok(ExitCode::SUCCESS)
}

/// `  rule R (registry version V), its condition true on rows: point key, …`.
fn provenance_line(provenance: &serde_json::Value) -> String {
    let rows: Vec<String> = provenance["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .map(|r| {
                    format!(
                        "{} {}/{}/{}",
                        r["point_id"].as_str().unwrap_or("-"),
                        r["driver_instance"].as_str().unwrap_or("-"),
                        r["source_epoch"],
                        r["source_seq"]
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "  rule {} (registry version {}), its condition true on rows: {}",
        provenance["rule"].as_str().unwrap_or("-"),
        provenance["registry_version"],
        if rows.is_empty() {
            "none recorded".to_owned()
        } else {
            rows.join(", ")
        }
    )
}

fn event_json(event: &StoredControlEvent) -> serde_json::Value {
    serde_json::json!({
        "seq": event.seq,
        "occurred_at": event.occurred_at.to_rfc3339(),
        "kind": event.kind,
        "point_id": event.point_id,
        "principal": event.principal,
        "core_epoch": event.core_epoch,
        "payload": serde_json::from_str::<serde_json::Value>(&event.payload).unwrap_or(serde_json::Value::Null),
    })
}

fn print_event(event: &StoredControlEvent) {
    println!(
        "  {:>8}  {}  {:<16} by {} (epoch {}): {}",
        event.seq,
        event.occurred_at.to_rfc3339(),
        event.kind,
        event.principal,
        event.core_epoch,
        event.payload
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_s_provenance_names_the_rule_the_version_and_each_row() {
        let provenance = serde_json::json!({
            "rule": "frost",
            "registry_version": 4,
            "rows": [{"point_id": "plant.temp", "driver_instance": "modbus-1", "source_epoch": 1, "source_seq": 42}],
        });
        assert_eq!(
            provenance_line(&provenance),
            "  rule frost (registry version 4), its condition true on rows: plant.temp modbus-1/1/42"
        );
    }
}
