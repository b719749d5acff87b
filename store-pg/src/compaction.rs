//! The PostgreSQL adapter's compaction (issue 24 items 1 and 2; core runtime spec, "compression
//! from day seven"): one closed day of one class table into its compacted partition through
//! `sentinel_compact_day` (`migrations/0015_compaction.sql`), which fences on the epoch and
//! the start identity, encodes the day's rows into chunks, empties the hot partition and writes
//! the `compaction` control event in one transaction.
//!
//! Owns: the call, the refusals checked first (`sentinel_ports::check_compaction`, the same
//! words as the model's; the function checks them again), and mapping its answer onto
//! [`Compaction`]. The reads of compacted rows are the other modules' (they read the
//! `observation_<class>_all` views).

use sqlx::Row;

use super::{PgStore, core_start_to_db, db_error, epoch_to_db, to_odt};
use sentinel_ports::{Compaction, CompactionRequest, StoreError, check_compaction};

const COMPACT: &str = "SELECT rows, chunks, bytes_before, bytes_after, seq \
     FROM sentinel_compact_day($1, $2, $3, $4, $5, $6, $7, $8)";

impl PgStore {
    pub(super) async fn compact_day_inner(
        &self,
        epoch: u32,
        request: CompactionRequest<'_>,
    ) -> Result<Compaction, StoreError> {
        check_compaction(&request)?;
        let stream_oldest = request.stream_oldest.map(to_odt).transpose()?;
        let answer = sqlx::query(COMPACT)
            .bind(epoch_to_db(epoch)?)
            .bind(core_start_to_db(self.core_start()))
            .bind(request.class.as_str())
            .bind(to_odt(request.day)?)
            .bind(to_odt(request.now)?)
            .bind(i32::try_from(request.compact_after_days).unwrap_or(i32::MAX))
            .bind(stream_oldest)
            .bind(request.principal)
            .fetch_one(&self.pool)
            .await;
        let row = match answer {
            Ok(row) => row,
            Err(e) => return Err(self.rollup_error(epoch, "compacting a day", e).await),
        };
        let decode = || -> Result<Compaction, sqlx::Error> {
            let count =
                |i: usize| -> Result<u64, sqlx::Error> { Ok(row.try_get::<i64, _>(i)?.max(0) as u64) };
            Ok(Compaction {
                rows: count(0)?,
                chunks: count(1)?,
                bytes_before: count(2)?,
                bytes_after: count(3)?,
                seq: row.try_get(4)?,
            })
        };
        let done = decode().map_err(db_error("decoding a compaction"))?;
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
            epoch,
            "day compacted"
        );
        Ok(done)
    }
}
