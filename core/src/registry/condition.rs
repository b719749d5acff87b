//! The text of a rule's condition, parsed into a [`Condition`] (issue 22 item 1; core runtime
//! spec, "Rules").
//!
//! Owns: the condition language a registry folder writes in `when` and `until`, and its
//! parser ([`parse`]). The grammar, loosest binding first:
//!
//! ```text
//! condition  := or
//! or         := and ("or" and)*
//! and        := unary ("and" unary)*
//! unary      := "not" unary | "(" condition ")" | comparison | quality
//! comparison := <point id> ("<" | "<=" | ">" | ">=" | "==" | "!=") <literal>
//! literal    := a finite number | true | false | "a codebook member" | 'a codebook member'
//! quality    := "quality" "(" <point id> ")" ("==" | "!=") <quality name>
//! ```
//!
//! `a or b and not c` is `a or (b and (not c))`; a run of one connective is flattened
//! (`a and b and c` is one `All` of three). The parser checks only the shape; whether a point
//! exists, is an input, and can be compared with the literal is admission's (`rule_check.rs`).
//!
//! Pure, bounded ([`CONDITION_BYTES_MAX`], [`CONDITION_DEPTH_MAX`]) and never panics: an error
//! is one line naming the byte it is at.

use std::fmt;

use super::descriptor::CommandValue;
use super::rule::{CompareOp, Condition, QualityName};

/// The longest condition text accepted.
pub const CONDITION_BYTES_MAX: usize = 2_048;
/// The deepest nesting of parentheses and `not` accepted.
pub const CONDITION_DEPTH_MAX: usize = 16;

/// Why a condition's text does not parse: one line, with the byte offset it is at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConditionError {
    /// Byte offset into the text (0-based); the text's length for "ended too soon".
    pub at: usize,
    pub message: String,
}

impl fmt::Display for ConditionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at byte {}: {}", self.at, self.message)
    }
}

impl std::error::Error for ConditionError {}

#[derive(Clone, Debug, PartialEq)]
enum Token<'a> {
    /// A run of point-id and number characters: a point id, a keyword or a number.
    Word(&'a str),
    /// A quoted literal, without its quotes.
    Quoted(String),
    Op(CompareOp),
    Open,
    Close,
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'+')
}

fn tokenize(text: &str) -> Result<Vec<(usize, Token<'_>)>, ConditionError> {
    let bytes = text.as_bytes();
    let err = |at: usize, message: String| ConditionError { at, message };
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let start = i;
        match b {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => {
                tokens.push((start, Token::Open));
                i += 1;
            }
            b')' => {
                tokens.push((start, Token::Close));
                i += 1;
            }
            b'<' | b'>' | b'=' | b'!' => {
                let eq = bytes.get(i + 1) == Some(&b'=');
                let op = match (b, eq) {
                    (b'<', true) => CompareOp::Le,
                    (b'<', false) => CompareOp::Lt,
                    (b'>', true) => CompareOp::Ge,
                    (b'>', false) => CompareOp::Gt,
                    (b'=', true) => CompareOp::Eq,
                    (b'!', true) => CompareOp::Ne,
                    (b'=', false) => {
                        return Err(err(start, "\"=\" is not an operator; compare with \"==\"".into()));
                    }
                    _ => {
                        return Err(err(
                            start,
                            "\"!\" is not an operator; use \"!=\" or \"not\"".into(),
                        ));
                    }
                };
                tokens.push((start, Token::Op(op)));
                i += if eq { 2 } else { 1 };
            }
            b'"' | b'\'' => {
                let quote = b;
                let mut value = String::new();
                i += 1;
                loop {
                    let Some(&c) = bytes.get(i) else {
                        return Err(err(start, "a quoted member is not closed".into()));
                    };
                    if c == quote {
                        i += 1;
                        break;
                    }
                    if c == b'\\' && matches!(bytes.get(i + 1), Some(&n) if n == quote || n == b'\\') {
                        value.push(char::from(bytes[i + 1]));
                        i += 2;
                        continue;
                    }
                    let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
                    if ch.is_control() {
                        return Err(err(i, "a control character in a quoted member".into()));
                    }
                    value.push(ch);
                    i += ch.len_utf8().max(1);
                }
                tokens.push((start, Token::Quoted(value)));
            }
            _ if is_word_byte(b) => {
                while i < bytes.len() && is_word_byte(bytes[i]) {
                    i += 1;
                }
                tokens.push((start, Token::Word(&text[start..i])));
            }
            _ => {
                let ch = text[i..].chars().next().unwrap_or('\u{fffd}');
                return Err(err(start, format!("unexpected character {ch:?}")));
            }
        }
    }
    Ok(tokens)
}

struct Parser<'a> {
    tokens: Vec<(usize, Token<'a>)>,
    next: usize,
    len: usize,
    depth: usize,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<&Token<'a>> {
        self.tokens.get(self.next).map(|(_, t)| t)
    }

    /// Where the next token starts, or the end of the text.
    fn at(&self) -> usize {
        self.tokens.get(self.next).map_or(self.len, |(at, _)| *at)
    }

    fn err<T>(&self, message: impl Into<String>) -> Result<T, ConditionError> {
        Err(ConditionError {
            at: self.at(),
            message: message.into(),
        })
    }

    fn is_word(&self, word: &str) -> bool {
        matches!(self.peek(), Some(Token::Word(w)) if *w == word)
    }

    fn or(&mut self) -> Result<Condition, ConditionError> {
        let mut items = vec![self.and()?];
        while self.is_word("or") {
            self.next += 1;
            items.push(self.and()?);
        }
        Ok(if items.len() == 1 {
            items.pop().expect("one item")
        } else {
            Condition::Any(items)
        })
    }

    fn and(&mut self) -> Result<Condition, ConditionError> {
        let mut items = vec![self.unary()?];
        while self.is_word("and") {
            self.next += 1;
            items.push(self.unary()?);
        }
        Ok(if items.len() == 1 {
            items.pop().expect("one item")
        } else {
            Condition::All(items)
        })
    }

    fn deeper(&mut self) -> Result<(), ConditionError> {
        if self.depth >= CONDITION_DEPTH_MAX {
            return self.err(format!(
                "nested more than {CONDITION_DEPTH_MAX} deep (parentheses and \"not\")"
            ));
        }
        self.depth += 1;
        Ok(())
    }

    fn unary(&mut self) -> Result<Condition, ConditionError> {
        if self.is_word("not") {
            self.deeper()?;
            self.next += 1;
            let inner = self.unary()?;
            self.depth -= 1;
            return Ok(Condition::Not(Box::new(inner)));
        }
        match self.peek() {
            Some(Token::Open) => {
                self.deeper()?;
                self.next += 1;
                let inner = self.or()?;
                if self.peek() != Some(&Token::Close) {
                    return self.err("expected \")\"");
                }
                self.next += 1;
                self.depth -= 1;
                Ok(inner)
            }
            Some(Token::Word("quality"))
                if self.tokens.get(self.next + 1).map(|(_, t)| t) == Some(&Token::Open) =>
            {
                self.quality()
            }
            Some(Token::Word(_)) => self.comparison(),
            None => self.err("the condition ends where a comparison was expected"),
            Some(_) => self.err("expected a comparison, \"quality(...)\", \"not\" or \"(\""),
        }
    }

    fn point(&mut self) -> Result<String, ConditionError> {
        match self.peek() {
            Some(Token::Word(w)) if is_point_word(w) => {
                let w = (*w).to_owned();
                self.next += 1;
                Ok(w)
            }
            Some(Token::Word(w)) => {
                let w = *w;
                self.err(format!("{w:?} is not a point id"))
            }
            _ => self.err("expected a point id"),
        }
    }

    fn comparison(&mut self) -> Result<Condition, ConditionError> {
        let point = self.point()?;
        let Some(Token::Op(op)) = self.peek() else {
            return self.err(format!(
                "expected a comparison operator (<, <=, >, >=, ==, !=) after {point:?}"
            ));
        };
        let op = *op;
        self.next += 1;
        let value = match self.peek() {
            Some(Token::Quoted(member)) => CommandValue::Member(member.clone()),
            Some(Token::Word("true")) => CommandValue::Bool(true),
            Some(Token::Word("false")) => CommandValue::Bool(false),
            Some(Token::Word(w)) => match number(w) {
                Some(v) => CommandValue::Number(v),
                None => {
                    let w = *w;
                    return self.err(format!(
                        "{w:?} is not a literal: a finite number, true, false or a \"quoted\" codebook member"
                    ));
                }
            },
            _ => {
                return self.err("expected a literal: a number, true, false or a \"quoted\" codebook member");
            }
        };
        self.next += 1;
        Ok(Condition::Compare { point, op, value })
    }

    fn quality(&mut self) -> Result<Condition, ConditionError> {
        self.next += 2; // `quality` `(`
        let point = self.point()?;
        if self.peek() != Some(&Token::Close) {
            return self.err("expected \")\" after the point id");
        }
        self.next += 1;
        let equals = match self.peek() {
            Some(Token::Op(CompareOp::Eq)) => true,
            Some(Token::Op(CompareOp::Ne)) => false,
            _ => return self.err("a quality compares only with \"==\" or \"!=\""),
        };
        self.next += 1;
        let quality = match self.peek() {
            Some(Token::Word(w)) => quality_name(w),
            _ => None,
        };
        let Some(quality) = quality else {
            return self.err(format!("expected a quality: {}", QUALITY_NAMES.join(", ")));
        };
        self.next += 1;
        Ok(Condition::Quality {
            point,
            equals,
            quality,
        })
    }
}

/// A word that can be a point id (as admission's `is_point_id`, minus the length bound,
/// which admission reports): dot-separated, non-empty parts of letters, digits, `_`, `-`.
fn is_point_word(w: &str) -> bool {
    !matches!(w, "and" | "or" | "not" | "true" | "false")
        && w.split('.').all(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// A finite number written in decimal (`85`, `-0.5`, `1e3`); never `inf` or `nan`.
fn number(w: &str) -> Option<f64> {
    let first = w.bytes().next()?;
    if !(first.is_ascii_digit() || matches!(first, b'-' | b'+' | b'.')) {
        return None;
    }
    w.parse::<f64>().ok().filter(|v| v.is_finite())
}

const QUALITY_NAMES: [&str; 7] = [
    "unknown",
    "restored",
    "live",
    "stale",
    "unavailable",
    "bad",
    "assumed",
];

fn quality_name(w: &str) -> Option<QualityName> {
    Some(match w {
        "unknown" => QualityName::Unknown,
        "restored" => QualityName::Restored,
        "live" => QualityName::Live,
        "stale" => QualityName::Stale,
        "unavailable" => QualityName::Unavailable,
        "bad" => QualityName::Bad,
        "assumed" => QualityName::Assumed,
        _ => return None,
    })
}

/// Parses a condition's text (see the module docs for the grammar).
pub fn parse(text: &str) -> Result<Condition, ConditionError> {
    if text.len() > CONDITION_BYTES_MAX {
        return Err(ConditionError {
            at: CONDITION_BYTES_MAX,
            message: format!(
                "the condition is {} bytes, more than the limit of {CONDITION_BYTES_MAX}",
                text.len()
            ),
        });
    }
    let mut parser = Parser {
        tokens: tokenize(text)?,
        next: 0,
        len: text.len(),
        depth: 0,
    };
    let condition = parser.or()?;
    if parser.next < parser.tokens.len() {
        return parser.err("expected \"and\", \"or\" or the end of the condition");
    }
    debug_assert_eq!(parser.depth, 0, "every nesting level is closed");
    Ok(condition)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmp(point: &str, op: CompareOp, value: CommandValue) -> Condition {
        Condition::Compare {
            point: point.into(),
            op,
            value,
        }
    }

    fn gt(point: &str, v: f64) -> Condition {
        cmp(point, CompareOp::Gt, CommandValue::Number(v))
    }

    fn err(text: &str) -> String {
        parse(text).expect_err("refused").to_string()
    }

    #[test]
    fn a_comparison_of_each_operator_and_literal() {
        assert_eq!(
            parse("boiler1.flow_temp > 85").unwrap(),
            gt("boiler1.flow_temp", 85.0)
        );
        for (text, op) in [
            ("a<1", CompareOp::Lt),
            ("a <= 1", CompareOp::Le),
            ("a>=1", CompareOp::Ge),
            ("a == 1", CompareOp::Eq),
            ("a != 1", CompareOp::Ne),
        ] {
            assert_eq!(
                parse(text).unwrap(),
                cmp("a", op, CommandValue::Number(1.0)),
                "{text}"
            );
        }
        assert_eq!(
            parse("x.y>-2.5e1").unwrap(),
            gt("x.y", -25.0),
            "a sign and an exponent"
        );
        assert_eq!(
            parse("ahu1.occupied == true").unwrap(),
            cmp("ahu1.occupied", CompareOp::Eq, CommandValue::Bool(true))
        );
        assert_eq!(
            parse(r#"pump1.state != "fault""#).unwrap(),
            cmp("pump1.state", CompareOp::Ne, CommandValue::Member("fault".into()))
        );
        assert_eq!(
            parse(r"m == 'it\'s'").unwrap(),
            cmp("m", CompareOp::Eq, CommandValue::Member("it's".into())),
            "single quotes, with an escaped quote"
        );
        assert_eq!(
            parse("quality(boiler1.flow_temp) != live").unwrap(),
            Condition::Quality {
                point: "boiler1.flow_temp".into(),
                equals: false,
                quality: QualityName::Live
            }
        );
    }

    /// `not` binds tighter than `and`, `and` tighter than `or`; runs flatten; parentheses
    /// override.
    #[test]
    fn precedence_not_over_and_over_or() {
        let (a, b, c, d) = (gt("a", 1.0), gt("b", 1.0), gt("c", 1.0), gt("d", 1.0));
        assert_eq!(
            parse("a > 1 or b > 1 and not c > 1").unwrap(),
            Condition::Any(vec![
                a.clone(),
                Condition::All(vec![b.clone(), Condition::Not(Box::new(c.clone()))])
            ])
        );
        assert_eq!(
            parse("a > 1 and b > 1 or c > 1 and d > 1").unwrap(),
            Condition::Any(vec![
                Condition::All(vec![a.clone(), b.clone()]),
                Condition::All(vec![c.clone(), d.clone()])
            ])
        );
        assert_eq!(
            parse("(a > 1 or b > 1) and c > 1").unwrap(),
            Condition::All(vec![Condition::Any(vec![a.clone(), b.clone()]), c.clone()])
        );
        assert_eq!(
            parse("a > 1 and b > 1 and c > 1").unwrap(),
            Condition::All(vec![a.clone(), b.clone(), c.clone()])
        );
        assert_eq!(
            parse("not (a > 1 or b > 1)").unwrap(),
            Condition::Not(Box::new(Condition::Any(vec![a, b])))
        );
    }

    #[test]
    fn errors_are_one_line_with_the_byte_position() {
        assert_eq!(
            err("a = 1"),
            "at byte 2: \"=\" is not an operator; compare with \"==\""
        );
        assert_eq!(
            err("a > 1 and"),
            "at byte 9: the condition ends where a comparison was expected"
        );
        assert_eq!(err("(a > 1"), "at byte 6: expected \")\"");
        assert_eq!(
            err("a > 1 b > 2"),
            "at byte 6: expected \"and\", \"or\" or the end of the condition"
        );
        assert_eq!(
            err("a > inf"),
            "at byte 4: \"inf\" is not a literal: a finite number, true, false or a \"quoted\" codebook member"
        );
        assert_eq!(
            err("a > nan"),
            "at byte 4: \"nan\" is not a literal: a finite number, true, false or a \"quoted\" codebook member"
        );
        assert_eq!(
            err("a 1"),
            "at byte 2: expected a comparison operator (<, <=, >, >=, ==, !=) after \"a\""
        );
        assert_eq!(err("a > \"x"), "at byte 4: a quoted member is not closed");
        assert_eq!(err("a > 1 & b"), "at byte 6: unexpected character '&'");
        assert_eq!(err("a..b > 1"), "at byte 0: \"a..b\" is not a point id");
        assert_eq!(
            err("quality(a) > live"),
            "at byte 11: a quality compares only with \"==\" or \"!=\""
        );
        assert_eq!(
            err("quality(a) == fine"),
            "at byte 14: expected a quality: unknown, restored, live, stale, unavailable, bad, assumed"
        );
        assert_eq!(
            err(""),
            "at byte 0: the condition ends where a comparison was expected"
        );
        assert_eq!(
            err("!a"),
            "at byte 0: \"!\" is not an operator; use \"!=\" or \"not\""
        );
        assert_eq!(err("a > 1 and and"), "at byte 10: \"and\" is not a point id");
    }

    #[test]
    fn length_and_nesting_are_bounded() {
        let long = format!("a > 1{}", " ".repeat(CONDITION_BYTES_MAX));
        assert_eq!(
            err(&long),
            format!(
                "at byte 2048: the condition is {} bytes, more than the limit of 2048",
                long.len()
            )
        );
        let nested = |n: usize| format!("{}a > 1{}", "(".repeat(n), ")".repeat(n));
        assert!(parse(&nested(CONDITION_DEPTH_MAX)).is_ok());
        assert_eq!(
            err(&nested(CONDITION_DEPTH_MAX + 1)),
            "at byte 16: nested more than 16 deep (parentheses and \"not\")"
        );
        let nots = format!("{}a > 1", "not ".repeat(CONDITION_DEPTH_MAX + 1));
        assert!(err(&nots).contains("nested more than 16 deep"));
    }

    proptest::proptest! {
        /// Condition-shaped noise never panics.
        #[test]
        fn never_panics(text in "[a-z.()<>=! \"'0-9-]{0,60}|(not |and |or |quality\\(|\\) |[a-z]{1,3} |[<>=!]=? |-?[0-9.e]{1,4} |\"[a-zé]{0,3}\" ){0,20}") {
            let _ = parse(&text);
        }
    }
}
