//! The SQLite adapter: the only file that names sqlx (HEALTHLOG.md "Layout").
//!
//! Owns: opening (migrating, with its own file lock because sqlx's migration lock is a no-op on
//! SQLite, and read-only), the schema-version guard (spec: "Открытие базы отказывает при схеме
//! из будущего"), the journal rows, the one-transaction fold of a delivery (spec: "Доставка
//! SHALL сворачиваться одной транзакцией"), the catalog over the covering index and the batch
//! read of listed hours (spec: "Перечисление разрезов…", "Объекты перечисленных часов…"), and
//! the fingerprint read in one snapshot.
//!
//! Every statement sent goes through [`Store::count`], so tests can hold the store to "one
//! round trip" for a batch read.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::TryStreamExt as _;
use healthlog_core::entities::{EntityKey, EntityVersion, Position, Shape, StoredHead};
use healthlog_core::fingerprint::Fingerprint;
use healthlog_core::fold::{Counters, ExistingObject, ObjectWrite};
use healthlog_core::hae::Uncovered;
use healthlog_core::status::ParseStatus;
use sqlx::migrate::{Migrate as _, Migrator};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Connection as _, Row as _, Sqlite, SqliteConnection, Transaction};

static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// sqlx's migration bookkeeping table. Named once, here: see [`applied_version`].
const MIGRATIONS_TABLE: &str = "_sqlx_migrations";
/// Attempts at `BEGIN IMMEDIATE` before a busy database counts as a circumstance.
const BEGIN_ATTEMPTS_MAX: u32 = 5;
/// Connections in the pool (SQLite has one writer; readers share the rest).
const POOL_CONNECTIONS_MAX: u32 = 4;
/// Hours one batch read may list.
pub const HOURS_PER_READ_MAX: usize = 24 * 366;

/// Store errors. None carries body content or point values.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "database schema version {found} is newer than this binary's {supported}: refusing to open (upgrade the binary)"
    )]
    SchemaFromFuture { found: i64, supported: i64 },
    #[error(
        "database schema version {found} differs from this binary's {supported}: a read-only open needs them equal (run `healthlog migrate`)"
    )]
    SchemaMismatch { found: i64, supported: i64 },
    #[error("database at {0} does not exist")]
    Missing(PathBuf),
    #[error("database stayed busy past {BEGIN_ATTEMPTS_MAX} attempts")]
    Busy,
    #[error("fault injected after {0} objects")]
    Injected(usize),
    #[error("{context}: {source}")]
    Database {
        context: &'static str,
        source: sqlx::Error,
    },
    #[error("{context}: {source}")]
    Migrate {
        context: &'static str,
        source: sqlx::migrate::MigrateError,
    },
    #[error("taking the migration lock {path}: {source}")]
    Lock { path: PathBuf, source: std::io::Error },
    #[error("{0}")]
    Invalid(String),
}

impl StoreError {
    /// Busy and injected faults are circumstances: the delivery stays pending.
    pub fn is_circumstance(&self) -> bool {
        match self {
            Self::Busy | Self::Injected(_) => true,
            Self::Database { source, .. } => is_busy(source),
            _ => false,
        }
    }
}

fn is_busy(e: &sqlx::Error) -> bool {
    // SQLite result codes (primary code in the low byte): SQLITE_BUSY = 5, SQLITE_LOCKED = 6.
    e.as_database_error()
        .and_then(|d| d.code())
        .and_then(|c| c.parse::<i64>().ok())
        .is_some_and(|c| matches!(c & 0xff, 5 | 6))
}

fn db(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |source| StoreError::Database { context, source }
}

/// Opening options.
#[derive(Debug, Clone, Copy)]
pub struct StoreOptions {
    pub busy_timeout_ms: u64,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            busy_timeout_ms: 5_000,
        }
    }
}

/// What a migrating open did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MigrateReport {
    pub before: i64,
    pub after: i64,
    pub supported: i64,
}

/// A new journal row.
#[derive(Debug, Clone)]
pub struct NewDelivery<'a> {
    pub received_at_us: i64,
    pub layer: &'a str,
    pub body_sha256: Option<&'a str>,
    pub body_bytes: u64,
    /// A body refused before archiving: the row is written `failed` with this reason.
    pub refused: Option<&'a str>,
    /// The HAE headers, kept for correlation (never identity).
    pub headers: HaeHeaders,
    /// The receiver's intake id: a row with this id already journaled is not journaled again.
    pub intake_id: Option<&'a str>,
}

/// The headers HAE sends with a delivery (`automation-name`, `automation-id`, `session-id`),
/// kept with the journal row for correlation and for `healthlog status`; never identity.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HaeHeaders {
    pub automation_name: Option<String>,
    pub automation_id: Option<String>,
    pub session_id: Option<String>,
}

/// An object's coordinates in a delivery's collision or incomparable list.
pub type ObjectCoordinates = (String, String, i64);

/// What a successful fold records on its journal row beside the counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FoldRecord {
    pub collision_objects: Vec<ObjectCoordinates>,
    pub incomparable_objects: Vec<ObjectCoordinates>,
}

/// A stored entity (tests and tools).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntityRow {
    pub section: String,
    pub id: String,
    pub content: Vec<u8>,
    pub content_hash: Vec<u8>,
    pub delivery_id: i64,
    pub received_at_us: i64,
    pub changed_at_us: i64,
}

/// Per automation name, its last delivery (for `healthlog status`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct AutomationRow {
    pub automation_name: Option<String>,
    pub deliveries: i64,
    pub last_id: i64,
    pub last_received_at_us: i64,
    pub last_status: String,
}

/// Per metric and layer, its newest point (for `healthlog status`; covering index only).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct NewestRow {
    pub metric: String,
    pub layer: String,
    pub newest_us: i64,
}

/// A journal entry as folding and rebuilding need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalEntry {
    pub id: i64,
    pub received_at_us: i64,
    pub layer: String,
    pub body_sha256: Option<String>,
    pub body_bytes: u64,
    pub status: ParseStatus,
    pub error: Option<String>,
    pub headers: HaeHeaders,
}

/// A journal row for operators.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DeliveryRow {
    pub id: i64,
    pub received_at_us: i64,
    pub layer: String,
    pub body_sha256: Option<String>,
    pub body_bytes: u64,
    pub status: String,
    pub uncovered: Option<Vec<String>>,
    pub uncovered_dropped: Option<u64>,
    pub error: Option<String>,
    pub counters: Option<Counters>,
    /// NULL ("not measured") is distinct from 0: a fold that counted none.
    pub skipped_entities: Option<u64>,
    pub collision_objects: Option<Vec<ObjectCoordinates>>,
    pub incomparable_objects: Option<Vec<ObjectCoordinates>>,
    pub headers: HaeHeaders,
}

/// One layer of a metric in the catalog.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CatalogRow {
    pub layer: String,
    pub objects: i64,
    pub first_us: i64,
    pub last_us: i64,
    pub points: i64,
}

/// A stored object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectRow {
    pub metric: String,
    pub layer: String,
    pub hour_us: i64,
    pub units: String,
    pub first_us: i64,
    pub last_us: i64,
    pub point_count: i64,
    pub hash: Vec<u8>,
    pub sealed: bool,
    pub delivery_id: i64,
    pub payload: Vec<u8>,
}

impl ObjectRow {
    pub fn existing(&self) -> ExistingObject {
        ExistingObject {
            hour_us: self.hour_us,
            units: self.units.clone(),
            hash: self.hash.clone(),
            sealed: self.sealed,
            payload: self.payload.clone(),
        }
    }
}

/// The store.
#[derive(Debug, Clone)]
pub struct Store {
    pool: SqlitePool,
    round_trips: Arc<AtomicU64>,
    begin_retries: Arc<AtomicU64>,
    path: PathBuf,
}

const OBJECT_COLUMNS: &str =
    "metric, layer, hour_us, units, first_us, last_us, point_count, hash, sealed, delivery_id, payload";

/// The catalog query: layers of a metric with bounds and point counts (covering index only).
pub const CATALOG_SQL: &str = "SELECT layer, count(*), min(first_us), max(last_us), sum(point_count) \
     FROM bucket INDEXED BY bucket_catalog WHERE metric = ?1 GROUP BY layer ORDER BY layer";
/// The freshest hours a metric has objects in both layers (covering index only).
pub const COMMON_HOURS_SQL: &str = "SELECT a.hour_us FROM bucket AS a INDEXED BY bucket_catalog \
     JOIN bucket AS b INDEXED BY bucket_catalog ON b.metric = a.metric AND b.layer = ?3 AND b.hour_us = a.hour_us \
     WHERE a.metric = ?1 AND a.layer = ?2 ORDER BY a.hour_us DESC LIMIT ?4";
/// The same catalog question answered by reading every row of the table (the benchmark's baseline).
pub const CATALOG_FULL_SCAN_SQL: &str = "SELECT layer, count(*), min(first_us), max(last_us), sum(point_count) \
     FROM bucket NOT INDEXED WHERE metric = ?1 AND length(payload) >= 0 GROUP BY layer ORDER BY layer";

fn read_hours_sql() -> String {
    format!(
        "SELECT {OBJECT_COLUMNS} FROM bucket WHERE metric = ?1 \
         AND layer IN (SELECT value FROM json_each(?2)) \
         AND hour_us IN (SELECT value FROM json_each(?3)) ORDER BY layer, hour_us"
    )
}

impl Store {
    /// The newest migration version this binary carries.
    pub fn supported_schema_version() -> i64 {
        MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// Opens (creating if missing) and migrates. Refuses, before migrating anything, a
    /// database whose schema is newer than this binary's. A lower version is migrated.
    pub async fn open_migrating(
        path: &Path,
        options: StoreOptions,
    ) -> Result<(Self, MigrateReport), StoreError> {
        let _lock = MigrationLock::take(path)?;
        let connect = connect_options(path, options).create_if_missing(true);
        let mut conn = SqliteConnection::connect_with(&connect)
            .await
            .map_err(db("opening the database"))?;
        let supported = Self::supported_schema_version();
        let before = applied_version(&mut conn).await?;
        if before > supported {
            return Err(StoreError::SchemaFromFuture {
                found: before,
                supported,
            });
        }
        MIGRATOR
            .run(&mut conn)
            .await
            .map_err(|source| StoreError::Migrate {
                context: "applying migrations",
                source,
            })?;
        let after = applied_version(&mut conn).await?;
        conn.close()
            .await
            .map_err(db("closing the migrating connection"))?;
        assert_eq!(
            after, supported,
            "invariant: a migrating open ends at the binary's version"
        );
        let store = Self::pool(path, connect).await?;
        if before != after {
            tracing::info!(before, after, "database schema migrated");
        }
        Ok((
            store,
            MigrateReport {
                before,
                after,
                supported,
            },
        ))
    }

    /// Opens read-only; the schema version must equal this binary's exactly.
    pub async fn open_read_only(path: &Path, options: StoreOptions) -> Result<Self, StoreError> {
        if !path.exists() {
            return Err(StoreError::Missing(path.to_path_buf()));
        }
        // No journal-mode pragma: setting it writes, which a read-only connection cannot.
        let connect = SqliteConnectOptions::new()
            .filename(path)
            .read_only(true)
            .busy_timeout(Duration::from_millis(options.busy_timeout_ms));
        let mut conn = SqliteConnection::connect_with(&connect)
            .await
            .map_err(db("opening the database read-only"))?;
        let found = applied_version(&mut conn).await?;
        conn.close()
            .await
            .map_err(db("closing the checking connection"))?;
        let supported = Self::supported_schema_version();
        if found != supported {
            return Err(StoreError::SchemaMismatch { found, supported });
        }
        Self::pool(path, connect).await
    }

    async fn pool(path: &Path, connect: SqliteConnectOptions) -> Result<Self, StoreError> {
        let pool = SqlitePoolOptions::new()
            .max_connections(POOL_CONNECTIONS_MAX)
            .connect_with(connect)
            .await
            .map_err(db("opening the connection pool"))?;
        Ok(Self {
            pool,
            round_trips: Arc::new(AtomicU64::new(0)),
            begin_retries: Arc::new(AtomicU64::new(0)),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// `BEGIN IMMEDIATE` attempts that found the database busy and were retried.
    pub fn begin_retries(&self) -> u64 {
        self.begin_retries.load(Ordering::Relaxed)
    }

    /// Statements sent to the database so far by this store.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

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

    /// Whether an intake id is journaled (the receiver's start-up check of its spool).
    pub async fn intake_journaled(&self, intake_id: &str) -> Result<bool, StoreError> {
        self.count();
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM delivery WHERE intake_id = ?1")
            .bind(intake_id)
            .fetch_one(&self.pool)
            .await
            .map_err(db("looking up an intake"))?;
        Ok(n > 0)
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

/// Test and benchmark support, kept here because it names sqlx. Not used by the binary.
#[doc(hidden)]
pub mod support {
    use super::*;

    /// Creates sqlx's bookkeeping table (if missing) in the database at `path` and, with
    /// `Some(version)`, records that version as applied: a database "from the future" or
    /// "from the past" without building one.
    pub async fn stamp_schema_version(path: &Path, version: Option<i64>) -> Result<(), StoreError> {
        let connect = SqliteConnectOptions::new().filename(path).create_if_missing(true);
        let mut conn = SqliteConnection::connect_with(&connect)
            .await
            .map_err(db("opening to stamp"))?;
        conn.ensure_migrations_table(MIGRATIONS_TABLE)
            .await
            .map_err(|source| StoreError::Migrate {
                context: "creating the migrations table",
                source,
            })?;
        if let Some(v) = version {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {MIGRATIONS_TABLE} (version, description, success, checksum, execution_time) \
                 VALUES (?1, 'stamped by a test', 1, x'00', 0)"
            )))
            .bind(v)
            .execute(&mut conn)
            .await
            .map_err(db("stamping a schema version"))?;
        }
        conn.close().await.map_err(db("closing after stamping"))
    }

    /// Creates a store at schema 1 (the points half), as a binary of issue 10 left it: only the
    /// first migration, applied by sqlx with its real checksum, so a later migrating open
    /// applies schema 2 on top.
    pub async fn create_schema_1_store(path: &Path) -> Result<(), StoreError> {
        let first: Vec<sqlx::migrate::Migration> =
            MIGRATOR.iter().filter(|m| m.version == 1).cloned().collect();
        let migrator = Migrator {
            migrations: std::borrow::Cow::Owned(first),
            ..Migrator::DEFAULT
        };
        let connect = connect_options(path, StoreOptions::default()).create_if_missing(true);
        let mut conn = SqliteConnection::connect_with(&connect)
            .await
            .map_err(db("opening to create schema 1"))?;
        migrator
            .run(&mut conn)
            .await
            .map_err(|source| StoreError::Migrate {
                context: "applying schema 1",
                source,
            })?;
        conn.close().await.map_err(db("closing after schema 1"))
    }

    /// Runs one statement on the database at `path` (tests that build a schema-1 store's rows).
    pub async fn execute(path: &Path, sql: &str, binds: &[&[u8]]) -> Result<u64, StoreError> {
        let connect = connect_options(path, StoreOptions::default());
        let mut conn = SqliteConnection::connect_with(&connect)
            .await
            .map_err(db("opening to execute"))?;
        let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
        for b in binds {
            q = q.bind(*b);
        }
        let done = q.execute(&mut conn).await.map_err(db("executing"))?;
        conn.close().await.map_err(db("closing after executing"))?;
        Ok(done.rows_affected())
    }

    /// The applied version and the user tables of the database at `path`.
    pub async fn inspect(path: &Path) -> Result<(i64, Vec<String>), StoreError> {
        let connect = SqliteConnectOptions::new().filename(path).read_only(true);
        let mut conn = SqliteConnection::connect_with(&connect)
            .await
            .map_err(db("opening to inspect"))?;
        let version = applied_version(&mut conn).await?;
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
        )
        .fetch_all(&mut conn)
        .await
        .map_err(db("listing tables"))?;
        conn.close().await.map_err(db("closing after inspecting"))?;
        Ok((version, tables))
    }

    /// Inserts objects with one plain `INSERT` each in one transaction: the benchmark's baseline
    /// for the fold's write path, and the way to build a year of objects quickly.
    pub async fn insert_objects_plain(store: &Store, rows: &[ObjectRow]) -> Result<(), StoreError> {
        let mut tx = store.pool.begin().await.map_err(db("beginning a plain insert"))?;
        for r in rows {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO bucket ({OBJECT_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
            )))
            .bind(&r.metric)
            .bind(&r.layer)
            .bind(r.hour_us)
            .bind(&r.units)
            .bind(r.first_us)
            .bind(r.last_us)
            .bind(r.point_count)
            .bind(&r.hash)
            .bind(r.sealed)
            .bind(r.delivery_id)
            .bind(&r.payload)
            .execute(&mut *tx)
            .await
            .map_err(db("inserting an object"))?;
        }
        tx.commit().await.map_err(db("committing a plain insert"))
    }
}

/// The fold transaction of one delivery.
pub struct FoldTx {
    tx: Transaction<'static, Sqlite>,
    written: usize,
    fail_after_objects: Option<usize>,
    round_trips: Arc<AtomicU64>,
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
        self.tx.commit().await.map_err(db("committing the fold"))
    }
}

fn uncovered_columns(uncovered: Option<&Uncovered>) -> (Option<String>, Option<i64>) {
    match uncovered {
        Some(u) => (
            Some(serde_json::to_string(&u.names).expect("invariant: a list of strings serialises")),
            Some(i64::try_from(u.dropped).unwrap_or(i64::MAX)),
        ),
        None => (None, None),
    }
}

async fn read_objects<'e, E>(
    executor: E,
    metric: &str,
    layers: &[&str],
    hours: &[i64],
) -> Result<Vec<ObjectRow>, StoreError>
where
    E: sqlx::Executor<'e, Database = Sqlite>,
{
    let layers = serde_json::to_string(layers).expect("invariant: strings serialise");
    let hours = serde_json::to_string(hours).expect("invariant: integers serialise");
    let rows = sqlx::query(sqlx::AssertSqlSafe(read_hours_sql()))
        .bind(metric)
        .bind(layers)
        .bind(hours)
        .fetch_all(executor)
        .await
        .map_err(db("reading objects of listed hours"))?;
    rows.iter().map(object_row).collect()
}

fn object_row(r: &sqlx::sqlite::SqliteRow) -> Result<ObjectRow, StoreError> {
    let ctx = "reading an object row";
    Ok(ObjectRow {
        metric: r.try_get(0).map_err(db(ctx))?,
        layer: r.try_get(1).map_err(db(ctx))?,
        hour_us: r.try_get(2).map_err(db(ctx))?,
        units: r.try_get(3).map_err(db(ctx))?,
        first_us: r.try_get(4).map_err(db(ctx))?,
        last_us: r.try_get(5).map_err(db(ctx))?,
        point_count: r.try_get(6).map_err(db(ctx))?,
        hash: r.try_get(7).map_err(db(ctx))?,
        sealed: r.try_get(8).map_err(db(ctx))?,
        delivery_id: r.try_get(9).map_err(db(ctx))?,
        payload: r.try_get(10).map_err(db(ctx))?,
    })
}

fn connect_options(path: &Path, options: StoreOptions) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_millis(options.busy_timeout_ms))
        .foreign_keys(true)
}

/// The applied schema version: 0 for a database without sqlx's bookkeeping table.
///
/// The one place that reads the version; the two opens compare it differently. Absence is
/// recognised by the database's structure (`sqlite_master`), never by a driver message. The
/// table's name is sqlx's default, copied here once because sqlx offers no read of it that does
/// not create the table (`ensure_migrations_table` writes, which a read-only open cannot); the
/// versions themselves are read with sqlx's own `list_applied_migrations`.
async fn applied_version(conn: &mut SqliteConnection) -> Result<i64, StoreError> {
    let exists: i64 =
        sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1")
            .bind(MIGRATIONS_TABLE)
            .fetch_one(&mut *conn)
            .await
            .map_err(db("looking for the migrations table"))?;
    if exists == 0 {
        return Ok(0);
    }
    let applied = conn
        .list_applied_migrations(MIGRATIONS_TABLE)
        .await
        .map_err(|source| StoreError::Migrate {
            context: "listing applied migrations",
            source,
        })?;
    Ok(applied.iter().map(|m| m.version).max().unwrap_or(0))
}

/// An exclusive lock on `<db>.migrate-lock`, held across the version check and the migration.
struct MigrationLock {
    _file: File,
}

impl MigrationLock {
    fn take(db_path: &Path) -> Result<Self, StoreError> {
        let mut name = db_path.as_os_str().to_owned();
        name.push(".migrate-lock");
        let path = PathBuf::from(name);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| StoreError::Lock {
                path: path.clone(),
                source,
            })?;
        file.lock().map_err(|source| StoreError::Lock { path, source })?;
        Ok(Self { _file: file })
    }
}
