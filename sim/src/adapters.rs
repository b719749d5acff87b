//! The simulator's implementations of the ports (`sentinel_ports`): thin wrappers over
//! the in-memory bus and store models that put the faults in at the port (DESIGN.md §6) and
//! report every event the invariant checker needs.
//!
//! Owns, per core incarnation: the links check (a cut link fails the call as a dead
//! connection would), the port fault sites (crash before/after commit, crash after ack, lost
//! ack, slow commit), and the reporting of binds, acks, transitions, acquisitions and
//! commits to [`crate::checker::Checker`]. A crash request turns the incarnation into a zombie
//! whose every later port call hangs, so nothing it does after the crash point reaches the
//! models before the controller kills its host.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sentinel_core::reprocess::{ReprocessRecord, RowUpdate, StoredObservation};
use sentinel_core::{
    Batch, CommitReport, ControlDetail, ControlEvent, Delivery, DeliveryTag, Micros, PointState,
    RegistrySnapshot, RestoredState, RetentionClass,
};
use sentinel_models::MemoryConsumer;
use sentinel_models::{MemoryLease, MemoryStore};
use sentinel_ports::PublishAck;
use sentinel_ports::{
    Bus, BusError, ClassExtent, ClassMove, CommitError, Consumer, HistoryRow, INBOUND_QUEUED_MAX, Inbound,
    Lag, Lease, Partition, RegistryLoad, RetentionCutoffs, RetentionRun, RollupGrain, RollupRefresh,
    RollupRow, RollupStep, RollupStepLimits, RollupWatermark, StartupStep, Store, StoreError,
    StoredControlEvent, StoredRegistry,
};

use crate::checker::fence::Maintenance;
use crate::checker::quality::ControlFacts;
use crate::settings::Site;
use crate::world::{CoreId, Incarnation, World};

/// Hangs forever: the caller's process is about to be killed by the controller.
async fn hang<T>() -> T {
    std::future::pending::<T>().await
}

/// The key a self-point's message id carries: `<instance>:<epoch>:<seq>`.
fn self_point_key(msg_id: &str) -> Option<crate::checker::Key3> {
    let mut parts = msg_id.rsplitn(3, ':');
    let seq = parts.next()?.parse().ok()?;
    let epoch = parts.next()?.parse().ok()?;
    Some((std::sync::Arc::from(parts.next()?), epoch, seq))
}

/// The point and `observed_at` a self-point's payload carries.
fn self_point_observation(payload: &[u8]) -> Option<(Arc<str>, sentinel_core::Micros)> {
    #[derive(serde::Deserialize)]
    struct Wire<'a> {
        point_id: &'a str,
        observed_at: &'a str,
    }
    let wire: Wire<'_> = serde_json::from_slice(payload).ok()?;
    Some((
        Arc::from(wire.point_id),
        sentinel_core::Micros::parse_rfc3339(wire.observed_at)?,
    ))
}

/// The bus as one core incarnation sees it.
#[derive(Clone)]
pub struct SimBus {
    world: Arc<World>,
    incarnation: Arc<Incarnation>,
    /// Delivery tag → stream sequence, for checking acks. Shared with the consumer.
    tags: Arc<Mutex<BTreeMap<u64, u64>>>,
}

impl SimBus {
    pub fn new(world: Arc<World>, incarnation: Arc<Incarnation>) -> SimBus {
        SimBus {
            world,
            incarnation,
            tags: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// Every call of this incarnation's: a zombie's hangs; `action` (ack, publish, bind) is
    /// reported for invariant 15; a cut link fails it.
    async fn enter(&self, action: Option<&str>) -> Result<(), BusError> {
        self.alive(action).await;
        self.link()
    }

    async fn alive(&self, action: Option<&str>) {
        if self.world.is_dying(&self.incarnation) {
            return hang().await;
        }
        if let Some(what) = action {
            self.world.core_action(&self.incarnation, what);
        }
    }

    fn link(&self) -> Result<(), BusError> {
        if self.world.links(self.incarnation.core).bus_cut {
            return Err(BusError::Connection("partitioned from the bus".into()));
        }
        Ok(())
    }
}

/// What the bus answers while the stream is between leaders (the `stream_leader_change`
/// site): async-nats reports "no responders" or a timeout.
const NO_LEADER: &str = "no stream leader (election in progress): no responders";

pub struct SimConsumer {
    inner: MemoryConsumer,
    bus: SimBus,
}

impl SimBus {
    /// To a driver: the bus carries it to the instance subscribed to the subject, late if this
    /// core's link to the drivers is slow; the driver answers on `reply_to`, if any.
    async fn to_driver(
        &self,
        subject: String,
        reply_to: Option<String>,
        payload: Bytes,
    ) -> Result<(), BusError> {
        self.enter(Some("publishes to a driver")).await?;
        let delay_ms = self.world.links(self.incarnation.core).driver_delay_ms;
        if delay_ms == 0 {
            self.world
                .deliver_to_driver(&subject, reply_to.as_deref(), &payload);
        } else {
            self.world.trace(format_args!(
                "{} {subject}: the bus holds it for {delay_ms} ms",
                self.incarnation.core.host()
            ));
            let world = self.world.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(delay_ms)).await;
                world.deliver_to_driver(&subject, reply_to.as_deref(), &payload);
            });
        }
        Ok(())
    }
}

impl Bus for SimBus {
    type Consumer = SimConsumer;

    async fn bind(&self) -> Result<SimConsumer, BusError> {
        self.enter(Some("binds the consumer")).await?;
        let holder = self.world.store.lock_holder();
        let session = self.incarnation.session();
        let now = self.world.now();
        {
            let mut inner = self.world.lock();
            // Invariant 7 is about a core that never took the lock. One that took it and has
            // since lost its session binds legitimately; its lock check stops it.
            if session.is_none() {
                inner.checker.fail(
                    7,
                    now,
                    format!(
                        "{} bound the consumer without ever taking the lock (holder {holder:?})",
                        self.incarnation.core.host()
                    ),
                );
            }
            inner.trace.event(
                now,
                format_args!(
                    "{} #{} binds the consumer",
                    self.incarnation.core.host(),
                    self.incarnation.number
                ),
            );
        }
        let inner = self.world.bus.bind().await?;
        Ok(SimConsumer {
            inner,
            bus: self.clone(),
        })
    }

    async fn ack(&self, tags: Vec<DeliveryTag>) -> Result<(), BusError> {
        self.enter(Some("acks")).await?;
        if self.world.leader_changing() {
            // Sent to a leader that is gone: lost, as plain acks are not confirmed.
            self.world.trace(format_args!(
                "{} acks {} tags into a stream leader election: lost",
                self.incarnation.core.host(),
                tags.len()
            ));
            return Ok(());
        }
        if self.world.fires(Site::LostAck) {
            self.world.trace(format_args!(
                "fault lost_ack {} ({} tags)",
                self.incarnation.core.host(),
                tags.len()
            ));
            return Ok(());
        }
        let now = self.world.now();
        let judged = self.world.judged(&self.incarnation);
        {
            let mut map = self.tags.lock().unwrap_or_else(|p| p.into_inner());
            let mut inner = self.world.lock();
            let mut first = None;
            for tag in &tags {
                if let Some(seq) = map.remove(&tag.0) {
                    first.get_or_insert(seq);
                    if judged {
                        inner.checker.on_ack(seq, now);
                    } else {
                        inner.checker.on_ack_deposed(seq, now);
                    }
                }
            }
            inner.trace.event(
                now,
                format_args!(
                    "{} ack {} (first seq {first:?})",
                    self.incarnation.core.host(),
                    tags.len()
                ),
            );
        }
        self.world.bus.ack(tags).await?;
        if self.world.fires(Site::CrashAfterAck) {
            self.world
                .request_crash(self.incarnation.core, Site::CrashAfterAck);
            return hang().await;
        }
        Ok(())
    }

    async fn publish(&self, subject: String, payload: Bytes) -> Result<(), BusError> {
        if subject.starts_with("cmd.") {
            return self.to_driver(subject, None, payload).await;
        }
        // A transition: the projection changed whether or not the bus takes it (invariants 13
        // and 14 judge the change), and only a published one counts for invariant 4.
        self.alive(Some("publishes a transition")).await;
        if !self.world.judged(&self.incarnation) {
            // Of a row or control event a lossy failover may have taken back: not judged.
            self.link()?;
            self.world.trace(format_args!(
                "{} transition {subject} (of a lost primary: not judged)",
                self.incarnation.core.host()
            ));
            return self.world.bus.publish(subject, payload).await;
        }
        let facts = crate::checker::transition_facts(&payload);
        let now = self.world.now();
        if let Some(facts) = &facts {
            self.world
                .lock()
                .checker
                .on_transition_emitted(facts, now, || self.world.bus.stream_seqs());
        }
        self.link()?;
        {
            let mut inner = self.world.lock();
            inner.checker.on_transition(facts.as_ref(), now);
            inner.trace.event(
                now,
                format_args!("{} transition {subject}", self.incarnation.core.host()),
            );
        }
        self.world.bus.publish(subject, payload).await
    }

    async fn publish_command(
        &self,
        subject: String,
        reply_to: String,
        payload: Bytes,
    ) -> Result<(), BusError> {
        self.to_driver(subject, Some(reply_to), payload).await
    }

    async fn publish_observation(
        &self,
        subject: String,
        msg_id: String,
        payload: Bytes,
    ) -> Result<PublishAck, BusError> {
        let key = self_point_key(&msg_id);
        let refused = |e: BusError| {
            if let Some(key) = &key {
                self.world.lock().checker.on_publish_refused(key.clone());
            }
            e
        };
        self.enter(Some("publishes a self-point"))
            .await
            .map_err(refused)?;
        if self.world.leader_changing() {
            return Err(refused(BusError::Connection(NO_LEADER.into())));
        }
        let observation = self_point_observation(&payload);
        let ack = self
            .world
            .bus
            .publish_observation(&subject, &msg_id, payload)
            .map_err(refused)?;
        if !ack.duplicate {
            let stamp = self
                .world
                .bus
                .ingested_at_of(ack.seq)
                .expect("the stream holds a message it has just accepted");
            let now = self.world.now();
            let judged = self.world.judged(&self.incarnation);
            let mut inner = self.world.lock();
            inner
                .checker
                .on_core_reading(ack.seq, key.clone(), self.incarnation.id(), judged);
            inner.checker.on_accepted(ack.seq, key, observation, stamp, now);
            inner.trace.event(
                now,
                format_args!("{} self-point seq {}", self.incarnation.core.host(), ack.seq),
            );
        }
        Ok(ack)
    }

    async fn lag(&self) -> Result<Lag, BusError> {
        self.enter(None).await?;
        if self.world.leader_changing() {
            return Err(BusError::Connection(NO_LEADER.into()));
        }
        let lag = self.world.bus.lag().await?;
        if let Some(epoch) = self
            .incarnation
            .epoch()
            .filter(|_| self.world.judged(&self.incarnation))
        {
            let now = self.world.now();
            self.world.lock().checker.on_lag_reading(
                epoch,
                lag.pending,
                lag.ack_pending,
                lag.oldest_unacked_age_ms,
                now,
            );
        }
        Ok(lag)
    }

    async fn inbound(&self) -> Result<tokio::sync::mpsc::Receiver<Inbound>, BusError> {
        self.enter(None).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(INBOUND_QUEUED_MAX);
        // The operator's requests and the drivers' hellos reach this incarnation from now on.
        self.world
            .lock()
            .inbound_senders
            .insert(self.incarnation.core, tx);
        Ok(rx)
    }
}

impl Consumer for SimConsumer {
    async fn fetch(&mut self, max: usize, wait_ms: u64) -> Result<Vec<Delivery>, BusError> {
        if let Err(e) = self.bus.enter(None).await {
            // A dead connection does not answer at once; the runtime's retry pacing applies.
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            return Err(e);
        }
        if self.bus.world.leader_changing() {
            // A pull the old leader never answers: silent past its wait, then given up
            // (the runtime's fetch backoff and its 30 s give-up bound apply).
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
            return Err(BusError::Connection(NO_LEADER.into()));
        }
        let deliveries = self.inner.fetch(max, wait_ms).await?;
        if self.bus.world.is_dying(&self.bus.incarnation) {
            return hang().await;
        }
        if !deliveries.is_empty() {
            let mut map = self.bus.tags.lock().unwrap_or_else(|p| p.into_inner());
            for delivery in &deliveries {
                map.insert(delivery.tag.0, delivery.stream_seq);
            }
            let redelivered = deliveries.iter().filter(|d| d.delivered_count > 1).count();
            self.bus.world.trace(format_args!(
                "{} fetched {} from seq {} ({} redelivered)",
                self.bus.incarnation.core.host(),
                deliveries.len(),
                deliveries[0].stream_seq,
                redelivered
            ));
        }
        Ok(deliveries)
    }
}

/// The store as one core incarnation sees it: the world's one model, through a handle of its
/// own (issue 25 item 3: a handle's acquisition gives it the start identity its writes are
/// fenced on, so two incarnations at one epoch are told apart as two processes are).
#[derive(Clone)]
pub struct SimStore {
    world: Arc<World>,
    incarnation: Arc<Incarnation>,
    handle: MemoryStore,
}

impl SimStore {
    pub fn new(world: Arc<World>, incarnation: Arc<Incarnation>) -> SimStore {
        let handle = world.store.another_handle();
        SimStore {
            world,
            incarnation,
            handle,
        }
    }

    /// The operator's commands' store (`sentinel rollup refresh`, `sentinel reprocess`): a
    /// process of its own, never a core ([`CoreId::OPERATOR`]: no link of its own to cut, never
    /// crashed by the controller), writing through the world's own handle, whose acquisitions
    /// the commands take. Its maintenance writes go through the same fenced path as a core's,
    /// so invariant 6 judges them alike.
    pub fn operator(world: Arc<World>) -> SimStore {
        let handle = world.store.clone();
        let incarnation = Arc::new(Incarnation {
            core: CoreId::OPERATOR,
            number: 0,
            session: Mutex::new(None),
        });
        SimStore {
            world,
            incarnation,
            handle,
        }
    }

    /// A control write, with `point_desired` rows when it is an arbitration: the checker hears
    /// of every command it writes (invariant 6) and every quality change (4, 13, 14).
    async fn write_events(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Option<Vec<sentinel_core::arbitration::DesiredRow>>,
    ) -> Result<Vec<i64>, StoreError> {
        // A claim's write counts too: a cut-off core that took the operator's request could
        // not put it on the record, so it could never command anything from it.
        let issues_command = events.iter().any(|e| {
            matches!(
                e.detail,
                ControlDetail::CommandIssued { .. } | ControlDetail::ClaimSet { .. }
            )
        });
        if let Err(e) = self.enter(Some("writes control events")).await {
            if issues_command {
                self.world.lock().checker.command_writes_refused += 1;
                self.world.trace(format_args!(
                    "{} cannot write its command: {e}",
                    self.incarnation.core.host()
                ));
            }
            return Err(e);
        }
        let holder = self.handle.holder();
        let stamps: Vec<u32> = events.iter().map(|e| e.core_epoch).collect();
        let commands: Vec<String> = events
            .iter()
            .filter_map(|e| match &e.detail {
                ControlDetail::CommandIssued { command_id, .. } => Some(command_id.clone()),
                _ => None,
            })
            .collect();
        let qualities: Vec<Option<ControlFacts>> = events
            .iter()
            .map(|e| match &e.detail {
                ControlDetail::QualityChanged { to, .. } => Some(ControlFacts {
                    point: e.point_id.clone(),
                    to: *to,
                    occurred_at: e.occurred_at,
                }),
                _ => None,
            })
            .collect();
        // Invariants 12 and 18–20 judge the write's events and rows as they commit.
        let written = (events.clone(), desired.clone());
        let seqs = match desired {
            None => self.handle.write_control_events(epoch, events).await?,
            Some(desired) => self.handle.write_arbitration(epoch, events, desired).await?,
        };
        let now = self.world.now();
        let mut inner = self.world.lock();
        inner.checker.on_control_events(
            epoch,
            &stamps,
            &commands,
            &qualities,
            &seqs,
            (self.handle.core_start(), holder),
            now,
        );
        inner
            .checker
            .on_command_plane(&written.0, written.1.as_deref(), &seqs, now);
        inner.trace.event(
            now,
            format_args!(
                "{} wrote {} control events (epoch {epoch})",
                self.incarnation.core.host(),
                seqs.len()
            ),
        );
        Ok(seqs)
    }

    /// A write through the model, the way every fenced write goes: entered as `action`
    /// (invariant 15, a cut link), then judged by invariant 6's fence check as `what` against
    /// the holder (epoch and start identity) just before it. `write` is lazy: nothing runs
    /// before the entry.
    async fn fenced_write<T>(
        &self,
        action: &str,
        what: &str,
        epoch: u32,
        write: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.enter(Some(action)).await?;
        let holder = self.handle.holder();
        let out = write.await?;
        let now = self.world.now();
        self.world
            .lock()
            .checker
            .on_write(what, self.handle.writer(epoch), holder, now);
        Ok(out)
    }

    /// A maintenance write (issue 24: judged as a commit is): entered as `action`, then, if the
    /// store accepted it, judged by invariant 6 as `kind` against the holder just before it;
    /// a refusal by the fence is counted. Every maintenance write of the simulator, a core's
    /// or the operator's, comes through here; a new maintenance operation (a compaction)
    /// joins by calling it with its own [`Maintenance`] kind. `write` is lazy.
    pub async fn maintenance_write<T>(
        &self,
        kind: Maintenance,
        action: &str,
        epoch: u32,
        write: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.enter(Some(action)).await?;
        self.judge_maintenance(kind, epoch, write.await)
    }

    /// A compaction (of a class's day, which compacts its minute rollups too, or of the
    /// minute rollups alone) as [`Self::maintenance_write`] judges it, and invariant 27 on the
    /// day's minute rollups: the store reads every bucket of the day after the compaction as
    /// it read it before. Nothing runs between the reads and the write: the memory store
    /// answers each at once, under its lock.
    async fn rollup_compaction_write<T>(
        &self,
        day: Micros,
        action: &str,
        epoch: u32,
        write: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        self.enter(Some(action)).await?;
        let range = (day, Micros(day.0 + sentinel_core::time::US_PER_DAY));
        let read = || {
            self.world
                .store
                .load_rollups(RollupGrain::Minute, range.0, range.1, None)
        };
        let before = read().await;
        let result = write.await;
        if result.is_ok() {
            let after = read().await;
            let now = self.world.now();
            let mut inner = self.world.lock();
            match (before, after) {
                (Ok(before), Ok(after)) if before == after => inner.checker.compaction.on_rollup_day_judged(),
                (Ok(before), Ok(after)) => {
                    let first = before
                        .iter()
                        .zip(&after)
                        .position(|(b, a)| b != a)
                        .unwrap_or(before.len().min(after.len()));
                    let what = format!(
                        "a compaction ({action}) changed the minute rollups of {}: {} buckets before, {} after, the first differing: {:?} became {:?}",
                        sentinel_ports::day_name(day),
                        before.len(),
                        after.len(),
                        before.get(first),
                        after.get(first)
                    );
                    inner.checker.fail(27, now, what);
                }
                (Err(e), _) | (_, Err(e)) => {
                    inner
                        .checker
                        .fail(0, now, format!("the memory store's rollups do not load: {e}"))
                }
            }
        }
        self.judge_maintenance(Maintenance::Compaction, epoch, result)
    }

    /// Invariant 6 on a maintenance write's outcome, `result` (see [`Self::maintenance_write`]).
    /// The holder is read after the write: the model runs each write whole under its lock, and
    /// a write that landed changed nothing the fence reads.
    fn judge_maintenance<T>(
        &self,
        kind: Maintenance,
        epoch: u32,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let holder = self.handle.holder();
        let now = self.world.now();
        let mut inner = self.world.lock();
        match &result {
            Ok(_) => inner
                .checker
                .on_maintenance(kind, self.handle.writer(epoch), holder, now),
            Err(StoreError::Fenced { .. }) => inner.checker.maintenance.on_refused(kind),
            Err(_) => {}
        }
        result
    }

    /// Every call of this incarnation's: a zombie's hangs; `action` (a commit or another
    /// write) is reported for invariant 15; a cut link fails it.
    async fn enter(&self, action: Option<&str>) -> Result<(), StoreError> {
        if self.world.is_dying(&self.incarnation) {
            return hang().await;
        }
        if let Some(what) = action {
            self.world.core_action(&self.incarnation, what);
        }
        if self.world.links(self.incarnation.core).store_cut {
            return Err(StoreError::Other("partitioned from the store".into()));
        }
        if self.world.store_down() {
            return Err(StoreError::Other(
                "no primary: a database failover is in progress".into(),
            ));
        }
        Ok(())
    }
}

pub struct SimLease {
    inner: MemoryLease,
    store: SimStore,
}

impl Lease for SimLease {
    fn epoch(&self) -> u32 {
        self.inner.epoch()
    }

    fn core_start(&self) -> u64 {
        self.inner.core_start()
    }

    async fn alive(&mut self) -> Result<bool, StoreError> {
        self.store.enter(None).await?;
        self.inner.alive().await
    }
}

impl Store for SimStore {
    type Lease = SimLease;

    async fn acquire(&self) -> Result<SimLease, StoreError> {
        self.enter(None).await?;
        let result = self.handle.acquire().await;
        let now = self.world.now();
        let host = self.incarnation.core.host();
        let mut inner = self.world.lock();
        match result {
            Ok(lease) => {
                *self.incarnation.session.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some((lease.session(), lease.epoch()));
                inner.checker.on_acquire(lease.epoch(), now);
                inner.trace.event(
                    now,
                    format_args!(
                        "{host} #{} takes the lock, epoch {}",
                        self.incarnation.number,
                        lease.epoch()
                    ),
                );
                Ok(SimLease {
                    inner: lease,
                    store: self.clone(),
                })
            }
            Err(e) => {
                inner.trace.event(
                    now,
                    format_args!("{host} #{} cannot take the lock: {e}", self.incarnation.number),
                );
                Err(e)
            }
        }
    }

    async fn store_registry(&self, snapshot: &RegistrySnapshot) -> Result<RegistryLoad, StoreError> {
        self.enter(None).await?;
        self.handle.store_registry(snapshot).await
    }

    async fn load_registry(&self, version: Option<i32>) -> Result<Option<StoredRegistry>, StoreError> {
        self.enter(None).await?;
        self.handle.load_registry(version).await
    }

    async fn load_state(&self, points: &[(String, RetentionClass)]) -> Result<RestoredState, StoreError> {
        self.enter(None).await?;
        let restored = self.handle.load_state(points).await?;
        // Invariant 21's views of this epoch start from what its restore read.
        if let Some(epoch) = self.incarnation.epoch() {
            self.world.lock().checker.events.on_restored(epoch, &restored);
        }
        Ok(restored)
    }

    async fn load_windows(
        &self,
        requests: &[sentinel_core::derived::WindowRequest],
        rows_max_per_point: usize,
    ) -> Result<Vec<sentinel_core::derived::WindowRow>, StoreError> {
        self.enter(None).await?;
        self.handle.load_windows(requests, rows_max_per_point).await
    }

    async fn commit(&self, batch: Batch) -> Result<CommitReport, CommitError> {
        let fail = |id, source| CommitError { batch: id, source };
        let id = batch.id;
        // Invariants 22–25: the core applies its batches in the order it submits them.
        if self.world.judged(&self.incarnation) {
            self.world.lock().checker.rules.on_submit(batch.epoch, id.0);
        }
        // A commit made within the bound and still in flight past it is not judged again.
        self.enter(Some("commits")).await.map_err(|e| fail(id, e))?;
        if self.world.fires(Site::CrashBeforeCommit) {
            self.world
                .request_crash(self.incarnation.core, Site::CrashBeforeCommit);
            return hang().await;
        }
        if self.world.fires(Site::SlowCommit) {
            let delay_ms = self.world.between(0, 2 * self.world.settings.ack_wait_ms);
            self.world
                .trace(format_args!("fault slow_commit batch {} for {delay_ms} ms", id.0));
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            self.enter(None).await.map_err(|e| fail(id, e))?;
        }
        let holder = self.handle.holder();
        let report = self.handle.commit(batch).await?;
        let now = self.world.now();
        {
            let mut inner = self.world.lock();
            inner
                .checker
                .on_commit(&report, self.handle.core_start(), holder, now);
            inner.trace.event(
                now,
                format_args!(
                    "{} committed batch {} epoch {}: {} rows, {} inserted, {} quarantined",
                    self.incarnation.core.host(),
                    report.batch.id.0,
                    report.batch.epoch,
                    report.batch.rows.len(),
                    report.inserted.len(),
                    report.batch.quarantine.len()
                ),
            );
        }
        if self.world.fires(Site::CrashAfterCommit) {
            self.world
                .request_crash(self.incarnation.core, Site::CrashAfterCommit);
            return hang().await;
        }
        Ok(report)
    }

    async fn checkpoint(&self, epoch: u32, states: Vec<PointState>) -> Result<(), StoreError> {
        let write = self.handle.checkpoint(epoch, states);
        self.fenced_write("writes a checkpoint", "a checkpoint", epoch, write)
            .await
    }

    async fn write_control_events(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
    ) -> Result<Vec<i64>, StoreError> {
        self.write_events(epoch, events, None).await
    }

    async fn write_arbitration(
        &self,
        epoch: u32,
        events: Vec<ControlEvent>,
        desired: Vec<sentinel_core::arbitration::DesiredRow>,
    ) -> Result<Vec<i64>, StoreError> {
        self.write_events(epoch, events, Some(desired)).await
    }

    async fn load_point_desired(&self) -> Result<Vec<sentinel_ports::StoredDesired>, StoreError> {
        self.enter(None).await?;
        self.handle.load_point_desired().await
    }

    async fn recorded_epoch(&self) -> Result<u32, StoreError> {
        self.enter(None).await?;
        self.handle.recorded_epoch().await
    }

    async fn raise_epoch(&self, epoch: u32, floor: u32) -> Result<u32, StoreError> {
        self.enter(None).await?;
        self.handle.raise_epoch(epoch, floor).await
    }

    async fn load_unanswered_commands(&self) -> Result<Vec<StoredControlEvent>, StoreError> {
        self.enter(None).await?;
        self.handle.load_unanswered_commands().await
    }

    async fn load_open_verifications(&self) -> Result<Vec<sentinel_core::OpenVerification>, StoreError> {
        self.enter(None).await?;
        self.handle.load_open_verifications().await
    }

    async fn load_control_heads(&self, point_ids: Vec<String>) -> Result<Vec<(String, i64)>, StoreError> {
        self.enter(None).await?;
        self.handle.load_control_heads(point_ids).await
    }

    async fn load_control_events(
        &self,
        after_seq: i64,
        limit: usize,
    ) -> Result<Vec<StoredControlEvent>, StoreError> {
        self.enter(None).await?;
        self.handle.load_control_events(after_seq, limit).await
    }

    async fn record_cold_start(
        &self,
        epoch: u32,
        core_start: Option<u64>,
        steps: Vec<StartupStep>,
    ) -> Result<(), StoreError> {
        let write = self.handle.record_cold_start(epoch, core_start, steps);
        self.fenced_write("writes its cold start", "a cold-start record", epoch, write)
            .await
    }

    async fn refresh_rollups(
        &self,
        epoch: u32,
        from: Micros,
        to: Micros,
    ) -> Result<RollupRefresh, StoreError> {
        let write = self.handle.refresh_rollups(epoch, from, to);
        let refresh = self
            .maintenance_write(Maintenance::RollupRefresh, "refreshes rollups", epoch, write)
            .await?;
        check_refreshed_rollups(&self.world, &refresh).await;
        Ok(refresh)
    }

    /// The step in its two halves, as the SQL runs it, with a crash site between them: the
    /// claim stays open for the next incarnation's step to finish.
    async fn refresh_closed_rollups(
        &self,
        epoch: u32,
        closed_before: Micros,
        limits: RollupStepLimits,
    ) -> Result<RollupStep, StoreError> {
        self.enter(Some("refreshes rollups")).await?;
        let claimed = self.handle.rollup_claim(epoch, closed_before, limits);
        self.judge_maintenance(Maintenance::RollupClaim, epoch, claimed)?;
        if self.world.fires(Site::CrashMidRollupStep) {
            self.world
                .request_crash(self.incarnation.core, Site::CrashMidRollupStep);
            return hang().await;
        }
        self.enter(Some("refreshes rollups")).await?;
        let applied = self.handle.rollup_apply(epoch);
        let step = self.judge_maintenance(Maintenance::RollupApply, epoch, applied)?;
        if !step.more {
            check_rollup_watermark(&self.world, step.watermark).await;
        }
        Ok(step)
    }

    // Reprocess, retention and class moves: delegated to the model like every operation, the
    // writes judged by invariant 6's fence check. A reprocess's rewritten rows are handed to the
    // checker, which rebuilds its fold and rollup aggregates of their points from the log.

    async fn reprocess_extent(
        &self,
        points: &[(String, RetentionClass)],
        from: Micros,
        to: Option<Micros>,
    ) -> Result<Vec<ClassExtent>, StoreError> {
        self.enter(None).await?;
        self.handle.reprocess_extent(points, from, to).await
    }

    async fn load_reprocess_rows(
        &self,
        class: RetentionClass,
        point: &str,
        from: Micros,
        to: Option<Micros>,
        after: Option<&StoredObservation>,
        limit: usize,
    ) -> Result<Vec<StoredObservation>, StoreError> {
        self.enter(None).await?;
        self.handle
            .load_reprocess_rows(class, point, from, to, after, limit)
            .await
    }

    async fn apply_reprocess(
        &self,
        epoch: u32,
        class: RetentionClass,
        updates: Vec<RowUpdate>,
    ) -> Result<u64, StoreError> {
        self.enter(Some("reprocesses rows")).await?;
        let keys: std::collections::BTreeSet<(sentinel_core::ObsKey, Micros)> =
            updates.iter().map(|u| (u.key.clone(), u.ingested_at)).collect();
        let applied = self.handle.apply_reprocess(epoch, class, updates).await;
        let updated = self.judge_maintenance(Maintenance::ReprocessChunk, epoch, applied)?;
        // The checker's fold and aggregates of the rewritten points, from the log now (a
        // reprocess's refresh is judged against them before the run returns).
        let points: std::collections::BTreeSet<Arc<str>> = self
            .handle
            .rows_where(class, |r| keys.contains(&(r.key.clone(), r.ingested_at)))
            .into_iter()
            .map(|r| r.point_id)
            .collect();
        let rewritten = self.handle.rows_where(class, |r| points.contains(&r.point_id));
        self.world.lock().checker.on_rows_rewritten(&points, &rewritten);
        Ok(updated)
    }

    async fn write_reprocess_event(
        &self,
        epoch: u32,
        occurred_at: Micros,
        principal: &str,
        record: &ReprocessRecord,
    ) -> Result<i64, StoreError> {
        // The handle's own: its start identity is what the fence compares.
        let write = self
            .handle
            .write_reprocess_event(epoch, occurred_at, principal, record);
        let kind = Maintenance::ReprocessEvent;
        self.maintenance_write(kind, "writes a reprocess event", epoch, write)
            .await
    }

    async fn expired_partitions(
        &self,
        cutoffs: RetentionCutoffs,
        limit: usize,
    ) -> Result<Vec<Partition>, StoreError> {
        self.enter(None).await?;
        self.handle.expired_partitions(cutoffs, limit).await
    }

    async fn drop_expired(
        &self,
        epoch: u32,
        cutoffs: RetentionCutoffs,
        partitions_max: u32,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<RetentionRun, StoreError> {
        let write = self
            .handle
            .drop_expired(epoch, cutoffs, partitions_max, principal, occurred_at);
        let kind = Maintenance::RetentionDrop;
        self.maintenance_write(kind, "drops expired partitions", epoch, write)
            .await
    }

    async fn retention_marks(&self) -> Result<[Option<Micros>; 5], StoreError> {
        self.enter(None).await?;
        self.handle.retention_marks().await
    }

    async fn partitions_created_until(&self) -> Result<Option<Micros>, StoreError> {
        self.enter(None).await?;
        self.handle.partitions_created_until().await
    }

    async fn ensure_partitions_ahead(
        &self,
        today: Micros,
        days_ahead: u32,
        lock_timeout_ms: u32,
    ) -> Result<sentinel_ports::PartitionsAhead, StoreError> {
        self.enter(None).await?;
        self.handle
            .ensure_partitions_ahead(today, days_ahead, lock_timeout_ms)
            .await
    }

    async fn compact_day(
        &self,
        epoch: u32,
        request: sentinel_ports::CompactionRequest<'_>,
    ) -> Result<sentinel_ports::Compaction, StoreError> {
        let day = request.day;
        let write = self.handle.compact_day(epoch, request);
        self.rollup_compaction_write(day, "compacts a day", epoch, write)
            .await
    }

    async fn compact_rollup_day(
        &self,
        epoch: u32,
        request: sentinel_ports::RollupCompactionRequest<'_>,
    ) -> Result<sentinel_ports::RollupCompaction, StoreError> {
        let day = request.day;
        let write = self.handle.compact_rollup_day(epoch, request);
        let what = "compacts a day's minute rollups";
        let out = self.rollup_compaction_write(day, what, epoch, write).await?;
        self.world
            .lock()
            .checker
            .compaction
            .on_rollups_compacted(out.buckets);
        Ok(out)
    }

    async fn move_point_class(
        &self,
        epoch: u32,
        point_id: &str,
        to: RetentionClass,
        principal: &str,
        occurred_at: Micros,
    ) -> Result<ClassMove, StoreError> {
        let write = self
            .handle
            .move_point_class(epoch, point_id, to, principal, occurred_at);
        let kind = Maintenance::ClassMove;
        self.maintenance_write(kind, "moves a point's class", epoch, write)
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
        self.enter(None).await?;
        self.handle.load_history(point_id, class, from, to, limit).await
    }

    async fn rollup_watermark(&self) -> Result<Option<RollupWatermark>, StoreError> {
        self.enter(None).await?;
        self.handle.rollup_watermark().await
    }

    async fn load_rollups(
        &self,
        grain: RollupGrain,
        from: Micros,
        to: Micros,
        point_id: Option<&str>,
    ) -> Result<Vec<RollupRow>, StoreError> {
        self.enter(None).await?;
        self.handle.load_rollups(grain, from, to, point_id).await
    }
}

/// Invariant 10 after an on-demand refresh: reads what the store now holds in the refreshed
/// ranges (at once: no commit lands in between) and hands it to the checker.
pub async fn check_refreshed_rollups(world: &World, refresh: &RollupRefresh) {
    let (minutes, hours) = (refresh.minute_range, refresh.hour_range);
    let minutes = world
        .store
        .load_rollups(RollupGrain::Minute, minutes.0, minutes.1, None)
        .await;
    let hours = world
        .store
        .load_rollups(RollupGrain::Hour, hours.0, hours.1, None)
        .await;
    let now = world.now();
    let mut inner = world.lock();
    match (minutes, hours) {
        (Ok(minutes), Ok(hours)) => inner.checker.on_rollup_refresh(refresh, &minutes, &hours, now),
        (Err(e), _) | (_, Err(e)) => {
            inner
                .checker
                .fail(0, now, format!("the memory store's rollups do not load: {e}"))
        }
    }
}

/// Invariant 10 after a step that left no invalidation: every closed bucket below the
/// watermark that can have changed since the last such check.
async fn check_rollup_watermark(world: &World, watermark: RollupWatermark) {
    let from = world.lock().checker.rollups.check_from(watermark);
    let hours = crate::checker::rollups::RollupModel::watermark_hours(from, watermark);
    let minutes = world
        .store
        .load_rollups(
            RollupGrain::Minute,
            RollupGrain::Minute.floor(from),
            watermark.refreshed_to,
            None,
        )
        .await;
    let hours = world
        .store
        .load_rollups(RollupGrain::Hour, hours.0, hours.1, None)
        .await;
    let now = world.now();
    let mut inner = world.lock();
    match (minutes, hours) {
        (Ok(minutes), Ok(hours)) => inner
            .checker
            .on_rollup_step(watermark, from, &minutes, &hours, now),
        (Err(e), _) | (_, Err(e)) => {
            inner
                .checker
                .fail(0, now, format!("the memory store's rollups do not load: {e}"))
        }
    }
}
