//! The `pipeline` target: a whole [`Core`] driven by deliveries cut from the input.
//!
//! Owns: the input format below, a small fixed registry, a store that commits everything it is
//! handed, and the checks on what the core emits. The check is the ingest spec's first ordering
//! rule, in the strong form the core promises (DESIGN.md §1, `effect.rs`):
//!
//! - every delivery tag is acked exactly once by the time the core has drained and exited;
//! - a tag in a batch is acked only after that batch's `Input::Committed` was handed in;
//! - a tag in no batch (a recognised duplicate) is acked only after a batch holding a row with
//!   the same `(driver_instance, source_epoch, source_seq)` was committed;
//! - no tag is in two batches, and none is put in a batch after it was acked;
//!
//! plus: `Publish` only in answer to `Committed`, `Exit` only (and cleanly) after `Shutdown`,
//! every batch and checkpoint on the core's epoch, and the core never fetched past
//! [`Core::accept_budget`]. The core's own `debug_assert!`s run too under `cargo test`.
//!
//! Input format, chosen so seeds are readable text: the input is split into lines (`\n`), at
//! most [`RECORDS_MAX`], and each line is one record:
//!
//! - byte 0 picks the subject: `SUBJECTS[b % 8]`, so `'0'`..`'7'` are subjects 0..7. For a
//!   redelivery it picks instead which of the last 8 deliveries to redeliver (0 = latest).
//! - byte 1 is a set of flags, readable as `'@'` (none) to `'_'` (all): [`REDELIVER`],
//!   [`SEND_NOW`], [`HOLD_COMMITS`], and bits 3–4 choose how far time then advances
//!   ([`ADVANCE_MS`]), followed by a `Tick` when it does.
//! - the rest of the line is the payload of a new message. A redelivery ignores it and repeats
//!   the original message (same stream sequence, payload, subject and `ingested_at`, new tag).
//!   A line with no payload that is not a redelivery delivers nothing: only its flags act.
//!
//! Deliveries gather into a fetch that is handed over on [`SEND_NOW`] or at [`FETCH_MAX`], cut
//! to the accept budget. Commits are answered in order, everything inserted, as soon as a
//! record without [`HOLD_COMMITS`] ends (or when the budget is exhausted). At the end the
//! harness hands over what is left, answers every commit, sends `Shutdown` and runs the core
//! to its clean exit.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, OnceLock};

use sentinel_core::registry::{Conversion, Descriptor, Kind, Range, Registry, RetentionClass};
use sentinel_core::{
    Batch, BatchId, CommitReport, Config, Core, Delivery, DeliveryTag, Effect, ExitReason, Input, Micros,
    RestoredState, wire,
};

/// Subjects a record can pick: the three right ones for the fixed registry, then each way of
/// being wrong (wrong host, wrong instance, unknown publisher, malformed subjects).
pub const SUBJECTS: [&str; 8] = [
    "obs.plant-a.modbus-1",
    "obs.plant-b.bacnet-1",
    "obs.plant-c.opc-1",
    "obs.plant-b.modbus-1",
    "obs.plant-a.opc-1",
    "obs.plant-x.ghost-1",
    "obs.plant-a",
    "state.plant.temp",
];
/// Flag: redeliver an earlier message instead of reading the payload.
pub const REDELIVER: u8 = 0x01;
/// Flag: hand the gathered fetch to the core after this record.
pub const SEND_NOW: u8 = 0x02;
/// Flag: leave the commits the core has asked for unanswered for now.
pub const HOLD_COMMITS: u8 = 0x04;
/// Time advanced after a record, indexed by bits 3–4 of the flags byte.
pub const ADVANCE_MS: [i64; 4] = [0, 20, 150, 2_000];
/// Records read from one input; the rest is ignored, to bound a run.
pub const RECORDS_MAX: usize = 4_096;
/// Deliveries gathered before a fetch is handed over regardless of [`SEND_NOW`].
pub const FETCH_MAX: usize = 16;
/// How many recent deliveries a redelivery can pick from.
const RECENT_MAX: usize = 8;
/// The fixed start time; seeds write `observed_at` around it (2026-11-30T00:53:20Z).
pub const T0: Micros = Micros(1_796_000_000_000_000);
const EPOCH: u32 = 5;

/// Small bounds, so a short input fills batches, the in-flight window, the dedup set and the
/// payload limit.
pub fn config() -> Config {
    Config {
        batch_rows_max: 4,
        inflight_batches_max: 2,
        dedup_keys_max: 8,
        envelope_bytes_max: 512,
        text_value_bytes_max: 32,
        ..Config::default()
    }
}

fn descriptor(id: &str, kind: Kind, retention: RetentionClass, host: &str, instance: &str) -> Descriptor {
    Descriptor::new(id, kind, retention, host, instance)
}

/// The registry of `core/tests/common`: `plant.temp` (°F device stored in °C, −40..150 °C,
/// deadband 0.5) and `plant.pump` (enum 0/1/2) on plant-a/modbus-1; `plant.door` (bool) and
/// `plant.rssi` (dBm diagnostic) on plant-b/bacnet-1; `plant.label` (text) on plant-c/opc-1.
pub fn registry() -> Arc<Registry> {
    static REGISTRY: OnceLock<Arc<Registry>> = OnceLock::new();
    REGISTRY
        .get_or_init(|| {
            let mut temp = descriptor(
                "plant.temp",
                Kind::Number,
                RetentionClass::Measurement,
                "plant-a",
                "modbus-1",
            );
            temp.unit_native = Some("degF".into());
            temp.unit = Some("degC".into());
            temp.conversion = Conversion {
                factor: 5.0 / 9.0,
                offset: -160.0 / 9.0,
            };
            temp.range = Some(Range {
                min: -40.0,
                max: 150.0,
            });
            temp.deadband = 0.5;
            temp.agg_safe = true;
            let mut pump = descriptor(
                "plant.pump",
                Kind::Enum,
                RetentionClass::State,
                "plant-a",
                "modbus-1",
            );
            pump.codebook = Some(BTreeMap::from([
                ("0".into(), "off".into()),
                ("1".into(), "on".into()),
                ("2".into(), "fault".into()),
            ]));
            let door = descriptor(
                "plant.door",
                Kind::Bool,
                RetentionClass::State,
                "plant-b",
                "bacnet-1",
            );
            let mut rssi = descriptor(
                "plant.rssi",
                Kind::Number,
                RetentionClass::Diagnostic,
                "plant-b",
                "bacnet-1",
            );
            rssi.unit_native = Some("dBm".into());
            rssi.unit = Some("dBm".into());
            let label = descriptor(
                "plant.label",
                Kind::Text,
                RetentionClass::Diagnostic,
                "plant-c",
                "opc-1",
            );
            let registry = Registry::compile(
                7,
                "fuzz".into(),
                "fuzz".into(),
                vec![temp, pump, door, rssi, label],
            )
            .expect("invariant: the fixed registry has distinct ids");
            Arc::new(registry)
        })
        .clone()
}

pub fn pipeline(data: &[u8]) {
    let mut harness = Harness::new();
    for line in data.split(|&b| b == b'\n').take(RECORDS_MAX) {
        let selector = line.first().map_or(0, |&b| usize::from(b));
        let flags = line.get(1).copied().unwrap_or(0);
        let payload = line.get(2..).unwrap_or(&[]);
        harness.record(selector, flags, payload);
    }
    harness.finish();
}

/// `(driver_instance, source_epoch, source_seq)`, owned.
type Key = (String, u32, u64);

struct Harness {
    core: Core,
    now: Micros,
    next_tag: u64,
    next_stream_seq: u64,
    /// Deliveries gathered for the next fetch.
    fetch: Vec<Delivery>,
    /// The latest deliveries, newest first, for redelivery.
    recent: VecDeque<Delivery>,
    /// Commits asked for and not yet answered, in the order asked.
    held: VecDeque<Batch>,
    /// The envelope key of each delivery whose payload decodes.
    key_of_tag: BTreeMap<DeliveryTag, Key>,
    /// The batch each tag was put in.
    batch_of_tag: BTreeMap<DeliveryTag, BatchId>,
    committed_batches: BTreeSet<BatchId>,
    committed_keys: BTreeSet<Key>,
    acked: BTreeSet<DeliveryTag>,
    shutdown_sent: bool,
    exited: bool,
}

impl Harness {
    fn new() -> Harness {
        let core = Core::new(config(), registry(), EPOCH, &RestoredState::default(), T0)
            .expect("invariant: the fixed config is valid");
        let mut harness = Harness {
            core,
            now: T0,
            next_tag: 0,
            next_stream_seq: 1,
            fetch: Vec::new(),
            recent: VecDeque::new(),
            held: VecDeque::new(),
            key_of_tag: BTreeMap::new(),
            batch_of_tag: BTreeMap::new(),
            committed_batches: BTreeSet::new(),
            committed_keys: BTreeSet::new(),
            acked: BTreeSet::new(),
            shutdown_sent: false,
            exited: false,
        };
        harness.drain(false);
        harness
    }

    fn record(&mut self, selector: usize, flags: u8, payload: &[u8]) {
        let redelivery = self
            .recent
            .get(selector % RECENT_MAX)
            .filter(|_| flags & REDELIVER != 0);
        if redelivery.is_some() || !payload.is_empty() {
            self.deliver(selector, redelivery.cloned(), payload);
        }
        if flags & SEND_NOW != 0 || self.fetch.len() >= FETCH_MAX {
            self.send_fetch();
        }
        if flags & HOLD_COMMITS == 0 {
            self.answer_all();
        }
        let advance = ADVANCE_MS[usize::from((flags >> 3) & 0x03)];
        if advance > 0 {
            self.now = self.now.add_ms(advance);
            self.core.handle(self.now, Input::Tick);
            self.drain(false);
        }
    }

    /// Adds a delivery to the fetch: `original` again with a new tag, or a new message.
    fn deliver(&mut self, selector: usize, original: Option<Delivery>, payload: &[u8]) {
        let tag = DeliveryTag(self.next_tag);
        self.next_tag += 1;
        let delivery = match original {
            Some(original) => Delivery {
                tag,
                delivered_count: original.delivered_count + 1,
                ..original
            },
            None => {
                let stream_seq = self.next_stream_seq;
                self.next_stream_seq += 1;
                Delivery {
                    tag,
                    stream_seq,
                    subject: SUBJECTS[selector % SUBJECTS.len()].into(),
                    payload: payload.to_vec().into(),
                    ingested_at: self.now,
                    delivered_count: 1,
                }
            }
        };
        if let Ok(env) = wire::decode_envelope(&delivery.payload) {
            let key = (env.driver_instance.into_owned(), env.source_epoch, env.source_seq);
            self.key_of_tag.insert(tag, key);
        }
        self.recent.push_front(delivery.clone());
        self.recent.truncate(RECENT_MAX);
        self.fetch.push(delivery);
    }

    /// Hands the gathered fetch over, never more at once than the core's accept budget,
    /// answering commits when the budget is exhausted.
    fn send_fetch(&mut self) {
        let mut rest = std::mem::take(&mut self.fetch);
        while !rest.is_empty() {
            let budget = self.core.accept_budget();
            if budget == 0 {
                assert!(
                    !self.held.is_empty(),
                    "accept budget is 0 with no batch at the store: the core can never take more"
                );
                self.answer_one();
                continue;
            }
            let now: Vec<Delivery> = rest.drain(..budget.min(rest.len())).collect();
            self.core.handle(self.now, Input::Delivered(now));
            self.drain(false);
        }
    }

    fn answer_all(&mut self) {
        while !self.held.is_empty() {
            self.answer_one();
        }
    }

    /// Commits the oldest batch asked for, everything inserted, as a fresh store would.
    fn answer_one(&mut self) {
        let Some(batch) = self.held.pop_front() else {
            return;
        };
        self.committed_batches.insert(batch.id);
        for row in &batch.rows {
            self.committed_keys.insert((
                row.key.driver_instance.to_string(),
                row.key.source_epoch,
                row.key.source_seq,
            ));
        }
        let inserted = (0..batch.rows.len())
            .map(|i| u32::try_from(i).expect("invariant: batches are bounded by batch_rows_max"))
            .collect();
        let quarantine_inserted =
            u32::try_from(batch.quarantine.len()).expect("invariant: batches are bounded by batch_rows_max");
        let report = CommitReport {
            batch,
            inserted,
            quarantine_inserted,
        };
        self.core.handle(self.now, Input::Committed(report));
        self.drain(true);
    }

    /// Takes every effect the core queued and checks it against the ordering rules.
    fn drain(&mut self, after_commit: bool) {
        while let Some(effect) = self.core.poll_effect() {
            assert!(!self.exited, "effect after Exit: {effect:?}");
            match effect {
                Effect::Commit(batch) => {
                    assert_eq!(batch.epoch, EPOCH, "batch {:?} on the wrong epoch", batch.id);
                    assert!(!batch.is_empty(), "empty batch {:?} sent to the store", batch.id);
                    let tags = batch
                        .rows
                        .iter()
                        .map(|r| r.tag)
                        .chain(batch.quarantine.iter().map(|q| q.tag));
                    for tag in tags {
                        assert!(
                            tag.0 < self.next_tag,
                            "batch {:?} holds {tag:?}, never delivered",
                            batch.id
                        );
                        assert!(
                            !self.acked.contains(&tag),
                            "{tag:?} put in batch {:?} after its ack",
                            batch.id
                        );
                        if let Some(earlier) = self.batch_of_tag.insert(tag, batch.id) {
                            panic!("{tag:?} is in batch {earlier:?} and again in {:?}", batch.id);
                        }
                    }
                    self.held.push_back(batch);
                }
                Effect::Ack(tags) => {
                    for tag in tags {
                        self.check_ack(tag);
                    }
                }
                Effect::Publish { subject, .. } => {
                    assert!(after_commit, "Publish {subject:?} not in answer to a Committed");
                }
                Effect::CheckEpoch => panic!("an epoch check without a command"),
                Effect::RaiseEpoch { .. } => panic!("an epoch raise without a driver's hello"),
                Effect::SendCommand { subject, .. } => {
                    panic!("a command {subject:?} without a request");
                }
                Effect::Checkpoint { epoch, .. } => {
                    assert_eq!(epoch, EPOCH, "checkpoint on the wrong epoch");
                }
                Effect::RefreshRollups(step) => {
                    assert_eq!(step.epoch, EPOCH, "rollup step on the wrong epoch");
                }
                Effect::DropExpired(run) => {
                    assert_eq!(run.epoch, EPOCH, "retention run on the wrong epoch");
                }
                Effect::CompactDay(day) => {
                    assert_eq!(day.epoch, EPOCH, "compaction on the wrong epoch");
                }
                Effect::EnsurePartitions(run) => {
                    assert!(
                        run.days_ahead > 0,
                        "a partitions run makes at least one day ahead"
                    );
                }
                Effect::Arbitrate { epoch, .. } => {
                    // Only in answer to a command request, which this body never sends; if it
                    // comes, it is fenced like every write.
                    assert_eq!(epoch, EPOCH, "arbitration write on the wrong epoch");
                }
                Effect::SendAssignment { .. } | Effect::RestartNeeded { .. } => {
                    // Only with poll intervals declared or a registry loaded, neither of which
                    // this body does.
                    panic!("assignment effect without poll intervals: {effect:?}");
                }
                Effect::Reprocess(_) | Effect::ReprocessReply { .. } | Effect::RequestAnswer { .. } => {
                    // Only in answer to a reprocess request, which this body never sends.
                    panic!("reprocess effect without a request: {effect:?}");
                }
                Effect::PublishObservation { msg_id, .. } => {
                    // A self-point: keyed by the core's own instance and epoch.
                    assert!(
                        msg_id.starts_with(&format!("core:{EPOCH}:")),
                        "self-point key {msg_id}"
                    );
                }
                Effect::Control { epoch, events } => {
                    // Watchdog events: stamped with the writer's epoch, never answered here.
                    assert_eq!(epoch, EPOCH, "control events on the wrong epoch");
                    assert!(events.iter().all(|e| e.core_epoch == EPOCH));
                }
                Effect::Exit(reason) => {
                    assert!(self.shutdown_sent, "Exit without Shutdown: {reason:?}");
                    assert_eq!(reason, ExitReason::CLEAN, "unclean exit after Shutdown");
                    self.exited = true;
                }
            }
        }
    }

    fn check_ack(&mut self, tag: DeliveryTag) {
        assert!(tag.0 < self.next_tag, "ack of {tag:?}, never delivered");
        assert!(self.acked.insert(tag), "{tag:?} acked twice");
        match self.batch_of_tag.get(&tag) {
            Some(batch) => assert!(
                self.committed_batches.contains(batch),
                "{tag:?} acked before its batch {batch:?} was committed"
            ),
            None => {
                let key = self.key_of_tag.get(&tag);
                assert!(
                    key.is_some_and(|k| self.committed_keys.contains(k)),
                    "{tag:?} acked as a duplicate, but no committed row has its key {key:?}"
                );
            }
        }
    }

    /// Hands over what is left, answers every commit, shuts down and checks that every
    /// delivery was acked.
    fn finish(mut self) {
        self.send_fetch();
        self.answer_all();
        self.shutdown_sent = true;
        self.core.handle(self.now, Input::Shutdown);
        self.drain(false);
        // Each answer either commits the last batches or lets the open one flush; the bound
        // only turns a livelock into a failure.
        let mut rounds = 0;
        while !self.exited {
            assert!(
                !self.held.is_empty(),
                "after Shutdown the core neither exits nor asks for a commit"
            );
            rounds += 1;
            assert!(
                rounds <= self.next_tag + 8,
                "the core does not drain after Shutdown"
            );
            self.answer_one();
        }
        assert!(
            self.core.has_exited(),
            "Exit emitted but the core does not report it"
        );
        let unacked: Vec<u64> = (0..self.next_tag)
            .filter(|t| !self.acked.contains(&DeliveryTag(*t)))
            .collect();
        assert!(unacked.is_empty(), "delivered but never acked: {unacked:?}");
        assert_eq!(
            self.core.metrics().acks,
            self.next_tag,
            "metrics count acks differently from the Ack effects"
        );
    }
}
