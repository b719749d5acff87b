//! The PostgreSQL adapter's history read (issue 9 item 6, `sentinel history`): one point's raw
//! rows over an observed range from its class table, with quality and reason, in the order of
//! invariant 5 (`observed_at`, `ingested_at`, key). Reads only, so it runs as the read-only
//! role (`migrations/0003_roles.sql`).
//!
//! Owns: the three static statements (one per class, over its hot and compacted rows: the
//! `observation_<class>_all` view of migration 0015, the bound on `obs_hour` skipping the
//! chunks outside the range) and decoding their rows.

use sentinel_core::{Micros, RetentionClass};
use sqlx::Row;
use time::OffsetDateTime;

use super::{PgStore, db_error, from_odt, quality_from_db, to_odt, value_from_columns};
use sentinel_ports::{HISTORY_ROWS_MAX, HistoryRow, StoreError};

macro_rules! history {
    ($table:literal) => {
        concat!(
            "SELECT observed_at, ingested_at, value_num, value_bool, value_text, quality::text, reason FROM ",
            $table,
            " o WHERE o.point_key = ",
            point_key_of!("$1"),
            " AND observed_at >= $2 AND observed_at < $3 \
             AND o.obs_hour >= date_bin('1 hour', $2, TIMESTAMPTZ '1970-01-01 00:00:00+00') AND o.obs_hour < $3 \
             ORDER BY observed_at, ingested_at, ",
            instance_of!("o"),
            " COLLATE \"C\", source_epoch, source_seq LIMIT $4"
        )
    };
}

fn history_sql(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => history!("observation_measurement_all"),
        RetentionClass::State => history!("observation_state_all"),
        RetentionClass::Diagnostic => history!("observation_diagnostic_all"),
    }
}

impl PgStore {
    pub(super) async fn load_history_inner(
        &self,
        point_id: &str,
        class: RetentionClass,
        from: Micros,
        to: Micros,
        limit: usize,
    ) -> Result<Vec<HistoryRow>, StoreError> {
        let limit = i64::try_from(limit.min(HISTORY_ROWS_MAX)).unwrap_or(0);
        let rows = sqlx::query(history_sql(class))
            .bind(point_id)
            .bind(to_odt(from)?)
            .bind(to_odt(to)?)
            .bind(limit)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("loading history"))?;
        rows.iter()
            .map(|row| {
                let decode = || -> Result<_, sqlx::Error> {
                    Ok((
                        row.try_get::<OffsetDateTime, _>(0)?,
                        row.try_get::<OffsetDateTime, _>(1)?,
                        row.try_get::<Option<f64>, _>(2)?,
                        row.try_get::<Option<bool>, _>(3)?,
                        row.try_get::<Option<String>, _>(4)?,
                        row.try_get::<String, _>(5)?,
                        row.try_get::<Option<String>, _>(6)?,
                    ))
                };
                let (observed, ingested, num, boolean, text, quality, reason) =
                    decode().map_err(db_error("decoding a history row"))?;
                Ok(HistoryRow {
                    observed_at: from_odt(observed),
                    ingested_at: from_odt(ingested),
                    value: value_from_columns(num, boolean, text),
                    quality: quality_from_db(&quality)?,
                    reason,
                })
            })
            .collect()
    }
}
