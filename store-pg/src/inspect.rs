//! Read-only counts for `sentinel status` and the tests: rows per class table (hot and
//! compacted) and quarantine entries by reason.

use std::collections::BTreeMap;

use sentinel_core::QuarantineReason;
use sentinel_ports::{ClassCounts, StoreError};
use sqlx::Row;

use crate::{PgStore, db_error};

impl PgStore {
    /// Row counts of the three class tables, hot and compacted (exact: `count(*)` of the hot
    /// rows, the chunks' `n` of the compacted ones, which reads no compressed array; for status
    /// and tests, not hot).
    pub async fn row_counts(&self) -> Result<ClassCounts, StoreError> {
        let row = sqlx::query(
            "SELECT (SELECT count(*) FROM observation_measurement) \
                    + (SELECT COALESCE(sum(n), 0) FROM observation_measurement_compact), \
                    (SELECT count(*) FROM observation_state) \
                    + (SELECT COALESCE(sum(n), 0) FROM observation_state_compact), \
                    (SELECT count(*) FROM observation_diagnostic) \
                    + (SELECT COALESCE(sum(n), 0) FROM observation_diagnostic_compact)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(db_error("counting observation rows"))?;
        let mut counts = [0u64; 3];
        for (i, count) in counts.iter_mut().enumerate() {
            let n: i64 = row.try_get(i).map_err(db_error("decoding a row count"))?;
            *count = n.max(0) as u64;
        }
        Ok(ClassCounts(counts))
    }

    /// Quarantine entry counts per reason, ordered by reason.
    pub async fn quarantine_counts(&self) -> Result<Vec<(QuarantineReason, u64)>, StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT reason, count(*) FROM quarantine GROUP BY reason")
                .fetch_all(&self.pool)
                .await
                .map_err(db_error("counting quarantine entries"))?;
        let mut counts = BTreeMap::new();
        for (reason, n) in rows {
            let reason = QuarantineReason::parse(&reason).ok_or_else(|| {
                StoreError::Other(format!("unknown quarantine reason {reason:?} in the database"))
            })?;
            counts.insert(reason, n.max(0) as u64);
        }
        Ok(counts.into_iter().collect())
    }
}
