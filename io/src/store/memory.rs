//! The in-memory reference model of the PostgreSQL store (DESIGN.md §6), used by the demo and
//! the simulator. Same semantics as [`super::postgres::PgStore`], checked by the conformance
//! suite in `tests/store_conformance.rs`.
//!
//! Owns: a model of exactly the database behaviour the core relies on (DESIGN.md §3, §5):
//! - the single-writer advisory lock, held by a session; a dead session releases it
//!   ([`MemoryStore::kill_session`], [`MemoryStore::kill_lock_holder`]) the way PostgreSQL
//!   does when a connection dies;
//! - the core epoch, incremented only on acquisition, and the fence every write verifies;
//! - one `core_start` record per acquisition, its startup timings written under the fence;
//! - one table per retention class with the 4-column unique key and `ON CONFLICT DO NOTHING
//!   RETURNING` (only new rows are reported);
//! - quarantine keyed by `(stream, stream_seq)`;
//! - the `point_state` checkpoint upsert and the log-head rule of `load_state`;
//! - registry versions with "identical content creates no version".
//!
//! Everything is ordered (`BTreeMap`, `Vec`) so that the model is deterministic under the
//! simulator. All state sits behind one `Mutex` that is never held across an `.await`.
//! Fault hooks beyond session death (slow commits, unreachable store) are meant to be added to
//! [`Model`] and checked at the top of each operation.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use rustc_hash::{FxHashMap, FxHashSet};
use sentinel_core::derived::{WindowRequest, WindowRow};
use sentinel_core::{
    Batch, CommitReport, ControlEvent, LogHead, Micros, ObsKey, ObsRow, PointState, QuarantineReason,
    RegistrySnapshot, RestoredState, RetentionClass,
};

use super::ClassCounts;

mod class_change;
mod history;
mod reprocess;
mod retention;
mod rollup;
use crate::clock::{Clock, SystemClock};
use crate::ports::{
    ClassMove, ColdStart, CommitError, DroppedPartition, HistoryRow, Lease, Partition, RegistryLoad,
    RetainedTable, RetentionCutoffs, RetentionRun, RollupGrain, RollupRefresh, RollupRow, RollupStep,
    RollupStepLimits, RollupWatermark, StartupStep, Store, StoreError, StoredControlEvent, StoredRegistry,
    lock_session_name,
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

/// The 4-column unique key of a class table: `(driver_instance, source_epoch, source_seq,
/// ingested_at)`.
type UniqueKey = (Arc<str>, u32, u64, Micros);

#[derive(Default)]
struct ClassTable {
    /// In insertion order, as a heap table would return them without ORDER BY.
    rows: Vec<ObsRow>,
    /// Each row's `applied` column (migration 0007), parallel to `rows`.
    applied: Vec<Option<i64>>,
    keys: BTreeSet<UniqueKey>,
}

struct RegistryVersionRow {
    version: i32,
    git_sha: String,
    content_hash: String,
    /// `(point_id, hash)`, sorted by point id.
    descriptors: Vec<(String, String)>,
    #[allow(dead_code)] // kept for parity with the table and for future inspection
    loaded_at: Micros,
}

/// The modelled database.
struct Model {
    stream_name: String,
    epoch: u32,
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
    /// The `control_event` table, ascending by `seq`.
    control_events: Vec<StoredControlEvent>,
    /// The rollup tables, their watermark and invalidations (`rollup.rs`).
    rollups: rollup::Rollups,
    /// Which partitions exist and the retention marks (`retention.rs`).
    retention: retention::RetentionState,
}

impl Model {
    /// What the rollups read from the newest registry version (agg_safe, retention class).
    fn rollup_info(&self) -> rollup::PointRollupInfo {
        let Some(newest) = self.registry_versions.last() else {
            return rollup::PointRollupInfo::new();
        };
        rollup::rollup_info(newest.descriptors.iter().filter_map(|(point, hash)| {
            self.blobs
                .get(hash)
                .map(|canonical| (point.as_str(), canonical.as_str()))
        }))
    }

    fn fence(&self, epoch: u32) -> Result<(), StoreError> {
        if epoch == self.epoch {
            Ok(())
        } else {
            Err(StoreError::Fenced {
                epoch,
                current: self.epoch,
            })
        }
    }
}

/// The class tables' rows, for the rollups.
fn class_rows(tables: &[ClassTable; 3]) -> [&[ObsRow]; 3] {
    std::array::from_fn(|i| tables[i].rows.as_slice())
}

/// The in-memory store. Cheap to clone; clones share one model.
#[derive(Clone)]
pub struct MemoryStore {
    model: Arc<Mutex<Model>>,
    clock: Arc<dyn Clock>,
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
                next_session: 1,
                lock_holder: None,
                tables: Default::default(),
                quarantine: BTreeMap::new(),
                point_state: BTreeMap::new(),
                registry_versions: Vec::new(),
                blobs: BTreeMap::new(),
                cold_starts: BTreeMap::new(),
                commit_unfenced: false,
                control_events: Vec::new(),
                rollups: rollup::Rollups::default(),
                retention: retention::RetentionState::default(),
            })),
            clock,
        }
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
    /// [`sentinel_core::PlantedBug::CommitWithoutFence`] and
    /// [`sentinel_core::PlantedBug::RollupIgnoresLateRows`] live in the store; the others are
    /// the core's and are ignored here.
    #[cfg(feature = "planted-bugs")]
    pub fn plant(&self, bug: sentinel_core::PlantedBug) {
        match bug {
            sentinel_core::PlantedBug::CommitWithoutFence => lock(&self.model).commit_unfenced = true,
            sentinel_core::PlantedBug::RollupIgnoresLateRows => {
                lock(&self.model).rollups.ignore_late_rows = true
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
        guard.fence(epoch)?;
        guard.rollups.claim(closed_before, limits)
    }

    /// The second half (`sentinel_rollup_apply`): recomputes the open claim.
    pub fn rollup_apply(&self, epoch: u32) -> Result<RollupStep, StoreError> {
        let mut guard = lock(&self.model);
        guard.fence(epoch)?;
        let registry = guard.rollup_info();
        let model = &mut *guard;
        model
            .rollups
            .apply(class_rows(&model.tables), &registry, &mut model.retention)
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

    /// The rows of one class table, in insertion order.
    pub fn rows(&self, class: RetentionClass) -> Vec<ObsRow> {
        lock(&self.model).tables[class.index()].rows.clone()
    }

    pub fn row_counts(&self) -> ClassCounts {
        let model = lock(&self.model);
        ClassCounts(std::array::from_fn(|i| model.tables[i].rows.len() as u64))
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
}

impl std::fmt::Debug for MemoryLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryLease")
            .field("session", &self.session)
            .field("epoch", &self.epoch)
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
        let started_at = self.clock.now();
        let mut model = lock(&self.model);
        if model.lock_holder.is_some() {
            return Err(StoreError::LockHeld);
        }
        // Check the epoch can move before taking the lock, so a refusal leaves the lock free.
        let epoch = model
            .epoch
            .checked_add(1)
            .filter(|e| i32::try_from(*e).is_ok())
            .ok_or_else(|| StoreError::Other("core epoch exhausted the integer range".into()))?;
        let session = model.next_session;
        model.next_session += 1;
        model.lock_holder = Some(session);
        model.epoch = epoch;
        // As the PostgreSQL adapter does under the lock at startup (`migrate` ensures the
        // partitions around today): yesterday through three days ahead.
        let day_us = sentinel_core::time::US_PER_DAY;
        model
            .retention
            .ensure_days(Micros(started_at.0 - day_us), Micros(started_at.0 + 3 * day_us));
        model.cold_starts.insert(
            epoch,
            ColdStart {
                epoch,
                started_at,
                backend_pid: i64::try_from(session).unwrap_or(i64::MAX),
                application_name: lock_session_name(epoch),
                ready_at: None,
                steps: Vec::new(),
            },
        );
        Ok(MemoryLease {
            model: self.model.clone(),
            session,
            epoch: model.epoch,
        })
    }

    async fn store_registry(&self, snapshot: &RegistrySnapshot) -> Result<RegistryLoad, StoreError> {
        let loaded_at = self.clock.now();
        let mut model = lock(&self.model);
        if let Some(newest) = model.registry_versions.last()
            && newest.content_hash == snapshot.content_hash
        {
            return Ok(RegistryLoad {
                version: newest.version,
                created: false,
            });
        }
        // Same failure as the point_descriptor primary key, before anything is written.
        let mut seen = BTreeSet::new();
        for entry in &snapshot.entries {
            if !seen.insert(entry.point_id.as_str()) {
                return Err(StoreError::Other(format!(
                    "registry snapshot names point {:?} twice",
                    entry.point_id
                )));
            }
        }
        for entry in &snapshot.entries {
            model
                .blobs
                .entry(entry.hash.clone())
                .or_insert_with(|| entry.canonical_json.clone());
        }
        let version = model.registry_versions.last().map_or(1, |v| v.version + 1);
        let mut descriptors: Vec<(String, String)> = snapshot
            .entries
            .iter()
            .map(|e| (e.point_id.clone(), e.hash.clone()))
            .collect();
        descriptors.sort();
        model.registry_versions.push(RegistryVersionRow {
            version,
            git_sha: snapshot.git_sha.clone(),
            content_hash: snapshot.content_hash.clone(),
            descriptors,
            loaded_at,
        });
        Ok(RegistryLoad {
            version,
            created: true,
        })
    }

    async fn load_registry(&self, version: Option<i32>) -> Result<Option<StoredRegistry>, StoreError> {
        let model = lock(&self.model);
        let row = match version {
            None => model.registry_versions.last(),
            Some(v) => model.registry_versions.iter().find(|r| r.version == v),
        };
        let Some(row) = row else { return Ok(None) };
        let descriptors = row
            .descriptors
            .iter()
            .map(|(point_id, hash)| {
                let canonical = model
                    .blobs
                    .get(hash)
                    .expect("invariant: every point_descriptor hash has a descriptor_blob (foreign key)");
                (point_id.clone(), canonical.clone())
            })
            .collect();
        Ok(Some(StoredRegistry {
            version: row.version,
            git_sha: row.git_sha.clone(),
            content_hash: row.content_hash.clone(),
            descriptors,
        }))
    }

    async fn load_state(&self, points: &[(String, RetentionClass)]) -> Result<RestoredState, StoreError> {
        let model = lock(&self.model);
        // A hash set, not an ordered one: every row of every class table is looked up here,
        // on every restart (the simulator restarts cores dozens of times per seed).
        let wanted: FxHashSet<(&str, RetentionClass)> =
            points.iter().map(|(id, c)| (id.as_str(), *c)).collect();
        let ids: BTreeSet<&str> = wanted.iter().map(|(id, _)| *id).collect();
        let checkpoints = ids
            .iter()
            .filter_map(|id| model.point_state.get(*id).cloned())
            .collect();
        // One pass per class table, grouping rows by point: restarts must not cost
        // points × rows.
        let mut per_point: FxHashMap<(&str, RetentionClass), Vec<&ObsRow>> = FxHashMap::default();
        for class in RetentionClass::ALL {
            for row in &model.tables[class.index()].rows {
                if wanted.contains(&(&*row.point_id, class)) {
                    per_point.entry((&*row.point_id, class)).or_default().push(row);
                }
            }
        }
        // In (point, class) order, as the ordered map this replaced gave: the heads' order
        // must not depend on hashing.
        let mut groups: Vec<_> = per_point.into_iter().collect();
        groups.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        let mut log_heads: Vec<LogHead> = groups
            .into_iter()
            .filter_map(|(_, rows)| log_head(rows.into_iter()))
            .collect();
        log_heads.sort_by(|a, b| a.state.point_id.cmp(&b.state.point_id));
        Ok(RestoredState {
            checkpoints,
            log_heads,
        })
    }

    async fn load_windows(
        &self,
        requests: &[WindowRequest],
        rows_max_per_point: usize,
    ) -> Result<Vec<WindowRow>, StoreError> {
        let model = lock(&self.model);
        let mut out = Vec::new();
        for request in requests {
            let table = &model.tables[request.class.index()];
            let mut rows: Vec<(&ObsRow, Option<i64>)> = table
                .rows
                .iter()
                .zip(table.applied.iter().copied())
                .filter(|(r, _)| r.point_id == request.point_id)
                .collect();
            // Newest first, as the PostgreSQL query orders before its LIMIT: those since the
            // bound (at most the row bound) and, whatever their age, the newest `rows_min`.
            rows.sort_by(|a, b| b.0.order_key().cmp(&a.0.order_key()));
            let since = rows
                .iter()
                .take_while(|(r, _)| r.observed_at >= request.since)
                .count()
                .min(rows_max_per_point);
            let take = since.max(rows.len().min(request.rows_min as usize));
            out.extend(rows.into_iter().take(take).map(|(r, applied)| WindowRow {
                point_id: r.point_id.clone(),
                observed_at: r.observed_at,
                ingested_at: r.ingested_at,
                key: r.key.clone(),
                quality: r.quality,
                value: r.value.as_ref().and_then(sentinel_core::CanonicalValue::num),
                applied,
            }));
        }
        Ok(out)
    }

    async fn commit(&self, batch: Batch) -> Result<CommitReport, CommitError> {
        let recorded_at = self.clock.now();
        let mut model = lock(&self.model);
        let fail = |source| CommitError {
            batch: batch.id,
            source,
        };
        if !model.commit_unfenced {
            model.fence(batch.epoch).map_err(fail)?;
        }
        for row in &batch.rows {
            check_key_range(&row.key).map_err(fail)?;
        }
        // The partitions of the batch's days, made before the insert as the adapter makes them
        // (never again below a retention mark: a row for a dropped day fails the commit).
        let days: BTreeSet<i64> = batch.rows.iter().map(|r| r.ingested_at.day()).collect();
        for day in days {
            model
                .retention
                .ensure_day(Micros(day * sentinel_core::time::US_PER_DAY));
        }
        if let Some(row) = batch
            .rows
            .iter()
            .find(|r| !model.retention.raw_partition_exists(r.class, r.ingested_at))
        {
            return Err(fail(StoreError::Other(format!(
                "no partition of class {} for a row ingested at {}",
                row.class.as_str(),
                row.ingested_at
            ))));
        }
        let mut inserted = Vec::new();
        for (ordinal, row) in batch.rows.iter().enumerate() {
            let table = &mut model.tables[row.class.index()];
            let key = (
                row.key.driver_instance.clone(),
                row.key.source_epoch,
                row.key.source_seq,
                row.ingested_at,
            );
            if table.keys.insert(key) {
                table.rows.push(row.clone());
                table.applied.push(Some(batch.applied()));
                inserted.push(ordinal as u32);
            }
        }
        // The rollup invalidation trigger sees exactly the rows inserted.
        model
            .rollups
            .rows_inserted(inserted.iter().map(|&ordinal| &batch.rows[ordinal as usize]));
        let mut quarantine_inserted = 0u32;
        let stream = model.stream_name.clone();
        for entry in &batch.quarantine {
            let slot = model.quarantine.entry((stream.clone(), entry.stream_seq));
            if let std::collections::btree_map::Entry::Vacant(slot) = slot {
                slot.insert(StoredQuarantine {
                    stream: stream.clone(),
                    stream_seq: entry.stream_seq,
                    ingested_at: entry.ingested_at,
                    subject: entry.subject.clone(),
                    reason: entry.reason,
                    detail: entry.detail.clone(),
                    payload: entry.payload.clone(),
                    payload_bytes: entry.payload_bytes,
                    core_epoch: batch.epoch,
                    recorded_at,
                });
                quarantine_inserted += 1;
            }
        }
        drop(model);
        Ok(CommitReport {
            batch,
            inserted,
            quarantine_inserted,
        })
    }

    async fn checkpoint(&self, epoch: u32, states: Vec<PointState>) -> Result<(), StoreError> {
        let mut model = lock(&self.model);
        model.fence(epoch)?;
        for state in &states {
            if let Some(key) = &state.key {
                check_key_range(key)?;
            }
        }
        // Later states for the same point win, as in the adapter's deduplicated upsert.
        for state in states {
            model.point_state.insert(state.point_id.clone(), state);
        }
        Ok(())
    }

    async fn write_control_events(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> Result<Vec<i64>, StoreError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        super::check_control_stamps(epoch, &events)?;
        let mut model = lock(&self.model);
        model.fence(epoch)?;
        let mut seqs = Vec::with_capacity(events.len());
        for event in events {
            let seq = model.control_events.last().map_or(1, |e| e.seq + 1);
            model.control_events.push(StoredControlEvent {
                seq,
                occurred_at: event.occurred_at,
                kind: event.kind().as_str().to_owned(),
                point_id: Some(event.point_id.to_string()),
                principal: event.principal.to_string(),
                core_epoch: event.core_epoch,
                payload: event.payload_json(),
                registry_version: event.registry_version,
            });
            seqs.push(seq);
        }
        Ok(seqs)
    }

    async fn load_control_events(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredControlEvent>, StoreError> {
        let model = lock(&self.model);
        let limit = limit.min(crate::ports::CONTROL_EVENTS_LOAD_MAX);
        Ok(model
            .control_events
            .iter()
            .filter(|e| e.seq > after_seq)
            .take(limit)
            .cloned()
            .collect())
    }

    async fn record_cold_start(&self, epoch: u32, steps: Vec<StartupStep>) -> Result<(), StoreError> {
        let ready_at = self.clock.now();
        let mut model = lock(&self.model);
        model.fence(epoch)?;
        let row = model
            .cold_starts
            .get_mut(&epoch)
            .ok_or_else(|| StoreError::Other(format!("no acquisition recorded for epoch {epoch}")))?;
        row.ready_at = Some(ready_at);
        row.steps = steps;
        Ok(())
    }

    async fn refresh_rollups(
        &self,
        epoch: u32,
        from: Micros,
        to: Micros,
    ) -> Result<RollupRefresh, StoreError> {
        let mut guard = lock(&self.model);
        guard.fence(epoch)?;
        let registry = guard.rollup_info();
        let model = &mut *guard;
        model.rollups.refresh_range(
            (from, to),
            class_rows(&model.tables),
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
        model.fence(epoch)?;
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
                    table.rows.retain(|r| !in_range(r.ingested_at));
                    table.keys.retain(|k| !in_range(k.3));
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

    async fn move_point_class(
        &self,
        epoch: u32,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<ClassMove, StoreError> {
        lock(&self.model).move_point_class(epoch, point_id, to, principal, occurred_at)
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
    ) -> Result<Vec<crate::ports::ClassExtent>, StoreError> {
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
        lock(&self.model).apply_reprocess(epoch, class, updates)
    }

    async fn write_reprocess_event(
        &self,
        epoch: u32,
        occurred_at: Micros,
        principal: &str,
        record: &sentinel_core::reprocess::ReprocessRecord,
    ) -> Result<i64, StoreError> {
        lock(&self.model).write_reprocess_event(epoch, occurred_at, principal, record)
    }
}
