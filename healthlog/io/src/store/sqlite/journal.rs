//! The journal rows: appending (with the intake id's once-only rule), reading for the fold and
//! for operators, recording a failed fold, re-queueing.

use super::*;

impl Store {
    /// Appends a journal row; returns its id (the journal position). With an intake id already
    /// journaled, returns that row's id and appends nothing.
    pub async fn journal_insert(&self, d: &NewDelivery<'_>) -> Result<i64, StoreError> {
        assert!(
            d.body_sha256.is_some() || d.refused.is_some(),
            "invariant: a row has a body or a refusal"
        );
        self.count();
        let status = if d.refused.is_some() {
            ParseStatus::Failed
        } else {
            ParseStatus::Pending
        };
        let id: Option<i64> = sqlx::query_scalar(
            "INSERT INTO delivery (received_at_us, layer, body_sha256, body_bytes, parse_status, error, \
             automation_name, automation_id, session_id, intake_id) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
             ON CONFLICT (intake_id) WHERE intake_id IS NOT NULL DO NOTHING RETURNING id",
        )
        .bind(d.received_at_us)
        .bind(d.layer)
        .bind(d.body_sha256)
        .bind(i64::try_from(d.body_bytes).map_err(|_| StoreError::Invalid("body size over i64".into()))?)
        .bind(status.as_str())
        .bind(d.refused)
        .bind(d.headers.automation_name.as_deref())
        .bind(d.headers.automation_id.as_deref())
        .bind(d.headers.session_id.as_deref())
        .bind(d.intake_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db("appending a journal row"))?;
        match id {
            Some(id) => Ok(id),
            None => {
                self.count();
                sqlx::query_scalar("SELECT id FROM delivery WHERE intake_id = ?1")
                    .bind(d.intake_id)
                    .fetch_one(&self.pool)
                    .await
                    .map_err(db("reading a journaled intake"))
            }
        }
    }

    /// Journal entries in journal order, optionally only those with `status`.
    pub async fn journal(&self, status: Option<ParseStatus>) -> Result<Vec<JournalEntry>, StoreError> {
        self.count();
        let rows = sqlx::query(
            "SELECT id, received_at_us, layer, body_sha256, body_bytes, parse_status, error, automation_name, \
             automation_id, session_id FROM delivery WHERE ?1 IS NULL OR parse_status = ?1 ORDER BY id",
        )
        .bind(status.map(ParseStatus::as_str))
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading the journal"))?;
        rows.iter()
            .map(|r| {
                let status: String = r.try_get(5).map_err(db("reading a journal row"))?;
                Ok(JournalEntry {
                    id: r.try_get(0).map_err(db("reading a journal row"))?,
                    received_at_us: r.try_get(1).map_err(db("reading a journal row"))?,
                    layer: r.try_get(2).map_err(db("reading a journal row"))?,
                    body_sha256: r.try_get(3).map_err(db("reading a journal row"))?,
                    body_bytes: u64::try_from(r.try_get::<i64, _>(4).map_err(db("reading a journal row"))?)
                        .unwrap_or(0),
                    status: ParseStatus::from_str(&status).map_err(|_| {
                        StoreError::Invalid(format!("unknown parse status in journal row {status:?}"))
                    })?,
                    error: r.try_get(6).map_err(db("reading a journal row"))?,
                    headers: HaeHeaders {
                        automation_name: r.try_get(7).map_err(db("reading a journal row"))?,
                        automation_id: r.try_get(8).map_err(db("reading a journal row"))?,
                        session_id: r.try_get(9).map_err(db("reading a journal row"))?,
                    },
                })
            })
            .collect()
    }

    /// Journal rows with their counters, for operators.
    pub async fn deliveries(&self, status: Option<ParseStatus>) -> Result<Vec<DeliveryRow>, StoreError> {
        self.count();
        let rows = sqlx::query(
            "SELECT id, received_at_us, layer, body_sha256, body_bytes, parse_status, uncovered, uncovered_dropped, \
             error, metrics, points, coordinates, objects_written, objects_unchanged, collisions, incomparable, \
             unit_mismatches, sealed_changes, skipped_entities, entities, entities_written, entities_unchanged, \
             provenance_updates, versions_retained, versions_differing, collision_objects, incomparable_objects, \
             automation_name, automation_id, session_id FROM delivery WHERE ?1 IS NULL OR parse_status = ?1 ORDER BY id",
        )
        .bind(status.map(ParseStatus::as_str))
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading deliveries"))?;
        let ctx = "reading a delivery row";
        rows.iter()
            .map(|r| {
                let uncovered: Option<String> = r.try_get(6).map_err(db(ctx))?;
                let uncovered = match uncovered {
                    Some(text) => Some(
                        serde_json::from_str::<Vec<String>>(&text)
                            .map_err(|_| StoreError::Invalid("uncovered list is not a JSON array".into()))?,
                    ),
                    None => None,
                };
                let n = |i: usize| -> Result<Option<u64>, StoreError> {
                    Ok(r.try_get::<Option<i64>, _>(i)
                        .map_err(db(ctx))?
                        .map(|v| u64::try_from(v).unwrap_or(0)))
                };
                let counters = match (
                    n(9)?,
                    n(10)?,
                    n(11)?,
                    n(12)?,
                    n(13)?,
                    n(14)?,
                    n(15)?,
                    n(16)?,
                    n(17)?,
                ) {
                    (
                        Some(metrics),
                        Some(points),
                        Some(coordinates),
                        Some(objects_written),
                        Some(objects_unchanged),
                        Some(collisions),
                        Some(incomparable),
                        Some(unit_mismatches),
                        Some(sealed_changes),
                    ) => Some(Counters {
                        metrics,
                        points,
                        coordinates,
                        objects_written,
                        objects_unchanged,
                        collisions,
                        incomparable,
                        unit_mismatches,
                        sealed_changes,
                        entities: n(19)?.unwrap_or(0),
                        entities_written: n(20)?.unwrap_or(0),
                        entities_unchanged: n(21)?.unwrap_or(0),
                        provenance_updates: n(22)?.unwrap_or(0),
                        versions_retained: n(23)?.unwrap_or(0),
                        versions_differing: n(24)?.unwrap_or(0),
                        skipped_entities: n(18)?.unwrap_or(0),
                    }),
                    _ => None,
                };
                let list = |i: usize| -> Result<Option<Vec<ObjectCoordinates>>, StoreError> {
                    let text: Option<String> = r.try_get(i).map_err(db(ctx))?;
                    text.map(|t| {
                        serde_json::from_str(&t)
                            .map_err(|_| StoreError::Invalid("object list is not a JSON array".into()))
                    })
                    .transpose()
                };
                Ok(DeliveryRow {
                    id: r.try_get(0).map_err(db(ctx))?,
                    received_at_us: r.try_get(1).map_err(db(ctx))?,
                    layer: r.try_get(2).map_err(db(ctx))?,
                    body_sha256: r.try_get(3).map_err(db(ctx))?,
                    body_bytes: n(4)?.unwrap_or(0),
                    status: r.try_get(5).map_err(db(ctx))?,
                    uncovered,
                    uncovered_dropped: n(7)?,
                    error: r.try_get(8).map_err(db(ctx))?,
                    counters,
                    skipped_entities: n(18)?,
                    collision_objects: list(25)?,
                    incomparable_objects: list(26)?,
                    headers: HaeHeaders {
                        automation_name: r.try_get(27).map_err(db(ctx))?,
                        automation_id: r.try_get(28).map_err(db(ctx))?,
                        session_id: r.try_get(29).map_err(db(ctx))?,
                    },
                })
            })
            .collect()
    }

    /// Records a failed fold (its own transaction, after the fold's rolled back). Counters are
    /// cleared: a failed fold measured nothing that was written.
    /// `skipped` is written only when the parse counted it (spec: "не измерялось" stays
    /// distinct from 0 on the failure path too); `None` leaves the column as it was.
    pub async fn record_failure(
        &self,
        id: i64,
        error: &str,
        uncovered: Option<&Uncovered>,
        skipped: Option<u64>,
        folded_at_us: i64,
    ) -> Result<(), StoreError> {
        self.count();
        let (names, dropped) = uncovered_columns(uncovered);
        let done = sqlx::query(
            "UPDATE delivery SET parse_status = 'failed', error = ?2, uncovered = ?3, uncovered_dropped = ?4, \
             metrics = NULL, points = NULL, coordinates = NULL, objects_written = NULL, objects_unchanged = NULL, \
             collisions = NULL, incomparable = NULL, unit_mismatches = NULL, sealed_changes = NULL, \
             entities = NULL, entities_written = NULL, entities_unchanged = NULL, provenance_updates = NULL, \
             versions_retained = NULL, versions_differing = NULL, collision_objects = NULL, \
             incomparable_objects = NULL, skipped_entities = coalesce(?6, skipped_entities), \
             folded_at_us = ?5 WHERE id = ?1",
        )
        .bind(id)
        .bind(error)
        .bind(names)
        .bind(dropped)
        .bind(folded_at_us)
        .bind(skipped.map(|n| i64::try_from(n).unwrap_or(i64::MAX)))
        .execute(&self.pool)
        .await
        .map_err(db("recording a failed fold"))?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Invalid(format!("journal row {id} does not exist")));
        }
        Ok(())
    }

    /// Moves partial rows whose uncovered list names `section` back to pending (spec: the
    /// change that starts parsing a section re-queues the partial rows naming it).
    pub async fn requeue_partial_naming(&self, section: &str) -> Result<u64, StoreError> {
        self.count();
        let done = sqlx::query(
            "UPDATE delivery SET parse_status = 'pending' WHERE parse_status = 'partial' \
             AND EXISTS (SELECT 1 FROM json_each(delivery.uncovered) WHERE value = ?1)",
        )
        .bind(section)
        .execute(&self.pool)
        .await
        .map_err(db("re-queueing partial deliveries"))?;
        Ok(done.rows_affected())
    }

    /// Sets a delivery back to pending (the rebuild and the tests use it).
    pub async fn mark_all_pending(&self) -> Result<u64, StoreError> {
        self.count();
        let done = sqlx::query("UPDATE delivery SET parse_status = 'pending' WHERE body_sha256 IS NOT NULL")
            .execute(&self.pool)
            .await
            .map_err(db("re-queueing deliveries"))?;
        Ok(done.rows_affected())
    }
}
