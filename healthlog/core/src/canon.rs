//! The one canonical form and the one emptiness dictionary (spec: "Разрешение столкновений по
//! полноте", "Столкновением SHALL считаться расхождение канонических форм"; HEALTHLOG.md
//! "Canonical numbers").
//!
//! The canonical form absorbs key order and serialisation noise: object keys sorted, no
//! whitespace, strings re-escaped the one way serde_json escapes (never HTML-escaped), numbers
//! parsed to f64 with every zero printed `0`, integers within 2^53 printed as integers and any
//! other number rounded to 15 significant digits, so last-digit jitter is not a difference.
//! It exists only at the moment of comparison and hashing: stored points keep their bytes.
//!
//! For entities (routes of megabytes) the form is computed while the text is read
//! ([`stream_members`]), without a `serde_json::Value` tree, and fed to a hasher piece by piece
//! ([`feed_object`]); a test holds it equal to [`canonical`].

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

/// Whether a canonical form is the canonical form of an empty value ([`is_empty`] on the
/// parsed value): the one emptiness dictionary, read off the form instead of the value.
pub fn is_empty_canonical(form: &str) -> bool {
    matches!(form, "null" | "\"\"" | "0" | "[]" | "{}")
}

/// A value's canonical form computed while the JSON text is read, without building a
/// `serde_json::Value` (whose tree is many times the text): each object's members are
/// canonicalised into their own buffers, sorted, and joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Streamed {
    /// The canonical form.
    pub text: String,
    /// For an array: its length and how many of its elements are non-empty.
    pub elements: u64,
    pub nonempty_elements: u64,
}

/// A top-level object's members canonicalised as they were read: key, then its value.
pub type Members = Vec<(String, Streamed)>;

thread_local! {
    static STREAMED_FORMS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Calls of [`stream_members`] on this thread so far (a per-thread count, so parallel tests do
/// not see each other's).
pub fn streamed_forms_computed() -> u64 {
    STREAMED_FORMS.with(std::cell::Cell::get)
}

/// Reads `json` (one JSON object) into its members' canonical forms, sorted by key, the last
/// of duplicate keys kept (as `serde_json::Value` does). `None` when it is not a JSON object.
pub fn stream_members(json: &str) -> Option<Members> {
    STREAMED_FORMS.with(|c| c.set(c.get() + 1));
    use serde::de::DeserializeSeed as _;
    let mut de = serde_json::Deserializer::from_str(json);
    let members = TopObject.deserialize(&mut de).ok()?;
    de.end().ok()?;
    Some(members)
}

/// Joins sorted members into the object's canonical form, feeding it to `sink` piece by piece.
pub fn feed_object(members: &Members, mut sink: impl FnMut(&[u8])) {
    sink(b"{");
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            sink(b",");
        }
        let mut k = String::new();
        write_string(key, &mut k);
        sink(k.as_bytes());
        sink(b":");
        sink(value.text.as_bytes());
    }
    sink(b"}");
}

struct TopObject;

impl<'de> serde::de::DeserializeSeed<'de> for TopObject {
    type Value = Members;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Members, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Members, A::Error> {
                members(map)
            }
        }
        d.deserialize_map(V)
    }
}

fn members<'de, A: serde::de::MapAccess<'de>>(mut map: A) -> Result<Members, A::Error> {
    let mut out: Members = Vec::new();
    while let Some(key) = map.next_key::<String>()? {
        let value = map.next_value_seed(StreamSeed)?;
        out.push((key, value));
    }
    // Stable: among duplicate keys the last read stays last, and dedup keeps it.
    out.sort_by(|a, b| a.0.cmp(&b.0));
    let mut dedup: Members = Vec::with_capacity(out.len());
    for m in out {
        match dedup.last_mut() {
            Some(last) if last.0 == m.0 => *last = m,
            _ => dedup.push(m),
        }
    }
    Ok(dedup)
}

struct StreamSeed;

impl<'de> serde::de::DeserializeSeed<'de> for StreamSeed {
    type Value = Streamed;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Streamed, D::Error> {
        d.deserialize_any(StreamVisitor)
    }
}

struct StreamVisitor;

fn scalar(text: String) -> Streamed {
    Streamed {
        text,
        elements: 0,
        nonempty_elements: 0,
    }
}

impl<'de> serde::de::Visitor<'de> for StreamVisitor {
    type Value = Streamed;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Streamed, E> {
        Ok(scalar("null".into()))
    }
    fn visit_none<E>(self) -> Result<Streamed, E> {
        Ok(scalar("null".into()))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Streamed, E> {
        Ok(scalar(if v { "true" } else { "false" }.into()))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Streamed, E> {
        let mut out = String::new();
        write_number(&Number::from(v), &mut out);
        Ok(scalar(out))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Streamed, E> {
        let mut out = String::new();
        write_number(&Number::from(v), &mut out);
        Ok(scalar(out))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Streamed, E> {
        let n = Number::from_f64(v).ok_or_else(|| E::custom("a non-finite number"))?;
        let mut out = String::new();
        write_number(&n, &mut out);
        Ok(scalar(out))
    }
    fn visit_str<E>(self, v: &str) -> Result<Streamed, E> {
        let mut out = String::with_capacity(v.len() + 2);
        write_string(v, &mut out);
        Ok(scalar(out))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Streamed, A::Error> {
        let mut text = String::from("[");
        let (mut elements, mut nonempty_elements) = (0u64, 0u64);
        while let Some(item) = seq.next_element_seed(StreamSeed)? {
            if elements > 0 {
                text.push(',');
            }
            elements += 1;
            nonempty_elements += u64::from(!is_empty_canonical(&item.text));
            text.push_str(&item.text);
        }
        text.push(']');
        Ok(Streamed {
            text,
            elements,
            nonempty_elements,
        })
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Streamed, A::Error> {
        let ms = members(map)?;
        let mut text = String::new();
        feed_object(&ms, |b| text.push_str(std::str::from_utf8(b).unwrap_or_default()));
        Ok(scalar(text))
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
    fn the_streamed_form_is_the_canonical_form() {
        for text in [
            r#"{"b":[1,2.50,{"y":null,"x":-0}],"a":"a&b<c>\u00e9","c":{},"d":[],"e":1e300,"f":true}"#,
            r#"{"route":[{"lat":48.1371540000001,"lon":11.5},null,{}],"id":"W1","id":"W2"}"#,
            r#"{}"#,
        ] {
            let value: Value = serde_json::from_str(text).expect("parses");
            let members = stream_members(text).expect("an object");
            let mut streamed = Vec::new();
            feed_object(&members, |b| streamed.extend_from_slice(b));
            assert_eq!(
                String::from_utf8(streamed).expect("utf-8"),
                canonical(&value),
                "{text}"
            );
            for (key, m) in &members {
                assert_eq!(
                    is_empty_canonical(&m.text),
                    is_empty(&value[key.as_str()]),
                    "{key}"
                );
            }
        }
        let route = &stream_members(r#"{"route":[{"a":1},null,{},[],0,{"b":2}]}"#).expect("object")[0].1;
        assert_eq!((route.elements, route.nonempty_elements), (6, 2));
        assert_eq!(stream_members("[1,2]"), None);
        assert_eq!(stream_members("{\"a\":1} trailing"), None);
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
