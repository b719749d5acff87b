//! One rule's state machine (issue 22 items 1, 3, 5 and 8): hysteresis and `for_s`, gaps in
//! the log, input loss, what the rule claims in each state, and the fight limit.
//!
//! Owns: [`Machine`] (idle → pending since the log-time instant of the row that made `when`
//! true → firing at `since + for_s` if `when` still holds on usable data; firing ends when
//! `until` holds, or `when` no longer does without an `until`; a pending that stops holding,
//! a gap, an input not current, or lost inputs go back to idle: a `hold_last_valid` stand-in
//! serves only a firing rule), [`Target`] (what the rule wants claimed in its
//! state), [`Gaps`] (consecutive committed rows of an input farther apart than its deadline)
//! and [`Fight`] (more than `changes_max` changes of the claim within `window_s`: held).
//!
//! Pure: no core state, time passed in. [`Mode::Replay`] is the restart's replay of the log
//! (restart step 8): it keeps a pending's start instant and never fires.

use std::collections::VecDeque;

use crate::registry::CommandValue;
use crate::registry::rule::{Rule, RuleFallback};
use crate::time::Micros;

use super::eval::Lost;

/// Where a rule's condition stands.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    Idle,
    /// `when` has held since `since` (the `observed_at` of the committed row that made it
    /// true), on data with no gap.
    Pending {
        since: Micros,
    },
    Firing,
}

/// Whether an evaluation may decide (the running core, on current data) or only follow the
/// condition (the replay of the log at restart).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mode {
    Live,
    Replay,
}

/// What the rule's claim should be.
#[derive(Clone, Debug, PartialEq)]
pub enum Target {
    /// Leave it as it is (`on_input_loss = hold`).
    Keep,
    Claim(CommandValue),
    Release,
}

/// One rule's condition state.
#[derive(Clone, Debug, PartialEq)]
pub struct Machine {
    pub phase: Phase,
    /// The last evaluation found a value comparison on a lost input.
    pub lost: bool,
    for_us: i64,
    /// `on_input_loss = hold`: a firing rule keeps firing while its inputs are lost.
    hold_on_loss: bool,
}

impl Machine {
    pub fn new(rule: &Rule) -> Machine {
        Machine {
            phase: Phase::Idle,
            lost: false,
            for_us: i64::from(rule.for_s) * 1_000_000,
            hold_on_loss: rule.on_input_loss == RuleFallback::Hold,
        }
    }

    /// When a pending condition comes due.
    pub fn due(&self) -> Option<Micros> {
        match self.phase {
            Phase::Pending { since } => Some(Micros(since.0.saturating_add(self.for_us))),
            _ => None,
        }
    }

    /// A gap in an input's rows: the condition starts again (a pending is cleared; a firing
    /// rule is not: only its `until`, or its inputs' loss, ends it).
    pub fn gap(&mut self) {
        if matches!(self.phase, Phase::Pending { .. }) {
            self.phase = Phase::Idle;
        }
    }

    /// One evaluation at `now` where `current` says whether every input a value comparison
    /// reads is usable (live and current) rather than standing in by `hold_last_valid`: an
    /// input not current is a gap, so a pending condition starts again and none starts until
    /// every such input is current (a `for_s` comes due only on current data); a firing rule
    /// reads the stand-in values. Then [`Self::step`].
    pub fn evaluate(
        &mut self,
        when: Result<bool, Lost>,
        until: Option<Result<bool, Lost>>,
        current: bool,
        at: Micros,
        now: Micros,
        mode: Mode,
    ) -> bool {
        let before = self.phase;
        let when = if current || self.phase == Phase::Firing {
            when
        } else {
            self.gap();
            when.map(|_| false)
        };
        self.step(when, until, at, now, mode) || self.phase != before
    }

    /// One evaluation at `now`: `when` and `until` (when the rule has one) as evaluated on
    /// the inputs' readings, `at` the instant a pending would start from (the `observed_at` of
    /// the row that caused the evaluation, or `now`). Returns whether the phase changed.
    pub fn step(
        &mut self,
        when: Result<bool, Lost>,
        until: Option<Result<bool, Lost>>,
        at: Micros,
        now: Micros,
        mode: Mode,
    ) -> bool {
        debug_assert!(
            at <= now || mode == Mode::Replay,
            "a pending starts no later than now"
        );
        let before = self.phase;
        let lost = when.is_err() || until.is_some_and(|u| u.is_err());
        self.lost = lost;
        if lost {
            self.phase = match self.phase {
                Phase::Firing if self.hold_on_loss || mode == Mode::Replay => Phase::Firing,
                _ => Phase::Idle,
            };
            return self.phase != before;
        }
        let when = when == Ok(true);
        match self.phase {
            Phase::Idle => {
                if when {
                    self.phase = Phase::Pending { since: at.min(now) };
                    self.come_due(now, mode);
                }
            }
            Phase::Pending { .. } => {
                if when {
                    self.come_due(now, mode);
                } else {
                    self.phase = Phase::Idle;
                }
            }
            Phase::Firing => {
                // Replay never decides: a firing rule (its claim restored) waits for warmup.
                let ends = match until {
                    Some(until) => until == Ok(true),
                    None => !when,
                };
                if ends && mode == Mode::Live {
                    self.phase = Phase::Idle;
                }
            }
        }
        self.phase != before
    }

    fn come_due(&mut self, now: Micros, mode: Mode) {
        if mode == Mode::Live && self.due().is_some_and(|due| due <= now) {
            self.phase = Phase::Firing;
        }
    }

    /// What the rule wants claimed in its state.
    pub fn target(&self, rule: &Rule) -> Target {
        let fallback = |f: &RuleFallback| match f {
            RuleFallback::Release => Target::Release,
            RuleFallback::Hold => Target::Keep,
            RuleFallback::Value(v) => Target::Claim(v.clone()),
        };
        match self.phase {
            Phase::Firing => Target::Claim(rule.claim.value.clone()),
            _ if self.lost => fallback(&rule.on_input_loss),
            _ => match &rule.otherwise {
                // `hold` names nothing to do when the condition ends: the claim is released.
                RuleFallback::Hold => Target::Release,
                other => fallback(other),
            },
        }
    }
}

/// Consecutive committed rows of each input farther apart than the input's deadline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gaps {
    last_row_at: Vec<Option<Micros>>,
}

impl Gaps {
    pub fn new(inputs: usize) -> Gaps {
        Gaps {
            last_row_at: vec![None; inputs],
        }
    }

    /// Input `input`'s newest committed row before any is seen (the restored log head).
    pub fn seed(&mut self, input: usize, observed_at: Option<Micros>) {
        let slot = &mut self.last_row_at[input];
        *slot = (*slot).max(observed_at);
    }

    /// A committed row of input `input`, observed at `observed_at`: whether it follows its
    /// predecessor by more than `gap_us`. A late row (older than the newest) is no gap.
    pub fn row(&mut self, input: usize, observed_at: Micros, gap_us: i64) -> bool {
        let slot = &mut self.last_row_at[input];
        let gap = slot.is_some_and(|last| observed_at.saturating_sub(last) > gap_us);
        *slot = (*slot).max(Some(observed_at));
        gap
    }

    pub fn last_row_at(&self, input: usize) -> Option<Micros> {
        self.last_row_at[input]
    }
}

/// The fight limit's memory: when the rule's claim changed, within the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Fight {
    changes: VecDeque<Micros>,
}

impl Fight {
    /// Whether one more change at `now` stays within `changes_max` changes in `window_s`;
    /// if it does, it is counted. A rule refused here is held.
    pub fn allow(&mut self, now: Micros, changes_max: u32, window_s: u32) -> bool {
        let window_us = i64::from(window_s) * 1_000_000;
        while self
            .changes
            .front()
            .is_some_and(|&at| now.saturating_sub(at) >= window_us)
        {
            self.changes.pop_front();
        }
        if self.changes.len() >= changes_max as usize {
            return false;
        }
        self.changes.push_back(now);
        debug_assert!(self.changes.len() <= changes_max as usize);
        true
    }

    /// Changes counted within the window.
    pub fn count(&self) -> usize {
        self.changes.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::rule::{CompareOp, Condition, RuleBand, RuleClaim};

    const T: Micros = Micros(1_796_000_000_000_000);

    fn rule(for_s: u32, otherwise: RuleFallback, on_input_loss: RuleFallback) -> Rule {
        Rule {
            id: "r".into(),
            inputs: vec!["x".into()],
            when: Condition::Compare {
                point: "x".into(),
                op: CompareOp::Gt,
                value: CommandValue::Number(30.0),
            },
            until: None,
            for_s,
            point: "w".into(),
            claim: RuleClaim {
                band: RuleBand::Automation,
                priority: 0,
                value: CommandValue::Bool(true),
            },
            otherwise,
            on_input_loss,
            warmup_deadline_s: 60,
            fight: None,
        }
    }

    #[test]
    fn pending_starts_at_the_row_and_fires_at_since_plus_for_s() {
        let r = rule(60, RuleFallback::Release, RuleFallback::Release);
        let mut m = Machine::new(&r);
        assert!(m.step(Ok(true), None, T, T.add_ms(500), Mode::Live));
        assert_eq!(m.phase, Phase::Pending { since: T });
        assert_eq!(m.due(), Some(T.add_ms(60_000)));
        assert!(!m.step(Ok(true), None, T.add_ms(59_000), T.add_ms(59_999), Mode::Live));
        assert!(m.step(Ok(true), None, T.add_ms(60_000), T.add_ms(60_000), Mode::Live));
        assert_eq!(m.phase, Phase::Firing);
        assert_eq!(m.target(&r), Target::Claim(CommandValue::Bool(true)));
        // No `until`: ends when `when` no longer holds.
        assert!(m.step(Ok(false), None, T, T.add_ms(61_000), Mode::Live));
        assert_eq!(m.target(&r), Target::Release);
    }

    #[test]
    fn for_s_zero_fires_at_once_and_a_pending_that_stops_holding_is_idle() {
        let r = rule(0, RuleFallback::Release, RuleFallback::Release);
        let mut m = Machine::new(&r);
        m.step(Ok(true), None, T, T, Mode::Live);
        assert_eq!(m.phase, Phase::Firing);
        let r = rule(10, RuleFallback::Release, RuleFallback::Release);
        let mut m = Machine::new(&r);
        m.step(Ok(true), None, T, T, Mode::Live);
        m.step(Ok(false), None, T.add_ms(5_000), T.add_ms(5_000), Mode::Live);
        assert_eq!(m.phase, Phase::Idle);
        m.step(Ok(true), None, T.add_ms(6_000), T.add_ms(6_000), Mode::Live);
        assert_eq!(
            m.phase,
            Phase::Pending {
                since: T.add_ms(6_000)
            },
            "starts again"
        );
    }

    #[test]
    fn hysteresis_ends_firing_only_when_until_holds() {
        let r = rule(
            0,
            RuleFallback::Value(CommandValue::Bool(false)),
            RuleFallback::Release,
        );
        let mut m = Machine::new(&r);
        m.step(Ok(true), Some(Ok(false)), T, T, Mode::Live);
        assert_eq!(m.phase, Phase::Firing);
        // Between the thresholds: `when` is false but `until` not yet true.
        m.step(Ok(false), Some(Ok(false)), T, T.add_ms(1), Mode::Live);
        assert_eq!(m.phase, Phase::Firing);
        m.step(Ok(false), Some(Ok(true)), T, T.add_ms(2), Mode::Live);
        assert_eq!(m.phase, Phase::Idle);
        assert_eq!(
            m.target(&r),
            Target::Claim(CommandValue::Bool(false)),
            "the safe value"
        );
    }

    #[test]
    fn replay_keeps_the_start_instant_and_never_fires() {
        let r = rule(60, RuleFallback::Release, RuleFallback::Release);
        let mut m = Machine::new(&r);
        m.step(Ok(true), None, T, T, Mode::Replay);
        m.step(Ok(true), None, T.add_ms(90_000), T.add_ms(90_000), Mode::Replay);
        assert_eq!(
            m.phase,
            Phase::Pending { since: T },
            "due, but replay decides nothing"
        );
        // Once live, on current data that holds: fires, the start instant kept.
        m.step(Ok(true), None, T.add_ms(100_000), T.add_ms(100_000), Mode::Live);
        assert_eq!(m.phase, Phase::Firing);
    }

    #[test]
    fn a_gap_restarts_a_pending_condition() {
        let r = rule(60, RuleFallback::Release, RuleFallback::Release);
        let mut m = Machine::new(&r);
        m.step(Ok(true), None, T, T, Mode::Live);
        let mut gaps = Gaps::new(1);
        assert!(!gaps.row(0, T, 10_000_000));
        assert!(
            !gaps.row(0, T.add_ms(10_000), 10_000_000),
            "exactly the deadline is no gap"
        );
        assert!(!gaps.row(0, T.add_ms(5_000), 10_000_000), "a late row is no gap");
        assert!(gaps.row(0, T.add_ms(20_001), 10_000_000));
        m.gap();
        assert_eq!(m.phase, Phase::Idle);
        m.step(Ok(true), None, T.add_ms(20_001), T.add_ms(20_001), Mode::Live);
        assert_eq!(m.due(), Some(T.add_ms(80_001)), "a new pending from the next row");
    }

    #[test]
    fn each_on_input_loss_decides_what_a_firing_rule_claims() {
        for (policy, phase, target) in [
            (RuleFallback::Release, Phase::Idle, Target::Release),
            (
                RuleFallback::Hold,
                Phase::Firing,
                Target::Claim(CommandValue::Bool(true)),
            ),
            (
                RuleFallback::Value(CommandValue::Bool(false)),
                Phase::Idle,
                Target::Claim(CommandValue::Bool(false)),
            ),
        ] {
            let r = rule(0, RuleFallback::Release, policy.clone());
            let mut m = Machine::new(&r);
            m.step(Ok(true), None, T, T, Mode::Live);
            m.step(Err(Lost), None, T, T.add_ms(1), Mode::Live);
            assert!(m.lost);
            assert_eq!((m.phase, m.target(&r)), (phase, target), "{policy:?}");
        }
        // Hold on an idle rule leaves its claim alone; a lost `until` is lost too.
        let r = rule(0, RuleFallback::Release, RuleFallback::Hold);
        let mut m = Machine::new(&r);
        m.step(Ok(false), Some(Err(Lost)), T, T, Mode::Live);
        assert_eq!(m.target(&r), Target::Keep);
    }

    #[test]
    fn an_input_not_current_restarts_a_pending_condition_and_a_stand_in_never_fires_one() {
        let r = rule(60, RuleFallback::Release, RuleFallback::Release);
        let mut m = Machine::new(&r);
        m.evaluate(Ok(true), None, true, T, T, Mode::Live);
        // Standing in (not current) past the due instant: no firing, the pending cleared.
        m.evaluate(Ok(true), None, false, T, T.add_ms(70_000), Mode::Live);
        assert_eq!(m.phase, Phase::Idle);
        m.evaluate(
            Ok(true),
            None,
            true,
            T.add_ms(71_000),
            T.add_ms(71_000),
            Mode::Live,
        );
        assert_eq!(
            m.phase,
            Phase::Pending {
                since: T.add_ms(71_000)
            }
        );
        // A firing rule reads the stand-in: it keeps firing while `when` holds on it.
        let r = rule(0, RuleFallback::Release, RuleFallback::Release);
        let mut m = Machine::new(&r);
        m.evaluate(Ok(true), None, true, T, T, Mode::Live);
        m.evaluate(Ok(true), None, false, T, T.add_ms(1), Mode::Live);
        assert_eq!(m.phase, Phase::Firing);
        m.evaluate(Ok(false), None, false, T, T.add_ms(2), Mode::Live);
        assert_eq!(m.phase, Phase::Idle);
    }

    #[test]
    fn lost_inputs_clear_a_pending_condition() {
        let r = rule(60, RuleFallback::Release, RuleFallback::Hold);
        let mut m = Machine::new(&r);
        m.step(Ok(true), None, T, T, Mode::Live);
        m.step(Err(Lost), None, T, T.add_ms(1), Mode::Live);
        assert_eq!(m.phase, Phase::Idle);
    }

    #[test]
    fn the_fight_limit_refuses_the_change_past_its_count_in_the_window() {
        let mut fight = Fight::default();
        assert!(fight.allow(T, 2, 60));
        assert!(fight.allow(T.add_ms(1_000), 2, 60));
        assert!(!fight.allow(T.add_ms(2_000), 2, 60), "a third within a minute");
        assert_eq!(fight.count(), 2);
        assert!(fight.allow(T.add_ms(60_000), 2, 60), "the first left the window");
    }
}
