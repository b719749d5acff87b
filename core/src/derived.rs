//! Derived points: values computed by the core from other points' committed rows (sensor
//! paradigm, "a rolling window derived from another sensor's history" is a sensor; DESIGN.md
//! §5 invariant 11; the smallest real version of Watchdog & Derived Points' derived half).
//!
//! Owns: each derived point's definition as compiled from the registry, the per-input state
//! it needs (a bounded sliding window of live numeric samples, the input's newest row), and
//! turning one committed input row into the derived readings it triggers, each with a
//! deterministic key, provenance and, where there is no value, a typed gap reason.
//!
//! The rules:
//! - Only committed rows come in (the caller feeds rows of a RETURNING set, never a submitted
//!   batch), so a derived value is a function of the log.
//! - A row triggers its readers only if it is its input's newest row under the fold's order
//!   `(observed_at, ingested_at, key)`. A late row is added to the window (a later trigger
//!   sees it) but triggers nothing, as a late observation never moves a point's value back.
//! - Window ops (`mean`, `sum`, `min`, `max`, `count`, `rate_of_change`) fold the input's live
//!   numeric rows with `observed_at` in `(t − window_s, t]`, `t` the trigger's `observed_at`.
//!   Pair ops (`difference`, `ratio`) read each input's newest row.
//! - Quality propagates: a trigger (or, for pair ops, an input's newest row) that is not
//!   `live` gives a gap `input_not_live`; nothing to fold (no sample, one sample for a rate, a
//!   zero divisor, a non-finite result) gives a gap `missing`.
//! - A reading is keyed by its derived point and the triggering row's key alone (a 94-bit
//!   digest, [`derived_key`]), so deriving the same committed row again — after a restart,
//!   say — produces the same key, and the unique index swallows the copy: exactly-once holds
//!   for derived rows too.
//! - "Committed before" means applied before: the core applies commit reports in batch order
//!   and folds a batch's rows in the fold's order, and the log records the batch order
//!   (`applied`, migration 0007). So which rows triggered and what each window held is a
//!   function of the log, and restart step 5 replays it ([`Derivations::rehydrate`]) to
//!   derive again exactly the readings a crash lost between a commit and their publish, with
//!   the same keys, publishing only those the log does not hold.
//! - Readings are written as observations through the normal ingest path (the caller
//!   publishes them on the derived point's own `obs.<host>.<instance>` subject), carrying
//!   provenance in `detail`: the registry version, the op, the triggering row's key, and
//!   each input's span or key.
//!
//! Sans-IO like the rest of the core: no clock (times are the rows'), no I/O.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::gap::GapReason;
use crate::log::{CanonicalValue, ObsKey, ObsRow, Quality};
use crate::registry::{DerivedOp, PointIdx, Registry, RetentionClass};
use crate::time::Micros;
use crate::wire::{EnvelopeOut, obs_subject};

/// Samples one input's window may hold; beyond it the oldest are dropped (a day of a 1 Hz
/// input is 86,400). The window's fold is then over what is held, and the provenance says how
/// many rows it covered.
pub const WINDOW_SAMPLES_MAX: usize = 100_000;
/// Prefix of the key digest; bump it only with a new key format.
pub const DERIVED_KEY_FORMAT: &str = "sentinel-derived-key-v1";
/// The newest rows restart step 5 reads, whatever their age, of an input of a pair op and of
/// every derived point. A lost pair reading needs both inputs' newest rows of its time, and
/// the rows applied after them are the few a crash left unfolded (at most
/// `inflight_batches_max × batch_rows_max` in all, far fewer per input); and a derived
/// point's readings still being published at a crash are among its newest (its readings'
/// `observed_at` never goes back). A lost reading deeper than this is not derived again.
pub const REPLAY_ROWS_MIN: u32 = 64;
/// Readings restart step 5 may derive again; past it the rest are dropped (and counted in the
/// log line). A crash loses at most the readings of the commits in flight and those not yet
/// published, a few batches' worth.
pub const REDERIVE_MAX: usize = 10_000;

/// One live numeric sample of an input.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    observed_at: Micros,
    ingested_at: Micros,
    key: ObsKey,
    value: f64,
}

impl Sample {
    fn order(&self) -> (Micros, Micros, &ObsKey) {
        (self.observed_at, self.ingested_at, &self.key)
    }
}

/// The newest committed row of an input.
#[derive(Clone, Debug, PartialEq)]
struct Newest {
    observed_at: Micros,
    ingested_at: Micros,
    key: ObsKey,
    quality: Quality,
    value: Option<f64>,
}

#[derive(Debug, Default)]
struct Input {
    newest: Option<Newest>,
    /// Live numeric samples, ascending by `(observed_at, ingested_at, key)`, none older than
    /// the newest row minus `keep_us`.
    window: VecDeque<Sample>,
    /// The longest window any reader of this input needs.
    keep_us: i64,
    /// The derived points reading this input.
    readers: Vec<usize>,
}

#[derive(Debug)]
struct Def {
    point: PointIdx,
    point_id: Arc<str>,
    op: DerivedOp,
    inputs: Vec<PointIdx>,
    window_us: i64,
    instance: Arc<str>,
    subject: String,
}

/// Restart step 5's question to the store: `point_id`'s rows in `class`'s table with
/// `observed_at >= since` (at most the store's row bound, newest first), and in any case its
/// newest `rows_min` rows. Either part is all rows above some place in the fold's order, so
/// the answer is too: every row not returned is older than every row returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowRequest {
    pub point_id: Arc<str>,
    pub class: RetentionClass,
    pub since: Micros,
    pub rows_min: u32,
}

/// What the store answers to a [`WindowRequest`]: the fields of a committed row a window needs.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowRow {
    pub point_id: Arc<str>,
    pub observed_at: Micros,
    pub ingested_at: Micros,
    pub key: ObsKey,
    pub quality: Quality,
    /// `value_num`.
    pub value: Option<f64>,
    /// `value_bool` and `value_text`: a bool or codebook point's value, for readers of any kind
    /// (restart step 8's replay of the rules' inputs); the derived windows read `value` only.
    pub value_bool: Option<bool>,
    pub value_text: Option<Arc<str>>,
    /// The row's place in the order the core applied commits (migration 0007's `applied`);
    /// `None` for rows written before it existed (they sort first).
    pub applied: Option<i64>,
}

impl WindowRow {
    /// The row's canonical value, whatever its point's kind.
    pub fn canonical(&self) -> Option<CanonicalValue> {
        self.value
            .map(CanonicalValue::Num)
            .or(self.value_bool.map(CanonicalValue::Bool))
            .or_else(|| self.value_text.clone().map(CanonicalValue::Text))
    }

    /// The replay order: applied, then the fold's order within a batch.
    fn replay_order(&self) -> (i64, Micros, Micros, &ObsKey) {
        (
            self.applied.unwrap_or(i64::MIN),
            self.observed_at,
            self.ingested_at,
            &self.key,
        )
    }
}

/// One reading a committed row triggered.
#[derive(Clone, Debug, PartialEq)]
pub struct DerivedReading {
    pub point: PointIdx,
    pub point_id: Arc<str>,
    pub observed_at: Micros,
    /// The value, or `None` with a gap reason.
    pub value: Option<f64>,
    pub gap: Option<GapReason>,
    /// The committed row that triggered it.
    pub trigger: ObsKey,
    /// What the value was computed from (`detail`).
    pub provenance: serde_json::Value,
    pub instance: Arc<str>,
    pub subject: String,
}

impl DerivedReading {
    /// The observation to publish: keyed by [`derived_key`], value or gap, provenance in
    /// `detail`. Returns `(subject, msg_id, payload)`.
    pub fn to_observation(&self) -> (String, String, Bytes) {
        let (epoch, seq) = derived_key(&self.point_id, &self.trigger);
        let value = self
            .value
            .map_or(serde_json::Value::Null, |v| serde_json::json!(v));
        let mut envelope = EnvelopeOut::new(
            &self.point_id,
            &self.instance,
            epoch,
            seq,
            self.observed_at,
            value,
        );
        if let Some(gap) = self.gap {
            envelope.quality = Some("unavailable".to_owned());
            envelope.reason = Some(gap.as_str().to_owned());
        }
        envelope.detail = Some(self.provenance.clone());
        (
            self.subject.clone(),
            envelope.msg_id(),
            Bytes::from(envelope.to_bytes()),
        )
    }
}

/// The key of the reading `point_id` derives from the committed row `trigger`: 31 bits of
/// `source_epoch` and 63 of `source_seq` (both fit the store's signed columns) from a SHA-256
/// of the two. A function of nothing else, so re-deriving the same row gives the same key.
pub fn derived_key(point_id: &str, trigger: &ObsKey) -> (u32, u64) {
    let mut hash = Sha256::new();
    for part in [DERIVED_KEY_FORMAT, point_id, &trigger.driver_instance] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part.as_bytes());
    }
    hash.update(trigger.source_epoch.to_be_bytes());
    hash.update(trigger.source_seq.to_be_bytes());
    let digest = hash.finalize();
    let epoch = u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]]) & (i32::MAX as u32);
    let mut seq_bytes = [0u8; 8];
    seq_bytes.copy_from_slice(&digest[4..12]);
    let seq = u64::from_be_bytes(seq_bytes) & (i64::MAX as u64);
    (epoch, seq)
}

/// Every derived point of a registry and the state its inputs need.
#[derive(Debug)]
pub struct Derivations {
    defs: Vec<Def>,
    /// Indexed by input point; `None` for points nothing derives from.
    inputs: Vec<Option<Input>>,
    registry_version: i32,
}

impl Derivations {
    /// Compiles the registry's `derived` sections. Inputs that do not resolve are skipped
    /// (admission refuses them; a stored registry is trusted to have passed it).
    pub fn new(registry: &Registry) -> Derivations {
        let mut defs = Vec::new();
        let mut inputs: Vec<Option<Input>> = (0..registry.len()).map(|_| None).collect();
        for (idx, point) in registry.points() {
            let Some(derived) = &point.descriptor.derived else {
                continue;
            };
            let resolved: Vec<PointIdx> = derived
                .inputs
                .iter()
                .filter_map(|i| registry.resolve(i))
                .collect();
            if resolved.len() != derived.op.inputs() {
                continue;
            }
            let window_us = i64::from(derived.window_s.unwrap_or(0)) * 1_000_000;
            let def_idx = defs.len();
            let mut seen = Vec::new();
            for &input in &resolved {
                if seen.contains(&input) {
                    continue;
                }
                seen.push(input);
                let state = inputs[input.0 as usize].get_or_insert_with(Input::default);
                state.keep_us = state.keep_us.max(window_us);
                state.readers.push(def_idx);
            }
            let instance: Arc<str> = Arc::from(point.descriptor.assignment.driver_instance.as_str());
            defs.push(Def {
                point: idx,
                point_id: point.id.clone(),
                op: derived.op,
                inputs: resolved,
                window_us,
                subject: obs_subject(&point.host, &instance),
                instance,
            });
        }
        Derivations {
            defs,
            inputs,
            registry_version: registry.version,
        }
    }

    /// How many derived points there are.
    pub fn len(&self) -> usize {
        self.defs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.defs.is_empty()
    }

    /// Whether some derived point reads `point`: a committed row of any other point neither
    /// changes the inputs' state nor triggers a reading, so the fold can skip it unseen.
    pub fn reads(&self, point: PointIdx) -> bool {
        self.inputs.get(point.0 as usize).is_some_and(Option::is_some)
    }

    /// One committed row (of a RETURNING set): updates its input's state and returns the
    /// readings it triggers, in derived-point order.
    pub fn on_committed(&mut self, row: &ObsRow) -> Vec<DerivedReading> {
        // Before the window row is built: it clones the row's id and key, and most committed
        // rows are of points nothing derives from (issue 24 item 3).
        if !self.reads(row.point) {
            return Vec::new();
        }
        let value = row.value.as_ref().and_then(CanonicalValue::num);
        let seen = WindowRow {
            point_id: row.point_id.clone(),
            observed_at: row.observed_at,
            ingested_at: row.ingested_at,
            key: row.key.clone(),
            quality: row.quality,
            value,
            value_bool: None,
            value_text: None,
            applied: None,
        };
        if !self.update(row.point, &seen) {
            return Vec::new();
        }
        let readers = self.inputs[row.point.0 as usize]
            .as_ref()
            .map(|i| i.readers.clone())
            .unwrap_or_default();
        readers.iter().map(|&d| self.derive(d, &seen)).collect()
    }

    /// Folds one committed row into its input's state. Returns whether it is the input's
    /// newest row (and so triggers its readers); false for a point nothing derives from.
    fn update(&mut self, point: PointIdx, row: &WindowRow) -> bool {
        let Some(Some(input)) = self.inputs.get_mut(point.0 as usize) else {
            return false;
        };
        let newest = input.newest.as_ref().is_none_or(|n| {
            (row.observed_at, row.ingested_at, &row.key) > (n.observed_at, n.ingested_at, &n.key)
        });
        // A sample no window can reach any more (older than the newest row minus the longest
        // window) is not kept, so the state is exactly what restart step 5 reads back.
        let reachable = input
            .newest
            .as_ref()
            .is_none_or(|n| row.observed_at.0 > n.observed_at.0.saturating_sub(input.keep_us));
        if row.quality == Quality::Live
            && let Some(v) = row.value.filter(|v| v.is_finite())
            && reachable
        {
            insert_sample(
                input,
                Sample {
                    observed_at: row.observed_at,
                    ingested_at: row.ingested_at,
                    key: row.key.clone(),
                    value: v,
                },
            );
        }
        if newest {
            input.newest = Some(Newest {
                observed_at: row.observed_at,
                ingested_at: row.ingested_at,
                key: row.key.clone(),
                quality: row.quality,
                value: row.value,
            });
            evict(input);
        }
        newest
    }

    /// Restart step 5, first half: what to read back so every input's state is what the
    /// cores before held, and so the readings a crash lost can be derived again. For each input
    /// whose newest committed row is known (`newest_observed_at`, from the log heads), its rows
    /// with `observed_at` at or after the earlier of that and each reader's newest reading (a
    /// reading's `observed_at` is its trigger's, or for a pair op the later of its inputs'
    /// rows), minus the longest window reading it; from
    /// the Unix epoch (bounded by the store's row bound) when a reader has no reading at all. A
    /// lost reading's trigger came after its point's newest stored reading, so it is read; an
    /// input of a pair op also its newest [`REPLAY_ROWS_MIN`] rows. And each derived point's
    /// own rows from the earliest of its inputs' bounds and its newest [`REPLAY_ROWS_MIN`], to
    /// tell which readings the log holds. Inputs with no row need nothing. Sorted by class then point, so
    /// the store can batch one query per class.
    pub fn window_requests(
        &self,
        registry: &Registry,
        newest_observed_at: impl Fn(PointIdx) -> Option<Micros>,
    ) -> Vec<WindowRequest> {
        let mut since: std::collections::BTreeMap<PointIdx, (Micros, u32)> =
            std::collections::BTreeMap::new();
        for (i, input) in self.inputs.iter().enumerate() {
            let Some(input) = input else { continue };
            let idx = PointIdx(i as u32);
            let Some(newest) = newest_observed_at(idx) else {
                continue;
            };
            let from = input
                .readers
                .iter()
                .map(|&d| newest_observed_at(self.defs[d].point))
                .try_fold(newest, |from, reader| reader.map(|r| from.min(r)))
                .map_or(Micros(0), |from| Micros(from.0.saturating_sub(input.keep_us)));
            let from = from.max(Micros(0));
            let pair = input.readers.iter().any(|&d| !self.defs[d].op.is_window());
            let rows_min = if pair { REPLAY_ROWS_MIN } else { 0 };
            let at = since.entry(idx).or_insert((from, rows_min));
            *at = (at.0.min(from), at.1.max(rows_min));
            for &d in &input.readers {
                let at = since.entry(self.defs[d].point).or_insert((from, REPLAY_ROWS_MIN));
                *at = (at.0.min(from), REPLAY_ROWS_MIN);
            }
        }
        let mut out: Vec<WindowRequest> = since
            .into_iter()
            .map(|(idx, (since, rows_min))| {
                let point = registry.point(idx);
                WindowRequest {
                    point_id: point.id.clone(),
                    class: point.descriptor.retention,
                    since,
                    rows_min,
                }
            })
            .collect();
        out.sort_by(|a, b| (a.class, &a.point_id).cmp(&(b.class, &b.point_id)));
        out
    }

    /// Restart step 5, second half: replays the rows the store returned for `requests` (at
    /// most `rows_max_per_point` each, newest first; in any order) in the order the cores
    /// applied them (`applied`, then the fold's order) into the inputs' state, and derives
    /// again each reading a replayed row triggered whose key the derived point's own rows do
    /// not hold: the readings a crash lost between a commit and their publish. A reading is
    /// derived again only when the replay holds everything it folds (its window, or for a pair
    /// op the other input's newest row) and its own point's rows were read as far back as its
    /// trigger; nothing stored is derived again (the unique key is per daily partition of
    /// `ingested_at`, so a second publish on a later day would be a second row); one still in
    /// the stream, uncommitted, goes out
    /// with the same message id and the stream's duplicate window drops it. At most
    /// [`REDERIVE_MAX`] readings, the earliest. Returns how many input rows were folded, and
    /// the readings.
    pub fn rehydrate(
        &mut self,
        registry: &Registry,
        requests: &[WindowRequest],
        mut rows: Vec<WindowRow>,
        rows_max_per_point: usize,
    ) -> (usize, Vec<DerivedReading>) {
        // How far back each point was read: every row with `observed_at` at or after it was
        // returned. Where a part of the answer was cut by its row count, rows at the cut's own
        // `observed_at` may be missing, so the bound is just above it.
        let mut by_point: rustc_hash::FxHashMap<&str, Vec<Micros>> = rustc_hash::FxHashMap::default();
        for row in &rows {
            by_point.entry(&row.point_id).or_default().push(row.observed_at);
        }
        let mut read_from: Vec<Option<Micros>> = vec![None; registry.len()];
        for request in requests {
            let Some(idx) = registry.resolve(&request.point_id) else {
                continue;
            };
            let mut observed = by_point.remove(&*request.point_id).unwrap_or_default();
            observed.sort_unstable_by(|a, b| b.cmp(a));
            let since_part = observed.iter().filter(|&&o| o >= request.since).count();
            let cut = |n: usize| {
                observed
                    .get(n.saturating_sub(1))
                    .map_or(Micros(i64::MAX), |o| Micros(o.0.saturating_add(1)))
            };
            let by_time = if since_part >= rows_max_per_point {
                cut(rows_max_per_point)
            } else {
                request.since
            };
            let rows_min = request.rows_min as usize;
            let by_rows = if rows_min == 0 {
                by_time
            } else if observed.len() < rows_min {
                Micros(0) // the whole history
            } else {
                cut(rows_min)
            };
            if let Some(slot) = read_from.get_mut(idx.0 as usize) {
                *slot = Some(by_time.min(by_rows));
            }
        }
        drop(by_point);
        // The readings the log holds: each derived point's own keys.
        let mut stored: rustc_hash::FxHashSet<(usize, u32, u64)> = rustc_hash::FxHashSet::default();
        let def_of: rustc_hash::FxHashMap<PointIdx, usize> = self
            .defs
            .iter()
            .enumerate()
            .map(|(d, def)| (def.point, d))
            .collect();
        let mut resolved: Vec<Option<PointIdx>> = Vec::with_capacity(rows.len());
        rows.sort_by(|a, b| a.replay_order().cmp(&b.replay_order()));
        for row in &rows {
            let idx = registry.resolve(&row.point_id);
            if let Some(&d) = idx.as_ref().and_then(|i| def_of.get(i))
                && *row.key.driver_instance == *self.defs[d].instance
            {
                stored.insert((d, row.key.source_epoch, row.key.source_seq));
            }
            resolved.push(idx);
        }
        let mut folded = 0;
        let mut readings = Vec::new();
        for (row, idx) in rows.iter().zip(resolved) {
            let Some(idx) = idx else { continue };
            if !self.inputs.get(idx.0 as usize).is_some_and(Option::is_some) {
                continue;
            }
            folded += 1;
            if !self.update(idx, row) {
                continue;
            }
            let readers = self.inputs[idx.0 as usize]
                .as_ref()
                .map(|i| i.readers.clone())
                .unwrap_or_default();
            for d in readers {
                if readings.len() >= REDERIVE_MAX {
                    break;
                }
                let def = &self.defs[d];
                let (epoch, seq) = derived_key(&def.point_id, &row.key);
                if stored.contains(&(d, epoch, seq)) {
                    continue;
                }
                if !self.replay_holds(d, idx, row, &read_from) {
                    continue;
                }
                let reading = self.derive(d, row);
                // Its own rows must have been read back as far as this reading would be.
                let own = read_from.get(def.point.0 as usize).copied().flatten();
                if own.is_none_or(|from| reading.observed_at < from) {
                    continue;
                }
                readings.push(reading);
            }
        }
        (folded, readings)
    }

    /// Whether the replay holds everything `def_idx`'s reading for `trigger` (a row of
    /// `input`) folds: the whole window `(t − window, t]` read back, or for a pair op each
    /// input's newest row — any replayed row of it is (what was not read back is older), and
    /// "none" is known only for an input with no row in the log (nothing was asked) or read
    /// back from the start.
    fn replay_holds(
        &self,
        def_idx: usize,
        input: PointIdx,
        trigger: &WindowRow,
        read_from: &[Option<Micros>],
    ) -> bool {
        let def = &self.defs[def_idx];
        let from = read_from.get(input.0 as usize).copied().flatten();
        if def.op.is_window() {
            // The window is `(t − window, t]`: every row in it is at or after `t − window + 1 µs`.
            from.is_some_and(|from| {
                trigger
                    .observed_at
                    .0
                    .saturating_sub(def.window_us)
                    .saturating_add(1)
                    >= from.0
            })
        } else {
            def.inputs.iter().all(|i| {
                let replayed = self.inputs[i.0 as usize]
                    .as_ref()
                    .is_some_and(|s| s.newest.is_some());
                let from = read_from.get(i.0 as usize).copied().flatten();
                replayed || from.is_none_or(|from| from.0 <= 0)
            })
        }
    }

    fn derive(&self, def_idx: usize, trigger: &WindowRow) -> DerivedReading {
        let def = &self.defs[def_idx];
        let (value, gap, inputs) = if def.op.is_window() {
            self.fold_window(def, trigger)
        } else {
            self.pair(def)
        };
        // A window reading is as of its trigger; a pair reading as of the later of its two
        // inputs' newest rows (so a pair point's readings never go back in time, and restart
        // step 5 finds a lost one at or after the point's newest stored reading).
        let observed_at = if def.op.is_window() {
            trigger.observed_at
        } else {
            def.inputs
                .iter()
                .filter_map(|i| self.inputs[i.0 as usize].as_ref()?.newest.as_ref())
                .map(|n| n.observed_at)
                .fold(trigger.observed_at, Micros::max)
        };
        // A non-finite result (an overflowing sum) is no value.
        let (value, gap) = match value {
            Some(v) if !v.is_finite() => (None, Some(GapReason::Missing)),
            other => (other, gap),
        };
        DerivedReading {
            point: def.point,
            point_id: def.point_id.clone(),
            observed_at,
            value,
            gap,
            trigger: trigger.key.clone(),
            provenance: serde_json::json!({
                "registry_version": self.registry_version,
                "op": def.op.as_str(),
                "trigger": [trigger.key.driver_instance.as_ref(), trigger.key.source_epoch, trigger.key.source_seq],
                "inputs": inputs,
            }),
            instance: def.instance.clone(),
            subject: def.subject.clone(),
        }
    }

    fn fold_window(
        &self,
        def: &Def,
        trigger: &WindowRow,
    ) -> (Option<f64>, Option<GapReason>, serde_json::Value) {
        let input = self.inputs[def.inputs[0].0 as usize]
            .as_ref()
            .expect("invariant: every input of a derived point has state");
        let from = Micros(trigger.observed_at.0.saturating_sub(def.window_us));
        let samples: Vec<&Sample> = input
            .window
            .iter()
            .filter(|s| s.observed_at > from && s.observed_at <= trigger.observed_at)
            .collect();
        let span = serde_json::json!([{
            "point": trigger.point_id.as_ref(),
            "from": from.to_rfc3339(),
            "to": trigger.observed_at.to_rfc3339(),
            "rows": samples.len(),
        }]);
        if trigger.quality != Quality::Live {
            return (None, Some(GapReason::InputNotLive), span);
        }
        let values = samples.iter().map(|s| s.value);
        let value = match def.op {
            DerivedOp::Sum => Some(values.sum()),
            DerivedOp::Count => Some(samples.len() as f64),
            DerivedOp::Mean => (!samples.is_empty()).then(|| values.sum::<f64>() / samples.len() as f64),
            DerivedOp::Min => values.reduce(f64::min),
            DerivedOp::Max => values.reduce(f64::max),
            DerivedOp::RateOfChange => match (samples.first(), samples.last()) {
                (Some(first), Some(last)) if last.observed_at > first.observed_at => {
                    let seconds = (last.observed_at.0 - first.observed_at.0) as f64 / 1e6;
                    Some((last.value - first.value) / seconds)
                }
                _ => None,
            },
            DerivedOp::Difference | DerivedOp::Ratio => None,
        };
        let gap = value.is_none().then_some(GapReason::Missing);
        (value, gap, span)
    }

    fn pair(&self, def: &Def) -> (Option<f64>, Option<GapReason>, serde_json::Value) {
        let newest = |i: usize| {
            self.inputs[def.inputs[i].0 as usize]
                .as_ref()
                .and_then(|s| s.newest.as_ref())
        };
        let (a, b) = (newest(0), newest(1));
        let keys: Vec<serde_json::Value> = [a, b]
            .iter()
            .zip(&def.inputs)
            .map(|(n, _)| match n {
                Some(n) => serde_json::json!({
                    "key": [n.key.driver_instance.as_ref(), n.key.source_epoch, n.key.source_seq],
                    "observed_at": n.observed_at.to_rfc3339(),
                }),
                None => serde_json::Value::Null,
            })
            .collect();
        let keys = serde_json::Value::Array(keys);
        let (Some(a), Some(b)) = (a, b) else {
            return (None, Some(GapReason::Missing), keys);
        };
        if a.quality != Quality::Live || b.quality != Quality::Live {
            return (None, Some(GapReason::InputNotLive), keys);
        }
        let (Some(x), Some(y)) = (a.value, b.value) else {
            return (None, Some(GapReason::Missing), keys);
        };
        let value = match def.op {
            DerivedOp::Difference => Some(x - y),
            DerivedOp::Ratio => (y != 0.0).then(|| x / y),
            _ => None,
        };
        let gap = value.is_none().then_some(GapReason::Missing);
        (value, gap, keys)
    }
}

fn insert_sample(input: &mut Input, sample: Sample) {
    let at = input.window.partition_point(|s| s.order() < sample.order());
    if input.window.get(at).is_some_and(|s| s.key == sample.key) {
        return; // the same row twice: the store would not have returned it twice
    }
    input.window.insert(at, sample);
    while input.window.len() > WINDOW_SAMPLES_MAX {
        input.window.pop_front();
    }
}

/// Drops samples no reader's window can reach any more: everything at or before the newest
/// row minus the longest window (a later trigger is newer still, so its window starts later).
fn evict(input: &mut Input) {
    let Some(newest) = &input.newest else { return };
    let horizon = newest.observed_at.0.saturating_sub(input.keep_us);
    while input.window.front().is_some_and(|s| s.observed_at.0 <= horizon) {
        input.window.pop_front();
    }
}
