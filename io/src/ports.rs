//! The ports: what the runtime needs from a bus and a store (DESIGN.md §1, "Ports and runtime").
//!
//! Owns: the `Bus`, `Consumer`, `Store` and `Lease` traits and their error types. Each has a
//! production adapter (NATS JetStream, PostgreSQL) and an in-memory reference model with the
//! same semantics; the conformance suite in `tests/` runs the same bodies against both.

use std::future::Future;

use bytes::Bytes;
use sentinel_core::reprocess::{ReprocessRecord, RowUpdate, StoredObservation};
use sentinel_core::wire::DriverHello;
use sentinel_core::{
    Batch, BatchId, CommandRequest, CommitReport, ControlEvent, Delivery, DeliveryTag, Input, Micros,
    PointState, RegistrySnapshot, RestoredState, RetentionClass,
};
use tokio::sync::mpsc;

/// The bus's errors are the driver library's: both sides of the bus speak the same ones.
pub use sentinel_driver::BusError;

/// Consumer lag, read from the durable consumer itself (core runtime spec, "Backpressure").
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Lag {
    /// Messages not yet delivered.
    pub pending: u64,
    /// Delivered and not yet acked.
    pub ack_pending: u64,
    /// Age of the oldest unacked message in ms, if any is unacked or pending.
    pub oldest_unacked_age_ms: Option<u64>,
    /// The oldest message still in the stream (under WorkQueue retention: not yet acked),
    /// `None` when the stream is empty.
    pub first_seq: Option<u64>,
    /// The last sequence the stream ever stored (0 before the first message).
    pub last_seq: u64,
}

/// What reaches the core on plain subjects rather than through the stream: a request made
/// while no core runs is not queued for a later one, and a hello is about now.
#[derive(Clone, Debug, PartialEq)]
pub enum Inbound {
    /// On [`sentinel_core::wire::COMMAND_REQUEST_SUBJECT`].
    CommandRequest(CommandRequest),
    /// On `drv.<host>.<driver_instance>` (restart step 7).
    DriverHello { host: String, hello: DriverHello },
    /// On [`sentinel_core::wire::REPROCESS_REQUEST_SUBJECT`], with the reply subject the
    /// answer goes to (a request without one cannot be answered and is dropped).
    ReprocessRequest {
        ask: sentinel_core::reprocess_request::ReprocessAsk,
        reply_to: String,
    },
}

impl Inbound {
    /// Decodes a message from one of the core's inbound subjects. The error says why in a
    /// fixed phrase, never with the payload's content (a request may carry a value).
    pub fn decode(subject: &str, payload: &[u8]) -> Result<Inbound, &'static str> {
        if subject == sentinel_core::wire::COMMAND_REQUEST_SUBJECT {
            return serde_json::from_slice(payload)
                .map(Inbound::CommandRequest)
                .map_err(|_| "not a command request");
        }
        if subject == sentinel_core::wire::REPROCESS_REQUEST_SUBJECT {
            return Err("a reprocess request needs its reply subject (Inbound::decode_request)");
        }
        let Some((host, instance)) = sentinel_core::wire::parse_driver_subject(subject) else {
            return Err("not an inbound subject");
        };
        let hello: DriverHello = serde_json::from_slice(payload).map_err(|_| "not a driver hello")?;
        // Bus permissions confine a host to its own `drv.<host>.>`, so the hello must name the
        // subject's instance.
        if hello.driver_instance != instance {
            return Err("the hello names another driver instance than its subject");
        }
        Ok(Inbound::DriverHello {
            host: host.to_owned(),
            hello,
        })
    }
}

impl Inbound {
    /// Decodes a reprocess request; `reply` is the message's reply subject.
    pub fn decode_reprocess(payload: &[u8], reply: Option<&str>) -> Result<Inbound, &'static str> {
        let reply_to = reply.ok_or("a reprocess request without a reply subject")?;
        let ask = serde_json::from_slice(payload).map_err(|_| "not a reprocess request")?;
        Ok(Inbound::ReprocessRequest {
            ask,
            reply_to: reply_to.to_owned(),
        })
    }
}

impl From<Inbound> for Input {
    fn from(inbound: Inbound) -> Input {
        match inbound {
            Inbound::CommandRequest(request) => Input::CommandRequested(request),
            Inbound::DriverHello { host, hello } => Input::DriverHello { host, hello },
            Inbound::ReprocessRequest { ask, reply_to } => Input::ReprocessRequested { ask, reply_to },
        }
    }
}

/// Inbound messages decoded but not yet taken by the runtime; beyond this the subscription
/// waits (NATS then drops for a slow consumer, which is what a plain subject means).
pub const INBOUND_QUEUED_MAX: usize = 1_000;

/// A bus handle: cheap to clone, shared by the fetcher and the effect executor.
pub trait Bus: Clone + Send + Sync + 'static {
    type Consumer: Consumer;

    /// Binds the durable consumer on `obs.>`. Must only be called while holding the lock.
    fn bind(&self) -> impl Future<Output = Result<Self::Consumer, BusError>> + Send;

    /// Acks deliveries previously returned by this bus's consumer. Unknown tags are ignored.
    fn ack(&self, tags: Vec<DeliveryTag>) -> impl Future<Output = Result<(), BusError>> + Send;

    /// Publishes a core-side message (transitions on `state.<point_id>`), not through the stream.
    fn publish(&self, subject: String, payload: Bytes) -> impl Future<Output = Result<(), BusError>> + Send;

    /// Publishes an observation into the stream with its message id, as a driver does, and
    /// waits for the stream to accept it (the core's self-points). A full stream is
    /// [`BusError::StreamFull`].
    fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
    ) -> impl Future<Output = Result<crate::bus::PublishAck, BusError>> + Send;

    fn lag(&self) -> impl Future<Output = Result<Lag, BusError>> + Send;

    /// Subscribes to command requests and driver hellos ([`Inbound`]), decoded. Must only be
    /// called while holding the lock. What cannot be decoded is dropped with a warning that
    /// names its subject and size, never its content.
    fn inbound(&self) -> impl Future<Output = Result<mpsc::Receiver<Inbound>, BusError>> + Send;
}

pub trait Consumer: Send + 'static {
    /// Returns up to `max` deliveries, waiting at most `wait_ms` for the first; may return none.
    fn fetch(
        &mut self,
        max: usize,
        wait_ms: u64,
    ) -> impl Future<Output = Result<Vec<Delivery>, BusError>> + Send;
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another session holds the single-writer lock.
    #[error("the single-writer lock is held by another core")]
    LockHeld,
    /// The write's epoch is no longer current: a newer core has taken over.
    #[error("epoch {epoch} is stale; the current epoch is {current}")]
    Fenced { epoch: u32, current: u32 },
    #[error("database schema version {found} is newer than this binary's {supported}")]
    SchemaFromFuture { found: i64, supported: i64 },
    #[error("store: {0}")]
    Other(String),
}

/// A failed commit names its batch so the core can tell which one.
#[derive(Debug, thiserror::Error)]
#[error("commit of batch {batch:?} failed: {source}")]
pub struct CommitError {
    pub batch: BatchId,
    pub source: StoreError,
}

/// The registry as stored: one version's descriptors as canonical JSON.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredRegistry {
    pub version: i32,
    pub git_sha: String,
    pub content_hash: String,
    /// `(point_id, canonical descriptor JSON)`, sorted by point id.
    pub descriptors: Vec<(String, String)>,
}

/// The result of storing a registry snapshot.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RegistryLoad {
    pub version: i32,
    /// False when identical content was already stored (no new version).
    pub created: bool,
}

/// How long one startup step took (core runtime spec, exit criteria: "Cold-start duration, per
/// startup step").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupStep {
    pub step: String,
    pub duration_us: u64,
}

/// One acquisition of the single-writer lock and the cold start that followed it, as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColdStart {
    pub epoch: u32,
    /// When the lock was acquired.
    pub started_at: Micros,
    /// The lock session: its backend pid (the memory model's session id) and application name.
    pub backend_pid: i64,
    pub application_name: String,
    /// When the timings were recorded; `None` for a start that failed after taking the lock.
    pub ready_at: Option<Micros>,
    /// In the order the steps ran; empty until recorded.
    pub steps: Vec<StartupStep>,
}

/// The application name of the lock session once `epoch` is acquired, so an operator looking at
/// `pg_stat_activity` or `sentinel status` can tell which core holds the lock.
pub fn lock_session_name(epoch: u32) -> String {
    format!("{LOCK_SESSION_NAME_PREFIX}{epoch}")
}

/// What [`lock_session_name`] puts before the epoch (the PostgreSQL adapter appends it in SQL).
pub const LOCK_SESSION_NAME_PREFIX: &str = "sentinel-core epoch ";

/// The lock session's application name before it has taken the lock and learned its epoch.
pub const LOCK_SESSION_NAME_UNLOCKED: &str = "sentinel-core";

/// One row of `control_event`, as stored (ingest spec, "Two logs").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredControlEvent {
    pub seq: i64,
    pub occurred_at: Micros,
    pub kind: String,
    pub point_id: Option<String>,
    pub principal: String,
    pub core_epoch: u32,
    /// The payload as JSON text.
    pub payload: String,
    pub registry_version: i32,
}

/// Most control events one [`Store::load_control_events`] call returns (one page; restart
/// step 4 reads page after page to the end of the log).
pub const CONTROL_EVENTS_LOAD_MAX: usize = 100_000;

/// A rollup's bucket width (ingest spec, "Retention and rollups"; DESIGN.md §3). Both are
/// computed directly from the raw class tables, never one from the other.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RollupGrain {
    Minute,
    Hour,
}

impl RollupGrain {
    pub const ALL: [RollupGrain; 2] = [RollupGrain::Minute, RollupGrain::Hour];

    pub fn width_us(self) -> i64 {
        match self {
            RollupGrain::Minute => 60 * sentinel_core::time::US_PER_S,
            RollupGrain::Hour => 3_600 * sentinel_core::time::US_PER_S,
        }
    }

    /// The start of the bucket holding `at` (UTC, from the Unix epoch).
    pub fn floor(self, at: Micros) -> Micros {
        Micros(at.0.div_euclid(self.width_us()) * self.width_us())
    }

    /// The smallest bucket boundary at or after `at`.
    pub fn ceil(self, at: Micros) -> Micros {
        let floor = self.floor(at);
        if floor == at {
            at
        } else {
            Micros(floor.0 + self.width_us())
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RollupGrain::Minute => "1m",
            RollupGrain::Hour => "1h",
        }
    }
}

/// One rollup bucket of one point, as stored. `sum`, `min` and `max` are over the live rows'
/// canonical numbers and are `None` for a point that is not `agg_safe` (or has no live number);
/// there is no average: a reader divides `sum` by `live_count`.
#[derive(Clone, Debug, PartialEq)]
pub struct RollupRow {
    pub point_id: String,
    pub bucket: Micros,
    pub class: RetentionClass,
    pub count: u64,
    pub live_count: u64,
    pub sum: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

/// What an on-demand refresh did: each grain's range, rounded outward to its buckets, and the
/// buckets (point × bucket) it wrote.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupRefresh {
    pub minute_range: (Micros, Micros),
    pub minute_buckets: u64,
    pub hour_range: (Micros, Micros),
    pub hour_buckets: u64,
}

/// The refresh watermark (migrations/0004_rollups.sql): every minute bucket in
/// `[refreshed_from, refreshed_to)`, and every hour bucket there that ends by `refreshed_to`,
/// has been computed, and a row committed since with `observed_at` below `claimed_to` left an
/// invalidation that the next step recomputes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupWatermark {
    pub refreshed_from: Micros,
    pub refreshed_to: Micros,
    pub claimed_to: Micros,
}

/// Bounds of one step of the running core's refresh of closed buckets.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupStepLimits {
    /// How far past the watermark one step may go (1..=1440).
    pub step_minutes_max: u32,
    /// Most invalidations (late rows' minutes) one step recomputes (1..=100,000).
    pub invalidations_max: u32,
}

/// What one step did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RollupStep {
    pub watermark: RollupWatermark,
    pub minutes_advanced: u32,
    pub invalidated_minutes: u32,
    pub buckets_written: u64,
    /// Invalidations are already waiting for another step.
    pub more: bool,
}

/// Most rollup rows one [`Store::load_rollups`] call returns.
pub const ROLLUPS_LOAD_MAX: usize = 1_000_000;

// reprocess

/// One class table's share of a reprocess scope (ingest spec, "Reprocess"): the rows of the
/// scope's points observed in the range, and what the refusal needs to know of the table.
#[derive(Clone, Debug, PartialEq)]
pub struct ClassExtent {
    pub class: RetentionClass,
    pub rows: u64,
    pub observed_min: Option<Micros>,
    pub observed_max: Option<Micros>,
    /// The distinct `registry_version`s of those rows, ascending.
    pub versions: Vec<i32>,
    /// The start of the table's oldest daily partition (the model keeps the same partitions);
    /// `None` when it has none.
    pub oldest_partition: Option<Micros>,
}

/// Most rows one [`Store::load_reprocess_rows`] call returns.
pub const REPROCESS_ROWS_LOAD_MAX: usize = 100_000;
// ---------------------------------------------------------------------------------------------
// Retention (issue 9 item 2; migrations/0005_retention.sql): whole partitions only.

pub use sentinel_core::retention::RetentionCutoffs;

/// A table retention drops partitions of: a raw class table (daily partitions on
/// `ingested_at`), `rollup_1m` (daily on `bucket`) or `rollup_1h` (monthly on `bucket`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RetainedTable {
    Raw(RetentionClass),
    Rollup(RollupGrain),
}

impl RetainedTable {
    pub const ALL: [RetainedTable; 5] = [
        RetainedTable::Raw(RetentionClass::Measurement),
        RetainedTable::Raw(RetentionClass::State),
        RetainedTable::Raw(RetentionClass::Diagnostic),
        RetainedTable::Rollup(RollupGrain::Minute),
        RetainedTable::Rollup(RollupGrain::Hour),
    ];

    /// The `table` of a `retention_drop` event's payload: `raw` (with its class beside it),
    /// `rollup_1m` or `rollup_1h`. Only the PostgreSQL adapter knows the physical names.
    pub fn kind_str(self) -> &'static str {
        match self {
            RetainedTable::Raw(_) => "raw",
            RetainedTable::Rollup(RollupGrain::Minute) => "rollup_1m",
            RetainedTable::Rollup(RollupGrain::Hour) => "rollup_1h",
        }
    }

    /// How an operator reads it: `raw measurement`, `rollup_1m`, …
    pub fn label(self) -> String {
        match self {
            RetainedTable::Raw(class) => format!("raw {}", class.as_str()),
            RetainedTable::Rollup(grain) => format!("rollup_{}", grain.as_str()),
        }
    }

    pub fn class(self) -> Option<RetentionClass> {
        match self {
            RetainedTable::Raw(class) => Some(class),
            RetainedTable::Rollup(_) => None,
        }
    }

    /// The first instant this table keeps under `cutoffs`.
    pub fn kept_from(self, cutoffs: &RetentionCutoffs) -> Micros {
        match self {
            RetainedTable::Raw(class) => cutoffs.raw[class.index()],
            RetainedTable::Rollup(RollupGrain::Minute) => cutoffs.rollup_1m,
            RetainedTable::Rollup(RollupGrain::Hour) => cutoffs.rollup_1h,
        }
    }

    /// The partition holding `at`: its UTC day, or for `rollup_1h` its UTC month.
    pub fn partition_of(self, at: Micros) -> (Micros, Micros) {
        let day = Micros(at.0.div_euclid(US_PER_DAY) * US_PER_DAY);
        match self {
            RetainedTable::Rollup(RollupGrain::Hour) => month_of(at),
            _ => (day, Micros(day.0 + US_PER_DAY)),
        }
    }
}

use sentinel_core::time::US_PER_DAY;

/// The UTC month holding `at`, as `[first midnight, next month's first midnight)`.
pub fn month_of(at: Micros) -> (Micros, Micros) {
    // Civil-from-days (H. Hinnant), on whole days since 1970-01-01.
    let days = at.0.div_euclid(US_PER_DAY);
    let (y, m, d) = civil_from_days(days);
    let first = days - (d - 1);
    let (ny, nm) = if m == 12 { (y + 1, 1) } else { (y, m + 1) };
    let next = days_from_civil(ny, nm, 1);
    (Micros(first * US_PER_DAY), Micros(next * US_PER_DAY))
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// One partition: `[from, to)` of `table`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Partition {
    pub table: RetainedTable,
    pub from: Micros,
    pub to: Micros,
}

/// A partition a run dropped, and the `seq` of its `retention_drop` control event.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct DroppedPartition {
    pub partition: Partition,
    pub seq: i64,
}

/// What one retention run did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetentionRun {
    /// In the order dropped: oldest first.
    pub dropped: Vec<DroppedPartition>,
    /// Expired partitions are still waiting (the run stopped at its limit).
    pub more: bool,
}

/// Most partitions one [`Store::expired_partitions`] call lists.
pub const EXPIRED_PARTITIONS_LIST_MAX: usize = 10_000;

// ---------------------------------------------------------------------------------------------
// Class changes (issue 9 item 4; ingest spec exit criterion "Class routing").

/// What moving a point's history to another class table did.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ClassMove {
    /// Rows moved (0: the point was wholly in its class table already).
    pub rows: u64,
    /// The moved rows' `observed_at` range, inclusive; its rollups were recomputed over it,
    /// rounded outward.
    pub observed: Option<(Micros, Micros)>,
    /// The `class_moved` control event, when something moved.
    pub seq: Option<i64>,
}

// ---------------------------------------------------------------------------------------------
// History (issue 9 item 6: `sentinel history`).

/// One raw row as `sentinel history` shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct HistoryRow {
    pub observed_at: Micros,
    pub ingested_at: Micros,
    pub value: Option<sentinel_core::CanonicalValue>,
    pub quality: sentinel_core::Quality,
    pub reason: Option<String>,
}

/// Most rows one [`Store::load_history`] call returns.
pub const HISTORY_ROWS_MAX: usize = 100_000;

/// Holding the single-writer lock. Dropping it releases the lock.
pub trait Lease: Send + 'static {
    /// The epoch this acquisition incremented to.
    fn epoch(&self) -> u32;
    /// Checks the lock is still held by this session.
    fn alive(&mut self) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

/// A store handle: cheap to clone; commits from clones may run concurrently.
pub trait Store: Clone + Send + Sync + 'static {
    type Lease: Lease;

    /// Takes the single-writer lock (or fails with `LockHeld` at once), then increments and
    /// reads the core epoch and records the acquisition (a [`ColdStart`] without steps).
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

    /// Control events with `seq > after_seq`, ascending, at most `limit` (restart step 4).
    fn load_control_events(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> impl Future<Output = Result<Vec<StoredControlEvent>, StoreError>> + Send;

    /// Records how long each startup step of the acquisition that took `epoch` ran, fenced on
    /// `epoch` like every other write.
    fn record_cold_start(
        &self,
        epoch: u32,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inbound_messages_decode_by_subject() {
        let request = br#"{"command_id":"c","point_id":"p","value":1,"principal":"operator:x"}"#;
        assert!(matches!(
            Inbound::decode("sentinel.command.request", request),
            Ok(Inbound::CommandRequest(r)) if r.command_id == "c"
        ));
        let hello = br#"{"v":1,"driver_instance":"modbus-1","source_epoch":2,"highest_epoch_seen":5}"#;
        assert_eq!(
            Inbound::decode("drv.plant-a.modbus-1", hello),
            Ok(Inbound::DriverHello {
                host: "plant-a".into(),
                hello: DriverHello {
                    v: 1,
                    driver_instance: "modbus-1".into(),
                    source_epoch: 2,
                    highest_epoch_seen: 5,
                },
            })
        );
    }

    #[test]
    fn months_are_calendar_months_in_utc() {
        let at = |t: &str| Micros::parse_rfc3339(t).expect("instant");
        for (inside, first, next) in [
            (
                "2026-12-31T23:59:59Z",
                "2026-12-01T00:00:00Z",
                "2027-01-01T00:00:00Z",
            ),
            (
                "2028-02-29T12:00:00Z",
                "2028-02-01T00:00:00Z",
                "2028-03-01T00:00:00Z",
            ),
            (
                "2026-01-01T00:00:00Z",
                "2026-01-01T00:00:00Z",
                "2026-02-01T00:00:00Z",
            ),
            (
                "1969-12-15T00:00:00Z",
                "1969-12-01T00:00:00Z",
                "1970-01-01T00:00:00Z",
            ),
        ] {
            assert_eq!(month_of(at(inside)), (at(first), at(next)), "{inside}");
        }
        let day = RetainedTable::Raw(RetentionClass::State).partition_of(at("2026-06-01T13:00:00Z"));
        assert_eq!(day, (at("2026-06-01T00:00:00Z"), at("2026-06-02T00:00:00Z")));
    }

    #[test]
    fn each_refusal_says_why() {
        let request = br#"{"command_id":"c","point_id":"p","value":"v","principal":"operator:x"}"#;
        let hello = br#"{"v":1,"driver_instance":"modbus-1","source_epoch":2,"highest_epoch_seen":5}"#;
        let cases: [(&str, &[u8], &str); 4] = [
            ("sentinel.command.request", hello, "not a command request"),
            ("drv.plant-a.modbus-1", request, "not a driver hello"),
            (
                "drv.plant-a.other",
                hello,
                "the hello names another driver instance than its subject",
            ),
            ("drv.plant-a", hello, "not an inbound subject"),
        ];
        for (subject, payload, why) in cases {
            assert_eq!(Inbound::decode(subject, payload), Err(why), "{subject}");
        }
    }
}
