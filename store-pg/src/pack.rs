//! Packing a closed hot day's indexes (issue 24 item 1, disk; migration 0019; BENCHMARKS.md
//! "Packing a closed hot day"). A daily class partition filled in ingest order ends with both
//! B-trees about half full; once its day is closed it takes almost no inserts, and
//! `REINDEX TABLE CONCURRENTLY` rebuilds both indexes packed, without blocking a commit or a read
//! (it takes SHARE UPDATE EXCLUSIVE on the partition, which conflicts with neither).
//!
//! Owns: the list of hot partitions with their sizes, write counts and pack records
//! ([`PgStore::pack_candidates`]), the rebuild of one partition and its record in `hot_day_pack`
//! ([`PgStore::pack_partition`]), and the owner check ([`PgStore::pack_owner`]). Which partitions
//! are due (closed, out of the stream's reach, not compacted, not packed since their last write)
//! is decided by the caller, `sentinel db pack`.
//!
//! Not a `Store` port operation and with no memory model: packing changes no row, so no read
//! of the port can tell a packed partition from another (the tests read every read path before
//! and after), and the core never asks for it — in PostgreSQL 15 the statement runs only outside
//! a transaction and a function and only as the table's owner, which the core's writer role is
//! not. The one statement here built at run time is that `REINDEX`, from a partition name this
//! module derives itself from the class and the day (never from the catalogue's text).

use sentinel_core::{Micros, RetentionClass};
use sentinel_ports::StoreError;
use sqlx::{ConnectOptions, Connection, Row};

use crate::{PgStore, db_error, from_odt, to_odt};

/// At most this many partitions are listed (ten years of daily partitions of three classes).
pub const PACK_PARTITIONS_MAX: usize = 3 * 3_660;

/// One hot daily partition of a class table, as [`PgStore::pack_candidates`] finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HotPartition {
    pub class: RetentionClass,
    /// The UTC midnight starting the day.
    pub day: Micros,
    /// Its heap's main fork holds no page (never written, or truncated by compaction).
    pub empty: bool,
    /// Its heap (with TOAST and maps) and its indexes, now.
    pub heap_bytes: u64,
    pub index_bytes: u64,
    /// Tuples inserted and updated since PostgreSQL's statistics were last reset.
    pub writes: u64,
    /// The day's compacted partition exists (the hot one is then empty, or holds late rows the
    /// next compaction merges).
    pub compacted: bool,
    /// Its record in `hot_day_pack`, if it was packed.
    pub packed: Option<PackRecord>,
}

impl HotPartition {
    /// Packed, and written to by nothing since (its write count is the one read before the
    /// rebuild).
    pub fn packed_since_last_write(&self) -> bool {
        self.packed.as_ref().is_some_and(|p| p.writes == self.writes)
    }

    pub fn name(&self) -> String {
        partition_name(self.class, self.day)
    }
}

/// A row of `hot_day_pack`: one pack of one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackRecord {
    pub packed_at: Micros,
    pub rows: u64,
    pub writes: u64,
    pub heap_bytes: u64,
    pub index_bytes_before: u64,
    pub index_bytes_after: u64,
    pub duration_ms: u64,
}

/// Who owns the class tables, and whether the connected role acts as that owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackOwner {
    pub current_user: String,
    pub owner: String,
    pub is_owner: bool,
}

/// `observation_<class>_pYYYYMMDD`, the name `sentinel_ensure_partitions` gives a day.
pub fn partition_name(class: RetentionClass, day: Micros) -> String {
    format!(
        "observation_{}_p{}",
        class.as_str(),
        sentinel_ports::day_name(day).replace('-', "")
    )
}

/// Owner membership, with the privileges inherited (what REINDEX checks).
const OWNER: &str = "SELECT current_user::text, c.relowner::regrole::text, \
       pg_has_role(current_user, c.relowner, 'USAGE') \
     FROM pg_class c WHERE c.oid = 'observation_measurement'::regclass";

/// Every daily partition of the class tables: its name, sizes, write count, whether its
/// compacted partition exists, its pack record, and whether its heap is empty.
const CANDIDATES: &str = "SELECT p.relname::text, c.relname::text, pg_table_size(c.oid), pg_indexes_size(c.oid), \
       pg_stat_get_tuples_inserted(c.oid) + pg_stat_get_tuples_updated(c.oid), \
       to_regclass(quote_ident(p.relname || '_compact_p' || substr(c.relname, length(p.relname) + 3))) IS NOT NULL, \
       h.packed_at, h.rows, h.writes, h.heap_bytes, h.index_bytes_before, h.index_bytes_after, h.duration_ms, \
       pg_relation_size(c.oid) = 0 \
     FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent \
       LEFT JOIN hot_day_pack h ON h.partition = c.relname::text \
     WHERE p.relnamespace = current_schema()::regnamespace \
       AND p.relname::text IN ('observation_measurement', 'observation_state', 'observation_diagnostic') \
     ORDER BY c.relname";

/// One partition's sizes and write count.
const SIZES: &str = "SELECT pg_table_size(c.oid), pg_indexes_size(c.oid), \
       pg_stat_get_tuples_inserted(c.oid) + pg_stat_get_tuples_updated(c.oid) \
     FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = $1";

/// The indexes a `REINDEX … CONCURRENTLY` that failed part-way left behind: invalid, named
/// `<index>_ccnew[N]`, attached to nothing (a later `REINDEX TABLE CONCURRENTLY` skips them).
const LEFTOVERS: &str = "SELECT x.relname::text FROM pg_index ix JOIN pg_class x ON x.oid = ix.indexrelid \
     WHERE ix.indrelid = (SELECT c.oid FROM pg_class c \
                          WHERE c.relnamespace = current_schema()::regnamespace AND c.relname = $1) \
       AND NOT ix.indisvalid AND x.relname ~ '_ccnew[0-9]*$'";

/// Rows of a class's day partition, through the parent: the partition key is `ingested_at`,
/// so the range prunes to the one partition (a range of `observed_at` would scan every one).
fn count_statement(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => {
            "SELECT count(*) FROM observation_measurement WHERE ingested_at >= $1 AND ingested_at < $2"
        }
        RetentionClass::State => {
            "SELECT count(*) FROM observation_state WHERE ingested_at >= $1 AND ingested_at < $2"
        }
        RetentionClass::Diagnostic => {
            "SELECT count(*) FROM observation_diagnostic WHERE ingested_at >= $1 AND ingested_at < $2"
        }
    }
}

const RECORD: &str = "INSERT INTO hot_day_pack AS h (partition, day, packed_at, rows, writes, heap_bytes, \
       index_bytes_before, index_bytes_after, duration_ms) \
     VALUES ($1, $2, now(), $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (partition) DO UPDATE SET day = EXCLUDED.day, packed_at = EXCLUDED.packed_at, \
       rows = EXCLUDED.rows, writes = EXCLUDED.writes, heap_bytes = EXCLUDED.heap_bytes, \
       index_bytes_before = EXCLUDED.index_bytes_before, index_bytes_after = EXCLUDED.index_bytes_after, \
       duration_ms = EXCLUDED.duration_ms \
     RETURNING h.packed_at";

/// The records of partitions that no longer exist (dropped by retention) or whose day is
/// compacted (the hot partition is then empty, or holds late rows the next compaction merges).
const FORGET: &str = "DELETE FROM hot_day_pack WHERE to_regclass(quote_ident(partition)) IS NULL \
       OR to_regclass(quote_ident(regexp_replace(partition, '_p([0-9]{8})$', '_compact_p\\1'))) IS NOT NULL";

/// Every pack record (for `sentinel storage`): partition name and record.
const RECORDS: &str = "SELECT partition, packed_at, rows, writes, heap_bytes, index_bytes_before, \
       index_bytes_after, duration_ms FROM hot_day_pack ORDER BY partition LIMIT 10980";

const RECORDS_PRESENT: &str = "SELECT to_regclass('hot_day_pack') IS NOT NULL";

fn non_negative(v: i64) -> u64 {
    v.max(0) as u64
}

/// The class and day `observation_<class>_pYYYYMMDD` stands for, if it is exactly that.
pub fn partition_of_name(name: &str) -> Option<(RetentionClass, Micros)> {
    RetentionClass::ALL.into_iter().find_map(|class| {
        let suffix = name.strip_prefix(&format!("observation_{}_p", class.as_str()))?;
        if suffix.len() != 8 || !suffix.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let day = Micros::parse_rfc3339(&format!(
            "{}-{}-{}T00:00:00Z",
            &suffix[0..4],
            &suffix[4..6],
            &suffix[6..8]
        ))?;
        // The round trip rejects a name no day has (`…_p20260230`).
        (partition_name(class, day) == name).then_some((class, day))
    })
}

fn record_from(row: &sqlx::postgres::PgRow, at: usize) -> Result<Option<PackRecord>, StoreError> {
    let get = |e| db_error("decoding a pack record")(e);
    let packed_at: Option<time::OffsetDateTime> = row.try_get(at).map_err(get)?;
    let Some(packed_at) = packed_at else {
        return Ok(None);
    };
    let int = |i: usize| -> Result<u64, StoreError> { Ok(non_negative(row.try_get(at + i).map_err(get)?)) };
    Ok(Some(PackRecord {
        packed_at: from_odt(packed_at),
        rows: int(1)?,
        writes: int(2)?,
        heap_bytes: int(3)?,
        index_bytes_before: int(4)?,
        index_bytes_after: int(5)?,
        duration_ms: int(6)?,
    }))
}

impl PgStore {
    /// The class tables' owner, and whether this connection acts as it.
    pub async fn pack_owner(&self) -> Result<PackOwner, StoreError> {
        let row = sqlx::query(OWNER)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("reading the class tables' owner"))?;
        let get = |e| db_error("decoding the owner")(e);
        Ok(PackOwner {
            current_user: row.try_get(0).map_err(get)?,
            owner: row.try_get(1).map_err(get)?,
            is_owner: row.try_get(2).map_err(get)?,
        })
    }

    /// Every daily partition of the three class tables (at most [`PACK_PARTITIONS_MAX`]), oldest
    /// first; a child not named as `sentinel_ensure_partitions` names a day is left out.
    pub async fn pack_candidates(&self) -> Result<Vec<HotPartition>, StoreError> {
        let get = |e| db_error("decoding a hot partition")(e);
        let rows = sqlx::query(CANDIDATES)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("listing the hot partitions"))?;
        let mut out = Vec::with_capacity(rows.len().min(PACK_PARTITIONS_MAX));
        for row in &rows {
            let child: String = row.try_get(1).map_err(get)?;
            let Some((class, day)) = partition_of_name(&child) else {
                continue;
            };
            out.push(HotPartition {
                class,
                day,
                heap_bytes: non_negative(row.try_get(2).map_err(get)?),
                index_bytes: non_negative(row.try_get(3).map_err(get)?),
                writes: non_negative(row.try_get(4).map_err(get)?),
                compacted: row.try_get(5).map_err(get)?,
                packed: record_from(row, 6)?,
                empty: row.try_get(13).map_err(get)?,
            });
        }
        out.sort_by_key(|p| (p.day, p.class.index()));
        out.truncate(PACK_PARTITIONS_MAX);
        Ok(out)
    }

    /// Every pack record by class and day (`sentinel storage`); none before migration 0019.
    pub async fn pack_records(&self) -> Result<Vec<(RetentionClass, Micros, PackRecord)>, StoreError> {
        let present: bool = sqlx::query_scalar(RECORDS_PRESENT)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("looking for the pack record"))?;
        if !present {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for row in sqlx::query(RECORDS)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading the pack records"))?
        {
            let name: String = row.try_get(0).map_err(db_error("decoding a pack record"))?;
            let (Some((class, day)), Some(record)) = (partition_of_name(&name), record_from(&row, 1)?) else {
                continue;
            };
            out.push((class, day, record));
        }
        Ok(out)
    }

    /// Deletes the records of partitions that no longer exist or whose day is compacted; how
    /// many.
    pub async fn pack_forget_dropped(&self) -> Result<u64, StoreError> {
        let done = sqlx::query(FORGET).execute(&self.pool).await.map_err(db_error(
            "forgetting dropped and compacted partitions' pack records",
        ))?;
        Ok(done.rows_affected())
    }

    /// Rebuilds every index of `class`'s partition of `day` with `REINDEX TABLE CONCURRENTLY`
    /// (first dropping what a failed earlier rebuild left), counts its rows, and records the pack
    /// in `hot_day_pack`. The write count recorded is the one read before the rebuild, so a
    /// write during it leaves the partition due again. Runs as the owner, on a session whose
    /// `statement_timeout` the caller chose (a day of the spec's rate takes minutes).
    pub async fn pack_partition(&self, class: RetentionClass, day: Micros) -> Result<PackRecord, StoreError> {
        let name = partition_name(class, day);
        debug_assert_eq!(partition_of_name(&name), Some((class, day)));
        let started = std::time::Instant::now();
        let (heap_bytes, index_bytes_before, writes) = self.partition_sizes(&name).await?;
        // Its own session, without sqlx's slow-statement warning: a rebuild takes seconds to
        // minutes by design, and the command logs each partition's duration itself.
        let mut session = self
            .connect_options
            .clone()
            .disable_statement_logging()
            .connect()
            .await
            .map_err(db_error("opening the rebuild's session"))?;
        let leftovers: Vec<String> = sqlx::query_scalar(LEFTOVERS)
            .bind(&name)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("looking for a failed rebuild's indexes"))?;
        for index in leftovers {
            // A catalogue name, quoted as an identifier; it matched `_ccnew[0-9]*$` above.
            let drop = format!("DROP INDEX CONCURRENTLY {}", quote_ident(&index));
            sqlx::raw_sql(sqlx::AssertSqlSafe(drop))
                .execute(&mut session)
                .await
                .map_err(db_error("dropping a failed rebuild's index"))?;
        }
        // `name` is built from the class's fixed text and the day's digits: nothing to quote.
        let reindex = format!("REINDEX TABLE CONCURRENTLY {name}");
        sqlx::raw_sql(sqlx::AssertSqlSafe(reindex))
            .execute(&mut session)
            .await
            .map_err(db_error("rebuilding a partition's indexes"))?;
        // A failed close leaves the server to end the session; the rebuild is done either way.
        let _ = session.close().await;
        let rows: i64 = sqlx::query_scalar(count_statement(class))
            .bind(to_odt(day)?)
            .bind(to_odt(Micros(day.0 + sentinel_core::time::US_PER_DAY))?)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("counting a partition's rows"))?;
        let (_, index_bytes_after, _) = self.partition_sizes(&name).await?;
        let duration_ms = started.elapsed().as_millis() as u64;
        let packed_at: time::OffsetDateTime = sqlx::query_scalar(RECORD)
            .bind(&name)
            .bind(to_odt(day)?)
            .bind(rows)
            .bind(i64::try_from(writes).unwrap_or(i64::MAX))
            .bind(i64::try_from(heap_bytes).unwrap_or(i64::MAX))
            .bind(i64::try_from(index_bytes_before).unwrap_or(i64::MAX))
            .bind(i64::try_from(index_bytes_after).unwrap_or(i64::MAX))
            .bind(i64::try_from(duration_ms).unwrap_or(i64::MAX))
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("recording a pack"))?;
        Ok(PackRecord {
            packed_at: from_odt(packed_at),
            rows: non_negative(rows),
            writes,
            heap_bytes,
            index_bytes_before,
            index_bytes_after,
            duration_ms,
        })
    }

    async fn partition_sizes(&self, name: &str) -> Result<(u64, u64, u64), StoreError> {
        let row = sqlx::query(SIZES)
            .bind(name)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error("reading a partition's sizes"))?
            .ok_or_else(|| StoreError::Other(format!("partition {name} does not exist")))?;
        let get = |e| db_error("decoding a partition's sizes")(e);
        Ok((
            non_negative(row.try_get(0).map_err(get)?),
            non_negative(row.try_get(1).map_err(get)?),
            non_negative(row.try_get(2).map_err(get)?),
        ))
    }
}

/// `"name"`, with any `"` doubled.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_name_round_trips_and_nothing_else_is_taken_for_one() {
        let day = Micros::parse_rfc3339("2026-01-15T00:00:00Z").expect("day");
        let name = partition_name(RetentionClass::State, day);
        assert_eq!(name, "observation_state_p20260115");
        assert_eq!(partition_of_name(&name), Some((RetentionClass::State, day)));
        for other in [
            "observation_state_p2026011",
            "observation_state_p202601150",
            "observation_state_p20260230",
            "observation_state_p2026+115",
            "observation_state_compact_p20260115",
            "rollup_1m_p20260115",
            "observation_state_p20260115; DROP TABLE x",
        ] {
            assert_eq!(partition_of_name(other), None, "{other}");
        }
        assert_eq!(quote_ident("a\"b_ccnew1"), "\"a\"\"b_ccnew1\"");
    }
}
