//! Entities with an id of their own (spec: "Хранение сущностей с собственным
//! идентификатором", "Замена версии сущности не теряет содержания", "Пропущенные сущности видны
//! в учётной записи доставки"): workouts keyed by id, and records of the six id-bearing
//! sections keyed by section + id; the coverage rule, the in-body choice among versions of one
//! id, and the decision table against the stored version.
//!
//! A version is read once, before any transaction ([`EntityVersion::read`]): its canonical form
//! is computed as a stream (`canon::stream_members`, no `Value` tree) straight into SHA-256,
//! and what the decision table needs of it — the top-level keys, their emptiness, the shape of
//! each value, every top-level array's length and non-empty elements — is kept as its
//! [`Shape`], stored beside the entity. Deciding against a stored version then reads only the
//! stored hash, shape and provenance: the stored content is never parsed inside the write
//! transaction (the spec's residual limit, closed), and [`ENTITY_BYTES_MAX`] bounds what one
//! entity's write holds the lock for.
//!
//! Shapes per HAE's public "API Export – JSON Format": workouts v2 carry `id`, `name`,
//! `start`, `end`, `duration` (seconds); v1 has no `id`, so such a workout cannot be keyed and
//! is skipped and counted, its neighbours kept. Of the record sections only `stateOfMind`
//! documents an `id`; `medications`, `symptoms`, `cycleTracking`, `ecg` and
//! `heartRateNotifications` are keyed by (section, id) when their elements carry one and are
//! otherwise skipped and counted the same way. A record's time is `start`, else `date`.
//!
//! The order among undominated versions is by the SHA-256 of the canonical form, then the raw
//! bytes: a total order fixed by the forms alone (the spec names "the minimum of the canonical
//! form"; the hash stands for it so the form itself need not be kept).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::canon::{self, Streamed};
use crate::limits::{ENTITY_BYTES_MAX, ENTITY_ID_BYTES_MAX, ENTITY_KEYS_MAX, VERSIONS_PER_ENTITY_MAX};
use crate::time::{offset_minutes, parse_timestamp_us};

/// The workouts section: one row per workout, keyed by id.
pub const WORKOUTS_SECTION: &str = "workouts";
/// The record sections: one row per record, keyed by (section, id).
pub const RECORD_SECTIONS: [&str; 6] = [
    "stateOfMind",
    "medications",
    "symptoms",
    "cycleTracking",
    "ecg",
    "heartRateNotifications",
];

/// Canonical forms of entity versions computed on this thread so far (tests hold the fold to
/// "once per arriving version", busy retries included). Counted where the form is computed,
/// in [`canon::stream_members`], so no path computes one uncounted.
pub fn canonical_forms_computed() -> u64 {
    canon::streamed_forms_computed()
}

/// Where an entity lives: which section, which id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EntityKey {
    pub section: String,
    pub id: String,
}

impl EntityKey {
    pub fn is_workout(&self) -> bool {
        self.section == WORKOUTS_SECTION
    }
}

/// The header columns, for selection by time (not a parse of the content).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Header {
    pub name: Option<String>,
    /// A workout's `start`; a record's `start`, else `date`.
    pub start_us: Option<i64>,
    pub end_us: Option<i64>,
    pub tz_offset_min: Option<i32>,
    /// Seconds; `None` when the source sent none (0 is a real duration).
    pub duration_s: Option<f64>,
}

/// What one top-level value looks like: all the coverage rule reads of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct KeyShape {
    /// `e`: the value is empty (the one emptiness dictionary).
    #[serde(rename = "e")]
    pub empty: bool,
    /// `f`: `o` object, `a` array, `s` scalar.
    #[serde(rename = "f")]
    pub form: char,
    /// `n`: an array's length.
    #[serde(rename = "n")]
    pub elements: u64,
    /// `c`: an array's non-empty elements.
    #[serde(rename = "c")]
    pub nonempty_elements: u64,
}

impl KeyShape {
    fn of(value: &Streamed) -> Self {
        Self {
            empty: canon::is_empty_canonical(&value.text),
            form: match value.text.as_bytes().first() {
                Some(b'{') => 'o',
                Some(b'[') => 'a',
                _ => 's',
            },
            elements: value.elements,
            nonempty_elements: value.nonempty_elements,
        }
    }
}

/// A version's coverage summary: its top-level keys and their shapes. Content that is not a
/// JSON object has the empty shape (it loses to any version with content).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Shape {
    pub keys: BTreeMap<String, KeyShape>,
}

impl Shape {
    fn nonempty(&self) -> impl Iterator<Item = (&String, &KeyShape)> {
        self.keys.iter().filter(|(_, k)| !k.empty)
    }

    /// Stored beside the entity as compact JSON.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).expect("invariant: a shape serialises")
    }

    pub fn from_text(text: &str) -> Option<Self> {
        serde_json::from_str(text).ok()
    }

    /// Whether a version of this shape covers a version of shape `stored` (spec: the four
    /// coverage conditions, all on the top level):
    /// 1. every non-empty key of `stored` is here and non-empty;
    /// 2. when the non-empty key sets are equal, every key of `stored`, empty ones included;
    /// 3. a non-empty object stays an object and a non-empty array an array;
    /// 4. a non-empty array keeps its length and its non-empty elements.
    ///
    /// Values are never compared: a source re-counting an entity changes them every time.
    pub fn covers(&self, stored: &Shape) -> bool {
        for (key, s) in stored.nonempty() {
            let Some(a) = self.keys.get(key).filter(|a| !a.empty) else {
                return false; // 1
            };
            match s.form {
                'o' if a.form != 'o' => return false, // 3
                'a' if a.form != 'a' => return false, // 3
                'a' if a.elements < s.elements || a.nonempty_elements < s.nonempty_elements => {
                    return false; // 4
                }
                _ => {}
            }
        }
        let same_nonempty = self
            .nonempty()
            .map(|(k, _)| k)
            .eq(stored.nonempty().map(|(k, _)| k));
        if same_nonempty && stored.keys.keys().any(|k| !self.keys.contains_key(k)) {
            return false; // 2
        }
        true
    }
}

/// Why an element of a covered section was skipped (counted on the delivery, logged by
/// section and index, never by content).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    NotAnObject,
    NoId,
    IdTooLong,
    BadTimestamp,
    TooLarge,
    TooManyKeys,
    TooManyVersions,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NotAnObject => "not a JSON object",
            Self::NoId => "no string `id` (e.g. a workout of HAE export version 1)",
            Self::IdTooLong => "id over the length limit or with control characters",
            Self::BadTimestamp => "a timestamp that does not parse",
            Self::TooLarge => "over the entity size limit",
            Self::TooManyKeys => "over the limit of top-level keys",
            Self::TooManyVersions => "one of more distinct versions of one id in one body than the limit",
        }
    }
}

/// A skipped element.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    pub section: String,
    pub index: usize,
    pub reason: SkipReason,
}

/// One arriving version of an entity, read before any transaction.
#[derive(Debug, Clone, PartialEq)]
pub struct EntityVersion {
    pub key: EntityKey,
    /// The element's index in its section (for a skip's log record).
    pub index: usize,
    pub header: Header,
    /// The version's bytes exactly as they arrived.
    pub raw: Box<str>,
    /// SHA-256 of the canonical form (computed once, as a stream).
    pub hash: [u8; 32],
    pub shape: Shape,
}

#[derive(Deserialize)]
struct HeadIn {
    #[serde(default)]
    id: Option<Value>,
    #[serde(default)]
    name: Option<Value>,
    #[serde(default)]
    start: Option<Value>,
    #[serde(default)]
    end: Option<Value>,
    #[serde(default)]
    date: Option<Value>,
    #[serde(default)]
    duration: Option<Value>,
}

/// A timestamp field: absent or null is `None`; present, it must be a string that parses.
fn stamp(v: Option<&Value>) -> Result<Option<(i64, Option<i32>)>, SkipReason> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) => parse_timestamp_us(text)
            .map(|at| Some((at, offset_minutes(text))))
            .map_err(|_| SkipReason::BadTimestamp),
        Some(_) => Err(SkipReason::BadTimestamp),
    }
}

impl EntityVersion {
    /// Reads one element of `section`: its key, header, shape and canonical hash, or why it is
    /// skipped. The canonical form is computed here and nowhere else.
    pub fn read(section: &str, index: usize, raw: &str, id_bytes_max: usize) -> Result<Self, SkipReason> {
        if raw.len() > ENTITY_BYTES_MAX {
            return Err(SkipReason::TooLarge);
        }
        // serde's derive reads a struct from an array too: only an object is an entity.
        if !raw.trim_start().starts_with('{') {
            return Err(SkipReason::NotAnObject);
        }
        let head: HeadIn = serde_json::from_str(raw).map_err(|_| SkipReason::NotAnObject)?;
        let id = match head.id {
            Some(Value::String(id)) if !id.is_empty() => id,
            _ => return Err(SkipReason::NoId),
        };
        if id.len() > id_bytes_max.min(ENTITY_ID_BYTES_MAX) || id.chars().any(char::is_control) {
            return Err(SkipReason::IdTooLong);
        }
        let start = stamp(head.start.as_ref())?;
        let start = match (start, section == WORKOUTS_SECTION) {
            (None, false) => stamp(head.date.as_ref())?,
            (s, _) => s,
        };
        let end = stamp(head.end.as_ref())?;
        let header = Header {
            name: match head.name {
                Some(Value::String(n)) if section == WORKOUTS_SECTION => Some(n),
                _ => None,
            },
            start_us: start.map(|s| s.0),
            end_us: end.map(|e| e.0),
            tz_offset_min: start.and_then(|s| s.1),
            duration_s: match head.duration {
                Some(Value::Number(n)) if section == WORKOUTS_SECTION => n.as_f64(),
                _ => None,
            },
        };
        let members = canon::stream_members(raw).ok_or(SkipReason::NotAnObject)?;
        if members.len() > ENTITY_KEYS_MAX {
            return Err(SkipReason::TooManyKeys);
        }
        let mut hasher = Sha256::new();
        canon::feed_object(&members, |b| hasher.update(b));
        let shape = Shape {
            keys: members
                .iter()
                .map(|(k, v)| (k.clone(), KeyShape::of(v)))
                .collect(),
        };
        Ok(Self {
            key: EntityKey {
                section: section.to_string(),
                id,
            },
            index,
            header,
            raw: raw.into(),
            hash: hasher.finalize().into(),
            shape,
        })
    }

    fn precedes(&self, other: &Self) -> bool {
        (self.hash, &self.raw) < (other.hash, &other.raw)
    }
}

/// Chooses among the versions of one key in one body, as a function of the set (spec: "Версии
/// одного ключа внутри одной доставки…"): versions with one canonical form collapse first (the
/// smaller raw bytes kept), then every version strictly covered by another is dropped, then
/// the minimum of the rest by (canonical hash, raw bytes). Returns the winner and how many
/// candidates differ canonically from it (the separate "differing versions" counter), or, past
/// [`VERSIONS_PER_ENTITY_MAX`] distinct forms (the choice is quadratic and the count comes from
/// a foreign body), the versions back, to be skipped and counted.
pub fn choose_in_body(versions: Vec<EntityVersion>) -> Result<(EntityVersion, u64), Vec<EntityVersion>> {
    assert!(!versions.is_empty(), "invariant: a key has a version");
    let total = versions.len();
    let mut by_hash: BTreeMap<[u8; 32], (EntityVersion, u64)> = BTreeMap::new();
    // Same-form versions not kept: on a refusal they are skipped and counted too, so the skip
    // counter counts elements of the body, not forms.
    let mut collapsed: Vec<EntityVersion> = Vec::new();
    for v in versions {
        match by_hash.get_mut(&v.hash) {
            Some((kept, n)) => {
                *n += 1;
                if v.raw < kept.raw {
                    collapsed.push(std::mem::replace(kept, v));
                } else {
                    collapsed.push(v);
                }
            }
            None => {
                by_hash.insert(v.hash, (v, 1));
            }
        }
    }
    if by_hash.len() > VERSIONS_PER_ENTITY_MAX {
        let mut refused: Vec<EntityVersion> = by_hash.into_values().map(|(v, _)| v).collect();
        refused.extend(collapsed);
        refused.sort_by_key(|v| v.index);
        debug_assert_eq!(refused.len(), total);
        return Err(refused);
    }
    drop(collapsed);
    let forms: Vec<(EntityVersion, u64)> = by_hash.into_values().collect();
    let strictly_covered = |i: usize| {
        forms.iter().enumerate().any(|(j, (o, _))| {
            j != i && o.shape.covers(&forms[i].0.shape) && !forms[i].0.shape.covers(&o.shape)
        })
    };
    let mut winner: Option<usize> = None;
    for i in 0..forms.len() {
        if strictly_covered(i) {
            continue;
        }
        if winner.is_none_or(|w| forms[i].0.precedes(&forms[w].0)) {
            winner = Some(i);
        }
    }
    // Strict covering is irreflexive and transitive on a finite set: someone survives.
    let w = winner.expect("invariant: a finite strict order has a maximal element");
    let same = forms[w].1;
    let (version, _) = forms.into_iter().nth(w).expect("invariant: in range");
    Ok((version, (total as u64) - same))
}

/// A journal position: (received_at_us, delivery id), compared in that order.
pub type Position = (i64, i64);

/// What the decision table needs of the stored version (read without its content).
#[derive(Debug, Clone, PartialEq)]
pub struct StoredHead {
    pub hash: Vec<u8>,
    pub shape: Shape,
    pub position: Position,
}

/// The outcome for one arriving version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// No stored version: write it.
    Insert,
    /// Row 1: the same canonical hash, a later position: provenance only, content untouched.
    RaiseProvenance,
    /// Row 1: the same canonical hash, not later: nothing changes.
    Unchanged,
    /// Rows 2 and 4: the arriving covers the stored and more, or they cover each other and the
    /// arriving is later in the journal: it replaces the stored version whole.
    Replace,
    /// Row 4: they cover each other and the stored is later: it stays, nothing counted.
    KeepLater,
    /// Rows 3 and 5: the arriving loses content of the stored, or the two are incomparable:
    /// the stored version stays, counted and logged (WARN, by id and section).
    Retain,
}

/// The decision table (spec: "Замена версии сущности не теряет содержания").
pub fn decide(stored: Option<&StoredHead>, arriving: &EntityVersion, at: Position) -> Decision {
    let Some(s) = stored else {
        return Decision::Insert;
    };
    if s.hash.as_slice() == arriving.hash.as_slice() {
        return if at > s.position {
            Decision::RaiseProvenance
        } else {
            Decision::Unchanged
        };
    }
    match (arriving.shape.covers(&s.shape), s.shape.covers(&arriving.shape)) {
        (true, false) => Decision::Replace,
        (true, true) if at > s.position => Decision::Replace,
        (true, true) => Decision::KeepLater,
        (false, _) => Decision::Retain,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(raw: &str) -> EntityVersion {
        EntityVersion::read(WORKOUTS_SECTION, 0, raw, ENTITY_ID_BYTES_MAX).expect("reads")
    }

    #[test]
    fn keys_headers_and_skips() {
        let w = v(
            r#"{"id":"W1","name":"Walk","start":"2024-09-21 7:57:00 am +1000","end":"2024-09-21 08:57:00 +1000","duration":3600,"route":[{"latitude":1}]}"#,
        );
        assert_eq!(w.header.duration_s, Some(3600.0));
        assert_eq!(w.header.tz_offset_min, Some(600));
        assert_eq!(
            w.header.end_us.zip(w.header.start_us).map(|(e, s)| e - s),
            Some(3_600_000_000)
        );
        assert_eq!(w.shape.keys["route"].elements, 1);
        let no_duration = v(r#"{"id":"W2","start":"2024-09-21 07:57:00 +1000"}"#);
        assert_eq!(no_duration.header.duration_s, None);
        let r = EntityVersion::read(
            "stateOfMind",
            0,
            r#"{"id":"S1","date":"2024-09-21 07:57:00 +1000"}"#,
            ENTITY_ID_BYTES_MAX,
        )
        .expect("reads");
        assert!(r.header.start_us.is_some());
        for (raw, reason) in [
            (r#"[1]"#, SkipReason::NotAnObject),
            (
                r#"{"name":"v1 walk","start":"2024-09-21 07:57:00 +1000"}"#,
                SkipReason::NoId,
            ),
            (r#"{"id":7}"#, SkipReason::NoId),
            (r#"{"id":"W","start":"soon"}"#, SkipReason::BadTimestamp),
        ] {
            assert_eq!(
                EntityVersion::read(WORKOUTS_SECTION, 0, raw, ENTITY_ID_BYTES_MAX),
                Err(reason),
                "{raw}"
            );
        }
        let huge = format!(r#"{{"id":"W","route":"{}"}}"#, "x".repeat(ENTITY_BYTES_MAX));
        assert_eq!(
            EntityVersion::read(WORKOUTS_SECTION, 0, &huge, ENTITY_ID_BYTES_MAX),
            Err(SkipReason::TooLarge),
            "refused before it is parsed"
        );
        let long = format!(r#"{{"id":"{}"}}"#, "x".repeat(ENTITY_ID_BYTES_MAX + 1));
        assert_eq!(
            EntityVersion::read(WORKOUTS_SECTION, 0, &long, ENTITY_ID_BYTES_MAX),
            Err(SkipReason::IdTooLong)
        );
    }

    #[test]
    fn the_four_coverage_conditions() {
        let stored = v(r#"{"id":"W","a":{"x":1},"route":[{"p":1},{"p":2}],"e":null}"#).shape;
        let grown = v(r#"{"id":"W","a":{"x":2},"route":[{"p":1},{"p":2},{"p":3}],"n":5}"#).shape;
        assert!(grown.covers(&stored) && !stored.covers(&grown));
        let lost_key = v(r#"{"id":"W","route":[{"p":1},{"p":2}],"e":null}"#).shape;
        assert!(!lost_key.covers(&stored), "1");
        let lost_empty = v(r#"{"id":"W","a":{"x":9},"route":[{"p":1},{"p":2}]}"#).shape;
        assert!(!lost_empty.covers(&stored) && stored.covers(&lost_empty), "2");
        let scalar = v(r#"{"id":"W","a":1,"route":[{"p":1},{"p":2}],"e":null}"#).shape;
        assert!(!scalar.covers(&stored), "3");
        let shorter = v(r#"{"id":"W","a":{"x":1},"route":[{"p":1}],"e":null}"#).shape;
        assert!(!shorter.covers(&stored), "4: length");
        let hollow = v(r#"{"id":"W","a":{"x":1},"route":[null,{}],"e":null}"#).shape;
        assert!(!hollow.covers(&stored), "4: non-empty elements");
    }

    #[test]
    fn too_many_versions_of_one_id_are_given_back_to_be_skipped() {
        let versions: Vec<EntityVersion> = (0..=VERSIONS_PER_ENTITY_MAX)
            .map(|i| v(&format!(r#"{{"id":"W","kcal":{}}}"#, i + 1)))
            .collect();
        assert_eq!(
            choose_in_body(versions).map(|_| ()).map_err(|v| v.len()),
            Err(VERSIONS_PER_ENTITY_MAX + 1)
        );
        let same: Vec<EntityVersion> = (0..=VERSIONS_PER_ENTITY_MAX)
            .map(|_| v(r#"{"id":"W","kcal":1}"#))
            .collect();
        assert!(
            choose_in_body(same).is_ok(),
            "equal forms collapse before the limit counts"
        );
        // Past the limit every element is given back, repeated forms too: the skip counter
        // counts the body's elements, not its distinct forms.
        let mut repeated: Vec<EntityVersion> = (0..=VERSIONS_PER_ENTITY_MAX)
            .map(|i| v(&format!(r#"{{"id":"W","kcal":{}}}"#, i + 1)))
            .collect();
        repeated.extend((0..5).map(|_| v(r#"{"id":"W","kcal":1}"#)));
        assert_eq!(
            choose_in_body(repeated).map(|_| ()).map_err(|v| v.len()),
            Err(VERSIONS_PER_ENTITY_MAX + 1 + 5)
        );
    }

    #[test]
    fn the_decision_table() {
        let stored = v(r#"{"id":"W","kcal":10}"#);
        let head = |p: i64| StoredHead {
            hash: stored.hash.to_vec(),
            shape: stored.shape.clone(),
            position: (0, p),
        };
        assert_eq!(decide(None, &stored, (0, 1)), Decision::Insert);
        assert_eq!(decide(Some(&head(1)), &stored, (0, 2)), Decision::RaiseProvenance);
        assert_eq!(decide(Some(&head(2)), &stored, (0, 2)), Decision::Unchanged);
        let recounted = v(r#"{"id":"W","kcal":12}"#);
        assert_eq!(decide(Some(&head(1)), &recounted, (0, 2)), Decision::Replace);
        assert_eq!(decide(Some(&head(3)), &recounted, (0, 2)), Decision::KeepLater);
        let grown = v(r#"{"id":"W","kcal":12,"route":[1]}"#);
        assert_eq!(decide(Some(&head(3)), &grown, (0, 2)), Decision::Replace);
        let other = v(r#"{"id":"W","steps":3}"#);
        assert_eq!(decide(Some(&head(1)), &other, (0, 2)), Decision::Retain);
    }
}
