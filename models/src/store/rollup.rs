//! The memory model's rollups: the same definition as `migrations/0004_rollups.sql` (ingest
//! spec, "Retention and rollups"), evaluated over the model's class tables.
//!
//! Owns: the 1-minute and 1-hour tables, the refresh watermark and the late-row invalidations
//! of the model. A step is two actions, as in the SQL: [`Rollups::claim`] moves `claimed_to`
//! and claims the invalidations present, [`Rollups::apply`] recomputes the claim and moves
//! `refreshed_to`. Each runs under the model's one mutex; commits may land between them, and a
//! crash between them leaves the claim open for the next step to finish first (the simulator
//! crashes there on purpose).
//!
//! Also owns the compacted days of the minute table (`migrations/0016_rollup_compaction.sql`):
//! [`Rollups::compact_minute_day`] moves a day's hot minute rows into chunks, one per (point,
//! class), column by column; every read merges them back with the hot rows winning; a recompute
//! takes the minutes it rewrites out of the chunks as it takes them out of the hot table (the
//! SQL hides them behind a mask: the same answers).

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap;

use sentinel_core::{Micros, ObsRow, Quality, RetentionClass};

use super::retention::RetentionState;
use sentinel_ports::{
    RetainedTable, RollupGrain, RollupRefresh, RollupRow, RollupStep, RollupStepLimits, RollupWatermark,
    StoreError,
};

/// Per class table, its hot rows and its compacted rows (decoded): every row a rollup reads.
pub(super) type ClassRows<'a> = [(&'a [ObsRow], &'a [ObsRow]); 3];

/// The rollup half of the modelled database.
#[derive(Clone, Default)]
pub(super) struct Rollups {
    minute: BTreeMap<(String, Micros), RollupRow>,
    /// The compacted days of the minute table, by the day's UTC midnight.
    minute_compacted: BTreeMap<Micros, BTreeMap<(String, RetentionClass), RollupChunk>>,
    hour: BTreeMap<(String, Micros), RollupRow>,
    watermark: Option<RollupWatermark>,
    /// Minutes of rows committed below `claimed_to` since the last step, in commit order.
    invalidations: Vec<Micros>,
    /// How many of the first `invalidations` the open claim holds (`claimed_invalidation`
    /// in SQL: `None` when it holds none).
    claimed_invalidations: Option<usize>,
    /// Planted bug (simulator tests only): the statement trigger records nothing.
    pub(super) ignore_late_rows: bool,
    /// Planted bug (simulator tests only): a compaction of a day's minute rollups leaves the
    /// day's first bucket out of its chunks.
    pub(super) compaction_drops_bucket: bool,
}

/// One compacted (point, class, day) of the minute table: its buckets in order, column by
/// column, as `rollup_1m_compact` holds them.
#[derive(Clone, Debug, Default)]
struct RollupChunk {
    /// Minutes from the day's start.
    minutes: Vec<u16>,
    count: Vec<u64>,
    live_count: Vec<u64>,
    sum: Vec<Option<f64>>,
    min: Vec<Option<f64>>,
    max: Vec<Option<f64>>,
}

impl RollupChunk {
    fn push(&mut self, day: Micros, row: &RollupRow) {
        let minute = (row.bucket.0 - day.0) / MINUTE_US;
        assert!(
            (0..1440).contains(&minute) && row.bucket.0 % MINUTE_US == 0,
            "a compacted bucket is a minute of its day"
        );
        assert!(
            self.minutes.last().is_none_or(|m| i64::from(*m) < minute),
            "buckets in order"
        );
        self.minutes.push(minute as u16);
        self.count.push(row.count);
        self.live_count.push(row.live_count);
        self.sum.push(row.sum);
        self.min.push(row.min);
        self.max.push(row.max);
    }

    fn rows<'a>(
        &'a self,
        day: Micros,
        point_id: &'a str,
        class: RetentionClass,
    ) -> impl Iterator<Item = RollupRow> + 'a {
        (0..self.minutes.len()).map(move |i| RollupRow {
            point_id: point_id.to_owned(),
            bucket: Micros(day.0 + i64::from(self.minutes[i]) * MINUTE_US),
            class,
            count: self.count[i],
            live_count: self.live_count[i],
            sum: self.sum[i],
            min: self.min[i],
            max: self.max[i],
        })
    }

    /// The model's estimate of a chunk's bytes (PostgreSQL reports its own): 2 per minute, 8
    /// per count, 8 per sum, min and max.
    fn bytes(&self) -> u64 {
        64 + self.minutes.len() as u64 * (2 + 2 * 8 + 3 * 8)
    }
}

/// A hot minute rollup row's bytes with its indexes, as the model reports them
/// (`sentinel_store_pg::ROLLUP_ROW_BYTES`).
const HOT_ROLLUP_ROW_BYTES: u64 = 231;

/// What [`Rollups::compact_minute_day`] did: hot buckets compacted, chunks after, bytes before
/// and after.
pub(super) struct MinuteDayCompacted {
    pub buckets: u64,
    pub chunks: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// Longest on-demand refresh, as in `sentinel_rollup_refresh_range`.
const REFRESH_RANGE_MAX_US: i64 = 400 * sentinel_core::time::US_PER_DAY;

const MINUTE_US: i64 = 60 * sentinel_core::time::US_PER_S;

impl Rollups {
    fn table(&mut self, grain: RollupGrain) -> &mut BTreeMap<(String, Micros), RollupRow> {
        match grain {
            RollupGrain::Minute => &mut self.minute,
            RollupGrain::Hour => &mut self.hour,
        }
    }

    /// The statement trigger: called with the rows a commit actually inserted.
    pub(super) fn rows_inserted<'a>(&mut self, rows: impl Iterator<Item = &'a ObsRow>) {
        self.rows_changed(rows.map(|r| r.observed_at));
    }

    /// Rows observed at these instants were inserted or rewritten: their minutes below
    /// `claimed_to` are invalidated. Before the first step every row is invalidated: the first
    /// step recomputes them.
    pub(super) fn rows_changed(&mut self, observed_at: impl Iterator<Item = Micros>) {
        if self.ignore_late_rows {
            return;
        }
        let mark = self.watermark.map(|w| w.claimed_to);
        let minutes: BTreeSet<Micros> = observed_at
            .filter(|at| mark.is_none_or(|mark| *at < mark))
            .map(|at| RollupGrain::Minute.floor(at))
            .collect();
        self.invalidations.extend(minutes);
    }

    /// `sentinel_rollup_recompute`: `[from, to)` on `grain`'s boundaries.
    fn recompute(
        &mut self,
        grain: RollupGrain,
        (from, to): (Micros, Micros),
        tables: ClassRows<'_>,
        registry: &PointRollupInfo,
        retention: &mut RetentionState,
    ) -> u64 {
        debug_assert!(grain.floor(from) == from && grain.floor(to) == to && from <= to);
        retention.ensure_rollup_range(grain, from, to);
        self.recompute_where(
            grain,
            (from, to),
            |bucket| bucket >= from && bucket < to,
            tables,
            registry,
            retention,
        )
    }

    /// Recomputes every bucket of `grain` that `chosen` picks, in one pass over the rows (the
    /// simulator runs this often: a step's range and its invalidated buckets go together).
    /// `span` bounds every bucket `chosen` picks (`span.0 <= bucket < span.1`, both on `grain`'s
    /// boundaries): a row observed outside it is passed over before its bucket is computed
    /// (most rows are, at every step).
    /// Clipped as in migration 0005: a class's buckets before its raw table's retention mark are
    /// neither removed nor recomputed (their raw rows are gone), and nothing is written below
    /// the rollup table's own mark.
    fn recompute_where(
        &mut self,
        grain: RollupGrain,
        span: (Micros, Micros),
        chosen: impl Fn(Micros) -> bool,
        tables: ClassRows<'_>,
        registry: &PointRollupInfo,
        retention: &RetentionState,
    ) -> u64 {
        debug_assert!(grain.floor(span.0) == span.0 && grain.floor(span.1) == span.1);
        // On `grain`'s boundaries, `span.0 <= floor(t) < span.1` exactly when `span.0 <= t <
        // span.1`: the span's test is the bucket's, without the bucket.
        let in_span = |at: Micros| at >= span.0 && at < span.1;
        let chosen = |bucket: Micros| {
            let picked = chosen(bucket);
            debug_assert!(!picked || in_span(bucket), "a chosen bucket lies in the span");
            picked
        };
        let clip = RetentionClass::ALL.map(|c| retention.kept_from(RetainedTable::Raw(c)));
        let clip_own = retention.kept_from(RetainedTable::Rollup(grain));
        if grain == RollupGrain::Minute {
            // What the SQL's mask hides (migration 0016): the compacted elements the DELETE
            // would have taken, had they been hot.
            for (day, chunks) in &mut self.minute_compacted {
                for ((point, class), chunk) in chunks.iter_mut() {
                    let keep: Vec<bool> = chunk
                        .minutes
                        .iter()
                        .map(|m| {
                            let bucket = Micros(day.0 + i64::from(*m) * MINUTE_US);
                            !(chosen(bucket) && bucket >= clip[class.index()])
                        })
                        .collect();
                    if keep.iter().all(|k| *k) {
                        continue;
                    }
                    let mut kept = RollupChunk::default();
                    for (row, keep) in chunk.rows(*day, point, *class).zip(keep) {
                        if keep {
                            kept.push(*day, &row);
                        }
                    }
                    *chunk = kept;
                }
            }
        }
        let table = self.table(grain);
        table.retain(|(_, bucket), row| {
            !(in_span(*bucket) && chosen(*bucket) && *bucket >= clip[row.class.index()])
        });
        // Keyed by the rows' point ids, each turned into the table's `String` once per bucket,
        // not once per row; hashed, not ordered: every bucket built goes into the ordered
        // table below, so the order they are built in does not matter, and a string
        // comparison at every tree level for every row in the span did.
        let mut built: FxHashMap<(&str, Micros), RollupRow> = FxHashMap::default();
        for class in RetentionClass::ALL {
            let (hot, compacted) = tables[class.index()];
            for row in hot.iter().chain(compacted) {
                if !in_span(row.observed_at) {
                    continue;
                }
                let bucket = grain.floor(row.observed_at);
                if !chosen(bucket) || row.observed_at < clip[class.index()] {
                    continue;
                }
                let entry = built
                    .entry((&*row.point_id, bucket))
                    .or_insert_with(|| RollupRow {
                        point_id: row.point_id.to_string(),
                        bucket,
                        class,
                        count: 0,
                        live_count: 0,
                        sum: None,
                        min: None,
                        max: None,
                    });
                // A point the registry does not name keeps the first of its rows' class names.
                if class.as_str() < entry.class.as_str() {
                    entry.class = class;
                }
                entry.count += 1;
                if row.quality == Quality::Live {
                    entry.live_count += 1;
                    if let Some(v) = row.value.as_ref().and_then(|v| v.num()) {
                        entry.sum = Some(entry.sum.unwrap_or(0.0) + v);
                        entry.min = Some(entry.min.map_or(v, |m| m.min(v)));
                        entry.max = Some(entry.max.map_or(v, |m| m.max(v)));
                    }
                }
            }
        }
        built.retain(|(_, bucket), _| *bucket >= clip_own);
        let written = built.len() as u64;
        for ((point, bucket), mut row) in built {
            let key = (point.to_string(), bucket);
            let (safe, class) = registry.get(&row.point_id).copied().unwrap_or((false, None));
            if let Some(class) = class {
                row.class = class;
            }
            // agg_safe is enforced here, in the refresh, whatever the rows hold.
            if !safe {
                row.sum = None;
                row.min = None;
                row.max = None;
            }
            table.insert(key, row);
        }
        written
    }

    pub(super) fn refresh_range(
        &mut self,
        (from, to): (Micros, Micros),
        tables: ClassRows<'_>,
        registry: &PointRollupInfo,
        retention: &mut RetentionState,
    ) -> Result<RollupRefresh, StoreError> {
        if from >= to || to.0 - from.0 > REFRESH_RANGE_MAX_US {
            return Err(StoreError::Other(format!(
                "a rollup refresh needs a non-empty range of at most 400 days, got [{from}, {to})"
            )));
        }
        let minute_range = (RollupGrain::Minute.floor(from), RollupGrain::Minute.ceil(to));
        let hour_range = (RollupGrain::Hour.floor(from), RollupGrain::Hour.ceil(to));
        let minute_buckets = self.recompute(RollupGrain::Minute, minute_range, tables, registry, retention);
        let hour_buckets = self.recompute(RollupGrain::Hour, hour_range, tables, registry, retention);
        Ok(RollupRefresh {
            minute_range,
            minute_buckets,
            hour_range,
            hour_buckets,
        })
    }

    /// `sentinel_rollup_claim`: claims `[refreshed_to, claimed_to)` with `claimed_to` at most
    /// `closed_before` (floored to a minute) and `step_minutes_max` past `refreshed_to`, and at
    /// most `invalidations_max` invalidations. An open claim (a crash between the halves) is
    /// kept as it is: the next apply finishes it first.
    pub(super) fn claim(
        &mut self,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<(), StoreError> {
        if !(1..=1440).contains(&limits.step_minutes_max)
            || !(1..=100_000).contains(&limits.invalidations_max)
        {
            return Err(StoreError::Other(
                "rollup step limits: step_minutes_max within 1..1440, invalidations_max within 1..100000"
                    .into(),
            ));
        }
        if let Some(w) = self.watermark
            && (w.claimed_to > w.refreshed_to || self.claimed_invalidations.is_some())
        {
            return Ok(());
        }
        let closed = RollupGrain::Minute.floor(closed_before);
        let claimed = self.invalidations.len().min(limits.invalidations_max as usize);
        self.claimed_invalidations = (claimed > 0).then_some(claimed);
        let w = match self.watermark {
            // The first claim starts the marks at `closed` and claims what every earlier row
            // left (before the first step, every row leaves an invalidation).
            None => RollupWatermark {
                refreshed_from: closed,
                refreshed_to: closed,
                claimed_to: closed,
            },
            Some(w) => {
                let step_end = Micros(w.refreshed_to.0 + i64::from(limits.step_minutes_max) * MINUTE_US);
                RollupWatermark {
                    claimed_to: w.refreshed_to.max(closed.min(step_end)),
                    ..w
                }
            }
        };
        debug_assert!(w.refreshed_from <= w.refreshed_to && w.refreshed_to <= w.claimed_to);
        self.watermark = Some(w);
        Ok(())
    }

    /// `sentinel_rollup_apply`: recomputes the claim — 1m buckets over the range claimed and
    /// the claimed invalidations' minutes, 1h buckets that closed in the range and the closed
    /// hours of claimed invalidations — then moves `refreshed_to` up to `claimed_to`.
    pub(super) fn apply(
        &mut self,
        tables: ClassRows<'_>,
        registry: &PointRollupInfo,
        retention: &mut RetentionState,
    ) -> Result<RollupStep, StoreError> {
        let Some(w) = self.watermark else {
            return Err(StoreError::Other("a rollup apply with no claim ever made".into()));
        };
        let claimed = self.claimed_invalidations.take().unwrap_or(0);
        debug_assert!(claimed <= self.invalidations.len());
        let minutes: BTreeSet<Micros> = self.invalidations.drain(..claimed).collect();
        let claimed_to = w.claimed_to;

        // The range moved over, and the claimed invalidations: every minute in either, and
        // every hour that closed in the range or holds an invalidated minute and is closed.
        let advanced = (w.refreshed_to, claimed_to);
        let hours = (
            RollupGrain::Hour.floor(w.refreshed_to),
            RollupGrain::Hour.floor(claimed_to),
        );
        let invalidated_hours: BTreeSet<Micros> = minutes
            .iter()
            .map(|m| RollupGrain::Hour.floor(*m))
            .filter(|h| Micros(h.0 + RollupGrain::Hour.width_us()) <= claimed_to)
            .collect();
        // The partitions the SQL's per-range recomputes make.
        retention.ensure_rollup_range(RollupGrain::Minute, advanced.0, advanced.1);
        retention.ensure_rollup_range(RollupGrain::Hour, hours.0, hours.1);
        for m in &minutes {
            retention.ensure_rollup_range(RollupGrain::Minute, *m, Micros(m.0 + MINUTE_US));
        }
        for h in &invalidated_hours {
            retention.ensure_rollup_range(RollupGrain::Hour, *h, Micros(h.0 + RollupGrain::Hour.width_us()));
        }
        // The bounds of what each grain recomputes (empty spans when nothing is).
        let span_of = |range: (Micros, Micros), extra: &BTreeSet<Micros>, width_us: i64| {
            let range = (range.0 < range.1).then_some(range);
            let extra = extra
                .first()
                .zip(extra.last())
                .map(|(first, last)| (*first, Micros(last.0 + width_us)));
            match (range, extra) {
                (Some(a), Some(b)) => (a.0.min(b.0), a.1.max(b.1)),
                (Some(a), None) | (None, Some(a)) => a,
                (None, None) => (Micros(0), Micros(0)),
            }
        };
        let minute_span = span_of(advanced, &minutes, MINUTE_US);
        let hour_range = if advanced.0 < advanced.1 {
            hours
        } else {
            (hours.0, hours.0)
        };
        let hour_span = span_of(hour_range, &invalidated_hours, RollupGrain::Hour.width_us());
        let mut written = self.recompute_where(
            RollupGrain::Minute,
            minute_span,
            |m| (m >= advanced.0 && m < advanced.1) || minutes.contains(&m),
            tables,
            registry,
            retention,
        );
        written += self.recompute_where(
            RollupGrain::Hour,
            hour_span,
            |h| (advanced.0 < advanced.1 && h >= hours.0 && h < hours.1) || invalidated_hours.contains(&h),
            tables,
            registry,
            retention,
        );
        let watermark = RollupWatermark {
            refreshed_from: w.refreshed_from,
            refreshed_to: claimed_to,
            claimed_to,
        };
        self.watermark = Some(watermark);
        Ok(RollupStep {
            watermark,
            minutes_advanced: ((claimed_to.0 - w.refreshed_to.0) / MINUTE_US) as u32,
            invalidated_minutes: minutes.len() as u32,
            buckets_written: written,
            more: !self.invalidations.is_empty(),
        })
    }

    /// Drops the buckets of `grain` in `[from, to)`: a dropped rollup partition (a minute
    /// day's compacted partition with it).
    pub(super) fn drop_range(&mut self, grain: RollupGrain, from: Micros, to: Micros) {
        if grain == RollupGrain::Minute {
            self.minute_compacted
                .retain(|day, _| !(*day >= from && *day < to));
        }
        self.table(grain)
            .retain(|(_, bucket), _| !(*bucket >= from && *bucket < to));
    }

    /// Every minute rollup row of the day starting at `day` as a read sees it: the hot rows,
    /// and the compacted elements no hot row replaces, ordered by (point, bucket).
    fn minute_day(&self, day: Micros) -> BTreeMap<(String, Micros), RollupRow> {
        let end = Micros(day.0 + sentinel_core::time::US_PER_DAY);
        let mut rows: BTreeMap<(String, Micros), RollupRow> = self
            .minute
            .iter()
            .filter(|((_, bucket), _)| *bucket >= day && *bucket < end)
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        if let Some(chunks) = self.minute_compacted.get(&day) {
            for ((point, class), chunk) in chunks {
                for row in chunk.rows(day, point, *class) {
                    rows.entry((row.point_id.clone(), row.bucket)).or_insert(row);
                }
            }
        }
        rows
    }

    /// `sentinel_compact_rollup_day` after its refusals (the caller's): what a read sees of the
    /// day's minute rollups becomes its chunks, one per (point, class), and the hot rows go.
    /// `None` when the day holds no hot minute row (nothing is written).
    pub(super) fn compact_minute_day(&mut self, day: Micros) -> Option<MinuteDayCompacted> {
        debug_assert!(day.0.rem_euclid(sentinel_core::time::US_PER_DAY) == 0);
        let end = Micros(day.0 + sentinel_core::time::US_PER_DAY);
        let hot = self
            .minute
            .keys()
            .filter(|(_, bucket)| *bucket >= day && *bucket < end)
            .count() as u64;
        if hot == 0 {
            return None;
        }
        let chunk_bytes = |chunks: Option<&BTreeMap<(String, RetentionClass), RollupChunk>>| -> u64 {
            chunks.map_or(0, |c| c.values().map(RollupChunk::bytes).sum())
        };
        let bytes_before = hot * HOT_ROLLUP_ROW_BYTES + chunk_bytes(self.minute_compacted.get(&day));
        let visible = self.minute_day(day);
        let mut chunks: BTreeMap<(String, RetentionClass), RollupChunk> = BTreeMap::new();
        let dropped = usize::from(self.compaction_drops_bucket);
        for ((point, _), row) in visible.iter().skip(dropped) {
            chunks
                .entry((point.clone(), row.class))
                .or_default()
                .push(day, row);
        }
        self.minute
            .retain(|(_, bucket), _| !(*bucket >= day && *bucket < end));
        let done = MinuteDayCompacted {
            buckets: hot,
            chunks: chunks.len() as u64,
            bytes_before,
            bytes_after: chunk_bytes(Some(&chunks)),
        };
        self.minute_compacted.insert(day, chunks);
        // Nothing lost (but the bucket a planted bug drops, for invariant 27 to find).
        debug_assert_eq!(
            self.minute_day(day).len() + dropped,
            visible.len(),
            "nothing lost"
        );
        Some(done)
    }

    /// `sentinel_rollup_recompute` over `[from, to)` on `grain`'s boundaries (a class move).
    pub(super) fn recompute_range(
        &mut self,
        grain: RollupGrain,
        range: (Micros, Micros),
        tables: ClassRows<'_>,
        registry: &PointRollupInfo,
        retention: &mut RetentionState,
    ) -> u64 {
        self.recompute(grain, range, tables, registry, retention)
    }

    pub(super) fn watermark(&self) -> Option<RollupWatermark> {
        self.watermark
    }

    pub(super) fn load(
        &self,
        grain: RollupGrain,
        (from, to): (Micros, Micros),
        point_id: Option<&str>,
    ) -> Vec<RollupRow> {
        let wanted =
            |r: &RollupRow| r.bucket >= from && r.bucket < to && point_id.is_none_or(|p| r.point_id == p);
        let table = match grain {
            RollupGrain::Minute if !self.minute_compacted.is_empty() => {
                // Hot and compacted (`rollup_1m_all`): the hot row wins.
                let mut rows: BTreeMap<(String, Micros), RollupRow> = self
                    .minute
                    .values()
                    .filter(|r| wanted(r))
                    .map(|r| ((r.point_id.clone(), r.bucket), r.clone()))
                    .collect();
                let first_day = Micros(from.0 - from.0.rem_euclid(sentinel_core::time::US_PER_DAY));
                for (day, chunks) in self.minute_compacted.range(first_day..to) {
                    for ((point, class), chunk) in chunks {
                        if point_id.is_some_and(|p| p != point) {
                            continue;
                        }
                        for row in chunk.rows(*day, point, *class).filter(|r| wanted(r)) {
                            rows.entry((row.point_id.clone(), row.bucket)).or_insert(row);
                        }
                    }
                }
                return rows
                    .into_values()
                    .take(sentinel_ports::ROLLUPS_LOAD_MAX)
                    .collect();
            }
            RollupGrain::Minute => &self.minute,
            RollupGrain::Hour => &self.hour,
        };
        table
            .values()
            .filter(|r| wanted(r))
            .take(sentinel_ports::ROLLUPS_LOAD_MAX)
            .cloned()
            .collect()
    }
}

/// Per point of the newest registry version: whether it is `agg_safe`, and its retention class.
pub(super) type PointRollupInfo = BTreeMap<String, (bool, Option<RetentionClass>)>;

/// What the refresh reads from the newest registry version's descriptors.
pub(super) fn rollup_info<'a>(descriptors: impl Iterator<Item = (&'a str, &'a str)>) -> PointRollupInfo {
    descriptors
        .map(|(point, canonical)| {
            let d = serde_json::from_str::<serde_json::Value>(canonical).ok();
            let safe = d
                .as_ref()
                .and_then(|d| d.get("agg_safe").and_then(serde_json::Value::as_bool))
                .unwrap_or(false);
            let class = d
                .as_ref()
                .and_then(|d| d.get("retention").and_then(serde_json::Value::as_str))
                .and_then(|c| RetentionClass::ALL.into_iter().find(|k| k.as_str() == c));
            (point.to_owned(), (safe, class))
        })
        .collect()
}
