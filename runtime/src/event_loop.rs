//! The runtime loop: feeds the core its inputs and executes its effects in emitted order
//! (DESIGN.md §1, "Ports and runtime"). The same code runs in production (NATS + PostgreSQL),
//! in the demo (the in-memory models) and in the simulator (`sentinel-sim`).
//!
//! Owns: overlapping fetches with commits (a fetcher task asked for at most the core's accept
//! budget), running up to `inflight_batches_max` commits concurrently, writing checkpoints and
//! control events one at a time in order, running the core's rollup steps and the reprocess
//! asked over the bus off the loop (`reprocess_job`), reading the consumer's lag for the core's watchdog
//! (a task of its own), the ordered observation publisher (self-points and derived readings,
//! one task fed by a bounded queue in emitted order, stopped with the loop), the periodic lock
//! ownership check, and turning the core's `Exit` into a return value. It decides nothing about
//! ordering: acks and publishes happen exactly where the core emitted them.
//!
//! Every effect stops when the loop stops (core runtime spec, "Losing the lock while running":
//! the core "stops publishing ... and exits"). Work the loop hands to tasks — commits, rollup
//! steps, retention runs, a compaction, a reprocess, control writes, observation publishes — is aborted when
//! the loop exits on a failure; an orderly exit (code 0) lets the checkpointer and the
//! observation publisher finish what was queued before it, within
//! [`RuntimeConfig::drain_observations_ms`]. Nothing the loop owns runs after [`run`] returns.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sentinel_core::partitions::PartitionsOutcome;
use sentinel_core::retention::RetentionOutcome;
use sentinel_core::rollup::RollupStepOutcome;
use sentinel_core::{Core, Effect, EpochRaise, ExitReason, Input, Metrics, Micros};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tracing::{debug, error, info, warn};

use crate::telemetry::{BusOp, StoreOp, Telemetry};

use sentinel_ports::clock::Clock;
use sentinel_ports::{
    Bus, BusError, CommitError, Consumer, Inbound, Lease, PartitionsAhead, RollupStepLimits, Store,
    StoreError,
};

/// The default bound of the observation publisher's queue: at the 500 obs/s design rate, half a
/// minute of derived readings, far above what one tick emits.
pub const OBSERVATIONS_QUEUED_MAX: usize = 16_384;

#[derive(Clone, Debug)]
pub struct RuntimeConfig {
    /// Largest single fetch; the core's accept budget may make it smaller.
    pub fetch_max: usize,
    /// Smallest fetch worth a pull request. The budget only drops below a batch when every
    /// in-flight slot is taken, and a commit completing raises it again, so waiting for that
    /// costs nothing and saves the server a stream of tiny pulls.
    pub fetch_min: usize,
    /// How long one fetch waits for the first message.
    pub fetch_wait_ms: u64,
    /// How often the lock's ownership is checked (core runtime spec, "Losing the lock").
    pub lock_check_interval_ms: u64,
    /// How often a progress line is logged.
    pub progress_interval_ms: u64,
    /// How often the consumer's lag is read and handed to the core (watchdog suppression).
    pub lag_poll_interval_ms: u64,
    /// Consecutive failed fetches tolerated before the runtime gives up; the fetch task pauses
    /// between them ([`fetch_backoff_ms`]), so the default 30 last about 50 s and
    /// `fetch_failing_max_ms` comes first.
    pub fetch_failures_max: u32,
    /// How long fetches may go on failing, from the first failure of a run of them, before
    /// the runtime gives up (exit 6) whatever their count: long enough for several leader
    /// elections of a clustered stream (4–9 s each), short enough that a core cut off from the
    /// bus stops (and is restarted into a fresh grace period) rather than judging staleness
    /// without lag readings.
    pub fetch_failing_max_ms: u64,
    /// The Prometheus exporter's state (`sentinel run --metrics-listen`), if any: the loop
    /// copies the core's counters into it and counts the errors only it sees.
    pub telemetry: Option<Telemetry>,
    /// How often the store gauges are read for `telemetry`.
    pub store_gauges_interval_ms: u64,
    /// Self-point and derived-reading publishes queued for the ordered publisher. When the
    /// queue is full a publish is dropped and counted, as a full stream drops it: the loop
    /// never waits on a slow bus (its lock checks must go on).
    pub observations_queued_max: usize,
    /// How long an orderly exit waits for the queued observation publishes to go out before
    /// it stops the publisher anyway.
    pub drain_observations_ms: u64,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            fetch_max: 500,
            fetch_min: 100,
            fetch_wait_ms: 100,
            lock_check_interval_ms: 1_000,
            progress_interval_ms: 10_000,
            lag_poll_interval_ms: 1_000,
            fetch_failures_max: 30,
            fetch_failing_max_ms: 30_000,
            telemetry: None,
            store_gauges_interval_ms: crate::telemetry::STORE_GAUGES_INTERVAL_MS,
            observations_queued_max: OBSERVATIONS_QUEUED_MAX,
            drain_observations_ms: 5_000,
        }
    }
}

/// Why the runtime stopped, and what the core counted.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    pub exit: ExitReason,
    pub metrics: Metrics,
}

impl RunOutcome {
    pub const LOCK_LOST: ExitReason = ExitReason {
        code: 5,
        why: "the single-writer lock was lost",
    };
    pub const BUS_FAILED: ExitReason = ExitReason {
        code: 6,
        why: "the bus failed repeatedly",
    };
}

type CommitResult = Result<sentinel_core::CommitReport, CommitError>;

/// Runs the core until it exits. `shutdown` resolving asks for an orderly stop.
#[allow(clippy::too_many_arguments)] // the ports, the clock and the config: each is one thing
pub async fn run<B, S, L>(
    core: Core,
    bus: B,
    consumer: B::Consumer,
    store: S,
    lease: L,
    clock: Arc<dyn Clock>,
    config: RuntimeConfig,
    shutdown: impl Future<Output = ()>,
) -> RunOutcome
where
    B: Bus,
    S: Store,
    L: Lease,
{
    // Nothing inbound: the sender is dropped at once, so the branch never fires.
    let (_, inbound) = mpsc::channel(1);
    run_observed(
        core,
        bus,
        consumer,
        store,
        lease,
        clock,
        config,
        shutdown,
        inbound,
        |_| {},
    )
    .await
}

/// [`run`], also taking command requests and driver hellos from `inbound` (from
/// [`crate::startup::Started`]), and
/// calling `observe` with the core on every wake-up of the loop, after the effects of the input
/// it brought (if any) have been executed.
/// The simulator's invariant checker looks at the projection through it; it must not block.
#[allow(clippy::too_many_arguments)]
pub async fn run_observed<B, S, L>(
    mut core: Core,
    bus: B,
    consumer: B::Consumer,
    store: S,
    mut lease: L,
    clock: Arc<dyn Clock>,
    config: RuntimeConfig,
    shutdown: impl Future<Output = ()>,
    mut inbound: mpsc::Receiver<Inbound>,
    mut observe: impl FnMut(&Core) + Send,
) -> RunOutcome
where
    B: Bus,
    S: Store,
    L: Lease,
{
    let telemetry = config.telemetry.clone();
    if let Some(t) = &telemetry {
        t.set_lock_held(true);
    }
    // The store gauges (retention marks, partitions ahead), read by a task of their own.
    let store_gauges = telemetry.clone().map(|t| {
        tokio::spawn(store_gauges_loop(
            store.clone(),
            t,
            Duration::from_millis(config.store_gauges_interval_ms.max(1)),
        ))
    });
    let (fetch_request_tx, fetch_request_rx) = mpsc::channel::<usize>(1);
    let (fetched_tx, mut fetched_rx) = mpsc::channel::<Result<Vec<sentinel_core::Delivery>, BusError>>(1);
    let fetcher = tokio::spawn(fetch_loop(
        consumer,
        fetch_request_rx,
        fetched_tx,
        config.fetch_wait_ms,
    ));

    // Commits in flight. A failure exit aborts them: no finishing the batch in flight (the
    // epoch fence refuses them anyway once another core has taken over).
    let mut commits: JoinSet<CommitResult> = JoinSet::new();
    // The rollup step and the retention run in flight (at most one each: the core asks for
    // the next after the answer).
    let mut maintenance = Maintenance::default();
    // The reprocess asked over the bus, in flight (at most one: the core answers a second
    // `busy`), and its request id, to answer the core should its task fail.
    let mut reprocess_jobs: JoinSet<Input> = JoinSet::new();
    let mut reprocess_running: Option<String> = None;
    let (checkpoint_tx, checkpoint_rx) = mpsc::unbounded_channel();
    let (checkpoint_done_tx, mut checkpoint_done_rx) = mpsc::unbounded_channel::<Result<(), StoreError>>();
    let checkpointer = tokio::spawn(checkpoint_loop(store.clone(), checkpoint_rx, checkpoint_done_tx));
    // Control-event writes, one at a time in order; their answers come back as inputs.
    let (control_tx, control_rx) = mpsc::unbounded_channel();
    let (control_done_tx, mut control_done_rx) = mpsc::unbounded_channel::<Input>();
    let controller = tokio::spawn(control_loop(
        store.clone(),
        control_rx,
        control_done_tx,
        telemetry.clone(),
    ));
    // Lag readings come from their own task, so a slow consumer-info request never holds up
    // commits, acks and lock checks.
    let (lag_tx, mut lag_rx) = mpsc::channel::<Input>(1);
    let lag_reader = tokio::spawn(lag_loop(
        bus.clone(),
        Duration::from_millis(config.lag_poll_interval_ms.max(1)),
        lag_tx,
        telemetry.clone(),
    ));
    // Self-points and derived readings: one task publishes them in the order the core emitted
    // them, so a slow bus holds up only them, never the loop; it stops with the loop.
    let (observations_tx, observations_rx) =
        mpsc::channel::<ObservationPublish>(config.observations_queued_max.max(1));
    let mut observations = ObservationQueue {
        queue: observations_tx,
        dropped: 0,
        telemetry: telemetry.clone(),
    };
    let publisher = tokio::spawn(observation_publish_loop(
        bus.clone(),
        observations_rx,
        telemetry.clone(),
    ));

    let mut lock_check = tokio::time::interval(Duration::from_millis(config.lock_check_interval_ms));
    lock_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut progress = tokio::time::interval(Duration::from_millis(config.progress_interval_ms));
    progress.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut fetch_outstanding = false;
    let mut fetch_failures = 0u32;
    let mut fetch_failing_since: Option<tokio::time::Instant> = None;
    let mut shutdown_sent = false;
    let mut driver_hellos_ahead_logged = 0u64;
    tokio::pin!(shutdown);

    // The core may have queued effects while it was built (the checkpoint recording restored
    // qualities); an initial tick gets them executed without waiting for the first message.
    let mut input = Some(Input::Tick);
    let exit = 'run: loop {
        if let Some(input) = input.take() {
            core.handle(clock.now(), input);
            while let Some(effect) = core.poll_effect() {
                let effect = match effect {
                    Effect::Reprocess(job) => {
                        // Off the loop, so ingest, acks and lock checks go on meanwhile.
                        reprocess_running = Some(job.ask.request_id.clone());
                        let (store, registry, core_config, clock) = (
                            store.clone(),
                            core.registry().clone(),
                            core.config().clone(),
                            clock.clone(),
                        );
                        reprocess_jobs.spawn(async move {
                            let now = move || clock.now();
                            let finished =
                                crate::reprocess_job::run_job(&store, registry, &core_config, job, &now)
                                    .await;
                            Input::ReprocessFinished(finished)
                        });
                        continue;
                    }
                    Effect::RaiseEpoch { epoch, floor } => {
                        // On the loop, not off it: the answer is the next thing the core hears,
                        // before a commit that the raise fenced can report its refusal (so the
                        // exit says why: raised, not fenced by a newer core).
                        let raise = raise_epoch(&store, epoch, floor, &telemetry).await;
                        core.handle(clock.now(), Input::EpochRaised(raise));
                        continue;
                    }
                    other => other,
                };
                if let Some(reason) = execute(
                    effect,
                    &bus,
                    &store,
                    &mut commits,
                    &mut maintenance,
                    &checkpoint_tx,
                    &control_tx,
                    &telemetry,
                    &mut observations,
                )
                .await
                {
                    break 'run reason;
                }
            }
        }
        let ahead = core.metrics().driver_hellos_ahead;
        if ahead > driver_hellos_ahead_logged {
            driver_hellos_ahead_logged = ahead;
            // The lock check is what stops this core; the drivers already refuse its commands.
            warn!(
                epoch = core.epoch(),
                hellos = ahead,
                other_start = core.metrics().driver_hellos_other_start,
                "a driver has seen a newer core epoch than this one, or this epoch from another core start; \
                 this core has been replaced"
            );
        }
        // On every wake-up, idle ones included, so an observer sees the settled state too.
        observe(&core);
        if let Some(t) = &telemetry {
            t.observe_core(&core, clock.now(), false);
        }
        if !fetch_outstanding {
            let budget = core.accept_budget().min(config.fetch_max);
            if budget >= config.fetch_min.min(config.fetch_max).max(1)
                && fetch_request_tx.try_send(budget).is_ok()
            {
                fetch_outstanding = true;
            }
        }
        let deadline = core.next_deadline();
        let has_deadline = deadline.is_some();
        let sleep = deadline.map(|deadline| {
            let wait_us = deadline.saturating_sub(clock.now()).max(0) as u64;
            tokio::time::sleep(Duration::from_micros(wait_us))
        });

        let next = tokio::select! {
            biased;
            Some(joined) = commits.join_next() => match joined {
                Ok(Ok(report)) => Input::Committed(report),
                Err(join_error) => {
                    // A panicking commit task is a bug; its batch's outcome is unknown.
                    error!(error = %join_error, "commit task failed");
                    if let Some(t) = &telemetry {
                        t.store_error(StoreOp::Commit, Some(&StoreError::Other("task failed".into())));
                    }
                    break 'run ExitReason::COMMIT_FAILED;
                }
                Ok(Err(CommitError { batch, source })) => {
                    if let Some(t) = &telemetry {
                        t.store_error(StoreOp::Commit, Some(&source));
                    }
                    let fenced = matches!(source, StoreError::Fenced { .. });
                    error!(batch = batch.0, error = %source, "commit failed");
                    Input::CommitFailed { batch, fenced }
                }
            },
            Some(answer) = control_done_rx.recv() => answer,
            Some(joined) = maintenance.rollup_steps.join_next() => match joined {
                Ok(answer) => answer,
                Err(join_error) => {
                    error!(error = %join_error, "rollup step task failed");
                    Input::RollupStepped(RollupStepOutcome::Failed)
                }
            },
            Some(joined) = maintenance.partition_runs.join_next() => match joined {
                Ok(answer) => answer,
                Err(join_error) => {
                    error!(error = %join_error, "partitions-ahead task failed");
                    Input::PartitionsEnsured(PartitionsOutcome::Failed)
                }
            },
            Some(joined) = maintenance.epoch_checks.join_next() => match joined {
                Ok(answer) => answer,
                Err(join_error) => {
                    error!(error = %join_error, "epoch check task failed");
                    Input::EpochRecorded { epoch: None }
                }
            },
            Some(joined) = maintenance.compactions.join_next() => match joined {
                Ok(answer) => answer,
                Err(join_error) => {
                    error!(error = %join_error, "compaction task failed");
                    Input::DayCompacted(sentinel_core::compaction::CompactionOutcome::Failed)
                }
            },
            Some(joined) = maintenance.retention_runs.join_next() => match joined {
                Ok(answer) => answer,
                Err(join_error) => {
                    error!(error = %join_error, "retention run task failed");
                    Input::RetentionRan(RetentionOutcome::Failed)
                }
            },
            Some(joined) = reprocess_jobs.join_next() => {
                let request_id = reprocess_running.take().unwrap_or_default();
                match joined {
                    Ok(answer) => answer,
                    Err(join_error) => {
                        error!(error = %join_error, "reprocess task failed");
                        Input::ReprocessFinished(sentinel_core::reprocess_request::ReprocessFinished {
                            request_id,
                            outcome: sentinel_core::reprocess_request::JobOutcome::Failed {
                                why: "the reprocess task failed".into(),
                                fenced: false,
                            },
                        })
                    }
                }
            },
            Some(result) = checkpoint_done_rx.recv() => match result {
                Ok(()) => continue,
                Err(e) => {
                    error!(error = %e, "checkpoint failed");
                    if let Some(t) = &telemetry {
                        t.store_error(StoreOp::Checkpoint, Some(&e));
                    }
                    Input::CheckpointFailed { fenced: matches!(e, StoreError::Fenced { .. }) }
                }
            },
            _ = lock_check.tick() => {
                match lease.alive().await {
                    Ok(true) => continue,
                    _ if lock_loss_ignored(&core) => continue,
                    Ok(false) => {
                        error!("the single-writer lock is gone; stopping at once");
                        if let Some(t) = &telemetry {
                            t.store_error(StoreOp::Lease, None);
                        }
                    }
                    Err(e) => {
                        error!(error = %e, "lock ownership check failed; stopping at once");
                        if let Some(t) = &telemetry {
                            t.store_error(StoreOp::Lease, Some(&e));
                        }
                    }
                }
                // Fail fast: no draining, no finishing the batch in flight (core runtime spec).
                break 'run RunOutcome::LOCK_LOST;
            },
            () = &mut shutdown, if !shutdown_sent => {
                shutdown_sent = true;
                info!("shutdown requested; draining in-flight batches");
                Input::Shutdown
            },
            () = async { if let Some(s) = sleep { s.await } }, if has_deadline => Input::Tick,
            Some(fetched) = fetched_rx.recv() => {
                fetch_outstanding = false;
                match fetched {
                    Ok(deliveries) if deliveries.is_empty() => {
                        // An answered pull: the bus is back, whatever it had.
                        fetch_failures = 0;
                        fetch_failing_since = None;
                        continue;
                    }
                    Ok(deliveries) => {
                        fetch_failures = 0;
                        fetch_failing_since = None;
                        Input::Delivered(deliveries)
                    }
                    Err(e) => {
                        if let Some(t) = &telemetry {
                            t.bus_error(BusOp::Fetch, Some(&e));
                        }
                        fetch_failures += 1;
                        let failing_since =
                            *fetch_failing_since.get_or_insert_with(tokio::time::Instant::now);
                        warn!(error = %e, failures = fetch_failures, "fetch failed");
                        if fetch_failures >= config.fetch_failures_max
                            || failing_since.elapsed()
                                >= Duration::from_millis(config.fetch_failing_max_ms)
                        {
                            break 'run RunOutcome::BUS_FAILED;
                        }
                        // The fetch task pauses before its next pull (`fetch_loop`), so the
                        // loop goes on committing and acking what it has meanwhile.
                        continue;
                    }
                }
            },
            Some(lag) = lag_rx.recv() => lag,
            Some(message) = inbound.recv() => {
                // `sentinel registry load` announced a version (issue 21 item 7): the version
                // itself is read from the store, the newest there, never from the message.
                if let Inbound::RegistryLoaded { version } = message {
                    match load_newest_registry(&store).await {
                        Ok(Some(registry)) => {
                            info!(announced = version, loaded = registry.version, "registry version announced");
                            input = Some(Input::RegistryLoaded(registry));
                        }
                        Ok(None) => warn!(announced = version, "registry version announced, but the store has none"),
                        Err(e) => warn!(announced = version, error = %e, "reading an announced registry version failed"),
                    }
                    continue;
                }
                #[cfg(feature = "failpoints")]
                if matches!(message, Inbound::CommandReply { .. }) {
                    crate::failpoint::hit(crate::failpoint::COMMAND_ANSWER_NOT_RECORDED);
                }
                #[cfg(feature = "failpoints")]
                let message = crate::failpoint::test_band(message);
                message.into()
            }
            _ = progress.tick() => {
                let m = core.metrics();
                let [drivers_connecting, drivers_connected, drivers_ready, drivers_lost] = m.drivers;
                info!(
                    drivers_connecting,
                    drivers_connected,
                    drivers_ready,
                    drivers_lost,
                    delivered = m.delivered,
                    rows = m.rows_inserted.iter().sum::<u64>(),
                    quarantined = m.quarantined_total(),
                    wrong_instance = m.wrong_instance(),
                    transitions = m.transitions_published,
                    in_flight = core.in_flight_batches(),
                    "progress"
                );
                continue;
            },
        };
        input = Some(next);
    };

    fetcher.abort();
    lag_reader.abort();
    if let Some(task) = store_gauges {
        task.abort();
    }
    if let Some(t) = &telemetry {
        t.observe_core(&core, clock.now(), true);
        t.set_lock_held(false);
    }
    commits.abort_all();
    maintenance.rollup_steps.abort_all();
    maintenance.retention_runs.abort_all();
    maintenance.compactions.abort_all();
    maintenance.partition_runs.abort_all();
    maintenance.epoch_checks.abort_all();
    reprocess_jobs.abort_all();
    controller.abort();
    // An orderly exit waits for its final checkpoint and for the observations it queued; a
    // failure exit does neither: a core that lost its lock publishes nothing more.
    drop(checkpoint_tx);
    drop(observations);
    if exit.code == 0 {
        let _ = checkpointer.await;
        let drain = Duration::from_millis(config.drain_observations_ms);
        let publisher_abort = publisher.abort_handle();
        if tokio::time::timeout(drain, publisher).await.is_err() {
            warn!(
                drain_ms = config.drain_observations_ms,
                "observation publishes still queued at the drain bound; dropped"
            );
            publisher_abort.abort();
        }
    } else {
        checkpointer.abort();
        publisher.abort();
    }
    RunOutcome {
        exit,
        metrics: core.metrics().clone(),
    }
}

/// The planted bug that carries on after losing the lock (simulator tests only; always false
/// without the `planted-bugs` feature).
fn lock_loss_ignored(core: &Core) -> bool {
    #[cfg(feature = "planted-bugs")]
    {
        core.is_planted(sentinel_core::PlantedBug::LockLossIgnored)
    }
    #[cfg(not(feature = "planted-bugs"))]
    {
        let _ = core;
        false
    }
}

/// One `Effect::PublishObservation`, waiting for the publisher.
#[derive(Debug)]
struct ObservationPublish {
    subject: String,
    msg_id: String,
    payload: bytes::Bytes,
}

/// The loop's end of the publisher's queue.
struct ObservationQueue {
    queue: mpsc::Sender<ObservationPublish>,
    /// Publishes dropped because the queue was full.
    dropped: u64,
    /// Where each drop is also counted, for `sentinel_observation_publishes_dropped_total`.
    telemetry: Option<Telemetry>,
}

impl ObservationQueue {
    /// Queues a publish without waiting; a full queue drops it, counted and logged (at the
    /// first drop and every 1,000th: a bus that slow says so once, not per message).
    fn push(&mut self, publish: ObservationPublish) {
        if let Err(error) = self.queue.try_send(publish) {
            self.dropped += 1;
            if let Some(t) = &self.telemetry {
                t.observation_dropped();
            }
            if self.dropped % 1_000 == 1 {
                match error {
                    mpsc::error::TrySendError::Full(_) => warn!(
                        dropped = self.dropped,
                        "observation publish queue full; self-point or derived reading dropped"
                    ),
                    mpsc::error::TrySendError::Closed(_) => warn!(
                        dropped = self.dropped,
                        "observation publisher stopped; self-point or derived reading dropped"
                    ),
                }
            }
        }
    }
}

/// Publishes the queued observations one at a time, in the order they were queued. Losing one
/// reading to a full stream is what the stream's bound means; the next interval sends fresh
/// self-points, and a derived reading lost here is counted in the log line.
async fn observation_publish_loop<B: Bus>(
    bus: B,
    mut queue: mpsc::Receiver<ObservationPublish>,
    telemetry: Option<Telemetry>,
) {
    while let Some(publish) = queue.recv().await {
        if let Err(e) = bus
            .publish_observation(publish.subject, publish.msg_id, publish.payload)
            .await
        {
            warn!(error = %e, "self-point or derived reading publish failed");
            if let Some(t) = &telemetry {
                t.bus_error(BusOp::PublishObservation, Some(&e));
            }
        }
    }
}

/// `Effect::RaiseEpoch` (issue 25 item 3): a driver's hello showed an epoch above this core's.
/// The newest registry version in the store, compiled (a running core's live reload, issue
/// 21 item 7).
async fn load_newest_registry<S: Store>(store: &S) -> Result<Option<Arc<sentinel_core::Registry>>, String> {
    let Some(stored) = store.load_registry(None).await.map_err(|e| e.to_string())? else {
        return Ok(None);
    };
    crate::registry_dir::compile_stored_shared(stored)
        .map(Some)
        .map_err(|e| e.to_string())
}

async fn raise_epoch<S: Store>(
    store: &S,
    epoch: u32,
    floor: u32,
    telemetry: &Option<Telemetry>,
) -> EpochRaise {
    match store.raise_epoch(epoch, floor).await {
        Ok(raised) => {
            warn!(
                epoch,
                floor,
                raised,
                "a driver has seen a higher core epoch than this one, or this epoch from another start \
                 (a failover lost epoch increments?); the recorded epoch was raised past it"
            );
            EpochRaise::Raised { epoch: raised }
        }
        Err(fenced @ StoreError::Fenced { .. }) => {
            warn!(
                refusal = %fenced,
                "a driver has seen a higher core epoch; a newer core holds the lock"
            );
            if let Some(t) = telemetry {
                t.store_error(StoreOp::Control, Some(&fenced));
            }
            EpochRaise::Fenced
        }
        Err(e) => {
            error!(error = %e, epoch, floor, "raising the core epoch past a driver's failed");
            if let Some(t) = telemetry {
                t.store_error(StoreOp::Control, Some(&e));
            }
            EpochRaise::Failed
        }
    }
}

/// The store work the core asks for beside ingest, run off the loop: its answers come back as
/// inputs.
#[derive(Default)]
struct Maintenance {
    rollup_steps: JoinSet<Input>,
    retention_runs: JoinSet<Input>,
    /// The day being compacted (`Effect::CompactDay`; at most one).
    compactions: JoinSet<Input>,
    partition_runs: JoinSet<Input>,
    /// A `stale_epoch` answer's question to the store (`Effect::CheckEpoch`).
    epoch_checks: JoinSet<Input>,
}

/// Executes one effect, in emitted order. Returns the exit reason for `Effect::Exit`.
#[expect(
    clippy::too_many_arguments,
    reason = "the ports, the in-order queues each effect may go to, and the exporter: each is one thing"
)]
async fn execute<B: Bus, S: Store>(
    effect: Effect,
    bus: &B,
    store: &S,
    commits: &mut JoinSet<CommitResult>,
    maintenance: &mut Maintenance,
    checkpoints: &mpsc::UnboundedSender<(u32, Vec<sentinel_core::PointState>)>,
    controls: &mpsc::UnboundedSender<ControlWrite>,
    telemetry: &Option<Telemetry>,
    observations: &mut ObservationQueue,
) -> Option<ExitReason> {
    match effect {
        Effect::Commit(batch) => {
            debug!(
                batch = batch.id.0,
                rows = batch.rows.len(),
                quarantine = batch.quarantine.len(),
                "commit"
            );
            let store = store.clone();
            commits.spawn(async move { store.commit(batch).await });
        }
        Effect::Ack(tags) => {
            if let Err(e) = bus.ack(tags).await {
                // The rows are durable; an ack lost here only means a redelivery that the
                // unique index swallows.
                warn!(error = %e, "ack failed");
                if let Some(t) = telemetry {
                    t.bus_error(BusOp::Ack, Some(&e));
                }
            }
        }
        Effect::Publish { subject, payload } => {
            if let Err(e) = bus.publish(subject, payload).await {
                warn!(error = %e, "transition publish failed");
                if let Some(t) = telemetry {
                    t.bus_error(BusOp::Publish, Some(&e));
                }
            }
        }
        Effect::SendCommand {
            subject,
            reply_to,
            payload,
        } => {
            #[cfg(feature = "failpoints")]
            crate::failpoint::hit(crate::failpoint::COMMAND_COMMITTED_NOT_SENT);
            if let Err(e) = bus.publish_command(subject, reply_to, payload).await {
                warn!(error = %e, "command publish failed");
                if let Some(t) = telemetry {
                    t.bus_error(BusOp::Publish, Some(&e));
                }
            }
        }
        Effect::SendAssignment {
            subject,
            reply_to,
            payload,
        } => {
            if let Err(e) = bus.publish_command(subject, reply_to, payload).await {
                warn!(error = %e, "assignment publish failed");
                if let Some(t) = telemetry {
                    t.bus_error(BusOp::Publish, Some(&e));
                }
            }
        }
        Effect::RestartNeeded {
            version,
            reasons,
            omitted,
        } => {
            // The running core keeps its version; an operator restarts it to take this one.
            for reason in &reasons {
                warn!(version, reason = %reason, "registry version loaded: restart needed");
            }
            warn!(
                version,
                reasons = reasons.len() + omitted,
                "registry version loaded: restart needed; nothing of it was applied"
            );
        }
        Effect::Checkpoint { epoch, states } => {
            let _ = checkpoints.send((epoch, states));
        }
        Effect::Control { epoch, events } => {
            debug!(events = events.len(), epoch, "control events");
            let _ = controls.send(ControlWrite {
                epoch,
                events,
                desired: None,
            });
        }
        Effect::Arbitrate {
            epoch,
            events,
            desired,
        } => {
            debug!(events = events.len(), rows = desired.len(), epoch, "arbitration");
            let _ = controls.send(ControlWrite {
                epoch,
                events,
                desired: Some(desired),
            });
        }
        Effect::PublishObservation {
            subject,
            msg_id,
            payload,
        } => {
            // A self-point or a derived reading: queued for the ordered publisher, so a slow
            // or unreachable bus cannot hold up lock checks, and nothing goes out once the
            // loop has stopped.
            observations.push(ObservationPublish {
                subject,
                msg_id,
                payload,
            });
        }
        Effect::RefreshRollups(step) => {
            // Off the loop: a step may take a while, and the store's watermark makes it safe
            // beside commits. The core asks for one at a time.
            let store = store.clone();
            let telemetry = telemetry.clone();
            maintenance.rollup_steps.spawn(async move {
                let limits = RollupStepLimits {
                    step_minutes_max: step.step_minutes_max,
                    invalidations_max: step.invalidations_max,
                };
                match store
                    .refresh_closed_rollups(step.epoch, step.closed_before, limits)
                    .await
                {
                    Ok(done) => {
                        if let Some(t) = &telemetry {
                            t.record_rollup_watermark(done.watermark.refreshed_to);
                        }
                        debug!(
                            minutes_advanced = done.minutes_advanced,
                            invalidated_minutes = done.invalidated_minutes,
                            buckets = done.buckets_written,
                            "rollup step"
                        );
                        let behind = done.more
                            || done.watermark.refreshed_to
                                < Micros(step.closed_before.0.div_euclid(60_000_000) * 60_000_000);
                        Input::RollupStepped(RollupStepOutcome::Done { behind })
                    }
                    Err(fenced @ StoreError::Fenced { .. }) => {
                        error!(refusal = %fenced, "rollup step fenced");
                        if let Some(t) = &telemetry {
                            t.store_error(StoreOp::Rollup, Some(&fenced));
                        }
                        Input::RollupStepFenced
                    }
                    Err(e) => {
                        if let Some(t) = &telemetry {
                            t.store_error(StoreOp::Rollup, Some(&e));
                        }
                        // Idempotent, and an unfinished claim is finished by the next step.
                        warn!(error = %e, "rollup step failed; retrying after the interval");
                        Input::RollupStepped(RollupStepOutcome::Failed)
                    }
                }
            });
        }
        Effect::RaiseEpoch { epoch, floor } => {
            // The loop answers it before it gets here (`raise_epoch`).
            error!(
                epoch,
                floor, "an epoch raise reached the effect executor; ignored"
            );
        }
        Effect::CheckEpoch => {
            // Off the loop: one short read.
            let store = store.clone();
            maintenance.epoch_checks.spawn(async move {
                match store.recorded_epoch().await {
                    Ok(epoch) => {
                        warn!(recorded_epoch = epoch, "a driver answered stale_epoch; checked the store");
                        Input::EpochRecorded { epoch: Some(epoch) }
                    }
                    Err(e) => {
                        warn!(error = %e, "a driver answered stale_epoch; the store did not say which epoch is recorded");
                        Input::EpochRecorded { epoch: None }
                    }
                }
            });
        }
        Effect::DropExpired(run) => {
            // Off the loop, like a rollup step: each drop is its own short fenced transaction.
            let store = store.clone();
            let telemetry = telemetry.clone();
            maintenance.retention_runs.spawn(async move {
                match store
                    .drop_expired(
                        run.epoch,
                        run.cutoffs,
                        run.partitions_max,
                        sentinel_core::control::PRINCIPAL_RETENTION,
                        run.at,
                    )
                    .await
                {
                    Ok(done) => {
                        if !done.dropped.is_empty() {
                            info!(
                                dropped = done.dropped.len(),
                                more = done.more,
                                epoch = run.epoch,
                                "retention dropped expired partitions"
                            );
                        }
                        Input::RetentionRan(RetentionOutcome::Done {
                            dropped: u32::try_from(done.dropped.len()).unwrap_or(u32::MAX),
                            more: done.more,
                        })
                    }
                    Err(fenced @ StoreError::Fenced { .. }) => {
                        error!(refusal = %fenced, "retention run fenced");
                        if let Some(t) = &telemetry {
                            t.store_error(StoreOp::Retention, Some(&fenced));
                        }
                        Input::RetentionFenced
                    }
                    Err(e) => {
                        if let Some(t) = &telemetry {
                            t.store_error(StoreOp::Retention, Some(&e));
                        }
                        warn!(error = %e, "retention run failed; retrying after the catch-up interval");
                        Input::RetentionRan(RetentionOutcome::Failed)
                    }
                }
            });
        }
        Effect::CompactDay(request) => {
            // Off the loop, like a retention run: one fenced transaction, after one lag read.
            let bus = bus.clone();
            let store = store.clone();
            let telemetry = telemetry.clone();
            maintenance.compactions.spawn(async move {
                crate::compaction::compact_day(&bus, &store, request, telemetry.as_ref()).await
            });
        }
        Effect::EnsurePartitions(run) => {
            // Off the loop and off the commit path: its own transaction, with a lock timeout.
            let store = store.clone();
            let telemetry = telemetry.clone();
            maintenance.partition_runs.spawn(async move {
                match store
                    .ensure_partitions_ahead(run.today, run.days_ahead, run.lock_timeout_ms)
                    .await
                {
                    Ok(PartitionsAhead::Ensured { created, until }) => {
                        Input::PartitionsEnsured(PartitionsOutcome::Done { created, until })
                    }
                    Ok(PartitionsAhead::LockTimedOut) => {
                        Input::PartitionsEnsured(PartitionsOutcome::LockTimedOut)
                    }
                    Err(e) => {
                        if let Some(t) = &telemetry {
                            t.store_error(StoreOp::Partitions, Some(&e));
                        }
                        warn!(error = %e, "making partitions ahead failed; retrying later");
                        Input::PartitionsEnsured(PartitionsOutcome::Failed)
                    }
                }
            });
        }
        Effect::RequestAnswer { reply_to, payload } => {
            if let Err(e) = bus.publish(reply_to, payload).await {
                warn!(error = %e, "command request answer publish failed");
                if let Some(t) = telemetry {
                    t.bus_error(BusOp::Publish, Some(&e));
                }
            }
        }
        Effect::ReprocessReply { reply_to, payload } => {
            if let Err(e) = bus.publish(reply_to, payload).await {
                warn!(error = %e, "reprocess reply publish failed");
                if let Some(t) = telemetry {
                    t.bus_error(BusOp::Publish, Some(&e));
                }
            }
        }
        Effect::Reprocess(_) => {
            // Run by the loop itself (it needs the core's registry); never reaches here.
            warn!("a reprocess effect reached the executor; ignored");
        }
        Effect::Exit(reason) => return Some(reason),
    }
    None
}

/// The pause before the first pull after a failed one; it doubles on each further failure.
pub const FETCH_BACKOFF_MS: u64 = 100;
/// The longest pause between failed pulls. The runtime gives up after `fetch_failing_max_ms`
/// (30 s) of consecutive failures or `fetch_failures_max` (30) of them, whichever comes first:
/// past several stream or consumer leader elections (4–9 s each, issue 25).
pub const FETCH_BACKOFF_MAX_MS: u64 = 2_000;

/// The pause before the pull that follows `failures` consecutive failed ones.
pub fn fetch_backoff_ms(failures: u32) -> u64 {
    if failures == 0 {
        return 0;
    }
    FETCH_BACKOFF_MS
        .saturating_mul(1u64 << (failures - 1).min(20))
        .min(FETCH_BACKOFF_MAX_MS)
}

/// Pulls on request. After a failed pull it pauses ([`fetch_backoff_ms`]) before the next, so
/// a bus between leaders (no responders, a 409, a lost pull) is asked again at a falling rate;
/// the runtime loop counts the failures and gives up after `fetch_failing_max_ms` of them.
async fn fetch_loop<C: Consumer>(
    mut consumer: C,
    mut requests: mpsc::Receiver<usize>,
    fetched: mpsc::Sender<Result<Vec<sentinel_core::Delivery>, BusError>>,
    wait_ms: u64,
) {
    let mut failures = 0u32;
    while let Some(max) = requests.recv().await {
        let pause_ms = fetch_backoff_ms(failures);
        if pause_ms > 0 {
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        let result = consumer.fetch(max, wait_ms).await;
        failures = match &result {
            Ok(_) => 0,
            Err(_) => failures.saturating_add(1),
        };
        if fetched.send(result).await.is_err() {
            return;
        }
    }
}

/// Reads the consumer's lag every `period` and hands it to the core as `Input::Lag`. Each read
/// is bounded by the period; without a reading the watchdog's suppression keeps its last
/// state, and fetch failures are what decide whether the bus is gone.
async fn lag_loop<B: Bus>(
    bus: B,
    period: Duration,
    readings: mpsc::Sender<Input>,
    telemetry: Option<Telemetry>,
) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match tokio::time::timeout(period, bus.lag()).await {
            Ok(Ok(lag)) => {
                if let Some(t) = &telemetry {
                    t.record_lag(&lag);
                }
                let reading = Input::Lag {
                    pending: lag.pending,
                    ack_pending: lag.ack_pending,
                    oldest_unacked_age_ms: lag.oldest_unacked_age_ms,
                };
                if readings.send(reading).await.is_err() {
                    return;
                }
                let front = Input::StreamFront {
                    first_seq: lag.first_seq,
                };
                if readings.send(front).await.is_err() {
                    return;
                }
            }
            Ok(Err(e)) => {
                warn!(error = %e, "reading consumer lag failed");
                if let Some(t) = &telemetry {
                    t.bus_error(BusOp::Lag, Some(&e));
                }
            }
            Err(_elapsed) => {
                warn!("reading consumer lag timed out");
                if let Some(t) = &telemetry {
                    t.bus_error(BusOp::Lag, None);
                }
            }
        }
    }
}

/// One control write: events alone, or a claim change's events with its `point_desired` rows
/// (one transaction either way).
struct ControlWrite {
    epoch: u32,
    events: Vec<sentinel_core::ControlEvent>,
    desired: Option<Vec<sentinel_core::arbitration::DesiredRow>>,
}

/// Control writes one at a time, in emitted order: a claim change and a watchdog event never
/// overtake each other, and a command's `command_issued` is in the log before it is published.
async fn control_loop<S: Store>(
    store: S,
    mut queue: mpsc::UnboundedReceiver<ControlWrite>,
    done: mpsc::UnboundedSender<Input>,
    telemetry: Option<Telemetry>,
) {
    while let Some(ControlWrite {
        epoch,
        events,
        desired,
    }) = queue.recv().await
    {
        let written = match desired {
            None => store.write_control_events(epoch, events.clone()).await,
            Some(desired) => store.write_arbitration(epoch, events.clone(), desired).await,
        };
        let answer = match written {
            Ok(seqs) => Input::ControlCommitted(sentinel_core::ControlReport { events, seqs }),
            Err(e) => {
                error!(error = %e, "control-event write failed");
                if let Some(t) = &telemetry {
                    t.store_error(StoreOp::Control, Some(&e));
                }
                Input::ControlFailed {
                    fenced: matches!(e, StoreError::Fenced { .. }),
                }
            }
        };
        if done.send(answer).is_err() {
            return;
        }
    }
}

async fn checkpoint_loop<S: Store>(
    store: S,
    mut queue: mpsc::UnboundedReceiver<(u32, Vec<sentinel_core::PointState>)>,
    done: mpsc::UnboundedSender<Result<(), StoreError>>,
) {
    // One at a time, in order, so an older checkpoint never overwrites a newer one.
    while let Some((epoch, states)) = queue.recv().await {
        let points = states.len();
        let result = store.checkpoint(epoch, states).await;
        debug!(points, ok = result.is_ok(), "checkpoint");
        if done.send(result).is_err() {
            return;
        }
    }
}

/// Reads the store gauges for the exporter: at once, then every `period`. A failed read is
/// counted and leaves the last figures in place.
async fn store_gauges_loop<S: Store>(store: S, telemetry: Telemetry, period: Duration) {
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let read = async {
            Ok::<_, StoreError>((
                store.retention_marks().await?,
                store.partitions_created_until().await?,
            ))
        };
        match tokio::time::timeout(period, read).await {
            Ok(Ok((marks, until))) => telemetry.record_store_gauges(marks, until),
            Ok(Err(e)) => {
                debug!(error = %e, "reading the store gauges failed");
                telemetry.store_error(StoreOp::Gauges, Some(&e));
            }
            Err(_elapsed) => telemetry.store_error(StoreOp::Gauges, None),
        }
    }
}

#[cfg(test)]
mod fetch_backoff_tests {
    use super::*;

    /// Issue 25: the default tolerance outlasts several 4–9 s leader elections, and is bounded.
    #[test]
    fn the_default_fetch_tolerance_outlasts_elections_and_is_bounded() {
        assert_eq!(fetch_backoff_ms(0), 0);
        assert_eq!(fetch_backoff_ms(1), 100);
        assert_eq!(fetch_backoff_ms(2), 200);
        assert_eq!(fetch_backoff_ms(u32::MAX), FETCH_BACKOFF_MAX_MS);
        let config = RuntimeConfig::default();
        let by_count_ms: u64 = (0..config.fetch_failures_max).map(fetch_backoff_ms).sum();
        let tolerated_ms = by_count_ms.min(config.fetch_failing_max_ms);
        assert!(tolerated_ms >= 3 * 9_000, "{tolerated_ms} ms");
        assert!(tolerated_ms <= 60_000, "{tolerated_ms} ms");
    }
}
