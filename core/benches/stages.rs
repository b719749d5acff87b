//! Benchmark: stages 2–10 of the core on a realistic mix of 4,000 points (issue: "a benchmark
//! (not a timed test) of stages 2–10"). Compared, in the same run, against the spec's 500 obs/s
//! design rate.
//!
//! Run: `cargo bench -p sentinel-core --bench stages` (add `-- --messages N` to change size).
//! Two figures: `stages_2_10` calls the pipeline alone (envelope decode and validation, dedup
//! lookup, resolve, publisher check, unit check, value validation, conversion, skew, deadband);
//! `core_total` drives `Core::handle` end to end with an immediate all-inserted commit, so it
//! adds dedup bookkeeping, batching, acks, the projection fold and transition encoding.
//! A third, `derivation`, is the cost per committed row of derived points (issue 14): the same
//! mix with 1,000 of its numbers made derived (a one-hour mean over another number, 4,000
//! points in all), fed the rows stages 2–10 produced for it (in order, so each is current and
//! triggers its readers), each reading encoded as the observation the core publishes.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the core never does

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use sentinel_core::derived::Derivations;
use sentinel_core::pipeline::{self, Outcome};
use sentinel_core::registry::{Archetype, Derived, DerivedOp, Kind, Registry};
use sentinel_core::{CommitReport, Config, Core, Delivery, Effect, Input, RestoredState};

#[path = "shared/fleet_4000.rs"]
mod fleet_4000;
#[path = "shared/stage_load.rs"]
mod stage_load;

use stage_load::{T0, deliveries, registry};

const DESIGN_RATE_PER_S: f64 = 500.0;

/// The system allocator, counting calls that allocate (`alloc`, `alloc_zeroed`, `realloc`), so
/// each figure can say how many allocations an observation costs (issue 24 item 3). One relaxed
/// atomic add a call: noise beside the allocation itself.
struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}
/// The fleet with `count` of its aggregation-safe numbers turned into one-hour means over
/// `count` others (so no derived point reads a derived point).
fn registry_with_derived(count: usize) -> Arc<Registry> {
    let mut descriptors = fleet_4000::descriptors();
    let numbers: Vec<usize> = descriptors
        .iter()
        .enumerate()
        .filter(|(_, d)| d.kind == Kind::Number && d.agg_safe)
        .map(|(i, _)| i)
        .collect();
    assert!(numbers.len() >= 2 * count, "enough numbers to derive from");
    for k in 0..count {
        let input = descriptors[numbers[k]].id.clone();
        let d = &mut descriptors[numbers[numbers.len() - 1 - k]];
        d.manifest.archetype = Archetype::Derived;
        d.derived = Some(Derived {
            op: DerivedOp::Mean,
            inputs: vec![input],
            window_s: Some(3_600),
        });
    }
    Arc::new(Registry::compile(1, "bench".into(), "bench".into(), descriptors).expect("bench registry"))
}

fn main() {
    let mut messages = 1_000_000usize;
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--messages") {
        messages = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(messages);
    }
    let registry = registry();
    let input = deliveries(&registry, messages);
    let bytes: usize = input.iter().map(|d| d.payload.len()).sum();
    println!(
        "stages bench: {} points, {} messages, mean payload {} bytes",
        registry.len(),
        messages,
        bytes / messages.max(1)
    );

    // stages 2–10 alone, against the projection and dedup set of a fresh core.
    let config = Config::default();
    let mut best_stage_rate = 0.0f64;
    let mut stage_allocations = 0.0f64;
    for round in 0..3 {
        let pass = stage_load::stages_2_10_counted(&registry, &config, input.clone(), allocations);
        let rate = messages as f64 / pass.secs;
        best_stage_rate = best_stage_rate.max(rate);
        stage_allocations = pass.allocations as f64 / messages as f64;
        println!(
            "  round {round}: stages_2_10 {rate:>12.0} obs/s ({} rows, {} quarantined; {stage_allocations:.3} allocations a message)",
            pass.rows, pass.quarantined
        );
    }

    let mut best_core_rate = 0.0f64;
    let mut core_allocations = 0.0f64;
    for round in 0..3 {
        let mut core =
            Core::new(config.clone(), registry.clone(), 1, &RestoredState::default(), T0).expect("core");
        let mut remaining = input.clone().into_iter();
        let allocated_before = allocations();
        let started = Instant::now();
        let mut published = 0u64;
        loop {
            let take = core.accept_budget().min(500);
            let batch: Vec<Delivery> = remaining.by_ref().take(take).collect();
            if batch.is_empty() {
                break;
            }
            core.handle(T0, Input::Delivered(batch));
            let mut reports = Vec::new();
            while let Some(effect) = core.poll_effect() {
                match effect {
                    Effect::Commit(b) => {
                        let inserted = (0..b.rows.len() as u32).collect();
                        reports.push(CommitReport {
                            quarantine_inserted: b.quarantine.len() as u32,
                            batch: b,
                            inserted,
                        });
                    }
                    Effect::Publish { .. } => published += 1,
                    _ => {}
                }
            }
            for report in reports {
                core.handle(T0, Input::Committed(report));
                while let Some(effect) = core.poll_effect() {
                    if let Effect::Publish { .. } = effect {
                        published += 1;
                    }
                }
            }
        }
        let secs = started.elapsed().as_secs_f64();
        // Includes the bench's own `Vec` of each 500-message batch and of its reports.
        core_allocations = (allocations() - allocated_before) as f64 / messages as f64;
        let rate = messages as f64 / secs;
        best_core_rate = best_core_rate.max(rate);
        println!(
            "  round {round}: core_total  {rate:>12.0} obs/s ({published} transitions; {core_allocations:.3} allocations a message)"
        );
    }

    let derived_registry = registry_with_derived(1_000);
    let derived_rows: Vec<sentinel_core::ObsRow> = {
        let dedup = sentinel_core::dedup::DedupSet::new(config.dedup_keys_max);
        let projection = sentinel_core::projection::Projection::restore(
            &derived_registry,
            &RestoredState::default(),
            &config,
            T0,
        );
        let ctx = pipeline::Context {
            registry: &derived_registry,
            config: &config,
            dedup: &dedup,
            projection: &projection,
        };
        // Restamped one ms apart in arrival order, so every row is its input's newest and
        // triggers its readers, as current data does (the generator's jitter would make most
        // rows late, which trigger nothing and would flatter the figure). An input then holds
        // about 250 samples in its one-hour window, near the 360 of a 0.1 Hz point.
        deliveries(&derived_registry, messages)
            .into_iter()
            .filter_map(|d| match pipeline::process(&ctx, d) {
                Outcome::Row(row, _) => Some(row),
                _ => None,
            })
            .enumerate()
            .map(|(i, mut row)| {
                row.observed_at = T0.add_ms(i as i64);
                row
            })
            .collect()
    };
    let mut best_derivation_rate = 0.0f64;
    for round in 0..3 {
        let mut derivations = Derivations::new(&derived_registry);
        let started = Instant::now();
        let mut readings = 0u64;
        for row in &derived_rows {
            for reading in derivations.on_committed(row) {
                std::hint::black_box(reading.to_observation());
                readings += 1;
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let rate = derived_rows.len() as f64 / secs;
        best_derivation_rate = best_derivation_rate.max(rate);
        println!(
            "  round {round}: derivation  {rate:>12.0} committed rows/s ({:.2} us a row; {readings} readings, {} derived points)",
            secs * 1e6 / derived_rows.len() as f64,
            derivations.len()
        );
    }
    println!(
        "RESULT stages_2_10={:.0} obs/s ({:.0}x the 500 obs/s design rate; {stage_allocations:.3} allocations a message); \
         core_total={:.0} obs/s ({:.0}x; {core_allocations:.3} allocations a message); derivation={:.0} committed rows/s ({:.2} us a row, {:.0}x)",
        best_stage_rate,
        best_stage_rate / DESIGN_RATE_PER_S,
        best_core_rate,
        best_core_rate / DESIGN_RATE_PER_S,
        best_derivation_rate,
        1e6 / best_derivation_rate,
        best_derivation_rate / DESIGN_RATE_PER_S
    );
}
