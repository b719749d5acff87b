//! The single-writer lock and the epoch (core runtime spec, "Enforcement: an advisory lock",
//! "Acquisition order at startup"; DESIGN.md §3, §10): the advisory lock on a dedicated
//! session ([`PgLock`]), migrations under it with the "schema from the future" refusal
//! (healthlog spec), the epoch increment ([`PgLease`]), the lock's liveness check, and who
//! holds it ([`LockHolder`]).

use std::collections::BTreeSet;

use std::time::Duration;

use sentinel_core::Micros;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{LOCK_SESSION_NAME_PREFIX, LOCK_SESSION_NAME_UNLOCKED, Lease, StoreError};
use sqlx::Connection;
use sqlx::migrate::{Migrate, Migrator};
use sqlx::postgres::PgConnection;
use time::OffsetDateTime;

use crate::{PgStore, db_error, from_odt};

/// The single-writer advisory lock key: ASCII "SENTINEL". The partition function uses a
/// different transaction-scoped key.
pub const LOCK_KEY: i64 = 0x5345_4E54_494E_454C;

/// Migrations embedded at build time from the workspace's `migrations/`.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("../migrations");

/// sqlx's bookkeeping table (its default name; we never rename it).
pub(crate) const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

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
    /// ([`sentinel_ports::lock_session_name`]); `None` while it is still starting.
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

    /// Refuses a database a newer binary migrated (healthlog spec, "schema from the future").
    pub fn refuse_newer(&self) -> Result<(), StoreError> {
        match self.found {
            Some(found) if found > self.supported => Err(StoreError::SchemaFromFuture {
                found,
                supported: self.supported,
            }),
            _ => Ok(()),
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

pub(crate) fn migrate_error(context: &'static str) -> impl FnOnce(sqlx::migrate::MigrateError) -> StoreError {
    move |e| StoreError::Other(format!("{context}: {e}"))
}

/// A session-level advisory lock on a bigint key shows in pg_locks as classid = high 32 bits,
/// objid = low 32 bits, objsubid = 1.
pub(crate) const LOCK_ALIVE: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
     AND pid = pg_backend_pid() AND granted AND objsubid = 1 \
     AND classid::bigint = ($1::bigint >> 32) AND objid::bigint = ($1::bigint & 4294967295))";

/// The acquisition, in one statement on the lock session so that it happens only while holding
/// the lock and all three parts commit together: increment the epoch and record the start
/// identity `$2` as the holder's (issue 25 item 3: the fence of every write names both), rename
/// the session after it (so `pg_stat_activity` shows which core holds the lock), and insert its
/// `core_start` row with the identity. `set_config(.., false)` outlives the statement's implicit
/// transaction.
pub(crate) const ACQUIRE_EPOCH: &str = "WITH bumped AS (UPDATE core_epoch SET epoch = epoch + 1, core_start = $2::bigint \
       WHERE singleton RETURNING epoch, core_start), \
     named AS (SELECT epoch, core_start, set_config('application_name', $1::text || epoch, false) AS app FROM bumped), \
     recorded AS (INSERT INTO core_start (epoch, started_at, backend_pid, application_name, core_start) \
       SELECT epoch, now(), pg_backend_pid(), app, core_start FROM named RETURNING epoch) \
     SELECT epoch FROM recorded";

/// The raise of issue 25 item 3, fenced on (`$1`, `$3`) like every write: no row comes back
/// when they are no longer the holder's. The identity stays: the same start holds the raised
/// epoch.
pub(crate) const RAISE_EPOCH: &str = "UPDATE core_epoch SET epoch = GREATEST(epoch, $2::integer) \
     WHERE singleton AND epoch = $1::integer AND core_start = $3::bigint \
     RETURNING epoch";

/// The holder's row, read to name it in a refusal.
pub(crate) const HOLDER: &str = "SELECT epoch, core_start FROM core_epoch WHERE singleton";

/// The session holding the single-writer lock in this database (advisory locks are per
/// database, and pg_locks shows every database's), with what pg_stat_activity says about it.
pub(crate) const LOCK_HOLDER: &str = "SELECT l.pid, a.application_name, a.backend_start FROM pg_locks l \
     LEFT JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
     AND l.classid::bigint = ($1::bigint >> 32) AND l.objid::bigint = ($1::bigint & 4294967295)";

impl PgStore {
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
        // Both sides of the boundary: the pool's connections are checked as they connect, and
        // so is the session the lock will live on (a host can have been demoted meanwhile).
        if let Err(why) = crate::hosts::check_session(&mut conn, self.target_session)
            .await
            .map_err(db_error("checking the lock session's host"))?
        {
            let _ = conn.close().await;
            return Err(StoreError::Other(format!(
                "the database host {} no longer qualifies for the lock session: {why}",
                self.host
            )));
        }
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
        state.refuse_newer()?;
        match state.found {
            Some(found) if found == state.supported => Ok(()),
            _ => Err(StoreError::Other(format!(
                "{}; run `sentinel migrate` first",
                state.describe()
            ))),
        }
    }

    /// The current core epoch.
    pub async fn current_epoch(&self) -> Result<u32, StoreError> {
        let epoch: i32 = sqlx::query_scalar("SELECT epoch FROM core_epoch WHERE singleton")
            .fetch_one(&self.pool)
            .await
            .map_err(db_error("reading the core epoch"))?;
        u32::try_from(epoch).map_err(|_| StoreError::Other(format!("negative core epoch {epoch}")))
    }

    /// [`sentinel_ports::Store::raise_epoch`]: one statement, the row locked `FOR UPDATE` (so
    /// it waits for every commit holding the fence `FOR SHARE`, as an acquisition does), raised
    /// only while it still holds `epoch`. When it does not, the current epoch is read to name
    /// it in the refusal.
    pub(crate) async fn raise_epoch_inner(&self, epoch: u32, floor: u32) -> Result<u32, StoreError> {
        if floor > sentinel_ports::EPOCH_MAX {
            return Err(sentinel_ports::epoch_floor_too_high(floor));
        }
        let mine = crate::epoch_to_db(epoch)?;
        let floor_db = crate::epoch_to_db(floor)?;
        let raised: Option<i32> = sqlx::query_scalar(RAISE_EPOCH)
            .bind(mine)
            .bind(floor_db)
            .bind(crate::core_start_to_db(self.core_start()))
            .fetch_optional(&self.pool)
            .await
            .map_err(db_error("raising the core epoch"))?;
        match raised {
            Some(raised) => {
                let raised = u32::try_from(raised)
                    .map_err(|_| StoreError::Other(format!("negative core epoch {raised}")))?;
                debug_assert_eq!(
                    raised,
                    epoch.max(floor),
                    "GREATEST of the held epoch and the floor"
                );
                Ok(raised)
            }
            None => Err(self.fenced(epoch).await),
        }
    }

    /// The refusal of a write fenced on `epoch` and this handle's identity, naming the holder
    /// as it stands now (read after the refused statement, outside it).
    pub(crate) async fn fenced(&self, epoch: u32) -> StoreError {
        let holder: Result<(i32, Option<i64>), _> = sqlx::query_as(HOLDER).fetch_one(&self.pool).await;
        match holder {
            Ok((current, current_start)) => {
                match crate::check_fence(epoch, self.core_start(), current, current_start) {
                    Err(refusal) => refusal,
                    // The holder changed back in between (it cannot: epochs only grow, and an
                    // identity is recorded only with an increment); name it as read.
                    Ok(()) => StoreError::Fenced {
                        epoch,
                        current: current.max(0) as u32,
                        start: self.core_start(),
                        current_start: current_start.and_then(|s| u64::try_from(s).ok()),
                    },
                }
            }
            Err(e) => db_error("reading the core epoch")(e),
        }
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
}

/// The migrations this binary carries that `applied` lacks, in version order.
pub(crate) fn pending_migrations(applied: &[i64]) -> Vec<&'static sqlx::migrate::Migration> {
    let pending: Vec<_> = MIGRATOR
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .collect();
    assert!(
        pending.windows(2).all(|w| w[0].version < w[1].version),
        "sqlx carries migrations in version order"
    );
    pending
}

/// Reads the applied migration versions with sqlx's migrator API, without creating its table.
pub(crate) async fn applied_versions(conn: &mut PgConnection) -> Result<Vec<i64>, StoreError> {
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
        SchemaState {
            found: before.iter().copied().max(),
            supported,
        }
        .refuse_newer()?;
        let pending = MIGRATOR.iter().any(|m| !before.contains(&m.version));
        let after = if pending {
            // A migration that rewrites a populated table (0014 rewrites every raw row) runs
            // for minutes under the lock, far past the session's `statement_timeout`: lifted
            // for the migrations alone, and set back before the session does anything else.
            sqlx::query("SET statement_timeout = 0")
                .execute(&mut self.conn)
                .await
                .map_err(db_error("lifting the statement timeout for the migrations"))?;
            let ran = self.apply_pending(&before).await;
            sqlx::query("SELECT set_config('statement_timeout', $1, false)")
                .bind(store.config.statement_timeout_ms.to_string())
                .execute(&mut self.conn)
                .await
                .map_err(db_error("restoring the statement timeout"))?;
            ran?;
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
        // Every hot partition's dedup key first (a refusal names the partitions that cannot
        // have one), then today's partitions: both before the epoch moves and ingest starts.
        store.ensure_hot_partition_keys().await?;
        store.ensure_partitions_around_today().await?;
        Ok(MigrateReport {
            applied,
            version,
            supported,
        })
    }

    /// Applies each pending migration in turn, in version order, logging it as it starts (with
    /// its time estimate when it rewrites the hot tables, `migration_cost`) and when it is
    /// done: an upgrade that holds the lock for minutes says which migration it is in.
    async fn apply_pending(&mut self, applied: &[i64]) -> Result<(), StoreError> {
        let pending = pending_migrations(applied);
        let hot_raw_bytes = if pending
            .iter()
            .any(|m| crate::migration_cost::hot_table_work(m.version).is_some())
        {
            crate::migration_cost::hot_raw_bytes(&mut self.conn).await?
        } else {
            0
        };
        for migration in pending {
            let version = migration.version;
            let description = &*migration.description;
            match crate::migration_cost::hot_table_work(version) {
                Some(work) => tracing::info!(
                    version,
                    description,
                    does = work.does,
                    hot_raw_bytes,
                    estimated_s = work.estimated_s(hot_raw_bytes).map(|s| s.round() as u64),
                    "applying migration"
                ),
                None => tracing::info!(version, description, "applying migration"),
            }
            let started = std::time::Instant::now();
            // `run_direct` on the lock session itself (sqlx's documented way around the
            // "`Acquire` is not general enough" error of `run` on a borrowed connection), up to
            // and including this version only.
            MIGRATOR
                .run_direct(Some(version), &mut self.conn, false)
                .await
                .map_err(|e| {
                    StoreError::Other(format!("applying migration {version:04} ({description}): {e}"))
                })?;
            tracing::info!(
                version,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "migration applied"
            );
        }
        Ok(())
    }

    /// Increments the core epoch on the lock session (so only while holding the lock), names
    /// the session after it and records the acquisition.
    ///
    /// Takes this start's identity ([`Clock::start_token`] of the system clock) and records
    /// it as the holder's beside the epoch; `store` and its clones fence every write on both
    /// from then on (issue 25 item 3).
    pub async fn begin_epoch(mut self, store: &PgStore) -> Result<PgLease, StoreError> {
        let core_start = SystemClock.start_token();
        sentinel_ports::check_core_start(Some(core_start))?;
        let epoch: i32 = sqlx::query_scalar(ACQUIRE_EPOCH)
            .bind(LOCK_SESSION_NAME_PREFIX)
            .bind(crate::core_start_to_db(Some(core_start)))
            .fetch_one(&mut self.conn)
            .await
            .map_err(db_error("incrementing the core epoch"))?;
        let epoch =
            u32::try_from(epoch).map_err(|_| StoreError::Other(format!("negative core epoch {epoch}")))?;
        store
            .core_start
            .store(core_start, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            epoch,
            core_start,
            backend_pid = self.backend_pid,
            "acquired single-writer lock"
        );
        Ok(PgLease {
            conn: Some(self.conn),
            epoch,
            core_start,
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
    core_start: u64,
    backend_pid: i32,
    alive_timeout_ms: u64,
}

impl std::fmt::Debug for PgLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgLease")
            .field("epoch", &self.epoch)
            .field("core_start", &self.core_start)
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

    fn core_start(&self) -> u64 {
        self.core_start
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
