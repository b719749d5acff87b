//! Point identity by coordinates and the completeness rule (spec: "Идентичность точки по
//! координатам", "Разрешение столкновений по полноте"; HEALTHLOG.md "Completeness tie-break").
//!
//! A point is addressed by metric + layer + start + end; a measurement's end is its start. The
//! metric and layer are the object's; inside an object a point is `(start_us, end_us)`.
//!
//! ## The rule, and why it is one total order
//! The spec asks for: drop every candidate beaten on completeness by another, then pick among
//! the rest by a total order, so that the winner is a function of the set of candidates and
//! never of arrival order. Completeness ("A dominates B") is: A's set of keys with a non-empty
//! value is a strict superset of B's and the values of their common non-empty keys agree
//! canonically; or the non-empty sets and values are equal and A's set of all keys (less
//! `source`) is a strict superset of B's.
//!
//! The total order used here is (more non-empty keys, then more keys, then the smaller
//! canonical form, then the smaller raw bytes). It *extends* dominance: a dominating
//! candidate always has more non-empty keys, or as many and more keys. So the minimum of this
//! order is never dominated, and "drop the dominated, take the minimum of the rest" equals
//! "take the minimum", which is associative: the winner of (stored winner + new candidates)
//! equals the winner of every candidate ever seen at the coordinate. That is what makes the
//! store a function of the journal for every permutation and every split of points across
//! deliveries, although an object keeps only one point per coordinate (property-tested in
//! `object` and in the io crate).
//!
//! The order's first two keys also implement HEALTHLOG.md's decision: a candidate whose
//! non-empty key set is a strict superset wins first; and the spec's "поля не теряются"
//! scenario ({date, qty, Min:0, Max:0} against {date, qty} with another qty) keeps Min and Max
//! because among equal non-empty sets the candidate with more keys precedes.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::canon;

/// The key that never takes part in completeness: HealthKit rewrites attribution afterwards.
pub const SOURCE_KEY: &str = "source";

/// One candidate for a coordinate: its arriving bytes, verbatim, and what the rule needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub start_us: i64,
    pub end_us: i64,
    /// The point's bytes exactly as they arrived.
    pub raw: Box<str>,
    /// Its canonical form (computed once, before any transaction).
    pub canonical: Box<str>,
    nonempty_keys: u32,
    all_keys: u32,
}

impl Candidate {
    /// A candidate from a value already parsed from `raw`.
    pub fn from_parsed(start_us: i64, end_us: i64, raw: &str, value: &Value) -> Self {
        assert!(
            end_us >= start_us,
            "invariant: a point ends at or after its start"
        );
        let (nonempty_keys, all_keys) = match value {
            Value::Object(map) => {
                let keys = map.iter().filter(|(k, _)| k.as_str() != SOURCE_KEY);
                let all = keys.clone().count();
                let nonempty = keys.filter(|(_, v)| !canon::is_empty(v)).count();
                (count_u32(nonempty), count_u32(all))
            }
            // Content that is not a JSON object carries the empty key set (spec).
            _ => (0, 0),
        };
        Self {
            start_us,
            end_us,
            raw: raw.into(),
            canonical: canon::canonical(value).into(),
            nonempty_keys,
            all_keys,
        }
    }

    /// A candidate from stored bytes. Bytes that are not JSON at all keep themselves as their
    /// canonical form (prefixed so they cannot equal a JSON form) and carry the empty key set.
    pub fn from_raw(start_us: i64, end_us: i64, raw: &str) -> Self {
        match serde_json::from_str::<Value>(raw) {
            Ok(value) => Self::from_parsed(start_us, end_us, raw, &value),
            Err(_) => Self {
                start_us,
                end_us,
                raw: raw.into(),
                canonical: format!("\u{0}{raw}").into(),
                nonempty_keys: 0,
                all_keys: 0,
            },
        }
    }

    pub fn coordinate(&self) -> (i64, i64) {
        (self.start_us, self.end_us)
    }
}

fn count_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The total order: `Less` means `a` wins over `b`.
pub fn precedence(a: &Candidate, b: &Candidate) -> Ordering {
    b.nonempty_keys
        .cmp(&a.nonempty_keys)
        .then(b.all_keys.cmp(&a.all_keys))
        .then_with(|| a.canonical.cmp(&b.canonical))
        .then_with(|| a.raw.cmp(&b.raw))
}

/// What resolving one coordinate found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resolution {
    /// Index of the winner in the candidate slice.
    pub winner: usize,
    /// Distinct canonical forms among the candidates: more than one is a collision.
    pub distinct_forms: usize,
    /// Some candidate's non-empty key set is incomparable with the winner's.
    pub incomparable: bool,
}

impl Resolution {
    pub fn is_collision(&self) -> bool {
        self.distinct_forms > 1
    }
}

/// Resolves the candidates of one coordinate. A function of the set: the result does not
/// depend on the order of `candidates` (beyond which equal candidate the index points at).
pub fn resolve(candidates: &[&Candidate]) -> Resolution {
    assert!(
        !candidates.is_empty(),
        "invariant: a coordinate has at least one candidate"
    );
    let mut winner = 0;
    for (i, c) in candidates.iter().enumerate().skip(1) {
        debug_assert_eq!(
            c.coordinate(),
            candidates[0].coordinate(),
            "candidates share a coordinate"
        );
        if precedence(c, candidates[winner]) == Ordering::Less {
            winner = i;
        }
    }
    let forms: BTreeSet<&str> = candidates.iter().map(|c| &*c.canonical).collect();
    let distinct_forms = forms.len();
    let mut incomparable = false;
    if distinct_forms > 1 {
        let w = KeySets::of(candidates[winner]);
        for c in candidates {
            if c.canonical == candidates[winner].canonical {
                continue;
            }
            let k = KeySets::of(c);
            debug_assert!(
                !k.dominates(&w),
                "invariant: the minimum of an order extending dominance is undominated"
            );
            incomparable |= k.incomparable_with(&w);
        }
    }
    Resolution {
        winner,
        distinct_forms,
        incomparable,
    }
}

/// The key sets of a candidate, derived from its canonical form only when a collision needs them.
#[derive(Debug, Default)]
pub struct KeySets {
    /// Non-empty keys (less `source`) with their canonical values.
    nonempty: BTreeMap<String, String>,
    /// Every key less `source`.
    all: BTreeSet<String>,
}

impl KeySets {
    pub fn of(c: &Candidate) -> Self {
        let Ok(Value::Object(map)) = serde_json::from_str::<Value>(&c.canonical) else {
            return Self::default();
        };
        let mut sets = Self::default();
        for (key, value) in map {
            if key == SOURCE_KEY {
                continue;
            }
            if !canon::is_empty(&value) {
                sets.nonempty.insert(key.clone(), canon::canonical(&value));
            }
            sets.all.insert(key);
        }
        sets
    }

    /// Spec "Разрешение столкновений по полноте": strict superset with the same content, or
    /// equal content and a strict superset of all keys.
    pub fn dominates(&self, other: &Self) -> bool {
        let same_common = other
            .nonempty
            .iter()
            .all(|(k, v)| self.nonempty.get(k).is_none_or(|mine| mine == v));
        if !same_common {
            return false;
        }
        let superset = other.nonempty.keys().all(|k| self.nonempty.contains_key(k));
        if superset && self.nonempty.len() > other.nonempty.len() {
            return true;
        }
        self.nonempty == other.nonempty
            && self.all.is_superset(&other.all)
            && self.all.len() > other.all.len()
    }

    /// Each carries a non-empty key the other lacks.
    pub fn incomparable_with(&self, other: &Self) -> bool {
        self.nonempty.keys().any(|k| !other.nonempty.contains_key(k))
            && other.nonempty.keys().any(|k| !self.nonempty.contains_key(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cand(raw: &str) -> Candidate {
        Candidate::from_raw(0, 0, raw)
    }

    fn winner_of(raws: &[&str]) -> String {
        let cands: Vec<Candidate> = raws.iter().map(|r| cand(r)).collect();
        let refs: Vec<&Candidate> = cands.iter().collect();
        cands[resolve(&refs).winner].raw.to_string()
    }

    #[test]
    fn superset_with_same_content_wins_either_way() {
        let rich = r#"{"date":"d","Avg":70,"Min":60,"Max":80,"context":"resting"}"#;
        let poor = r#"{"date":"d","Avg":70,"Min":60,"Max":80}"#;
        assert_eq!(winner_of(&[rich, poor]), rich);
        assert_eq!(winner_of(&[poor, rich]), rich);
    }

    #[test]
    fn dominance_needs_the_same_content() {
        let a = KeySets::of(&cand(r#"{"date":"d","qty":0.001,"p1":"x"}"#));
        let b = KeySets::of(&cand(r#"{"date":"d","qty":72.5}"#));
        assert!(!a.dominates(&b));
        let c = KeySets::of(&cand(r#"{"date":"d","qty":72.5,"p1":"x"}"#));
        assert!(c.dominates(&b));
        assert!(!b.dominates(&c));
    }

    fn arb_point() -> impl Strategy<Value = String> {
        let field = prop_oneof![
            Just("null".to_string()),
            Just("0".to_string()),
            Just("{}".to_string()),
            (1u8..4).prop_map(|v| v.to_string())
        ];
        (
            prop::collection::vec(prop::option::of(field), 4),
            prop::option::of("[ab]"),
            any::<bool>(),
        )
            .prop_map(|(fields, source, not_object)| {
                if not_object {
                    return "[1]".to_string();
                }
                let mut parts = vec![r#""date":"d""#.to_string()];
                for (i, f) in fields.iter().enumerate() {
                    if let Some(v) = f {
                        parts.push(format!("\"k{i}\":{v}"));
                    }
                }
                if let Some(s) = source {
                    parts.push(format!("\"source\":\"{s}\""));
                }
                format!("{{{}}}", parts.join(","))
            })
    }

    proptest! {
        /// The winner is a function of the set: every permutation, and folding any split of
        /// the candidates pairwise through a "stored winner", gives the same canonical form;
        /// and the winner is never dominated.
        #[test]
        fn winner_is_a_function_of_the_set(raws in prop::collection::vec(arb_point(), 1..7), split in 0usize..7, rot in 0usize..7) {
            let cands: Vec<Candidate> = raws.iter().map(|r| cand(r)).collect();
            let refs: Vec<&Candidate> = cands.iter().collect();
            let whole = cands[resolve(&refs).winner].canonical.clone();
            let mut rotated = refs.clone();
            let len = rotated.len();
            rotated.rotate_left(rot % len);
            prop_assert_eq!(&cands_winner(&rotated), &whole);
            let cut = split % len;
            let first = if cut == 0 { None } else { Some(resolve(&rotated[..cut]).winner) };
            let mut second: Vec<&Candidate> = rotated[cut..].to_vec();
            if let Some(w) = first { second.push(rotated[w]); }
            prop_assert_eq!(&cands_winner(&second), &whole);
            let w = KeySets::of(cands.iter().find(|c| c.canonical == whole).expect("winner is a candidate"));
            for c in &cands {
                prop_assert!(!KeySets::of(c).dominates(&w));
            }
        }
    }

    fn cands_winner(refs: &[&Candidate]) -> Box<str> {
        refs[resolve(refs).winner].canonical.clone()
    }
}
