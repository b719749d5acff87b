//! Shared by the simulator's tests: the registry (loaded once per test binary), a parallel
//! seed runner, and the wall-clock guard every seed runs under.
//!
//! The guard: the simulator's own liveness bounds (events per simulated instant, steps per
//! run) turn a livelock into a violation; should anything still hang (a spin that never reads
//! the simulated clock), a seed running longer than [`SEED_WALL_MAX`] ends the test binary with
//! the seed's replay command instead of holding CI until its time limit.

#![allow(dead_code)] // each test binary uses part of this

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use sentinel_sim::{Options, SeedOutcome, SimRegistry, replay_command, run_seed};

/// Wall-clock time one seed may take before the guard calls it a hang: a few hundred times
/// what a seed takes on a loaded 2-core CI machine in the `sim` profile.
pub const SEED_WALL_MAX: Duration = Duration::from_secs(120);

/// Seeds running now, by a guard id: (started, replay command).
#[allow(clippy::disallowed_methods)] // the guard measures wall-clock time, by definition
fn running() -> &'static Mutex<BTreeMap<u64, (Instant, String)>> {
    static RUNNING: OnceLock<Mutex<BTreeMap<u64, (Instant, String)>>> = OnceLock::new();
    RUNNING.get_or_init(|| {
        std::thread::spawn(|| {
            loop {
                std::thread::sleep(Duration::from_millis(500));
                let hung = running()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    .find(|(started, _)| started.elapsed() > SEED_WALL_MAX)
                    .map(|(started, replay)| (started.elapsed(), replay.clone()));
                if let Some((elapsed, replay)) = hung {
                    eprintln!(
                        "wall-clock guard: a seed has run for {} s (guard: {} s), a hang\nreplay: {replay}",
                        elapsed.as_secs(),
                        SEED_WALL_MAX.as_secs()
                    );
                    std::process::exit(1);
                }
            }
        });
        Mutex::new(BTreeMap::new())
    })
}

/// [`run_seed`] under the wall-clock guard.
#[allow(clippy::disallowed_methods)] // the guard measures wall-clock time, by definition
pub fn run_guarded(seed: u64, options: &Options) -> SeedOutcome {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    running()
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(id, (Instant::now(), replay_command(seed, options)));
    let outcome = run_seed(seed, registry(), options);
    running().lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
    outcome
}

pub fn registry() -> &'static SimRegistry {
    static REGISTRY: OnceLock<SimRegistry> = OnceLock::new();
    REGISTRY.get_or_init(|| SimRegistry::sample().expect("the sample registry loads"))
}

/// Runs `seeds` on the machine's cores; returns every outcome, sorted by seed. With
/// `stop_at_first`, workers stop taking new seeds once one violates an invariant.
pub fn run_seeds(seeds: std::ops::Range<u64>, options: &Options, stop_at_first: bool) -> Vec<SeedOutcome> {
    let next = AtomicU64::new(seeds.start);
    let found = AtomicU64::new(u64::MAX);
    let outcomes = Mutex::new(Vec::new());
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| {
                loop {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= seeds.end || (stop_at_first && seed > found.load(Ordering::Relaxed)) {
                        return;
                    }
                    let outcome = run_guarded(seed, options);
                    if outcome.violation.is_some() {
                        found.fetch_min(seed, Ordering::Relaxed);
                    }
                    outcomes.lock().unwrap().push(outcome);
                }
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap();
    outcomes.sort_by_key(|o| o.seed);
    outcomes
}

/// An outcome as the `sentinel-sim` binary would print a failing one, with its settings.
pub fn describe(outcome: &SeedOutcome) -> String {
    match outcome.failure_report() {
        None => format!("seed {}: ok", outcome.seed),
        Some(report) => format!("seed {}\nsettings {}\n{report}", outcome.seed, outcome.settings),
    }
}
