//! Comparing two decodings of one envelope, bit for bit: the oracle that holds the scanner
//! ([`super::scan`]) to serde_json's answers (ingest spec, stage 2; issue 24 item 3).
//!
//! Owns: [`decoding_difference`], used by `core/tests/envelope_scan.rs` and the envelope fuzz
//! body (`fuzz/bodies/src/envelope.rs`); nothing on the ingest path calls it.

use std::borrow::Cow;
use std::fmt::Debug;

use super::{Envelope, NativeValue, Refusal};

/// Where two decodings of one payload differ, bit for bit (a number's bits, so `-0.0` is not
/// `0.0`; a string's borrowed or owned form; a refusal's reason and detail text), or `None`
/// when they are the same. The equivalence tests and the fuzz target hold
/// [`super::decode_envelope`] to [`super::decode_envelope_serde`] with it.
pub fn decoding_difference(
    a: &Result<Envelope<'_>, Refusal>,
    b: &Result<Envelope<'_>, Refusal>,
) -> Option<String> {
    let (a, b) = match (a, b) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(a), Err(b)) => return (a != b).then(|| format!("refusal: {a:?} against {b:?}")),
        _ => return Some(format!("outcome: {a:?} against {b:?}")),
    };
    let value = match (&a.value, &b.value) {
        (NativeValue::Null, NativeValue::Null) => None,
        (NativeValue::Bool(x), NativeValue::Bool(y)) if x == y => None,
        (NativeValue::Num(x), NativeValue::Num(y)) if x.to_bits() == y.to_bits() => None,
        (NativeValue::Text(x), NativeValue::Text(y)) => cow("value", x, y),
        (x, y) => Some(format!("value: {x:?} against {y:?}")),
    };
    cow("point_id", &a.point_id, &b.point_id)
        .or_else(|| cow("driver_instance", &a.driver_instance, &b.driver_instance))
        .or_else(|| same("source_epoch", &a.source_epoch, &b.source_epoch))
        .or_else(|| same("source_seq", &a.source_seq, &b.source_seq))
        .or_else(|| same("observed_at", &a.observed_at, &b.observed_at))
        .or_else(|| same("device_time", &a.device_time, &b.device_time))
        .or(value)
        .or_else(|| optional("unit", &a.unit, &b.unit))
        .or_else(|| same("quality", &a.quality, &b.quality))
        .or_else(|| optional("reason", &a.reason, &b.reason))
        .or_else(|| same("detail", &a.detail, &b.detail))
}

/// A field compared by `==`.
fn same<T: PartialEq + Debug>(name: &str, a: &T, b: &T) -> Option<String> {
    (a != b).then(|| format!("{name}: {a:?} against {b:?}"))
}

/// A string compared by its text and its form (borrowed or owned).
#[allow(clippy::ptr_arg)] // the form (borrowed or owned) is compared, not only the text
fn cow(name: &str, a: &Cow<'_, str>, b: &Cow<'_, str>) -> Option<String> {
    let same = a == b && matches!(a, Cow::Borrowed(_)) == matches!(b, Cow::Borrowed(_));
    (!same).then(|| format!("{name}: {a:?} against {b:?}"))
}

/// An optional string: both absent, or both present and the same by [`cow`].
fn optional(name: &str, a: &Option<Cow<'_, str>>, b: &Option<Cow<'_, str>>) -> Option<String> {
    match (a, b) {
        (None, None) => None,
        (Some(a), Some(b)) => cow(name, a, b),
        _ => Some(format!("{name}: {a:?} against {b:?}")),
    }
}
