//! The declared load of a registry and the capacity it must fit (sensor paradigm,
//! "Write-budget sizing"; core runtime spec, "Scale targets", "Buffer sizing").
//!
//! Owns: the admission settings that are about the installation rather than about one point
//! ([`Admission`]: the ingest budget, the outage the stream must absorb, the stream's bound),
//! the arithmetic from declared peak rates and row sizes to rows and bytes per day per
//! retention class and to the stream needed for the outage ([`DeclaredLoad`]), and the plan
//! `sentinel registry plan` prints ([`Plan`]). The admission checks refuse a registry whose
//! declared load does not fit; this module only counts.
//!
//! Every rate here is a declared peak, so every figure is an upper bound: a registry that fits
//! at its peaks fits.

use serde::Serialize;

use super::descriptor::{Descriptor, RetentionClass};
use super::graph;
use super::health;

/// The spec's design ingest rate (core runtime spec, "Scale targets": "The design figure is
/// 500/s").
/// Above this a point is not telemetry this core is sized for (spec: the fast tier is 1 Hz):
/// the per-point check refuses it, and the declared load counts only rates up to it.
pub const PEAK_RATE_HZ_MAX: f64 = 100.0;

pub const INGEST_BUDGET_OBS_S_DEFAULT: f64 = 500.0;
/// The tolerable unplanned outage the stream is sized for (core runtime spec, "Two different
/// outage numbers": four hours).
pub const OUTAGE_S_DEFAULT: u64 = 4 * 3600;
/// The observation stream's default bounds (as `sentinel run` creates it; core runtime spec,
/// "Buffer sizing": "8M messages and 4 GB").
pub const STREAM_MAX_MSGS_DEFAULT: u64 = 8_000_000;
pub const STREAM_MAX_BYTES_DEFAULT: u64 = 4 * 1024 * 1024 * 1024;
/// What one observation costs in the stream: the JSON envelope plus JetStream's per-message
/// overhead. The spec's own figure (8M messages in 4 GB) is about 500 bytes; a row's declared
/// `row_bytes` is its size in PostgreSQL, not on the bus.
pub const STREAM_MESSAGE_BYTES_ESTIMATE: u64 = 512;
const SECONDS_PER_DAY: f64 = 86_400.0;

/// The installation's capacity that admission checks a registry against.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Admission {
    /// The total declared peak rate the core is budgeted to ingest, observations per second.
    pub ingest_budget_obs_s: f64,
    /// The outage the stream must absorb without losing data.
    pub outage_s: u64,
    /// The observation stream's bounds (`max_msgs`, `max_bytes`).
    pub stream_max_msgs: u64,
    pub stream_max_bytes: u64,
}

impl Default for Admission {
    fn default() -> Admission {
        Admission {
            ingest_budget_obs_s: INGEST_BUDGET_OBS_S_DEFAULT,
            outage_s: OUTAGE_S_DEFAULT,
            stream_max_msgs: STREAM_MAX_MSGS_DEFAULT,
            stream_max_bytes: STREAM_MAX_BYTES_DEFAULT,
        }
    }
}

/// One retention class's declared load.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ClassLoad {
    pub class: &'static str,
    pub points: usize,
    pub peak_obs_s: f64,
    pub rows_per_day: f64,
    pub bytes_per_day: f64,
}

/// The declared load of a set of points, and what an outage costs the stream.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DeclaredLoad {
    /// One per retention class, in [`RetentionClass::ALL`] order.
    pub classes: Vec<ClassLoad>,
    pub total_peak_obs_s: f64,
    /// Messages and bytes that pile up in the stream during the outage at the total peak.
    pub outage_msgs_needed: u64,
    pub outage_bytes_needed: u64,
}

impl DeclaredLoad {
    /// From `(class, peak_rate_hz, row_bytes)` per point. Rates that are not positive and
    /// finite count as zero (admission reports them on their own).
    pub fn of(points: impl IntoIterator<Item = (RetentionClass, f64, u32)>, outage_s: u64) -> DeclaredLoad {
        let mut classes: Vec<ClassLoad> = RetentionClass::ALL
            .iter()
            .map(|c| ClassLoad {
                class: c.as_str(),
                ..ClassLoad::default()
            })
            .collect();
        for (class, rate, row_bytes) in points {
            let rate = if rate.is_finite() && rate > 0.0 { rate } else { 0.0 };
            let c = &mut classes[class.index()];
            c.points += 1;
            c.peak_obs_s += rate;
            c.rows_per_day += rate * SECONDS_PER_DAY;
            c.bytes_per_day += rate * SECONDS_PER_DAY * f64::from(row_bytes);
        }
        let total_peak_obs_s: f64 = classes.iter().map(|c| c.peak_obs_s).sum();
        // Whole messages, rounded up; a sum of decimal rates carries binary rounding error
        // (0.1 + 1.6 is not 1.7 exactly), and a millionth of a message is not a message.
        let outage_msgs_needed = (total_peak_obs_s * outage_s as f64 - 1e-6).ceil().max(0.0) as u64;
        DeclaredLoad {
            classes,
            total_peak_obs_s,
            outage_msgs_needed,
            outage_bytes_needed: outage_msgs_needed.saturating_mul(STREAM_MESSAGE_BYTES_ESTIMATE),
        }
    }

    /// Whether the stream's bounds hold the outage's backlog.
    pub fn stream_fits(&self, admission: &Admission) -> bool {
        self.outage_msgs_needed <= admission.stream_max_msgs
            && self.outage_bytes_needed <= admission.stream_max_bytes
    }
}

/// One derived point in the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedDerived {
    pub id: String,
    pub op: &'static str,
    pub inputs: Vec<String>,
    pub window_s: Option<u32>,
}

/// What `sentinel registry plan` prints.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// Every point, the generated health points included.
    pub points: usize,
    /// Of those, the health points the load generated per host and device.
    pub health_points: usize,
    pub admission: Admission,
    pub load: DeclaredLoad,
    pub within_budget: bool,
    pub stream_fits: bool,
    /// Derived points, each after every derived point it reads.
    pub derived_in_dependency_order: Vec<PlannedDerived>,
    /// Points with a `writable` section, sorted: the points commands may go to.
    pub writable: Vec<String>,
}

impl Plan {
    /// The plan of a checked registry (its descriptors passed admission, so the inputs graph
    /// is acyclic; a cycle would leave the derived list empty rather than fail).
    pub fn of(descriptors: &[Descriptor], admission: &Admission) -> Plan {
        let load = DeclaredLoad::of(
            descriptors
                .iter()
                .map(|d| (d.retention, d.manifest.peak_rate_hz, d.manifest.row_bytes)),
            admission.outage_s,
        );
        let edges: graph::Edges<'_> = descriptors
            .iter()
            .filter_map(|d| {
                let derived = d.derived.as_ref()?;
                Some((d.id.as_str(), derived.inputs.iter().map(String::as_str).collect()))
            })
            .collect();
        let derived_in_dependency_order = graph::dependency_order(&edges)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|id| {
                let d = descriptors.iter().find(|d| d.id == id)?;
                let derived = d.derived.as_ref()?;
                Some(PlannedDerived {
                    id: id.to_owned(),
                    op: derived.op.as_str(),
                    inputs: derived.inputs.clone(),
                    window_s: derived.window_s,
                })
            })
            .collect();
        let mut writable: Vec<String> = descriptors
            .iter()
            .filter(|d| d.writable.is_some())
            .map(|d| d.id.clone())
            .collect();
        writable.sort();
        Plan {
            points: descriptors.len(),
            health_points: descriptors.iter().filter(|d| health::is_generated(d)).count(),
            writable,
            within_budget: load.total_peak_obs_s <= admission.ingest_budget_obs_s,
            stream_fits: load.stream_fits(admission),
            admission: admission.clone(),
            load,
            derived_in_dependency_order,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::descriptor::{Derived, DerivedOp, Kind};

    fn point(id: &str, class: RetentionClass, rate: f64, row_bytes: u32) -> Descriptor {
        let mut d = Descriptor::new(id, Kind::Number, class, "h", "i");
        d.manifest.peak_rate_hz = rate;
        d.manifest.row_bytes = row_bytes;
        d
    }

    #[test]
    fn rows_and_bytes_per_day_per_class_and_the_outage_backlog() {
        let mut descriptors = vec![
            point("a", RetentionClass::Measurement, 1.0, 100),
            point("b", RetentionClass::Measurement, 0.1, 100),
            point("c", RetentionClass::Diagnostic, 0.5, 200),
            point("d.mean", RetentionClass::Measurement, 0.1, 100),
        ];
        descriptors[3].derived = Some(Derived {
            op: DerivedOp::Mean,
            inputs: vec!["a".into()],
            window_s: Some(60),
        });
        let plan = Plan::of(&descriptors, &Admission::default());
        let m = &plan.load.classes[RetentionClass::Measurement.index()];
        assert_eq!((m.class, m.points), ("measurement", 3));
        assert!((m.rows_per_day - 1.2 * 86_400.0).abs() < 1e-6, "{m:?}");
        assert!((m.bytes_per_day - 1.2 * 86_400.0 * 100.0).abs() < 1e-3);
        let diag = &plan.load.classes[RetentionClass::Diagnostic.index()];
        assert!((diag.bytes_per_day - 0.5 * 86_400.0 * 200.0).abs() < 1e-3);
        assert!((plan.load.total_peak_obs_s - 1.7).abs() < 1e-9);
        assert_eq!(plan.load.outage_msgs_needed, 24_480);
        assert!(plan.within_budget && plan.stream_fits);
        assert_eq!(plan.derived_in_dependency_order.len(), 1);
        assert_eq!(plan.derived_in_dependency_order[0].op, "mean");
        assert!(plan.writable.is_empty());

        descriptors[1].writable = Some(crate::registry::descriptor::Writable {
            relinquish_default: None,
            verify_s: 60,
            tolerance: 0.5,
            min_on_s: None,
            min_off_s: None,
        });
        let plan = Plan::of(&descriptors, &Admission::default());
        assert_eq!(plan.writable, ["b"]);
        assert_eq!(plan.points, 4, "a writable point is counted once, in its class");
    }

    /// The spec's arithmetic: 500/s for four hours is 7.2M messages, inside the default 8M
    /// and 4 GiB; 560/s is not.
    #[test]
    fn the_design_rate_fits_the_default_stream_and_more_does_not() {
        let at = |rate: f64| DeclaredLoad::of([(RetentionClass::Measurement, rate, 100)], OUTAGE_S_DEFAULT);
        assert_eq!(at(500.0).outage_msgs_needed, 7_200_000);
        assert!(at(500.0).stream_fits(&Admission::default()));
        assert!(!at(560.0).stream_fits(&Admission::default()));
    }
}
