//! The measured cost of the migrations that read or rewrite every hot raw row: what each does,
//! its seconds per GB of hot raw table (heap and indexes) as BENCHMARKS.md measured it through
//! `sentinel migrate` on the project's 2-core VM, and the free disk it needs per GB while it
//! runs (a rewrite keeps the old table until it commits and writes as much again to the
//! write-ahead log); and the hot tables' present size. Every other migration creates or
//! replaces functions, views and small tables, which takes seconds whatever the data.
//!
//! Read by `lock` (each migration's start is logged with its estimate) and by `upgrade`
//! (`sentinel migrate --dry-run`'s plan); below both, so neither imports the other.

use sentinel_ports::StoreError;

use crate::db_error;

/// What a migration does to the hot raw tables, and what that cost where it was measured.
#[derive(Debug)]
pub struct HotTableWork {
    /// One clause an operator reads, e.g. "rewrites every hot row …".
    pub does: &'static str,
    /// Seconds per GB of hot raw table (heap and indexes) under `sentinel migrate`, as
    /// BENCHMARKS.md measured it; `None` where it was never measured.
    pub seconds_per_gb: Option<f64>,
    /// Free disk needed while it runs, per GB of hot raw table.
    pub free_disk_per_gb: f64,
    /// The BENCHMARKS.md section the figure comes from.
    pub measured_in: &'static str,
}

impl HotTableWork {
    /// Seconds it takes over `hot_raw_bytes` of hot raw table, where it was measured.
    pub fn estimated_s(&self, hot_raw_bytes: u64) -> Option<f64> {
        self.seconds_per_gb
            .map(|s_per_gb| s_per_gb * hot_raw_bytes as f64 / BYTES_PER_GB)
    }
}

/// The migrations that read or rewrite every hot raw row, by version, ascending.
pub const HOT_TABLE_WORK: &[(i64, HotTableWork)] = &[
    (
        4,
        HotTableWork {
            does: "builds a BRIN index on observed_at over each class table (one read of every hot row)",
            seconds_per_gb: None,
            free_disk_per_gb: 0.01,
            measured_in: "",
        },
    ),
    (
        14,
        HotTableWork {
            does: "rewrites every hot row with integer point and instance keys and rebuilds its indexes",
            seconds_per_gb: Some(34.0),
            free_disk_per_gb: 2.0,
            measured_in: "Integer ids",
        },
    ),
    (
        18,
        HotTableWork {
            does: "rebuilds the point index of every hot partition in ascending order",
            // 5 s per GB on a quiet VM, 10 under load: the higher one.
            seconds_per_gb: Some(10.0),
            free_disk_per_gb: 0.5,
            measured_in: "The hot row's bytes: index layout and packing",
        },
    ),
    (
        20,
        HotTableWork {
            does: "builds each hot partition's own dedup key and drops the shared one",
            seconds_per_gb: Some(2.4),
            free_disk_per_gb: 0.5,
            measured_in: "The dedup key per hot partition",
        },
    ),
    (
        21,
        HotTableWork {
            does: "rewrites every hot row with its columns in alignment order and rebuilds its indexes",
            seconds_per_gb: Some(10.0),
            free_disk_per_gb: 2.0,
            measured_in: "The hot row's heap tuple in alignment order",
        },
    ),
];

/// Bytes in the GB the figures above are per.
const BYTES_PER_GB: f64 = 1e9;

/// The hot raw tables' partitions, heap and indexes (not the compacted days' tables).
const HOT_RAW_BYTES: &str = "SELECT coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)::bigint \
     FROM pg_inherits i WHERE i.inhparent IN (SELECT to_regclass(t) FROM unnest(ARRAY[\
     'observation_measurement', 'observation_state', 'observation_diagnostic']) t)";

/// The hot raw tables' bytes now: heap and indexes of every partition of the three class
/// tables (0 before the first migration).
pub(crate) async fn hot_raw_bytes(conn: &mut sqlx::PgConnection) -> Result<u64, StoreError> {
    let bytes: i64 = sqlx::query_scalar(HOT_RAW_BYTES)
        .fetch_one(&mut *conn)
        .await
        .map_err(db_error("reading the hot raw tables' size"))?;
    Ok(u64::try_from(bytes).unwrap_or(0))
}

/// The cost entry of `version`, if it reads or rewrites the hot tables.
pub fn hot_table_work(version: i64) -> Option<&'static HotTableWork> {
    HOT_TABLE_WORK
        .iter()
        .find(|(v, _)| *v == version)
        .map(|(_, work)| work)
}
