//! The SQLite adapter: the only folder that names sqlx (HEALTHLOG.md "Layout"), split by
//! concern:
//!
//! - this file: opening (migrating, with its own file lock because sqlx's migration lock is a
//!   no-op on SQLite, and read-only), the schema-version guard (spec: "Открытие базы
//!   отказывает при схеме из будущего"), errors, row types, shared helpers;
//! - [`journal`]: the journal rows (HAE headers, the once-only intake id), failures, re-queues;
//! - [`fold_tx`]: the one-transaction fold of a delivery (spec: "Доставка SHALL сворачиваться
//!   одной транзакцией"), objects and entities, the lock-hold time;
//! - [`read`]: the catalog over the covering index and the batch read of listed hours (spec:
//!   "Перечисление разрезов…", "Объекты перечисленных часов…"), `status` queries, and the
//!   fingerprint of every section in one snapshot (spec: "Отпечаток витрины покрывает все её
//!   сущности");
//! - [`support`]: test and benchmark support.
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

/// What of a stored object a merge's outcome depends on, without its payload: the fold merges
/// outside the write lock against these and, under the lock, writes only if they still hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectStamp {
    pub hour_us: i64,
    pub units: String,
    pub hash: Vec<u8>,
    pub sealed: bool,
}

impl ObjectRow {
    pub fn stamp(&self) -> ObjectStamp {
        ObjectStamp {
            hour_us: self.hour_us,
            units: self.units.clone(),
            hash: self.hash.clone(),
            sealed: self.sealed,
        }
    }

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
    /// Metrics merged a second time under the write lock because their objects changed between
    /// the read and the lock (another fold wrote them).
    remerges: Arc<AtomicU64>,
    lock_hold_us: Arc<AtomicU64>,
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
            remerges: Arc::new(AtomicU64::new(0)),
            lock_hold_us: Arc::new(AtomicU64::new(0)),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// How long the last committed fold held the write lock, from `BEGIN IMMEDIATE` granted to
    /// `COMMIT` done, in microseconds (BENCHMARKS.md "lock-hold time").
    pub fn last_lock_hold_us(&self) -> u64 {
        self.lock_hold_us.load(Ordering::Relaxed)
    }

    /// `BEGIN IMMEDIATE` attempts that found the database busy and were retried.
    pub fn begin_retries(&self) -> u64 {
        self.begin_retries.load(Ordering::Relaxed)
    }

    /// How many metrics were merged again under the write lock (their objects changed between
    /// the read outside the lock and the lock).
    pub fn remerges(&self) -> u64 {
        self.remerges.load(Ordering::Relaxed)
    }

    /// Records one merge redone under the lock.
    pub fn count_remerge(&self) {
        self.remerges.fetch_add(1, Ordering::Relaxed);
    }

    /// Statements sent to the database so far by this store.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }
}

mod fold_tx;
mod journal;
mod read;
#[doc(hidden)]
pub mod support;

pub use fold_tx::FoldTx;

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
