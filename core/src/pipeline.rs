//! Stages 2–10 for one delivery (ingest spec, "Ingest pipeline"). Pure: the registry, the dedup
//! set and the projection are read, never written; the caller ([`crate::Core`]) applies the
//! outcome.
//!
//! Owns: turning a delivery into exactly one of a row, a quarantine entry or a recognised
//! duplicate. Failures at stages 2, 4 and 5 are quarantined with the native payload; failures
//! at stages 6–8 still write a row, with quality `bad`, a reason, and the offending value in
//! `native_text`.

use std::borrow::Cow;

use crate::config::Config;
use crate::dedup::{self, DedupSet, Seen};
use crate::delivery::{Delivery, DeliveryTag};
use crate::log::{CanonicalValue, ObsKey, ObsRow, Quality, QuarantineEntry, QuarantineReason};
use crate::projection::{Projection, is_edge};
use crate::registry::{CompiledPoint, Kind, PointIdx, Registry};
use crate::wire::{self, Envelope, NativeValue, Refusal};

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

#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // rows are the common case; see `Row`
pub enum Outcome {
    /// A row, and its packed dedup key. Not boxed: the row moves once, into its batch, and a
    /// box would cost an allocation per observation.
    Row(ObsRow, u128),
    Quarantine(QuarantineEntry),
    /// Stage 3 recognised the key.
    Duplicate {
        tag: DeliveryTag,
        seen: Seen,
    },
}

/// What stages 2–10 read.
pub struct Context<'a> {
    pub registry: &'a Registry,
    pub config: &'a Config,
    pub dedup: &'a DedupSet,
    pub projection: &'a Projection,
}

pub fn process(ctx: &Context<'_>, delivery: Delivery) -> Outcome {
    match evaluate(ctx, &delivery) {
        Ok(Evaluated::Row(row, key)) => Outcome::Row(row, key),
        Ok(Evaluated::Duplicate(seen)) => Outcome::Duplicate {
            tag: delivery.tag,
            seen,
        },
        Err(refusal) => Outcome::Quarantine(quarantine(delivery, refusal, ctx.config.envelope_bytes_max)),
    }
}

#[allow(clippy::large_enum_variant)] // as `Outcome`: no box per row
enum Evaluated {
    Row(ObsRow, u128),
    Duplicate(Seen),
}

fn evaluate(ctx: &Context<'_>, delivery: &Delivery) -> Result<Evaluated, Refusal> {
    // Stage 2: envelope.
    if delivery.payload.len() > ctx.config.envelope_bytes_max {
        return Err(Refusal {
            reason: QuarantineReason::Oversized,
            detail: format!(
                "payload is {} bytes, limit {}",
                delivery.payload.len(),
                ctx.config.envelope_bytes_max
            ),
        });
    }
    let (host, subject_instance) = wire::parse_obs_subject(&delivery.subject).ok_or_else(|| Refusal {
        reason: QuarantineReason::BadSubject,
        detail: "subject is not obs.<host>.<driver_instance>".into(),
    })?;
    let env = wire::decode_envelope(&delivery.payload)?;
    if env.observed_at.0 > delivery.ingested_at.add_ms(ctx.config.observed_future_max_ms).0 {
        return Err(Refusal {
            reason: QuarantineReason::FutureTimestamp,
            detail: format!(
                "observed_at is {} ms after ingested_at, limit {} ms",
                (env.observed_at.0 - delivery.ingested_at.0) / 1_000,
                ctx.config.observed_future_max_ms
            ),
        });
    }

    // Stage 3: fast-path dedup, for instances the registry knows.
    let instance = ctx.registry.instance(&env.driver_instance);
    let key = instance.map(|i| dedup::pack(i, env.source_epoch, env.source_seq));
    if let Some(seen) = key.and_then(|k| ctx.dedup.get(k)) {
        return Ok(Evaluated::Duplicate(seen));
    }

    // Stage 4: resolve.
    let idx = ctx.registry.resolve(&env.point_id).ok_or_else(|| Refusal {
        reason: QuarantineReason::UnknownPoint,
        detail: format!("point not in registry version {}", ctx.registry.version),
    })?;
    let point = ctx.registry.point(idx);

    // Stage 5: publisher check against the assignment.
    let assigned_instance = &point.descriptor.assignment.driver_instance;
    if &*point.host != host
        || assigned_instance != subject_instance
        || env.driver_instance != subject_instance
    {
        return Err(Refusal {
            reason: QuarantineReason::WrongInstance,
            detail: format!(
                "assigned to {}/{}; published on {}/{} claiming instance {}",
                point.host, assigned_instance, host, subject_instance, env.driver_instance
            ),
        });
    }
    let key = key.expect("invariant: the assigned instance is interned, and stage 5 matched it");

    let row = build_row(ctx, delivery, idx, point, env);
    Ok(Evaluated::Row(row, key))
}

/// Stages 6–10.
fn build_row(
    ctx: &Context<'_>,
    delivery: &Delivery,
    idx: PointIdx,
    point: &CompiledPoint,
    env: Envelope<'_>,
) -> ObsRow {
    let desc = &point.descriptor;
    // A reason from the typed-gap vocabulary is shared, not copied; a driver's own text is kept.
    let reason: Option<Cow<'static, str>> = env.reason.as_deref().map(|r| {
        crate::gap::GapReason::parse(r)
            .map_or_else(|| Cow::Owned(r.to_owned()), |g| Cow::Borrowed(g.as_str()))
    });
    let decided = decide(
        point,
        ctx.config,
        Asserted {
            quality: env.quality.map(|q| q.quality()),
            reason,
            unit: env.unit.as_deref(),
            value: &env.value,
        },
    );

    // Stage 9: device clock skew.
    let skew_flagged = env
        .device_time
        .is_some_and(|d| (d.0 - env.observed_at.0).abs() > ctx.config.device_skew_max_ms * 1_000);

    // Stage 10: deadband against the projection.
    let deadband = if desc.kind == Kind::Number {
        desc.deadband
    } else {
        0.0
    };
    let changed = decided
        .value
        .as_ref()
        .is_some_and(|v| is_edge(ctx.projection.edge_value(idx), v, deadband));

    ObsRow {
        point: idx,
        point_id: point.id.clone(),
        class: desc.retention,
        ingested_at: delivery.ingested_at,
        observed_at: env.observed_at,
        device_time: env.device_time,
        value: decided.value,
        native_num: decided.native_num,
        native_text: decided.native_text,
        unit_native: decided.unit_native,
        quality: decided.quality,
        reason: decided.reason,
        detail: env.detail.map(Box::from),
        changed,
        registry_version: ctx.registry.version,
        key: ObsKey {
            driver_instance: ctx.registry.instance_name(point.instance).clone(),
            source_epoch: env.source_epoch,
            source_seq: env.source_seq,
        },
        skew_flagged,
        tag: delivery.tag,
    }
}

/// What stages 6–8 read of one observation: what its driver asserted and the native reading.
/// The pipeline builds it from an envelope; reprocess ([`crate::reprocess`]) from a stored row.
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

/// A quarantine entry for a refused delivery, keeping the native payload (truncated only when
/// oversized).
fn quarantine(delivery: Delivery, refusal: Refusal, envelope_bytes_max: usize) -> QuarantineEntry {
    let payload_bytes = u32::try_from(delivery.payload.len()).unwrap_or(u32::MAX);
    let payload = if delivery.payload.len() > envelope_bytes_max {
        delivery.payload.slice(..envelope_bytes_max)
    } else {
        delivery.payload
    };
    QuarantineEntry {
        stream_seq: delivery.stream_seq,
        ingested_at: delivery.ingested_at,
        subject: delivery.subject,
        reason: refusal.reason,
        detail: refusal.detail,
        payload,
        payload_bytes,
        tag: delivery.tag,
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
