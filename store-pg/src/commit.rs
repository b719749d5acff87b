//! The fenced commit of a batch (ingest spec, stages 11–12; issue 13): one statement per
//! attempt, a plain `INSERT … RETURNING` first and `ON CONFLICT DO NOTHING` only when the
//! unique index refuses it ([`crate::CommitInsert`]), rows routed to their class table, the
//! quarantine entries beside them, and the RETURNING ordinals mapped back to the batch.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use sentinel_core::{Batch, ObsRow, QuarantineEntry};
use sentinel_ports::StoreError;
use sqlx::Row;
use time::OffsetDateTime;

use crate::{CommitInsert, PgStore, db_error, epoch_to_db, from_odt, key_to_db, to_odt, value_columns};

// ---------------------------------------------------------------------------------------------
// Static SQL. The class tables are written from one template so the three stay identical.

/// One fenced batch in ONE statement, run in autocommit: one round trip and one implicit
/// transaction per batch instead of BEGIN, fence, an INSERT per class, the quarantine INSERT
/// and COMMIT. Data-modifying CTEs run with one snapshot and commit or roll back together.
/// The fence locks the epoch row FOR SHARE, so a new core's epoch increment waits for this
/// batch and every later batch of ours sees the new epoch and inserts nothing; the statement
/// always returns the holder's epoch and start identity so the caller can tell a refused batch
/// from an all-conflict one. Rows are routed by `class` (0 measurement, 1 state, 2 diagnostic).
///
/// Two forms share the fence and the source (issue 13, [`CommitInsert`]): `COMMIT_BATCH`, the
/// spec's `ON CONFLICT DO NOTHING RETURNING`, and `COMMIT_BATCH_PLAIN`, plain inserts that
/// either insert every row and entry of the batch or fail as a whole on the unique index.
/// The class tables' columns (migration 0014): the two ids as their integer keys.
macro_rules! table_columns {
    () => {
        "ingested_at, point_key, observed_at, device_time, value_num, value_bool, value_text, \
         native_num, native_text, unit_native, quality, reason, detail, changed, registry_version, \
         instance_key, source_epoch, source_seq, skew_flagged"
    };
}

/// The fence and the batch's rows (`src`, empty when the fence refuses, each row with its
/// 1-based position in the batch as `ord`); `$1`–`$21`, and `$31`
/// the writing handle's start identity: the batch is allowed only while (`$20`, `$31`) is the
/// holder's (issue 25 item 3). The ids come as their integer keys (`$2`, `$16`; migration
/// 0014), resolved before the statement from the handle's cache ([`crate::keys`]).
macro_rules! fenced_source {
    () => {
        concat!(
            "WITH fence AS (SELECT epoch, core_start FROM core_epoch WHERE singleton FOR SHARE), \
             allowed AS (SELECT 1 FROM fence WHERE epoch = $20 AND core_start = $31::bigint), \
             src AS (SELECT u.* FROM UNNEST($1::timestamptz[], $2::integer[], $3::timestamptz[], \
               $4::timestamptz[], $5::float8[], $6::bool[], $7::text[], $8::float8[], $9::text[], \
               $10::text[], $11::text[]::quality[], $12::text[], $13::text[]::jsonb[], $14::bool[], \
               $15::integer[], $16::integer[], $17::integer[], $18::bigint[], $19::bool[], $21::smallint[]) \
               WITH ORDINALITY AS u(",
            table_columns!(),
            ", class, ord) WHERE EXISTS (SELECT 1 FROM allowed))"
        )
    };
}

macro_rules! insert_class {
    ($table:literal, $class:literal, $tail:literal) => {
        concat!(
            "INSERT INTO ",
            $table,
            " (",
            table_columns!(),
            ", applied) SELECT ",
            table_columns!(),
            ", $30::bigint FROM src WHERE class = ",
            $class,
            $tail
        )
    };
}

/// Whether `src`'s row is a late copy of a key already in `$table` ([`insert_class_checked`]'s
/// probe, `$33`): hot, or on a compacted day (migration 0015; a driver's replay can outlive the
/// compaction age). The compacted probe reads only the chunks of the key's instance and epoch
/// whose seq range holds it, in the days of the lookback range (partitions pruned: a fresh late
/// row's days have no compacted partition), and decodes only their seqs and times.
macro_rules! stored_copy_in {
    ($table:literal) => {
        concat!(
            "(EXISTS (SELECT 1 FROM ",
            $table,
            " o WHERE o.instance_key = src.instance_key AND o.source_epoch = src.source_epoch \
               AND o.source_seq = src.source_seq \
               AND o.ingested_at >= src.observed_at - $33::bigint * interval '1 microsecond' \
               AND o.ingested_at < src.ingested_at) \
             OR EXISTS (SELECT 1 FROM ",
            $table,
            "_compact c CROSS JOIN LATERAL unnest(sentinel_undelta(c.seq_d), \
               COALESCE(sentinel_undelta(c.observed_d), sentinel_undelta(c.observed_d4)), \
               COALESCE(c.ingested_lag, c.ingested_lag4::bigint[])) AS u(seq, obs, lag) \
               WHERE c.day >= date_bin('1 day', src.observed_at - $33::bigint * interval '1 microsecond', \
                 TIMESTAMPTZ '1970-01-01 00:00:00+00') \
               AND c.day < src.ingested_at \
               AND c.instance_key = src.instance_key AND c.source_epoch = src.source_epoch \
               AND c.seq_min <= src.source_seq AND c.seq_max >= src.source_seq \
               AND u.seq = src.source_seq \
               AND c.hour + (u.obs + u.lag) * interval '1 microsecond' \
                 >= src.observed_at - $33::bigint * interval '1 microsecond' \
               AND c.hour + (u.obs + u.lag) * interval '1 microsecond' < src.ingested_at))"
        )
    };
}

/// [`insert_class`] with the late-duplicate check (issue 25 item 2,
/// [`sentinel_ports::LATE_DUPLICATE_AFTER_MS`]): a row late by more than `$32` µs
/// (`ingested_at − observed_at`) is skipped when its three-column key is already in the table
/// with an earlier `ingested_at` at or after `observed_at − $33` µs. The probe is a lookup of
/// each partition's unique key `(instance_key, source_epoch, source_seq)` (migration 0020) with
/// `ingested_at` checked on the row found, in the partitions of that range only.
macro_rules! insert_class_checked {
    ($table:literal, $class:literal, $tail:literal) => {
        concat!(
            "INSERT INTO ",
            $table,
            " (",
            table_columns!(),
            ", applied) SELECT ",
            table_columns!(),
            ", $30::bigint FROM src WHERE class = ",
            $class,
            " AND NOT (src.ingested_at - src.observed_at > $32::bigint * interval '1 microsecond' \
               AND ",
            stored_copy_in!($table),
            ")",
            $tail
        )
    };
}

/// The quarantine entries (`$22`–`$29`), fenced by the same `allowed`.
macro_rules! insert_quarantine {
    ($tail:literal) => {
        concat!(
            "INSERT INTO quarantine \
             (stream, stream_seq, ingested_at, subject, reason, detail, payload, payload_bytes, core_epoch) \
             SELECT $22::text, u.*, $20::integer FROM UNNEST($23::bigint[], $24::timestamptz[], $25::text[], \
             $26::text[], $27::text[], $28::bytea[], $29::integer[]) AS u \
             WHERE EXISTS (SELECT 1 FROM allowed)",
            $tail
        )
    };
}

/// The redelivery-safe form: what the unique index refuses, and a late copy of a stored key
/// (`insert_class_checked`, `$32` and `$33`), is skipped, and RETURNING keys (`kind = 0`),
/// quarantine sequences (`kind = 1`) and the holder's epoch and start identity (`kind = 2`)
/// come back in one result.
pub(crate) const COMMIT_BATCH: &str = concat!(
    fenced_source!(),
    ", m AS (",
    insert_class_checked!(
        "observation_measurement",
        "0",
        " ON CONFLICT DO NOTHING RETURNING instance_key, source_epoch, source_seq, ingested_at"
    ),
    "), s AS (",
    insert_class_checked!(
        "observation_state",
        "1",
        " ON CONFLICT DO NOTHING RETURNING instance_key, source_epoch, source_seq, ingested_at"
    ),
    "), d AS (",
    insert_class_checked!(
        "observation_diagnostic",
        "2",
        " ON CONFLICT DO NOTHING RETURNING instance_key, source_epoch, source_seq, ingested_at"
    ),
    "), q AS (",
    insert_quarantine!(" ON CONFLICT (stream, stream_seq) DO NOTHING RETURNING stream_seq"),
    ") SELECT 0::smallint AS kind, instance_key, source_epoch, source_seq, ingested_at FROM m \
     UNION ALL SELECT 0::smallint, instance_key, source_epoch, source_seq, ingested_at FROM s \
     UNION ALL SELECT 0::smallint, instance_key, source_epoch, source_seq, ingested_at FROM d \
     UNION ALL SELECT 1::smallint, NULL::integer, NULL::integer, stream_seq, NULL::timestamptz FROM q \
     UNION ALL SELECT 2::smallint, NULL::integer, epoch, core_start, NULL::timestamptz FROM fence"
);

/// The optimistic form: no speculative insertion, so a unique violation (SQLSTATE 23505)
/// aborts the whole statement and nothing of it stays. When it succeeds every row and entry
/// was inserted, so RETURNING only has to be counted per table: one row back with the four
/// counts and the holder's epoch and start identity (none when the epoch row is missing).
pub(crate) const COMMIT_BATCH_PLAIN: &str = concat!(
    fenced_source!(),
    ", m AS (",
    insert_class!("observation_measurement", "0", " RETURNING 1"),
    "), s AS (",
    insert_class!("observation_state", "1", " RETURNING 1"),
    "), d AS (",
    insert_class!("observation_diagnostic", "2", " RETURNING 1"),
    "), q AS (",
    insert_quarantine!(" RETURNING 1"),
    ") SELECT (SELECT count(*) FROM m), (SELECT count(*) FROM s), (SELECT count(*) FROM d), \
     (SELECT count(*) FROM q), epoch, core_start FROM fence"
);

/// [`insert_class`] without the rows `late` refused.
macro_rules! insert_class_unrefused {
    ($table:literal, $class:literal) => {
        insert_class!(
            $table,
            $class,
            " AND ord NOT IN (SELECT ord FROM late) RETURNING 1"
        )
    };
}

/// The optimistic form for a batch holding a late row (issue 24 item 3). Nearly every batch of
/// a fleet with a few per cent of buffered readings holds one, and before this form each such
/// batch took [`COMMIT_BATCH`]: the speculative insertion for all its rows and all their keys
/// back over the wire. Here the late-duplicate check of [`insert_class_checked`] (`$32`, `$33`)
/// runs once, in `late`, and names the rows it refuses (normally none) by their batch position;
/// every other row is inserted plainly, so a stored key still aborts the statement as a whole
/// (SQLSTATE 23505) and the caller falls back to [`COMMIT_BATCH`]. One row back: the four
/// counts, the holder's epoch and start identity, and the refused positions, ascending. The
/// probe reads the statement's snapshot, as the checked inserts' probes do.
pub(crate) const COMMIT_BATCH_PLAIN_CHECKED: &str = concat!(
    fenced_source!(),
    ", late AS (SELECT ord FROM src \
       WHERE src.ingested_at - src.observed_at > $32::bigint * interval '1 microsecond' \
       AND CASE src.class WHEN 0 THEN ",
    stored_copy_in!("observation_measurement"),
    " WHEN 1 THEN ",
    stored_copy_in!("observation_state"),
    " ELSE ",
    stored_copy_in!("observation_diagnostic"),
    " END), m AS (",
    insert_class_unrefused!("observation_measurement", "0"),
    "), s AS (",
    insert_class_unrefused!("observation_state", "1"),
    "), d AS (",
    insert_class_unrefused!("observation_diagnostic", "2"),
    "), q AS (",
    insert_quarantine!(" RETURNING 1"),
    ") SELECT (SELECT count(*) FROM m), (SELECT count(*) FROM s), (SELECT count(*) FROM d), \
     (SELECT count(*) FROM q), epoch, core_start, ARRAY(SELECT ord FROM late ORDER BY ord) FROM fence"
);

/// The plain forms' one row: rows per class table and quarantine entries inserted, the holder's
/// epoch and start identity, and the positions the late check refused (1-based).
type PlainAnswer = ([i64; 4], i32, Option<i64>, Vec<i64>);

impl PgStore {
    pub(crate) async fn commit_inner(&self, batch: &Batch) -> Result<(Vec<u32>, u32), StoreError> {
        if batch.len() > self.config.commit_rows_max {
            return Err(StoreError::Other(format!(
                "batch of {} entries exceeds commit_rows_max {}",
                batch.len(),
                self.config.commit_rows_max
            )));
        }
        let epoch = epoch_to_db(batch.epoch)?;
        self.ensure_days_for(&batch.rows).await?;

        let (point_keys, instance_keys) = self.row_keys(&batch.rows).await?;
        let rows = ObservationColumns::new(&batch.rows, point_keys, instance_keys)?;
        let quarantine = QuarantineColumns::new(&batch.quarantine)?;
        let (inserted, quarantine_inserted) = match self.config.commit_insert {
            CommitInsert::OnConflict => self.commit_on_conflict(batch, epoch, &rows, &quarantine).await?,
            CommitInsert::Optimistic => {
                let late = self.has_late_row(batch);
                if late {
                    self.commit_late_checked.fetch_add(1, Ordering::Relaxed);
                }
                match self.commit_plain(batch, epoch, &rows, &quarantine, late).await? {
                    Some(report) => report,
                    None => {
                        self.commit_fallbacks.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            batch = batch.id.0,
                            rows = batch.rows.len(),
                            quarantine = batch.quarantine.len(),
                            "unique index refused the plain insert; committing with ON CONFLICT DO NOTHING"
                        );
                        self.commit_on_conflict(batch, epoch, &rows, &quarantine).await?
                    }
                }
            }
        };
        tracing::debug!(
            batch = batch.id.0,
            rows = batch.rows.len(),
            inserted = inserted.len(),
            quarantine = batch.quarantine.len(),
            quarantine_inserted,
            "batch committed"
        );
        Ok((inserted, quarantine_inserted))
    }

    /// Whether a row of `batch` arrived late enough to be checked against the stored keys
    /// ([`PgStoreConfig::late_duplicate_after_ms`](crate::PgStoreConfig)).
    fn has_late_row(&self, batch: &Batch) -> bool {
        let late_after_us = self.config.late_duplicate_after_ms.saturating_mul(1_000);
        batch
            .rows
            .iter()
            .any(|row| row.ingested_at.0.saturating_sub(row.observed_at.0) > late_after_us)
    }

    /// `COMMIT_BATCH_PLAIN`, or with `late` (a row of the batch arrived late enough to be
    /// checked against the stored keys, issue 25 item 2) `COMMIT_BATCH_PLAIN_CHECKED`. `Ok(None)`
    /// when the unique index refused the statement: it was rolled back as a whole, so nothing
    /// of the batch is in the database.
    pub(crate) async fn commit_plain(
        &self,
        batch: &Batch,
        epoch: i32,
        rows: &ObservationColumns<'_>,
        quarantine: &QuarantineColumns<'_>,
        late: bool,
    ) -> Result<Option<(Vec<u32>, u32)>, StoreError> {
        let sql = if late {
            COMMIT_BATCH_PLAIN_CHECKED
        } else {
            COMMIT_BATCH_PLAIN
        };
        let mut query = bind_batch(
            sql,
            epoch,
            batch.applied(),
            crate::core_start_to_db(self.core_start()),
            &self.config.stream_name,
            rows,
            quarantine,
        );
        if late {
            query = query
                .bind(self.config.late_duplicate_after_ms.saturating_mul(1_000))
                .bind(self.config.late_duplicate_lookback_ms.saturating_mul(1_000));
        }
        let answer = match query.fetch_optional(&self.pool).await {
            Ok(answer) => answer,
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(db_error("committing the batch")(e)),
        };
        let answer = answer.ok_or_else(|| StoreError::Other("the core_epoch row is missing".into()))?;
        let decode = || -> Result<PlainAnswer, sqlx::Error> {
            Ok((
                [
                    answer.try_get(0)?,
                    answer.try_get(1)?,
                    answer.try_get(2)?,
                    answer.try_get(3)?,
                ],
                answer.try_get(4)?,
                answer.try_get(5)?,
                if late { answer.try_get(6)? } else { Vec::new() },
            ))
        };
        let (counts, current, current_start, refused) =
            decode().map_err(db_error("decoding the commit counts"))?;
        if let Err(refusal) = crate::check_fence(batch.epoch, self.core_start(), current, current_start) {
            // The fence refused: nothing was inserted (every INSERT reads `allowed`).
            debug_assert_eq!(counts, [0; 4]);
            return Err(refusal);
        }
        // The refused positions: 1-based, ascending, each a row of the batch, and never a row
        // the check would not look at.
        let mut refused_per_class = [0i64; 3];
        let mut refused_rows = Vec::with_capacity(refused.len());
        for ord in refused {
            let index = usize::try_from(ord - 1)
                .ok()
                .filter(|&i| i < batch.rows.len())
                .ok_or_else(|| {
                    StoreError::Other(format!(
                        "the late check refused row {ord} of {}",
                        batch.rows.len()
                    ))
                })?;
            if refused_rows.last().is_some_and(|&last| last >= index) {
                return Err(StoreError::Other(
                    "the late check's refused rows are not ascending".into(),
                ));
            }
            refused_per_class[batch.rows[index].class.index()] += 1;
            refused_rows.push(index);
        }
        debug_assert!(late || refused_rows.is_empty());
        // A plain INSERT inserts every row it selects or fails, so the counts must be the
        // batch's own less what the late check refused; anything else means a row matched no
        // class table.
        let expected = [
            rows.class_rows[0] as i64 - refused_per_class[0],
            rows.class_rows[1] as i64 - refused_per_class[1],
            rows.class_rows[2] as i64 - refused_per_class[2],
            batch.quarantine.len() as i64,
        ];
        if counts != expected {
            return Err(StoreError::Other(format!(
                "the plain insert wrote {counts:?} rows per table and quarantine entries, the batch holds {expected:?}"
            )));
        }
        let mut refused_rows = refused_rows.into_iter().peekable();
        let inserted = (0..batch.rows.len())
            .filter(|&i| refused_rows.next_if_eq(&i).is_none())
            .map(|i| i as u32)
            .collect();
        Ok(Some((inserted, batch.quarantine.len() as u32)))
    }

    /// `COMMIT_BATCH`: what is already there is skipped, and RETURNING names what was inserted.
    pub(crate) async fn commit_on_conflict(
        &self,
        batch: &Batch,
        epoch: i32,
        rows: &ObservationColumns<'_>,
        quarantine: &QuarantineColumns<'_>,
    ) -> Result<(Vec<u32>, u32), StoreError> {
        let returned = bind_batch(
            COMMIT_BATCH,
            epoch,
            batch.applied(),
            crate::core_start_to_db(self.core_start()),
            &self.config.stream_name,
            rows,
            quarantine,
        )
        .bind(self.config.late_duplicate_after_ms.saturating_mul(1_000))
        .bind(self.config.late_duplicate_lookback_ms.saturating_mul(1_000))
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("committing the batch"))?;

        let by_key = ordinals_by_key(&batch.rows, &rows.instance_key)?;
        let mut inserted = Vec::with_capacity(returned.len());
        let mut quarantine_inserted = 0u32;
        let mut holder = None;
        for row in &returned {
            let kind: i16 = row.try_get(0).map_err(db_error("decoding RETURNING"))?;
            match kind {
                0 => {
                    let instance: i32 = row.try_get(1).map_err(db_error("decoding RETURNING"))?;
                    let source_epoch: i32 = row.try_get(2).map_err(db_error("decoding RETURNING"))?;
                    let seq: i64 = row.try_get(3).map_err(db_error("decoding RETURNING"))?;
                    let at: OffsetDateTime = row.try_get(4).map_err(db_error("decoding RETURNING"))?;
                    let ordinal = by_key
                        .get(&(instance, source_epoch, seq, from_odt(at).0))
                        .ok_or_else(|| {
                            StoreError::Other(format!(
                                "RETURNING named key (instance key {instance}, {source_epoch}, {seq}) not in the batch"
                            ))
                        })?;
                    inserted.push(*ordinal);
                }
                1 => quarantine_inserted += 1,
                _ => {
                    holder = Some((
                        row.try_get::<i32, _>(2).map_err(db_error("decoding the fence"))?,
                        row.try_get::<Option<i64>, _>(3)
                            .map_err(db_error("decoding the fence"))?,
                    ))
                }
            }
        }
        let (current, current_start) =
            holder.ok_or_else(|| StoreError::Other("the core_epoch row is missing".into()))?;
        if let Err(refusal) = crate::check_fence(batch.epoch, self.core_start(), current, current_start) {
            // The fence refused: nothing was inserted (every INSERT reads `allowed`).
            debug_assert!(inserted.is_empty() && quarantine_inserted == 0);
            return Err(refusal);
        }
        inserted.sort_unstable();
        Ok((inserted, quarantine_inserted))
    }
}

/// A row's full unique key as the database returns it: instance key, source_epoch,
/// source_seq, ingested_at in µs.
pub(crate) type DbKey = (i32, i32, i64, i64);

/// The full unique key → the first ordinal carrying it (a key repeated within a batch inserts
/// once; the first occurrence is the one reported). Only the `ON CONFLICT` form needs it.
/// `instance_keys` are the rows' instance keys, in row order.
pub(crate) fn ordinals_by_key(
    rows: &[ObsRow],
    instance_keys: &[i32],
) -> Result<HashMap<DbKey, u32>, StoreError> {
    let mut by_key = HashMap::with_capacity(rows.len());
    for (ordinal, (row, instance)) in rows.iter().zip(instance_keys).enumerate() {
        let (epoch, seq) = key_to_db(&row.key)?;
        by_key
            .entry((*instance, epoch, seq, row.ingested_at.0))
            .or_insert(ordinal as u32);
    }
    Ok(by_key)
}

/// Binds a batch to either commit statement (both take the same 30 parameters; `$30` is the
/// batch's `applied` position, migration 0007). The values are encoded here, so a fallback
/// binds the same columns again.
pub(crate) fn bind_batch<'q>(
    sql: &'static str,
    epoch: i32,
    applied: i64,
    core_start: Option<i64>,
    stream_name: &str,
    rows: &ObservationColumns<'_>,
    quarantine: &QuarantineColumns<'_>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql)
        .bind(&rows.ingested_at)
        .bind(&rows.point_key)
        .bind(&rows.observed_at)
        .bind(&rows.device_time)
        .bind(&rows.value_num)
        .bind(&rows.value_bool)
        .bind(&rows.value_text)
        .bind(&rows.native_num)
        .bind(&rows.native_text)
        .bind(&rows.unit_native)
        .bind(&rows.quality)
        .bind(&rows.reason)
        .bind(&rows.detail)
        .bind(&rows.changed)
        .bind(&rows.registry_version)
        .bind(&rows.instance_key)
        .bind(&rows.source_epoch)
        .bind(&rows.source_seq)
        .bind(&rows.skew_flagged)
        .bind(epoch)
        .bind(&rows.class)
        .bind(stream_name)
        .bind(&quarantine.stream_seq)
        .bind(&quarantine.ingested_at)
        .bind(&quarantine.subject)
        .bind(&quarantine.reason)
        .bind(&quarantine.detail)
        .bind(&quarantine.payload)
        .bind(&quarantine.payload_bytes)
        .bind(applied)
        .bind(core_start)
}

/// A batch's rows as the column arrays the commit statements bind, built in one pass.
pub(crate) struct ObservationColumns<'a> {
    ingested_at: Vec<OffsetDateTime>,
    point_key: Vec<i32>,
    observed_at: Vec<OffsetDateTime>,
    device_time: Vec<Option<OffsetDateTime>>,
    value_num: Vec<Option<f64>>,
    value_bool: Vec<Option<bool>>,
    value_text: Vec<Option<&'a str>>,
    native_num: Vec<Option<f64>>,
    native_text: Vec<Option<&'a str>>,
    unit_native: Vec<Option<&'a str>>,
    quality: Vec<&'static str>,
    reason: Vec<Option<&'a str>>,
    detail: Vec<Option<&'a str>>,
    changed: Vec<bool>,
    registry_version: Vec<i32>,
    instance_key: Vec<i32>,
    source_epoch: Vec<i32>,
    source_seq: Vec<i64>,
    skew_flagged: Vec<bool>,
    class: Vec<i16>,
    /// Rows per class, indexed like `class`.
    class_rows: [usize; 3],
}

impl<'a> ObservationColumns<'a> {
    /// `point_key` and `instance_key`: each row's keys, in row order ([`crate::keys`]).
    pub(crate) fn new(
        rows: &'a [ObsRow],
        point_key: Vec<i32>,
        instance_key: Vec<i32>,
    ) -> Result<ObservationColumns<'a>, StoreError> {
        let n = rows.len();
        if point_key.len() != n || instance_key.len() != n {
            return Err(StoreError::Other("the batch's keys do not match its rows".into()));
        }
        let mut c = ObservationColumns {
            ingested_at: Vec::with_capacity(n),
            point_key,
            observed_at: Vec::with_capacity(n),
            device_time: Vec::with_capacity(n),
            value_num: Vec::with_capacity(n),
            value_bool: Vec::with_capacity(n),
            value_text: Vec::with_capacity(n),
            native_num: Vec::with_capacity(n),
            native_text: Vec::with_capacity(n),
            unit_native: Vec::with_capacity(n),
            quality: Vec::with_capacity(n),
            reason: Vec::with_capacity(n),
            detail: Vec::with_capacity(n),
            changed: Vec::with_capacity(n),
            registry_version: Vec::with_capacity(n),
            instance_key,
            source_epoch: Vec::with_capacity(n),
            source_seq: Vec::with_capacity(n),
            skew_flagged: Vec::with_capacity(n),
            class: Vec::with_capacity(n),
            class_rows: [0; 3],
        };
        for row in rows {
            let (epoch, seq) = key_to_db(&row.key)?;
            c.ingested_at.push(to_odt(row.ingested_at)?);
            c.observed_at.push(to_odt(row.observed_at)?);
            c.device_time.push(row.device_time.map(to_odt).transpose()?);
            let (num, boolean, text) = value_columns(&row.value);
            c.value_num.push(num);
            c.value_bool.push(boolean);
            c.value_text.push(text);
            c.native_num.push(row.native_num);
            c.native_text.push(row.native_text.as_deref());
            c.unit_native.push(row.unit_native.as_deref());
            c.quality.push(row.quality.as_str());
            c.reason.push(row.reason.as_deref());
            c.detail.push(row.detail.as_deref());
            c.changed.push(row.changed);
            c.registry_version.push(row.registry_version);
            c.source_epoch.push(epoch);
            c.source_seq.push(seq);
            c.skew_flagged.push(row.skew_flagged);
            c.class.push(row.class.index() as i16);
            c.class_rows[row.class.index()] += 1;
        }
        Ok(c)
    }
}

/// A batch's quarantine entries as column arrays.
pub(crate) struct QuarantineColumns<'a> {
    stream_seq: Vec<i64>,
    ingested_at: Vec<OffsetDateTime>,
    subject: Vec<&'a str>,
    reason: Vec<&'static str>,
    detail: Vec<&'a str>,
    payload: Vec<&'a [u8]>,
    payload_bytes: Vec<i32>,
}

impl<'a> QuarantineColumns<'a> {
    pub(crate) fn new(entries: &'a [QuarantineEntry]) -> Result<QuarantineColumns<'a>, StoreError> {
        let n = entries.len();
        let mut c = QuarantineColumns {
            stream_seq: Vec::with_capacity(n),
            ingested_at: Vec::with_capacity(n),
            subject: Vec::with_capacity(n),
            reason: Vec::with_capacity(n),
            detail: Vec::with_capacity(n),
            payload: Vec::with_capacity(n),
            payload_bytes: Vec::with_capacity(n),
        };
        for entry in entries {
            c.stream_seq.push(i64::try_from(entry.stream_seq).map_err(|_| {
                StoreError::Other(format!("stream sequence {} exceeds bigint", entry.stream_seq))
            })?);
            c.ingested_at.push(to_odt(entry.ingested_at)?);
            c.subject.push(&entry.subject);
            c.reason.push(entry.reason.as_str());
            c.detail.push(&entry.detail);
            c.payload.push(&entry.payload);
            c.payload_bytes
                .push(i32::try_from(entry.payload_bytes).unwrap_or(i32::MAX));
        }
        Ok(c)
    }
}
