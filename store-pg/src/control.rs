//! The control log (ingest spec, "Two logs"): fenced, epoch-stamped appends to
//! `control_event` and the paged read restart step 4 replays.

use sentinel_core::ControlEvent;
use sentinel_ports::{StoreError, StoredControlEvent};
use sqlx::Row;

use crate::{PgStore, db_error, epoch_to_db, fence, from_odt, to_odt};

/// Control events in input order: `seq` is drawn as rows are inserted in `ord` order, and the
/// outer ORDER BY returns them in that order.
pub(crate) const INSERT_CONTROL_EVENTS: &str = "\
WITH ins AS ( \
  INSERT INTO control_event (occurred_at, kind, point_id, subject_key, principal, core_epoch, payload, registry_version) \
  SELECT o, k, p, sk, pr, $5, pl::jsonb, rv \
  FROM UNNEST($1::timestamptz[], $2::text[], $3::text[], $4::text[], $6::text[], $7::int[], $8::text[]) \
       WITH ORDINALITY AS t(o, k, p, pr, pl, rv, sk, ord) \
  ORDER BY ord \
  RETURNING seq) \
SELECT seq FROM ins ORDER BY seq";

/// Appends `events` in order inside `tx` (which has passed the fence) and returns their
/// seqs in the same order; `context` names the write in an error.
pub(crate) async fn insert_control_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    epoch: u32,
    events: &[ControlEvent],
    context: &'static str,
) -> Result<Vec<i64>, StoreError> {
    if events.is_empty() {
        return Ok(Vec::new());
    }
    let epoch_db = epoch_to_db(epoch)?;
    let n = events.len();
    let mut occurred = Vec::with_capacity(n);
    let mut kinds = Vec::with_capacity(n);
    let mut points = Vec::with_capacity(n);
    let mut principals = Vec::with_capacity(n);
    let mut payloads = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut subject_keys = Vec::with_capacity(n);
    for event in events {
        occurred.push(to_odt(event.occurred_at)?);
        kinds.push(event.kind().as_str());
        points.push(event.point_column());
        subject_keys.push(event.subject_key());
        principals.push(&*event.principal);
        payloads.push(event.payload_json());
        versions.push(event.registry_version);
    }
    sqlx::query_scalar(INSERT_CONTROL_EVENTS)
        .bind(occurred)
        .bind(kinds)
        .bind(points)
        .bind(principals)
        .bind(epoch_db)
        .bind(payloads)
        .bind(versions)
        .bind(subject_keys)
        .fetch_all(&mut **tx)
        .await
        .map_err(db_error(context))
}

impl PgStore {
    pub(crate) async fn write_control_events_inner(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> Result<Vec<i64>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        sentinel_ports::check_control_stamps(epoch, &events)?;
        let n = events.len();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the control-event transaction"))?;
        fence(&mut tx, epoch, self.core_start()).await?;
        let seqs = insert_control_events(&mut tx, epoch, &events, "inserting control events").await?;
        tx.commit().await.map_err(db_error("committing control events"))?;
        debug_assert_eq!(seqs.len(), n);
        tracing::debug!(events = n, epoch, "control events committed");
        Ok(seqs)
    }

    pub(crate) async fn load_control_events_inner(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredControlEvent>, StoreError> {
        let limit = limit.min(sentinel_ports::CONTROL_EVENTS_LOAD_MAX) as i64;
        let rows = sqlx::query(
            "SELECT seq, occurred_at, kind, point_id, principal, core_epoch, payload::text AS payload, \
             registry_version FROM control_event WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("loading control events"))?;
        rows.iter().map(stored_control_event).collect()
    }

    /// The outbox at restart (issue 21 item 3): for each `point_desired` row, its point's
    /// newest `command_issued`, when no `command_result` for that command follows it. Served
    /// by the partial index of migration 0009, so it reads a few rows per writable point
    /// however long the log.
    pub(crate) async fn load_unanswered_commands_inner(&self) -> Result<Vec<StoredControlEvent>, StoreError> {
        let limit = i64::try_from(sentinel_ports::POINT_DESIRED_LOAD_MAX).unwrap_or(i64::MAX);
        let query = sqlx::query(
            "SELECT c.seq, c.occurred_at, c.kind, c.point_id, c.principal, c.core_epoch, \
             c.payload::text AS payload, c.registry_version \
             FROM point_desired d CROSS JOIN LATERAL ( \
               SELECT * FROM control_event e \
               WHERE e.kind = 'command_issued' AND e.point_id = d.point_id \
               ORDER BY e.seq DESC LIMIT 1) c \
             LEFT JOIN LATERAL ( \
               SELECT 1 AS found FROM control_event r \
               WHERE r.kind = 'command_result' AND r.point_id = c.point_id AND r.seq > c.seq \
                 AND r.payload->>'command_id' = c.payload->>'command_id' \
               ORDER BY r.seq LIMIT 1) answered ON true \
             WHERE answered.found IS NULL \
             ORDER BY d.point_id LIMIT $1",
        )
        .bind(limit);
        let rows = fetch_all_without_jit(&self.pool, query)
            .await
            .map_err(db_error("loading unanswered commands"))?;
        rows.iter().map(stored_control_event).collect()
    }
}

impl PgStore {
    /// The open verifications at restart: per `point_desired` row its point's newest
    /// `command_issued`, the first `applied` `command_result` for that id after it, and no
    /// verdict for that id after the result. Served by the partial indexes of migrations 0009
    /// and 0010: a few probes per writable point however long the log.
    pub(crate) async fn load_open_verifications_inner(
        &self,
    ) -> Result<Vec<sentinel_core::OpenVerification>, StoreError> {
        let limit = i64::try_from(sentinel_ports::POINT_DESIRED_LOAD_MAX).unwrap_or(i64::MAX);
        let query = sqlx::query(
            "SELECT d.point_id, c.occurred_at AS issued_at, c.payload::text AS issued_payload, \
             r.seq AS result_seq, r.occurred_at AS applied_at, r.payload::text AS result_payload \
             FROM point_desired d CROSS JOIN LATERAL ( \
               SELECT seq, occurred_at, payload FROM control_event e \
               WHERE e.kind = 'command_issued' AND e.point_id = d.point_id \
               ORDER BY e.seq DESC LIMIT 1) c \
             CROSS JOIN LATERAL ( \
               SELECT seq, occurred_at, payload FROM control_event e \
               WHERE e.kind = 'command_result' AND e.point_id = d.point_id AND e.seq > c.seq \
                 AND e.payload->>'command_id' = c.payload->>'command_id' \
                 AND e.payload->>'outcome' = 'applied' \
               ORDER BY e.seq LIMIT 1) r \
             LEFT JOIN LATERAL ( \
               SELECT 1 AS found FROM control_event v \
               WHERE v.kind IN ('command_verified', 'command_diverged') AND v.point_id = d.point_id \
                 AND v.seq > r.seq AND v.payload->>'command_id' = c.payload->>'command_id' \
               ORDER BY v.seq LIMIT 1) verdict ON true \
             WHERE verdict.found IS NULL \
             ORDER BY d.point_id LIMIT $1",
        )
        .bind(limit);
        let rows = fetch_all_without_jit(&self.pool, query)
            .await
            .map_err(db_error("loading open verifications"))?;
        let mut open = Vec::with_capacity(rows.len());
        for row in &rows {
            let get = |what: &'static str| db_error(what);
            let point_id: String = row.try_get("point_id").map_err(get("reading point_id"))?;
            let issued_payload: String = row
                .try_get("issued_payload")
                .map_err(get("reading the command's payload"))?;
            let result_payload: String = row
                .try_get("result_payload")
                .map_err(get("reading the result's payload"))?;
            let issued_at = from_odt(row.try_get("issued_at").map_err(get("reading issued_at"))?);
            let applied_at = from_odt(row.try_get("applied_at").map_err(get("reading applied_at"))?);
            let result_seq: i64 = row.try_get("result_seq").map_err(get("reading result_seq"))?;
            open.extend(sentinel_core::OpenVerification::from_stored(
                &point_id,
                (issued_at, &issued_payload),
                (result_seq, applied_at, &result_payload),
            ));
        }
        Ok(open)
    }

    /// Each named point's newest control-event seq: one probe of `control_event_by_point`
    /// (migration 0010) per point.
    pub(crate) async fn load_control_heads_inner(
        &self,
        mut point_ids: Vec<String>,
    ) -> Result<Vec<(String, i64)>, StoreError> {
        point_ids.truncate(sentinel_ports::POINT_DESIRED_LOAD_MAX);
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT w.p, h.seq FROM UNNEST($1::text[]) WITH ORDINALITY AS w(p, ord) \
             CROSS JOIN LATERAL ( \
               SELECT seq FROM control_event e WHERE e.point_id = w.p ORDER BY e.seq DESC LIMIT 1) h \
             ORDER BY w.ord",
        )
        .bind(&point_ids)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("loading the control log's heads"))?;
        Ok(rows)
    }
}

pub(crate) fn stored_control_event(row: &sqlx::postgres::PgRow) -> Result<StoredControlEvent, StoreError> {
    Ok(StoredControlEvent {
        seq: row
            .try_get("seq")
            .map_err(db_error("reading control_event.seq"))?,
        occurred_at: from_odt(
            row.try_get("occurred_at")
                .map_err(db_error("reading occurred_at"))?,
        ),
        kind: row.try_get("kind").map_err(db_error("reading kind"))?,
        point_id: row.try_get("point_id").map_err(db_error("reading point_id"))?,
        principal: row.try_get("principal").map_err(db_error("reading principal"))?,
        core_epoch: row
            .try_get::<i32, _>("core_epoch")
            .map_err(db_error("reading core_epoch"))?
            .max(0) as u32,
        payload: row.try_get("payload").map_err(db_error("reading payload"))?,
        registry_version: row
            .try_get("registry_version")
            .map_err(db_error("reading registry_version"))?,
    })
}

/// Runs `query` in a read transaction with JIT off. The restart queries probe a few index
/// entries per writable point through nested laterals whose estimated cost passes
/// `jit_above_cost`, and compiling them took longer than running them (about 180 ms of a
/// 300 ms read over a million-event log, BENCHMARKS.md "Cold start").
async fn fetch_all_without_jit(
    pool: &sqlx::PgPool,
    query: sqlx::query::Query<'_, sqlx::Postgres, sqlx::postgres::PgArguments>,
) -> Result<Vec<sqlx::postgres::PgRow>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET LOCAL jit = off").execute(&mut *tx).await?;
    let rows = query.fetch_all(&mut *tx).await?;
    tx.commit().await?;
    Ok(rows)
}
