//! The driver contract v1 (DESIGN.md §2): the observation envelope, subjects, transitions.
//!
//! Owns: decoding an envelope from bytes without copying its strings (stage 2's parsing half:
//! the hand-written scanner of [`scan`] first, serde_json when it is not sure), parsing
//! `obs.<host>.<driver_instance>` subjects, encoding `state.<point_id>` transitions, and the
//! owned envelope a driver serialises ([`EnvelopeOut`]).

use std::borrow::Cow;
use std::fmt;

use bytes::Bytes;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::log::{CanonicalValue, ObsKey, Quality, QuarantineReason};
use crate::time::Micros;

mod difference;
mod scan;

pub use difference::decoding_difference;

pub const ENVELOPE_VERSION: u32 = 1;
/// Limits on envelope strings; longer is `malformed`.
pub const POINT_ID_BYTES_MAX: usize = 256;
pub const DRIVER_INSTANCE_BYTES_MAX: usize = 128;
pub const UNIT_BYTES_MAX: usize = 64;
pub const REASON_BYTES_MAX: usize = 256;
pub const DETAIL_BYTES_MAX: usize = 4096;

/// The native value as the device reported it.
#[derive(Clone, Debug, PartialEq)]
pub enum NativeValue<'a> {
    Null,
    Bool(bool),
    Num(f64),
    Text(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for NativeValue<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NativeVisitor;
        impl<'de> Visitor<'de> for NativeVisitor {
            type Value = NativeValue<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a number, bool, string or null")
            }
            fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
                Ok(NativeValue::Bool(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(NativeValue::Num(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(NativeValue::Num(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(NativeValue::Num(v))
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(NativeValue::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(NativeValue::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(NativeValue::Text(Cow::Owned(v)))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(NativeValue::Null)
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(NativeValue::Null)
            }
        }
        deserializer.deserialize_any(NativeVisitor)
    }
}

/// A quality a driver may assert (DESIGN.md §2); anything else is `malformed`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssertedQuality {
    Unavailable,
    Bad,
}

impl AssertedQuality {
    pub fn quality(self) -> Quality {
        match self {
            AssertedQuality::Unavailable => Quality::Unavailable,
            AssertedQuality::Bad => Quality::Bad,
        }
    }
}

/// The envelope's fields as decoded, before any check: what serde_json builds from a payload
/// and what [`scan::scan`] builds, field for field, from a payload it is sure of.
#[derive(Deserialize)]
struct RawEnvelope<'a> {
    v: u32,
    #[serde(borrow)]
    point_id: Cow<'a, str>,
    #[serde(borrow)]
    driver_instance: Cow<'a, str>,
    source_epoch: u32,
    source_seq: u64,
    #[serde(borrow)]
    observed_at: Cow<'a, str>,
    #[serde(borrow, default, deserialize_with = "borrowed_opt_str")]
    device_time: Option<Cow<'a, str>>,
    #[serde(borrow)]
    value: NativeValue<'a>,
    #[serde(borrow, default, deserialize_with = "borrowed_opt_str")]
    unit: Option<Cow<'a, str>>,
    #[serde(default)]
    quality: Option<AssertedQuality>,
    #[serde(borrow, default, deserialize_with = "borrowed_opt_str")]
    reason: Option<Cow<'a, str>>,
    #[serde(borrow, default, deserialize_with = "raw_detail")]
    detail: Option<&'a str>,
}

/// `detail`'s JSON text as `RawValue` borrows it (`null` is `None`).
fn raw_detail<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<&'de str>, D::Error> {
    Option::<&'de RawValue>::deserialize(deserializer).map(|raw| raw.map(RawValue::get))
}

/// An optional string borrowed from the payload unless it holds escapes (issue 24 item 3: no
/// allocation per observation that can be avoided). `#[serde(borrow)]` borrows a bare
/// `Cow<str>`, but serde's impl for `Option<Cow<str>>` always builds an owned `String`: one
/// allocation for every `unit`, `device_time` and `reason` an envelope carries.
fn borrowed_opt_str<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Cow<'de, str>>, D::Error> {
    struct StrVisitor;
    impl<'de> Visitor<'de> for StrVisitor {
        type Value = Cow<'de, str>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(Cow::Borrowed(v))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v.to_owned()))
        }
        fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
            Ok(Cow::Owned(v))
        }
    }
    struct OptionVisitor;
    impl<'de> Visitor<'de> for OptionVisitor {
        type Value = Option<Cow<'de, str>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a string or null")
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
            deserializer.deserialize_str(StrVisitor).map(Some)
        }
    }
    deserializer.deserialize_option(OptionVisitor)
}

#[derive(Deserialize)]
struct VersionOnly {
    v: Option<serde_json::Value>,
}

/// A decoded, validated envelope borrowing from the payload.
#[derive(Debug)]
pub struct Envelope<'a> {
    pub point_id: Cow<'a, str>,
    pub driver_instance: Cow<'a, str>,
    pub source_epoch: u32,
    pub source_seq: u64,
    pub observed_at: Micros,
    pub device_time: Option<Micros>,
    pub value: NativeValue<'a>,
    pub unit: Option<Cow<'a, str>>,
    pub quality: Option<AssertedQuality>,
    pub reason: Option<Cow<'a, str>>,
    /// The `detail` object's JSON text.
    pub detail: Option<&'a str>,
}

/// Why an envelope was refused, with a detail that names fields, never their values' meaning.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: QuarantineReason,
    pub detail: String,
}

fn refuse(reason: QuarantineReason, detail: impl Into<String>) -> Refusal {
    Refusal {
        reason,
        detail: detail.into(),
    }
}

/// Stage 2's parsing half: decodes and checks everything that needs no registry and no clock.
/// The scanner decodes the common envelope; anything it is not sure of is serde_json's, so the
/// result is [`decode_envelope_serde`]'s for every payload.
pub fn decode_envelope(payload: &[u8]) -> Result<Envelope<'_>, Refusal> {
    match scan::scan(payload) {
        Some(raw) => check(raw),
        None => decode_envelope_serde(payload),
    }
}

/// [`decode_envelope`] through the scanner alone: `None` where the scanner is not sure. For the
/// tests and the fuzz target that hold the scanner to serde's answers and show it is taken.
pub fn decode_envelope_scanned(payload: &[u8]) -> Option<Result<Envelope<'_>, Refusal>> {
    scan::scan(payload).map(check)
}

/// [`decode_envelope`] through serde_json alone: the reference the scanner answers like, and
/// the path of every payload the scanner is not sure of (it makes every refusal's detail).
pub fn decode_envelope_serde(payload: &[u8]) -> Result<Envelope<'_>, Refusal> {
    match serde_json::from_slice(payload) {
        Ok(raw) => check(raw),
        Err(error) => Err(classify_decode_error(payload, &error)),
    }
}

/// The checks on decoded fields, the same whichever path decoded them.
fn check(raw: RawEnvelope<'_>) -> Result<Envelope<'_>, Refusal> {
    if raw.v != ENVELOPE_VERSION {
        return Err(refuse(
            QuarantineReason::UnsupportedVersion,
            format!("envelope version {} (supported: 1)", raw.v),
        ));
    }
    let bounded = [
        ("point_id", raw.point_id.len(), POINT_ID_BYTES_MAX),
        (
            "driver_instance",
            raw.driver_instance.len(),
            DRIVER_INSTANCE_BYTES_MAX,
        ),
        ("unit", raw.unit.as_ref().map_or(0, |u| u.len()), UNIT_BYTES_MAX),
        (
            "reason",
            raw.reason.as_ref().map_or(0, |r| r.len()),
            REASON_BYTES_MAX,
        ),
        ("detail", raw.detail.map_or(0, str::len), DETAIL_BYTES_MAX),
    ];
    for (field, len, max) in bounded {
        if len > max {
            return Err(refuse(
                QuarantineReason::Malformed,
                format!("field `{field}` is {len} bytes, limit {max}"),
            ));
        }
    }
    // The log's key columns are `integer` and `bigint`: a key beyond them could never commit,
    // and a batch that cannot commit would be redelivered forever.
    if raw.source_epoch > i32::MAX as u32 || raw.source_seq > i64::MAX as u64 {
        return Err(refuse(
            QuarantineReason::Malformed,
            "source_epoch or source_seq exceeds the log's integer range",
        ));
    }
    if raw.point_id.is_empty() {
        return Err(refuse(QuarantineReason::Malformed, "field `point_id` is empty"));
    }
    if raw.driver_instance.is_empty() {
        return Err(refuse(
            QuarantineReason::Malformed,
            "field `driver_instance` is empty",
        ));
    }
    if let Some(detail) = raw.detail
        && !detail.starts_with('{')
    {
        return Err(refuse(
            QuarantineReason::Malformed,
            "field `detail` is not an object",
        ));
    }
    let observed_at = Micros::parse_rfc3339(&raw.observed_at).ok_or_else(|| {
        refuse(
            QuarantineReason::BadTimestamp,
            "field `observed_at` is not RFC 3339",
        )
    })?;
    let device_time = match &raw.device_time {
        None => None,
        Some(text) => Some(Micros::parse_rfc3339(text).ok_or_else(|| {
            refuse(
                QuarantineReason::BadTimestamp,
                "field `device_time` is not RFC 3339",
            )
        })?),
    };
    Ok(Envelope {
        point_id: raw.point_id,
        driver_instance: raw.driver_instance,
        source_epoch: raw.source_epoch,
        source_seq: raw.source_seq,
        observed_at,
        device_time,
        value: raw.value,
        unit: raw.unit,
        quality: raw.quality,
        reason: raw.reason,
        detail: raw.detail,
    })
}

/// Tells a missing field and an unsupported version apart from plain malformed JSON.
fn classify_decode_error(payload: &[u8], error: &serde_json::Error) -> Refusal {
    if error.is_data() {
        // A syntactically valid object: was it another envelope version?
        if let Ok(VersionOnly { v: Some(v) }) = serde_json::from_slice::<VersionOnly>(payload)
            && v.as_u64() != Some(u64::from(ENVELOPE_VERSION))
        {
            return refuse(QuarantineReason::UnsupportedVersion, "envelope version is not 1");
        }
        let message = error.to_string();
        if message.starts_with("missing field") {
            return refuse(QuarantineReason::MissingField, message);
        }
        return refuse(QuarantineReason::Malformed, message);
    }
    refuse(
        QuarantineReason::Malformed,
        format!("not a JSON object: {}", error.classify_name()),
    )
}

trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "syntax error",
            serde_json::error::Category::Data => "data error",
            serde_json::error::Category::Eof => "truncated",
        }
    }
}

/// Parses `obs.<host>.<driver_instance>` into `(host, driver_instance)`.
pub fn parse_obs_subject(subject: &str) -> Option<(&str, &str)> {
    parse_host_instance(subject, "obs.")
}

/// `(host, driver_instance)` of `<prefix><host>.<driver_instance>`, both non-empty and the
/// instance a single token.
fn parse_host_instance<'a>(subject: &'a str, prefix: &str) -> Option<(&'a str, &'a str)> {
    let (host, instance) = subject.strip_prefix(prefix)?.split_once('.')?;
    (!host.is_empty() && !instance.is_empty() && !instance.contains('.')).then_some((host, instance))
}

pub fn obs_subject(host: &str, driver_instance: &str) -> String {
    format!("obs.{host}.{driver_instance}")
}

pub fn state_subject(point_id: &str) -> String {
    format!("state.{point_id}")
}

/// The point a driver instance reports its disk queue's drop count on, as the registry names
/// it: `<host>.<driver_instance>.queue_drops` (driver contract v1; the driver library's
/// `disk_queue`, the demo fleet and the simulator's drivers all name it through this).
pub fn queue_drops_point(host: &str, driver_instance: &str) -> String {
    format!("{host}.{driver_instance}.queue_drops")
}

/// The point a driver instance reports its disk queue's depth on (observations waiting in the
/// queue when it reports): `<host>.<driver_instance>.queue_depth`, named like
/// [`queue_drops_point`].
pub fn queue_depth_point(host: &str, driver_instance: &str) -> String {
    format!("{host}.{driver_instance}.queue_depth")
}

/// The point a driver instance reports its publish failures on (observations the stream did
/// not accept when first published, since the driver library's publisher started):
/// `<host>.<driver_instance>.publish_failures`, named like [`queue_drops_point`].
pub fn publish_failures_point(host: &str, driver_instance: &str) -> String {
    format!("{host}.{driver_instance}.publish_failures")
}

/// What [`EnvelopeOut::to_bytes`] reserves: a typical envelope's bytes.
const ENVELOPE_BYTES_TYPICAL: usize = 320;

/// The `Nats-Msg-Id` of an observation: `<driver_instance>:<source_epoch>:<source_seq>`.
pub fn msg_id(driver_instance: &str, source_epoch: u32, source_seq: u64) -> String {
    format!("{driver_instance}:{source_epoch}:{source_seq}")
}

struct ValueWire<'a>(&'a CanonicalValue);

impl Serialize for ValueWire<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            CanonicalValue::Num(v) => s.serialize_f64(*v),
            CanonicalValue::Bool(v) => s.serialize_bool(*v),
            CanonicalValue::Text(v) => s.serialize_str(v),
        }
    }
}

#[derive(Serialize)]
struct KeyWire<'a> {
    driver_instance: &'a str,
    source_epoch: u32,
    source_seq: u64,
}

#[derive(Serialize)]
struct TransitionWire<'a> {
    point_id: &'a str,
    value: Option<ValueWire<'a>>,
    quality: &'static str,
    reason: Option<&'a str>,
    #[serde(serialize_with = "rfc3339")]
    observed_at: Micros,
    #[serde(serialize_with = "rfc3339")]
    ingested_at: Micros,
    registry_version: i32,
    core_epoch: u32,
    /// The message key of the row that caused the transition...
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<KeyWire<'a>>,
    /// ...or the control event that did (a watchdog quality change carries no row).
    #[serde(skip_serializing_if = "Option::is_none")]
    control_seq: Option<i64>,
}

/// A timestamp written as RFC 3339 straight into the output (no `String` per field).
fn rfc3339<S: serde::Serializer>(at: &Micros, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(at)
}

/// The bytes a transition's fixed fields take at most (names, punctuation, two timestamps,
/// numbers at their widest, and a margin for escapes), so [`Transition::encode`] allocates
/// its output once.
const TRANSITION_FIXED_BYTES: usize = 352;

/// One transition on `state.<point_id>` (DESIGN.md §2).
pub struct Transition<'a> {
    pub point_id: &'a str,
    pub value: Option<&'a CanonicalValue>,
    pub quality: Quality,
    pub reason: Option<&'a str>,
    pub observed_at: Micros,
    pub ingested_at: Micros,
    pub registry_version: i32,
    pub core_epoch: u32,
    /// Exactly one of `key` (a row caused it) and `control_seq` (a control event did) is set,
    /// so a subscriber can always detect a duplicate publication.
    pub key: Option<&'a ObsKey>,
    pub control_seq: Option<i64>,
}

impl Transition<'_> {
    pub fn encode(&self) -> Vec<u8> {
        let wire = TransitionWire {
            point_id: self.point_id,
            value: self.value.map(ValueWire),
            quality: self.quality.as_str(),
            reason: self.reason,
            observed_at: self.observed_at,
            ingested_at: self.ingested_at,
            registry_version: self.registry_version,
            core_epoch: self.core_epoch,
            key: self.key.map(|key| KeyWire {
                driver_instance: &key.driver_instance,
                source_epoch: key.source_epoch,
                source_seq: key.source_seq,
            }),
            control_seq: self.control_seq,
        };
        debug_assert!(wire.key.is_some() != wire.control_seq.is_some());
        // Serialising plain structs of strings and numbers into a Vec cannot fail; NaN is
        // excluded because canonical numbers come from JSON numbers through finite arithmetic.
        let text_bytes = match self.value {
            Some(CanonicalValue::Text(text)) => text.len(),
            _ => 0,
        };
        let mut out = Vec::with_capacity(
            TRANSITION_FIXED_BYTES
                + self.point_id.len()
                + self.reason.map_or(0, str::len)
                + self.key.map_or(0, |key| key.driver_instance.len())
                + text_bytes,
        );
        match serde_json::to_writer(&mut out, &wire) {
            Ok(()) => out,
            Err(_) => Vec::new(),
        }
    }
}

/// The envelope as a driver writes it. Optional fields are omitted when `None`.
#[derive(Serialize, Clone, Debug, PartialEq)]
pub struct EnvelopeOut {
    pub v: u32,
    pub point_id: String,
    pub driver_instance: String,
    pub source_epoch: u32,
    pub source_seq: u64,
    pub observed_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_time: Option<String>,
    pub value: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quality: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A JSON object of context (a derived reading's provenance).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<serde_json::Value>,
}

impl EnvelopeOut {
    pub fn new(
        point_id: &str,
        driver_instance: &str,
        source_epoch: u32,
        source_seq: u64,
        observed_at: Micros,
        value: serde_json::Value,
    ) -> EnvelopeOut {
        EnvelopeOut {
            v: ENVELOPE_VERSION,
            point_id: point_id.to_owned(),
            driver_instance: driver_instance.to_owned(),
            source_epoch,
            source_seq,
            observed_at: observed_at.to_rfc3339(),
            device_time: None,
            value,
            unit: None,
            quality: None,
            reason: None,
            detail: None,
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        // Room for a typical envelope (about 250 bytes) at once: `to_vec`'s 128 grew twice.
        let mut bytes = Vec::with_capacity(ENVELOPE_BYTES_TYPICAL);
        match serde_json::to_writer(&mut bytes, self) {
            Ok(()) => bytes,
            Err(_) => Vec::new(),
        }
    }

    pub fn msg_id(&self) -> String {
        msg_id(&self.driver_instance, self.source_epoch, self.source_seq)
    }
}

/// The reason a driver gives when it refuses a command from a deposed core.
pub const STALE_EPOCH: &str = "stale_epoch";

/// Where command requests reach the core (an operator's tool, later the rules engine), below
/// the asking principal's own token: `sentinel.command.request.<principal>`. Plain NATS, not
/// the stream: a request made while no core runs is not queued for a later one. The principal
/// is the subject's, never the body's: bus permissions let each operator principal publish
/// only on its own subjects (issue 21 item 2).
pub const COMMAND_REQUEST_SUBJECT: &str = "sentinel.command.request";

/// Where a reprocess is asked of the running core, below the principal's token like command
/// requests (request/reply: the core answers on the request's reply subject; the request and
/// reply shapes are in `reprocess_request.rs`).
pub const REPROCESS_REQUEST_SUBJECT: &str = "sentinel.reprocess.request";

/// What the core subscribes to: every principal's command requests.
pub const COMMAND_REQUEST_WILDCARD: &str = "sentinel.command.request.*";
/// What the core subscribes to: every principal's reprocess requests.
pub const REPROCESS_REQUEST_WILDCARD: &str = "sentinel.reprocess.request.*";

/// A principal's name as a subject token: 1 to 64 ASCII letters, digits, `_` or `-`.
pub const PRINCIPAL_NAME_BYTES_MAX: usize = 64;

/// Whether `name` can be a principal's subject token.
pub fn is_principal_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= PRINCIPAL_NAME_BYTES_MAX
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The subject `principal` asks the core for commands on.
pub fn command_request_subject(principal: &str) -> String {
    format!("{COMMAND_REQUEST_SUBJECT}.{principal}")
}

/// The subject `principal` asks the core for a reprocess on.
pub fn reprocess_request_subject(principal: &str) -> String {
    format!("{REPROCESS_REQUEST_SUBJECT}.{principal}")
}

/// The principal a request subject names: the one token after `prefix` (one of
/// [`COMMAND_REQUEST_SUBJECT`], [`REPROCESS_REQUEST_SUBJECT`]); `None` when the subject is not
/// below `prefix` or its token is not a principal name.
pub fn request_principal<'a>(subject: &'a str, prefix: &str) -> Option<&'a str> {
    let name = subject.strip_prefix(prefix)?.strip_prefix('.')?;
    is_principal_name(name).then_some(name)
}

pub fn cmd_subject(host: &str, driver_instance: &str) -> String {
    format!("cmd.{host}.{driver_instance}")
}

/// A command on `cmd.<host>.<driver_instance>` (DESIGN.md §2). Stamped with the issuing core's
/// epoch so a driver can refuse a deposed core (core runtime spec, "Fencing the bus").
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CommandEnvelope {
    pub v: u32,
    pub command_id: String,
    pub core_epoch: u32,
    pub point_id: String,
    pub value: serde_json::Value,
    /// Who asked (Security Model); never empty.
    pub principal: String,
    /// The issuing core's start identity ([`CoreStarted::core_start`]); absent from a core
    /// older than it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_start: Option<u64>,
}

/// Everything the core sends a driver instance on `cmd.<host>.<driver_instance>`, told apart
/// by `kind`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ToDriver {
    Command(CommandEnvelope),
    /// Restart step 7: a core has taken the lock with this epoch. The driver raises its floor
    /// to it (refusing every older core from now on) and says hello.
    CoreStarted(CoreStarted),
    /// The instance's points and their poll intervals (issue 21 item 7, "the valve"): the
    /// driver applies them without restarting and acknowledges on the reply subject
    /// ([`assignment_reply_subject`]) with an [`AssignmentAck`].
    Assignment(DriverAssignment),
}

impl ToDriver {
    pub fn core_epoch(&self) -> u32 {
        match self {
            ToDriver::Command(c) => c.core_epoch,
            ToDriver::CoreStarted(s) => s.core_epoch,
            ToDriver::Assignment(a) => a.core_epoch,
        }
    }

    /// The sending core's start identity, when it sent one.
    pub fn core_start(&self) -> Option<u64> {
        match self {
            ToDriver::Command(c) => c.core_start,
            ToDriver::CoreStarted(s) => s.core_start,
            ToDriver::Assignment(a) => a.core_start,
        }
    }

    pub fn to_bytes(&self) -> Bytes {
        // Plain strings, integers and a JSON value: serialising cannot fail.
        serde_json::to_vec(self).unwrap_or_default().into()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CoreStarted {
    pub v: u32,
    pub core_epoch: u32,
    pub registry_version: i32,
    /// This core's start identity (issue 25 item 3): a random number its runtime took when
    /// the process started, at most [`CORE_START_MAX`]. An epoch can repeat after a database
    /// failover that lost the increment; two starts at one epoch still differ here, and a
    /// driver echoes the identity of the core at its floor in its hello. Absent from a core
    /// older than it (and then never compared).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_start: Option<u64>,
}

/// The largest start identity: JSON's exact integer range (2^53 − 1), so a driver written in a
/// language whose numbers are doubles echoes it unchanged. Never 0.
pub const CORE_START_MAX: u64 = (1 << 53) - 1;

/// A start identity from 64 random bits: the low 53 (within [`CORE_START_MAX`]), 0 read as 1.
pub fn core_start_from_bits(bits: u64) -> u64 {
    let token = (bits & CORE_START_MAX).max(1);
    debug_assert!((1..=CORE_START_MAX).contains(&token));
    token
}

/// What a driver instance is assigned (issue 21 item 7, "the valve"), on
/// `cmd.<host>.<driver_instance>` beside commands and `core_started`: every point of the
/// registry version assigned to the instance, each with its poll interval. A full snapshot,
/// not a difference: a point absent is no longer the instance's, and a point without an
/// interval is polled at the driver's own default. Stamped with the core's epoch, so a
/// driver refuses one from a deposed core like a command (`stale_epoch`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DriverAssignment {
    pub v: u32,
    pub core_epoch: u32,
    pub registry_version: i32,
    /// Sorted by point id; at most `registry::check::INSTANCE_POINTS_MAX`, which admission
    /// holds every driver instance to.
    pub points: Vec<AssignedPoint>,
    /// The sending core's start identity ([`CoreStarted::core_start`]): a driver refuses an
    /// assignment from another start at its floor's epoch, as it does a command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_start: Option<u64>,
}

/// One point of a [`DriverAssignment`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AssignedPoint {
    pub point_id: String,
    /// Seconds between polls; absent: the driver's own default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval_s: Option<f64>,
}

/// A driver's acknowledgement of an assignment: `applied` (its poll loop now runs at the
/// assignment's intervals) or `rejected` with a reason (`stale_epoch`: from a deposed core;
/// `malformed`: an assignment it could not read or use).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AssignmentAck {
    pub registry_version: i32,
    pub outcome: CommandOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The highest core epoch the driver had seen when it answered.
    pub highest_epoch_seen: u32,
}

/// Below the core's inbox, where drivers acknowledge assignments:
/// `<prefix>.asg.<epoch>.<seq>`, `seq` being the assignment's control event's.
pub const ASSIGNMENT_REPLY_WILDCARD: &str = "_INBOX_sentinel-core.asg.>";

/// The reply subject of the assignment recorded by the control event `seq` of the core of
/// `epoch`.
pub fn assignment_reply_subject(epoch: u32, seq: i64) -> String {
    format!("{CORE_INBOX_PREFIX}.asg.{epoch}.{seq}")
}

/// `(epoch, seq)` of an assignment reply subject.
pub fn parse_assignment_reply_subject(subject: &str) -> Option<(u32, i64)> {
    let rest = subject.strip_prefix(CORE_INBOX_PREFIX)?.strip_prefix(".asg.")?;
    parse_epoch_seq(rest)
}

fn parse_epoch_seq(rest: &str) -> Option<(u32, i64)> {
    let (epoch, seq) = rest.split_once('.')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(epoch) || !digits(seq) {
        return None;
    }
    Some((epoch.parse().ok()?, seq.parse().ok()?))
}

/// Where `sentinel registry load` announces a newly loaded registry version to a running core
/// (issue 21 item 7): a [`RegistryLoaded`] below the loading principal's token,
/// `sentinel.registry.loaded.<principal>`. Plain NATS: a core that is not running reads the
/// newest version when it starts.
pub const REGISTRY_LOADED_SUBJECT: &str = "sentinel.registry.loaded";
/// What the core subscribes to: every principal's announcements.
pub const REGISTRY_LOADED_WILDCARD: &str = "sentinel.registry.loaded.*";

/// The subject `principal` announces a loaded registry version on.
pub fn registry_loaded_subject(principal: &str) -> String {
    format!("{REGISTRY_LOADED_SUBJECT}.{principal}")
}

/// A registry version was loaded into the store. Only a hint: the core reads the version
/// from the store, never from the message.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RegistryLoaded {
    pub version: i32,
}

/// Where driver instances say hello to the core: `drv.<host>.<driver_instance>`.
pub fn driver_subject(host: &str, driver_instance: &str) -> String {
    format!("drv.{host}.{driver_instance}")
}

/// What the core subscribes to for hellos.
pub const DRIVER_HELLO_WILDCARD: &str = "drv.>";

/// `(host, driver_instance)` of a hello subject.
pub fn parse_driver_subject(subject: &str) -> Option<(&str, &str)> {
    parse_host_instance(subject, "drv.")
}

/// `(host, driver_instance)` of a command subject (`cmd.<host>.<driver_instance>`).
pub fn parse_cmd_subject(subject: &str) -> Option<(&str, &str)> {
    parse_host_instance(subject, "cmd.")
}

/// A driver instance's hello (DESIGN.md §2): on its start, and in answer to `core_started`.
/// `highest_epoch_seen` tells the core whether the instance knows its epoch; `contract` which
/// driver contract it speaks (absent: 1, a driver from before replies).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DriverHello {
    pub v: u32,
    pub driver_instance: String,
    pub source_epoch: u32,
    pub highest_epoch_seen: u32,
    #[serde(default = "contract_unversioned")]
    pub contract: u32,
    /// The start identity of the core at `highest_epoch_seen`, as that core announced it
    /// ([`CoreStarted::core_start`]); absent when the driver never heard one (a driver older
    /// than it, or a floor from before it). A core at that epoch with another identity is
    /// not the core the driver saw: its epoch repeats one lost in a failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub core_start: Option<u64>,
}

/// The driver contract this library speaks: 2 answers every command on its reply subject,
/// `applied` once the device took it or `rejected` with a reason (issue 21 item 4); 3 also
/// applies and acknowledges assignments (issue 21 item 7).
pub const DRIVER_CONTRACT: u32 = 3;
/// The first contract whose drivers apply assignments. The core sends none to an instance
/// whose hello says it speaks an older one.
pub const DRIVER_CONTRACT_ASSIGNMENTS: u32 = 3;
/// The first contract whose drivers answer every command. A driver below it cannot reply:
/// the core expects no answer from it, so its commands are never timed out or re-sent.
pub const DRIVER_CONTRACT_REPLIES: u32 = 2;

fn contract_unversioned() -> u32 {
    1
}

/// What a driver did with a command. `Accepted` is the epoch guard's verdict inside a driver
/// (it may apply the command) and the answer of a contract-1 driver, which answered before
/// applying; a contract-2 driver answers `Applied` once the device took the value, or
/// `Rejected` with a reason.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CommandOutcome {
    Accepted,
    Applied,
    Rejected,
}

impl CommandOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            CommandOutcome::Accepted => "accepted",
            CommandOutcome::Applied => "applied",
            CommandOutcome::Rejected => "rejected",
        }
    }
}

/// The reasons a driver may give for a rejection (issue 21 item 4), besides [`STALE_EPOCH`]
/// and `malformed` (a message it could not read).
pub const OUT_OF_RANGE: &str = "out_of_range";
pub const DEVICE_ERROR: &str = "device_error";
pub const UNKNOWN_POINT: &str = "unknown_point";
pub const MALFORMED_COMMAND: &str = "malformed";
/// The reason the core records for one outside the vocabulary: a driver's own words never
/// reach the log.
pub const REASON_UNRECOGNISED: &str = "unrecognised";

/// A rejection reason of the vocabulary, as the core records it.
pub fn rejection_reason(reason: Option<&str>) -> &'static str {
    match reason {
        Some(STALE_EPOCH) => STALE_EPOCH,
        Some(OUT_OF_RANGE) => OUT_OF_RANGE,
        Some(DEVICE_ERROR) => DEVICE_ERROR,
        Some(UNKNOWN_POINT) => UNKNOWN_POINT,
        Some(MALFORMED_COMMAND) => MALFORMED_COMMAND,
        _ => REASON_UNRECOGNISED,
    }
}

/// The core's reply inbox on the bus: `_INBOX_<principal>` of the core's principal
/// (`sentinel-core`), the only inbox its permissions let it subscribe to.
pub const CORE_INBOX_PREFIX: &str = "_INBOX_sentinel-core";
/// Below the core's inbox, where drivers answer commands: `<prefix>.cmd.<epoch>.<seq>`, one
/// subject per command (`seq` is its `command_issued` event's). A driver host may publish
/// only on the reply subjects of messages it received, so it cannot answer for a command
/// sent to another host.
pub const COMMAND_REPLY_WILDCARD: &str = "_INBOX_sentinel-core.cmd.>";

/// The reply subject of the command whose `command_issued` event has `seq`, sent by the core
/// of `epoch`.
pub fn command_reply_subject(epoch: u32, seq: i64) -> String {
    format!("{CORE_INBOX_PREFIX}.cmd.{epoch}.{seq}")
}

/// `(epoch, seq)` of a command reply subject.
pub fn parse_command_reply_subject(subject: &str) -> Option<(u32, i64)> {
    let rest = subject.strip_prefix(CORE_INBOX_PREFIX)?.strip_prefix(".cmd.")?;
    parse_epoch_seq(rest)
}

/// A driver's answer to a command.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CommandReply {
    pub command_id: String,
    pub outcome: CommandOutcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The highest core epoch the driver had seen when it answered.
    pub highest_epoch_seen: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &str) -> Result<Envelope<'_>, Refusal> {
        decode_envelope(text.as_bytes())
    }

    const GOOD: &str = r#"{"v":1,"point_id":"boiler.temp","driver_instance":"modbus-1","source_epoch":3,"source_seq":42,"observed_at":"2026-11-30T03:00:00Z","value":71.6,"unit":"degF","extra":"ignored"}"#;

    #[test]
    fn decodes_a_good_envelope_borrowing_strings() {
        let env = decode(GOOD).expect("good envelope");
        assert_eq!(env.point_id, "boiler.temp");
        assert!(matches!(env.point_id, Cow::Borrowed(_)));
        assert_eq!(env.source_seq, 42);
        assert_eq!(env.value, NativeValue::Num(71.6));
        assert_eq!(env.unit.as_deref(), Some("degF"));
        assert!(
            decode_envelope_scanned(GOOD.as_bytes()).is_some(),
            "the scanner decodes it, skipping the unknown key"
        );
    }

    #[test]
    fn a_transition_at_its_widest_fits_the_output_allocated_up_front() {
        let key: &'static ObsKey = Box::leak(Box::new(ObsKey {
            driver_instance: "d".repeat(DRIVER_INSTANCE_BYTES_MAX).into(),
            source_epoch: i32::MAX as u32,
            source_seq: i64::MAX as u64,
        }));
        let value = CanonicalValue::Num(-2.225_073_858_507_201_4e-308);
        let point_id = "p".repeat(POINT_ID_BYTES_MAX);
        let reason = "r".repeat(REASON_BYTES_MAX);
        let widest = |key: Option<&'static ObsKey>, control_seq: Option<i64>| Transition {
            point_id: &point_id,
            value: Some(&value),
            quality: Quality::Unavailable,
            reason: Some(&reason),
            observed_at: Micros(i64::MAX / 1_000_000 * 1_000),
            ingested_at: Micros(-62_135_596_800_000_000),
            registry_version: i32::MIN,
            core_epoch: u32::MAX,
            key,
            control_seq,
        };
        for transition in [widest(Some(key), None), widest(None, Some(i64::MIN))] {
            let encoded = transition.encode();
            let allocated = TRANSITION_FIXED_BYTES
                + point_id.len()
                + reason.len()
                + transition.key.map_or(0, |k| k.driver_instance.len());
            assert!(encoded.len() <= allocated, "{} > {allocated}", encoded.len());
            assert_eq!(
                encoded.capacity(),
                allocated,
                "the output grew past its first allocation"
            );
            let text = String::from_utf8(encoded).expect("utf-8");
            assert!(
                text.contains(&format!(
                    "\"ingested_at\":\"{}\"",
                    transition.ingested_at.to_rfc3339()
                )),
                "{text}"
            );
        }
    }

    #[test]
    fn optional_strings_borrow_unless_escaped_and_null_is_absent() {
        let env = decode(
            r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","device_time":"2026-11-30T03:00:01Z","value":1,"unit":"degF","quality":"bad","reason":"comm_loss"}"#,
        )
        .expect("good envelope");
        assert!(matches!(env.unit, Some(Cow::Borrowed("degF"))), "{:?}", env.unit);
        assert!(
            matches!(env.reason, Some(Cow::Borrowed("comm_loss"))),
            "{:?}",
            env.reason
        );
        assert_eq!(
            env.device_time,
            Some(Micros::parse_rfc3339("2026-11-30T03:00:01Z").expect("ts"))
        );
        let escaped = decode(
            r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":1,"unit":"deg\u0046","reason":null}"#,
        )
        .expect("good envelope");
        assert!(
            matches!(escaped.unit, Some(Cow::Owned(ref u)) if u == "degF"),
            "{:?}",
            escaped.unit
        );
        assert_eq!(escaped.reason, None);
        let wrong = decode(
            r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":1,"unit":5}"#,
        )
        .expect_err("a number is not a unit");
        assert_eq!(wrong.reason, QuarantineReason::Malformed, "{}", wrong.detail);
    }

    #[test]
    fn classifies_refusals() {
        let cases = [
            ("not json", QuarantineReason::Malformed),
            ("[1,2]", QuarantineReason::Malformed),
            (r#"{"v":1}"#, QuarantineReason::MissingField),
            (r#"{"v":2,"anything":true}"#, QuarantineReason::UnsupportedVersion),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":-1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":1}"#,
                QuarantineReason::Malformed,
            ),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"noon","value":1}"#,
                QuarantineReason::BadTimestamp,
            ),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","device_time":"x","value":1}"#,
                QuarantineReason::BadTimestamp,
            ),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":{"a":1}}"#,
                QuarantineReason::Malformed,
            ),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":1,"quality":"live"}"#,
                QuarantineReason::Malformed,
            ),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":4294967295,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":1}"#,
                QuarantineReason::Malformed,
            ),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":18446744073709551615,"observed_at":"2026-11-30T03:00:00Z","value":1}"#,
                QuarantineReason::Malformed,
            ),
            (
                r#"{"v":1,"point_id":"","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":1}"#,
                QuarantineReason::Malformed,
            ),
            (
                r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":1,"detail":[1]}"#,
                QuarantineReason::Malformed,
            ),
        ];
        for (text, reason) in cases {
            let refusal = decode(text).expect_err(text);
            assert_eq!(refusal.reason, reason, "{text}: {}", refusal.detail);
        }
    }

    #[test]
    fn missing_value_is_a_missing_field_but_null_is_a_value() {
        let missing = r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z"}"#;
        assert_eq!(
            decode(missing).expect_err("no value").reason,
            QuarantineReason::MissingField
        );
        let null = r#"{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":null,"quality":"unavailable"}"#;
        let env = decode(null).expect("null value");
        assert_eq!(env.value, NativeValue::Null);
        assert_eq!(env.quality, Some(AssertedQuality::Unavailable));
    }

    #[test]
    fn subjects() {
        assert_eq!(
            parse_obs_subject("obs.plant-a.modbus-1"),
            Some(("plant-a", "modbus-1"))
        );
        assert_eq!(parse_obs_subject("obs.plant-a"), None);
        assert_eq!(parse_obs_subject("obs.a.b.c"), None);
        assert_eq!(parse_obs_subject("state.a.b"), None);
        assert_eq!(parse_obs_subject("obs..b"), None);
        assert_eq!(
            parse_driver_subject("drv.plant-a.modbus-1"),
            Some(("plant-a", "modbus-1"))
        );
        assert_eq!(
            parse_cmd_subject("cmd.plant-a.modbus-1"),
            Some(("plant-a", "modbus-1"))
        );
        assert_eq!(parse_cmd_subject("cmd.plant-a.modbus-1.x"), None);
    }

    #[test]
    fn envelope_out_round_trips_through_decode() {
        let mut out = EnvelopeOut::new("p.q", "d1", 2, 9, Micros(1_000_000), serde_json::json!(true));
        out.device_time = Some(Micros(2_000_000).to_rfc3339());
        let bytes = out.to_bytes();
        let env = decode_envelope(&bytes).expect("round trip");
        assert_eq!(env.point_id, "p.q");
        assert_eq!(env.value, NativeValue::Bool(true));
        assert_eq!(env.device_time, Some(Micros(2_000_000)));
        assert_eq!(out.msg_id(), "d1:2:9");
    }

    #[test]
    fn an_assignment_travels_beside_commands_and_is_acknowledged_below_the_cores_inbox() {
        let message = ToDriver::Assignment(DriverAssignment {
            v: 1,
            core_epoch: 4,
            registry_version: 7,
            points: vec![
                AssignedPoint {
                    point_id: "boiler.temp".into(),
                    poll_interval_s: Some(2.5),
                },
                AssignedPoint {
                    point_id: "boiler.flow".into(),
                    poll_interval_s: None,
                },
            ],
            core_start: None,
        });
        let bytes = message.to_bytes();
        assert_eq!(
            std::str::from_utf8(&bytes).unwrap(),
            r#"{"kind":"assignment","v":1,"core_epoch":4,"registry_version":7,"points":[{"point_id":"boiler.temp","poll_interval_s":2.5},{"point_id":"boiler.flow"}]}"#
        );
        assert_eq!(serde_json::from_slice::<ToDriver>(&bytes).unwrap(), message);
        assert_eq!(message.core_epoch(), 4);
        let subject = assignment_reply_subject(4, 12);
        assert_eq!(subject, "_INBOX_sentinel-core.asg.4.12");
        assert_eq!(parse_assignment_reply_subject(&subject), Some((4, 12)));
        assert_eq!(parse_command_reply_subject(&subject), None);
        assert_eq!(
            parse_assignment_reply_subject(&command_reply_subject(4, 12)),
            None
        );
        assert_eq!(parse_assignment_reply_subject("_INBOX_sentinel-core.asg.4"), None);
        assert_eq!(
            parse_assignment_reply_subject("_INBOX_sentinel-core.asg.x.1"),
            None
        );
        assert_eq!(
            registry_loaded_subject("operator"),
            "sentinel.registry.loaded.operator"
        );
    }

    /// Issue 25 item 3: the start identity rides on the announcement, the command and the
    /// hello, and is absent from the wire (and `None` decoded) where a side does not know it,
    /// so messages of either age still decode.
    #[test]
    fn the_start_identity_is_on_the_wire_only_when_known() {
        let started = ToDriver::CoreStarted(CoreStarted {
            v: 1,
            core_epoch: 4,
            registry_version: 2,
            core_start: Some(CORE_START_MAX),
        });
        assert_eq!(
            &started.to_bytes()[..],
            br#"{"kind":"core_started","v":1,"core_epoch":4,"registry_version":2,"core_start":9007199254740991}"#
        );
        let old: ToDriver =
            serde_json::from_slice(br#"{"kind":"core_started","v":1,"core_epoch":4,"registry_version":2}"#)
                .expect("an announcement from before identities");
        assert_eq!(old.core_start(), None);
        let command = ToDriver::Command(CommandEnvelope {
            v: 1,
            command_id: "c-1".into(),
            core_epoch: 4,
            point_id: "p".into(),
            value: serde_json::json!(1),
            principal: "ana".into(),
            core_start: None,
        });
        assert_eq!(
            &command.to_bytes()[..],
            br#"{"kind":"command","v":1,"command_id":"c-1","core_epoch":4,"point_id":"p","value":1,"principal":"ana"}"#
        );
        let hello: DriverHello = serde_json::from_slice(
            br#"{"v":1,"driver_instance":"d","source_epoch":1,"highest_epoch_seen":4,"contract":2,"core_start":77}"#,
        )
        .expect("hello");
        assert_eq!(hello.core_start, Some(77));
        assert_eq!(
            serde_json::to_string(&DriverHello {
                core_start: None,
                ..hello
            })
            .expect("encode"),
            r#"{"v":1,"driver_instance":"d","source_epoch":1,"highest_epoch_seen":4,"contract":2}"#
        );
    }

    #[test]
    fn a_start_identity_is_within_jsons_exact_integers_and_never_zero() {
        assert_eq!(core_start_from_bits(0), 1);
        assert_eq!(core_start_from_bits(u64::MAX), CORE_START_MAX);
        assert_eq!(core_start_from_bits(1 << 53), 1, "the high bits are dropped");
        assert_eq!(core_start_from_bits(12_345), 12_345);
    }
}
