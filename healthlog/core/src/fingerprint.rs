//! The store's fingerprint (spec: "Отпечаток витрины…", points part): the one oracle that a
//! rebuild converged. Fed rows in an order the query defines; each row starts with a constant
//! section tag, and every field goes in with its own length, so (a, b/c) and (a/b, c) differ.
//!
//! Object rows carry coordinates (metric, layer, hour), units and the content hash, never
//! values. Provenance (the creating delivery) and the sealed flag are not content: a rebuild
//! from a shuffled journal numbers deliveries differently and starts unsealed.

use sha2::{Digest as _, Sha256};

/// The section tag of hourly-object rows.
pub const SECTION_OBJECTS: &[u8] = b"bucket";

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

    #[test]
    fn field_boundaries_matter() {
        let mut a = Fingerprint::new();
        a.object("ab", "c", 0, "u", b"h");
        let mut b = Fingerprint::new();
        b.object("a", "bc", 0, "u", b"h");
        assert_ne!(a.finish(), b.finish());
        assert_ne!(Fingerprint::new().finish(), {
            let mut c = Fingerprint::new();
            c.object("", "", 0, "", b"");
            c.finish()
        });
    }
}
