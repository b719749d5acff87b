//! Admission checks that need the whole registry, not one point (sensor paradigm, "The
//! manifest is an admission test": acyclicity, write-budget sizing; core runtime spec,
//! "Buffer sizing").
//!
//! Owns: the `derived` section's rules (its shape, that every input exists and is a number,
//! that a mean or sum only reads `agg_safe` inputs, that the archetype says `derived`), the
//! inputs graph's acyclicity (a cycle is named, `a → b → c → a`), the total declared peak
//! rate against the ingest budget, and the stream's bound against the backlog of an outage at
//! that rate. Each refusal is one line naming a file and a point. Per-point checks that need
//! nothing but the point live in `check.rs`, which calls this.

use std::collections::BTreeMap;

use super::descriptor::{Archetype, Kind, SELF_HOST};
use super::folder::{FOLDER, LocatedPoint, RegistryIssue, SourceFolder};
use super::graph;
use super::plan::{Admission, DeclaredLoad, PEAK_RATE_HZ_MAX};

/// The longest sliding window a derived point may declare; it is also the lookback a restart
/// rehydrates, so it bounds restart work.
pub const WINDOW_S_MAX: u32 = 86_400;

/// Runs the registry-wide checks, appending to `issues`.
pub fn check_registry(folder: &SourceFolder, admission: &Admission, issues: &mut Vec<RegistryIssue>) {
    // id → (file, point); the first definition wins (duplicates are reported elsewhere).
    let mut points: BTreeMap<&str, (&str, &LocatedPoint)> = BTreeMap::new();
    for file in &folder.files {
        for located in &file.points {
            if let Some(id) = located.point.id.as_deref() {
                points.entry(id).or_insert((&file.path, located));
            }
        }
    }
    for file in &folder.files {
        for located in &file.points {
            check_derived(&file.path, file.host.as_deref(), located, &points, issues);
        }
    }
    check_cycles(&points, issues);
    check_load(&points, admission, issues);
}

fn check_derived(
    file: &str,
    host: Option<&str>,
    located: &LocatedPoint,
    points: &BTreeMap<&str, (&str, &LocatedPoint)>,
    issues: &mut Vec<RegistryIssue>,
) {
    let p = &located.point;
    let label = located.label();
    let mut push = |message: String| issues.push(RegistryIssue::point(file, &label, message));
    // A point of archetype `derived` without a section is derived elsewhere (a driver's
    // `queue_drops` counts its own queue), which is allowed.
    let Some(derived) = &p.derived else {
        return;
    };
    let op = derived.op.as_str();
    // The core publishes derived readings, and may publish observations only under its own
    // host (`obs.sentinel.>`, ARCHITECTURE.md "Security model").
    if let Some(host) = host
        && host != SELF_HOST
    {
        push(format!(
            "derived \"{op}\" on host {host:?}: the core computes and publishes derived points, so they \
             belong in a file with host = \"{SELF_HOST}\""
        ));
    }
    if let Some(archetype) = p.archetype
        && archetype != Archetype::Derived
    {
        push(format!(
            "a derived section on a {:?} point: set archetype = \"derived\"",
            archetype_str(archetype)
        ));
    }
    if let Some(kind) = p.kind
        && kind != Kind::Number
    {
        push(format!(
            "derived \"{op}\" on a {} point; a derived point is a number",
            kind_str(kind)
        ));
    }
    if derived.inputs.len() != derived.op.inputs() {
        push(format!(
            "derived \"{op}\" takes {} input(s), not {}",
            derived.op.inputs(),
            derived.inputs.len()
        ));
    }
    match (derived.op.is_window(), derived.window_s) {
        (true, None) => push(format!(
            "derived \"{op}\" needs window_s, the sliding window (1 to {WINDOW_S_MAX} s)"
        )),
        (true, Some(w)) if w == 0 || w > WINDOW_S_MAX => push(format!(
            "derived \"{op}\": window_s {w} must be between 1 and {WINDOW_S_MAX}"
        )),
        (false, Some(_)) => push(format!("derived \"{op}\" has no window; remove window_s")),
        _ => {}
    }
    for input in &derived.inputs {
        let Some((_, input_point)) = points.get(input.as_str()) else {
            push(format!("derived input {input:?} is not a point in the registry"));
            continue;
        };
        let input_point = &input_point.point;
        if let Some(kind) = input_point.kind
            && kind != Kind::Number
        {
            push(format!(
                "derived input {input:?} is a {} point; derived points read numbers",
                kind_str(kind)
            ));
        } else if derived.op.needs_agg_safe() && input_point.agg_safe == Some(false) {
            push(format!(
                "derived \"{op}\" over input {input:?}, which is not agg_safe: adding its values up is \
                 meaningless; pick min, max or count, or mark the input agg_safe"
            ));
        }
    }
}

fn check_cycles(points: &BTreeMap<&str, (&str, &LocatedPoint)>, issues: &mut Vec<RegistryIssue>) {
    let edges: graph::Edges<'_> = points
        .iter()
        .filter_map(|(id, (_, located))| {
            let derived = located.point.derived.as_ref()?;
            Some((*id, derived.inputs.iter().map(String::as_str).collect()))
        })
        .collect();
    for cycle in graph::cycles(&edges) {
        let first = cycle[0].as_str();
        let file = points.get(first).map_or(FOLDER, |(f, _)| f);
        issues.push(RegistryIssue::point(
            file,
            first,
            format!(
                "inputs form a cycle: {}; a derived point cannot depend on itself",
                graph::cycle_text(&cycle)
            ),
        ));
    }
}

fn check_load(
    points: &BTreeMap<&str, (&str, &LocatedPoint)>,
    admission: &Admission,
    issues: &mut Vec<RegistryIssue>,
) {
    let declared = || {
        points.values().filter_map(|(_, l)| {
            let p = &l.point;
            Some((
                p.retention?,
                admissible_rate(p.peak_rate_hz)?,
                p.row_bytes.unwrap_or(0),
            ))
        })
    };
    let load = DeclaredLoad::of(declared(), admission.outage_s);
    // The refusal names the largest contributor, the first point to look at (ties: by id).
    let largest = points
        .iter()
        .filter_map(|(id, (file, l))| Some((*id, *file, admissible_rate(l.point.peak_rate_hz)?)))
        .fold(None::<(&str, &str, f64)>, |best, cur| match best {
            Some(b) if b.2 >= cur.2 => Some(b),
            _ => Some(cur),
        });
    let Some((id, file, rate)) = largest else {
        return;
    };
    let total = load.total_peak_obs_s;
    if total > admission.ingest_budget_obs_s {
        issues.push(RegistryIssue::point(
            file,
            id,
            format!(
                "declared peak rates total {total:.1} obs/s, above the ingest budget of {} obs/s; this point \
                 is the largest at {rate} Hz: lower peak rates or raise the budget (--ingest-budget-obs-s)",
                admission.ingest_budget_obs_s
            ),
        ));
    }
    if !load.stream_fits(admission) {
        issues.push(RegistryIssue::point(
            file,
            id,
            format!(
                "a {} s outage at the declared total of {total:.1} obs/s leaves {} messages ({} bytes) in the \
                 stream, more than its bound of {} messages / {} bytes; this point is the largest at {rate} Hz: \
                 raise the bound (--stream-max-msgs, --stream-max-bytes) or lower peak rates",
                admission.outage_s,
                load.outage_msgs_needed,
                load.outage_bytes_needed,
                admission.stream_max_msgs,
                admission.stream_max_bytes
            ),
        ));
    }
}

/// A rate the per-point check accepts; a refused one is reported there and not counted twice.
fn admissible_rate(rate: Option<f64>) -> Option<f64> {
    rate.filter(|r| r.is_finite() && *r > 0.0 && *r <= PEAK_RATE_HZ_MAX)
}

fn kind_str(kind: Kind) -> &'static str {
    match kind {
        Kind::Number => "number",
        Kind::Bool => "bool",
        Kind::Enum => "enum",
        Kind::Text => "text",
    }
}

fn archetype_str(archetype: Archetype) -> &'static str {
    match archetype {
        Archetype::Hardware => "hardware",
        Archetype::Polled => "polled",
        Archetype::Derived => "derived",
        Archetype::Model => "model",
    }
}

#[cfg(test)]
mod tests {
    // The refusals are tested with their exact lines in `super::super::check`'s tests, which
    // own the fixture folder.
    use crate::registry::DerivedOp;

    #[test]
    fn window_ops_take_one_input_and_pairs_two() {
        for op in DerivedOp::ALL {
            assert_eq!(op.inputs(), if op.is_window() { 1 } else { 2 }, "{op:?}");
        }
    }
}
