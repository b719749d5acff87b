//! Invariant 27 (issue 24, "What it must show": "a new one checks that no committed row is
//! lost or changed by a compaction"; ingest spec, "Retention and rollups"; core runtime spec,
//! "compression from day seven").
//!
//! Owns: the rows the run's store held on each compactable day as they were committed (every
//! column, the previous deployment's log the operator's compaction works on), and the
//! judgement of what the store's read paths return for such a day after a compaction (and at
//! the end of the run): the class table's rows of the day (every column), and each point's
//! `load_history` over the day, must be exactly the committed rows, whether the day is hot,
//! compacted, or cut off halfway. The reading itself is the operator's
//! (`crate::operator::compaction`), which holds the store.

use std::collections::BTreeMap;

use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Micros, ObsRow, RetentionClass};
use sentinel_ports::HistoryRow;

/// Most rows the checker keeps for compactable days (a bound on its memory and on the
/// previous deployment's log the scenario seeds).
pub const ROWS_MAX: usize = 20_000;

/// (class, day index): a compactable day of one class table.
pub type DayKey = (RetentionClass, i64);

/// The store's answers for one day, as [`crate::operator::compaction`] read them.
pub struct DayReads {
    /// The class table's rows ingested on the day (hot and compacted), every column.
    pub rows: Vec<ObsRow>,
    /// Per point of the committed rows: `load_history` over the day's `observed_at` range.
    pub history: BTreeMap<std::sync::Arc<str>, Vec<HistoryRow>>,
}

#[derive(Default)]
pub struct CompactionModel {
    /// The committed rows of each compactable day, in a canonical order.
    days: BTreeMap<DayKey, Vec<ObsRow>>,
    /// Compactions that landed and compacted rows (a day already compacted compacts none),
    /// the rows they compacted, and day readings judged.
    pub compacted_days: u64,
    pub compacted_rows: u64,
    pub days_checked: u64,
    /// Days whose minute rollups were compacted alone and had hot buckets, the buckets, and
    /// compactions after which a day's minute rollups were judged unchanged (invariant 27).
    pub rollup_days_compacted: u64,
    pub rollup_buckets_compacted: u64,
    pub rollup_days_judged: u64,
}

/// The canonical order the comparison sorts both sides into (the key is unique per row).
fn canonical(rows: &mut [ObsRow]) {
    rows.sort_by(|a, b| (&a.key, a.ingested_at, a.observed_at).cmp(&(&b.key, b.ingested_at, b.observed_at)));
}

pub fn day_start(day: i64) -> Micros {
    Micros(day * US_PER_DAY)
}

/// What `load_history` must answer for a point's rows: ordered by `(observed_at,
/// ingested_at)`, then by key as the store's tie-break is not part of the contract.
pub fn history_of(rows: &[ObsRow]) -> Vec<HistoryRow> {
    let mut rows: Vec<&ObsRow> = rows.iter().collect();
    rows.sort_by(|a, b| a.order_key().cmp(&b.order_key()));
    rows.iter()
        .map(|r| HistoryRow {
            observed_at: r.observed_at,
            ingested_at: r.ingested_at,
            value: r.value.clone(),
            quality: r.quality,
            reason: r.reason.as_deref().map(str::to_owned),
        })
        .collect()
}

impl CompactionModel {
    /// Rows committed on compactable days (before the run: the previous deployment's log).
    pub fn on_committed(&mut self, rows: &[ObsRow]) {
        for row in rows {
            let day = row.ingested_at.day();
            self.days.entry((row.class, day)).or_default().push(row.clone());
        }
        let total: usize = self.days.values().map(Vec::len).sum();
        assert!(total <= ROWS_MAX, "compactable rows {total} above {ROWS_MAX}");
        for rows in self.days.values_mut() {
            canonical(rows);
        }
    }

    /// The compactable days, oldest first.
    pub fn days(&self) -> Vec<DayKey> {
        self.days.keys().copied().collect()
    }

    /// The committed rows of a day.
    pub fn rows(&self, day: DayKey) -> &[ObsRow] {
        self.days.get(&day).map_or(&[], Vec::as_slice)
    }

    pub fn on_rollups_compacted(&mut self, buckets: u64) {
        self.rollup_days_compacted += u64::from(buckets > 0);
        self.rollup_buckets_compacted += buckets;
    }

    pub fn on_rollup_day_judged(&mut self) {
        self.rollup_days_judged += 1;
    }

    pub fn on_compacted(&mut self, rows: u64) {
        self.compacted_days += u64::from(rows > 0);
        self.compacted_rows += rows;
    }

    /// Invariant 27 for one day: what the store's read paths return is the committed rows.
    pub fn judge(&mut self, day: DayKey, mut reads: DayReads, after: &str) -> Result<(), String> {
        self.days_checked += 1;
        let expected = self.rows(day);
        let name = sentinel_ports::day_name(day_start(day.1));
        let class = day.0.as_str();
        canonical(&mut reads.rows);
        if reads.rows.len() != expected.len() {
            return Err(format!(
                "{after}: the {class} table holds {} rows ingested on {name}, {} were committed",
                reads.rows.len(),
                expected.len()
            ));
        }
        if let Some((got, want)) = reads.rows.iter().zip(expected).find(|(g, w)| g != w) {
            return Err(format!(
                "{after}: a row of {class} on {name} changed: committed {want:?}, read back {got:?}"
            ));
        }
        for (point, got) in &reads.history {
            let mine: Vec<ObsRow> = expected
                .iter()
                .filter(|r| r.point_id == *point)
                .cloned()
                .collect();
            let want = history_of(&mine);
            if *got != want {
                return Err(format!(
                    "{after}: history of {point} over {name} returned {} rows ({got:?}), the committed rows are {} ({want:?})",
                    got.len(),
                    want.len()
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::sync::Arc;

    use sentinel_core::registry::PointIdx;
    use sentinel_core::{CanonicalValue, DeliveryTag, ObsKey, Quality};

    use super::*;

    fn row(seq: u64, detail: Option<&str>) -> ObsRow {
        let at = Micros(20_000 * US_PER_DAY + seq as i64 * 1_000_000);
        ObsRow {
            point: PointIdx(0),
            point_id: Arc::from("p"),
            class: RetentionClass::Measurement,
            ingested_at: at,
            observed_at: at,
            device_time: None,
            value: Some(CanonicalValue::Num(seq as f64)),
            native_num: Some(seq as f64),
            native_text: None,
            unit_native: None,
            quality: Quality::Bad,
            reason: Some(Cow::Borrowed("device_offline")),
            detail: detail.map(Into::into),
            changed: false,
            registry_version: 1,
            key: ObsKey {
                driver_instance: Arc::from("i"),
                source_epoch: 0,
                source_seq: seq,
            },
            skew_flagged: false,
            tag: DeliveryTag(seq),
        }
    }

    #[test]
    fn a_lost_or_changed_row_is_caught() {
        let committed = vec![row(1, Some("{}")), row(2, None)];
        let mut model = CompactionModel::default();
        model.on_committed(&committed);
        let day = (RetentionClass::Measurement, 20_000);
        let reads = |rows: Vec<ObsRow>| DayReads {
            history: BTreeMap::from([(Arc::from("p"), history_of(&rows))]),
            rows,
        };
        assert_eq!(model.judge(day, reads(committed.clone()), "t"), Ok(()));
        let lost = model
            .judge(day, reads(vec![committed[1].clone()]), "t")
            .unwrap_err();
        assert!(lost.contains("holds 1 rows"), "{lost}");
        let changed = model
            .judge(day, reads(vec![row(1, None), row(2, None)]), "t")
            .unwrap_err();
        assert!(changed.contains("changed"), "{changed}");
    }
}
