//! `sentinel-store-pg`: the PostgreSQL store adapter (DESIGN.md §3, §5, §10; ingest spec,
//! "Schema", "Projection", "The registry is versioned data", stages 11–12; core runtime spec,
//! single writer and epoch). The only Sentinel library crate that names sqlx, and the only
//! code that names the observation tables (checked by `tests/architecture.rs`).
//!
//! [`PgStore`] implements `sentinel_ports::Store` ([`store_impl`]); its operations live in one
//! file per concern:
//!
//! | file | owns |
//! | --- | --- |
//! | `lib.rs` | the pool and its configuration, the conversions between core types and columns, the fence every write takes (epoch and start identity, migration 0013) |
//! | [`hosts`] | several hosts in the database URL, and choosing the writable one (libpq's `target_session_attrs`) |
//! | [`lock`] | the single-writer lock, migrations under it, the epoch, lock liveness and the holder |
//! | `migration_cost` | the measured cost of the migrations that rewrite or index every hot row |
//! | [`upgrade`] | what `sentinel migrate` would apply and cost, read without the lock (`--dry-run`) |
//! | [`partitions`] | daily partitions ahead of need |
//! | [`commit`] | the fenced batch commit and its RETURNING ordinals |
//! | [`keys`] | the point and driver instance keys the commit binds (migration 0014) |
//! | [`state`] | checkpoints, the log heads and derived windows restart reads |
//! | [`control`] | the control log |
//! | [`cold_start`] | `core_start`: acquisitions and cold-start timings |
//! | [`registry`] | registry versions |
//! | [`rollup`] | rollup refreshes, the running core's steps, reading rollups |
//! | [`retention`] | dropping whole expired partitions |
//! | [`reprocess`] | reprocess reads and fenced updates |
//! | [`history`] | `sentinel history` |
//! | [`class_change`] | moving a point's history to another class table |
//! | [`compaction`] | compacting a closed day (migration 0015); every read above sees compacted rows through the `observation_<class>_all` views |
//! | [`grants`] | the roles' grants |
//! | [`pack`] | packing a closed hot day's indexes (`sentinel db pack`, migration 0019): an owner's operation outside the store port, since it changes no row |
//! | [`inspect`] | counts for status and tests |
//!
//! All SQL is static (sqlx 0.9 `SqlSafeStr`); partition DDL lives in the SQL function
//! `sentinel_ensure_partitions` so nothing here builds statements at run time — except
//! [`pack`]'s `REINDEX TABLE CONCURRENTLY`, which PostgreSQL runs only outside a function, on a
//! partition name the module builds from a class and a day.

/// The raw rows carry integer keys (migration 0014); the reads select the class tables
/// themselves, resolving a point id to its key once (`point_key_of!`, an InitPlan) and a row's
/// key to its driver instance per row read (`instance_of!`). Not the `observation_<class>_named`
/// views: through their join the planner cannot read a point's rows in index order under an
/// `ORDER BY … driver_instance … LIMIT`, and sorts every row of the point instead (211 ms
/// against 0.6 ms for three log heads on a 4,320,000-row day).
macro_rules! point_key_of {
    ($id:literal) => {
        concat!("(SELECT k.key FROM point_key k WHERE k.point_id = ", $id, ")")
    };
}

/// See `point_key_of!`: the text id of the driver instance of the row aliased `$row`.
macro_rules! instance_of {
    ($row:literal) => {
        concat!(
            "(SELECT i.driver_instance FROM instance_key i WHERE i.key = ",
            $row,
            ".instance_key)"
        )
    };
}

mod class_change;
mod cold_start;
mod command_log;
mod commit;
mod compaction;
mod control;
mod desired;
mod grants;
mod history;
pub mod hosts;
mod inspect;
pub mod keys;
pub mod lock;
mod migration_cost;
pub mod pack;
mod partitions;
mod registry;
mod reprocess;
mod retention;
mod rollup;
mod state;
mod storage;
mod store_impl;
pub mod upgrade;

pub use lock::{LOCK_KEY, LockHolder, MigrateReport, PgLease, PgLock, SchemaState};
pub(crate) use state::key_from_columns;
pub use storage::{
    COMPACT_ROLLUP_BUCKET_BYTES, COMPACT_ROW_BYTES, CompactedRollupSize, CompactedSize, PACKED_ROW_BYTES,
    PartitionSize, RAW_ROW_BYTES, ROLLUP_ROW_BYTES, STORAGE_PARTITIONS_MAX, StorageReport, TableSize,
};

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hosts::{HostList, TargetSession};
use sentinel_core::{CanonicalValue, Micros, ObsKey, Quality};
use sentinel_ports::StoreError;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use time::OffsetDateTime;

/// Bound on the ensured-day cache; older days fall out first (they are never written again
/// once ingested_at has moved on, and re-ensuring one is harmless).
pub(crate) const ENSURED_DAYS_MAX: usize = 64;

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
    /// The late-duplicate check (issue 25 item 2, [`sentinel_ports::LATE_DUPLICATE_AFTER_MS`]):
    /// a row whose `ingested_at − observed_at` exceeds this is checked against the stored
    /// three-column keys. At most the stream's duplicate window minus how far a device clock
    /// may run ahead of the bus's; a deployment with a shorter window sets it lower.
    pub late_duplicate_after_ms: i64,
    /// How far before a late row's `observed_at` its earlier copy is looked for.
    pub late_duplicate_lookback_ms: i64,
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
            late_duplicate_after_ms: sentinel_ports::LATE_DUPLICATE_AFTER_MS,
            late_duplicate_lookback_ms: sentinel_ports::LATE_DUPLICATE_LOOKBACK_MS,
        }
    }
}

/// The PostgreSQL store. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct PgStore {
    pool: PgPool,
    /// The chosen host's options ([`hosts`]): the lock session connects here too.
    connect_options: PgConnectOptions,
    /// The chosen host as the URL names it, and what its sessions must be.
    host: Arc<str>,
    target_session: TargetSession,
    config: Arc<PgStoreConfig>,
    /// Days (since the Unix epoch, UTC) whose partitions are known to exist.
    ensured_days: Arc<Mutex<BTreeSet<i64>>>,
    /// Optimistic commits the unique index refused, each then committed with ON CONFLICT.
    commit_fallbacks: Arc<AtomicU64>,
    /// The point and instance keys the commit binds (migration 0014, [`keys`]).
    keys: Arc<Mutex<keys::KeyCache>>,
    /// Batches with a late row, committed with the late-duplicate check (issue 25 item 2).
    commit_late_checked: Arc<AtomicU64>,
    /// The start identity of this handle's acquisition (issue 25 item 3; 0: none yet), shared
    /// by its clones: every fenced write carries it beside the epoch ([`fence`]).
    core_start: Arc<AtomicU64>,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("stream_name", &self.config.stream_name)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

pub(crate) fn db_error(context: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    move |e| StoreError::Other(format!("{context}: {e}"))
}

pub(crate) fn to_odt(t: Micros) -> Result<OffsetDateTime, StoreError> {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.0) * 1_000)
        .map_err(|_| StoreError::Other(format!("timestamp {} µs is out of range", t.0)))
}

/// Exact: PostgreSQL timestamps are whole microseconds.
pub(crate) fn from_odt(t: OffsetDateTime) -> Micros {
    Micros::from_unix_nanos(t.unix_timestamp_nanos())
}

pub(crate) fn epoch_to_db(epoch: u32) -> Result<i32, StoreError> {
    i32::try_from(epoch).map_err(|_| StoreError::Other(format!("epoch {epoch} exceeds the integer column")))
}

/// The columns are `integer` and `bigint`. A key outside them cannot be stored; refusing it
/// beats wrapping it into a different key.
pub(crate) fn key_to_db(key: &ObsKey) -> Result<(i32, i64), StoreError> {
    match (i32::try_from(key.source_epoch), i64::try_from(key.source_seq)) {
        (Ok(e), Ok(s)) => Ok((e, s)),
        _ => Err(StoreError::Other(format!(
            "key ({}, {}, {}) is outside the integer/bigint range of the observation tables",
            key.driver_instance, key.source_epoch, key.source_seq
        ))),
    }
}

pub(crate) fn value_columns(value: &Option<CanonicalValue>) -> (Option<f64>, Option<bool>, Option<&str>) {
    match value {
        None => (None, None, None),
        Some(CanonicalValue::Num(v)) => (Some(*v), None, None),
        Some(CanonicalValue::Bool(v)) => (None, Some(*v), None),
        Some(CanonicalValue::Text(v)) => (None, None, Some(v)),
    }
}

pub(crate) fn value_from_columns(
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

pub(crate) fn quality_from_db(text: &str) -> Result<Quality, StoreError> {
    Quality::parse(text).ok_or_else(|| StoreError::Other(format!("unknown quality {text:?} in the database")))
}

pub(crate) const FENCE: &str = "SELECT epoch, core_start FROM core_epoch WHERE singleton FOR SHARE";

/// Verifies inside the transaction that (`epoch`, `start`) is still the holder's: the epoch
/// and the start identity the newest acquisition recorded (issue 25 item 3: an epoch repeated
/// after a failover that lost its increment is told apart by the identity). `FOR SHARE` lets
/// commits run concurrently while making an acquisition's epoch increment wait for them, so no
/// commit of a deposed core can land after the new epoch is visible. A handle with no identity
/// (it never acquired) and a holder with none recorded (a database not acquired since
/// migration 0013) match nothing.
async fn fence(tx: &mut PgConnection, epoch: u32, start: Option<u64>) -> Result<(), StoreError> {
    let (current, current_start): (i32, Option<i64>) = sqlx::query_as(FENCE)
        .fetch_one(&mut *tx)
        .await
        .map_err(db_error("reading the core epoch"))?;
    check_fence(epoch, start, current, current_start)
}

/// The fence's verdict on (`epoch`, `start`) against the holder's row, as every fenced
/// statement judges it in SQL: both equal, neither identity missing.
pub(crate) fn check_fence(
    epoch: u32,
    start: Option<u64>,
    current: i32,
    current_start: Option<i64>,
) -> Result<(), StoreError> {
    let current_start = current_start.and_then(|s| u64::try_from(s).ok());
    if i64::from(current) == i64::from(epoch) && start.is_some() && start == current_start {
        Ok(())
    } else {
        // Dropping the transaction rolls it back.
        Err(StoreError::Fenced {
            epoch,
            current: current.max(0) as u32,
            start,
            current_start,
        })
    }
}

/// A start identity as the `bigint` columns and parameters hold it (`None`: none).
pub(crate) fn core_start_to_db(start: Option<u64>) -> Option<i64> {
    start.and_then(|s| i64::try_from(s).ok())
}

impl PgStore {
    /// Connects the commit pool. Does not migrate; call [`PgStore::migrate`] for that.
    ///
    /// `database_url` may name several hosts (libpq's `postgres://h1:p1,h2:p2/db` with
    /// `target_session_attrs`, [`hosts`]): they are tried in order and the first that
    /// qualifies is used for the pool and the lock session; every pooled connection checks
    /// again that its session qualifies, so a host that became a standby is never written to.
    pub async fn connect(database_url: &str, config: PgStoreConfig) -> Result<PgStore, StoreError> {
        for (name, value) in [
            ("late_duplicate_after_ms", config.late_duplicate_after_ms),
            ("late_duplicate_lookback_ms", config.late_duplicate_lookback_ms),
        ] {
            if value < 0 {
                return Err(StoreError::Other(format!(
                    "{name} must not be negative, got {value}"
                )));
            }
        }
        let hosts = HostList::parse(database_url)?;
        let configure = |options: PgConnectOptions| {
            options.application_name("sentinel").options([
                ("statement_timeout", config.statement_timeout_ms.to_string()),
                ("tcp_keepalives_idle", config.tcp_keepalives_idle_s.to_string()),
                (
                    "tcp_keepalives_interval",
                    config.tcp_keepalives_interval_s.to_string(),
                ),
                ("tcp_keepalives_count", config.tcp_keepalives_count.to_string()),
            ])
        };
        let chosen = if hosts.needs_probe() {
            hosts
                .choose(Duration::from_millis(config.connect_timeout_ms), configure)
                .await?
        } else {
            let host = &hosts.hosts[0];
            hosts::Host {
                label: host.label.clone(),
                options: configure(host.options.clone()),
            }
        };
        let target_session = hosts.target;
        let connect_options = chosen.options;
        let pool = PgPoolOptions::new()
            .max_connections(config.pool_connections_max.max(1))
            .acquire_timeout(Duration::from_millis(config.pool_acquire_timeout_ms))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    match hosts::check_session(conn, target_session).await? {
                        Ok(()) => Ok(()),
                        Err(why) => Err(sqlx::Error::Configuration(
                            format!(
                                "the database host no longer qualifies as target_session_attrs={}: {why}",
                                target_session.as_str()
                            )
                            .into(),
                        )),
                    }
                })
            })
            .connect_with(connect_options.clone())
            .await
            .map_err(db_error("connecting to PostgreSQL"))?;
        Ok(PgStore {
            pool,
            connect_options,
            host: Arc::from(chosen.label),
            target_session,
            config: Arc::new(config),
            ensured_days: Default::default(),
            commit_fallbacks: Default::default(),
            keys: Default::default(),
            commit_late_checked: Default::default(),
            core_start: Default::default(),
        })
    }

    /// The start identity of this handle's acquisition ([`sentinel_ports::Lease::core_start`]),
    /// which its fenced writes carry; `None` before it acquired.
    pub fn core_start(&self) -> Option<u64> {
        match self.core_start.load(Ordering::Relaxed) {
            0 => None,
            start => Some(start),
        }
    }

    /// Another handle on the same pool with no identity of its own: what a second process
    /// connected to the same database is, for tests that run two cores' stores side by side
    /// (its acquisition and its writes are fenced apart from this one's).
    pub fn another_handle(&self) -> PgStore {
        PgStore {
            core_start: Default::default(),
            ..self.clone()
        }
    }

    /// The database host this store connected to, as the URL names it (`host:port`).
    pub fn host(&self) -> &str {
        &self.host
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

    /// How many batches held a row late enough to be checked against the stored keys and
    /// were committed with the late-duplicate check (issue 25 item 2). For the tests.
    pub fn commit_late_checked(&self) -> u64 {
        self.commit_late_checked.load(Ordering::Relaxed)
    }
}
