//! HAE timestamps to UTC microseconds and the start hour (spec: "Идентичность точки по
//! координатам": the hour of an object is the hour of the point's start).
//!
//! Parsed with the `time` crate's format descriptions, never by hand. The forms accepted, each
//! with a named test built from the shape it accepts:
//! - HAE's 24-hour form `2024-01-15 08:30:00 -0500` (offset also as `-05:00`);
//! - HAE's 12-hour form, written by phones whose region uses a 12-hour clock:
//!   `2024-09-21 7:57:00\u{202f}am +1000` — the hour unpadded or padded, `am`/`pm` in any case,
//!   and between the seconds and the period a narrow no-break space (U+202F), a no-break space
//!   (U+00A0) or a plain space (other receivers broke on exactly this: apple-health-ingester
//!   issues 24 and 25, health-import-server issue 5);
//! - RFC 3339 / ISO 8601 (`2024-01-15T13:30:00Z`, `...T08:30:00.250+05:30`);
//! - a date alone (`2024-09-21`, aggregated sleep's `date`), read by [`parse_label_us`] only, as
//!   midnight UTC of that calendar day: a label that stays the same in every copy, not an instant.
//!
//! Anything else is an error, never a guess: a time without an offset has no UTC instant.

use ::time::format_description::BorrowedFormatItem;
use ::time::format_description::well_known::Rfc3339;
use ::time::macros::format_description;
use ::time::{Date, OffsetDateTime, PrimitiveDateTime, Time};

use crate::limits::TIMESTAMP_BYTES_MAX;

/// Microseconds in one hour.
pub const HOUR_US: i64 = 3_600_000_000;
const SECOND_US: i64 = 1_000_000;

/// A timestamp that did not parse. Carries no part of the input (it may be health data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("timestamp does not parse as `YYYY-MM-DD HH:MM:SS ±HHMM` (24- or 12-hour) or ISO 8601")]
pub struct TimestampError;

/// HAE's 24-hour form, offset `+HHMM`.
const HAE_24: &[BorrowedFormatItem<'static>] = format_description!(
    "[year]-[month]-[day] [hour]:[minute]:[second] [offset_hour sign:mandatory][offset_minute]"
);
/// HAE's 24-hour form, offset `+HH:MM`.
const HAE_24_COLON: &[BorrowedFormatItem<'static>] = format_description!(
    "[year]-[month]-[day] [hour]:[minute]:[second] [offset_hour sign:mandatory]:[offset_minute]"
);
/// HAE's 12-hour form after the separator before the period is made a plain space.
const HAE_12: &[BorrowedFormatItem<'static>] = format_description!(
    "[year]-[month]-[day] [hour repr:12 padding:none]:[minute]:[second] [period case_sensitive:false] [offset_hour sign:mandatory][offset_minute]"
);
/// As [`HAE_12`], offset `+HH:MM`.
const HAE_12_COLON: &[BorrowedFormatItem<'static>] = format_description!(
    "[year]-[month]-[day] [hour repr:12 padding:none]:[minute]:[second] [period case_sensitive:false] [offset_hour sign:mandatory]:[offset_minute]"
);
/// A date alone.
const DATE_ONLY: &[BorrowedFormatItem<'static>] = format_description!("[year]-[month]-[day]");

/// The spaces iOS writes between the time and the period: narrow no-break, no-break, plain.
const PERIOD_SEPARATORS: [char; 3] = ['\u{202f}', '\u{a0}', ' '];
/// Offsets beyond this many hours are refused (`time` reads up to ±25:59; real zones are ±14).
const OFFSET_HOURS_MAX: i8 = 23;

/// Parses a HAE (24- or 12-hour) or ISO 8601 timestamp to microseconds since the Unix epoch, UTC.
pub fn parse_timestamp_us(text: &str) -> Result<i64, TimestampError> {
    if text.len() > TIMESTAMP_BYTES_MAX {
        return Err(TimestampError);
    }
    parse_offset_date_time(text).and_then(micros)
}

fn parse_offset_date_time(text: &str) -> Result<OffsetDateTime, TimestampError> {
    for format in [HAE_24, HAE_24_COLON] {
        if let Ok(at) = OffsetDateTime::parse(text, format) {
            return Ok(at);
        }
    }
    if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        return Ok(at);
    }
    if text.contains(PERIOD_SEPARATORS) && text.contains(['m', 'M']) {
        let plain: String = text
            .chars()
            .map(|c| if PERIOD_SEPARATORS.contains(&c) { ' ' } else { c })
            .collect();
        for format in [HAE_12, HAE_12_COLON] {
            if let Ok(at) = OffsetDateTime::parse(&plain, format) {
                return Ok(at);
            }
        }
    }
    Err(TimestampError)
}

/// Parses a point's label: any [`parse_timestamp_us`] form, or a date alone (`2024-09-21`,
/// aggregated sleep's `date`), which is midnight UTC of that day.
pub fn parse_label_us(text: &str) -> Result<i64, TimestampError> {
    match parse_timestamp_us(text) {
        Ok(at) => Ok(at),
        Err(e) => match Date::parse(text, DATE_ONLY) {
            Ok(day) => micros(PrimitiveDateTime::new(day, Time::MIDNIGHT).assume_utc()),
            Err(_) => Err(e),
        },
    }
}

/// The UTC offset a HAE or ISO 8601 timestamp was written with, in minutes (an entity's header).
pub fn offset_minutes(text: &str) -> Option<i32> {
    if text.len() > TIMESTAMP_BYTES_MAX {
        return None;
    }
    parse_offset_date_time(text)
        .ok()
        .filter(|at| at.offset().whole_hours().abs() <= OFFSET_HOURS_MAX)
        .map(|at| i32::from(at.offset().whole_minutes()))
}

fn micros(at: OffsetDateTime) -> Result<i64, TimestampError> {
    if at.offset().whole_hours().abs() > OFFSET_HOURS_MAX {
        return Err(TimestampError);
    }
    // i128 nanoseconds of any year `time` parses (±9999) fit i64 microseconds.
    i64::try_from(at.unix_timestamp_nanos() / 1_000).map_err(|_| TimestampError)
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

    /// Format rule: the 12-hour form with the narrow no-break space iOS writes (U+202F).
    #[test]
    fn twelve_hour_form_with_a_narrow_no_break_space() {
        let at = parse_timestamp_us("2024-09-21 7:57:00\u{202f}am +1000").expect("parses");
        assert_eq!(format_utc(at), "2024-09-20T21:57:00Z");
        let pm = parse_timestamp_us("2024-09-21 7:57:00\u{202f}pm +1000").expect("parses");
        assert_eq!(pm - at, 12 * HOUR_US);
    }

    /// Format rule: the 12-hour form with a plain space or a no-break space, am/pm in any case,
    /// the hour padded or not; 12 am is midnight and 12 pm is noon.
    #[test]
    fn twelve_hour_form_with_any_separator_and_case() {
        let want = parse_timestamp_us("2024-09-21 07:57:00 +1000").expect("24-hour");
        for text in [
            "2024-09-21 7:57:00 am +1000",
            "2024-09-21 7:57:00 AM +1000",
            "2024-09-21 07:57:00 Am +1000",
            "2024-09-21 7:57:00\u{a0}aM +1000",
            "2024-09-21 7:57:00\u{202f}AM +10:00",
        ] {
            assert_eq!(parse_timestamp_us(text), Ok(want), "{text:?}");
        }
        let midnight = parse_timestamp_us("2024-09-21 12:00:00\u{202f}am +0000").expect("parses");
        assert_eq!(format_utc(midnight), "2024-09-21T00:00:00Z");
        let noon = parse_timestamp_us("2024-09-21 12:00:00 PM +0000").expect("parses");
        assert_eq!(format_utc(noon), "2024-09-21T12:00:00Z");
        for bad in [
            "2024-09-21 13:57:00 pm +1000",
            "2024-09-21 0:57:00 am +1000",
            "2024-09-21 7:57:00 xm +1000",
            "2024-09-21 7:57:00 am",
        ] {
            assert_eq!(parse_timestamp_us(bad), Err(TimestampError), "{bad:?}");
        }
        assert_eq!(offset_minutes("2024-09-21 7:57:00\u{202f}am +1000"), Some(600));
        assert_eq!(offset_minutes("2024-01-15 08:30:00 -0530"), Some(-330));
    }

    /// Format rule: a date alone is a label (aggregated sleep's `date`): midnight UTC of the day.
    #[test]
    fn a_date_alone_is_a_label_at_midnight_utc() {
        let at = parse_label_us("2024-09-21").expect("parses");
        assert_eq!(format_utc(at), "2024-09-21T00:00:00Z");
        assert_eq!(
            parse_timestamp_us("2024-09-21"),
            Err(TimestampError),
            "not an instant"
        );
        assert_eq!(parse_label_us("2024-02-30"), Err(TimestampError));
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
