//! The memory model's compacted days (issue 24 items 1 and 2): the same semantics as
//! `migrations/0015_compaction.sql`, over a representation of its own, so a read that forgets
//! compacted days misses their rows here as it would in PostgreSQL. PostgreSQL's narrow forms
//! (0015's, and 0017's values derived from natives) are exact by construction, so the model
//! keeps every value and native as it is and answers as they do without mirroring them.
//!
//! Owns: a class table's compacted days, each a map of chunks keyed by (point, hour of
//! `observed_at`, driver instance, source epoch) holding that chunk's rows column by column in
//! invariant 5's order, times and sequence numbers delta-encoded as PostgreSQL's chunks hold
//! them; encoding and decoding; and [`Model::compact_day`] (the fence, the refusals of
//! `sentinel_ports::check_compaction`, the day's rows and chunks encoded again together, the
//! `compaction` control event, all under the model's one mutex: one transaction; then the
//! day's minute rollups, `super::rollup::Rollups::compact_minute_day`, with their own event). The reads
//! see compacted rows through [`ClassTable::all_rows`]; reprocess updates a compacted row by
//! decoding its chunk, updating and encoding it again ([`ClassTable::update_compacted`]).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use sentinel_core::registry::PointIdx;
use sentinel_core::time::US_PER_DAY;
use sentinel_core::{CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass};
use sentinel_ports::{
    Compaction, CompactionRequest, RollupCompaction, RollupCompactionRequest, StoreError, StoredControlEvent,
    check_compaction, check_rollup_compaction, day_name,
};

use super::{ClassTable, Model};

const US_PER_HOUR: i64 = 3_600_000_000;

/// A hot row's bytes with its indexes, as the model reports them in a compaction's
/// `bytes_before`: `sentinel_store_pg`'s `RAW_ROW_BYTES` as measured before migration 0020
/// (BENCHMARKS.md "The hot row's bytes"; 184 B since 0020 and 0021, BENCHMARKS.md "Both together"). Kept
/// at 235 so the simulator's traces, whose compaction events carry it, stay those of the
/// seeds measured against b7d8b61 (issue 24 item 5); no check reads the figure.
const HOT_ROW_BYTES: u64 = 235;

/// (point id, hour start µs, driver instance, source epoch): a chunk's primary key within its day.
type ChunkKey = (Arc<str>, i64, Arc<str>, u32);

/// One chunk: the rows of one point, instance and source epoch observed in one hour and
/// ingested on one day, column by column.
#[derive(Clone, Debug, Default)]
pub(super) struct Chunk {
    points: Vec<PointIdx>,
    /// µs; the first from the hour's start, each next from the previous.
    observed_d: Vec<i64>,
    /// `ingested_at − observed_at`, µs.
    ingested_lag: Vec<i64>,
    /// `device_time − observed_at`, µs.
    device_lag: Vec<Option<i64>>,
    values: Vec<Option<CanonicalValue>>,
    native_num: Vec<Option<f64>>,
    native_text: Vec<Option<Box<str>>>,
    unit_native: Vec<Option<Arc<str>>>,
    quality: Vec<Quality>,
    reason: Vec<Option<Cow<'static, str>>>,
    detail: Vec<Option<Box<str>>>,
    changed: Vec<bool>,
    registry_version: Vec<i32>,
    /// The source seq, the first whole, each next from the previous.
    seq_d: Vec<i64>,
    skew_flagged: Vec<bool>,
    tags: Vec<DeliveryTag>,
    applied: Vec<Option<i64>>,
}

impl Chunk {
    fn len(&self) -> usize {
        self.observed_d.len()
    }

    /// The model's estimate of a chunk's bytes: 8 per number column entry, a byte per flag,
    /// the text's length. Reported as `bytes_after`; PostgreSQL reports its own.
    fn bytes(&self) -> u64 {
        let n = self.len() as u64;
        let text = |t: &Option<Box<str>>| t.as_ref().map_or(0, |t| t.len() as u64);
        64 + n * (8 * 5 + 4 + 3)
            + self.native_text.iter().map(text).sum::<u64>()
            + self.detail.iter().map(text).sum::<u64>()
    }
}

/// A compacted day of one class table.
pub(super) type CompactedDay = BTreeMap<ChunkKey, Chunk>;

fn hour_of(at: Micros) -> i64 {
    at.0.div_euclid(US_PER_HOUR) * US_PER_HOUR
}

fn chunk_key(row: &ObsRow) -> ChunkKey {
    (
        row.point_id.clone(),
        hour_of(row.observed_at),
        row.key.driver_instance.clone(),
        row.key.source_epoch,
    )
}

/// Encodes rows (with their `applied`) into the chunks of one day.
fn encode(mut rows: Vec<(ObsRow, Option<i64>)>) -> CompactedDay {
    rows.sort_by(|a, b| {
        (
            chunk_key(&a.0),
            a.0.observed_at,
            a.0.ingested_at,
            a.0.key.source_seq,
        )
            .cmp(&(
                chunk_key(&b.0),
                b.0.observed_at,
                b.0.ingested_at,
                b.0.key.source_seq,
            ))
    });
    let mut day = CompactedDay::new();
    // The previous row's observed_at and seq within the current chunk (rows come chunk by chunk).
    let mut previous: Option<(ChunkKey, i64, i64)> = None;
    for (row, applied) in rows {
        let key = chunk_key(&row);
        let (previous_observed, previous_seq) = match &previous {
            Some((k, observed, seq)) if *k == key => (*observed, *seq),
            _ => (key.1, 0),
        };
        previous = Some((key.clone(), row.observed_at.0, row.key.source_seq as i64));
        let chunk = day.entry(key).or_default();
        chunk.points.push(row.point);
        chunk.observed_d.push(row.observed_at.0 - previous_observed);
        chunk.ingested_lag.push(row.ingested_at.0 - row.observed_at.0);
        chunk
            .device_lag
            .push(row.device_time.map(|d| d.0 - row.observed_at.0));
        chunk.values.push(row.value);
        chunk.native_num.push(row.native_num);
        chunk.native_text.push(row.native_text);
        chunk.unit_native.push(row.unit_native);
        chunk.quality.push(row.quality);
        chunk.reason.push(row.reason);
        chunk.detail.push(row.detail);
        chunk.changed.push(row.changed);
        chunk.registry_version.push(row.registry_version);
        // Keys are within the bigint range (`check_key_range` at commit).
        chunk.seq_d.push(row.key.source_seq as i64 - previous_seq);
        chunk.skew_flagged.push(row.skew_flagged);
        chunk.tags.push(row.tag);
        chunk.applied.push(applied);
    }
    day
}

/// Decodes one chunk into its rows, in invariant 5's order, with their `applied`.
fn decode(class: RetentionClass, key: &ChunkKey, chunk: &Chunk, out: &mut Vec<(ObsRow, Option<i64>)>) {
    let (point_id, hour, instance, epoch) = key;
    let mut observed = *hour;
    let mut seq = 0i64;
    for i in 0..chunk.len() {
        observed += chunk.observed_d[i];
        seq += chunk.seq_d[i];
        out.push((
            ObsRow {
                point: chunk.points[i],
                point_id: point_id.clone(),
                class,
                ingested_at: Micros(observed + chunk.ingested_lag[i]),
                observed_at: Micros(observed),
                device_time: chunk.device_lag[i].map(|d| Micros(observed + d)),
                value: chunk.values[i].clone(),
                native_num: chunk.native_num[i],
                native_text: chunk.native_text[i].clone(),
                unit_native: chunk.unit_native[i].clone(),
                quality: chunk.quality[i],
                reason: chunk.reason[i].clone(),
                detail: chunk.detail[i].clone(),
                changed: chunk.changed[i],
                registry_version: chunk.registry_version[i],
                key: ObsKey {
                    driver_instance: instance.clone(),
                    source_epoch: *epoch,
                    source_seq: seq as u64,
                },
                skew_flagged: chunk.skew_flagged[i],
                tag: chunk.tags[i],
            },
            chunk.applied[i],
        ));
    }
}

fn decode_day(class: RetentionClass, day: &CompactedDay) -> Vec<(ObsRow, Option<i64>)> {
    let mut out = Vec::new();
    for (key, chunk) in day {
        decode(class, key, chunk, &mut out);
    }
    out
}

/// A class table's rows as a read sees them: the hot rows (borrowed), then the compacted
/// days' rows (decoded).
pub(super) struct AllRows<'a> {
    pub(super) hot: &'a [ObsRow],
    pub(super) compacted: Vec<ObsRow>,
}

impl<'a> AllRows<'a> {
    pub(super) fn iter(&self) -> impl Iterator<Item = &ObsRow> + Clone {
        self.hot.iter().chain(&self.compacted)
    }

    pub(super) fn into_owned(self) -> Vec<ObsRow> {
        let mut all = Vec::with_capacity(self.hot.len() + self.compacted.len());
        all.extend_from_slice(self.hot);
        all.extend(self.compacted);
        all
    }

    /// Both parts, as the rollups take them.
    pub(super) fn parts(&self) -> (&[ObsRow], &[ObsRow]) {
        (self.hot, &self.compacted)
    }
}

impl ClassTable {
    /// Every row of the table, hot then compacted (decoded), as `observation_<class>_all`
    /// reads them. The hot rows are borrowed, never copied: only the compacted days are
    /// decoded (cloning every hot row whenever a day was compacted was 2 % of a seed).
    pub(super) fn all_rows(&self) -> AllRows<'_> {
        AllRows {
            hot: &self.rows,
            compacted: if self.compacted.is_empty() {
                Vec::new()
            } else {
                self.compacted_rows().into_iter().map(|(row, _)| row).collect()
            },
        }
    }

    /// Every compacted row with its `applied`, decoded, day by day.
    pub(super) fn compacted_rows(&self) -> Vec<(ObsRow, Option<i64>)> {
        let mut out = Vec::new();
        for (class, day) in self.compacted.values() {
            out.extend(decode_day(*class, day));
        }
        out
    }

    /// Whether a compacted row holds the three-column key `instance`/`epoch`/`seq` with an
    /// `ingested_at` in `[from, to)`: the late-duplicate check's probe of the compacted days
    /// (`sentinel_ports::LATE_DUPLICATE_AFTER_MS`), as the commit statement's compacted probe is in PostgreSQL.
    pub(super) fn compacted_key_within(
        &self,
        instance: &str,
        epoch: u32,
        seq: u64,
        from: Micros,
        to: Micros,
    ) -> bool {
        debug_assert!(from < to, "an empty probe range");
        self.compacted.values().any(|(class, day)| {
            day.iter()
                .filter(|(key, _)| &*key.2 == instance && key.3 == epoch)
                .any(|(key, chunk)| {
                    let mut rows = Vec::with_capacity(chunk.len());
                    decode(*class, key, chunk, &mut rows);
                    rows.iter().any(|(row, _)| {
                        row.key.source_seq == seq && row.ingested_at >= from && row.ingested_at < to
                    })
                })
        })
    }

    /// How many rows the compacted days hold.
    pub(super) fn compacted_len(&self) -> usize {
        self.compacted
            .values()
            .flat_map(|(_, day)| day.values())
            .map(Chunk::len)
            .sum()
    }

    /// Reprocess on a compacted row: decodes the chunk holding the row `key`/`ingested_at` of
    /// `point_id` observed at `observed_at`, lets `update` change it, and encodes the chunk
    /// again. Returns the row as it was, `None` when no chunk holds it.
    pub(super) fn update_compacted(
        &mut self,
        point_id: &str,
        observed_at: Micros,
        key: &ObsKey,
        ingested_at: Micros,
        update: impl FnOnce(&mut ObsRow),
    ) -> Option<ObsRow> {
        self.forget_heads();
        let day_index = ingested_at.day();
        let (class, day) = self.compacted.get_mut(&day_index)?;
        let chunk_key: ChunkKey = (
            Arc::from(point_id),
            hour_of(observed_at),
            key.driver_instance.clone(),
            key.source_epoch,
        );
        let chunk = day.get(&chunk_key)?;
        let mut rows = Vec::with_capacity(chunk.len());
        decode(*class, &chunk_key, chunk, &mut rows);
        let position = rows
            .iter()
            .position(|(r, _)| r.key == *key && r.ingested_at == ingested_at)?;
        let before = rows[position].0.clone();
        update(&mut rows[position].0);
        day.remove(&chunk_key);
        day.extend(encode(rows));
        Some(before)
    }

    /// Every compacted row of `point_id`, decoded (what a class move would take out).
    pub(super) fn compacted_point_rows(&self, point_id: &str) -> Vec<ObsRow> {
        let mut out = Vec::new();
        for (class, day) in self.compacted.values() {
            for (key, chunk) in day.iter().filter(|(k, _)| &*k.0 == point_id) {
                decode(*class, key, chunk, &mut out);
            }
        }
        out.into_iter().map(|(row, _)| row).collect()
    }

    /// Takes every compacted row of `point_id` out (a class move), with its `applied`.
    pub(super) fn take_compacted_point(&mut self, point_id: &str) -> Vec<(ObsRow, Option<i64>)> {
        self.forget_heads();
        let mut out = Vec::new();
        for (class, day) in self.compacted.values_mut() {
            let keys: Vec<ChunkKey> = day.keys().filter(|k| &*k.0 == point_id).cloned().collect();
            for key in keys {
                if let Some(chunk) = day.remove(&key) {
                    decode(*class, &key, &chunk, &mut out);
                }
            }
        }
        self.compacted.retain(|_, (_, day)| !day.is_empty());
        out
    }

    /// Drops the compacted rows ingested in `[from, to)` (a retention drop of their day).
    pub(super) fn drop_compacted(&mut self, from: Micros, to: Micros) {
        self.forget_heads();
        self.compacted
            .retain(|day, _| !(day * US_PER_DAY >= from.0 && day * US_PER_DAY < to.0));
    }
}

impl Model {
    /// `sentinel_compact_day`: see the module doc and `Store::compact_day`.
    pub(super) fn compact_day(
        &mut self,
        epoch: u32,
        start: Option<u64>,
        request: &CompactionRequest<'_>,
    ) -> Result<Compaction, StoreError> {
        self.maintenance_fence(epoch, start)?;
        check_compaction(request)?;
        let day_index = request.day.day();
        let in_day = |at: Micros| at.day() == day_index;
        let class = request.class;
        let table = &mut self.tables[class.index()];
        table.forget_heads();
        let hot = table.rows.iter().filter(|r| in_day(r.ingested_at)).count();
        if hot == 0 {
            let chunks = table.compacted.get(&day_index).map_or(0, |(_, d)| d.len() as u64);
            let rollups = self.compact_rollup_day(epoch, request.day, request.now, request.principal);
            return Ok(Compaction {
                rows: 0,
                chunks,
                bytes_before: 0,
                bytes_after: 0,
                seq: None,
                rollups,
            });
        }
        let day_bytes = |table: &ClassTable, hot_rows: usize| -> u64 {
            hot_rows as u64 * HOT_ROW_BYTES
                + table
                    .compacted
                    .get(&day_index)
                    .map_or(0, |(_, d)| d.values().map(Chunk::bytes).sum())
        };
        let bytes_before = day_bytes(table, hot);
        let mut day_rows = Vec::with_capacity(hot);
        let mut kept_rows = Vec::with_capacity(table.rows.len() - hot);
        let mut kept_applied = Vec::with_capacity(table.rows.len() - hot);
        for (row, applied) in std::mem::take(&mut table.rows)
            .into_iter()
            .zip(std::mem::take(&mut table.applied))
        {
            if in_day(row.ingested_at) {
                day_rows.push((row, applied));
            } else {
                kept_rows.push(row);
                kept_applied.push(applied);
            }
        }
        table.rows = kept_rows;
        table.applied = kept_applied;
        // The hot unique index no longer holds the day's keys (as the truncated partition's
        // does not): the stream refusal is what keeps a compacted key from coming again.
        table.keys.retain(|k| !in_day(k.3));
        if let Some((_, existing)) = table.compacted.remove(&day_index) {
            day_rows.extend(decode_day(class, &existing));
        }
        if self.compaction_drops_detail {
            for (row, _) in &mut day_rows {
                row.detail = None;
            }
        }
        let encoded = encode(day_rows);
        let chunks = encoded.len() as u64;
        table.compacted.insert(day_index, (class, encoded));
        let bytes_after = day_bytes(table, 0);
        let seq = self.control_events.last().map_or(1, |e| e.seq + 1);
        let registry_version = self.registry_versions.last().map_or(0, |v| v.version);
        let mut done = Compaction {
            rows: hot as u64,
            chunks,
            bytes_before,
            bytes_after,
            seq: Some(seq),
            rollups: RollupCompaction::default(),
        };
        self.control_events.push(StoredControlEvent {
            seq,
            occurred_at: request.now,
            kind: sentinel_core::ControlKind::Compaction.as_str().to_owned(),
            point_id: None,
            principal: request.principal.to_owned(),
            core_epoch: epoch,
            payload: compaction_payload(class, request.day, &done),
            registry_version,
        });
        done.rollups = self.compact_rollup_day(epoch, request.day, request.now, request.principal);
        Ok(done)
    }

    /// `sentinel_compact_rollup_day` in its own transaction (`Store::compact_rollup_day`): the
    /// fence, the refusals of `sentinel_ports::check_rollup_compaction`, then as below.
    pub(super) fn compact_rollup_day_alone(
        &mut self,
        epoch: u32,
        start: Option<u64>,
        request: &RollupCompactionRequest<'_>,
    ) -> Result<RollupCompaction, StoreError> {
        self.maintenance_fence(epoch, start)?;
        check_rollup_compaction(request)?;
        Ok(self.compact_rollup_day(epoch, request.day, request.now, request.principal))
    }

    /// `sentinel_compact_rollup_day`, after the class's rows in the same transaction (the
    /// refusals were checked for both), or alone: the day's minute rollups into chunks, and
    /// their own `compaction` event when the day held hot ones.
    fn compact_rollup_day(
        &mut self,
        epoch: u32,
        day: Micros,
        now: Micros,
        principal: &str,
    ) -> RollupCompaction {
        let Some(done) = self.rollups.compact_minute_day(day) else {
            return RollupCompaction::default();
        };
        let seq = self.control_events.last().map_or(1, |e| e.seq + 1);
        let registry_version = self.registry_versions.last().map_or(0, |v| v.version);
        let done = RollupCompaction {
            buckets: done.buckets,
            chunks: done.chunks,
            bytes_before: done.bytes_before,
            bytes_after: done.bytes_after,
            seq: Some(seq),
        };
        self.control_events.push(StoredControlEvent {
            seq,
            occurred_at: now,
            kind: sentinel_core::ControlKind::Compaction.as_str().to_owned(),
            point_id: None,
            principal: principal.to_owned(),
            core_epoch: epoch,
            payload: serde_json::json!({
                "table": "rollup_1m",
                "day": day_name(day),
                "buckets": done.buckets,
                "chunks": done.chunks,
                "bytes_before": done.bytes_before,
                "bytes_after": done.bytes_after,
            })
            .to_string(),
            registry_version,
        });
        done
    }
}

/// The `compaction` event's payload, as `sentinel_compact_day` writes it.
fn compaction_payload(class: RetentionClass, day: Micros, done: &Compaction) -> String {
    serde_json::json!({
        "class": class.as_str(),
        "day": day_name(day),
        "rows": done.rows,
        "chunks": done.chunks,
        "bytes_before": done.bytes_before,
        "bytes_after": done.bytes_after,
    })
    .to_string()
}
