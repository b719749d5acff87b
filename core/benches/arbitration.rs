//! Benchmark: arbitration cost per claim change with 1,000 writable points (issue 21), beside
//! stages 2–10 in the same run.
//!
//! Run: `cargo bench -p sentinel-core --bench arbitration` (add `-- --changes N` or
//! `-- --messages N` to change size).
//!
//! The fleet's 4,000-point registry (`shared/fleet_4000.rs`) with 1,000 of its numbers and
//! bools made writable (most with a relinquish default, some holding). One `PointArbiter` per
//! writable point, built as the claims part builds them (`Claims::new`), fed a deterministic
//! script of claim changes on random points, 1 ms apart: automation claims (a schedule and an
//! optimiser, different priorities) re-set with new values, operator claims with a duration,
//! safety and interlock claims that outrank them, releases of held claims, and expiry of
//! lapsed operator claims. Each change also builds the `point_desired` row the claims part
//! writes. The claims part itself (`parts::claims`, which adds the control events and the
//! `Effect::Arbitrate`) is crate-private, so the figure is the resolver's, not the emit's.
//!
//! The work is checked: a model written here (its own ranking, its own hold rule) replays the
//! script, and the count of changes, the count of commands and every point's final desired
//! value must equal the arbiters'. Stages 2–10 run through `shared/stage_load.rs`, the code
//! `stages.rs` times, alternating round by round with arbitration, so both figures come from one
//! process under the same load.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock; the core never does

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use sentinel_core::arbitration::{Band, Claim, DesiredRow, PointArbiter};
use sentinel_core::registry::{CommandValue, Kind, PointIdx, Registry};
use sentinel_core::{Config, Micros};

#[path = "shared/fleet_4000.rs"]
mod fleet_4000;
#[path = "shared/stage_load.rs"]
mod stage_load;

use stage_load::{Rng, T0, deliveries};

const WRITABLE: usize = 1_000;

/// The holders a point may have, with their band and priority.
const HOLDERS: [(&str, Band, u8); 6] = [
    ("rule.schedule", Band::Automation, 0),
    ("rule.optimiser", Band::Automation, 5),
    ("op.alice", Band::Operator, 2),
    ("op.bob", Band::Operator, 1),
    ("safety.freeze", Band::Safety, 9),
    ("interlock.fire", Band::Interlock, 0),
];

/// The fleet with its first 1,000 numbers and bools (skipping diagnostics) writable: every
/// bool and most numbers (876 numbers, 175 of them holding, and 124 bools) with a default.
fn registry() -> Arc<Registry> {
    let mut descriptors = fleet_4000::descriptors();
    fleet_4000::make_writable(&mut descriptors, WRITABLE, 300);
    Arc::new(Registry::compile(1, "bench".into(), "bench".into(), descriptors).expect("bench registry"))
}

/// One arbiter per writable point, as `Claims::new` builds them.
fn arbiters(registry: &Registry) -> BTreeMap<PointIdx, PointArbiter> {
    registry
        .points()
        .filter_map(|(idx, point)| {
            let writable = point.descriptor.writable.as_ref()?;
            Some((idx, PointArbiter::new(writable.relinquish_default.clone(), None)))
        })
        .collect()
}

#[derive(Clone)]
enum Op {
    Set(PointIdx, Claim),
    Release(PointIdx, Arc<str>, Micros),
    Expire(PointIdx, Micros),
}

/// The model's view of one point: its claims by holder and its desired value.
#[derive(Clone, Default)]
struct ModelPoint {
    default: Option<CommandValue>,
    claims: BTreeMap<Arc<str>, Claim>,
    value: Option<CommandValue>,
}

impl ModelPoint {
    /// Recomputes the value after a change; true when a command would go out.
    fn settle(&mut self) -> bool {
        let mut best: Option<&Claim> = None;
        for c in self.claims.values() {
            let beats = match best {
                None => true,
                Some(b) => {
                    let band = |x: Band| Band::ALL.iter().position(|&y| y == x).unwrap();
                    (band(c.band), c.priority, c.since.0) > (band(b.band), b.priority, b.since.0)
                        || ((band(c.band), c.priority, c.since.0) == (band(b.band), b.priority, b.since.0)
                            && *c.holder < *b.holder)
                }
            };
            if beats {
                best = Some(c);
            }
        }
        let value = match best {
            Some(c) => Some(c.value.clone()),
            None => self.default.clone().or(self.value.clone()),
        };
        let command = value.is_some() && value != self.value;
        self.value = value;
        command
    }
}

struct Script {
    ops: Vec<Op>,
    changes: u64,
    commands: u64,
    finals: BTreeMap<PointIdx, Option<CommandValue>>,
}

/// `count` claim changes on random writable points, 1 ms apart, replayed on the model as they
/// are drawn (so a release names a held claim and an expiry finds a lapsed one).
fn script(registry: &Registry, count: usize) -> Script {
    let mut rng = Rng(0x5EED_A4B1_7000_0021);
    let mut model: BTreeMap<PointIdx, ModelPoint> = registry
        .points()
        .filter_map(|(idx, p)| {
            let w = p.descriptor.writable.as_ref()?;
            Some((
                idx,
                ModelPoint {
                    default: w.relinquish_default.clone(),
                    ..ModelPoint::default()
                },
            ))
        })
        .collect();
    let points: Vec<PointIdx> = model.keys().copied().collect();
    let holders: Vec<Arc<str>> = HOLDERS.iter().map(|h| Arc::from(h.0)).collect();
    let (mut ops, mut changes, mut commands) = (Vec::with_capacity(count), 0u64, 0u64);
    let mut step = 0i64;
    while (changes as usize) < count {
        step += 1;
        let now = T0.add_ms(step);
        let idx = points[rng.below(points.len() as u64) as usize];
        let kind = registry.point(idx).descriptor.kind;
        let m = model.get_mut(&idx).expect("writable");
        let roll = rng.below(100);
        let lapsed: Vec<Arc<str>> = m
            .claims
            .values()
            .filter(|c| c.until.is_some_and(|u| u <= now))
            .map(|c| c.holder.clone())
            .collect();
        if roll < 10 && !lapsed.is_empty() {
            for holder in lapsed {
                m.claims.remove(&holder);
                changes += 1;
                commands += m.settle() as u64;
            }
            ops.push(Op::Expire(idx, now));
            continue;
        }
        if roll < 35 && !m.claims.is_empty() {
            let held: Vec<Arc<str>> = m.claims.keys().cloned().collect();
            let holder = held[rng.below(held.len() as u64) as usize].clone();
            m.claims.remove(&holder);
            changes += 1;
            commands += m.settle() as u64;
            ops.push(Op::Release(idx, holder, now));
            continue;
        }
        // A set: mostly automation, then operators, now and then safety or an interlock.
        let h = match rng.below(100) {
            0..=29 => 0,
            30..=59 => 1,
            60..=74 => 2,
            75..=89 => 3,
            90..=96 => 4,
            _ => 5,
        };
        let (_, band, priority) = HOLDERS[h];
        let value = match kind {
            Kind::Bool => CommandValue::Bool(rng.below(2) == 1),
            _ => CommandValue::Number(16.0 + rng.below(16) as f64 / 2.0),
        };
        let until = (band == Band::Operator).then(|| now.add_ms(100 + rng.below(3_000) as i64));
        let claim = Claim {
            holder: holders[h].clone(),
            band,
            priority,
            value,
            since: now,
            until,
        };
        m.claims.insert(claim.holder.clone(), claim.clone());
        changes += 1;
        commands += m.settle() as u64;
        ops.push(Op::Set(idx, claim));
    }
    let finals = model.into_iter().map(|(idx, m)| (idx, m.value)).collect();
    Script {
        ops,
        changes,
        commands,
        finals,
    }
}

struct ArbitrationPass {
    secs: f64,
    changes: u64,
    commands: u64,
    rows: u64,
    finals: BTreeMap<PointIdx, Option<CommandValue>>,
}

/// Applies the script to fresh arbiters; only the application is timed.
fn arbitrate(registry: &Registry, ops: Vec<Op>) -> ArbitrationPass {
    let mut arbiters = arbiters(registry);
    let (mut changes, mut commands, mut rows) = (0u64, 0u64, 0u64);
    let started = Instant::now();
    for op in ops {
        let mut record = |idx: PointIdx, change: sentinel_core::arbitration::Change| {
            changes += 1;
            commands += change.command.is_some() as u64;
            // The `point_desired` row the claims part writes with each change.
            let row = DesiredRow {
                point_id: registry.point(idx).id.clone(),
                desired: change.desired,
                claims: Vec::new(),
            };
            std::hint::black_box(row);
            rows += 1;
        };
        match op {
            Op::Set(idx, claim) => {
                let change = arbiters
                    .get_mut(&idx)
                    .expect("writable")
                    .set(claim)
                    .expect("room");
                record(idx, change);
            }
            Op::Release(idx, holder, now) => {
                let change = arbiters.get_mut(&idx).expect("writable").release(&holder, now);
                record(idx, change.expect("held"));
            }
            Op::Expire(idx, now) => {
                for (_, change, _) in arbiters.get_mut(&idx).expect("writable").expire(now) {
                    record(idx, change);
                }
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let finals = arbiters
        .into_iter()
        .map(|(idx, a)| (idx, a.desired().value.clone()))
        .collect();
    ArbitrationPass {
        secs,
        changes,
        commands,
        rows,
        finals,
    }
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
    let changes = arg(&args, "--changes", 1_000_000);
    let messages = arg(&args, "--messages", 1_000_000);
    let registry = registry();
    let config = Config::default();
    let script = script(&registry, changes);
    let input = deliveries(&registry, messages);
    let (sets, releases, expiries) = script.ops.iter().fold((0, 0, 0), |(s, r, e), op| match op {
        Op::Set(..) => (s + 1, r, e),
        Op::Release(..) => (s, r + 1, e),
        Op::Expire(..) => (s, r, e + 1),
    });
    println!(
        "arbitration bench: {} points, {} writable, {} claim changes ({sets} sets, {releases} releases, \
         {} lapses in {expiries} expiries, {} commands); stages 2-10 over {messages} messages",
        registry.len(),
        registry
            .points()
            .filter(|(_, p)| p.descriptor.writable.is_some())
            .count(),
        script.changes,
        script.changes - sets - releases,
        script.commands,
    );

    let (mut best_arb_ns, mut best_stage_rate) = (f64::INFINITY, 0.0f64);
    for round in 0..3 {
        let pass = arbitrate(&registry, script.ops.clone());
        // The work was done: the arbiters agree with the model on every count and value.
        assert_eq!(pass.changes, script.changes, "claim changes");
        assert_eq!(pass.rows, script.changes, "point_desired rows");
        assert_eq!(pass.commands, script.commands, "commands");
        assert_eq!(pass.finals, script.finals, "final desired values");
        let ns = pass.secs * 1e9 / pass.changes as f64;
        best_arb_ns = best_arb_ns.min(ns);
        println!(
            "  round {round}: arbitration {ns:>9.1} ns/change {:>12.0} changes/s ({} changes, {} commands, {} rows)",
            1e9 / ns,
            pass.changes,
            pass.commands,
            pass.rows
        );

        let pass = stage_load::stages_2_10(&registry, &config, input.clone());
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
    println!(
        "RESULT arbitration={best_arb_ns:.1} ns/claim change ({:.0} changes/s); stages_2_10={stage_ns:.1} ns/obs \
         ({best_stage_rate:.0} obs/s); a claim change costs {:.2}x an observation's stages 2-10",
        1e9 / best_arb_ns,
        best_arb_ns / stage_ns
    );
}
