//! The fold of one delivery as a pure plan (spec: "Хранение часовыми объектами", "Хеш как
//! детектор изменений", "Признак запечатанного часа"), sans-IO: the plan says which stored
//! objects it needs, the caller loads them inside its transaction, and the plan answers with
//! the objects to write and the delivery's counters. No canonical form is computed inside the
//! transaction except for the stored points of touched hours.

use std::collections::BTreeMap;

use crate::entities::{EntityKey, EntityVersion, SkipReason, Skipped, choose_in_body};
use crate::hae::ParsedBody;
use crate::object::{self, ObjectError, StoredPoint};
use crate::points::Candidate;
use crate::time::hour_start_us;

/// One metric's arriving points, grouped by start hour.
#[derive(Debug, Clone)]
pub struct MetricPlan {
    pub metric: String,
    pub units: String,
    pub hours: BTreeMap<i64, Vec<Candidate>>,
}

impl MetricPlan {
    pub fn hour_keys(&self) -> Vec<i64> {
        self.hours.keys().copied().collect()
    }
}

/// A delivery's plan: its metrics, grouped by hour, its entities (one winner per key, chosen
/// among the body's versions before the store is touched), and the counts known before the store.
#[derive(Debug, Clone)]
pub struct DeliveryPlan {
    pub layer: String,
    pub metrics: Vec<MetricPlan>,
    pub points: u64,
    pub coordinates: u64,
    /// One version per entity key, in key order.
    pub entities: Vec<EntityVersion>,
    /// Entity elements of the body that were keyed (before choosing among versions).
    pub entity_elements: u64,
    /// Candidates that differ canonically from their key's in-body winner.
    pub versions_differing: u64,
    pub skipped: Vec<Skipped>,
}

impl DeliveryPlan {
    pub fn new(parsed: ParsedBody, layer: &str) -> Self {
        let points = parsed.point_count() as u64;
        let entity_elements = parsed.entities.len() as u64;
        let mut by_key: BTreeMap<EntityKey, Vec<EntityVersion>> = BTreeMap::new();
        for v in parsed.entities {
            by_key.entry(v.key.clone()).or_default().push(v);
        }
        let mut versions_differing = 0;
        let mut skipped = parsed.skipped;
        let mut entities = Vec::with_capacity(by_key.len());
        for versions in by_key.into_values() {
            match choose_in_body(versions) {
                Ok((winner, differing)) => {
                    versions_differing += differing;
                    entities.push(winner);
                }
                Err(refused) => skipped.extend(refused.into_iter().map(|v| Skipped {
                    section: v.key.section,
                    index: v.index,
                    reason: SkipReason::TooManyVersions,
                })),
            }
        }
        let mut coordinates = 0u64;
        let metrics = parsed
            .metrics
            .into_iter()
            .map(|m| {
                let mut hours: BTreeMap<i64, Vec<Candidate>> = BTreeMap::new();
                for c in m.points {
                    hours.entry(hour_start_us(c.start_us)).or_default().push(c);
                }
                for cands in hours.values() {
                    let mut coords: Vec<(i64, i64)> = cands.iter().map(Candidate::coordinate).collect();
                    coords.sort_unstable();
                    coords.dedup();
                    coordinates += coords.len() as u64;
                }
                MetricPlan {
                    metric: m.name,
                    units: m.units,
                    hours,
                }
            })
            .collect();
        Self {
            layer: layer.to_string(),
            metrics,
            points,
            coordinates,
            entities,
            entity_elements,
            versions_differing,
            skipped,
        }
    }

    pub fn object_count(&self) -> usize {
        self.metrics.iter().map(|m| m.hours.len()).sum()
    }
}

/// A stored object as the plan needs it.
#[derive(Debug, Clone)]
pub struct ExistingObject {
    pub hour_us: i64,
    pub units: String,
    pub hash: Vec<u8>,
    pub sealed: bool,
    pub payload: Vec<u8>,
}

/// An object to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectWrite {
    pub hour_us: i64,
    pub units: String,
    pub first_us: i64,
    pub last_us: i64,
    pub point_count: i64,
    pub hash: Vec<u8>,
    pub payload: Vec<u8>,
}

/// What merging one hour found.
#[derive(Debug, Clone)]
pub struct HourOutcome {
    pub hour_us: i64,
    /// `None` when the canonical hash did not change: nothing is written.
    pub write: Option<ObjectWrite>,
    pub collisions: u32,
    pub incomparable: u32,
    /// Arriving units differ from the stored ones (the stored ones stay).
    pub units_mismatch: bool,
    /// The hour is sealed and its content changed (it is written all the same).
    pub sealed_changed: bool,
}

/// Merges one metric's hours with the stored objects of those hours.
pub fn merge_metric(plan: &MetricPlan, existing: &[ExistingObject]) -> Result<Vec<HourOutcome>, ObjectError> {
    let stored: BTreeMap<i64, &ExistingObject> = existing.iter().map(|e| (e.hour_us, e)).collect();
    let mut outcomes = Vec::with_capacity(plan.hours.len());
    for (&hour_us, cands) in &plan.hours {
        let refs: Vec<&Candidate> = cands.iter().collect();
        let before = stored.get(&hour_us);
        let stored_points: Vec<StoredPoint> = match before {
            Some(e) => object::decode(&e.payload, hour_us)?,
            None => Vec::new(),
        };
        let merged = object::merge(&stored_points, &refs)?;
        let changed = before.is_none_or(|e| e.hash.as_slice() != merged.hash.as_slice());
        let units = before.map_or_else(|| plan.units.clone(), |e| e.units.clone());
        let units_mismatch = before.is_some_and(|e| e.units != plan.units);
        let sealed_changed = changed && before.is_some_and(|e| e.sealed);
        // Encoded (and so checked against the object limits) whenever it is written.
        let write = match changed {
            true => Some(ObjectWrite {
                hour_us,
                units,
                first_us: merged.first_us,
                last_us: merged.last_us,
                point_count: merged.points.len() as i64,
                hash: merged.hash.to_vec(),
                payload: object::encode(&merged.points)?,
            }),
            false => None,
        };
        outcomes.push(HourOutcome {
            hour_us,
            write,
            collisions: merged.collisions,
            incomparable: merged.incomparable,
            units_mismatch,
            sealed_changed,
        });
    }
    Ok(outcomes)
}

/// A delivery's counters (the journal row's columns).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Counters {
    pub metrics: u64,
    pub points: u64,
    pub coordinates: u64,
    pub objects_written: u64,
    pub objects_unchanged: u64,
    /// The spec's "счётчик перезаписей": coordinates whose candidates differ canonically.
    pub collisions: u64,
    pub incomparable: u64,
    pub unit_mismatches: u64,
    pub sealed_changes: u64,
    /// Entity elements keyed in the body.
    pub entities: u64,
    /// Entity contents written (inserts and replacements).
    pub entities_written: u64,
    /// Entities whose stored version stayed with nothing written.
    pub entities_unchanged: u64,
    /// Same content, later journal position: only the provenance moved.
    pub provenance_updates: u64,
    /// Arriving versions refused because they lose content or are incomparable (WARN each).
    pub versions_retained: u64,
    /// Versions of one id in the body that differ canonically from the body's winner.
    pub versions_differing: u64,
    /// Elements of covered entity sections that could not be keyed.
    pub skipped_entities: u64,
}

impl Counters {
    pub fn add_hour(&mut self, o: &HourOutcome) {
        if o.write.is_some() {
            self.objects_written += 1;
        } else {
            self.objects_unchanged += 1;
        }
        self.collisions += u64::from(o.collisions);
        self.incomparable += u64::from(o.incomparable);
        self.unit_mismatches += u64::from(o.units_mismatch);
        self.sealed_changes += u64::from(o.sealed_changed);
    }
}
