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

/// A point's desired value, as the resolver last wrote it (the `point_desired` row).
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    /// `None` until anything was ever desired (no claim yet, no relinquish default).
    pub value: Option<CommandValue>,
    /// The claim that won; `None` when every claim is released (the value is the relinquish
    /// default, or held).
    pub winner: Option<Claim>,
    /// When this value and winner took effect.
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
}

/// Most claims on one point; a claim beyond it is refused (a new holder) — replacing one's own
/// claim is always possible.
pub const CLAIMS_PER_POINT_MAX: usize = 64;

/// One writable point's claims and desired value.
#[derive(Clone, Debug)]
pub struct PointArbiter {
    relinquish_default: Option<CommandValue>,
    claims: BTreeMap<Arc<str>, Claim>,
    desired: Desired,
}

impl PointArbiter {
    /// A point with no claims, its desired value as restored (`None`: nothing was ever
    /// desired).
    pub fn new(relinquish_default: Option<CommandValue>, restored: Option<Desired>) -> PointArbiter {
        PointArbiter {
            relinquish_default,
            claims: BTreeMap::new(),
            desired: restored.unwrap_or(Desired {
                value: None,
                winner: None,
                since: Micros(0),
            }),
        }
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
        self.claims.insert(claim.holder.clone(), claim);
        Ok(self.resolve(now))
    }

    /// Releases `holder`'s claim; `None` when it holds none.
    pub fn release(&mut self, holder: &str, now: Micros) -> Option<Change> {
        self.claims.remove(holder)?;
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

    /// The resolver: the winner's value, or the relinquish default, or a hold.
    fn resolve(&mut self, now: Micros) -> Change {
        let winner = winner(self.claims.values()).cloned();
        let value = match &winner {
            Some(w) => Some(w.value.clone()),
            None => self.relinquish_default.clone().or(self.desired.value.clone()),
        };
        let command = (value != self.desired.value).then(|| value.clone()).flatten();
        let moved = value != self.desired.value || winner != self.desired.winner;
        if moved {
            self.desired = Desired {
                value,
                winner,
                since: now,
            };
        }
        Change {
            desired: self.desired.clone(),
            command,
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
}
