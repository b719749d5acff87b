//! Benchmark: rule evaluation per committed transition with 1,000 rules (issue 22, "What it
//! must show"), beside stages 2–10 in the same run.
//!
//! Run: `cargo bench -p sentinel-core --bench rules` (add `-- --rows N` or `-- --messages N`
//! to change size).
//!
//! The fleet's 4,000-point registry (`shared/fleet_4000.rs`) with the same 1,000 writable
//! points as the arbitration bench (`make_writable`), and one rule per writable point
//! (`shared/rules_1000.rs`: two numbers read, `a > x and b < y`, conditions that come and go,
//! every third with hysteresis, every fourth with `for_s = 2`). The
//! same stream of committed readings (every point of the fleet, values 15–35, current,
//! 1 ms apart, committed in batches of 100, every effect answered as a store would) goes
//! through two whole cores built alike, one with the rules and one without: the rules' cost
//! per committed transition is the difference (rule evaluation, the claims it makes through
//! the claims part, their control events and commands). The rules part is crate-private, so
//! the figure is the core's, with and without rules, through `Core::handle`.
//!
//! The work is checked: the core with rules leaves warmup for all 1,000 rules and sets claims,
//! the core without makes none, and both commit every row. Stages 2–10 run through
//! `shared/stage_load.rs`, alternating round by round, so all figures come from one process
//! under the same load.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the core never does

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sentinel_core::registry::{Kind, Registry};
use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{
    CommitReport, Config, ControlDetail, ControlReport, Core, Delivery, DeliveryTag, Effect, Input, Micros,
    RestoredState,
};

#[path = "shared/fleet_4000.rs"]
mod fleet_4000;
#[path = "shared/rules_1000.rs"]
mod rules_1000;
#[path = "shared/stage_load.rs"]
mod stage_load;

use stage_load::{Rng, T0, deliveries};

const WRITABLE: usize = 1_000;
const RULES: usize = 1_000;
/// Deliveries per committed batch.
const BATCH_ROWS: usize = 100;

/// The fleet with its 1,000 writable points, and with `rules`, one rule on each.
fn registry(rules: bool) -> Arc<Registry> {
    let mut descriptors = fleet_4000::descriptors();
    fleet_4000::make_writable(&mut descriptors, WRITABLE, 300);
    if rules {
        assert_eq!(
            rules_1000::add_rules(&mut descriptors, RULES, 2),
            RULES,
            "one rule per writable point"
        );
    }
    Arc::new(Registry::compile(1, "bench".into(), "bench".into(), descriptors).expect("bench registry"))
}

/// `count` valid, current readings over the whole fleet, the `n`-th observed at `T0 + n ms`
/// (the writable points' readings too: their devices report back).
fn readings(registry: &Registry, count: usize) -> Vec<Delivery> {
    let mut rng = Rng(0x5EED_4B1E_0000_0022);
    let points: Vec<_> = registry.points().map(|(_, p)| p).collect();
    (0..count)
        .map(|n| {
            // The first pass covers every point once, so every rule's inputs are live.
            let point = if n < points.len() {
                points[n]
            } else {
                points[rng.below(points.len() as u64) as usize]
            };
            let d = &point.descriptor;
            let observed = T0.add_ms(n as i64);
            let value = match d.kind {
                Kind::Number => serde_json::json!(15.0 + rng.below(2_000) as f64 / 100.0),
                Kind::Bool => serde_json::json!(rng.below(2) == 1),
                Kind::Enum => serde_json::json!(rng.below(3)),
                Kind::Text => serde_json::json!(format!("batch-{}", rng.below(50))),
            };
            let mut out = EnvelopeOut::new(
                &d.id,
                &d.assignment.driver_instance,
                1,
                n as u64 + 1,
                observed,
                value,
            );
            if d.kind == Kind::Number {
                // In the registry's unit, converted back to the native one as a device sends it.
                let canonical = out.value.as_f64().expect("a number");
                out.value = serde_json::json!((canonical - d.conversion.offset) / d.conversion.factor);
                out.unit = d.unit_native.clone();
            }
            Delivery {
                tag: DeliveryTag(n as u64),
                stream_seq: n as u64 + 1,
                subject: format!("obs.{}.{}", d.assignment.host, d.assignment.driver_instance).into(),
                payload: Bytes::from(out.to_bytes()),
                ingested_at: observed,
                delivered_count: 1,
            }
        })
        .collect()
}

#[derive(Default)]
struct CorePass {
    secs: f64,
    rows: u64,
    warmups_ended: u64,
    claims_set: u64,
    claims_released: u64,
    commands: u64,
}

/// Answers every effect as a store and a bus would; counts what the rules did.
fn answer(core: &mut Core, now: Micros, seq: &mut i64, pass: &mut CorePass) {
    while let Some(effect) = core.poll_effect() {
        match effect {
            Effect::Commit(batch) => {
                pass.rows += batch.rows.len() as u64;
                let inserted = (0..batch.rows.len() as u32).collect();
                let quarantine_inserted = batch.quarantine.len() as u32;
                core.handle(
                    now,
                    Input::Committed(CommitReport {
                        batch,
                        inserted,
                        quarantine_inserted,
                    }),
                );
            }
            Effect::Control { events, .. } | Effect::Arbitrate { events, .. } => {
                for e in &events {
                    match &e.detail {
                        ControlDetail::Rule { .. } if e.kind().as_str() == "rule_warmup_ended" => {
                            pass.warmups_ended += 1
                        }
                        ControlDetail::ClaimSet { .. } => pass.claims_set += 1,
                        ControlDetail::ClaimReleased { .. } => pass.claims_released += 1,
                        ControlDetail::CommandIssued { .. } => pass.commands += 1,
                        _ => {}
                    }
                }
                let seqs = (0..events.len()).map(|_| {
                    *seq += 1;
                    *seq
                });
                let seqs = seqs.collect();
                core.handle(now, Input::ControlCommitted(ControlReport { events, seqs }));
            }
            other => {
                std::hint::black_box(other);
            }
        }
    }
}

/// One whole core over `registry`, fed `input` in batches; only the feeding is timed.
fn core_pass(registry: &Arc<Registry>, input: &[Delivery]) -> CorePass {
    let config = Config {
        startup_grace_ms: 0,
        batch_rows_max: BATCH_ROWS,
        ..Config::default()
    };
    let start = T0.add_ms(-1);
    let mut core = Core::new(config, registry.clone(), 1, &RestoredState::default(), start).expect("core");
    let (mut seq, mut pass) = (0i64, CorePass::default());
    core.handle(
        start,
        Input::Lag {
            pending: 0,
            ack_pending: 0,
            oldest_unacked_age_ms: None,
        },
    );
    answer(&mut core, start, &mut seq, &mut pass);
    let started = Instant::now();
    for chunk in input.chunks(BATCH_ROWS) {
        let now = chunk.last().expect("a chunk").ingested_at;
        core.handle(now, Input::Delivered(chunk.to_vec()));
        core.handle(now, Input::Tick);
        answer(&mut core, now, &mut seq, &mut pass);
    }
    pass.secs = started.elapsed().as_secs_f64();
    pass
}

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let rows = arg(&args, "--rows", 200_000);
    let messages = arg(&args, "--messages", 1_000_000);
    let (with, without) = (registry(true), registry(false));
    let config = Config::default();
    let input = readings(&with, rows);
    let stage_input = deliveries(&without, messages);
    println!(
        "rules bench: {} points, {WRITABLE} writable, {RULES} rules; {rows} committed readings through a \
         core with and without the rules; stages 2-10 over {messages} messages",
        with.len()
    );

    let (mut best_with, mut best_without, mut best_stage_rate) = (f64::INFINITY, f64::INFINITY, 0.0f64);
    for round in 0..3 {
        let a = core_pass(&with, &input);
        let b = core_pass(&without, &input);
        // The work was done: every row committed in both, the rules left warmup and claimed.
        assert_eq!(a.rows, rows as u64, "rows committed with rules");
        assert_eq!(b.rows, rows as u64, "rows committed without rules");
        assert_eq!(a.warmups_ended, RULES as u64, "every rule left warmup");
        assert!(a.claims_set > 0 && a.commands > 0, "the rules claimed");
        assert_eq!(
            (b.warmups_ended, b.claims_set, b.commands),
            (0, 0, 0),
            "no rules, no claims"
        );
        let (ns_a, ns_b) = (a.secs * 1e9 / rows as f64, b.secs * 1e9 / rows as f64);
        best_with = best_with.min(ns_a);
        best_without = best_without.min(ns_b);
        println!(
            "  round {round}: core with rules {ns_a:>9.1} ns/row, without {ns_b:>9.1} ns/row, rules {:>9.1} ns/row \
             ({} claims set, {} released, {} commands)",
            ns_a - ns_b,
            a.claims_set,
            a.claims_released,
            a.commands
        );
        let pass = stage_load::stages_2_10(&without, &config, stage_input.clone());
        let rate = messages as f64 / pass.secs;
        best_stage_rate = best_stage_rate.max(rate);
        println!(
            "  round {round}: stages_2_10 {:>9.1} ns/obs    {rate:>12.0} obs/s ({} rows, {} quarantined)",
            pass.secs * 1e9 / messages as f64,
            pass.rows,
            pass.quarantined
        );
    }
    let stage_ns = 1e9 / best_stage_rate;
    let rules_ns = best_with - best_without;
    println!(
        "RESULT rules={rules_ns:.1} ns/committed transition with {RULES} rules (core {best_with:.1} ns/row with, \
         {best_without:.1} without); stages_2_10={stage_ns:.1} ns/obs ({best_stage_rate:.0} obs/s); the rules \
         cost {:.2}x an observation's stages 2-10",
        rules_ns / stage_ns
    );
}
