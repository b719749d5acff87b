//! The benchmarks' 4,000-point registry mix (core runtime spec, "Scale targets": ~4,000
//! points): 70% numbers (a fifth of them reported in °F), 10% bool, 10% enum, 5% text, 5%
//! diagnostics, over 16 hosts with two driver instances each.
//!
//! One file, included by `core/benches/stages.rs` and `tests/benches/cold_start.rs` with
//! `#[path]`, so both benchmarks measure the same registry. It sits in a subfolder so cargo
//! does not take it for a benchmark of its own.

use std::collections::BTreeMap;

use sentinel_core::registry::{Conversion, Descriptor, Kind, Range, RetentionClass};

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
