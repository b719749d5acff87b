//! The point descriptor: what the registry says about one point (DESIGN.md §4).
//!
//! Owns: the resolved, self-contained form of a descriptor. "Resolved" means the affine
//! conversion and codebook are inlined, so a stored descriptor blob alone is enough to
//! reinterpret any historical row (ingest spec, "The registry is versioned data"). The
//! canonical JSON of this struct is what gets hashed and stored.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

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

/// Which driver host and instance may publish this point (stage 5).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Assignment {
    pub host: String,
    pub driver_instance: String,
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
            },
            freshness_s: 60,
            manifest: Manifest {
                archetype: Archetype::Polled,
                peak_rate_hz: 0.1,
                event_policy: EventPolicy::OnChange,
                row_bytes: 120,
                reporting: None,
                heartbeat_s: None,
            },
            derived: None,
        }
    }
}
