//! The one canonical form and the one emptiness dictionary (spec: "Разрешение столкновений по
//! полноте", "Столкновением SHALL считаться расхождение канонических форм"; HEALTHLOG.md
//! "Canonical numbers").
//!
//! The canonical form absorbs key order and serialisation noise: object keys sorted, no
//! whitespace, strings re-escaped the one way serde_json escapes (never HTML-escaped), numbers
//! parsed to f64 with every zero printed `0`, integers within 2^53 printed as integers and any
//! other number rounded to 15 significant digits, so last-digit jitter is not a difference.
//! It exists only at the moment of comparison and hashing: stored points keep their bytes.

use serde_json::{Number, Value};

/// 2^53: integers up to this magnitude are exact in f64 and print as integers.
const EXACT_INTEGER_MAX: f64 = 9_007_199_254_740_992.0;
/// Significant digits kept by the canonical form of a non-integer number.
const SIGNIFICANT_DIGITS: usize = 15;

/// The canonical form of `value`.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

/// Appends the canonical form of `value` to `out`.
pub fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(n, out),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            // serde_json's Map is a BTreeMap here (no `preserve_order`): keys come sorted.
            out.push('{');
            for (i, (key, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_string(key, out);
                out.push(':');
                write_canonical(item, out);
            }
            out.push('}');
        }
    }
}

/// Whether a parsed value carries no content: null, the empty string, a number equal to zero
/// (in any spelling: `0`, `0.0`, `0e0`, `-0`), the empty object, the empty array. `false` is
/// content (a boolean's other value, not an absence).
pub fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(_) => false,
        Value::Number(n) => n.as_f64().is_some_and(|f| f == 0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
    }
}

fn write_number(n: &Number, out: &mut String) {
    use std::fmt::Write as _;
    let Some(f) = n.as_f64() else {
        // Without `arbitrary_precision` every serde_json number has an f64 view.
        out.push_str(&n.to_string());
        return;
    };
    if f == 0.0 {
        out.push('0');
        return;
    }
    if f.fract() == 0.0 && f.abs() <= EXACT_INTEGER_MAX {
        // Exact: an integer-valued f64 within 2^53 converts without loss.
        let _ = write!(out, "{}", f as i64);
        return;
    }
    let rounded: f64 = format!("{:.*e}", SIGNIFICANT_DIGITS - 1, f).parse().unwrap_or(f);
    if rounded.fract() == 0.0 && rounded.abs() <= EXACT_INTEGER_MAX {
        let _ = write!(out, "{}", rounded as i64);
    } else {
        let _ = write!(out, "{rounded:e}");
    }
}

fn write_string(s: &str, out: &mut String) {
    // serde_json escapes only what JSON requires (quotes, backslash, control characters):
    // `&`, `<` and `>` stay as they are.
    match serde_json::to_string(s) {
        Ok(escaped) => out.push_str(&escaped),
        Err(_) => out.push_str("\"\""), // unreachable: serialising a str cannot fail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon_of(text: &str) -> String {
        canonical(&serde_json::from_str(text).expect("test JSON parses"))
    }

    #[test]
    fn key_order_and_whitespace_are_absorbed() {
        assert_eq!(
            canon_of(r#"{ "b": 1, "a": [ 2, {"y":1,"x":2} ] }"#),
            canon_of(r#"{"a":[2,{"x":2,"y":1}],"b":1}"#)
        );
    }

    #[test]
    fn last_digit_jitter_is_absorbed_but_real_differences_are_not() {
        assert_eq!(canon_of("72.53400000000001"), canon_of("72.534"));
        assert_eq!(canon_of("0.30000000000000004"), canon_of("0.3"));
        assert_ne!(canon_of("72.534"), canon_of("72.535"));
        assert_eq!(canon_of("1e2"), "100");
        assert_eq!(canon_of("100.0"), "100");
        assert_eq!(canon_of("-0"), "0");
        assert_eq!(canon_of("0e0"), "0");
    }

    #[test]
    fn strings_are_not_html_escaped() {
        assert_eq!(canon_of(r#""a&b<c>""#), r#""a&b<c>""#);
    }

    #[test]
    fn emptiness_is_judged_on_the_parsed_value() {
        for empty in ["null", "\"\"", "0", "0.0", "0e0", "-0", "{ }", "[]", "{}"] {
            assert!(is_empty(&serde_json::from_str(empty).expect("parses")), "{empty}");
        }
        for full in ["false", "true", "\" \"", "1e-300", "[0]", "{\"a\":null}"] {
            assert!(!is_empty(&serde_json::from_str(full).expect("parses")), "{full}");
        }
    }
}
