//! The verification part: did an applied command take? (issue 21 item 5; core runtime spec,
//! "verification timers are core-side"; ANCHORS.md, BACnet's `COMMAND_FAILURE`: feedback that
//! disagrees with the command for longer than a delay.)
//!
//! Owns: each writable point's newest issued command (id, value, when it was issued), the open
//! verification of at most one command per point (its target, its tolerance, its deadline), the
//! pause while staleness is suppressed, and each writable point's convergence state, which the
//! generated self-point `sentinel.point.<point>.convergence` reports (`registry/health.rs`).
//!
//! **The rule.** A `command_result` with outcome `applied`, committed for the point's newest
//! command, opens a verification: the point's committed `live` rows observed at or after the
//! command was first issued (a re-send by the outbox after a restart carries that time as
//! `first_issued_at`: the driver may have applied the first send) must come within the point's `writable.tolerance` of the commanded value
//! (equality for booleans and enums) before `applied_at + writable.verify_s`. The first such
//! row (or the projection's current row, when it already shows it as the result commits)
//! writes `command_verified`; the deadline passing without one writes `command_diverged`.
//!
//! **Pause.** The deadline does not run while the watchdog holds staleness back (the startup
//! grace, no lag reading yet, or ingest lag high: `Watchdog::suppressed`, which the router
//! hands in; the condition is the watchdog's, not a copy): a slow core must not call a healthy
//! device diverged. When suppression ends every open deadline moves by the time it lasted.
//!
//! **Superseded.** A new command for the point (a new winning value, a `command_issued` with
//! another id) closes an open verification and writes nothing for it: the new
//! `command_issued` is the record, and the new command gets its own verification once applied.
//!
//! **Durable.** An open verification is a function of the control log: the point's newest
//! `command_issued`, the `applied` `command_result` after it, and no verdict after that
//! (`Store::load_open_verifications`). At restart ([`Verification::restore`]) its deadline is
//! `applied_at + verify_s` again (a pause before the restart is not in the log and is not
//! counted again; the restart's own startup grace pauses it). Every restored one is first
//! judged at startup on the committed rows observed in `[issued_at, min(deadline, now)]` (a
//! store read; [`Verification::resolve_restored`]): a row committed before the restart that
//! shows the value verifies it (the predecessor may have died between that row's commit and
//! its `command_verified`), and one that came due while the core was down with no such row
//! diverges. None is dropped, and none is decided on rows the new core happens to apply.
//!
//! Takes `command_issued` and `command_result` events in `ControlCommitted`, each RETURNING row
//! of a writable point, the suppression state on every tick, and `Tick` (deadlines). Emits
//! `Control` (`command_verified`, `command_diverged`); changes take effect as they are
//! emitted (control writes are in order and a failed one stops the core).

use std::collections::{BTreeMap, BTreeSet};

use crate::control::{CONTROL_EVENTS_PER_WRITE_MAX, ControlDetail, ControlEvent, OpenVerification};
use crate::effect::Effect;
use crate::log::{CanonicalValue, ObsRow, Quality};
use crate::registry::{CommandValue, PointIdx, Registry};
use crate::state::PointState;
use crate::time::Micros;
use crate::wire::CommandOutcome;

use super::context::{Ctx, Out};

/// The principal of a verdict: the core's verification timers.
pub const PRINCIPAL_VERIFICATION: &str = "core:verification";

/// Most rows of one point read at startup to judge a restored verification (its window runs
/// from the command's first issue to its deadline or now): a point reporting ten times a
/// second over the longest `verify_s` a sane registry declares (an hour) is well inside it.
pub const RESTORED_EVIDENCE_ROWS_MAX: usize = 50_000;

/// A writable point's convergence, as its self-point reports it (a number: the value of
/// [`Convergence::code`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Convergence {
    /// No command outstanding: the last one verified, or none since this core started.
    Converged,
    /// A command is issued and not yet verified (awaiting its answer, or its verification).
    Pending,
    /// The last command diverged, or its driver rejected it.
    Diverged,
}

impl Convergence {
    /// The self-point's value: 1 converged, 0 pending, -1 diverged.
    pub fn code(self) -> f64 {
        match self {
            Convergence::Converged => 1.0,
            Convergence::Pending => 0.0,
            Convergence::Diverged => -1.0,
        }
    }
}

/// A point's newest issued command.
#[derive(Clone, Debug, PartialEq)]
struct Issued {
    command_id: String,
    value: serde_json::Value,
    issued_at: Micros,
}

/// An open verification.
#[derive(Clone, Debug, PartialEq)]
struct Open {
    command_id: String,
    result_seq: i64,
    target: CommandValue,
    tolerance: f64,
    /// Rows observed before this cannot show the command.
    issued_at: Micros,
    deadline: Micros,
}

/// A restored verification's evidence to read at restart: the point's committed rows of
/// `class` observed in `[from, to]` (`to` is the deadline, or now when it is still ahead),
/// handed to [`Verification::resolve_restored`].
#[derive(Clone, Debug, PartialEq)]
pub struct RestoredVerification {
    pub point_id: std::sync::Arc<str>,
    pub class: crate::registry::RetentionClass,
    pub from: Micros,
    pub to: Micros,
}

#[derive(Debug, Default)]
pub(crate) struct Verification {
    issued: BTreeMap<PointIdx, Issued>,
    open: BTreeMap<PointIdx, Open>,
    /// The open deadlines, earliest first: `(deadline, point)`.
    due: BTreeSet<(Micros, PointIdx)>,
    /// Suppression began here and has not ended (`None`: the deadlines run).
    paused_since: Option<Micros>,
    /// Each writable point's state, in point order (the self-points report these).
    states: BTreeMap<PointIdx, Convergence>,
}

/// Whether `value` (a committed row's) is within `tolerance` of `target` (equal, for booleans
/// and codebook members).
pub fn within(target: &CommandValue, value: &CanonicalValue, tolerance: f64) -> bool {
    match (target, value) {
        (CommandValue::Number(t), CanonicalValue::Num(v)) => (v - t).abs() <= tolerance,
        (CommandValue::Bool(t), CanonicalValue::Bool(v)) => t == v,
        (CommandValue::Member(t), CanonicalValue::Text(v)) => **t == **v,
        _ => false,
    }
}

impl Verification {
    /// Every writable point of `registry`, converged, nothing open; the deadlines paused until
    /// the first tick says staleness is not suppressed (a core starts in its grace).
    pub fn new(registry: &Registry, now: Micros) -> Verification {
        let states = registry
            .points()
            .filter(|(_, p)| p.descriptor.writable.is_some())
            .map(|(idx, _)| (idx, Convergence::Converged))
            .collect();
        Verification {
            paused_since: Some(now),
            states,
            ..Verification::default()
        }
    }

    /// A `command_issued` for `point`, written at `issued_at`, committed: it is the point's
    /// newest command. An open verification of another command is superseded (closed, nothing
    /// written).
    pub fn on_issued(
        &mut self,
        point: PointIdx,
        command_id: &str,
        value: &serde_json::Value,
        issued_at: Micros,
    ) {
        if !self.states.contains_key(&point) {
            return;
        }
        if self.open.get(&point).is_some_and(|o| o.command_id != command_id) {
            self.close(point);
        }
        if self.open.contains_key(&point) {
            return;
        }
        self.issued.insert(
            point,
            Issued {
                command_id: command_id.to_owned(),
                value: value.clone(),
                issued_at,
            },
        );
        self.states.insert(point, Convergence::Pending);
    }

    /// A `command_result` committed at `seq` (its time `ctx.now`): `applied` for the point's
    /// newest command opens its verification — verified at once when the point's `current`
    /// row already shows it; `rejected` marks the point diverged. An answer to an older
    /// command changes nothing.
    #[expect(
        clippy::too_many_arguments,
        reason = "one result's fields, the point's current state, plus the context and the queue"
    )]
    pub fn on_result(
        &mut self,
        point: PointIdx,
        command_id: &str,
        outcome: CommandOutcome,
        seq: i64,
        current: &PointState,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let Some(issued) = self.issued.get(&point).filter(|i| i.command_id == command_id) else {
            return;
        };
        if self.open.contains_key(&point) {
            return;
        }
        match outcome {
            CommandOutcome::Applied => {}
            CommandOutcome::Rejected => {
                self.issued.remove(&point);
                self.states.insert(point, Convergence::Diverged);
                return;
            }
            // A contract-1 driver only says it took the message: nothing to verify against.
            CommandOutcome::Accepted => return,
        }
        let issued = issued.clone();
        self.open(point, issued, seq, ctx.now, &ctx.registry);
        if current.quality == Quality::Live
            && current
                .observed_at
                .is_some_and(|at| at >= self.open[&point].issued_at)
            && let Some(value) = &current.value
        {
            self.judge(point, value, current.observed_at.unwrap_or(ctx.now), ctx, out);
        }
    }

    /// A committed row of a writable point: verified when it is live, observed since the
    /// command was issued and within tolerance.
    pub fn on_row(&mut self, row: &ObsRow, ctx: &Ctx, out: &mut Out) {
        if row.quality != Quality::Live || !self.open.contains_key(&row.point) {
            return;
        }
        if let Some(value) = &row.value
            && row.observed_at >= self.open[&row.point].issued_at
        {
            self.judge(row.point, value, row.observed_at, ctx, out);
        }
    }

    /// Staleness is (or is not) suppressed now: a pause starts, or ends and moves every open
    /// deadline by its length.
    pub fn set_suppressed(&mut self, suppressed: bool, now: Micros) {
        match (suppressed, self.paused_since) {
            (true, None) => self.paused_since = Some(now),
            (false, Some(since)) => {
                self.paused_since = None;
                let paused = now.saturating_sub(since);
                if paused > 0 {
                    self.due.clear();
                    for (&point, open) in &mut self.open {
                        open.deadline = Micros(open.deadline.0.saturating_add(paused));
                        self.due.insert((open.deadline, point));
                    }
                }
            }
            _ => {}
        }
    }

    /// When the earliest open verification comes due; none while paused (the lag readings
    /// wake the core).
    pub fn next_deadline(&self) -> Option<Micros> {
        if self.paused_since.is_some() {
            return None;
        }
        self.due.first().map(|&(at, _)| at)
    }

    /// Time passed: each open verification past its deadline is written `command_diverged`
    /// (none while paused; at most [`CONTROL_EVENTS_PER_WRITE_MAX`] a tick).
    pub fn expire(&mut self, ctx: &Ctx, out: &mut Out) {
        if self.paused_since.is_some() {
            return;
        }
        let mut events = Vec::new();
        while let Some(&(deadline, point)) = self.due.first() {
            if deadline > ctx.now || events.len() >= CONTROL_EVENTS_PER_WRITE_MAX {
                break;
            }
            let open = self.close(point).expect("a due deadline is an open verification");
            self.states.insert(point, Convergence::Diverged);
            out.metrics.commands_diverged += 1;
            events.push(verdict(
                point,
                ControlDetail::CommandDiverged {
                    command_id: open.command_id,
                    result_seq: open.result_seq,
                    deadline,
                },
                ctx,
            ));
        }
        if !events.is_empty() {
            out.metrics.control_events += events.len() as u64;
            out.push(Effect::Control {
                epoch: ctx.epoch,
                events,
            });
        }
    }

    /// Restart step 4: the open verifications the log holds
    /// (`Store::load_open_verifications`), each due at `applied_at + verify_s`. Those for
    /// points no longer writable are skipped. Returns how many were restored.
    pub fn restore(
        &mut self,
        opens: impl IntoIterator<Item = OpenVerification>,
        registry: &Registry,
    ) -> usize {
        let mut restored = 0;
        for o in opens {
            let Some(point) = registry.resolve(&o.point_id) else {
                continue;
            };
            if !self.states.contains_key(&point) {
                continue;
            }
            let issued = Issued {
                command_id: o.command_id,
                value: o.value,
                issued_at: o.issued_at,
            };
            self.issued.insert(point, issued.clone());
            self.states.insert(point, Convergence::Pending);
            if self.open(point, issued, o.result_seq, o.applied_at, registry) {
                restored += 1;
            }
        }
        debug_assert!(self.open.len() <= self.states.len());
        restored
    }

    /// Restart step 6: every open verification, in deadline order, with the window of
    /// committed rows the runtime reads for it: from its command's issue to its deadline, or to
    /// `now` when the deadline is still ahead.
    pub fn restored_windows(&self, registry: &Registry, now: Micros) -> Vec<RestoredVerification> {
        self.due
            .iter()
            .map(|&(deadline, point)| {
                let p = registry.point(point);
                RestoredVerification {
                    point_id: p.id.clone(),
                    class: p.descriptor.retention,
                    from: self.open[&point].issued_at,
                    to: deadline.min(now),
                }
            })
            .collect()
    }

    /// Restart step 6, a restored verification judged on the point's committed rows observed
    /// in its window, `(observed_at, quality, value)`: `command_verified` on the first live one
    /// within tolerance; else `command_diverged` when its deadline has passed; else it stays
    /// open, judged from here on by the rows this core commits, as before the restart.
    pub fn resolve_restored(
        &mut self,
        point_id: &str,
        rows: impl IntoIterator<Item = (Micros, Quality, Option<CanonicalValue>)>,
        ctx: &Ctx,
        out: &mut Out,
    ) {
        let Some(point) = ctx.registry.resolve(point_id) else {
            return;
        };
        let Some(open) = self.open.get(&point) else {
            return;
        };
        let (from, to) = (open.issued_at, open.deadline.min(ctx.now));
        let deadline = open.deadline;
        for (observed_at, quality, value) in rows {
            if quality == Quality::Live
                && (from..=to).contains(&observed_at)
                && let Some(value) = value
                && self.judge(point, &value, observed_at, ctx, out)
            {
                return;
            }
        }
        if deadline > ctx.now {
            return; // still running: the rows to come may show it
        }
        // Nothing in the window showed it: diverged at its deadline, now.
        let open = self.close(point).expect("checked above");
        self.states.insert(point, Convergence::Diverged);
        out.metrics.commands_diverged += 1;
        out.metrics.control_events += 1;
        out.push(Effect::Control {
            epoch: ctx.epoch,
            events: vec![verdict(
                point,
                ControlDetail::CommandDiverged {
                    command_id: open.command_id,
                    result_seq: open.result_seq,
                    deadline,
                },
                ctx,
            )],
        });
    }

    /// Each writable point's convergence self-point value, in point order: `(the self-point,
    /// code)` for the points whose self-point `registry` holds.
    pub fn readings(&self, registry: &Registry) -> Vec<(PointIdx, f64)> {
        self.states
            .iter()
            .filter_map(|(&point, state)| {
                let id = crate::registry::health::convergence_point(&registry.point(point).id);
                Some((registry.resolve(&id)?, state.code()))
            })
            .collect()
    }

    pub fn state(&self, point: PointIdx) -> Option<Convergence> {
        self.states.get(&point).copied()
    }

    /// How many verifications are open.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// Opens the verification of `issued` on `point`, answered at `applied_at` (the result's
    /// `seq`). False when its value is not one the point can take (nothing to verify).
    fn open(
        &mut self,
        point: PointIdx,
        issued: Issued,
        seq: i64,
        applied_at: Micros,
        registry: &Registry,
    ) -> bool {
        let Some(writable) = registry.point(point).descriptor.writable.as_ref() else {
            return false;
        };
        let Some(target) = CommandValue::from_json(&issued.value) else {
            return false;
        };
        let deadline = applied_at.add_ms(i64::from(writable.verify_s) * 1_000);
        self.close(point);
        self.open.insert(
            point,
            Open {
                command_id: issued.command_id,
                result_seq: seq,
                target,
                tolerance: writable.tolerance,
                issued_at: issued.issued_at,
                deadline,
            },
        );
        self.due.insert((deadline, point));
        debug_assert_eq!(
            self.due.len(),
            self.open.len(),
            "one deadline per open verification"
        );
        true
    }

    /// Closes `point`'s open verification, if any.
    fn close(&mut self, point: PointIdx) -> Option<Open> {
        let open = self.open.remove(&point)?;
        self.due.remove(&(open.deadline, point));
        Some(open)
    }

    /// `value` observed at `observed_at`: `command_verified` when within tolerance. Returns
    /// whether it was.
    fn judge(
        &mut self,
        point: PointIdx,
        value: &CanonicalValue,
        observed_at: Micros,
        ctx: &Ctx,
        out: &mut Out,
    ) -> bool {
        let Some(open) = self.open.get(&point) else {
            return false;
        };
        if !within(&open.target, value, open.tolerance) {
            return false;
        }
        let open = self.close(point).expect("checked above");
        self.issued.remove(&point);
        self.states.insert(point, Convergence::Converged);
        out.metrics.commands_verified += 1;
        out.metrics.control_events += 1;
        out.push(Effect::Control {
            epoch: ctx.epoch,
            events: vec![verdict(
                point,
                ControlDetail::CommandVerified {
                    command_id: open.command_id,
                    result_seq: open.result_seq,
                    evidence_at: observed_at,
                },
                ctx,
            )],
        });
        true
    }
}

fn verdict(point: PointIdx, detail: ControlDetail, ctx: &Ctx) -> ControlEvent {
    ControlEvent {
        occurred_at: ctx.now,
        point: Some(point),
        point_id: ctx.registry.point(point).id.clone(),
        principal: PRINCIPAL_VERIFICATION.into(),
        core_epoch: ctx.epoch,
        registry_version: ctx.registry.version,
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parts::context::testing::{T0, drain, row};
    use crate::registry::Writable;

    /// The fixture's context with `plant.temp` writable: verify within 60 s, tolerance 0.5.
    fn writable_ctx() -> Ctx {
        crate::parts::context::testing::writable_ctx(Writable {
            relinquish_default: None,
            verify_s: 60,
            tolerance: 0.5,
            min_on_s: None,
            min_off_s: None,
        })
    }

    fn temp(ctx: &Ctx) -> PointIdx {
        ctx.registry.resolve("plant.temp").expect("fixture")
    }

    /// `plant.temp` commanded to 21.0 at T0 (command `c-1`), answered `applied` at T0 + 1 s
    /// (result seq 7); the deadlines run (no suppression).
    fn applied(ctx: &mut Ctx, out: &mut Out) -> Verification {
        let mut v = Verification::new(&ctx.registry, ctx.now);
        v.set_suppressed(false, ctx.now);
        let point = temp(ctx);
        v.on_issued(point, "c-1", &serde_json::json!(21.0), T0);
        assert_eq!(v.state(point), Some(Convergence::Pending));
        ctx.now = T0.add_ms(1_000);
        let nothing_yet = PointState::unknown("plant.temp".into(), T0);
        v.on_result(point, "c-1", CommandOutcome::Applied, 7, &nothing_yet, ctx, out);
        assert!(drain(out).is_empty(), "nothing shows it yet");
        assert_eq!(v.next_deadline(), Some(T0.add_ms(61_000)));
        v
    }

    /// The one control event queued, as (kind, command id, result seq).
    fn verdicts(out: &mut Out) -> Vec<(&'static str, String, i64)> {
        drain(out)
            .into_iter()
            .flat_map(|e| match e {
                Effect::Control { events, .. } => events,
                other => panic!("not a control write: {other:?}"),
            })
            .map(|e| match e.detail {
                ControlDetail::CommandVerified {
                    command_id,
                    result_seq,
                    ..
                } => ("command_verified", command_id, result_seq),
                ControlDetail::CommandDiverged {
                    command_id,
                    result_seq,
                    ..
                } => ("command_diverged", command_id, result_seq),
                other => panic!("not a verdict: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_live_row_within_tolerance_verifies_the_command_once() {
        let mut ctx = writable_ctx();
        let mut out = Out::default();
        let mut v = applied(&mut ctx, &mut out);
        // Outside the tolerance, and a row observed before the command: neither shows it.
        v.on_row(
            &row(&ctx, "plant.temp", 1, 22.0, T0.add_ms(2_000)),
            &ctx,
            &mut out,
        );
        v.on_row(&row(&ctx, "plant.temp", 2, 21.0, T0.add_ms(-1)), &ctx, &mut out);
        let mut bad = row(&ctx, "plant.temp", 3, 21.0, T0.add_ms(2_000));
        bad.quality = Quality::Bad;
        v.on_row(&bad, &ctx, &mut out);
        assert!(verdicts(&mut out).is_empty());
        v.on_row(
            &row(&ctx, "plant.temp", 4, 21.4, T0.add_ms(3_000)),
            &ctx,
            &mut out,
        );
        assert_eq!(verdicts(&mut out), [("command_verified", "c-1".to_owned(), 7)]);
        assert_eq!(v.state(temp(&ctx)), Some(Convergence::Converged));
        assert_eq!((out.metrics.commands_verified, v.next_deadline()), (1, None));
        v.on_row(
            &row(&ctx, "plant.temp", 5, 21.0, T0.add_ms(4_000)),
            &ctx,
            &mut out,
        );
        assert!(verdicts(&mut out).is_empty(), "one verdict per command");
    }

    #[test]
    fn a_row_already_showing_the_value_verifies_as_the_result_commits() {
        let mut ctx = writable_ctx();
        let mut out = Out::default();
        let mut v = Verification::new(&ctx.registry, ctx.now);
        let point = temp(&ctx);
        v.on_issued(point, "c-1", &serde_json::json!(21.0), T0);
        ctx.now = T0.add_ms(1_000);
        let mut current = PointState::unknown("plant.temp".into(), T0);
        current.quality = Quality::Live;
        current.value = Some(CanonicalValue::Num(21.2));
        current.observed_at = Some(T0.add_ms(500));
        v.on_result(point, "c-1", CommandOutcome::Applied, 9, &current, &ctx, &mut out);
        assert_eq!(verdicts(&mut out), [("command_verified", "c-1".to_owned(), 9)]);
    }

    #[test]
    fn no_row_within_tolerance_by_the_deadline_diverges() {
        let mut ctx = writable_ctx();
        let mut out = Out::default();
        let mut v = applied(&mut ctx, &mut out);
        v.on_row(
            &row(&ctx, "plant.temp", 1, 25.0, T0.add_ms(2_000)),
            &ctx,
            &mut out,
        );
        ctx.now = T0.add_ms(60_999);
        v.expire(&ctx, &mut out);
        assert!(verdicts(&mut out).is_empty(), "not due yet");
        ctx.now = T0.add_ms(61_000);
        v.expire(&ctx, &mut out);
        assert_eq!(verdicts(&mut out), [("command_diverged", "c-1".to_owned(), 7)]);
        assert_eq!(v.state(temp(&ctx)), Some(Convergence::Diverged));
        assert_eq!(out.metrics.commands_diverged, 1);
        v.on_row(&row(&ctx, "plant.temp", 2, 21.0, ctx.now), &ctx, &mut out);
        assert!(
            verdicts(&mut out).is_empty(),
            "closed: a late row changes nothing"
        );
    }

    #[test]
    fn the_deadline_pauses_while_staleness_is_suppressed() {
        let mut ctx = writable_ctx();
        let mut out = Out::default();
        let mut v = applied(&mut ctx, &mut out);
        // Lag goes high 10 s in and stays high 30 s.
        ctx.now = T0.add_ms(11_000);
        v.set_suppressed(true, ctx.now);
        assert_eq!(v.next_deadline(), None, "paused");
        ctx.now = T0.add_ms(70_000);
        v.expire(&ctx, &mut out);
        assert!(verdicts(&mut out).is_empty(), "past the deadline, but paused");
        // Suppression ends at 41 s: 30 s of pause, the deadline moves to 91 s.
        v.set_suppressed(false, T0.add_ms(41_000));
        assert_eq!(v.next_deadline(), Some(T0.add_ms(91_000)));
        ctx.now = T0.add_ms(90_000);
        v.expire(&ctx, &mut out);
        assert!(verdicts(&mut out).is_empty());
        ctx.now = T0.add_ms(91_000);
        v.expire(&ctx, &mut out);
        assert_eq!(verdicts(&mut out), [("command_diverged", "c-1".to_owned(), 7)]);
    }

    #[test]
    fn a_new_command_supersedes_an_open_verification_and_writes_nothing_for_it() {
        let mut ctx = writable_ctx();
        let mut out = Out::default();
        let mut v = applied(&mut ctx, &mut out);
        let point = temp(&ctx);
        v.on_issued(point, "c-2", &serde_json::json!(23.0), ctx.now);
        assert_eq!(
            (v.open_count(), v.next_deadline()),
            (0, None),
            "c-1's verification is closed"
        );
        ctx.now = T0.add_ms(120_000);
        v.expire(&ctx, &mut out);
        v.on_row(&row(&ctx, "plant.temp", 1, 21.0, ctx.now), &ctx, &mut out);
        assert!(verdicts(&mut out).is_empty(), "nothing is written for c-1");
        // A late answer to c-1 opens nothing; c-2's answer does.
        let nothing = PointState::unknown("plant.temp".into(), T0);
        v.on_result(point, "c-1", CommandOutcome::Applied, 8, &nothing, &ctx, &mut out);
        assert_eq!(v.open_count(), 0);
        v.on_result(point, "c-2", CommandOutcome::Applied, 9, &nothing, &ctx, &mut out);
        assert_eq!(v.open_count(), 1);
        v.on_row(&row(&ctx, "plant.temp", 2, 23.0, ctx.now), &ctx, &mut out);
        assert_eq!(verdicts(&mut out), [("command_verified", "c-2".to_owned(), 9)]);
    }

    #[test]
    fn a_rejected_command_marks_the_point_diverged_and_opens_nothing() {
        let ctx = writable_ctx();
        let mut out = Out::default();
        let mut v = Verification::new(&ctx.registry, ctx.now);
        let point = temp(&ctx);
        v.on_issued(point, "c-1", &serde_json::json!(21.0), T0);
        let nothing = PointState::unknown("plant.temp".into(), T0);
        v.on_result(
            point,
            "c-1",
            CommandOutcome::Rejected,
            3,
            &nothing,
            &ctx,
            &mut out,
        );
        assert_eq!((v.open_count(), v.state(point)), (0, Some(Convergence::Diverged)));
        assert!(drain(&mut out).is_empty(), "the command_result is the record");
    }

    /// Restored at startup from the log and judged on its committed rows: one still running
    /// (no row shows it yet), one still running that a row committed before the restart
    /// verifies, one that came due while the core was down (verified by a row in its window),
    /// and one diverged (its only matching row came after the deadline).
    #[test]
    fn restored_verifications_are_judged_on_the_log_then_run_on_or_are_decided() {
        let mut ctx = writable_ctx();
        let mut out = Out::default();
        let open = |issued_at: Micros, applied_at: Micros| OpenVerification {
            point_id: "plant.temp".into(),
            command_id: "c-1".into(),
            value: serde_json::json!(21.0),
            issued_at,
            result_seq: 7,
            applied_at,
        };
        let num = |v: f64| Some(CanonicalValue::Num(v));
        // Applied 30 s ago: 30 s left (this core started now). Its window so far holds no row
        // within tolerance: it stays open and runs on.
        ctx.now = T0.add_ms(30_000);
        let mut v = Verification::new(&ctx.registry, ctx.now);
        assert_eq!(v.restore([open(T0, T0)], &ctx.registry), 1);
        assert_eq!(
            v.restored_windows(&ctx.registry, ctx.now),
            [RestoredVerification {
                point_id: "plant.temp".into(),
                class: crate::registry::RetentionClass::Measurement,
                from: T0,
                to: ctx.now,
            }]
        );
        v.resolve_restored(
            "plant.temp",
            [(T0.add_ms(5_000), Quality::Live, num(19.0))],
            &ctx,
            &mut out,
        );
        assert!(verdicts(&mut out).is_empty());
        assert_eq!(v.state(temp(&ctx)), Some(Convergence::Pending));
        v.set_suppressed(false, ctx.now);
        assert_eq!(v.next_deadline(), Some(T0.add_ms(60_000)));

        // The same, but the predecessor committed a row showing the value and died before its
        // `command_verified`: verified on that row at restart, not left to diverge.
        let mut v = Verification::new(&ctx.registry, ctx.now);
        v.restore([open(T0, T0)], &ctx.registry);
        v.resolve_restored(
            "plant.temp",
            [(T0.add_ms(20_000), Quality::Live, num(21.2))],
            &ctx,
            &mut out,
        );
        assert_eq!(verdicts(&mut out), [("command_verified", "c-1".to_owned(), 7)]);
        assert_eq!(v.state(temp(&ctx)), Some(Convergence::Converged));

        // Applied 10 minutes ago: overdue, decided from its window [issued, applied + 60 s].
        let mut v = Verification::new(&ctx.registry, ctx.now);
        ctx.now = T0.add_ms(600_000);
        v.restore([open(T0, T0.add_ms(1_000))], &ctx.registry);
        let overdue = v.restored_windows(&ctx.registry, ctx.now);
        assert_eq!(
            overdue,
            [RestoredVerification {
                point_id: "plant.temp".into(),
                class: crate::registry::RetentionClass::Measurement,
                from: T0,
                to: T0.add_ms(61_000),
            }]
        );
        v.resolve_restored(
            "plant.temp",
            [
                (T0.add_ms(5_000), Quality::Live, num(19.0)),
                (T0.add_ms(6_000), Quality::Bad, num(21.0)),
                (T0.add_ms(7_000), Quality::Live, num(21.3)),
            ],
            &ctx,
            &mut out,
        );
        assert_eq!(verdicts(&mut out), [("command_verified", "c-1".to_owned(), 7)]);

        let mut v = Verification::new(&ctx.registry, ctx.now);
        v.restore([open(T0, T0.add_ms(1_000))], &ctx.registry);
        v.resolve_restored(
            "plant.temp",
            [(T0.add_ms(61_001), Quality::Live, num(21.0))],
            &ctx,
            &mut out,
        );
        assert_eq!(verdicts(&mut out), [("command_diverged", "c-1".to_owned(), 7)]);
        assert_eq!(v.state(temp(&ctx)), Some(Convergence::Diverged));
    }

    #[test]
    fn booleans_and_members_need_equality_numbers_the_tolerance() {
        let num = CanonicalValue::Num(20.6);
        assert!(within(&CommandValue::Number(21.0), &num, 0.5));
        assert!(!within(&CommandValue::Number(21.0), &num, 0.3));
        assert!(within(
            &CommandValue::Bool(true),
            &CanonicalValue::Bool(true),
            0.5
        ));
        assert!(!within(
            &CommandValue::Bool(true),
            &CanonicalValue::Bool(false),
            0.5
        ));
        let on = CanonicalValue::Text("on".into());
        assert!(within(&CommandValue::Member("on".into()), &on, 0.0));
        assert!(!within(&CommandValue::Member("off".into()), &on, 0.0));
        assert!(!within(
            &CommandValue::Number(1.0),
            &CanonicalValue::Bool(true),
            1.0
        ));
    }
}
