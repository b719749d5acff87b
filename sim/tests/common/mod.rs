//! Shared by the simulator's tests: the registry (loaded once per test binary) and a
//! parallel seed runner.

#![allow(dead_code)] // each test binary uses part of this

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use sentinel_sim::{Options, SeedOutcome, SimRegistry, run_seed};

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
                    let outcome = run_seed(seed, registry(), options);
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
