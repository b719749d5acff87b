//! The startup sequence (core runtime spec, "Acquisition order at startup"; ingest spec,
//! "Restart" steps 1–3): take the lock (the store brings its schema up to date under it, then
//! increments the epoch), load the registry, restore the projection, and only then connect to
//! the bus and bind the consumer. Shared by `sentinel run`, the demo and the simulator.
//!
//! The bus arrives as a connector, called only once the store phase has succeeded: a core that
//! cannot take the lock returns `LockHeld` having opened no connection to the bus at all.
//!
//! Then restart steps 4–8 (each point's newest control event; the desired values, open claims
//! and open verifications of writable points from their snapshot, never the log from its
//! start; derived windows; durable timers, the claims' expiries and the verifications included,
//! those that came due while the core was down decided on the log's evidence; drivers; the
//! rules' warmup, their conditions replayed from the log),
//! each timed. Step 7 subscribes to the core's inbound subjects (driver hellos and
//! command requests) and announces this core's epoch to every driver instance the registry
//! names, so each raises its epoch floor at the takeover rather than at this core's first
//! command to it.
//!
//! Owns: the order of those steps and their timings. Nothing may connect to the bus, let alone
//! bind the consumer, before the lock is held.
//! Once the consumer is bound the timings are recorded in the store against this acquisition's
//! epoch (core runtime spec, exit criteria: cold-start duration per startup step, measured and
//! recorded), so `sentinel status` can show the last cold start after the fact.

use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::StreamExt as _;
use sentinel_core::registry::Registry;
use sentinel_core::registry::plan::Admission;
use sentinel_core::{Config, Core, IssuedCommand, RetentionClass};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::notify::Notifier;
use crate::registry_dir;
use sentinel_ports::clock::Clock;
use sentinel_ports::{Bus, BusError, Inbound, Lease, StartupStep, Store, StoreError};

/// How many verdicts [`registry_refusal`] remembers.
const REFUSALS_CACHE_ENTRIES_MAX: usize = 8;

/// A compiled registry (held, so its address is never reused while remembered), the capacity
/// it was judged against, and the verdict.
type Verdict = (Arc<Registry>, Admission, Option<String>);

static REFUSALS: Mutex<Vec<Verdict>> = Mutex::new(Vec::new());

/// Why the compiled `registry` may not run under `admission`: its declared load against the
/// capacity ([`registry_dir::capacity_refusal`]) first, then its rules
/// ([`registry_dir::rule_refusal`]). Both are pure functions of the two, and a core restarting
/// inside one process (the simulator restarts cores a dozen times a seed; they were 5 % of a
/// seed) gets the very same `Arc` from [`registry_dir::compile_stored_shared`] for the same
/// stored version, so the verdict is remembered by the registry's identity and the admission.
fn registry_refusal(registry: &Arc<Registry>, admission: &Admission) -> Option<String> {
    {
        let cache = REFUSALS.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, _, verdict)) = cache
            .iter()
            .find(|(seen, judged, _)| Arc::ptr_eq(seen, registry) && judged == admission)
        {
            return verdict.clone();
        }
    }
    let verdict =
        registry_dir::capacity_refusal(registry, admission).or_else(|| registry_dir::rule_refusal(registry));
    let mut cache = REFUSALS.lock().unwrap_or_else(|p| p.into_inner());
    if cache.len() == REFUSALS_CACHE_ENTRIES_MAX {
        cache.remove(0);
    }
    cache.push((Arc::clone(registry), admission.clone(), verdict.clone()));
    assert!(cache.len() <= REFUSALS_CACHE_ENTRIES_MAX);
    verdict
}

/// How long each startup step took, in the order they ran.
#[derive(Clone, Debug, Default)]
pub struct StartupTimings {
    pub steps: Vec<(&'static str, u64)>,
}

impl StartupTimings {
    fn record(&mut self, step: &'static str, started: Instant) {
        let micros = started.elapsed().as_micros() as u64;
        info!(step, duration_us = micros, "startup step");
        self.steps.push((step, micros));
    }

    /// The steps as the store records them.
    pub fn to_steps(&self) -> Vec<StartupStep> {
        self.steps
            .iter()
            .map(|&(step, duration_us)| StartupStep {
                step: step.to_owned(),
                duration_us,
            })
            .collect()
    }
}

pub struct Started<B: Bus, S: Store> {
    pub core: Core,
    /// The bus, connected only after the store phase (lock, schema, epoch, registry, restore).
    pub bus: B,
    pub consumer: B::Consumer,
    pub lease: S::Lease,
    /// Driver hellos and command requests, subscribed at step 7 (before the announcements, so
    /// no answer is missed); the runtime reads it.
    pub inbound: mpsc::Receiver<Inbound>,
    pub timings: StartupTimings,
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("another core holds the single-writer lock")]
    LockHeld,
    #[error("no registry has been loaded; run `sentinel registry load DIR` or pass --registry")]
    NoRegistry,
    #[error("registry: {0}")]
    Registry(String),
    #[error(transparent)]
    Store(StoreError),
    #[error(transparent)]
    Bus(#[from] BusError),
    #[error("core: {0}")]
    Core(String),
}

impl From<StoreError> for StartError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::LockHeld => StartError::LockHeld,
            other => StartError::Store(other),
        }
    }
}

/// A connector for a bus that needs no connecting (the memory models, the simulator, tests
/// that share one bus between cores): hands over a clone of it when startup asks.
pub fn already_connected<B: Bus>(
    bus: &B,
) -> impl FnOnce() -> std::future::Ready<Result<B, BusError>> + use<B> {
    let bus = bus.clone();
    move || std::future::ready(Ok(bus))
}

/// Restart step 4: each point's newest control event (`Store::load_control_heads`, one index
/// probe per point) advances its watermark, so the next checkpoint records how far the log
/// goes. Never a read of the log itself: its cost does not grow with the log. Returns
/// `(points with events, points advanced)`.
async fn replay_control_heads<S: Store>(store: &S, core: &mut Core) -> Result<(usize, usize), StoreError> {
    let point_ids: Vec<String> = core.registry().points().map(|(_, p)| p.id.to_string()).collect();
    let heads = store.load_control_heads(point_ids).await?;
    debug_assert!(heads.len() <= core.registry().len());
    let advanced = core.replay_control_events(heads.iter().map(|(point, seq)| (point.as_str(), *seq)));
    Ok((heads.len(), advanced))
}

/// Restart step 8: the rules' inputs' committed rows over each input's readers' longest
/// `for_s` plus one freshness before now, in one batched `Store::load_windows` (one query per
/// class, bounded per point as step 5's), replayed in log order through the rules. Returns
/// `(inputs read, rows replayed)`; no read at all without rules.
async fn replay_rules<S: Store>(store: &S, core: &mut Core) -> Result<(usize, usize), StoreError> {
    let requests = core.rule_window_requests();
    if requests.is_empty() {
        return Ok((0, 0));
    }
    let rows = store
        .load_windows(&requests, sentinel_core::derived::WINDOW_SAMPLES_MAX)
        .await?;
    Ok((requests.len(), core.rehydrate_rules(rows)))
}

/// Restart step 6's evidence reads for the restored verifications in flight at once: one per
/// writable point with an open verification, each a bounded `load_history`. Four leaves two of
/// the store's default six pooled connections free.
pub const RESTORED_READS_IN_FLIGHT: usize = 4;

/// Runs the startup sequence. `registry_dir`, when given, is loaded into the store first (a
/// no-op when its content is unchanged). `connect_bus` is called once, after the projection is
/// restored; for NATS it connects and ensures the stream.
pub async fn start<B, S, C, F>(
    store: &S,
    connect_bus: C,
    registry_dir: Option<&Path>,
    config: Config,
    clock: &dyn Clock,
) -> Result<Started<B, S>, StartError>
where
    B: Bus,
    S: Store,
    C: FnOnce() -> F,
    F: Future<Output = Result<B, BusError>>,
{
    start_notified(
        store,
        connect_bus,
        registry_dir,
        &Admission::default(),
        config,
        clock,
        &Notifier::disabled(),
    )
    .await
}

/// [`start`] against the installation's capacity (`admission`: the ingest budget, the outage and
/// the stream's bounds the core runs with; issue 24 item 4), telling the service manager each
/// step as it begins (`STATUS=` and `EXTEND_TIMEOUT_USEC=`, [`crate::notify`]). The registry,
/// loaded from `registry_dir` or the newest stored version, must fit that capacity: a folder is
/// checked against it as `registry load` checks it, a stored version's declared load against
/// the budget and the stream. `READY=1` is not sent here: the caller sends it once the runtime
/// loop runs.
#[allow(clippy::too_many_arguments)] // each one thing the start needs
pub async fn start_notified<B, S, C, F>(
    store: &S,
    connect_bus: C,
    registry_dir: Option<&Path>,
    admission: &Admission,
    config: Config,
    clock: &dyn Clock,
    notify: &Notifier,
) -> Result<Started<B, S>, StartError>
where
    B: Bus,
    S: Store,
    C: FnOnce() -> F,
    F: Future<Output = Result<B, BusError>>,
{
    let mut timings = StartupTimings::default();

    notify.startup_step("lock_and_epoch");
    let step = Instant::now();
    // Migrations run inside the acquisition, under the lock: renewed while they run.
    let lease = notify.extend_while("lock_and_epoch", store.acquire()).await?;
    let epoch = lease.epoch();
    // This start's identity (issue 25 item 3), taken by the store at the acquisition and
    // recorded with the epoch: an epoch can repeat after a failover that lost its increment,
    // and two starts at one epoch still differ here, on the bus and in the store's fence.
    let core_start = lease.core_start();
    timings.record("lock_and_epoch", step);
    info!(epoch, core_start, "single-writer lock held");

    notify.startup_step("registry");
    let step = Instant::now();
    if let Some(dir) = registry_dir {
        let load = registry_dir::load_dir_with(store, dir, admission)
            .await
            .map_err(|e| StartError::Registry(e.to_string()))?;
        info!(
            version = load.version,
            created = load.created,
            "registry folder loaded"
        );
    }
    let stored = store.load_registry(None).await?.ok_or(StartError::NoRegistry)?;
    let registry =
        registry_dir::compile_stored_shared(stored).map_err(|e| StartError::Registry(e.to_string()))?;
    if let Some(refusal) = registry_refusal(&registry, admission) {
        return Err(StartError::Registry(refusal));
    }
    timings.record("registry", step);
    info!(
        version = registry.version,
        points = registry.len(),
        "registry compiled"
    );

    notify.startup_step("restore_projection");
    let step = Instant::now();
    let points: Vec<(String, RetentionClass)> = registry
        .points()
        .map(|(_, p)| (p.id.to_string(), p.descriptor.retention))
        .collect();
    let restored = store.load_state(&points).await?;
    let mut core = Core::new(config, registry, epoch, &restored, clock.now())
        .map_err(|e| StartError::Core(e.to_string()))?;
    core.set_core_start(core_start);
    timings.record("restore_projection", step);

    // Only now, holding the lock with the projection restored, does the core touch the bus.
    notify.startup_step("connect_bus");
    let step = Instant::now();
    let bus = connect_bus().await?;
    timings.record("connect_bus", step);

    // Restart step 3: the consumer resumes from its ack position.
    notify.startup_step("bind_consumer");
    let step = Instant::now();
    let consumer = bus.bind().await?;
    timings.record("bind_consumer", step);

    // Restart step 4: each point's newest control event (its head, not the log from the
    // lowest watermark: the log is kept forever).
    notify.startup_step("replay_control_events");
    let step = Instant::now();
    let (read, replayed) = replay_control_heads(store, &mut core).await?;
    timings.record("replay_control_events", step);
    info!(points = read, replayed, "control log heads replayed");

    // Restart step 4, the command plane (issue 21 items 2, 5 and 6), from its snapshot: the
    // desired values and the open claims as last written with their control events
    // (`point_desired`), so a claim for the value a point already has issues no command and an
    // operator's override outlives the restart; and the open verifications (each point's
    // newest command answered `applied` with no verdict yet). Each read is a few index probes
    // per writable point, however long the log.
    let step = Instant::now();
    let rows = store.load_point_desired().await?;
    let restored = core.restore_desired(rows.into_iter().map(|stored| stored.row));
    let opens = store.load_open_verifications().await?;
    let verifications = core.restore_verifications(opens);
    // The outbox (issue 21 item 3): a command committed but never answered, still its
    // point's desired value, is issued again with its id under this epoch (queued: written
    // once the loop runs, after the announcements of step 7, and published once written). A
    // predecessor that died between the commit and the publish never sent it.
    let unanswered = store.load_unanswered_commands().await?;
    let resent = core.resend_unanswered(unanswered.iter().filter_map(|event| {
        IssuedCommand::from_stored(
            event.seq,
            event.occurred_at,
            event.point_id.as_deref()?,
            &event.principal,
            &event.payload,
        )
    }));
    timings.record("restore_desired", step);
    info!(
        restored,
        verifications,
        unanswered = unanswered.len(),
        resent,
        "desired values, claims and verifications restored"
    );

    // Restart step 5: the derived points' windows, from the class tables, in one query per
    // class (batched over every input and derived point, each bounded by its readers' newest
    // reading minus its longest window, and by rows), replayed in the order the cores applied
    // them, so a restart derives what an uninterrupted run would, and derives again the
    // readings a crash lost between a commit and their publish (queued as effects, published
    // when the runtime starts).
    notify.startup_step("rehydrate_derived_windows");
    let step = Instant::now();
    let requests = core.derived_window_requests();
    let rows = store
        .load_windows(&requests, sentinel_core::derived::WINDOW_SAMPLES_MAX)
        .await?;
    // Where the stream stands: a reading derived again may still be in it, unconsumed
    // (read only when there are derived points at all).
    let stream = if requests.is_empty() {
        (None, 0)
    } else {
        match bus.lag().await {
            Ok(lag) => (lag.first_seq, lag.last_seq),
            // Unknown: hold them until the stream is seen empty.
            Err(e) => {
                warn!(error = %e, "reading the stream's position failed; readings derived again wait for an empty stream");
                (Some(0), u64::MAX)
            }
        }
    };
    let (folded, again) = core.rehydrate_derived(
        &requests,
        rows,
        sentinel_core::derived::WINDOW_SAMPLES_MAX,
        stream,
    );
    timings.record("rehydrate_derived_windows", step);
    info!(
        points = requests.len(),
        rows = folded,
        derived_again = again,
        "derived windows rehydrated"
    );

    // Restart step 6: freshness deadlines from the restored projection; the command plane's
    // durable timers from what step 4 restored (issue 21 item 6): claims whose `until` passed
    // while the core was down are released as expired (written once the loop runs), and every
    // open verification is judged now on the log's evidence, the point's committed rows
    // observed in its window (one bounded read each, at most one per writable point): verified
    // by a row its predecessor committed, diverged if it came due meanwhile with none, else
    // running on — none is dropped.
    notify.startup_step("rehydrate_timers");
    let step = Instant::now();
    let armed = core.rehydrate_timers();
    let (claim_expiries, restored) = core.rehydrate_command_timers();
    // Up to RESTORED_READS_IN_FLIGHT reads at once, judged in the order restored.
    let mut reads = futures::stream::iter(restored.iter().map(|due| async move {
        let rows = store
            .load_history(
                &due.point_id,
                due.class,
                due.from,
                sentinel_core::Micros(due.to.0.saturating_add(1)),
                sentinel_core::verification::RESTORED_EVIDENCE_ROWS_MAX,
            )
            .await;
        (due, rows)
    }))
    .buffered(RESTORED_READS_IN_FLIGHT);
    while let Some((due, rows)) = reads.next().await {
        core.resolve_restored_verification(
            &due.point_id,
            rows?.into_iter().map(|r| (r.observed_at, r.quality, r.value)),
        );
    }
    timings.record("rehydrate_timers", step);
    info!(
        armed,
        claim_expiries,
        restored_verifications = restored.len(),
        "freshness deadlines and command timers armed"
    );

    // Restart step 7: driver processes run on the driver hosts and reconnect by themselves;
    // what this core starts is their relationship with it. Each instance hears this core's
    // epoch and answers with a hello (connecting → connected; ready once its current data
    // commits). A lost announcement is repaired by the driver's next hello.
    notify.startup_step("start_drivers");
    let step = Instant::now();
    let inbound = bus.inbound().await?;
    let announcements = core.start_drivers();
    let instances = announcements.len();
    let mut announced = 0usize;
    for announcement in announcements {
        match bus.publish(announcement.subject, announcement.payload).await {
            Ok(()) => announced += 1,
            Err(e) => warn!(error = %e, "announcing the core epoch to a driver instance failed"),
        }
    }
    // The valve (issue 21 item 7): each instance with a declared poll interval gets its
    // assignment, recorded as an `assignment` event once the loop runs and published once
    // recorded (after the announcements above, so its epoch is one the driver has heard).
    core.start_assignments();
    timings.record("start_drivers", step);
    info!(
        instances,
        announced, epoch, "core epoch announced to driver instances"
    );

    // Restart step 8 (issue 22 item 5): every rule starts in warmup and leaves it once its
    // inputs are live (or its deadline passes, counted only while staleness is not
    // suppressed), on the running loop. What this step does is give the rules their past: the
    // inputs' committed rows over each input's readers' longest `for_s` plus one freshness,
    // read in one batched query per class as step 5 reads the derived windows, and replayed
    // in log order, so a condition that began before the restart keeps its start instant and
    // a gap in the log starts it again. Nothing fires here: a `for_s` due fires only after
    // warmup, on current data.
    notify.startup_step("warmup");
    let step = Instant::now();
    let (inputs, replayed) = replay_rules(store, &mut core).await?;
    timings.record("warmup", step);
    info!(
        rules = core.rules_count(),
        inputs,
        rows = replayed,
        "rules in warmup, their conditions replayed from the log"
    );

    // Recorded after binding so the record covers the whole cold start. Fenced: a core that
    // has already been replaced fails here rather than starting to ingest.
    store
        .record_cold_start(epoch, Some(core_start), timings.to_steps())
        .await?;

    Ok(Started {
        core,
        bus,
        consumer,
        lease,
        inbound,
        timings,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use sentinel_core::registry::{Descriptor, Kind, Registry};
    use sentinel_core::{ControlDetail, ControlEvent, Micros, Quality, RestoredState};

    use super::*;
    use sentinel_models::MemoryStore;
    use sentinel_ports::clock::SystemClock;

    #[tokio::test]
    async fn step_4_reads_each_point_s_newest_control_event_not_the_log() {
        let registry = Arc::new(
            Registry::compile(
                1,
                "sha".into(),
                "hash".into(),
                ["p", "q", "r"]
                    .into_iter()
                    .map(|id| Descriptor::new(id, Kind::Number, RetentionClass::Measurement, "h", "i"))
                    .collect(),
            )
            .expect("registry"),
        );
        let store = MemoryStore::new("OBS", Arc::new(SystemClock));
        let lease = store.acquire().await.expect("lock");
        let epoch = lease.epoch();
        let event = |point: &str, i: i64| ControlEvent {
            occurred_at: Micros(i),
            point: registry.resolve(point),
            point_id: point.into(),
            principal: "core:watchdog".into(),
            core_epoch: epoch,
            registry_version: 1,
            detail: ControlDetail::QualityChanged {
                from: Quality::Live,
                to: Quality::Stale,
                reason: sentinel_core::GapReason::Freshness,
                deadline: Micros(i),
            },
        };
        // p at seqs 1..=4, q at 5; r has none; an unknown point at 6.
        let events = (0..4)
            .map(|i| event("p", i))
            .chain([event("q", 4), event("gone", 5)])
            .collect();
        store.write_control_events(epoch, events).await.expect("write");
        let mut core = Core::new(
            Config::default(),
            registry,
            epoch,
            &RestoredState::default(),
            Micros(0),
        )
        .expect("core");

        let (read, replayed) = replay_control_heads(&store, &mut core).await.expect("replay");
        assert_eq!((read, replayed), (2, 2), "p and q have events, r none");
        let watermark = |id: &str| core.point_state(id).and_then(|s| s.watermark_seq);
        assert_eq!(
            (watermark("p"), watermark("q"), watermark("r")),
            (Some(4), Some(5), None)
        );
    }

    /// A registry whose rule `frost` claims `plant.valve` once `plant.temp < 5` held 60 s.
    fn rule_registry() -> Arc<Registry> {
        use sentinel_core::registry::rule::{CompareOp, Condition, Rule, RuleBand, RuleClaim, RuleFallback};
        use sentinel_core::registry::{CommandValue, Writable};
        let temp = Descriptor::new("plant.temp", Kind::Number, RetentionClass::Measurement, "h", "i");
        let mut valve = Descriptor::new("plant.valve", Kind::Bool, RetentionClass::State, "h", "i");
        valve.writable = Some(Writable {
            relinquish_default: Some(CommandValue::Bool(false)),
            verify_s: 60,
            tolerance: 0.0,
            min_on_s: None,
            min_off_s: None,
        });
        valve.rules = vec![Rule {
            id: "frost".into(),
            inputs: vec!["plant.temp".into()],
            when: Condition::Compare {
                point: "plant.temp".into(),
                op: CompareOp::Lt,
                value: CommandValue::Number(5.0),
            },
            until: None,
            for_s: 60,
            point: "plant.valve".into(),
            claim: RuleClaim {
                band: RuleBand::Automation,
                priority: 0,
                value: CommandValue::Bool(true),
            },
            otherwise: RuleFallback::Release,
            on_input_loss: RuleFallback::Release,
            warmup_deadline_s: 60,
            fight: None,
        }];
        Arc::new(Registry::compile(1, "sha".into(), "hash".into(), vec![temp, valve]).expect("registry"))
    }

    #[tokio::test]
    async fn step_8_replays_the_rules_inputs_from_the_log_and_keeps_a_pending_start() {
        let registry = rule_registry();
        let store = MemoryStore::new("OBS", Arc::new(SystemClock));
        let lease = store.acquire().await.expect("lock");
        let epoch = lease.epoch();
        let now = Micros(1_796_000_000_000_000);
        let temp = registry.resolve("plant.temp").expect("point");
        // Rows every 5 s from 40 s before now, each holding the condition, and one from an hour
        // before (outside the window: for_s plus one freshness is 120 s).
        let at: Vec<Micros> = std::iter::once(now.add_ms(-3_600_000))
            .chain((0..8).map(|i| now.add_ms(-40_000 + i * 5_000)))
            .collect();
        let rows = at
            .iter()
            .enumerate()
            .map(|(i, &t)| sentinel_core::ObsRow {
                point: temp,
                point_id: "plant.temp".into(),
                class: RetentionClass::Measurement,
                ingested_at: t,
                observed_at: t,
                device_time: None,
                value: Some(sentinel_core::CanonicalValue::Num(1.0)),
                native_num: Some(1.0),
                native_text: None,
                unit_native: None,
                quality: Quality::Live,
                reason: None,
                detail: None,
                changed: true,
                registry_version: 1,
                key: sentinel_core::ObsKey {
                    driver_instance: "i".into(),
                    source_epoch: 1,
                    source_seq: i as u64 + 1,
                },
                skew_flagged: false,
                tag: sentinel_core::DeliveryTag(i as u64 + 1),
            })
            .collect();
        store
            .commit(sentinel_core::Batch {
                id: sentinel_core::BatchId(1),
                epoch,
                rows,
                quarantine: Vec::new(),
            })
            .await
            .expect("commit");
        let mut core =
            Core::new(Config::default(), registry, epoch, &RestoredState::default(), now).expect("core");
        let (inputs, replayed) = replay_rules(&store, &mut core).await.expect("step 8");
        assert_eq!((inputs, replayed), (1, 8), "the window's rows only");
        assert_eq!(
            core.rule_state("frost"),
            Some(sentinel_core::registry::health::RuleStateCode::Warmup),
            "in warmup"
        );
        assert_eq!(
            core.rule_due("frost"),
            Some(now.add_ms(20_000)),
            "pending since the log's first row"
        );
        // Without rules, nothing is read.
        let plain = Arc::new(
            Registry::compile(
                1,
                "sha".into(),
                "hash".into(),
                vec![Descriptor::new(
                    "p",
                    Kind::Number,
                    RetentionClass::Measurement,
                    "h",
                    "i",
                )],
            )
            .expect("registry"),
        );
        let mut core =
            Core::new(Config::default(), plain, epoch, &RestoredState::default(), now).expect("core");
        assert_eq!(replay_rules(&store, &mut core).await.expect("step 8"), (0, 0));
    }
}
