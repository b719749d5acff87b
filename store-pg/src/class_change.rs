//! The PostgreSQL adapter's class moves (issue 9 item 4; ingest spec, "One hypertable per
//! retention class" and exit criterion "Class routing"): a point's history into its new class
//! table through `sentinel_move_point_class` (migrations/0005_retention.sql), which moves the
//! rows, recomputes the rollups over them and writes the `class_moved` control event in one
//! transaction fenced on the epoch and the start identity.
//!
//! Owns: the call and mapping its answer onto [`ClassMove`].

use sentinel_core::{Micros, RetentionClass};
use sqlx::Row;
use time::OffsetDateTime;

use super::{PgStore, core_start_to_db, db_error, epoch_to_db, from_odt, to_odt};
use sentinel_ports::{ClassMove, StoreError};

const MOVE: &str = "SELECT moved, observed_from, observed_to, seq \
     FROM sentinel_move_point_class($1, $2, $3, $4, $5, $6)";

impl PgStore {
    pub(super) async fn move_point_class_inner(
        &self,
        epoch: u32,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<ClassMove, StoreError> {
        let answer = sqlx::query(MOVE)
            .bind(epoch_to_db(epoch)?)
            .bind(core_start_to_db(self.core_start()))
            .bind(point_id)
            .bind(to.as_str())
            .bind(principal)
            .bind(to_odt(occurred_at)?)
            .fetch_one(&self.pool)
            .await;
        let row = match answer {
            Ok(row) => row,
            Err(e) => return Err(self.rollup_error(epoch, "moving a point's history", e).await),
        };
        let decode = || -> Result<ClassMove, sqlx::Error> {
            let moved: i64 = row.try_get(0)?;
            let from: Option<OffsetDateTime> = row.try_get(1)?;
            let to: Option<OffsetDateTime> = row.try_get(2)?;
            Ok(ClassMove {
                rows: moved.max(0) as u64,
                observed: from.zip(to).map(|(f, t)| (from_odt(f), from_odt(t))),
                seq: row.try_get(3)?,
            })
        };
        let moved = decode().map_err(db_error("decoding a class move"))?;
        tracing::info!(
            point_id,
            to = to.as_str(),
            rows = moved.rows,
            epoch,
            "point history moved to its class table"
        );
        Ok(moved)
    }
}
