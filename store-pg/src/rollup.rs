//! The PostgreSQL adapter's rollups (ingest spec, "Retention and rollups", "Reprocess";
//! DESIGN.md §3): calls into the SQL functions of `migrations/0004_rollups.sql`, which own the
//! aggregate definition (live rows only, counts only for points that are not `agg_safe`,
//! buckets rounded outward), the refresh watermark and the late-row invalidations.
//!
//! Owns: mapping those functions' answers and the fence's refusal (SQLSTATE `SN001`) onto the
//! port's types, and the reads of both grains (minute rollups through `rollup_1m_all`, hot and
//! compacted: `migrations/0016_rollup_compaction.sql`). Every statement is static; the
//! functions are the only writers of the rollup tables, and the writer role may only execute
//! them.

use sentinel_core::{Micros, RetentionClass};
use sqlx::Row;
use sqlx::postgres::PgRow;
use time::OffsetDateTime;

use super::{PgStore, core_start_to_db, db_error, epoch_to_db, from_odt, to_odt};
use sentinel_ports::{
    ROLLUPS_LOAD_MAX, RollupGrain, RollupRefresh, RollupRow, RollupStep, RollupStepLimits, RollupWatermark,
    StoreError,
};

/// The SQLSTATE `sentinel_rollup_fence` raises when (epoch, start identity) is no longer the
/// holder's (migration 0013).
const FENCED_SQLSTATE: &str = "SN001";

const REFRESH_RANGE: &str = "SELECT from_1m, to_1m, buckets_1m, from_1h, to_1h, buckets_1h \
     FROM sentinel_rollup_refresh_range($1, $2, $3, $4)";
const CLAIM: &str = "SELECT sentinel_rollup_claim($1, $2, $3, $4, $5)";
const APPLY: &str = "SELECT refreshed_from, refreshed_to, minutes_advanced, invalidated_minutes, \
     buckets_written, more FROM sentinel_rollup_apply($1, $2)";
const WATERMARK: &str =
    "SELECT refreshed_from, refreshed_to, claimed_to FROM rollup_watermark WHERE singleton";
/// Minute rollups hot and compacted (`rollup_1m_all`, migration 0016): the `day` bound lets a
/// read decode only the chunks of its days.
const LOAD_1M: &str = "SELECT point_id, bucket, retention_class, count, live_count, sum, min, max \
     FROM rollup_1m_all WHERE bucket >= $1 AND bucket < $2 \
     AND day >= date_bin('1 day', $1, TIMESTAMPTZ '1970-01-01 00:00:00+00') AND day < $2 \
     AND ($3::text IS NULL OR point_id = $3) \
     ORDER BY point_id, bucket LIMIT $4";
const LOAD_1H: &str = "SELECT point_id, bucket, retention_class, count, live_count, sum, min, max \
     FROM rollup_1h WHERE bucket >= $1 AND bucket < $2 AND ($3::text IS NULL OR point_id = $3) \
     ORDER BY point_id, bucket LIMIT $4";

fn class_from_db(text: &str) -> Result<RetentionClass, StoreError> {
    RetentionClass::ALL
        .into_iter()
        .find(|c| c.as_str() == text)
        .ok_or_else(|| StoreError::Other(format!("unknown retention class {text:?} in a rollup")))
}

fn count_from_db(n: i64) -> Result<u64, StoreError> {
    u64::try_from(n).map_err(|_| StoreError::Other(format!("negative rollup count {n}")))
}

fn rollup_from_row(row: &PgRow) -> Result<RollupRow, sqlx::Error> {
    let class: String = row.try_get(2)?;
    let bucket: OffsetDateTime = row.try_get(1)?;
    let decode = |e: StoreError| sqlx::Error::Decode(e.to_string().into());
    Ok(RollupRow {
        point_id: row.try_get(0)?,
        bucket: from_odt(bucket),
        class: class_from_db(&class).map_err(decode)?,
        count: count_from_db(row.try_get(3)?).map_err(decode)?,
        live_count: count_from_db(row.try_get(4)?).map_err(decode)?,
        sum: row.try_get(5)?,
        min: row.try_get(6)?,
        max: row.try_get(7)?,
    })
}

impl PgStore {
    /// Maps the fence's refusal to [`StoreError::Fenced`] naming the holder now.
    pub(super) async fn rollup_error(&self, epoch: u32, context: &'static str, e: sqlx::Error) -> StoreError {
        if let sqlx::Error::Database(db) = &e
            && db.code().as_deref() == Some(FENCED_SQLSTATE)
        {
            return self.fenced(epoch).await;
        }
        db_error(context)(e)
    }

    pub(super) async fn refresh_rollups_inner(
        &self,
        epoch: u32,
        from: Micros,
        to: Micros,
    ) -> Result<RollupRefresh, StoreError> {
        if from >= to {
            return Err(StoreError::Other(format!(
                "a rollup refresh needs from < to, got [{from}, {to})"
            )));
        }
        let answer = sqlx::query(REFRESH_RANGE)
            .bind(epoch_to_db(epoch)?)
            .bind(core_start_to_db(self.core_start()))
            .bind(to_odt(from)?)
            .bind(to_odt(to)?)
            .fetch_one(&self.pool)
            .await;
        let row = match answer {
            Ok(row) => row,
            Err(e) => return Err(self.rollup_error(epoch, "refreshing rollups", e).await),
        };
        let decode = || -> Result<RollupRefresh, sqlx::Error> {
            let at = |i: usize| row.try_get::<OffsetDateTime, _>(i).map(from_odt);
            let n = |i: usize| row.try_get::<i64, _>(i).map(|n| n.max(0) as u64);
            Ok(RollupRefresh {
                minute_range: (at(0)?, at(1)?),
                minute_buckets: n(2)?,
                hour_range: (at(3)?, at(4)?),
                hour_buckets: n(5)?,
            })
        };
        let refresh = decode().map_err(db_error("decoding the rollup refresh"))?;
        tracing::debug!(
            epoch,
            minute_buckets = refresh.minute_buckets,
            hour_buckets = refresh.hour_buckets,
            "rollups refreshed over a range"
        );
        Ok(refresh)
    }

    pub(super) async fn refresh_closed_rollups_inner(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<RollupStep, StoreError> {
        // Two transactions (see the migration): the claim holds the watermark row, which every
        // commit's trigger shares, only for as long as it takes to move one mark.
        self.rollup_claim(epoch, closed_before, limits).await?;
        self.rollup_apply(epoch).await
    }

    /// The first half of the running core's rollup step (`sentinel_rollup_claim`), on its own
    /// so the conformance suite can stop between the halves as a crash would.
    pub async fn rollup_claim(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<(), StoreError> {
        let step = i32::try_from(limits.step_minutes_max).unwrap_or(i32::MAX);
        let invalidations = i32::try_from(limits.invalidations_max).unwrap_or(i32::MAX);
        match sqlx::query(CLAIM)
            .bind(epoch_to_db(epoch)?)
            .bind(core_start_to_db(self.core_start()))
            .bind(to_odt(closed_before)?)
            .bind(step)
            .bind(invalidations)
            .execute(&self.pool)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => Err(self.rollup_error(epoch, "claiming a rollup step", e).await),
        }
    }

    /// The second half (`sentinel_rollup_apply`): recomputes the open claim.
    pub async fn rollup_apply(&self, epoch: u32) -> Result<RollupStep, StoreError> {
        let epoch_db = epoch_to_db(epoch)?;
        let row = match sqlx::query(APPLY)
            .bind(epoch_db)
            .bind(core_start_to_db(self.core_start()))
            .fetch_one(&self.pool)
            .await
        {
            Ok(row) => row,
            Err(e) => return Err(self.rollup_error(epoch, "applying a rollup step", e).await),
        };
        let decode = || -> Result<RollupStep, sqlx::Error> {
            let at = |i: usize| row.try_get::<OffsetDateTime, _>(i).map(from_odt);
            let refreshed_to = at(1)?;
            Ok(RollupStep {
                watermark: RollupWatermark {
                    refreshed_from: at(0)?,
                    refreshed_to,
                    claimed_to: refreshed_to,
                },
                minutes_advanced: row.try_get::<i32, _>(2)?.max(0) as u32,
                invalidated_minutes: row.try_get::<i32, _>(3)?.max(0) as u32,
                buckets_written: row.try_get::<i64, _>(4)?.max(0) as u64,
                more: row.try_get(5)?,
            })
        };
        let step = decode().map_err(db_error("decoding the rollup step"))?;
        tracing::debug!(
            epoch,
            minutes_advanced = step.minutes_advanced,
            invalidated_minutes = step.invalidated_minutes,
            buckets_written = step.buckets_written,
            "rollup step applied"
        );
        Ok(step)
    }

    pub(super) async fn rollup_watermark_inner(&self) -> Result<Option<RollupWatermark>, StoreError> {
        let row = sqlx::query(WATERMARK)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("reading the rollup watermark"))?;
        let marks: [Option<OffsetDateTime>; 3] = [
            row.try_get(0)
                .map_err(db_error("decoding the rollup watermark"))?,
            row.try_get(1)
                .map_err(db_error("decoding the rollup watermark"))?,
            row.try_get(2)
                .map_err(db_error("decoding the rollup watermark"))?,
        ];
        Ok(match marks {
            [Some(from), Some(to), Some(claimed)] => Some(RollupWatermark {
                refreshed_from: from_odt(from),
                refreshed_to: from_odt(to),
                claimed_to: from_odt(claimed),
            }),
            _ => None,
        })
    }

    pub(super) async fn load_rollups_inner(
        &self,
        grain: RollupGrain,
        from: Micros,
        to: Micros,
        point_id: Option<&str>,
    ) -> Result<Vec<RollupRow>, StoreError> {
        let sql = match grain {
            RollupGrain::Minute => LOAD_1M,
            RollupGrain::Hour => LOAD_1H,
        };
        let rows = sqlx::query(sql)
            .bind(to_odt(from)?)
            .bind(to_odt(to)?)
            .bind(point_id)
            .bind(ROLLUPS_LOAD_MAX as i64)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("loading rollups"))?;
        rows.iter()
            .map(rollup_from_row)
            .collect::<Result<_, _>>()
            .map_err(db_error("decoding rollups"))
    }
}
