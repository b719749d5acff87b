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
//! Also the driver disk queues a cut-off site rides an outage on (issue 25 item 2 leftover;
//! docs/deploy.md, "What a cut-off site does"): per driver host, its declared peak rate and the
//! readings and bytes its queue holds after `outage_s` with no bus ([`HostQueue`]), against the
//! queue's default bounds ([`DISK_QUEUE_BYTES_MAX_DEFAULT`], [`DISK_QUEUE_AGE_MAX_S_DEFAULT`]).
//! A host whose need exceeds them is a warning naming the figure to configure, not a refusal:
//! the bounds are each driver host's own configuration, which the core never sees.
//!
//! Every rate here is a declared peak, so every figure is an upper bound: a registry that fits
//! at its peaks fits.

use serde::Serialize;

use super::descriptor::{Descriptor, RetentionClass, SELF_HOST, Site};
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
/// What one reading costs in a driver's disk queue: the record's 20-byte header plus subject,
/// message id and JSON envelope (docs/deploy.md: "about 250 bytes a record on disk").
pub const DISK_QUEUE_RECORD_BYTES_ESTIMATE: u64 = 250;
/// The driver disk queue's default byte bound (`DiskQueueConfig::with_default_bounds` in the
/// driver library): a four-hour cut at up to 74 obs/s on one host.
pub const DISK_QUEUE_BYTES_MAX_DEFAULT: u64 = 256 * 1024 * 1024;
/// The driver disk queue's default age bound: a day, six times the default outage.
pub const DISK_QUEUE_AGE_MAX_S_DEFAULT: u64 = 24 * 3600;

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

/// Headroom the recommended figures keep over the declared peaks: a registry grows between
/// two reviews of its configuration.
pub const RECOMMENDED_HEADROOM: f64 = 1.25;

/// The configuration `registry plan` recommends for a registry: the one set of figures that
/// `registry check`, `registry load` and `sentinel run` all read (issue 24 item 4). The outage
/// is the configured one; the budget and the stream's bounds hold the declared peaks through
/// it with [`RECOMMENDED_HEADROOM`], and are never below the configured figures (a smaller
/// stream than the one configured is the operator's call, not the plan's).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommended {
    pub ingest_budget_obs_s: f64,
    pub outage_s: u64,
    pub stream_max_msgs: u64,
    pub stream_max_bytes: u64,
}

impl Recommended {
    pub fn of(load: &DeclaredLoad, admission: &Admission) -> Recommended {
        let grown = |figure: f64| (figure * RECOMMENDED_HEADROOM).ceil();
        let stream_max_msgs = (grown(load.outage_msgs_needed as f64) as u64).max(admission.stream_max_msgs);
        Recommended {
            ingest_budget_obs_s: grown(load.total_peak_obs_s).max(admission.ingest_budget_obs_s),
            outage_s: admission.outage_s,
            stream_max_msgs,
            stream_max_bytes: (grown(load.outage_bytes_needed as f64) as u64).max(admission.stream_max_bytes),
        }
    }

    /// As the environment file's lines (`/etc/sentinel/sentinel.env`).
    pub fn env_lines(&self) -> [String; 4] {
        [
            format!("SENTINEL_INGEST_BUDGET_OBS_S={}", self.ingest_budget_obs_s),
            format!("SENTINEL_OUTAGE_S={}", self.outage_s),
            format!("SENTINEL_STREAM_MAX_MSGS={}", self.stream_max_msgs),
            format!("SENTINEL_STREAM_MAX_BYTES={}", self.stream_max_bytes),
        ]
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

/// One driver host's disk queue through an outage with no bus (a cut-off site).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HostQueue {
    pub host: String,
    /// The site the host stands at, if its file names one.
    pub site: Option<String>,
    pub points: usize,
    /// The sum of its points' declared peak rates.
    pub peak_obs_s: f64,
    /// Readings and bytes queued on its disk after the outage at that rate.
    pub outage_readings_needed: u64,
    pub outage_bytes_needed: u64,
    /// The outage is within the default age bound and the bytes within the default byte bound.
    pub fits_default_bounds: bool,
}

impl HostQueue {
    /// Per driver host (every host but the core's own, [`SELF_HOST`]), sorted by name, from
    /// `(host, peak_rate_hz)` per point. Rates that are not positive and finite count as zero,
    /// as in [`DeclaredLoad::of`].
    pub fn per_host<'a>(points: impl IntoIterator<Item = (&'a str, f64)>, outage_s: u64) -> Vec<HostQueue> {
        let mut hosts: std::collections::BTreeMap<&str, (usize, f64)> = std::collections::BTreeMap::new();
        let mut points_counted = 0_usize;
        for (host, rate) in points {
            points_counted += 1;
            if host == SELF_HOST {
                continue;
            }
            let rate = if rate.is_finite() && rate > 0.0 { rate } else { 0.0 };
            let entry = hosts.entry(host).or_default();
            entry.0 += 1;
            entry.1 += rate;
        }
        assert!(
            hosts.len() <= points_counted,
            "a host is named by one of its points"
        );
        hosts
            .into_iter()
            .map(|(host, (points, peak_obs_s))| {
                // Whole readings, rounded up, as the stream's messages are.
                let readings = (peak_obs_s * outage_s as f64 - 1e-6).ceil().max(0.0) as u64;
                let bytes = readings.saturating_mul(DISK_QUEUE_RECORD_BYTES_ESTIMATE);
                HostQueue {
                    host: host.to_owned(),
                    site: None,
                    points,
                    peak_obs_s,
                    outage_readings_needed: readings,
                    outage_bytes_needed: bytes,
                    fits_default_bounds: bytes <= DISK_QUEUE_BYTES_MAX_DEFAULT
                        && outage_s <= DISK_QUEUE_AGE_MAX_S_DEFAULT,
                }
            })
            .collect()
    }

    /// One line naming the host and the bound to configure, when the defaults do not hold the
    /// outage.
    pub fn warning(&self, outage_s: u64) -> Option<String> {
        if self.fits_default_bounds {
            return None;
        }
        let mut configure = Vec::new();
        if self.outage_bytes_needed > DISK_QUEUE_BYTES_MAX_DEFAULT {
            configure.push(format!(
                "bytes_max to at least {} (default {DISK_QUEUE_BYTES_MAX_DEFAULT})",
                self.outage_bytes_needed
            ));
        }
        if outage_s > DISK_QUEUE_AGE_MAX_S_DEFAULT {
            configure.push(format!(
                "age_max_ms to at least {} (default {})",
                outage_s.saturating_mul(1000),
                DISK_QUEUE_AGE_MAX_S_DEFAULT * 1000
            ));
        }
        assert!(!configure.is_empty(), "a host that does not fit exceeds a bound");
        Some(format!(
            "warning: driver host {} queues {} readings / {} bytes in a {outage_s} s cut-off at {:.2} obs/s, \
             more than its disk queue's default bounds hold: configure its {}",
            self.host,
            self.outage_readings_needed,
            self.outage_bytes_needed,
            self.peak_obs_s,
            configure.join(" and ")
        ))
    }
}

/// What one site's hosts queue through the outage together: the disk a leaf node at the
/// site would need if it buffered for all of them (docs/deploy.md, "A remote site behind a
/// leaf node"), or the sum of its hosts' own queues.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SiteQueue {
    pub site: String,
    pub partitionable: bool,
    pub hosts: usize,
    pub peak_obs_s: f64,
    pub outage_readings_needed: u64,
    pub outage_bytes_needed: u64,
}

impl SiteQueue {
    /// Per named site, sorted by name, from the hosts' queues (each already placed at its
    /// site) and each site's partitionability. Hosts at no site are not summed.
    pub fn per_site(queues: &[HostQueue], partitionable: impl Fn(&str) -> bool) -> Vec<SiteQueue> {
        let mut sites: std::collections::BTreeMap<&str, SiteQueue> = std::collections::BTreeMap::new();
        for q in queues {
            let Some(site) = q.site.as_deref() else {
                continue;
            };
            let entry = sites.entry(site).or_insert_with(|| SiteQueue {
                site: site.to_owned(),
                partitionable: partitionable(site),
                hosts: 0,
                peak_obs_s: 0.0,
                outage_readings_needed: 0,
                outage_bytes_needed: 0,
            });
            entry.hosts += 1;
            entry.peak_obs_s += q.peak_obs_s;
            entry.outage_readings_needed = entry
                .outage_readings_needed
                .saturating_add(q.outage_readings_needed);
            entry.outage_bytes_needed = entry.outage_bytes_needed.saturating_add(q.outage_bytes_needed);
        }
        assert!(sites.len() <= queues.len(), "a site is named by one of its hosts");
        sites.into_values().collect()
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

/// One rule in the plan (issue 22 item 9).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedRule {
    pub id: String,
    pub inputs: Vec<String>,
    pub band: &'static str,
    pub priority: u8,
    /// The writable point it claims.
    pub claims: String,
    /// Set when the claimed point's own observations feed the rule: the path from the claimed
    /// point to the rule's input, through the derived points between (`[claimed]` when the
    /// rule reads the point it claims). A feedback loop through the device, not a cycle.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback_loop: Option<Vec<String>>,
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
    /// The configuration to run this registry with.
    pub recommended: Recommended,
    pub within_budget: bool,
    pub stream_fits: bool,
    /// Each driver host's disk queue through the outage, by host name.
    pub driver_queues: Vec<HostQueue>,
    /// One line per host whose queue the default bounds do not hold.
    pub driver_queue_warnings: Vec<String>,
    /// Each named site's hosts' queues summed, by site name.
    pub site_queues: Vec<SiteQueue>,
    /// Derived points, each after every derived point it reads.
    pub derived_in_dependency_order: Vec<PlannedDerived>,
    /// Rules, each after every derived point it reads (directly or through derived points):
    /// by the latest of those in `derived_in_dependency_order`, then by id.
    pub rules_in_dependency_order: Vec<PlannedRule>,
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
        let order = graph::dependency_order(&edges).unwrap_or_default();
        let rules_in_dependency_order = planned_rules(descriptors, &edges, &order);
        let derived_in_dependency_order = order
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
        let mut driver_queues = HostQueue::per_host(
            descriptors
                .iter()
                .map(|d| (d.assignment.host.as_str(), d.manifest.peak_rate_hz)),
            admission.outage_s,
        );
        // Admission holds every file of a host to one site, so any point of the host names it.
        let sites: std::collections::BTreeMap<&str, &Site> = descriptors
            .iter()
            .filter_map(|d| Some((d.assignment.host.as_str(), d.assignment.site.as_ref()?)))
            .collect();
        for q in &mut driver_queues {
            q.site = sites.get(q.host.as_str()).map(|site| site.name.clone());
        }
        let site_queues = SiteQueue::per_site(&driver_queues, |name| {
            sites.values().any(|site| site.name == name && site.partitionable)
        });
        let driver_queue_warnings = driver_queues
            .iter()
            .filter_map(|q| q.warning(admission.outage_s))
            .collect();
        Plan {
            points: descriptors.len(),
            health_points: descriptors.iter().filter(|d| health::is_generated(d)).count(),
            writable,
            within_budget: load.total_peak_obs_s <= admission.ingest_budget_obs_s,
            stream_fits: load.stream_fits(admission),
            driver_queues,
            driver_queue_warnings,
            site_queues,
            recommended: Recommended::of(&load, admission),
            admission: admission.clone(),
            load,
            derived_in_dependency_order,
            rules_in_dependency_order,
        }
    }
}

/// The rules in dependency order (see [`Plan::rules_in_dependency_order`]), each with its
/// feedback loop if it has one.
fn planned_rules(descriptors: &[Descriptor], edges: &graph::Edges<'_>, order: &[&str]) -> Vec<PlannedRule> {
    let position: std::collections::BTreeMap<&str, usize> =
        order.iter().enumerate().map(|(i, id)| (*id, i + 1)).collect();
    let mut rules: Vec<(usize, PlannedRule)> = descriptors
        .iter()
        .flat_map(|d| &d.rules)
        .map(|rule| {
            // The latest derived point the rule reads, directly or through other derived points.
            let mut rank = 0;
            let mut feedback_loop = None;
            for input in &rule.inputs {
                // Depth-first from the input through derived inputs, keeping each node's parent
                // so a path to the claimed point can be read back.
                let mut parent: std::collections::BTreeMap<&str, &str> = std::collections::BTreeMap::new();
                let mut stack = vec![input.as_str()];
                parent.insert(input.as_str(), input.as_str());
                while let Some(point) = stack.pop() {
                    rank = rank.max(position.get(point).copied().unwrap_or(0));
                    if point == rule.point && feedback_loop.is_none() {
                        let mut path = vec![point.to_owned()];
                        let mut at = point;
                        while parent[at] != at {
                            at = parent[at];
                            path.push(at.to_owned());
                        }
                        feedback_loop = Some(path);
                    }
                    for next in edges.get(point).map_or(&[][..], Vec::as_slice) {
                        if !parent.contains_key(next) {
                            parent.insert(next, point);
                            stack.push(next);
                        }
                    }
                }
                debug_assert!(parent.len() <= descriptors.len().max(1) + rule.inputs.len());
            }
            (
                rank,
                PlannedRule {
                    id: rule.id.clone(),
                    inputs: rule.inputs.clone(),
                    band: rule.claim.band.as_str(),
                    priority: rule.claim.priority,
                    claims: rule.point.clone(),
                    feedback_loop,
                },
            )
        })
        .collect();
    rules.sort_by(|a, b| (a.0, &a.1.id).cmp(&(b.0, &b.1.id)));
    rules.into_iter().map(|(_, r)| r).collect()
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

    /// Issue 22 item 9: rules come after the derived points they read (through other derived
    /// points too), then by id; a rule whose claimed point feeds it is a feedback loop, with
    /// the path from the claimed point to its input.
    #[test]
    fn rules_are_listed_after_what_they_read_with_their_feedback_loops() {
        use crate::registry::CommandValue;
        use crate::registry::rule::{CompareOp, Condition, Rule, RuleBand, RuleClaim, RuleFallback};
        let derived = |id: &str, input: &str| {
            let mut d = point(id, RetentionClass::Measurement, 0.1, 100);
            d.derived = Some(Derived {
                op: DerivedOp::Max,
                inputs: vec![input.into()],
                window_s: Some(60),
            });
            d
        };
        let rule = |id: &str, input: &str, band: RuleBand| Rule {
            id: id.into(),
            inputs: vec![input.into()],
            when: Condition::Compare {
                point: input.into(),
                op: CompareOp::Gt,
                value: CommandValue::Number(1.0),
            },
            until: None,
            for_s: 0,
            point: "b.sp".into(),
            claim: RuleClaim {
                band,
                priority: 2,
                value: CommandValue::Number(1.0),
            },
            otherwise: RuleFallback::Release,
            on_input_loss: RuleFallback::Release,
            warmup_deadline_s: 60,
            fight: None,
        };
        let mut sp = point("b.sp", RetentionClass::State, 0.1, 100);
        sp.rules = vec![
            rule("a.late", "d.2", RuleBand::Automation),
            rule("m.direct", "b.sp", RuleBand::Safety),
            rule("z.early", "b.t", RuleBand::Interlock),
        ];
        let descriptors = vec![
            sp,
            point("b.t", RetentionClass::Measurement, 0.1, 100),
            derived("d.1", "b.sp"),
            derived("d.2", "d.1"),
        ];
        let plan = Plan::of(&descriptors, &Admission::default());
        let ids: Vec<&str> = plan
            .derived_in_dependency_order
            .iter()
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(ids, ["d.1", "d.2"]);
        type Listed<'a> = (&'a str, &'a str, u8, &'a str, Option<Vec<String>>);
        let rules: Vec<Listed<'_>> = plan
            .rules_in_dependency_order
            .iter()
            .map(|r| {
                (
                    r.id.as_str(),
                    r.band,
                    r.priority,
                    r.claims.as_str(),
                    r.feedback_loop.clone(),
                )
            })
            .collect();
        let path = |p: &[&str]| Some(p.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            rules,
            [
                ("m.direct", "safety", 2, "b.sp", path(&["b.sp"])),
                ("z.early", "interlock", 2, "b.sp", None),
                ("a.late", "automation", 2, "b.sp", path(&["b.sp", "d.1", "d.2"])),
            ]
        );
        assert_eq!(plan.rules_in_dependency_order[2].inputs, ["d.2"]);
        let json = serde_json::to_value(&plan).expect("serialises");
        assert_eq!(
            json["rules_in_dependency_order"][0]["feedback_loop"],
            serde_json::json!(["b.sp"])
        );
        assert!(
            json["rules_in_dependency_order"][1]
                .get("feedback_loop")
                .is_none()
        );
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

    /// Per driver host: 1.5 obs/s for four hours is 21,600 readings, 5,400,000 bytes at 250 B,
    /// inside the default 256 MiB; 80 obs/s is 1,152,000 readings, 288,000,000 bytes, above it.
    /// The core's own points (host `sentinel`) are not on any driver's disk.
    #[test]
    fn each_driver_hosts_queue_through_a_cut_off_against_the_default_bounds() {
        let mut descriptors = vec![
            point("a", RetentionClass::Measurement, 1.0, 100),
            point("b", RetentionClass::Diagnostic, 0.5, 100),
            point("c", RetentionClass::Measurement, 80.0, 100),
            point("d", RetentionClass::Measurement, 0.1, 100),
            point("e", RetentionClass::Measurement, 1.6, 100),
            point("sentinel.core.x", RetentionClass::Diagnostic, 50.0, 100),
        ];
        let hosts = ["plant-a", "plant-a", "plant-b", "plant-c", "plant-c", SELF_HOST];
        for (d, host) in descriptors.iter_mut().zip(hosts) {
            d.assignment.host = host.to_owned();
        }
        let plan = Plan::of(&descriptors, &Admission::default());
        let figures: Vec<(&str, usize, u64, u64, bool)> = plan
            .driver_queues
            .iter()
            .map(|q| {
                (
                    q.host.as_str(),
                    q.points,
                    q.outage_readings_needed,
                    q.outage_bytes_needed,
                    q.fits_default_bounds,
                )
            })
            .collect();
        assert_eq!(
            figures,
            [
                ("plant-a", 2, 21_600, 5_400_000, true),
                ("plant-b", 1, 1_152_000, 288_000_000, false),
                // 0.1 + 1.6 is not 1.7 exactly; the readings are still 1.7 x 14,400.
                ("plant-c", 2, 24_480, 6_120_000, true),
            ]
        );
        assert!((plan.driver_queues[0].peak_obs_s - 1.5).abs() < 1e-12);
        assert_eq!(
            plan.driver_queue_warnings,
            [
                "warning: driver host plant-b queues 1152000 readings / 288000000 bytes in a 14400 s \
              cut-off at 80.00 obs/s, more than its disk queue's default bounds hold: configure its \
              bytes_max to at least 288000000 (default 268435456)"
            ]
        );
        // A warning, not a refusal: the plan of the same registry is otherwise as before.
        assert!(plan.within_budget && plan.stream_fits);
    }

    #[test]
    fn a_sites_hosts_queues_are_summed_per_site() {
        let mut descriptors = vec![
            point("a", RetentionClass::Measurement, 1.0, 100),
            point("b", RetentionClass::Measurement, 0.5, 100),
            point("c", RetentionClass::Measurement, 2.0, 100),
            point("d", RetentionClass::Measurement, 4.0, 100),
        ];
        let placed = [
            ("barn-1", Some(("barn", true))),
            ("barn-2", Some(("barn", true))),
            ("plant-a", Some(("plant-room", false))),
            ("roaming", None),
        ];
        for (d, (host, site)) in descriptors.iter_mut().zip(placed) {
            d.assignment.host = host.to_owned();
            d.assignment.site = site.map(|(name, partitionable)| Site {
                name: name.to_owned(),
                partitionable,
            });
        }
        let plan = Plan::of(&descriptors, &Admission::default());
        let sites: Vec<(&str, bool, usize, u64, u64)> = plan
            .site_queues
            .iter()
            .map(|s| {
                (
                    s.site.as_str(),
                    s.partitionable,
                    s.hosts,
                    s.outage_readings_needed,
                    s.outage_bytes_needed,
                )
            })
            .collect();
        // barn: 1.5 obs/s x 14,400 s; plant-room: 2 obs/s; the host at no site is in no sum.
        assert_eq!(
            sites,
            [
                ("barn", true, 2, 21_600, 5_400_000),
                ("plant-room", false, 1, 28_800, 7_200_000)
            ]
        );
        assert_eq!(plan.driver_queues[3].host, "roaming");
        assert_eq!(plan.driver_queues[3].site, None);
        assert_eq!(plan.driver_queues[0].site.as_deref(), Some("barn"));
    }

    #[test]
    fn the_recommended_configuration_holds_the_outage_with_headroom_and_never_shrinks() {
        // 10 points at 10 Hz: 100 obs/s, 1.44M messages in a 4 h outage.
        let descriptors: Vec<Descriptor> = (0..10)
            .map(|i| point(&format!("p{i}"), RetentionClass::Measurement, 10.0, 100))
            .collect();
        let plan = Plan::of(&descriptors, &Admission::default());
        assert_eq!(
            plan.recommended,
            Recommended {
                ingest_budget_obs_s: 500.0,
                outage_s: OUTAGE_S_DEFAULT,
                stream_max_msgs: STREAM_MAX_MSGS_DEFAULT,
                stream_max_bytes: STREAM_MAX_BYTES_DEFAULT,
            },
            "the defaults hold it: nothing is recommended below them"
        );
        let day = Admission {
            outage_s: 86_400,
            ingest_budget_obs_s: 50.0,
            ..Admission::default()
        };
        let plan = Plan::of(&descriptors, &day);
        // 100 obs/s x 86,400 s = 8.64M messages, x 1.25 = 10.8M; x 512 bytes = 5.53 GB.
        assert_eq!(
            plan.recommended.env_lines(),
            [
                "SENTINEL_INGEST_BUDGET_OBS_S=125",
                "SENTINEL_OUTAGE_S=86400",
                "SENTINEL_STREAM_MAX_MSGS=10800000",
                "SENTINEL_STREAM_MAX_BYTES=5529600000",
            ]
        );
        assert!(!plan.stream_fits && !plan.within_budget);
    }

    /// An outage longer than the default age bound (a day) drops readings by age whatever
    /// the bytes: the warning names the age to configure, and the bytes too when both are over.
    #[test]
    fn an_outage_past_the_default_age_bound_names_the_age_to_configure() {
        let queues = HostQueue::per_host([("plant-a", 1.0), ("plant-b", 10.0)], 100_000);
        assert_eq!(
            queues
                .iter()
                .map(|q| (
                    q.outage_readings_needed,
                    q.outage_bytes_needed,
                    q.fits_default_bounds
                ))
                .collect::<Vec<_>>(),
            [(100_000, 25_000_000, false), (1_000_000, 250_000_000, false)]
        );
        assert_eq!(
            queues[0].warning(100_000).expect("over the age bound"),
            "warning: driver host plant-a queues 100000 readings / 25000000 bytes in a 100000 s \
             cut-off at 1.00 obs/s, more than its disk queue's default bounds hold: configure its \
             age_max_ms to at least 100000000 (default 86400000)"
        );
        let both = HostQueue::per_host([("plant-c", 20.0)], 100_000);
        assert_eq!(both[0].outage_bytes_needed, 500_000_000);
        assert!(both[0].warning(100_000).expect("over both").ends_with(
            "configure its bytes_max to at least 500000000 (default 268435456) and \
                     age_max_ms to at least 100000000 (default 86400000)"
        ));
        let exactly = HostQueue::per_host([("plant-d", 1.0)], DISK_QUEUE_AGE_MAX_S_DEFAULT);
        assert!(exactly[0].fits_default_bounds && exactly[0].warning(DISK_QUEUE_AGE_MAX_S_DEFAULT).is_none());
    }
}
