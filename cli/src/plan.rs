//! `sentinel registry plan DIR`: the declared load of a registry against the installation's
//! capacity (sensor paradigm, "Write-budget sizing"; core runtime spec, "Buffer sizing"), and
//! the admission flags `registry check` and `registry plan` share; with each driver host's disk
//! queue through a cut-off (issue 25 item 2 leftover), and the disk the configured horizons
//! need (issue 24 item 6, `crate::disk`). The arithmetic is `sentinel_core::registry::plan`
//! and `crate::disk`; this file parses flags and prints.

use std::path::Path;
use std::process::ExitCode;

use sentinel_core::retention::RetentionConfig;

use sentinel_core::registry::plan::{
    Admission, DISK_QUEUE_AGE_MAX_S_DEFAULT, DISK_QUEUE_BYTES_MAX_DEFAULT, DISK_QUEUE_RECORD_BYTES_ESTIMATE,
    INGEST_BUDGET_OBS_S_DEFAULT, OUTAGE_S_DEFAULT, Plan, STREAM_MAX_BYTES_DEFAULT, STREAM_MAX_MSGS_DEFAULT,
};
use sentinel_runtime::registry_dir;

use crate::disk;

/// The installation's capacity a registry is admitted against, and the bounds `sentinel run`
/// gives the observation stream: one configuration (issue 24 item 4). `registry check`,
/// `registry plan`, `registry load` and `sentinel run` all read it, from these flags or from
/// the same environment variables (under systemd, one `EnvironmentFile`; see
/// `/etc/sentinel/sentinel.env`), so a registry that passes CI passes the load and the boot.
#[derive(clap::Args, Clone)]
pub struct AdmissionArgs {
    /// Total declared peak rate the core is budgeted for, observations per second (the spec's
    /// design rate by default).
    #[arg(long, env = "SENTINEL_INGEST_BUDGET_OBS_S", default_value_t = INGEST_BUDGET_OBS_S_DEFAULT)]
    ingest_budget_obs_s: f64,
    /// The unplanned outage the stream must absorb, seconds (four hours by default).
    #[arg(long, env = "SENTINEL_OUTAGE_S", default_value_t = OUTAGE_S_DEFAULT)]
    outage_s: u64,
    /// The observation stream's message bound: `sentinel run` creates the stream with it and
    /// updates an existing stream's bound to it in place.
    #[arg(long, env = "SENTINEL_STREAM_MAX_MSGS", default_value_t = STREAM_MAX_MSGS_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    stream_max_msgs: u64,
    /// The observation stream's byte bound (the same).
    #[arg(long, env = "SENTINEL_STREAM_MAX_BYTES", default_value_t = STREAM_MAX_BYTES_DEFAULT,
          value_parser = clap::value_parser!(u64).range(1..=i64::MAX as u64))]
    stream_max_bytes: u64,
}

impl AdmissionArgs {
    /// As admission's settings. A budget that is not a positive finite rate is refused here,
    /// before anything is checked against it.
    pub fn validated(&self) -> anyhow::Result<Admission> {
        anyhow::ensure!(
            self.ingest_budget_obs_s.is_finite() && self.ingest_budget_obs_s > 0.0,
            "--ingest-budget-obs-s must be a positive number of observations per second, not {}",
            self.ingest_budget_obs_s
        );
        anyhow::ensure!(self.outage_s > 0, "--outage-s must be at least 1 s");
        Ok(self.admission())
    }

    pub fn admission(&self) -> Admission {
        Admission {
            ingest_budget_obs_s: self.ingest_budget_obs_s,
            outage_s: self.outage_s,
            stream_max_msgs: self.stream_max_msgs,
            stream_max_bytes: self.stream_max_bytes,
        }
    }
}

/// Prints the plan; exit 1 with the issues if the folder fails its checks.
pub fn run(
    dir: &Path,
    admission: &Admission,
    horizons: &RetentionConfig,
    ages: disk::CompactAges,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let descriptors = match registry_dir::check_dir_with(dir, admission) {
        Ok(descriptors) => descriptors,
        Err(report) => {
            eprintln!("{report}");
            return Ok(ExitCode::from(1));
        }
    };
    let plan = Plan::of(&descriptors, admission);
    // Nothing is measured before the database exists: every table at the format's cost.
    let disk = disk::project(&descriptors, horizons, ages, &[]);
    let out = if json {
        let mut value = serde_json::to_value(&plan)?;
        value["disk"] = disk::json(&disk);
        format!("{}\n", serde_json::to_string_pretty(&value)?)
    } else {
        text(dir, &plan, &disk)
    };
    crate::write_stdout(&out)?;
    Ok(ExitCode::SUCCESS)
}

fn text(dir: &Path, plan: &Plan, disk: &[disk::Projection]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let load = &plan.load;
    let a = &plan.admission;
    let _ = writeln!(
        out,
        "{}: {} points ({} of them the generated host and device health points), loads at declared peak rates",
        dir.display(),
        plan.points,
        plan.health_points
    );
    let _ = writeln!(
        out,
        "{:<12} {:>7} {:>12} {:>16} {:>18}",
        "class", "points", "peak obs/s", "rows/day", "declared B/day"
    );
    for c in &load.classes {
        let _ = writeln!(
            out,
            "{:<12} {:>7} {:>12.2} {:>16.0} {:>18.0}",
            c.class, c.points, c.peak_obs_s, c.rows_per_day, c.bytes_per_day
        );
    }
    let rows: f64 = load.classes.iter().map(|c| c.rows_per_day).sum();
    let bytes: f64 = load.classes.iter().map(|c| c.bytes_per_day).sum();
    let _ = writeln!(
        out,
        "{:<12} {:>7} {:>12.2} {:>16.0} {:>18.0}",
        "total", plan.points, load.total_peak_obs_s, rows, bytes
    );
    let _ = writeln!(
        out,
        "disk over the configured horizons at the storage format's measured cost per row \
         (table and indexes; the retention flags change the days, and a raw table's days past \
         --compact-after-days are sized compacted, its closed hot days but yesterday packed by \
         `sentinel db pack`):"
    );
    for line in disk::text(disk).lines() {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(
        out,
        "ingest budget: {:.2} of {} obs/s ({})",
        load.total_peak_obs_s,
        a.ingest_budget_obs_s,
        if plan.within_budget { "within" } else { "OVER" }
    );
    let _ = writeln!(
        out,
        "outage buffer: a {} s outage needs {} messages / {} bytes; the stream holds {} / {} ({})",
        a.outage_s,
        load.outage_msgs_needed,
        load.outage_bytes_needed,
        a.stream_max_msgs,
        a.stream_max_bytes,
        if plan.stream_fits { "fits" } else { "TOO SMALL" }
    );
    let _ = writeln!(
        out,
        "recommended configuration (registry check, registry load and sentinel run read it; \
         /etc/sentinel/sentinel.env):"
    );
    for line in plan.recommended.env_lines() {
        let _ = writeln!(out, "  {line}");
    }
    if plan.driver_queues.is_empty() {
        let _ = writeln!(out, "driver disk queues: no driver hosts");
    } else {
        let _ = writeln!(
            out,
            "driver disk queues through a {} s cut-off at ~{DISK_QUEUE_RECORD_BYTES_ESTIMATE} bytes a reading \
             (default bounds {DISK_QUEUE_BYTES_MAX_DEFAULT} bytes, {DISK_QUEUE_AGE_MAX_S_DEFAULT} s):",
            a.outage_s
        );
        let _ = writeln!(
            out,
            "  {:<20} {:>7} {:>12} {:>14} {:>16} bounds",
            "host", "points", "peak obs/s", "readings", "bytes"
        );
        for q in &plan.driver_queues {
            let _ = writeln!(
                out,
                "  {:<20} {:>7} {:>12.2} {:>14} {:>16} {}",
                q.host,
                q.points,
                q.peak_obs_s,
                q.outage_readings_needed,
                q.outage_bytes_needed,
                if q.fits_default_bounds { "fit" } else { "TOO SMALL" }
            );
        }
        for warning in &plan.driver_queue_warnings {
            let _ = writeln!(out, "{warning}");
        }
    }
    if !plan.site_queues.is_empty() {
        let _ = writeln!(
            out,
            "sites (their hosts' queues summed: what a leaf node there buffers):"
        );
        let _ = writeln!(
            out,
            "  {:<20} {:>6} {:>13} {:>12} {:>14} {:>16}",
            "site", "hosts", "partitionable", "peak obs/s", "readings", "bytes"
        );
        for s in &plan.site_queues {
            let _ = writeln!(
                out,
                "  {:<20} {:>6} {:>13} {:>12.2} {:>14} {:>16}",
                s.site,
                s.hosts,
                if s.partitionable { "yes" } else { "no" },
                s.peak_obs_s,
                s.outage_readings_needed,
                s.outage_bytes_needed
            );
        }
    }
    if plan.writable.is_empty() {
        let _ = writeln!(out, "writable points: none");
    } else {
        let _ = writeln!(
            out,
            "writable points ({}): {}",
            plan.writable.len(),
            plan.writable.join(", ")
        );
    }
    if plan.derived_in_dependency_order.is_empty() {
        let _ = writeln!(out, "derived points: none");
    } else {
        let _ = writeln!(out, "derived points in dependency order:");
        for (i, d) in plan.derived_in_dependency_order.iter().enumerate() {
            let window = d.window_s.map_or(String::new(), |w| format!(" over {w} s"));
            let _ = writeln!(
                out,
                "  {:>3}. {} = {}({}){window}",
                i + 1,
                d.id,
                d.op,
                d.inputs.join(", ")
            );
        }
    }
    if plan.rules_in_dependency_order.is_empty() {
        let _ = writeln!(out, "rules: none");
    } else {
        let _ = writeln!(
            out,
            "rules in dependency order (each after the derived points it reads):"
        );
        for (i, r) in plan.rules_in_dependency_order.iter().enumerate() {
            let _ = writeln!(
                out,
                "  {:>3}. {} [{} band, priority {}] reads {}; claims {}",
                i + 1,
                r.id,
                r.band,
                r.priority,
                r.inputs.join(", "),
                r.claims
            );
        }
        let loops: Vec<_> = plan
            .rules_in_dependency_order
            .iter()
            .filter_map(|r| Some((r, r.feedback_loop.as_ref()?)))
            .collect();
        if !loops.is_empty() {
            let _ = writeln!(
                out,
                "feedback loops (a rule whose claimed point's observations feed it, through the device; not a cycle):"
            );
            for (r, path) in loops {
                let _ = writeln!(out, "  {}: {} → the rule", r.id, path.join(" → "));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `registry plan` on the rules fixture prints the rules after the derived points, each with
    /// its inputs, band, priority and claimed point, and the feedback loop (issue 22 item 9).
    #[test]
    fn the_plan_lists_the_rules_in_dependency_order_and_the_feedback_loops() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/registry-rules");
        let plan = registry_dir::plan_dir(&dir, &Admission::default()).expect("the fixture passes");
        let printed = text(&dir, &plan, &[]);
        let from = printed
            .find("derived points in dependency order")
            .expect("the derived section");
        assert_eq!(
            printed[from..].lines().collect::<Vec<_>>(),
            [
                "derived points in dependency order:",
                "    1. boiler1.delta_t = difference(boiler1.flow_temp, boiler1.return_temp)",
                "    2. boiler1.flow_temp_mean_60s = mean(boiler1.flow_temp) over 60 s",
                "rules in dependency order (each after the derived points it reads):",
                "    1. ahu1.night_setback [automation band, priority 0] reads ahu1.occupied, ahu1.mode; claims \
                 ahu1.supply_temp_setpoint",
                "    2. boiler1.overheat_cutback [safety band, priority 0] reads boiler1.flow_temp; claims \
                 boiler1.setpoint",
                "    3. boiler1.setpoint_floor [automation band, priority 1] reads boiler1.setpoint, \
                 boiler1.flow_temp_mean_60s; claims boiler1.setpoint",
                "feedback loops (a rule whose claimed point's observations feed it, through the device; not a \
                 cycle):",
                "  boiler1.setpoint_floor: boiler1.setpoint → the rule",
            ]
        );
        let sample =
            registry_dir::plan_dir(&registry_dir::sample_dir(), &Admission::default()).expect("sample");
        assert!(text(&dir, &sample, &[]).ends_with("rules: none\n"));
        let json = serde_json::to_value(&plan).expect("json");
        assert_eq!(
            json["rules_in_dependency_order"][2]["feedback_loop"],
            serde_json::json!(["boiler1.setpoint"])
        );
        assert_eq!(json["rules_in_dependency_order"][1]["band"], "safety");
    }
}
