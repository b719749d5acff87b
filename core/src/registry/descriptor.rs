//! The point descriptor: what the registry says about one point (DESIGN.md §4).
//!
//! Owns: the resolved, self-contained form of a descriptor. "Resolved" means the affine
//! conversion and codebook are inlined, so a stored descriptor blob alone is enough to
//! reinterpret any historical row (ingest spec, "The registry is versioned data"). The
//! canonical JSON of this struct is what gets hashed and stored.
//!
//! Also owns what a writable point may be commanded to ([`Writable`], [`value_refusal`], and
//! re-exports [`CommandValue`], which `rule.rs` below it owns): the one check both admission (a `relinquish_default`) and the commands
//! part (a request's value) run, so a value the registry accepts as a default is one a request
//! may ask for too (issue 21 item 1).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

pub use super::rule::CommandValue;
use super::rule::{MissingData, Rule};

/// A point id's longest length. Point ids are dotted paths, so they get more room than single
/// names. Here, at the bottom, because admission (`check.rs`) and the rules' admission
/// (`rule_check.rs`, a generated rule state point's id) both bound ids by it.
pub const POINT_ID_BYTES_MAX: usize = 128;

/// The physical split of the observation log (ingest spec, "One hypertable per retention class").
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RetentionClass {
    Measurement,
    State,
    Diagnostic,
}

impl RetentionClass {
    pub const ALL: [RetentionClass; 3] = [
        RetentionClass::Measurement,
        RetentionClass::State,
        RetentionClass::Diagnostic,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RetentionClass::Measurement => "measurement",
            RetentionClass::State => "state",
            RetentionClass::Diagnostic => "diagnostic",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Number,
    Bool,
    Enum,
    Text,
}

/// `canonical = native × factor + offset`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Conversion {
    pub factor: f64,
    pub offset: f64,
}

impl Conversion {
    pub const IDENTITY: Conversion = Conversion {
        factor: 1.0,
        offset: 0.0,
    };

    pub fn apply(self, native: f64) -> f64 {
        native * self.factor + self.offset
    }
}

/// Inclusive bounds in the canonical unit.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

/// The host the registry assigns the core's own points to (its self-points and derived
/// points): the core publishes their readings itself, on `obs.sentinel.>`.
pub const SELF_HOST: &str = "sentinel";
/// The driver instance of the core's self-points, under [`SELF_HOST`].
pub const SELF_INSTANCE: &str = "core";

/// Which driver host and instance may publish this point (stage 5), and the site the host is
/// at.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    pub host: String,
    pub driver_instance: String,
    /// The host's site, when its file names one (`site = "..."`). Omitted from the canonical
    /// form when unset, so a registry without sites keeps the hashes it had before sites
    /// existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<Site>,
}

/// A site as a point's descriptor carries it: where its host stands (core runtime spec,
/// "Geographic split").
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Site {
    pub name: String,
    /// The site can be cut off from the core (a remote building behind one link): no interlock
    /// may depend on a round trip through the core there.
    pub partitionable: bool,
}

impl Descriptor {
    /// The partitionable site this point's host stands at, if it does.
    pub fn partitionable_site(&self) -> Option<&str> {
        self.assignment
            .site
            .as_ref()
            .filter(|site| site.partitionable)
            .map(|site| site.name.as_str())
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Archetype {
    Hardware,
    Polled,
    Derived,
    Model,
}

/// When a reading also raises an event (sensor paradigm, "record vs raise").
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum EventPolicy {
    /// Record only; transitions are the only events.
    Never,
    /// Raise on a change past the deadband.
    OnChange,
    /// Raise on every reading; only admissible at low declared rates.
    Always,
}

/// What a derived point computes (sensor paradigm: "a rolling window derived from another
/// sensor's history" is a sensor).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum DerivedOp {
    /// Over a sliding window of one input.
    Mean,
    Min,
    Max,
    Sum,
    Count,
    /// (last − first) / elapsed seconds, over the window.
    RateOfChange,
    /// Two inputs: first − second.
    Difference,
    /// Two inputs: first / second.
    Ratio,
}

impl DerivedOp {
    pub const ALL: [DerivedOp; 8] = [
        DerivedOp::Mean,
        DerivedOp::Min,
        DerivedOp::Max,
        DerivedOp::Sum,
        DerivedOp::Count,
        DerivedOp::RateOfChange,
        DerivedOp::Difference,
        DerivedOp::Ratio,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DerivedOp::Mean => "mean",
            DerivedOp::Min => "min",
            DerivedOp::Max => "max",
            DerivedOp::Sum => "sum",
            DerivedOp::Count => "count",
            DerivedOp::RateOfChange => "rate_of_change",
            DerivedOp::Difference => "difference",
            DerivedOp::Ratio => "ratio",
        }
    }

    /// Computed over a sliding window of one input (needs `window_s`); otherwise over the
    /// latest values of two inputs.
    pub fn is_window(self) -> bool {
        !matches!(self, DerivedOp::Difference | DerivedOp::Ratio)
    }

    /// How many inputs the op takes.
    pub fn inputs(self) -> usize {
        if self.is_window() { 1 } else { 2 }
    }

    /// Adds values up, which is only meaningful for an `agg_safe` input.
    pub fn needs_agg_safe(self) -> bool {
        matches!(self, DerivedOp::Mean | DerivedOp::Sum)
    }
}

/// A derived point's definition: computed by the core from its inputs' committed rows.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Derived {
    pub op: DerivedOp,
    /// Point ids, in order (`difference` and `ratio` read first, second).
    pub inputs: Vec<String>,
    /// The sliding window's length, for window ops.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_s: Option<u32>,
}

/// How a source reports (sensor paradigm: "a sensor that only reports on change cannot be
/// told apart from a dead one unless it is made to heartbeat").
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Reporting {
    /// Every sampling interval, changed or not.
    Periodic,
    /// Only when the value changes, plus a heartbeat (`heartbeat_s`).
    OnChange,
}

/// Why `value` is not one a point of `kind` with this range (canonical unit `unit`) and
/// codebook can be commanded to, as one line; `None` when it can. Text points take no
/// commands (admission refuses `writable` on one).
pub fn value_refusal(
    kind: Kind,
    range: Option<Range>,
    unit: Option<&str>,
    codebook: Option<&BTreeMap<String, String>>,
    value: &CommandValue,
) -> Option<String> {
    match (kind, value) {
        (Kind::Number, CommandValue::Number(v)) => {
            if !v.is_finite() {
                return Some("the value is not a finite number".to_owned());
            }
            let range = range?;
            (*v < range.min || *v > range.max).then(|| {
                let unit = unit.map(|u| format!(" {u}")).unwrap_or_default();
                format!(
                    "the value {v}{unit} is outside the point's range {} to {}{unit}",
                    range.min, range.max
                )
            })
        }
        (Kind::Bool, CommandValue::Bool(_)) => None,
        (Kind::Enum, CommandValue::Member(member)) => {
            let members: BTreeSet<&str> = codebook
                .map(|c| c.values().map(String::as_str).collect())
                .unwrap_or_default();
            (!members.contains(member.as_str())).then(|| {
                format!(
                    "{member:?} is not a member of the point's codebook ({})",
                    members.into_iter().collect::<Vec<_>>().join(", ")
                )
            })
        }
        (Kind::Number, _) => Some("the value is not a number".to_owned()),
        (Kind::Bool, _) => Some("the value is not a bool (true or false)".to_owned()),
        (Kind::Enum, _) => Some("the value is not a codebook member (a string)".to_owned()),
        (Kind::Text, _) => Some("a text point takes no commands".to_owned()),
    }
}

/// The `writable` section: the point takes commands (issue 21 item 1). What a command may ask
/// for is checked like an observation (kind, range, codebook, unit: [`value_refusal`]); what
/// follows a command is verified against the point's own observations.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Writable {
    /// Where the point goes when every claim on it is released; `None` (`null`): it holds the
    /// last value commanded (BACnet's `Relinquish_Default`, or none).
    pub relinquish_default: Option<CommandValue>,
    /// How long the point's observations have to come within `tolerance` of a command.
    pub verify_s: u32,
    /// Numbers: how close, in the canonical unit; 0 for bools and enums (equality).
    pub tolerance: f64,
    /// Bools: after a change to `true` it holds that long (anti-short-cycling; only interlock
    /// and safety claims break it, as BACnet's minimum on/off slot).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_on_s: Option<u32>,
    /// Bools: after a change to `false` it holds that long.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_off_s: Option<u32>,
}

/// The sensor-paradigm manifest fields, carried so admission checks can grow without a format
/// change (DESIGN.md §4).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub archetype: Archetype,
    /// Declared peak rate, observations per second.
    pub peak_rate_hz: f64,
    pub event_policy: EventPolicy,
    /// Estimated row size for write-budget sizing.
    pub row_bytes: u32,
    /// How the source reports; absent means periodically.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reporting: Option<Reporting>,
    /// The longest the source stays silent while nothing changes: it re-sends its current
    /// reading at least this often. The watchdog's deadline for the point is its latest
    /// reading plus this (it is never longer than `freshness_s`), and a missed one is the gap
    /// `heartbeat_missed`. Required when `reporting` is `on_change`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_s: Option<u32>,
    /// How often the point's driver polls it, in seconds (issue 21 item 7, "the valve"): the
    /// core pushes it to the driver instance in an `assignment` and a new registry version may
    /// change it without a restart. No faster than `peak_rate_hz` allows and no longer than
    /// `freshness_s`. Omitted from the canonical form when unset, so a registry without it
    /// keeps its hashes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_s: Option<f64>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Descriptor {
    pub id: String,
    pub kind: Kind,
    /// The unit the device reports in, if the point has one.
    pub unit_native: Option<String>,
    /// The canonical unit stored in `value_num`.
    pub unit: Option<String>,
    pub conversion: Conversion,
    pub range: Option<Range>,
    /// Enum points: native code (as text, e.g. `"2"` or `"FAULT"`) to canonical member.
    pub codebook: Option<BTreeMap<String, String>>,
    /// Numbers: a change smaller than or equal to this is not an edge. Ignored for other kinds.
    pub deadband: f64,
    pub retention: RetentionClass,
    pub agg_safe: bool,
    pub assignment: Assignment,
    /// The point is expected to report at least this often.
    pub freshness_s: u32,
    pub manifest: Manifest,
    /// Set for a derived point. Optional and left out of the canonical form when absent, so a
    /// descriptor without it hashes as it did before the field existed (DESIGN.md §4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub derived: Option<Derived>,
    /// Set for a point that takes commands; optional and left out when absent, like `derived`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writable: Option<Writable>,
    /// The device the point belongs to (a subject token, unique per registry), if it declares
    /// one; the core generates the device's health self-points from it
    /// (`health.rs`). Optional and left out when absent, like `derived`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
    /// The point's missing-data policy (issue 22 item 2; [`MissingData`]): when it counts as
    /// lost to a derived point or a rule reading it. Optional and left out when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub missing_data: Option<MissingData>,
    /// The rules that claim this (writable) point, in rule id order (issue 22 item 1; see
    /// [`super::rule`]). Left out of the canonical form when empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<Rule>,
}

impl Descriptor {
    /// Why `value` (with the request's `unit`, if it gave one) cannot be commanded to this
    /// point, as one line; `None` when it can.
    pub fn command_refusal(&self, value: &CommandValue, unit: Option<&str>) -> Option<String> {
        if self.writable.is_none() {
            return Some(format!("point {:?} is not writable", self.id));
        }
        match (unit, self.unit.as_deref()) {
            (Some(asked), Some(unit)) if asked != unit => {
                return Some(format!(
                    "the request's unit {asked:?} is not the point's unit {unit:?}"
                ));
            }
            (Some(asked), None) => {
                return Some(format!(
                    "the request gives the unit {asked:?}, but the point has none"
                ));
            }
            _ => {}
        }
        value_refusal(
            self.kind,
            self.range,
            self.unit.as_deref(),
            self.codebook.as_ref(),
            value,
        )
    }
}

impl Descriptor {
    /// A descriptor with neutral defaults, for registries built in code (tests, benchmarks,
    /// tools): no units, identity conversion, no range or codebook, zero deadband, not
    /// aggregation-safe, 60 s freshness, a polled on-change manifest at 0.1 Hz, 120-byte rows.
    /// A registry folder sets every field itself.
    pub fn new(
        id: &str,
        kind: Kind,
        retention: RetentionClass,
        host: &str,
        driver_instance: &str,
    ) -> Descriptor {
        Descriptor {
            id: id.to_owned(),
            kind,
            unit_native: None,
            unit: None,
            conversion: Conversion::IDENTITY,
            range: None,
            codebook: None,
            deadband: 0.0,
            retention,
            agg_safe: false,
            assignment: Assignment {
                host: host.to_owned(),
                driver_instance: driver_instance.to_owned(),
                site: None,
            },
            freshness_s: 60,
            manifest: Manifest {
                archetype: Archetype::Polled,
                peak_rate_hz: 0.1,
                event_policy: EventPolicy::OnChange,
                row_bytes: 120,
                reporting: None,
                heartbeat_s: None,
                poll_interval_s: None,
            },
            derived: None,
            writable: None,
            device: None,
            missing_data: None,
            rules: Vec::new(),
        }
    }
}
