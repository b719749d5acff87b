//! What the database holds, by table and partition (issue 24 item 6; core runtime spec,
//! "Retention and rollups": the minutely rollup is "the long-term storage driver"): rows,
//! heap bytes (table with its TOAST) and index bytes of every partition of the five retained
//! tables, and of the control log and the quarantine. `sentinel storage` reads it.
//!
//! Owns: the size queries. Row counts are PostgreSQL's planner estimate (`reltuples`, kept by
//! ANALYZE and autovacuum: free to read) unless the caller asks for exact counts, or the
//! partition was never analysed; an exact count scans the partition, through its parent with
//! a range on the partition key so every statement stays static. Sizes are what
//! `pg_table_size` and `pg_indexes_size` report, so free-space-map and visibility-map pages
//! are counted with the heap, as the disk holds them.
//!
//! The compacted days (migration 0015) are reported beside the hot partitions: per class and
//! day, the observations their chunks hold (exact: `sum(n)` reads the chunks' heap, not their
//! compressed arrays), the chunks, and the partition's bytes; and the compacted days of the
//! minute rollups (migration 0016) the same way, their buckets for rows.
//!
//! Each hot partition also says whether it has its dedup key (migrations 0020, 0022:
//! `sentinel_hot_partition_keys()`, a catalogue read), and the hot partitions without one are
//! listed by name whatever their names, so one made by hand under another name is not missed;
//! the boot makes a missing key or refuses to start (`partitions.rs`).
//!
//! A read of the catalogue, outside the store port: the memory model has no bytes to report.

use sentinel_core::RetentionClass;
use sentinel_ports::{Partition, RetainedTable, RollupGrain, StoreError};
use sqlx::Row;

use crate::retention::{from_physical, partition_from_name, physical};
use crate::{PgStore, db_error, to_odt};

/// At most this many partitions are reported (ten years of daily partitions of five tables).
pub const STORAGE_PARTITIONS_MAX: usize = 5 * 3_660;

/// What this storage format costs per raw observation row, table and indexes together:
/// measured over a tenth of a design-rate day (4,320,000 rows of 4,000 points with ids of 25–30
/// bytes, 16 driver instances, filled in ingest order, after VACUUM ANALYZE) with the ids as
/// integer keys (migration 0014), the ascending point index of migration 0018, the
/// per-partition dedup key of migration 0020 and the columns in alignment order of migration
/// 0021, with `applied` set as the core's commits write it: heap 117.0 B (109.2 B without
/// `applied`, 126 B before 0021), the point index 38.5 B (53 B descending), the dedup key
/// 28.6 B (70.9 B as the four-column partitioned index). BENCHMARKS.md "Both together" (184.2 B
/// measured with both; "The dedup key per hot partition", "The hot row's heap tuple in
/// alignment order"; 235 B before 0020 and 0021 without `applied`, 250 B before 0018, 371 B
/// with text ids). What `registry plan` and `sentinel storage` size a raw table with until it
/// holds enough rows to measure its own; `tests/storage_report.rs` keeps it within 15 % of a
/// populated partition.
pub const RAW_ROW_BYTES: f64 = 184.0;
/// What a raw row of a closed hot day costs once `sentinel db pack` rebuilt its partition's
/// indexes (migration 0019): the heap as filled, 117.0 B with `applied` since migration 0021,
/// and both B-trees packed, the point index 28.5 B and the dedup key 28.5 B (migration 0020's
/// three-column key at fillfactor 100), against 38.5 and 28.6 B as ingest fills them
/// (BENCHMARKS.md "Both together": 174.1 B measured; 195 B with the four-column key, 0001's
/// column order and no `applied`, "Packing a closed hot day"). What `registry plan` and
/// `sentinel storage` size a raw table's closed hot days with, before compaction; today's and
/// yesterday's are at [`RAW_ROW_BYTES`].
pub const PACKED_ROW_BYTES: f64 = 174.0;
/// What this storage format costs per rollup row, table and indexes together: 231 B measured
/// over a day of 1,000 points' minutes (126 heap, 105 index: the primary key and the bucket
/// index), point ids of 25–30 bytes (BENCHMARKS.md, "`sentinel storage`: a rollup row's bytes").
pub const ROLLUP_ROW_BYTES: f64 = 231.0;
/// What this storage format costs per raw observation row of a compacted day, chunk table,
/// TOAST and indexes together (migrations 0015 and 0017), measured on the stages bench's
/// 4,000-point mix, a tenth of a design-rate day (BENCHMARKS.md, "Compacted days"): 6.4 B on
/// the regular mix, 16.9 B with jittered times, bus lag and values, 16.9 B too when the value
/// is converted from a decimal native reading (degF to degC: the native kept as decimals, the
/// value derived from it, migration 0017; 20.8 B before, the value whole float8); the worst of
/// the three, rounded up, so a plan never undersizes a fleet. What `registry plan` and
/// `sentinel storage` size a raw table's days past the compaction age with.
pub const COMPACT_ROW_BYTES: f64 = 17.0;
/// What this storage format costs per minute rollup bucket of a compacted day, chunk table,
/// TOAST and primary key together (migration 0016): 15.5 B measured on a day of the stages
/// bench's 4,000 points, every point every minute, with sums, minima and maxima of two random
/// decimals (3.9 B with values on a 0.25 grid; 237.6 B hot: BENCHMARKS.md, "Compacted days:
/// the minute rollups"); the worse of the two, rounded up. What `registry plan` and `sentinel
/// storage` size the minute rollup's days past the compaction age with.
pub const COMPACT_ROLLUP_BUCKET_BYTES: f64 = 16.0;

/// One table's or partition's rows and bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TableSize {
    pub rows: u64,
    /// Counted, not the planner's estimate.
    pub rows_exact: bool,
    /// The table with its TOAST, free-space and visibility maps.
    pub heap_bytes: u64,
    pub index_bytes: u64,
}

impl TableSize {
    pub fn bytes(&self) -> u64 {
        self.heap_bytes + self.index_bytes
    }

    /// Adds `other` in (exact only if both are).
    pub fn add(&mut self, other: &TableSize) {
        self.rows += other.rows;
        self.rows_exact &= other.rows_exact;
        self.heap_bytes += other.heap_bytes;
        self.index_bytes += other.index_bytes;
    }
}

/// One partition of a retained table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionSize {
    pub partition: Partition,
    pub size: TableSize,
    /// Whether a hot partition has its dedup key (migrations 0020, 0022); `None` for a rollup
    /// partition, or on a schema before 0022.
    pub dedup_key: Option<bool>,
}

/// One compacted day of a class table (migration 0015): its rows (the chunks' `n`, counted
/// exactly from the chunks' heap, which holds `n` inline), its chunks and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactedSize {
    pub class: RetentionClass,
    /// The UTC midnight starting the day.
    pub day: sentinel_core::Micros,
    pub chunks: u64,
    /// `rows` is the observations the chunks hold (exact).
    pub size: TableSize,
}

/// One compacted day of the minute rollups (migration 0016): its buckets (the chunks' `n`,
/// exact from the chunks' heap), its chunks and its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactedRollupSize {
    /// The UTC midnight starting the day.
    pub day: sentinel_core::Micros,
    pub chunks: u64,
    /// `rows` is the buckets the chunks hold (exact).
    pub size: TableSize,
}

/// Everything [`PgStore::storage_report`] reads.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StorageReport {
    /// Ordered by table (raw classes, then rollups), then by start.
    pub partitions: Vec<PartitionSize>,
    /// The compacted days, by class then day (at most [`STORAGE_PARTITIONS_MAX`]).
    pub compacted: Vec<CompactedSize>,
    /// The minute rollups' compacted days, by day (at most [`STORAGE_PARTITIONS_MAX`]).
    pub compacted_rollups: Vec<CompactedRollupSize>,
    /// Partitions beyond [`STORAGE_PARTITIONS_MAX`], left out.
    pub partitions_left_out: usize,
    /// Every hot partition without its dedup key, by name (whatever its name: one not named
    /// as ours is in no other list here); empty on a schema before 0022.
    pub hot_partitions_without_key: Vec<String>,
    pub control_log: TableSize,
    pub quarantine: TableSize,
}

/// Every partition of the retained tables with the planner's row estimate and its sizes.
const PARTITION_SIZES: &str = "SELECT p.relname::text, c.relname::text, c.reltuples::float8, \
     pg_table_size(c.oid), pg_indexes_size(c.oid) \
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
     WHERE p.relnamespace = current_schema()::regnamespace AND p.relname::text = ANY($1)";

/// An unpartitioned table's estimate and sizes.
const TABLE_SIZE: &str = "SELECT c.reltuples::float8, pg_table_size(c.oid), pg_indexes_size(c.oid) \
     FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = $1";

/// Every compacted partition's sizes, by its parent and name.
const COMPACTED_SIZES: &str = "SELECT p.relname::text, c.relname::text, pg_table_size(c.oid), pg_indexes_size(c.oid) \
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
     WHERE p.relnamespace = current_schema()::regnamespace \
       AND p.relname::text IN ('observation_measurement_compact', 'observation_state_compact', \
                               'observation_diagnostic_compact')";

/// Whether each hot partition has its dedup key, by name (migration 0022).
const HOT_PARTITION_KEYS: &str = "SELECT part, has_key FROM sentinel_hot_partition_keys() ORDER BY part";

const HOT_PARTITION_KEYS_PRESENT: &str =
    "SELECT to_regprocedure('sentinel_hot_partition_keys()') IS NOT NULL";

const COMPACTION_PRESENT: &str = "SELECT to_regclass('observation_measurement_compact') IS NOT NULL";

const ROLLUP_COMPACTION_PRESENT: &str = "SELECT to_regclass('rollup_1m_compact') IS NOT NULL";

/// Every compacted minute rollup partition's sizes, by name.
const COMPACTED_ROLLUP_SIZES: &str = "SELECT c.relname::text, pg_table_size(c.oid), pg_indexes_size(c.oid) \
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
     WHERE p.relnamespace = current_schema()::regnamespace AND p.relname::text = 'rollup_1m_compact'";

/// Each compacted minute rollup day's chunks and buckets.
const COMPACTED_ROLLUP_ROWS: &str =
    "SELECT day, count(*), COALESCE(sum(n), 0)::bigint FROM rollup_1m_compact GROUP BY day";

/// Each compacted day's chunks and observations, per class.
fn compacted_rows_statement(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => {
            "SELECT day, count(*), COALESCE(sum(n), 0)::bigint FROM observation_measurement_compact GROUP BY day"
        }
        RetentionClass::State => {
            "SELECT day, count(*), COALESCE(sum(n), 0)::bigint FROM observation_state_compact GROUP BY day"
        }
        RetentionClass::Diagnostic => {
            "SELECT day, count(*), COALESCE(sum(n), 0)::bigint FROM observation_diagnostic_compact GROUP BY day"
        }
    }
}

const COUNT_CONTROL: &str = "SELECT count(*) FROM control_event";
const COUNT_QUARANTINE: &str = "SELECT count(*) FROM quarantine";

/// An exact count of one partition's rows, through its parent (pruned to the partition).
fn count_statement(table: RetainedTable) -> &'static str {
    match table {
        RetainedTable::Raw(RetentionClass::Measurement) => {
            "SELECT count(*) FROM observation_measurement WHERE observed_at >= $1 AND observed_at < $2"
        }
        RetainedTable::Raw(RetentionClass::State) => {
            "SELECT count(*) FROM observation_state WHERE observed_at >= $1 AND observed_at < $2"
        }
        RetainedTable::Raw(RetentionClass::Diagnostic) => {
            "SELECT count(*) FROM observation_diagnostic WHERE observed_at >= $1 AND observed_at < $2"
        }
        RetainedTable::Rollup(RollupGrain::Minute) => {
            "SELECT count(*) FROM rollup_1m WHERE bucket >= $1 AND bucket < $2"
        }
        RetainedTable::Rollup(RollupGrain::Hour) => {
            "SELECT count(*) FROM rollup_1h WHERE bucket >= $1 AND bucket < $2"
        }
    }
}

/// The planner's estimate as a row count, `None` when the table was never analysed (-1 since
/// PostgreSQL 14) or the figure is not usable.
fn estimate(reltuples: f64) -> Option<u64> {
    (reltuples.is_finite() && reltuples >= 0.0).then(|| reltuples.round() as u64)
}

fn size_from(reltuples: f64, heap_bytes: i64, index_bytes: i64) -> (Option<u64>, TableSize) {
    (
        estimate(reltuples),
        TableSize {
            rows: 0,
            rows_exact: false,
            heap_bytes: heap_bytes.max(0) as u64,
            index_bytes: index_bytes.max(0) as u64,
        },
    )
}

/// The UTC midnight a daily partition's `YYYYMMDD` suffix names (`None`: not such a suffix).
fn partition_day(yyyymmdd: &str) -> Option<sentinel_core::Micros> {
    sentinel_core::Micros::parse_rfc3339(&format!(
        "{}-{}-{}T00:00:00Z",
        yyyymmdd.get(0..4)?,
        yyyymmdd.get(4..6)?,
        yyyymmdd.get(6..8)?
    ))
}

impl PgStore {
    /// Rows and bytes of every retained table's partitions, the control log and the
    /// quarantine. With `exact`, every row count is counted (a scan of each table); otherwise
    /// only the tables the planner has no estimate for are. `progress` is called after each
    /// partition with how many of how many are done.
    pub async fn storage_report(
        &self,
        exact: bool,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<StorageReport, StoreError> {
        let names: Vec<&str> = RetainedTable::ALL.into_iter().map(physical).collect();
        let rows = sqlx::query(PARTITION_SIZES)
            .bind(&names)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading partition sizes"))?;
        let mut found = Vec::with_capacity(rows.len().min(STORAGE_PARTITIONS_MAX));
        for row in &rows {
            let parent: String = row.try_get(0).map_err(db_error("decoding a partition size"))?;
            let child: String = row.try_get(1).map_err(db_error("decoding a partition size"))?;
            let Some(table) = from_physical(&parent) else {
                continue;
            };
            // A child that is not named as ours (`<table>_pYYYYMMDD`) is not reported.
            let Some(partition) = partition_from_name(table, &parent, &child) else {
                continue;
            };
            let (estimated, size) = size_from(
                row.try_get(2).map_err(db_error("decoding a row estimate"))?,
                row.try_get(3).map_err(db_error("decoding a table size"))?,
                row.try_get(4).map_err(db_error("decoding an index size"))?,
            );
            found.push((partition, child, estimated, size));
        }
        found.sort_by_key(|(p, _, _, _)| (table_order(p.table), p.from));
        let partitions_left_out = found.len().saturating_sub(STORAGE_PARTITIONS_MAX);
        found.truncate(STORAGE_PARTITIONS_MAX);
        let keys = self.hot_partition_keys().await?;
        let total = found.len() + 2;
        let mut partitions = Vec::with_capacity(found.len());
        for (done, (partition, child, estimated, mut size)) in found.into_iter().enumerate() {
            let dedup_key = match partition.table {
                RetainedTable::Raw(_) => keys.get(&child).copied(),
                RetainedTable::Rollup(_) => None,
            };
            match estimated.filter(|_| !exact) {
                Some(rows) => size.rows = rows,
                None => {
                    size.rows = self.count_partition(partition).await?;
                    size.rows_exact = true;
                }
            }
            partitions.push(PartitionSize {
                partition,
                size,
                dedup_key,
            });
            progress(done + 1, total);
        }
        let control_log = self.table_size("control_event", COUNT_CONTROL, exact).await?;
        progress(total - 1, total);
        let quarantine = self.table_size("quarantine", COUNT_QUARANTINE, exact).await?;
        progress(total, total);
        debug_assert!(partitions.windows(2).all(|w| {
            (table_order(w[0].partition.table), w[0].partition.from)
                <= (table_order(w[1].partition.table), w[1].partition.from)
        }));
        let compacted = self.compacted_sizes().await?;
        let compacted_rollups = self.compacted_rollup_sizes().await?;
        let hot_partitions_without_key = keys
            .into_iter()
            .filter_map(|(part, has_key)| (!has_key).then_some(part))
            .collect();
        Ok(StorageReport {
            partitions,
            compacted,
            compacted_rollups,
            partitions_left_out,
            hot_partitions_without_key,
            control_log,
            quarantine,
        })
    }

    /// Every hot partition by name with whether it has its dedup key; empty before 0022.
    async fn hot_partition_keys(&self) -> Result<std::collections::BTreeMap<String, bool>, StoreError> {
        let present: bool = sqlx::query_scalar(HOT_PARTITION_KEYS_PRESENT)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("looking for the dedup key check"))?;
        if !present {
            return Ok(Default::default());
        }
        let rows: Vec<(String, bool)> = sqlx::query_as(HOT_PARTITION_KEYS)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading the hot partitions' dedup keys"))?;
        Ok(rows.into_iter().collect())
    }

    /// The compacted days' sizes and counts (issue 24 item 6: hot and compacted, side by side).
    async fn compacted_sizes(&self) -> Result<Vec<CompactedSize>, StoreError> {
        let get = |e| db_error("decoding a compacted partition")(e);
        // A database not yet at 0015 (the report runs before an upgrade, too) has none.
        let present: bool = sqlx::query_scalar(COMPACTION_PRESENT)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("looking for the compacted tables"))?;
        if !present {
            return Ok(Vec::new());
        }
        let mut bytes: std::collections::BTreeMap<(usize, i64), (u64, u64)> = Default::default();
        for row in sqlx::query(COMPACTED_SIZES)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading compacted partition sizes"))?
        {
            let parent: String = row.try_get(0).map_err(get)?;
            let child: String = row.try_get(1).map_err(get)?;
            let Some(class) = RetentionClass::ALL
                .into_iter()
                .find(|c| parent == format!("observation_{}_compact", c.as_str()))
            else {
                continue;
            };
            // `<parent>_pYYYYMMDD`; another name is not ours and is not reported.
            let Some(day) = child.strip_prefix(&format!("{parent}_p")).and_then(partition_day) else {
                continue;
            };
            let heap: i64 = row.try_get(2).map_err(get)?;
            let index: i64 = row.try_get(3).map_err(get)?;
            bytes.insert((class.index(), day.0), (heap.max(0) as u64, index.max(0) as u64));
        }
        let mut out = Vec::new();
        for class in RetentionClass::ALL {
            for row in sqlx::query(compacted_rows_statement(class))
                .fetch_all(&self.pool)
                .await
                .map_err(db_error("counting compacted rows"))?
            {
                let day = crate::from_odt(row.try_get(0).map_err(get)?);
                let chunks: i64 = row.try_get(1).map_err(get)?;
                let rows: i64 = row.try_get(2).map_err(get)?;
                let (heap_bytes, index_bytes) = bytes.get(&(class.index(), day.0)).copied().unwrap_or((0, 0));
                out.push(CompactedSize {
                    class,
                    day,
                    chunks: chunks.max(0) as u64,
                    size: TableSize {
                        rows: rows.max(0) as u64,
                        rows_exact: true,
                        heap_bytes,
                        index_bytes,
                    },
                });
            }
        }
        out.sort_by_key(|c| (c.class.index(), c.day));
        out.truncate(STORAGE_PARTITIONS_MAX);
        Ok(out)
    }

    /// The minute rollups' compacted days, sizes and counts.
    async fn compacted_rollup_sizes(&self) -> Result<Vec<CompactedRollupSize>, StoreError> {
        let get = |e| db_error("decoding a compacted rollup partition")(e);
        // A database not yet at 0016 has none.
        let present: bool = sqlx::query_scalar(ROLLUP_COMPACTION_PRESENT)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("looking for the compacted rollups"))?;
        if !present {
            return Ok(Vec::new());
        }
        let mut bytes: std::collections::BTreeMap<i64, (u64, u64)> = Default::default();
        for row in sqlx::query(COMPACTED_ROLLUP_SIZES)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading compacted rollup partition sizes"))?
        {
            let child: String = row.try_get(0).map_err(get)?;
            // `rollup_1m_compact_pYYYYMMDD`; another name is not ours and is not reported.
            let Some(day) = child.strip_prefix("rollup_1m_compact_p").and_then(partition_day) else {
                continue;
            };
            let heap: i64 = row.try_get(1).map_err(get)?;
            let index: i64 = row.try_get(2).map_err(get)?;
            bytes.insert(day.0, (heap.max(0) as u64, index.max(0) as u64));
        }
        let mut out = Vec::new();
        for row in sqlx::query(COMPACTED_ROLLUP_ROWS)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("counting compacted rollup buckets"))?
        {
            let day = crate::from_odt(row.try_get(0).map_err(get)?);
            let chunks: i64 = row.try_get(1).map_err(get)?;
            let buckets: i64 = row.try_get(2).map_err(get)?;
            let (heap_bytes, index_bytes) = bytes.get(&day.0).copied().unwrap_or((0, 0));
            out.push(CompactedRollupSize {
                day,
                chunks: chunks.max(0) as u64,
                size: TableSize {
                    rows: buckets.max(0) as u64,
                    rows_exact: true,
                    heap_bytes,
                    index_bytes,
                },
            });
        }
        out.sort_by_key(|c| c.day);
        out.truncate(STORAGE_PARTITIONS_MAX);
        Ok(out)
    }

    async fn count_partition(&self, partition: Partition) -> Result<u64, StoreError> {
        let count: i64 = sqlx::query_scalar(count_statement(partition.table))
            .bind(to_odt(partition.from)?)
            .bind(to_odt(partition.to)?)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("counting a partition's rows"))?;
        Ok(count.max(0) as u64)
    }

    async fn table_size(
        &self,
        table: &str,
        count: &'static str,
        exact: bool,
    ) -> Result<TableSize, StoreError> {
        let row = sqlx::query(TABLE_SIZE)
            .bind(table)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error("reading a table size"))?
            .ok_or_else(|| {
                StoreError::Other(format!("table {table} does not exist: is the schema current?"))
            })?;
        let (estimated, mut size) = size_from(
            row.try_get(0).map_err(db_error("decoding a row estimate"))?,
            row.try_get(1).map_err(db_error("decoding a table size"))?,
            row.try_get(2).map_err(db_error("decoding an index size"))?,
        );
        match estimated.filter(|_| !exact) {
            Some(rows) => size.rows = rows,
            None => {
                let counted: i64 = sqlx::query_scalar(count)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(db_error("counting a table's rows"))?;
                size.rows = counted.max(0) as u64;
                size.rows_exact = true;
            }
        }
        Ok(size)
    }
}

/// The report's table order: the raw classes, then the rollups.
fn table_order(table: RetainedTable) -> usize {
    RetainedTable::ALL
        .iter()
        .position(|t| *t == table)
        .unwrap_or(RetainedTable::ALL.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unanalysed_table_has_no_estimate_and_sizes_never_go_negative() {
        assert_eq!(estimate(-1.0), None);
        assert_eq!(estimate(f64::NAN), None);
        assert_eq!(estimate(0.0), Some(0));
        assert_eq!(estimate(1234.4), Some(1234));
        let (rows, size) = size_from(10.0, -5, 8192);
        assert_eq!(rows, Some(10));
        assert_eq!((size.heap_bytes, size.index_bytes, size.bytes()), (0, 8192, 8192));
    }

    #[test]
    fn every_retained_table_has_its_own_count_statement() {
        for table in RetainedTable::ALL {
            assert!(count_statement(table).contains(&format!("FROM {} ", physical(table))));
        }
    }
}
