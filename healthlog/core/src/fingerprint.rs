//! The store's fingerprint (spec: "Отпечаток витрины покрывает все её сущности"): the one
//! oracle that a rebuild converged, over every section — hourly objects, workouts, records. Fed rows in an order the query defines; each row starts with a constant
//! section tag, and every field goes in with its own length, so (a, b/c) and (a/b, c) differ.
//!
//! Object rows carry coordinates (metric, layer, hour), units and the content hash (which covers
//! every kept candidate); entity rows their key and content hash; never values. The header
//! columns of an entity (name, end, offset, duration) are derived from its content and are not
//! in the fingerprint: "fingerprints equal" says nothing about them. Provenance (the creating delivery) and the sealed flag are not content: a rebuild
//! from a shuffled journal numbers deliveries differently and starts unsealed.

use sha2::{Digest as _, Sha256};

/// The section tag of hourly-object rows.
pub const SECTION_OBJECTS: &[u8] = b"bucket";
/// The section tag of workout rows.
pub const SECTION_WORKOUTS: &[u8] = b"workout";
/// The section tag of record rows.
pub const SECTION_RECORDS: &[u8] = b"record";

/// A streaming fingerprint.
#[derive(Debug, Clone, Default)]
pub struct Fingerprint {
    hasher: Sha256,
    rows: u64,
}

impl Fingerprint {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds one hourly object.
    pub fn object(&mut self, metric: &str, layer: &str, hour_us: i64, units: &str, hash: &[u8]) {
        self.field(SECTION_OBJECTS);
        self.field(metric.as_bytes());
        self.field(layer.as_bytes());
        self.field(&hour_us.to_le_bytes());
        self.field(units.as_bytes());
        self.field(hash);
        self.rows += 1;
    }

    /// Adds one workout: its id and content hash (never its content or header columns).
    pub fn workout(&mut self, id: &str, hash: &[u8]) {
        self.field(SECTION_WORKOUTS);
        self.field(id.as_bytes());
        self.field(hash);
        self.rows += 1;
    }

    /// Adds one record: its section and id as two fields, each with its own length, and its
    /// content hash.
    pub fn record(&mut self, kind: &str, id: &str, hash: &[u8]) {
        self.field(SECTION_RECORDS);
        self.field(kind.as_bytes());
        self.field(id.as_bytes());
        self.field(hash);
        self.rows += 1;
    }

    fn field(&mut self, bytes: &[u8]) {
        self.hasher.update((bytes.len() as u64).to_le_bytes());
        self.hasher.update(bytes);
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// The hex digest, with the row count folded in.
    pub fn finish(mut self) -> String {
        let rows = self.rows;
        self.field(&rows.to_le_bytes());
        hex::encode(self.hasher.finalize())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// «Составной ключ не даёт коллизии отпечатка»: two vitrines that differ only in where the
    /// boundary between a record's section and its id lies. Through the store a section is one
    /// of six fixed names, so the two are built here, row by row, as the store feeds them.
    #[test]
    fn a_compound_key_gives_no_fingerprint_collision() {
        let mut c = Fingerprint::new();
        c.record("stateOfMind", "ab", b"h");
        let mut d = Fingerprint::new();
        d.record("stateOfMinda", "b", b"h");
        assert_ne!(c.finish(), d.finish());
    }

    #[test]
    fn field_boundaries_matter() {
        let mut a = Fingerprint::new();
        a.object("ab", "c", 0, "u", b"h");
        let mut b = Fingerprint::new();
        b.object("a", "bc", 0, "u", b"h");
        assert_ne!(a.finish(), b.finish());
        let mut w = Fingerprint::new();
        w.workout("W", b"h");
        let mut r = Fingerprint::new();
        r.record("", "W", b"h");
        assert_ne!(
            w.finish(),
            r.finish(),
            "a section tag tells a workout row from a record row"
        );
        assert_ne!(Fingerprint::new().finish(), {
            let mut c = Fingerprint::new();
            c.object("", "", 0, "", b"");
            c.finish()
        });
    }
}
