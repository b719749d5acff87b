//! Claims on a writable point and the one resolver that turns them into the point's desired
//! value (issue 21 item 2; core runtime spec, "Single writer is a requirement": "the arbitration
//! resolver is the only writer of point_desired"; ANCHORS.md §1, arbitration as BACnet's
//! priority array).
//!
//! Owns: [`Band`], [`Claim`], the winner rule ([`winner`]) and [`PointArbiter`], one point's
//! claims and its [`Desired`] value, with what each change does to it ([`Change`]). Pure and
//! deterministic: time comes in as an argument. The claims part of the core (`parts/claims.rs`)
//! keeps one arbiter per writable point and writes every change, with the `point_desired` row
//! it produces, in one fenced transaction.
//!
//! **The rule.** A claim is (point, holder, band, priority, value, since, until). The winner is
//! the claim of the highest band; within a band, of the highest priority; within one band and
//! priority, the newest (`since`; BACnet's slot behaviour: the latest write to a slot stands);
//! and then, deterministically, the smallest holder in byte order. One holder has at most one
//! claim on a point: a new one replaces it. With no claim left, the point goes to its
//! `relinquish_default`, or, without one, holds the value it has (no command).
//!
//! **Bands and BACnet's sixteen priority levels** (highest first):
//!
//! | band | BACnet levels | what holds it |
//! | --- | --- | --- |
//! | `interlock` | 1–2 (manual and automatic life safety) | a rule that must never be overridden |
//! | `safety` | 3–5 (5: critical equipment control) | protective automation |
//! | — | 6 (minimum on/off) | not a band: the arbiter's own hold after a change (`min_on_s`/`min_off_s`; only `interlock` and `safety` break it) |
//! | `operator` | 7–8 (8: manual operator) | a person, with a duration (one hour by default) |
//! | `automation` | 9–16 | rules |
//!
//! Within a band, `priority` orders claims the way BACnet's levels order slots inside that
//! range, except that here a *higher* number wins (0 is the default, lowest).
//!
//! **Minimum on/off** (BACnet level 6; issue 21 items 1 and 2). A point whose `writable`
//! section declares `min_on_s` / `min_off_s` holds a new value for that long after it took
//! effect: `min_on_s` after a change to `true` (on), `min_off_s` after a change to `false`
//! (off). Admission accepts them only on bool points, so no other type holds (a number or
//! codebook value never does). During a hold a claim change is still recorded — its control
//! event and the arbiter's claims move — but the desired value, its winner and `since` stay as
//! they were and no command goes out, unless the new winner is an `interlock` or `safety`
//! claim, which breaks the hold. When the hold ends ([`PointArbiter::hold_deadline`], which the
//! core's `Tick` reaches) the claims are resolved again: at most one command, for the value
//! that wins then. The hold is a function of the persisted `point_desired` row (its value and
//! `since`) and the claims, so a restarted core that restores both has the same deadline.
//! `since` is when the current *value* took effect: a new winner with the same value keeps it,
//! so a hold is never stretched by a change that commands nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::registry::CommandValue;
use crate::time::Micros;

/// A claim's band, highest last (so `Ord` says which wins).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Band {
    Automation,
    Operator,
    Safety,
    Interlock,
}

impl Band {
    pub const ALL: [Band; 4] = [Band::Automation, Band::Operator, Band::Safety, Band::Interlock];

    pub fn as_str(self) -> &'static str {
        match self {
            Band::Automation => "automation",
            Band::Operator => "operator",
            Band::Safety => "safety",
            Band::Interlock => "interlock",
        }
    }

    pub fn parse(s: &str) -> Option<Band> {
        Band::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// One holder's claim on one point.
#[derive(Clone, Debug, PartialEq)]
pub struct Claim {
    /// Who holds it: an operator principal, a rule, a test.
    pub holder: Arc<str>,
    pub band: Band,
    /// Within the band, higher wins.
    pub priority: u8,
    pub value: CommandValue,
    /// When it was set; within one band and priority the newest wins.
    pub since: Micros,
    /// When it lapses by itself (an operator claim's duration); `None`: until released.
    pub until: Option<Micros>,
}

/// The order claims win in: the greatest key wins.
fn rank(claim: &Claim) -> (Band, u8, Micros, std::cmp::Reverse<&str>) {
    (
        claim.band,
        claim.priority,
        claim.since,
        std::cmp::Reverse(&*claim.holder),
    )
}

/// The winning claim of `claims`, if any (see the module docs for the rule).
pub fn winner<'a>(claims: impl IntoIterator<Item = &'a Claim>) -> Option<&'a Claim> {
    claims.into_iter().max_by(|a, b| rank(a).cmp(&rank(b)))
}

/// Planted bug only (`PlantedBug::ResolverIgnoresBand`): the winner by priority, then the
/// newest, then the holder, whatever the band.
#[cfg(feature = "planted-bugs")]
fn winner_ignoring_band<'a>(claims: impl IntoIterator<Item = &'a Claim>) -> Option<&'a Claim> {
    claims
        .into_iter()
        .max_by_key(|c| (c.priority, c.since, std::cmp::Reverse(&*c.holder)))
}

/// A point's desired value, as the resolver last wrote it (the `point_desired` row).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// `None` until anything was ever desired (no claim yet, no relinquish default).
    pub value: Option<CommandValue>,
    /// The claim that won; `None` when every claim is released (the value is the relinquish
    /// default, or held).
    pub winner: Option<Claim>,
    /// When this value took effect (a new winner with the same value keeps it; a minimum
    /// on/off hold runs from here).
    pub since: Micros,
}

/// A `point_desired` row as the resolver writes it: the point, its desired value, and the
/// point's open claims after the change (the snapshot a restart restores them from; issue 21
/// item 6). The store adds the writing epoch and the control event the row reflects.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredRow {
    pub point_id: Arc<str>,
    pub desired: Desired,
    /// Every open claim on the point, in holder order (at most [`CLAIMS_PER_POINT_MAX`]).
    pub claims: Vec<Claim>,
}

/// What one change of a point's claims did to its desired value.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub desired: Desired,
    /// The winning value changed: exactly one command goes out. A change of winner to the same
    /// value, or a hold, issues none.
    pub command: Option<CommandValue>,
    /// The winning value would have changed, but a minimum on/off hold keeps the current one
    /// until then (nothing but the claims moved).
    pub held_until: Option<Micros>,
}

/// A point's minimum on/off times (`writable.min_on_s`, `min_off_s`), in seconds.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct MinHold {
    pub min_on_s: Option<u32>,
    pub min_off_s: Option<u32>,
}

impl MinHold {
    /// How long `value` holds once it took effect: bools only (module docs).
    fn hold_ms(self, value: &CommandValue) -> Option<i64> {
        let hold_s = match value {
            CommandValue::Bool(true) => self.min_on_s,
            CommandValue::Bool(false) => self.min_off_s,
            CommandValue::Number(_) | CommandValue::Member(_) => None,
        }?;
        Some(i64::from(hold_s) * 1_000)
    }
}

/// Most claims on one point; a claim beyond it is refused (a new holder) — replacing one's own
/// claim is always possible.
pub const CLAIMS_PER_POINT_MAX: usize = 64;

/// One writable point's claims and desired value.
#[derive(Clone, Debug)]
pub struct PointArbiter {
    relinquish_default: Option<CommandValue>,
    min_hold: MinHold,
    claims: BTreeMap<Arc<str>, Claim>,
    desired: Desired,
    /// A claim was set or released on this arbiter since it was built. A restored row with no
    /// claim and no change since is left as it is (see [`Self::hold_deadline`]).
    touched: bool,
    /// Planted bug only: the resolver ignores the band (`PlantedBug::ResolverIgnoresBand`).
    #[cfg(feature = "planted-bugs")]
    planted_ignores_band: bool,
}

impl PointArbiter {
    /// A point with no claims, its desired value as restored (`None`: nothing was ever
    /// desired).
    pub fn new(relinquish_default: Option<CommandValue>, restored: Option<Desired>) -> PointArbiter {
        PointArbiter {
            relinquish_default,
            min_hold: MinHold::default(),
            touched: false,
            #[cfg(feature = "planted-bugs")]
            planted_ignores_band: false,
            claims: BTreeMap::new(),
            desired: restored.unwrap_or(Desired {
                value: None,
                winner: None,
                since: Micros(0),
            }),
        }
    }

    /// With the point's minimum on/off times.
    pub fn with_min_hold(mut self, min_hold: MinHold) -> PointArbiter {
        self.min_hold = min_hold;
        self
    }

    /// A point as a restart finds it in `point_desired`: its desired value and its open claims
    /// (at most [`CLAIMS_PER_POINT_MAX`] are kept, one per holder, the newest holder's last).
    /// Nothing is resolved again: what was written is what holds.
    pub fn restored(
        relinquish_default: Option<CommandValue>,
        desired: Desired,
        claims: impl IntoIterator<Item = Claim>,
    ) -> PointArbiter {
        let mut arbiter = PointArbiter::new(relinquish_default, Some(desired));
        // Its claims come with it, so "no claim" is known, not a gap in what was restored: a
        // hold that kept a change back when the core stopped settles when it ends.
        arbiter.touched = true;
        for claim in claims {
            if arbiter.claims.len() >= CLAIMS_PER_POINT_MAX && !arbiter.claims.contains_key(&claim.holder) {
                continue;
            }
            arbiter.claims.insert(claim.holder.clone(), claim);
        }
        debug_assert!(arbiter.claims.len() <= CLAIMS_PER_POINT_MAX);
        arbiter
    }

    pub fn desired(&self) -> &Desired {
        &self.desired
    }

    /// Plants (or not) the resolver that ignores the band. Exists only with the
    /// `planted-bugs` feature, which no production build enables.
    #[cfg(feature = "planted-bugs")]
    pub fn plant_ignores_band(&mut self, planted: bool) {
        self.planted_ignores_band = planted;
    }

    /// The winning claim, by the rule (or, planted, ignoring the band).
    fn winning(&self) -> Option<&Claim> {
        #[cfg(feature = "planted-bugs")]
        if self.planted_ignores_band {
            return winner_ignoring_band(self.claims.values());
        }
        winner(self.claims.values())
    }

    pub fn claims(&self) -> impl Iterator<Item = &Claim> {
        self.claims.values()
    }

    /// Sets `claim`, replacing the holder's earlier one. `Err` when the point already holds
    /// [`CLAIMS_PER_POINT_MAX`] claims of other holders.
    pub fn set(&mut self, claim: Claim) -> Result<Change, String> {
        if !self.claims.contains_key(&claim.holder) && self.claims.len() >= CLAIMS_PER_POINT_MAX {
            return Err(format!(
                "the point already holds {CLAIMS_PER_POINT_MAX} claims, the most it may"
            ));
        }
        let now = claim.since;
        self.touched = true;
        self.claims.insert(claim.holder.clone(), claim);
        Ok(self.resolve(now))
    }

    /// Releases `holder`'s claim; `None` when it holds none.
    pub fn release(&mut self, holder: &str, now: Micros) -> Option<Change> {
        self.claims.remove(holder)?;
        self.touched = true;
        Some(self.resolve(now))
    }

    /// The earliest `until` of the claims, if any lapses by itself.
    pub fn next_expiry(&self) -> Option<Micros> {
        self.claims.values().filter_map(|c| c.until).min()
    }

    /// Releases every claim whose `until` is at or before `now`, one change each, in holder
    /// order, each with the claims still open right after it.
    pub fn expire(&mut self, now: Micros) -> Vec<(Arc<str>, Change, Vec<Claim>)> {
        let lapsed: Vec<Arc<str>> = self
            .claims
            .values()
            .filter(|c| c.until.is_some_and(|until| until <= now))
            .map(|c| c.holder.clone())
            .collect();
        lapsed
            .into_iter()
            .filter_map(|holder| {
                let change = self.release(&holder, now)?;
                Some((holder, change, self.claims.values().cloned().collect()))
            })
            .collect()
    }

    /// When the current value's minimum on/off hold ends, if it holds at all.
    fn hold_end(&self) -> Option<Micros> {
        let hold_ms = self.min_hold.hold_ms(self.desired.value.as_ref()?)?;
        Some(self.desired.since.add_ms(hold_ms))
    }

    /// What the claims ask for now: the winner and its value, or with no claim the relinquish
    /// default, or the value the point has.
    fn wanted(&self) -> (Option<&Claim>, Option<CommandValue>) {
        let winner = self.winning();
        let value = match winner {
            Some(w) => Some(w.value.clone()),
            None => self.relinquish_default.clone().or(self.desired.value.clone()),
        };
        (winner, value)
    }

    /// When a change a minimum on/off hold keeps back is due: the hold's end, while the claims
    /// ask for another value than the point has. The claims part's `Tick` then calls
    /// [`Self::settle`]. Not for a point made with [`Self::new`] from a desired value alone
    /// that holds no claim and saw no change since: "no claim" there means "unknown", and it
    /// must not be sent to its relinquish default. A restart restores the claims with the row
    /// ([`Self::restored`], issue 21 item 6), so it settles.
    pub fn hold_deadline(&self) -> Option<Micros> {
        if self.claims.is_empty() && !self.touched {
            return None;
        }
        let end = self.hold_end()?;
        let (_, value) = self.wanted();
        (value != self.desired.value).then_some(end)
    }

    /// Resolves again at `now` once a hold has ended: `Some` with the change when the value
    /// moves (one command), `None` while the hold lasts or when nothing moves.
    pub fn settle(&mut self, now: Micros) -> Option<Change> {
        if self.hold_deadline().is_none_or(|at| at > now) {
            return None;
        }
        let change = self.resolve(now);
        change.command.is_some().then_some(change)
    }

    /// The resolver: the winner's value, or the relinquish default, or a hold.
    fn resolve(&mut self, now: Micros) -> Change {
        let (winner, value) = self.wanted();
        let winner = winner.cloned();
        if value != self.desired.value
            && let Some(end) = self.hold_end()
            && now < end
            && !winner
                .as_ref()
                .is_some_and(|w| matches!(w.band, Band::Interlock | Band::Safety))
        {
            return Change {
                desired: self.desired.clone(),
                command: None,
                held_until: Some(end),
            };
        }
        let command = (value != self.desired.value).then(|| value.clone()).flatten();
        if value != self.desired.value {
            self.desired = Desired {
                value,
                winner,
                since: now,
            };
        } else if winner != self.desired.winner {
            self.desired.winner = winner;
        }
        Change {
            desired: self.desired.clone(),
            command,
            held_until: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(holder: &str, band: Band, priority: u8, value: f64, since: i64) -> Claim {
        Claim {
            holder: holder.into(),
            band,
            priority,
            value: CommandValue::Number(value),
            since: Micros(since),
            until: None,
        }
    }

    fn value(change: &Change) -> Option<f64> {
        match change.desired.value {
            Some(CommandValue::Number(v)) => Some(v),
            _ => None,
        }
    }

    #[test]
    fn band_beats_priority_beats_age_beats_holder() {
        let a = claim("a", Band::Automation, 9, 1.0, 5);
        let b = claim("b", Band::Operator, 0, 2.0, 1);
        assert_eq!(winner([&a, &b]).map(|c| &*c.holder), Some("b"), "band first");
        let c = claim("c", Band::Operator, 1, 3.0, 0);
        assert_eq!(
            winner([&a, &b, &c]).map(|c| &*c.holder),
            Some("c"),
            "then priority"
        );
        let d = claim("d", Band::Operator, 1, 4.0, 7);
        assert_eq!(winner([&c, &d]).map(|c| &*c.holder), Some("d"), "then the newest");
        let e = claim("e", Band::Operator, 1, 5.0, 7);
        assert_eq!(
            winner([&e, &d]).map(|c| &*c.holder),
            Some("d"),
            "then the smaller holder"
        );
        assert_eq!(
            winner([&d, &e]).map(|c| &*c.holder),
            Some("d"),
            "whatever the order"
        );
    }

    #[test]
    fn a_new_value_commands_once_a_new_winner_with_the_same_value_does_not() {
        let mut point = PointArbiter::new(Some(CommandValue::Number(70.0)), None);
        let change = point
            .set(claim("rule", Band::Automation, 0, 60.0, 1))
            .expect("set");
        assert_eq!((value(&change), change.command.is_some()), (Some(60.0), true));
        let change = point.set(claim("ana", Band::Operator, 0, 60.0, 2)).expect("set");
        assert_eq!(change.command, None, "same value, new winner: no command");
        assert_eq!(change.desired.winner.as_ref().map(|w| &*w.holder), Some("ana"));
        let change = point
            .set(claim("ana", Band::Operator, 0, 65.0, 3))
            .expect("replace");
        assert_eq!(change.command, Some(CommandValue::Number(65.0)));
        assert_eq!(
            point.claims().count(),
            2,
            "a holder's new claim replaces its old one"
        );
        let change = point.release("ana", Micros(4)).expect("held");
        assert_eq!(
            change.command,
            Some(CommandValue::Number(60.0)),
            "back to the rule"
        );
        let change = point.release("rule", Micros(5)).expect("held");
        assert_eq!(
            (value(&change), change.desired.winner.is_none()),
            (Some(70.0), true),
            "all released: the relinquish default"
        );
        assert_eq!(change.command, Some(CommandValue::Number(70.0)));
        assert_eq!(point.release("rule", Micros(6)), None, "nothing to release");
    }

    #[test]
    fn without_a_relinquish_default_the_point_holds() {
        let mut point = PointArbiter::new(None, None);
        point.set(claim("ana", Band::Operator, 0, 21.0, 1)).expect("set");
        let change = point.release("ana", Micros(2)).expect("held");
        assert_eq!((value(&change), change.command), (Some(21.0), None));
        assert_eq!(change.desired.winner, None);
    }

    #[test]
    fn claims_lapse_at_their_until() {
        let mut point = PointArbiter::new(None, None);
        let mut timed = claim("ana", Band::Operator, 0, 21.0, 1);
        timed.until = Some(Micros(10));
        point
            .set(claim("rule", Band::Automation, 0, 18.0, 0))
            .expect("set");
        point.set(timed).expect("set");
        assert_eq!(point.next_expiry(), Some(Micros(10)));
        assert!(point.expire(Micros(9)).is_empty());
        let lapsed = point.expire(Micros(10));
        assert_eq!(lapsed.len(), 1);
        assert_eq!(lapsed[0].1.command, Some(CommandValue::Number(18.0)));
        assert_eq!(point.next_expiry(), None);
    }

    #[test]
    fn a_point_takes_a_bounded_number_of_holders() {
        let mut point = PointArbiter::new(None, None);
        for i in 0..CLAIMS_PER_POINT_MAX {
            point
                .set(claim(&format!("h{i}"), Band::Automation, 0, 1.0, i as i64))
                .expect("within the bound");
        }
        assert_eq!(
            point.set(claim("one-more", Band::Automation, 0, 1.0, 99)),
            Err("the point already holds 64 claims, the most it may".to_owned())
        );
        point
            .set(claim("h0", Band::Operator, 0, 2.0, 100))
            .expect("a holder may always replace its own");
    }

    const S: i64 = 1_000_000;

    fn switch(holder: &str, band: Band, on: bool, since_s: i64) -> Claim {
        Claim {
            holder: holder.into(),
            band,
            priority: 0,
            value: CommandValue::Bool(on),
            since: Micros(since_s * S),
            until: None,
        }
    }

    /// A bool point off by default, on for at least 60 s, off for at least 30 s.
    fn compressor() -> PointArbiter {
        PointArbiter::new(Some(CommandValue::Bool(false)), None).with_min_hold(MinHold {
            min_on_s: Some(60),
            min_off_s: Some(30),
        })
    }

    #[test]
    fn a_change_during_a_minimum_on_or_off_hold_waits_for_its_end() {
        let mut point = compressor();
        let on = point.set(switch("rule", Band::Automation, true, 0)).expect("set");
        assert_eq!(on.command, Some(CommandValue::Bool(true)));
        // An operator switches it off ten seconds later: recorded, held until 60 s.
        let held = point.set(switch("ana", Band::Operator, false, 10)).expect("set");
        assert_eq!(
            (held.command.clone(), held.held_until),
            (None, Some(Micros(60 * S)))
        );
        assert_eq!(held.desired.value, Some(CommandValue::Bool(true)));
        assert_eq!(held.desired.winner.as_ref().map(|w| &*w.holder), Some("rule"));
        assert_eq!(point.claims().count(), 2, "the claim is recorded");
        assert_eq!(point.hold_deadline(), Some(Micros(60 * S)));
        assert_eq!(point.settle(Micros(60 * S - 1)), None, "not yet");
        let off = point.settle(Micros(60 * S)).expect("the hold ended");
        assert_eq!(off.command, Some(CommandValue::Bool(false)));
        assert_eq!(
            (off.desired.since, off.desired.winner.as_ref().map(|w| &*w.holder)),
            (Micros(60 * S), Some("ana"))
        );
        assert_eq!(point.hold_deadline(), None, "nothing kept back");
        // Off now holds 30 s: the operator's release at 70 s brings the rule's `on` back at 90 s.
        let held = point.release("ana", Micros(70 * S)).expect("held");
        assert_eq!((held.command, held.held_until), (None, Some(Micros(90 * S))));
        assert_eq!(point.settle(Micros(89 * S)), None);
        let on = point.settle(Micros(90 * S)).expect("ended");
        assert_eq!(on.command, Some(CommandValue::Bool(true)));
        assert_eq!(point.settle(Micros(200 * S)), None, "nothing moves twice");
    }

    #[test]
    fn only_interlock_and_safety_claims_break_a_hold() {
        for (band, breaks) in [
            (Band::Automation, false),
            (Band::Operator, false),
            (Band::Safety, true),
            (Band::Interlock, true),
        ] {
            let mut point = compressor();
            point.set(switch("rule", Band::Automation, true, 0)).expect("set");
            let change = point.set(switch("other", band, false, 1)).expect("set");
            // (An automation claim newer than the rule's, same priority, would win: it waits.)
            let want = if breaks {
                (Some(CommandValue::Bool(false)), None)
            } else {
                (None, Some(Micros(60 * S)))
            };
            assert_eq!((change.command, change.held_until), want, "{band:?}");
        }
    }

    #[test]
    fn a_change_undone_within_the_hold_commands_nothing() {
        let mut point = compressor();
        point.set(switch("rule", Band::Automation, true, 0)).expect("set");
        point.set(switch("ana", Band::Operator, false, 10)).expect("set");
        let back = point.release("ana", Micros(20 * S)).expect("held");
        assert_eq!((back.command, back.held_until), (None, None));
        assert_eq!(point.hold_deadline(), None);
        assert_eq!(
            point.settle(Micros(60 * S)),
            None,
            "nothing to send at the hold's end"
        );
        // A new winner with the same value keeps `since`: the hold is not stretched.
        let same = point.set(switch("bob", Band::Operator, true, 30)).expect("set");
        assert_eq!(same.command, None);
        assert_eq!(same.desired.since, Micros(0));
        assert_eq!(same.desired.winner.as_ref().map(|w| &*w.holder), Some("bob"));
    }

    #[test]
    fn a_hold_runs_from_the_restored_since_and_numbers_never_hold() {
        let restored = Desired {
            value: Some(CommandValue::Bool(true)),
            winner: None,
            since: Micros(100 * S),
        };
        let mut point =
            PointArbiter::new(Some(CommandValue::Bool(false)), Some(restored)).with_min_hold(MinHold {
                min_on_s: Some(60),
                min_off_s: None,
            });
        assert_eq!(
            point.hold_deadline(),
            None,
            "restored without its claims: nothing to settle"
        );
        let held = point.set(switch("ana", Band::Operator, false, 130)).expect("set");
        assert_eq!(held.held_until, Some(Micros(160 * S)), "from the persisted since");
        let off = point.settle(Micros(160 * S)).expect("ended");
        assert_eq!(off.command, Some(CommandValue::Bool(false)));
        // No min_off_s: off holds nothing.
        let on = point.set(switch("ana", Band::Operator, true, 161)).expect("set");
        assert_eq!(on.command, Some(CommandValue::Bool(true)));

        let mut number = PointArbiter::new(None, None).with_min_hold(MinHold {
            min_on_s: Some(60),
            min_off_s: Some(60),
        });
        number.set(claim("a", Band::Operator, 0, 1.0, 0)).expect("set");
        let change = number.set(claim("b", Band::Operator, 0, 0.0, 1)).expect("set");
        assert_eq!(change.command, Some(CommandValue::Number(0.0)), "only bools hold");
    }
}
