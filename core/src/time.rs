//! The core's one time type: UTC microseconds since the Unix epoch (PostgreSQL's precision).
//!
//! Owns: parsing RFC 3339 text from envelopes and formatting it for transitions. Adapters
//! truncate the bus's nanosecond timestamps with [`Micros::from_unix_nanos`], deterministically,
//! so that a redelivered message maps to the same `ingested_at` (ingest spec, "Where
//! ingested_at comes from").

use std::fmt;

/// UTC microseconds since 1970-01-01T00:00:00Z.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Micros(pub i64);

/// Microseconds in one millisecond; the unit suffix convention is `_ms`, `_us`.
pub const US_PER_MS: i64 = 1_000;
pub const US_PER_S: i64 = 1_000_000;
pub const US_PER_DAY: i64 = 86_400 * US_PER_S;

impl Micros {
    pub const ZERO: Micros = Micros(0);

    /// Truncates (floor) nanoseconds to microseconds. Floor rather than round so the mapping is
    /// monotonic and identical on every redelivery.
    pub fn from_unix_nanos(nanos: i128) -> Micros {
        Micros(nanos.div_euclid(1_000) as i64)
    }

    pub fn add_ms(self, ms: i64) -> Micros {
        Micros(self.0.saturating_add(ms.saturating_mul(US_PER_MS)))
    }

    pub fn saturating_sub(self, other: Micros) -> i64 {
        self.0.saturating_sub(other.0)
    }

    /// Parses RFC 3339 (`2026-11-30T03:00:00.123456Z`, any offset). Sub-microsecond digits are
    /// truncated. Returns `None` for anything unparseable or out of range.
    pub fn parse_rfc3339(text: &str) -> Option<Micros> {
        // Bound the work done on hostile input before handing it to the parser.
        if text.len() > 64 {
            return None;
        }
        let parsed =
            time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
        let nanos = parsed.unix_timestamp_nanos();
        Some(Micros::from_unix_nanos(nanos))
    }

    /// Formats as RFC 3339 UTC with microsecond precision.
    pub fn to_rfc3339(self) -> String {
        let mut out = String::with_capacity(27);
        self.write_rfc3339(&mut out);
        out
    }

    pub fn write_rfc3339(self, out: &mut String) {
        use std::fmt::Write;
        match time::OffsetDateTime::from_unix_timestamp_nanos(self.0 as i128 * 1_000) {
            Ok(t) => {
                let _ = write!(
                    out,
                    "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
                    t.year(),
                    t.month() as u8,
                    t.day(),
                    t.hour(),
                    t.minute(),
                    t.second(),
                    t.microsecond()
                );
            }
            Err(_) => out.push_str("invalid"),
        }
    }

    /// The UTC day (days since the epoch) this instant falls in; partitions are per day.
    pub fn day(self) -> i64 {
        self.0.div_euclid(US_PER_DAY)
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_formats_round_trip() {
        let t = Micros::parse_rfc3339("2026-11-30T03:00:00.123456Z").expect("valid");
        assert_eq!(t.to_rfc3339(), "2026-11-30T03:00:00.123456Z");
        let offset = Micros::parse_rfc3339("2026-11-30T04:00:00.123456+01:00").expect("valid");
        assert_eq!(t, offset);
    }

    #[test]
    fn truncates_nanoseconds_deterministically() {
        assert_eq!(Micros::from_unix_nanos(1_999), Micros(1));
        assert_eq!(Micros::from_unix_nanos(-1), Micros(-1));
        let t = Micros::parse_rfc3339("2026-11-30T03:00:00.123456789Z").expect("valid");
        assert_eq!(t.0 % 1_000_000, 123_456);
    }

    #[test]
    fn rejects_garbage() {
        assert!(Micros::parse_rfc3339("yesterday").is_none());
        assert!(Micros::parse_rfc3339("2026-13-30T03:00:00Z").is_none());
        assert!(Micros::parse_rfc3339(&"9".repeat(100)).is_none());
    }
}
