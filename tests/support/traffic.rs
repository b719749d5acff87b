//! Test traffic with a known outcome per message: good readings for every point of the sample
//! registry, plus every bad-input kind the ingest path must handle. The expected tallies are
//! computed while generating, not by running the core, so the end-to-end tests compare the real
//! system against an independent oracle.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::Bytes;
use sentinel_core::registry::{Kind, Registry, RetentionClass};
use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{Micros, QuarantineReason};

#[derive(Clone, Debug)]
pub struct Message {
    pub subject: String,
    pub msg_id: String,
    pub payload: Bytes,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Expected {
    /// Rows per class, indexed by `RetentionClass::index`.
    pub rows: [u64; 3],
    pub rows_bad: u64,
    pub rows_unavailable: u64,
    pub quarantine: BTreeMap<&'static str, u64>,
    /// Publisher retries the stream's duplicate window drops.
    pub dropped_by_stream: u64,
    /// Points that receive at least one row.
    pub points_with_rows: u64,
}

impl Expected {
    pub fn rows_total(&self) -> u64 {
        self.rows.iter().sum()
    }
    pub fn quarantine_total(&self) -> u64 {
        self.quarantine.values().sum()
    }
    /// Everything the stream accepted: each becomes a row or a quarantine entry.
    pub fn accepted(&self) -> u64 {
        self.rows_total() + self.quarantine_total()
    }
}

pub struct Traffic {
    pub messages: Vec<Message>,
    pub expected: Expected,
}

/// The repository's sample registry, as shipped (derived points included).
pub fn shipped_registry_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../registry"))
}

/// The sample registry without its derived points (`hosts/derived.toml`), copied once per
/// test process into a scratch folder.
///
/// The exact-count tests compare what the stream accepted with what the log holds; a derived
/// point adds readings of the core's own to both, as many as its inputs' commits trigger, which
/// no traffic generator can predict. Derived readings are checked against the fold of their
/// committed inputs by the simulator (invariant 17) and by `core/tests/derived.rs`, and in real
/// processes against an uninterrupted replay of the log by `tests/e2e.rs`
/// (`sigkill_mid_stream_then_restart_gives_the_derived_rows_of_an_uninterrupted_run`).
pub fn sample_registry_dir() -> PathBuf {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let source = shipped_registry_dir();
        let target =
            std::env::temp_dir().join(format!("sentinel-registry-no-derived-{}", std::process::id()));
        copy_registry(&source, &target);
        target
    })
    .clone()
}

fn copy_registry(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).expect("create the registry copy");
    for entry in std::fs::read_dir(from).expect("read the sample registry") {
        let entry = entry.expect("registry entry");
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_registry(&path, &target);
        } else if path.extension().is_some_and(|e| e == "toml") && entry.file_name() != "derived.toml" {
            std::fs::copy(&path, &target).expect("copy a registry file");
        }
    }
}

/// The sample registry compiled directly from the folder (version 0; the store assigns real
/// versions).
pub fn sample_registry() -> Registry {
    let descriptors =
        sentinel_runtime::registry_dir::check_dir(&sample_registry_dir()).expect("sample registry is valid");
    Registry::compile(0, "test".into(), "test".into(), descriptors).expect("sample registry compiles")
}

fn native_mid(point: &sentinel_core::registry::CompiledPoint) -> f64 {
    let d = &point.descriptor;
    let canonical = d.range.map_or(1.0, |r| (r.min + r.max) / 2.0);
    (canonical - d.conversion.offset) / d.conversion.factor
}

/// `count` messages, every 50 of which hold one of each bad-input kind, stamped around `now`.
/// Keys are `(driver_instance, source_epoch, source_seq = i + 1)`, unique per message.
pub fn generate(registry: &Registry, count: usize, source_epoch: u32, now: Micros) -> Traffic {
    let points: Vec<_> = registry.points().map(|(_, p)| p).collect();
    let numeric = points
        .iter()
        .find(|p| {
            p.descriptor.kind == Kind::Number && p.descriptor.range.is_some() && p.unit_native.is_some()
        })
        .expect("a ranged numeric point with a unit");
    let enumerated = points
        .iter()
        .find(|p| p.descriptor.kind == Kind::Enum)
        .expect("an enum point");
    let boolean = points
        .iter()
        .find(|p| p.descriptor.kind == Kind::Bool)
        .expect("a bool point");
    let other_host = points
        .iter()
        .find(|p| p.host != numeric.host)
        .expect("a point on another host");
    let mut expected = Expected::default();
    let mut touched = std::collections::BTreeSet::new();
    let mut messages: Vec<Message> = Vec::with_capacity(count);
    let mut good_cursor = 0usize;
    let observed = now.add_ms(-1_000);

    let envelope = |p: &sentinel_core::registry::CompiledPoint, seq: u64, value: serde_json::Value| {
        let mut e = EnvelopeOut::new(
            &p.id,
            &p.descriptor.assignment.driver_instance,
            source_epoch,
            seq,
            observed,
            value,
        );
        e.unit = p.unit_native.as_deref().map(str::to_owned);
        e
    };
    let subject_of = |p: &sentinel_core::registry::CompiledPoint| {
        format!("obs.{}.{}", p.host, p.descriptor.assignment.driver_instance)
    };

    for i in 0..count {
        let seq = i as u64 + 1;
        let mut quarantine =
            |reason: QuarantineReason| *expected.quarantine.entry(reason.as_str()).or_default() += 1;
        let mut row = |p: &sentinel_core::registry::CompiledPoint, expected: &mut Expected| {
            expected.rows[p.descriptor.retention.index()] += 1;
            touched.insert(p.id.to_string());
        };
        let message = match i % 50 {
            0 => {
                quarantine(QuarantineReason::Malformed);
                raw(
                    subject_of(numeric),
                    seq,
                    source_epoch,
                    "{\"v\":1,\"point_id\":".into(),
                )
            }
            1 => {
                quarantine(QuarantineReason::MissingField);
                raw(
                    subject_of(numeric),
                    seq,
                    source_epoch,
                    format!("{{\"v\":1,\"point_id\":\"{}\"}}", numeric.id),
                )
            }
            2 => {
                quarantine(QuarantineReason::UnknownPoint);
                let mut e = envelope(numeric, seq, serde_json::json!(native_mid(numeric)));
                e.point_id = "no.such.point".into();
                built(subject_of(numeric), e)
            }
            3 => {
                quarantine(QuarantineReason::WrongInstance);
                let mut e = envelope(numeric, seq, serde_json::json!(native_mid(numeric)));
                e.driver_instance = other_host.descriptor.assignment.driver_instance.clone();
                built(subject_of(other_host), e)
            }
            4 => {
                quarantine(QuarantineReason::BadSubject);
                built(
                    format!("obs.{}", numeric.host),
                    envelope(numeric, seq, serde_json::json!(native_mid(numeric))),
                )
            }
            5 => {
                quarantine(QuarantineReason::FutureTimestamp);
                let mut e = envelope(numeric, seq, serde_json::json!(native_mid(numeric)));
                e.observed_at = now.add_ms(3_600_000).to_rfc3339();
                built(subject_of(numeric), e)
            }
            6 => {
                quarantine(QuarantineReason::BadTimestamp);
                let mut e = envelope(numeric, seq, serde_json::json!(native_mid(numeric)));
                e.observed_at = "yesterday at noon".into();
                built(subject_of(numeric), e)
            }
            7 => {
                quarantine(QuarantineReason::Oversized);
                let mut e = envelope(numeric, seq, serde_json::json!(native_mid(numeric)));
                e.reason = Some("x".repeat(20_000));
                built(subject_of(numeric), e)
            }
            8 => {
                quarantine(QuarantineReason::UnsupportedVersion);
                let mut e = envelope(numeric, seq, serde_json::json!(native_mid(numeric)));
                e.v = 2;
                built(subject_of(numeric), e)
            }
            9 => {
                row(numeric, &mut expected);
                expected.rows_bad += 1;
                let range = numeric.descriptor.range.expect("ranged");
                let canonical = range.max + (range.max - range.min).abs() + 1.0;
                let native =
                    (canonical - numeric.descriptor.conversion.offset) / numeric.descriptor.conversion.factor;
                built(
                    subject_of(numeric),
                    envelope(numeric, seq, serde_json::json!(native)),
                )
            }
            10 => {
                row(numeric, &mut expected);
                expected.rows_bad += 1;
                let mut e = envelope(numeric, seq, serde_json::json!(native_mid(numeric)));
                e.unit = Some("furlongs".into());
                built(subject_of(numeric), e)
            }
            11 => {
                row(enumerated, &mut expected);
                expected.rows_bad += 1;
                built(
                    subject_of(enumerated),
                    envelope(enumerated, seq, serde_json::json!("not-a-code")),
                )
            }
            12 => {
                // A publisher retry of the previous message: same id, dropped by the stream.
                expected.dropped_by_stream += 1;
                let previous = messages.last().expect("not the first message").clone();
                messages.push(previous);
                continue;
            }
            13 => {
                row(boolean, &mut expected);
                expected.rows_bad += 1;
                built(
                    subject_of(boolean),
                    envelope(boolean, seq, serde_json::json!("yes")),
                )
            }
            14 => {
                row(numeric, &mut expected);
                expected.rows_unavailable += 1;
                let e = sentinel_driver::gap_observation(
                    &numeric.id,
                    &numeric.descriptor.assignment.driver_instance,
                    source_epoch,
                    seq,
                    observed,
                    sentinel_core::GapReason::SourceDown,
                );
                built(subject_of(numeric), e)
            }
            _ => {
                let p = points[good_cursor % points.len()];
                good_cursor += 1;
                row(p, &mut expected);
                let value = match p.descriptor.kind {
                    Kind::Number => serde_json::json!(native_mid(p) + (i % 7) as f64 * 0.01),
                    Kind::Bool => serde_json::json!(i % 2 == 0),
                    Kind::Enum => {
                        let code = p.codebook.keys().next().expect("codebook has codes").to_string();
                        code.parse::<i64>()
                            .map_or_else(|_| serde_json::json!(code), |n| serde_json::json!(n))
                    }
                    Kind::Text => serde_json::json!(format!("status {}", i % 3)),
                };
                built(subject_of(p), envelope(p, seq, value))
            }
        };
        messages.push(message);
    }
    expected.points_with_rows = touched.len() as u64;
    let _ = RetentionClass::ALL;
    Traffic { messages, expected }
}

fn built(subject: String, e: EnvelopeOut) -> Message {
    Message {
        subject,
        msg_id: e.msg_id(),
        payload: Bytes::from(e.to_bytes()),
    }
}

fn raw(subject: String, seq: u64, source_epoch: u32, payload: String) -> Message {
    Message {
        subject,
        msg_id: format!("raw:{source_epoch}:{seq}"),
        payload: Bytes::from(payload),
    }
}

/// The rules fixture (`tests/fixtures/registry-rules`) without its derived points, with
/// `rules` as its `rules.toml`, copied into a scratch folder named after `name` (one per test
/// process): a rule set tuned to a test's data, over the fixture's points and their
/// missing-data policies. Derived points are left out for the reason
/// [`sample_registry_dir`] gives.
pub fn rules_registry_dir(name: &str, rules: &str) -> PathBuf {
    let source = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/registry-rules"));
    let target = std::env::temp_dir().join(format!("sentinel-registry-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&target);
    copy_registry(&source, &target);
    std::fs::write(target.join("rules.toml"), rules).expect("write rules.toml");
    target
}

/// The registry folder `dir` compiled directly (version 0; the store assigns real versions).
pub fn compile_registry(dir: &std::path::Path) -> Registry {
    let descriptors = sentinel_runtime::registry_dir::check_dir(dir).expect("the registry is valid");
    Registry::compile(0, "test".into(), "test".into(), descriptors).expect("the registry compiles")
}
