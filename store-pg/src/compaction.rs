//! The PostgreSQL adapter's compaction (issue 24 items 1 and 2; core runtime spec, "compression
//! from day seven"): one closed day of one class table into its compacted partition through
//! `sentinel_compact_day` (`migrations/0015_compaction.sql`), which fences on the epoch and
//! the start identity, encodes the day's rows into chunks, empties the hot partition and writes
//! the `compaction` control event in one transaction; then, in the same transaction, the
//! day's minute rollups through `sentinel_compact_rollup_day`
//! (`migrations/0016_rollup_compaction.sql`, its own `compaction` event). A day's minute
//! rollups are also compacted alone, at their own shorter age (`Store::compact_rollup_day`:
//! the same function in its own transaction).
//!
//! Owns: the call, the refusals checked first (`sentinel_ports::check_compaction`, the same
//! words as the model's; the function checks them again), and mapping its answer onto
//! [`Compaction`]. The reads of compacted rows are the other modules' (they read the
//! `observation_<class>_all` views and `rollup_1m_all`).

use sqlx::Row;

use super::{PgStore, core_start_to_db, db_error, epoch_to_db, to_odt};
use sentinel_ports::{
    Compaction, CompactionRequest, RollupCompaction, RollupCompactionRequest, StoreError, check_compaction,
    check_rollup_compaction,
};

const COMPACT: &str = "SELECT rows, chunks, bytes_before, bytes_after, seq \
     FROM sentinel_compact_day($1, $2, $3, $4, $5, $6, $7, $8)";
const COMPACT_ROLLUPS: &str = "SELECT buckets, chunks, bytes_before, bytes_after, seq \
     FROM sentinel_compact_rollup_day($1, $2, $3, $4, $5, $6)";

/// The five columns both compactions answer: (count, chunks, bytes before, bytes after, seq).
type Answer = (u64, u64, u64, u64, Option<i64>);

fn decode_answer(row: &sqlx::postgres::PgRow) -> Result<Answer, sqlx::Error> {
    let count = |i: usize| -> Result<u64, sqlx::Error> { Ok(row.try_get::<i64, _>(i)?.max(0) as u64) };
    Ok((count(0)?, count(1)?, count(2)?, count(3)?, row.try_get(4)?))
}

/// `sentinel_compact_rollup_day`'s answer, checked: it writes its event exactly when it
/// compacted buckets.
fn rollup_compaction(answer: Answer) -> RollupCompaction {
    let done = RollupCompaction {
        buckets: answer.0,
        chunks: answer.1,
        bytes_before: answer.2,
        bytes_after: answer.3,
        seq: answer.4,
    };
    assert!(
        (done.buckets == 0) == done.seq.is_none(),
        "a rollup compaction writes its event exactly when it compacted buckets"
    );
    done
}

impl PgStore {
    /// The call of `sentinel_compact_rollup_day` for one day, fenced on this store's epoch
    /// and start identity: run in `compact_day`'s transaction after the raw rows, or alone.
    fn compact_rollups_call<'q>(
        &self,
        epoch: u32,
        day: sentinel_core::Micros,
        now: sentinel_core::Micros,
        age_days: i32,
        principal: &'q str,
    ) -> Result<sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>, StoreError> {
        Ok(sqlx::query(COMPACT_ROLLUPS)
            .bind(epoch_to_db(epoch)?)
            .bind(core_start_to_db(self.core_start()))
            .bind(to_odt(day)?)
            .bind(to_odt(now)?)
            .bind(age_days)
            .bind(principal))
    }

    pub(super) async fn compact_day_inner(
        &self,
        epoch: u32,
        request: CompactionRequest<'_>,
    ) -> Result<Compaction, StoreError> {
        check_compaction(&request)?;
        let stream_oldest = request.stream_oldest.map(to_odt).transpose()?;
        let age_days = i32::try_from(request.compact_after_days).unwrap_or(i32::MAX);
        let mut tx = match self.pool.begin().await {
            Ok(tx) => tx,
            Err(e) => return Err(db_error("compacting a day")(e)),
        };
        let raw = sqlx::query(COMPACT)
            .bind(epoch_to_db(epoch)?)
            .bind(core_start_to_db(self.core_start()))
            .bind(request.class.as_str())
            .bind(to_odt(request.day)?)
            .bind(to_odt(request.now)?)
            .bind(age_days)
            .bind(stream_oldest)
            .bind(request.principal)
            .fetch_one(&mut *tx)
            .await;
        let raw = match raw {
            Ok(row) => decode_answer(&row).map_err(db_error("decoding a compaction"))?,
            Err(e) => {
                drop(tx);
                return Err(self.rollup_error(epoch, "compacting a day", e).await);
            }
        };
        let rollups = self
            .compact_rollups_call(epoch, request.day, request.now, age_days, request.principal)?
            .fetch_one(&mut *tx)
            .await;
        let rollups = match rollups {
            Ok(row) => {
                rollup_compaction(decode_answer(&row).map_err(db_error("decoding a rollup compaction"))?)
            }
            Err(e) => {
                drop(tx);
                return Err(self.rollup_error(epoch, "compacting a day's rollups", e).await);
            }
        };
        if let Err(e) = tx.commit().await {
            return Err(self.rollup_error(epoch, "committing a compaction", e).await);
        }
        let done = Compaction {
            rows: raw.0,
            chunks: raw.1,
            bytes_before: raw.2,
            bytes_after: raw.3,
            seq: raw.4,
            rollups,
        };
        assert!(
            (done.rows == 0) == done.seq.is_none(),
            "a compaction writes its event exactly when it compacted rows"
        );
        tracing::info!(
            class = request.class.as_str(),
            day = %sentinel_ports::day_name(request.day),
            rows = done.rows,
            chunks = done.chunks,
            bytes_before = done.bytes_before,
            bytes_after = done.bytes_after,
            rollup_buckets = done.rollups.buckets,
            rollup_chunks = done.rollups.chunks,
            rollup_bytes_before = done.rollups.bytes_before,
            rollup_bytes_after = done.rollups.bytes_after,
            epoch,
            "day compacted"
        );
        Ok(done)
    }

    pub(super) async fn compact_rollup_day_inner(
        &self,
        epoch: u32,
        request: RollupCompactionRequest<'_>,
    ) -> Result<RollupCompaction, StoreError> {
        check_rollup_compaction(&request)?;
        let age_days = i32::try_from(request.compact_after_days).unwrap_or(i32::MAX);
        let mut tx = match self.pool.begin().await {
            Ok(tx) => tx,
            Err(e) => return Err(db_error("compacting a day's rollups")(e)),
        };
        let answer = self
            .compact_rollups_call(epoch, request.day, request.now, age_days, request.principal)?
            .fetch_one(&mut *tx)
            .await;
        let done = match answer {
            Ok(row) => {
                rollup_compaction(decode_answer(&row).map_err(db_error("decoding a rollup compaction"))?)
            }
            Err(e) => {
                drop(tx);
                return Err(self.rollup_error(epoch, "compacting a day's rollups", e).await);
            }
        };
        if let Err(e) = tx.commit().await {
            return Err(self
                .rollup_error(epoch, "committing a rollup compaction", e)
                .await);
        }
        tracing::info!(
            day = %sentinel_ports::day_name(request.day),
            buckets = done.buckets,
            chunks = done.chunks,
            bytes_before = done.bytes_before,
            bytes_after = done.bytes_after,
            epoch,
            "day's minute rollups compacted"
        );
        Ok(done)
    }
}
