//! The rules' invariants (issue 22, "What it must show", the simulator): 22–26 of
//! ARCHITECTURE.md's "The simulator's invariants", judged against a reference evaluation of
//! each rule written here, independently of the core's (`core/src/rules/`, which this file
//! never calls: only the registry's data types `Rule`, `Condition`, `MissingData` and the
//! control events are shared).
//!
//! Owns: every committed row of every point a rule reads, in commit order (value, quality,
//! `observed_at`, when it committed); per core epoch, the time counted towards warmup
//! deadlines (from the suppression each core reports at every wake-up of its loop:
//! [`sentinel_core::Core::staleness_suppressed`]); the committed `rule_warmup_ended` events;
//! and what each rule holds by the log (its last `claim_set` or `claim_released`); for
//! invariant 26, each epoch's last wake-up and last committed write, the `quality_changed`
//! its watchdog committed for a rule's input, and each rule's claim changes by the instant
//! the core decided them.
//!
//! **The reference evaluation.** An input's reading at time `t`, as of the rows committed by
//! some instant, is its newest row in the fold's order (`observed_at`, `ingested_at`, key):
//! usable when `live`, valued and current (`observed_at` + `freshness_s` > `t`); a
//! `hold_last_valid` input stands in with its newest usable value until `max_staleness_s`
//! after it was observed. A condition is evaluated in three values (holds, does not, cannot be
//! told): a value comparison on an input that is not usable cannot be told, a `quality(x)`
//! comparison is told only when the input is certainly `live` (newest row `live` and current)
//! — the watchdog's timing, suppressed while lag is high, is not the reference's to guess.
//! The core applies a commit's rows no earlier than the commit and, the checker assumes, no
//! later than [`APPLY_SLACK_US`] after it: the core's view at `t` is the log as of some
//! instant in `[t − APPLY_SLACK_US, t]`, so a verdict holds only if it holds for every such
//! instant.
//!
//! The invariants, on every committed control write:
//!
//! - 22: a rule's claim of its value (the condition held) names committed rows of each input
//!   a value comparison reads, each committed before the claim and current when the claim was
//!   written (`observed_at` + `freshness_s` > the claim's `occurred_at`): no command derived
//!   from an observation older than its input's freshness;
//! - 23: no claim from a rule in warmup: every claim or release by a rule follows, in its
//!   epoch, a committed `rule_warmup_ended` of that rule, and each of those is justified by
//!   the reference: `inputs_live` only when every input had a committed, live, current row at
//!   that instant; `deadline` only when the time the reference counted not suppressed since
//!   the epoch began is at least the deadline ([`COUNT_SLACK_US`] allowed);
//! - 24: a rule's claim state is the reference's: a claim of the rule's value is made only
//!   when its condition holds, by the reference, on the rows its provenance names, and those
//!   are its inputs' newest rows in the log as it stood within [`APPLY_SLACK_US`]; a rule
//!   without `for_s` that stops claiming its value (a release, its `otherwise` or its
//!   `on_input_loss` value) does so only when, for some view in the window, its condition no
//!   longer certainly holds on usable inputs;
//! - 25: a `for_s` fires no earlier than its log-time instant: no input row that the core
//!   applied while current, observed within the `for_s` before the claim (or the newest
//!   observed by its start), made the condition certainly false (whatever the other inputs
//!   read); across a restart the pending start
//!   comes from the log, and a `for_s` that came due in a downtime fires only after warmup
//!   (23);
//!
//! and, as each window's end passes and at the end of the run ([`RulesModel::check_timely`]):
//!
//! - 26: a rule fires at its instant, and at all: when its condition held by the reference
//!   on usable, current, committed inputs with no gap (an input's gap is its heartbeat when
//!   it declares one: [`InputDef::gap_us`]) from a row's commit through that commit plus
//!   [`APPLY_SLACK_US`], its `for_s` and [`FIRE_SLACK_TICKS`] ticks, while its epoch held
//!   the lock, ran, committed and was not suppressed, out of warmup, neither held nor
//!   refused, its last claim change decided by then claims its value.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sentinel_core::control::{ClaimProvenance, RuleNote};
use sentinel_core::registry::rule::{CompareOp, Condition, MissingData, QualityName, Rule, RuleFallback};
use sentinel_core::registry::{CommandValue, Descriptor};
use sentinel_core::{CanonicalValue, ControlDetail, ControlEvent, Micros, ObsRow, Quality};

use super::{Key3, key3};

/// How long after its commit the checker allows the core to apply a row (a commit's report
/// reaches the core within a step or two; a slow commit is slow before it commits).
pub const APPLY_SLACK_US: i64 = 5_000_000;
/// Invariant 23's allowance on counted time: the core reports its deadline's count in whole
/// milliseconds, and the reference counts from the wake-ups it saw.
pub const COUNT_SLACK_US: i64 = 1_000_000;
/// Invariant 26: a timer wake lands on the first tick at or after its instant, and the loop
/// decides on it within the next: a `for_s` due at `D` is decided by `D` plus two ticks.
pub const FIRE_SLACK_TICKS: i64 = 2;
/// Invariant 26: a window is judged only when its epoch's core still woke and committed
/// this long after the window's end, so a decision it made by then has committed (a slow
/// commit takes up to twice the longest `ack_wait` the settings draw, 10 s) or the core died
/// with it (which excuses the window).
pub const COMMIT_SLACK_US: i64 = 30_000_000;
/// Invariant 26 evaluates a window's condition over every combination of its inputs'
/// candidate readings; a window with more combinations than this is not judged.
const COMBOS_MAX: usize = 4_096;
/// At most this many rows are kept per input (the oldest forgotten first): far more than a
/// run commits of one point.
const ROWS_PER_INPUT_MAX: usize = 200_000;
/// Batches held behind an earlier one: a core has at most a few commits in flight, and each
/// epoch's leftovers go at the next acquisition.
const PENDING_BATCHES_MAX: usize = 1_024;

/// What the reference needs of a point a rule reads.
#[derive(Clone, Debug, PartialEq)]
pub struct InputDef {
    pub freshness_us: i64,
    /// How far apart two consecutive rows may be before the log has a gap, which is also
    /// how long after its newest row the watchdog lets the point stay `live`: the point's
    /// `heartbeat_s` when it declares one (a report-on-change point promises a reading that
    /// often), never past `freshness_s`; else `freshness_s` (sensor paradigm, "Missing data";
    /// the core's watchdog deadline).
    pub gap_us: i64,
    pub missing: Option<MissingData>,
}

/// The points of `descriptors` with what a rule reading them needs.
pub fn input_defs<'a>(descriptors: impl IntoIterator<Item = &'a Descriptor>) -> BTreeMap<Arc<str>, InputDef> {
    descriptors
        .into_iter()
        .map(|d| {
            (
                Arc::from(d.id.as_str()),
                InputDef {
                    freshness_us: i64::from(d.freshness_s) * 1_000_000,
                    gap_us: i64::from(d.manifest.heartbeat_s.unwrap_or(d.freshness_s).min(d.freshness_s))
                        * 1_000_000,
                    missing: d.missing_data,
                },
            )
        })
        .collect()
}

/// A committed row of a rule's input.
#[derive(Clone, Debug)]
struct LogRow {
    order: (Micros, Micros, Key3),
    quality: Quality,
    value: Option<CanonicalValue>,
    /// When it was committed and every earlier batch of its epoch too (or, for a batch whose
    /// report its core never got, when the next epoch took the lock): the core applied it
    /// then or later.
    committed_at: Micros,
    /// Its place in the order the core applies rows: commit order, then each commit's
    /// RETURNING order.
    seq: u64,
    /// The epoch whose batch it was.
    epoch: u32,
}

impl LogRow {
    fn observed_at(&self) -> Micros {
        self.order.0
    }
}

/// What one epoch's core reported of its suppression: each change, from its first wake-up.
#[derive(Clone, Debug, Default)]
struct Suppression {
    /// `(at, suppressed)`, one entry per change (the first wake-up's state included).
    changes: Vec<(Micros, bool)>,
}

impl Suppression {
    /// Whether it was suppressed at `at` (before the first wake-up: yes, as a core starts).
    fn at(&self, at: Micros) -> bool {
        self.changes
            .iter()
            .rev()
            .find(|(when, _)| *when <= at)
            .is_none_or(|(_, s)| *s)
    }

    /// Whether it was suppressed at any time in `[from, to]`.
    fn during(&self, from: Micros, to: Micros) -> bool {
        self.at(from)
            || self
                .changes
                .iter()
                .any(|(when, s)| *s && *when > from && *when <= to)
    }

    /// Time not suppressed from the first wake-up up to `to`.
    fn counted_us(&self, to: Micros) -> i64 {
        let mut counted = 0;
        for (i, (when, s)) in self.changes.iter().enumerate() {
            if *s || *when >= to {
                continue;
            }
            let end = self.changes.get(i + 1).map_or(to, |(next, _)| (*next).min(to));
            counted += end.saturating_sub(*when).max(0);
        }
        counted
    }
}

/// Three-valued: `Some(holds)`, or `None` when it cannot be told.
type Told = Option<bool>;

/// A violation: its invariant and what broke.
pub type Broken = (u8, String);

#[derive(Clone, Debug, Default)]
pub struct RulesModel {
    rules: Arc<BTreeMap<String, Rule>>,
    inputs: Arc<BTreeMap<Arc<str>, InputDef>>,
    /// Every committed row of every input, in commit order.
    rows: BTreeMap<Arc<str>, Vec<LogRow>>,
    by_key: BTreeMap<Key3, (Arc<str>, usize)>,
    /// Rows of inputs committed so far.
    seq: u64,
    /// Committed batches waiting for an earlier batch of their epoch, and the batches
    /// submitted and not committed (yet).
    pending: BTreeMap<(u32, u64), Vec<ObsRow>>,
    submitted: BTreeSet<(u32, u64)>,
    suppression: BTreeMap<u32, Suppression>,
    /// When each epoch took the lock.
    acquired_at: BTreeMap<u32, Micros>,
    /// `(epoch, rule)` whose `rule_warmup_ended` committed.
    warm: BTreeSet<(u32, String)>,
    /// What each rule holds by the log: its value, or `None`.
    holds: BTreeMap<String, Option<CommandValue>>,
    pub claims_checked: u64,
    pub warmups_checked: u64,
    /// Invariant 26: each epoch's last wake-up its observer reported (its core was running
    /// then) and its last committed write (its store was reachable then).
    last_wake: BTreeMap<u32, Micros>,
    last_commit: BTreeMap<u32, Micros>,
    /// When each `(epoch, rule)`'s warmup ended, and the first `rule_held` or
    /// `rule_claim_refused` of each (either leaves the rule's claim as it is).
    warm_at: BTreeMap<(u32, String), Micros>,
    stuck_at: BTreeMap<(u32, String), Micros>,
    /// When each epoch's watchdog reported a rule input's quality changed (a missed
    /// heartbeat, a freshness lost), as committed.
    quality_changed: BTreeMap<(u32, Arc<str>), BTreeSet<Micros>>,
    /// Each rule's committed claim changes, as `(occurred_at, claims its own value)`.
    decisions: BTreeMap<String, Vec<(Micros, bool)>>,
    /// One turmoil tick, in µs: how late a timer wake may land ([`FIRE_SLACK_TICKS`]).
    pub tick_us: i64,
    /// Windows invariant 26 judged, and rule firings it found in time.
    pub timely_checked: u64,
    /// Per rule (in `rules`' order) and compared input (in `compared`'s), the first of the
    /// input's rows whose window invariant 26 has not judged yet.
    timely_from: Vec<Vec<usize>>,
    /// Each rule's compared inputs, in `rules`' order, computed at the first check: the run's
    /// rules never change, and cloning and walking them at every controller step was 4 % of
    /// a seed.
    compared: Vec<Vec<String>>,
}

/// The rule a holder names, when it is `rule:<id>` of a rule of the run.
fn rule_of<'a>(rules: &'a BTreeMap<String, Rule>, holder: &str) -> Option<&'a Rule> {
    rules.get(holder.strip_prefix("rule:")?)
}

/// Every point a value comparison of `c` reads.
fn compared(c: &Condition, out: &mut BTreeSet<String>) {
    match c {
        Condition::Compare { point, .. } => {
            out.insert(point.clone());
        }
        Condition::Quality { .. } => {}
        Condition::All(items) | Condition::Any(items) => items.iter().for_each(|i| compared(i, out)),
        Condition::Not(inner) => compared(inner, out),
    }
}

fn compared_inputs(rule: &Rule) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    compared(&rule.when, &mut out);
    if let Some(until) = &rule.until {
        compared(until, &mut out);
    }
    out
}

fn holds_number(a: f64, op: CompareOp, b: f64) -> bool {
    match op {
        CompareOp::Lt => a < b,
        CompareOp::Le => a <= b,
        CompareOp::Gt => a > b,
        CompareOp::Ge => a >= b,
        CompareOp::Eq => a == b,
        CompareOp::Ne => a != b,
    }
}

fn value_holds(value: &CanonicalValue, op: CompareOp, constant: &CommandValue) -> bool {
    let equal = match (value, constant) {
        (CanonicalValue::Num(a), CommandValue::Number(b)) => return holds_number(*a, op, *b),
        (CanonicalValue::Bool(a), CommandValue::Bool(b)) => a == b,
        (CanonicalValue::Text(a), CommandValue::Member(b)) => **a == **b,
        _ => return false,
    };
    match op {
        CompareOp::Eq => equal,
        CompareOp::Ne => !equal,
        _ => false,
    }
}

/// An input's reading for the reference: its value if usable (or standing in), and whether
/// it is certainly `live`.
#[derive(Clone, Debug)]
struct Read {
    value: Option<CanonicalValue>,
    live: bool,
}

/// `c` in three values over `read` (`None`: the point's reading cannot be told).
fn told(c: &Condition, read: &dyn Fn(&str) -> Option<Read>) -> Told {
    match c {
        Condition::Compare { point, op, value } => {
            let v = read(point)?.value?;
            Some(value_holds(&v, *op, value))
        }
        Condition::Quality {
            point,
            equals,
            quality,
        } => {
            let r = read(point)?;
            // Told only when certainly live: any other quality is the watchdog's to time.
            if !r.live {
                return None;
            }
            Some((*quality == QualityName::Live) == *equals)
        }
        Condition::All(items) => {
            let mut all = Some(true);
            for item in items {
                match told(item, read) {
                    Some(false) => return Some(false),
                    None => all = None,
                    Some(true) => {}
                }
            }
            all
        }
        Condition::Any(items) => {
            let mut any = Some(false);
            for item in items {
                match told(item, read) {
                    Some(true) => return Some(true),
                    None => any = None,
                    Some(false) => {}
                }
            }
            any
        }
        Condition::Not(inner) => told(inner, read).map(|h| !h),
    }
}

impl RulesModel {
    pub fn new(rules: Arc<BTreeMap<String, Rule>>, inputs: Arc<BTreeMap<Arc<str>, InputDef>>) -> RulesModel {
        RulesModel {
            rules,
            inputs,
            tick_us: 500_000,
            ..RulesModel::default()
        }
    }

    fn is_input(&self, point: &str) -> bool {
        self.rules.values().any(|r| r.inputs.iter().any(|i| i == point))
    }

    /// Epoch `epoch`'s core submitted batch `batch` to the store: the core applies its batches
    /// in the order it submits them (ids ascending, some skipped).
    pub fn on_submit(&mut self, epoch: u32, batch: u64) {
        self.submitted.insert((epoch, batch));
        debug_assert!(self.submitted.len() <= PENDING_BATCHES_MAX);
    }

    /// A commit of epoch `epoch`'s batch `batch`, at `at`, with its RETURNING rows in order. A
    /// batch's rows become visible to its core only once every batch it submitted earlier has
    /// committed (a slow commit holds the later ones back).
    pub fn on_commit<'a>(
        &mut self,
        epoch: u32,
        batch: u64,
        rows: impl IntoIterator<Item = &'a ObsRow>,
        at: Micros,
    ) {
        let rows: Vec<ObsRow> = rows
            .into_iter()
            .filter(|r| self.is_input(&r.point_id))
            .cloned()
            .collect();
        self.submitted.remove(&(epoch, batch));
        self.pending.insert((epoch, batch), rows);
        debug_assert!(self.pending.len() <= PENDING_BATCHES_MAX);
        // Every committed batch of the epoch below its first still uncommitted one.
        let first_open = self
            .submitted
            .range((epoch, 0)..=(epoch, u64::MAX))
            .next()
            .map_or(u64::MAX, |(_, b)| *b);
        let ready: Vec<(u32, u64)> = self
            .pending
            .range((epoch, 0)..(epoch, first_open))
            .map(|(k, _)| *k)
            .collect();
        for key in ready {
            if let Some(rows) = self.pending.remove(&key) {
                for row in rows {
                    self.push(&row, at, key.0);
                }
            }
        }
        self.committed(epoch, at);
    }

    /// Epoch `epoch` committed a write at `at`: its store was reachable then.
    fn committed(&mut self, epoch: u32, at: Micros) {
        let last = self.last_commit.entry(epoch).or_insert(at);
        *last = (*last).max(at);
    }

    /// A row the core can apply from `at` on.
    fn push(&mut self, row: &ObsRow, at: Micros, epoch: u32) {
        let rows = self.rows.entry(row.point_id.clone()).or_default();
        if rows.len() >= ROWS_PER_INPUT_MAX {
            return; // counted out: a run never gets here
        }
        let key = key3(&row.key);
        self.seq += 1;
        self.by_key
            .insert(key.clone(), (row.point_id.clone(), rows.len()));
        rows.push(LogRow {
            seq: self.seq,
            order: (row.observed_at, row.ingested_at, key),
            quality: row.quality,
            value: row.value.clone(),
            committed_at: at,
            epoch,
        });
        debug_assert!(rows.len() <= ROWS_PER_INPUT_MAX);
    }

    /// Rows rewritten in place by a reprocess: their value and quality as the log now holds
    /// them.
    pub fn on_rows_rewritten(&mut self, rows: &[ObsRow]) {
        for row in rows {
            if let Some((point, i)) = self.by_key.get(&key3(&row.key))
                && let Some(r) = self.rows.get_mut(point).and_then(|rows| rows.get_mut(*i))
            {
                r.quality = row.quality;
                r.value = row.value.clone();
            }
        }
    }

    /// Epoch `epoch`'s core reported, at a wake-up at `at`, whether staleness is suppressed.
    pub fn on_suppression(&mut self, epoch: u32, suppressed: bool, at: Micros) {
        self.last_wake.insert(epoch, at);
        let s = self.suppression.entry(epoch).or_default();
        if s.changes.last().is_none_or(|(_, last)| *last != suppressed) {
            s.changes.push((at, suppressed));
        }
    }

    /// Epoch `epoch` took the lock at `at`: the batches an earlier epoch committed past a
    /// gap (a lost report) are in the log the new core reads at its start.
    pub fn on_acquire(&mut self, epoch: u32, at: Micros) {
        self.acquired_at.insert(epoch, at);
        self.submitted.retain(|(e, _)| *e >= epoch);
        let older: Vec<(u32, u64)> = self.pending.keys().copied().filter(|(e, _)| *e < epoch).collect();
        for key in older {
            if let Some(rows) = self.pending.remove(&key) {
                for row in rows {
                    self.push(&row, at, key.0);
                }
            }
        }
    }

    /// The time counted not suppressed by `epoch` up to `at`.
    fn counted_us(&self, epoch: u32, at: Micros) -> i64 {
        self.suppression.get(&epoch).map_or(0, |s| s.counted_us(at))
    }

    /// `point`'s newest row among the first `cutoff` rows applied.
    fn head(&self, point: &str, cutoff: u64) -> Option<&LogRow> {
        self.rows
            .get(point)?
            .iter()
            .filter(|r| r.seq <= cutoff)
            .max_by(|a, b| a.order.cmp(&b.order))
    }

    /// `point`'s reading at `t` as of the first `cutoff` rows applied.
    fn read(&self, point: &str, cutoff: u64, t: Micros) -> Option<Read> {
        let def = self.inputs.get(point)?;
        let head = self.head(point, cutoff);
        let current = |r: &LogRow| r.observed_at().0.saturating_add(def.freshness_us) > t.0;
        let live = head.is_some_and(|h| h.quality == Quality::Live && h.value.is_some() && current(h));
        if live {
            return Some(Read {
                value: head.and_then(|h| h.value.clone()),
                live,
            });
        }
        if let Some(MissingData::HoldLastValid { max_staleness_s }) = def.missing {
            let stand_in = self
                .rows
                .get(point)?
                .iter()
                .filter(|r| r.seq <= cutoff && r.quality == Quality::Live && r.value.is_some())
                .max_by(|a, b| a.order.cmp(&b.order))
                .filter(|r| r.observed_at().0 + i64::from(max_staleness_s) * 1_000_000 > t.0);
            if let Some(r) = stand_in {
                return Some(Read {
                    value: r.value.clone(),
                    live: false,
                });
            }
        }
        Some(Read {
            value: None,
            live: false,
        })
    }

    /// The views of the log the core may have had at `t`, as cutoffs in the order rows are
    /// applied: every row committed by `t − APPLY_SLACK_US`, then each row of an input of
    /// `rule` committed after that, up to `t`, one at a time (the core evaluates after each).
    fn views(&self, rule: &Rule, t: Micros) -> Vec<u64> {
        let from = t.add_ms(-APPLY_SLACK_US / 1_000);
        let all = || self.rows.values().flatten();
        let mut views = vec![
            all()
                .filter(|r| r.committed_at <= from)
                .map(|r| r.seq)
                .max()
                .unwrap_or(0),
        ];
        for input in &rule.inputs {
            for r in self.rows.get(input.as_str()).into_iter().flatten() {
                if r.committed_at > from && r.committed_at <= t {
                    views.push(r.seq);
                }
            }
        }
        views.sort();
        views.dedup();
        views
    }

    /// A committed control write, at `at`: invariants 22–25 for the rules' claims and
    /// warmup events in it.
    pub fn on_write(&mut self, events: &[ControlEvent], at: Micros) -> Result<(), Broken> {
        for event in events {
            self.committed(event.core_epoch, at);
            self.record(event);
            match &event.detail {
                ControlDetail::Rule {
                    rule,
                    note:
                        RuleNote::WarmupEnded {
                            reason, counted_ms, ..
                        },
                } => self.check_warmup_ended(event, rule, reason, *counted_ms)?,
                ControlDetail::ClaimSet {
                    holder,
                    value,
                    provenance,
                    ..
                } => {
                    let Some(rule) = rule_of(&self.rules, holder).cloned() else {
                        continue;
                    };
                    self.check_warm(event, &rule)?;
                    if *value == rule.claim.value {
                        self.check_fires(event, &rule, provenance.as_deref(), at)?;
                    } else {
                        self.check_ends(event, &rule, Some(value))?;
                    }
                    self.holds.insert(rule.id.clone(), Some(value.clone()));
                    self.claims_checked += 1;
                }
                ControlDetail::ClaimReleased { holder, .. } => {
                    let Some(rule) = rule_of(&self.rules, holder).cloned() else {
                        continue;
                    };
                    self.check_warm(event, &rule)?;
                    self.check_ends(event, &rule, None)?;
                    self.holds.insert(rule.id.clone(), None);
                    self.claims_checked += 1;
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Invariant 26's record of a committed rule event: warmup ends, holds and refusals, and
    /// each claim change with the instant the core decided it.
    fn record(&mut self, event: &ControlEvent) {
        let t = event.occurred_at;
        match &event.detail {
            ControlDetail::Rule { rule, note } => {
                let key = (event.core_epoch, rule.to_string());
                let map = match note {
                    RuleNote::WarmupEnded { .. } => &mut self.warm_at,
                    _ => &mut self.stuck_at,
                };
                let first = map.entry(key).or_insert(t);
                *first = (*first).min(t);
            }
            ControlDetail::ClaimSet { holder, value, .. } => {
                if let Some(rule) = rule_of(&self.rules, holder) {
                    let own = *value == rule.claim.value;
                    let id = rule.id.clone();
                    self.decisions.entry(id).or_default().push((t, own));
                }
            }
            ControlDetail::ClaimReleased { holder, .. } => {
                if let Some(rule) = rule_of(&self.rules, holder) {
                    let id = rule.id.clone();
                    self.decisions.entry(id).or_default().push((t, false));
                }
            }
            ControlDetail::QualityChanged { .. } if self.is_input(&event.point_id) => {
                self.quality_changed
                    .entry((event.core_epoch, event.point_id.clone()))
                    .or_default()
                    .insert(t);
            }
            _ => {}
        }
    }

    /// Invariant 23: a `rule_warmup_ended` the reference justifies.
    fn check_warmup_ended(
        &mut self,
        event: &ControlEvent,
        rule_id: &str,
        reason: &str,
        counted_ms: u64,
    ) -> Result<(), Broken> {
        let Some(rule) = self.rules.get(rule_id).cloned() else {
            return Ok(());
        };
        let t = event.occurred_at;
        let epoch = event.core_epoch;
        match reason {
            "inputs_live" => {
                // In some view the core may have had then, every input live and current.
                let views = self.views(&rule, t);
                let live_in = |cutoff: u64| {
                    rule.inputs
                        .iter()
                        .find(|i| !self.read(i, cutoff, t).is_some_and(|r| r.live))
                };
                if !views.iter().any(|&v| live_in(v).is_none())
                    && let Some(input) = live_in(*views.last().unwrap_or(&0))
                {
                    return Err((
                        23,
                        format!(
                            "epoch {epoch}: rule {rule_id} left warmup at {} with its inputs live, but input \
                             {input} has no committed live row current then",
                            t.0
                        ),
                    ));
                }
            }
            _ => {
                let counted = self.counted_us(epoch, t);
                let deadline_us = i64::from(rule.warmup_deadline_s) * 1_000_000;
                if counted + COUNT_SLACK_US < deadline_us {
                    return Err((
                        23,
                        format!(
                            "epoch {epoch}: rule {rule_id} left warmup at {} by its {} s deadline ({reason}, the core \
                             counted {counted_ms} ms), but only {} ms passed not suppressed",
                            t.0,
                            rule.warmup_deadline_s,
                            counted / 1_000
                        ),
                    ));
                }
            }
        }
        self.warm.insert((epoch, rule_id.to_owned()));
        self.warmups_checked += 1;
        Ok(())
    }

    /// Invariant 26, judged when the run has ended at `end` (and can be asked earlier: a
    /// window is judged only once the slack after it has passed). For each rule with
    /// compared inputs, each window that starts at a row `r0` of a compared input that its
    /// epoch `E` committed at `c0`: with `T1 = c0 + APPLY_SLACK_US + for_s + FIRE_SLACK_TICKS`
    /// ticks, if the condition held by the reference from `r0`'s application through `T1`,
    /// the rule's last claim change decided by `T1` is a claim of its value. "Held" is: every
    /// compared input's candidate readings — its newest row as of `r0` and each row applied
    /// after `r0`, committed by `T1` and not certainly late (a row the core applies after a
    /// newer one moves nothing) — is `live` and valued, and the condition is certainly true
    /// (and its `until` certainly false) on every combination of them; no row applied after
    /// `r0` follows the newest before it by more than the input's gap ([`InputDef::gap_us`],
    /// the heartbeat for a report-on-change point: the core's "a gap starts the condition
    /// again"); the newest row the core had certainly applied (committed [`APPLY_SLACK_US`]
    /// before) is current (within `freshness_s`) at every instant up to `T1`; and the
    /// epoch's watchdog committed no `quality_changed` of the input from `c0` less the slack
    /// to `T1` plus the commit slack (a missed heartbeat, a freshness lost: the core saw the
    /// input stale, whatever the checker's timing says). What excuses a window: `r0` not
    /// committed by the epoch then holding the lock, or a newer epoch taking it by `T1` plus
    /// [`COMMIT_SLACK_US`] (a takeover, a lock loss, a crash, a partition that cost the
    /// session); `E`'s core not waking, or not committing, as late as that (it stopped, or
    /// lost its store); `E` suppressed (startup grace, no lag reading, lag high) at any
    /// wake-up from a second before `c0` to a second after `T1`; the rule's warmup in `E`
    /// ending after `c0`, or the rule held or a claim of it refused in `E`.
    ///
    /// Judged as the run goes: at every controller step `now`, each window whose end (`T1`
    /// plus [`COMMIT_SLACK_US`]) passed at least [`COMMIT_SLACK_US`] ago is judged once, in
    /// commit order, and at the run's
    /// end (`run_ended`) every window left; a window whose end is past the run's is not
    /// judged.
    pub fn check_timely(&mut self, now: Micros, run_ended: bool) -> Result<(), Broken> {
        if self.compared.len() != self.rules.len() {
            self.compared = self
                .rules
                .values()
                .map(|rule| compared_inputs(rule).into_iter().collect())
                .collect();
            self.timely_from = self.compared.iter().map(|c| vec![0; c.len()]).collect();
        }
        let rules = Arc::clone(&self.rules);
        let compared_all = std::mem::take(&mut self.compared);
        let mut result = Ok(());
        'rules: for (n, (rule, compared)) in rules.values().zip(&compared_all).enumerate() {
            // Empty: a condition on quality alone, the watchdog's timing, not told.
            for (i, input) in compared.iter().enumerate() {
                let from = self.timely_from[n][i];
                let rows = self.rows.get(input.as_str()).map(Vec::as_slice).unwrap_or(&[]);
                let mut next = from;
                for r0 in rows.iter().skip(from) {
                    // Rows are in commit order, so every later window ends later still. A
                    // window is judged a further [`COMMIT_SLACK_US`] after its end: whether its
                    // epoch still woke and committed by then is known only once it has.
                    if !run_ended && self.window_end(rule, r0.committed_at).0 + 2 * COMMIT_SLACK_US > now.0 {
                        break;
                    }
                    next += 1;
                    match self.judge_window(rule, compared, input, r0, now) {
                        None => {}
                        Some(Ok(())) => self.timely_checked += 1,
                        Some(Err(broken)) => {
                            result = Err(broken);
                            break 'rules;
                        }
                    }
                }
                self.timely_from[n][i] = next;
            }
        }
        self.compared = compared_all;
        result
    }

    /// `T1` of the window whose row committed at `c0`: the core applies the row within
    /// [`APPLY_SLACK_US`], its `for_s` runs, and the timer wake and the decision land within
    /// [`FIRE_SLACK_TICKS`] ticks.
    fn window_end(&self, rule: &Rule, c0: Micros) -> Micros {
        Micros(c0.0 + APPLY_SLACK_US + i64::from(rule.for_s) * 1_000_000 + FIRE_SLACK_TICKS * self.tick_us)
    }

    /// One window of [`Self::check_timely`]: `None` when it is not judged (excused, or the
    /// condition did not certainly hold throughout), else whether the rule fired in time.
    fn judge_window(
        &self,
        rule: &Rule,
        compared: &[String],
        first: &str,
        r0: &LogRow,
        end: Micros,
    ) -> Option<Result<(), Broken>> {
        let epoch = r0.epoch;
        let c0 = r0.committed_at;
        let t1 = self.window_end(rule, c0);
        let after = Micros(t1.0 + COMMIT_SLACK_US);
        // The core: E held the lock from before c0 to after T1, ran, committed, thawed.
        if after > end
            || self.acquired_at.get(&epoch).is_none_or(|&a| a > c0)
            || self.acquired_at.range(epoch + 1..).any(|(_, &a)| a <= after)
            || self.last_wake.get(&epoch).is_none_or(|&w| w < after)
            || self.last_commit.get(&epoch).is_none_or(|&w| w < after)
            || self
                .suppression
                .get(&epoch)
                .is_none_or(|s| s.during(c0.add_ms(-1_000), t1.add_ms(1_000)))
        {
            return None;
        }
        let key = (epoch, rule.id.clone());
        if self.warm_at.get(&key).is_none_or(|&w| w > c0)
            || self.stuck_at.get(&key).is_some_and(|&s| s <= after)
        {
            return None;
        }
        // The inputs: candidates, gaps and currency.
        let mut candidates: Vec<(String, Vec<Read>)> = Vec::new();
        for input in compared {
            let def = self.inputs.get(input.as_str())?;
            let rows = self.rows.get(input.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let before: Vec<&LogRow> = rows.iter().filter(|r| r.seq <= r0.seq).collect();
            let head = before.iter().max_by(|a, b| a.order.cmp(&b.order))?;
            if input == first && r0.order.2 != head.order.2 {
                return None; // r0 is late: it moves nothing
            }
            let mut newest = head.order.clone();
            let mut newest_at = before.iter().map(|r| r.observed_at()).max()?;
            let mut reads = vec![*head];
            for r in rows.iter().filter(|r| r.seq > r0.seq && r.committed_at <= t1) {
                // Current up to the instant this row is certainly applied, and no gap.
                let applied_by = Micros((r.committed_at.0 + APPLY_SLACK_US).min(t1.0));
                if newest_at.0 + def.freshness_us <= applied_by.0
                    || r.observed_at().0 - newest_at.0 > def.gap_us
                {
                    return None;
                }
                newest_at = newest_at.max(r.observed_at());
                if r.order > newest {
                    newest = r.order.clone();
                    reads.push(r);
                }
            }
            if newest_at.0 + def.freshness_us <= t1.0
                || self
                    .quality_changed
                    .get(&(epoch, Arc::from(input.as_str())))
                    .is_some_and(|at| at.range(Micros(c0.0 - APPLY_SLACK_US)..=after).next().is_some())
            {
                return None; // not current by T1, or the watchdog reported it
            }
            if reads
                .iter()
                .any(|r| r.quality != Quality::Live || r.value.is_none())
            {
                return None;
            }
            let reads = reads
                .iter()
                .map(|r| Read {
                    value: r.value.clone(),
                    live: true,
                })
                .collect();
            candidates.push((input.clone(), reads));
        }
        let combos = candidates
            .iter()
            .try_fold(1usize, |n, (_, c)| n.checked_mul(c.len()))?;
        if combos > COMBOS_MAX {
            return None;
        }
        for n in 0..combos {
            let mut rest = n;
            let mut pick: BTreeMap<&str, &Read> = BTreeMap::new();
            for (input, reads) in &candidates {
                pick.insert(input.as_str(), &reads[rest % reads.len()]);
                rest /= reads.len();
            }
            let read = |point: &str| pick.get(point).map(|r| (*r).clone());
            if told(&rule.when, &read) != Some(true)
                || rule.until.as_ref().is_some_and(|u| told(u, &read) != Some(false))
            {
                return None;
            }
        }
        // Judged: the rule's last decision by T1 claims its value.
        let last = self.decisions.get(&rule.id).and_then(|d| {
            d.iter()
                .filter(|(at, _)| *at <= t1)
                .max_by_key(|(at, _)| *at)
                .copied()
        });
        if last.is_some_and(|(_, own)| own) {
            return Some(Ok(()));
        }
        Some(Err((
            26,
            format!(
                "epoch {epoch}: rule {} (for_s {}) held on usable, current inputs from row {:?} of {first} \
                 (committed {}) through {} without a gap, out of warmup and not suppressed, but {}",
                rule.id,
                rule.for_s,
                r0.order.2,
                c0.0,
                t1.0,
                match last {
                    None => "it never claimed its value by then".to_owned(),
                    Some((at, _)) => format!("its last claim change by then ({}) was not its value", at.0),
                }
            ),
        )))
    }

    /// Invariant 23: a claim or release by a rule whose warmup ended in its epoch.
    fn check_warm(&self, event: &ControlEvent, rule: &Rule) -> Result<(), Broken> {
        if self.warm.contains(&(event.core_epoch, rule.id.clone())) {
            return Ok(());
        }
        Err((
            23,
            format!(
                "epoch {}: rule {} changed its claim on {} at {} in warmup (no rule_warmup_ended committed)",
                event.core_epoch, rule.id, event.point_id, event.occurred_at.0
            ),
        ))
    }

    /// Invariants 22, 24 and 25 for a claim of the rule's own value.
    fn check_fires(
        &self,
        event: &ControlEvent,
        rule: &Rule,
        provenance: Option<&ClaimProvenance>,
        at: Micros,
    ) -> Result<(), Broken> {
        let t = event.occurred_at;
        let id = &rule.id;
        let Some(provenance) = provenance.filter(|p| &*p.rule == id.as_str()) else {
            return Err((
                22,
                format!("rule {id}'s claim at {} carries no provenance of its own", t.0),
            ));
        };
        let compared = compared_inputs(rule);
        // 22: each compared input's row committed, before the claim, and current then.
        let mut named: BTreeMap<&str, &LogRow> = BTreeMap::new();
        for (point, key) in &provenance.rows {
            let Some((p, i)) = self.by_key.get(&key3(key)) else {
                return Err((
                    22,
                    format!(
                        "rule {id}'s claim at {} names row {key:?} of {point}, which is not committed",
                        t.0
                    ),
                ));
            };
            let row = &self.rows[p][*i];
            if p != point || row.committed_at > at {
                return Err((
                    22,
                    format!(
                        "rule {id}'s claim at {} names row {key:?} of {point}, not a committed row of it",
                        t.0
                    ),
                ));
            }
            named.insert(point, row);
        }
        for input in &compared {
            let Some(row) = named.get(input.as_str()) else {
                return Err((
                    22,
                    format!("rule {id}'s claim at {} names no row of its input {input}", t.0),
                ));
            };
            let freshness_us = self.inputs.get(input.as_str()).map_or(0, |d| d.freshness_us);
            if row.observed_at().0.saturating_add(freshness_us) <= t.0 {
                return Err((
                    22,
                    format!(
                        "rule {id} claimed {:?} on {} at {} from row {:?} of {input}, observed at {}: older than its \
                         freshness of {} s",
                        rule.claim.value,
                        event.point_id,
                        t.0,
                        row.order.2,
                        row.observed_at().0,
                        freshness_us / 1_000_000
                    ),
                ));
            }
        }
        // 24: the named rows were the newest when the core could have seen them, and the
        // condition holds on them.
        for input in &compared {
            let row = named[input.as_str()];
            let newer = self.rows.get(input.as_str()).into_iter().flatten().find(|r| {
                r.order > row.order
                    && r.committed_at.0 + APPLY_SLACK_US <= t.0
                    && r.observed_at().0 + self.inputs.get(input.as_str()).map_or(0, |d| d.freshness_us) > t.0
            });
            if let Some(newer) = newer {
                return Err((
                    24,
                    format!(
                        "rule {id}'s claim at {} reads row {:?} of {input}, but {:?} (observed {}, committed {}) is newer",
                        t.0,
                        row.order.2,
                        newer.order.2,
                        newer.observed_at().0,
                        newer.committed_at.0
                    ),
                ));
            }
        }
        let read = |point: &str| -> Option<Read> {
            let row = named.get(point)?;
            let def = self.inputs.get(point)?;
            let live = row.quality == Quality::Live
                && row.value.is_some()
                && row.observed_at().0.saturating_add(def.freshness_us) > t.0;
            Some(Read {
                value: live.then(|| row.value.clone()).flatten(),
                live,
            })
        };
        if told(&rule.when, &read) == Some(false) {
            return Err((
                24,
                format!(
                    "rule {id} claimed {:?} on {} at {}, but its condition does not hold on the rows it names",
                    rule.claim.value, event.point_id, t.0
                ),
            ));
        }
        // 25: no row applied while current, observed in the last `for_s`, made it false.
        if rule.for_s > 0 {
            let since = t.add_ms(-i64::from(rule.for_s) * 1_000);
            for input in &compared {
                let def = self.inputs.get(input.as_str()).cloned();
                let freshness_us = def.map_or(0, |d| d.freshness_us);
                let rows = self.rows.get(input.as_str()).map(Vec::as_slice).unwrap_or(&[]);
                let epoch = event.core_epoch;
                let acquired_at = self.acquired_at.get(&epoch).copied().unwrap_or(Micros(i64::MAX));
                let suppression = self.suppression.get(&epoch).cloned().unwrap_or_default();
                // The newest row observed by the window's start, and every row in it.
                let start = rows
                    .iter()
                    .filter(|r| r.observed_at() <= since && r.committed_at.0 + APPLY_SLACK_US <= t.0)
                    .max_by(|a, b| a.order.cmp(&b.order))
                    .map(|r| r.seq);
                for r in rows {
                    if (r.observed_at() <= since && Some(r.seq) != start) || r.observed_at() > t {
                        continue;
                    }
                    let applied_by = r.committed_at.add_ms(APPLY_SLACK_US / 1_000);
                    // The head whatever the order the core applied the commits of the window in.
                    let newest = rows
                        .iter()
                        .all(|o| o.order <= r.order || o.committed_at > applied_by);
                    let current_when_applied = r.observed_at().0.saturating_add(freshness_us) > applied_by.0;
                    // This epoch evaluated it only if not frozen then; an earlier epoch's row was
                    // replayed at this one's start.
                    let evaluated =
                        r.committed_at < acquired_at || !suppression.during(r.committed_at, applied_by);
                    if !newest
                        || !current_when_applied
                        || !evaluated
                        || applied_by > t
                        || r.observed_at() <= since
                        || r.quality != Quality::Live
                    {
                        continue;
                    }
                    let only = |point: &str| -> Option<Read> {
                        (point == input.as_str()).then(|| Read {
                            value: r.value.clone(),
                            live: true,
                        })
                    };
                    if told(&rule.when, &only) == Some(false) {
                        return Err((
                            25,
                            format!(
                                "rule {id} fired at {} (for_s {}), but row {:?} of {input} observed at {} (committed \
                                 {}) made its condition false within that time",
                                t.0,
                                rule.for_s,
                                r.order.2,
                                r.observed_at().0,
                                r.committed_at.0
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Invariant 24 for a rule that stops claiming its value: without `for_s`, only when, in
    /// some view the core could have had, its condition no longer certainly holds.
    fn check_ends(
        &self,
        event: &ControlEvent,
        rule: &Rule,
        value: Option<&CommandValue>,
    ) -> Result<(), Broken> {
        let fallbacks = [&rule.otherwise, &rule.on_input_loss];
        let declared = match value {
            None => fallbacks.iter().any(|f| **f == RuleFallback::Release),
            Some(v) => fallbacks
                .iter()
                .any(|f| matches!(f, RuleFallback::Value(x) if x == v)),
        };
        if !declared {
            return Err((
                24,
                format!(
                    "rule {} set {value:?} on {} at {}: neither its claim, its otherwise nor its on_input_loss",
                    rule.id, event.point_id, event.occurred_at.0
                ),
            ));
        }
        let was_firing = self.holds.get(&rule.id).and_then(Option::as_ref) == Some(&rule.claim.value);
        if rule.for_s > 0 || !was_firing {
            return Ok(());
        }
        let t = event.occurred_at;
        let compared = compared_inputs(rule);
        let certainly_firing = self.views(rule, t).into_iter().all(|cutoff| {
            let read = |point: &str| self.read(point, cutoff, t);
            let usable = compared.iter().all(|i| read(i).is_some_and(|r| r.live));
            let when = told(&rule.when, &read);
            let ends = rule.until.as_ref().map(|u| told(u, &read));
            usable
                && when == Some(true)
                && match ends {
                    Some(ends) => ends == Some(false),
                    None => true,
                }
        });
        if certainly_firing {
            return Err((
                24,
                format!(
                    "rule {} stopped claiming {:?} on {} at {} ({value:?}), but its condition holds on current data \
                     in every view of the log",
                    rule.id, rule.claim.value, event.point_id, t.0
                ),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000;

    #[test]
    fn the_count_takes_only_the_time_not_suppressed() {
        let mut m = RulesModel::default();
        m.on_suppression(1, true, Micros(0));
        m.on_suppression(1, false, Micros(60 * S));
        m.on_suppression(1, false, Micros(70 * S));
        m.on_suppression(1, true, Micros(90 * S));
        m.on_suppression(1, false, Micros(200 * S));
        assert_eq!(m.counted_us(1, Micros(90 * S)), 30 * S);
        assert_eq!(m.counted_us(1, Micros(150 * S)), 30 * S, "suppressed from 90 s");
        assert_eq!(m.counted_us(1, Micros(210 * S)), 40 * S);
        assert_eq!(
            m.counted_us(2, Micros(210 * S)),
            0,
            "an epoch never seen counts nothing"
        );
        let s = &m.suppression[&1];
        assert!(s.during(Micros(50 * S), Micros(61 * S)));
        assert!(!s.during(Micros(61 * S), Micros(89 * S)));
        assert!(s.during(Micros(89 * S), Micros(91 * S)));
    }

    /// Invariant 26 on a made-up log: one rule (`x > 1` for 10 s) over one input whose
    /// freshness is 60 s and whose gap is `gap_s` (its heartbeat), a row every 5 s (15 s
    /// after the row at `gap_after_s`) from 10 s to 150 s, each committed half a second after
    /// it was observed, one epoch awake and not suppressed from 4 s on.
    fn timely_model(gap_after_s: Option<i64>, gap_s: i64) -> RulesModel {
        use sentinel_core::registry::rule::{RuleBand, RuleClaim};
        let rule = Rule {
            id: "r".into(),
            inputs: vec!["x".into()],
            when: Condition::Compare {
                point: "x".into(),
                op: CompareOp::Gt,
                value: CommandValue::Number(1.0),
            },
            until: None,
            for_s: 10,
            point: "w".into(),
            claim: RuleClaim {
                band: RuleBand::Automation,
                priority: 0,
                value: CommandValue::Bool(true),
            },
            otherwise: RuleFallback::Release,
            on_input_loss: RuleFallback::Release,
            warmup_deadline_s: 60,
            fight: None,
        };
        let inputs = BTreeMap::from([(
            Arc::from("x"),
            InputDef {
                freshness_us: 60 * S,
                gap_us: gap_s * S,
                missing: None,
            },
        )]);
        let mut m = RulesModel::new(
            Arc::new(BTreeMap::from([("r".to_owned(), rule)])),
            Arc::new(inputs),
        );
        m.on_acquire(1, Micros(0));
        for i in 0..200 {
            m.on_suppression(1, i < 4, Micros(i * S));
        }
        m.record(&event(
            5 * S,
            ControlDetail::Rule {
                rule: "r".into(),
                note: RuleNote::WarmupEnded {
                    reason: "inputs_live",
                    waited_ms: 5_000,
                    counted_ms: 1_000,
                },
            },
        ));
        let (mut t, mut n) = (10, 0);
        while t <= 150 {
            n += 1;
            let row = ObsRow {
                point: sentinel_core::registry::PointIdx(0),
                point_id: "x".into(),
                class: sentinel_core::registry::RetentionClass::State,
                ingested_at: Micros(t * S),
                observed_at: Micros(t * S),
                device_time: None,
                value: Some(CanonicalValue::Num(5.0)),
                native_num: None,
                native_text: None,
                unit_native: None,
                quality: Quality::Live,
                reason: None,
                detail: None,
                changed: true,
                registry_version: 1,
                key: sentinel_core::ObsKey {
                    driver_instance: "d".into(),
                    source_epoch: 1,
                    source_seq: n,
                },
                skew_flagged: false,
                tag: sentinel_core::DeliveryTag(n),
            };
            m.on_submit(1, n);
            m.on_commit(1, n, [&row], Micros(t * S + S / 2));
            t += if gap_after_s == Some(t) { 15 } else { 5 };
        }
        m
    }

    fn event(at: i64, detail: ControlDetail) -> ControlEvent {
        ControlEvent {
            occurred_at: Micros(at),
            point: None,
            point_id: "w".into(),
            principal: "core:rules".into(),
            core_epoch: 1,
            registry_version: 1,
            detail,
        }
    }

    fn fired(at: i64) -> ControlEvent {
        event(
            at,
            ControlDetail::ClaimSet {
                command_id: "rule-1-1".into(),
                holder: "rule:r".into(),
                band: sentinel_core::arbitration::Band::Automation,
                priority: 0,
                value: CommandValue::Bool(true),
                until: None,
                provenance: None,
            },
        )
    }

    #[test]
    fn a_rule_whose_condition_held_past_its_for_s_has_fired_by_then() {
        // Never fired: the first window (row at 10 s, committed 10.5 s) ends at 10.5 + 5
        // (apply slack) + 10 (for_s) + 1 (two ticks) = 26.5 s.
        let err = timely_model(None, 10)
            .check_timely(Micros(200 * S), true)
            .unwrap_err();
        assert_eq!(err.0, 26, "{}", err.1);
        assert!(err.1.contains("never claimed"), "{}", err.1);
        // Fired at 26.5 s: in time for every window.
        let mut m = timely_model(None, 10);
        m.record(&fired(26 * S + S / 2));
        assert_eq!(m.check_timely(Micros(200 * S), true), Ok(()));
        assert!(m.timely_checked > 10, "{} windows judged", m.timely_checked);
        // Fired at 41.5 s: late for the window from 10 s.
        let mut m = timely_model(None, 10);
        m.record(&fired(41 * S + S / 2));
        let err = m.check_timely(Micros(200 * S), true).unwrap_err();
        assert!(
            err.1.contains("was not its value") || err.1.contains("never claimed"),
            "{}",
            err.1
        );
    }

    #[test]
    fn invariant_26_judges_each_window_once_as_the_run_goes() {
        // Never fired: nothing is due at 30 s (the first window ends at 26.5 s and is judged
        // two commit slacks later); by 200 s it is, without waiting for the run's end.
        let mut m = timely_model(None, 10);
        assert_eq!(m.check_timely(Micros(30 * S), false), Ok(()));
        assert_eq!(m.timely_checked, 0);
        assert_eq!(m.check_timely(Micros(200 * S), false).map_err(|e| e.0), Err(26));
        // Fired in time: each window judged once, however often the controller asks.
        let mut m = timely_model(None, 10);
        m.record(&fired(26 * S + S / 2));
        assert_eq!(m.check_timely(Micros(200 * S), false), Ok(()));
        let judged = m.timely_checked;
        assert!(judged > 0);
        assert_eq!(m.check_timely(Micros(200 * S), false), Ok(()));
        assert_eq!(m.check_timely(Micros(200 * S), true), Ok(()));
        assert_eq!(m.timely_checked, judged, "a window judged twice");
    }

    #[test]
    fn a_gap_longer_than_the_heartbeat_starts_the_window_again() {
        // Rows at 10, then 25 s: 15 s apart, past the 10 s heartbeat (though within the 60 s
        // freshness), so the condition starts again at 25 s and 41.5 s is in time...
        let mut m = timely_model(Some(10), 10);
        m.record(&fired(41 * S + S / 2));
        assert_eq!(m.check_timely(Micros(200 * S), true), Ok(()));
        // ...but not for an input whose gap is its freshness: no gap there.
        let mut m = timely_model(Some(10), 60);
        m.record(&fired(41 * S + S / 2));
        assert_eq!(m.check_timely(Micros(200 * S), true).map_err(|e| e.0), Err(26));
        // A suppressed epoch excuses every window it touches.
        let mut m = timely_model(None, 10);
        m.suppression.insert(
            1,
            Suppression {
                changes: vec![(Micros(0), true)],
            },
        );
        assert_eq!(m.check_timely(Micros(200 * S), true), Ok(()));
        assert_eq!(m.timely_checked, 0);
    }

    #[test]
    fn a_conditions_value_is_told_only_when_certain() {
        let cmp = |point: &str, v: f64| Condition::Compare {
            point: point.into(),
            op: CompareOp::Gt,
            value: CommandValue::Number(v),
        };
        let read = |point: &str| match point {
            "x" => Some(Read {
                value: Some(CanonicalValue::Num(5.0)),
                live: true,
            }),
            _ => Some(Read {
                value: None,
                live: false,
            }),
        };
        assert_eq!(told(&cmp("x", 1.0), &read), Some(true));
        assert_eq!(told(&cmp("y", 1.0), &read), None, "not usable: cannot be told");
        let both = Condition::All(vec![cmp("x", 9.0), cmp("y", 1.0)]);
        assert_eq!(told(&both, &read), Some(false), "false whatever y reads");
        let either = Condition::Any(vec![cmp("x", 1.0), cmp("y", 1.0)]);
        assert_eq!(told(&either, &read), Some(true));
        let not_live = Condition::Quality {
            point: "y".into(),
            equals: false,
            quality: QualityName::Live,
        };
        assert_eq!(
            told(&not_live, &read),
            None,
            "not certainly live: the watchdog's to time"
        );
        assert_eq!(told(&Condition::Not(Box::new(cmp("x", 1.0))), &read), Some(false));
    }
}
