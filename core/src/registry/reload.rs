//! What a running core may take from a newly loaded registry version without a restart
//! (issue 21 item 7, "the valve"; core runtime spec, "Backpressure": "poll intervals are
//! pushed over the bus and applied without restarting").
//!
//! Owns: [`compare`], one pure function from the running registry and a newly loaded one to
//! what changed between them, sorted into what the core applies live ([`LiveChange`]) and
//! what needs a restart (one line per reason, naming the point and the field).
//!
//! Live: a point's `manifest.poll_interval_s`, and its `assignment.driver_instance` when the
//! point stays on its host and both instances are ones the running registry already has (the
//! drivers and health parts keep one entry per instance and per host from startup). Anything
//! else needs a restart: a point added or removed (generated health points included), any
//! other field of a descriptor (kind, unit, range, codebook, retention, freshness, the rest
//! of the manifest, `derived`, `writable`, `device`, the host, the site, the missing-data
//! policy, and its rules, each named by the rule), and a driver
//! instance that appears or is left with no point.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::Registry;
use super::descriptor::Descriptor;

/// Restart reasons kept in one answer; the rest are counted.
pub const RESTART_REASONS_MAX: usize = 32;

/// A change the running core applies without restarting.
#[derive(Clone, Debug, PartialEq)]
pub enum LiveChange {
    /// The point's driver polls it at a new interval (`None`: the driver's own default).
    PollInterval {
        point: Arc<str>,
        from: Option<f64>,
        to: Option<f64>,
    },
    /// The point moved between two driver instances of its host.
    Assignment {
        point: Arc<str>,
        from: Arc<str>,
        to: Arc<str>,
    },
}

impl LiveChange {
    /// The point the change is about.
    pub fn point(&self) -> &Arc<str> {
        match self {
            LiveChange::PollInterval { point, .. } | LiveChange::Assignment { point, .. } => point,
        }
    }
}

/// What loading `loaded` over `running` means for the running core.
#[derive(Clone, Debug, PartialEq)]
pub enum Reload {
    /// `loaded` is not newer than the running version: nothing to do.
    NotNewer,
    /// Newer, and every difference can be applied live (possibly none: the same content
    /// under a new version number).
    Live(Vec<LiveChange>),
    /// Newer, and something cannot be applied live: the reasons, one line each, at most
    /// [`RESTART_REASONS_MAX`], and how many more there were. Nothing is applied.
    RestartNeeded { reasons: Vec<String>, omitted: usize },
}

/// Compares a running registry with a newly loaded one (see the module docs for which
/// changes are live).
pub fn compare(running: &Registry, loaded: &Registry) -> Reload {
    if loaded.version <= running.version {
        return Reload::NotNewer;
    }
    let mut reasons = Vec::new();
    let mut live = Vec::new();
    for (_, old) in running.points() {
        if loaded.resolve(&old.id).is_none() {
            reasons.push(format!("point {:?} is removed", &*old.id));
        }
    }
    for (_, new) in loaded.points() {
        let Some(old_idx) = running.resolve(&new.id) else {
            reasons.push(format!("point {:?} is added", &*new.id));
            continue;
        };
        let old = &running.point(old_idx).descriptor;
        let new_d = &new.descriptor;
        compare_point(old, new_d, &mut live, &mut reasons);
    }
    let instances = |r: &Registry| -> BTreeSet<(String, String)> {
        r.points()
            .map(|(_, p)| {
                (
                    p.descriptor.assignment.host.clone(),
                    p.descriptor.assignment.driver_instance.clone(),
                )
            })
            .collect()
    };
    let (before, after) = (instances(running), instances(loaded));
    for (host, instance) in after.difference(&before) {
        reasons.push(format!(
            "driver instance {instance:?} of host {host:?} is new: the core watches the instances it started with"
        ));
    }
    for (host, instance) in before.difference(&after) {
        reasons.push(format!(
            "driver instance {instance:?} of host {host:?} is left with no point"
        ));
    }
    if reasons.is_empty() {
        return Reload::Live(live);
    }
    reasons.sort();
    let omitted = reasons.len().saturating_sub(RESTART_REASONS_MAX);
    reasons.truncate(RESTART_REASONS_MAX);
    Reload::RestartNeeded { reasons, omitted }
}

/// One point present in both versions: its live changes, and a reason per other field that
/// differs.
fn compare_point(old: &Descriptor, new: &Descriptor, live: &mut Vec<LiveChange>, reasons: &mut Vec<String>) {
    let point: Arc<str> = Arc::from(new.id.as_str());
    let mut moved = false;
    if old.manifest.poll_interval_s != new.manifest.poll_interval_s {
        live.push(LiveChange::PollInterval {
            point: point.clone(),
            from: old.manifest.poll_interval_s,
            to: new.manifest.poll_interval_s,
        });
    }
    if old.assignment.driver_instance != new.assignment.driver_instance {
        moved = true;
    }
    // Every other field must be equal: compare the new descriptor with the live fields put
    // back to the old values, field by field, so a reason names the field.
    let mut rest = new.clone();
    rest.manifest.poll_interval_s = old.manifest.poll_interval_s;
    rest.assignment.driver_instance = old.assignment.driver_instance.clone();
    // A rule change is named by the rule (issue 22): the rules part is built at core start.
    let rules_changed = rule_changes(old, new, reasons);
    rest.rules = old.rules.clone();
    if rest != *old || rules_changed {
        for field in differing_fields(old, &rest) {
            reasons.push(format!(
                "point {:?}: {field} changed; only poll_interval_s and the driver instance change without a restart",
                new.id
            ));
        }
        return;
    }
    if moved {
        live.push(LiveChange::Assignment {
            point,
            from: Arc::from(old.assignment.driver_instance.as_str()),
            to: Arc::from(new.assignment.driver_instance.as_str()),
        });
    }
}

/// A reason per rule of the point added, removed or changed; whether there was any.
fn rule_changes(old: &Descriptor, new: &Descriptor, reasons: &mut Vec<String>) -> bool {
    if old.rules == new.rules {
        return false;
    }
    let ids: BTreeSet<&str> = old
        .rules
        .iter()
        .chain(&new.rules)
        .map(|r| r.id.as_str())
        .collect();
    for id in ids {
        let find = |d: &Descriptor| d.rules.iter().find(|r| r.id == id).cloned();
        let what = match (find(old), find(new)) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(_), Some(_)) => "changed",
            (None, _) => "added",
            (_, None) => "removed",
        };
        reasons.push(format!(
            "point {:?}: rule {id:?} {what}; rules are built at core start, so a rule change needs a restart",
            new.id
        ));
    }
    true
}

/// The fields that differ between two descriptors, dotted one level into the objects
/// (`manifest.peak_rate_hz`, `assignment.host`), in field order.
fn differing_fields(a: &Descriptor, b: &Descriptor) -> Vec<String> {
    let (Ok(serde_json::Value::Object(a)), Ok(serde_json::Value::Object(b))) =
        (serde_json::to_value(a), serde_json::to_value(b))
    else {
        return vec!["the descriptor".to_owned()];
    };
    let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let mut fields = Vec::new();
    for key in keys {
        let (x, y) = (a.get(key), b.get(key));
        if x == y {
            continue;
        }
        match (x, y) {
            (Some(serde_json::Value::Object(x)), Some(serde_json::Value::Object(y)))
                if matches!(key.as_str(), "manifest" | "assignment") =>
            {
                let inner: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                fields.extend(
                    inner
                        .into_iter()
                        .filter(|k| x.get(*k) != y.get(*k))
                        .map(|k| format!("{key}.{k}")),
                );
            }
            _ => fields.push(key.clone()),
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Kind, RetentionClass};

    fn point(id: &str, instance: &str) -> Descriptor {
        let mut d = Descriptor::new(id, Kind::Number, RetentionClass::Measurement, "plant-a", instance);
        d.manifest.poll_interval_s = Some(10.0);
        d
    }

    fn registry(version: i32, points: Vec<Descriptor>) -> Registry {
        Registry::compile(version, String::new(), String::new(), points).unwrap()
    }

    fn base() -> Vec<Descriptor> {
        vec![point("boiler.temp", "modbus-1"), point("boiler.flow", "modbus-2")]
    }

    #[test]
    fn an_older_or_equal_version_is_not_newer() {
        let running = registry(3, base());
        assert_eq!(compare(&running, &registry(3, base())), Reload::NotNewer);
        assert_eq!(compare(&running, &registry(2, base())), Reload::NotNewer);
    }

    #[test]
    fn the_same_content_under_a_new_version_is_live_with_nothing_to_do() {
        assert_eq!(
            compare(&registry(1, base()), &registry(2, base())),
            Reload::Live(vec![])
        );
    }

    #[test]
    fn a_poll_interval_change_is_live() {
        let mut new = base();
        new[0].manifest.poll_interval_s = Some(20.0);
        new[1].manifest.poll_interval_s = None;
        assert_eq!(
            compare(&registry(1, base()), &registry(2, new)),
            Reload::Live(vec![
                LiveChange::PollInterval {
                    point: "boiler.flow".into(),
                    from: Some(10.0),
                    to: None
                },
                LiveChange::PollInterval {
                    point: "boiler.temp".into(),
                    from: Some(10.0),
                    to: Some(20.0)
                },
            ])
        );
    }

    #[test]
    fn a_move_between_existing_instances_of_the_host_is_live() {
        let mut old = base();
        old.push(point("boiler.level", "modbus-2"));
        let mut new = old.clone();
        new[2].assignment.driver_instance = "modbus-1".into();
        assert_eq!(
            compare(&registry(1, old), &registry(2, new)),
            Reload::Live(vec![LiveChange::Assignment {
                point: "boiler.level".into(),
                from: "modbus-2".into(),
                to: "modbus-1".into()
            }])
        );
    }

    fn restart(old: Vec<Descriptor>, new: Vec<Descriptor>) -> Vec<String> {
        match compare(&registry(1, old), &registry(2, new)) {
            Reload::RestartNeeded { reasons, omitted } => {
                assert_eq!(omitted, 0);
                reasons
            }
            other => panic!("expected a restart, got {other:?}"),
        }
    }

    #[test]
    fn any_other_field_needs_a_restart_naming_the_point_and_field() {
        let mut new = base();
        new[0].manifest.peak_rate_hz = 1.0;
        new[0].freshness_s = 30;
        new[0].manifest.poll_interval_s = Some(20.0);
        assert_eq!(
            restart(base(), new),
            vec![
                r#"point "boiler.temp": freshness_s changed; only poll_interval_s and the driver instance change without a restart"#,
                r#"point "boiler.temp": manifest.peak_rate_hz changed; only poll_interval_s and the driver instance change without a restart"#,
            ]
        );
        let mut new = base();
        new[1].assignment.host = "plant-b".into();
        new[1].assignment.driver_instance = "modbus-1".into();
        assert_eq!(
            restart(base(), new),
            vec![
                r#"driver instance "modbus-1" of host "plant-b" is new: the core watches the instances it started with"#,
                r#"driver instance "modbus-2" of host "plant-a" is left with no point"#,
                r#"point "boiler.flow": assignment.host changed; only poll_interval_s and the driver instance change without a restart"#,
            ]
        );
    }

    #[test]
    fn points_added_or_removed_and_new_instances_need_a_restart() {
        let mut new = base();
        new.remove(1);
        new.push(point("boiler.level", "modbus-1"));
        assert_eq!(
            restart(base(), new),
            vec![
                r#"driver instance "modbus-2" of host "plant-a" is left with no point"#,
                r#"point "boiler.flow" is removed"#,
                r#"point "boiler.level" is added"#,
            ]
        );
        let mut new = base();
        new[1].assignment.driver_instance = "modbus-3".into();
        assert_eq!(
            restart(base(), new),
            vec![
                r#"driver instance "modbus-2" of host "plant-a" is left with no point"#,
                r#"driver instance "modbus-3" of host "plant-a" is new: the core watches the instances it started with"#,
            ]
        );
    }

    /// A rule added, removed or changed on a point, or its missing-data policy, needs a
    /// restart; each rule is named.
    #[test]
    fn a_change_of_a_points_rules_or_missing_data_policy_needs_a_restart_naming_the_rule() {
        use crate::registry::CommandValue;
        use crate::registry::rule::{
            CompareOp, Condition, MissingData, Rule, RuleBand, RuleClaim, RuleFallback,
        };
        let rule = |id: &str, value: f64| Rule {
            id: id.into(),
            inputs: vec!["boiler.flow".into()],
            when: Condition::Compare {
                point: "boiler.flow".into(),
                op: CompareOp::Gt,
                value: CommandValue::Number(value),
            },
            until: None,
            for_s: 0,
            point: "boiler.temp".into(),
            claim: RuleClaim {
                band: RuleBand::Safety,
                priority: 0,
                value: CommandValue::Number(1.0),
            },
            otherwise: RuleFallback::Release,
            on_input_loss: RuleFallback::Release,
            warmup_deadline_s: 60,
            fight: None,
        };
        let mut old = base();
        old[0].rules = vec![rule("r.a", 1.0), rule("r.b", 1.0)];
        let mut new = old.clone();
        new[0].rules = vec![rule("r.b", 2.0), rule("r.c", 1.0)];
        assert_eq!(
            restart(old.clone(), new),
            vec![
                r#"point "boiler.temp": rule "r.a" removed; rules are built at core start, so a rule change needs a restart"#,
                r#"point "boiler.temp": rule "r.b" changed; rules are built at core start, so a rule change needs a restart"#,
                r#"point "boiler.temp": rule "r.c" added; rules are built at core start, so a rule change needs a restart"#,
            ]
        );
        let mut new = old.clone();
        new[1].missing_data = Some(MissingData::FailClosed);
        assert_eq!(
            restart(old, new),
            vec![
                r#"point "boiler.flow": missing_data changed; only poll_interval_s and the driver instance change without a restart"#
            ]
        );
    }

    #[test]
    fn the_reasons_are_bounded_and_counted() {
        let old: Vec<Descriptor> = (0..40).map(|i| point(&format!("p.{i:02}"), "modbus-1")).collect();
        let new: Vec<Descriptor> = old
            .iter()
            .cloned()
            .map(|mut d| {
                d.freshness_s = 30;
                d
            })
            .collect();
        match compare(&registry(1, old), &registry(2, new)) {
            Reload::RestartNeeded { reasons, omitted } => {
                assert_eq!(reasons.len(), RESTART_REASONS_MAX);
                assert_eq!(omitted, 40 - RESTART_REASONS_MAX);
            }
            other => panic!("expected a restart, got {other:?}"),
        }
    }
}
