//! The generated health self-points of every driver host and every device (issue 26 item 4;
//! core runtime spec, "Scale targets": "roughly two per device, seven per driver host" among
//! the core's self-points).
//!
//! Owns: which health points a registry gets, their stable ids, and their descriptors. They
//! are generated from the declared points, never written by hand: one set per host that has a
//! point (other than the core's own host, `sentinel`), one set per `device` some point
//! declares. Each is a self-point in every respect: host `sentinel`, driver instance `core`,
//! retention `diagnostic`, archetype `derived`, a declared rate of one reading per
//! [`HEALTH_INTERVAL_S`], so it is stored, versioned, hashed, admitted against the budget and
//! counted by `registry plan` like any point. [`generate`] is called by
//! the loader (`source.rs`) after the declared points resolve; the pure core's health part
//! computes the values.
//!
//! Ids (`<host>` and `<device>` are subject tokens, so every id is a valid point id):
//!
//! | id | unit | value |
//! | --- | --- | --- |
//! | `sentinel.host.<host>.connected_instances` | count | instances of the host that said hello at this core's epoch (connected or ready) |
//! | `sentinel.host.<host>.last_hello_age` | s | since the newest hello of any instance of the host, to this core |
//! | `sentinel.host.<host>.publish_failures` | count | sum of the instances' last `publish_failures` readings (observations the stream did not accept when first published) |
//! | `sentinel.host.<host>.disk_queue_depth` | count | sum of the instances' last `queue_depth` readings (observations waiting in the disk queues) |
//! | `sentinel.host.<host>.disk_queue_drops` | count | sum of the instances' last `queue_drops` readings |
//! | `sentinel.device.<device>.last_reading_age` | s | since the newest `observed_at` of any of the device's points |
//! | `sentinel.device.<device>.non_live_share` | percent | share of the device's points whose current quality is not `live` |
//! | `sentinel.point.<point>.convergence` | — | one per writable point (issue 21 item 5): 1 converged (the last command verified, or none outstanding since the core started), 0 pending (a command issued and not yet verified), -1 diverged (the last command diverged, or was rejected) |
//! | `sentinel.rule.<rule>.state` | — | one per rule (issue 22; [`RuleStateCode`]), range -2 to 3: 0 idle, 1 pending (its `for_s` running), 2 firing (claiming), 3 warmup, -1 held (fighting), -2 an input lost |
//!
//! A writable point whose id is too long for its convergence point's id
//! ([`CONVERGENCE_POINT_ID_PREFIX`] + id + [`CONVERGENCE_POINT_ID_SUFFIX`] within
//! `POINT_ID_BYTES_MAX`) is refused by the loader (`source.rs`); a rule whose id is too long
//! for its state point's ([`rule_state_point`]) by admission (`rule_check.rs`).

use std::collections::BTreeSet;

use super::descriptor::{
    Archetype, Descriptor, EventPolicy, Kind, Range, RetentionClass, SELF_HOST, SELF_INSTANCE,
};

/// One health reading per host figure and per device figure every this many seconds: the
/// declared rate of every generated point (and the core's default health interval).
pub const HEALTH_INTERVAL_S: u32 = 10;
/// A health point not heard from for three intervals is stale.
const HEALTH_FRESHNESS_S: u32 = 3 * HEALTH_INTERVAL_S;
const HEALTH_ROW_BYTES: u32 = 96;

/// The figures generated per driver host, in the order the core reports them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HostFigure {
    ConnectedInstances,
    LastHelloAge,
    PublishFailures,
    DiskQueueDepth,
    DiskQueueDrops,
}

impl HostFigure {
    pub const ALL: [HostFigure; 5] = [
        HostFigure::ConnectedInstances,
        HostFigure::LastHelloAge,
        HostFigure::PublishFailures,
        HostFigure::DiskQueueDepth,
        HostFigure::DiskQueueDrops,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HostFigure::ConnectedInstances => "connected_instances",
            HostFigure::LastHelloAge => "last_hello_age",
            HostFigure::PublishFailures => "publish_failures",
            HostFigure::DiskQueueDepth => "disk_queue_depth",
            HostFigure::DiskQueueDrops => "disk_queue_drops",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            HostFigure::LastHelloAge => "s",
            HostFigure::ConnectedInstances
            | HostFigure::PublishFailures
            | HostFigure::DiskQueueDepth
            | HostFigure::DiskQueueDrops => "count",
        }
    }
}

/// The figures generated per device, in the order the core reports them.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DeviceFigure {
    LastReadingAge,
    NonLiveShare,
}

impl DeviceFigure {
    pub const ALL: [DeviceFigure; 2] = [DeviceFigure::LastReadingAge, DeviceFigure::NonLiveShare];

    pub fn as_str(self) -> &'static str {
        match self {
            DeviceFigure::LastReadingAge => "last_reading_age",
            DeviceFigure::NonLiveShare => "non_live_share",
        }
    }

    fn unit(self) -> &'static str {
        match self {
            DeviceFigure::LastReadingAge => "s",
            DeviceFigure::NonLiveShare => "percent",
        }
    }
}

/// `sentinel.host.<host>.<figure>`.
pub fn host_point(host: &str, figure: HostFigure) -> String {
    format!("{SELF_HOST}.host.{host}.{}", figure.as_str())
}

/// `sentinel.device.<device>.<figure>`.
pub fn device_point(device: &str, figure: DeviceFigure) -> String {
    format!("{SELF_HOST}.device.{device}.{}", figure.as_str())
}

/// What a writable point's convergence point id starts and ends with.
pub const CONVERGENCE_POINT_ID_PREFIX: &str = "sentinel.point.";
pub const CONVERGENCE_POINT_ID_SUFFIX: &str = ".convergence";

/// `sentinel.point.<point>.convergence`: a writable point's convergence self-point.
pub fn convergence_point(point_id: &str) -> String {
    format!("{CONVERGENCE_POINT_ID_PREFIX}{point_id}{CONVERGENCE_POINT_ID_SUFFIX}")
}

/// What a rule's state point id starts and ends with.
pub const RULE_STATE_POINT_ID_PREFIX: &str = "sentinel.rule.";
pub const RULE_STATE_POINT_ID_SUFFIX: &str = ".state";

/// `sentinel.rule.<rule>.state`: a rule's state self-point (issue 22). The rules part
/// publishes it, one [`RuleStateCode`] per reading.
pub fn rule_state_point(rule_id: &str) -> String {
    format!("{RULE_STATE_POINT_ID_PREFIX}{rule_id}{RULE_STATE_POINT_ID_SUFFIX}")
}

/// The values of a rule's state point: a unit-less code, -2 to 3.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RuleStateCode {
    /// Its inputs are live and `when` does not hold: it claims nothing.
    Idle,
    /// `when` holds and its `for_s` is running.
    Pending,
    /// It claims (its claim value, or its `otherwise` / `on_input_loss` safe value).
    Firing,
    /// In warmup: claims nothing until its inputs are live or its deadline passes.
    Warmup,
    /// Held in its last state: its claim changed more often than its fight limit allows.
    Held,
    /// An input is lost (by the input's missing-data policy): it does what `on_input_loss` says.
    InputLost,
}

impl RuleStateCode {
    pub const ALL: [RuleStateCode; 6] = [
        RuleStateCode::Idle,
        RuleStateCode::Pending,
        RuleStateCode::Firing,
        RuleStateCode::Warmup,
        RuleStateCode::Held,
        RuleStateCode::InputLost,
    ];

    /// Its label in the `sentinel_rules{state}` gauge.
    pub fn label(self) -> &'static str {
        match self {
            RuleStateCode::Idle => "idle",
            RuleStateCode::Pending => "pending",
            RuleStateCode::Firing => "firing",
            RuleStateCode::Warmup => "warmup",
            RuleStateCode::Held => "held",
            RuleStateCode::InputLost => "input_lost",
        }
    }

    /// Its position in [`Self::ALL`] (and in the gauge's labels).
    pub fn index(self) -> usize {
        self as usize
    }

    /// The published value.
    pub fn code(self) -> f64 {
        match self {
            RuleStateCode::Idle => 0.0,
            RuleStateCode::Pending => 1.0,
            RuleStateCode::Firing => 2.0,
            RuleStateCode::Warmup => 3.0,
            RuleStateCode::Held => -1.0,
            RuleStateCode::InputLost => -2.0,
        }
    }
}

/// Whether `d` is one of the generated health points (by its id and the core's host).
pub fn is_generated(d: &Descriptor) -> bool {
    d.assignment.host == SELF_HOST
        && (d.id.starts_with(&format!("{SELF_HOST}.host."))
            || d.id.starts_with(&format!("{SELF_HOST}.device."))
            || d.id.starts_with(CONVERGENCE_POINT_ID_PREFIX)
            || d.id.starts_with(RULE_STATE_POINT_ID_PREFIX))
}

/// The driver hosts (every host with a point, except the core's own) and the devices the
/// declared points name, sorted.
pub fn hosts_and_devices(declared: &[Descriptor]) -> (BTreeSet<&str>, BTreeSet<&str>) {
    let hosts = declared
        .iter()
        .map(|d| d.assignment.host.as_str())
        .filter(|h| *h != SELF_HOST)
        .collect();
    let devices = declared.iter().filter_map(|d| d.device.as_deref()).collect();
    (hosts, devices)
}

/// The health points of the declared points' hosts and devices, sorted by id.
pub fn generate(declared: &[Descriptor]) -> Vec<Descriptor> {
    let (hosts, devices) = hosts_and_devices(declared);
    let mut out = Vec::with_capacity(hosts.len() * HostFigure::ALL.len() + devices.len() * 2);
    for host in hosts {
        for figure in HostFigure::ALL {
            out.push(health_descriptor(host_point(host, figure), figure.unit()));
        }
    }
    for device in devices {
        for figure in DeviceFigure::ALL {
            out.push(health_descriptor(device_point(device, figure), figure.unit()));
        }
    }
    for writable in declared.iter().filter(|d| d.writable.is_some()) {
        out.push(health_descriptor(convergence_point(&writable.id), "code"));
    }
    for rule in declared.iter().flat_map(|d| &d.rules) {
        out.push(health_descriptor(rule_state_point(&rule.id), "rule_state"));
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

fn health_descriptor(id: String, unit: &str) -> Descriptor {
    let mut d = Descriptor::new(
        &id,
        Kind::Number,
        RetentionClass::Diagnostic,
        SELF_HOST,
        SELF_INSTANCE,
    );
    // A convergence code (-1, 0 or 1) and a rule's state code (-2 to 3) have no unit.
    d.unit = (!matches!(unit, "code" | "rule_state")).then(|| unit.to_owned());
    d.range = Some(match unit {
        "percent" => Range { min: 0.0, max: 100.0 },
        "code" => Range { min: -1.0, max: 1.0 },
        "rule_state" => Range { min: -2.0, max: 3.0 },
        // Ages up to ten years, counts up to 10^12: bounds, not expectations.
        "s" => Range {
            min: 0.0,
            max: 315_360_000.0,
        },
        _ => Range { min: 0.0, max: 1e12 },
    });
    d.freshness_s = HEALTH_FRESHNESS_S;
    d.manifest.archetype = Archetype::Derived;
    d.manifest.peak_rate_hz = 1.0 / f64::from(HEALTH_INTERVAL_S);
    d.manifest.event_policy = EventPolicy::Never;
    d.manifest.row_bytes = HEALTH_ROW_BYTES;
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_per_host_two_per_device_none_for_the_core_itself() {
        let mut a = Descriptor::new("a.t", Kind::Number, RetentionClass::Measurement, "plant-a", "m1");
        a.device = Some("boiler1".into());
        let mut b = Descriptor::new("a.p", Kind::Number, RetentionClass::Measurement, "plant-a", "m2");
        b.device = Some("boiler1".into());
        let c = Descriptor::new("e.p", Kind::Number, RetentionClass::Measurement, "elec", "m3");
        let core = Descriptor::new(
            "sentinel.core.lag_pending",
            Kind::Number,
            RetentionClass::Diagnostic,
            SELF_HOST,
            SELF_INSTANCE,
        );
        let ids: Vec<String> = generate(&[a, b, c, core]).into_iter().map(|d| d.id).collect();
        assert_eq!(
            ids,
            [
                "sentinel.device.boiler1.last_reading_age",
                "sentinel.device.boiler1.non_live_share",
                "sentinel.host.elec.connected_instances",
                "sentinel.host.elec.disk_queue_depth",
                "sentinel.host.elec.disk_queue_drops",
                "sentinel.host.elec.last_hello_age",
                "sentinel.host.elec.publish_failures",
                "sentinel.host.plant-a.connected_instances",
                "sentinel.host.plant-a.disk_queue_depth",
                "sentinel.host.plant-a.disk_queue_drops",
                "sentinel.host.plant-a.last_hello_age",
                "sentinel.host.plant-a.publish_failures",
            ]
        );
    }

    /// One state point per rule, a unit-less code whose range holds exactly the codes.
    #[test]
    fn each_rule_gets_a_state_point_with_the_codes_range() {
        use crate::registry::CommandValue;
        use crate::registry::rule::{CompareOp, Condition, Rule, RuleBand, RuleClaim, RuleFallback};
        let mut w = Descriptor::new("b.sp", Kind::Number, RetentionClass::State, "h", "i");
        w.rules = ["b.r1", "b.r2"]
            .into_iter()
            .map(|id| Rule {
                id: id.into(),
                inputs: vec!["b.t".into()],
                when: Condition::Compare {
                    point: "b.t".into(),
                    op: CompareOp::Gt,
                    value: CommandValue::Number(1.0),
                },
                until: None,
                for_s: 0,
                point: "b.sp".into(),
                claim: RuleClaim {
                    band: RuleBand::Automation,
                    priority: 0,
                    value: CommandValue::Number(1.0),
                },
                otherwise: RuleFallback::Release,
                on_input_loss: RuleFallback::Release,
                warmup_deadline_s: 60,
                fight: None,
            })
            .collect();
        let generated = generate(&[w]);
        let states: Vec<&Descriptor> = generated
            .iter()
            .filter(|g| g.id.starts_with(RULE_STATE_POINT_ID_PREFIX))
            .collect();
        assert_eq!(
            states.iter().map(|g| g.id.as_str()).collect::<Vec<_>>(),
            ["sentinel.rule.b.r1.state", "sentinel.rule.b.r2.state"]
        );
        let range = states[0].range.expect("a range");
        let codes: Vec<f64> = RuleStateCode::ALL.iter().map(|c| c.code()).collect();
        assert_eq!(codes, [0.0, 1.0, 2.0, 3.0, -1.0, -2.0]);
        assert!(codes.iter().all(|c| *c >= range.min && *c <= range.max));
        assert_eq!(
            (range.min, range.max, states[0].unit.as_deref()),
            (-2.0, 3.0, None)
        );
        assert!(states.iter().all(|g| is_generated(g)));
    }

    #[test]
    fn a_generated_point_is_a_diagnostic_self_point_at_the_health_rate() {
        let d = Descriptor::new("x", Kind::Number, RetentionClass::State, "h", "i");
        let generated = generate(&[d]);
        let age = generated
            .iter()
            .find(|g| g.id == host_point("h", HostFigure::LastHelloAge))
            .expect("generated");
        assert_eq!(
            (
                age.assignment.host.as_str(),
                age.assignment.driver_instance.as_str()
            ),
            (SELF_HOST, SELF_INSTANCE)
        );
        assert_eq!(age.retention, RetentionClass::Diagnostic);
        assert_eq!(age.unit.as_deref(), Some("s"));
        assert_eq!(age.manifest.archetype, Archetype::Derived);
        assert!((age.manifest.peak_rate_hz - 0.1).abs() < 1e-12);
        assert!(age.writable.is_none() && age.derived.is_none() && age.device.is_none());
    }
}
