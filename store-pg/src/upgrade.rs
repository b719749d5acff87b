//! What `sentinel migrate` would do to this database, read without the lock and without
//! writing (`sentinel migrate --dry-run`): the migrations this binary would apply and, for the
//! ones that read or rewrite every hot raw row, the time under the lock and the free disk they
//! need at the hot tables' present size.
//!
//! Owns the plan ([`UpgradePlan`]): the pending migrations, the hot tables' size, the estimate
//! and the disk, from the measured costs in `migration_cost` (which `lock` logs as each
//! migration starts). sqlx applies each migration in a transaction of its own, so the disk a
//! run needs is the largest one migration needs, not their sum.

use sentinel_ports::StoreError;

use crate::lock::{SchemaState, applied_versions, pending_migrations};
use crate::migration_cost::hot_raw_bytes;
pub use crate::migration_cost::{HOT_TABLE_WORK, HotTableWork, hot_table_work};
use crate::{PgStore, db_error};

/// One migration this binary carries and the database has not applied.
#[derive(Debug)]
pub struct PendingMigration {
    pub version: i64,
    /// sqlx's description, from the file name (`0021_hot_row_order.sql`: "hot row order").
    pub description: String,
    /// What it does to the hot raw tables, when it reads or rewrites them.
    pub hot_work: Option<&'static HotTableWork>,
}

/// [`PgStore::upgrade_plan`]'s answer.
#[derive(Debug)]
pub struct UpgradePlan {
    pub schema: SchemaState,
    /// Ascending by version.
    pub pending: Vec<PendingMigration>,
    /// The hot raw tables' bytes now (heap and indexes of every hot partition).
    pub hot_raw_bytes: u64,
}

impl UpgradePlan {
    /// Seconds under the lock the measured migrations take at today's hot size (an upper
    /// bound where an earlier pending migration shrinks the tables, as 0014 and 0021 do).
    pub fn estimated_s(&self) -> f64 {
        self.pending
            .iter()
            .filter_map(|m| m.hot_work.and_then(|w| w.estimated_s(self.hot_raw_bytes)))
            .fold(0.0, |total_s, s| total_s + s)
    }

    /// Free disk the largest pending migration needs while it runs.
    pub fn free_disk_bytes(&self) -> u64 {
        let factor = self
            .pending
            .iter()
            .filter_map(|m| m.hot_work.map(|w| w.free_disk_per_gb))
            .fold(0.0_f64, f64::max);
        (factor * self.hot_raw_bytes as f64).ceil() as u64
    }

    /// Pending migrations that read every hot row but whose time was never measured.
    pub fn unmeasured(&self) -> Vec<i64> {
        self.pending
            .iter()
            .filter(|m| m.hot_work.is_some_and(|w| w.seconds_per_gb.is_none()))
            .map(|m| m.version)
            .collect()
    }
}

impl PgStore {
    /// What `sentinel migrate` would apply and what it would cost: reads the applied
    /// migrations and the hot tables' size, takes no lock, writes nothing. Refuses a database
    /// newer than this binary as `migrate` does ([`StoreError::SchemaFromFuture`]).
    pub async fn upgrade_plan(&self) -> Result<UpgradePlan, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(db_error("acquiring a connection"))?;
        let applied = applied_versions(&mut conn).await?;
        let schema = SchemaState {
            found: applied.iter().copied().max(),
            supported: Self::supported_schema_version(),
        };
        schema.refuse_newer()?;
        let hot_raw_bytes = hot_raw_bytes(&mut conn).await?;
        let pending = pending_migrations(&applied)
            .into_iter()
            .map(|m| PendingMigration {
                version: m.version,
                description: m.description.to_string(),
                hot_work: hot_table_work(m.version),
            })
            .collect();
        Ok(UpgradePlan {
            schema,
            pending,
            hot_raw_bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::MIGRATOR;

    /// Every entry names a migration this binary carries, once, in order, and a measured one
    /// says where it was measured.
    #[test]
    fn the_cost_table_names_carried_migrations() {
        let carried: Vec<i64> = MIGRATOR.iter().map(|m| m.version).collect();
        let versions: Vec<i64> = HOT_TABLE_WORK.iter().map(|(v, _)| *v).collect();
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        for (version, work) in HOT_TABLE_WORK {
            assert!(carried.contains(version), "{version} is not a migration");
            assert!(work.free_disk_per_gb > 0.0 && work.free_disk_per_gb <= 3.0);
            assert_eq!(
                work.seconds_per_gb.is_some(),
                !work.measured_in.is_empty(),
                "{version}"
            );
        }
    }

    #[test]
    fn the_estimate_adds_time_and_takes_the_largest_disk() {
        let plan = UpgradePlan {
            schema: SchemaState {
                found: Some(13),
                supported: 22,
            },
            pending: (14..=22)
                .map(|version| PendingMigration {
                    version,
                    description: String::new(),
                    hot_work: hot_table_work(version),
                })
                .collect(),
            hot_raw_bytes: 2_000_000_000,
        };
        // (34 + 10 + 2.4 + 10) s/GB × 2 GB.
        assert!(
            (plan.estimated_s() - 112.8).abs() < 1e-9,
            "{}",
            plan.estimated_s()
        );
        assert_eq!(plan.free_disk_bytes(), 4_000_000_000);
        assert!(plan.unmeasured().is_empty());
    }
}
