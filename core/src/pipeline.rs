//! Stages 2–10 for one delivery (ingest spec, "Ingest pipeline"). Pure: the registry, the dedup
//! set and the projection are read, never written; the caller (the core's ingest part) applies
//! the outcome.
//!
//! Owns: turning a delivery into exactly one of a row, a quarantine entry or a recognised
//! duplicate. Stages 6–8 are [`crate::decide`], which reprocess shares; they are re-exported
//! here, where callers have always found them. Failures at stages 2, 4 and 5 are quarantined with the native payload; failures
//! at stages 6–8 still write a row, with quality `bad`, a reason, and the offending value in
//! `native_text`.

use std::borrow::Cow;

use crate::config::Config;
pub use crate::decide::{Asserted, Decided, decide, reason};
use crate::dedup::{self, DedupSet, Seen};
use crate::delivery::{Delivery, DeliveryTag};
use crate::log::{ObsKey, ObsRow, QuarantineEntry, QuarantineReason};
use crate::projection::{Projection, is_edge};
use crate::registry::{CompiledPoint, Kind, PointIdx, Registry};
use crate::wire::{self, Envelope, Refusal};

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
        subject: delivery.subject.to_string(),
        reason: refusal.reason,
        detail: refusal.detail,
        payload,
        payload_bytes,
        tag: delivery.tag,
    }
}
