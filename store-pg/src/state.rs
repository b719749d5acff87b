//! The projection's checkpoint and restart's reads (ingest spec, "Projection", "Restart" steps
//! 2–3 and 5): the `point_state` upsert, the log heads per class table, and the derived
//! points' windows.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sentinel_core::derived::{WindowRequest, WindowRow};
use sentinel_core::{LogHead, ObsKey, PointState, RestoredState, RetentionClass};
use sentinel_ports::StoreError;
use sqlx::Row;
use sqlx::postgres::PgRow;
use time::OffsetDateTime;

use crate::{
    PgStore, db_error, fence, from_odt, key_to_db, quality_from_db, to_odt, value_columns, value_from_columns,
};

/// The invariant-5 order, newest first, over hot and compacted rows (migration 0015). A point's
/// head is at or after the hour of its newest row in either form (`newest_chunk`: the newest
/// chunk's hour, or the hour of the newest hot row, an index probe each), so the scan skips
/// every chunk before it: a restart decodes a chunk only when it holds the point's newest rows.
/// `COLLATE "C"` makes text compare bytewise, as Rust's `str` does, whatever the database's
/// collation.
macro_rules! log_heads {
    ($table:literal, $hot:literal, $compact:literal) => {
        concat!(
            "SELECT p.point_id, h.quality::text, h.reason, h.observed_at, h.ingested_at, \
             h.driver_instance, h.source_epoch, h.source_seq, v.value_num, v.value_bool, v.value_text, \
             v.observed_at, v.ingested_at, v.driver_instance, v.source_epoch, v.source_seq \
             FROM (SELECT u.point_id, \
               GREATEST((SELECT max(c.hour) FROM ",
            $compact,
            " c WHERE c.point_key = ",
            point_key_of!("u.point_id"),
            "), (SELECT date_bin('1 hour', max(o.observed_at), TIMESTAMPTZ '1970-01-01 00:00:00+00') FROM ",
            $hot,
            " o WHERE o.point_key = ",
            point_key_of!("u.point_id"),
            "), '-infinity') AS newest_chunk, \
               GREATEST((SELECT max(c.hour) FROM ",
            $compact,
            " c WHERE c.point_key = ",
            point_key_of!("u.point_id"),
            " AND c.n_valued > 0), (SELECT date_bin('1 hour', max(o.observed_at), TIMESTAMPTZ '1970-01-01 00:00:00+00') FROM ",
            $hot,
            " o WHERE o.point_key = ",
            point_key_of!("u.point_id"),
            " AND (o.value_num IS NOT NULL OR o.value_bool IS NOT NULL OR o.value_text IS NOT NULL)), \
               '-infinity') AS newest_valued_chunk \
               FROM unnest($1::text[]) AS u(point_id)) p \
             CROSS JOIN LATERAL (SELECT o.quality, o.reason, o.observed_at, o.ingested_at, ",
            instance_of!("o"),
            " AS driver_instance, o.source_epoch, o.source_seq FROM ",
            $table,
            " o WHERE o.point_key = ",
            point_key_of!("p.point_id"),
            " AND o.observed_at >= p.newest_chunk AND o.obs_hour >= p.newest_chunk \
             ORDER BY o.observed_at DESC, o.ingested_at DESC, ",
            instance_of!("o"),
            " COLLATE \"C\" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT 1) h \
             LEFT JOIN LATERAL (SELECT o.value_num, o.value_bool, o.value_text, o.observed_at, o.ingested_at, ",
            instance_of!("o"),
            " AS driver_instance, o.source_epoch, o.source_seq FROM ",
            $table,
            " o WHERE o.point_key = ",
            point_key_of!("p.point_id"),
            " AND o.observed_at >= p.newest_valued_chunk AND o.obs_hour >= p.newest_valued_chunk \
               AND (o.value_num IS NOT NULL OR o.value_bool IS NOT NULL OR o.value_text IS NOT NULL) \
               ORDER BY o.observed_at DESC, o.ingested_at DESC, ",
            instance_of!("o"),
            " COLLATE \"C\" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT 1) v ON true"
        )
    };
}

pub(crate) const HEADS_MEASUREMENT: &str = log_heads!(
    "observation_measurement_all",
    "observation_measurement",
    "observation_measurement_compact"
);

pub(crate) const HEADS_STATE: &str = log_heads!(
    "observation_state_all",
    "observation_state",
    "observation_state_compact"
);

pub(crate) const HEADS_DIAGNOSTIC: &str = log_heads!(
    "observation_diagnostic_all",
    "observation_diagnostic",
    "observation_diagnostic_compact"
);

/// Restart step 5: per requested point, its rows since its bound (newest first, at most `$3`)
/// and, whatever their age, its newest `rows_min` (`$4`); `UNION` drops a row both return.
/// One statement per class table; the `(point_key, observed_at)` index (migration 0018), scanned
/// backward, serves each lateral scan, and a `rows_min` of 0 costs nothing.
macro_rules! windows {
    ($table:literal) => {
        concat!(
            "SELECT w.point_id, o.observed_at, o.ingested_at, o.driver_instance, o.source_epoch, \
             o.source_seq, o.quality::text, o.value_num, o.applied, o.value_bool, o.value_text \
             FROM unnest($1::text[], $2::timestamptz[], $4::bigint[]) AS w(point_id, since, rows_min) \
             CROSS JOIN LATERAL ((SELECT o.observed_at, o.ingested_at, ",
            instance_of!("o"),
            " AS driver_instance, o.source_epoch, \
               o.source_seq, o.quality, o.value_num, o.applied, o.value_bool, o.value_text FROM ",
            $table,
            " o WHERE o.point_key = ",
            point_key_of!("w.point_id"),
            " AND o.observed_at >= w.since \
               AND o.obs_hour >= date_bin('1 hour', w.since, TIMESTAMPTZ '1970-01-01 00:00:00+00') \
               ORDER BY o.observed_at DESC, o.ingested_at DESC, ",
            instance_of!("o"),
            " COLLATE \"C\" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT $3) \
             UNION (SELECT o.observed_at, o.ingested_at, ",
            instance_of!("o"),
            " AS driver_instance, o.source_epoch, \
               o.source_seq, o.quality, o.value_num, o.applied, o.value_bool, o.value_text FROM ",
            $table,
            " o WHERE o.point_key = ",
            point_key_of!("w.point_id"),
            " ORDER BY o.observed_at DESC, o.ingested_at DESC, ",
            instance_of!("o"),
            " COLLATE \"C\" DESC, o.source_epoch DESC, o.source_seq DESC LIMIT w.rows_min)) o"
        )
    };
}

pub(crate) fn windows_sql(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => windows!("observation_measurement_all"),
        RetentionClass::State => windows!("observation_state_all"),
        RetentionClass::Diagnostic => windows!("observation_diagnostic_all"),
    }
}

pub(crate) fn window_row(row: &PgRow) -> Result<WindowRow, StoreError> {
    let get = db_error("decoding a derived window row");
    let decode = || -> Result<_, sqlx::Error> {
        Ok((
            row.try_get::<String, _>(0)?,
            row.try_get::<OffsetDateTime, _>(1)?,
            row.try_get::<OffsetDateTime, _>(2)?,
            row.try_get::<String, _>(3)?,
            row.try_get::<i32, _>(4)?,
            row.try_get::<i64, _>(5)?,
            row.try_get::<String, _>(6)?,
            row.try_get::<Option<f64>, _>(7)?,
            row.try_get::<Option<i64>, _>(8)?,
            row.try_get::<Option<bool>, _>(9)?,
            row.try_get::<Option<String>, _>(10)?,
        ))
    };
    let (id, observed, ingested, instance, epoch, seq, quality, value, applied, value_bool, value_text) =
        decode().map_err(get)?;
    let key = key_from_columns(Some(instance), Some(epoch), Some(seq))?
        .ok_or_else(|| StoreError::Other("a window row without a key".to_owned()))?;
    Ok(WindowRow {
        point_id: Arc::from(id),
        observed_at: from_odt(observed),
        ingested_at: from_odt(ingested),
        key,
        quality: quality_from_db(&quality)?,
        value,
        value_bool,
        value_text: value_text.map(Arc::from),
        applied,
    })
}

pub(crate) fn heads_sql(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => HEADS_MEASUREMENT,
        RetentionClass::State => HEADS_STATE,
        RetentionClass::Diagnostic => HEADS_DIAGNOSTIC,
    }
}

pub(crate) const UPSERT_POINT_STATE: &str = "INSERT INTO point_state \
     (point_id, value_num, value_bool, value_text, quality, reason, observed_at, ingested_at, \
      changed_at, quality_since, watermark_seq, driver_instance, source_epoch, source_seq) \
     SELECT * FROM UNNEST($1::text[], $2::float8[], $3::bool[], $4::text[], $5::text[]::quality[], \
      $6::text[], $7::timestamptz[], $8::timestamptz[], $9::timestamptz[], $10::timestamptz[], \
      $11::bigint[], $12::text[], $13::integer[], $14::bigint[]) \
     ON CONFLICT (point_id) DO UPDATE SET value_num = EXCLUDED.value_num, \
      value_bool = EXCLUDED.value_bool, value_text = EXCLUDED.value_text, quality = EXCLUDED.quality, \
      reason = EXCLUDED.reason, observed_at = EXCLUDED.observed_at, ingested_at = EXCLUDED.ingested_at, \
      changed_at = EXCLUDED.changed_at, quality_since = EXCLUDED.quality_since, \
      watermark_seq = EXCLUDED.watermark_seq, driver_instance = EXCLUDED.driver_instance, \
      source_epoch = EXCLUDED.source_epoch, source_seq = EXCLUDED.source_seq";

pub(crate) const SELECT_POINT_STATE: &str = "SELECT point_id, value_num, value_bool, value_text, quality::text, \
     reason, observed_at, ingested_at, changed_at, quality_since, watermark_seq, driver_instance, \
     source_epoch, source_seq FROM point_state WHERE point_id = ANY($1::text[])";

impl PgStore {
    /// Restart step 5's read: the rows that rebuild the derived points' windows.
    pub(crate) async fn load_windows_inner(
        &self,
        requests: &[WindowRequest],
        rows_max_per_point: usize,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let limit = i64::try_from(rows_max_per_point).unwrap_or(i64::MAX);
        let mut out = Vec::new();
        // JIT off: the planner costs the lateral scans at the row bound, far above
        // `jit_above_cost`, and compiling them took ~0.55 s per class table of a ~0.4 s query
        // (4,000 points, 1,000 derived, a day of history: BENCHMARKS.md "Cold start").
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("reading derived windows"))?;
        sqlx::query("SET LOCAL jit = off")
            .execute(&mut *tx)
            .await
            .map_err(db_error("reading derived windows"))?;
        for class in RetentionClass::ALL {
            let wanted: Vec<&WindowRequest> = requests.iter().filter(|r| r.class == class).collect();
            if wanted.is_empty() {
                continue;
            }
            let ids: Vec<&str> = wanted.iter().map(|r| &*r.point_id).collect();
            let since = wanted
                .iter()
                .map(|r| to_odt(r.since))
                .collect::<Result<Vec<_>, _>>()?;
            let rows_min: Vec<i64> = wanted.iter().map(|r| i64::from(r.rows_min)).collect();
            let rows = sqlx::query(windows_sql(class))
                .bind(&ids)
                .bind(&since)
                .bind(limit)
                .bind(&rows_min)
                .fetch_all(&mut *tx)
                .await
                .map_err(db_error("reading derived windows"))?;
            for row in &rows {
                out.push(window_row(row)?);
            }
        }
        tx.commit().await.map_err(db_error("reading derived windows"))?;
        tracing::debug!(
            requests = requests.len(),
            rows = out.len(),
            "derived windows loaded"
        );
        Ok(out)
    }

    pub(crate) async fn checkpoint_inner(
        &self,
        epoch: u32,
        states: Vec<PointState>,
    ) -> Result<(), StoreError> {
        if states.len() > self.config.checkpoint_rows_max {
            return Err(StoreError::Other(format!(
                "checkpoint of {} states exceeds checkpoint_rows_max {}",
                states.len(),
                self.config.checkpoint_rows_max
            )));
        }
        // ON CONFLICT DO UPDATE may not touch a row twice in one statement: keep the last state
        // given per point.
        let mut latest: BTreeMap<&str, &PointState> = BTreeMap::new();
        for state in &states {
            latest.insert(&state.point_id, state);
        }
        let n = latest.len();
        let mut ids = Vec::with_capacity(n);
        let mut nums = Vec::with_capacity(n);
        let mut bools = Vec::with_capacity(n);
        let mut texts = Vec::with_capacity(n);
        let mut qualities = Vec::with_capacity(n);
        let mut reasons = Vec::with_capacity(n);
        let mut observed = Vec::with_capacity(n);
        let mut ingested = Vec::with_capacity(n);
        let mut changed = Vec::with_capacity(n);
        let mut quality_since = Vec::with_capacity(n);
        let mut watermarks = Vec::with_capacity(n);
        let mut instances: Vec<Option<&str>> = Vec::with_capacity(n);
        let mut epochs = Vec::with_capacity(n);
        let mut seqs = Vec::with_capacity(n);
        for (id, state) in latest {
            ids.push(id);
            let (num, boolean, text) = value_columns(&state.value);
            nums.push(num);
            bools.push(boolean);
            texts.push(text);
            qualities.push(state.quality.as_str());
            reasons.push(state.reason.as_deref());
            observed.push(state.observed_at.map(to_odt).transpose()?);
            ingested.push(state.ingested_at.map(to_odt).transpose()?);
            changed.push(state.changed_at.map(to_odt).transpose()?);
            quality_since.push(to_odt(state.quality_since)?);
            watermarks.push(state.watermark_seq);
            match &state.key {
                Some(key) => {
                    let (e, s) = key_to_db(key)?;
                    instances.push(Some(&key.driver_instance));
                    epochs.push(Some(e));
                    seqs.push(Some(s));
                }
                None => {
                    instances.push(None);
                    epochs.push(None);
                    seqs.push(None);
                }
            }
        }
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the checkpoint transaction"))?;
        fence(&mut tx, epoch, self.core_start()).await?;
        sqlx::query(UPSERT_POINT_STATE)
            .bind(ids)
            .bind(nums)
            .bind(bools)
            .bind(texts)
            .bind(qualities)
            .bind(reasons)
            .bind(observed)
            .bind(ingested)
            .bind(changed)
            .bind(quality_since)
            .bind(watermarks)
            .bind(instances)
            .bind(epochs)
            .bind(seqs)
            .execute(&mut *tx)
            .await
            .map_err(db_error("upserting point_state"))?;
        tx.commit().await.map_err(db_error("committing the checkpoint"))?;
        tracing::debug!(states = n, epoch, "checkpoint committed");
        Ok(())
    }

    pub(crate) async fn load_state_inner(
        &self,
        points: &[(String, RetentionClass)],
    ) -> Result<RestoredState, StoreError> {
        let mut by_class: [BTreeSet<&str>; 3] = Default::default();
        for (id, class) in points {
            by_class[class.index()].insert(id.as_str());
        }
        let all_ids: Vec<&str> = by_class
            .iter()
            .flatten()
            .copied()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();

        let rows = sqlx::query(SELECT_POINT_STATE)
            .bind(&all_ids)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading point_state"))?;
        let mut checkpoints = rows
            .iter()
            .map(checkpoint_from_row)
            .collect::<Result<Vec<_>, _>>()?;
        checkpoints.sort_by(|a, b| a.point_id.cmp(&b.point_id));

        let mut log_heads = Vec::new();
        for class in RetentionClass::ALL {
            let ids: Vec<&str> = by_class[class.index()].iter().copied().collect();
            if ids.is_empty() {
                continue;
            }
            let rows = sqlx::query(heads_sql(class))
                .bind(&ids)
                .fetch_all(&self.pool)
                .await
                .map_err(db_error("reading log heads"))?;
            for row in &rows {
                log_heads.push(head_from_row(row)?);
            }
        }
        log_heads.sort_by(|a, b| a.state.point_id.cmp(&b.state.point_id));
        tracing::debug!(
            checkpoints = checkpoints.len(),
            log_heads = log_heads.len(),
            "state loaded"
        );
        Ok(RestoredState {
            checkpoints,
            log_heads,
        })
    }
}

pub(crate) fn key_from_columns(
    instance: Option<String>,
    epoch: Option<i32>,
    seq: Option<i64>,
) -> Result<Option<ObsKey>, StoreError> {
    match (instance, epoch, seq) {
        (Some(instance), Some(epoch), Some(seq)) => Ok(Some(ObsKey {
            driver_instance: Arc::from(instance),
            source_epoch: u32::try_from(epoch)
                .map_err(|_| StoreError::Other(format!("negative source_epoch {epoch} in the database")))?,
            source_seq: u64::try_from(seq)
                .map_err(|_| StoreError::Other(format!("negative source_seq {seq} in the database")))?,
        })),
        _ => Ok(None),
    }
}

pub(crate) fn checkpoint_from_row(row: &PgRow) -> Result<PointState, StoreError> {
    let get = db_error("decoding point_state");
    let decode = || -> Result<_, sqlx::Error> {
        Ok((
            row.try_get::<String, _>(0)?,
            row.try_get::<Option<f64>, _>(1)?,
            row.try_get::<Option<bool>, _>(2)?,
            row.try_get::<Option<String>, _>(3)?,
            row.try_get::<String, _>(4)?,
            row.try_get::<Option<String>, _>(5)?,
            row.try_get::<Option<OffsetDateTime>, _>(6)?,
            row.try_get::<Option<OffsetDateTime>, _>(7)?,
            row.try_get::<Option<OffsetDateTime>, _>(8)?,
            row.try_get::<OffsetDateTime, _>(9)?,
            row.try_get::<Option<i64>, _>(10)?,
            (
                row.try_get::<Option<String>, _>(11)?,
                row.try_get::<Option<i32>, _>(12)?,
                row.try_get::<Option<i64>, _>(13)?,
            ),
        ))
    };
    let (id, num, boolean, text, quality, reason, observed, ingested, changed, since, watermark, key) =
        decode().map_err(get)?;
    Ok(PointState {
        point_id: Arc::from(id),
        value: value_from_columns(num, boolean, text),
        quality: quality_from_db(&quality)?,
        reason,
        observed_at: observed.map(from_odt),
        ingested_at: ingested.map(from_odt),
        key: key_from_columns(key.0, key.1, key.2)?,
        changed_at: changed.map(from_odt),
        quality_since: from_odt(since),
        watermark_seq: watermark,
    })
}

pub(crate) fn head_from_row(row: &PgRow) -> Result<LogHead, StoreError> {
    let get = db_error("decoding a log head");
    let decode = || -> Result<_, sqlx::Error> {
        Ok((
            row.try_get::<String, _>(0)?,
            row.try_get::<String, _>(1)?,
            row.try_get::<Option<String>, _>(2)?,
            row.try_get::<OffsetDateTime, _>(3)?,
            row.try_get::<OffsetDateTime, _>(4)?,
            (
                row.try_get::<String, _>(5)?,
                row.try_get::<i32, _>(6)?,
                row.try_get::<i64, _>(7)?,
            ),
            (
                row.try_get::<Option<f64>, _>(8)?,
                row.try_get::<Option<bool>, _>(9)?,
                row.try_get::<Option<String>, _>(10)?,
            ),
            (
                row.try_get::<Option<OffsetDateTime>, _>(11)?,
                row.try_get::<Option<OffsetDateTime>, _>(12)?,
                row.try_get::<Option<String>, _>(13)?,
                row.try_get::<Option<i32>, _>(14)?,
                row.try_get::<Option<i64>, _>(15)?,
            ),
        ))
    };
    let (id, quality, reason, observed, ingested, key, value, valued) = decode().map_err(get)?;
    let ingested_at = from_odt(ingested);
    let value_order = match (
        valued.0,
        valued.1,
        key_from_columns(valued.2, valued.3, valued.4)?,
    ) {
        (Some(o), Some(i), Some(k)) => Some((from_odt(o), from_odt(i), k)),
        _ => None,
    };
    Ok(LogHead {
        state: PointState {
            point_id: Arc::from(id),
            value: value_from_columns(value.0, value.1, value.2),
            quality: quality_from_db(&quality)?,
            reason,
            observed_at: Some(from_odt(observed)),
            ingested_at: Some(ingested_at),
            key: key_from_columns(Some(key.0), Some(key.1), Some(key.2))?,
            changed_at: None,
            quality_since: ingested_at,
            watermark_seq: None,
        },
        value_order,
    })
}
