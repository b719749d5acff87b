//! `healthlog status` (issue 23 item 5: knowing the phone stopped sending). HAE reports
//! "Succeeded" even when nothing arrived (ANCHORS.md §3.2), so the store says what did: per
//! automation name its last delivery and that delivery's status, per metric and layer the
//! newest point, and whether any delivery arrived within `--stale-after` — the binary exits
//! non-zero when none did, so cron can mail the person.

use healthlog_core::time::format_utc;

use crate::store::{AutomationRow, NewestRow, Store, StoreError};

/// Microseconds in a second.
const SECOND_US: i64 = 1_000_000;

/// What `status` reports.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StatusReport {
    pub now_us: i64,
    pub stale_after_s: u64,
    /// The newest delivery's receipt time; `None` for an empty journal.
    pub last_delivery_us: Option<i64>,
    /// No delivery within `stale_after_s` (or none at all).
    pub stale: bool,
    pub pending: u64,
    pub automations: Vec<AutomationRow>,
    pub newest_points: Vec<NewestRow>,
}

/// A duration such as `90s`, `45m`, `26h` or `8d`, in seconds.
pub fn parse_duration_s(text: &str) -> Result<u64, String> {
    let bad = || format!("{text:?} is not a duration like 90s, 45m, 26h or 8d");
    let (digits, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?);
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let scale = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(bad()),
    };
    n.checked_mul(scale).filter(|s| *s > 0).ok_or_else(bad)
}

/// Builds the report at `now_us`.
pub async fn report(store: &Store, now_us: i64, stale_after_s: u64) -> Result<StatusReport, StoreError> {
    let automations = store.automations().await?;
    let newest_points = store.newest_points().await?;
    let pending = store
        .journal(Some(healthlog_core::status::ParseStatus::Pending))
        .await?
        .len() as u64;
    let last_delivery_us = automations.iter().map(|a| a.last_received_at_us).max();
    let horizon = i64::try_from(stale_after_s)
        .unwrap_or(i64::MAX / SECOND_US)
        .saturating_mul(SECOND_US);
    let stale = last_delivery_us.is_none_or(|t| now_us.saturating_sub(t) > horizon);
    Ok(StatusReport {
        now_us,
        stale_after_s,
        last_delivery_us,
        stale,
        pending,
        automations,
        newest_points,
    })
}

/// The report for people.
pub fn render(r: &StatusReport) -> String {
    let mut out = String::new();
    let ago = |t: i64| format!("{} ({} ago)", format_utc(t), human((r.now_us - t) / SECOND_US));
    match r.last_delivery_us {
        Some(t) => out.push_str(&format!("last delivery: {}\n", ago(t))),
        None => out.push_str("last delivery: none\n"),
    }
    out.push_str(&format!(
        "{}: nothing arrived for {} or more\n",
        if r.stale { "STALE" } else { "fresh" },
        human(i64::try_from(r.stale_after_s).unwrap_or(i64::MAX))
    ));
    out.push_str(&format!("pending deliveries: {}\n\nautomations:\n", r.pending));
    for a in &r.automations {
        out.push_str(&format!(
            "  {:<32} {:>6} deliveries, last #{} {} {}\n",
            a.automation_name
                .as_deref()
                .unwrap_or("(no automation-name header)"),
            a.deliveries,
            a.last_id,
            a.last_status,
            ago(a.last_received_at_us)
        ));
    }
    out.push_str("\nnewest point per metric and layer:\n");
    for n in &r.newest_points {
        out.push_str(&format!(
            "  {:<40} {:<8} {}\n",
            n.metric,
            n.layer,
            ago(n.newest_us)
        ));
    }
    out
}

fn human(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s} s"),
        s if s < 7_200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3_600),
        s => format!("{} d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_s("90s"), Ok(90));
        assert_eq!(parse_duration_s("26h"), Ok(26 * 3_600));
        assert_eq!(parse_duration_s("8d"), Ok(8 * 86_400));
        for bad in ["", "h", "10", "10w", "-1h", "0s", "1.5h"] {
            assert!(parse_duration_s(bad).is_err(), "{bad}");
        }
    }
}
