//! The rules part: every rule of the registry, evaluated on committed, current data (issue 22
//! items 3, 4, 5, 7 and 8; core runtime spec, "Rules", "Drain behaves"; restart step 8).
//!
//! Owns: one slot per rule (its resolved inputs, its [`Machine`], whether it is in warmup or
//! held, its fight memory, what it has claimed), the inputs' last usable values (for
//! `hold_last_valid`), the time that counted towards warmup deadlines, and one wake per rule.
//!
//! When it evaluates (item 3): once at the end of each committed batch for the rules its
//! current RETURNING rows touched, on the projection as the whole batch left it (so a row that
//! a later row of the same batch contradicts decides nothing; a replayed row, `observed_at`
//! plus freshness not ahead of now, is recorded for gaps and `hold_last_valid` but decides
//! nothing); on a committed
//! `quality_changed` of an input; and on its own wakes (a `for_s` due, a warmup deadline, an
//! input's freshness or stand-in running out). While staleness is suppressed (startup grace,
//! no lag reading yet, lag high) every rule is frozen: nothing is evaluated, nothing claimed
//! or released, wakes wait, warmup deadlines do not count; when suppression ends, every rule
//! is evaluated on current data.
//!
//! Warmup (item 4): every rule starts in warmup and claims nothing until each input is usable
//! or its deadline passes; leaving writes `rule_warmup_ended`, then the rule is evaluated. A
//! claim restored at restart stays as it is until then.
//!
//! A rule's claim goes through the claims part: this part returns [`RuleRequest`]s and the
//! router hands them over (parts never call each other); a refusal comes back through
//! [`Rules::refused`] and is written as `rule_claim_refused`, never a panic. Each claim
//! carries its provenance (item 7). A rule whose claim would change more than its fight limit
//! allows is held (item 8): no more changes, `rule_held`, state -1, until the core restarts
//! (a registry version that changes a rule needs a restart: `registry/reload.rs`).
//!
//! Restart step 8 (item 5): the inputs' committed rows over each input's readers' longest
//! `for_s` plus one freshness are replayed in log order ([`Mode::Replay`]), so a condition
//! that began before the restart keeps its start instant; a gap in the log starts it again.
//! Replay never fires: a due `for_s` fires only after warmup, on current data.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::arbitration::{Band, Claim};
use crate::control::{CONTROL_EVENTS_PER_WRITE_MAX, ClaimProvenance, ControlDetail, ControlEvent, RuleNote};
use crate::derived::{WindowRequest, WindowRow};
use crate::effect::Effect;
use crate::log::{CanonicalValue, ObsKey, ObsRow, Quality};
use crate::planted::PlantedBug;
use crate::projection::Projection;
use crate::registry::health::{RuleStateCode, rule_state_point};
use crate::registry::rule::{RULE_INPUTS_MAX, RULES_MAX, Rule, RuleBand};
use crate::registry::{CommandValue, PointIdx, Registry};
use crate::rules::eval::{self, InputSpec, Reading, Resolved};
use crate::rules::state::{Fight, Gaps, Machine, Mode, Phase, Target};
use crate::time::Micros;

use super::context::{Ctx, Out};

/// A rule's holder name on the points it claims.
pub fn holder(rule_id: &str) -> String {
    format!("rule:{rule_id}")
}

/// What a rule asks of the claims part; the router hands it over and reports a refusal back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct RuleRequest {
    pub rule: usize,
    pub point: PointIdx,
    pub holder: Arc<str>,
    pub command_id: String,
    /// `Some`: set this claim; `None`: release the rule's claim.
    pub claim: Option<Claim>,
    pub provenance: Option<Box<ClaimProvenance>>,
}

#[derive(Debug)]
struct Slot {
    rule: Rule,
    id: Arc<str>,
    holder: Arc<str>,
    /// The point it claims.
    point: PointIdx,
    /// Its inputs, in the rule's order, with what the evaluator needs of each.
    inputs: Vec<(PointIdx, InputSpec)>,
    /// For each input, whether a value comparison reads it (then it must be current for a
    /// condition to pend or come due).
    compared: Vec<bool>,
    machine: Machine,
    gaps: Gaps,
    /// A gap seen while the rule could not evaluate: the condition starts again when it next
    /// evaluates.
    restart: bool,
    warmup: bool,
    held: bool,
    fight: Fight,
    /// What this rule holds on its point, as the claims part last accepted it.
    claimed: Option<CommandValue>,
    /// A target the claims part refused, not asked for again until the target changes.
    refused: Option<Target>,
    /// The wake in [`Rules::wakes`], if any.
    wake: Option<Micros>,
}

#[derive(Debug)]
pub(crate) struct Rules {
    slots: Vec<Slot>,
    /// For each input point, the slots reading it.
    readers: BTreeMap<PointIdx, Vec<usize>>,
    /// Each input point's last usable value and its `observed_at` (for `hold_last_valid`).
    last_valid: BTreeMap<PointIdx, (CanonicalValue, Micros)>,
    /// One wake per rule at most: `(at, slot)`.
    wakes: BTreeSet<(Micros, usize)>,
    suppressed: bool,
    /// Time not suppressed since the core started (warmup deadlines count only this), up to
    /// `counted_at`.
    counted_us: i64,
    counted_at: Micros,
    started_at: Micros,
    /// Claim changes asked, for their command ids (`rule-<epoch>-<n>`).
    changes: u64,
    /// The rules a committed batch's current rows touched, each with the newest such row's
    /// `observed_at`: evaluated once, at the batch's end ([`Self::on_batch_end`]), on the
    /// projection as the whole batch left it, so a row a later row of the same batch
    /// contradicts decides nothing. At most one entry per rule.
    touched: BTreeMap<usize, Micros>,
    /// Suppression ended during the batch: every rule is evaluated at its end.
    all_due: bool,
    /// Planted bug only ([`PlantedBug::RuleOnReplayedData`]): the replayed row decided on,
    /// read as its input's reading at its own `observed_at`; `None` otherwise.
    planted_row: Option<ObsRow>,
    /// Rules left out: an input or the claimed point not in the registry, or past
    /// [`RULES_MAX`] (admission refuses both; counted, never a panic).
    pub skipped: usize,
}

impl Rules {
    /// Every rule of `registry`, in warmup, its inputs' gaps seeded from the restored
    /// projection's newest rows. Suppressed until told otherwise (the watchdog starts so).
    pub fn new(registry: &Registry, projection: &Projection, now: Micros) -> Rules {
        let mut rules = Rules {
            slots: Vec::new(),
            readers: BTreeMap::new(),
            last_valid: BTreeMap::new(),
            wakes: BTreeSet::new(),
            suppressed: true,
            counted_us: 0,
            counted_at: now,
            started_at: now,
            changes: 0,
            touched: BTreeMap::new(),
            all_due: false,
            planted_row: None,
            skipped: 0,
        };
        for (point, compiled) in registry.points() {
            for rule in &compiled.descriptor.rules {
                if rules.slots.len() >= RULES_MAX {
                    rules.skipped += 1;
                    continue;
                }
                match slot(registry, projection, point, rule) {
                    Some(slot) => {
                        let idx = rules.slots.len();
                        for (input, _) in &slot.inputs {
                            rules.readers.entry(*input).or_default().push(idx);
                        }
                        rules.slots.push(slot);
                    }
                    None => rules.skipped += 1,
                }
            }
        }
        debug_assert!(rules.slots.len() <= RULES_MAX);
        rules
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// A rule's state, as its state self-point reports it.
    pub fn state(&self, rule_id: &str) -> Option<RuleStateCode> {
        self.slots.iter().find(|s| &*s.id == rule_id).map(code)
    }

    /// When a rule's pending condition comes due, if it is pending.
    pub fn due(&self, rule_id: &str) -> Option<Micros> {
        self.slots
            .iter()
            .find(|s| &*s.id == rule_id)
            .and_then(|s| s.machine.due())
    }

    /// Restart: the claims restored from `point_desired` that rules hold (`rule:<id>`). Each
    /// stays as it is during warmup; a claim of the rule's own value means it was firing.
    pub fn restore<'a>(&mut self, claims: impl IntoIterator<Item = (PointIdx, &'a Claim)>) -> usize {
        let mut restored = 0;
        for (point, claim) in claims {
            let Some(slot) = self
                .slots
                .iter_mut()
                .find(|s| s.point == point && s.holder == claim.holder)
            else {
                continue;
            };
            slot.claimed = Some(claim.value.clone());
            if claim.value == slot.rule.claim.value {
                slot.machine.phase = Phase::Firing;
            }
            restored += 1;
        }
        restored
    }

    /// Restart step 8, the question: each input's committed rows over its readers' longest
    /// `for_s` plus its freshness before `now`.
    pub fn window_requests(&self, registry: &Registry, now: Micros) -> Vec<WindowRequest> {
        self.readers
            .iter()
            .map(|(&point, readers)| {
                let descriptor = &registry.point(point).descriptor;
                let for_s = readers
                    .iter()
                    .map(|&i| self.slots[i].rule.for_s)
                    .max()
                    .unwrap_or(0);
                let back_ms = (i64::from(for_s) + i64::from(descriptor.freshness_s)) * 1_000;
                WindowRequest {
                    point_id: registry.point(point).id.clone(),
                    class: descriptor.retention,
                    since: now.add_ms(-back_ms),
                    rows_min: 0,
                }
            })
            .collect()
    }

    /// Restart step 8, the answer: `rows` replayed in the order the cores applied them, each
    /// at its own `observed_at` (the log's time), through every rule reading it. Pending
    /// conditions keep their start instants; nothing fires. Returns how many rows were
    /// replayed. A row carries its value whatever its point's kind (numbers, bools, codebook
    /// members), so a condition on any input keeps its start instant.
    pub fn replay(&mut self, registry: &Registry, mut rows: Vec<WindowRow>) -> usize {
        rows.sort_by(|a, b| {
            (
                a.applied.unwrap_or(i64::MIN),
                a.observed_at,
                a.ingested_at,
                &a.key,
            )
                .cmp(&(
                    b.applied.unwrap_or(i64::MIN),
                    b.observed_at,
                    b.ingested_at,
                    &b.key,
                ))
        });
        let mut readings: BTreeMap<PointIdx, Reading> = BTreeMap::new();
        let mut replayed = 0;
        for row in rows {
            let Some(point) = registry.resolve(&row.point_id) else {
                continue;
            };
            let Some(readers) = self.readers.get(&point) else {
                continue;
            };
            replayed += 1;
            let reading = readings.entry(point).or_insert_with(Reading::unknown);
            if reading.observed_at.is_some_and(|o| o > row.observed_at) {
                continue; // a late row does not move the head
            }
            let value = row.canonical();
            if row.quality == Quality::Live
                && let Some(v) = &value
            {
                reading.last_valid = Some((v.clone(), row.observed_at));
                self.last_valid.insert(point, (v.clone(), row.observed_at));
            }
            reading.value = value.or(reading.value.take());
            reading.quality = row.quality;
            reading.observed_at = Some(row.observed_at);
            for &i in readers {
                let slot = &mut self.slots[i];
                let input = slot.inputs.iter().position(|(p, _)| *p == point).unwrap_or(0);
                if slot.gaps.row(input, row.observed_at, slot.inputs[input].1.gap_us) {
                    slot.machine.gap();
                }
                let read = |id: &str| {
                    let p = registry.resolve(id)?;
                    let spec = &slot.inputs.iter().find(|(q, _)| *q == p)?.1;
                    Some((spec, readings.get(&p)?))
                };
                let when = eval::evaluate(&slot.rule.when, &read, row.observed_at);
                let until = slot
                    .rule
                    .until
                    .as_ref()
                    .map(|c| eval::evaluate(c, &read, row.observed_at));
                let current = slot
                    .inputs
                    .iter()
                    .zip(&slot.compared)
                    .all(|((p, spec), &compared)| {
                        !compared
                            || readings
                                .get(p)
                                .is_some_and(|r| eval::usable(spec, r, row.observed_at))
                    });
                slot.machine.evaluate(
                    when,
                    until,
                    current,
                    row.observed_at,
                    row.observed_at,
                    Mode::Replay,
                );
            }
        }
        replayed
    }

    /// The suppression now, from the watchdog: time counts towards warmup deadlines only while
    /// not suppressed. Returns whether suppression just ended.
    fn set_suppressed(&mut self, suppressed: bool, ctx: &Ctx) -> bool {
        let now = ctx.now;
        if !self.suppressed || ctx.planted(PlantedBug::WarmupIgnoresSuppression) {
            self.counted_us = self
                .counted_us
                .saturating_add(now.saturating_sub(self.counted_at).max(0));
        }
        self.counted_at = now;
        let ended = self.suppressed && !suppressed;
        self.suppressed = suppressed;
        ended
    }

    /// One RETURNING row, after the projection applied it: recorded for every rule reading
    /// its point (gaps, the last usable value), and, when it is current and nothing is
    /// suppressed, every such rule is evaluated with the row's `observed_at` as the instant a
    /// pending would start from.
    pub fn on_row(
        &mut self,
        row: &ObsRow,
        suppressed: bool,
        projection: &Projection,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Vec<RuleRequest> {
        let Some(readers) = self.readers.get(&row.point) else {
            return Vec::new();
        };
        let readers = readers.clone();
        if row.quality == Quality::Live
            && let Some(value) = &row.value
            && self
                .last_valid
                .get(&row.point)
                .is_none_or(|(_, at)| *at <= row.observed_at)
        {
            self.last_valid
                .insert(row.point, (value.clone(), row.observed_at));
        }
        for &i in &readers {
            let slot = &mut self.slots[i];
            let input = slot.inputs.iter().position(|(p, _)| *p == row.point).unwrap_or(0);
            if slot.gaps.row(input, row.observed_at, slot.inputs[input].1.gap_us) {
                slot.restart = true;
            }
        }
        let ended = self.set_suppressed(suppressed, ctx);
        if suppressed {
            self.touched.clear();
            self.all_due = false;
            return Vec::new();
        }
        if ended {
            self.all_due = true;
            return Vec::new();
        }
        let freshness_us = self.slots[readers[0]]
            .inputs
            .iter()
            .find(|(p, _)| *p == row.point)
            .map_or(0, |(_, s)| s.freshness_us);
        if row.observed_at.0.saturating_add(freshness_us) <= ctx.now.0 {
            if !ctx.planted(PlantedBug::RuleOnReplayedData) {
                return Vec::new(); // replayed backlog: recorded, never decided on
            }
            // Planted: the replayed row decided on at once, as if it were now its `observed_at`.
            self.planted_row = Some(row.clone());
            let at = row.observed_at;
            let requests = self.evaluate_each(readers.into_iter().map(|i| (i, at)), projection, ctx, out);
            self.planted_row = None;
            return requests;
        }
        for i in readers {
            let at = self.touched.entry(i).or_insert(row.observed_at);
            *at = (*at).max(row.observed_at);
        }
        debug_assert!(self.touched.len() <= self.slots.len());
        Vec::new()
    }

    /// The end of a committed batch: every rule its current rows touched is evaluated once, on
    /// the projection as the batch left it, a pending condition starting from the newest such
    /// row's `observed_at` (never earlier than a row that made it true); or every rule, when
    /// suppression ended during the batch.
    pub fn on_batch_end(&mut self, projection: &Projection, ctx: &Ctx, out: &mut Out) -> Vec<RuleRequest> {
        let touched = std::mem::take(&mut self.touched);
        if std::mem::take(&mut self.all_due) {
            return self.evaluate_all(projection, ctx, out);
        }
        if self.suppressed || touched.is_empty() {
            return Vec::new();
        }
        self.evaluate_each(touched, projection, ctx, out)
    }

    /// A committed `quality_changed` of `point`: every rule reading it is evaluated.
    pub fn on_quality(
        &mut self,
        point: PointIdx,
        suppressed: bool,
        projection: &Projection,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Vec<RuleRequest> {
        if let Some(thawed) = self.thaw(suppressed, projection, ctx, out) {
            return thawed;
        }
        let Some(readers) = self.readers.get(&point).cloned() else {
            return Vec::new();
        };
        let now = ctx.now;
        self.evaluate_each(readers.into_iter().map(|i| (i, now)), projection, ctx, out)
    }

    /// Time passed: when suppression just ended, every rule; otherwise the rules whose wake
    /// is due.
    pub fn on_tick(
        &mut self,
        suppressed: bool,
        projection: &Projection,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Vec<RuleRequest> {
        if let Some(thawed) = self.thaw(suppressed, projection, ctx, out) {
            return thawed;
        }
        let mut requests = Vec::new();
        let mut events = Vec::new();
        // Each rule's wake is rescheduled past now (or dropped) when it is evaluated, so one
        // pass over the rules is the most a tick can take.
        for _ in 0..self.slots.len() {
            let Some(&(at, i)) = self.wakes.first() else {
                break;
            };
            if at > ctx.now {
                break;
            }
            self.wakes.pop_first();
            self.slots[i].wake = None;
            self.evaluate(i, ctx.now, projection, ctx, &mut events, &mut requests);
            debug_assert!(
                self.slots[i].wake.is_none_or(|w| w > ctx.now),
                "a rule evaluated now wakes later, never now again"
            );
        }
        self.emit(events, ctx, out);
        requests
    }

    /// The earliest wake, while not suppressed (frozen rules wait).
    pub fn next_deadline(&self) -> Option<Micros> {
        if self.suppressed {
            return None;
        }
        self.wakes.first().map(|&(at, _)| at)
    }

    fn evaluate_all(&mut self, projection: &Projection, ctx: &Ctx, out: &mut Out) -> Vec<RuleRequest> {
        let now = ctx.now;
        self.evaluate_each((0..self.slots.len()).map(|i| (i, now)), projection, ctx, out)
    }

    /// Each `(rule, instant)` evaluated in turn, their events written in one go.
    fn evaluate_each(
        &mut self,
        rules: impl IntoIterator<Item = (usize, Micros)>,
        projection: &Projection,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Vec<RuleRequest> {
        let mut requests = Vec::new();
        let mut events = Vec::new();
        for (i, at) in rules {
            self.evaluate(i, at, projection, ctx, &mut events, &mut requests);
        }
        self.emit(events, ctx, out);
        requests
    }

    /// The suppression prologue of a quality change and a tick: frozen, nothing (`Some` of
    /// none); suppression just ended, every rule; otherwise `None`, and the caller goes on.
    fn thaw(
        &mut self,
        suppressed: bool,
        projection: &Projection,
        ctx: &Ctx,
        out: &mut Out,
    ) -> Option<Vec<RuleRequest>> {
        let ended = self.set_suppressed(suppressed, ctx);
        if suppressed {
            Some(Vec::new())
        } else if ended {
            Some(self.evaluate_all(projection, ctx, out))
        } else {
            None
        }
    }

    /// One rule, evaluated now (not suppressed): warmup first, then the condition, then the
    /// claim its state wants; then its next wake.
    fn evaluate(
        &mut self,
        i: usize,
        at: Micros,
        projection: &Projection,
        ctx: &Ctx,
        events: &mut Vec<ControlEvent>,
        requests: &mut Vec<RuleRequest>,
    ) {
        debug_assert!(!self.suppressed, "frozen rules are not evaluated");
        // Only a planted bug evaluates at another time than the core's.
        let planted_row = self.planted_row.as_ref();
        let now = planted_row.map_or(ctx.now, |r| r.observed_at);
        let counted_us = self.counted_us;
        let started_at = self.started_at;
        let last_valid = &self.last_valid;
        let slot = &mut self.slots[i];
        if slot.held {
            return;
        }
        let reading_of = |point: PointIdx| {
            let state = projection.state(point);
            Reading {
                value: state.value.clone(),
                quality: state.quality,
                observed_at: state.observed_at,
                last_valid: last_valid.get(&point).cloned(),
            }
        };
        let mut readings: Vec<Reading> = slot.inputs.iter().map(|(p, _)| reading_of(*p)).collect();
        if let Some(row) = planted_row
            && let Some(k) = slot.inputs.iter().position(|(p, _)| *p == row.point)
        {
            readings[k] = Reading {
                value: row.value.clone(),
                quality: row.quality,
                observed_at: Some(row.observed_at),
                last_valid: None,
            };
        }
        if slot.warmup {
            let all_usable = slot
                .inputs
                .iter()
                .zip(&readings)
                .all(|((_, spec), r)| eval::usable(spec, r, now));
            let deadline_us = i64::from(slot.rule.warmup_deadline_s) * 1_000_000;
            let reason = if all_usable {
                "inputs_live"
            } else if counted_us >= deadline_us {
                "deadline"
            } else {
                let wake = Micros(now.0.saturating_add(deadline_us - counted_us));
                let wake = slot
                    .inputs
                    .iter()
                    .zip(&readings)
                    .filter(|((_, spec), r)| eval::usable(spec, r, now))
                    .filter_map(|((_, spec), r)| eval::usable_until(spec, r))
                    .fold(wake, Micros::min);
                reschedule(&mut self.wakes, i, slot, Some(wake));
                return;
            };
            slot.warmup = false;
            events.push(rule_event(
                slot,
                ctx,
                RuleNote::WarmupEnded {
                    reason,
                    waited_ms: u64::try_from(now.saturating_sub(started_at) / 1_000).unwrap_or(0),
                    counted_ms: u64::try_from(counted_us / 1_000).unwrap_or(0),
                },
            ));
        }
        if std::mem::take(&mut slot.restart) {
            slot.machine.gap();
        }
        let registry = &ctx.registry;
        let read = |id: &str| {
            let p = registry.resolve(id)?;
            let k = slot.inputs.iter().position(|(q, _)| *q == p)?;
            Some((&slot.inputs[k].1, &readings[k]))
        };
        let when = eval::evaluate(&slot.rule.when, &read, now);
        let until = slot.rule.until.as_ref().map(|c| eval::evaluate(c, &read, now));
        let current = slot
            .inputs
            .iter()
            .zip(&readings)
            .zip(&slot.compared)
            .all(|(((_, spec), r), &compared)| !compared || eval::usable(spec, r, now));
        slot.machine.evaluate(when, until, current, at, now, Mode::Live);
        let target = slot.machine.target(&slot.rule);
        let rows: Vec<(Arc<str>, ObsKey)> = slot
            .inputs
            .iter()
            .filter_map(|(p, _)| {
                let state = projection.state(*p);
                match planted_row {
                    Some(row) if row.point == *p => Some((state.point_id.clone(), row.key.clone())),
                    _ => Some((state.point_id.clone(), state.key.clone()?)),
                }
            })
            .collect();
        self.changes += change(slot, i, target, rows, self.changes, ctx, events, requests);
        // The next wake: a due `for_s`, an input's freshness or stand-in running out.
        let mut wake = slot
            .machine
            .due()
            .filter(|_| !ctx.planted(PlantedBug::ForSWithoutWake));
        for ((_, spec), r) in slot.inputs.iter().zip(&readings) {
            let until = match eval::resolve(spec, r, now) {
                Resolved::Usable(_) => eval::usable_until(spec, r),
                Resolved::StandIn { until, .. } => Some(until),
                Resolved::Lost => None,
            };
            wake = match (wake, until) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        reschedule(&mut self.wakes, i, slot, wake);
    }

    /// The rules' own events, written in bounded writes.
    fn emit(&mut self, events: Vec<ControlEvent>, ctx: &Ctx, out: &mut Out) {
        let _ = self;
        out.metrics.control_events += events.len() as u64;
        out.metrics.rule_claims[3] += events
            .iter()
            .filter(|e| {
                matches!(
                    e.detail,
                    ControlDetail::Rule {
                        note: RuleNote::Held { .. },
                        ..
                    }
                )
            })
            .count() as u64;
        let mut events = events.into_iter().peekable();
        while events.peek().is_some() {
            out.push(Effect::Control {
                epoch: ctx.epoch,
                events: events.by_ref().take(CONTROL_EVENTS_PER_WRITE_MAX).collect(),
            });
        }
    }

    /// The claims part carried out `request` (`Ok`) or refused it with `reason`: a refusal is
    /// written as `rule_claim_refused`, the rule's claim stays as it was, and the same target
    /// is not asked for again until it changes.
    pub fn answered(&mut self, request: &RuleRequest, answer: Result<(), String>, ctx: &Ctx, out: &mut Out) {
        debug_assert!(
            request.rule < self.slots.len(),
            "an answer to a request this part made"
        );
        let slot = &mut self.slots[request.rule];
        debug_assert_eq!(slot.point, request.point, "answered for the point it claims");
        match answer {
            Ok(()) => {
                let outcome = if request.claim.is_some() { 0 } else { 1 };
                out.metrics.rule_claims[outcome] += 1;
                slot.claimed = request.claim.as_ref().map(|c| c.value.clone());
                slot.refused = None;
            }
            Err(reason) => {
                out.metrics.rule_claims[2] += 1;
                slot.refused = Some(
                    request
                        .claim
                        .as_ref()
                        .map_or(Target::Release, |c| Target::Claim(c.value.clone())),
                );
                if request.claim.is_none() {
                    // It holds nothing there: nothing to release.
                    slot.claimed = None;
                }
                let event = rule_event(
                    slot,
                    ctx,
                    RuleNote::ClaimRefused {
                        reason,
                        value: request.claim.as_ref().map(|c| c.value.clone()),
                    },
                );
                self.emit(vec![event], ctx, out);
            }
        }
    }

    /// The state self-points' readings, for the registry's `sentinel.rule.<id>.state` points
    /// (none for a rule whose point the registry does not declare).
    pub fn readings(&self, registry: &Registry) -> Vec<(PointIdx, f64)> {
        self.slots
            .iter()
            .filter_map(|slot| Some((registry.resolve(&rule_state_point(&slot.id))?, code(slot).code())))
            .collect()
    }

    /// The `sentinel_rules{state}` gauge, in `RULE_STATES` order (`crate::metrics`).
    pub fn gauge(&self, metrics: &mut crate::metrics::Metrics) {
        let mut counts = [0u64; crate::metrics::RULE_STATES.len()];
        for slot in &self.slots {
            counts[code(slot).index()] += 1;
        }
        metrics.rules = counts;
    }
}

/// A rule resolved against the registry; `None` when an input or its point is not there, or
/// it names more inputs than [`RULE_INPUTS_MAX`].
fn slot(registry: &Registry, projection: &Projection, point: PointIdx, rule: &Rule) -> Option<Slot> {
    if rule.inputs.is_empty() || rule.inputs.len() > RULE_INPUTS_MAX {
        return None;
    }
    let claimed = registry.resolve(&rule.point)?;
    debug_assert_eq!(
        claimed, point,
        "a rule lives in the descriptor of the point it claims"
    );
    let mut inputs = Vec::with_capacity(rule.inputs.len());
    for id in &rule.inputs {
        let idx = registry.resolve(id)?;
        let d = &registry.point(idx).descriptor;
        let freshness_us = i64::from(d.freshness_s) * 1_000_000;
        let gap_s = d.manifest.heartbeat_s.unwrap_or(d.freshness_s).min(d.freshness_s);
        inputs.push((
            idx,
            InputSpec {
                freshness_us,
                gap_us: i64::from(gap_s) * 1_000_000,
                missing: d.missing_data,
            },
        ));
    }
    let named: Vec<&str> = eval::compared_points(&rule.when)
        .into_iter()
        .chain(rule.until.iter().flat_map(eval::compared_points))
        .collect();
    let compared = rule
        .inputs
        .iter()
        .map(|id| named.contains(&id.as_str()))
        .collect();
    let mut gaps = Gaps::new(inputs.len());
    for (k, (idx, _)) in inputs.iter().enumerate() {
        gaps.seed(k, projection.state(*idx).observed_at);
    }
    Some(Slot {
        id: rule.id.as_str().into(),
        holder: holder(&rule.id).into(),
        point: claimed,
        machine: Machine::new(rule),
        gaps,
        restart: false,
        warmup: true,
        held: false,
        fight: Fight::default(),
        claimed: None,
        refused: None,
        wake: None,
        inputs,
        compared,
        rule: rule.clone(),
    })
}

fn code(slot: &Slot) -> RuleStateCode {
    if slot.held {
        RuleStateCode::Held
    } else if slot.warmup {
        RuleStateCode::Warmup
    } else if slot.machine.lost {
        RuleStateCode::InputLost
    } else {
        match slot.machine.phase {
            Phase::Idle => RuleStateCode::Idle,
            Phase::Pending { .. } => RuleStateCode::Pending,
            Phase::Firing => RuleStateCode::Firing,
        }
    }
}

fn band(band: RuleBand) -> Band {
    match band {
        RuleBand::Automation => Band::Automation,
        RuleBand::Safety => Band::Safety,
        RuleBand::Interlock => Band::Interlock,
    }
}

fn reschedule(wakes: &mut BTreeSet<(Micros, usize)>, i: usize, slot: &mut Slot, wake: Option<Micros>) {
    if let Some(old) = slot.wake.take() {
        wakes.remove(&(old, i));
    }
    if let Some(at) = wake {
        wakes.insert((at, i));
        slot.wake = Some(at);
    }
    debug_assert!(wakes.len() <= RULES_MAX, "one wake per rule at most");
}

fn rule_event(slot: &Slot, ctx: &Ctx, note: RuleNote) -> ControlEvent {
    ControlEvent {
        occurred_at: ctx.now,
        point: Some(slot.point),
        point_id: ctx.registry.point(slot.point).id.clone(),
        principal: slot.holder.clone(),
        core_epoch: ctx.epoch,
        registry_version: ctx.registry.version,
        detail: ControlDetail::Rule {
            rule: slot.id.clone(),
            note,
        },
    }
}

/// The claim change `target` asks of a rule in its current state, if any: nothing when it
/// holds that already, when the same was refused, or when the fight limit holds the rule
/// (then `rule_held`). Returns how many requests it made (0 or 1).
#[expect(
    clippy::too_many_arguments,
    reason = "one rule's slot and index, what it wants, its inputs' rows, and the outputs"
)]
fn change(
    slot: &mut Slot,
    i: usize,
    target: Target,
    rows: Vec<(Arc<str>, ObsKey)>,
    changes: u64,
    ctx: &Ctx,
    events: &mut Vec<ControlEvent>,
    requests: &mut Vec<RuleRequest>,
) -> u64 {
    let holds = match &target {
        Target::Keep => return 0,
        Target::Release => slot.claimed.is_none(),
        Target::Claim(v) => slot.claimed.as_ref() == Some(v),
    };
    if holds {
        // What it wants is what it has: a refusal of something else is forgotten.
        slot.refused = None;
        return 0;
    }
    let wanted = match &target {
        Target::Claim(v) => Some(v.clone()),
        _ => None,
    };
    if slot.refused.as_ref() == Some(&target) {
        return 0;
    }
    if let Some(limit) = slot.rule.fight
        && !slot.fight.allow(ctx.now, limit.changes_max, limit.window_s)
    {
        slot.held = true;
        events.push(rule_event(
            slot,
            ctx,
            RuleNote::Held {
                changes: slot.fight.count() + 1,
                changes_max: limit.changes_max,
                window_s: limit.window_s,
            },
        ));
        return 0;
    }
    let command_id = format!("rule-{}-{}", ctx.epoch, changes + 1);
    let claim = wanted.map(|value| Claim {
        holder: slot.holder.clone(),
        band: band(slot.rule.claim.band),
        priority: slot.rule.claim.priority,
        value,
        since: ctx.now,
        until: None,
    });
    let provenance = claim.as_ref().map(|_| {
        Box::new(ClaimProvenance {
            rule: slot.id.clone(),
            registry_version: ctx.registry.version,
            rows,
        })
    });
    requests.push(RuleRequest {
        rule: i,
        point: slot.point,
        holder: slot.holder.clone(),
        command_id,
        claim,
        provenance,
    });
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::ObsRow;
    use crate::parts::context::testing::{T0, ctx, drain, row};
    use crate::registry::rule::{CompareOp, Condition, FightLimit, MissingData, RuleClaim, RuleFallback};
    use crate::registry::{Descriptor, Kind, RetentionClass, Writable};
    use crate::state::RestoredState;

    /// The fixture's context with `plant.temp` writable and claimed by `rule` (which reads
    /// `plant.flow`), `plant.flow` declaring `missing`, and, with `state_point`, the rule's
    /// state self-point declared.
    fn rules_ctx(rule: Rule, missing: Option<MissingData>, declared: bool) -> Ctx {
        let mut ctx = ctx();
        let mut descriptors: Vec<_> = ctx
            .registry
            .points()
            .map(|(_, p)| {
                let mut d = p.descriptor.clone();
                if d.id == "plant.temp" {
                    d.writable = Some(Writable {
                        relinquish_default: Some(CommandValue::Number(20.0)),
                        verify_s: 60,
                        tolerance: 0.5,
                        min_on_s: None,
                        min_off_s: None,
                    });
                    d.rules = vec![rule.clone()];
                }
                if d.id == "plant.flow" {
                    d.missing_data = missing;
                }
                d
            })
            .collect();
        if declared {
            descriptors.push(Descriptor::new(
                &rule_state_point(&rule.id),
                Kind::Number,
                RetentionClass::Diagnostic,
                crate::registry::SELF_HOST,
                crate::registry::SELF_INSTANCE,
            ));
        }
        ctx.registry =
            Arc::new(Registry::compile(3, "sha".into(), "hash".into(), descriptors).expect("compiles"));
        ctx
    }

    /// `heat`: claims 30 on `plant.temp` at once while `plant.flow < 5`; releases otherwise.
    fn heat(fight: Option<FightLimit>, on_input_loss: RuleFallback) -> Rule {
        Rule {
            id: "heat".into(),
            inputs: vec!["plant.flow".into()],
            when: Condition::Compare {
                point: "plant.flow".into(),
                op: CompareOp::Lt,
                value: CommandValue::Number(5.0),
            },
            until: None,
            for_s: 0,
            point: "plant.temp".into(),
            claim: RuleClaim {
                band: RuleBand::Automation,
                priority: 3,
                value: CommandValue::Number(30.0),
            },
            otherwise: RuleFallback::Release,
            on_input_loss,
            warmup_deadline_s: 60,
            fight,
        }
    }

    struct Fixture {
        ctx: Ctx,
        projection: Projection,
        rules: Rules,
        out: Out,
    }

    impl Fixture {
        fn new(rule: Rule, missing: Option<MissingData>) -> Fixture {
            let ctx = rules_ctx(rule, missing, false);
            let projection = Projection::restore(&ctx.registry, &RestoredState::default(), &ctx.config, T0);
            let rules = Rules::new(&ctx.registry, &projection, T0);
            Fixture {
                ctx,
                projection,
                rules,
                out: Out::default(),
            }
        }

        /// `plant.flow` reads `value`, observed at `observed`, committed at `now`.
        fn flow(
            &mut self,
            seq: u64,
            value: f64,
            observed: Micros,
            now: Micros,
            suppressed: bool,
        ) -> Vec<RuleRequest> {
            self.ctx.now = now;
            let row: ObsRow = row(&self.ctx, "plant.flow", seq, value, observed);
            self.projection.apply(&row, self.ctx.epoch, now);
            let mut requests =
                self.rules
                    .on_row(&row, suppressed, &self.projection, &self.ctx, &mut self.out);
            requests.extend(
                self.rules
                    .on_batch_end(&self.projection, &self.ctx, &mut self.out),
            );
            requests
        }

        fn tick(&mut self, now: Micros, suppressed: bool) -> Vec<RuleRequest> {
            self.ctx.now = now;
            self.rules
                .on_tick(suppressed, &self.projection, &self.ctx, &mut self.out)
        }

        /// Every request carried out by the claims part.
        fn accept(&mut self, requests: &[RuleRequest]) {
            for request in requests {
                self.rules.answered(request, Ok(()), &self.ctx, &mut self.out);
            }
        }

        fn events(&mut self) -> Vec<String> {
            drain(&mut self.out)
                .iter()
                .filter_map(|e| match e {
                    Effect::Control { events, .. } => Some(events.clone()),
                    _ => None,
                })
                .flatten()
                .map(|e| format!("{} {}", e.kind().as_str(), e.payload_json()))
                .collect()
        }
    }

    fn values(requests: &[RuleRequest]) -> Vec<Option<CommandValue>> {
        requests
            .iter()
            .map(|r| r.claim.as_ref().map(|c| c.value.clone()))
            .collect()
    }

    #[test]
    fn the_gauge_labels_and_the_state_point_codes_are_one_list() {
        for (i, state) in RuleStateCode::ALL.into_iter().enumerate() {
            assert_eq!(state.index(), i);
            assert_eq!(crate::metrics::RULE_STATES[i], state.label());
        }
    }

    #[test]
    fn only_current_rows_decide_and_warmup_ends_once_the_inputs_are_live() {
        let mut f = Fixture::new(heat(None, RuleFallback::Release), None);
        assert!(f.tick(T0, false).is_empty(), "in warmup: its input is unknown");
        // A replayed row that would trigger it: recorded, not decided on.
        let old = T0.add_ms(-3_600_000);
        assert!(f.flow(1, 1.0, old, T0.add_ms(1_000), false).is_empty());
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Warmup));
        assert!(f.events().is_empty());
        // Current: warmup ends (its input live), and it claims at once with provenance.
        let requests = f.flow(2, 1.0, T0.add_ms(1_500), T0.add_ms(2_000), false);
        let events = f.events();
        assert_eq!(events.len(), 1);
        assert!(
            events[0].starts_with("rule_warmup_ended") && events[0].contains(r#""reason":"inputs_live""#),
            "{events:?}"
        );
        let [request] = &requests[..] else {
            panic!("one claim: {requests:?}");
        };
        let claim = request.claim.as_ref().expect("a claim");
        assert_eq!(
            (
                &*claim.holder,
                claim.band,
                claim.priority,
                &claim.value,
                claim.until
            ),
            (
                "rule:heat",
                Band::Automation,
                3,
                &CommandValue::Number(30.0),
                None
            )
        );
        let provenance = request.provenance.as_ref().expect("provenance");
        assert_eq!(&*provenance.rule, "heat");
        assert_eq!(provenance.registry_version, 3);
        assert_eq!(provenance.rows.len(), 1);
        assert_eq!(
            (&*provenance.rows[0].0, provenance.rows[0].1.source_seq),
            ("plant.flow", 2)
        );
        f.accept(&requests);
        // Firing. A backlog row newer than the head but not current (a driver's replayed
        // queue) that says otherwise decides nothing.
        assert!(
            f.flow(3, 10.0, T0.add_ms(1_600), T0.add_ms(120_000), false)
                .is_empty()
        );
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Firing));
    }

    #[test]
    fn a_row_a_later_row_of_the_same_batch_contradicts_decides_nothing() {
        let mut f = Fixture::new(heat(None, RuleFallback::Release), None);
        f.tick(T0, false);
        f.flow(1, 10.0, T0, T0.add_ms(500), false);
        f.events();
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Idle));
        // One committed batch of two current rows: the older says `flow < 5`, the newer does
        // not. Evaluated row by row the rule would claim and release in the same instant.
        f.ctx.now = T0.add_ms(3_000);
        let mut requests = Vec::new();
        for (seq, value, observed_ms) in [(2, 1.0, 1_000), (3, 9.0, 2_000)] {
            let row: ObsRow = row(&f.ctx, "plant.flow", seq, value, T0.add_ms(observed_ms));
            f.projection.apply(&row, f.ctx.epoch, f.ctx.now);
            requests.extend(f.rules.on_row(&row, false, &f.projection, &f.ctx, &mut f.out));
        }
        assert!(requests.is_empty(), "rows only record: {requests:?}");
        let requests = f.rules.on_batch_end(&f.projection, &f.ctx, &mut f.out);
        assert!(
            requests.is_empty(),
            "the batch left flow at 9: nothing to claim, {requests:?}"
        );
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Idle));
        // A batch whose newest row makes it true claims once, naming that row.
        f.ctx.now = T0.add_ms(5_000);
        for (seq, value, observed_ms) in [(4, 9.5, 3_500), (5, 2.0, 4_500)] {
            let row: ObsRow = row(&f.ctx, "plant.flow", seq, value, T0.add_ms(observed_ms));
            f.projection.apply(&row, f.ctx.epoch, f.ctx.now);
            f.rules.on_row(&row, false, &f.projection, &f.ctx, &mut f.out);
        }
        let requests = f.rules.on_batch_end(&f.projection, &f.ctx, &mut f.out);
        let [request] = &requests[..] else {
            panic!("one claim: {requests:?}");
        };
        let provenance = request.provenance.as_ref().expect("provenance");
        assert_eq!(provenance.rows[0].1.source_seq, 5);
    }

    #[test]
    fn rules_are_frozen_while_suppressed_and_evaluated_when_it_ends() {
        let mut f = Fixture::new(heat(None, RuleFallback::Release), None);
        f.tick(T0, false);
        f.flow(1, 10.0, T0, T0, false);
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Idle));
        // Lag high: a current row that triggers it decides nothing, and no wake is asked.
        assert!(
            f.flow(2, 1.0, T0.add_ms(1_000), T0.add_ms(1_000), true)
                .is_empty()
        );
        assert_eq!(f.rules.next_deadline(), None);
        assert!(f.tick(T0.add_ms(2_000), true).is_empty());
        // Lag low: every rule is evaluated on current data.
        assert_eq!(
            values(&f.tick(T0.add_ms(3_000), false)),
            [Some(CommandValue::Number(30.0))]
        );
    }

    #[test]
    fn the_warmup_deadline_counts_only_time_not_suppressed() {
        let mut f = Fixture::new(heat(None, RuleFallback::Release), None);
        f.tick(T0, false);
        f.tick(T0.add_ms(30_000), true);
        // 30 s counted, then 10 minutes suppressed: not past its 60 s.
        f.tick(T0.add_ms(630_000), false);
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Warmup));
        assert_eq!(f.rules.next_deadline(), Some(T0.add_ms(660_000)));
        f.tick(T0.add_ms(659_999), false);
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Warmup));
        f.tick(T0.add_ms(660_000), false);
        let events = f.events();
        assert!(
            events.len() == 1
                && events[0].contains(r#""reason":"deadline""#)
                && events[0].contains(r#""counted_ms":60000"#),
            "{events:?}"
        );
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::InputLost));
    }

    #[test]
    fn a_refused_claim_is_on_the_record_and_not_asked_again() {
        let mut f = Fixture::new(heat(None, RuleFallback::Release), None);
        f.tick(T0, false);
        let requests = f.flow(1, 1.0, T0, T0, false);
        f.events();
        f.rules.answered(
            &requests[0],
            Err("refused, in one line".into()),
            &f.ctx,
            &mut f.out,
        );
        let events = f.events();
        assert!(
            events.len() == 1
                && events[0].starts_with("rule_claim_refused")
                && events[0].contains("in one line"),
            "{events:?}"
        );
        assert_eq!(f.out.metrics.rule_claims, [0, 0, 1, 0]);
        assert!(
            f.flow(2, 2.0, T0.add_ms(1_000), T0.add_ms(1_000), false)
                .is_empty()
        );
        // Its target changes (released, which it holds nothing to), then back: asked again.
        assert!(
            f.flow(3, 9.0, T0.add_ms(2_000), T0.add_ms(2_000), false)
                .is_empty()
        );
        assert_eq!(f.flow(4, 1.0, T0.add_ms(3_000), T0.add_ms(3_000), false).len(), 1);
    }

    #[test]
    fn a_rule_that_fights_is_held_in_its_last_state() {
        let fight = FightLimit {
            changes_max: 3,
            window_s: 60,
        };
        let mut f = Fixture::new(heat(Some(fight), RuleFallback::Release), None);
        f.tick(T0, false);
        let mut made = Vec::new();
        for (i, value) in [1.0, 9.0, 1.0, 9.0, 1.0].into_iter().enumerate() {
            let at = T0.add_ms(i as i64 * 1_000);
            let requests = f.flow(i as u64 + 1, value, at, at, false);
            f.accept(&requests);
            made.extend(values(&requests));
        }
        assert_eq!(
            made,
            [
                Some(CommandValue::Number(30.0)),
                None,
                Some(CommandValue::Number(30.0))
            ],
            "three changes, then held"
        );
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Held));
        let events = f.events();
        let held: Vec<_> = events.iter().filter(|e| e.starts_with("rule_held")).collect();
        assert_eq!(held.len(), 1, "{events:?}");
        assert!(held[0].contains(r#""changes":4"#) && held[0].contains(r#""changes_max":3"#));
        assert_eq!(f.out.metrics.rule_claims, [2, 1, 0, 1]);
        // Held: long after the window, nothing more.
        assert!(
            f.flow(9, 9.0, T0.add_ms(600_000), T0.add_ms(600_000), false)
                .is_empty()
        );
    }

    #[test]
    fn hold_last_valid_stands_in_then_on_input_loss_claims_the_safe_value() {
        let safe = RuleFallback::Value(CommandValue::Number(15.0));
        let missing = Some(MissingData::HoldLastValid { max_staleness_s: 120 });
        let mut f = Fixture::new(heat(None, safe), missing);
        f.tick(T0, false);
        let requests = f.flow(1, 1.0, T0, T0, false);
        f.accept(&requests);
        // Its freshness (60 s) runs out: the last valid value stands in.
        assert_eq!(f.rules.next_deadline(), Some(T0.add_ms(60_000)));
        assert!(f.tick(T0.add_ms(60_000), false).is_empty());
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Firing));
        // Its maximum staleness runs out: lost, and the safe value is claimed.
        assert_eq!(f.rules.next_deadline(), Some(T0.add_ms(120_000)));
        assert_eq!(
            values(&f.tick(T0.add_ms(120_000), false)),
            [Some(CommandValue::Number(15.0))]
        );
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::InputLost));
    }

    #[test]
    fn a_claim_restored_at_restart_stays_through_warmup() {
        let mut f = Fixture::new(heat(None, RuleFallback::Release), None);
        let temp = f.ctx.registry.resolve("plant.temp").expect("fixture");
        let claim = Claim {
            holder: "rule:heat".into(),
            band: Band::Automation,
            priority: 3,
            value: CommandValue::Number(30.0),
            since: T0.add_ms(-60_000),
            until: None,
        };
        assert_eq!(f.rules.restore([(temp, &claim)]), 1);
        // In warmup (its input not live): nothing released, though its input says otherwise.
        assert!(f.flow(1, 10.0, T0.add_ms(-120_000), T0, false).is_empty());
        assert!(f.tick(T0.add_ms(1_000), false).is_empty());
        // Live again: the rule decides, and releases.
        assert_eq!(
            values(&f.flow(2, 10.0, T0.add_ms(2_000), T0.add_ms(2_000), false)),
            [None]
        );
        // With hysteresis (off above 8), a restored claim is a firing rule: between the
        // thresholds it keeps its claim.
        let rule = Rule {
            until: Some(Condition::Compare {
                point: "plant.flow".into(),
                op: CompareOp::Gt,
                value: CommandValue::Number(8.0),
            }),
            ..heat(None, RuleFallback::Release)
        };
        let mut f = Fixture::new(rule, None);
        f.rules.restore([(temp, &claim)]);
        assert!(f.flow(1, 6.0, T0, T0, false).is_empty());
        assert_eq!(f.rules.state("heat"), Some(RuleStateCode::Firing));
        assert_eq!(
            values(&f.flow(2, 9.0, T0.add_ms(1_000), T0.add_ms(1_000), false)),
            [None]
        );
    }

    #[test]
    fn the_state_self_point_is_read_when_the_registry_declares_it() {
        let rule = heat(None, RuleFallback::Release);
        for declared in [false, true] {
            let ctx = rules_ctx(rule.clone(), None, declared);
            let projection = Projection::restore(&ctx.registry, &RestoredState::default(), &ctx.config, T0);
            let rules = Rules::new(&ctx.registry, &projection, T0);
            let readings = rules.readings(&ctx.registry);
            if declared {
                let point = ctx
                    .registry
                    .resolve("sentinel.rule.heat.state")
                    .expect("declared");
                assert_eq!(readings, [(point, RuleStateCode::Warmup.code())]);
            } else {
                assert!(readings.is_empty());
            }
        }
    }

    #[test]
    fn the_replay_keeps_a_pending_start_on_a_bool_input_too() {
        let rule = Rule {
            for_s: 60,
            when: Condition::Compare {
                point: "plant.flow".into(),
                op: CompareOp::Eq,
                value: CommandValue::Bool(true),
            },
            ..heat(None, RuleFallback::Release)
        };
        let rows: Vec<_> = (0..4)
            .map(|i| WindowRow {
                point_id: "plant.flow".into(),
                observed_at: T0.add_ms(-40_000 + i as i64 * 5_000),
                ingested_at: T0.add_ms(-40_000 + i as i64 * 5_000),
                key: crate::log::ObsKey {
                    driver_instance: "modbus-1".into(),
                    source_epoch: 1,
                    source_seq: i,
                },
                quality: Quality::Live,
                value: None,
                value_bool: Some(true),
                value_text: None,
                applied: Some(i as i64),
            })
            .collect();
        let mut f = Fixture::new(rule, None);
        assert_eq!(f.rules.replay(&f.ctx.registry, rows), 4);
        assert_eq!(
            f.rules.slots[0].machine.phase,
            Phase::Pending {
                since: T0.add_ms(-40_000)
            },
            "a bool row's value is read, so the condition keeps its start from the log"
        );
    }

    #[test]
    fn the_replay_keeps_a_pending_start_from_the_log_and_a_gap_restarts_it() {
        let rule = Rule {
            for_s: 60,
            ..heat(None, RuleFallback::Release)
        };
        let row = |seq: u64, at: Micros| WindowRow {
            point_id: "plant.flow".into(),
            observed_at: at,
            ingested_at: at,
            key: crate::log::ObsKey {
                driver_instance: "modbus-1".into(),
                source_epoch: 1,
                source_seq: seq,
            },
            quality: Quality::Live,
            value: Some(1.0),
            value_bool: None,
            value_text: None,
            applied: Some(seq as i64),
        };
        let mut f = Fixture::new(rule.clone(), None);
        let requests = f.rules.window_requests(&f.ctx.registry, T0);
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].since, T0.add_ms(-120_000), "for_s plus one freshness");
        // Rows 5 s apart (its heartbeat is 10 s), handed out of order.
        let rows: Vec<_> = (0..6)
            .rev()
            .map(|i| row(i, T0.add_ms(-50_000 + i as i64 * 5_000)))
            .collect();
        assert_eq!(f.rules.replay(&f.ctx.registry, rows), 6);
        assert_eq!(
            f.rules.slots[0].machine.phase,
            Phase::Pending {
                since: T0.add_ms(-50_000)
            }
        );
        // A gap of 30 s between two rows: pending from the row after it.
        let mut f = Fixture::new(rule, None);
        let rows = vec![
            row(0, T0.add_ms(-50_000)),
            row(1, T0.add_ms(-20_000)),
            row(2, T0.add_ms(-15_000)),
        ];
        f.rules.replay(&f.ctx.registry, rows);
        assert_eq!(
            f.rules.slots[0].machine.phase,
            Phase::Pending {
                since: T0.add_ms(-20_000)
            }
        );
    }
}
