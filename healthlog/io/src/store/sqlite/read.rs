//! Reads of the vitrine: the catalog and common hours over the covering index, the batch read of
//! listed hours, `status` queries, tools' full reads, and the fingerprint in one snapshot.

use super::*;

impl Store {
    /// Layers of a metric with their bounds and point counts (covering index, no payload).
    pub async fn catalog(&self, metric: &str) -> Result<Vec<CatalogRow>, StoreError> {
        self.catalog_with(CATALOG_SQL, metric).await
    }

    /// The same answer by a full scan of the table (the benchmark's baseline; never used by the CLI).
    pub async fn catalog_full_scan(&self, metric: &str) -> Result<Vec<CatalogRow>, StoreError> {
        self.catalog_with(CATALOG_FULL_SCAN_SQL, metric).await
    }

    async fn catalog_with(&self, sql: &'static str, metric: &str) -> Result<Vec<CatalogRow>, StoreError> {
        self.count();
        let rows = sqlx::query(sql)
            .bind(metric)
            .fetch_all(&self.pool)
            .await
            .map_err(db("reading the catalog"))?;
        rows.iter()
            .map(|r| {
                Ok(CatalogRow {
                    layer: r.try_get(0).map_err(db("reading a catalog row"))?,
                    objects: r.try_get(1).map_err(db("reading a catalog row"))?,
                    first_us: r.try_get(2).map_err(db("reading a catalog row"))?,
                    last_us: r.try_get(3).map_err(db("reading a catalog row"))?,
                    points: r.try_get(4).map_err(db("reading a catalog row"))?,
                })
            })
            .collect()
    }

    /// The freshest `limit` hours for which `metric` has objects in both layers.
    pub async fn common_hours(
        &self,
        metric: &str,
        layer_a: &str,
        layer_b: &str,
        limit: u32,
    ) -> Result<Vec<i64>, StoreError> {
        self.count();
        sqlx::query_scalar(COMMON_HOURS_SQL)
            .bind(metric)
            .bind(layer_a)
            .bind(layer_b)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await
            .map_err(db("reading common hours"))
    }

    /// The objects of `layers` for the listed hours of one metric, in one statement.
    pub async fn read_hours(
        &self,
        metric: &str,
        layers: &[&str],
        hours: &[i64],
    ) -> Result<Vec<ObjectRow>, StoreError> {
        if hours.len() > HOURS_PER_READ_MAX {
            return Err(StoreError::Invalid(format!(
                "{} hours listed, over {HOURS_PER_READ_MAX}",
                hours.len()
            )));
        }
        self.count();
        read_objects(&self.pool, metric, layers, hours).await
    }

    /// `EXPLAIN QUERY PLAN` of a statement, one line per plan row.
    pub async fn explain(&self, sql: &str, binds: &[&str]) -> Result<Vec<String>, StoreError> {
        self.count();
        let text = format!("EXPLAIN QUERY PLAN {sql}");
        let mut q = sqlx::query(sqlx::AssertSqlSafe(text));
        for b in binds {
            q = q.bind(*b);
        }
        let rows = q.fetch_all(&self.pool).await.map_err(db("explaining a query"))?;
        rows.iter()
            .map(|r| r.try_get::<String, _>(3).map_err(db("reading a plan row")))
            .collect()
    }

    /// Marks an object sealed or not. The rule that seals hours is not defined yet (spec:
    /// "Признак запечатанного часа"); until it is, only tests and operators set it.
    pub async fn set_sealed(
        &self,
        metric: &str,
        layer: &str,
        hour_us: i64,
        sealed: bool,
    ) -> Result<bool, StoreError> {
        self.count();
        let done =
            sqlx::query("UPDATE bucket SET sealed = ?4 WHERE metric = ?1 AND layer = ?2 AND hour_us = ?3")
                .bind(metric)
                .bind(layer)
                .bind(hour_us)
                .bind(sealed)
                .execute(&self.pool)
                .await
                .map_err(db("sealing an object"))?;
        Ok(done.rows_affected() == 1)
    }

    /// Number of hourly objects.
    pub async fn object_count(&self) -> Result<i64, StoreError> {
        self.count();
        sqlx::query_scalar("SELECT count(*) FROM bucket INDEXED BY bucket_catalog")
            .fetch_one(&self.pool)
            .await
            .map_err(db("counting objects"))
    }

    /// Every object, payload included, in key order (tests and tools; not for hot paths).
    pub async fn all_objects(&self) -> Result<Vec<ObjectRow>, StoreError> {
        self.count();
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {OBJECT_COLUMNS} FROM bucket ORDER BY metric, layer, hour_us"
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading objects"))?;
        rows.iter().map(object_row).collect()
    }

    /// Every entity, content included, workouts then records, in key order (tests and tools).
    pub async fn all_entities(&self) -> Result<Vec<EntityRow>, StoreError> {
        self.count();
        let rows = sqlx::query(
            "SELECT 'workouts', id, content, content_hash, delivery_id, received_at_us, changed_at_us FROM workout \
             UNION ALL SELECT kind, id, content, content_hash, delivery_id, received_at_us, changed_at_us FROM record \
             ORDER BY 1, 2",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading entities"))?;
        let ctx = "reading an entity row";
        rows.iter()
            .map(|r| {
                Ok(EntityRow {
                    section: r.try_get(0).map_err(db(ctx))?,
                    id: r.try_get(1).map_err(db(ctx))?,
                    content: r.try_get(2).map_err(db(ctx))?,
                    content_hash: r.try_get(3).map_err(db(ctx))?,
                    delivery_id: r.try_get(4).map_err(db(ctx))?,
                    received_at_us: r.try_get(5).map_err(db(ctx))?,
                    changed_at_us: r.try_get(6).map_err(db(ctx))?,
                })
            })
            .collect()
    }

    /// Per automation name (NULL: deliveries without the HAE headers), its delivery count and
    /// its last delivery with that delivery's status.
    pub async fn automations(&self) -> Result<Vec<AutomationRow>, StoreError> {
        self.count();
        let rows = sqlx::query(
            "SELECT d.automation_name, c.n, d.id, d.received_at_us, d.parse_status FROM delivery AS d \
             JOIN (SELECT automation_name, count(*) AS n, max(id) AS last FROM delivery GROUP BY automation_name) AS c \
             ON c.last = d.id ORDER BY d.automation_name",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading automations"))?;
        let ctx = "reading an automation row";
        rows.iter()
            .map(|r| {
                Ok(AutomationRow {
                    automation_name: r.try_get(0).map_err(db(ctx))?,
                    deliveries: r.try_get(1).map_err(db(ctx))?,
                    last_id: r.try_get(2).map_err(db(ctx))?,
                    last_received_at_us: r.try_get(3).map_err(db(ctx))?,
                    last_status: r.try_get(4).map_err(db(ctx))?,
                })
            })
            .collect()
    }

    /// Per metric and layer, the newest point's end, from the covering index.
    pub async fn newest_points(&self) -> Result<Vec<NewestRow>, StoreError> {
        self.count();
        let rows = sqlx::query(
            "SELECT metric, layer, max(last_us) FROM bucket INDEXED BY bucket_catalog GROUP BY metric, layer \
             ORDER BY metric, layer",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db("reading the newest points"))?;
        let ctx = "reading a newest-point row";
        rows.iter()
            .map(|r| {
                Ok(NewestRow {
                    metric: r.try_get(0).map_err(db(ctx))?,
                    layer: r.try_get(1).map_err(db(ctx))?,
                    newest_us: r.try_get(2).map_err(db(ctx))?,
                })
            })
            .collect()
    }

    /// The fingerprint of the vitrine, read in one snapshot (a read transaction): sections are
    /// walked in the order the query defines, never the file's row order.
    pub async fn fingerprint(&self) -> Result<(String, u64), StoreError> {
        self.count();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db("beginning the fingerprint snapshot"))?;
        let mut fp = Fingerprint::new();
        {
            let mut rows = sqlx::query(
                "SELECT metric, layer, hour_us, units, hash FROM bucket ORDER BY metric, layer, hour_us",
            )
            .fetch(&mut *tx);
            while let Some(r) = rows
                .try_next()
                .await
                .map_err(db("reading objects for the fingerprint"))?
            {
                let metric: &str = r.try_get(0).map_err(db("reading a fingerprint row"))?;
                let layer: &str = r.try_get(1).map_err(db("reading a fingerprint row"))?;
                let hour: i64 = r.try_get(2).map_err(db("reading a fingerprint row"))?;
                let units: &str = r.try_get(3).map_err(db("reading a fingerprint row"))?;
                let hash: &[u8] = r.try_get(4).map_err(db("reading a fingerprint row"))?;
                fp.object(metric, layer, hour, units, hash);
            }
        }
        {
            let mut rows = sqlx::query("SELECT id, content_hash FROM workout ORDER BY id").fetch(&mut *tx);
            while let Some(r) = rows
                .try_next()
                .await
                .map_err(db("reading workouts for the fingerprint"))?
            {
                let id: &str = r.try_get(0).map_err(db("reading a fingerprint row"))?;
                let hash: &[u8] = r.try_get(1).map_err(db("reading a fingerprint row"))?;
                fp.workout(id, hash);
            }
        }
        {
            let mut rows =
                sqlx::query("SELECT kind, id, content_hash FROM record ORDER BY kind, id").fetch(&mut *tx);
            while let Some(r) = rows
                .try_next()
                .await
                .map_err(db("reading records for the fingerprint"))?
            {
                let kind: &str = r.try_get(0).map_err(db("reading a fingerprint row"))?;
                let id: &str = r.try_get(1).map_err(db("reading a fingerprint row"))?;
                let hash: &[u8] = r.try_get(2).map_err(db("reading a fingerprint row"))?;
                fp.record(kind, id, hash);
            }
        }
        tx.commit().await.map_err(db("ending the fingerprint snapshot"))?;
        let rows = fp.rows();
        Ok((fp.finish(), rows))
    }
}
