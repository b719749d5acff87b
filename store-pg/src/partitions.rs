//! Daily partitions ahead of need (DESIGN.md §3): the ensured-day cache and the calls to the
//! `sentinel_ensure_partitions` SQL function, so no DDL is built here at run time: at startup,
//! on demand for a batch's day, and the running core's periodic run
//! ([`sentinel_ports::Store::ensure_partitions_ahead`]) in a transaction of its own with a
//! `lock_timeout` (SET LOCAL), so it never waits long behind an open transaction on a parent
//! table, and nothing queued behind it waits longer than that either.
//!
//! Also owns the boot's check of the hot partitions' dedup keys (migrations 0020, 0022): every
//! hot partition must have its unique `<partition>_key (instance_key, source_epoch,
//! source_seq)`, or the commit's `INSERT … ON CONFLICT DO NOTHING` stores a redelivered message
//! twice. Under the single-writer lock, before ingest, [`PgStore::ensure_hot_partition_keys`]
//! lists every hot partition lacking it (`sentinel_hot_partition_keys()`, whatever made the
//! partition and whatever its name or day) and has `sentinel_ensure_partitions` make it for
//! that partition's day (as the owner: the writer makes nothing itself), logging each made key
//! at WARN by name; a partition whose key cannot be made (its rows already hold duplicate keys)
//! refuses the start, naming it and how many keys are duplicated. The memory model has no
//! partitions and so no such state: its key set is its dedup (`sentinel-models` `store`).

use std::collections::BTreeSet;

use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Micros, ObsRow};

use sentinel_ports::{PARTITIONS_DAYS_AHEAD_MAX, PartitionsAhead, StoreError};

use crate::{ENSURED_DAYS_MAX, PgStore, db_error};

/// A UTC day number (days since 1970-01-01) as the date an operator reads, e.g. `2026-11-30`.
pub(crate) fn day_date(day: i64) -> String {
    /// The Julian day number of 1970-01-01.
    const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;
    i32::try_from(day + UNIX_EPOCH_JULIAN_DAY)
        .ok()
        .and_then(|julian| time::Date::from_julian_day(julian).ok())
        .map_or_else(|| format!("day {day}"), |date| date.to_string())
}

/// Yesterday through today + `$1`, as UTC days since the Unix epoch, created if missing.
pub(crate) const ENSURE_AROUND_TODAY: &str = "SELECT (d - DATE '1970-01-01')::bigint, \
     sentinel_ensure_partitions(d, $1::integer + 2) \
     FROM (SELECT (now() AT TIME ZONE 'UTC')::date - 1 AS d) AS today";

/// `$1` days after the Unix epoch, `$2` days from there.
const ENSURE_FROM_DAY: &str =
    "SELECT sentinel_ensure_partitions(DATE '1970-01-01' + $1::integer, $2::integer)";

/// PostgreSQL's `lock_not_available`: a lock wait ended by `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

pub(crate) const ENSURE_DAY: &str = "SELECT sentinel_ensure_partitions(DATE '1970-01-01' + $1::integer, 1)";

/// Every hot partition without its dedup key (migration 0022), by name, with a UTC day it
/// holds (days since the Unix epoch): its first, or for a partition from MINVALUE its last,
/// or today for a DEFAULT one (which holds any day).
const HOT_PARTITIONS_WITHOUT_KEY: &str = "SELECT part, \
     ((CASE WHEN from_at > '-infinity' THEN from_at \
            WHEN to_at < 'infinity' THEN to_at - interval '1 microsecond' \
            ELSE now() END) AT TIME ZONE 'UTC')::date - DATE '1970-01-01' \
     FROM sentinel_hot_partition_keys() WHERE NOT has_key ORDER BY part";

/// The SQLSTATE of a hot partition whose dedup key cannot be made (migration 0022); the
/// error's table is the partition.
const KEY_REFUSED: &str = "SN002";

impl PgStore {
    pub(crate) async fn ensure_partitions_around_today(&self) -> Result<(), StoreError> {
        let ahead = i32::try_from(self.config.partition_days_ahead.min(366)).unwrap_or(366);
        let (first_day, created): (i64, i32) = sqlx::query_as(ENSURE_AROUND_TODAY)
            .bind(ahead)
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("ensuring daily partitions"))?;
        if created > 0 {
            tracing::info!(
                created,
                from = %day_date(first_day),
                "created daily observation partitions"
            );
        }
        self.remember_days(first_day..first_day + i64::from(ahead) + 2);
        Ok(())
    }

    /// [`sentinel_ports::Store::ensure_partitions_ahead`].
    pub(crate) async fn ensure_partitions_ahead_inner(
        &self,
        today: Micros,
        days_ahead: u32,
        lock_timeout_ms: u32,
    ) -> Result<PartitionsAhead, StoreError> {
        if !(1..=PARTITIONS_DAYS_AHEAD_MAX).contains(&days_ahead) || lock_timeout_ms == 0 {
            return Err(StoreError::Other(format!(
                "ensure_partitions_ahead: days_ahead must be within 1..={PARTITIONS_DAYS_AHEAD_MAX} and the lock timeout positive, got {days_ahead} and {lock_timeout_ms}"
            )));
        }
        let first_day = today.0.div_euclid(US_PER_DAY) - 1;
        let first_day_db = i32::try_from(first_day)
            .map_err(|_| StoreError::Other(format!("day {first_day} is out of the date range")))?;
        let days = days_ahead + 2;
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning a partitions-ahead run"))?;
        sqlx::query("SELECT set_config('lock_timeout', $1, true)")
            .bind(format!("{lock_timeout_ms}ms"))
            .execute(&mut *tx)
            .await
            .map_err(db_error("setting the partitions-ahead lock timeout"))?;
        let created: i32 = match sqlx::query_scalar(ENSURE_FROM_DAY)
            .bind(first_day_db)
            .bind(i32::try_from(days).unwrap_or(i32::MAX))
            .fetch_one(&mut *tx)
            .await
        {
            Ok(created) => created,
            Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                // Rolled back when `tx` drops; say so explicitly all the same.
                let _ = tx.rollback().await;
                tracing::warn!(
                    lock_timeout_ms,
                    "partitions ahead: a parent table stayed locked past the timeout; retrying later"
                );
                return Ok(PartitionsAhead::LockTimedOut);
            }
            Err(e) => return Err(db_error("ensuring partitions ahead")(e)),
        };
        tx.commit()
            .await
            .map_err(db_error("committing a partitions-ahead run"))?;
        if created > 0 {
            tracing::info!(
                created,
                from = %day_date(first_day),
                days,
                "created daily observation partitions ahead"
            );
        }
        self.remember_days(first_day..first_day + i64::from(days));
        Ok(PartitionsAhead::Ensured {
            created: u32::try_from(created).unwrap_or(0),
            until: self.partitions_created_until_inner().await?,
        })
    }

    /// Makes the dedup key of every hot partition that lacks one, or refuses (see the module
    /// doc). Called under the single-writer lock at boot, before today's partitions are
    /// ensured and before ingest starts. Each day is one transaction with no statement timeout
    /// (a restored day's index build may take minutes), so a day that fails keeps nothing.
    pub(crate) async fn ensure_hot_partition_keys(&self) -> Result<(), StoreError> {
        let missing: Vec<(String, i32)> = sqlx::query_as(HOT_PARTITIONS_WITHOUT_KEY)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("listing hot partitions without their dedup key"))?;
        if missing.is_empty() {
            return Ok(());
        }
        let days: BTreeSet<i32> = missing.iter().map(|(_, day)| *day).collect();
        // The refusals, one per partition (several days can name the same one).
        let mut refused: std::collections::BTreeMap<String, String> = Default::default();
        for day in days {
            let mut tx = self
                .pool
                .begin()
                .await
                .map_err(db_error("beginning a dedup key repair"))?;
            // No timeout on an index build; and the function's own WARNING per key made is
            // not echoed (sqlx logs a notice at its severity): the loop below logs each key
            // made once, by partition name.
            sqlx::query(
                "SELECT set_config('statement_timeout', '0', true), \
                        set_config('client_min_messages', 'error', true)",
            )
            .execute(&mut *tx)
            .await
            .map_err(db_error("setting up a dedup key repair"))?;
            match sqlx::query_scalar::<_, i32>(ENSURE_DAY)
                .bind(day)
                .fetch_one(&mut *tx)
                .await
            {
                Ok(_) => tx
                    .commit()
                    .await
                    .map_err(db_error("committing a dedup key repair"))?,
                Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some(KEY_REFUSED) => {
                    let _ = tx.rollback().await;
                    let part = e.table().unwrap_or("a hot partition").to_owned();
                    refused.insert(part, e.message().to_owned());
                }
                Err(e) => return Err(db_error("making a hot partition's dedup key")(e)),
            }
        }
        let still: BTreeSet<String> = sqlx::query_as::<_, (String, i32)>(HOT_PARTITIONS_WITHOUT_KEY)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("listing hot partitions without their dedup key"))?
            .into_iter()
            .map(|(part, _)| part)
            .collect();
        for (part, _) in missing.iter().filter(|(part, _)| !still.contains(part)) {
            tracing::warn!(
                partition = %part,
                "hot partition had no dedup key: made it before ingest"
            );
        }
        if still.is_empty() {
            return Ok(());
        }
        let mut why: Vec<String> = refused.values().cloned().collect();
        let waiting: Vec<&str> = still
            .iter()
            .filter(|part| !refused.contains_key(*part))
            .map(String::as_str)
            .collect();
        if !waiting.is_empty() {
            why.push(if why.is_empty() {
                format!(
                    "hot partitions still without their dedup key after the repair: {}",
                    waiting.join(", ")
                )
            } else {
                format!(
                    "also left without their key until then (a day is repaired whole): {}",
                    waiting.join(", ")
                )
            });
        }
        Err(StoreError::Other(format!(
            "refusing to start: {}; without its dedup key a redelivered message would be stored \
             twice there. Fix each partition named (docs/operations.md, \"A hot partition without \
             its dedup key\": delete the later copy of each duplicated key) and start again",
            why.join("; ")
        )))
    }

    pub(crate) fn remember_days(&self, days: impl IntoIterator<Item = i64>) {
        let mut ensured = self.ensured_days.lock().unwrap_or_else(|p| p.into_inner());
        ensured.extend(days);
        while ensured.len() > ENSURED_DAYS_MAX {
            ensured.pop_first();
        }
    }

    /// Creates the partitions of any day this batch writes to that we have not ensured yet.
    /// Runs outside the commit transaction so the DDL's locks are short.
    pub(crate) async fn ensure_days_for(&self, rows: &[ObsRow]) -> Result<(), StoreError> {
        let missing: BTreeSet<i64> = {
            let ensured = self.ensured_days.lock().unwrap_or_else(|p| p.into_inner());
            rows.iter()
                .map(|r| r.ingested_at.day())
                .filter(|d| !ensured.contains(d))
                .collect()
        };
        for day in &missing {
            let day_db = i32::try_from(*day)
                .map_err(|_| StoreError::Other(format!("day {day} is out of the date range")))?;
            let created: i32 = sqlx::query_scalar(ENSURE_DAY)
                .bind(day_db)
                .fetch_one(&self.pool)
                .await
                .map_err(db_error("ensuring a daily partition"))?;
            if created > 0 {
                tracing::info!(
                    created,
                    day = %day_date(*day),
                    "created daily observation partitions on demand"
                );
            }
        }
        self.remember_days(missing);
        Ok(())
    }
}
