//! The benchmarks' rule set (issue 22): one rule on each writable point of the fleet
//! (`fleet_4000.rs`, after `make_writable`), reading two of the fleet's measurement numbers
//! that nobody writes and no core derives: `a > x and b < y`, with thresholds inside the
//! readings' range (15–35) so conditions come and go; every third with hysteresis
//! (`until a < x - 2`), every fourth with `for_s`; claiming its point in the automation band,
//! releasing otherwise and on input loss.
//!
//! One file, included with `#[path]` by `core/benches/rules.rs` (rule evaluation per committed
//! transition) and `tests/benches/cold_start.rs` (`--rules`: restart step 8), so both measure
//! the same rules.

use sentinel_core::registry::rule::{CompareOp, Condition, Rule, RuleBand, RuleClaim, RuleFallback};
use sentinel_core::registry::{CommandValue, Descriptor, Kind};

fn compare(point: &str, op: CompareOp, value: f64) -> Condition {
    Condition::Compare {
        point: point.to_owned(),
        op,
        value: CommandValue::Number(value),
    }
}

/// Puts a rule on each of the first `count` writable points of `descriptors`, every fourth
/// with `for_s`; returns how many it put.
pub fn add_rules(descriptors: &mut [Descriptor], count: usize, for_s: u32) -> usize {
    let inputs: Vec<String> = descriptors
        .iter()
        .filter(|d| d.kind == Kind::Number && d.writable.is_none() && d.agg_safe && d.derived.is_none())
        .map(|d| d.id.clone())
        .collect();
    assert!(inputs.len() >= 2, "numbers to read");
    let mut k = 0usize;
    for d in descriptors
        .iter_mut()
        .filter(|d| d.writable.is_some())
        .take(count)
    {
        let a = &inputs[k % inputs.len()];
        let b = &inputs[(k * 7 + 3) % inputs.len()];
        let x = 20.0 + (k % 10) as f64;
        let y = 25.0 + (k % 7) as f64;
        let value = match d.kind {
            Kind::Bool => CommandValue::Bool(true),
            _ => CommandValue::Number(21.0 + (k % 5) as f64),
        };
        d.rules = vec![Rule {
            id: format!("bench.rule{k}"),
            inputs: vec![a.clone(), b.clone()],
            when: Condition::All(vec![compare(a, CompareOp::Gt, x), compare(b, CompareOp::Lt, y)]),
            until: k.is_multiple_of(3).then(|| compare(a, CompareOp::Lt, x - 2.0)),
            for_s: if k.is_multiple_of(4) { for_s } else { 0 },
            point: d.id.clone(),
            claim: RuleClaim {
                band: RuleBand::Automation,
                priority: 0,
                value,
            },
            otherwise: RuleFallback::Release,
            on_input_loss: RuleFallback::Release,
            warmup_deadline_s: 60,
            fight: None,
        }];
        k += 1;
    }
    k
}
