//! The PostgreSQL adapter's retention (issue 9 item 2; ingest spec, "Retention and rollups";
//! DESIGN.md §3): lists the partitions wholly before their table's cut-off and drops them one
//! by one through `sentinel_retention_drop` (migrations/0005_retention.sql, fenced on the epoch
//! and the start identity since 0013), which fences, moves the table's retention mark and writes the `retention_drop` control event in the
//! same transaction. Never a row DELETE: old data goes only with its whole partition.
//!
//! Owns: the physical names of the retained tables and their partitions
//! (`<table>_pYYYYMMDD`, `rollup_1h_pYYYYMM`), and mapping the function's answers onto the
//! port's types. Every statement is static.

use sentinel_core::{Micros, RetentionClass};
use sqlx::Row;
use time::OffsetDateTime;

use super::{PgStore, core_start_to_db, db_error, epoch_to_db, from_odt, to_odt};
use sentinel_ports::{
    DroppedPartition, EXPIRED_PARTITIONS_LIST_MAX, Partition, RetainedTable, RetentionCutoffs, RetentionRun,
    RollupGrain, StoreError,
};

/// The schema's name of a retained table.
pub(crate) fn physical(table: RetainedTable) -> &'static str {
    match table {
        RetainedTable::Raw(RetentionClass::Measurement) => "observation_measurement",
        RetainedTable::Raw(RetentionClass::State) => "observation_state",
        RetainedTable::Raw(RetentionClass::Diagnostic) => "observation_diagnostic",
        RetainedTable::Rollup(RollupGrain::Minute) => "rollup_1m",
        RetainedTable::Rollup(RollupGrain::Hour) => "rollup_1h",
    }
}

pub(crate) fn from_physical(name: &str) -> Option<RetainedTable> {
    RetainedTable::ALL.into_iter().find(|t| physical(*t) == name)
}

/// Every partition of the five retained tables, by parent and child name.
const LIST_PARTITIONS: &str = "SELECT p.relname::text, c.relname::text \
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
     WHERE p.relnamespace = current_schema()::regnamespace AND p.relname::text = ANY($1)";

const DROP: &str = "SELECT sentinel_retention_drop($1, $2, $3, $4, $5, $6, $7)";

const MARKS: &str = "SELECT tbl, kept_from FROM retention_mark";

/// The partition a child table's name stands for: `<parent>_pYYYYMMDD` (a day) or, for
/// `rollup_1h`, `<parent>_pYYYYMM` (a month). Anything else is not ours to drop.
pub(crate) fn partition_from_name(table: RetainedTable, parent: &str, child: &str) -> Option<Partition> {
    let suffix = child.strip_prefix(parent)?.strip_prefix("_p")?;
    let digits = |r: std::ops::Range<usize>| suffix.get(r).and_then(|t| t.parse::<i32>().ok());
    let monthly = matches!(table, RetainedTable::Rollup(RollupGrain::Hour));
    let (year, month, day) = match (monthly, suffix.len()) {
        (true, 6) => (digits(0..4)?, digits(4..6)?, 1),
        (false, 8) => (digits(0..4)?, digits(4..6)?, digits(6..8)?),
        _ => return None,
    };
    let month = time::Month::try_from(u8::try_from(month).ok()?).ok()?;
    let date = time::Date::from_calendar_date(year, month, u8::try_from(day).ok()?).ok()?;
    let start = from_odt(date.midnight().assume_utc());
    let (from, to) = table.partition_of(start);
    (from == start).then_some(Partition { table, from, to })
}

impl PgStore {
    /// [`sentinel_ports::Store::partitions_created_until`]: the newest partition of each raw
    /// class table, by name, and the earliest of their ends.
    pub(super) async fn partitions_created_until_inner(&self) -> Result<Option<Micros>, StoreError> {
        let raw: Vec<RetainedTable> = RetentionClass::ALL.into_iter().map(RetainedTable::Raw).collect();
        let names: Vec<&str> = raw.iter().copied().map(physical).collect();
        let rows = sqlx::query(LIST_PARTITIONS)
            .bind(&names)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("listing partitions"))?;
        let mut newest: [Option<Micros>; 3] = [None; 3];
        for row in &rows {
            let parent: String = row.try_get(0).map_err(db_error("decoding a partition"))?;
            let child: String = row.try_get(1).map_err(db_error("decoding a partition"))?;
            let Some(table @ RetainedTable::Raw(class)) = from_physical(&parent) else {
                continue;
            };
            if let Some(partition) = partition_from_name(table, &parent, &child) {
                let end = &mut newest[class.index()];
                *end = Some(end.map_or(partition.to, |e| e.max(partition.to)));
            }
        }
        Ok(newest
            .into_iter()
            .try_fold(Micros(i64::MAX), |until, end| end.map(|end| until.min(end))))
    }

    pub(super) async fn expired_partitions_inner(
        &self,
        cutoffs: RetentionCutoffs,
        limit: usize,
    ) -> Result<Vec<Partition>, StoreError> {
        let names: Vec<&str> = RetainedTable::ALL.into_iter().map(physical).collect();
        let rows = sqlx::query(LIST_PARTITIONS)
            .bind(&names)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("listing partitions"))?;
        let mut expired = Vec::new();
        for row in &rows {
            let parent: String = row.try_get(0).map_err(db_error("decoding a partition"))?;
            let child: String = row.try_get(1).map_err(db_error("decoding a partition"))?;
            let Some(table) = from_physical(&parent) else {
                continue;
            };
            if let Some(partition) = partition_from_name(table, &parent, &child)
                && partition.to <= table.kept_from(&cutoffs)
            {
                expired.push(partition);
            }
        }
        expired.sort_by_key(|p| (p.from, p.table));
        expired.truncate(limit.min(EXPIRED_PARTITIONS_LIST_MAX));
        Ok(expired)
    }

    pub(super) async fn drop_expired_inner(
        &self,
        epoch: u32,
        cutoffs: RetentionCutoffs,
        partitions_max: u32,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<RetentionRun, StoreError> {
        let max = partitions_max as usize;
        let mut expired = self.expired_partitions_inner(cutoffs, max + 1).await?;
        let more = expired.len() > max;
        expired.truncate(max);
        let epoch_db = epoch_to_db(epoch)?;
        let mut dropped = Vec::with_capacity(expired.len());
        for partition in expired {
            let answer = sqlx::query_scalar::<_, Option<i64>>(DROP)
                .bind(epoch_db)
                .bind(core_start_to_db(self.core_start()))
                .bind(physical(partition.table))
                .bind(to_odt(partition.from)?)
                .bind(to_odt(partition.table.kept_from(&cutoffs))?)
                .bind(principal)
                .bind(to_odt(occurred_at)?)
                .fetch_one(&self.pool)
                .await;
            match answer {
                Ok(Some(seq)) => {
                    tracing::info!(
                        table = partition.table.label(),
                        from = %partition.from,
                        seq,
                        epoch,
                        "retention dropped a partition"
                    );
                    dropped.push(DroppedPartition { partition, seq });
                }
                // Dropped by someone else since the listing: nothing to record.
                Ok(None) => {}
                Err(e) => return Err(self.rollup_error(epoch, "dropping a partition", e).await),
            }
        }
        Ok(RetentionRun { dropped, more })
    }

    pub(super) async fn retention_marks_inner(&self) -> Result<[Option<Micros>; 5], StoreError> {
        let rows = sqlx::query(MARKS)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading the retention marks"))?;
        let mut marks = [None; 5];
        for row in &rows {
            let name: String = row.try_get(0).map_err(db_error("decoding a retention mark"))?;
            let at: OffsetDateTime = row.try_get(1).map_err(db_error("decoding a retention mark"))?;
            if let Some(i) = RetainedTable::ALL.iter().position(|t| physical(*t) == name) {
                marks[i] = Some(from_odt(at));
            }
        }
        Ok(marks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_names_parse_to_their_ranges_and_nothing_else_does() {
        let day = partition_from_name(
            RetainedTable::Raw(RetentionClass::State),
            "observation_state",
            "observation_state_p20260601",
        )
        .expect("a day");
        assert_eq!(
            day.from,
            Micros::parse_rfc3339("2026-06-01T00:00:00Z").expect("instant")
        );
        assert_eq!(
            day.to,
            Micros::parse_rfc3339("2026-06-02T00:00:00Z").expect("instant")
        );
        let month = partition_from_name(
            RetainedTable::Rollup(RollupGrain::Hour),
            "rollup_1h",
            "rollup_1h_p202612",
        )
        .expect("a month");
        assert_eq!(
            month.from,
            Micros::parse_rfc3339("2026-12-01T00:00:00Z").expect("instant")
        );
        assert_eq!(
            month.to,
            Micros::parse_rfc3339("2027-01-01T00:00:00Z").expect("instant")
        );
        for (table, parent, child) in [
            (
                RetainedTable::Rollup(RollupGrain::Hour),
                "rollup_1h",
                "rollup_1h_p20261201",
            ),
            (
                RetainedTable::Rollup(RollupGrain::Minute),
                "rollup_1m",
                "rollup_1m_p202612",
            ),
            (
                RetainedTable::Rollup(RollupGrain::Minute),
                "rollup_1m",
                "rollup_1m_p20261340",
            ),
            (
                RetainedTable::Rollup(RollupGrain::Minute),
                "rollup_1m",
                "rollup_1m_extra",
            ),
        ] {
            assert_eq!(partition_from_name(table, parent, child), None, "{child}");
        }
    }
}
