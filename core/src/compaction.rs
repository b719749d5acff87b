//! When the running core compacts closed days (issue 24 item 1; core runtime spec, "~40 GB
//! rolling under a 90-day retention with compression from day seven"; ingest spec, "Retention
//! and rollups": the volume of rows is "managed afterwards, by retention and compaction").
//!
//! Owns: the compaction configuration ([`CompactionConfig`]: the age a closed day reaches
//! before it is compacted, and the pace) and the schedule ([`CompactionSchedule`], like
//! `retention.rs`: time passed in, one request in flight at most). The store owns the compacted
//! form and its refusals (`Store::compact_day`, `sentinel_ports::check_compaction`); this only
//! says which day of which class to ask for next.
//!
//! The schedule walks each class's days oldest first, from the first day retention still keeps
//! (older days are about to be dropped whole) to the newest day old enough, one day of one
//! class per request ([`Effect::CompactDay`](crate::Effect::CompactDay)), the oldest waiting
//! day of any class first. None is asked while ingest is behind. A day the stream may still
//! hold a message of is refused by the store: normal, the walk waits a run interval at that day
//! (every later day of every class would be refused too). A failure waits the retry interval. A
//! restart walks again from the oldest kept day; days already compacted or empty cost the store
//! one probe each and write nothing, and the next is asked at once.
//!
//! The minute rollups have a cursor of their own ([`CompactionTarget::MinuteRollups`]): they
//! need no stream rule (a recompute of a compacted minute writes a hot row that wins over it),
//! so a day's minute rollups are compacted alone at their own, shorter age
//! (`rollup_after_days`, default 1), walking days oldest first from the first day the
//! minute-rollup retention keeps to the newest day old enough at that age; the raw rows wait
//! for `after_days` (their compaction still compacts the day's rollups too: nothing, by then).
//! Both cursors share the one request in flight, the pauses and the hold while ingest is
//! behind; the older waiting day goes first, a class's rows before the rollups on a tie.

use crate::registry::RetentionClass;
use crate::retention::RetentionConfig;
use crate::time::{Micros, US_PER_DAY};

/// The most days a closed day may be asked to wait (the store's bound,
/// `sentinel_ports::COMPACT_AFTER_DAYS_MAX`).
pub const COMPACT_AFTER_DAYS_MAX: u32 = 400;

/// Defaults documented in the README ("Compaction").
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionConfig {
    /// A closed day is compacted once it ended this many days ago (1..=400); `None`: the
    /// running core compacts nothing (`sentinel run --no-compaction`). Default 7, the spec's
    /// "compression from day seven".
    pub after_days: Option<u32>,
    /// A closed day's minute rollups are compacted alone once the day ended this many days
    /// ago (1..=400, at most `after_days`); `None`: only with the day's raw rows. Off whenever
    /// `after_days` is. Default 1.
    pub rollup_after_days: Option<u32>,
    /// The next walk after one that reached the newest day old enough, or that the stream
    /// held back.
    pub run_interval_ms: i64,
    /// The first request after the core starts (a lag reading has arrived by then, so a core
    /// draining a backlog asks nothing).
    pub first_run_delay_ms: i64,
    /// Between one day's compaction and the next day's request while days are waiting (none
    /// after a day that held no hot rows: a restart walks its compacted days at once).
    pub catch_up_interval_ms: i64,
    /// After a failed request (not fenced, not refused by the stream).
    pub retry_interval_ms: i64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            after_days: Some(7),
            rollup_after_days: Some(1),
            run_interval_ms: 3_600_000,
            first_run_delay_ms: 300_000,
            catch_up_interval_ms: 1_000,
            retry_interval_ms: 60_000,
        }
    }
}

impl CompactionConfig {
    pub fn validate(&self) -> Result<(), String> {
        if let Some(days) = self.after_days
            && !(1..=COMPACT_AFTER_DAYS_MAX).contains(&days)
        {
            return Err(format!(
                "compaction.after_days must be within 1..={COMPACT_AFTER_DAYS_MAX}, got {days}"
            ));
        }
        if let Some(days) = self.rollup_after_days
            && (!(1..=COMPACT_AFTER_DAYS_MAX).contains(&days)
                || self.after_days.is_some_and(|raw| days > raw))
        {
            return Err(format!(
                "compaction.rollup_after_days must be within 1..={COMPACT_AFTER_DAYS_MAX} and at most \
                 compaction.after_days ({}), got {days}",
                self.after_days.map_or("off".to_string(), |d| d.to_string())
            ));
        }
        if self.run_interval_ms <= 0
            || self.first_run_delay_ms < 0
            || self.catch_up_interval_ms <= 0
            || self.retry_interval_ms <= 0
        {
            return Err(
                "compaction: run_interval_ms, catch_up_interval_ms and retry_interval_ms \
                        must be positive, first_run_delay_ms not negative"
                    .into(),
            );
        }
        Ok(())
    }

    /// The age at which a day's minute rollups are compacted alone, if they are: off when
    /// compaction is.
    pub fn rollup_age_days(&self) -> Option<u32> {
        self.after_days.and(self.rollup_after_days)
    }
}

/// What one request compacts.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CompactionTarget {
    /// A class's raw rows of the day (`Store::compact_day`, which compacts the day's minute
    /// rollups too).
    Rows(RetentionClass),
    /// The day's minute rollups alone (`Store::compact_rollup_day`).
    MinuteRollups,
}

/// What the core asks the store for: compact one closed day of one class, or its minute
/// rollups.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct CompactionDayRequest {
    pub epoch: u32,
    pub target: CompactionTarget,
    /// The UTC midnight starting the day.
    pub day: Micros,
    /// The request's instant: the store's `now` and the control event's `occurred_at`.
    pub at: Micros,
    /// The target's age: `after_days` for rows, `rollup_after_days` for minute rollups.
    pub after_days: u32,
}

/// A request's outcome, as the core needs it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum CompactionOutcome {
    /// Done: `rows` hot rows (or minute buckets) compacted (0: the day was already
    /// compacted, or empty).
    Done { rows: u64 },
    /// The stream may still hold a message ingested on the day: asked again a run interval
    /// later. Normal while the stream holds an old backlog.
    StreamHolds,
    /// Failed (not fenced), or the stream's oldest message could not be read: nothing was
    /// compacted; asked again after the retry interval.
    Failed,
}

/// When the running core compacts which day.
#[derive(Debug)]
pub struct CompactionSchedule {
    config: CompactionConfig,
    /// The target and day in flight.
    in_flight: Option<(CompactionTarget, Micros)>,
    next_at: Micros,
    /// Per class (by [`RetentionClass::index`]), the next day to ask for; `None` until the
    /// first walk starts it at the oldest kept day.
    cursor: [Option<Micros>; 3],
    /// The next day whose minute rollups to ask for; `None` until the first walk starts it at
    /// the oldest day the minute rollups keep.
    rollup_cursor: Option<Micros>,
}

impl CompactionSchedule {
    pub fn new(config: CompactionConfig, now: Micros) -> CompactionSchedule {
        let next_at = now.add_ms(config.first_run_delay_ms);
        CompactionSchedule {
            config,
            in_flight: None,
            next_at,
            cursor: [None; 3],
            rollup_cursor: None,
        }
    }

    /// The newest day old enough at `now`: it ended `after_days` whole days ago.
    fn newest_due(after_days: u32, now: Micros) -> Micros {
        Micros((now.day() - 1 - i64::from(after_days)) * US_PER_DAY)
    }

    /// The request to make now, if one is due. `ingest_behind` holds requests back.
    pub fn poll(
        &mut self,
        now: Micros,
        epoch: u32,
        ingest_behind: bool,
        retention: &RetentionConfig,
    ) -> Option<CompactionDayRequest> {
        let after_days = self.config.after_days?;
        if self.in_flight.is_some() || now < self.next_at || ingest_behind {
            return None;
        }
        let newest = Self::newest_due(after_days, now);
        let mut oldest: Option<(CompactionTarget, Micros)> = None;
        for class in RetentionClass::ALL {
            let kept_from = retention.raw_kept_from(class, now);
            let cursor = self.cursor[class.index()].map_or(kept_from, |c| c.max(kept_from));
            self.cursor[class.index()] = Some(cursor);
            if cursor <= newest && oldest.is_none_or(|(_, day)| cursor < day) {
                oldest = Some((CompactionTarget::Rows(class), cursor));
            }
        }
        let mut age_days = after_days;
        if let Some(rollup_days) = self.config.rollup_age_days() {
            debug_assert!(rollup_days <= after_days);
            let kept_from = retention.rollup_1m_kept_from(now);
            let cursor = self.rollup_cursor.map_or(kept_from, |c| c.max(kept_from));
            self.rollup_cursor = Some(cursor);
            // A tie goes to the class's rows: they compact the day's rollups with them.
            if cursor <= Self::newest_due(rollup_days, now) && oldest.is_none_or(|(_, day)| cursor < day) {
                oldest = Some((CompactionTarget::MinuteRollups, cursor));
                age_days = rollup_days;
            }
        }
        let Some((target, day)) = oldest else {
            // Every class and the minute rollups are walked up to the newest day old enough.
            self.next_at = now.add_ms(self.config.run_interval_ms);
            return None;
        };
        debug_assert!(day.0 % US_PER_DAY == 0 && day <= Self::newest_due(age_days, now));
        self.in_flight = Some((target, day));
        Some(CompactionDayRequest {
            epoch,
            target,
            day,
            at: now,
            after_days: age_days,
        })
    }

    pub fn on_compacted(&mut self, now: Micros, outcome: CompactionOutcome) {
        let Some((target, day)) = self.in_flight.take() else {
            debug_assert!(false, "a compaction answered that was never asked for");
            return;
        };
        let wait_ms = match outcome {
            CompactionOutcome::Done { rows } => {
                let next = Some(Micros(day.0 + US_PER_DAY));
                match target {
                    CompactionTarget::Rows(class) => self.cursor[class.index()] = next,
                    CompactionTarget::MinuteRollups => self.rollup_cursor = next,
                }
                // An empty or already compacted day cost the store one probe: the next at once.
                if rows == 0 {
                    0
                } else {
                    self.config.catch_up_interval_ms
                }
            }
            CompactionOutcome::StreamHolds => self.config.run_interval_ms,
            CompactionOutcome::Failed => self.config.retry_interval_ms,
        };
        self.next_at = now.add_ms(wait_ms);
    }

    pub fn in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// What the request in flight compacts, if one is.
    pub fn in_flight_target(&self) -> Option<CompactionTarget> {
        self.in_flight.map(|(target, _)| target)
    }

    /// When the next request may be due, if one can be asked for.
    pub fn next_deadline(&self) -> Option<Micros> {
        (self.config.after_days.is_some() && self.in_flight.is_none()).then_some(self.next_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Micros {
        Micros::parse_rfc3339(text).expect("test instant")
    }

    /// The raw rows alone: the rollups' own cursor is off.
    fn config() -> CompactionConfig {
        CompactionConfig {
            first_run_delay_ms: 0,
            rollup_after_days: None,
            ..CompactionConfig::default()
        }
    }

    /// Short horizons so a walk is a handful of days: diagnostic 7, measurement 9, state 8.
    fn retention() -> RetentionConfig {
        RetentionConfig {
            raw_days: [9, 8, 7],
            rollup_1m_days: 9,
            rollup_1h_days: 9,
            ..RetentionConfig::default()
        }
    }

    fn walk(s: &mut CompactionSchedule, now: Micros) -> Vec<(CompactionTarget, String)> {
        let mut asked = Vec::new();
        let mut t = now;
        while let Some(request) = s.poll(t, 3, false, &retention()) {
            let age = match request.target {
                CompactionTarget::Rows(_) => s.config.after_days,
                CompactionTarget::MinuteRollups => s.config.rollup_after_days,
            };
            assert_eq!((request.epoch, request.at, Some(request.after_days)), (3, t, age));
            asked.push((
                request.target,
                crate::time::Micros::to_rfc3339(request.day)[..10].to_string(),
            ));
            s.on_compacted(t, CompactionOutcome::Done { rows: 1 });
            t = t.add_ms(1_000);
            assert!(asked.len() < 100, "a walk ends");
        }
        asked
    }

    #[test]
    fn defaults_are_valid_and_zero_or_too_old_is_refused_by_name() {
        assert_eq!(CompactionConfig::default().validate(), Ok(()));
        assert_eq!(CompactionConfig::default().after_days, Some(7));
        let zero = CompactionConfig {
            after_days: Some(0),
            ..CompactionConfig::default()
        };
        assert_eq!(
            zero.validate(),
            Err("compaction.after_days must be within 1..=400, got 0".into())
        );
        let off = CompactionConfig {
            after_days: None,
            ..CompactionConfig::default()
        };
        assert_eq!(off.validate(), Ok(()));
        let mut s = CompactionSchedule::new(off, at("2026-06-20T12:00:00Z"));
        assert_eq!(s.next_deadline(), None, "off: never due");
        assert_eq!(s.poll(at("2026-07-20T12:00:00Z"), 1, false, &retention()), None);
    }

    #[test]
    fn days_oldest_first_across_classes_from_the_oldest_kept_day_to_the_newest_old_enough() {
        let now = at("2026-06-20T12:00:00Z");
        let mut s = CompactionSchedule::new(config(), now);
        // Newest old enough: it ended 7 days before today's midnight → 2026-06-12.
        // Kept from: measurement 06-11, state 06-12, diagnostic 06-13 (nothing due).
        use RetentionClass::*;
        let rows = CompactionTarget::Rows;
        assert_eq!(
            walk(&mut s, now),
            [
                (rows(Measurement), "2026-06-11".to_string()),
                (rows(Measurement), "2026-06-12".to_string()),
                (rows(State), "2026-06-12".to_string()),
            ]
        );
        let done_at = now.add_ms(3_000);
        assert_eq!(
            s.next_deadline(),
            Some(done_at.add_ms(3_600_000)),
            "walked: the next walk a run interval later"
        );
        // A day later, one more day of each class; the diagnostic class's days are dropped
        // (7-day horizon) before they are old enough.
        let tomorrow = at("2026-06-21T12:00:00Z");
        assert_eq!(
            walk(&mut s, tomorrow),
            [
                (rows(Measurement), "2026-06-13".to_string()),
                (rows(State), "2026-06-13".to_string()),
            ]
        );
    }

    #[test]
    fn one_at_a_time_held_back_while_behind_and_the_stream_or_a_failure_waits() {
        let now = at("2026-06-20T12:00:00Z");
        let raw_only = CompactionConfig {
            rollup_after_days: None,
            ..CompactionConfig::default()
        };
        let mut s = CompactionSchedule::new(raw_only, now);
        assert_eq!(s.poll(now, 1, false, &retention()), None, "not at once");
        let first = now.add_ms(300_000);
        assert_eq!(s.next_deadline(), Some(first));
        assert_eq!(s.poll(first, 1, true, &retention()), None, "ingest behind");
        let request = s.poll(first, 1, false, &retention()).expect("due");
        assert_eq!(
            (request.target, request.day),
            (
                CompactionTarget::Rows(RetentionClass::Measurement),
                at("2026-06-11T00:00:00Z")
            )
        );
        assert!(s.in_flight());
        assert_eq!(s.next_deadline(), None, "one in flight at most");
        assert_eq!(s.poll(first.add_ms(1), 1, false, &retention()), None);
        s.on_compacted(first, CompactionOutcome::StreamHolds);
        assert_eq!(
            s.next_deadline(),
            Some(first.add_ms(3_600_000)),
            "quietly, a run later"
        );
        let again_at = first.add_ms(3_600_000);
        let again = s.poll(again_at, 1, false, &retention()).expect("due again");
        assert_eq!(again.day, request.day, "the same day: it was not compacted");
        s.on_compacted(again_at, CompactionOutcome::Failed);
        assert_eq!(
            s.next_deadline(),
            Some(again_at.add_ms(60_000)),
            "a failure retries"
        );
        let retry_at = again_at.add_ms(60_000);
        let retry = s.poll(retry_at, 1, false, &retention()).expect("retried");
        assert_eq!(retry.day, request.day);
        s.on_compacted(retry_at, CompactionOutcome::Done { rows: 10 });
        assert_eq!(
            s.poll(retry_at.add_ms(999), 1, false, &retention()),
            None,
            "a pause after a day with rows"
        );
        let next = s
            .poll(retry_at.add_ms(1_000), 1, false, &retention())
            .expect("the next day, soon");
        assert_eq!(next.day, at("2026-06-12T00:00:00Z"));
        let then = retry_at.add_ms(1_000);
        s.on_compacted(then, CompactionOutcome::Done { rows: 0 });
        let empty_next = s
            .poll(then, 1, false, &retention())
            .expect("after an empty day, at once");
        assert_eq!(
            empty_next.day,
            at("2026-06-12T00:00:00Z"),
            "the state class's first day"
        );
    }

    #[test]
    fn a_cursor_behind_retention_moves_up_to_the_oldest_kept_day() {
        let now = at("2026-06-20T12:00:00Z");
        let mut s = CompactionSchedule::new(config(), now);
        s.cursor[RetentionClass::Measurement.index()] = Some(at("2026-01-01T00:00:00Z"));
        let request = s.poll(now, 1, false, &retention()).expect("due");
        assert_eq!(request.day, at("2026-06-11T00:00:00Z"), "no day retention drops");
    }

    #[test]
    fn the_rollup_age_is_bounded_by_the_raw_age_and_off_with_it() {
        let with = |after_days, rollup_after_days| CompactionConfig {
            after_days,
            rollup_after_days,
            ..CompactionConfig::default()
        };
        assert_eq!(CompactionConfig::default().rollup_after_days, Some(1));
        assert_eq!(CompactionConfig::default().rollup_age_days(), Some(1));
        assert_eq!(with(Some(7), Some(7)).validate(), Ok(()));
        assert_eq!(
            with(Some(7), Some(8)).validate(),
            Err("compaction.rollup_after_days must be within 1..=400 and at most \
                 compaction.after_days (7), got 8"
                .into())
        );
        assert!(with(Some(7), Some(0)).validate().is_err());
        assert_eq!(with(Some(400), Some(400)).validate(), Ok(()));
        assert!(with(Some(400), Some(401)).validate().is_err());
        assert_eq!(
            with(Some(7), None).rollup_age_days(),
            None,
            "with the raw rows only"
        );
        assert_eq!(with(None, Some(1)).rollup_age_days(), None, "off with compaction");
        let mut off = CompactionSchedule::new(with(None, Some(1)), at("2026-06-20T12:00:00Z"));
        assert_eq!(off.poll(at("2026-07-20T12:00:00Z"), 1, false, &retention()), None);
    }

    #[test]
    fn minute_rollups_walk_their_own_cursor_at_their_age_oldest_day_first() {
        let now = at("2026-06-20T12:00:00Z");
        let mut s = CompactionSchedule::new(
            CompactionConfig {
                first_run_delay_ms: 0,
                ..CompactionConfig::default()
            },
            now,
        );
        // Minute rollups kept from 06-11 (9 days), newest old enough at 1 day: 06-18. The raw
        // rows as before (through 06-12); a tie goes to the rows.
        use CompactionTarget::*;
        use RetentionClass::*;
        let day = |d: u32| format!("2026-06-{d:02}");
        let mut expected = vec![
            (Rows(Measurement), day(11)),
            (MinuteRollups, day(11)),
            (Rows(Measurement), day(12)),
            (Rows(State), day(12)),
        ];
        expected.extend((12..=18).map(|d| (MinuteRollups, day(d))));
        assert_eq!(walk(&mut s, now), expected);
        // A day later: one more day of each.
        let tomorrow = at("2026-06-21T12:00:00Z");
        assert_eq!(
            walk(&mut s, tomorrow),
            [
                (Rows(Measurement), day(13)),
                (Rows(State), day(13)),
                (MinuteRollups, day(19)),
            ]
        );
    }

    #[test]
    fn a_rollup_request_shares_the_one_in_flight_the_hold_and_the_retry() {
        let now = at("2026-06-20T12:00:00Z");
        let mut s = CompactionSchedule::new(
            CompactionConfig {
                first_run_delay_ms: 0,
                after_days: Some(9),
                ..CompactionConfig::default()
            },
            now,
        );
        // Raw rows: nothing is 9 days old and kept; the rollups from 06-11.
        assert_eq!(s.poll(now, 1, true, &retention()), None, "ingest behind");
        let request = s.poll(now, 1, false, &retention()).expect("due");
        assert_eq!(
            (request.target, request.day, request.after_days),
            (CompactionTarget::MinuteRollups, at("2026-06-11T00:00:00Z"), 1)
        );
        assert_eq!(s.in_flight_target(), Some(CompactionTarget::MinuteRollups));
        assert_eq!(s.poll(now, 1, false, &retention()), None, "one in flight at most");
        s.on_compacted(now, CompactionOutcome::Failed);
        assert_eq!(s.next_deadline(), Some(now.add_ms(60_000)), "a failure retries");
        let retry_at = now.add_ms(60_000);
        let retry = s.poll(retry_at, 1, false, &retention()).expect("retried");
        assert_eq!(retry.day, request.day, "the same day");
        s.on_compacted(retry_at, CompactionOutcome::Done { rows: 1_440 });
        assert_eq!(
            s.poll(retry_at.add_ms(999), 1, false, &retention()),
            None,
            "a pause"
        );
        let next = s
            .poll(retry_at.add_ms(1_000), 1, false, &retention())
            .expect("the next day");
        assert_eq!(
            (next.target, next.day),
            (CompactionTarget::MinuteRollups, at("2026-06-12T00:00:00Z"))
        );
    }
}
