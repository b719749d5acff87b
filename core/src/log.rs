//! The records the core writes to the two logs' store (ingest spec, "Two logs, not one",
//! "Schema"; DESIGN.md §3) and the batch that carries them (stages 11–12).
//!
//! Owns: `ObsRow` (one observation row, identical across the three class tables),
//! `QuarantineEntry` (stages 2, 4, 5 failures, with the native payload), `Batch` (what one
//! fenced transaction commits) and `CommitReport` (what the store answers: the RETURNING set).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;

use crate::delivery::DeliveryTag;
use crate::registry::{PointIdx, RetentionClass};
use crate::time::Micros;

/// The `quality` enum of the schema.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quality {
    Unknown,
    Restored,
    Live,
    Stale,
    Unavailable,
    Bad,
    Assumed,
}

impl Quality {
    pub const ALL: [Quality; 7] = [
        Quality::Unknown,
        Quality::Restored,
        Quality::Live,
        Quality::Stale,
        Quality::Unavailable,
        Quality::Bad,
        Quality::Assumed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Quality::Unknown => "unknown",
            Quality::Restored => "restored",
            Quality::Live => "live",
            Quality::Stale => "stale",
            Quality::Unavailable => "unavailable",
            Quality::Bad => "bad",
            Quality::Assumed => "assumed",
        }
    }

    pub fn parse(text: &str) -> Option<Quality> {
        Quality::ALL.into_iter().find(|q| q.as_str() == text)
    }
}

/// A canonical value: exactly one of `value_num`, `value_bool`, `value_text`.
#[derive(Clone, Debug, PartialEq)]
pub enum CanonicalValue {
    Num(f64),
    Bool(bool),
    Text(Arc<str>),
}

impl CanonicalValue {
    pub fn num(&self) -> Option<f64> {
        match self {
            CanonicalValue::Num(v) => Some(*v),
            _ => None,
        }
    }
    pub fn bool(&self) -> Option<bool> {
        match self {
            CanonicalValue::Bool(v) => Some(*v),
            _ => None,
        }
    }
    pub fn text(&self) -> Option<&str> {
        match self {
            CanonicalValue::Text(v) => Some(v),
            _ => None,
        }
    }
}

/// `(driver_instance, source_epoch, source_seq)`: a message's identity, the dedup key.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObsKey {
    pub driver_instance: Arc<str>,
    pub source_epoch: u32,
    pub source_seq: u64,
}

/// One observation row. The store routes it to the table of `class`.
#[derive(Clone, Debug, PartialEq)]
pub struct ObsRow {
    pub point: PointIdx,
    pub point_id: Arc<str>,
    pub class: RetentionClass,
    pub ingested_at: Micros,
    pub observed_at: Micros,
    pub device_time: Option<Micros>,
    pub value: Option<CanonicalValue>,
    pub native_num: Option<f64>,
    pub native_text: Option<Box<str>>,
    pub unit_native: Option<Arc<str>>,
    pub quality: Quality,
    /// Ours (`unit_mismatch`, `out_of_range`, ...) or the driver's own.
    pub reason: Option<Cow<'static, str>>,
    /// The envelope's `detail` object as JSON text.
    pub detail: Option<Box<str>>,
    pub changed: bool,
    pub registry_version: i32,
    pub key: ObsKey,
    pub skew_flagged: bool,
    /// Which delivery to ack once this row is durable.
    pub tag: DeliveryTag,
}

impl ObsRow {
    /// The total order of invariant 5: `(observed_at, ingested_at, key)`.
    pub fn order_key(&self) -> (Micros, Micros, &ObsKey) {
        (self.observed_at, self.ingested_at, &self.key)
    }
}

/// Why a message could not become a row (stages 2, 4, 5).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QuarantineReason {
    /// Payload larger than `envelope_bytes_max`; the stored payload is truncated to the bound.
    Oversized,
    /// Not JSON, or a field of the wrong type.
    Malformed,
    MissingField,
    UnsupportedVersion,
    /// `observed_at` / `device_time` not RFC 3339.
    BadTimestamp,
    /// `observed_at` further in the future than `observed_future_max_ms`.
    FutureTimestamp,
    /// Subject not of the form `obs.<host>.<driver_instance>`.
    BadSubject,
    UnknownPoint,
    WrongInstance,
}

impl QuarantineReason {
    pub const ALL: [QuarantineReason; 9] = [
        QuarantineReason::Oversized,
        QuarantineReason::Malformed,
        QuarantineReason::MissingField,
        QuarantineReason::UnsupportedVersion,
        QuarantineReason::BadTimestamp,
        QuarantineReason::FutureTimestamp,
        QuarantineReason::BadSubject,
        QuarantineReason::UnknownPoint,
        QuarantineReason::WrongInstance,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            QuarantineReason::Oversized => "oversized",
            QuarantineReason::Malformed => "malformed",
            QuarantineReason::MissingField => "missing_field",
            QuarantineReason::UnsupportedVersion => "unsupported_version",
            QuarantineReason::BadTimestamp => "bad_timestamp",
            QuarantineReason::FutureTimestamp => "future_timestamp",
            QuarantineReason::BadSubject => "bad_subject",
            QuarantineReason::UnknownPoint => "unknown_point",
            QuarantineReason::WrongInstance => "wrong_instance",
        }
    }

    pub fn parse(text: &str) -> Option<QuarantineReason> {
        QuarantineReason::ALL.into_iter().find(|r| r.as_str() == text)
    }
}

/// A message that did not become a row. Keyed in the store by `(stream, stream_seq)` so a
/// redelivered quarantined message is stored once.
#[derive(Clone, Debug, PartialEq)]
pub struct QuarantineEntry {
    pub stream_seq: u64,
    pub ingested_at: Micros,
    pub subject: String,
    pub reason: QuarantineReason,
    /// Human-readable, coordinates only; may quote the offending field name. Stored, never
    /// logged above DEBUG.
    pub detail: String,
    /// The native payload, truncated to `envelope_bytes_max` when oversized.
    pub payload: Bytes,
    /// The payload's original length.
    pub payload_bytes: u32,
    pub tag: DeliveryTag,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BatchId(pub u64);

/// What one fenced transaction commits (stages 11–12). Rows are split by class inside the
/// transaction by the store.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub id: BatchId,
    /// The core epoch the transaction must verify is still current.
    pub epoch: u32,
    pub rows: Vec<ObsRow>,
    pub quarantine: Vec<QuarantineEntry>,
}

impl Batch {
    pub fn len(&self) -> usize {
        self.rows.len() + self.quarantine.len()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The batch's place in the order the core applies commits (migration 0007's `applied`
    /// column): `epoch * 2^32 + id`. The core applies commit reports in batch-id order and
    /// never uses an id at or above [`BATCH_IDS_PER_EPOCH`], so this orders every row the way
    /// the cores that wrote it applied it.
    pub fn applied(&self) -> i64 {
        applied_position(self.epoch, self.id)
    }
}

/// Batch ids a core may use in one epoch (ids start at 1); past it the core restarts (a new
/// epoch), so [`Batch::applied`] stays ordered. At one batch every 10 ms that is 1.4 years.
pub const BATCH_IDS_PER_EPOCH: u64 = 1 << 32;

/// `epoch * 2^32 + id`, the `applied` column's value for a batch.
pub fn applied_position(epoch: u32, id: BatchId) -> i64 {
    (i64::from(epoch) << 32) | (id.0 & (BATCH_IDS_PER_EPOCH - 1)) as i64
}

/// The store's answer to a committed batch: the batch back (ownership round-trip, no copy) and
/// the RETURNING set as ordinals into `batch.rows`, ascending.
#[derive(Clone, Debug, PartialEq)]
pub struct CommitReport {
    pub batch: Batch,
    pub inserted: Vec<u32>,
    /// How many quarantine entries were new (the rest were redeliveries).
    pub quarantine_inserted: u32,
}
