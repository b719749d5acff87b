//! The in-memory reference model of the PostgreSQL store (DESIGN.md §6), used by the demo and
//! the simulator. Same semantics as `sentinel_store_pg::PgStore`, checked by the conformance
//! suite in `tests/store_conformance.rs`.
//!
//! Owns: a model of exactly the database behaviour the core relies on (DESIGN.md §3, §5):
//! - the single-writer advisory lock, held by a session; a dead session releases it
//!   ([`MemoryStore::kill_session`], [`MemoryStore::kill_lock_holder`]) the way PostgreSQL
//!   does when a connection dies;
//! - the core epoch, incremented only on acquisition with the start identity it records as the
//!   holder's, and the fence every write verifies: its epoch and its handle's identity (one per
//!   handle, shared by clones; [`MemoryStore::another_handle`] is another process's);
//! - one `core_start` record per acquisition, its startup timings written under the fence;
//! - one table per retention class with each hot day's three-column unique key (migration
//!   0020) and `ON CONFLICT DO NOTHING RETURNING` (only new rows are reported). Every day of
//!   the model has its key by construction, so there is no model of a hot partition without
//!   one, nor of the boot's repair or refusal of it (migration 0022, store-pg
//!   `partitions.rs`): PostgreSQL's alone, tested against it in `tests/partition_key_repair.rs`;
//! - quarantine keyed by `(stream, stream_seq)`;
//! - the `point_state` checkpoint upsert and the log-head rule of `load_state`;
//! - registry versions with "identical content creates no version";
//! - compacted days (`compaction.rs`, issue 24): a representation of their own, column-wise
//!   chunks, which every read goes through (`ClassTable::all_rows`) as PostgreSQL's reads go
//!   through `observation_<class>_all`.
//!
//! Everything is ordered (`BTreeMap`, `Vec`) so that the model is deterministic under the
//! simulator. All state sits behind one `Mutex` that is never held across an `.await`.
//! Fault hooks beyond session death (slow commits, unreachable store) are meant to be added to
//! [`Model`] and checked at the top of each operation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};
use sentinel_core::derived::{WindowRequest, WindowRow};
use sentinel_core::{
    Batch, CommitReport, ControlEvent, LogHead, Micros, ObsKey, ObsRow, PointState, QuarantineReason,
    RegistrySnapshot, RestoredState, RetentionClass,
};

use sentinel_core::time::US_PER_DAY;
use sentinel_ports::ClassCounts;

mod class_change;
mod commit;
mod compaction;
mod control;
pub mod failover;
mod history;
mod lock;
mod registry;
mod reprocess;
mod retention;
mod rollup;
mod state;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{
    ClassMove, ColdStart, CommitError, DroppedPartition, HistoryRow, Lease, PARTITIONS_DAYS_AHEAD_MAX,
    Partition, PartitionsAhead, RegistryLoad, RetainedTable, RetentionCutoffs, RetentionRun, RollupGrain,
    RollupRefresh, RollupRow, RollupStep, RollupStepLimits, RollupWatermark, StartupStep, Store, StoreError,
    StoredControlEvent, StoredDesired, StoredRegistry, lock_session_name,
};

/// A quarantine entry as the model stores it (the `quarantine` table's columns).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredQuarantine {
    pub stream: String,
    pub stream_seq: u64,
    pub ingested_at: Micros,
    pub subject: String,
    pub reason: QuarantineReason,
    pub detail: String,
    pub payload: Bytes,
    pub payload_bytes: u32,
    pub core_epoch: u32,
    pub recorded_at: Micros,
}

/// A class table row's key: `(driver_instance, source_epoch, source_seq, ingested_at)`. Unique
/// per hot daily partition on its first three columns (migration 0020: each partition's dedup
/// key is `(instance_key, source_epoch, source_seq)`), so [`ClassTable::key_taken`] is the
/// unique index's check; the set is ordered so that check and the late-duplicate probe are
/// ranges.
type UniqueKey = (Arc<str>, u32, u64, Micros);

#[derive(Default)]
struct ClassTable {
    /// In insertion order, as a heap table would return them without ORDER BY.
    rows: Vec<ObsRow>,
    /// Each row's `applied` column (migration 0007), parallel to `rows`.
    applied: Vec<Option<i64>>,
    keys: BTreeSet<UniqueKey>,
    /// The compacted days (`compaction.rs`), by day index (days since the epoch), each with
    /// the class its rows decode to.
    compacted: BTreeMap<i64, (RetentionClass, compaction::CompactedDay)>,
    /// Each point's newest row and newest valued row (as [`log_head`] picks them) over the hot
    /// and compacted rows, kept as commits append rows, so a restart's `load_state` reads them
    /// instead of folding every row of the table (the simulator restarts a dozen times a
    /// seed). `None` once anything but a commit has written `rows` or `compacted` (through
    /// [`ClassTable::forget_heads`]); the next `load_state` folds the table again.
    heads: Option<FxHashMap<Arc<str>, TableHead>>,
}

/// A point's newest row and newest valued row in one class table ([`ClassTable::heads`]).
#[derive(Clone)]
struct TableHead {
    latest: ObsRow,
    latest_valued: Option<ObsRow>,
}

impl TableHead {
    /// Folds `row` in, as [`log_head`] does (the order key is unique: no ties).
    fn fold(&mut self, row: &ObsRow) {
        if row.order_key() > self.latest.order_key() {
            self.latest = row.clone();
        }
        if row.value.is_some()
            && self
                .latest_valued
                .as_ref()
                .is_none_or(|l| row.order_key() > l.order_key())
        {
            self.latest_valued = Some(row.clone());
        }
    }

    fn of(row: &ObsRow) -> TableHead {
        TableHead {
            latest: row.clone(),
            latest_valued: row.value.is_some().then(|| row.clone()),
        }
    }
}

impl ClassTable {
    /// Every write to `rows` or `compacted` but a commit's append calls this first.
    fn forget_heads(&mut self) {
        self.heads = None;
    }

    /// A commit appended `row`: folds it into its point's head, if the heads are kept.
    fn head_appended(&mut self, row: &ObsRow) {
        if let Some(heads) = &mut self.heads {
            match heads.get_mut(&row.point_id) {
                Some(head) => head.fold(row),
                None => {
                    heads.insert(row.point_id.clone(), TableHead::of(row));
                }
            }
        }
    }

    /// The heads, folded from every row (hot and compacted) if they were forgotten.
    fn heads(&mut self) -> &FxHashMap<Arc<str>, TableHead> {
        if self.heads.is_none() {
            let mut heads: FxHashMap<Arc<str>, TableHead> = FxHashMap::default();
            for row in self.all_rows().iter() {
                match heads.get_mut(&row.point_id) {
                    Some(head) => head.fold(row),
                    None => {
                        heads.insert(row.point_id.clone(), TableHead::of(row));
                    }
                }
            }
            self.heads = Some(heads);
        }
        self.heads.get_or_insert_default()
    }
}

/// Whether `keys` holds `key`'s first three columns with an `ingested_at` in `from..to`. One
/// descent to the first key at or above `(…, from)` instead of a two-sided range's two: the
/// set is ordered by the three columns first, so that key is in the range exactly when it has
/// the same three columns and an `ingested_at` below `to`. Every commit asks this of each row.
fn key_within(keys: &BTreeSet<UniqueKey>, key: &UniqueKey, from: Micros, to: Micros) -> bool {
    keys.range((key.0.clone(), key.1, key.2, from)..)
        .next()
        .is_some_and(|k| k.0 == key.0 && k.1 == key.1 && k.2 == key.2 && k.3 < to)
}

impl ClassTable {
    /// Whether the hot partition `key` would be stored in (the UTC day of its `ingested_at`)
    /// already holds its three-column key (migration 0020's per-partition unique index): what
    /// `INSERT … ON CONFLICT DO NOTHING` skips, and a plain insert fails on.
    fn key_taken(&self, key: &UniqueKey) -> bool {
        let day = key.3.day();
        let from = Micros(day * sentinel_core::time::US_PER_DAY);
        let to = Micros((day + 1) * sentinel_core::time::US_PER_DAY);
        key_within(&self.keys, key, from, to)
    }
}

struct RegistryVersionRow {
    version: i32,
    git_sha: String,
    content_hash: String,
    /// `(point_id, hash)`, sorted by point id.
    descriptors: Vec<(String, String)>,
    /// What the rollups read of this version (agg_safe, retention class), parsed once when it
    /// is stored: every rollup step reads it, and parsing every descriptor's JSON per step
    /// was the largest single cost of a simulated seed.
    rollup_info: Arc<rollup::PointRollupInfo>,
    #[allow(dead_code)] // kept for parity with the table and for future inspection
    loaded_at: Micros,
}

/// The modelled database.
struct Model {
    stream_name: String,
    epoch: u32,
    /// The holder's start identity (`core_epoch.core_start`, issue 25 item 3): recorded with
    /// the epoch by each acquisition, kept by a raise; `None` before the first.
    core_start: Option<u64>,
    /// Session ids are never reused, so a stale lease can never look alive again.
    next_session: u64,
    lock_holder: Option<u64>,
    tables: [ClassTable; 3],
    quarantine: BTreeMap<(String, u64), StoredQuarantine>,
    point_state: BTreeMap<Arc<str>, PointState>,
    /// Ascending by version.
    registry_versions: Vec<RegistryVersionRow>,
    /// hash → canonical descriptor text.
    blobs: BTreeMap<String, String>,
    /// The `core_start` table, by epoch.
    cold_starts: BTreeMap<u32, ColdStart>,
    /// Planted bug (simulator tests only): `commit` skips the epoch fence.
    commit_unfenced: bool,
    /// Planted bug (simulator tests only): every maintenance write ([`Model::maintenance_fence`])
    /// skips the fence, so a deposed writer's rollup step, reprocess chunk or retention drop
    /// lands.
    maintenance_unfenced: bool,
    /// Planted bug (simulator tests only): compaction encodes no `detail` column.
    compaction_drops_detail: bool,
    /// The `control_event` table, ascending by `seq`.
    control_events: Vec<StoredControlEvent>,
    /// The `point_desired` table, by point id.
    point_desired: BTreeMap<Arc<str>, StoredDesired>,
    /// The rollup tables, their watermark and invalidations (`rollup.rs`).
    rollups: rollup::Rollups,
    /// Which partitions exist and the retention marks (`retention.rs`).
    retention: retention::RetentionState,
}

impl Model {
    /// What the rollups read from the newest registry version (agg_safe, retention class).
    fn rollup_info(&self) -> Arc<rollup::PointRollupInfo> {
        self.registry_versions
            .last()
            .map_or_else(Default::default, |newest| newest.rollup_info.clone())
    }

    /// The fence every write verifies (migration 0013's): `epoch` and the writing handle's
    /// start identity `start` must both be the holder's; a handle with no identity (it never
    /// acquired) matches nothing, nor does a holder with none.
    fn fence(&self, epoch: u32, start: Option<u64>) -> Result<(), StoreError> {
        if epoch == self.epoch && start.is_some() && start == self.core_start {
            Ok(())
        } else {
            Err(StoreError::Fenced {
                epoch,
                current: self.epoch,
                start,
                current_start: self.core_start,
            })
        }
    }

    /// The same fence, for a maintenance write: a rollup claim, apply or on-demand refresh, a
    /// reprocess chunk or its control event, a retention drop, a class move (and a compaction,
    /// when the model has one: it calls this too). Apart only so a planted bug can lift it
    /// from maintenance alone, which the simulator's invariant 6 must then catch.
    fn maintenance_fence(&self, epoch: u32, start: Option<u64>) -> Result<(), StoreError> {
        if self.maintenance_unfenced {
            return Ok(());
        }
        self.fence(epoch, start)
    }
}

/// The class tables' rows, hot and compacted, for the rollups (borrowed while nothing is
/// compacted).
fn class_rows(tables: &[ClassTable; 3]) -> [compaction::AllRows<'_>; 3] {
    std::array::from_fn(|i| tables[i].all_rows())
}

/// Borrows [`class_rows`]'s answer as the rollups take it: per class, its hot rows and its
/// compacted ones.
fn as_slices<'a>(rows: &'a [compaction::AllRows<'_>; 3]) -> rollup::ClassRows<'a> {
    std::array::from_fn(|i| rows[i].parts())
}

/// The in-memory store. Cheap to clone; clones share one model and one handle identity.
/// [`MemoryStore::another_handle`] is a second connection to the same model (another core's
/// store): its acquisitions and writes are fenced apart from this one's.
#[derive(Clone)]
pub struct MemoryStore {
    model: Arc<Mutex<Model>>,
    clock: Arc<dyn Clock>,
    /// The start identity of this handle's acquisition (0: none yet), which every fenced
    /// write of it and its clones carries (issue 25 item 3), as `PgStore`'s does.
    core_start: Arc<AtomicU64>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore").finish_non_exhaustive()
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new("OBS", Arc::new(SystemClock))
    }
}

/// Locks the model. A panic while holding the lock cannot leave a half-applied operation
/// visible (every operation validates before it mutates), so a poisoned lock is recovered.
fn lock(model: &Mutex<Model>) -> MutexGuard<'_, Model> {
    model.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl MemoryStore {
    /// An empty, "migrated" store. `stream_name` keys quarantine entries like the PostgreSQL
    /// adapter's `PgStoreConfig::stream_name`; `clock` stamps `recorded_at` and `loaded_at`.
    pub fn new(stream_name: impl Into<String>, clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            model: Arc::new(Mutex::new(Model {
                stream_name: stream_name.into(),
                epoch: 0,
                core_start: None,
                next_session: 1,
                lock_holder: None,
                tables: Default::default(),
                quarantine: BTreeMap::new(),
                point_state: BTreeMap::new(),
                registry_versions: Vec::new(),
                blobs: BTreeMap::new(),
                cold_starts: BTreeMap::new(),
                commit_unfenced: false,
                maintenance_unfenced: false,
                compaction_drops_detail: false,
                control_events: Vec::new(),
                point_desired: BTreeMap::new(),
                rollups: rollup::Rollups::default(),
                retention: retention::RetentionState::default(),
            })),
            clock,
            core_start: Default::default(),
        }
    }

    /// Another handle on the same model with no identity of its own (what another process
    /// connected to the same database is): the simulator gives each core incarnation one.
    pub fn another_handle(&self) -> MemoryStore {
        MemoryStore {
            model: self.model.clone(),
            clock: self.clock.clone(),
            core_start: Default::default(),
        }
    }

    /// The start identity of this handle's acquisition, which its fenced writes carry; `None`
    /// before it acquired.
    pub fn core_start(&self) -> Option<u64> {
        match self.core_start.load(Ordering::Relaxed) {
            0 => None,
            start => Some(start),
        }
    }

    /// The holder's start identity as the model records it (`core_epoch.core_start`).
    pub fn holder_core_start(&self) -> Option<u64> {
        lock(&self.model).core_start
    }

    /// Simulates the death of `lease`'s session: its lock is released at once and its
    /// `alive()` turns false. A no-op if the session no longer holds the lock.
    pub fn kill_session(&self, lease: &MemoryLease) {
        self.kill_session_id(lease.session);
    }

    /// Simulates the death of whichever session holds the lock. Returns whether one did.
    pub fn kill_lock_holder(&self) -> bool {
        lock(&self.model).lock_holder.take().is_some()
    }

    /// Plants a known bug in the model (simulator tests only). Only
    /// [`sentinel_core::PlantedBug::CommitWithoutFence`],
    /// [`sentinel_core::PlantedBug::MaintenanceWithoutFence`],
    /// [`sentinel_core::PlantedBug::RollupIgnoresLateRows`],
    /// [`sentinel_core::PlantedBug::CompactionDropsDetail`] and
    /// [`sentinel_core::PlantedBug::RollupCompactionDropsBucket`] live in the store; the others are
    /// the core's and are ignored here.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&self, bug: sentinel_core::PlantedBug) {
        match bug {
            sentinel_core::PlantedBug::CommitWithoutFence => lock(&self.model).commit_unfenced = true,
            sentinel_core::PlantedBug::MaintenanceWithoutFence => {
                lock(&self.model).maintenance_unfenced = true
            }
            sentinel_core::PlantedBug::RollupIgnoresLateRows => {
                lock(&self.model).rollups.ignore_late_rows = true
            }
            sentinel_core::PlantedBug::CompactionDropsDetail => {
                lock(&self.model).compaction_drops_detail = true
            }
            sentinel_core::PlantedBug::RollupCompactionDropsBucket => {
                lock(&self.model).rollups.compaction_drops_bucket = true
            }
            _ => {}
        }
    }

    /// The first half of the running core's rollup step (`sentinel_rollup_claim`): the
    /// simulator calls the halves apart to crash between them.
    pub fn rollup_claim(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<(), StoreError> {
        let mut guard = lock(&self.model);
        guard.maintenance_fence(epoch, self.core_start())?;
        guard.rollups.claim(closed_before, limits)
    }

    /// The second half (`sentinel_rollup_apply`): recomputes the open claim.
    pub fn rollup_apply(&self, epoch: u32) -> Result<RollupStep, StoreError> {
        let mut guard = lock(&self.model);
        guard.maintenance_fence(epoch, self.core_start())?;
        let registry = guard.rollup_info();
        let model = &mut *guard;
        model.rollups.apply(
            as_slices(&class_rows(&model.tables)),
            &registry,
            &mut model.retention,
        )
    }

    /// The session holding the single-writer lock, if any (see [`MemoryLease::session`]).
    pub fn lock_holder(&self) -> Option<u64> {
        lock(&self.model).lock_holder
    }

    /// Simulates the death of session `session`, as [`MemoryStore::kill_session`] does for a
    /// lease the caller does not hold. Returns whether it held the lock.
    pub fn kill_session_id(&self, session: u64) -> bool {
        let mut model = lock(&self.model);
        let held = model.lock_holder == Some(session);
        if held {
            model.lock_holder = None;
        }
        held
    }

    /// Whether any session holds the single-writer lock.
    pub fn lock_held(&self) -> bool {
        lock(&self.model).lock_holder.is_some()
    }

    pub fn current_epoch(&self) -> u32 {
        lock(&self.model).epoch
    }

    /// The fence's side of a write, in one look: the current epoch and its holder's start
    /// identity (what [`MemoryStore::writer`] must equal for a write to land).
    pub fn holder(&self) -> (u32, Option<u64>) {
        let model = lock(&self.model);
        (model.epoch, model.core_start)
    }

    /// The writer's side: `epoch` as a write of this handle carries it, with this handle's
    /// start identity.
    pub fn writer(&self, epoch: u32) -> (u32, Option<u64>) {
        (epoch, self.core_start())
    }

    /// The rows of one class table: the hot ones in insertion order, then the compacted ones
    /// (decoded, by day and chunk).
    pub fn rows(&self, class: RetentionClass) -> Vec<ObsRow> {
        lock(&self.model).tables[class.index()].all_rows().into_owned()
    }

    /// The rows of one class table that `keep` selects: the hot ones in insertion order, then
    /// the compacted ones (only those are copied).
    pub fn rows_where(&self, class: RetentionClass, mut keep: impl FnMut(&ObsRow) -> bool) -> Vec<ObsRow> {
        let model = lock(&self.model);
        model.tables[class.index()]
            .all_rows()
            .iter()
            .filter(|row| keep(row))
            .cloned()
            .collect()
    }

    /// Rows per class table, hot and compacted.
    pub fn row_counts(&self) -> ClassCounts {
        let model = lock(&self.model);
        ClassCounts(std::array::from_fn(|i| {
            (model.tables[i].rows.len() + model.tables[i].compacted_len()) as u64
        }))
    }

    /// Rows per class table held compacted.
    pub fn compacted_row_counts(&self) -> ClassCounts {
        let model = lock(&self.model);
        ClassCounts(std::array::from_fn(|i| model.tables[i].compacted_len() as u64))
    }

    /// All quarantine entries, ordered by `(stream, stream_seq)`.
    pub fn quarantine(&self) -> Vec<StoredQuarantine> {
        lock(&self.model).quarantine.values().cloned().collect()
    }

    /// Quarantine entry counts per reason, ordered by reason.
    pub fn quarantine_counts(&self) -> Vec<(QuarantineReason, u64)> {
        let model = lock(&self.model);
        let mut counts: BTreeMap<QuarantineReason, u64> = BTreeMap::new();
        for entry in model.quarantine.values() {
            *counts.entry(entry.reason).or_default() += 1;
        }
        counts.into_iter().collect()
    }

    /// Every acquisition and its cold start, ascending by epoch.
    pub fn cold_starts(&self) -> Vec<ColdStart> {
        lock(&self.model).cold_starts.values().cloned().collect()
    }

    /// The checkpoint table, ordered by point id.
    pub fn point_states(&self) -> Vec<PointState> {
        lock(&self.model).point_state.values().cloned().collect()
    }
}

/// Holding the modelled advisory lock. Dropping it releases the lock, as closing the
/// connection does in PostgreSQL.
pub struct MemoryLease {
    model: Arc<Mutex<Model>>,
    session: u64,
    epoch: u32,
    core_start: u64,
}

impl std::fmt::Debug for MemoryLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLease")
            .field("session", &self.session)
            .field("epoch", &self.epoch)
            .field("core_start", &self.core_start)
            .finish()
    }
}

impl MemoryLease {
    /// The modelled session id (the analogue of a backend pid).
    pub fn session(&self) -> u64 {
        self.session
    }
}

impl Drop for MemoryLease {
    fn drop(&mut self) {
        let mut model = lock(&self.model);
        if model.lock_holder == Some(self.session) {
            model.lock_holder = None;
        }
    }
}

impl Lease for MemoryLease {
    fn epoch(&self) -> u32 {
        self.epoch
    }

    fn core_start(&self) -> u64 {
        self.core_start
    }

    async fn alive(&mut self) -> Result<bool, StoreError> {
        Ok(lock(&self.model).lock_holder == Some(self.session))
    }
}

/// The PostgreSQL columns are `integer` and `bigint`; a key outside them cannot be stored.
/// Checked up front so a refused batch writes nothing, as the real transaction would.
fn check_key_range(key: &ObsKey) -> Result<(), StoreError> {
    if i32::try_from(key.source_epoch).is_err() || i64::try_from(key.source_seq).is_err() {
        return Err(StoreError::Other(format!(
            "key ({}, {}, {}) is outside the integer/bigint range of the observation tables",
            key.driver_instance, key.source_epoch, key.source_seq
        )));
    }
    Ok(())
}

/// The greatest row under invariant 5's total order `(observed_at, ingested_at, key)`, and the
/// greatest row that carries a value, turned into a log head (ingest spec, "Restart").
fn log_head<'a>(rows: impl Iterator<Item = &'a ObsRow>) -> Option<LogHead> {
    let mut latest: Option<&ObsRow> = None;
    let mut latest_valued: Option<&ObsRow> = None;
    for row in rows {
        if latest.is_none_or(|l| row.order_key() > l.order_key()) {
            latest = Some(row);
        }
        if row.value.is_some() && latest_valued.is_none_or(|l| row.order_key() > l.order_key()) {
            latest_valued = Some(row);
        }
    }
    let latest = latest?;
    Some(LogHead {
        state: PointState {
            point_id: latest.point_id.clone(),
            value: latest_valued.and_then(|r| r.value.clone()),
            quality: latest.quality,
            reason: latest.reason.as_deref().map(str::to_owned),
            observed_at: Some(latest.observed_at),
            ingested_at: Some(latest.ingested_at),
            key: Some(latest.key.clone()),
            changed_at: None,
            quality_since: latest.ingested_at,
            watermark_seq: None,
        },
        value_order: latest_valued.map(|r| (r.observed_at, r.ingested_at, r.key.clone())),
    })
}

impl Store for MemoryStore {
    type Lease = MemoryLease;

    async fn acquire(&self) -> Result<MemoryLease, StoreError> {
        self.acquire_inner().await
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
        self.load_windows_inner(requests, rows_max_per_point).await
    }

    async fn commit(&self, batch: Batch) -> Result<CommitReport, CommitError> {
        self.commit_inner(batch).await
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

    async fn write_arbitration(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Vec<sentinel_core::arbitration::DesiredRow>,
    ) -> Result<Vec<i64>, StoreError> {
        self.write_arbitration_inner(epoch, events, desired).await
    }

    async fn load_point_desired(&self) -> Result<Vec<StoredDesired>, StoreError> {
        self.load_point_desired_inner().await
    }

    async fn recorded_epoch(&self) -> Result<u32, StoreError> {
        Ok(self.current_epoch())
    }

    async fn raise_epoch(&self, epoch: u32, floor: u32) -> Result<u32, StoreError> {
        if floor > sentinel_ports::EPOCH_MAX {
            return Err(sentinel_ports::epoch_floor_too_high(floor));
        }
        let mut model = lock(&self.model);
        model.fence(epoch, self.core_start())?;
        model.epoch = model.epoch.max(floor);
        Ok(model.epoch)
    }

    async fn load_unanswered_commands(&self) -> Result<Vec<StoredControlEvent>, StoreError> {
        self.load_unanswered_commands_inner().await
    }

    async fn load_open_verifications(&self) -> Result<Vec<sentinel_core::OpenVerification>, StoreError> {
        self.load_open_verifications_inner().await
    }

    async fn load_control_heads(&self, point_ids: Vec<String>) -> Result<Vec<(String, i64)>, StoreError> {
        self.load_control_heads_inner(point_ids).await
    }

    async fn record_cold_start(
        &self,
        epoch: u32,
        core_start: Option<u64>,
        steps: Vec<StartupStep>,
    ) -> Result<(), StoreError> {
        self.record_cold_start_inner(epoch, core_start, steps).await
    }

    async fn refresh_rollups(
        &self,
        epoch: u32,
        from: Micros,
        to: Micros,
    ) -> Result<RollupRefresh, StoreError> {
        let mut guard = lock(&self.model);
        guard.maintenance_fence(epoch, self.core_start())?;
        let registry = guard.rollup_info();
        let model = &mut *guard;
        model.rollups.refresh_range(
            (from, to),
            as_slices(&class_rows(&model.tables)),
            &registry,
            &mut model.retention,
        )
    }

    async fn refresh_closed_rollups(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<RollupStep, StoreError> {
        self.rollup_claim(epoch, closed_before, limits)?;
        self.rollup_apply(epoch)
    }

    async fn rollup_watermark(&self) -> Result<Option<RollupWatermark>, StoreError> {
        Ok(lock(&self.model).rollups.watermark())
    }

    async fn expired_partitions(
        &self,
        cutoffs: RetentionCutoffs,
        limit: usize,
    ) -> Result<Vec<Partition>, StoreError> {
        Ok(lock(&self.model).retention.expired(&cutoffs, limit))
    }

    async fn drop_expired(
        &self,
        epoch: u32,
        cutoffs: RetentionCutoffs,
        partitions_max: u32,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<RetentionRun, StoreError> {
        let mut model = lock(&self.model);
        model.maintenance_fence(epoch, self.core_start())?;
        let max = partitions_max as usize;
        let mut expired = model.retention.expired(&cutoffs, max + 1);
        let more = expired.len() > max;
        expired.truncate(max);
        let mut dropped = Vec::with_capacity(expired.len());
        for partition in expired {
            // One transaction each: the mark, the rows and the event together.
            if !model
                .retention
                .drop_partition(partition, partition.table.kept_from(&cutoffs))?
            {
                continue;
            }
            let in_range = |at: Micros| at >= partition.from && at < partition.to;
            match partition.table {
                RetainedTable::Raw(class) => {
                    let table = &mut model.tables[class.index()];
                    table.forget_heads();
                    let applied = std::mem::take(&mut table.applied);
                    let (rows, applied): (Vec<ObsRow>, Vec<Option<i64>>) = std::mem::take(&mut table.rows)
                        .into_iter()
                        .zip(applied)
                        .filter(|(r, _)| !in_range(r.ingested_at))
                        .unzip();
                    table.rows = rows;
                    table.applied = applied;
                    table.keys.retain(|k| !in_range(k.3));
                    table.drop_compacted(partition.from, partition.to);
                }
                RetainedTable::Rollup(grain) => model.rollups.drop_range(grain, partition.from, partition.to),
            }
            let seq = model.control_events.last().map_or(1, |e| e.seq + 1);
            let registry_version = model.registry_versions.last().map_or(0, |v| v.version);
            model.control_events.push(StoredControlEvent {
                seq,
                occurred_at,
                kind: sentinel_core::ControlKind::RetentionDrop.as_str().to_owned(),
                point_id: None,
                principal: principal.to_owned(),
                core_epoch: epoch,
                payload: retention::drop_payload(&partition),
                registry_version,
            });
            dropped.push(DroppedPartition { partition, seq });
        }
        Ok(RetentionRun { dropped, more })
    }

    async fn retention_marks(&self) -> Result<[Option<Micros>; 5], StoreError> {
        Ok(lock(&self.model).retention.marks())
    }

    async fn partitions_created_until(&self) -> Result<Option<Micros>, StoreError> {
        Ok(lock(&self.model).retention.created_until())
    }

    /// The model holds no table locks, so it never times out.
    async fn ensure_partitions_ahead(
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
        let mut model = lock(&self.model);
        let yesterday = Micros(today.0.div_euclid(US_PER_DAY) * US_PER_DAY - US_PER_DAY);
        let created = model.retention.ensure_days_counted(yesterday, days_ahead + 2);
        Ok(PartitionsAhead::Ensured {
            created,
            until: model.retention.created_until(),
        })
    }

    async fn compact_day(
        &self,
        epoch: u32,
        request: sentinel_ports::CompactionRequest<'_>,
    ) -> Result<sentinel_ports::Compaction, StoreError> {
        lock(&self.model).compact_day(epoch, self.core_start(), &request)
    }

    async fn compact_rollup_day(
        &self,
        epoch: u32,
        request: sentinel_ports::RollupCompactionRequest<'_>,
    ) -> Result<sentinel_ports::RollupCompaction, StoreError> {
        lock(&self.model).compact_rollup_day_alone(epoch, self.core_start(), &request)
    }

    async fn move_point_class(
        &self,
        epoch: u32,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<ClassMove, StoreError> {
        lock(&self.model).move_point_class(epoch, self.core_start(), point_id, to, principal, occurred_at)
    }

    async fn load_history(
        &self,
        point_id: &str,
        class: RetentionClass,
        from: Micros,
        to: Micros,
        limit: usize,
    ) -> Result<Vec<HistoryRow>, StoreError> {
        Ok(lock(&self.model).history(point_id, class, (from, to), limit))
    }

    async fn load_rollups(
        &self,
        grain: RollupGrain,
        from: Micros,
        to: Micros,
        point_id: Option<&str>,
    ) -> Result<Vec<RollupRow>, StoreError> {
        Ok(lock(&self.model).rollups.load(grain, (from, to), point_id))
    }

    // reprocess

    async fn reprocess_extent(
        &self,
        points: &[(String, RetentionClass)],
        from: Micros,
        to: Option<Micros>,
    ) -> Result<Vec<sentinel_ports::ClassExtent>, StoreError> {
        Ok(lock(&self.model).reprocess_extent(points, from, to))
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
        Ok(lock(&self.model).load_reprocess_rows(class, point, from, to, after, limit))
    }

    async fn apply_reprocess(
        &self,
        epoch: u32,
        class: RetentionClass,
        updates: Vec<sentinel_core::reprocess::RowUpdate>,
    ) -> Result<u64, StoreError> {
        lock(&self.model).apply_reprocess(epoch, self.core_start(), class, updates)
    }

    async fn write_reprocess_event(
        &self,
        epoch: u32,
        occurred_at: Micros,
        principal: &str,
        record: &sentinel_core::reprocess::ReprocessRecord,
    ) -> Result<i64, StoreError> {
        lock(&self.model).write_reprocess_event(epoch, self.core_start(), occurred_at, principal, record)
    }
}
