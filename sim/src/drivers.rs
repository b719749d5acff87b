//! The simulated device drivers: one turmoil host per device host of the registry, each
//! publishing its points' readings into the bus model as the driver contract says (DESIGN.md
//! §2): one observation per message on `obs.<host>.<driver_instance>`, `Nats-Msg-Id` set to
//! the key, `source_seq` strictly increasing within a `source_epoch` that bumps when the
//! driver restarts.
//!
//! Owns the traffic mix: good readings (random walks in the native unit, °F devices
//! included), out-of-range and bad-unit readings, readings the device flags `bad` or
//! `unavailable` while still carrying a value (from a generator of their own,
//! [`ASSERTED_STREAM`]), late observations (buffered minutes on the device, so out of order), skewed device clocks, malformed payloads, unknown points, a host
//! publishing a point assigned elsewhere, and publisher retries of the same message. When
//! the stream is full (discard-new) a driver keeps the message in a bounded local queue and
//! retries it; only messages the stream accepted are owed a row or quarantine entry, and each
//! instance's `queue_drops` point reports what that queue's bound has dropped (its
//! `queue_depth`, what the queue holds; its `publish_failures`, the messages the stream did not
//! take when first published). And the report-on-change point's driver
//! ([`HostDriver::run_on_change`]): a change at once, an unchanged state as a heartbeat, a
//! heartbeat missed now and then, every draw from [`ON_CHANGE_STREAM`].

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sentinel_core::Micros;
use sentinel_core::registry::Kind;
use sentinel_core::wire::EnvelopeOut;
use sentinel_driver::disk_queue::{publish_failures_point, queue_depth_point, queue_drops_point};
use sentinel_ports::BusError;

use crate::checker::Key3;
use crate::registry::DriverPoint;
use crate::rng::SimRng;
use crate::settings::{CONTROLLER_FIRE_P, Site};
use crate::world::World;

/// The seed's second generator, for the readings a driver flags itself: XORed into the run's
/// seed, so drawing them leaves every other draw of the run as it was.
pub const ASSERTED_STREAM: u64 = 0x5eed_0000_a55e_0000;
/// Of the readings of a device point, how many per thousand the driver flags `bad` or
/// `unavailable` while still carrying the value it read (the driver contract allows both;
/// production keeps such a row, and rollups, derived windows and rules must leave it out).
const ASSERTED_PERMILLE: u64 = 15;

/// The seed's generator for the report-on-change driver ([`HostDriver::run_on_change`]):
/// every draw it makes (its point's changes, missed heartbeats, its publishes' faults) comes
/// from it, so the other drivers' draws stay as they were.
pub const ON_CHANGE_STREAM: u64 = 0x5eed_0000_0c4a_0000;
/// The report-on-change point changes state with this probability each second, and its
/// driver sends a due heartbeat this long before the declared `heartbeat_s` runs out...
const ON_CHANGE_FLIP_P: f64 = 1.0 / 30.0;
const HEARTBEAT_EARLY_S: i64 = 2;
/// ...but misses one heartbeat in this many (the device was busy): a gap in the log longer
/// than `heartbeat_s`, which the watchdog reports and which starts a rule's `for_s` again.
const HEARTBEAT_MISSED_P: f64 = 0.04;

/// Messages a driver holds while the stream rejects it; the oldest are dropped beyond this.
const LOCAL_QUEUE_MAX: usize = 10_000;

/// Mean readings per poll cycle.
const BURST_MEAN: u64 = 8;
/// During a stream leader election, the share of publishes that land although their ack is
/// lost (the rest are refused), and when the driver library retries one.
const ELECTION_LANDS_P: f64 = 0.2;
const ELECTION_RETRY_MS: (u64, u64) = (250, 2_000);

#[derive(Clone)]
struct Outgoing {
    subject: String,
    msg_id: String,
    payload: Bytes,
    key: Option<Key3>,
    /// The point and `observed_at` of a well-formed message for its own registered point.
    observation: Option<(Arc<str>, Micros)>,
}

struct Instance {
    source_epoch: u32,
    next_seq: u64,
    /// Its health points' ids (queue drops, queue depth, publish failures), named once, not
    /// on every message.
    health_points: [String; 3],
    /// Its subject (`obs.<host>.<instance>`) and its name as a key's instance, made once, not
    /// on every message.
    subject: String,
    key_instance: Arc<str>,
}

/// Everything one device host's drivers own.
pub struct HostDriver {
    world: Arc<World>,
    host: String,
    points: Vec<DriverPoint>,
    /// Points of other hosts, for the misassigned case.
    foreign: Vec<DriverPoint>,
    /// Published occasionally: unknown until a core runs registry version 2.
    added: Option<DriverPoint>,
    native_now: Vec<f64>,
    instances: BTreeMap<String, Instance>,
    queue: VecDeque<Outgoing>,
    /// (due at, first accepted at, message).
    retries: Vec<(Micros, Micros, Outgoing)>,
    dropped: u64,
    /// Messages the stream did not take when first published (queued instead).
    publish_failures: u64,
    /// A generator of its own (the report-on-change driver's), else the run's.
    own_rng: Option<SimRng>,
    /// The name its local queue is reported under (invariant 2's drain): the host, or the
    /// host's report-on-change driver.
    queue_name: String,
}

impl HostDriver {
    pub fn new(
        world: Arc<World>,
        host: &str,
        points: Vec<DriverPoint>,
        foreign: Vec<DriverPoint>,
        added: Option<DriverPoint>,
    ) -> HostDriver {
        let mut instances = BTreeMap::new();
        for p in &points {
            instances.entry(p.instance.clone()).or_insert_with(|| Instance {
                source_epoch: 1,
                next_seq: 1,
                health_points: [
                    queue_drops_point(host, &p.instance),
                    queue_depth_point(host, &p.instance),
                    publish_failures_point(host, &p.instance),
                ],
                subject: format!("obs.{}.{}", host, p.instance),
                key_instance: Arc::from(p.instance.as_str()),
            });
        }
        let native_now = points.iter().map(|p| (p.native_lo + p.native_hi) / 2.0).collect();
        HostDriver {
            world,
            host: host.to_owned(),
            points,
            foreign,
            added,
            native_now,
            instances,
            queue: VecDeque::new(),
            retries: Vec::new(),
            dropped: 0,
            publish_failures: 0,
            own_rng: None,
            queue_name: host.to_owned(),
        }
    }

    /// The driver of a report-on-change point (`reporting = "on_change"`, `heartbeat_s`):
    /// `point` alone, on a driver instance of its own, every draw from `rng`.
    pub fn on_change(world: Arc<World>, point: DriverPoint, rng: SimRng) -> HostDriver {
        let host = point.host.clone();
        let mut driver = HostDriver::new(world, &host, vec![point], Vec::new(), None);
        driver.own_rng = Some(rng);
        driver.queue_name = format!("{host} on change");
        driver
    }

    fn chance(&mut self, p: f64) -> bool {
        match &mut self.own_rng {
            Some(rng) => rng.chance(p),
            None => self.world.lock().rng.chance(p),
        }
    }

    fn between(&mut self, lo: u64, hi: u64) -> u64 {
        match &mut self.own_rng {
            Some(rng) => rng.between(lo, hi),
            None => self.world.between(lo, hi),
        }
    }

    /// A report-on-change point's software: each second the device's state may change; the
    /// driver publishes a change at once, and an unchanged state as a heartbeat
    /// [`HEARTBEAT_EARLY_S`] before `heartbeat_s` runs out (missing one now and then), until
    /// the traffic window closes; queued messages are retried after that too.
    pub async fn run_on_change(mut self, heartbeat_s: u32) {
        let mut state = false;
        let mut sent_at: Option<Micros> = None;
        let every_us = (i64::from(heartbeat_s) - HEARTBEAT_EARLY_S).max(1) * 1_000_000;
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            self.retry_due();
            if self.world.lock().traffic_done {
                continue;
            }
            let now = self.world.now();
            let changed = self.chance(ON_CHANGE_FLIP_P);
            state ^= changed;
            let due = sent_at.is_none_or(|at| now.saturating_sub(at) >= every_us);
            if !changed && !due {
                continue;
            }
            sent_at = Some(now);
            if !changed && self.chance(HEARTBEAT_MISSED_P) {
                continue;
            }
            let message = self.on_change_message(state);
            self.world.lock().published += 1;
            self.publish(message);
        }
    }

    fn on_change_message(&mut self, state: bool) -> Outgoing {
        let jitter_ms = self.between(0, 500) as i64;
        let observed_at = self.world.now().add_ms(-jitter_ms);
        let p = &self.points[0];
        let instance = self
            .instances
            .get_mut(&p.instance)
            .expect("invariant: every point's instance has a sequence");
        let (source_epoch, seq) = (instance.source_epoch, instance.next_seq);
        instance.next_seq += 1;
        let (subject, key_instance) = (instance.subject.clone(), instance.key_instance.clone());
        let envelope = EnvelopeOut::new(
            &p.id,
            &p.instance,
            source_epoch,
            seq,
            observed_at,
            serde_json::json!(state),
        );
        Outgoing {
            subject,
            msg_id: envelope.msg_id(),
            payload: Bytes::from(envelope.to_bytes()),
            key: Some((key_instance, source_epoch, seq)),
            observation: Some((Arc::from(p.id.as_str()), observed_at)),
        }
    }

    /// The host's software: poll cycles at the run's rate until the traffic budget is spent,
    /// each publishing a burst of readings (as a polling driver reads several registers at
    /// once), and keep retrying queued messages after that.
    pub async fn run(mut self, mean_interval_ms: u64) {
        loop {
            let burst = self.world.between(1, 2 * BURST_MEAN - 1);
            let wait_ms = self.world.between(1, 2 * burst * mean_interval_ms.max(1)) as i64;
            let cycle_at = self.world.now().add_ms(wait_ms);
            // Retries are due in between poll cycles; wake for each of them.
            loop {
                let now = self.world.now();
                let wake_at = self
                    .retries
                    .iter()
                    .map(|(at, _, _)| *at)
                    .min()
                    .map_or(cycle_at, |r| r.min(cycle_at));
                let sleep_us = wake_at.saturating_sub(now).max(0) as u64;
                tokio::time::sleep(Duration::from_micros(sleep_us)).await;
                self.retry_due();
                if self.world.now() >= cycle_at {
                    break;
                }
            }
            for _ in 0..burst {
                if self.world.lock().traffic_done {
                    break;
                }
                let message = self.next_message();
                self.world.lock().published += 1;
                self.publish(message);
            }
        }
    }

    fn retry_due(&mut self) {
        while let Some(message) = self.queue.pop_front() {
            if !self.publish_once(&message) {
                self.queue.push_front(message);
                break;
            }
        }
        self.report_queue();
        let now = self.world.now();
        let (due, later): (Vec<_>, Vec<_>) = self.retries.drain(..).partition(|(at, _, _)| *at <= now);
        self.retries = later;
        let window_us = self.world.settings.duplicate_window_ms as i64 * 1_000;
        for (_, accepted_at, message) in due {
            if now.saturating_sub(accepted_at) >= window_us {
                // The driver library never retries past the window (driver contract).
                continue;
            }
            self.world
                .trace(format_args!("{} retries {}", self.host, message.msg_id));
            // A retry of an accepted message whose ack the driver did not see. If the stream
            // is full now, the original is still in it, so the retry is simply given up; while
            // the stream has no leader the library keeps retrying, inside the window above.
            if !self.publish_once(&message) && self.world.leader_changing() {
                let delay_ms = self.between(ELECTION_RETRY_MS.0, ELECTION_RETRY_MS.1) as i64;
                self.retries.push((now.add_ms(delay_ms), accepted_at, message));
            }
        }
    }

    fn publish(&mut self, message: Outgoing) {
        let accepted = self.queue.is_empty() && self.publish_once(&message);
        if !accepted {
            self.publish_failures += 1;
            if self.queue.len() >= LOCAL_QUEUE_MAX {
                self.queue.pop_front();
                self.dropped += 1;
                self.world.lock().driver_dropped += 1;
            }
            self.queue.push_back(message);
            self.report_queue();
            return;
        }
        if self.world.settings.is_active(Site::PublisherRetry) && self.chance(CONTROLLER_FIRE_P) {
            // As if the publish ack was lost: the driver library republishes the same message
            // within the duplicate window of the first publish (driver contract). A retry
            // beyond the window would be a second message to the stream, which only the
            // core's bounded fast-path set could catch.
            let delay_ms = self.between(1, self.world.settings.duplicate_window_ms / 2) as i64;
            let now = self.world.now();
            self.retries.push((now.add_ms(delay_ms), now, message));
        }
    }

    /// Tells the world how many readings this host queues (invariant 2's count at the drain).
    fn report_queue(&self) {
        self.world
            .lock()
            .driver_queued
            .insert(self.queue_name.clone(), self.queue.len());
    }

    /// One publish attempt. False when the stream is full, or is between leaders and did not
    /// take it. While the stream has no leader (the `stream_leader_change` site) a publish is
    /// mostly refused ("no responders", a timeout) and queued as on a full stream; sometimes it
    /// lands but its ack is lost in the election, and the driver library retries it with the
    /// same message id, which the stream must drop as a duplicate.
    fn publish_once(&mut self, message: &Outgoing) -> bool {
        let (election, reading) = self.world.leader_changing_read();
        let now = self.world.clock.again(reading);
        if election && !self.chance(ELECTION_LANDS_P) {
            self.world.lock().trace.event(
                now,
                format_args!("{} no stream leader for {}", self.host, message.msg_id),
            );
            return false;
        }
        let result =
            self.world
                .bus
                .publish_observation(&message.subject, &message.msg_id, message.payload.clone());
        // The stream's stamp, read before anything else runs (invariant 1).
        let stamp = match &result {
            Ok(ack) if !ack.duplicate => self.world.bus.ingested_at_of(ack.seq),
            _ => None,
        };
        // Drawn before the world is locked (from this driver's generator, or the run's).
        let retry_ms = if election && matches!(result, Ok(ref ack) if !ack.duplicate) {
            self.between(ELECTION_RETRY_MS.0, ELECTION_RETRY_MS.1) as i64
        } else {
            0
        };
        let mut inner = self.world.lock();
        match result {
            Ok(ack) if ack.duplicate => {
                inner.trace.event(
                    now,
                    format_args!("{} dup {} (seq {})", self.host, message.msg_id, ack.seq),
                );
                true
            }
            Ok(ack) => {
                inner.driver_landed += 1;
                inner.checker.on_accepted(
                    ack.seq,
                    message.key.clone(),
                    message.observation.clone(),
                    stamp.expect("the stream holds a message it has just accepted"),
                    now,
                );
                let lost = if election {
                    " (ack lost in the election)"
                } else {
                    ""
                };
                inner.trace.event(
                    now,
                    format_args!("{} pub seq {} {}{lost}", self.host, ack.seq, message.msg_id),
                );
                if election {
                    drop(inner);
                    self.retries.push((now.add_ms(retry_ms), now, message.clone()));
                }
                true
            }
            Err(BusError::StreamFull) => {
                inner.trace.event(
                    now,
                    format_args!("{} stream full for {}", self.host, message.msg_id),
                );
                false
            }
            Err(e) => {
                // The model only refuses subjects outside `obs.>`, which drivers never use.
                inner.checker.fail(2, now, format!("driver publish refused: {e}"));
                true
            }
        }
    }

    fn next_message(&mut self) -> Outgoing {
        let settings = &self.world.settings;
        let now = self.world.now();
        let mut guard = self.world.lock();
        let asserted = guard.asserted_rng.below(1_000);
        let rng = &mut guard.rng;
        let idx = rng.below(self.points.len() as u64) as usize;
        let roll = rng.below(1_000);
        let step = rng.unit() - 0.5;
        let p = self
            .added
            .as_ref()
            .filter(|_| rng.chance(0.01))
            .unwrap_or(&self.points[idx]);
        let span = p.native_hi - p.native_lo;
        let walked = (self.native_now[idx] + span * 0.002 * step)
            .clamp(p.native_lo + span * 0.2, p.native_hi - span * 0.2);
        self.native_now[idx] = walked;
        // The driver's own health points: what its local queue's bound has dropped, what it
        // holds, what the stream did not take. The simulated host keeps one queue for all its
        // instances, so each reports the host's.
        let [drops, depth, failures] = &self
            .instances
            .get(&p.instance)
            .expect("invariant: every point's instance has a sequence")
            .health_points;
        let health = if p.id == *drops {
            Some(serde_json::json!(self.dropped))
        } else if p.id == *depth {
            Some(serde_json::json!(self.queue.len()))
        } else if p.id == *failures {
            Some(serde_json::json!(self.publish_failures))
        } else {
            None
        };
        let own_health = health.is_some();
        let value = match (health, p.kind) {
            (Some(value), _) => value,
            (None, Kind::Number) if roll < 20 => serde_json::json!(p.native_hi + span.abs().max(1.0) * 10.0),
            (None, Kind::Number) => serde_json::json!((walked * 100.0).round() / 100.0),
            (None, Kind::Bool) => serde_json::json!(rng.below(2) == 1),
            (None, Kind::Enum) if roll < 20 || p.codes.is_empty() => serde_json::json!("no-such-code"),
            (None, Kind::Enum) => {
                let code = &p.codes[rng.below(p.codes.len() as u64) as usize];
                code.parse::<i64>()
                    .map_or_else(|_| serde_json::json!(code), |n| serde_json::json!(n))
            }
            (None, Kind::Text) => serde_json::json!(format!("status {}", rng.below(5))),
        };

        // A driver restart bumps its source epoch and restarts its sequence.
        let instance = self
            .instances
            .get_mut(&p.instance)
            .expect("invariant: every point's instance has a sequence");
        let restarted = rng.chance(0.002);
        if restarted {
            instance.source_epoch += 1;
            instance.next_seq = 1;
        }
        let (source_epoch, seq) = (instance.source_epoch, instance.next_seq);
        instance.next_seq += 1;
        let (subject, key_instance) = (instance.subject.clone(), instance.key_instance.clone());

        let mut observed_at = now.add_ms(-(rng.below(2_000) as i64));
        let kind = rng.below(1_000);
        let mut cut = settings.late_permille;
        let late = kind < cut;
        if late {
            observed_at = observed_at.add_ms(-(rng.between(60, 900) as i64) * 1_000);
        }
        let mut envelope = EnvelopeOut::new(&p.id, &p.instance, source_epoch, seq, observed_at, value);
        envelope.unit = p.unit_native.clone();
        if asserted < ASSERTED_PERMILLE && !own_health {
            // The device flags the reading it still reports (a sensor fault, a comm error).
            envelope.quality = Some(
                if asserted.is_multiple_of(2) {
                    "bad"
                } else {
                    "unavailable"
                }
                .to_owned(),
            );
        }
        if (20..30).contains(&roll) && p.unit_native.is_some() {
            envelope.unit = Some("bogus_unit".into());
        }
        cut += settings.skew_permille;
        if !late && kind < cut {
            let skew_ms = rng.between(3, 120) as i64 * 1_000;
            envelope.device_time = Some(observed_at.add_ms(-skew_ms).to_rfc3339());
        }
        let own_point = envelope.point_id.clone();
        cut += settings.unknown_permille;
        if (cut - settings.unknown_permille..cut).contains(&kind) {
            envelope.point_id = format!("{}.decommissioned", p.id);
        }
        cut += settings.misassigned_permille;
        if (cut - settings.misassigned_permille..cut).contains(&kind) && !self.foreign.is_empty() {
            // This host publishes a point assigned to another host, under its own subject.
            let foreign = &self.foreign[rng.below(self.foreign.len() as u64) as usize];
            envelope.point_id = foreign.id.clone();
        }
        cut += settings.malformed_permille;
        let malformed = (cut - settings.malformed_permille..cut).contains(&kind);
        drop(guard);
        if restarted {
            self.world.driver_restarted(&self.host, &p.instance, source_epoch);
        }

        let observation = (!malformed && envelope.point_id == own_point)
            .then(|| (Arc::from(own_point.as_str()), observed_at));
        let msg_id = envelope.msg_id();
        let key: Key3 = (key_instance, source_epoch, seq);
        let payload = if malformed {
            Bytes::from(format!("{{\"v\":1,\"point_id\":\"{}\",\"value\":", p.id))
        } else {
            Bytes::from(envelope.to_bytes())
        };
        Outgoing {
            subject,
            msg_id,
            payload,
            key: (!malformed).then_some(key),
            observation,
        }
    }
}
