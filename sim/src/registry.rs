//! The registry a run uses: the repository's sample registry, loaded exactly as production
//! loads a registry folder, plus a second version stored mid-stream by the `registry_reload`
//! fault or by the operator before a reprocess (a changed deadband, a corrected conversion and
//! a newly added point). Its derived points (host `sentinel`,
//! computed by the core) run in every seed and are checked by invariant 17. Loaded once per process and shared by
//! every seed, since parsing TOML per seed would dominate a short run.

use std::collections::BTreeMap;

use anyhow::Context as _;
use sentinel_core::RegistrySnapshot;
use sentinel_core::registry::canonical;
use sentinel_core::registry::rule::{
    CompareOp, Condition, FightLimit, MissingData, Rule, RuleBand, RuleClaim, RuleFallback,
};
use sentinel_core::registry::{CommandValue, Descriptor, Kind};
use sentinel_runtime::registry_dir;

/// A point a driver publishes, with what it needs to make plausible readings.
#[derive(Clone, Debug)]
pub struct DriverPoint {
    pub id: String,
    pub host: String,
    pub instance: String,
    pub kind: Kind,
    pub unit_native: Option<String>,
    /// Native-unit bounds that map onto the canonical range (or a plausible span).
    pub native_lo: f64,
    pub native_hi: f64,
    pub codes: Vec<String>,
}

/// A writable point the simulated operator may command, with values it can take (issue 21
/// item 1: the core refuses any other request, so the operator asks only for these).
#[derive(Clone, Debug)]
pub struct CommandPoint {
    pub id: String,
    /// At least one; a request picks one by the draw it makes.
    pub values: Vec<serde_json::Value>,
}

impl CommandPoint {
    /// The value the `n`th draw picks, never the [`Self::reserved`] one (when there are two or
    /// more).
    pub fn value(&self, n: u64) -> serde_json::Value {
        let drawn = (self.values.len() as u64).saturating_sub(1).max(1);
        self.values[(n % drawn) as usize].clone()
    }

    /// A value no drawn request asks for, so a request for it always changes the point's
    /// desired value and issues a command (the dangerous window's late command must exist).
    pub fn reserved(&self) -> serde_json::Value {
        self.values[self.values.len() - 1].clone()
    }
}

pub struct SimRegistry {
    pub v1: RegistrySnapshot,
    pub v2: RegistrySnapshot,
    /// Device hosts (every assigned host except the core's own self-points host), each with
    /// its points, sorted.
    pub hosts: BTreeMap<String, Vec<DriverPoint>>,
    /// The point only version 2 knows: `unknown_point` until a core runs that version.
    pub added_point: DriverPoint,
    /// The writable points of version 1 (version 2 keeps them), sorted by id.
    pub command_points: Vec<CommandPoint>,
    /// `freshness_s` of every point of either version, in µs (for the checker).
    pub freshness_us: std::sync::Arc<BTreeMap<std::sync::Arc<str>, i64>>,
    /// The derived points of either version (for the checker's invariant 17).
    pub derived: std::sync::Arc<BTreeMap<std::sync::Arc<str>, crate::checker::derived::DerivedDef>>,
    /// The point version 2 gives another conversion (offset + 1), which the operator's
    /// reprocess corrects: an `agg_safe` number point on a device host that no derived point
    /// reads (so invariant 17's windows are not rewritten under it).
    pub reprocess_point: String,
    /// `agg_safe` of every point of either version (for the checker's invariant 10).
    pub agg_safe: std::sync::Arc<crate::checker::rollups::AggSafe>,
    /// The event policy and deadbands of every point of either version (for the checker's
    /// invariant 21).
    pub events: std::sync::Arc<BTreeMap<std::sync::Arc<str>, crate::checker::events::EventDef>>,
    /// The writable points of either version (for the checker's invariants 12 and 18–20).
    pub writable: std::sync::Arc<BTreeMap<std::sync::Arc<str>, crate::checker::commands::WritableDef>>,
    /// The rules every seed runs (issue 22), declared on both versions alike, by id (for the
    /// checker's invariants 22–25).
    pub rules: std::sync::Arc<BTreeMap<String, Rule>>,
    /// The report-on-change point (issue 22: a rule input whose gaps are judged by its
    /// heartbeat), published by a driver of its own, and its `heartbeat_s`.
    pub on_change: (DriverPoint, u32),
    /// Freshness and missing-data policy of every point a rule reads.
    pub rule_inputs: std::sync::Arc<BTreeMap<std::sync::Arc<str>, crate::checker::rules::InputDef>>,
}

/// The host that owns the core's self-points; no simulated driver publishes for it.
const SELF_HOST: &str = "sentinel";

impl SimRegistry {
    pub fn sample() -> anyhow::Result<SimRegistry> {
        let dir = registry_dir::sample_dir();
        let descriptors = registry_dir::check_dir(&dir)
            .map_err(|report| anyhow::anyhow!("sample registry does not check: {report}"))
            .with_context(|| format!("loading {}", dir.display()))?;
        let mut descriptors = descriptors;
        let on_change = on_change_point(&mut descriptors)?;
        let rules = sim_rules(&mut descriptors)?;
        let v1 = canonical::snapshot("sim-v1", &descriptors);

        let mut hosts: BTreeMap<String, Vec<DriverPoint>> = BTreeMap::new();
        for d in &descriptors {
            if d.assignment.host != SELF_HOST && d.id != on_change.0.id {
                hosts
                    .entry(d.assignment.host.clone())
                    .or_default()
                    .push(driver_point(d));
            }
        }
        anyhow::ensure!(
            hosts.len() >= 2,
            "the sample registry needs at least two device hosts"
        );
        let command_points: Vec<CommandPoint> = descriptors.iter().filter_map(command_point).collect();
        anyhow::ensure!(
            !command_points.is_empty(),
            "the sample registry needs writable points, so every seed commands some"
        );

        // Version 2: one deadband changed, one point added (a copy of a number point).
        let mut v2_descriptors = descriptors.clone();
        let template = v2_descriptors
            .iter()
            .find(|d| d.kind == Kind::Number && d.assignment.host != SELF_HOST)
            .cloned()
            .context("the sample registry has no number point on a device host")?;
        if let Some(d) = v2_descriptors.iter_mut().find(|d| d.id == template.id) {
            d.deadband += 0.5;
        }
        let derived_inputs: std::collections::BTreeSet<String> = v2_descriptors
            .iter()
            .filter_map(|d| d.derived.as_ref())
            .flat_map(|derived| derived.inputs.iter().cloned())
            .collect();
        let reprocess_point = v2_descriptors
            .iter_mut()
            .find(|d| {
                d.kind == Kind::Number
                    && d.agg_safe
                    && d.assignment.host != SELF_HOST
                    && d.id != template.id
                    && !derived_inputs.contains(&d.id)
            })
            .context("the sample registry has no second agg_safe number point outside derived inputs")?;
        reprocess_point.conversion.offset += 1.0;
        let reprocess_point = reprocess_point.id.clone();
        anyhow::ensure!(
            !rules.values().any(|r| r.inputs.contains(&reprocess_point)),
            "the reprocessed point {reprocess_point} must not be a rule's input (invariant 24 reads its rows)"
        );
        let mut added = template;
        added.id = format!("{}.sim_added", added.id);
        let added_point = driver_point(&added);
        v2_descriptors.push(added);
        let v2 = canonical::snapshot("sim-v2", &v2_descriptors);
        let freshness_us = v2_descriptors
            .iter()
            .map(|d| {
                (
                    std::sync::Arc::from(d.id.as_str()),
                    i64::from(d.freshness_s) * 1_000_000,
                )
            })
            .collect();

        let derived = crate::checker::derived::definitions(&v2_descriptors);
        anyhow::ensure!(
            !derived.is_empty(),
            "the sample registry needs derived points, so every seed runs them"
        );
        let agg_safe = crate::checker::rollups::agg_safe_points(v2_descriptors.iter());
        let writable = crate::checker::commands::writable_points(v2_descriptors.iter());
        let events = crate::checker::events::definitions(&descriptors, &v2_descriptors);
        let rule_inputs = crate::checker::rules::input_defs(v2_descriptors.iter());
        Ok(SimRegistry {
            on_change,
            events: std::sync::Arc::new(events),
            rules: std::sync::Arc::new(rules),
            rule_inputs: std::sync::Arc::new(rule_inputs),
            writable: std::sync::Arc::new(writable),
            reprocess_point,
            agg_safe: std::sync::Arc::new(agg_safe),
            derived: std::sync::Arc::new(derived),
            v1,
            v2,
            hosts,
            added_point,
            command_points,
            freshness_us: std::sync::Arc::new(freshness_us),
        })
    }
}

/// The values a writable point can take that the operator asks for: a number's range ends and
/// middle (or 0, 1, 2 without a range), both bools, every codebook member.
fn command_point(d: &Descriptor) -> Option<CommandPoint> {
    d.writable.as_ref()?;
    let values: Vec<serde_json::Value> = match d.kind {
        Kind::Number => match d.range {
            Some(r) => vec![
                serde_json::json!(r.min),
                serde_json::json!((r.min + r.max) / 2.0),
                serde_json::json!(r.max),
            ],
            None => vec![serde_json::json!(0), serde_json::json!(1), serde_json::json!(2)],
        },
        Kind::Bool => vec![serde_json::json!(false), serde_json::json!(true)],
        Kind::Enum => d
            .codebook
            .iter()
            .flat_map(|c| c.values())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .map(|member| serde_json::json!(member))
            .collect(),
        Kind::Text => Vec::new(),
    };
    (values.len() >= 2).then(|| CommandPoint {
        id: d.id.clone(),
        values,
    })
}

fn driver_point(d: &Descriptor) -> DriverPoint {
    let (native_lo, native_hi) = sentinel_models::fleet::native_span(d);
    DriverPoint {
        id: d.id.clone(),
        host: d.assignment.host.clone(),
        instance: d.assignment.driver_instance.clone(),
        kind: d.kind,
        unit_native: d.unit_native.clone(),
        native_lo,
        native_hi,
        codes: d
            .codebook
            .as_ref()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default(),
    }
}

/// The report-on-change point of every seed: `ahu1.filter_alarm`, a bool copied from
/// `ahu1.fan_alarm` on a driver instance of its own (`onchange-ahu1`, so its sequence is its
/// own), `reporting = "on_change"` with a 10 s heartbeat and a 30 s freshness. The watchdog's
/// deadline and a rule's gap are its heartbeat, not its freshness. Added here rather than to
/// the sample registry, whose drivers publish every point at random.
fn on_change_point(descriptors: &mut Vec<Descriptor>) -> anyhow::Result<(DriverPoint, u32)> {
    const HEARTBEAT_S: u32 = 10;
    let mut d = descriptors
        .iter()
        .find(|d| d.id == "ahu1.fan_alarm")
        .cloned()
        .context("the sample registry has no point ahu1.fan_alarm")?;
    d.id = "ahu1.filter_alarm".into();
    d.assignment.driver_instance = "onchange-ahu1".into();
    d.freshness_s = 30;
    d.manifest.reporting = Some(sentinel_core::registry::Reporting::OnChange);
    d.manifest.heartbeat_s = Some(HEARTBEAT_S);
    d.manifest.event_policy = sentinel_core::registry::EventPolicy::OnChange;
    d.rules.clear();
    let point = driver_point(&d);
    descriptors.push(d);
    descriptors.sort_by(|a, b| a.id.cmp(&b.id));
    Ok((point, HEARTBEAT_S))
}

/// The rules of every seed (issue 22, "What it must show", the simulator): a handful over the
/// sample's points, claiming writable points the operator commands too, so rule claims meet
/// the operator's in the resolver. Between them: the automation and safety bands, with and
/// without `for_s`, an `until` (hysteresis), `otherwise` release and a safe value, each
/// `on_input_loss` (release, hold, a value), a fight limit, and a condition on quality. Number
/// thresholds sit at the middle of the input's range, where the simulated drivers' random
/// walk starts, so conditions change in most runs; bool inputs change at random. Each rule's
/// claim, `otherwise` and `on_input_loss` values differ, so the checker can tell which a claim
/// is. The inputs get the missing-data policies the protection rules need. Pushed into the
/// descriptors of the points they claim (sorted by id, as a loaded folder stores them).
fn sim_rules(descriptors: &mut [Descriptor]) -> anyhow::Result<BTreeMap<String, Rule>> {
    let mid = |id: &str| -> anyhow::Result<f64> {
        let d = descriptors
            .iter()
            .find(|d| d.id == id)
            .with_context(|| format!("the sample registry has no point {id}"))?;
        let r = d.range.with_context(|| format!("{id} has no range"))?;
        Ok((r.min + r.max) / 2.0)
    };
    let cmp = |point: &str, op: CompareOp, value: CommandValue| Condition::Compare {
        point: point.into(),
        op,
        value,
    };
    let num = CommandValue::Number;
    let flow = mid("boiler1.flow_temp")?;
    let outside = mid("ahu1.outside_air_temp")?;
    let pressure = mid("boiler1.pressure")?;
    let rule = |id: &str, inputs: &[&str], when: Condition, point: &str, claim: RuleClaim| Rule {
        id: id.into(),
        inputs: inputs.iter().map(|s| (*s).to_owned()).collect(),
        when,
        until: None,
        for_s: 0,
        point: point.into(),
        claim,
        otherwise: RuleFallback::Release,
        on_input_loss: RuleFallback::Release,
        warmup_deadline_s: 60,
        fight: None,
    };
    let claim = |band, priority, value| RuleClaim {
        band,
        priority,
        value,
    };
    let rules = vec![
        // Hysteresis, at once, releases; held when it fights.
        Rule {
            until: Some(cmp("boiler1.flow_temp", CompareOp::Gt, num(flow + 0.3))),
            fight: Some(FightLimit {
                changes_max: 6,
                window_s: 120,
            }),
            ..rule(
                "sim.boost",
                &["boiler1.flow_temp"],
                cmp("boiler1.flow_temp", CompareOp::Lt, num(flow)),
                "boiler1.setpoint",
                claim(RuleBand::Automation, 5, num(80.0)),
            )
        },
        // Safety, `for_s`, a safe value otherwise, held on input loss (hold_last_valid).
        Rule {
            for_s: 20,
            otherwise: RuleFallback::Value(num(21.0)),
            on_input_loss: RuleFallback::Hold,
            warmup_deadline_s: 90,
            ..rule(
                "sim.frost",
                &["ahu1.outside_air_temp"],
                cmp("ahu1.outside_air_temp", CompareOp::Lt, num(outside)),
                "ahu1.supply_temp_setpoint",
                claim(RuleBand::Safety, 1, num(24.0)),
            )
        },
        // Safety on a bool, `for_s`, a value on input loss (fail_closed).
        Rule {
            for_s: 6,
            on_input_loss: RuleFallback::Value(CommandValue::Bool(true)),
            ..rule(
                "sim.fan_trip",
                &["ahu1.fan_alarm"],
                cmp("ahu1.fan_alarm", CompareOp::Eq, CommandValue::Bool(true)),
                "ahu1.occupied",
                claim(RuleBand::Safety, 0, CommandValue::Bool(false)),
            )
        },
        // Two inputs, `for_s`, an enum claim.
        Rule {
            for_s: 10,
            warmup_deadline_s: 30,
            ..rule(
                "sim.vent",
                &["boiler1.gas_valve_open", "boiler1.pressure"],
                Condition::All(vec![
                    cmp("boiler1.gas_valve_open", CompareOp::Eq, CommandValue::Bool(true)),
                    cmp("boiler1.pressure", CompareOp::Gt, num(pressure)),
                ]),
                "ahu1.mode",
                claim(RuleBand::Automation, 2, CommandValue::Member("ventilate".into())),
            )
        },
        // An interlock at a site that cannot be cut off (plant-a stands in main-building):
        // outranks every other claim and breaks minimum holds; its input fail-closed.
        Rule {
            until: Some(cmp("boiler1.pressure", CompareOp::Lt, num(pressure))),
            ..rule(
                "sim.overpressure",
                &["boiler1.pressure"],
                cmp("boiler1.pressure", CompareOp::Gt, num(pressure + 2.0)),
                "boiler1.setpoint",
                claim(RuleBand::Interlock, 0, num(40.0)),
            )
        },
        // A report-on-change input: its gaps are judged by its heartbeat (10 s), not its
        // freshness (30 s), so a missed heartbeat starts the `for_s` again.
        Rule {
            for_s: 12,
            ..rule(
                "sim.filter",
                &["ahu1.filter_alarm"],
                cmp("ahu1.filter_alarm", CompareOp::Eq, CommandValue::Bool(true)),
                "ahu1.supply_temp_setpoint",
                claim(RuleBand::Automation, 3, num(19.0)),
            )
        },
        // A condition on quality alone (never lost), `for_s`, a safe value otherwise.
        Rule {
            for_s: 15,
            otherwise: RuleFallback::Value(num(62.0)),
            ..rule(
                "sim.return_watch",
                &["boiler1.return_temp"],
                Condition::Quality {
                    point: "boiler1.return_temp".into(),
                    equals: false,
                    quality: sentinel_core::registry::rule::QualityName::Live,
                },
                "boiler1.setpoint",
                claim(RuleBand::Automation, 1, num(65.0)),
            )
        },
    ];
    let policies = [
        (
            "ahu1.outside_air_temp",
            MissingData::HoldLastValid { max_staleness_s: 900 },
        ),
        ("ahu1.fan_alarm", MissingData::FailClosed),
        ("boiler1.pressure", MissingData::FailClosed),
    ];
    for (id, policy) in policies {
        let d = descriptors
            .iter_mut()
            .find(|d| d.id == id)
            .with_context(|| format!("the sample registry has no point {id}"))?;
        d.missing_data = Some(policy);
    }
    for rule in &rules {
        let d = descriptors
            .iter_mut()
            .find(|d| d.id == rule.point && d.writable.is_some())
            .with_context(|| format!("rule {}: no writable point {}", rule.id, rule.point))?;
        d.rules.push(rule.clone());
        d.rules.sort_by(|a, b| a.id.cmp(&b.id));
    }
    Ok(rules.into_iter().map(|r| (r.id.clone(), r)).collect())
}
