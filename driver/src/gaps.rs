//! Typed gaps from a driver (sensor paradigm, "Gaps are typed, not absent"; DESIGN.md §2).
//!
//! Owns: the one way a driver built on this library says "there is no reading, and this is
//! why": an observation with value `null`, quality `unavailable` and a reason from the
//! closed vocabulary ([`GapReason`]). A polled source that times out publishes a
//! `source_down` gap rather than holding its last value forward, because "unchanged for
//! hours" and "not heard from for hours" are opposite facts. The gap travels through ingest
//! like any reading (it is recorded, keyed and deduplicated the same way), so it is in the log.

use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{GapReason, Micros};

/// The quality a gap asserts (DESIGN.md §2: a driver may assert `unavailable` or `bad`).
pub const GAP_QUALITY: &str = "unavailable";

/// An observation recording a gap for `point_id` at `observed_at`, with the driver's usual
/// key `(driver_instance, source_epoch, source_seq)`. Publish it like any observation.
pub fn gap_observation(
    point_id: &str,
    driver_instance: &str,
    source_epoch: u32,
    source_seq: u64,
    observed_at: Micros,
    reason: GapReason,
) -> EnvelopeOut {
    let mut envelope = EnvelopeOut::new(
        point_id,
        driver_instance,
        source_epoch,
        source_seq,
        observed_at,
        serde_json::Value::Null,
    );
    envelope.quality = Some(GAP_QUALITY.to_owned());
    envelope.reason = Some(reason.as_str().to_owned());
    envelope
}

#[cfg(test)]
mod tests {
    use super::*;
    use sentinel_core::wire::{AssertedQuality, NativeValue, decode_envelope};

    /// What the core's stage 2 reads back from a driver's gap: no value, `unavailable`, and
    /// the reason's stable string, for every reason in the vocabulary.
    #[test]
    fn a_gap_decodes_as_unavailable_with_its_typed_reason() {
        for reason in GapReason::ALL {
            let out = gap_observation(
                "boiler.temp",
                "modbus-1",
                3,
                9,
                Micros(1_700_000_000_000_000),
                reason,
            );
            let bytes = out.to_bytes();
            let env = decode_envelope(&bytes).expect("a gap is a valid envelope");
            assert_eq!(env.quality, Some(AssertedQuality::Unavailable));
            assert!(matches!(env.value, NativeValue::Null), "{:?}", env.value);
            let decoded = env.reason.as_deref().and_then(GapReason::parse);
            assert_eq!(decoded, Some(reason));
            assert_eq!(out.msg_id(), "modbus-1:3:9");
        }
    }
}
