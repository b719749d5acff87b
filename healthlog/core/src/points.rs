//! Point identity by coordinates and the completeness rule (spec: "Идентичность точки по
//! координатам", "Разрешение столкновений по полноте"; HEALTHLOG.md "Completeness is by sets").
//!
//! A point is addressed by metric + layer + start + end; a measurement's end is its start. The
//! metric and layer are the object's; inside an object a point is `(start_us, end_us)`.
//!
//! ## The rule, by sets
//! "A dominates B": A's set of keys with a non-empty value is a strict superset of B's and the
//! values of their common non-empty keys are canonically equal; or the non-empty sets and values
//! are equal and A's set of all keys (less `source`) is a strict superset of B's. [`resolve`]
//! drops every candidate dominated by another and picks among the rest by one total order on
//! the values themselves: the smaller canonical form, then the smaller raw bytes. The number of
//! keys never decides between differing values: `{date, qty:0.001, p1:null, p2:null}` and
//! `{date, qty:72.5}` are equally complete and the canonical order decides.
//!
//! ## Why the object keeps the undominated candidates
//! Dominance is a strict partial order (irreflexive and transitive), so a dominated candidate
//! is always dominated by an undominated one, and `undominated(S ∪ T) = undominated(undominated(S)
//! ∪ T)`. The winner, `min(undominated(S))`, is therefore a function of the set of every
//! candidate a coordinate has seen, in any order and split of deliveries — provided the object
//! keeps `undominated(S)`, not the winner alone: with a relation that is not a total order the
//! winner alone forgets a candidate that a later arrival would have let win (A beats B by the
//! order, C dominates A but not B: B must win over {A, B, C}). Candidates with one canonical
//! form are one candidate (the smaller raw bytes kept). The object's hash covers every kept
//! candidate, so the fingerprint does too: they decide future winners.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::canon;
use crate::limits::FORMS_PER_COORDINATE_MAX;

/// The key that never takes part in completeness: HealthKit rewrites attribution afterwards.
pub const SOURCE_KEY: &str = "source";

/// One candidate for a coordinate: its arriving bytes, verbatim, and its canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub start_us: i64,
    pub end_us: i64,
    /// The point's bytes exactly as they arrived.
    pub raw: Box<str>,
    /// Its canonical form (computed once, before any transaction).
    pub canonical: Box<str>,
}

impl Candidate {
    /// A candidate from a value already parsed from `raw`.
    pub fn from_parsed(start_us: i64, end_us: i64, raw: &str, value: &Value) -> Self {
        assert!(
            end_us >= start_us,
            "invariant: a point ends at or after its start"
        );
        Self {
            start_us,
            end_us,
            raw: raw.into(),
            canonical: canon::canonical(value).into(),
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
            },
        }
    }

    pub fn coordinate(&self) -> (i64, i64) {
        (self.start_us, self.end_us)
    }
}

/// The total order among undominated candidates: `Less` means `a` wins over `b`.
pub fn precedence(a: &Candidate, b: &Candidate) -> Ordering {
    a.canonical.cmp(&b.canonical).then_with(|| a.raw.cmp(&b.raw))
}

/// What resolving one coordinate found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// Index of the winner in the candidate slice.
    pub winner: usize,
    /// Indices of the undominated candidates, one per canonical form, the winner first and the
    /// rest in canonical order: what the object keeps for this coordinate.
    pub kept: Vec<usize>,
    /// Distinct canonical forms among the candidates.
    pub distinct_forms: usize,
    /// Some kept candidate's non-empty key set is incomparable with the winner's.
    pub incomparable: bool,
}

/// More distinct canonical forms at one coordinate than [`FORMS_PER_COORDINATE_MAX`]: choosing
/// among them is quadratic, and no phone sends that many versions of one measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("more than {FORMS_PER_COORDINATE_MAX} distinct versions of one point")]
pub struct TooManyForms;

/// Resolves the candidates of one coordinate: drop the dominated, take the minimum of the rest
/// by [`precedence`]. A function of the set: the result (as canonical forms and bytes) does not
/// depend on the order of `candidates`.
pub fn resolve(candidates: &[&Candidate]) -> Result<Resolution, TooManyForms> {
    assert!(
        !candidates.is_empty(),
        "invariant: a coordinate has at least one candidate"
    );
    // One candidate per canonical form: the smaller raw bytes.
    let mut by_form: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, c) in candidates.iter().enumerate() {
        debug_assert_eq!(
            c.coordinate(),
            candidates[0].coordinate(),
            "candidates share a coordinate"
        );
        by_form
            .entry(&c.canonical)
            .and_modify(|at| {
                if c.raw < candidates[*at].raw {
                    *at = i;
                }
            })
            .or_insert(i);
        if by_form.len() > FORMS_PER_COORDINATE_MAX {
            return Err(TooManyForms);
        }
    }
    let distinct_forms = by_form.len();
    let forms: Vec<usize> = by_form.into_values().collect();
    if forms.len() == 1 {
        return Ok(Resolution {
            winner: forms[0],
            kept: forms,
            distinct_forms,
            incomparable: false,
        });
    }
    let sets: Vec<KeySets> = forms.iter().map(|&i| KeySets::of(candidates[i])).collect();
    let undominated: Vec<usize> = (0..forms.len())
        .filter(|&a| !(0..forms.len()).any(|b| b != a && sets[b].dominates(&sets[a])))
        .collect();
    assert!(
        !undominated.is_empty(),
        "invariant: a strict partial order on a finite set has a maximal element"
    );
    // `forms` is in canonical order, so the first undominated is the minimum by precedence.
    let w = undominated[0];
    let incomparable = undominated[1..]
        .iter()
        .any(|&u| sets[u].incomparable_with(&sets[w]));
    Ok(Resolution {
        winner: forms[w],
        kept: undominated.iter().map(|&u| forms[u]).collect(),
        distinct_forms,
        incomparable,
    })
}

/// The key sets of a candidate, derived from its canonical form only when a coordinate sees
/// more than one form.
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
            // Content that is not a JSON object carries the empty key set (spec).
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
        cands[resolve(&refs).expect("resolves").winner].raw.to_string()
    }

    #[test]
    fn superset_with_same_content_wins_either_way() {
        let rich = r#"{"date":"d","Avg":70,"Min":60,"Max":80,"context":"resting"}"#;
        let poor = r#"{"date":"d","Avg":70,"Min":60,"Max":80}"#;
        assert_eq!(winner_of(&[rich, poor]), rich);
        assert_eq!(winner_of(&[poor, rich]), rich);
    }

    #[test]
    fn the_number_of_keys_never_decides_between_differing_values() {
        // Non-empty sets equal ({date, qty}), values differ: equally complete, canonical order.
        let hollow = r#"{"date":"d","qty":0.001,"p1":null,"p2":null}"#;
        let real = r#"{"date":"d","qty":72.5}"#;
        assert_eq!(winner_of(&[hollow, real]), winner_of(&[real, hollow]));
        // The key-richer candidate loses when its canonical form sorts after.
        let more_keys = r#"{"date":"d","qty":90,"z1":null,"z2":0}"#;
        assert_eq!(winner_of(&[more_keys, real]), real);
        assert_eq!(winner_of(&[real, more_keys]), real);
        // Incomparable sets: the same canonical order, not the count of non-empty keys.
        let a = r#"{"date":"d","a":1,"b":2,"c":3}"#;
        let z = r#"{"date":"d","0":1}"#;
        assert_eq!(winner_of(&[a, z]), z);
    }

    #[test]
    fn the_first_rank_keeps_content_the_canonical_order_would_drop() {
        // A strict superset of non-empty keys with the same common values. A superset's
        // canonical form usually sorts first anyway; here it does not (`"Heart"` vs
        // `"Heart Rate"`: `"` > ` `), so only dominance keeps the richer point.
        let rich = r#"{"Heart":5,"Heart Rate":70,"date":"d"}"#;
        let poor = r#"{"Heart Rate":70,"date":"d"}"#;
        assert!(cand(poor).canonical < cand(rich).canonical);
        assert_eq!(winner_of(&[rich, poor]), rich);
        assert_eq!(winner_of(&[poor, rich]), rich);
    }

    #[test]
    fn the_second_rank_keeps_keys_the_canonical_order_would_drop() {
        // Equal non-empty keys and values; `rich` also has an empty `Protection`. Its canonical
        // form sorts after `poor`'s (`"Protection"` vs `"Protection Used"`: `"` > ` `), so
        // only the second rank of dominance (a strict superset of all keys) keeps it.
        let rich = r#"{"Protection":0,"Protection Used":1,"date":"d"}"#;
        let poor = r#"{"Protection Used":1,"date":"d"}"#;
        assert!(cand(poor).canonical < cand(rich).canonical);
        assert_eq!(winner_of(&[rich, poor]), rich);
        assert_eq!(winner_of(&[poor, rich]), rich);
    }

    #[test]
    fn the_object_keeps_what_a_later_candidate_needs() {
        // A precedes B by the order and neither dominates the other; C dominates A but not B,
        // and B precedes C. Over {A, B, C} B must win; an object that kept only A after {A, B}
        // would answer C.
        let a = cand(r#"{"a":null,"date":"d","qty":1}"#);
        let b = cand(r#"{"date":"d","qty":-3}"#);
        let c = cand(r#"{"date":"d","qty":1,"x":5}"#);
        let first = resolve(&[&a, &b]).expect("resolves");
        assert_eq!(first.winner, 0, "A wins over {{A, B}}");
        assert_eq!(first.kept, vec![0, 1], "and B is kept beside it");
        let all = resolve(&[&a, &b, &c]).expect("resolves");
        assert_eq!(all.winner, 1, "B wins over {{A, B, C}}");
        let winner_alone = resolve(&[&a, &c]).expect("resolves");
        assert_eq!(winner_alone.winner, 1, "the winner alone would have let C win");
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
        /// the candidates through what an object keeps (the undominated ones), gives the same
        /// canonical form; and the winner is never dominated.
        #[test]
        fn winner_is_a_function_of_the_set(raws in prop::collection::vec(arb_point(), 1..7), split in 0usize..7, rot in 0usize..7) {
            let cands: Vec<Candidate> = raws.iter().map(|r| cand(r)).collect();
            let refs: Vec<&Candidate> = cands.iter().collect();
            let whole = cands_winner(&refs);
            let mut rotated = refs.clone();
            let len = rotated.len();
            rotated.rotate_left(rot % len);
            prop_assert_eq!(&cands_winner(&rotated), &whole);
            let cut = split % len;
            let mut second: Vec<&Candidate> = rotated[cut..].to_vec();
            if cut > 0 {
                let kept = resolve(&rotated[..cut]).expect("resolves").kept;
                second.extend(kept.iter().map(|&i| rotated[i]));
            }
            prop_assert_eq!(&cands_winner(&second), &whole);
            let w = KeySets::of(cands.iter().find(|c| c.canonical == whole).expect("winner is a candidate"));
            for c in &cands {
                prop_assert!(!KeySets::of(c).dominates(&w));
            }
        }
    }

    fn cands_winner(refs: &[&Candidate]) -> Box<str> {
        refs[resolve(refs).expect("resolves").winner].canonical.clone()
    }
}
