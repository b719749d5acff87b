//! The PostgreSQL store adapter (DESIGN.md §3, §5, §10; ingest spec, "Schema", "Projection",
//! "The registry is versioned data", stages 11–12; core runtime spec, single writer and epoch).
//!
//! Owns: the only SQL that names the observation tables (architecture invariant), the
//! single-writer lock on a dedicated connection, the fenced commit (a plain insert first, the
//! spec's `ON CONFLICT DO NOTHING` form only when the unique index refuses it: issue 13,
//! [`CommitInsert`]), the checkpoint upsert, the
//! log-head queries of restart, registry storage, migrations with the "schema from the future"
//! refusal (healthlog spec), keeping daily partitions ahead of need, and the `core_start`
//! record of each acquisition and its cold-start timings (core runtime spec, "Restart time").
//!
//! All SQL is static (sqlx 0.9 `SqlSafeStr`); partition DDL lives in the SQL function
//! `sentinel_ensure_partitions` so nothing here builds statements at run time.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sentinel_core::derived::{WindowRequest, WindowRow};
use sentinel_core::{
    Batch, CanonicalValue, CommitReport, ControlEvent, LogHead, Micros, ObsKey, ObsRow, PointState, Quality,
    QuarantineEntry, QuarantineReason, RegistrySnapshot, RestoredState, RetentionClass,
};
use sqlx::migrate::{Migrate, Migrator};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions, PgRow};
use sqlx::{Connection, Row};
use time::OffsetDateTime;

use super::ClassCounts;

mod class_change;
mod history;
mod reprocess;
mod retention;
mod rollup;
use crate::ports::{
    ClassMove, ColdStart, CommitError, HistoryRow, LOCK_SESSION_NAME_PREFIX, LOCK_SESSION_NAME_UNLOCKED,
    Lease, Partition, RegistryLoad, RetentionCutoffs, RetentionRun, RollupGrain, RollupRefresh, RollupRow,
    RollupStep, RollupStepLimits, RollupWatermark, StartupStep, Store, StoreError, StoredControlEvent,
    StoredRegistry,
};

/// The single-writer advisory lock key: ASCII "SENTINEL". The partition function uses a
/// different transaction-scoped key.
pub const LOCK_KEY: i64 = 0x5345_4E54_494E_454C;

/// Migrations embedded at build time from the workspace's `migrations/`.
static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// sqlx's bookkeeping table (its default name; we never rename it).
const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

/// The session holding the single-writer lock, as PostgreSQL reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockHolder {
    pub backend_pid: i32,
    /// `None` when pg_stat_activity does not show the session to this role.
    pub application_name: Option<String>,
    pub backend_start: Option<Micros>,
}

impl LockHolder {
    /// The epoch the holder took, read from the name it gave its session once it had one
    /// ([`crate::ports::lock_session_name`]); `None` while it is still starting.
    pub fn epoch(&self) -> Option<u32> {
        self.application_name
            .as_deref()?
            .strip_prefix(LOCK_SESSION_NAME_PREFIX)?
            .parse()
            .ok()
    }

    /// "pid 4242, application_name \"sentinel-core epoch 7\", epoch 7" for messages.
    pub fn describe(&self) -> String {
        let name = self
            .application_name
            .as_deref()
            .map_or("(not visible to this role)".to_owned(), |n| format!("{n:?}"));
        let epoch = self.epoch().map_or("not yet taken".to_owned(), |e| e.to_string());
        format!("pid {}, application_name {name}, epoch {epoch}", self.backend_pid)
    }
}

/// Bound on the ensured-day cache; older days fall out first (they are never written again
/// once ingested_at has moved on, and re-ensuring one is harmless).
const ENSURED_DAYS_MAX: usize = 64;

#[derive(Clone, Debug)]
pub struct PgStoreConfig {
    /// The JetStream stream name; keys quarantine entries with the stream sequence.
    pub stream_name: String,
    /// Pool size for commits, checkpoints and reads; the runtime runs ~2–4 commits at once.
    pub pool_connections_max: u32,
    /// How long a caller waits for a pooled connection.
    pub pool_acquire_timeout_ms: u64,
    /// Connecting the dedicated lock session.
    pub connect_timeout_ms: u64,
    /// Server-side `statement_timeout` on every session.
    pub statement_timeout_ms: u64,
    /// Bound on one `Lease::alive` round trip; exceeding it reports the lease as not alive.
    pub alive_timeout_ms: u64,
    /// Server-side TCP keepalives so PostgreSQL notices a dead core and frees its lock
    /// (DESIGN.md §10). sqlx does not expose client-side keepalives.
    pub tcp_keepalives_idle_s: u32,
    pub tcp_keepalives_interval_s: u32,
    pub tcp_keepalives_count: u32,
    /// Upper bound on rows plus quarantine entries in one committed batch.
    pub commit_rows_max: usize,
    /// Upper bound on states in one checkpoint.
    pub checkpoint_rows_max: usize,
    /// Daily partitions created ahead of today at migrate and acquire.
    pub partition_days_ahead: u32,
    /// How a batch is inserted; both forms are fenced and report the same RETURNING set.
    pub commit_insert: CommitInsert,
}

/// How [`PgStore`] inserts a batch (issue 13). Both are one fenced statement per attempt and
/// report exactly the rows and entries the database inserted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CommitInsert {
    /// A plain `INSERT … RETURNING` first, which pays for no speculative insertion. Only when
    /// the unique index refuses it (a redelivery after a crash, or a key twice in one batch)
    /// is the batch committed again with `ON CONFLICT DO NOTHING`, in a fresh implicit
    /// transaction that takes the fence again: the refused statement left nothing behind, and
    /// an epoch that moved in between refuses the retry.
    #[default]
    Optimistic,
    /// Always `ON CONFLICT DO NOTHING RETURNING` (the form before issue 13). Kept so the
    /// benchmark compares both in one run and the conformance suite checks the fallback's
    /// statement on its own.
    OnConflict,
}

impl Default for PgStoreConfig {
    fn default() -> Self {
        PgStoreConfig {
            stream_name: "OBS".to_owned(),
            // The runtime keeps up to 4 commits in flight, plus the checkpoint writer and reads.
            pool_connections_max: 6,
            pool_acquire_timeout_ms: 10_000,
            connect_timeout_ms: 10_000,
            statement_timeout_ms: 30_000,
            alive_timeout_ms: 5_000,
            tcp_keepalives_idle_s: 10,
            tcp_keepalives_interval_s: 5,
            tcp_keepalives_count: 3,
            commit_rows_max: 65_536,
            checkpoint_rows_max: 1 << 20,
            partition_days_ahead: 3,
            commit_insert: CommitInsert::Optimistic,
        }
    }
}

/// What `migrate` did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigrateReport {
    /// Versions applied by this call, ascending.
    pub applied: Vec<i64>,
    /// The newest applied version afterwards.
    pub version: i64,
    /// The newest version this binary carries.
    pub supported: i64,
}

impl std::fmt::Display for MigrateReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.applied.is_empty() {
            return write!(
                f,
                "schema is up to date at version {}; nothing to apply",
                self.version
            );
        }
        let applied: Vec<String> = self.applied.iter().map(i64::to_string).collect();
        write!(
            f,
            "applied migration{} {}; schema is now at version {} (this binary's)",
            if self.applied.len() == 1 { "" } else { "s" },
            applied.join(", "),
            self.version
        )
    }
}

/// The database's schema version beside this binary's.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct SchemaState {
    /// The newest applied migration; `None` on a database never migrated.
    pub found: Option<i64>,
    /// The newest migration this binary carries.
    pub supported: i64,
}

impl SchemaState {
    /// `older`, `current` or `newer` than this binary (`absent` before the first migration).
    pub fn relation(&self) -> &'static str {
        match self.found {
            None => "absent",
            Some(found) if found < self.supported => "older",
            Some(found) if found > self.supported => "newer",
            Some(_) => "current",
        }
    }

    /// One sentence an operator can act on.
    pub fn describe(&self) -> String {
        match self.found {
            None => format!(
                "the database has no schema yet (this binary's is version {})",
                self.supported
            ),
            Some(found) if found < self.supported => format!(
                "the database schema is at version {found}, older than this binary's version {}",
                self.supported
            ),
            Some(found) if found > self.supported => format!(
                "the database schema is at version {found}, newer than this binary's version {}; \
                 this binary must not run against it",
                self.supported
            ),
            Some(found) => format!("the database schema is at version {found}, this binary's"),
        }
    }
}

/// The PostgreSQL store. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    connect_options: PgConnectOptions,
    config: Arc<PgStoreConfig>,
    /// Days (since the Unix epoch, UTC) whose partitions are known to exist.
    ensured_days: Arc<Mutex<BTreeSet<i64>>>,
    /// Optimistic commits the unique index refused, each then committed with ON CONFLICT.
    commit_fallbacks: Arc<AtomicU64>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("stream_name", &self.config.stream_name)
            .finish_non_exhaustive()
    }
}

fn db_error(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| StoreError::Other(format!("{context}: {e}"))
}

fn migrate_error(context: &'static str) -> impl FnOnce(sqlx::migrate::MigrateError) -> StoreError {
    move |e| StoreError::Other(format!("{context}: {e}"))
}

fn to_odt(t: Micros) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.0) * 1_000)
        .map_err(|_| StoreError::Other(format!("timestamp {} µs is out of range", t.0)))
}

/// Exact: PostgreSQL timestamps are whole microseconds.
fn from_odt(t: OffsetDateTime) -> Micros {
    Micros::from_unix_nanos(t.unix_timestamp_nanos())
}

/// A UTC day number (days since 1970-01-01) as the date an operator reads, e.g. `2026-11-30`.
fn day_date(day: i64) -> String {
    /// The Julian day number of 1970-01-01.
    const UNIX_EPOCH_JULIAN_DAY: i64 = 2_440_588;
    i32::try_from(day + UNIX_EPOCH_JULIAN_DAY)
        .ok()
        .and_then(|julian| time::Date::from_julian_day(julian).ok())
        .map_or_else(|| format!("day {day}"), |date| date.to_string())
}

fn epoch_to_db(epoch: u32) -> Result<i32, StoreError> {
    i32::try_from(epoch).map_err(|_| StoreError::Other(format!("epoch {epoch} exceeds the integer column")))
}

/// The columns are `integer` and `bigint`. A key outside them cannot be stored; refusing it
/// beats wrapping it into a different key.
fn key_to_db(key: &ObsKey) -> Result<(i32, i64), StoreError> {
    match (i32::try_from(key.source_epoch), i64::try_from(key.source_seq)) {
        (Ok(e), Ok(s)) => Ok((e, s)),
        _ => Err(StoreError::Other(format!(
            "key ({}, {}, {}) is outside the integer/bigint range of the observation tables",
            key.driver_instance, key.source_epoch, key.source_seq
        ))),
    }
}

fn value_columns(value: &Option<CanonicalValue>) -> (Option<f64>, Option<bool>, Option<&str>) {
    match value {
        None => (None, None, None),
        Some(CanonicalValue::Num(v)) => (Some(*v), None, None),
        Some(CanonicalValue::Bool(v)) => (None, Some(*v), None),
        Some(CanonicalValue::Text(v)) => (None, None, Some(v)),
    }
}

fn value_from_columns(
    num: Option<f64>,
    boolean: Option<bool>,
    text: Option<String>,
) -> Option<CanonicalValue> {
    match (num, boolean, text) {
        (Some(v), _, _) => Some(CanonicalValue::Num(v)),
        (None, Some(v), _) => Some(CanonicalValue::Bool(v)),
        (None, None, Some(v)) => Some(CanonicalValue::Text(Arc::from(v))),
        (None, None, None) => None,
    }
}

fn quality_from_db(text: &str) -> Result<Quality, StoreError> {
    Quality::parse(text).ok_or_else(|| StoreError::Other(format!("unknown quality {text:?} in the database")))
}

// ---------------------------------------------------------------------------------------------
// Static SQL. The class tables are written from one template so the three stay identical.

/// One fenced batch in ONE statement, run in autocommit: one round trip and one implicit
/// transaction per batch instead of BEGIN, fence, an INSERT per class, the quarantine INSERT
/// and COMMIT. Data-modifying CTEs run with one snapshot and commit or roll back together.
/// The fence locks the epoch row FOR SHARE, so a new core's epoch increment waits for this
/// batch and every later batch of ours sees the new epoch and inserts nothing; the statement
/// always returns the current epoch so the caller can tell a refused batch from an
/// all-conflict one. Rows are routed by `class` (0 measurement, 1 state, 2 diagnostic).
///
/// Two forms share the fence and the source (issue 13, [`CommitInsert`]): `COMMIT_BATCH`, the
/// spec's `ON CONFLICT DO NOTHING RETURNING`, and `COMMIT_BATCH_PLAIN`, plain inserts that
/// either insert every row and entry of the batch or fail as a whole on the unique index.
macro_rules! observation_columns {
    () => {
        "ingested_at, point_id, observed_at, device_time, value_num, value_bool, value_text, \
         native_num, native_text, unit_native, quality, reason, detail, changed, registry_version, \
         driver_instance, source_epoch, source_seq, skew_flagged"
    };
}

/// The fence and the batch's rows (`src`, empty when the fence refuses); `$1`–`$21`.
macro_rules! fenced_source {
    () => {
        concat!(
            "WITH fence AS (SELECT epoch FROM core_epoch WHERE singleton FOR SHARE), \
             allowed AS (SELECT 1 FROM fence WHERE epoch = $20), \
             src AS (SELECT u.* FROM UNNEST($1::timestamptz[], $2::text[], $3::timestamptz[], \
               $4::timestamptz[], $5::float8[], $6::bool[], $7::text[], $8::float8[], $9::text[], \
               $10::text[], $11::text[]::quality[], $12::text[], $13::text[]::jsonb[], $14::bool[], \
               $15::integer[], $16::text[], $17::integer[], $18::bigint[], $19::bool[], $21::smallint[]) \
               AS u(",
            observation_columns!(),
            ", class) WHERE EXISTS (SELECT 1 FROM allowed))"
        )
    };
}

macro_rules! insert_class {
    ($table:literal, $class:literal, $tail:literal) => {
        concat!(
            "INSERT INTO ",
            $table,
            " (",
            observation_columns!(),
            ", applied) SELECT ",
            observation_columns!(),
            ", $30::bigint FROM src WHERE class = ",
            $class,
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

/// The redelivery-safe form: what the unique index refuses is skipped, and RETURNING keys
/// (`kind = 0`), quarantine sequences (`kind = 1`) and the current epoch (`kind = 2`) come
/// back in one result.
const COMMIT_BATCH: &str = concat!(
    fenced_source!(),
    ", m AS (",
    insert_class!(
        "observation_measurement",
        "0",
        " ON CONFLICT DO NOTHING RETURNING driver_instance, source_epoch, source_seq, ingested_at"
    ),
    "), s AS (",
    insert_class!(
        "observation_state",
        "1",
        " ON CONFLICT DO NOTHING RETURNING driver_instance, source_epoch, source_seq, ingested_at"
    ),
    "), d AS (",
    insert_class!(
        "observation_diagnostic",
        "2",
        " ON CONFLICT DO NOTHING RETURNING driver_instance, source_epoch, source_seq, ingested_at"
    ),
    "), q AS (",
    insert_quarantine!(" ON CONFLICT (stream, stream_seq) DO NOTHING RETURNING stream_seq"),
    ") SELECT 0::smallint AS kind, driver_instance, source_epoch, source_seq, ingested_at FROM m \
     UNION ALL SELECT 0::smallint, driver_instance, source_epoch, source_seq, ingested_at FROM s \
     UNION ALL SELECT 0::smallint, driver_instance, source_epoch, source_seq, ingested_at FROM d \
     UNION ALL SELECT 1::smallint, NULL::text, NULL::integer, stream_seq, NULL::timestamptz FROM q \
     UNION ALL SELECT 2::smallint, NULL::text, epoch, NULL::bigint, NULL::timestamptz FROM fence"
);

/// The optimistic form: no speculative insertion, so a unique violation (SQLSTATE 23505)
/// aborts the whole statement and nothing of it stays. When it succeeds every row and entry
/// was inserted, so RETURNING only has to be counted per table: one row back with the four
/// counts and the current epoch (none when the epoch row is missing).
const COMMIT_BATCH_PLAIN: &str = concat!(
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
     (SELECT count(*) FROM q), epoch FROM fence"
);

/// The invariant-5 order, newest first. `COLLATE "C"` makes text compare bytewise, as Rust's
/// `str` does, whatever the database's collation.
macro_rules! log_heads {
    ($table:literal) => {
        concat!(
            "SELECT p.point_id, h.quality::text, h.reason, h.observed_at, h.ingested_at, \
             h.driver_instance, h.source_epoch, h.source_seq, v.value_num, v.value_bool, v.value_text, \
             v.observed_at, v.ingested_at, v.driver_instance, v.source_epoch, v.source_seq \
             FROM unnest($1::text[]) AS p(point_id) \
             CROSS JOIN LATERAL (SELECT o.quality, o.reason, o.observed_at, o.ingested_at, \
               o.driver_instance, o.source_epoch, o.source_seq FROM ",
            $table,
            " o WHERE o.point_id = p.point_id \
               ORDER BY o.observed_at DESC, o.ingested_at DESC, o.driver_instance COLLATE \"C\" DESC, \
               o.source_epoch DESC, o.source_seq DESC LIMIT 1) h \
             LEFT JOIN LATERAL (SELECT o.value_num, o.value_bool, o.value_text, o.observed_at, o.ingested_at, \
               o.driver_instance, o.source_epoch, o.source_seq FROM ",
            $table,
            " o WHERE o.point_id = p.point_id \
               AND (o.value_num IS NOT NULL OR o.value_bool IS NOT NULL OR o.value_text IS NOT NULL) \
               ORDER BY o.observed_at DESC, o.ingested_at DESC, o.driver_instance COLLATE \"C\" DESC, \
               o.source_epoch DESC, o.source_seq DESC LIMIT 1) v ON true"
        )
    };
}

const HEADS_MEASUREMENT: &str = log_heads!("observation_measurement");
const HEADS_STATE: &str = log_heads!("observation_state");
const HEADS_DIAGNOSTIC: &str = log_heads!("observation_diagnostic");

/// Restart step 5: per requested point, its rows since its bound (newest first, at most `$3`)
/// and, whatever their age, its newest `rows_min` (`$4`); `UNION` drops a row both return.
/// One statement per class table; the `(point_id, observed_at DESC)` index serves each lateral
/// scan, and a `rows_min` of 0 costs nothing.
macro_rules! windows {
    ($table:literal) => {
        concat!(
            "SELECT w.point_id, o.observed_at, o.ingested_at, o.driver_instance, o.source_epoch, \
             o.source_seq, o.quality::text, o.value_num, o.applied \
             FROM unnest($1::text[], $2::timestamptz[], $4::bigint[]) AS w(point_id, since, rows_min) \
             CROSS JOIN LATERAL ((SELECT o.observed_at, o.ingested_at, o.driver_instance, o.source_epoch, \
               o.source_seq, o.quality, o.value_num, o.applied FROM ",
            $table,
            " o WHERE o.point_id = w.point_id AND o.observed_at >= w.since \
               ORDER BY o.observed_at DESC, o.ingested_at DESC, o.driver_instance COLLATE \"C\" DESC, \
               o.source_epoch DESC, o.source_seq DESC LIMIT $3) \
             UNION (SELECT o.observed_at, o.ingested_at, o.driver_instance, o.source_epoch, \
               o.source_seq, o.quality, o.value_num, o.applied FROM ",
            $table,
            " o WHERE o.point_id = w.point_id \
               ORDER BY o.observed_at DESC, o.ingested_at DESC, o.driver_instance COLLATE \"C\" DESC, \
               o.source_epoch DESC, o.source_seq DESC LIMIT w.rows_min)) o"
        )
    };
}

fn windows_sql(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => windows!("observation_measurement"),
        RetentionClass::State => windows!("observation_state"),
        RetentionClass::Diagnostic => windows!("observation_diagnostic"),
    }
}

fn window_row(row: &PgRow) -> Result<WindowRow, StoreError> {
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
        ))
    };
    let (id, observed, ingested, instance, epoch, seq, quality, value, applied) = decode().map_err(get)?;
    let key = key_from_columns(Some(instance), Some(epoch), Some(seq))?
        .ok_or_else(|| StoreError::Other("a window row without a key".to_owned()))?;
    Ok(WindowRow {
        point_id: Arc::from(id),
        observed_at: from_odt(observed),
        ingested_at: from_odt(ingested),
        key,
        quality: quality_from_db(&quality)?,
        value,
        applied,
    })
}

fn heads_sql(class: RetentionClass) -> &'static str {
    match class {
        RetentionClass::Measurement => HEADS_MEASUREMENT,
        RetentionClass::State => HEADS_STATE,
        RetentionClass::Diagnostic => HEADS_DIAGNOSTIC,
    }
}

const FENCE: &str = "SELECT epoch FROM core_epoch WHERE singleton FOR SHARE";

/// Control events in input order: `seq` is drawn as rows are inserted in `ord` order, and the
/// outer ORDER BY returns them in that order.
const INSERT_CONTROL_EVENTS: &str = "\
WITH ins AS ( \
  INSERT INTO control_event (occurred_at, kind, point_id, principal, core_epoch, payload, registry_version) \
  SELECT o, k, p, pr, $5, pl::jsonb, rv \
  FROM UNNEST($1::timestamptz[], $2::text[], $3::text[], $4::text[], $6::text[], $7::int[]) \
       WITH ORDINALITY AS t(o, k, p, pr, pl, rv, ord) \
  ORDER BY ord \
  RETURNING seq) \
SELECT seq FROM ins ORDER BY seq";

const UPSERT_POINT_STATE: &str = "INSERT INTO point_state \
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

const SELECT_POINT_STATE: &str = "SELECT point_id, value_num, value_bool, value_text, quality::text, \
     reason, observed_at, ingested_at, changed_at, quality_since, watermark_seq, driver_instance, \
     source_epoch, source_seq FROM point_state WHERE point_id = ANY($1::text[])";

/// A session-level advisory lock on a bigint key shows in pg_locks as classid = high 32 bits,
/// objid = low 32 bits, objsubid = 1.
const LOCK_ALIVE: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
     AND classid::bigint = ($1::bigint >> 32) AND objid::bigint = ($1::bigint & 4294967295))";

/// The acquisition, in one statement on the lock session so that it happens only while holding
/// the lock and all three parts commit together: increment the epoch, rename the session after
/// it (so `pg_stat_activity` shows which core holds the lock), and insert its `core_start` row.
/// `set_config(.., false)` outlives the statement's implicit transaction.
const ACQUIRE_EPOCH: &str = "WITH bumped AS (UPDATE core_epoch SET epoch = epoch + 1 WHERE singleton RETURNING epoch), \
     named AS (SELECT epoch, set_config('application_name', $1::text || epoch, false) AS app FROM bumped), \
     recorded AS (INSERT INTO core_start (epoch, started_at, backend_pid, application_name) \
       SELECT epoch, now(), pg_backend_pid(), app FROM named RETURNING epoch) \
     SELECT epoch FROM recorded";

/// Steps arrive as two parallel arrays and are kept in their given order.
const RECORD_COLD_START: &str = "UPDATE core_start SET ready_at = now(), steps = \
     (SELECT coalesce(jsonb_agg(jsonb_build_object('step', s, 'duration_us', d) ORDER BY n), '[]'::jsonb) \
      FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS u(s, d, n)) \
     WHERE epoch = $1";

const SELECT_COLD_STARTS: &str = "SELECT c.epoch, c.started_at, c.backend_pid, c.application_name, c.ready_at, \
     array(SELECT e->>'step' FROM jsonb_array_elements(c.steps) WITH ORDINALITY AS x(e, n) ORDER BY n), \
     array(SELECT (e->>'duration_us')::bigint FROM jsonb_array_elements(c.steps) WITH ORDINALITY AS x(e, n) \
       ORDER BY n) \
     FROM core_start c ORDER BY c.epoch";

/// The session holding the single-writer lock in this database (advisory locks are per
/// database, and pg_locks shows every database's), with what pg_stat_activity says about it.
const LOCK_HOLDER: &str = "SELECT l.pid, a.application_name, a.backend_start FROM pg_locks l \
     LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid::bigint = ($1::bigint >> 32) AND l.objid::bigint = ($1::bigint & 4294967295)";

/// Yesterday through today + `$1`, as UTC days since the Unix epoch, created if missing.
const ENSURE_AROUND_TODAY: &str = "SELECT (d - DATE '1970-01-01')::bigint, \
     sentinel_ensure_partitions(d, $1::integer + 2) \
     FROM (SELECT (now() AT TIME ZONE 'UTC')::date - 1 AS d) AS today";

const ENSURE_DAY: &str = "SELECT sentinel_ensure_partitions(DATE '1970-01-01' + $1::integer, 1)";

impl PgStore {
    /// Connects the commit pool. Does not migrate; call [`PgStore::migrate`] for that.
    pub async fn connect(database_url: &str, config: PgStoreConfig) -> Result<PgStore, StoreError> {
        let connect_options = PgConnectOptions::from_str(database_url)
            .map_err(db_error("parsing the database URL"))?
            .application_name("sentinel")
            .options([
                ("statement_timeout", config.statement_timeout_ms.to_string()),
                ("tcp_keepalives_idle", config.tcp_keepalives_idle_s.to_string()),
                (
                    "tcp_keepalives_interval",
                    config.tcp_keepalives_interval_s.to_string(),
                ),
                ("tcp_keepalives_count", config.tcp_keepalives_count.to_string()),
            ]);
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_connections_max.max(1))
            .acquire_timeout(Duration::from_millis(config.pool_acquire_timeout_ms))
            .connect_with(connect_options.clone())
            .await
            .map_err(db_error("connecting to PostgreSQL"))?;
        Ok(PgStore {
            pool,
            connect_options,
            config: Arc::new(config),
            ensured_days: Default::default(),
            commit_fallbacks: Default::default(),
        })
    }

    /// Closes the pool. Leases hold their own connections and are unaffected.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// How many optimistic commits the unique index refused since connecting (each was then
    /// committed with `ON CONFLICT DO NOTHING`). For the benchmark and the tests.
    pub fn commit_fallbacks(&self) -> u64 {
        self.commit_fallbacks.load(Ordering::Relaxed)
    }

    /// The newest migration version this binary carries.
    pub fn supported_schema_version() -> i64 {
        MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// Takes the single-writer lock and applies pending migrations under it, then releases it:
    /// `sentinel migrate`. Fails with [`StoreError::LockHeld`] at once, applying nothing, while a
    /// core holds the lock (an upgrade is "stop the old core, start the new one").
    pub async fn migrate(&self) -> Result<MigrateReport, StoreError> {
        let mut lock = self.lock().await?;
        let report = lock.migrate(self).await;
        let released = lock.release().await;
        let report = report?;
        released?;
        Ok(report)
    }

    /// Connects a dedicated session and takes the single-writer lock on it, or fails with
    /// [`StoreError::LockHeld`] at once. Runs no DDL and touches no table: a second core that
    /// loses here has changed nothing (core runtime spec, "Acquisition order at startup").
    pub async fn lock(&self) -> Result<PgLock, StoreError> {
        // Named apart from the pool's sessions so the lock holder is recognisable even before
        // it has learned its epoch.
        let lock_session_options = self
            .connect_options
            .clone()
            .application_name(LOCK_SESSION_NAME_UNLOCKED);
        let connect = PgConnection::connect_with(&lock_session_options);
        let mut conn = tokio::time::timeout(Duration::from_millis(self.config.connect_timeout_ms), connect)
            .await
            .map_err(|_| StoreError::Other("connecting the lock session timed out".into()))?
            .map_err(db_error("connecting the lock session"))?;
        let (locked, backend_pid): (bool, i32) =
            sqlx::query_as("SELECT pg_try_advisory_lock($1), pg_backend_pid()")
                .bind(LOCK_KEY)
                .fetch_one(&mut conn)
                .await
                .map_err(db_error("trying the single-writer lock"))?;
        if !locked {
            // Best effort: the session holds nothing, so dropping it is as good as closing it.
            let _ = conn.close().await;
            return Err(StoreError::LockHeld);
        }
        tracing::info!(backend_pid, "single-writer lock taken");
        Ok(PgLock { conn, backend_pid })
    }

    /// The newest applied migration version, `None` on a database never migrated.
    pub async fn schema_version(&self) -> Result<Option<i64>, StoreError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(db_error("acquiring a connection"))?;
        Ok(applied_versions(&mut conn).await?.into_iter().max())
    }

    /// Where this database's schema stands against this binary's, read without writing.
    pub async fn schema_state(&self) -> Result<SchemaState, StoreError> {
        let found = self.schema_version().await?;
        Ok(SchemaState {
            found,
            supported: Self::supported_schema_version(),
        })
    }

    /// Fails unless the schema is exactly this binary's: for commands that write without the
    /// lock (`registry load`) and so must not migrate.
    pub async fn require_current_schema(&self) -> Result<(), StoreError> {
        let state = self.schema_state().await?;
        match state.found {
            Some(found) if found > state.supported => Err(StoreError::SchemaFromFuture {
                found,
                supported: state.supported,
            }),
            Some(found) if found == state.supported => Ok(()),
            _ => Err(StoreError::Other(format!(
                "{}; run `sentinel migrate` first",
                state.describe()
            ))),
        }
    }

    /// Grants the core's writer role and the dashboards' reader role exactly what they use
    /// (`migrations/0003_roles.sql`, `sentinel_apply_grants`). Run as the schema owner; both
    /// roles must exist.
    pub async fn apply_grants(&self, writer: &str, reader: &str) -> Result<(), StoreError> {
        self.require_current_schema().await?;
        sqlx::query("SELECT sentinel_apply_grants($1, $2)")
            .bind(writer)
            .bind(reader)
            .execute(&self.pool)
            .await
            .map_err(db_error("applying the role grants"))?;
        sqlx::query("SELECT sentinel_apply_reprocess_grants($1)")
            .bind(writer)
            .execute(&self.pool)
            .await
            .map_err(db_error("applying the reprocess grant"))?;
        Ok(())
    }

    /// The current core epoch.
    pub async fn current_epoch(&self) -> Result<u32, StoreError> {
        let epoch: i32 = sqlx::query_scalar("SELECT epoch FROM core_epoch WHERE singleton")
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("reading the core epoch"))?;
        u32::try_from(epoch).map_err(|_| StoreError::Other(format!("negative core epoch {epoch}")))
    }

    /// Row counts of the three class tables (exact `count(*)`: for status and tests, not hot).
    pub async fn row_counts(&self) -> Result<ClassCounts, StoreError> {
        let row = sqlx::query(
            "SELECT (SELECT count(*) FROM observation_measurement), \
             (SELECT count(*) FROM observation_state), (SELECT count(*) FROM observation_diagnostic)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(db_error("counting observation rows"))?;
        let mut counts = [0u64; 3];
        for (i, count) in counts.iter_mut().enumerate() {
            let n: i64 = row.try_get(i).map_err(db_error("decoding a row count"))?;
            *count = n.max(0) as u64;
        }
        Ok(ClassCounts(counts))
    }

    /// Quarantine entry counts per reason, ordered by reason.
    pub async fn quarantine_counts(&self) -> Result<Vec<(QuarantineReason, u64)>, StoreError> {
        let rows: Vec<(String, i64)> =
            sqlx::query_as("SELECT reason, count(*) FROM quarantine GROUP BY reason")
                .fetch_all(&self.pool)
                .await
                .map_err(db_error("counting quarantine entries"))?;
        let mut counts = BTreeMap::new();
        for (reason, n) in rows {
            let reason = QuarantineReason::parse(&reason).ok_or_else(|| {
                StoreError::Other(format!("unknown quarantine reason {reason:?} in the database"))
            })?;
            counts.insert(reason, n.max(0) as u64);
        }
        Ok(counts.into_iter().collect())
    }

    /// Every acquisition and its cold start, ascending by epoch.
    pub async fn cold_starts(&self) -> Result<Vec<ColdStart>, StoreError> {
        let rows = sqlx::query(SELECT_COLD_STARTS)
            .fetch_all(&self.pool)
            .await
            .map_err(db_error("reading core_start"))?;
        rows.iter().map(cold_start_from_row).collect()
    }

    /// The session holding the single-writer lock, `None` when it is free.
    pub async fn lock_holder(&self) -> Result<Option<LockHolder>, StoreError> {
        let row: Option<(i32, Option<String>, Option<OffsetDateTime>)> = sqlx::query_as(LOCK_HOLDER)
            .bind(LOCK_KEY)
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error("reading the lock holder"))?;
        Ok(
            row.map(|(backend_pid, application_name, backend_start)| LockHolder {
                backend_pid,
                application_name,
                backend_start: backend_start.map(from_odt),
            }),
        )
    }

    async fn record_cold_start_inner(&self, epoch: u32, steps: Vec<StartupStep>) -> Result<(), StoreError> {
        let epoch_db = epoch_to_db(epoch)?;
        let names: Vec<&str> = steps.iter().map(|s| s.step.as_str()).collect();
        let durations_us: Vec<i64> = steps
            .iter()
            .map(|s| i64::try_from(s.duration_us).unwrap_or(i64::MAX))
            .collect();
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the cold-start transaction"))?;
        fence(&mut tx, epoch).await?;
        let updated = sqlx::query(RECORD_COLD_START)
            .bind(epoch_db)
            .bind(names)
            .bind(durations_us)
            .execute(&mut *tx)
            .await
            .map_err(db_error("recording the cold start"))?
            .rows_affected();
        if updated != 1 {
            return Err(StoreError::Other(format!(
                "no acquisition recorded for epoch {epoch}"
            )));
        }
        tx.commit().await.map_err(db_error("committing the cold start"))?;
        tracing::debug!(epoch, steps = steps.len(), "cold start recorded");
        Ok(())
    }

    async fn ensure_partitions_around_today(&self) -> Result<(), StoreError> {
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

    fn remember_days(&self, days: impl IntoIterator<Item = i64>) {
        let mut ensured = self.ensured_days.lock().unwrap_or_else(|p| p.into_inner());
        ensured.extend(days);
        while ensured.len() > ENSURED_DAYS_MAX {
            ensured.pop_first();
        }
    }

    /// Creates the partitions of any day this batch writes to that we have not ensured yet.
    /// Runs outside the commit transaction so the DDL's locks are short.
    async fn ensure_days_for(&self, rows: &[ObsRow]) -> Result<(), StoreError> {
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

    async fn commit_inner(&self, batch: &Batch) -> Result<(Vec<u32>, u32), StoreError> {
        if batch.len() > self.config.commit_rows_max {
            return Err(StoreError::Other(format!(
                "batch of {} entries exceeds commit_rows_max {}",
                batch.len(),
                self.config.commit_rows_max
            )));
        }
        let epoch = epoch_to_db(batch.epoch)?;
        self.ensure_days_for(&batch.rows).await?;

        let rows = ObservationColumns::new(&batch.rows)?;
        let quarantine = QuarantineColumns::new(&batch.quarantine)?;
        let (inserted, quarantine_inserted) = match self.config.commit_insert {
            CommitInsert::OnConflict => self.commit_on_conflict(batch, epoch, &rows, &quarantine).await?,
            CommitInsert::Optimistic => match self.commit_plain(batch, epoch, &rows, &quarantine).await? {
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
            },
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

    /// `COMMIT_BATCH_PLAIN`. `Ok(None)` when the unique index refused the statement: it was
    /// rolled back as a whole, so nothing of the batch is in the database.
    async fn commit_plain(
        &self,
        batch: &Batch,
        epoch: i32,
        rows: &ObservationColumns<'_>,
        quarantine: &QuarantineColumns<'_>,
    ) -> Result<Option<(Vec<u32>, u32)>, StoreError> {
        let answer = match bind_batch(
            COMMIT_BATCH_PLAIN,
            epoch,
            batch.applied(),
            &self.config.stream_name,
            rows,
            quarantine,
        )
        .fetch_optional(&self.pool)
        .await
        {
            Ok(answer) => answer,
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(None),
            Err(e) => return Err(db_error("committing the batch")(e)),
        };
        let answer = answer.ok_or_else(|| StoreError::Other("the core_epoch row is missing".into()))?;
        let decode = || -> Result<([i64; 4], i32), sqlx::Error> {
            Ok((
                [
                    answer.try_get(0)?,
                    answer.try_get(1)?,
                    answer.try_get(2)?,
                    answer.try_get(3)?,
                ],
                answer.try_get(4)?,
            ))
        };
        let (counts, current) = decode().map_err(db_error("decoding the commit counts"))?;
        if current != epoch {
            // The fence refused: nothing was inserted (every INSERT reads `allowed`).
            debug_assert_eq!(counts, [0; 4]);
            return Err(StoreError::Fenced {
                epoch: batch.epoch,
                current: current.max(0) as u32,
            });
        }
        // A plain INSERT inserts every row it selects or fails, so the counts must be the
        // batch's own; anything else means a row matched no class table.
        let expected = [
            rows.class_rows[0] as i64,
            rows.class_rows[1] as i64,
            rows.class_rows[2] as i64,
            batch.quarantine.len() as i64,
        ];
        if counts != expected {
            return Err(StoreError::Other(format!(
                "the plain insert wrote {counts:?} rows per table and quarantine entries, the batch holds {expected:?}"
            )));
        }
        let inserted = (0..batch.rows.len() as u32).collect();
        Ok(Some((inserted, batch.quarantine.len() as u32)))
    }

    /// `COMMIT_BATCH`: what is already there is skipped, and RETURNING names what was inserted.
    async fn commit_on_conflict(
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
            &self.config.stream_name,
            rows,
            quarantine,
        )
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("committing the batch"))?;

        let by_key = ordinals_by_key(&batch.rows)?;
        let mut inserted = Vec::with_capacity(returned.len());
        let mut quarantine_inserted = 0u32;
        let mut current_epoch = None;
        for row in &returned {
            let kind: i16 = row.try_get(0).map_err(db_error("decoding RETURNING"))?;
            match kind {
                0 => {
                    let instance: &str = row.try_get(1).map_err(db_error("decoding RETURNING"))?;
                    let source_epoch: i32 = row.try_get(2).map_err(db_error("decoding RETURNING"))?;
                    let seq: i64 = row.try_get(3).map_err(db_error("decoding RETURNING"))?;
                    let at: OffsetDateTime = row.try_get(4).map_err(db_error("decoding RETURNING"))?;
                    let ordinal = by_key
                        .get(&(instance, source_epoch, seq, from_odt(at).0))
                        .ok_or_else(|| {
                            StoreError::Other(format!(
                                "RETURNING named key ({instance}, {source_epoch}, {seq}) not in the batch"
                            ))
                        })?;
                    inserted.push(*ordinal);
                }
                1 => quarantine_inserted += 1,
                _ => current_epoch = Some(row.try_get::<i32, _>(2).map_err(db_error("decoding the fence"))?),
            }
        }
        let current =
            current_epoch.ok_or_else(|| StoreError::Other("the core_epoch row is missing".into()))?;
        if current != epoch {
            // The fence refused: nothing was inserted (every INSERT reads `allowed`).
            debug_assert!(inserted.is_empty() && quarantine_inserted == 0);
            return Err(StoreError::Fenced {
                epoch: batch.epoch,
                current: current.max(0) as u32,
            });
        }
        inserted.sort_unstable();
        Ok((inserted, quarantine_inserted))
    }

    async fn checkpoint_inner(&self, epoch: u32, states: Vec<PointState>) -> Result<(), StoreError> {
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
        fence(&mut tx, epoch).await?;
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

    async fn write_control_events_inner(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> Result<Vec<i64>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        super::check_control_stamps(epoch, &events)?;
        let epoch_db = epoch_to_db(epoch)?;
        let n = events.len();
        let mut occurred = Vec::with_capacity(n);
        let mut kinds = Vec::with_capacity(n);
        let mut points = Vec::with_capacity(n);
        let mut principals = Vec::with_capacity(n);
        let mut payloads = Vec::with_capacity(n);
        let mut versions = Vec::with_capacity(n);
        for event in &events {
            occurred.push(to_odt(event.occurred_at)?);
            kinds.push(event.kind().as_str());
            points.push(&*event.point_id);
            principals.push(&*event.principal);
            payloads.push(event.payload_json());
            versions.push(event.registry_version);
        }
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the control-event transaction"))?;
        fence(&mut tx, epoch).await?;
        let seqs: Vec<i64> = sqlx::query_scalar(INSERT_CONTROL_EVENTS)
            .bind(occurred)
            .bind(kinds)
            .bind(points)
            .bind(principals)
            .bind(epoch_db)
            .bind(payloads)
            .bind(versions)
            .fetch_all(&mut *tx)
            .await
            .map_err(db_error("inserting control events"))?;
        tx.commit().await.map_err(db_error("committing control events"))?;
        debug_assert_eq!(seqs.len(), n);
        tracing::debug!(events = n, epoch, "control events committed");
        Ok(seqs)
    }

    async fn load_control_events_inner(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredControlEvent>, StoreError> {
        let limit = limit.min(crate::ports::CONTROL_EVENTS_LOAD_MAX) as i64;
        let rows = sqlx::query(
            "SELECT seq, occurred_at, kind, point_id, principal, core_epoch, payload::text AS payload, \
             registry_version FROM control_event WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(after_seq)
        .bind(limit)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("loading control events"))?;
        rows.iter()
            .map(|row| {
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
            })
            .collect()
    }

    async fn store_registry_inner(&self, snapshot: &RegistrySnapshot) -> Result<RegistryLoad, StoreError> {
        let mut tx = self
            .pool
            .begin()
            .await
            .map_err(db_error("beginning the registry transaction"))?;
        // Serialises loads so two cannot both decide to create version max+1.
        sqlx::query("LOCK TABLE registry_version IN EXCLUSIVE MODE")
            .execute(&mut *tx)
            .await
            .map_err(db_error("locking registry_version"))?;
        let newest: Option<(i32, String)> = sqlx::query_as(
            "SELECT version, content_hash FROM registry_version ORDER BY version DESC LIMIT 1",
        )
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error("reading the newest registry version"))?;
        if let Some((version, content_hash)) = &newest
            && *content_hash == snapshot.content_hash
        {
            tx.rollback()
                .await
                .map_err(db_error("ending the registry transaction"))?;
            return Ok(RegistryLoad {
                version: *version,
                created: false,
            });
        }
        let version = newest.map_or(1, |(v, _)| v + 1);
        let mut hashes = Vec::with_capacity(snapshot.entries.len());
        let mut canon = Vec::with_capacity(snapshot.entries.len());
        let mut ids = Vec::with_capacity(snapshot.entries.len());
        for entry in &snapshot.entries {
            hashes.push(entry.hash.as_str());
            canon.push(entry.canonical_json.as_str());
            ids.push(entry.point_id.as_str());
        }
        sqlx::query(
            "INSERT INTO descriptor_blob (hash, descriptor, canonical) \
             SELECT h, c::jsonb, c FROM UNNEST($1::text[], $2::text[]) AS u(h, c) \
             ON CONFLICT (hash) DO NOTHING",
        )
        .bind(&hashes)
        .bind(&canon)
        .execute(&mut *tx)
        .await
        .map_err(db_error("storing descriptor blobs"))?;
        sqlx::query(
            "INSERT INTO registry_version (version, loaded_at, git_sha, content_hash) VALUES ($1, now(), $2, $3)",
        )
        .bind(version)
        .bind(snapshot.git_sha.as_str())
        .bind(snapshot.content_hash.as_str())
        .execute(&mut *tx)
        .await
        .map_err(db_error("storing the registry version"))?;
        sqlx::query(
            "INSERT INTO point_descriptor (version, point_id, hash) \
             SELECT $1, p, h FROM UNNEST($2::text[], $3::text[]) AS u(p, h)",
        )
        .bind(version)
        .bind(&ids)
        .bind(&hashes)
        .execute(&mut *tx)
        .await
        .map_err(db_error("storing point descriptors"))?;
        tx.commit()
            .await
            .map_err(db_error("committing the registry version"))?;
        tracing::info!(version, points = ids.len(), "stored registry version");
        Ok(RegistryLoad {
            version,
            created: true,
        })
    }

    async fn load_registry_inner(&self, version: Option<i32>) -> Result<Option<StoredRegistry>, StoreError> {
        let head: Option<(i32, String, String)> = match version {
            Some(v) => {
                sqlx::query_as(
                    "SELECT version, git_sha, content_hash FROM registry_version WHERE version = $1",
                )
                .bind(v)
                .fetch_optional(&self.pool)
                .await
            }
            None => sqlx::query_as(
                "SELECT version, git_sha, content_hash FROM registry_version ORDER BY version DESC LIMIT 1",
            )
            .fetch_optional(&self.pool)
            .await,
        }
        .map_err(db_error("reading the registry version"))?;
        let Some((version, git_sha, content_hash)) = head else {
            return Ok(None);
        };
        let mut descriptors: Vec<(String, String)> = sqlx::query_as(
            "SELECT pd.point_id, b.canonical FROM point_descriptor pd \
             JOIN descriptor_blob b ON b.hash = pd.hash WHERE pd.version = $1",
        )
        .bind(version)
        .fetch_all(&self.pool)
        .await
        .map_err(db_error("reading point descriptors"))?;
        descriptors.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(Some(StoredRegistry {
            version,
            git_sha,
            content_hash,
            descriptors,
        }))
    }

    async fn load_state_inner(
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

/// Reads the applied migration versions with sqlx's migrator API, without creating its table.
async fn applied_versions(conn: &mut PgConnection) -> Result<Vec<i64>, StoreError> {
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await
        .map_err(db_error("looking for the migrations table"))?;
    if !exists {
        return Ok(Vec::new());
    }
    let applied = conn
        .list_applied_migrations(MIGRATIONS_TABLE)
        .await
        .map_err(migrate_error("listing applied migrations"))?;
    Ok(applied.into_iter().map(|m| m.version).collect())
}

/// Verifies inside the transaction that `epoch` is still current. `FOR SHARE` lets commits
/// run concurrently while making an acquisition's epoch increment wait for them, so no commit
/// of a deposed core can land after the new epoch is visible.
async fn fence(tx: &mut PgConnection, epoch: u32) -> Result<(), StoreError> {
    let current: i32 = sqlx::query_scalar(FENCE)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error("reading the core epoch"))?;
    if i64::from(current) == i64::from(epoch) {
        Ok(())
    } else {
        // Dropping the transaction rolls it back.
        Err(StoreError::Fenced {
            epoch,
            current: current.max(0) as u32,
        })
    }
}

/// A row's full unique key as the database returns it: driver_instance, source_epoch,
/// source_seq, ingested_at in µs.
type DbKey<'a> = (&'a str, i32, i64, i64);

/// The full unique key → the first ordinal carrying it (a key repeated within a batch inserts
/// once; the first occurrence is the one reported). Only the `ON CONFLICT` form needs it.
fn ordinals_by_key(rows: &[ObsRow]) -> Result<HashMap<DbKey<'_>, u32>, StoreError> {
    let mut by_key = HashMap::with_capacity(rows.len());
    for (ordinal, row) in rows.iter().enumerate() {
        let (epoch, seq) = key_to_db(&row.key)?;
        by_key
            .entry((&*row.key.driver_instance, epoch, seq, row.ingested_at.0))
            .or_insert(ordinal as u32);
    }
    Ok(by_key)
}

/// Binds a batch to either commit statement (both take the same 30 parameters; `$30` is the
/// batch's `applied` position, migration 0007). The values are encoded here, so a fallback
/// binds the same columns again.
fn bind_batch<'q>(
    sql: &'static str,
    epoch: i32,
    applied: i64,
    stream_name: &str,
    rows: &ObservationColumns<'_>,
    quarantine: &QuarantineColumns<'_>,
) -> sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments> {
    sqlx::query(sql)
        .bind(&rows.ingested_at)
        .bind(&rows.point_id)
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
        .bind(&rows.driver_instance)
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
}

/// A batch's rows as the column arrays the commit statements bind, built in one pass.
struct ObservationColumns<'a> {
    ingested_at: Vec<OffsetDateTime>,
    point_id: Vec<&'a str>,
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
    driver_instance: Vec<&'a str>,
    source_epoch: Vec<i32>,
    source_seq: Vec<i64>,
    skew_flagged: Vec<bool>,
    class: Vec<i16>,
    /// Rows per class, indexed like `class`.
    class_rows: [usize; 3],
}

impl<'a> ObservationColumns<'a> {
    fn new(rows: &'a [ObsRow]) -> Result<ObservationColumns<'a>, StoreError> {
        let n = rows.len();
        let mut c = ObservationColumns {
            ingested_at: Vec::with_capacity(n),
            point_id: Vec::with_capacity(n),
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
            driver_instance: Vec::with_capacity(n),
            source_epoch: Vec::with_capacity(n),
            source_seq: Vec::with_capacity(n),
            skew_flagged: Vec::with_capacity(n),
            class: Vec::with_capacity(n),
            class_rows: [0; 3],
        };
        for row in rows {
            let (epoch, seq) = key_to_db(&row.key)?;
            c.ingested_at.push(to_odt(row.ingested_at)?);
            c.point_id.push(&row.point_id);
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
            c.driver_instance.push(&row.key.driver_instance);
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
struct QuarantineColumns<'a> {
    stream_seq: Vec<i64>,
    ingested_at: Vec<OffsetDateTime>,
    subject: Vec<&'a str>,
    reason: Vec<&'static str>,
    detail: Vec<&'a str>,
    payload: Vec<&'a [u8]>,
    payload_bytes: Vec<i32>,
}

impl<'a> QuarantineColumns<'a> {
    fn new(entries: &'a [QuarantineEntry]) -> Result<QuarantineColumns<'a>, StoreError> {
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

fn key_from_columns(
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

fn checkpoint_from_row(row: &PgRow) -> Result<PointState, StoreError> {
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

fn head_from_row(row: &PgRow) -> Result<LogHead, StoreError> {
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

fn cold_start_from_row(row: &PgRow) -> Result<ColdStart, StoreError> {
    let decode = || -> Result<_, sqlx::Error> {
        Ok((
            row.try_get::<i32, _>(0)?,
            row.try_get::<OffsetDateTime, _>(1)?,
            row.try_get::<i32, _>(2)?,
            row.try_get::<String, _>(3)?,
            row.try_get::<Option<OffsetDateTime>, _>(4)?,
            row.try_get::<Vec<String>, _>(5)?,
            row.try_get::<Vec<i64>, _>(6)?,
        ))
    };
    let (epoch, started_at, backend_pid, application_name, ready_at, names, durations_us) =
        decode().map_err(db_error("decoding core_start"))?;
    let epoch = u32::try_from(epoch)
        .map_err(|_| StoreError::Other(format!("negative epoch {epoch} in core_start")))?;
    Ok(ColdStart {
        epoch,
        started_at: from_odt(started_at),
        backend_pid: i64::from(backend_pid),
        application_name,
        ready_at: ready_at.map(from_odt),
        steps: names
            .into_iter()
            .zip(durations_us)
            .map(|(step, duration_us)| StartupStep {
                step,
                duration_us: duration_us.max(0) as u64,
            })
            .collect(),
    })
}

/// Holding the single-writer advisory lock, before the epoch moves: what `sentinel migrate`
/// works under, and the first half of an acquisition. Dropping it closes the session, which
/// releases the lock.
pub struct PgLock {
    conn: PgConnection,
    backend_pid: i32,
}

impl std::fmt::Debug for PgLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLock")
            .field("backend_pid", &self.backend_pid)
            .finish_non_exhaustive()
    }
}

impl PgLock {
    /// The PostgreSQL backend pid of the lock session.
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// Applies pending migrations on the lock session. Refuses, before applying anything, a
    /// database whose newest applied version is newer than this binary's (healthlog spec,
    /// "schema from the future"). When the schema is already current it runs no DDL at all
    /// (sqlx's migrator would create its bookkeeping table "if not exists"), so a core
    /// connected as the writer role, which may not create anything, starts on a current schema.
    pub async fn migrate(&mut self, store: &PgStore) -> Result<MigrateReport, StoreError> {
        let supported = PgStore::supported_schema_version();
        let before = applied_versions(&mut self.conn).await?;
        let found = before.iter().copied().max();
        if let Some(found) = found
            && found > supported
        {
            return Err(StoreError::SchemaFromFuture { found, supported });
        }
        let pending = MIGRATOR.iter().any(|m| !before.contains(&m.version));
        let after = if pending {
            // `run_direct` on the lock session itself (sqlx's documented way around the
            // "`Acquire` is not general enough" error of `run` on a borrowed connection).
            MIGRATOR
                .run_direct(None, &mut self.conn, false)
                .await
                .map_err(migrate_error("applying migrations"))?;
            applied_versions(&mut self.conn).await?
        } else {
            before.clone()
        };
        let before: BTreeSet<i64> = before.into_iter().collect();
        let applied: Vec<i64> = after.iter().copied().filter(|v| !before.contains(v)).collect();
        let version = after.iter().copied().max().unwrap_or(0);
        tracing::info!(
            applied = applied.len(),
            version,
            supported,
            "database schema checked under the lock"
        );
        store.ensure_partitions_around_today().await?;
        Ok(MigrateReport {
            applied,
            version,
            supported,
        })
    }

    /// Increments the core epoch on the lock session (so only while holding the lock), names
    /// the session after it and records the acquisition.
    pub async fn begin_epoch(mut self, store: &PgStore) -> Result<PgLease, StoreError> {
        let epoch: i32 = sqlx::query_scalar(ACQUIRE_EPOCH)
            .bind(LOCK_SESSION_NAME_PREFIX)
            .fetch_one(&mut self.conn)
            .await
            .map_err(db_error("incrementing the core epoch"))?;
        let epoch =
            u32::try_from(epoch).map_err(|_| StoreError::Other(format!("negative core epoch {epoch}")))?;
        tracing::info!(
            epoch,
            backend_pid = self.backend_pid,
            "acquired single-writer lock"
        );
        Ok(PgLease {
            conn: Some(self.conn),
            epoch,
            backend_pid: self.backend_pid,
            alive_timeout_ms: store.config.alive_timeout_ms,
        })
    }

    /// Unlocks and closes the session at once.
    pub async fn release(mut self) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(LOCK_KEY)
            .execute(&mut self.conn)
            .await
            .map_err(db_error("releasing the single-writer lock"))?;
        self.conn
            .close()
            .await
            .map_err(db_error("closing the lock session"))
    }
}

/// Holding the single-writer advisory lock on a dedicated session. Dropping it closes the
/// session, which releases the lock; [`PgLease::release`] does so explicitly and at once.
pub struct PgLease {
    /// `None` once the session is known to be dead.
    conn: Option<PgConnection>,
    epoch: u32,
    backend_pid: i32,
    alive_timeout_ms: u64,
}

impl std::fmt::Debug for PgLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLease")
            .field("epoch", &self.epoch)
            .field("backend_pid", &self.backend_pid)
            .field("connected", &self.conn.is_some())
            .finish()
    }
}

impl PgLease {
    /// The PostgreSQL backend pid of the lock session (for `pg_terminate_backend` in tests and
    /// for operators).
    pub fn backend_pid(&self) -> i32 {
        self.backend_pid
    }

    /// Unlocks and closes the session, so the next acquisition need not wait for the server to
    /// notice a dropped connection.
    pub async fn release(mut self) -> Result<(), StoreError> {
        let Some(mut conn) = self.conn.take() else {
            return Ok(());
        };
        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(LOCK_KEY)
            .execute(&mut conn)
            .await
            .map_err(db_error("releasing the single-writer lock"))?;
        conn.close().await.map_err(db_error("closing the lock session"))?;
        tracing::info!(epoch = self.epoch, "released single-writer lock");
        Ok(())
    }
}

impl Lease for PgLease {
    fn epoch(&self) -> u32 {
        self.epoch
    }

    /// False when the session died, was terminated, no longer shows the lock in pg_locks, or
    /// did not answer within `alive_timeout_ms`: any doubt means not alive, so the core fails
    /// fast rather than writing under a lock it may have lost.
    async fn alive(&mut self) -> Result<bool, StoreError> {
        let Some(conn) = self.conn.as_mut() else {
            return Ok(false);
        };
        let check = sqlx::query_scalar::<_, bool>(LOCK_ALIVE)
            .bind(LOCK_KEY)
            .fetch_one(conn);
        let held = match tokio::time::timeout(Duration::from_millis(self.alive_timeout_ms), check).await {
            Ok(Ok(held)) => held,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, backend_pid = self.backend_pid, "lock session failed");
                false
            }
            Err(_) => {
                tracing::warn!(
                    alive_timeout_ms = self.alive_timeout_ms,
                    backend_pid = self.backend_pid,
                    "lock liveness check timed out"
                );
                false
            }
        };
        if !held {
            // Closing what is left of the session guarantees the lock is not held by it either.
            self.conn = None;
        }
        Ok(held)
    }
}

impl Store for PgStore {
    type Lease = PgLease;

    /// Lock, then bring the schema to this binary's version under the lock, then the epoch:
    /// the order of core runtime spec, "Acquisition order at startup".
    async fn acquire(&self) -> Result<PgLease, StoreError> {
        let mut lock = self.lock().await?;
        let report = lock.migrate(self).await?;
        if !report.applied.is_empty() {
            tracing::info!(
                applied = report.applied.len(),
                version = report.version,
                "schema migrated under the lock"
            );
        }
        lock.begin_epoch(self).await
    }

    async fn store_registry(&self, snapshot: &RegistrySnapshot) -> Result<RegistryLoad, StoreError> {
        self.store_registry_inner(snapshot).await
    }

    async fn load_registry(&self, version: Option<i32>) -> Result<Option<StoredRegistry>, StoreError> {
        self.load_registry_inner(version).await
    }

    async fn load_state(&self, points: &[(String, RetentionClass)]) -> Result<RestoredState, StoreError> {
        self.load_state_inner(points).await
    }

    async fn load_windows(
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

    async fn commit(&self, batch: Batch) -> Result<CommitReport, CommitError> {
        match self.commit_inner(&batch).await {
            Ok((inserted, quarantine_inserted)) => Ok(CommitReport {
                batch,
                inserted,
                quarantine_inserted,
            }),
            Err(source) => Err(CommitError {
                batch: batch.id,
                source,
            }),
        }
    }

    async fn checkpoint(&self, epoch: u32, states: Vec<PointState>) -> Result<(), StoreError> {
        self.checkpoint_inner(epoch, states).await
    }

    async fn write_control_events(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> Result<Vec<i64>, StoreError> {
        self.write_control_events_inner(epoch, events).await
    }

    async fn load_control_events(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredControlEvent>, StoreError> {
        self.load_control_events_inner(after_seq, limit).await
    }

    async fn record_cold_start(&self, epoch: u32, steps: Vec<StartupStep>) -> Result<(), StoreError> {
        self.record_cold_start_inner(epoch, steps).await
    }

    async fn refresh_rollups(
        &self,
        epoch: u32,
        from: Micros,
        to: Micros,
    ) -> Result<RollupRefresh, StoreError> {
        self.refresh_rollups_inner(epoch, from, to).await
    }

    async fn refresh_closed_rollups(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<RollupStep, StoreError> {
        self.refresh_closed_rollups_inner(epoch, closed_before, limits)
            .await
    }

    async fn rollup_watermark(&self) -> Result<Option<RollupWatermark>, StoreError> {
        self.rollup_watermark_inner().await
    }

    async fn expired_partitions(
        &self,
        cutoffs: RetentionCutoffs,
        limit: usize,
    ) -> Result<Vec<Partition>, StoreError> {
        self.expired_partitions_inner(cutoffs, limit).await
    }

    async fn drop_expired(
        &self,
        epoch: u32,
        cutoffs: RetentionCutoffs,
        partitions_max: u32,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<RetentionRun, StoreError> {
        self.drop_expired_inner(epoch, cutoffs, partitions_max, principal, occurred_at)
            .await
    }

    async fn retention_marks(&self) -> Result<[Option<Micros>; 5], StoreError> {
        self.retention_marks_inner().await
    }

    async fn move_point_class(
        &self,
        epoch: u32,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<ClassMove, StoreError> {
        self.move_point_class_inner(epoch, point_id, to, principal, occurred_at)
            .await
    }

    async fn load_history(
        &self,
        point_id: &str,
        class: RetentionClass,
        from: Micros,
        to: Micros,
        limit: usize,
    ) -> Result<Vec<HistoryRow>, StoreError> {
        self.load_history_inner(point_id, class, from, to, limit).await
    }

    async fn load_rollups(
        &self,
        grain: RollupGrain,
        from: Micros,
        to: Micros,
        point_id: Option<&str>,
    ) -> Result<Vec<RollupRow>, StoreError> {
        self.load_rollups_inner(grain, from, to, point_id).await
    }

    // reprocess

    async fn reprocess_extent(
        &self,
        points: &[(String, RetentionClass)],
        from: Micros,
        to: Option<Micros>,
    ) -> Result<Vec<crate::ports::ClassExtent>, StoreError> {
        self.reprocess_extent_inner(points, from, to).await
    }

    async fn load_reprocess_rows(
        &self,
        class: RetentionClass,
        point: &str,
        from: Micros,
        to: Option<Micros>,
        after: Option<&sentinel_core::reprocess::StoredObservation>,
        limit: usize,
    ) -> Result<Vec<sentinel_core::reprocess::StoredObservation>, StoreError> {
        self.load_reprocess_rows_inner(class, point, from, to, after, limit)
            .await
    }

    async fn apply_reprocess(
        &self,
        epoch: u32,
        class: RetentionClass,
        updates: Vec<sentinel_core::reprocess::RowUpdate>,
    ) -> Result<u64, StoreError> {
        self.apply_reprocess_inner(epoch, class, updates).await
    }

    async fn write_reprocess_event(
        &self,
        epoch: u32,
        occurred_at: Micros,
        principal: &str,
        record: &sentinel_core::reprocess::ReprocessRecord,
    ) -> Result<i64, StoreError> {
        self.write_reprocess_event_inner(epoch, occurred_at, principal, record)
            .await
    }
}
