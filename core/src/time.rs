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
        // Every envelope's form first (issue 24 item 3: the general parser was a tenth of
        // stages 2–10); anything else, valid or not, is the general parser's to judge.
        if let Some(at) = parse_utc_z_micros(text.as_bytes()) {
            return Some(at);
        }
        parse_rfc3339_general(text)
    }

    /// Formats as RFC 3339 UTC with microsecond precision.
    pub fn to_rfc3339(self) -> String {
        let mut out = String::with_capacity(27);
        self.write_rfc3339(&mut out);
        out
    }

    pub fn write_rfc3339(self, out: &mut String) {
        let _ = self.fmt_rfc3339(out);
    }

    /// As [`Micros::to_rfc3339`], into any writer: the `Display` impl and the wire's
    /// serialisers write through this, with no `String` in between.
    fn fmt_rfc3339(self, out: &mut impl fmt::Write) -> fmt::Result {
        // Years 0–9999 (every real instant) digit by digit: `write!` with seven padded
        // integers was 2.6 % of a simulated seed (every transition and envelope has one).
        // The same text as the general form below (`fast_format_agrees_with_the_general_one`).
        match format_utc_fast(self) {
            Some(text) => out.write_str(std::str::from_utf8(&text).unwrap_or("invalid")),
            None => write_rfc3339_general(self, out),
        }
    }

    /// The UTC day (days since the epoch) this instant falls in; partitions are per day.
    pub fn day(self) -> i64 {
        self.0.div_euclid(US_PER_DAY)
    }
}

/// `YYYY-MM-DDTHH:MM:SS.ffffffZ` for an instant in years 0–9999, else `None`.
fn format_utc_fast(t: Micros) -> Option<[u8; 27]> {
    let seconds = t.0.div_euclid(US_PER_S);
    let micros = t.0.rem_euclid(US_PER_S) as u32;
    let (year, month, day) = civil_from_days(seconds.div_euclid(86_400));
    if !(0..=9999).contains(&year) {
        return None;
    }
    let of_day = seconds.rem_euclid(86_400) as u32;
    let mut text = *b"0000-00-00T00:00:00.000000Z";
    let mut put = |at: usize, width: usize, mut value: u32| {
        for i in (at..at + width).rev() {
            text[i] = b'0' + (value % 10) as u8;
            value /= 10;
        }
    };
    put(0, 4, year as u32);
    put(5, 2, month);
    put(8, 2, day);
    put(11, 2, of_day / 3_600);
    put(14, 2, of_day / 60 % 60);
    put(17, 2, of_day % 60);
    put(20, 6, micros);
    Some(text)
}

/// The proleptic Gregorian date of a day since 1970-01-01 (H. Hinnant's `civil_from_days`,
/// the inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era = (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = (day_of_year - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Through the `time` crate: any instant it can represent, `invalid` past them.
fn write_rfc3339_general(t: Micros, out: &mut impl fmt::Write) -> fmt::Result {
    match time::OffsetDateTime::from_unix_timestamp_nanos(t.0 as i128 * 1_000) {
        Ok(t) => write!(
            out,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z",
            t.year(),
            t.month() as u8,
            t.day(),
            t.hour(),
            t.minute(),
            t.second(),
            t.microsecond()
        ),
        Err(_) => out.write_str("invalid"),
    }
}

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_rfc3339(f)
    }
}

/// RFC 3339 through the `time` crate: every form it allows (offsets, lower-case `t` and `z`,
/// leap seconds, any number of fraction digits).
fn parse_rfc3339_general(text: &str) -> Option<Micros> {
    let parsed = time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339).ok()?;
    Some(Micros::from_unix_nanos(parsed.unix_timestamp_nanos()))
}

/// The instant of exactly `YYYY-MM-DDTHH:MM:SS[.F{1,9}]Z` with an existing date and a second
/// below 60, truncated to the microsecond as [`Micros::from_unix_nanos`] truncates; `None` for
/// anything else (which may still be valid RFC 3339, for [`parse_rfc3339_general`] to decide).
/// Equal to the general parser wherever it answers (`fast_path_agrees_with_the_general_parser`).
/// In `i64` microseconds with the digits read in place (issue 24 item 3: through `i128`
/// nanoseconds and a digit closure it was about 570 instructions a timestamp).
fn parse_utc_z_micros(b: &[u8]) -> Option<Micros> {
    const FIXED: usize = "YYYY-MM-DDTHH:MM:SS".len();
    /// Scales a fraction of `n` digits to nanoseconds.
    const NANOS_SCALE: [u32; 10] = [
        0,
        100_000_000,
        10_000_000,
        1_000_000,
        100_000,
        10_000,
        1_000,
        100,
        10,
        1,
    ];
    if b.len() < FIXED + 1 || b[b.len() - 1] != b'Z' {
        return None;
    }
    if b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    let two = |at: usize| -> Option<u32> {
        let (tens, ones) = (b[at].wrapping_sub(b'0'), b[at + 1].wrapping_sub(b'0'));
        (tens < 10 && ones < 10).then(|| u32::from(tens) * 10 + u32::from(ones))
    };
    let year = two(0)? * 100 + two(2)?;
    let (month, day) = (two(5)?, two(8)?);
    let (hour, minute, second) = (two(11)?, two(14)?, two(17)?);
    let fraction_nanos = match &b[FIXED..b.len() - 1] {
        [] => 0,
        [b'.', fraction @ ..] if (1..=9).contains(&fraction.len()) => {
            let mut value = 0u32;
            for &c in fraction {
                let digit = c.wrapping_sub(b'0');
                if digit >= 10 {
                    return None;
                }
                value = value * 10 + u32::from(digit);
            }
            value * NANOS_SCALE[fraction.len()]
        }
        _ => return None,
    };
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day == 0 || day > month_days || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let seconds = days * 86_400 + i64::from(hour * 3_600 + minute * 60 + second);
    // Years 0–9999: |seconds| < 2^38, so microseconds fit an i64 many times over; the whole
    // seconds are exact microseconds, so truncating the fraction alone floors the instant.
    Some(Micros(seconds * US_PER_S + i64::from(fraction_nanos / 1_000)))
}

/// Days from 1970-01-01 to a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    debug_assert!((1..=12).contains(&month) && (1..=31).contains(&day));
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month = i64::from(month);
    let day_of_year = (153 * (if month > 2 { month - 3 } else { month + 9 }) + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_path_agrees_with_the_general_parser() {
        let cases = [
            "1970-01-01T00:00:00Z",
            "1969-12-31T23:59:59.999999999Z",
            "0000-01-01T00:00:00Z",
            "0000-02-29T12:00:00Z",
            "9999-12-31T23:59:59.9Z",
            "2000-02-29T00:00:00.5Z",
            "2100-02-29T00:00:00Z",
            "2024-02-29T23:59:59.123456Z",
            "2026-11-30T03:00:00.123456789Z",
            "2026-04-31T00:00:00Z",
            "2026-00-10T00:00:00Z",
            "2026-01-00T00:00:00Z",
            "2026-01-01T24:00:00Z",
            "2026-01-01T00:60:00Z",
            "2026-12-31T23:59:60Z",
            "2026-01-01T00:00:00.Z",
            "2026-01-01T00:00:00.1234567890Z",
            "2026-01-01t00:00:00z",
            "2026-01-01T00:00:00+00:00",
            "2026-01-01T00:00:0aZ",
            "2026-1-01T00:00:00Z",
        ];
        for text in cases {
            let fast = parse_utc_z_micros(text.as_bytes());
            if let Some(fast) = fast {
                assert_eq!(Some(fast), parse_rfc3339_general(text), "{text}");
            }
            assert_eq!(Micros::parse_rfc3339(text), parse_rfc3339_general(text), "{text}");
        }
        assert!(
            parse_utc_z_micros(b"2026-11-30T03:00:00.123456Z").is_some(),
            "the envelope's form"
        );
    }

    proptest::proptest! {
        #[test]
        fn fast_path_agrees_on_any_date(
            year in 0u32..=9999, month in 1u32..=12, day in 1u32..=31, hour in 0u32..=23,
            minute in 0u32..=59, second in 0u32..=60, digits in 0usize..=10, fraction in 0u64..10_000_000_000,
        ) {
            let mut text = format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}");
            if digits > 0 {
                let f = format!("{fraction:010}");
                text.push('.');
                text.push_str(&f[..digits]);
            }
            text.push('Z');
            let fast = parse_utc_z_micros(text.as_bytes());
            let general = parse_rfc3339_general(&text);
            if fast.is_some() {
                proptest::prop_assert_eq!(fast, general, "{}", text);
            }
            proptest::prop_assert_eq!(Micros::parse_rfc3339(&text), general, "{}", text);
        }
    }

    proptest::proptest! {
        #[test]
        fn fast_format_agrees_with_the_general_one(us in proptest::num::i64::ANY) {
            let mut general = String::new();
            let _ = write_rfc3339_general(Micros(us), &mut general);
            proptest::prop_assert_eq!(Micros(us).to_rfc3339(), general);
        }

        #[test]
        fn fast_format_agrees_in_years_0_to_9999(us in -62_167_219_200_000_000i64..253_402_300_800_000_000) {
            let mut general = String::new();
            let _ = write_rfc3339_general(Micros(us), &mut general);
            proptest::prop_assert!(format_utc_fast(Micros(us)).is_some());
            proptest::prop_assert_eq!(Micros(us).to_rfc3339(), general);
        }
    }

    #[test]
    fn fast_format_at_the_edges() {
        for us in [
            -62_167_219_200_000_000i64, // 0000-01-01T00:00:00Z
            -62_167_219_200_000_001,    // the microsecond before: the general form
            -1,
            0,
            951_782_400_000_000, // 2000-02-29
            4_107_542_399_999_999,
            253_402_300_799_999_999, // 9999-12-31T23:59:59.999999Z
            253_402_300_800_000_000, // 10000-01-01: the general form
            i64::MIN,
            i64::MAX,
        ] {
            let mut general = String::new();
            let _ = write_rfc3339_general(Micros(us), &mut general);
            assert_eq!(Micros(us).to_rfc3339(), general, "{us}");
        }
        assert_eq!(Micros(0).to_rfc3339(), "1970-01-01T00:00:00.000000Z");
        assert_eq!(Micros(-1).to_rfc3339(), "1969-12-31T23:59:59.999999Z");
    }

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
