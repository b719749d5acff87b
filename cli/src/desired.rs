//! `sentinel desired [POINT] [--json]` (issue 21 item 10): from the database, each writable
//! point's desired value and the claim that wins it, every open claim, desired against observed
//! (the newest committed observation) and the last verification (`command_verified` or
//! `command_diverged`, when the log has one). Reads only (`PgStore::desired_view`), so it runs
//! beside the core, as the reader role. Exit 1 when POINT has no desired value.

use std::process::ExitCode;

use anyhow::Context;
use sentinel_store_pg::{PgStore, PgStoreConfig};

pub async fn run(database_url: &str, point: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let store = PgStore::connect(database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    store.require_current_schema().await?;
    let views = store.desired_view(point).await?;
    if json {
        let out = match point {
            Some(_) => views.first().cloned().unwrap_or(serde_json::Value::Null),
            None => serde_json::Value::Array(views.clone()),
        };
        println!("{out}");
    } else {
        for view in &views {
            print_view(view);
        }
    }
    if let Some(point) = point
        && views.is_empty()
    {
        eprintln!("sentinel: point {point} has no desired value (not writable, or never claimed)");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

fn print_view(view: &serde_json::Value) {
    let text = |v: &serde_json::Value| match v {
        serde_json::Value::Null => "-".to_owned(),
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    println!(
        "{}: desired {} since {}",
        text(&view["point_id"]),
        text(&view["desired"]),
        text(&view["since"])
    );
    match &view["winner"] {
        serde_json::Value::Null => println!("  winner: none (relinquish default, or held)"),
        w => println!(
            "  winner: {} ({} band, priority {}, until {})",
            text(&w["holder"]),
            text(&w["band"]),
            text(&w["priority"]),
            text(&w["until"])
        ),
    }
    for claim in view["claims"].as_array().into_iter().flatten() {
        println!(
            "  claim: {} {} band, priority {}: {} until {} (set {}, command id {})",
            text(&claim["holder"]),
            text(&claim["band"]),
            text(&claim["priority"]),
            text(&claim["value"]),
            text(&claim["until"]),
            text(&claim["set_at"]),
            text(&claim["command_id"])
        );
    }
    match &view["observed"] {
        serde_json::Value::Null => println!("  observed: nothing committed yet"),
        o => println!(
            "  observed: {} ({}, observed {})",
            text(&o["value"]),
            text(&o["quality"]),
            text(&o["observed_at"])
        ),
    }
    if let Some(v) = view["verification"].as_object() {
        println!(
            "  last verification: {} at {} (seq {})",
            text(&v["kind"]),
            text(&v["occurred_at"]),
            text(&v["seq"])
        );
    }
}
