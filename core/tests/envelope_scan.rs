//! The envelope scanner against serde_json (issue 24 item 3): for every payload,
//! [`decode_envelope`] (the hand-written scanner, serde when it is not sure) answers exactly
//! what [`decode_envelope_serde`] answers — the same fields bit for bit (a number's bits, a
//! string's borrowed or owned form, `detail`'s text) or the same refusal and detail text — on
//! generated envelopes (random key order and whitespace, optional fields present, absent or
//! null, escapes, unicode, every value form, nested `detail` objects whose strings hold braces
//! and quotes, unknown keys, duplicates, exotic numbers) and on the same bytes mutated
//! (truncated, a byte changed, inserted or deleted). And the scanner is taken: the common
//! envelope, the bench's shapes included, never falls back.

use proptest::prelude::*;
use sentinel_core::time::Micros;
use sentinel_core::wire::{
    EnvelopeOut, decode_envelope, decode_envelope_scanned, decode_envelope_serde, decoding_difference,
};

/// Whitespace JSON allows, weighted towards none.
const WHITESPACE: [&str; 8] = ["", "", "", "", " ", "\n", "\t", "\r\n  "];

/// A key or string's text as it would be written, quotes included.
fn quoted(text: &str) -> String {
    format!("\"{text}\"")
}

/// Strings that need no escape: ASCII ids, and text with multi-byte characters and the
/// characters JSON's structure uses.
fn plain_text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z][a-z0-9._-]{0,23}",
        2 => "[a-zé漢😀 ./{}\\[\\]:,']{0,20}",
    ]
}

/// A string token: mostly plain, sometimes escaped (`\"`, `\\`, `\n`, `\u…`, surrogate pairs),
/// empty, over a field's limit, or holding a raw control character (not JSON).
fn string_token() -> BoxedStrategy<String> {
    prop_oneof![
        40 => valid_string_token(),
        1 => Just("\"a\tb\"".to_owned()),
    ]
    .boxed()
}

/// String tokens that are JSON.
fn valid_string_token() -> BoxedStrategy<String> {
    prop_oneof![
        8 => plain_text().prop_map(|s| quoted(&s)),
        2 => any::<String>().prop_map(|s| serde_json::to_string(&s).expect("a string encodes")),
        1 => "[a-z]{1,6}".prop_map(|s| quoted(&s.chars().map(|c| format!("\\u{:04x}", c as u32)).collect::<String>())),
        1 => "[a-z]{0,5}".prop_map(|s| format!("\"{s}\\\"{{}}\\\\\"")),
        1 => Just("\"\\ud83d\\ude00 \\/ \\b\\f\\r\\t\"".to_owned()),
        1 => Just("\"\"".to_owned()),
        1 => Just(quoted(&"p".repeat(300))),
    ]
    .boxed()
}

/// Numbers: every form serde_json's float and integer paths take, and some it refuses.
fn number_token() -> BoxedStrategy<String> {
    prop_oneof![
        40 => valid_number_token(),
        1 => prop::sample::select(vec!["01", "1.", ".5", "+1", "1e", "--1", "NaN", "Infinity", "-"])
            .prop_map(str::to_owned),
    ]
    .boxed()
}

/// Number tokens in JSON's grammar (some beyond `f64`, which serde refuses as values).
fn valid_number_token() -> BoxedStrategy<String> {
    prop_oneof![
        3 => (-2_000i64..2_000, 0u32..4).prop_map(|(n, k)| serde_json::to_string(&(n as f64 / 10f64.powi(k as i32))).expect("finite")),
        2 => any::<i64>().prop_map(|n| n.to_string()),
        1 => any::<u64>().prop_map(|n| n.to_string()),
        2 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| serde_json::to_string(&f).expect("finite")),
        1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:?}")),
        1 => any::<f64>().prop_filter("finite", |f| f.is_finite()).prop_map(|f| format!("{f:e}")),
        3 => "-?(0|[1-9][0-9]{0,24})(\\.[0-9]{1,20})?([eE][+-]?[0-9]{1,3})?",
        1 => prop::sample::select(vec![
            "-0", "-0.0", "0.0", "1e400", "-1e400", "1e-400", "9007199254740993", "9007199254740993.0",
            "0.1e1", "4.9e-324", "1.7976931348623157e308", "1e22", "1e23", "123456789012345678901234567890",
            "18446744073709551616", "-9223372036854775809", "1e99999999999", "0e99999999999",
            "-0e-99999999999",
        ])
        .prop_map(str::to_owned),
    ]
    .boxed()
}

/// An integer field's token (`v`, `source_epoch`, `source_seq`): in and out of range, and not
/// integers at all.
fn integer_token() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0u64..100_000).prop_map(|n| n.to_string()),
        2 => any::<u32>().prop_map(|n| n.to_string()),
        2 => any::<u64>().prop_map(|n| n.to_string()),
        1 => prop::sample::select(vec![
            "0", "2147483647", "2147483648", "4294967295", "4294967296", "9223372036854775807",
            "9223372036854775808", "18446744073709551615", "18446744073709551616", "-1", "-0", "1.0",
            "1e2", "01", "\"1\"", "null", "true",
        ])
        .prop_map(str::to_owned),
    ]
}

/// `observed_at` and `device_time`: the envelope's own form, other RFC 3339 forms, and not
/// timestamps.
fn timestamp_token() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => (0i64..4_000_000_000_000_000).prop_map(|us| quoted(&Micros(us).to_rfc3339())),
        1 => prop::sample::select(vec![
            "2026-11-30T03:00:00Z", "2026-11-30T03:00:00.5+01:00", "2026-11-30t03:00:00z",
            "2016-12-31T23:59:60Z", "2026-02-30T00:00:00Z", "noon", "",
        ])
        .prop_map(quoted),
        1 => Just("\"2026-11-30T03:00:00\\u005a\"".to_owned()),
        1 => Just("1700000000".to_owned()),
    ]
}

/// A JSON value (with whitespace inside), nested up to four levels; objects' keys and strings
/// hold braces, quotes and escapes. Now and then not JSON (a bad number or string inside).
fn json_token() -> BoxedStrategy<String> {
    prop_oneof![
        12 => json_of(number_token(), string_token()),
        1 => valid_json_token()
            .prop_filter("an array or object", |t| t.starts_with(['[', '{']))
            .prop_map(|t| with_trailing_comma(&t)),
    ]
    .boxed()
}

/// A JSON value but for one trailing comma somewhere inside (not JSON): the flaw a tame
/// envelope may carry in `detail` or an unknown key's value, nested or not.
fn flawed_json_token() -> BoxedStrategy<String> {
    let flawed = valid_json_token()
        .prop_filter("an array or object", |t| t.starts_with(['[', '{']))
        .prop_map(|t| with_trailing_comma(&t));
    prop_oneof![
        flawed.clone(),
        (valid_string_token(), flawed.clone()).prop_map(|(k, v)| format!("{{{k}:{v}}}")),
        (valid_json_token(), flawed).prop_map(|(a, b)| format!("[{a},{b}]")),
    ]
    .boxed()
}

/// An array's or object's text with a comma before its closing bracket (not JSON).
fn with_trailing_comma(container: &str) -> String {
    let (body, close) = container.split_at(container.len() - 1);
    format!("{body},{close}")
}

/// As [`json_token`], always JSON.
fn valid_json_token() -> BoxedStrategy<String> {
    json_of(valid_number_token(), valid_string_token())
}

fn json_of(number: BoxedStrategy<String>, string: BoxedStrategy<String>) -> BoxedStrategy<String> {
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number,
        string.clone(),
    ];
    leaf.prop_recursive(4, 32, 5, move |inner| {
        prop_oneof![
            (
                prop::collection::vec(inner.clone(), 0..5),
                prop::sample::select(WHITESPACE.to_vec())
            )
                .prop_map(|(items, ws)| format!("[{ws}{}{ws}]", items.join(&format!("{ws},"))),),
            object_of(string.clone(), inner.boxed()),
        ]
    })
    .boxed()
}

fn object_of(key: BoxedStrategy<String>, inner: BoxedStrategy<String>) -> BoxedStrategy<String> {
    (
        prop::collection::vec((key, inner), 0..5),
        prop::sample::select(WHITESPACE.to_vec()),
    )
        .prop_map(|(members, ws)| {
            let members: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{ws}{k}{ws}:{ws}{v}"))
                .collect();
            format!("{{{}{ws}}}", members.join(","))
        })
        .boxed()
}

/// `detail`: an object (nested values inside), `null`, or another JSON value (refused).
fn detail_token() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => object_of(string_token(), json_token()),
        1 => object_of(valid_string_token(), valid_json_token()).prop_map(|t| with_trailing_comma(&t)),
        2 => Just("null".to_owned()),
        2 => json_token(),
    ]
}

/// `value`: every form `NativeValue` accepts, and objects and arrays it refuses.
fn value_token() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => number_token(),
        2 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_owned),
        3 => string_token(),
        1 => json_token(),
    ]
}

fn optional_string_token() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => string_token(),
        1 => Just("null".to_owned()),
        1 => number_token(),
    ]
}

fn quality_token() -> impl Strategy<Value = String> {
    prop::sample::select(vec![
        "\"bad\"",
        "\"unavailable\"",
        "null",
        "\"live\"",
        "\"b\\u0061d\"",
        "\"Bad\"",
        "1",
    ])
    .prop_map(str::to_owned)
}

/// A field that is present with probability `percent`.
fn maybe(percent: u32, token: impl Strategy<Value = String> + 'static) -> BoxedStrategy<Option<String>> {
    (0u32..100, token)
        .prop_map(move |(roll, token)| (roll < percent).then_some(token))
        .boxed()
}

/// `(key, value)` tokens of one envelope, before shuffling: a quarter of them wild (any field
/// may be missing, of the wrong type or out of range, a key duplicated or escaped), the rest
/// tame (every field JSON of its type, unknown keys with JSON values), so that both the
/// scanner and serde decode and refuse a good share (`generated_envelopes_reach_…`).
fn members() -> BoxedStrategy<Vec<(String, String)>> {
    prop_oneof![3 => members_of(false), 1 => members_of(true)].boxed()
}

fn members_of(wild: bool) -> BoxedStrategy<Vec<(String, String)>> {
    fn pick(
        wild: bool,
        tame: impl Strategy<Value = String> + 'static,
        any: impl Strategy<Value = String> + 'static,
    ) -> BoxedStrategy<String> {
        if wild { any.boxed() } else { tame.boxed() }
    }
    let present = if wild { 95 } else { 100 };
    let tame_string = || prop_oneof![8 => plain_text().prop_map(|s| quoted(&s)), 2 => valid_string_token()];
    let or_null = |token: BoxedStrategy<String>| prop_oneof![4 => token, 1 => Just("null".to_owned())];
    let tame_timestamp = || (0i64..4_000_000_000_000_000).prop_map(|us| quoted(&Micros(us).to_rfc3339()));
    let tame_value = prop_oneof![
        6 => valid_number_token(),
        2 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_owned),
        3 => valid_string_token(),
    ];
    let required = (
        maybe(
            present,
            pick(
                wild,
                Just("1".to_owned()),
                prop_oneof![9 => Just("1".to_owned()), 1 => integer_token()],
            ),
        ),
        maybe(present, pick(wild, tame_string(), string_token())),
        maybe(present, pick(wild, tame_string(), string_token())),
        maybe(
            present,
            pick(
                wild,
                (0..=i32::MAX as u64).prop_map(|n| n.to_string()),
                integer_token(),
            ),
        ),
        maybe(
            present,
            pick(
                wild,
                (0..=i64::MAX as u64).prop_map(|n| n.to_string()),
                integer_token(),
            ),
        ),
        maybe(present, pick(wild, tame_timestamp(), timestamp_token())),
        maybe(present, pick(wild, tame_value, value_token())),
    );
    let optional = (
        maybe(
            40,
            pick(wild, or_null(tame_timestamp().boxed()), timestamp_token()),
        ),
        maybe(
            50,
            pick(wild, or_null(tame_string().boxed()), optional_string_token()),
        ),
        maybe(
            20,
            pick(
                wild,
                prop::sample::select(vec!["\"bad\"", "\"unavailable\"", "null"]).prop_map(str::to_owned),
                quality_token(),
            ),
        ),
        maybe(
            20,
            pick(wild, or_null(tame_string().boxed()), optional_string_token()),
        ),
        maybe(
            25,
            pick(
                wild,
                or_null(
                    prop_oneof![
                        15 => object_of(valid_string_token(), valid_json_token()),
                        1 => flawed_json_token().prop_map(|t| format!("{{\"f\":{t}}}")),
                    ]
                    .boxed(),
                ),
                detail_token(),
            ),
        ),
    );
    let (unknown_key, unknown_value) = if wild {
        (string_token(), json_token())
    } else {
        (
            valid_string_token(),
            prop_oneof![15 => valid_json_token(), 1 => flawed_json_token()].boxed(),
        )
    };
    let extra = (
        prop::collection::vec((unknown_key, unknown_value), 0..3),
        maybe(
            if wild { 20 } else { 0 },
            (0usize..12, json_token()).prop_map(|(i, v)| format!("{i}\u{0}{v}")),
        ),
        maybe(if wild { 10 } else { 0 }, Just(String::new())),
    );
    (required, optional, extra)
        .prop_map(|(r, o, (unknown, duplicate, escaped_key))| {
            let named = [
                ("v", r.0),
                ("point_id", r.1),
                ("driver_instance", r.2),
                ("source_epoch", r.3),
                ("source_seq", r.4),
                ("observed_at", r.5),
                ("value", r.6),
                ("device_time", o.0),
                ("unit", o.1),
                ("quality", o.2),
                ("reason", o.3),
                ("detail", o.4),
            ];
            let mut members: Vec<(String, String)> = named
                .iter()
                .filter_map(|(key, token)| token.as_ref().map(|t| (quoted(key), t.clone())))
                .collect();
            if let Some(duplicate) = duplicate {
                let (index, value) = duplicate.split_once('\u{0}').expect("index and value");
                let index: usize = index.parse().expect("an index");
                members.push((quoted(named[index].0), value.to_owned()));
            }
            if escaped_key.is_some()
                && let Some(first) = members.first_mut()
            {
                first.0 = format!("\"\\u{:04x}{}", first.0.as_bytes()[1], &first.0[2..]);
            }
            members.extend(unknown);
            members
        })
        .boxed()
}

/// An envelope's tokens from its members in the given order, with the given whitespace around
/// every token: joined, they are its text; the mutations below work on either.
fn render(members: &[(String, String)], ws: &[&str]) -> Vec<String> {
    let mut next_ws = ws.iter().cycle();
    let mut ws = || (*next_ws.next().expect("a cycle never ends")).to_owned();
    let mut out = vec![ws(), "{".to_owned()];
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push(",".to_owned());
        }
        out.extend([ws(), key.clone(), ws(), ":".to_owned(), ws(), value.clone(), ws()]);
    }
    out.extend(["}".to_owned(), ws()]);
    out
}

fn envelope_tokens() -> impl Strategy<Value = Vec<String>> {
    (
        members().prop_shuffle(),
        prop::collection::vec(prop::sample::select(WHITESPACE.to_vec()), 1..40),
    )
        .prop_map(|(members, ws)| render(&members, &ws))
}

/// JSON's structure, and what often breaks it: what a token mutation puts in.
const SNIPPETS: [&str; 14] = [
    ",", "}", "{", ":", "\"", "null", "[", "]", "", ",,", ",}", "}}", "\"k\":1", "\"k\":1,",
];

#[derive(Clone, Debug)]
enum Mutation {
    None,
    Truncate(prop::sample::Index),
    Replace(prop::sample::Index, u8),
    Insert(prop::sample::Index, u8),
    Delete(prop::sample::Index),
    /// A snippet between two tokens.
    InsertToken(prop::sample::Index, &'static str),
    /// One of the envelope's own `{`, `}`, `,` and `:` replaced by a snippet (or removed).
    ReplaceStructural(prop::sample::Index, &'static str),
    /// A comma after the last member.
    TrailingComma,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    // Bytes that matter to JSON's structure, and bytes that break UTF-8.
    let byte = prop_oneof![
        prop::sample::select(b"\"\\{}[],: \n0123456789.eE-+ntfux\t\x00\x7f".to_vec()),
        Just(0xffu8),
        Just(0xc3u8),
        Just(0x80u8),
        any::<u8>(),
    ];
    let snippet = || prop::sample::select(SNIPPETS.to_vec());
    prop_oneof![
        6 => Just(Mutation::None),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Truncate),
        2 => (any::<prop::sample::Index>(), byte.clone()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        2 => (any::<prop::sample::Index>(), byte).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => any::<prop::sample::Index>().prop_map(Mutation::Delete),
        2 => (any::<prop::sample::Index>(), snippet()).prop_map(|(i, s)| Mutation::InsertToken(i, s)),
        2 => (any::<prop::sample::Index>(), snippet()).prop_map(|(i, s)| Mutation::ReplaceStructural(i, s)),
        1 => Just(Mutation::TrailingComma),
    ]
}

fn mutate(tokens: &[String], mutation: &Mutation) -> Vec<u8> {
    let mut tokens = tokens.to_vec();
    match mutation {
        Mutation::InsertToken(i, snippet) => tokens.insert(i.index(tokens.len() + 1), (*snippet).to_owned()),
        Mutation::ReplaceStructural(i, snippet) => {
            let structural: Vec<usize> = (0..tokens.len())
                .filter(|&t| matches!(tokens[t].as_str(), "{" | "}" | "," | ":"))
                .collect();
            tokens[structural[i.index(structural.len())]] = (*snippet).to_owned();
        }
        Mutation::TrailingComma => {
            let close = tokens
                .iter()
                .rposition(|t| t == "}")
                .expect("the envelope closes");
            tokens.insert(close, ",".to_owned());
        }
        _ => {}
    }
    let mut bytes = tokens.concat().into_bytes();
    let len = bytes.len();
    match mutation {
        Mutation::Truncate(i) => bytes.truncate(i.index(len + 1)),
        Mutation::Replace(i, b) if len > 0 => bytes[i.index(len)] = *b,
        Mutation::Insert(i, b) => bytes.insert(i.index(len + 1), *b),
        Mutation::Delete(i) if len > 0 => {
            bytes.remove(i.index(len));
        }
        _ => {}
    }
    bytes
}

/// The one property: the decode with the scanner is serde's decode, for any bytes.
fn assert_same_as_serde(payload: &[u8]) -> Result<(), TestCaseError> {
    let decoded = decode_envelope(payload);
    let reference = decode_envelope_serde(payload);
    if let Some(difference) = decoding_difference(&decoded, &reference) {
        return Err(TestCaseError::fail(format!(
            "{difference}\npayload: {}",
            String::from_utf8_lossy(payload)
        )));
    }
    // Where the scanner answers, its answer is the one compared above.
    if let Some(scanned) = decode_envelope_scanned(payload) {
        prop_assert!(decoding_difference(&scanned, &reference).is_none());
    }
    Ok(())
}

/// The common envelope: every required field once, strings without escapes, numbers the
/// scanner computes, the optional fields present, null or absent, unknown keys with any JSON
/// value, `detail` any object; in any order with any whitespace.
fn common_envelope_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        (-(1i64 << 53)..(1i64 << 53)).prop_map(|n| n.to_string()),
        (-99_999_999i64..99_999_999, 1u32..8).prop_map(|(n, k)| {
            let scaled = n as f64 / 10f64.powi(k as i32);
            serde_json::to_string(&scaled).expect("finite")
        }),
        (1u32..999_999, -22i32..=22).prop_map(|(n, e)| format!("{n}e{e}")),
    ];
    let value = prop_oneof![
        4 => number,
        1 => prop::sample::select(vec!["true", "false", "null"]).prop_map(str::to_owned),
        1 => plain_text().prop_map(|s| quoted(&s)),
    ];
    let plain = || plain_text().prop_map(|s| quoted(&s));
    let optional_plain = || prop_oneof![4 => plain(), 1 => Just("null".to_owned())];
    let timestamp = || (0i64..4_000_000_000_000_000).prop_map(|us| quoted(&Micros(us).to_rfc3339()));
    (
        (
            (0u64..=i32::MAX as u64).prop_map(|n| n.to_string()),
            (0u64..=u64::MAX).prop_map(|n| n.to_string()),
            timestamp(),
            value,
            plain(),
            plain(),
        ),
        (
            maybe(50, prop_oneof![4 => timestamp(), 1 => Just("null".to_owned())]),
            maybe(50, optional_plain()),
            maybe(30, prop::sample::select(vec!["\"bad\"", "\"unavailable\"", "null"]).prop_map(str::to_owned)),
            maybe(30, optional_plain()),
            maybe(30, prop_oneof![4 => object_of(valid_string_token(), valid_json_token()), 1 => Just("null".to_owned())]),
            prop::collection::vec(("\"x[a-z_]{0,8}\"", valid_json_token()), 0..3),
        ),
        prop::collection::vec(prop::sample::select(WHITESPACE.to_vec()), 1..40),
        any::<prop::sample::Index>(),
    )
        .prop_flat_map(|((epoch, seq, observed, value, point, instance), optional, ws, _)| {
            let (device_time, unit, quality, reason, detail, unknown) = optional;
            let mut members = vec![
                (quoted("v"), "1".to_owned()),
                (quoted("point_id"), point),
                (quoted("driver_instance"), instance),
                (quoted("source_epoch"), epoch),
                (quoted("source_seq"), seq),
                (quoted("observed_at"), observed),
                (quoted("value"), value),
            ];
            for (key, token) in [
                ("device_time", device_time),
                ("unit", unit),
                ("quality", quality),
                ("reason", reason),
                ("detail", detail),
            ] {
                if let Some(token) = token {
                    members.push((quoted(key), token));
                }
            }
            members.extend(unknown);
            (Just(members).prop_shuffle(), Just(ws))
        })
        .prop_map(|(members, ws)| render(&members, &ws).concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4_096))]

    /// Generated envelopes, and the same bytes mutated.
    #[test]
    fn the_scanner_decodes_exactly_as_serde(tokens in envelope_tokens(), mutation in mutation()) {
        assert_same_as_serde(&mutate(&tokens, &mutation))?;
    }

    /// The common envelope never falls back to serde, and is decoded as serde decodes it.
    #[test]
    fn the_common_envelope_takes_the_scanner(text in common_envelope_text()) {
        let scanned = decode_envelope_scanned(text.as_bytes());
        prop_assert!(scanned.is_some(), "fell back to serde: {text}");
        assert_same_as_serde(text.as_bytes())?;
    }

    /// Numbers densely around the scanner's edges (significands about 2^53, powers of ten about
    /// 22, fractions written out or as exponents), as `value` of an otherwise common envelope.
    #[test]
    fn numbers_decode_as_serde(
        significand in prop_oneof![0u64..1_000, (1u64 << 53) - 1_000..(1u64 << 53) + 1_000, any::<u64>()],
        exponent in -30i32..=30,
        form in 0usize..4,
        negative in any::<bool>(),
    ) {
        let sign = if negative { "-" } else { "" };
        let digits = significand.to_string();
        let number = match form {
            0 => format!("{sign}{digits}e{exponent}"),
            1 => format!("{sign}{digits}.0E{exponent:+}"),
            // The point placed inside or before the digits: `exponent` digits after it.
            _ => {
                let after = exponent.unsigned_abs() as usize;
                if after < digits.len() {
                    let (int, frac) = digits.split_at(digits.len() - after);
                    format!("{sign}{int}.{frac}")
                } else {
                    format!("{sign}0.{}{digits}", "0".repeat(after - digits.len()))
                }
            }
        };
        let text = format!(
            r#"{{"v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z","value":{number}}}"#
        );
        assert_same_as_serde(text.as_bytes())?;
    }

    /// Noise shaped like JSON, as the fuzz target's property in miniature.
    #[test]
    fn json_shaped_noise_decodes_as_serde(text in "[ {}\\[\\]\",:0-9a-z.eE\\\\-]{0,80}") {
        assert_same_as_serde(text.as_bytes())?;
    }
}

/// The stages bench's envelopes (`core/benches/shared/stage_load.rs`: numbers with a unit and
/// a quarter with a device time, bools, enum integers, text) and a driver library gap (quality,
/// reason, detail) all take the scanner, borrowing every string.
#[test]
fn the_benchs_envelopes_take_the_scanner() {
    let at = Micros(1_796_007_600_123_456);
    let mut shapes = Vec::new();
    for value in [
        serde_json::json!(15.37),
        serde_json::json!(15.0 + 201.0 / 100.0), // 17.009999999999998: 17 digits, past 2^53
        serde_json::json!(9_999.0),
        serde_json::json!(-0.5),
        serde_json::json!(true),
        serde_json::json!(2),
        serde_json::json!("batch-17"),
    ] {
        let mut out = EnvelopeOut::new(
            "plant-a.boiler-3.temp",
            "drv-7-1",
            1,
            (42u64 << 32) | 7,
            at,
            value,
        );
        out.unit = Some("degF".into());
        shapes.push(out.clone());
        out.device_time = Some(Micros(at.0 + 1_500_000).to_rfc3339());
        shapes.push(out);
    }
    let mut gap = EnvelopeOut::new(
        "plant-a.boiler-3.temp",
        "drv-7-1",
        1,
        8,
        at,
        serde_json::Value::Null,
    );
    gap.quality = Some("unavailable".into());
    gap.reason = Some("comm_loss".into());
    gap.detail = Some(serde_json::json!({"since": "2026-12-06T10:00:00Z", "errors": [1, {"a": "}\"{"}]}));
    shapes.push(gap);
    for out in shapes {
        let bytes = out.to_bytes();
        let scanned = decode_envelope_scanned(&bytes)
            .unwrap_or_else(|| panic!("fell back to serde: {}", String::from_utf8_lossy(&bytes)));
        let env = scanned.as_ref().expect("a valid envelope");
        assert!(matches!(env.point_id, std::borrow::Cow::Borrowed(_)));
        assert_eq!(env.source_seq, out.source_seq);
        assert_eq!(
            decoding_difference(&scanned, &decode_envelope_serde(&bytes)),
            None
        );
    }
}

/// What the scanner leaves to serde, each checked to fall back and to decode as serde does.
#[test]
fn what_the_scanner_is_not_sure_of_falls_back() {
    let base = r#""v":1,"point_id":"p","driver_instance":"d","source_epoch":1,"source_seq":1,"observed_at":"2026-11-30T03:00:00Z""#;
    for text in [
        format!(r#"{{{base},"value":"a\"b"}}"#), // an escape in a kept string
        format!(r#"{{{base},"value":1,"value":2}}"#), // a duplicate field
        format!(r#"{{{base},"value":1,"unit":null,"unit":"K"}}"#),
        format!(r#"{{{base},"value":1e400}}"#), // beyond f64: serde refuses it
        format!(r#"{{{base},"value":123456789012345678901}}"#), // beyond u64
        format!(r#"{{{base},"value":0.300000000000000000004}}"#), // 21 significant digits
        format!(r#"{{{base},"value":1,}}"#),    // a trailing comma
        format!(r#"{{{base},"value":1}} x"#),   // trailing bytes
        format!(r#"{{{base},"value":1,"detail":[1]}}"#), // detail not an object
        format!(r#"{{{base},"value":1,"quality":"live"}}"#),
        format!(r#"{{{base}}}"#),                // value missing
        format!(r#"{{{base},"v\u0061lue":1}}"#), // an escaped key
        format!(r#"{{{base},"value":1,"x":{}}}"#, "[".repeat(40) + &"]".repeat(40)),
        "[1,\"p\",\"d\",1,1,\"2026-11-30T03:00:00Z\",null]".to_owned(),
    ] {
        assert!(decode_envelope_scanned(text.as_bytes()).is_none(), "{text}");
        assert_eq!(
            decoding_difference(
                &decode_envelope(text.as_bytes()),
                &decode_envelope_serde(text.as_bytes())
            ),
            None,
            "{text}"
        );
    }
    let mut invalid_utf8 = format!(r#"{{{base},"value":1,"x":"é"}}"#).into_bytes();
    let at = invalid_utf8.len() - 3;
    invalid_utf8[at] = 0xff;
    assert!(decode_envelope_scanned(&invalid_utf8).is_none());
    assert_eq!(
        decoding_difference(
            &decode_envelope(&invalid_utf8),
            &decode_envelope_serde(&invalid_utf8)
        ),
        None
    );
}

/// The generated envelopes reach both paths and both outcomes: the property above would prove
/// little if the scanner were never sure or every payload a refusal.
#[test]
fn generated_envelopes_reach_the_scanner_and_serde() {
    use proptest::strategy::ValueTree;
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let strategy = envelope_tokens();
    let samples = 2_000;
    let (mut scanned_ok, mut scanned_refused, mut fallback_ok, mut fallback_refused) = (0, 0, 0, 0);
    for _ in 0..samples {
        let text = strategy
            .new_tree(&mut runner)
            .expect("a value")
            .current()
            .concat();
        match (
            decode_envelope_scanned(text.as_bytes()),
            decode_envelope_serde(text.as_bytes()),
        ) {
            (Some(Ok(_)), _) => scanned_ok += 1,
            (Some(Err(_)), _) => scanned_refused += 1,
            (None, Ok(_)) => fallback_ok += 1,
            (None, Err(_)) => fallback_refused += 1,
        }
    }
    println!(
        "{samples} generated: scanner ok {scanned_ok}, scanner refused {scanned_refused}, serde ok {fallback_ok}, serde refused {fallback_refused}"
    );
    for (what, count) in [
        ("decoded by the scanner", scanned_ok),
        ("refused after the scanner", scanned_refused),
        ("decoded by serde", fallback_ok),
        ("refused by serde", fallback_refused),
    ] {
        assert!(count * 50 >= samples, "only {count} of {samples} {what}");
    }
}
