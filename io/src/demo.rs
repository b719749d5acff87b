//! `sentinel demo`: the whole core on the in-memory models, fed by a synthetic fleet generated
//! from a registry folder. Needs no services. It runs the same startup sequence and runtime
//! loop as `sentinel run`; only the adapters differ.
//!
//! Owns: the synthetic fleet (good readings in each point's native unit, °F devices included,
//! plus out-of-range and bad-unit readings, one host publishing a point it is not assigned,
//! unknown points, malformed payloads, late and skewed observations, publisher retries), the
//! fleet's answers to the core's epoch announcement (restart step 7: each driver instance
//! raises its epoch floor and says hello), the progress line and the summary.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sentinel_core::registry::{Kind, Registry};
use sentinel_core::wire::{DriverHello, EnvelopeOut, ToDriver, parse_cmd_subject};
use sentinel_core::{Config, Micros, QuarantineReason, RetentionClass};

use crate::bus::memory::{MemoryBus, MemoryBusConfig};
use crate::clock::{Clock, SystemClock};
use crate::ports::{Bus, Inbound};
use crate::runtime::{self, RuntimeConfig};
use crate::startup;
use crate::store::memory::MemoryStore;
use sentinel_driver::disk_queue::queue_drops_point;

#[derive(Clone, Debug)]
pub struct DemoConfig {
    pub registry_dir: PathBuf,
    pub messages: usize,
    pub seed: u64,
    /// Messages published between yields to the runtime.
    pub publish_chunk: usize,
    /// Upper bound on the whole run.
    pub timeout_s: u64,
}

#[derive(Clone, Debug, Default)]
pub struct DemoSummary {
    pub published: u64,
    pub duplicates_dropped_by_stream: u64,
    pub rows: [u64; 3],
    pub quarantined: Vec<(QuarantineReason, u64)>,
    pub rows_bad: u64,
    pub transitions: u64,
    /// Driver instances connecting, connected and ready when the core stopped.
    pub drivers: [u64; 3],
    pub exit_code: i32,
}

/// The fleet's drivers run one incarnation.
const FLEET_SOURCE_EPOCH: u32 = 1;

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
            // The instance's own health point: the demo's drivers publish straight into a
            // stream that never fills, so their local queues never drop anything.
            _ if p.id == queue_drops_point(&p.host, &p.instance) => serde_json::json!(0),
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

/// Runs the demo and returns its summary. Prints a progress line each second.
pub async fn run(config: DemoConfig) -> anyhow::Result<DemoSummary> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let bus = MemoryBus::new(MemoryBusConfig::default(), clock.clone());
    let store = MemoryStore::new("OBS", clock.clone());
    let started = startup::start(
        &store,
        startup::already_connected(&bus),
        Some(&config.registry_dir),
        Config::default(),
        clock.as_ref(),
    )
    .await?;
    let registry = started.core.registry().clone();
    println!(
        "demo: registry version {} with {} points; core epoch {}; publishing {} messages (seed {})",
        registry.version,
        registry.len(),
        started.core.epoch(),
        config.messages,
        config.seed
    );

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runtime_config = RuntimeConfig {
        progress_interval_ms: 3_600_000,
        ..RuntimeConfig::default()
    };
    // The fleet's drivers heard the core's announcement: each raises its floor and says hello.
    let hellos = answer_announcements(&bus);
    println!("demo: {hellos} driver instances heard the core's epoch and said hello");
    let run = tokio::spawn(runtime::run_observed(
        started.core,
        bus.clone(),
        started.consumer,
        store.clone(),
        started.lease,
        clock.clone(),
        runtime_config,
        async move {
            let _ = stop_rx.await;
        },
        started.inbound,
        |_| {},
    ));

    let mut fleet = Fleet::new(&registry, config.seed, FLEET_SOURCE_EPOCH);
    let mut summary = DemoSummary::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(config.timeout_s);
    let mut last_progress = tokio::time::Instant::now();
    let mut published = 0usize;
    let mut announced_published = false;
    loop {
        let now_instant = tokio::time::Instant::now();
        if now_instant > deadline {
            anyhow::bail!("demo did not finish within {} s", config.timeout_s);
        }
        if published < config.messages {
            let chunk = config.publish_chunk.min(config.messages - published);
            for _ in 0..chunk {
                let m = fleet.next_message(clock.now());
                let ack = bus.publish_observation(&m.subject, &m.msg_id, m.payload)?;
                if ack.duplicate {
                    summary.duplicates_dropped_by_stream += 1;
                }
            }
            published += chunk;
        }
        let lag = bus.lag().await?;
        let finished_publishing = published == config.messages && !announced_published;
        if now_instant.duration_since(last_progress) >= Duration::from_secs(1) || finished_publishing {
            announced_published |= finished_publishing;
            last_progress = now_instant;
            let rows = store.row_counts();
            println!(
                "demo: published {published}/{}, rows {}, quarantined {}, transitions {}, pending {}",
                config.messages,
                rows.total(),
                store.quarantine_counts().iter().map(|(_, n)| n).sum::<u64>(),
                transitions(&bus),
                lag.pending + lag.ack_pending
            );
        }
        if published == config.messages && lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(if published < config.messages {
            1
        } else {
            50
        }))
        .await;
    }
    let _ = stop_tx.send(());
    let outcome = run.await?;

    let rows = store.row_counts();
    summary.published = published as u64;
    summary.rows = rows.0;
    summary.quarantined = store.quarantine_counts();
    summary.rows_bad = outcome.metrics.rows_bad;
    summary.transitions = transitions(&bus);
    summary.drivers = outcome.metrics.drivers;
    summary.exit_code = outcome.exit.code;
    Ok(summary)
}

/// Transitions published (the core also publishes its epoch announcements to drivers).
fn transitions(bus: &MemoryBus) -> u64 {
    bus.published()
        .iter()
        .filter(|m| m.subject.starts_with("state."))
        .count() as u64
}

/// Plays the fleet's driver instances hearing the core's `core_started` announcements: each
/// raises its epoch floor to the announced epoch (the demo runs one core) and says hello.
/// Returns how many hellos reached the core.
fn answer_announcements(bus: &MemoryBus) -> usize {
    let mut reached = 0;
    for message in bus.published() {
        let Some((host, instance)) = parse_cmd_subject(&message.subject) else {
            continue;
        };
        let Ok(ToDriver::CoreStarted(started)) = serde_json::from_slice::<ToDriver>(&message.payload) else {
            continue;
        };
        reached += bus.send_inbound(Inbound::DriverHello {
            host: host.to_owned(),
            hello: DriverHello {
                v: 1,
                driver_instance: instance.to_owned(),
                source_epoch: FLEET_SOURCE_EPOCH,
                highest_epoch_seen: started.core_epoch,
            },
        });
    }
    reached
}

impl std::fmt::Display for DemoSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "demo summary")?;
        writeln!(f, "  messages published            {}", self.published)?;
        writeln!(
            f,
            "  dropped by the stream's duplicate window  {}",
            self.duplicates_dropped_by_stream
        )?;
        for class in RetentionClass::ALL {
            writeln!(
                f,
                "  rows in observation_{:<12} {}",
                class.as_str(),
                self.rows[class.index()]
            )?;
        }
        writeln!(f, "  rows with quality bad         {}", self.rows_bad)?;
        let quarantined: u64 = self.quarantined.iter().map(|(_, n)| n).sum();
        writeln!(f, "  quarantined                   {quarantined}")?;
        for (reason, count) in &self.quarantined {
            writeln!(f, "    {:<27} {count}", reason.as_str())?;
        }
        writeln!(f, "  transitions published         {}", self.transitions)?;
        let [connecting, connected, ready] = self.drivers;
        writeln!(
            f,
            "  driver instances              {ready} ready, {connected} connected, {connecting} connecting"
        )?;
        write!(f, "  core exit code                {}", self.exit_code)
    }
}
