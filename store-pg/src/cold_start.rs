//! The `core_start` record of each acquisition and its cold-start timings (core runtime spec,
//! "Restart time").

use sentinel_ports::{ColdStart, StartupStep, StoreError};
use sqlx::Row;
use sqlx::postgres::PgRow;
use time::OffsetDateTime;

use crate::{PgStore, db_error, epoch_to_db, fence, from_odt};

/// Steps arrive as two parallel arrays and are kept in their given order.
pub(crate) const RECORD_COLD_START: &str = "UPDATE core_start SET ready_at = now(), core_start = COALESCE($4, core_start), steps = \
     (SELECT coalesce(jsonb_agg(jsonb_build_object('step', s, 'duration_us', d) ORDER BY n), '[]'::jsonb) \
      FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS u(s, d, n)) \
     WHERE epoch = $1";

pub(crate) const SELECT_COLD_STARTS: &str = "SELECT c.epoch, c.started_at, c.backend_pid, c.application_name, c.ready_at, \
     array(SELECT e->>'step' FROM jsonb_array_elements(c.steps) WITH ORDINALITY AS x(e, n) ORDER BY n), \
     array(SELECT (e->>'duration_us')::bigint FROM jsonb_array_elements(c.steps) WITH ORDINALITY AS x(e, n) \
       ORDER BY n), \
     c.core_start \
     FROM core_start c ORDER BY c.epoch";

impl PgStore {
    pub(crate) async fn record_cold_start_inner(
        &self,
        epoch: u32,
        core_start: Option<u64>,
        steps: Vec<StartupStep>,
    ) -> Result<(), StoreError> {
        sentinel_ports::check_core_start(core_start)?;
        let epoch_db = epoch_to_db(epoch)?;
        // Within 2^53 - 1 (checked above), so the cast keeps every value.
        let core_start_db = core_start.map(|token| token as i64);
        let names: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        let durations_us: Vec<i64> = steps
            .iter()
            .map(|s| i64::try_from(s.duration_us).unwrap_or(i64::MAX))
            .collect();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the cold-start transaction"))?;
        fence(&mut tx, epoch, self.core_start()).await?;
        let updated = sqlx::query(RECORD_COLD_START)
            .bind(epoch_db)
            .bind(names)
            .bind(durations_us)
            .bind(core_start_db)
            .execute(&mut *tx)
            .await
            .map_err(db_error("recording the cold start"))?
            .rows_affected();
        if updated != 1 {
            return Err(StoreError::Other(format!(
                "no acquisition recorded for epoch {epoch}"
            )));
        }
        tx.commit().await.map_err(db_error("committing the cold start"))?;
        tracing::debug!(epoch, steps = steps.len(), "cold start recorded");
        Ok(())
    }

    /// Every acquisition and its cold start, ascending by epoch.
    pub async fn cold_starts(&self) -> Result<Vec<ColdStart>, StoreError> {
        let rows = sqlx::query(SELECT_COLD_STARTS)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading core_start"))?;
        rows.iter().map(cold_start_from_row).collect()
    }
}

pub(crate) fn cold_start_from_row(row: &PgRow) -> Result<ColdStart, StoreError> {
    let decode = || -> Result<_, sqlx::Error> {
        Ok((
            row.try_get::<i32, _>(0)?,
            row.try_get::<OffsetDateTime, _>(1)?,
            row.try_get::<i32, _>(2)?,
            row.try_get::<String, _>(3)?,
            row.try_get::<Option<OffsetDateTime>, _>(4)?,
            row.try_get::<Vec<String>, _>(5)?,
            row.try_get::<Vec<i64>, _>(6)?,
            row.try_get::<Option<i64>, _>(7)?,
        ))
    };
    let (epoch, started_at, backend_pid, application_name, ready_at, names, durations_us, core_start) =
        decode().map_err(db_error("decoding core_start"))?;
    let epoch = u32::try_from(epoch)
        .map_err(|_| StoreError::Other(format!("negative epoch {epoch} in core_start")))?;
    Ok(ColdStart {
        epoch,
        started_at: from_odt(started_at),
        backend_pid: i64::from(backend_pid),
        application_name,
        ready_at: ready_at.map(from_odt),
        steps: names
            .into_iter()
            .zip(durations_us)
            .map(|(step, duration_us)| StartupStep {
                step,
                duration_us: duration_us.max(0) as u64,
            })
            .collect(),
        // The column's CHECK keeps it within 1..=2^53 - 1.
        core_start: core_start.map(|token| token.max(0) as u64),
    })
}
