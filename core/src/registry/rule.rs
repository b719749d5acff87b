//! Rules and the missing-data vocabulary, as a descriptor carries them (issue 22 items 1 and 2;
//! core runtime spec, "Rules" and "Drain behaves"; sensor paradigm spec, "Missing data").
//!
//! Owns: the resolved, self-contained form of a rule ([`Rule`]: its inputs, its condition with
//! hysteresis, `for_s`, the claim it makes while the condition holds, what it does when the
//! condition stops holding and when an input is lost, its warmup deadline and its fight limit)
//! and a point's missing-data policy ([`MissingData`]). A rule is stored in the descriptor of
//! the writable point it claims (`Descriptor::rules`), so a registry version carries its rules
//! with no table of their own and a starting core reads them where it reads the point; an
//! absent policy and an empty rule list are left out of the canonical form, so a registry
//! without rules keeps its hashes.
//!
//! This file sits at the very bottom of the registry, under `descriptor`: it imports nothing
//! of the core (it owns [`CommandValue`], which `descriptor` re-exports), so it names its own band ([`RuleBand`]: a rule never claims in the operator band)
//! and its own quality names ([`QualityName`], the schema's `quality` enum by name); the
//! rules part maps both.

use serde::{Deserialize, Serialize};

/// A value a writable point can be commanded to (re-exported by `descriptor`, where the
/// `writable` section and `value_refusal` use it; it lives here, at the very bottom, because a
/// rule's claim and conditions carry it too), in the point's canonical unit: a number, a
/// bool, or a codebook member (the canonical name, never a native code). Untagged, so it reads
/// and writes as the bare JSON (or TOML) value; a number is always an `f64`, so an integer and
/// the same float compare equal after the canonical form's round trip.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
pub enum CommandValue {
    Bool(bool),
    Number(f64),
    Member(String),
}

impl CommandValue {
    /// The value of a JSON scalar, or `None` for null, an array or an object.
    pub fn from_json(value: &serde_json::Value) -> Option<CommandValue> {
        match value {
            serde_json::Value::Bool(b) => Some(CommandValue::Bool(*b)),
            serde_json::Value::Number(n) => n.as_f64().map(CommandValue::Number),
            serde_json::Value::String(s) => Some(CommandValue::Member(s.clone())),
            _ => None,
        }
    }

    /// As JSON, the way the command carries it to its driver.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            CommandValue::Bool(b) => serde_json::Value::Bool(*b),
            CommandValue::Number(v) => {
                serde_json::Number::from_f64(*v).map_or(serde_json::Value::Null, serde_json::Value::Number)
            }
            CommandValue::Member(m) => serde_json::Value::String(m.clone()),
        }
    }
}

/// At most this many rules in one registry.
pub const RULES_MAX: usize = 4_096;
/// At most this many inputs to one rule.
pub const RULE_INPUTS_MAX: usize = 16;
/// At most this many nodes (comparisons and connectives) in one condition.
pub const CONDITION_NODES_MAX: usize = 64;
/// The warmup deadline when a rule declares none (issue 22 item 1).
pub const WARMUP_DEADLINE_DEFAULT_S: u32 = 60;
/// The longest `for_s` and warmup deadline: a day.
pub const RULE_DURATION_MAX_S: u32 = 86_400;

/// A point's missing-data policy (sensor paradigm spec's vocabulary), declared once on the
/// point and read by derived points and rules alike: it decides when the point counts as lost
/// to a reader. A rule's [`OnInputLoss`] decides what the rule does then.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case", tag = "policy", deny_unknown_fields)]
pub enum MissingData {
    /// Lost as soon as the point is not `live`.
    FailClosed,
    /// The last `live` value stands in until it is older than `max_staleness_s`; lost after.
    HoldLastValid { max_staleness_s: u32 },
    /// A reader gets a marker instead of a value (it is lost at once, like `fail_closed`, but
    /// says so downstream); never admissible as an input of protection.
    EmitMarker,
}

/// The schema's `quality` enum, by name (see the module docs for why it is not `log::Quality`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum QualityName {
    Unknown,
    Restored,
    Live,
    Stale,
    Unavailable,
    Bad,
    Assumed,
}

/// A comparison's operator.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CompareOp {
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
}

/// A rule's condition: comparisons on an input's value (in its canonical unit) and on its
/// quality, joined by and, or and not.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// `<point> <op> <value>`: the input's committed value against a constant. Numbers compare
    /// as numbers; bools and codebook members only with `eq` / `ne`.
    Compare {
        point: String,
        op: CompareOp,
        value: CommandValue,
    },
    /// `quality(<point>) == <quality>` (`equals = false`: `!=`).
    Quality {
        point: String,
        equals: bool,
        quality: QualityName,
    },
    All(Vec<Condition>),
    Any(Vec<Condition>),
    Not(Box<Condition>),
}

impl Condition {
    /// Every point the condition reads, in order of first mention, each once.
    pub fn points(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        self.visit(&mut |c| {
            let point = match c {
                Condition::Compare { point, .. } | Condition::Quality { point, .. } => point.as_str(),
                _ => return,
            };
            if !out.contains(&point) {
                out.push(point);
            }
        });
        out
    }

    /// How many nodes the condition has (bounded by [`CONDITION_NODES_MAX`] at admission).
    pub fn nodes(&self) -> usize {
        let mut n = 0;
        self.visit(&mut |_| n += 1);
        n
    }

    fn visit<'a>(&'a self, f: &mut impl FnMut(&'a Condition)) {
        f(self);
        match self {
            Condition::All(items) | Condition::Any(items) => items.iter().for_each(|c| c.visit(f)),
            Condition::Not(inner) => inner.visit(f),
            Condition::Compare { .. } | Condition::Quality { .. } => {}
        }
    }
}

/// The band a rule claims in. A rule never claims as an operator.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "snake_case")]
pub enum RuleBand {
    Automation,
    Safety,
    Interlock,
}

impl RuleBand {
    pub fn as_str(self) -> &'static str {
        match self {
            RuleBand::Automation => "automation",
            RuleBand::Safety => "safety",
            RuleBand::Interlock => "interlock",
        }
    }

    /// Protection: a band whose inputs must declare a missing-data policy other than
    /// `emit_marker` (issue 22 item 2).
    pub fn is_protection(self) -> bool {
        matches!(self, RuleBand::Safety | RuleBand::Interlock)
    }
}

/// What a rule claims while its condition holds (after `for_s`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RuleClaim {
    pub band: RuleBand,
    /// Within the band, higher wins.
    #[serde(default)]
    pub priority: u8,
    pub value: CommandValue,
}

/// What a rule does when its condition stops holding, or when an input is lost.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum RuleFallback {
    /// Release its claim: the point goes to the next claim or its relinquish default.
    Release,
    /// Keep its claim as it stands (only meaningful on input loss).
    Hold,
    /// Claim this value instead (a safe value), in the rule's band and priority.
    Value(CommandValue),
}

/// A rule that fights is held (issue 22 item 8): more than `changes_max` changes of its claim
/// within `window_s` and it keeps its last state and is flagged.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FightLimit {
    pub changes_max: u32,
    pub window_s: u32,
}

/// One rule, resolved (issue 22 item 1). Stored in the descriptor of the point it claims.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Unique across the registry; a subject token path like a point id.
    pub id: String,
    /// The points the condition reads, as declared (each is read by the condition, and the
    /// condition reads no other).
    pub inputs: Vec<String>,
    /// The condition that starts the claim (the "on" threshold).
    pub when: Condition,
    /// The condition that ends it (the "off" threshold, for hysteresis); `None`: the claim
    /// ends as soon as `when` no longer holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<Condition>,
    /// How long `when` must hold, on committed data, before the claim is made; 0: at once.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub for_s: u32,
    /// The writable point claimed: the point whose descriptor carries the rule.
    pub point: String,
    pub claim: RuleClaim,
    /// What the rule does when the condition stops holding: `release` or a safe `value`.
    pub otherwise: RuleFallback,
    /// What it does when an input is lost (by the input's missing-data policy).
    pub on_input_loss: RuleFallback,
    /// How long a rule may stay in warmup waiting for its inputs to be `live`, counted only
    /// while staleness is not suppressed.
    pub warmup_deadline_s: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fight: Option<FightLimit>,
}

fn is_zero(v: &u32) -> bool {
    *v == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_lists_each_point_once_in_order_of_mention() {
        let c = Condition::All(vec![
            Condition::Compare {
                point: "b.x".into(),
                op: CompareOp::Gt,
                value: CommandValue::Number(1.0),
            },
            Condition::Not(Box::new(Condition::Quality {
                point: "a.y".into(),
                equals: true,
                quality: QualityName::Live,
            })),
            Condition::Compare {
                point: "b.x".into(),
                op: CompareOp::Lt,
                value: CommandValue::Number(9.0),
            },
        ]);
        assert_eq!(c.points(), ["b.x", "a.y"]);
        assert_eq!(c.nodes(), 5);
    }

    #[test]
    fn the_canonical_form_leaves_out_what_is_unset() {
        let rule = Rule {
            id: "r".into(),
            inputs: vec!["p".into()],
            when: Condition::Compare {
                point: "p".into(),
                op: CompareOp::Ge,
                value: CommandValue::Number(2.0),
            },
            until: None,
            for_s: 0,
            point: "w".into(),
            claim: RuleClaim {
                band: RuleBand::Automation,
                priority: 0,
                value: CommandValue::Bool(true),
            },
            otherwise: RuleFallback::Release,
            on_input_loss: RuleFallback::Value(CommandValue::Bool(false)),
            warmup_deadline_s: 60,
            fight: None,
        };
        let json = serde_json::to_string(&rule).unwrap();
        assert!(!json.contains("until") && !json.contains("for_s") && !json.contains("fight"));
        assert_eq!(serde_json::from_str::<Rule>(&json).unwrap(), rule);
        let policy: MissingData =
            serde_json::from_str(r#"{"policy":"hold_last_valid","max_staleness_s":300}"#).unwrap();
        assert_eq!(policy, MissingData::HoldLastValid { max_staleness_s: 300 });
    }
}
