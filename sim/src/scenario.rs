//! One simulated run: build the world from a seed, start the turmoil hosts, step simulated
//! time, fire the controller's faults, heal them, and judge the run (DESIGN.md §6).
//!
//! Hosts: `core-a` (and `core-b` when the seed asks for two cores), each a supervisor that
//! starts a core process through the production startup sequence and runtime loop
//! (`sentinel_runtime::startup`, `sentinel_runtime::event_loop`) over the sim's adapters and restarts it
//! after it exits; one driver host per device host of the registry, and one for the
//! report-on-change point (`SimRegistry::on_change`). The bus and store models
//! are shared state that every host reaches through its ports.
//!
//! Phases: a safety phase with faults on (`Settings::safety_ms`), then a liveness phase with
//! every fault healed in which traffic stops and everything accepted must drain within
//! `Settings::drain_bound_ms` (invariant 9). A run lasts at least `Settings::run_min_ms`.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use sentinel_core::{Config, Micros, PlantedBug};
use sentinel_models::MemoryStore;
use sentinel_models::{MemoryBus, MemoryBusConfig};
use sentinel_ports::Inbound;
use sentinel_ports::clock::Clock;
use sentinel_runtime::startup::{self, StartError};
use sentinel_runtime::{self as runtime, RuntimeConfig};

use crate::adapters::{SimBus, SimStore};
use crate::checker::{Checker, CheckerConfig, Violation};
use crate::drivers::HostDriver;
use crate::registry::{CommandPoint, SimRegistry};
use crate::rng::SimRng;
use crate::settings::{CONTROLLER_FIRE_P, Settings, Site};
use crate::trace::Trace;
use crate::world::{CoreId, EVENTS_PER_INSTANT_MAX, Incarnation, Inner, Links, SimClock, World};

/// How often the simulated operator asks every running core to command a point.
const COMMAND_INTERVAL_MS: i64 = 5_000;
/// The dangerous-window scenario: when the lock holder is cut off from the store, and for
/// how long.
const DANGEROUS_WINDOW_AT_MS: i64 = 60_500;
const DANGEROUS_WINDOW_MS: i64 = 60_000;
/// Before the cut, the holder's messages to drivers start taking this long, and the operator
/// asks it for one more command: written while it still holds the lock, delivered after the
/// other core has taken over.
const LATE_COMMAND_LEAD_MS: i64 = 2_000;
const LATE_COMMAND_DELAY_MS: u64 = 10_000;

/// The `slow_driver_link` fault: how long the bus holds the core's messages to drivers, and
/// for how long it does.
const SLOW_DRIVER_LINK_DELAY_MS: (u64, u64) = (2_000, 15_000);
const SLOW_DRIVER_LINK_FOR_MS: (u64, u64) = (5_000, 30_000);
/// The `stream_leader_change` fault: how long an election leaves the stream without a leader
/// (nats-server documents 4–9 s).
const LEADER_ELECTION_MS: (u64, u64) = (4_000, 9_000);
/// The `lock_session_killed_alone` fault: how long a two-core run's standby is held down.
const STANDBY_DOWN_MS: (u64, u64) = (2_000, 15_000);

pub use crate::settings::START_UNIX_S;
pub(crate) use crate::world::now_or_never;

/// How a run is driven, beyond its seed.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Print every trace line as it happens.
    pub echo_trace: bool,
    /// A bug to plant in every core (and the store model) of the run.
    pub plant: Option<PlantedBug>,
    /// The core runtime spec's dangerous window instead of random faults: two cores, and the
    /// lock holder cut off from the store (its session dies) while it still reaches the bus,
    /// so the other core takes over; the operator keeps asking both for commands.
    pub dangerous_window: bool,
}

/// What a run showed.
#[derive(Clone, Debug)]
pub struct SeedOutcome {
    pub seed: u64,
    /// How the run was driven beyond its seed (part of what replays it).
    pub options: Options,
    pub settings: Settings,
    pub trace_hash: String,
    pub trace_lines: u64,
    pub violation: Option<Failure>,
    pub stats: Stats,
}

#[derive(Clone, Debug)]
pub struct Failure {
    pub violation: Violation,
    pub step: u64,
    pub recent_trace: Vec<String>,
}

#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub accepted: u64,
    pub rows: u64,
    pub quarantined: u64,
    pub transitions: u64,
    pub epochs: u32,
    pub steps: u64,
    pub simulated_ms: u64,
    /// Commands drivers applied, applied from a core that no longer held the lock, refused.
    pub commands_applied: u64,
    pub commands_applied_deposed: u64,
    pub commands_refused: u64,
    /// Command writes a core could not make (cut off from the store), so never sent.
    pub command_writes_refused: u64,
    /// Maintenance writes (rollup claims, applies and refreshes, reprocess chunks and events,
    /// retention drops, class moves; a core's or the operator's) the store accepted, each
    /// judged by invariant 6, and those its fence refused (a deposed writer's).
    pub maintenance_writes: u64,
    pub maintenance_writes_refused: u64,
    /// The most events one simulated instant held (invariant 9's bound is
    /// [`EVENTS_PER_INSTANT_MAX`]).
    pub events_peak: u64,
    /// Derived readings committed and checked against their inputs (invariant 17).
    pub derived_checked: u64,
    /// Rollup buckets compared with the aggregate of their raw rows (invariant 10).
    pub rollup_buckets_checked: u64,
    /// Claims the log recorded, arbitration writes compared with the reference arbitration
    /// (invariant 18), the changes of winning value among them (invariant 12), and the
    /// verification verdicts judged (invariant 20).
    pub claims_set: u64,
    pub arbitrations_checked: u64,
    pub value_changes_checked: u64,
    pub verdicts_checked: u64,
    /// Committed rows judged against their point's event policy (invariant 21).
    pub policy_rows_checked: u64,
    /// Rules' claims and releases judged against the reference evaluation, and warmup ends
    /// judged (invariants 22–25).
    pub rule_claims_checked: u64,
    pub rule_warmups_checked: u64,
    /// Windows in which a rule's condition held long enough that it had to fire, judged at
    /// the end of the run (invariant 26).
    pub rule_windows_checked: u64,
    /// Database failovers (issue 25, both shapes), and of the lossy ones: rows and control
    /// events rolled back, epochs lost, and accepted observations lost for good (acked before
    /// their rows were lost: the documented cost of asynchronous replication).
    pub failovers: u64,
    pub failover_rows_rolled_back: u64,
    pub failover_control_events_rolled_back: u64,
    pub failover_epochs_lost: u64,
    pub failover_observations_lost: u64,
    /// Compactions of old days that landed, the rows they compacted, and day readings judged
    /// by invariant 27.
    pub compacted_days: u64,
    pub compacted_rows: u64,
    pub compaction_days_checked: u64,
    /// Days whose minute rollups the operator compacted alone, and compactions after which a
    /// day's minute rollups were judged unchanged (invariant 27).
    pub rollup_days_compacted: u64,
    pub rollup_days_judged: u64,
}

impl SeedOutcome {
    /// The command that replays this run bit for bit.
    pub fn replay_command(&self) -> String {
        replay_command(self.seed, &self.options)
    }

    /// For a failing run: the invariant that broke, when and why, the last trace lines and
    /// the replay command, as the binary prints them and the tests report them.
    pub fn failure_report(&self) -> Option<String> {
        let failure = self.violation.as_ref()?;
        let simulated_s = (failure.violation.at.0 - START_UNIX_S as i64 * 1_000_000) as f64 / 1e6;
        Some(format!(
            "invariant {} violated at step {} ({simulated_s:.3} s simulated): {}\nlast trace lines:\n  {}\nreplay: {}",
            failure.violation.invariant,
            failure.step,
            failure.violation.what,
            failure.recent_trace.join("\n  "),
            self.replay_command()
        ))
    }
}

/// The command that replays `seed` driven by `options` (a planted bug and the dangerous
/// window are part of the run, not of the seed).
pub fn replay_command(seed: u64, options: &Options) -> String {
    let features = if options.plant.is_some() {
        " --features planted-bugs"
    } else {
        ""
    };
    let mut command = format!("cargo run --release -p sentinel-sim{features} -- --seed {seed}");
    if let Some(bug) = options.plant {
        command.push_str(&format!(" --plant {}", bug.name()));
    }
    if options.dangerous_window {
        command.push_str(" --dangerous-window");
    }
    command
}

/// A scheduled change the controller applies when its time comes.
enum Scheduled {
    Bounce(CoreId),
    Heal(CoreId, Links),
}

pub fn run_seed(seed: u64, registry: &SimRegistry, options: &Options) -> SeedOutcome {
    let mut rng = SimRng::new(seed);
    let mut settings = Settings::draw(seed, &mut rng);
    if options.dangerous_window {
        settings.two_cores = true;
        settings.active.clear();
    }
    let start = Micros(START_UNIX_S as i64 * 1_000_000);
    let clock = Arc::new(SimClock::new(start, seed));

    let bus = MemoryBus::new(
        MemoryBusConfig {
            max_msgs: settings.stream_max_msgs,
            duplicate_window_ms: settings.duplicate_window_ms,
            ack_wait_ms: settings.ack_wait_ms,
            // Waiting fetches wake on every publish; the poll only catches due redeliveries.
            fetch_poll_ms: 500,
            ..MemoryBusConfig::default()
        },
        clock.clone(),
    );
    let store = MemoryStore::new("OBS", clock.clone());
    #[cfg(feature = "planted-bugs")]
    if let Some(bug) = options.plant {
        store.plant(bug);
    }
    now_or_never(sentinel_ports::Store::store_registry(&store, &registry.v1))
        .expect("invariant: storing into a fresh memory store cannot fail");

    let cores: Vec<CoreId> = if settings.two_cores {
        vec![CoreId(0), CoreId(1)]
    } else {
        vec![CoreId(0)]
    };
    let core_config = core_config(&settings);
    let inner = Inner {
        rng,
        claims_rng: SimRng::new(seed ^ crate::operator::CLAIMS_STREAM),
        compact_rng: SimRng::new(seed ^ crate::operator::compaction::COMPACT_STREAM),
        asserted_rng: SimRng::new(seed ^ crate::drivers::ASSERTED_STREAM),
        trace: Trace::new(options.echo_trace, start),
        checker: Checker::new(CheckerConfig {
            freshness_us: registry.freshness_us.clone(),
            startup_grace_us: core_config.startup_grace_ms * 1_000,
            lag_high_pending: core_config.lag_high_pending,
            lag_high_age_ms: core_config.lag_high_age_ms,
            lag_poll_interval_us: runtime_config(&settings).lag_poll_interval_ms as i64 * 1_000,
            lock_loss_bound_us: (settings.lock_check_interval_ms + settings.tick_ms) as i64 * 1_000,
            derived: registry.derived.clone(),
            agg_safe: registry.agg_safe.clone(),
            writable: registry.writable.clone(),
            events: registry.events.clone(),
            rules: registry.rules.clone(),
            rule_inputs: registry.rule_inputs.clone(),
        }),
        links: cores.iter().map(|&c| (c, Links::default())).collect(),
        incarnations: Default::default(),
        faults_on: true,
        leader_change_until: None,
        failover: Default::default(),
        crash_requests: Vec::new(),
        published: 0,
        driver_landed: 0,
        driver_dropped: 0,
        driver_queued: Default::default(),
        traffic_done: false,
        step: 0,
        inbound_senders: Default::default(),
        driver_source_epochs: Default::default(),
        driver_guards: Default::default(),
        driver_plant: options.plant,
    };
    let world = Arc::new(World::new(settings.clone(), bus, store, clock.clone(), inner));
    world.trace(format_args!("settings {settings}"));
    world.lock().checker.rules.tick_us = settings.tick_ms as i64 * 1_000;
    if settings.is_active(Site::OperatorCompact) {
        let mut rng = SimRng::new(seed ^ crate::operator::compaction::COMPACT_STREAM ^ 1);
        crate::operator::compaction::seed_old_days(&world, registry, &mut rng, start);
    }

    // Invariant 9's bound on a run: every phase's simulated time plus a minute, in steps.
    // turmoil's own duration limit sits one step later, so the bound is what a run meets.
    let duration_ms = settings
        .run_min_ms
        .max(settings.safety_ms + settings.drain_bound_ms)
        + 60_000;
    let steps_max = duration_ms / settings.tick_ms;
    let mut sim = turmoil::Builder::new()
        .epoch(UNIX_EPOCH + Duration::from_secs(START_UNIX_S))
        .tick_duration(Duration::from_millis(settings.tick_ms))
        .simulation_duration(Duration::from_millis(duration_ms + settings.tick_ms))
        .rng_seed(seed)
        .build();

    for &core in &cores {
        let world = world.clone();
        let plant = options.plant;
        sim.host(core.host(), move || core_process(world.clone(), core, plant));
    }
    let traffic_ms = settings.safety_ms + settings.liveness_traffic_ms;
    let hosts: Vec<&String> = registry.hosts.keys().collect();
    // Paced to spend the message budget in about 80% of the traffic window, so a run reaches
    // its budget before the window closes.
    let mean_interval_ms = traffic_ms * 4 / 5 * hosts.len() as u64 / settings.messages.max(1);
    for (i, host) in hosts.iter().enumerate() {
        let world = world.clone();
        let host = (*host).clone();
        let points = registry.hosts[&host].clone();
        let foreign: Vec<_> = registry
            .hosts
            .iter()
            .filter(|(h, _)| **h != host)
            .flat_map(|(_, p)| p.iter().cloned())
            .collect();
        let added = (i == 0).then(|| registry.added_point.clone());
        sim.host(format!("driver-{host}"), move || {
            let driver = HostDriver::new(
                world.clone(),
                &host,
                points.clone(),
                foreign.clone(),
                added.clone(),
            );
            async move {
                driver.run(mean_interval_ms).await;
                Ok(())
            }
        });
    }

    // The report-on-change point's driver: a host of its own, outside the pacing above and
    // drawing from its own generator, so the other drivers' traffic stays as it was.
    {
        let world = world.clone();
        let (point, heartbeat_s) = registry.on_change.clone();
        sim.host(format!("driver-{}-on-change", point.host), move || {
            let driver = HostDriver::on_change(
                world.clone(),
                point.clone(),
                crate::rng::SimRng::new(seed ^ crate::drivers::ON_CHANGE_STREAM),
            );
            async move {
                driver.run_on_change(heartbeat_s).await;
                Ok(())
            }
        });
    }

    let mut scheduled: Vec<(Micros, Scheduled)> = Vec::new();
    let mut next_fault_at = start.add_ms(1_000);
    let safety_end = start.add_ms(settings.safety_ms as i64);
    let traffic_end = start.add_ms(traffic_ms as i64);
    let drain_deadline = safety_end.add_ms(settings.drain_bound_ms as i64);
    let run_end = start.add_ms(settings.run_min_ms as i64);
    let mut reloaded = false;
    let mut next_command_at = start.add_ms(COMMAND_INTERVAL_MS);
    let mut commands_sent = 0u64;
    let mut window_opened = false;
    // The lock holder's links before the late command, restored when the window closes.
    let mut window_holder: Option<(CoreId, Links)> = None;
    let command_points = registry.command_points.clone();
    let mut drained_at: Option<Micros> = None;
    let mut steps = 0u64;

    let failure = loop {
        if steps >= steps_max {
            let now = clock.now();
            world.lock().checker.fail(
                9,
                now,
                format!("the run did not end within {steps_max} steps ({duration_ms} ms simulated)"),
            );
            break world.lock().checker.violation().cloned();
        }
        let stepped = sim.step();
        steps += 1;
        let now = start.add_ms(sim.elapsed().as_millis() as i64);
        clock.set_controller_now(now);
        world.lock().step = steps;
        if let Some(at) = clock.livelocked_at() {
            let simulated_s = at.saturating_sub(start) as f64 / 1e6;
            world.lock().checker.fail(
                9,
                at,
                format!(
                    "livelock: more than {EVENTS_PER_INSTANT_MAX} events at the simulated instant \
                     {simulated_s:.6} s; a host never let simulated time advance"
                ),
            );
        } else if let Err(e) = stepped {
            world.lock().checker.fail(0, now, format!("a host failed: {e}"));
        }

        if let Some(violation) = world.lock().checker.violation().cloned() {
            break Some(violation);
        }

        // Crash requests from the port sites: kill the process now, restart it later.
        let crashes: Vec<CoreId> = std::mem::take(&mut world.lock().crash_requests);
        let crashed = !crashes.is_empty();
        for core in crashes {
            crash(&mut sim, &world, core, now);
            let delay_ms = world.between(100, settings.restart_delay_max_ms) as i64;
            world.trace(format_args!("crash {} (restart in {delay_ms} ms)", core.host()));
            scheduled.push((now.add_ms(delay_ms), Scheduled::Bounce(core)));
        }
        if crashed && now < safety_end {
            crate::operator::maintenance(&world, registry, now);
        }
        let (due, later): (Vec<_>, Vec<_>) = scheduled.drain(..).partition(|(at, _)| *at <= now);
        scheduled = later;
        for (_, change) in due {
            match change {
                Scheduled::Bounce(core) => {
                    world.trace(format_args!("restart {}", core.host()));
                    // A bounce ends whatever runs on the host (usually nothing: it crashed).
                    crash(&mut sim, &world, core, now);
                    sim.bounce(core.host());
                }
                Scheduled::Heal(core, links) => {
                    world.lock().links.insert(core, links);
                    world.trace(format_args!("links of {} now {links:?}", core.host()));
                }
            }
        }
        // Invariant 15: every incarnation that lost its lock session has ended in time.
        world.lock().checker.check_lock_losers_ended(now);
        // Invariant 26 as the run goes: each rule window whose end has passed.
        {
            let mut inner = world.lock();
            if let Err((invariant, what)) = inner.checker.rules.check_timely(now, false) {
                inner.checker.fail(invariant, now, what);
            }
        }

        if now >= traffic_end && !world.lock().traffic_done {
            world.lock().traffic_done = true;
            world.trace(format_args!("traffic ends"));
        }
        if world.lock().published >= settings.messages {
            world.lock().traffic_done = true;
        }

        if now >= next_command_at {
            next_command_at = now.add_ms(COMMAND_INTERVAL_MS);
            operator_commands(
                &world,
                &command_points,
                &mut commands_sent,
                !options.dangerous_window,
            );
        }
        if options.dangerous_window
            && window_holder.is_none()
            && now >= start.add_ms(DANGEROUS_WINDOW_AT_MS - LATE_COMMAND_LEAD_MS)
        {
            window_holder = send_late_command(&world, &cores, &command_points);
        }
        if options.dangerous_window && !window_opened && now >= start.add_ms(DANGEROUS_WINDOW_AT_MS) {
            window_opened = open_dangerous_window(
                &world,
                &cores,
                &command_points,
                now,
                window_holder,
                &mut scheduled,
            );
        }

        if now < safety_end {
            crate::failover::step(&world, now);
            if now >= next_fault_at {
                next_fault_at = now.add_ms(1_000);
                controller_faults(&world, &cores, now, &mut scheduled, registry, &mut reloaded);
                if standby_down_fault(&world, &cores, now, &mut scheduled) {
                    let standby = cores
                        .iter()
                        .copied()
                        .find(|&c| Some(c) != lock_holder(&world, &cores));
                    if let Some(standby) = standby {
                        crash(&mut sim, &world, standby, now);
                    }
                }
            }
        } else if world.lock().faults_on {
            // Liveness phase: heal everything, faults stop firing.
            let mut inner = world.lock();
            inner.faults_on = false;
            inner.leader_change_until = None;
            for links in inner.links.values_mut() {
                *links = Links::default();
            }
            inner.trace.event(now, format_args!("faults healed"));
            drop(inner);
            scheduled.retain(|(_, s)| matches!(s, Scheduled::Bounce(_)));
            crate::failover::heal(&world);
        } else if world.lock().traffic_done {
            let drained = drained_at.is_none()
                && world.bus.stream_len() == 0
                && world.lock().checker.all_covered()
                && world.lock().driver_queued.values().all(|&n| n == 0);
            if drained {
                drained_at = Some(now);
                world.trace(format_args!("drained"));
                let mut inner = world.lock();
                let (published, landed, dropped) =
                    (inner.published, inner.driver_landed, inner.driver_dropped);
                if published != landed + dropped {
                    inner.checker.fail(
                        2,
                        now,
                        format!(
                            "drivers published {published} distinct readings; the stream took {landed} and full queues dropped {dropped}: {} lost uncounted",
                            published as i64 - (landed + dropped) as i64
                        ),
                    );
                }
            }
            if drained_at.is_none() && now >= drain_deadline {
                let uncovered = world.lock().checker.uncovered();
                let what = format!(
                    "not drained {} s after faults healed: {} messages in the stream, {} accepted \
                     messages without a row or quarantine entry (first seqs {:?})",
                    settings.drain_bound_ms / 1_000,
                    world.bus.stream_len(),
                    uncovered.len(),
                    &uncovered[..uncovered.len().min(5)]
                );
                world.lock().checker.fail(9, now, what);
                continue;
            }
            if drained_at.is_some() && now >= run_end {
                // Invariant 27's end: every compactable day still holds what was committed.
                crate::operator::compaction::check_days(&world, now);
                // Invariant 17's end: no reading a crash lost stays lost.
                let mut inner = world.lock();
                inner.checker.check_derived_complete(now);
                // Invariant 26's end: every rule whose condition held long enough fired.
                if let Err((invariant, what)) = inner.checker.rules.check_timely(now, true) {
                    inner.checker.fail(invariant, now, what);
                }
                break inner.checker.violation().cloned();
            }
        }
    };

    let inner = world.lock();
    let failure = failure.map(|violation| Failure {
        violation,
        step: steps,
        recent_trace: inner.trace.recent(),
    });
    let quarantined = world.store.quarantine_counts().iter().map(|(_, n)| n).sum();
    SeedOutcome {
        seed,
        options: options.clone(),
        settings,
        trace_hash: inner.trace.hash_hex(),
        trace_lines: inner.trace.lines(),
        violation: failure,
        stats: Stats {
            accepted: inner.checker.accepted_total(),
            rows: world.store.row_counts().total(),
            quarantined,
            transitions: inner.checker.transitions,
            epochs: world.store.current_epoch(),
            steps,
            simulated_ms: sim.elapsed().as_millis() as u64,
            commands_applied: inner.checker.commands_applied,
            commands_applied_deposed: inner.checker.commands_applied_deposed,
            commands_refused: inner.checker.commands_refused,
            command_writes_refused: inner.checker.command_writes_refused,
            maintenance_writes: inner.checker.maintenance.landed_total(),
            maintenance_writes_refused: inner.checker.maintenance.refused_total(),
            events_peak: clock.events_peak(),
            derived_checked: inner.checker.derived.checked,
            rollup_buckets_checked: inner.checker.rollups.checked,
            claims_set: inner.checker.commands.claims_set,
            arbitrations_checked: inner.checker.commands.arbitrations_checked,
            value_changes_checked: inner.checker.commands.changes_checked,
            verdicts_checked: inner.checker.commands.verdicts_checked,
            policy_rows_checked: inner.checker.events.judged,
            rule_claims_checked: inner.checker.rules.claims_checked,
            rule_warmups_checked: inner.checker.rules.warmups_checked,
            rule_windows_checked: inner.checker.rules.timely_checked,
            failovers: inner.failover.count,
            failover_rows_rolled_back: inner.checker.failover.rows_rolled_back,
            failover_control_events_rolled_back: inner.checker.failover.control_events_rolled_back,
            failover_epochs_lost: inner.checker.failover.epochs_lost,
            failover_observations_lost: inner.checker.failover.observations_lost(),
            compacted_days: inner.checker.compaction.compacted_days,
            compacted_rows: inner.checker.compaction.compacted_rows,
            compaction_days_checked: inner.checker.compaction.days_checked,
            rollup_days_compacted: inner.checker.compaction.rollup_days_compacted,
            rollup_days_judged: inner.checker.compaction.rollup_days_judged,
        },
    }
}

/// The dedup set's room at each core start (`Config::dedup_presize_keys_max`).
const DEDUP_PRESIZE_KEYS_MAX: usize = 1 << 12;

/// The configuration of every core of a run.
fn core_config(settings: &Settings) -> Config {
    Config {
        dedup_keys_max: settings.dedup_keys_max,
        // A whole run delivers about 4,000 keys (spread over a dozen core starts), so room for
        // 2^12 at each start; the set grows past it if a run needs (the bound, and what the
        // core remembers and forgets, are the setting's). Production's 2^16 presize would have
        // every start allocate and fault in 4 MiB.
        dedup_presize_keys_max: DEDUP_PRESIZE_KEYS_MAX,
        // Self-points still flow through ingest (and go stale between readings, which
        // exercises the watchdog), at a third of production's rate to keep seeds cheap.
        self_points_interval_ms: 15_000,
        ..Config::default()
    }
}

/// The runtime configuration of every core of a run.
fn runtime_config(settings: &Settings) -> RuntimeConfig {
    RuntimeConfig {
        lock_check_interval_ms: settings.lock_check_interval_ms,
        progress_interval_ms: 3_600_000,
        // A waiting fetch wakes on every publish; a long wait only saves idle wake-ups, which
        // dominate a sparse simulated run.
        fetch_wait_ms: 1_000,
        ..RuntimeConfig::default()
    }
}

/// Tells the checker `incarnation` ended: with its exit code, or (`None`) without running.
fn core_ended(world: &World, incarnation: &Incarnation, code: Option<i32>) {
    let now = world.now();
    world.lock().checker.on_core_end(incarnation.id(), code, now);
}

/// Kills `core`'s process now and schedules its restart.
fn crash(sim: &mut turmoil::Sim<'_>, world: &World, core: CoreId, now: Micros) {
    sim.crash(core.host());
    let incarnation = world.lock().incarnations.get(&core).cloned();
    if let Some(incarnation) = incarnation {
        world.lock().checker.on_core_end(incarnation.id(), None, now);
    }
}

/// A core host's software: an orchestrator restarting the `sentinel run` process after each
/// exit. Each start is a new incarnation with fresh adapters, exactly as a new process.
async fn core_process(world: Arc<World>, core: CoreId, plant: Option<PlantedBug>) -> turmoil::Result {
    let _ = plant; // used only with the planted-bugs feature
    loop {
        let incarnation = world.new_incarnation(core);
        let bus = SimBus::new(world.clone(), incarnation.clone());
        let store = SimStore::new(world.clone(), incarnation.clone());
        let config = core_config(&world.settings);
        match startup::start(
            &store,
            startup::already_connected(&bus),
            None,
            config,
            world.clock.as_ref(),
        )
        .await
        {
            Ok(started) => {
                #[allow(unused_mut)]
                let mut core_machine = started.core;
                #[cfg(feature = "planted-bugs")]
                if let Some(bug) = plant {
                    core_machine.plant(bug);
                }
                let runtime_config = runtime_config(&world.settings);
                let observer = {
                    let world = world.clone();
                    let incarnation = incarnation.clone();
                    move |c: &sentinel_core::Core| world.observe(&incarnation, c)
                };
                let outcome = runtime::run_observed(
                    core_machine,
                    started.bus,
                    started.consumer,
                    store,
                    started.lease,
                    world.clock.clone(),
                    runtime_config,
                    std::future::pending::<()>(),
                    started.inbound,
                    observer,
                )
                .await;
                world.trace(format_args!(
                    "{} #{} exits {} ({})",
                    core.host(),
                    incarnation.number,
                    outcome.exit.code,
                    outcome.exit.why
                ));
                core_ended(&world, &incarnation, Some(outcome.exit.code));
            }
            Err(StartError::LockHeld) => {
                world.trace(format_args!(
                    "{} #{} exits 10 (lock held)",
                    core.host(),
                    incarnation.number
                ));
                core_ended(&world, &incarnation, None);
            }
            Err(e) => {
                world.trace(format_args!(
                    "{} #{} failed to start: {e}",
                    core.host(),
                    incarnation.number
                ));
                core_ended(&world, &incarnation, None);
            }
        }
        let delay_ms = world.between(100, world.settings.restart_delay_max_ms);
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
    }
}

/// The operator asks every running core to command one point (a core that is not the lock
/// holder must not get one to a driver: its write is fenced). With `claims`, each request is
/// one [`crate::operator::draw_claim`] draws (holders, bands, durations, releases); without
/// (the dangerous window), every request is `operator:sim`'s claim for the default hour.
fn operator_commands(world: &World, points: &[CommandPoint], sent: &mut u64, claims: bool) {
    let senders: Vec<(CoreId, tokio::sync::mpsc::Sender<Inbound>)> = world
        .lock()
        .inbound_senders
        .iter()
        .map(|(core, tx)| (*core, tx.clone()))
        .collect();
    for (core, tx) in senders {
        *sent += 1;
        let point = world.lock().rng.pick(points).clone();
        let value = point.value(world.between(0, 100));
        let ask = if claims {
            crate::operator::draw_claim(&mut world.lock().claims_rng)
        } else {
            OPERATOR_SIM
        };
        request_command(world, core, &tx, format!("op-{sent}"), point.id, value, &ask);
    }
}

/// The one operator of the dangerous window (and of every request before claims varied).
const OPERATOR_SIM: crate::operator::ClaimAsk = crate::operator::ClaimAsk {
    principal: "operator:sim",
    band: None,
    for_s: None,
    release: false,
};

/// Hands one operator request to `core`'s intake and traces whether it took it.
fn request_command(
    world: &World,
    core: CoreId,
    tx: &tokio::sync::mpsc::Sender<Inbound>,
    command_id: String,
    point_id: String,
    value: serde_json::Value,
    ask: &crate::operator::ClaimAsk,
) {
    let outcome = if tx
        .try_send(Inbound::CommandRequest(sentinel_core::CommandRequest {
            command_id: command_id.clone(),
            point_id,
            value,
            unit: None,
            for_s: ask.for_s,
            release: ask.release,
            principal: ask.principal.into(),
            reply_to: None,
            // In-process, as the runtime's test-only hook sets it: never from a bus body.
            band: ask.band,
        }))
        .is_ok()
    {
        "sent"
    } else {
        "not taken"
    };
    world.trace(format_args!(
        "operator command {command_id} to {}: {} {}{}: {outcome}",
        core.host(),
        ask.principal,
        if ask.release { "release" } else { "claim" },
        ask.band.map_or(String::new(), |b| format!(" {}", b.as_str())),
    ));
}

/// The core whose session holds the lock, if one does.
fn lock_holder(world: &World, cores: &[CoreId]) -> Option<CoreId> {
    let holder = world.store.lock_holder()?;
    cores
        .iter()
        .copied()
        .find(|core| world.lock().incarnations.get(core).and_then(|i| i.session()) == Some(holder))
}

/// The first half of the dangerous window: the lock holder's messages to drivers start
/// taking [`LATE_COMMAND_DELAY_MS`], and the operator asks it for a command, which it writes
/// while it still holds the lock. Returns the holder and its links before the change.
fn send_late_command(world: &World, cores: &[CoreId], points: &[CommandPoint]) -> Option<(CoreId, Links)> {
    let core = lock_holder(world, cores)?;
    let before = world.links(core);
    world.lock().links.insert(
        core,
        Links {
            driver_delay_ms: LATE_COMMAND_DELAY_MS,
            ..before
        },
    );
    world.trace(format_args!(
        "dangerous window: {}'s messages to drivers now take {LATE_COMMAND_DELAY_MS} ms",
        core.host()
    ));
    ask_for_command(world, core, points, "window-late", None);
    Some((core, before))
}

/// Cuts the lock holder off from the store (its session, and so its lock, dies with the
/// link) but not from the bus. Returns whether there was a holder to cut off. `late` is the
/// holder that was sent the late command, with its links before that; they come back when
/// the window closes.
fn open_dangerous_window(
    world: &World,
    cores: &[CoreId],
    points: &[CommandPoint],
    now: Micros,
    late: Option<(CoreId, Links)>,
    scheduled: &mut Vec<(Micros, Scheduled)>,
) -> bool {
    let holder = world.store.lock_holder();
    let Some(core) = lock_holder(world, cores) else {
        return false;
    };
    let current = world.links(core);
    let before = match late {
        Some((late_core, before)) if late_core == core => before,
        _ => current,
    };
    world.lock().links.insert(
        core,
        Links {
            store_cut: true,
            ..current
        },
    );
    if let Some(session) = holder {
        world.kill_lock_session(session);
    }
    world.trace(format_args!(
        "dangerous window: {} cut off from the store, still on the bus",
        core.host()
    ));
    scheduled.push((now.add_ms(DANGEROUS_WINDOW_MS), Scheduled::Heal(core, before)));
    // Inside the window the cut-off core still believes it holds the lock until its next
    // check; the operator asks it for a command right now.
    ask_for_command(world, core, points, "window-1", Some(1));
    true
}

/// The operator asks `core` (if it is running) to command a random point of `points`: to the
/// `n`th drawn value, or (`None`) to the point's reserved value, which always issues a command.
fn ask_for_command(
    world: &World,
    core: CoreId,
    points: &[CommandPoint],
    command_id: &str,
    value: Option<u64>,
) {
    let sender = world.lock().inbound_senders.get(&core).cloned();
    if let Some(tx) = sender {
        let point = world.lock().rng.pick(points).clone();
        let value = value.map_or_else(|| point.reserved(), |n| point.value(n));
        request_command(
            world,
            core,
            &tx,
            command_id.into(),
            point.id,
            value,
            &OPERATOR_SIM,
        );
    }
}

/// The controller's fault sites, given one opportunity per simulated second.
fn controller_faults(
    world: &World,
    cores: &[CoreId],
    now: Micros,
    scheduled: &mut Vec<(Micros, Scheduled)>,
    registry: &SimRegistry,
    reloaded: &mut bool,
) {
    let fires = |site: Site| world.settings.is_active(site) && world.lock().rng.chance(CONTROLLER_FIRE_P);
    if fires(Site::LockSessionKilled) && world.kill_lock_holder() {
        world.trace(format_args!("fault lock_session_killed"));
    }
    for site in [Site::PartitionStore, Site::PartitionBus] {
        if !fires(site) {
            continue;
        }
        let core = *world.lock().rng.pick(cores);
        let before = world.links(core);
        let mut cut = before;
        if site == Site::PartitionStore {
            cut.store_cut = true;
        } else {
            cut.bus_cut = true;
        }
        if cut == before {
            continue;
        }
        let duration_ms = world.between(500, 20_000) as i64;
        world.lock().links.insert(core, cut);
        if site == Site::PartitionStore {
            // The database notices the dead connection and frees the session's lock.
            let session = world.lock().incarnations.get(&core).and_then(|i| i.session());
            if let Some(session) = session {
                world.kill_lock_session(session);
            }
        }
        world.trace(format_args!(
            "fault {} {} for {duration_ms} ms",
            site.name(),
            core.host()
        ));
        scheduled.push((now.add_ms(duration_ms), Scheduled::Heal(core, before)));
    }
    if fires(Site::SlowDriverLink) {
        let core = *world.lock().rng.pick(cores);
        let before = world.links(core);
        if before.driver_delay_ms == 0 {
            let delay_ms = world.between(SLOW_DRIVER_LINK_DELAY_MS.0, SLOW_DRIVER_LINK_DELAY_MS.1);
            let for_ms = world.between(SLOW_DRIVER_LINK_FOR_MS.0, SLOW_DRIVER_LINK_FOR_MS.1) as i64;
            world.lock().links.insert(
                core,
                Links {
                    driver_delay_ms: delay_ms,
                    ..before
                },
            );
            world.trace(format_args!(
                "fault {} {}: messages to drivers take {delay_ms} ms for {for_ms} ms",
                Site::SlowDriverLink.name(),
                core.host()
            ));
            scheduled.push((now.add_ms(for_ms), Scheduled::Heal(core, before)));
        }
    }
    if fires(Site::StreamLeaderChange) && !world.leader_changing() {
        let for_ms = world.between(LEADER_ELECTION_MS.0, LEADER_ELECTION_MS.1) as i64;
        world.lock().leader_change_until = Some(now.add_ms(for_ms));
        world.trace(format_args!(
            "fault {}: no stream leader for {for_ms} ms",
            Site::StreamLeaderChange.name()
        ));
    }
    crate::failover::faults(world, now);
    if fires(Site::AckWaitExpiry) {
        world.bus.expire_in_flight();
        world.trace(format_args!("fault ack_wait_expiry"));
    }
    if !*reloaded && fires(Site::RegistryReload) {
        *reloaded = true;
        let load = now_or_never(sentinel_ports::Store::store_registry(&world.store, &registry.v2));
        world.trace(format_args!(
            "fault registry_reload: {:?}",
            load.map(|l| l.version)
        ));
    }
}

/// The `lock_session_killed_alone` site: when it fires and a core holds the lock, its session
/// dies; in a two-core run the standby is held down for a while first (returns true: the
/// caller crashes it; its restart is scheduled here), so no takeover's fence stops the holder.
fn standby_down_fault(
    world: &World,
    cores: &[CoreId],
    now: Micros,
    scheduled: &mut Vec<(Micros, Scheduled)>,
) -> bool {
    let fires =
        world.settings.is_active(Site::LockSessionKilledAlone) && world.lock().rng.chance(CONTROLLER_FIRE_P);
    let Some(holder) = fires.then(|| lock_holder(world, cores)).flatten() else {
        return false;
    };
    let standby = cores.iter().copied().find(|&c| c != holder);
    if let Some(standby) = standby {
        let down_ms = world.between(STANDBY_DOWN_MS.0, STANDBY_DOWN_MS.1) as i64;
        world.trace(format_args!(
            "fault {}: standby {} down for {down_ms} ms",
            Site::LockSessionKilledAlone.name(),
            standby.host()
        ));
        scheduled.push((now.add_ms(down_ms), Scheduled::Bounce(standby)));
    }
    world.kill_lock_holder();
    world.trace(format_args!(
        "fault {} {}",
        Site::LockSessionKilledAlone.name(),
        holder.host()
    ));
    standby.is_some()
}
