//! The rules part: every rule of the registry, evaluated on committed, current data (issue 22
//! items 3, 4, 5, 7 and 8; core runtime spec, "Rules", "Drain behaves"; restart step 8).
//!
//! Owns: one slot per rule (its resolved inputs, its [`Machine`], whether it is in warmup or
//! held, its fight memory, what it has claimed), the inputs' last usable values (for
//! `hold_last_valid`), the time that counted towards warmup deadlines, and one wake per rule.
//!
//! When it evaluates (item 3): on each RETURNING row of an input that is current (a replayed
//! row, `observed_at` plus freshness not ahead of now, is recorded for gaps and
//! `hold_last_valid` but decides nothing), after the projection applied it; on a committed
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
use crate::projection::Projection;
use crate::registry::rule::{RULE_INPUTS_MAX, RULES_MAX, Rule, RuleBand};
use crate::registry::{CommandValue, PointIdx, Registry, SELF_HOST};
use crate::rules::eval::{self, InputSpec, Reading, Resolved};
use crate::rules::state::{Fight, Gaps, Machine, Mode, Phase, Target};
use crate::time::Micros;

use super::context::{Ctx, Out};

/// The state self-point's codes (`sentinel.rule.<id>.state`).
pub const STATE_IDLE: i8 = 0;
pub const STATE_PENDING: i8 = 1;
pub const STATE_FIRING: i8 = 2;
pub const STATE_WARMUP: i8 = 3;
pub const STATE_HELD: i8 = -1;
pub const STATE_INPUT_LOST: i8 = -2;

/// A rule's holder name on the points it claims.
pub fn holder(rule_id: &str) -> String {
    format!("rule:{rule_id}")
}

/// The id of a rule's generated state self-point.
pub fn state_point(rule_id: &str) -> String {
    format!("{SELF_HOST}.rule.{rule_id}.state")
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

    /// A rule's state code (see the `STATE_` constants).
    pub fn state(&self, rule_id: &str) -> Option<i8> {
        self.slots.iter().find(|s| &*s.id == rule_id).map(code)
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
    /// replayed.
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
            let value = row.value.map(CanonicalValue::Num);
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
                slot.machine
                    .step(when, until, row.observed_at, row.observed_at, Mode::Replay);
            }
        }
        replayed
    }

    /// The suppression now, from the watchdog: time counts towards warmup deadlines only while
    /// not suppressed. Returns whether suppression just ended.
    fn set_suppressed(&mut self, suppressed: bool, now: Micros) -> bool {
        if !self.suppressed {
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
        let ended = self.set_suppressed(suppressed, ctx.now);
        if suppressed {
            return Vec::new();
        }
        if ended {
            return self.evaluate_all(projection, ctx, out);
        }
        let freshness_us = self.slots[readers[0]]
            .inputs
            .iter()
            .find(|(p, _)| *p == row.point)
            .map_or(0, |(_, s)| s.freshness_us);
        if row.observed_at.0.saturating_add(freshness_us) <= ctx.now.0 {
            return Vec::new(); // replayed backlog: recorded, never decided on
        }
        let mut requests = Vec::new();
        let mut events = Vec::new();
        for i in readers {
            self.evaluate(i, row.observed_at, projection, ctx, &mut events, &mut requests);
        }
        self.emit(events, ctx, out);
        requests
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
        let ended = self.set_suppressed(suppressed, ctx.now);
        if suppressed {
            return Vec::new();
        }
        if ended {
            return self.evaluate_all(projection, ctx, out);
        }
        let Some(readers) = self.readers.get(&point).cloned() else {
            return Vec::new();
        };
        let mut requests = Vec::new();
        let mut events = Vec::new();
        for i in readers {
            self.evaluate(i, ctx.now, projection, ctx, &mut events, &mut requests);
        }
        self.emit(events, ctx, out);
        requests
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
        let ended = self.set_suppressed(suppressed, ctx.now);
        if suppressed {
            return Vec::new();
        }
        if ended {
            return self.evaluate_all(projection, ctx, out);
        }
        let mut requests = Vec::new();
        let mut events = Vec::new();
        while let Some(&(at, i)) = self.wakes.first() {
            if at > ctx.now {
                break;
            }
            self.wakes.pop_first();
            self.slots[i].wake = None;
            self.evaluate(i, ctx.now, projection, ctx, &mut events, &mut requests);
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
        let mut requests = Vec::new();
        let mut events = Vec::new();
        for i in 0..self.slots.len() {
            self.evaluate(i, ctx.now, projection, ctx, &mut events, &mut requests);
        }
        self.emit(events, ctx, out);
        requests
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
        let now = ctx.now;
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
        let readings: Vec<Reading> = slot.inputs.iter().map(|(p, _)| reading_of(*p)).collect();
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
        slot.machine.step(when, until, at, now, Mode::Live);
        let target = slot.machine.target(&slot.rule);
        let rows: Vec<(Arc<str>, ObsKey)> = slot
            .inputs
            .iter()
            .filter_map(|(p, _)| {
                let state = projection.state(*p);
                Some((state.point_id.clone(), state.key.clone()?))
            })
            .collect();
        self.changes += change(slot, i, target, rows, self.changes, ctx, events, requests);
        // The next wake: a due `for_s`, an input's freshness or stand-in running out.
        let mut wake = slot.machine.due();
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
        let slot = &mut self.slots[request.rule];
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
            .filter_map(|slot| Some((registry.resolve(&state_point(&slot.id))?, f64::from(code(slot)))))
            .collect()
    }

    /// The `sentinel_rules{state}` gauge, in `RULE_STATES` order (`crate::metrics`).
    pub fn gauge(&self, metrics: &mut crate::metrics::Metrics) {
        let mut counts = [0u64; crate::metrics::RULE_STATES.len()];
        for slot in &self.slots {
            let index = match code(slot) {
                STATE_IDLE => 0,
                STATE_PENDING => 1,
                STATE_FIRING => 2,
                STATE_WARMUP => 3,
                STATE_HELD => 4,
                _ => 5,
            };
            counts[index] += 1;
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
        rule: rule.clone(),
    })
}

fn code(slot: &Slot) -> i8 {
    if slot.held {
        STATE_HELD
    } else if slot.warmup {
        STATE_WARMUP
    } else if slot.machine.lost {
        STATE_INPUT_LOST
    } else {
        match slot.machine.phase {
            Phase::Idle => STATE_IDLE,
            Phase::Pending { .. } => STATE_PENDING,
            Phase::Firing => STATE_FIRING,
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
    let wanted = match &target {
        Target::Keep => return 0,
        Target::Release if slot.claimed.is_none() => return 0,
        Target::Claim(v) if slot.claimed.as_ref() == Some(v) => return 0,
        Target::Release => None,
        Target::Claim(v) => Some(v.clone()),
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
