//! The synthetic fleet: a deterministic stream of driver messages over a registry, shared by
//! `sentinel demo`, the end-to-end benchmark and the simulator's value spans, so all of them
//! exercise the same mix.
//!
//! Owns: good readings in each point's native unit (°F devices included, drifting as real
//! sensors do), plus out-of-range and bad-unit readings, one host publishing a point it is not
//! assigned, unknown points, malformed payloads, late and skewed observations and publisher
//! retries, in fixed per-mille shares; and [`native_span`], the native-unit span of a point.

use bytes::Bytes;
use sentinel_core::Micros;
use sentinel_core::registry::{Kind, Registry};
use sentinel_core::wire::{EnvelopeOut, publish_failures_point, queue_depth_point, queue_drops_point};

/// The fleet's drivers run one incarnation.
pub const FLEET_SOURCE_EPOCH: u32 = 1;

/// SplitMix64: a tiny deterministic generator so a seed reproduces the same fleet.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One synthetic message: subject, message id, payload.
pub struct FleetMessage {
    pub subject: String,
    pub msg_id: String,
    pub payload: Bytes,
}

/// A deterministic synthetic fleet over a registry. Also used by tests and benchmarks so they
/// exercise the same mix as the demo.
pub struct Fleet {
    rng: Rng,
    points: Vec<FleetPoint>,
    next_seq: u64,
    source_epoch: u32,
}

struct FleetPoint {
    id: String,
    host: String,
    instance: String,
    kind: Kind,
    unit_native: Option<String>,
    /// Native-unit bounds that map onto the canonical range (or a plausible span).
    native_lo: f64,
    native_hi: f64,
    /// The device's current reading; it drifts rather than jumping, as real sensors do, so
    /// most readings stay inside the deadband and transitions are the minority.
    native_now: f64,
    codes: Vec<String>,
}

/// The native-unit span a synthetic device reports in: the descriptor's canonical range (or a
/// plausible 0–100) mapped back through the inverse of its affine conversion, so a °F device
/// speaks °F. Returns `(low, high)`.
pub fn native_span(d: &sentinel_core::registry::Descriptor) -> (f64, f64) {
    let (lo, hi) = d.range.map_or((0.0, 100.0), |r| (r.min, r.max));
    let to_native = |c: f64| (c - d.conversion.offset) / d.conversion.factor;
    let (a, b) = (to_native(lo), to_native(hi));
    (a.min(b), a.max(b))
}

impl Fleet {
    pub fn new(registry: &Registry, seed: u64, source_epoch: u32) -> Fleet {
        let points = registry
            .points()
            .map(|(_, p)| {
                let d = &p.descriptor;
                let (a, b) = native_span(d);
                FleetPoint {
                    id: d.id.clone(),
                    host: d.assignment.host.clone(),
                    instance: d.assignment.driver_instance.clone(),
                    kind: d.kind,
                    unit_native: d.unit_native.clone(),
                    native_lo: a,
                    native_hi: b,
                    native_now: (a + b) / 2.0,
                    codes: d
                        .codebook
                        .as_ref()
                        .map(|c| c.keys().cloned().collect())
                        .unwrap_or_default(),
                }
            })
            .collect();
        Fleet {
            rng: Rng(seed),
            points,
            next_seq: 1,
            source_epoch,
        }
    }

    /// The next message, `now` being the driver's clock. Roughly: 95% good readings, and per
    /// mille 20 out of range, 10 bad unit, 5 wrong instance, 5 unknown point, 5 malformed,
    /// 5 retries of the previous message, plus late and skewed observations among the good.
    pub fn next_message(&mut self, now: Micros) -> FleetMessage {
        let idx = self.rng.below(self.points.len() as u64) as usize;
        let seq = self.next_seq;
        self.next_seq += 1;
        let roll = self.rng.below(1_000);
        let rogue_idx = (idx + 1) % self.points.len();
        let step = self.rng.unit() - 0.5;
        let p = &mut self.points[idx];
        let span = p.native_hi - p.native_lo;
        // A random walk inside the middle of the range: steps of up to 0.2% of the span.
        p.native_now =
            (p.native_now + span * 0.002 * step).clamp(p.native_lo + span * 0.2, p.native_hi - span * 0.2);
        let p = &self.points[idx];
        let value = match p.kind {
            // The instance's own health points: the demo's drivers publish straight into a
            // stream that never fills, so their local queues never fill, fail or drop.
            _ if p.id == queue_drops_point(&p.host, &p.instance)
                || p.id == queue_depth_point(&p.host, &p.instance)
                || p.id == publish_failures_point(&p.host, &p.instance) =>
            {
                serde_json::json!(0)
            }
            Kind::Number if roll < 20 => serde_json::json!(p.native_hi + span.abs().max(1.0) * 10.0),
            Kind::Number => serde_json::json!((p.native_now * 100.0).round() / 100.0),
            Kind::Bool => serde_json::json!(self.rng.below(2) == 1),
            Kind::Enum if roll < 20 => serde_json::json!("no-such-code"),
            Kind::Enum => {
                let code = &p.codes[self.rng.below(p.codes.len() as u64) as usize];
                code.parse::<i64>()
                    .map_or_else(|_| serde_json::json!(code), |n| serde_json::json!(n))
            }
            Kind::Text => serde_json::json!(format!("status {}", self.rng.below(5))),
        };
        let mut observed_at = now.add_ms(-(self.rng.below(2_000) as i64));
        if (100..120).contains(&roll) {
            observed_at = observed_at.add_ms(-600_000); // late: buffered ten minutes on the host
        }
        let mut envelope = EnvelopeOut::new(&p.id, &p.instance, self.source_epoch, seq, observed_at, value);
        envelope.unit = p.unit_native.clone();
        if (20..30).contains(&roll) && p.unit_native.is_some() {
            envelope.unit = Some("bogus_unit".into());
        }
        if (200..220).contains(&roll) {
            envelope.device_time = Some(observed_at.add_ms(-30_000).to_rfc3339()); // skewed device clock
        }
        let mut subject = format!("obs.{}.{}", p.host, p.instance);
        match roll {
            30..=34 => {
                // A host publishing a point assigned elsewhere, under its own prefix and instance.
                let rogue = &self.points[rogue_idx];
                if rogue.host != p.host {
                    subject = format!("obs.{}.{}", rogue.host, rogue.instance);
                    envelope.driver_instance = rogue.instance.clone();
                }
            }
            35..=39 => envelope.point_id = format!("{}.decommissioned", p.id),
            _ => {}
        }
        let msg_id = envelope.msg_id();
        let payload = if (40..45).contains(&roll) {
            Bytes::from(format!("{{\"v\":1,\"point_id\":\"{}\",\"value\":", p.id))
        } else {
            Bytes::from(envelope.to_bytes())
        };
        if (45..50).contains(&roll) && seq > 1 {
            // A publisher retry: the same message id again, which the stream's window drops.
            self.next_seq -= 1;
        }
        FleetMessage {
            subject,
            msg_id,
            payload,
        }
    }
}
