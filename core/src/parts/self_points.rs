//! The self-points part: the core's own self-points (core runtime spec, "Scale targets": self-points are points in
//! every respect; "Backpressure": lag read from the consumer, published as self-points;
//! DESIGN.md §2: they travel through ingest like any other observation).
//!
//! Owns: which figures the core reports about itself, how often (the interval, when the next
//! readings are due, the last throughput sample), their sequence, and the envelopes that
//! carry them. The core publishes them into the observation stream as the driver instance
//! `core` of host `sentinel`, keyed `(core, core epoch, n)`: the epoch changes with every
//! acquisition, so keys never repeat across incarnations. A figure whose point the registry
//! does not declare is not published.
//!
//! Also the envelopes of the generated health points (the health part computes them), so every
//! reading the core publishes about itself shares one key sequence.
//!
//! Takes `Tick`, with the counters ([`Metrics`]). Emits `PublishObservation`.

use bytes::Bytes;

use crate::effect::Effect;
use crate::metrics::Metrics;
use crate::registry::{PointIdx, Registry};
use crate::time::Micros;
use crate::wire::{EnvelopeOut, obs_subject};

use super::context::{Ctx, Out};

/// The host and driver instance the registry assigns the core's self-points to.
pub use crate::registry::{SELF_HOST, SELF_INSTANCE};

pub const LAG_PENDING: &str = "sentinel.core.lag_pending";
/// Milliseconds, as its `unit_native` says; stored in seconds.
pub const OLDEST_UNACKED_AGE: &str = "sentinel.core.oldest_unacked_age";
/// Observations committed (rows and quarantine entries) per second over the last interval.
pub const THROUGHPUT: &str = "sentinel.core.throughput";
pub const QUARANTINE_COUNT: &str = "sentinel.core.quarantine_count";
pub const WRONG_INSTANCE_COUNT: &str = "sentinel.core.wrong_instance_count";

/// Every figure, in the order [`SelfPoints::take_due`] reports them.
const FIGURES: [&str; 5] = [
    LAG_PENDING,
    OLDEST_UNACKED_AGE,
    THROUGHPUT,
    QUARANTINE_COUNT,
    WRONG_INSTANCE_COUNT,
];

/// One observation to publish into the stream.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfObservation {
    pub subject: String,
    pub msg_id: String,
    pub payload: Bytes,
}

#[derive(Debug)]
pub struct SelfPoints {
    interval_ms: i64,
    next_at: Micros,
    next_seq: u64,
    last_at: Micros,
    last_committed: u64,
}

impl SelfPoints {
    /// `interval_ms` of 0 turns self-points off, and so does a registry that declares none
    /// of them.
    pub fn new(interval_ms: i64, registry: &Registry, now: Micros) -> SelfPoints {
        let declared = FIGURES.iter().any(|id| registry.resolve(id).is_some());
        let interval_ms = if declared { interval_ms } else { 0 };
        SelfPoints {
            interval_ms,
            next_at: now.add_ms(interval_ms),
            next_seq: 1,
            last_at: now,
            last_committed: 0,
        }
    }

    pub fn next_deadline(&self) -> Option<Micros> {
        (self.interval_ms > 0).then_some(self.next_at)
    }

    /// For a running core: the readings due now, published.
    pub(crate) fn on_tick(&mut self, ctx: &Ctx, out: &mut Out) {
        for o in self.take_due(ctx.now, ctx.epoch, &ctx.registry, &out.metrics) {
            out.push(Effect::PublishObservation {
                subject: o.subject,
                msg_id: o.msg_id,
                payload: o.payload,
            });
        }
    }

    /// The readings due at `now`, if any.
    pub fn take_due(
        &mut self,
        now: Micros,
        epoch: u32,
        registry: &Registry,
        metrics: &Metrics,
    ) -> Vec<SelfObservation> {
        if self.interval_ms <= 0 || now < self.next_at {
            return Vec::new();
        }
        self.next_at = now.add_ms(self.interval_ms);
        let committed = metrics.rows_inserted.iter().sum::<u64>() + metrics.quarantined_total();
        let elapsed_s = (now.saturating_sub(self.last_at).max(1)) as f64 / 1e6;
        let throughput = (committed.saturating_sub(self.last_committed)) as f64 / elapsed_s;
        self.last_at = now;
        self.last_committed = committed;
        let figures = [
            (LAG_PENDING, serde_json::json!(metrics.lag_pending)),
            (
                OLDEST_UNACKED_AGE,
                serde_json::json!(metrics.lag_oldest_unacked_age_ms),
            ),
            (
                THROUGHPUT,
                serde_json::json!((throughput * 100.0).round() / 100.0),
            ),
            (QUARANTINE_COUNT, serde_json::json!(metrics.quarantined_total())),
            (WRONG_INSTANCE_COUNT, serde_json::json!(metrics.wrong_instance())),
        ];
        debug_assert!(
            figures.iter().map(|(id, _)| *id).eq(FIGURES),
            "one value per figure"
        );
        figures
            .into_iter()
            .filter_map(|(point_id, value)| {
                let idx = registry.resolve(point_id)?;
                Some(self.envelope(registry, idx, value, now, epoch))
            })
            .collect()
    }

    /// Publishes the generated health points' readings (the health part's) on the same
    /// subject and key sequence as the core's own figures, so their keys never collide.
    pub(crate) fn publish_health(&mut self, readings: Vec<(PointIdx, f64)>, ctx: &Ctx, out: &mut Out) {
        for (idx, value) in readings {
            debug_assert!(value.is_finite(), "a health value is finite");
            let o = self.envelope(&ctx.registry, idx, serde_json::json!(value), ctx.now, ctx.epoch);
            out.push(Effect::PublishObservation {
                subject: o.subject,
                msg_id: o.msg_id,
                payload: o.payload,
            });
        }
    }

    /// One reading of `point`, keyed `(core, epoch, next seq)`.
    fn envelope(
        &mut self,
        registry: &Registry,
        idx: PointIdx,
        value: serde_json::Value,
        now: Micros,
        epoch: u32,
    ) -> SelfObservation {
        let point = registry.point(idx);
        debug_assert_eq!(&*point.host, SELF_HOST, "a self-point belongs to the core's host");
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut envelope = EnvelopeOut::new(&point.id, SELF_INSTANCE, epoch, seq, now, value);
        envelope.unit = point.unit_native.as_deref().map(str::to_owned);
        SelfObservation {
            subject: obs_subject(SELF_HOST, SELF_INSTANCE),
            msg_id: envelope.msg_id(),
            payload: Bytes::from(envelope.to_bytes()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parts::context::testing::{EPOCH, T0, ctx, drain};

    #[test]
    fn readings_of_declared_figures_go_out_on_the_interval() {
        let mut ctx = ctx();
        let mut out = Out::default();
        let mut self_points = SelfPoints::new(1_000, &ctx.registry, T0);
        assert_eq!(self_points.next_deadline(), Some(T0.add_ms(1_000)));
        self_points.on_tick(&ctx, &mut out);
        assert!(drain(&mut out).is_empty(), "not due yet");
        out.metrics.lag_pending = 12;
        ctx.now = T0.add_ms(1_000);
        self_points.on_tick(&ctx, &mut out);
        let effects = drain(&mut out);
        // Only the lag figure is declared by the fixture registry.
        let [
            Effect::PublishObservation {
                subject,
                msg_id,
                payload,
            },
        ] = &effects[..]
        else {
            panic!("one reading: {effects:?}");
        };
        assert_eq!(subject, "obs.sentinel.core");
        assert_eq!(msg_id, &crate::wire::msg_id(SELF_INSTANCE, EPOCH, 1));
        let envelope: serde_json::Value = serde_json::from_slice(payload).expect("an envelope");
        assert_eq!(envelope["value"], serde_json::json!(12));
        assert_eq!(self_points.next_deadline(), Some(T0.add_ms(2_000)));
    }
}
