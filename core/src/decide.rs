//! Stages 6–8 for one observation: unit check, validation, conversion (ingest spec, "Ingest
//! pipeline"). One pure definition, below both of its callers: the pipeline
//! (`pipeline.rs`, from an envelope) and reprocess (`reprocess.rs`, from a stored row).
//!
//! Owns: what stages 6–8 read ([`Asserted`]) and decide ([`Decided`]), the reasons they
//! assign ([`reason`]), and [`decide`]. A failure keeps the row (quality `bad`, a reason, the
//! offending value in `native_text`); it is never quarantined.

use std::borrow::Cow;

use crate::config::Config;
use crate::log::{CanonicalValue, Quality};
use crate::registry::{CompiledPoint, Kind};
use crate::wire::NativeValue;

/// Row reasons the core assigns (stages 6–7).
pub mod reason {
    pub const UNIT_MISMATCH: &str = "unit_mismatch";
    pub const OUT_OF_RANGE: &str = "out_of_range";
    pub const NOT_IN_CODEBOOK: &str = "not_in_codebook";
    pub const TYPE_MISMATCH: &str = "type_mismatch";
    pub const MISSING_VALUE: &str = "missing_value";
    pub const TEXT_TOO_LONG: &str = "text_too_long";
    pub const NOT_FINITE: &str = "not_finite";
}

/// What stages 6–8 read of one observation: what its driver asserted and the native reading.
/// The pipeline builds it from an envelope; reprocess from a stored row.
pub struct Asserted<'a> {
    /// The quality the driver asserted (`unavailable` or `bad`), if any.
    pub quality: Option<Quality>,
    /// The driver's reason, if any.
    pub reason: Option<Cow<'static, str>>,
    /// The unit the driver reported, if it reported one.
    pub unit: Option<&'a str>,
    pub value: &'a NativeValue<'a>,
}

/// What stages 6–8 decided: the canonical value, quality and reason, and the native columns.
#[derive(Clone, Debug, PartialEq)]
pub struct Decided {
    pub value: Option<CanonicalValue>,
    pub native_num: Option<f64>,
    pub native_text: Option<Box<str>>,
    pub unit_native: Option<std::sync::Arc<str>>,
    pub quality: Quality,
    pub reason: Option<Cow<'static, str>>,
}

/// Stages 6–8 for one observation of `point`: unit check, validation, conversion. Pure; the
/// one definition the pipeline and reprocess share. A failure keeps the row (quality `bad`, a
/// reason from [`reason`], the offending value in `native_text`); otherwise the driver's
/// asserted quality and reason stand (`live` when it asserted none).
pub fn decide(point: &CompiledPoint, config: &Config, asserted: Asserted<'_>) -> Decided {
    let desc = &point.descriptor;
    let mut quality = asserted.quality.unwrap_or(Quality::Live);
    let mut reason = asserted.reason;
    let mut value = None;
    let mut native_num = None;
    let mut native_text: Option<Box<str>> = None;

    let bad = |why: &'static str, quality: &mut Quality, reason: &mut Option<Cow<'static, str>>| {
        *quality = Quality::Bad;
        *reason = Some(Cow::Borrowed(why));
    };

    // Stage 6: unit check. A unit the descriptor does not expect means no conversion at all.
    let mut unit_ok = true;
    let unit_native = match (asserted.unit, &point.unit_native) {
        (None, expected) => expected.clone(),
        (Some(reported), Some(expected)) if reported == &**expected => Some(expected.clone()),
        (Some(reported), _) => {
            unit_ok = false;
            bad(reason::UNIT_MISMATCH, &mut quality, &mut reason);
            Some(std::sync::Arc::from(reported))
        }
    };

    match asserted.value {
        NativeValue::Num(x) => native_num = Some(*x),
        // A good text point's canonical text is its native text: one copy, made below.
        NativeValue::Text(s) if desc.kind != Kind::Text || !unit_ok => native_text = Some(Box::from(&**s)),
        NativeValue::Text(_) => {}
        NativeValue::Bool(b) => native_num = Some(if *b { 1.0 } else { 0.0 }),
        NativeValue::Null => {}
    }

    // Stages 7–8: validate and convert, only when the unit is right.
    if unit_ok {
        match (desc.kind, asserted.value) {
            (_, NativeValue::Null) => {
                if asserted.quality.is_none() {
                    bad(reason::MISSING_VALUE, &mut quality, &mut reason);
                }
            }
            (Kind::Number, NativeValue::Num(x)) => {
                let canonical = desc.conversion.apply(*x);
                if !canonical.is_finite() {
                    bad(reason::NOT_FINITE, &mut quality, &mut reason);
                    native_text = Some(native_repr(asserted.value));
                } else if desc.range.is_some_and(|r| !(r.min..=r.max).contains(&canonical)) {
                    bad(reason::OUT_OF_RANGE, &mut quality, &mut reason);
                    native_text = Some(native_repr(asserted.value));
                } else {
                    value = Some(CanonicalValue::Num(canonical));
                }
            }
            (Kind::Bool, NativeValue::Bool(b)) => value = Some(CanonicalValue::Bool(*b)),
            (Kind::Enum, NativeValue::Num(_) | NativeValue::Text(_)) => {
                let mut buf = [0u8; 24];
                let code = enum_code(asserted.value, &mut buf);
                match code.and_then(|c| point.codebook.get(c)) {
                    Some(member) => value = Some(CanonicalValue::Text(member.clone())),
                    None => {
                        bad(reason::NOT_IN_CODEBOOK, &mut quality, &mut reason);
                        native_text = Some(native_repr(asserted.value));
                    }
                }
            }
            (Kind::Text, NativeValue::Text(s)) => {
                if s.len() > config.text_value_bytes_max {
                    bad(reason::TEXT_TOO_LONG, &mut quality, &mut reason);
                    native_text = Some(Box::from(&**s));
                } else {
                    value = Some(CanonicalValue::Text(std::sync::Arc::from(&**s)));
                }
            }
            (_, _) => {
                bad(reason::TYPE_MISMATCH, &mut quality, &mut reason);
                native_text = Some(native_repr(asserted.value));
            }
        }
    }

    Decided {
        value,
        native_num,
        native_text,
        unit_native,
        quality,
        reason,
    }
}

/// The codebook key of a native value: text as is, integral numbers in decimal.
fn enum_code<'v>(value: &'v NativeValue<'_>, buf: &'v mut [u8; 24]) -> Option<&'v str> {
    match value {
        NativeValue::Text(s) => Some(s),
        NativeValue::Num(x) if x.fract() == 0.0 && x.abs() < 1e15 => Some(format_integer(*x as i64, buf)),
        _ => None,
    }
}

/// Formats an integer into a stack buffer, so enum lookups do not allocate.
fn format_integer(mut n: i64, buf: &mut [u8; 24]) -> &str {
    let negative = n < 0;
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10).unsigned_abs() as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if negative {
        i -= 1;
        buf[i] = b'-';
    }
    std::str::from_utf8(&buf[i..]).expect("invariant: ASCII digits")
}

fn native_repr(value: &NativeValue<'_>) -> Box<str> {
    match value {
        NativeValue::Null => "null".into(),
        NativeValue::Bool(b) => if *b { "true" } else { "false" }.into(),
        NativeValue::Num(x) => x.to_string().into_boxed_str(),
        NativeValue::Text(s) => Box::from(&**s),
    }
}

#[cfg(test)]
mod tests {
    use super::format_integer;

    #[test]
    fn formats_integers() {
        for n in [0i64, 7, -7, 42, 1_000_000, i64::MAX, i64::MIN + 1] {
            let mut buf = [0u8; 24];
            assert_eq!(format_integer(n, &mut buf), n.to_string());
        }
    }
}
