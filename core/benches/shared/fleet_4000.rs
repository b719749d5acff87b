//! The benchmarks' 4,000-point registry mix (core runtime spec, "Scale targets": ~4,000
//! points): 70% numbers (a fifth of them reported in °F), 10% bool, 10% enum, 5% text, 5%
//! diagnostics, over 16 hosts with two driver instances each.
//!
//! One file, included by `core/benches/stages.rs`, `core/benches/arbitration.rs` and
//! `tests/benches/cold_start.rs` with `#[path]`, so they measure the same registry (the last
//! two with the same writable points, [`make_writable`]). It sits in a subfolder so cargo
//! does not take it for a benchmark of its own.

use std::collections::BTreeMap;

use sentinel_core::registry::{CommandValue, Conversion, Descriptor, Kind, Range, RetentionClass, Writable};

pub const POINTS: usize = 4_000;
pub const HOSTS: usize = 16;

/// The descriptors, point `i` on host `i % HOSTS`.
pub fn descriptors() -> Vec<Descriptor> {
    (0..POINTS)
        .map(|i| {
            let host = format!("host-{:02}", i % HOSTS);
            let instance = format!("drv-{:02}-{}", i % HOSTS, i % 2);
            let (kind, class) = match i % 20 {
                0..=13 => (Kind::Number, RetentionClass::Measurement),
                14 | 15 => (Kind::Bool, RetentionClass::State),
                16 | 17 => (Kind::Enum, RetentionClass::State),
                18 => (Kind::Text, RetentionClass::Diagnostic),
                _ => (Kind::Number, RetentionClass::Diagnostic),
            };
            let fahrenheit = kind == Kind::Number && i % 5 == 0;
            Descriptor {
                id: format!("site.area{}.dev{}.p{}", i % 7, i / 10, i),
                unit_native: (kind == Kind::Number)
                    .then(|| if fahrenheit { "degF" } else { "degC" }.to_owned()),
                unit: (kind == Kind::Number).then(|| "degC".to_owned()),
                conversion: if fahrenheit {
                    Conversion {
                        factor: 5.0 / 9.0,
                        offset: -160.0 / 9.0,
                    }
                } else {
                    Conversion::IDENTITY
                },
                range: (kind == Kind::Number).then_some(Range {
                    min: -40.0,
                    max: 150.0,
                }),
                codebook: (kind == Kind::Enum).then(|| {
                    BTreeMap::from([
                        ("0".into(), "off".into()),
                        ("1".into(), "on".into()),
                        ("2".into(), "fault".into()),
                    ])
                }),
                deadband: 0.2,
                agg_safe: kind == Kind::Number,
                ..Descriptor::new("", kind, class, &host, &instance)
            }
        })
        .collect()
}

/// Makes the first `count` numbers and bools of `descriptors` (skipping diagnostics) writable
/// with `verify_s`: every bool with a relinquish default of `false`; the numbers with one of 21,
/// except every fifth writable point, which holds its last value. Of the fleet's first points
/// that is, for 1,000: 876 numbers (175 holding) and 124 bools.
#[allow(dead_code)] // `stages.rs` includes this file and makes nothing writable
pub fn make_writable(descriptors: &mut [Descriptor], count: usize, verify_s: u32) {
    let mut made = 0;
    for (i, d) in descriptors.iter_mut().enumerate() {
        if made == count {
            break;
        }
        let relinquish_default = match (d.kind, i % 20) {
            (Kind::Number, 0..=13) if made % 5 == 4 => None,
            (Kind::Number, 0..=13) => Some(CommandValue::Number(21.0)),
            (Kind::Bool, _) => Some(CommandValue::Bool(false)),
            _ => continue,
        };
        d.writable = Some(Writable {
            relinquish_default,
            verify_s,
            tolerance: if d.kind == Kind::Number { 0.5 } else { 0.0 },
            min_on_s: None,
            min_off_s: None,
        });
        made += 1;
    }
    assert_eq!(made, count, "enough numbers and bools to make writable");
}
