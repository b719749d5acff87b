//! The admission of a registry folder's rules and missing-data policies, and their resolution
//! into descriptors (issue 22 items 1, 2 and 6; core runtime spec, "Rules", "Geographic split";
//! sensor paradigm spec, "Missing data").
//!
//! Owns: every refusal of a `[[rule]]` section and of a point's `missing_data` (one line each,
//! naming the rule and the input, point or site it is about), the resolution of a checked rule
//! into its [`Rule`] ([`resolve_rules`]), and the interlock-site refusal
//! ([`interlock_refusals`]) which runs on resolved descriptors, so that `registry check`,
//! `registry load` and a starting core (re-checking a stored version) share one function.
//!
//! Sits beside `admission.rs`: `check.rs` calls [`check_rules`] and [`check_missing_data`];
//! `source.rs` calls [`resolve_rules`] and [`interlock_refusals`].

use std::collections::{BTreeMap, BTreeSet};

use super::condition;
use super::descriptor::{CommandValue, Descriptor, Kind, POINT_ID_BYTES_MAX, Site, value_refusal};
use super::folder::{
    FOLDER, LocatedPoint, LocatedRule, RegistryIssue, SourceFallback, SourceFolder, SourcePoint, SourceRule,
    Vocabulary, rule_issue,
};
use super::health;
use super::rule::{
    CONDITION_NODES_MAX, CompareOp, Condition, FightLimit, MissingData, RULE_DURATION_MAX_S, RULE_INPUTS_MAX,
    RULES_MAX, Rule, RuleBand, RuleClaim, RuleFallback, WARMUP_DEADLINE_DEFAULT_S,
};

/// The longest `hold_last_valid` staleness: a day (a value older than that is not standing in
/// for a reading, it is history).
pub const MAX_STALENESS_S_MAX: u32 = 86_400;
/// The most changes a fight limit may allow in its window: beyond this the limit holds
/// nothing a relay would survive.
pub const FIGHT_CHANGES_MAX: u32 = 1_000;

/// A point's `missing_data` (issue 22 item 2): `hold_last_valid` holds for 1 s to
/// [`MAX_STALENESS_S_MAX`], and no shorter than the point's freshness (or an on-time point
/// would count as lost between two readings).
pub fn check_missing_data(p: &SourcePoint, push: &mut impl FnMut(String)) {
    let Some(MissingData::HoldLastValid { max_staleness_s }) = p.missing_data else {
        return;
    };
    if max_staleness_s == 0 || max_staleness_s > MAX_STALENESS_S_MAX {
        push(format!(
            "missing_data hold_last_valid max_staleness_s {max_staleness_s} must be between 1 and \
             {MAX_STALENESS_S_MAX}"
        ));
    } else if let Some(freshness_s) = p.freshness_s
        && max_staleness_s < freshness_s
    {
        push(format!(
            "missing_data hold_last_valid max_staleness_s {max_staleness_s} is shorter than freshness_s \
             {freshness_s}: the point would count as lost between two on-time readings; pick at least \
             {freshness_s}"
        ));
    }
}

/// What the rule checks need to know of a declared point.
struct Known<'a> {
    point: &'a SourcePoint,
    codebook: Option<&'a BTreeMap<String, String>>,
}

/// Every check of every `[[rule]]` in the folder, appended to `issues`.
pub fn check_rules(folder: &SourceFolder, vocabulary: &Vocabulary, issues: &mut Vec<RegistryIssue>) {
    let mut points: BTreeMap<&str, Known<'_>> = BTreeMap::new();
    for file in &folder.files {
        for LocatedPoint { point, .. } in &file.points {
            if let Some(id) = point.id.as_deref() {
                let codebook = point
                    .codebook
                    .as_ref()
                    .and_then(|name| vocabulary.codebooks.get(name))
                    .map(|d| &d.value);
                points.entry(id).or_insert(Known { point, codebook });
            }
        }
    }
    let count: usize = folder.files.iter().map(|f| f.rules.len()).sum();
    if count > RULES_MAX {
        issues.push(RegistryIssue::file(
            FOLDER,
            format!("{count} rules defined, more than the limit of {RULES_MAX}"),
        ));
    }
    // id → (file, ordinal) of its first definition.
    let mut ids: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
    for file in &folder.files {
        for located in &file.rules {
            let label = located.label();
            let mut push = |message: String| issues.push(rule_issue(&file.path, &label, message));
            if let Some(id) = located.rule.id.as_deref() {
                match ids.get(id) {
                    Some((first_file, first)) if *first_file == file.path => push(format!(
                        "duplicate id: entries #{first} and #{} in this file",
                        located.ordinal
                    )),
                    Some((first_file, _)) => push(format!("duplicate id: also defined in {first_file}")),
                    None => {
                        ids.insert(id, (&file.path, located.ordinal));
                    }
                }
            }
            check_rule(located, &points, &mut push);
        }
    }
}

fn is_rule_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= POINT_ID_BYTES_MAX
        && id.split('.').all(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

fn check_rule(located: &LocatedRule, points: &BTreeMap<&str, Known<'_>>, push: &mut impl FnMut(String)) {
    let r = &located.rule;
    match &r.id {
        None => push("missing id".to_owned()),
        Some(id) if !is_rule_id(id) => push(format!(
            "id is not NATS-subject-safe: dot-separated non-empty parts of ASCII letters, digits, '_' and \
             '-', at most {POINT_ID_BYTES_MAX} bytes"
        )),
        Some(id) => {
            let state = health::rule_state_point(id);
            if state.len() > POINT_ID_BYTES_MAX {
                push(format!(
                    "its state point {state:?} would be {} bytes, over the {POINT_ID_BYTES_MAX}-byte point id \
                     bound; shorten the rule's id",
                    state.len()
                ));
            }
        }
    }
    let inputs = check_inputs(r, points, push);
    let mut read: BTreeSet<&str> = BTreeSet::new();
    let mut conditions = Vec::new();
    match &r.when {
        None => push("missing when: the condition that starts the claim".to_owned()),
        Some(text) => conditions.push(("when", text)),
    }
    if let Some(text) = &r.until {
        conditions.push(("until", text));
    }
    let mut parsed = Vec::new();
    for (field, text) in conditions {
        match condition::parse(text) {
            Err(e) => push(format!("{field}: {e}")),
            Ok(c) => parsed.push((field, c)),
        }
    }
    for (field, c) in &parsed {
        if c.nodes() > CONDITION_NODES_MAX {
            push(format!(
                "{field} has {} nodes, more than the limit of {CONDITION_NODES_MAX}",
                c.nodes()
            ));
        }
        for point in c.points() {
            read.insert(point);
            if inputs.as_ref().is_some_and(|inputs| !inputs.contains(&point)) {
                push(format!("{field} reads {point:?}, which is not among its inputs"));
            }
        }
        check_comparisons(field, c, points, push);
    }
    // Only when both conditions parsed: an unparsed one may read any input.
    if let Some(inputs) = &inputs
        && parsed.len() == 1 + usize::from(r.until.is_some())
    {
        for input in inputs.iter().filter(|i| !read.contains(*i)) {
            push(format!(
                "input {input:?} is read by no condition; a rule's inputs are exactly the points its \
                 conditions read"
            ));
        }
    }
    if let Some(for_s) = r.for_s
        && for_s > RULE_DURATION_MAX_S
    {
        push(format!(
            "for_s {for_s} is more than the limit of {RULE_DURATION_MAX_S}"
        ));
    }
    if let Some(deadline_s) = r.warmup.as_ref().and_then(|w| w.deadline_s)
        && (deadline_s == 0 || deadline_s > RULE_DURATION_MAX_S)
    {
        push(format!(
            "warmup deadline_s {deadline_s} must be between 1 and {RULE_DURATION_MAX_S}"
        ));
    }
    if let Some(FightLimit {
        changes_max,
        window_s,
    }) = r.fight
    {
        if changes_max == 0 || changes_max > FIGHT_CHANGES_MAX {
            push(format!(
                "fight changes_max {changes_max} must be between 1 and {FIGHT_CHANGES_MAX}"
            ));
        }
        if window_s == 0 || window_s > RULE_DURATION_MAX_S {
            push(format!(
                "fight window_s {window_s} must be between 1 and {RULE_DURATION_MAX_S}"
            ));
        }
    }
    let target = check_claim(r, points, push);
    check_fallbacks(r, target, push);
    if let (Some(band), Some(inputs)) = (r.claim.as_ref().and_then(|c| c.band), &inputs)
        && band.is_protection()
    {
        for input in inputs {
            let declared = match points.get(input).map(|k| k.point.missing_data) {
                None => continue,
                Some(None) => "none",
                Some(Some(MissingData::EmitMarker)) => "emit_marker",
                Some(Some(_)) => continue,
            };
            push(format!(
                "input {input:?} of {} rule must declare missing_data fail_closed or hold_last_valid; it \
                 declares {declared}",
                band_article(band)
            ));
        }
    }
}

fn band_article(band: RuleBand) -> &'static str {
    match band {
        RuleBand::Automation => "an automation",
        RuleBand::Safety => "a safety",
        RuleBand::Interlock => "an interlock",
    }
}

/// The declared inputs, when they are usable for the other checks (present, bounded).
fn check_inputs<'r>(
    r: &'r SourceRule,
    points: &BTreeMap<&str, Known<'_>>,
    push: &mut impl FnMut(String),
) -> Option<Vec<&'r str>> {
    let Some(inputs) = &r.inputs else {
        push("missing inputs: the points the conditions read".to_owned());
        return None;
    };
    if inputs.is_empty() {
        push("inputs is empty; a rule reads at least one point".to_owned());
        return None;
    }
    if inputs.len() > RULE_INPUTS_MAX {
        push(format!(
            "{} inputs, more than the limit of {RULE_INPUTS_MAX}",
            inputs.len()
        ));
        return None;
    }
    let mut seen = BTreeSet::new();
    for input in inputs {
        if !seen.insert(input.as_str()) {
            push(format!("input {input:?} is listed twice"));
        } else if !points.contains_key(input.as_str()) {
            push(format!("input {input:?} is not a point in the registry"));
        }
    }
    Some(seen.into_iter().collect())
}

fn kind_str(kind: Kind) -> &'static str {
    match kind {
        Kind::Number => "number",
        Kind::Bool => "bool",
        Kind::Enum => "enum",
        Kind::Text => "text",
    }
}

fn op_str(op: CompareOp) -> &'static str {
    match op {
        CompareOp::Lt => "<",
        CompareOp::Le => "<=",
        CompareOp::Gt => ">",
        CompareOp::Ge => ">=",
        CompareOp::Eq => "==",
        CompareOp::Ne => "!=",
    }
}

fn literal(value: &CommandValue) -> String {
    match value {
        CommandValue::Bool(b) => b.to_string(),
        CommandValue::Number(v) => v.to_string(),
        CommandValue::Member(m) => format!("{m:?}"),
    }
}

/// Each comparison's literal against its point's kind: numbers compare with numbers; bools,
/// enums and texts only with `==` / `!=`, a bool with `true` / `false`, an enum with a member
/// of its codebook, a text with a quoted text.
fn check_comparisons(
    field: &str,
    c: &Condition,
    points: &BTreeMap<&str, Known<'_>>,
    push: &mut impl FnMut(String),
) {
    match c {
        Condition::All(items) | Condition::Any(items) => items
            .iter()
            .for_each(|c| check_comparisons(field, c, points, push)),
        Condition::Not(inner) => check_comparisons(field, inner, points, push),
        Condition::Quality { .. } => {}
        Condition::Compare { point, op, value } => {
            let Some(known) = points.get(point.as_str()) else {
                return;
            };
            let Some(kind) = known.point.kind else {
                return;
            };
            let ordering = !matches!(op, CompareOp::Eq | CompareOp::Ne);
            let what = format!(
                "{field} compares {} point {point:?} with {}",
                kind_str(kind),
                literal(value)
            );
            match (kind, value) {
                (Kind::Number, CommandValue::Number(_)) => {}
                (Kind::Number, _) => push(format!("{what}; compare it with a number")),
                (_, _) if ordering => push(format!(
                    "{field} orders {} point {point:?} with {}; a bool, enum or text point compares only with == \
                     or !=",
                    kind_str(kind),
                    op_str(*op)
                )),
                (Kind::Bool, CommandValue::Bool(_)) => {}
                (Kind::Bool, _) => push(format!("{what}; compare it with true or false")),
                (Kind::Enum, CommandValue::Member(member)) => {
                    let members: BTreeSet<&str> = known
                        .codebook
                        .map(|c| c.values().map(String::as_str).collect())
                        .unwrap_or_default();
                    if !members.contains(member.as_str()) {
                        push(format!(
                            "{what}, not a member of its codebook ({})",
                            members.into_iter().collect::<Vec<_>>().join(", ")
                        ));
                    }
                }
                (Kind::Enum, _) => push(format!(
                    "{what}; compare it with a \"quoted\" member of its codebook"
                )),
                (Kind::Text, CommandValue::Member(_)) => {}
                (Kind::Text, _) => push(format!("{what}; compare it with a \"quoted\" text")),
            }
        }
    }
}

/// The claim's point, when it is a writable point (the fallbacks' values are checked against it).
fn check_claim<'p>(
    r: &SourceRule,
    points: &'p BTreeMap<&str, Known<'_>>,
    push: &mut impl FnMut(String),
) -> Option<&'p Known<'p>> {
    let Some(claim) = &r.claim else {
        push("missing claim: { point = \"...\", value = V, band = \"...\" }".to_owned());
        return None;
    };
    if claim.band.is_none() {
        push("claim without band: say \"automation\", \"safety\" or \"interlock\"".to_owned());
    }
    let Some(point) = &claim.point else {
        push("claim without point: the writable point the rule claims".to_owned());
        return None;
    };
    let Some(known) = points.get(point.as_str()) else {
        push(format!("claim point {point:?} is not a point in the registry"));
        return None;
    };
    if known.point.writable.is_none() {
        push(format!(
            "claim point {point:?} is not writable; a rule claims only a point with a writable section"
        ));
        return None;
    }
    match &claim.value {
        None => push("claim without value: what the rule claims while its condition holds".to_owned()),
        Some(value) => {
            if let Some(why) = refusal(known, value) {
                push(format!("claim value: {why}"));
            }
        }
    }
    Some(known)
}

fn refusal(known: &Known<'_>, value: &CommandValue) -> Option<String> {
    let p = known.point;
    value_refusal(p.kind?, p.range, p.unit.as_deref(), known.codebook, value)
}

fn check_fallbacks(r: &SourceRule, target: Option<&Known<'_>>, push: &mut impl FnMut(String)) {
    match &r.otherwise {
        None => push("missing otherwise: say \"release\" or a safe { value = ... }".to_owned()),
        Some(SourceFallback::Word(w)) if w == "hold" => push(
            "otherwise = \"hold\" would keep claiming after the condition stops holding; pick \"release\" or a \
             safe { value = ... }"
                .to_owned(),
        ),
        Some(f) => check_fallback("otherwise", f, false, target, push),
    }
    match &r.on_input_loss {
        None => push("missing on_input_loss: say \"release\", \"hold\" or a safe { value = ... }".to_owned()),
        Some(f) => check_fallback("on_input_loss", f, true, target, push),
    }
}

fn check_fallback(
    field: &str,
    f: &SourceFallback,
    hold: bool,
    target: Option<&Known<'_>>,
    push: &mut impl FnMut(String),
) {
    match f {
        SourceFallback::Word(w) if w == "release" || (hold && w == "hold") => {}
        SourceFallback::Word(w) => push(format!(
            "{field} {w:?} is not {}",
            if hold {
                "\"release\", \"hold\" or { value = ... }"
            } else {
                "\"release\" or { value = ... }"
            }
        )),
        SourceFallback::Value(v) => {
            if let Some(why) = target.and_then(|known| refusal(known, &v.value)) {
                push(format!("{field} value: {why}"));
            }
        }
    }
}

fn fallback(f: &SourceFallback) -> Result<RuleFallback, String> {
    match f {
        SourceFallback::Word(w) if w == "release" => Ok(RuleFallback::Release),
        SourceFallback::Word(w) if w == "hold" => Ok(RuleFallback::Hold),
        SourceFallback::Word(w) => Err(format!("{w:?} is not a fallback")),
        SourceFallback::Value(v) => Ok(RuleFallback::Value(v.value.clone())),
    }
}

/// One checked rule, resolved: conditions parsed, defaults filled (`for_s` 0, priority 0, the
/// warmup deadline [`WARMUP_DEADLINE_DEFAULT_S`]), the claimed point copied into `point`.
fn resolve_rule(r: &SourceRule) -> Result<Rule, String> {
    let missing = |field: &str| format!("missing {field}");
    let claim = r.claim.as_ref().ok_or_else(|| missing("claim"))?;
    let parse = |field: &str, text: &str| condition::parse(text).map_err(|e| format!("{field}: {e}"));
    Ok(Rule {
        id: r.id.clone().ok_or_else(|| missing("id"))?,
        inputs: r.inputs.clone().ok_or_else(|| missing("inputs"))?,
        when: parse("when", r.when.as_deref().ok_or_else(|| missing("when"))?)?,
        until: r.until.as_deref().map(|t| parse("until", t)).transpose()?,
        for_s: r.for_s.unwrap_or(0),
        point: claim.point.clone().ok_or_else(|| missing("claim point"))?,
        claim: RuleClaim {
            band: claim.band.ok_or_else(|| missing("claim band"))?,
            priority: claim.priority.unwrap_or(0),
            value: claim.value.clone().ok_or_else(|| missing("claim value"))?,
        },
        otherwise: fallback(r.otherwise.as_ref().ok_or_else(|| missing("otherwise"))?)?,
        on_input_loss: fallback(r.on_input_loss.as_ref().ok_or_else(|| missing("on_input_loss"))?)?,
        warmup_deadline_s: r
            .warmup
            .as_ref()
            .and_then(|w| w.deadline_s)
            .unwrap_or(WARMUP_DEADLINE_DEFAULT_S),
        fight: r.fight,
    })
}

/// Every rule of the folder resolved, sorted by id, with the file each came from; an issue
/// for each one that does not resolve (none, on a folder that passed [`check_rules`]).
pub fn resolve_rules(folder: &SourceFolder) -> (Vec<(String, Rule)>, Vec<RegistryIssue>) {
    let mut rules = Vec::new();
    let mut issues = Vec::new();
    for file in &folder.files {
        for located in &file.rules {
            match resolve_rule(&located.rule) {
                Ok(rule) => rules.push((file.path.clone(), rule)),
                Err(message) => issues.push(rule_issue(&file.path, &located.label(), message)),
            }
        }
    }
    rules.sort_by(|a, b| a.1.id.cmp(&b.1.id));
    (rules, issues)
}

/// A safety- or interlock-band rule whose input declares `emit_marker` or no missing-data
/// policy (issue 22 item 2, the spec's money-path guard applied to protection), over resolved
/// descriptors: the refusal `registry check` makes of a folder, in the form a starting core
/// runs on a stored version (one `(rule id, line)` per rule and input, sorted).
pub fn protection_input_refusals(descriptors: &[Descriptor]) -> Vec<(String, String)> {
    let by_id: BTreeMap<&str, &Descriptor> = descriptors.iter().map(|d| (d.id.as_str(), d)).collect();
    let mut out = Vec::new();
    for rule in descriptors
        .iter()
        .flat_map(|d| &d.rules)
        .filter(|r| r.claim.band.is_protection())
    {
        for input in &rule.inputs {
            let declared = match by_id.get(input.as_str()).map(|d| d.missing_data) {
                None => continue, // an unknown input is refused on its own
                Some(None) => "none",
                Some(Some(MissingData::EmitMarker)) => "emit_marker",
                Some(Some(_)) => continue,
            };
            out.push((
                rule.id.clone(),
                format!(
                    "rule {:?}: input {input:?} of {} rule must declare missing_data fail_closed or \
                     hold_last_valid; it declares {declared}",
                    rule.id,
                    band_article(rule.claim.band)
                ),
            ));
        }
    }
    out.sort();
    out
}

/// An interlock-band rule that reads or acts on a point at a partitionable site (issue 22 item
/// 6; core runtime spec, "Geographic split"): an interlock must hold at its site, not through
/// a round trip to a core the site can be cut off from. "Reads" counts the points a derived
/// input is computed from, however deep. One `(rule id, line)` per rule and point, sorted,
/// over resolved descriptors (rules in their claimed point's descriptor), so a starting core
/// runs it on a stored version as `registry check` and `registry load` run it on a folder.
pub fn interlock_refusals(descriptors: &[Descriptor]) -> Vec<(String, String)> {
    let by_id: BTreeMap<&str, &Descriptor> = descriptors.iter().map(|d| (d.id.as_str(), d)).collect();
    let partitionable = |id: &str| -> Option<&Site> {
        by_id
            .get(id)?
            .assignment
            .site
            .as_ref()
            .filter(|s| s.partitionable)
    };
    let mut out = Vec::new();
    for rule in descriptors
        .iter()
        .flat_map(|d| &d.rules)
        .filter(|r| r.claim.band == RuleBand::Interlock)
    {
        let refuse = |what: String, site: &Site| {
            format!(
                "rule {:?}: an interlock-band rule {what} at partitionable site {:?}; an interlock must hold \
                 at its site, not through the core: use band \"safety\", or place the host at a site that \
                 is not partitionable",
                rule.id, site.name
            )
        };
        if let Some(site) = partitionable(&rule.point) {
            out.push((
                rule.id.clone(),
                refuse(format!("acts on point {:?}", rule.point), site),
            ));
        }
        for input in &rule.inputs {
            // Depth-first through derived inputs, each point once: (point, the input's path).
            let mut seen: BTreeSet<&str> = BTreeSet::new();
            let mut stack: Vec<&str> = vec![input.as_str()];
            while let Some(point) = stack.pop() {
                if !seen.insert(point) {
                    continue;
                }
                if let Some(site) = partitionable(point) {
                    let what = if point == input {
                        format!("reads point {point:?}")
                    } else {
                        format!("reads point {point:?} (through derived input {input:?})")
                    };
                    out.push((rule.id.clone(), refuse(what, site)));
                }
                if let Some(derived) = by_id.get(point).and_then(|d| d.derived.as_ref()) {
                    stack.extend(derived.inputs.iter().map(String::as_str));
                }
                debug_assert!(seen.len() <= descriptors.len(), "each point is visited once");
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::super::source;
    use super::*;

    const UNITS: &str = r#"
[quantities]
temperature = "degC"
[units]
degC = { quantity = "temperature", factor = 1.0 }
"#;

    const CODEBOOKS: &str = "[codebooks.pump_state]\n\"0\" = \"off\"\n\"1\" = \"on\"\n\"2\" = \"fault\"\n";

    const SITES: &str = "[sites.barn]\npartitionable = true\n[sites.plant-room]\npartitionable = false\n";

    const COMMON: &str = r#"retention = "state"
agg_safe = false
freshness_s = 60
archetype = "hardware"
peak_rate_hz = 0.1
event_policy = "on_change"
row_bytes = 96
"#;

    /// A point: `COMMON`'s fields, but for those `extra` sets itself.
    fn point(id: &str, instance: &str, extra: &str) -> String {
        let common: String = COMMON
            .lines()
            .filter(|l| {
                let key = l.split(" =").next().unwrap_or("");
                !extra.lines().any(|e| e.starts_with(&format!("{key} =")))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        format!("[[point]]\nid = \"{id}\"\ndriver_instance = \"{instance}\"\n{common}{extra}\n")
    }

    /// The points the rules read and claim: plant-a at a site that is not partitionable, barn
    /// at one that is, and a derived point over a barn point.
    fn hosts() -> Vec<(String, String)> {
        let plant = [
            point(
                "boiler.temp",
                "m1",
                "kind = \"number\"\nunit = \"degC\"\nrange = { min = 0.0, max = 120.0 }\n\
                 missing_data = { policy = \"hold_last_valid\", max_staleness_s = 120 }",
            ),
            point(
                "boiler.sp",
                "m1",
                "kind = \"number\"\nunit = \"degC\"\nrange = { min = 20.0, max = 90.0 }\n\
                 writable = { verify_s = 60, tolerance = 0.5 }",
            ),
            point(
                "pump.state",
                "m1",
                "kind = \"enum\"\ncodebook = \"pump_state\"\nmissing_data = { policy = \"emit_marker\" }",
            ),
            point("pump.on", "m1", "kind = \"bool\"\nwritable = { verify_s = 60 }"),
            point("boiler.text", "m1", "kind = \"text\"\nevent_policy = \"never\""),
        ];
        let barn = [
            point(
                "barn.temp",
                "b1",
                "kind = \"number\"\nunit = \"degC\"\nmissing_data = { policy = \"fail_closed\" }",
            ),
            point(
                "barn.valve",
                "b1",
                "kind = \"bool\"\nwritable = { verify_s = 60 }\nmissing_data = { policy = \"fail_closed\" }",
            ),
        ];
        let derived = point(
            "barn.temp_max",
            "derived",
            "kind = \"number\"\nunit = \"degC\"\narchetype = \"derived\"\nmissing_data = { policy = \"fail_closed\" }\n\
             derived = { op = \"max\", inputs = [\"barn.temp\"], window_s = 60 }",
        );
        let plant = plant.concat();
        vec![
            ("units.toml".into(), UNITS.into()),
            ("codebooks.toml".into(), CODEBOOKS.into()),
            ("sites.toml".into(), SITES.into()),
            (
                "hosts/plant-a.toml".into(),
                format!("host = \"plant-a\"\nsite = \"plant-room\"\n{plant}"),
            ),
            (
                "hosts/barn.toml".into(),
                format!("host = \"barn\"\nsite = \"barn\"\n{}", barn.concat()),
            ),
            (
                "hosts/sentinel.toml".into(),
                format!("host = \"sentinel\"\n{derived}"),
            ),
        ]
    }

    const BASE: &[(&str, &str)] = &[
        ("id", "\"r.hot\""),
        ("inputs", "[\"boiler.temp\"]"),
        ("when", "\"boiler.temp > 85\""),
        (
            "claim",
            "{ point = \"boiler.sp\", value = 60, band = \"automation\" }",
        ),
        ("otherwise", "\"release\""),
        ("on_input_loss", "\"release\""),
    ];

    /// The base rule with fields replaced (`Some`) or removed (`None`).
    fn rule(overrides: &[(&str, Option<&str>)]) -> String {
        let mut fields: BTreeMap<&str, &str> = BASE.iter().copied().collect();
        for (key, value) in overrides {
            match value {
                Some(v) => fields.insert(key, v),
                None => fields.remove(key),
            };
        }
        let mut text = String::from("[[rule]]\n");
        for (k, v) in fields {
            text.push_str(&format!("{k} = {v}\n"));
        }
        text
    }

    /// The whole report of loading the hosts with `rules` as `rules.toml` (empty: it loads).
    fn lines_of(files: &[(&str, String)]) -> Vec<String> {
        let mut all = hosts();
        all.extend(files.iter().map(|(p, t)| (p.to_string(), t.clone())));
        match source::load(&all) {
            Ok(_) => vec![],
            Err(report) => report.issues.iter().map(ToString::to_string).collect(),
        }
    }

    fn lines(rules: &[String]) -> Vec<String> {
        lines_of(&[("rules.toml", rules.concat())])
    }

    /// The report of one rule, the base with `overrides`.
    fn one(overrides: &[(&str, Option<&str>)]) -> Vec<String> {
        lines(&[rule(overrides)])
    }

    fn line(message: &str) -> String {
        format!("rules.toml: rule \"r.hot\": {message}")
    }

    #[test]
    fn a_rule_resolves_into_the_descriptor_of_the_point_it_claims_with_its_defaults() {
        let mut files = hosts();
        files.push((
            "rules.toml".into(),
            [
                rule(&[("id", Some("\"r.z\""))]),
                rule(&[]),
                rule(&[
                    ("id", Some("\"r.full\"")),
                    ("until", Some("\"boiler.temp < 80\"")),
                    ("for_s", Some("30")),
                    (
                        "claim",
                        Some("{ point = \"boiler.sp\", value = 55, band = \"safety\", priority = 3 }"),
                    ),
                    ("otherwise", Some("{ value = 70 }")),
                    ("on_input_loss", Some("\"hold\"")),
                    ("warmup", Some("{ deadline_s = 120 }")),
                    ("fight", Some("{ changes_max = 6, window_s = 600 }")),
                ]),
            ]
            .concat(),
        ));
        let loaded = source::load(&files).expect("loads");
        let sp = loaded
            .iter()
            .find(|d| d.id == "boiler.sp")
            .expect("claimed point");
        let ids: Vec<&str> = sp.rules.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, ["r.full", "r.hot", "r.z"], "sorted by id");
        let hot = &sp.rules[1];
        assert_eq!(
            (
                hot.point.as_str(),
                hot.for_s,
                hot.warmup_deadline_s,
                hot.claim.priority,
                &hot.until
            ),
            ("boiler.sp", 0, WARMUP_DEADLINE_DEFAULT_S, 0, &None)
        );
        let full = &sp.rules[0];
        assert_eq!(
            (
                full.for_s,
                full.warmup_deadline_s,
                full.claim.band,
                full.claim.priority
            ),
            (30, 120, RuleBand::Safety, 3)
        );
        assert_eq!(full.otherwise, RuleFallback::Value(CommandValue::Number(70.0)));
        assert_eq!(full.on_input_loss, RuleFallback::Hold);
        assert_eq!(
            full.fight,
            Some(FightLimit {
                changes_max: 6,
                window_s: 600
            })
        );
        assert!(full.until.is_some());
        let temp = loaded.iter().find(|d| d.id == "boiler.temp").expect("input");
        assert_eq!(
            temp.missing_data,
            Some(MissingData::HoldLastValid { max_staleness_s: 120 })
        );
        assert!(
            temp.rules.is_empty(),
            "a rule lives with the point it claims, not its inputs"
        );
        for id in ["r.full", "r.hot", "r.z"] {
            assert!(
                loaded.iter().any(|d| d.id == health::rule_state_point(id)),
                "the state point of {id}"
            );
        }
    }

    #[test]
    fn a_duplicate_rule_id_is_refused_naming_both_places() {
        assert_eq!(
            lines(&[rule(&[]), rule(&[])]),
            [line("duplicate id: entries #1 and #2 in this file")]
        );
        assert_eq!(
            lines_of(&[("rules.toml", rule(&[])), ("more-rules.toml", rule(&[]))]),
            ["rules.toml: rule \"r.hot\": duplicate id: also defined in more-rules.toml"]
        );
    }

    #[test]
    fn a_rule_id_is_a_dotted_path_short_enough_for_its_state_point() {
        assert_eq!(
            one(&[("id", Some("\"r..x\""))]),
            [
                "rules.toml: rule \"r..x\": id is not NATS-subject-safe: dot-separated non-empty parts of ASCII \
                 letters, digits, '_' and '-', at most 128 bytes"
            ]
        );
        assert_eq!(one(&[("id", None)]), ["rules.toml: rule \"#1\": missing id"]);
        let long = "r".repeat(POINT_ID_BYTES_MAX - 19);
        assert_eq!(
            one(&[("id", Some(&format!("{long:?}")))]),
            [format!(
                "rules.toml: rule {long:?}: its state point \"sentinel.rule.{long}.state\" would be 129 bytes, \
                 over the 128-byte point id bound; shorten the rule's id"
            )]
        );
        let fits = "r".repeat(POINT_ID_BYTES_MAX - 20);
        assert_eq!(one(&[("id", Some(&format!("{fits:?}")))]), Vec::<String>::new());
    }

    #[test]
    fn inputs_are_exactly_the_declared_points_the_conditions_read() {
        assert_eq!(
            one(&[("inputs", Some("[\"boiler.temp\", \"nope\"]"))]),
            [
                line("input \"nope\" is not a point in the registry"),
                line(
                    "input \"nope\" is read by no condition; a rule's inputs are exactly the points its conditions read"
                ),
            ]
        );
        assert_eq!(
            one(&[("when", Some("\"boiler.temp > 85 or pump.on == true\""))]),
            [line("when reads \"pump.on\", which is not among its inputs")]
        );
        assert_eq!(
            one(&[("until", Some("\"pump.on == false\""))]),
            [line("until reads \"pump.on\", which is not among its inputs")]
        );
        assert_eq!(
            one(&[("inputs", Some("[\"boiler.temp\", \"boiler.temp\"]"))]),
            [line("input \"boiler.temp\" is listed twice")]
        );
        assert_eq!(
            one(&[("inputs", Some("[]"))]),
            [line("inputs is empty; a rule reads at least one point")]
        );
        let many: Vec<String> = (0..=RULE_INPUTS_MAX).map(|i| format!("\"p{i}\"")).collect();
        assert_eq!(
            one(&[("inputs", Some(&format!("[{}]", many.join(", "))))]),
            [line("17 inputs, more than the limit of 16")]
        );
    }

    #[test]
    fn a_condition_is_bounded_and_its_syntax_errors_name_the_byte() {
        assert_eq!(
            one(&[("when", Some("\"boiler.temp = 85\""))]),
            [line(
                "when: at byte 12: \"=\" is not an operator; compare with \"==\""
            )]
        );
        // 33 comparisons and the `or` joining them: 34 nodes; 65 with 64 comparisons.
        let wide = vec!["boiler.temp > 1"; CONDITION_NODES_MAX].join(" or ");
        assert_eq!(
            one(&[("when", Some(&format!("{wide:?}")))]),
            [line("when has 65 nodes, more than the limit of 64")]
        );
        let fits = vec!["boiler.temp > 1"; CONDITION_NODES_MAX - 1].join(" or ");
        assert_eq!(one(&[("when", Some(&format!("{fits:?}")))]), Vec::<String>::new());
    }

    #[test]
    fn the_number_of_rules_is_bounded() {
        let many: String = (0..=RULES_MAX)
            .map(|i| rule(&[("id", Some(&format!("\"r.n{i}\"")))]))
            .collect();
        let (folder, _) = super::super::folder::parse(&[("rules.toml".into(), many)]);
        let mut issues = Vec::new();
        check_rules(&folder, &Vocabulary::default(), &mut issues);
        assert!(
            issues.iter().any(
                |i| i.to_string() == "(registry folder): 4097 rules defined, more than the limit of 4096"
            ),
            "{:?}",
            issues.first()
        );
    }

    #[test]
    fn the_claim_is_on_a_writable_point_with_a_value_it_can_take() {
        let claim = |c: &str| one(&[("claim", Some(c))]);
        assert_eq!(
            claim("{ point = \"nope\", value = 60, band = \"automation\" }"),
            [line("claim point \"nope\" is not a point in the registry")]
        );
        assert_eq!(
            claim("{ point = \"boiler.temp\", value = 60, band = \"automation\" }"),
            [line(
                "claim point \"boiler.temp\" is not writable; a rule claims only a point with a writable section"
            )]
        );
        assert_eq!(
            claim("{ point = \"boiler.sp\", value = 95, band = \"automation\" }"),
            [line(
                "claim value: the value 95 degC is outside the point's range 20 to 90 degC"
            )]
        );
        assert_eq!(
            claim("{ point = \"boiler.sp\", value = true, band = \"automation\" }"),
            [line("claim value: the value is not a number")]
        );
        assert_eq!(
            claim("{ point = \"boiler.sp\", value = 60 }"),
            [line(
                "claim without band: say \"automation\", \"safety\" or \"interlock\""
            )]
        );
        let operator = claim("{ point = \"boiler.sp\", value = 60, band = \"operator\" }");
        assert_eq!(operator.len(), 1, "{operator:?}");
        assert!(
            operator[0].starts_with(&line("unknown variant `operator`")),
            "{operator:?}"
        );
        let unknown = one(&[("colour", Some("\"red\""))]);
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert!(
            unknown[0].starts_with(&line("unknown field `colour`")),
            "{unknown:?}"
        );
    }

    #[test]
    fn otherwise_and_on_input_loss_say_release_hold_or_a_safe_value() {
        assert_eq!(
            one(&[("otherwise", Some("\"hold\""))]),
            [line(
                "otherwise = \"hold\" would keep claiming after the condition stops holding; pick \"release\" or \
                 a safe { value = ... }"
            )]
        );
        assert_eq!(
            one(&[("otherwise", Some("{ value = 10 }"))]),
            [line(
                "otherwise value: the value 10 degC is outside the point's range 20 to 90 degC"
            )]
        );
        assert_eq!(
            one(&[("on_input_loss", Some("{ value = 100 }"))]),
            [line(
                "on_input_loss value: the value 100 degC is outside the point's range 20 to 90 degC"
            )]
        );
        assert_eq!(
            one(&[("on_input_loss", Some("\"drop\""))]),
            [line(
                "on_input_loss \"drop\" is not \"release\", \"hold\" or { value = ... }"
            )]
        );
        assert_eq!(
            one(&[("otherwise", None)]),
            [line(
                "missing otherwise: say \"release\" or a safe { value = ... }"
            )]
        );
        assert_eq!(one(&[("on_input_loss", Some("\"hold\""))]), Vec::<String>::new());
        let bare = one(&[("otherwise", Some("70"))]);
        assert_eq!(bare.len(), 1, "{bare:?}");
        assert!(
            bare[0].starts_with(&line(
                "expected \"release\", \"hold\" or { value = V }, not the integer 70"
            )),
            "{bare:?}"
        );
        let typo = one(&[("on_input_loss", Some("{ valeu = 70 }"))]);
        assert_eq!(typo.len(), 1, "{typo:?}");
        assert!(
            typo[0].starts_with(&line("a safe value is { value = V }: unknown field `valeu`")),
            "{typo:?}"
        );
    }

    #[test]
    fn a_comparison_fits_its_points_kind() {
        let rule_on = |input: &str, when: &str| {
            one(&[
                ("inputs", Some(&format!("[{input:?}]"))),
                ("when", Some(&format!("{when:?}"))),
            ])
        };
        assert_eq!(
            rule_on("pump.on", "pump.on > true"),
            [line(
                "when orders bool point \"pump.on\" with >; a bool, enum or text point compares only with == or !="
            )]
        );
        assert_eq!(
            rule_on("pump.on", "pump.on == 1"),
            [line(
                "when compares bool point \"pump.on\" with 1; compare it with true or false"
            )]
        );
        assert_eq!(
            rule_on("pump.state", "pump.state == \"purple\""),
            [line(
                "when compares enum point \"pump.state\" with \"purple\", not a member of its codebook (fault, off, on)"
            )]
        );
        assert_eq!(
            rule_on("pump.state", "pump.state == 2"),
            [line(
                "when compares enum point \"pump.state\" with 2; compare it with a \"quoted\" member of its codebook"
            )]
        );
        assert_eq!(
            rule_on("pump.state", "pump.state <= \"on\""),
            [line(
                "when orders enum point \"pump.state\" with <=; a bool, enum or text point compares only with == or !="
            )]
        );
        assert_eq!(
            rule_on("boiler.temp", "boiler.temp > true"),
            [line(
                "when compares number point \"boiler.temp\" with true; compare it with a number"
            )]
        );
        assert_eq!(
            rule_on("boiler.temp", "boiler.temp != \"hot\""),
            [line(
                "when compares number point \"boiler.temp\" with \"hot\"; compare it with a number"
            )]
        );
        assert_eq!(
            rule_on("boiler.text", "boiler.text == 3"),
            [line(
                "when compares text point \"boiler.text\" with 3; compare it with a \"quoted\" text"
            )]
        );
        for fine in [
            (
                "pump.state",
                "pump.state != \"fault\" and quality(pump.state) == live",
            ),
            ("boiler.text", "boiler.text == \"E12\""),
            ("pump.on", "not pump.on == false"),
        ] {
            assert_eq!(rule_on(fine.0, fine.1), Vec::<String>::new(), "{fine:?}");
        }
    }

    #[test]
    fn durations_and_the_fight_limit_are_bounded() {
        assert_eq!(
            one(&[("for_s", Some("86401"))]),
            [line("for_s 86401 is more than the limit of 86400")]
        );
        assert_eq!(
            one(&[("warmup", Some("{ deadline_s = 0 }"))]),
            [line("warmup deadline_s 0 must be between 1 and 86400")]
        );
        assert_eq!(
            one(&[("warmup", Some("{ deadline_s = 86401 }"))]),
            [line("warmup deadline_s 86401 must be between 1 and 86400")]
        );
        assert_eq!(
            one(&[("fight", Some("{ changes_max = 0, window_s = 0 }"))]),
            [
                line("fight changes_max 0 must be between 1 and 1000"),
                line("fight window_s 0 must be between 1 and 86400"),
            ]
        );
        assert_eq!(one(&[("for_s", Some("86400"))]), Vec::<String>::new());
    }

    #[test]
    fn hold_last_valid_holds_between_a_second_and_a_day_and_no_shorter_than_freshness() {
        let with = |policy: &str| {
            let mut files = hosts();
            files[3].1 = files[3]
                .1
                .replace("{ policy = \"hold_last_valid\", max_staleness_s = 120 }", policy);
            match source::load(&files) {
                Ok(_) => vec![],
                Err(report) => report.issues.iter().map(ToString::to_string).collect::<Vec<_>>(),
            }
        };
        let on = |message: &str| format!("hosts/plant-a.toml: point \"boiler.temp\": {message}");
        assert_eq!(
            with("{ policy = \"hold_last_valid\", max_staleness_s = 0 }"),
            [on(
                "missing_data hold_last_valid max_staleness_s 0 must be between 1 and 86400"
            )]
        );
        assert_eq!(
            with("{ policy = \"hold_last_valid\", max_staleness_s = 86401 }"),
            [on(
                "missing_data hold_last_valid max_staleness_s 86401 must be between 1 and 86400"
            )]
        );
        assert_eq!(
            with("{ policy = \"hold_last_valid\", max_staleness_s = 30 }"),
            [on(
                "missing_data hold_last_valid max_staleness_s 30 is shorter than freshness_s 60: the point would \
                 count as lost between two on-time readings; pick at least 60"
            )]
        );
        assert_eq!(
            with("{ policy = \"hold_last_valid\", max_staleness_s = 60 }"),
            Vec::<String>::new()
        );
        let unknown = with("{ policy = \"hold_last_valid\", max_staleness_s = 60, grace_s = 1 }");
        assert_eq!(unknown.len(), 1, "{unknown:?}");
        assert!(unknown[0].contains("grace_s"), "{unknown:?}");
        assert!(!with("{ policy = \"retry\" }").is_empty());
    }

    /// Issue 22 item 2: a safety or interlock rule's inputs declare `fail_closed` or
    /// `hold_last_valid`; an automation rule's need not.
    #[test]
    fn a_protection_rules_inputs_must_declare_a_policy_that_fails_closed() {
        let protect = |band: &str, input: &str, when: &str| {
            one(&[
                ("inputs", Some(&format!("[{input:?}]"))),
                ("when", Some(&format!("{when:?}"))),
                (
                    "claim",
                    Some(&format!(
                        "{{ point = \"boiler.sp\", value = 60, band = {band:?} }}"
                    )),
                ),
            ])
        };
        assert_eq!(
            protect("safety", "pump.on", "pump.on == true"),
            [line(
                "input \"pump.on\" of a safety rule must declare missing_data fail_closed or hold_last_valid; it \
                 declares none"
            )]
        );
        assert_eq!(
            protect("interlock", "pump.state", "pump.state == \"fault\""),
            [line(
                "input \"pump.state\" of an interlock rule must declare missing_data fail_closed or \
                 hold_last_valid; it declares emit_marker"
            )]
        );
        assert_eq!(
            protect("automation", "pump.state", "pump.state == \"fault\""),
            Vec::<String>::new()
        );
        assert_eq!(
            protect("safety", "boiler.temp", "boiler.temp > 85"),
            Vec::<String>::new()
        );
        assert_eq!(
            protect("interlock", "boiler.temp", "boiler.temp > 85"),
            Vec::<String>::new()
        );
    }

    /// Issue 22 item 6: an interlock that reads or acts on a point at a partitionable site is
    /// refused, naming the rule, the point and the site; a safety rule there is not.
    #[test]
    fn an_interlock_at_a_partitionable_site_is_refused_naming_the_point_and_the_site() {
        let refusal = |what: &str| {
            line(&format!(
                "an interlock-band rule {what} at partitionable site \"barn\"; an interlock must hold at its site, \
                 not through the core: use band \"safety\", or place the host at a site that is not partitionable"
            ))
        };
        let acts = [
            (
                "claim",
                Some("{ point = \"barn.valve\", value = false, band = \"interlock\" }"),
            ),
            ("otherwise", Some("{ value = true }")),
        ];
        assert_eq!(one(&acts), [refusal("acts on point \"barn.valve\"")]);
        assert_eq!(
            one(&[
                acts[0],
                ("inputs", Some("[\"barn.temp\"]")),
                ("when", Some("\"barn.temp > 30\""))
            ]),
            [
                refusal("acts on point \"barn.valve\""),
                refusal("reads point \"barn.temp\"")
            ]
        );
        let reads = |input: &str| {
            one(&[
                ("inputs", Some(&format!("[{input:?}]"))),
                ("when", Some(&format!("\"{input} > 30\""))),
                (
                    "claim",
                    Some("{ point = \"boiler.sp\", value = 60, band = \"interlock\" }"),
                ),
            ])
        };
        assert_eq!(reads("barn.temp"), [refusal("reads point \"barn.temp\"")]);
        assert_eq!(
            reads("barn.temp_max"),
            [refusal(
                "reads point \"barn.temp\" (through derived input \"barn.temp_max\")"
            )]
        );
        assert_eq!(
            one(&[(
                "claim",
                Some("{ point = \"barn.valve\", value = false, band = \"safety\" }")
            )]),
            Vec::<String>::new()
        );
    }
}
