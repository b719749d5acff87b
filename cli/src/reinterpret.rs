//! `sentinel reinterpret` (ingest spec, "Reprocess"; issue 9 item 5): what a stored row would be
//! under another registry version, next to what is stored. Only reads; takes no lock.

use std::process::ExitCode;

use anyhow::bail;
use sentinel_core::{CanonicalValue, Config};
use sentinel_runtime::reprocess;

use crate::args::parse_instant;
use crate::reprocess::shared::{connect, registry};

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

fn value_json(value: &Option<CanonicalValue>) -> serde_json::Value {
    match value {
        None => serde_json::Value::Null,
        Some(CanonicalValue::Num(v)) => serde_json::json!(v),
        Some(CanonicalValue::Bool(v)) => serde_json::json!(v),
        Some(CanonicalValue::Text(v)) => serde_json::json!(&**v),
    }
}
