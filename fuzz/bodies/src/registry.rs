//! The `registry` target: one registry file through the whole load, then the canonical form.
//!
//! Owns: treating the input as the UTF-8 (lossy) text of `hosts/fuzz.toml`, loading it with
//! [`source::load`] (parse, every admission check, resolve), and checking for every descriptor
//! that loads that its stored blob reads back equal and re-canonicalises byte for byte. That
//! is what content addressing rests on (DESIGN.md §4): a descriptor that drifted through its
//! blob would hash differently on the next load and create a version nobody changed.

use sentinel_core::registry::{canonical, source};

/// The one file's path; under `hosts/` as a host file would be, though any section may appear.
pub const FILE: &str = "hosts/fuzz.toml";

pub fn registry(data: &[u8]) {
    let text = String::from_utf8_lossy(data).into_owned();
    let Ok(descriptors) = source::load(&[(FILE.to_owned(), text)]) else {
        return;
    };
    for descriptor in &descriptors {
        let json = canonical::canonical_json(descriptor);
        let stored = match canonical::parse_stored(&json) {
            Ok(stored) => stored,
            Err(e) => panic!(
                "the canonical JSON of {:?} does not read back: {e}\n{json}",
                descriptor.id
            ),
        };
        assert_eq!(
            &stored, descriptor,
            "descriptor {:?} changed through its canonical JSON\n{json}",
            descriptor.id
        );
        let again = canonical::canonical_json(&stored);
        assert_eq!(
            again, json,
            "descriptor {:?} re-canonicalises differently",
            descriptor.id
        );
    }
}
