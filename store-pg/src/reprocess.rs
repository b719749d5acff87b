//! The PostgreSQL adapter's reprocess (ingest spec, "Reprocess", "The horizon is per class, and
//! partial reprocess is refused"; issue 9 item 3): the scope's extent per class table, its rows
//! in pages, the fenced chunk update through `sentinel_reprocess_apply`
//! (`migrations/0006_reprocess.sql`) and the run's `reprocess` control event.
//!
//! Owns: the static SQL of those four operations and the mapping of their rows onto the port's
//! types. Every statement is static; one per class table, from one template.

use sentinel_core::reprocess::{ReprocessRecord, RowUpdate, StoredObservation};
use sentinel_core::{Micros, RetentionClass};
use sqlx::Row;
use sqlx::postgres::PgRow;
use time::OffsetDateTime;

use super::{
    PgStore, db_error, epoch_to_db, fence, from_odt, key_to_db, quality_from_db, to_odt, value_columns,
};
use sentinel_ports::{ClassExtent, REPROCESS_ROWS_LOAD_MAX, StoreError};

macro_rules! extent {
    ($table:literal) => {
        concat!(
            "SELECT count(*), min(observed_at), max(observed_at), \
             coalesce(array_agg(DISTINCT registry_version ORDER BY registry_version), '{}') FROM ",
            $table,
            " WHERE point_key IN (SELECT k.key FROM point_key k WHERE k.point_id = ANY($1::text[])) \
              AND observed_at >= $2 \
              AND ($3::timestamptz IS NULL OR observed_at < $3) \
              AND obs_hour >= date_bin('1 hour', $2, TIMESTAMPTZ '1970-01-01 00:00:00+00') \
              AND ($3::timestamptz IS NULL OR obs_hour < $3)"
        )
    };
}

/// A point's rows in `[from, to)`, first page: an index range scan of `(point_id, observed_at)`
/// read backward, merged across partitions.
macro_rules! rows_first {
    ($table:literal) => {
        concat!(
            "SELECT $1::text AS point_id, observed_at, ingested_at, ",
            instance_of!("o"),
            " AS driver_instance, source_epoch, source_seq, \
             value_num, value_bool, value_text, native_num, native_text, unit_native, quality::text, \
             reason, registry_version FROM ",
            $table,
            " o WHERE o.point_key = ",
            point_key_of!("$1"),
            " AND observed_at >= $2 AND ($3::timestamptz IS NULL OR observed_at < $3) \
             AND o.obs_hour >= date_bin('1 hour', $2, TIMESTAMPTZ '1970-01-01 00:00:00+00') \
             AND ($3::timestamptz IS NULL OR o.obs_hour < $3) \
             ORDER BY observed_at, ingested_at, ",
            instance_of!("o"),
            ", source_epoch, source_seq LIMIT $4"
        )
    };
}

/// The next page after a row of the same point: the redundant `observed_at >= $4` is where the
/// index range scan starts; the row comparison breaks ties within one instant.
macro_rules! rows_next {
    ($table:literal) => {
        concat!(
            "SELECT $1::text AS point_id, observed_at, ingested_at, ",
            instance_of!("o"),
            " AS driver_instance, source_epoch, source_seq, \
             value_num, value_bool, value_text, native_num, native_text, unit_native, quality::text, \
             reason, registry_version FROM ",
            $table,
            " o WHERE o.point_key = ",
            point_key_of!("$1"),
            " AND observed_at >= $2 AND ($3::timestamptz IS NULL OR observed_at < $3) \
               AND observed_at >= $4 AND ($3::timestamptz IS NULL OR o.obs_hour < $3) \
               AND o.obs_hour >= date_bin('1 hour', $4, TIMESTAMPTZ '1970-01-01 00:00:00+00') \
               AND (observed_at, ingested_at, ",
            instance_of!("o"),
            ", source_epoch, source_seq) > ($4, $5, $6, $7, $8) \
             ORDER BY observed_at, ingested_at, ",
            instance_of!("o"),
            ", source_epoch, source_seq LIMIT $9"
        )
    };
}

/// The oldest daily partition of a class table, from the partition names
/// `sentinel_ensure_partitions` gives (`observation_<class>_pYYYYMMDD`).
const OLDEST_PARTITION: &str = "SELECT (min(to_date(substring(c.relname from '_p([0-9]{8})$'), 'YYYYMMDD')) \
     ::timestamp AT TIME ZONE 'UTC') FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
     WHERE i.inhparent = to_regclass($1)";

const APPLY: &str =
    "SELECT sentinel_reprocess_apply($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)";

const INSERT_EVENT: &str = "INSERT INTO control_event \
     (occurred_at, kind, point_id, principal, core_epoch, payload, registry_version) \
     VALUES ($1, 'reprocess', NULL, $2, $3, $4::jsonb, $5) RETURNING seq";

fn extent_sql(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => extent!("observation_measurement_all"),
        RetentionClass::State => extent!("observation_state_all"),
        RetentionClass::Diagnostic => extent!("observation_diagnostic_all"),
    }
}

fn rows_sql(class: RetentionClass, next: bool) -> &'static str {
    match (class, next) {
        (RetentionClass::Measurement, false) => rows_first!("observation_measurement_all"),
        (RetentionClass::State, false) => rows_first!("observation_state_all"),
        (RetentionClass::Diagnostic, false) => rows_first!("observation_diagnostic_all"),
        (RetentionClass::Measurement, true) => rows_next!("observation_measurement_all"),
        (RetentionClass::State, true) => rows_next!("observation_state_all"),
        (RetentionClass::Diagnostic, true) => rows_next!("observation_diagnostic_all"),
    }
}

fn table_name(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => "observation_measurement",
        RetentionClass::State => "observation_state",
        RetentionClass::Diagnostic => "observation_diagnostic",
    }
}

fn observation_from_row(class: RetentionClass, row: &PgRow) -> Result<StoredObservation, StoreError> {
    let get = db_error("decoding a reprocess row");
    let decode = || -> Result<_, sqlx::Error> {
        Ok((
            row.try_get::<String, _>(0)?,
            row.try_get::<OffsetDateTime, _>(1)?,
            row.try_get::<OffsetDateTime, _>(2)?,
            row.try_get::<String, _>(3)?,
            row.try_get::<i32, _>(4)?,
            row.try_get::<i64, _>(5)?,
            (
                row.try_get::<Option<f64>, _>(6)?,
                row.try_get::<Option<bool>, _>(7)?,
                row.try_get::<Option<String>, _>(8)?,
            ),
            row.try_get::<Option<f64>, _>(9)?,
            row.try_get::<Option<String>, _>(10)?,
            row.try_get::<Option<String>, _>(11)?,
            row.try_get::<String, _>(12)?,
            row.try_get::<Option<String>, _>(13)?,
            row.try_get::<i32, _>(14)?,
        ))
    };
    let (
        point_id,
        observed,
        ingested,
        instance,
        epoch,
        seq,
        (vn, vb, vt),
        native_num,
        native_text,
        unit,
        quality,
        reason,
        version,
    ) = decode().map_err(get)?;
    let key = super::key_from_columns(Some(instance), Some(epoch), Some(seq))?
        .ok_or_else(|| StoreError::Other("a reprocess row without a key".to_owned()))?;
    Ok(StoredObservation {
        point_id,
        class,
        observed_at: from_odt(observed),
        ingested_at: from_odt(ingested),
        key,
        value: super::value_from_columns(vn, vb, vt),
        native_num,
        native_text,
        unit_native: unit,
        quality: quality_from_db(&quality)?,
        reason,
        registry_version: version,
    })
}

impl PgStore {
    pub(super) async fn reprocess_extent_inner(
        &self,
        points: &[(String, RetentionClass)],
        from: Micros,
        to: Option<Micros>,
    ) -> Result<Vec<ClassExtent>, StoreError> {
        let to = to.map(to_odt).transpose()?;
        let mut out = Vec::new();
        for class in RetentionClass::ALL {
            let ids: Vec<&str> = points
                .iter()
                .filter(|(_, c)| *c == class)
                .map(|(id, _)| id.as_str())
                .collect();
            if ids.is_empty() {
                continue;
            }
            let row = sqlx::query(extent_sql(class))
                .bind(&ids)
                .bind(to_odt(from)?)
                .bind(to)
                .fetch_one(&self.pool)
                .await
                .map_err(db_error("reading a reprocess extent"))?;
            let oldest: Option<OffsetDateTime> = sqlx::query_scalar(OLDEST_PARTITION)
                .bind(table_name(class))
                .fetch_one(&self.pool)
                .await
                .map_err(db_error("reading the oldest partition"))?;
            let decode = || -> Result<_, sqlx::Error> {
                Ok((
                    row.try_get::<i64, _>(0)?,
                    row.try_get::<Option<OffsetDateTime>, _>(1)?,
                    row.try_get::<Option<OffsetDateTime>, _>(2)?,
                    row.try_get::<Vec<i32>, _>(3)?,
                ))
            };
            let (rows, min, max, versions) = decode().map_err(db_error("decoding a reprocess extent"))?;
            out.push(ClassExtent {
                class,
                rows: rows.max(0) as u64,
                observed_min: min.map(from_odt),
                observed_max: max.map(from_odt),
                versions,
                oldest_partition: oldest.map(from_odt),
            });
        }
        Ok(out)
    }

    pub(super) async fn load_reprocess_rows_inner(
        &self,
        class: RetentionClass,
        point: &str,
        from: Micros,
        to: Option<Micros>,
        after: Option<&StoredObservation>,
        limit: usize,
    ) -> Result<Vec<StoredObservation>, StoreError> {
        let limit = limit.min(REPROCESS_ROWS_LOAD_MAX) as i64;
        let to = to.map(to_odt).transpose()?;
        let query = sqlx::query(rows_sql(class, after.is_some()))
            .bind(point)
            .bind(to_odt(from)?)
            .bind(to);
        let query = match after {
            Some(a) => {
                if a.point_id != point {
                    return Err(StoreError::Other(
                        "a reprocess page continues after a row of its own point".into(),
                    ));
                }
                let (epoch, seq) = key_to_db(&a.key)?;
                query
                    .bind(to_odt(a.observed_at)?)
                    .bind(to_odt(a.ingested_at)?)
                    .bind(a.key.driver_instance.to_string())
                    .bind(epoch)
                    .bind(seq)
                    .bind(limit)
            }
            None => query.bind(limit),
        };
        let rows = query
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("loading reprocess rows"))?;
        rows.iter().map(|r| observation_from_row(class, r)).collect()
    }

    pub(super) async fn apply_reprocess_inner(
        &self,
        epoch: u32,
        class: RetentionClass,
        updates: Vec<RowUpdate>,
    ) -> Result<u64, StoreError> {
        if updates.is_empty() {
            return Ok(0);
        }
        let n = updates.len();
        let mut instances = Vec::with_capacity(n);
        let mut epochs = Vec::with_capacity(n);
        let mut seqs = Vec::with_capacity(n);
        let mut ingested = Vec::with_capacity(n);
        let mut nums = Vec::with_capacity(n);
        let mut bools = Vec::with_capacity(n);
        let mut texts = Vec::with_capacity(n);
        let mut fills = Vec::with_capacity(n);
        let mut qualities = Vec::with_capacity(n);
        let mut reasons = Vec::with_capacity(n);
        let mut points = Vec::with_capacity(n);
        let mut observed = Vec::with_capacity(n);
        let version = updates[0].registry_version;
        for u in &updates {
            if u.registry_version != version {
                return Err(StoreError::Other(
                    "one reprocess chunk carries one registry version".into(),
                ));
            }
            let (e, s) = key_to_db(&u.key)?;
            let (vn, vb, vt) = value_columns(&u.value);
            instances.push(&*u.key.driver_instance);
            epochs.push(e);
            seqs.push(s);
            ingested.push(to_odt(u.ingested_at)?);
            nums.push(vn);
            bools.push(vb);
            texts.push(vt);
            fills.push(u.native_text_fill.as_deref());
            qualities.push(u.quality.as_str());
            reasons.push(u.reason.as_deref());
            points.push(u.point_id.as_str());
            observed.push(to_odt(u.observed_at)?);
        }
        let answer = sqlx::query_scalar::<_, i64>(APPLY)
            .bind(epoch_to_db(epoch)?)
            .bind(crate::core_start_to_db(self.core_start()))
            .bind(class.as_str())
            .bind(&instances)
            .bind(&epochs)
            .bind(&seqs)
            .bind(&ingested)
            .bind(&nums)
            .bind(&bools)
            .bind(&texts)
            .bind(&fills)
            .bind(&qualities)
            .bind(&reasons)
            .bind(version)
            .bind(&points)
            .bind(&observed)
            .fetch_one(&self.pool)
            .await;
        match answer {
            Ok(updated) => Ok(updated.max(0) as u64),
            Err(e) => Err(self.rollup_error(epoch, "applying a reprocess chunk", e).await),
        }
    }

    pub(super) async fn write_reprocess_event_inner(
        &self,
        epoch: u32,
        occurred_at: Micros,
        principal: &str,
        record: &ReprocessRecord,
    ) -> Result<i64, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the reprocess event transaction"))?;
        fence(&mut tx, epoch, self.core_start()).await?;
        let seq: i64 = sqlx::query_scalar(INSERT_EVENT)
            .bind(to_odt(occurred_at)?)
            .bind(principal)
            .bind(epoch_to_db(epoch)?)
            .bind(record.payload_json())
            .bind(record.new_version)
            .fetch_one(&mut *tx)
            .await
            .map_err(db_error("inserting the reprocess event"))?;
        tx.commit()
            .await
            .map_err(db_error("committing the reprocess event"))?;
        Ok(seq)
    }
}
