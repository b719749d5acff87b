//! The resolver against a small reference arbitration written independently of it (issue 21
//! item 2): after any sequence of claims set, replaced, released and lapsed on one point, the
//! desired value is the reference's, and a command goes out exactly when the desired value
//! changes — never for a change of winner to the same value, never for a hold.

use proptest::prelude::*;
use sentinel_core::Micros;
use sentinel_core::arbitration::{Band, Claim, PointArbiter};
use sentinel_core::registry::CommandValue;

/// The reference: the claims as a plain list, the winner found by narrowing it down one rule
/// at a time, as the issue states them (BACnet's slots: highest band, then highest priority,
/// then the latest write, then a fixed tie-break by holder).
#[derive(Default)]
struct Reference {
    /// (holder, band 0..4, priority, value, since, until)
    claims: Vec<(String, u8, u8, i64, i64, Option<i64>)>,
    desired: Option<i64>,
    relinquish_default: Option<i64>,
}

impl Reference {
    fn winner(&self) -> Option<i64> {
        let top_band = self.claims.iter().map(|c| c.1).max()?;
        let in_band: Vec<_> = self.claims.iter().filter(|c| c.1 == top_band).collect();
        let top_priority = in_band.iter().map(|c| c.2).max()?;
        let in_slot: Vec<_> = in_band.into_iter().filter(|c| c.2 == top_priority).collect();
        let newest = in_slot.iter().map(|c| c.4).max()?;
        let mut latest: Vec<_> = in_slot.into_iter().filter(|c| c.4 == newest).collect();
        latest.sort_by(|a, b| a.0.cmp(&b.0));
        latest.first().map(|c| c.3)
    }

    /// Applies the claims' current state; returns whether a command goes out.
    fn settle(&mut self) -> bool {
        let next = self.winner().or(self.relinquish_default).or(self.desired);
        let command = next != self.desired;
        self.desired = next;
        command
    }
}

#[derive(Clone, Debug)]
enum Op {
    Set {
        holder: u8,
        band: u8,
        priority: u8,
        value: i64,
        for_s: Option<i64>,
    },
    Release {
        holder: u8,
    },
    Tick {
        seconds: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..4, 0u8..4, 0u8..3, 0i64..3, proptest::option::of(1i64..20)).prop_map(
            |(holder, band, priority, value, for_s)| Op::Set { holder, band, priority, value, for_s }
        ),
        2 => (0u8..4).prop_map(|holder| Op::Release { holder }),
        1 => (0i64..15).prop_map(|seconds| Op::Tick { seconds }),
    ]
}

fn number(value: &Option<CommandValue>) -> Option<i64> {
    match value {
        Some(CommandValue::Number(v)) => Some(*v as i64),
        _ => None,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn the_resolver_agrees_with_the_reference(
        relinquish_default in proptest::option::of(0i64..3),
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let mut arbiter = PointArbiter::new(relinquish_default.map(|v| CommandValue::Number(v as f64)), None);
        let mut reference = Reference { relinquish_default, ..Reference::default() };
        // Time moves one second per operation, so `since` orders claims; equal ones come from
        // a tick of zero seconds.
        let mut now = 0i64;
        for op in ops {
            match op {
                Op::Set { holder, band, priority, value, for_s } => {
                    let holder = format!("h{holder}");
                    let until = for_s.map(|s| now + s);
                    let change = arbiter
                        .set(Claim {
                            holder: holder.as_str().into(),
                            band: Band::ALL[band as usize],
                            priority,
                            value: CommandValue::Number(value as f64),
                            since: Micros(now * 1_000_000),
                            until: until.map(|u| Micros(u * 1_000_000)),
                        })
                        .expect("four holders at most");
                    reference.claims.retain(|c| c.0 != holder);
                    reference.claims.push((holder, band, priority, value, now * 1_000_000, until));
                    let command = reference.settle();
                    prop_assert_eq!(change.command.is_some(), command);
                    prop_assert_eq!(number(&change.desired.value), reference.desired);
                }
                Op::Release { holder } => {
                    let holder = format!("h{holder}");
                    let held = reference.claims.iter().any(|c| c.0 == holder);
                    let change = arbiter.release(&holder, Micros(now * 1_000_000));
                    prop_assert_eq!(change.is_some(), held);
                    // Nothing held, nothing changes: the point keeps what it had (before any
                    // claim, not even the relinquish default applies).
                    if let Some(change) = change {
                        reference.claims.retain(|c| c.0 != holder);
                        let command = reference.settle();
                        prop_assert_eq!(change.command.is_some(), command);
                    }
                }
                Op::Tick { seconds } => {
                    now += seconds;
                    let lapsed = arbiter.expire(Micros(now * 1_000_000));
                    let mut commands = 0;
                    // The reference drops the lapsed claims one at a time in holder order,
                    // as the arbiter reports them.
                    let mut lapsing: Vec<String> = reference
                        .claims
                        .iter()
                        .filter(|c| c.5.is_some_and(|u| u <= now))
                        .map(|c| c.0.clone())
                        .collect();
                    lapsing.sort();
                    prop_assert_eq!(
                        lapsed.iter().map(|(h, _, _)| h.to_string()).collect::<Vec<_>>(),
                        lapsing.clone()
                    );
                    for holder in lapsing {
                        reference.claims.retain(|c| c.0 != holder);
                        commands += usize::from(reference.settle());
                    }
                    prop_assert_eq!(lapsed.iter().filter(|(_, c, _)| c.command.is_some()).count(), commands);
                }
            }
            prop_assert_eq!(number(&arbiter.desired().value), reference.desired);
            now += 1;
        }
    }
}
