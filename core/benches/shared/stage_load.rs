//! The stages 2–10 load of `core/benches/stages.rs`: the fleet's registry, a deterministic
//! stream of deliveries over it (with malformed, unknown, rogue and out-of-range ones mixed in),
//! and one timed pass of the pipeline over them. Included with `#[path]` by `stages.rs` and
//! `arbitration.rs` (after `fleet_4000.rs`, as `super::fleet_4000`), so both report stages
//! 2–10 through the same code.

#![allow(dead_code)] // each bench uses part of it

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use sentinel_core::pipeline::{self, Outcome};
use sentinel_core::registry::{Kind, Registry};
use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{Config, Delivery, DeliveryTag, Micros, RestoredState};

use super::fleet_4000::{self, POINTS};

pub const T0: Micros = Micros(1_796_000_000_000_000);

/// A small deterministic generator (xorshift), so runs are comparable.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn registry() -> Arc<Registry> {
    Arc::new(
        Registry::compile(1, "bench".into(), "bench".into(), fleet_4000::descriptors())
            .expect("bench registry"),
    )
}

pub fn deliveries(registry: &Registry, count: usize) -> Vec<Delivery> {
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut seqs = vec![0u64; POINTS];
    (0..count)
        .map(|n| {
            let idx = rng.below(POINTS as u64) as usize;
            let (_, point) = registry.points().nth(idx).expect("in range");
            let d = &point.descriptor;
            seqs[idx] += 1;
            let seq = (idx as u64) << 32 | seqs[idx];
            let observed = T0.add_ms(-(rng.below(5_000) as i64));
            let roll = rng.below(1_000);
            let value = match d.kind {
                Kind::Number if roll < 10 => serde_json::json!(9_999.0), // out of range
                Kind::Number => serde_json::json!(15.0 + rng.below(2_000) as f64 / 100.0),
                Kind::Bool => serde_json::json!(rng.below(2) == 1),
                Kind::Enum => serde_json::json!(rng.below(3)),
                Kind::Text => serde_json::json!(format!("batch-{}", rng.below(50))),
            };
            let mut out = EnvelopeOut::new(&d.id, &d.assignment.driver_instance, 1, seq, observed, value);
            if d.kind == Kind::Number {
                out.unit = d.unit_native.clone();
                if roll == 11 {
                    out.unit = Some("K".into()); // unit mismatch
                }
            }
            if roll.is_multiple_of(4) {
                out.device_time = Some(observed.add_ms(rng.below(3_000) as i64).to_rfc3339());
            }
            let mut payload = out.to_bytes();
            let mut subject = format!("obs.{}.{}", d.assignment.host, d.assignment.driver_instance);
            match roll {
                995 => payload = b"{\"v\":1,\"point_id\":".to_vec(), // malformed
                996 => {
                    payload = String::from_utf8_lossy(&payload)
                        .replace(&d.id, "no.such.point")
                        .into_bytes()
                }
                997 => subject = "obs.rogue-host.drv-99-0".into(), // wrong instance
                _ => {}
            }
            Delivery {
                tag: DeliveryTag(n as u64),
                stream_seq: n as u64 + 1,
                subject: subject.into(),
                payload: Bytes::from(payload),
                ingested_at: T0,
                delivered_count: 1,
            }
        })
        .collect()
}

/// One pass of stages 2–10 (`pipeline::process`) over `input`, against the projection and
/// dedup set of a fresh core; only the pass is timed.
pub struct StagesPass {
    pub secs: f64,
    pub rows: usize,
    pub quarantined: usize,
    /// Allocations during the pass, by the bench's counter (0 where the bench has none).
    pub allocations: u64,
}

pub fn stages_2_10(registry: &Registry, config: &Config, input: Vec<Delivery>) -> StagesPass {
    stages_2_10_counted(registry, config, input, || 0)
}

/// As [`stages_2_10`], reading `allocations` (a bench's counting allocator) either side of the
/// timed pass.
pub fn stages_2_10_counted(
    registry: &Registry,
    config: &Config,
    input: Vec<Delivery>,
    allocations: fn() -> u64,
) -> StagesPass {
    let dedup = sentinel_core::dedup::DedupSet::new(config.dedup_keys_max);
    let projection =
        sentinel_core::projection::Projection::restore(registry, &RestoredState::default(), config, T0);
    let ctx = pipeline::Context {
        registry,
        config,
        dedup: &dedup,
        projection: &projection,
    };
    let allocated_before = allocations();
    let started = Instant::now();
    let (mut rows, mut quarantined) = (0usize, 0usize);
    for delivery in input {
        match pipeline::process(&ctx, delivery) {
            Outcome::Row(..) => rows += 1,
            Outcome::Quarantine(_) => quarantined += 1,
            Outcome::Duplicate { .. } => {}
        }
    }
    let secs = started.elapsed().as_secs_f64();
    StagesPass {
        secs,
        rows,
        quarantined,
        allocations: allocations() - allocated_before,
    }
}
