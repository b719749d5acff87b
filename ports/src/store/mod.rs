//! The store port: what the runtime needs from a store (DESIGN.md §1, "Ports and runtime";
//! ingest spec, "Two logs", "Restart", "Reprocess", "Retention and rollups").
//!
//! Owns: the `Store` and `Lease` traits and their errors, and the shapes the store hands back,
//! by concern: [`records`] (registry versions, control events, cold starts), [`rollups`],
//! [`retention`], [`compaction`] and [`maintenance`] (reprocess extents, class moves, history rows). Each has a
//! production adapter (`sentinel-store-pg`) and an in-memory reference model
//! (`sentinel-models`); the conformance suite in `tests/` runs the same bodies against both.

pub mod compaction;
pub mod maintenance;
pub mod records;
pub mod retention;
pub mod rollups;

use std::future::Future;

use sentinel_core::reprocess::{ReprocessRecord, RowUpdate, StoredObservation};
use sentinel_core::{
    Batch, BatchId, CommitReport, ControlEvent, Micros, PointState, RegistrySnapshot, RestoredState,
    RetentionClass,
};

use compaction::{Compaction, CompactionRequest, RollupCompaction, RollupCompactionRequest};
use maintenance::{ClassExtent, ClassMove, HistoryRow};
use records::{RegistryLoad, StartupStep, StoredControlEvent, StoredDesired, StoredRegistry};
use retention::{Partition, PartitionsAhead, RetentionCutoffs, RetentionRun};
use rollups::{RollupGrain, RollupRefresh, RollupRow, RollupStep, RollupStepLimits, RollupWatermark};

/// The late-duplicate check (issue 25 item 2), the defaults. A driver cut off from the bus
/// queues its readings on disk and replays them when the link returns, each with its message
/// id; one whose ack was lost before the cut may already be in the stream, and when it comes
/// back after the stream's duplicate window (2 min) the stream stores it again with a new
/// `ingested_at`, which the four-column unique index did not catch (since migration 0020 each
/// day's partition has the three-column key, which catches a copy on the same day, not one on
/// a later day). So a commit also refuses a
/// row whose `(driver_instance, source_epoch, source_seq)` is already stored with an earlier
/// `ingested_at` at or after `observed_at − LATE_DUPLICATE_LOOKBACK_MS`, but checks only rows
/// that arrived late: `ingested_at − observed_at` above `LATE_DUPLICATE_AFTER_MS`. A copy the
/// window let through arrived more than the window after its first copy, which arrived after
/// the observation was made, so every such copy is late by more than the window minus how far
/// the device's clock runs ahead of the bus's: half the default window leaves a minute for
/// that. The lookback is the core's `observed_future_max_ms` default: a first copy is stored
/// at most that long before its `observed_at`. Fresh rows (nearly all) pay nothing; a late one
/// costs one probe of the unique index per daily partition in its lookback range. A row the
/// check refuses is reported as not inserted, as a unique-index conflict is: no transition, no
/// projection update, no derived reading. A compacted day's rows are probed too (a cut-off can
/// outlast the compaction age).
pub const LATE_DUPLICATE_AFTER_MS: i64 = 60_000;
/// See [`LATE_DUPLICATE_AFTER_MS`].
pub const LATE_DUPLICATE_LOOKBACK_MS: i64 = 300_000;

/// The highest epoch a store records (PostgreSQL's `core_epoch.epoch` is an `integer`), so
/// [`Store::raise_epoch`] refuses a floor above it: a driver's word cannot make the next
/// acquisition overflow.
pub const EPOCH_MAX: u32 = i32::MAX as u32 - 1;

/// [`Store::record_cold_start`]'s refusal of a start identity outside
/// `1..=`[`sentinel_core::wire::CORE_START_MAX`] (issue 25 item 3), checked before anything is
/// written.
pub fn check_core_start(core_start: Option<u64>) -> Result<(), StoreError> {
    match core_start {
        Some(token) if !(1..=sentinel_core::wire::CORE_START_MAX).contains(&token) => {
            Err(core_start_out_of_range(token))
        }
        _ => Ok(()),
    }
}

/// The refusal [`check_core_start`] returns.
pub fn core_start_out_of_range(core_start: u64) -> StoreError {
    StoreError::Other(format!(
        "start identity {core_start} is outside 1..={}",
        sentinel_core::wire::CORE_START_MAX
    ))
}

/// [`Store::raise_epoch`]'s refusal of a floor above [`EPOCH_MAX`].
pub fn epoch_floor_too_high(floor: u32) -> StoreError {
    StoreError::Other(format!(
        "epoch floor {floor} is above the highest epoch a store records ({EPOCH_MAX})"
    ))
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another session holds the single-writer lock.
    #[error("the single-writer lock is held by another core")]
    LockHeld,
    /// The write's (epoch, start identity) is not the holder's: a newer core has taken over,
    /// or another start took the same epoch after a failover that lost the increment (issue
    /// 25 item 3). `start` is the writing handle's identity, `current_start` the holder's
    /// (`None`: none recorded, e.g. a handle that never acquired, or a database not acquired
    /// since migration 0013).
    #[error(
        "fenced: epoch {epoch} start {} is not the holder (epoch {current} start {})",
        show_start(.start),
        show_start(.current_start)
    )]
    Fenced {
        epoch: u32,
        current: u32,
        start: Option<u64>,
        current_start: Option<u64>,
    },
    #[error("database schema version {found} is newer than this binary's {supported}")]
    SchemaFromFuture { found: i64, supported: i64 },
    /// Compaction refused a day the stream may still redeliver a message of (issue 24 item 1;
    /// [`compaction::check_compaction`]): not a failure, the day waits until the stream has
    /// moved past it. `day` is the day's UTC midnight, `oldest` the `ingested_at` of the
    /// stream's oldest message.
    #[error(
        "compaction refused: day {} may still be in the stream (its oldest message was ingested at {})",
        compaction::day_name(*.day),
        .oldest.to_rfc3339()
    )]
    StreamHoldsDay { day: Micros, oldest: Micros },
    #[error("store: {0}")]
    Other(String),
}

/// A start identity in a [`StoreError::Fenced`] message: the number, or `none`.
fn show_start(start: &Option<u64>) -> String {
    start.map_or_else(|| "none".to_owned(), |s| s.to_string())
}

/// A failed commit names its batch so the core can tell which one.
#[derive(Debug, thiserror::Error)]
#[error("commit of batch {batch:?} failed: {source}")]
pub struct CommitError {
    pub batch: BatchId,
    pub source: StoreError,
}

/// Holding the single-writer lock. Dropping it releases the lock.
pub trait Lease: Send + 'static {
    /// The epoch this acquisition incremented to.
    fn epoch(&self) -> u32;
    /// This acquisition's start identity (issue 25 item 3): taken by the store from its clock
    /// ([`crate::clock::Clock::start_token`]) and recorded with the epoch, so the store fences
    /// every write of the acquiring handle on both; the runtime hands it to the core
    /// (`Core::set_core_start`). Within `1..=`[`sentinel_core::wire::CORE_START_MAX`].
    fn core_start(&self) -> u64;
    /// Checks the lock is still held by this session.
    fn alive(&mut self) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A store handle: cheap to clone; commits from clones may run concurrently.
pub trait Store: Clone + Send + Sync + 'static {
    type Lease: Lease;

    /// Takes the single-writer lock (or fails with `LockHeld` at once), then increments and
    /// reads the core epoch, takes a start identity ([`Lease::core_start`]) and records both as
    /// the holder's and the acquisition (a [`ColdStart`] without steps). From then on every
    /// fenced write of this handle and its clones carries that identity: a write is refused
    /// ([`StoreError::Fenced`]) unless its epoch AND this handle's identity are the holder's.
    /// A handle that never acquired writes nothing fenced.
    fn acquire(&self) -> impl Future<Output = Result<Self::Lease, StoreError>> + Send;

    /// Stores a registry snapshot; identical content creates no new version.
    fn store_registry(
        &self,
        snapshot: &RegistrySnapshot,
    ) -> impl Future<Output = Result<RegistryLoad, StoreError>> + Send;

    /// Loads a registry version (`None`: the newest). `Ok(None)` when nothing was ever loaded.
    fn load_registry(
        &self,
        version: Option<i32>,
    ) -> impl Future<Output = Result<Option<StoredRegistry>, StoreError>> + Send;

    /// The checkpoint and the per-point log heads for these points, each read from its own
    /// class table (restart steps 2–3).
    fn load_state(
        &self,
        points: &[(String, RetentionClass)],
    ) -> impl Future<Output = Result<RestoredState, StoreError>> + Send;

    /// Restart step 5: for each request, its point's rows in its class table with
    /// `observed_at >= since`, newest first and at most `rows_max_per_point` of them (the
    /// lookback is bounded twice: by time and by rows). One query per class table, however
    /// many points are asked about, so the number of queries does not grow with the number of
    /// derived points. Rows come back in no particular order across points.
    fn load_windows(
        &self,
        requests: &[sentinel_core::derived::WindowRequest],
        rows_max_per_point: usize,
    ) -> impl Future<Output = Result<Vec<sentinel_core::derived::WindowRow>, StoreError>> + Send;

    /// Commits a batch in one transaction fenced on `batch.epoch`, with the semantics of
    /// `ON CONFLICT DO NOTHING`, and reports the RETURNING set: exactly the rows and entries
    /// this commit inserted.
    fn commit(&self, batch: Batch) -> impl Future<Output = Result<CommitReport, CommitError>> + Send;

    /// Upserts point states, fenced on `epoch`.
    fn checkpoint(
        &self,
        epoch: u32,
        states: Vec<PointState>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Writes control events in one transaction fenced on `epoch`; returns the `seq` the log
    /// gave each, in order. Every event carries `epoch` as its `core_epoch`.
    fn write_control_events(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// Writes `events` and upserts the `point_desired` rows `desired` (one per point) in one
    /// transaction fenced on `epoch` (issue 21 item 2: a claim's control event and the row it
    /// produces commit together or not at all). Each row records `epoch` and the `seq` of the
    /// write's last event. Returns the events' seqs, in order. At most
    /// [`records::POINT_DESIRED_PER_WRITE_MAX`] rows and
    /// [`sentinel_core::control::CONTROL_EVENTS_PER_WRITE_MAX`] events.
    fn write_arbitration(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Vec<sentinel_core::arbitration::DesiredRow>,
    ) -> impl Future<Output = Result<Vec<i64>, StoreError>> + Send;

    /// Every `point_desired` row, ordered by point id, at most
    /// [`records::POINT_DESIRED_LOAD_MAX`] (restart: the desired values as last written).
    fn load_point_desired(&self) -> impl Future<Output = Result<Vec<StoredDesired>, StoreError>> + Send;

    /// The epoch recorded now (the newest acquisition's): how a core checks a driver's
    /// `stale_epoch` answer (issue 21 item 4) against the store rather than the driver's word.
    fn recorded_epoch(&self) -> impl Future<Output = Result<u32, StoreError>> + Send;

    /// Raises the recorded epoch to `floor` (issue 25 item 3: a driver has seen an epoch
    /// this store no longer records, after a failover that lost the last commits), fenced on
    /// `epoch` like every write: refused with [`StoreError::Fenced`] when `epoch` is not the
    /// recorded one. Returns the epoch recorded afterwards (`floor`, or `epoch` when `floor`
    /// is not above it). Once it is raised, every later write fenced on `epoch` is refused:
    /// the caller stops, and the next acquisition takes `floor + 1`. A `floor` beyond
    /// [`EPOCH_MAX`] is refused.
    fn raise_epoch(&self, epoch: u32, floor: u32) -> impl Future<Output = Result<u32, StoreError>> + Send;

    /// The outbox at restart (issue 21 item 3): for each `point_desired` row, in point order and
    /// at most [`records::POINT_DESIRED_LOAD_MAX`], its point's newest `command_issued` event,
    /// when no `command_result` for that command id follows it: a command committed and
    /// perhaps never published (the core died between the two). The core decides which still
    /// win and re-sends those with the same id.
    fn load_unanswered_commands(
        &self,
    ) -> impl Future<Output = Result<Vec<StoredControlEvent>, StoreError>> + Send;

    /// Restart step 4, the open verifications (issue 21 items 5 and 6): for each
    /// `point_desired` row, in point order and at most [`records::POINT_DESIRED_LOAD_MAX`], its
    /// point's newest `command_issued` when a `command_result` with outcome `applied` for that
    /// command id follows it and no `command_verified` or `command_diverged` for that id follows
    /// the result. A few index probes per writable point however long the log (migration 0010).
    fn load_open_verifications(
        &self,
    ) -> impl Future<Output = Result<Vec<sentinel_core::OpenVerification>, StoreError>> + Send;

    /// Restart step 4, the control log's heads (issue 21 item 6): for each of `point_ids` that
    /// has any control event, the seq of its newest, in the order given (at most
    /// [`records::POINT_DESIRED_LOAD_MAX`] points). One index probe per point (migration 0010),
    /// so the replay costs the same for a log of a thousand events or a billion.
    fn load_control_heads(
        &self,
        point_ids: Vec<String>,
    ) -> impl Future<Output = Result<Vec<(String, i64)>, StoreError>> + Send;

    /// Control events with `seq > after_seq`, ascending, at most `limit` (restart step 4).
    fn load_control_events(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredControlEvent>, StoreError>> + Send;

    /// Records how long each startup step of the acquisition that took `epoch` ran, and the
    /// start identity its core announced (`None`: a start that announces nothing), fenced on
    /// `epoch` like every other write. An identity outside `1..=CORE_START_MAX` is refused
    /// ([`core_start_out_of_range`]).
    fn record_cold_start(
        &self,
        epoch: u32,
        core_start: Option<u64>,
        steps: Vec<StartupStep>,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Recomputes both rollups over `[from, to)`, each rounded outward to its own bucket
    /// boundaries, from the raw rows, fenced on `epoch` (`sentinel rollup refresh`, reprocess).
    /// Idempotent; moves no watermark. At most 400 days.
    fn refresh_rollups(
        &self,
        epoch: u32,
        from: Micros,
        to: Micros,
    ) -> impl Future<Output = Result<RollupRefresh, StoreError>> + Send;

    /// One bounded step of the running core's refresh of closed buckets: claims up to
    /// `closed_before` (at most `limits.step_minutes_max` past the watermark) and the waiting
    /// invalidations, recomputes them, and moves the watermark, fenced on `epoch`. A step
    /// interrupted between its claim and its apply is finished by the next one. The first step
    /// ever only starts the watermark at `closed_before`.
    fn refresh_closed_rollups(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> impl Future<Output = Result<RollupStep, StoreError>> + Send;

    /// The refresh watermark; `None` before the first step.
    fn rollup_watermark(&self) -> impl Future<Output = Result<Option<RollupWatermark>, StoreError>> + Send;

    /// Rollup rows of `grain` with `bucket` in `[from, to)`, ordered by `(point_id, bucket)`, at
    /// most [`ROLLUPS_LOAD_MAX`]; only `point_id`'s when given.
    fn load_rollups(
        &self,
        grain: RollupGrain,
        from: Micros,
        to: Micros,
        point_id: Option<&str>,
    ) -> impl Future<Output = Result<Vec<RollupRow>, StoreError>> + Send;

    // --- Reprocess (issue 9 item 3) -----------------------------------------------------
    // `PgStore` and `MemoryStore` implement all four, checked by the conformance suite; the
    // simulator's `SimStore` delegates to the model.

    /// Per class table holding any of `points`: the rows of those points observed in
    /// `[from, to)` (no upper bound when `to` is `None`), their versions and extent, and the
    /// table's oldest partition. One entry per class named in `points`, in class order.
    fn reprocess_extent(
        &self,
        points: &[(String, RetentionClass)],
        from: Micros,
        to: Option<Micros>,
    ) -> impl Future<Output = Result<Vec<ClassExtent>, StoreError>> + Send;

    /// One page of the rows of `point` in `class`'s table observed in `[from, to)`, ordered by
    /// `(observed_at, ingested_at, key)`, strictly after `after` (a row of the same point) in
    /// that order, at most `limit` (capped at [`REPROCESS_ROWS_LOAD_MAX`]). One point per call,
    /// so each page is an index range scan of `(point_id, observed_at)`, never a sort of the
    /// whole scope.
    fn load_reprocess_rows(
        &self,
        class: RetentionClass,
        point: &str,
        from: Micros,
        to: Option<Micros>,
        after: Option<&StoredObservation>,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredObservation>, StoreError>> + Send;

    /// Writes one chunk of recomputed rows of `class`'s table in one transaction fenced on
    /// `epoch`: only the canonical columns, quality, reason and version, and `native_text`
    /// where it is NULL (see `sentinel_core::reprocess`). Returns the rows updated.
    fn apply_reprocess(
        &self,
        epoch: u32,
        class: RetentionClass,
        updates: Vec<RowUpdate>,
    ) -> impl Future<Output = Result<u64, StoreError>> + Send;

    /// Writes the run's one `reprocess` control event (no point: `point_id` NULL), fenced on
    /// `epoch`. Returns its `seq`.
    fn write_reprocess_event(
        &self,
        epoch: u32,
        occurred_at: Micros,
        principal: &str,
        record: &ReprocessRecord,
    ) -> impl Future<Output = Result<i64, StoreError>> + Send;

    // --- Retention (issue 9 item 2) -----------------------------------------------------
    // `PgStore` and `MemoryStore` implement every one, checked by the conformance suite; the
    // simulator's `SimStore` delegates to the model.

    /// The existing partitions that end at or before their table's cut-off, oldest first
    /// (ordered by `(from, table)`), at most `limit` (itself at most
    /// [`EXPIRED_PARTITIONS_LIST_MAX`]). Reads only: `sentinel retention --dry-run`.
    fn expired_partitions(
        &self,
        cutoffs: RetentionCutoffs,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<Partition>, StoreError>> + Send;

    /// Drops the expired partitions ([`Store::expired_partitions`]), at most `partitions_max`,
    /// oldest first, each in its own transaction fenced on `epoch` that also moves the table's
    /// retention mark (rollup refreshes never recompute below a raw table's mark; partitions
    /// are never created again below a mark) and writes a `retention_drop` control event
    /// (`principal`, `occurred_at`, payload: table, class, day). Never a row DELETE.
    fn drop_expired(
        &self,
        epoch: u32,
        cutoffs: RetentionCutoffs,
        partitions_max: u32,
        principal: &str,
        occurred_at: Micros,
    ) -> impl Future<Output = Result<RetentionRun, StoreError>> + Send;

    /// Each table's retention mark: the first instant it still keeps after its drops (`None`:
    /// nothing dropped yet), in [`RetainedTable::ALL`] order.
    fn retention_marks(&self) -> impl Future<Output = Result<[Option<Micros>; 5], StoreError>> + Send;

    /// How far ahead daily partitions exist (issue 26, "partitions created ahead"): the end of
    /// the newest daily partition of the raw class table that has the earliest such end, i.e.
    /// every raw class table has a partition reaching at least this far. `None` while some raw
    /// class table has no partition. A core creates them at startup (yesterday through three
    /// days ahead) and on demand for a batch's days; the exporter shows the gap to the clock.
    /// Reads only.
    fn partitions_created_until(&self) -> impl Future<Output = Result<Option<Micros>, StoreError>> + Send;

    /// Makes the daily partitions of every raw class table (and the rollups') from the day
    /// before `today`'s UTC day through `today + days_ahead` (at most 30), in one transaction
    /// of its own whose lock waits end after `lock_timeout_ms` (then
    /// [`PartitionsAhead::LockTimedOut`], not an error: the running core retries later). Never
    /// on the commit path; never below a table's retention mark. Idempotent. A running core
    /// calls it periodically (issue 26, "partitions created ahead").
    fn ensure_partitions_ahead(
        &self,
        today: Micros,
        days_ahead: u32,
        lock_timeout_ms: u32,
    ) -> impl Future<Output = Result<PartitionsAhead, StoreError>> + Send;

    // --- Compaction (issue 24 items 1 and 2) ---------------------------------------------

    /// Compacts one closed day of `request.class`'s table (its hot rows, and any chunks the day
    /// holds already) into the store's compacted form, in one transaction fenced on `epoch`
    /// (and the handle's start identity), with one `compaction` control event (principal,
    /// `occurred_at` = `request.now`; payload class, day, rows, chunks, bytes before and
    /// after). Refused before anything is written ([`compaction::check_compaction`]): a day
    /// not closed, younger than `compact_after_days`, or that the stream may still hold a
    /// message of. Idempotent: a day with no hot rows writes nothing. Every read of the
    /// class's rows (history, log heads, windows, rollups, reprocess, class moves) sees
    /// compacted rows exactly as it saw them hot.
    ///
    /// In the same transaction, after the class's rows, the day's minute rollups (by bucket)
    /// are compacted too ([`compaction::RollupCompaction`], a second `compaction` event with
    /// payload table `rollup_1m`, day, buckets, chunks, bytes before and after, when the day
    /// held hot minute rollups): every rollup read answers as before, a later recompute of a
    /// compacted minute (a late row, reprocess, a class move) takes over that minute, and the
    /// next compaction of the day merges it back.
    fn compact_day(
        &self,
        epoch: u32,
        request: CompactionRequest<'_>,
    ) -> impl Future<Output = Result<Compaction, StoreError>> + Send;

    /// Compacts one closed day's minute rollups alone, at their own age (issue 24, disk: the
    /// hot week's minute rollups), as `compact_day` compacts them after a class's rows: in one
    /// transaction fenced on `epoch` (and the handle's start identity), with one `compaction`
    /// control event (payload table `rollup_1m`) when the day held hot minute rollups.
    /// Refused before anything is written ([`compaction::check_rollup_compaction`]): a day not
    /// closed or younger than `compact_after_days`; no stream rule. Idempotent: a day with no
    /// hot minute rollup writes nothing. The day's raw rows are untouched.
    fn compact_rollup_day(
        &self,
        epoch: u32,
        request: RollupCompactionRequest<'_>,
    ) -> impl Future<Output = Result<RollupCompaction, StoreError>> + Send;

    // --- Class changes (issue 9 item 4) -------------------------------------------------

    /// Moves every row of `point_id` held by another class table into `to`'s, in one
    /// transaction fenced on `epoch`, recomputes both rollups over the moved rows' range
    /// (from the newest registry version, which must already name the new class) and writes a
    /// `class_moved` control event. Idempotent: nothing to move writes nothing.
    fn move_point_class(
        &self,
        epoch: u32,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> impl Future<Output = Result<ClassMove, StoreError>> + Send;

    // --- History (issue 9 item 6) -------------------------------------------------------

    /// `point_id`'s rows in `class`'s table with `observed_at` in `[from, to)`, ordered by
    /// `(observed_at, ingested_at)`, at most `limit` (itself at most [`HISTORY_ROWS_MAX`]).
    /// Reads only.
    fn load_history(
        &self,
        point_id: &str,
        class: RetentionClass,
        from: Micros,
        to: Micros,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<HistoryRow>, StoreError>> + Send;
}
