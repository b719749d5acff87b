//! HAE timestamps to UTC microseconds and the start hour (spec: "Идентичность точки по
//! координатам": the hour of an object is the hour of the point's start).
//!
//! HAE writes `2024-01-15 08:30:00 -0500`; ISO 8601 (`2024-01-15T08:30:00Z`,
//! `...T08:30:00.250+05:30`) is accepted too. Anything else is an error, never a guess.

use crate::limits::TIMESTAMP_BYTES_MAX;

/// Microseconds in one hour.
pub const HOUR_US: i64 = 3_600_000_000;
const SECOND_US: i64 = 1_000_000;

/// A timestamp that did not parse. Carries no part of the input (it may be health data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timestamp does not parse as `YYYY-MM-DD HH:MM:SS ±HHMM` or ISO 8601")]
pub struct TimestampError;

/// Parses a HAE or ISO 8601 timestamp to microseconds since the Unix epoch, UTC.
pub fn parse_timestamp_us(text: &str) -> Result<i64, TimestampError> {
    let b = text.as_bytes();
    if b.len() < 19 || b.len() > TIMESTAMP_BYTES_MAX {
        return Err(TimestampError);
    }
    let year = digits(&b[0..4])?;
    let month = digits(&b[5..7])?;
    let day = digits(&b[8..10])?;
    let hour = digits(&b[11..13])?;
    let minute = digits(&b[14..16])?;
    let second = digits(&b[17..19])?;
    if b[4] != b'-' || b[7] != b'-' || !(b[10] == b' ' || b[10] == b'T') || b[13] != b':' || b[16] != b':' {
        return Err(TimestampError);
    }
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(TimestampError);
    }
    let mut rest = &b[19..];
    let mut fraction_us = 0i64;
    if let Some((&b'.', tail)) = rest.split_first() {
        let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return Err(TimestampError);
        }
        let mut scale = 100_000i64;
        for &c in &tail[..n.min(6)] {
            fraction_us += i64::from(c - b'0') * scale;
            scale /= 10;
        }
        rest = &tail[n..];
    }
    let offset_s = parse_offset(rest)?;
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_s;
    Ok(seconds * SECOND_US + fraction_us)
}

/// The start of the UTC hour holding `at_us`.
pub fn hour_start_us(at_us: i64) -> i64 {
    at_us.div_euclid(HOUR_US) * HOUR_US
}

/// Formats microseconds since the epoch as `YYYY-MM-DDTHH:MM:SSZ` (operator output, logs).
pub fn format_utc(at_us: i64) -> String {
    let seconds = at_us.div_euclid(SECOND_US);
    let days = seconds.div_euclid(86_400);
    let in_day = seconds.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        in_day / 3_600,
        in_day % 3_600 / 60,
        in_day % 60
    )
}

/// Formats microseconds since the epoch in HAE's own form with the given offset in minutes.
pub fn format_hae(at_us: i64, offset_minutes: i64) -> String {
    let local_s = at_us.div_euclid(SECOND_US) + offset_minutes * 60;
    let days = local_s.div_euclid(86_400);
    let in_day = local_s.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let sign = if offset_minutes < 0 { '-' } else { '+' };
    let off = offset_minutes.abs();
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} {sign}{:02}{:02}",
        in_day / 3_600,
        in_day % 3_600 / 60,
        in_day % 60,
        off / 60,
        off % 60
    )
}

fn parse_offset(rest: &[u8]) -> Result<i64, TimestampError> {
    let rest = rest.strip_prefix(b" ").unwrap_or(rest);
    match rest {
        b"Z" => Ok(0),
        [sign @ (b'+' | b'-'), h1, h2, m1, m2] | [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = digits(&[*h1, *h2])?;
            let minutes = digits(&[*m1, *m2])?;
            if hours > 23 || minutes > 59 {
                return Err(TimestampError);
            }
            let total = hours * 3_600 + minutes * 60;
            Ok(if *sign == b'-' { -total } else { total })
        }
        _ => Err(TimestampError),
    }
}

fn digits(b: &[u8]) -> Result<i64, TimestampError> {
    let mut v = 0i64;
    for &c in b {
        if !c.is_ascii_digit() {
            return Err(TimestampError);
        }
        v = v * 10 + i64::from(c - b'0');
    }
    Ok(v)
}

fn is_leap(y: i64) -> bool {
    (y % 4 == 0 && y % 100 != 0) || y % 400 == 0
}

fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hae_form_with_offset_is_utc() {
        let us = parse_timestamp_us("2024-01-15 08:30:00 -0500").expect("parses");
        assert_eq!(format_utc(us), "2024-01-15T13:30:00Z");
        assert_eq!(parse_timestamp_us("2024-01-15T13:30:00Z"), Ok(us));
        assert_eq!(parse_timestamp_us("2024-01-15T14:30:00+01:00"), Ok(us));
        assert_eq!(parse_timestamp_us("2024-01-15T13:30:00.25Z"), Ok(us + 250_000));
    }

    #[test]
    fn garbage_is_refused_not_guessed() {
        for bad in [
            "",
            "2024-13-01 00:00:00 +0000",
            "2024-02-30 00:00:00 +0000",
            "yesterday at noon",
            "2024-01-15 08:30:00",
            "2024-01-15 08:30:00 +2500",
            "2024-01-15 08:30:00 -0500 trailing",
        ] {
            assert_eq!(parse_timestamp_us(bad), Err(TimestampError), "{bad}");
        }
    }

    #[test]
    fn hours_and_round_trip() {
        let us = parse_timestamp_us("1969-12-31 23:59:59 +0000").expect("parses");
        assert_eq!(hour_start_us(us), -HOUR_US);
        for offset in [-300, 0, 330] {
            let at = 1_700_000_123 * SECOND_US;
            assert_eq!(parse_timestamp_us(&format_hae(at, offset)), Ok(at));
        }
    }
}
