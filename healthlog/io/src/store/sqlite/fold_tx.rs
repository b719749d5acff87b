//! The fold transaction of one delivery (spec: "Доставка SHALL сворачиваться одной
//! транзакцией"): `BEGIN IMMEDIATE` retried while busy, object and entity writes, the outcome,
//! the commit, and how long the write lock was held.

use super::*;

impl Store {
    /// Begins the one transaction a delivery folds in (`BEGIN IMMEDIATE`, retried while busy).
    /// `fail_after_objects` injects a fault after that many object writes (tests, and the
    /// property that a fold interrupted anywhere writes nothing).
    pub async fn begin_fold(&self, fail_after_objects: Option<usize>) -> Result<FoldTx, StoreError> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            self.count();
            match self.pool.begin_with("BEGIN IMMEDIATE").await {
                Ok(tx) => {
                    return Ok(FoldTx {
                        tx,
                        written: 0,
                        fail_after_objects,
                        round_trips: self.round_trips.clone(),
                        lock_hold_us: self.lock_hold_us.clone(),
                        began: std::time::Instant::now(),
                    });
                }
                Err(e) if is_busy(&e) || matches!(e, sqlx::Error::PoolTimedOut) => {
                    if attempt >= BEGIN_ATTEMPTS_MAX {
                        return Err(StoreError::Busy);
                    }
                    self.begin_retries.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    return Err(StoreError::Database {
                        context: "beginning a fold transaction",
                        source: e,
                    });
                }
            }
        }
    }
}

impl Store {
    /// The stored objects of one metric and layer for the listed hours, read outside any
    /// transaction: what the fold merges before it takes the write lock. Bounded by the hours
    /// one metric of a delivery can hold (`POINTS_PER_METRIC_MAX`), not by `HOURS_PER_READ_MAX`.
    pub async fn objects_to_merge(
        &self,
        metric: &str,
        layer: &str,
        hours: &[i64],
    ) -> Result<Vec<ObjectRow>, StoreError> {
        self.count();
        read_objects(&self.pool, metric, &[layer], hours).await
    }
}

/// The fold transaction of one delivery.
pub struct FoldTx {
    tx: Transaction<'static, Sqlite>,
    written: usize,
    fail_after_objects: Option<usize>,
    round_trips: Arc<AtomicU64>,
    lock_hold_us: Arc<AtomicU64>,
    /// When the write lock was granted.
    began: std::time::Instant,
}

impl FoldTx {
    fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// The stored objects of one metric and layer for the listed hours (one statement).
    pub async fn load(
        &mut self,
        metric: &str,
        layer: &str,
        hours: &[i64],
    ) -> Result<Vec<ObjectRow>, StoreError> {
        self.count();
        read_objects(&mut *self.tx, metric, &[layer], hours).await
    }

    /// The stamps of the stored objects of one metric and layer for the listed hours (one
    /// statement, no payload read): what the fold compares with the rows it merged outside the lock.
    pub async fn stamps(
        &mut self,
        metric: &str,
        layer: &str,
        hours: &[i64],
    ) -> Result<Vec<ObjectStamp>, StoreError> {
        self.count();
        let hours = serde_json::to_string(hours).expect("invariant: integers serialise");
        let rows = sqlx::query(
            "SELECT hour_us, units, hash, sealed FROM bucket WHERE metric = ?1 AND layer = ?2 \
             AND hour_us IN (SELECT value FROM json_each(?3)) ORDER BY hour_us",
        )
        .bind(metric)
        .bind(layer)
        .bind(hours)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db("reading object stamps"))?;
        let ctx = "reading an object stamp";
        rows.iter()
            .map(|r| {
                Ok(ObjectStamp {
                    hour_us: r.try_get(0).map_err(db(ctx))?,
                    units: r.try_get(1).map_err(db(ctx))?,
                    hash: r.try_get(2).map_err(db(ctx))?,
                    sealed: r.try_get(3).map_err(db(ctx))?,
                })
            })
            .collect()
    }

    /// Writes one object (insert, or update keeping its creator and its sealed flag).
    pub async fn put(
        &mut self,
        metric: &str,
        layer: &str,
        delivery_id: i64,
        w: &ObjectWrite,
    ) -> Result<(), StoreError> {
        if self.fail_after_objects == Some(self.written) {
            return Err(StoreError::Injected(self.written));
        }
        self.count();
        sqlx::query(
            "INSERT INTO bucket (metric, layer, hour_us, units, first_us, last_us, point_count, hash, sealed, \
             delivery_id, payload) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0, ?9, ?10) \
             ON CONFLICT (metric, layer, hour_us) DO UPDATE SET first_us = excluded.first_us, \
             last_us = excluded.last_us, point_count = excluded.point_count, hash = excluded.hash, \
             payload = excluded.payload",
        )
        .bind(metric)
        .bind(layer)
        .bind(w.hour_us)
        .bind(&w.units)
        .bind(w.first_us)
        .bind(w.last_us)
        .bind(w.point_count)
        .bind(&w.hash)
        .bind(delivery_id)
        .bind(&w.payload)
        .execute(&mut *self.tx)
        .await
        .map_err(db("writing an object"))?;
        self.written += 1;
        Ok(())
    }

    /// The stored version of an entity as the decision table needs it: hash, shape and
    /// provenance, never the content (its column is last and is not read).
    pub async fn load_entity(&mut self, key: &EntityKey) -> Result<Option<StoredHead>, StoreError> {
        self.count();
        let row = if key.is_workout() {
            sqlx::query("SELECT content_hash, shape, received_at_us, delivery_id FROM workout WHERE id = ?1")
                .bind(&key.id)
                .fetch_optional(&mut *self.tx)
                .await
        } else {
            sqlx::query(
                "SELECT content_hash, shape, received_at_us, delivery_id FROM record WHERE kind = ?1 AND id = ?2",
            )
            .bind(&key.section)
            .bind(&key.id)
            .fetch_optional(&mut *self.tx)
            .await
        }
        .map_err(db("reading a stored entity"))?;
        let Some(r) = row else { return Ok(None) };
        let ctx = "reading a stored entity";
        let shape: String = r.try_get(1).map_err(db(ctx))?;
        Ok(Some(StoredHead {
            hash: r.try_get(0).map_err(db(ctx))?,
            // A shape that does not read is the empty shape: any version with content covers it.
            shape: Shape::from_text(&shape).unwrap_or_default(),
            position: (r.try_get(2).map_err(db(ctx))?, r.try_get(3).map_err(db(ctx))?),
        }))
    }

    /// Writes an entity's version whole (insert or replacement), with its provenance.
    pub async fn put_entity(
        &mut self,
        v: &EntityVersion,
        at: Position,
        changed_at_us: i64,
    ) -> Result<(), StoreError> {
        if self.fail_after_objects == Some(self.written) {
            return Err(StoreError::Injected(self.written));
        }
        self.count();
        let h = &v.header;
        let bytes = i64::try_from(v.raw.len()).unwrap_or(i64::MAX);
        let done = if v.key.is_workout() {
            sqlx::query(
                "INSERT INTO workout (id, name, start_us, end_us, tz_offset_min, duration_s, content_hash, shape, \
                 delivery_id, received_at_us, changed_at_us, content_bytes, content) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) \
                 ON CONFLICT (id) DO UPDATE SET name = excluded.name, start_us = excluded.start_us, \
                 end_us = excluded.end_us, tz_offset_min = excluded.tz_offset_min, duration_s = excluded.duration_s, \
                 content_hash = excluded.content_hash, shape = excluded.shape, delivery_id = excluded.delivery_id, \
                 received_at_us = excluded.received_at_us, changed_at_us = excluded.changed_at_us, \
                 content_bytes = excluded.content_bytes, content = excluded.content",
            )
            .bind(&v.key.id)
            .bind(h.name.as_deref())
            .bind(h.start_us)
            .bind(h.end_us)
            .bind(h.tz_offset_min)
            .bind(h.duration_s)
            .bind(v.hash.as_slice())
            .bind(v.shape.to_text())
            .bind(at.1)
            .bind(at.0)
            .bind(changed_at_us)
            .bind(bytes)
            .bind(v.raw.as_bytes())
            .execute(&mut *self.tx)
            .await
        } else {
            sqlx::query(
                "INSERT INTO record (kind, id, at_us, tz_offset_min, content_hash, shape, delivery_id, received_at_us, \
                 changed_at_us, content_bytes, content) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
                 ON CONFLICT (kind, id) DO UPDATE SET at_us = excluded.at_us, tz_offset_min = excluded.tz_offset_min, \
                 content_hash = excluded.content_hash, shape = excluded.shape, delivery_id = excluded.delivery_id, \
                 received_at_us = excluded.received_at_us, changed_at_us = excluded.changed_at_us, \
                 content_bytes = excluded.content_bytes, content = excluded.content",
            )
            .bind(&v.key.section)
            .bind(&v.key.id)
            .bind(h.start_us)
            .bind(h.tz_offset_min)
            .bind(v.hash.as_slice())
            .bind(v.shape.to_text())
            .bind(at.1)
            .bind(at.0)
            .bind(changed_at_us)
            .bind(bytes)
            .bind(v.raw.as_bytes())
            .execute(&mut *self.tx)
            .await
        };
        done.map_err(db("writing an entity"))?;
        self.written += 1;
        Ok(())
    }

    /// Moves an entity's provenance to a later journal position; content and `changed_at_us`
    /// stay (spec: the provenance is raised even when the content hash is equal).
    pub async fn raise_provenance(&mut self, key: &EntityKey, at: Position) -> Result<(), StoreError> {
        self.count();
        let done = if key.is_workout() {
            sqlx::query("UPDATE workout SET delivery_id = ?2, received_at_us = ?3 WHERE id = ?1")
                .bind(&key.id)
                .bind(at.1)
                .bind(at.0)
                .execute(&mut *self.tx)
                .await
        } else {
            sqlx::query("UPDATE record SET delivery_id = ?3, received_at_us = ?4 WHERE kind = ?1 AND id = ?2")
                .bind(&key.section)
                .bind(&key.id)
                .bind(at.1)
                .bind(at.0)
                .execute(&mut *self.tx)
                .await
        };
        done.map_err(db("raising an entity's provenance"))?;
        Ok(())
    }

    /// Abandons the transaction: nothing of it is written.
    pub async fn rollback(self) -> Result<(), StoreError> {
        self.count();
        self.tx.rollback().await.map_err(db("rolling back a fold"))
    }

    /// Records the delivery's outcome in the same transaction and commits.
    #[allow(clippy::too_many_arguments)]
    pub async fn finish(
        mut self,
        id: i64,
        status: ParseStatus,
        uncovered: &Uncovered,
        counters: &Counters,
        record: &FoldRecord,
        folded_at_us: i64,
    ) -> Result<(), StoreError> {
        assert!(
            matches!(status, ParseStatus::Parsed | ParseStatus::Partial),
            "invariant: a commit is a success"
        );
        self.count();
        let (names, dropped) = uncovered_columns(Some(uncovered));
        let c = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let done = sqlx::query(
            "UPDATE delivery SET parse_status = ?2, error = NULL, uncovered = ?3, uncovered_dropped = ?4, \
             metrics = ?5, points = ?6, coordinates = ?7, objects_written = ?8, objects_unchanged = ?9, \
             collisions = ?10, incomparable = ?11, unit_mismatches = ?12, sealed_changes = ?13, folded_at_us = ?14, \
             entities = ?15, entities_written = ?16, entities_unchanged = ?17, provenance_updates = ?18, \
             versions_retained = ?19, versions_differing = ?20, skipped_entities = ?21, collision_objects = ?22, \
             incomparable_objects = ?23 WHERE id = ?1",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(names)
        .bind(dropped)
        .bind(c(counters.metrics))
        .bind(c(counters.points))
        .bind(c(counters.coordinates))
        .bind(c(counters.objects_written))
        .bind(c(counters.objects_unchanged))
        .bind(c(counters.collisions))
        .bind(c(counters.incomparable))
        .bind(c(counters.unit_mismatches))
        .bind(c(counters.sealed_changes))
        .bind(folded_at_us)
        .bind(c(counters.entities))
        .bind(c(counters.entities_written))
        .bind(c(counters.entities_unchanged))
        .bind(c(counters.provenance_updates))
        .bind(c(counters.versions_retained))
        .bind(c(counters.versions_differing))
        .bind(c(counters.skipped_entities))
        .bind(serde_json::to_string(&record.collision_objects).expect("invariant: a list serialises"))
        .bind(serde_json::to_string(&record.incomparable_objects).expect("invariant: a list serialises"))
        .execute(&mut *self.tx)
        .await
        .map_err(db("recording the fold outcome"))?;
        if done.rows_affected() != 1 {
            return Err(StoreError::Invalid(format!("journal row {id} does not exist")));
        }
        self.count();
        self.tx.commit().await.map_err(db("committing the fold"))?;
        let held = u64::try_from(self.began.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.lock_hold_us.store(held, Ordering::Relaxed);
        Ok(())
    }
}
