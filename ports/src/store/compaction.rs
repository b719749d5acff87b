//! What compacting a closed day takes and reports (issue 24 items 1 and 2; core runtime spec,
//! "~40 GB rolling under a 90-day retention with compression from day seven"; ingest spec,
//! "Reprocess": "decompress-update-recompress").
//!
//! Owns: the request's bounds and the refusals both stores give, word for word, before they
//! write anything ([`check_compaction`]), and the report ([`Compaction`]). The stores own the
//! compacted form: `sentinel-store-pg`'s chunks (`migrations/0015_compaction.sql`) and the
//! model's column-wise days (`sentinel-models`).

use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Micros, RetentionClass};

use super::StoreError;

/// The age a day must reach before it is compacted, by default: the spec's "compression from
/// day seven" (`--compact-after-days`).
pub const COMPACT_AFTER_DAYS_DEFAULT: u32 = 7;
/// The most a caller may ask a day to wait; and at least one day.
pub const COMPACT_AFTER_DAYS_MAX: u32 = 400;
/// The age a day's minute rollups must reach before they are compacted on their own, by
/// default (`--rollup-compact-after-days`): a day after the day ended. They need no stream
/// rule (a recompute of a compacted minute writes a hot row that wins over it).
pub const ROLLUP_COMPACT_AFTER_DAYS_DEFAULT: u32 = 1;

/// What one [`crate::Store::compact_day`] asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionRequest<'a> {
    pub class: RetentionClass,
    /// The UTC midnight starting the day (of `ingested_at`, the partition key).
    pub day: Micros,
    /// The caller's now: the day must have ended `compact_after_days` before it. Also the
    /// control event's `occurred_at`.
    pub now: Micros,
    pub compact_after_days: u32,
    /// The `ingested_at` of the oldest message the stream still holds (`None`: the stream is
    /// empty). A day that ends after it is refused: a redelivery of a message ingested on it
    /// must still find the unique index.
    pub stream_oldest: Option<Micros>,
    pub principal: &'a str,
}

/// What compacting one day did. `rows` 0 and `seq` `None`: the day held no hot rows (already
/// compacted, or empty), and nothing was written.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Compaction {
    /// Hot rows compacted (the day's chunks already there are encoded again with them).
    pub rows: u64,
    /// Chunks the day holds afterwards: one per (point, driver instance, source epoch, hour of
    /// `observed_at`).
    pub chunks: u64,
    /// The day's bytes before and after, hot and compacted, indexes included (the model's are
    /// its own estimate of its representation).
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// The `compaction` control event.
    pub seq: Option<i64>,
    /// The same day's minute rollups, compacted in the same transaction after the class's
    /// rows (whatever the class: the first class compacted takes them, the others find none
    /// hot).
    pub rollups: RollupCompaction,
}

/// What compacting one day's minute rollups did (`migrations/0016_rollup_compaction.sql`):
/// `buckets` 0 and `seq` `None` when the day held no hot minute rollup (already compacted, or
/// none), and nothing was written.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct RollupCompaction {
    /// Hot minute buckets compacted (the day's chunks already there are encoded again with
    /// them, less what a recompute since took back).
    pub buckets: u64,
    /// Chunks the day holds afterwards: one per (point, retention class); 0 when nothing was
    /// written.
    pub chunks: u64,
    /// The day's rollup bytes before and after, hot and compacted, indexes included (the
    /// model's are its own estimate).
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Its own `compaction` control event (payload `table` `rollup_1m`), after the class's.
    pub seq: Option<i64>,
}

/// What one [`crate::Store::compact_rollup_day`] asks for: one closed day's minute rollups
/// alone, at their own age (no stream rule: a redelivered message recomputes its minute into a
/// hot row, which wins over the compacted element).
#[derive(Clone, Debug, PartialEq)]
pub struct RollupCompactionRequest<'a> {
    /// The UTC midnight starting the day (of the buckets).
    pub day: Micros,
    /// The caller's now: the day must have ended `compact_after_days` before it. Also the
    /// control event's `occurred_at`.
    pub now: Micros,
    pub compact_after_days: u32,
    pub principal: &'a str,
}

/// The day's date as the refusals and the control event name it (`YYYY-MM-DD`).
pub fn day_name(day: Micros) -> String {
    day.to_rfc3339().chars().take(10).collect()
}

/// The refusals of [`crate::Store::compact_day`], checked by both stores before anything is
/// written, in this order: bounds, a day that is not a UTC midnight, a day not closed at
/// `now`, a day younger than `compact_after_days`, a day the stream may still hold a message of.
pub fn check_compaction(request: &CompactionRequest<'_>) -> Result<(), StoreError> {
    check_day_age(request.day, request.now, request.compact_after_days)?;
    let day_end = request.day.0.saturating_add(US_PER_DAY);
    if let Some(oldest) = request.stream_oldest
        && oldest.0 < day_end
    {
        return Err(StoreError::StreamHoldsDay {
            day: request.day,
            oldest,
        });
    }
    Ok(())
}

/// The refusals of [`crate::Store::compact_rollup_day`], checked by both stores before
/// anything is written: those of [`check_compaction`] but the stream's, in the same words
/// (`sentinel_compact_rollup_day` of migration 0016 raises them too).
pub fn check_rollup_compaction(request: &RollupCompactionRequest<'_>) -> Result<(), StoreError> {
    check_day_age(request.day, request.now, request.compact_after_days)
}

/// Bounds, a UTC midnight, closed at `now`, and at least `days` old.
fn check_day_age(day: Micros, now: Micros, days: u32) -> Result<(), StoreError> {
    if !(1..=COMPACT_AFTER_DAYS_MAX).contains(&days) {
        return Err(StoreError::Other(format!(
            "compaction: the age must be within 1..={COMPACT_AFTER_DAYS_MAX} days, got {days}"
        )));
    }
    if day.0.rem_euclid(US_PER_DAY) != 0 {
        return Err(StoreError::Other(format!(
            "compaction: {} is not a UTC midnight",
            day.0
        )));
    }
    let day_end = day.0.saturating_add(US_PER_DAY);
    let name = day_name(day);
    if day_end > now.0 {
        return Err(StoreError::Other(format!(
            "compaction refused: day {name} is not closed (it ends after now)"
        )));
    }
    if day_end.saturating_add(i64::from(days) * US_PER_DAY) > now.0 {
        return Err(StoreError::Other(format!(
            "compaction refused: day {name} is younger than {days} days"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = US_PER_DAY;

    fn request(day: i64, now: i64, stream_oldest: Option<i64>) -> CompactionRequest<'static> {
        CompactionRequest {
            class: RetentionClass::Measurement,
            day: Micros(day),
            now: Micros(now),
            compact_after_days: 7,
            stream_oldest: stream_oldest.map(Micros),
            principal: "test",
        }
    }

    #[test]
    fn refusals_in_order() {
        let d = 20_000 * DAY; // 2024-10-04
        assert!(check_compaction(&request(d, d + 8 * DAY, None)).is_ok());
        let not_closed = check_compaction(&request(d, d + DAY - 1, None)).unwrap_err();
        assert_eq!(
            not_closed.to_string(),
            "store: compaction refused: day 2024-10-04 is not closed (it ends after now)"
        );
        let young = check_compaction(&request(d, d + 8 * DAY - 1, None)).unwrap_err();
        assert_eq!(
            young.to_string(),
            "store: compaction refused: day 2024-10-04 is younger than 7 days"
        );
        let stream = check_compaction(&request(d, d + 8 * DAY, Some(d + DAY - 1))).unwrap_err();
        // The one refusal a running core waits out quietly is told apart by its variant.
        assert!(
            matches!(stream, StoreError::StreamHoldsDay { day, oldest }
                if day == Micros(d) && oldest == Micros(d + DAY - 1)),
            "{stream:?}"
        );
        assert!(matches!(young, StoreError::Other(_)), "{young:?}");
        assert_eq!(
            stream.to_string(),
            "compaction refused: day 2024-10-04 may still be in the stream (its oldest message was ingested at 2024-10-04T23:59:59.999999Z)"
        );
        assert!(check_compaction(&request(d, d + 8 * DAY, Some(d + DAY))).is_ok());
        assert!(check_compaction(&request(d + 1, d + 9 * DAY, None)).is_err());
        let mut zero = request(d, d + 8 * DAY, None);
        zero.compact_after_days = 0;
        assert!(check_compaction(&zero).is_err());
    }

    #[test]
    fn rollup_refusals_are_the_same_words_without_the_stream() {
        let d = 20_000 * DAY; // 2024-10-04
        let rollups = |now: i64, days: u32| RollupCompactionRequest {
            day: Micros(d),
            now: Micros(now),
            compact_after_days: days,
            principal: "test",
        };
        assert!(check_rollup_compaction(&rollups(d + 2 * DAY, 1)).is_ok());
        assert_eq!(
            check_rollup_compaction(&rollups(d + 2 * DAY - 1, 1))
                .unwrap_err()
                .to_string(),
            "store: compaction refused: day 2024-10-04 is younger than 1 days"
        );
        assert_eq!(
            check_rollup_compaction(&rollups(d + DAY - 1, 1))
                .unwrap_err()
                .to_string(),
            "store: compaction refused: day 2024-10-04 is not closed (it ends after now)"
        );
        assert!(check_rollup_compaction(&rollups(d + 2 * DAY, 0)).is_err());
        assert!(check_rollup_compaction(&rollups(d + 402 * DAY, 401)).is_err());
        assert!(check_rollup_compaction(&rollups(d + 401 * DAY, 400)).is_ok());
    }
}
