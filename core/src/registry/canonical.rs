//! Canonical form and content addressing of descriptors (ingest spec, "The registry is
//! versioned data"; DESIGN.md §4).
//!
//! Owns: the one byte sequence a [`Descriptor`] is stored and hashed as, the descriptor hash,
//! the registry content hash, building a [`RegistrySnapshot`] for the store, and reading a
//! stored blob back. The canonical form must never drift: a change here changes every hash,
//! so the next load of unchanged content would create a new version of every point. The insta
//! snapshots in this module pin it.
//!
//! Canonical JSON: compact, object keys sorted by byte order at every level, `None` written as
//! `null` (every field always present, except the assignment's `site`, added after hashes were
//! in use and omitted when unset so a registry without sites keeps its hashes), strings escaped as `serde_json` escapes them, and
//! numbers normalised so that equal values print equally: an integer-valued float within ±2⁵³
//! prints as an integer (`1.0` and `1` both become `1`, `-0.0` becomes `0`), any other float
//! prints as the shortest decimal that reads back to the same `f64`. Non-finite floats cannot
//! be written in JSON and print as `null`; admission never lets one through.

use sha2::{Digest, Sha256};

use super::descriptor::Descriptor;
use super::{RegistrySnapshot, SnapshotEntry};

/// Prefix of the content-hash input; bump it if the canonical form ever has to change, so old
/// and new hashes can never collide by accident.
pub const CONTENT_HASH_FORMAT: &str = "sentinel-registry-content-v1";
/// A stored blob larger than this is refused unread; the largest legal descriptor (a full
/// codebook of maximal entries) is well under it.
pub const STORED_JSON_BYTES_MAX: usize = 256 * 1024;
/// Integers up to this magnitude are exact in an `f64`, so printing them without a fraction
/// loses nothing.
const EXACT_INTEGER_MAX: f64 = 9_007_199_254_740_992.0;

#[derive(Debug, thiserror::Error)]
pub enum StoredDescriptorError {
    #[error("stored descriptor is {bytes} bytes, more than the limit of {limit}")]
    TooLarge { bytes: usize, limit: usize },
    #[error("stored descriptor does not parse: {0}")]
    Json(#[from] serde_json::Error),
}

/// The canonical JSON of a descriptor.
pub fn canonical_json(descriptor: &Descriptor) -> String {
    let value = serde_json::to_value(descriptor).expect(
        "invariant: a Descriptor has only string-keyed maps, so it always serialises to a JSON value",
    );
    let mut out = String::with_capacity(512);
    write_value(&mut out, &value);
    out
}

fn write_value(out: &mut String, value: &serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_value(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // Sorted here rather than trusting the map's order: serde_json's `preserve_order`
            // feature can be switched on by any crate in the build.
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (key, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(out, key);
                out.push(':');
                write_value(out, item);
            }
            out.push('}');
        }
    }
}

fn write_string(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).expect("invariant: serialising a str to JSON cannot fail"));
}

fn write_number(out: &mut String, n: &serde_json::Number) {
    if let Some(u) = n.as_u64() {
        out.push_str(&u.to_string());
    } else if let Some(i) = n.as_i64() {
        out.push_str(&i.to_string());
    } else if let Some(f) = n.as_f64() {
        write_f64(out, f);
    } else {
        out.push_str("null");
    }
}

fn write_f64(out: &mut String, f: f64) {
    if !f.is_finite() {
        out.push_str("null");
    } else if f == f.trunc() && f.abs() < EXACT_INTEGER_MAX {
        // The cast is exact (integral, within ±2⁵³), and `-0.0` becomes `0`.
        out.push_str(&(f as i64).to_string());
    } else {
        // Rust's float formatting is the shortest representation that round-trips; `{:?}`
        // switches to an exponent for very large or small magnitudes (`1e-7`, `1e300`), which
        // JSON accepts, instead of printing hundreds of digits.
        out.push_str(&format!("{f:?}"));
    }
}

/// Hex SHA-256 of a descriptor's canonical JSON.
pub fn descriptor_hash(canonical_json: &str) -> String {
    hex::encode(Sha256::digest(canonical_json.as_bytes()))
}

/// The registry content hash over `(point_id, descriptor hash)` pairs, in sorted order.
///
/// Input: [`CONTENT_HASH_FORMAT`], then per pair the JSON-quoted point id, a space, the hash and
/// a newline. Quoting makes the encoding unambiguous whatever an id contains. The git sha is
/// deliberately not included: a new commit that changes no descriptor is not a new version.
pub fn content_hash<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut pairs: Vec<(&str, &str)> = pairs.into_iter().collect();
    pairs.sort_unstable();
    let mut hasher = Sha256::new();
    hasher.update(CONTENT_HASH_FORMAT.as_bytes());
    hasher.update(b"\n");
    let mut line = String::new();
    for (point_id, hash) in pairs {
        line.clear();
        write_string(&mut line, point_id);
        line.push(' ');
        line.push_str(hash);
        line.push('\n');
        hasher.update(line.as_bytes());
    }
    hex::encode(hasher.finalize())
}

/// What the store persists for one load of these descriptors.
pub fn snapshot(git_sha: &str, descriptors: &[Descriptor]) -> RegistrySnapshot {
    let mut entries: Vec<SnapshotEntry> = descriptors
        .iter()
        .map(|d| {
            let canonical_json = canonical_json(d);
            SnapshotEntry {
                point_id: d.id.clone(),
                hash: descriptor_hash(&canonical_json),
                canonical_json,
            }
        })
        .collect();
    entries.sort_by(|a, b| (&a.point_id, &a.hash).cmp(&(&b.point_id, &b.hash)));
    let content_hash = content_hash(entries.iter().map(|e| (e.point_id.as_str(), e.hash.as_str())));
    RegistrySnapshot {
        git_sha: git_sha.to_owned(),
        content_hash,
        entries,
    }
}

/// Reads a stored descriptor blob back. Accepts any JSON rendering of it (the store may
/// reformat, as Postgres `jsonb` does); callers that need the hash re-canonicalise.
pub fn parse_stored(json: &str) -> Result<Descriptor, StoredDescriptorError> {
    if json.len() > STORED_JSON_BYTES_MAX {
        return Err(StoredDescriptorError::TooLarge {
            bytes: json.len(),
            limit: STORED_JSON_BYTES_MAX,
        });
    }
    Ok(serde_json::from_str(json)?)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::path::Path;

    use proptest::prelude::*;

    use super::super::descriptor::*;
    use super::super::source;
    use super::*;

    fn sample_dir() -> &'static Path {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../registry"))
    }

    /// Reads the sample registry the way `io::registry_dir` does, without depending on it.
    fn sample_files() -> Vec<(String, String)> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    walk(root, &path, out);
                } else if path.extension().is_some_and(|e| e == "toml") {
                    let rel = path
                        .strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .replace('\\', "/");
                    out.push((rel, std::fs::read_to_string(&path).unwrap()));
                }
            }
        }
        let mut out = Vec::new();
        walk(sample_dir(), sample_dir(), &mut out);
        out.sort();
        out
    }

    fn sample() -> Vec<Descriptor> {
        match source::load(&sample_files()) {
            Ok(d) => d,
            Err(report) => panic!("sample registry fails its checks:\n{report}"),
        }
    }

    fn fahrenheit_point() -> Descriptor {
        Descriptor {
            id: "boiler.flow_temp".into(),
            kind: Kind::Number,
            unit_native: Some("degF".into()),
            unit: Some("degC".into()),
            conversion: Conversion {
                factor: 5.0 / 9.0,
                offset: -160.0 / 9.0,
            },
            range: Some(Range {
                min: -0.0,
                max: 120.0,
            }),
            codebook: None,
            deadband: 0.25,
            retention: RetentionClass::Measurement,
            agg_safe: true,
            assignment: Assignment {
                host: "plant-a".into(),
                driver_instance: "modbus-1".into(),
                site: None,
            },
            freshness_s: 60,
            manifest: Manifest {
                archetype: Archetype::Hardware,
                peak_rate_hz: 0.1,
                event_policy: EventPolicy::OnChange,
                row_bytes: 96,
                reporting: None,
                heartbeat_s: None,
                poll_interval_s: None,
            },
            derived: None,
            writable: None,
            device: None,
            missing_data: None,
            rules: Vec::new(),
        }
    }

    #[test]
    fn canonical_form_is_sorted_compact_and_normalised() {
        let json = canonical_json(&fahrenheit_point());
        assert_eq!(
            json,
            r#"{"agg_safe":true,"assignment":{"driver_instance":"modbus-1","host":"plant-a"},"codebook":null,"conversion":{"factor":0.5555555555555556,"offset":-17.77777777777778},"deadband":0.25,"freshness_s":60,"id":"boiler.flow_temp","kind":"number","manifest":{"archetype":"hardware","event_policy":"on_change","peak_rate_hz":0.1,"row_bytes":96},"range":{"max":120,"min":0},"retention":"measurement","unit":"degC","unit_native":"degF"}"#
        );
    }

    #[test]
    fn numbers_print_one_way() {
        let cases = [
            (0.0, "0"),
            (-0.0, "0"),
            (1.0, "1"),
            (-3.0, "-3"),
            (0.1, "0.1"),
            (1e-7, "1e-7"),
            (1e300, "1e300"),
            (9_007_199_254_740_992.0, "9007199254740992.0"),
            (f64::NAN, "null"),
        ];
        for (f, expected) in cases {
            let mut out = String::new();
            write_f64(&mut out, f);
            assert_eq!(out, expected, "{f:?}");
            if f.is_finite() {
                let back: f64 = serde_json::from_str(&out).unwrap();
                assert_eq!(back, f);
            }
        }
    }

    #[test]
    fn round_trips_through_the_store() {
        for d in sample().into_iter().chain([fahrenheit_point()]) {
            let json = canonical_json(&d);
            let back = parse_stored(&json).unwrap();
            assert_eq!(back, d);
            assert_eq!(canonical_json(&back), json);
        }
    }

    #[test]
    fn a_reformatted_blob_recanonicalises_to_the_same_bytes() {
        // Postgres jsonb reorders keys and adds spaces; the hash must survive that.
        let d = fahrenheit_point();
        let json = canonical_json(&d);
        let pretty =
            serde_json::to_string_pretty(&serde_json::from_str::<serde_json::Value>(&json).unwrap()).unwrap();
        assert_eq!(canonical_json(&parse_stored(&pretty).unwrap()), json);
    }

    #[test]
    fn parse_stored_refuses_garbage_and_oversized_blobs() {
        assert!(matches!(parse_stored("{}"), Err(StoredDescriptorError::Json(_))));
        let huge = " ".repeat(STORED_JSON_BYTES_MAX + 1);
        assert!(matches!(
            parse_stored(&huge),
            Err(StoredDescriptorError::TooLarge { .. })
        ));
    }

    #[test]
    fn unchanged_content_gives_the_same_content_hash() {
        let a = snapshot("aaaa", &sample());
        let mut reversed = sample();
        reversed.reverse();
        let b = snapshot("bbbb", &reversed);
        assert_eq!(
            a.content_hash, b.content_hash,
            "neither order nor git sha may change the content hash"
        );
        assert_eq!(a.entries, b.entries);
    }

    #[test]
    fn a_changed_descriptor_changes_exactly_its_hash_and_the_content_hash() {
        let before = sample();
        let mut after = before.clone();
        let target = after
            .iter_mut()
            .find(|d| d.kind == Kind::Number)
            .expect("sample has number points");
        target.deadband += 0.5;
        let changed_id = target.id.clone();
        let (a, b) = (snapshot("x", &before), snapshot("x", &after));
        assert_ne!(a.content_hash, b.content_hash);
        let differing: Vec<_> = a
            .entries
            .iter()
            .zip(&b.entries)
            .filter(|(x, y)| x.hash != y.hash)
            .map(|(x, _)| &x.point_id)
            .collect();
        assert_eq!(differing, [&changed_id]);
    }

    /// The property the whole log-first argument rests on (ingest spec, exit criteria):
    /// reinterpreting a native value under the stored descriptor reproduces the canonical value
    /// written at ingest, bit for bit, and a corrected newer version gives the new value
    /// without disturbing the old one.
    #[test]
    fn reinterpretation_under_stored_versions() {
        let sample = sample();
        let v1 = sample
            .iter()
            .find(|d| d.unit_native.as_deref() == Some("degF"))
            .expect("sample has a °F point");
        assert_eq!(v1.unit.as_deref(), Some("degC"));
        let native = 71.6;
        let ingested = v1.conversion.apply(native);
        assert!((ingested - 22.0).abs() < 1e-9, "{ingested}");
        let blob_v1 = canonical_json(v1);

        // Version 2 "corrects" the factor (say the device was found to report in tenths).
        let mut v2 = v1.clone();
        v2.conversion.factor /= 10.0;
        let blob_v2 = canonical_json(&v2);
        assert_ne!(descriptor_hash(&blob_v1), descriptor_hash(&blob_v2));

        let reread_v1 = parse_stored(&blob_v1).unwrap();
        let reread_v2 = parse_stored(&blob_v2).unwrap();
        assert_eq!(reread_v1.conversion.apply(native).to_bits(), ingested.to_bits());
        assert_eq!(
            reread_v2.conversion.apply(native),
            native * v2.conversion.factor + v2.conversion.offset
        );
        assert_ne!(reread_v2.conversion.apply(native), ingested);
    }

    #[test]
    fn sample_canonical_form_is_stable() {
        let snap = snapshot("unversioned", &sample());
        let lines: Vec<String> = snap.entries.iter().map(|e| e.canonical_json.clone()).collect();
        insta::assert_snapshot!("sample_canonical_json", lines.join("\n"));
    }

    /// New manifest fields are optional and left out when absent, so adding one to the format
    /// changes no existing descriptor's bytes or hash (the two snapshots above pin the sample's).
    #[test]
    fn an_absent_optional_field_is_left_out_so_old_hashes_hold() {
        let plain = fahrenheit_point();
        let json = canonical_json(&plain);
        assert!(!json.contains("derived"), "{json}");
        assert!(
            !json.contains("heartbeat_s") && !json.contains("reporting"),
            "{json}"
        );
        let mut derived = plain.clone();
        derived.manifest.reporting = Some(Reporting::OnChange);
        derived.manifest.heartbeat_s = Some(30);
        derived.derived = Some(Derived {
            op: DerivedOp::Mean,
            inputs: vec!["a".into()],
            window_s: Some(300),
        });
        let with = canonical_json(&derived);
        assert!(
            with.contains(r#""derived":{"inputs":["a"],"op":"mean","window_s":300}"#),
            "{with}"
        );
        assert!(
            with.contains(r#""heartbeat_s":30"#) && with.contains(r#""reporting":"on_change""#),
            "{with}"
        );
        assert_ne!(descriptor_hash(&with), descriptor_hash(&json));
        assert_eq!(parse_stored(&with).expect("reads back"), derived);
    }

    #[test]
    fn sample_hashes_are_stable() {
        let snap = snapshot("unversioned", &sample());
        let mut text = format!("content_hash {}\n", snap.content_hash);
        for e in &snap.entries {
            text.push_str(&format!("{} {}\n", e.hash, e.point_id));
        }
        insta::assert_snapshot!("sample_hashes", text);
    }

    fn finite() -> impl Strategy<Value = f64> {
        prop_oneof![
            any::<f64>().prop_filter("finite", |f| f.is_finite()),
            (-1_000_000i64..1_000_000).prop_map(|i| i as f64),
            Just(-0.0),
        ]
    }

    prop_compose! {
        fn descriptor()(
            id in "[a-z]{1,8}(\\.[a-z0-9_-]{1,8}){0,3}",
            kind in prop_oneof![Just(Kind::Number), Just(Kind::Bool), Just(Kind::Enum), Just(Kind::Text)],
            unit in proptest::option::of("[a-zA-Z0-9/%]{1,6}"),
            factor in finite(), offset in finite(),
            range in proptest::option::of((finite(), finite())),
            codebook in proptest::option::of(proptest::collection::btree_map("\\PC{0,6}", "\\PC{0,6}", 0..5)),
            deadband in finite(),
            freshness_s in any::<u32>(), row_bytes in any::<u32>(), peak_rate_hz in finite(),
            agg_safe in any::<bool>(),
            heartbeat_s in proptest::option::of(any::<u32>()),
            derived in proptest::option::of((
                proptest::sample::select(DerivedOp::ALL.to_vec()),
                proptest::collection::vec("[a-z]{1,6}", 0..3),
                proptest::option::of(any::<u32>()),
            )),
            writable in proptest::option::of((
                proptest::option::of(prop_oneof![
                    any::<bool>().prop_map(CommandValue::Bool),
                    finite().prop_map(CommandValue::Number),
                    "\\PC{0,6}".prop_map(CommandValue::Member),
                ]),
                any::<u32>(),
                finite(),
                proptest::option::of(any::<u32>()),
                proptest::option::of(any::<u32>()),
            )),
        ) -> Descriptor {
            Descriptor {
                id,
                kind,
                unit_native: unit.clone(),
                unit,
                conversion: Conversion { factor, offset },
                range: range.map(|(min, max)| Range { min, max }),
                codebook: codebook.map(|c: BTreeMap<String, String>| c),
                deadband,
                retention: RetentionClass::State,
                agg_safe,
                assignment: Assignment { host: "h".into(), driver_instance: "i".into(), site: None },
                freshness_s,
                manifest: Manifest {
                    archetype: Archetype::Model,
                    peak_rate_hz,
                    event_policy: EventPolicy::Never,
                    row_bytes,
                    reporting: heartbeat_s.map(|_| Reporting::OnChange),
                    heartbeat_s,
                    // Covers set and unset, a fraction included, through the round trip.
                    poll_interval_s: heartbeat_s.map(|h| f64::from(h) / 4.0),
                },
                derived: derived.map(|(op, inputs, window_s)| Derived { op, inputs, window_s }),
                writable: writable.map(|(relinquish_default, verify_s, tolerance, min_on_s, min_off_s)| Writable {
                    relinquish_default,
                    verify_s,
                    tolerance,
                    min_on_s,
                    min_off_s,
                }),
                device: None,
                missing_data: None,
                rules: Vec::new(),
            }
        }
    }

    proptest! {
        #[test]
        fn canonical_round_trip_property(d in descriptor()) {
            let json = canonical_json(&d);
            let back = parse_stored(&json).unwrap();
            prop_assert_eq!(&back, &d);
            prop_assert_eq!(canonical_json(&back), json);
        }
    }
}
