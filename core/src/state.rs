//! A point's state as checkpointed to `point_state` and restored from it (ingest spec,
//! "Projection", "Restart" steps 2–3).
//!
//! Owns: the row shape shared by the projection, the checkpoint effect and the store, and
//! [`rebuild_state`], the state of a point rebuilt from its log head, which the running
//! core's projection (after a reprocess) and the reprocess command both use.

use std::sync::Arc;

use crate::log::{CanonicalValue, ObsKey, Quality};
use crate::time::Micros;

#[derive(Clone, Debug, PartialEq)]
pub struct PointState {
    pub point_id: Arc<str>,
    /// Never nulled when quality degrades.
    pub value: Option<CanonicalValue>,
    pub quality: Quality,
    pub reason: Option<String>,
    pub observed_at: Option<Micros>,
    pub ingested_at: Option<Micros>,
    /// Key of the row that set `observed_at`; completes the total order of invariant 5.
    pub key: Option<ObsKey>,
    /// Last value change past the deadband.
    pub changed_at: Option<Micros>,
    pub quality_since: Micros,
    /// Last control_event applied.
    pub watermark_seq: Option<i64>,
}

impl PointState {
    pub fn unknown(point_id: Arc<str>, now: Micros) -> PointState {
        PointState {
            point_id,
            value: None,
            quality: Quality::Unknown,
            reason: None,
            observed_at: None,
            ingested_at: None,
            key: None,
            changed_at: None,
            quality_since: now,
            watermark_seq: None,
        }
    }

    /// The invariant-5 order key of the row this state reflects, if any.
    pub fn order_key(&self) -> Option<(Micros, Micros, &ObsKey)> {
        match (self.observed_at, self.ingested_at, &self.key) {
            (Some(o), Some(i), Some(k)) => Some((o, i, k)),
            _ => None,
        }
    }
}

/// A row's position in the total order of invariant 5: `(observed_at, ingested_at, key)`.
pub type OrderKey = (Micros, Micros, ObsKey);

/// The head of one point's log: `state` carries the quality, reason, `observed_at`,
/// `ingested_at` and key of the greatest committed row under the total order, and the value of
/// the greatest row that had one; `value_order` is that valued row's own position, so a late
/// valued row arriving after a restart is folded exactly as it would have been before.
#[derive(Clone, Debug, PartialEq)]
pub struct LogHead {
    pub state: PointState,
    pub value_order: Option<OrderKey>,
}

/// What the store returns at restart: the checkpoint, and the head of the log per point. The
/// log is authoritative; the checkpoint supplies `changed_at`, `quality_since` and
/// `watermark_seq`, which the log does not hold.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RestoredState {
    pub checkpoints: Vec<PointState>,
    pub log_heads: Vec<LogHead>,
}

/// The state of a reprocessed point: the fold of its rows (the log head, which the store reads
/// after the updates commit), with what the log does not hold from the checkpoint: the
/// control-event watermark, `changed_at`, and a quality the system set after the head row
/// (`stale` from the watchdog, `restored` from a restart) when the head is the checkpoint's
/// own position. `quality_since` moves to `now` when the quality changes.
pub fn rebuild_state(
    point_id: Arc<str>,
    head: Option<&LogHead>,
    checkpoint: Option<&PointState>,
    now: Micros,
) -> PointState {
    let Some(head) = head else {
        return checkpoint
            .cloned()
            .unwrap_or_else(|| PointState::unknown(point_id, now));
    };
    let mut state = PointState {
        point_id,
        ..head.state.clone()
    };
    state.changed_at = checkpoint.and_then(|c| c.changed_at);
    state.watermark_seq = checkpoint.and_then(|c| c.watermark_seq);
    state.quality_since = now;
    if let Some(checkpoint) = checkpoint {
        let same_position = checkpoint.order_key() == state.order_key();
        if same_position && matches!(checkpoint.quality, Quality::Stale | Quality::Restored) {
            state.quality = checkpoint.quality;
            state.reason = checkpoint.reason.clone();
        }
        if checkpoint.quality == state.quality {
            state.quality_since = checkpoint.quality_since;
        }
    }
    state
}
