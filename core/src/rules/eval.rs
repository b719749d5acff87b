//! A rule's condition against its inputs' readings (issue 22 items 1–3; core runtime spec,
//! "Rules"; sensor paradigm spec, "Missing data").
//!
//! Owns: what an input's reading is to a rule ([`Reading`], [`InputSpec`]), when it is usable
//! or stands in by `hold_last_valid` or is lost ([`resolve`]), and the value of a condition
//! ([`evaluate`]): `Ok(holds)` or [`Lost`] when a value comparison reads a lost input. A
//! `quality(x)` comparison reads the reading's quality and never makes an input lost.
//!
//! Pure: no core state, time passed in, so a reference evaluation (the simulator's) can be
//! written beside it and compared.

use crate::log::{CanonicalValue, Quality};
use crate::registry::CommandValue;
use crate::registry::rule::{CompareOp, Condition, MissingData, QualityName};
use crate::time::Micros;

/// What a rule needs to know about one of its inputs, from the registry.
#[derive(Clone, Debug, PartialEq)]
pub struct InputSpec {
    /// `freshness_s`: a live reading is usable while `observed_at` + this is ahead of now.
    pub freshness_us: i64,
    /// How far apart two consecutive committed rows may be before the log has a gap: the
    /// point's `heartbeat_s` when it declares one (never past `freshness_s`), else
    /// `freshness_s` (the watchdog's deadline).
    pub gap_us: i64,
    pub missing: Option<MissingData>,
}

/// One input as the projection shows it, and the last value that was usable.
#[derive(Clone, Debug, PartialEq)]
pub struct Reading {
    pub value: Option<CanonicalValue>,
    pub quality: Quality,
    pub observed_at: Option<Micros>,
    /// The last value read while the input was usable, and its `observed_at`: what
    /// `hold_last_valid` stands in with.
    pub last_valid: Option<(CanonicalValue, Micros)>,
}

impl Reading {
    pub fn unknown() -> Reading {
        Reading {
            value: None,
            quality: Quality::Unknown,
            observed_at: None,
            last_valid: None,
        }
    }
}

/// How an input reads now.
#[derive(Clone, Debug, PartialEq)]
pub enum Resolved<'a> {
    /// Live and current: its own value.
    Usable(&'a CanonicalValue),
    /// Not usable, its policy `hold_last_valid`, and the last usable value young enough: it
    /// stands in until `until`.
    StandIn {
        value: &'a CanonicalValue,
        until: Micros,
    },
    Lost,
}

/// Whether `reading` is usable at `now`: `live`, with a value, and current.
pub fn usable(spec: &InputSpec, reading: &Reading, now: Micros) -> bool {
    reading.quality == Quality::Live
        && reading.value.is_some()
        && reading
            .observed_at
            .is_some_and(|o| o.0.saturating_add(spec.freshness_us) > now.0)
}

/// When a usable reading stops being current (its `observed_at` plus freshness).
pub fn usable_until(spec: &InputSpec, reading: &Reading) -> Option<Micros> {
    reading
        .observed_at
        .map(|o| Micros(o.0.saturating_add(spec.freshness_us)))
}

/// How `reading` reads at `now` under its point's missing-data policy.
pub fn resolve<'a>(spec: &InputSpec, reading: &'a Reading, now: Micros) -> Resolved<'a> {
    if usable(spec, reading, now)
        && let Some(value) = &reading.value
    {
        return Resolved::Usable(value);
    }
    if let Some(MissingData::HoldLastValid { max_staleness_s }) = spec.missing
        && let Some((value, at)) = &reading.last_valid
    {
        let until = Micros(at.0.saturating_add(i64::from(max_staleness_s) * 1_000_000));
        if until > now {
            return Resolved::StandIn { value, until };
        }
    }
    Resolved::Lost
}

/// A value comparison read an input that is lost.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Lost;

/// The value of `condition` at `now`, each point's reading from `reading` (`None`: the point
/// is not an input, read as lost). Every node is evaluated (no short cut), so a lost input
/// anywhere in a value comparison makes the whole condition [`Lost`].
pub fn evaluate<'a>(
    condition: &Condition,
    reading: &impl Fn(&str) -> Option<(&'a InputSpec, &'a Reading)>,
    now: Micros,
) -> Result<bool, Lost> {
    match condition {
        Condition::Compare { point, op, value } => {
            let Some((spec, r)) = reading(point) else {
                return Err(Lost);
            };
            match resolve(spec, r, now) {
                Resolved::Usable(v) | Resolved::StandIn { value: v, .. } => Ok(compare(v, *op, value)),
                Resolved::Lost => Err(Lost),
            }
        }
        Condition::Quality {
            point,
            equals,
            quality,
        } => {
            let q = reading(point).map_or(Quality::Unknown, |(_, r)| r.quality);
            Ok((quality_name(q) == *quality) == *equals)
        }
        Condition::All(items) => {
            let mut all = true;
            let mut lost = false;
            for item in items {
                match evaluate(item, reading, now) {
                    Ok(holds) => all &= holds,
                    Err(Lost) => lost = true,
                }
            }
            if lost { Err(Lost) } else { Ok(all) }
        }
        Condition::Any(items) => {
            let mut any = false;
            let mut lost = false;
            for item in items {
                match evaluate(item, reading, now) {
                    Ok(holds) => any |= holds,
                    Err(Lost) => lost = true,
                }
            }
            if lost { Err(Lost) } else { Ok(any) }
        }
        Condition::Not(inner) => evaluate(inner, reading, now).map(|holds| !holds),
    }
}

/// Every point a value comparison of `condition` reads (not those only `quality(x)` reads),
/// each once, in order of first mention.
pub fn compared_points(condition: &Condition) -> Vec<&str> {
    fn walk<'a>(c: &'a Condition, out: &mut Vec<&'a str>) {
        match c {
            Condition::Compare { point, .. } => {
                if !out.contains(&point.as_str()) {
                    out.push(point);
                }
            }
            Condition::Quality { .. } => {}
            Condition::All(items) | Condition::Any(items) => items.iter().for_each(|i| walk(i, out)),
            Condition::Not(inner) => walk(inner, out),
        }
    }
    let mut out = Vec::new();
    walk(condition, &mut out);
    out
}

/// `value <op> constant`: numbers as numbers (NaN compares false); bools and codebook members
/// only with `eq` / `ne`; a value of another type than the constant never holds.
pub fn compare(value: &CanonicalValue, op: CompareOp, constant: &CommandValue) -> bool {
    match (value, constant) {
        (CanonicalValue::Num(a), CommandValue::Number(b)) => match op {
            CompareOp::Lt => a < b,
            CompareOp::Le => a <= b,
            CompareOp::Gt => a > b,
            CompareOp::Ge => a >= b,
            CompareOp::Eq => a == b,
            CompareOp::Ne => a != b,
        },
        (CanonicalValue::Bool(a), CommandValue::Bool(b)) => equality(op, a == b),
        (CanonicalValue::Text(a), CommandValue::Member(b)) => equality(op, **a == **b),
        _ => false,
    }
}

fn equality(op: CompareOp, equal: bool) -> bool {
    match op {
        CompareOp::Eq => equal,
        CompareOp::Ne => !equal,
        _ => false,
    }
}

/// The schema's quality by the registry's name for it.
pub fn quality_name(q: Quality) -> QualityName {
    match q {
        Quality::Unknown => QualityName::Unknown,
        Quality::Restored => QualityName::Restored,
        Quality::Live => QualityName::Live,
        Quality::Stale => QualityName::Stale,
        Quality::Unavailable => QualityName::Unavailable,
        Quality::Bad => QualityName::Bad,
        Quality::Assumed => QualityName::Assumed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Micros = Micros(1_796_000_000_000_000);

    fn spec(missing: Option<MissingData>) -> InputSpec {
        InputSpec {
            freshness_us: 60_000_000,
            gap_us: 60_000_000,
            missing,
        }
    }

    fn live(v: f64, at: Micros) -> Reading {
        Reading {
            value: Some(CanonicalValue::Num(v)),
            quality: Quality::Live,
            observed_at: Some(at),
            last_valid: Some((CanonicalValue::Num(v), at)),
        }
    }

    fn cmp(point: &str, op: CompareOp, v: f64) -> Condition {
        Condition::Compare {
            point: point.into(),
            op,
            value: CommandValue::Number(v),
        }
    }

    fn eval_one(c: &Condition, s: &InputSpec, r: &Reading, now: Micros) -> Result<bool, Lost> {
        evaluate(c, &|p: &str| (p == "x").then_some((s, r)), now)
    }

    #[test]
    fn each_operator_compares_numbers() {
        let s = spec(None);
        let r = live(5.0, T);
        let cases = [
            (CompareOp::Lt, 6.0, true),
            (CompareOp::Lt, 5.0, false),
            (CompareOp::Le, 5.0, true),
            (CompareOp::Le, 4.0, false),
            (CompareOp::Gt, 4.0, true),
            (CompareOp::Gt, 5.0, false),
            (CompareOp::Ge, 5.0, true),
            (CompareOp::Ge, 6.0, false),
            (CompareOp::Eq, 5.0, true),
            (CompareOp::Eq, 5.5, false),
            (CompareOp::Ne, 5.5, true),
            (CompareOp::Ne, 5.0, false),
        ];
        for (op, constant, holds) in cases {
            assert_eq!(
                eval_one(&cmp("x", op, constant), &s, &r, T),
                Ok(holds),
                "5 {op:?} {constant}"
            );
        }
    }

    #[test]
    fn bools_and_members_compare_only_for_equality() {
        let b = CanonicalValue::Bool(true);
        assert!(compare(&b, CompareOp::Eq, &CommandValue::Bool(true)));
        assert!(compare(&b, CompareOp::Ne, &CommandValue::Bool(false)));
        assert!(!compare(&b, CompareOp::Gt, &CommandValue::Bool(false)));
        let m = CanonicalValue::Text("on".into());
        assert!(compare(&m, CompareOp::Eq, &CommandValue::Member("on".into())));
        assert!(!compare(&m, CompareOp::Eq, &CommandValue::Member("off".into())));
        assert!(
            !compare(&m, CompareOp::Eq, &CommandValue::Number(1.0)),
            "another type"
        );
    }

    #[test]
    fn connectives_combine_and_a_lost_input_anywhere_loses_the_condition() {
        let s = spec(None);
        let r = live(5.0, T);
        let yes = cmp("x", CompareOp::Gt, 1.0);
        let no = cmp("x", CompareOp::Lt, 1.0);
        let all = Condition::All(vec![yes.clone(), no.clone()]);
        let any = Condition::Any(vec![yes.clone(), no.clone()]);
        assert_eq!(eval_one(&all, &s, &r, T), Ok(false));
        assert_eq!(eval_one(&any, &s, &r, T), Ok(true));
        assert_eq!(eval_one(&Condition::Not(Box::new(all)), &s, &r, T), Ok(true));
        // `y` is not readable: an `any` that already holds is still lost.
        let with_lost = Condition::Any(vec![yes, cmp("y", CompareOp::Gt, 0.0)]);
        assert_eq!(eval_one(&with_lost, &s, &r, T), Err(Lost));
        let quality = Condition::Quality {
            point: "q".into(),
            equals: true,
            quality: QualityName::Live,
        };
        let mixed = Condition::Not(Box::new(Condition::All(vec![
            quality,
            cmp("y", CompareOp::Gt, 0.0),
            cmp("x", CompareOp::Gt, 0.0),
        ])));
        assert_eq!(
            compared_points(&mixed),
            ["y", "x"],
            "not q, read only for its quality"
        );
    }

    #[test]
    fn a_reading_is_usable_only_live_and_current() {
        let s = spec(None);
        let c = cmp("x", CompareOp::Gt, 1.0);
        let r = live(5.0, T);
        assert_eq!(eval_one(&c, &s, &r, T.add_ms(59_999)), Ok(true));
        assert_eq!(
            eval_one(&c, &s, &r, T.add_ms(60_000)),
            Err(Lost),
            "freshness passed"
        );
        for quality in [Quality::Stale, Quality::Restored, Quality::Bad, Quality::Unknown] {
            let r = Reading {
                quality,
                ..live(5.0, T)
            };
            assert_eq!(eval_one(&c, &s, &r, T), Err(Lost), "{quality:?}");
        }
        for policy in [MissingData::FailClosed, MissingData::EmitMarker] {
            let r = Reading {
                quality: Quality::Stale,
                ..live(5.0, T)
            };
            assert_eq!(eval_one(&c, &spec(Some(policy)), &r, T), Err(Lost), "{policy:?}");
        }
    }

    #[test]
    fn quality_comparisons_read_the_quality_and_never_lose_an_input() {
        let s = spec(None);
        let stale = Reading {
            quality: Quality::Stale,
            ..live(5.0, T)
        };
        let is_stale = Condition::Quality {
            point: "x".into(),
            equals: true,
            quality: QualityName::Stale,
        };
        let not_live = Condition::Quality {
            point: "x".into(),
            equals: false,
            quality: QualityName::Live,
        };
        assert_eq!(eval_one(&is_stale, &s, &stale, T.add_ms(999_000)), Ok(true));
        assert_eq!(eval_one(&not_live, &s, &stale, T), Ok(true));
        assert_eq!(eval_one(&not_live, &s, &live(5.0, T), T), Ok(false));
    }

    #[test]
    fn hold_last_valid_stands_in_until_its_maximum_staleness() {
        let s = spec(Some(MissingData::HoldLastValid { max_staleness_s: 300 }));
        let c = cmp("x", CompareOp::Gt, 1.0);
        // Stale since T+60 s; its last usable value, observed at T, stands in until T+300 s.
        let r = Reading {
            quality: Quality::Stale,
            ..live(5.0, T)
        };
        assert_eq!(eval_one(&c, &s, &r, T.add_ms(299_999)), Ok(true));
        assert!(matches!(
            resolve(&s, &r, T.add_ms(100_000)),
            Resolved::StandIn { until, .. } if until == T.add_ms(300_000)
        ));
        assert_eq!(eval_one(&c, &s, &r, T.add_ms(300_000)), Err(Lost), "expired");
        // No usable value ever: nothing stands in.
        let never = Reading {
            last_valid: None,
            ..r
        };
        assert_eq!(eval_one(&c, &s, &never, T), Err(Lost));
    }
}
