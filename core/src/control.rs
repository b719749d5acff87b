//! The control-event log as the core writes it (ingest spec, "Two logs": `control_event`;
//! core runtime spec, "Fencing the bus": the epoch on every control event).
//!
//! Owns: the shape of a control event the core asks the store to write, and the report that
//! comes back with the sequence numbers the log assigned. The core writes a control event
//! before it acts on it: a watchdog quality change is projected and published only once its
//! `quality_changed` event is committed, as rows are only once they are in the RETURNING set.

use std::sync::Arc;

use crate::log::Quality;
use crate::registry::PointIdx;
use crate::time::Micros;

/// Who caused the core's own control events (`principal` is NOT NULL by design).
pub const PRINCIPAL_WATCHDOG: &str = "core:watchdog";

/// Most control events in one write; the rest wait for the next.
pub const CONTROL_EVENTS_PER_WRITE_MAX: usize = 1_000;

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControlKind {
    /// The freshness watchdog changed a point's quality (no new value).
    QualityChanged,
}

impl ControlKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ControlKind::QualityChanged => "quality_changed",
        }
    }
}

/// One control event, as written. `core_epoch` is the writing core's; the store's fence
/// refuses the write if it is no longer current.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlEvent {
    pub occurred_at: Micros,
    pub kind: ControlKind,
    pub point: PointIdx,
    pub point_id: Arc<str>,
    pub principal: &'static str,
    pub core_epoch: u32,
    pub registry_version: i32,
    pub from: Quality,
    pub to: Quality,
    /// Why, for the payload (`freshness`), and the deadline that passed.
    pub reason: &'static str,
    pub deadline: Micros,
}

impl ControlEvent {
    /// The `payload` column: what changed, as JSON. Carries no point value.
    pub fn payload_json(&self) -> String {
        format!(
            r#"{{"from":"{}","to":"{}","reason":"{}","deadline":"{}"}}"#,
            self.from.as_str(),
            self.to.as_str(),
            self.reason,
            self.deadline.to_rfc3339()
        )
    }
}

/// The store's answer to a control write: the events and the `seq` the log gave each, in
/// the same order.
#[derive(Clone, Debug, PartialEq)]
pub struct ControlReport {
    pub events: Vec<ControlEvent>,
    pub seqs: Vec<i64>,
}
