//! A hand-written single-pass scanner for the observation envelope: the fast half of stage 2's
//! parsing (ingest spec, "Ingest pipeline", stage 2; DESIGN.md §2, the envelope's fields).
//!
//! Owns: reading an envelope of the common shape straight from the payload bytes into the same
//! [`RawEnvelope`] serde_json builds, or answering "not sure" (`None`). It never refuses
//! anything: on whatever is unusual — an escape in a string the envelope keeps, a duplicate or
//! missing field, a number of more than 19 significant digits or beyond `f64`, invalid UTF-8 anywhere
//! in the payload, a form serde accepts that it does not read (an array for the object, a
//! `detail` that is not an object), trailing bytes, nesting deeper than [`SKIP_DEPTH_MAX`] — it
//! returns `None`, and [`super::decode_envelope`] asks serde_json, which keeps producing every
//! refusal and its detail text. The scanner may be stricter than serde, never looser:
//! `core/tests/envelope_scan.rs` holds the two equal on generated and mutated payloads.
//!
//! Why: callgrind put serde_json's struct and string scanning at about 6,100 of an envelope's
//! 7,600 instructions in stages 2–10 (BENCHMARKS.md, cpu24b); issue 24 item 3 asks for them.
//!
//! What it mirrors of serde_json 1.0's `from_slice` into `RawEnvelope`: whitespace is space,
//! tab, CR and LF, around every token and at either end; keys are matched exactly (an escaped
//! key is serde's); a known key twice is serde's error (here: not sure); an unknown key's
//! value is skipped after checking it is JSON as serde's `ignore_value` does (strings without
//! control characters, escapes among `"\/bfnrt` and `u` with four hex digits, numbers in
//! JSON's grammar, literals, nesting with no trailing comma); `null` for an optional field is
//! `None`; strings without escapes are borrowed (serde borrows exactly those); `v`,
//! `source_epoch` and `source_seq` are plain unsigned integers in their type's range; `value`
//! is `null`, a bool, a string or a number — an integer is `as f64` of its `u64` magnitude
//! (serde's `visit_u64`/`visit_i64` round alike), a decimal the correctly rounded value
//! serde_json's `float_roundtrip` parser gives (one exact IEEE operation where it can, std's
//! parser otherwise); `detail` is the object's text between its braces' outer ends, as
//! `RawValue` borrows it.

use std::borrow::Cow;

use super::{AssertedQuality, NativeValue, RawEnvelope};

/// Nesting the scanner follows inside `detail` or an unknown key's value; deeper is serde's.
pub(super) const SKIP_DEPTH_MAX: usize = 32;

/// Largest exponent of ten whose `f64` is exact (10^22 < 2^53 · 2^22): Clinger's fast path.
const EXACT_POW10_MAX: usize = 22;
const POW10: [f64; EXACT_POW10_MAX + 1] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18,
    1e19, 1e20, 1e21, 1e22,
];
/// Largest significand an `f64` holds exactly.
const EXACT_SIGNIFICAND_MAX: u64 = 1 << 53;

/// One bit per known field, to see a duplicate.
const V: u16 = 1 << 0;
const POINT_ID: u16 = 1 << 1;
const DRIVER_INSTANCE: u16 = 1 << 2;
const SOURCE_EPOCH: u16 = 1 << 3;
const SOURCE_SEQ: u16 = 1 << 4;
const OBSERVED_AT: u16 = 1 << 5;
const DEVICE_TIME: u16 = 1 << 6;
const VALUE: u16 = 1 << 7;
const UNIT: u16 = 1 << 8;
const QUALITY: u16 = 1 << 9;
const REASON: u16 = 1 << 10;
const DETAIL: u16 = 1 << 11;

/// The envelope's fields from `payload`, exactly as serde_json would decode them into
/// [`RawEnvelope`], or `None` when the scanner is not sure (serde decides then).
pub(super) fn scan(payload: &[u8]) -> Option<RawEnvelope<'_>> {
    // One validation of the whole payload: every string then borrows as `&str` by slicing, and
    // serde's own UTF-8 checks (borrowed strings, `RawValue`) can only pass where this does.
    let text = std::str::from_utf8(payload).ok()?;
    let mut s = Scanner { text, at: 0 };
    s.ws();
    s.eat(b'{')?;
    s.ws();

    let mut seen = 0u16;
    let mut v = None;
    let mut point_id = None;
    let mut driver_instance = None;
    let mut source_epoch = None;
    let mut source_seq = None;
    let mut observed_at = None;
    let mut device_time = None;
    let mut value = None;
    let mut unit = None;
    let mut quality = None;
    let mut reason = None;
    let mut detail = None;
    // An empty object lacks the required fields: serde's to refuse.
    loop {
        s.eat(b'"')?;
        let bit = match s.known_key() {
            Some(bit) => bit,
            None => match s.plain_str()? {
                "v" => V,
                "point_id" => POINT_ID,
                "driver_instance" => DRIVER_INSTANCE,
                "source_epoch" => SOURCE_EPOCH,
                "source_seq" => SOURCE_SEQ,
                "observed_at" => OBSERVED_AT,
                "device_time" => DEVICE_TIME,
                "value" => VALUE,
                "unit" => UNIT,
                "quality" => QUALITY,
                "reason" => REASON,
                "detail" => DETAIL,
                _ => 0,
            },
        };
        s.ws();
        s.eat(b':')?;
        s.ws();
        if seen & bit != 0 {
            return None; // serde: "duplicate field"
        }
        seen |= bit;
        match bit {
            V => v = Some(u32::try_from(s.unsigned(u64::from(u32::MAX))?).ok()?),
            POINT_ID => point_id = Some(s.string()?),
            DRIVER_INSTANCE => driver_instance = Some(s.string()?),
            SOURCE_EPOCH => source_epoch = Some(u32::try_from(s.unsigned(u64::from(u32::MAX))?).ok()?),
            SOURCE_SEQ => source_seq = Some(s.unsigned(u64::MAX)?),
            OBSERVED_AT => observed_at = Some(s.string()?),
            DEVICE_TIME => device_time = s.optional_string()?,
            VALUE => value = Some(s.value()?),
            UNIT => unit = s.optional_string()?,
            QUALITY => quality = s.quality()?,
            REASON => reason = s.optional_string()?,
            DETAIL => detail = s.detail()?,
            _ => s.skip_value(0)?,
        }
        if s.member_end(b'}')? {
            break;
        }
    }
    s.ws();
    if s.at != text.len() {
        return None; // serde: "trailing characters"
    }
    Some(RawEnvelope {
        v: v?,
        point_id: point_id?,
        driver_instance: driver_instance?,
        source_epoch: source_epoch?,
        source_seq: source_seq?,
        observed_at: observed_at?,
        device_time,
        value: value?,
        unit,
        quality,
        reason,
        detail,
    })
}

/// A position in the payload, valid UTF-8 throughout; every method leaves `at` just past what
/// it read, or answers `None` (not sure) with `at` anywhere.
struct Scanner<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Scanner<'a> {
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    fn peek(&self) -> Option<u8> {
        self.bytes().get(self.at).copied()
    }

    fn next(&mut self) -> Option<u8> {
        let c = self.peek()?;
        self.at += 1;
        Some(c)
    }

    /// JSON's whitespace (serde_json's `parse_whitespace`).
    fn ws(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.at += 1)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        self.bytes()[self.at..]
            .starts_with(word)
            .then(|| self.at += word.len())
    }

    /// A known key and its closing quote, read as whole bytes (most keys: no string scan and
    /// no match on text); `None`, having read nothing, for any other key or an escaped one.
    #[inline]
    fn known_key(&mut self) -> Option<u16> {
        /// `name` (its closing quote included) at the start of `rest`, compared as a fixed-size
        /// array so each key is a few word compares, not a `memcmp` call.
        fn is<const N: usize>(rest: &[u8], name: &[u8; N]) -> bool {
            rest.first_chunk::<N>() == Some(name)
        }
        let rest = &self.bytes()[self.at..];
        let (length, bit) = match *rest.first()? {
            b'v' if is(rest, b"v\"") => (2, V),
            b'v' if is(rest, b"value\"") => (6, VALUE),
            b'p' if is(rest, b"point_id\"") => (9, POINT_ID),
            b'd' if is(rest, b"driver_instance\"") => (16, DRIVER_INSTANCE),
            b'd' if is(rest, b"device_time\"") => (12, DEVICE_TIME),
            b'd' if is(rest, b"detail\"") => (7, DETAIL),
            b's' if is(rest, b"source_epoch\"") => (13, SOURCE_EPOCH),
            b's' if is(rest, b"source_seq\"") => (11, SOURCE_SEQ),
            b'o' if is(rest, b"observed_at\"") => (12, OBSERVED_AT),
            b'u' if is(rest, b"unit\"") => (5, UNIT),
            b'q' if is(rest, b"quality\"") => (8, QUALITY),
            b'r' if is(rest, b"reason\"") => (7, REASON),
            _ => return None,
        };
        self.at += length;
        Some(bit)
    }

    /// The rest of a string whose opening quote is read, borrowed: `None` at an escape (serde
    /// copies those), a control character (serde's error) or the end. Eight bytes at a time
    /// (serde_json's own test, Mycroft's zero-byte trick): strings were half of the scan's
    /// instructions byte by byte.
    #[inline]
    fn plain_str(&mut self) -> Option<&'a str> {
        const ONES: u64 = u64::MAX / 255;
        const HIGHS: u64 = ONES << 7;
        let bytes = self.bytes();
        let start = self.at;
        let mut i = start;
        while let Some(chunk) = bytes.get(i..i + 8) {
            let word = u64::from_le_bytes(chunk.try_into().ok()?);
            // A byte's high bit is set in each mask where that byte is below 0x20, a quote or
            // a backslash; the lowest such byte is exact (a borrow only marks bytes above it).
            let control = word.wrapping_sub(ONES * 0x20) & !word;
            let quotes = word ^ (ONES * u64::from(b'"'));
            let quote = quotes.wrapping_sub(ONES) & !quotes;
            let backslashes = word ^ (ONES * u64::from(b'\\'));
            let backslash = backslashes.wrapping_sub(ONES) & !backslashes;
            let found = (control | quote | backslash) & HIGHS;
            if found != 0 {
                i += (found.trailing_zeros() / 8) as usize;
                return self.string_ends_at(start, i);
            }
            i += 8;
        }
        while let Some(&c) = bytes.get(i) {
            if c == b'"' || c == b'\\' || c < 0x20 {
                return self.string_ends_at(start, i);
            }
            i += 1;
        }
        None
    }

    /// The string from `start` when the byte at `end` closes it; `None` when that byte is an
    /// escape or a control character.
    fn string_ends_at(&mut self, start: usize, end: usize) -> Option<&'a str> {
        if self.bytes()[end] != b'"' {
            return None;
        }
        self.at = end + 1;
        // Both ends are ASCII quotes, so char boundaries of the validated text.
        self.text.get(start..end)
    }

    fn string(&mut self) -> Option<Cow<'a, str>> {
        self.eat(b'"')?;
        self.plain_str().map(Cow::Borrowed)
    }

    /// `null` (`Some(None)`) or a string (`Some(Some(..))`), as `borrowed_opt_str` decodes.
    fn optional_string(&mut self) -> Option<Option<Cow<'a, str>>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        self.string().map(Some)
    }

    /// An unsigned integer in JSON's grammar no larger than `max`: serde's `deserialize_u32`/
    /// `deserialize_u64`. A sign, a fraction or an exponent leaves a byte the caller refuses.
    fn unsigned(&mut self, max: u64) -> Option<u64> {
        let bytes = self.bytes();
        match *bytes.get(self.at)? {
            b'0' => {
                self.at += 1;
                Some(0) // a digit after it is a byte the caller refuses, as serde does
            }
            b'1'..=b'9' => {
                let mut n = 0u64;
                while let Some(c @ b'0'..=b'9') = bytes.get(self.at).copied() {
                    n = n.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                    self.at += 1;
                }
                (n <= max).then_some(n)
            }
            _ => None,
        }
    }

    /// A number as [`NativeValue`]'s `deserialize_any` gets it from serde_json (with
    /// `float_roundtrip`): an integer of up to 19 digits is its magnitude `as f64`, signed
    /// (serde's `u64`/`i64` visits, `-0` as `-0.0`); a decimal whose significand is at most
    /// 2^53 and whose power of ten is at most 22 is one exact multiplication or division
    /// (Clinger's fast path), correctly rounded like serde's parser; any other decimal of up
    /// to 19 significant digits is std's correctly rounded parse of its text. Longer
    /// significands, exponents past 10,000 and values beyond `f64` are serde's.
    fn number(&mut self) -> Option<f64> {
        let bytes = self.bytes();
        let mut i = self.at;
        let negative = bytes.get(i) == Some(&b'-');
        if negative {
            i += 1;
        }
        let mut significand = 0u64;
        match *bytes.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                while let Some(c @ b'0'..=b'9') = bytes.get(i).copied() {
                    significand = significand.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                    i += 1;
                }
            }
            _ => return None,
        }
        let mut integer = true;
        let mut exponent = 0i64;
        if bytes.get(i) == Some(&b'.') {
            integer = false;
            i += 1;
            let fraction_start = i;
            while let Some(c @ b'0'..=b'9') = bytes.get(i).copied() {
                significand = significand.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
                exponent -= 1;
                i += 1;
            }
            if i == fraction_start {
                return None; // "1." is serde's error
            }
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            integer = false;
            i += 1;
            let negative_exponent = match bytes.get(i) {
                Some(b'-') => {
                    i += 1;
                    true
                }
                Some(b'+') => {
                    i += 1;
                    false
                }
                _ => false,
            };
            let digits_start = i;
            let mut written = 0i64;
            while let Some(c @ b'0'..=b'9') = bytes.get(i).copied() {
                written = written * 10 + i64::from(c - b'0');
                if written > 10_000 {
                    return None; // far outside the fast path, and bounded before overflow
                }
                i += 1;
            }
            if i == digits_start {
                return None;
            }
            exponent += if negative_exponent { -written } else { written };
        }
        let number = if integer {
            let magnitude = significand as f64;
            if negative { -magnitude } else { magnitude }
        } else if let Some(power) = POW10.get(usize::try_from(exponent.unsigned_abs()).ok()?)
            && significand <= EXACT_SIGNIFICAND_MAX
        {
            let magnitude = if exponent < 0 {
                significand as f64 / power
            } else {
                significand as f64 * power
            };
            if negative { -magnitude } else { magnitude }
        } else {
            // Both std's parser and serde_json's with `float_roundtrip` round correctly, so
            // they agree on every finite value; serde refuses an infinite one, so the scanner
            // leaves it to serde. Common: the shortest text of a sum such as 15.0 + 2.01 (the
            // stages bench's values) is 17.009999999999998, a significand past 2^53.
            let parsed: f64 = self.text.get(self.at..i)?.parse().ok()?;
            if !parsed.is_finite() {
                return None;
            }
            parsed
        };
        self.at = i;
        Some(number)
    }

    fn value(&mut self) -> Option<NativeValue<'a>> {
        Some(match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                NativeValue::Null
            }
            b't' => {
                self.literal(b"true")?;
                NativeValue::Bool(true)
            }
            b'f' => {
                self.literal(b"false")?;
                NativeValue::Bool(false)
            }
            b'"' => NativeValue::Text(self.string()?),
            b'-' | b'0'..=b'9' => NativeValue::Num(self.number()?),
            _ => return None, // an object or array is serde's error
        })
    }

    /// `null` or one of the qualities a driver may assert (`AssertedQuality`'s names).
    fn quality(&mut self) -> Option<Option<AssertedQuality>> {
        if self.peek()? == b'n' {
            self.literal(b"null")?;
            return Some(None);
        }
        Some(Some(match self.string()?.as_ref() {
            "unavailable" => AssertedQuality::Unavailable,
            "bad" => AssertedQuality::Bad,
            _ => return None, // serde's "unknown variant"
        }))
    }

    /// `null` or an object's text, as `Option<&RawValue>` borrows it; another JSON value is
    /// serde's to decode (and the decode's to refuse).
    fn detail(&mut self) -> Option<Option<&'a str>> {
        match self.peek()? {
            b'n' => {
                self.literal(b"null")?;
                Some(None)
            }
            b'{' => {
                let start = self.at;
                self.skip_value(0)?;
                Some(Some(self.text.get(start..self.at)?))
            }
            _ => None,
        }
    }

    /// Past one JSON value that serde_json's `ignore_value` accepts, nested at most
    /// [`SKIP_DEPTH_MAX`] deep below `depth`.
    fn skip_value(&mut self, depth: usize) -> Option<()> {
        match self.peek()? {
            b'n' => self.literal(b"null"),
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'"' => {
                self.at += 1;
                self.skip_str()
            }
            b'-' | b'0'..=b'9' => self.skip_number(),
            b'[' => {
                if self.open(depth, b']')? {
                    return Some(());
                }
                loop {
                    self.skip_value(depth + 1)?;
                    if self.member_end(b']')? {
                        return Some(());
                    }
                }
            }
            b'{' => {
                if self.open(depth, b'}')? {
                    return Some(());
                }
                loop {
                    self.eat(b'"')?;
                    self.skip_str()?;
                    self.ws();
                    self.eat(b':')?;
                    self.ws();
                    self.skip_value(depth + 1)?;
                    if self.member_end(b'}')? {
                        return Some(());
                    }
                }
            }
            _ => None,
        }
    }

    /// Past an array's or object's opening bracket (at `at`) and the whitespace after it, at
    /// most [`SKIP_DEPTH_MAX`] deep: `true` when `close` follows at once (then read too), an
    /// empty container.
    fn open(&mut self, depth: usize, close: u8) -> Option<bool> {
        if depth >= SKIP_DEPTH_MAX {
            return None;
        }
        self.at += 1;
        self.ws();
        if self.peek()? == close {
            self.at += 1;
            return Some(true);
        }
        Some(false)
    }

    /// Past what follows a member: whitespace, then `,` and the whitespace after it (`false`:
    /// another member comes) or `close` (`true`); anything else, a trailing comma's `close`
    /// included at the next member, is serde's.
    fn member_end(&mut self, close: u8) -> Option<bool> {
        self.ws();
        match self.next()? {
            b',' => {
                self.ws();
                Some(false)
            }
            c if c == close => Some(true),
            _ => None,
        }
    }

    /// Past the rest of a string whose opening quote is read, escapes included (serde's
    /// `ignore_str`: any four hex digits after `\u`, no control characters).
    fn skip_str(&mut self) -> Option<()> {
        let bytes = self.bytes();
        loop {
            match self.next()? {
                b'"' => return Some(()),
                b'\\' => match self.next()? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                    b'u' => {
                        let hex = bytes.get(self.at..self.at + 4)?;
                        if !hex.iter().all(u8::is_ascii_hexdigit) {
                            return None;
                        }
                        self.at += 4;
                    }
                    _ => return None,
                },
                0..=0x1f => return None,
                _ => {}
            }
        }
    }

    /// Past a number in JSON's grammar (serde's `ignore_integer`, `ignore_decimal`,
    /// `ignore_exponent`); what follows is the enclosing value's to judge.
    fn skip_number(&mut self) -> Option<()> {
        let bytes = self.bytes();
        let digits = |at: &mut usize| {
            let start = *at;
            while let Some(b'0'..=b'9') = bytes.get(*at) {
                *at += 1;
            }
            *at > start
        };
        let mut i = self.at;
        if bytes.get(i) == Some(&b'-') {
            i += 1;
        }
        match *bytes.get(i)? {
            b'0' => i += 1,
            b'1'..=b'9' => {
                digits(&mut i);
            }
            _ => return None,
        }
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            if !digits(&mut i) {
                return None;
            }
        }
        if let Some(b'e' | b'E') = bytes.get(i) {
            i += 1;
            if let Some(b'+' | b'-') = bytes.get(i) {
                i += 1;
            }
            if !digits(&mut i) {
                return None;
            }
        }
        self.at = i;
        Some(())
    }
}
