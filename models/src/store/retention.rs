//! The memory model's retention: the same semantics as `migrations/0005_retention.sql`
//! (issue 9 item 2), over the model's tables.
//!
//! Owns: which partitions exist (raw days per class, `rollup_1m` days, `rollup_1h` months: made
//! where PostgreSQL's `sentinel_ensure_partitions` and the rollup recompute make them, never
//! below a table's retention mark), the marks, and a drop: the partition's rows go with it, the
//! mark moves up to its end and a `retention_drop` control event is appended, all under the
//! model's one mutex (one transaction). A commit into a dropped day fails, as the missing
//! partition makes it fail in PostgreSQL.

use std::collections::{BTreeMap, BTreeSet};

use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Micros, RetentionClass};

use sentinel_ports::{
    EXPIRED_PARTITIONS_LIST_MAX, Partition, RetainedTable, RetentionCutoffs, RollupGrain, StoreError,
};

#[derive(Clone, Default)]
pub(super) struct RetentionState {
    /// Per table, the `from` of every existing partition.
    partitions: BTreeMap<RetainedTable, BTreeSet<Micros>>,
    /// Per table ([`RetainedTable::ALL`] order), the first instant kept after its drops.
    marks: [Option<Micros>; 5],
}

fn index(table: RetainedTable) -> usize {
    RetainedTable::ALL
        .iter()
        .position(|t| *t == table)
        .expect("RetainedTable::ALL names every table")
}

fn day_start(at: Micros) -> Micros {
    Micros(at.0.div_euclid(US_PER_DAY) * US_PER_DAY)
}

impl RetentionState {
    /// The first instant `table` keeps (the far past while nothing was dropped).
    pub(super) fn kept_from(&self, table: RetainedTable) -> Micros {
        self.marks[index(table)].unwrap_or(Micros(i64::MIN))
    }

    pub(super) fn marks(&self) -> [Option<Micros>; 5] {
        self.marks
    }

    fn ensure(&mut self, table: RetainedTable, at: Micros) {
        let (from, _) = table.partition_of(at);
        if from >= self.kept_from(table) {
            self.partitions.entry(table).or_default().insert(from);
        }
    }

    /// `sentinel_ensure_rollup_partitions` for the day holding `day`.
    fn ensure_rollup_day(&mut self, day: Micros) {
        self.ensure(RetainedTable::Rollup(RollupGrain::Minute), day);
        self.ensure(RetainedTable::Rollup(RollupGrain::Hour), day);
    }

    /// `sentinel_ensure_partitions` for the day holding `at`: the three raw tables and the
    /// rollups' partitions of that day.
    pub(super) fn ensure_day(&mut self, at: Micros) {
        for class in RetentionClass::ALL {
            self.ensure(RetainedTable::Raw(class), at);
        }
        self.ensure_rollup_day(at);
    }

    /// `sentinel_ensure_partitions(first, days)`: every day from the one holding `first`, with
    /// how many partitions were made.
    pub(super) fn ensure_days_counted(&mut self, first: Micros, days: u32) -> u32 {
        let count = |s: &Self| s.partitions.values().map(BTreeSet::len).sum::<usize>();
        let before = count(self);
        if days > 0 {
            self.ensure_days(first, Micros(first.0 + (i64::from(days) - 1) * US_PER_DAY));
        }
        u32::try_from(count(self) - before).unwrap_or(u32::MAX)
    }

    /// The earliest, over the raw class tables, of the end of each one's newest partition
    /// (`Store::partitions_created_until`).
    pub(super) fn created_until(&self) -> Option<Micros> {
        RetentionClass::ALL
            .into_iter()
            .try_fold(Micros(i64::MAX), |until, class| {
                let table = RetainedTable::Raw(class);
                let newest = self.partitions.get(&table)?.last()?;
                Some(until.min(table.partition_of(*newest).1))
            })
    }

    /// The start of `class`'s oldest existing raw partition (reprocess's refusal reads it).
    pub(super) fn oldest_raw_partition(&self, class: RetentionClass) -> Option<Micros> {
        self.partitions
            .get(&RetainedTable::Raw(class))
            .and_then(|days| days.first().copied())
    }

    /// Whether a row ingested at `at` has a partition of `class` to land in.
    pub(super) fn raw_partition_exists(&self, class: RetentionClass, at: Micros) -> bool {
        let table = RetainedTable::Raw(class);
        self.partitions
            .get(&table)
            .is_some_and(|days| days.contains(&table.partition_of(at).0))
    }

    /// The rollup recompute's partitions for `[from, to)` of `grain`: every day from the first
    /// one it may write (clipped at the marks) through the day holding `to`.
    pub(super) fn ensure_rollup_range(&mut self, grain: RollupGrain, from: Micros, to: Micros) {
        let raw_clip = RetentionClass::ALL
            .map(|c| self.kept_from(RetainedTable::Raw(c)))
            .into_iter()
            .min()
            .unwrap_or(Micros(i64::MIN));
        if from >= to {
            return;
        }
        let lo = from
            .max(self.kept_from(RetainedTable::Rollup(grain)))
            .max(raw_clip);
        let mut day = day_start(lo);
        if day >= to {
            return;
        }
        let last = day_start(to);
        while day <= last {
            self.ensure_rollup_day(day);
            day = Micros(day.0 + US_PER_DAY);
        }
    }

    /// `sentinel_ensure_partitions` over the days of `[first, last]` (a moved point's rows).
    pub(super) fn ensure_days(&mut self, first: Micros, last: Micros) {
        let mut day = day_start(first);
        while day <= last {
            self.ensure_day(day);
            day = Micros(day.0 + US_PER_DAY);
        }
    }

    /// The existing partitions ending at or before their table's cut-off, oldest first.
    pub(super) fn expired(&self, cutoffs: &RetentionCutoffs, limit: usize) -> Vec<Partition> {
        let mut expired: Vec<Partition> = self
            .partitions
            .iter()
            .flat_map(|(table, froms)| {
                froms.iter().map(|from| {
                    let (from, to) = table.partition_of(*from);
                    Partition {
                        table: *table,
                        from,
                        to,
                    }
                })
            })
            .filter(|p| p.to <= p.table.kept_from(cutoffs))
            .collect();
        expired.sort_by_key(|p| (p.from, p.table));
        expired.truncate(limit.min(EXPIRED_PARTITIONS_LIST_MAX));
        expired
    }

    /// Checks a drop as `sentinel_retention_drop` does, moves the mark and forgets the
    /// partition. Returns whether it existed (the caller drops its rows and records the event).
    pub(super) fn drop_partition(
        &mut self,
        partition: Partition,
        kept_from: Micros,
    ) -> Result<bool, StoreError> {
        if partition.table.partition_of(partition.from) != (partition.from, partition.to) {
            return Err(StoreError::Other(format!(
                "{} at {} is not a partition boundary",
                partition.table.label(),
                partition.from
            )));
        }
        if partition.to > kept_from {
            return Err(StoreError::Other(format!(
                "partition of {} from {} ends after the kept-from {kept_from}",
                partition.table.label(),
                partition.from
            )));
        }
        let mark = &mut self.marks[index(partition.table)];
        *mark = Some(mark.map_or(partition.to, |m| m.max(partition.to)));
        Ok(self
            .partitions
            .get_mut(&partition.table)
            .is_some_and(|froms| froms.remove(&partition.from)))
    }
}

/// The `retention_drop` event's payload, as `sentinel_retention_drop` builds it.
pub(super) fn drop_payload(partition: &Partition) -> String {
    serde_json::json!({
        "table": partition.table.kind_str(),
        "class": partition.table.class().map(RetentionClass::as_str),
        "day": date(partition.from),
        "to": date(partition.to),
    })
    .to_string()
}

/// `YYYY-MM-DD` of a UTC midnight.
fn date(at: Micros) -> String {
    at.to_rfc3339().chars().take(10).collect()
}
