//! The hourly object (spec: "Хранение часовыми объектами", "Хеш как детектор изменений"): the
//! gzip codec of its payload, the merge of arriving points into it, and its canonical hash.
//!
//! The payload is gzip of a JSON array `[[start_us,end_us,POINT,ALTERNATE...],...]` ordered by
//! time, where POINT is the coordinate's winner and each ALTERNATE another undominated
//! candidate (see `points`: they decide future winners), every one written verbatim as it
//! arrived (no re-serialisation, so no HTML escaping and no rounding). A row of schema 1 has no
//! alternates. The hash is SHA-256 over each coordinate and the canonical forms of every kept
//! candidate with lengths, so it changes exactly when the canonical content changes.
//!
//! The object limits ([`POINTS_PER_OBJECT_MAX`], [`OBJECT_BYTES_MAX`],
//! [`FORMS_PER_COORDINATE_MAX`]) are checked when an object is written as well as when it is
//! read back, so no delivery can write an object that every later delivery fails to decode.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};

use crate::limits::{FORMS_PER_COORDINATE_MAX, OBJECT_BYTES_MAX, POINTS_PER_OBJECT_MAX};
use crate::points::{Candidate, TooManyForms, resolve};
use crate::time::hour_start_us;

/// A point as an object holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPoint {
    pub start_us: i64,
    pub end_us: i64,
    /// The winner's bytes, as they arrived.
    pub raw: Box<str>,
    /// The other undominated candidates' bytes, in canonical order.
    pub alternates: Vec<Box<str>>,
}

/// A payload that cannot be decoded, or an object over its limits.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object payload does not gunzip: {0}")]
    Gzip(std::io::Error),
    #[error("object payload is over {OBJECT_BYTES_MAX} bytes decompressed")]
    TooLarge,
    /// Only the error's category and position: serde_json's message can quote stored values,
    /// and this text reaches WARN logs and the journal.
    #[error(
        "object payload is not the `[[start,end,point,...],...]` array ({category} error at line {line}, column {column})"
    )]
    Shape {
        category: &'static str,
        line: usize,
        column: usize,
    },
    #[error("object payload row #{0} is not `[start,end,point,...]`")]
    Row(usize),
    #[error(
        "object payload row #{0} is out of order, ends before it starts, or starts outside the object's hour"
    )]
    RowOutOfPlace(usize),
    #[error("object holds more than {POINTS_PER_OBJECT_MAX} points")]
    TooManyPoints,
    #[error(transparent)]
    TooManyForms(#[from] TooManyForms),
}

/// Encodes points (already ordered by coordinate) as a gzip payload, refusing an object over
/// its limits.
pub fn encode(points: &[StoredPoint]) -> Result<Vec<u8>, ObjectError> {
    debug_assert!(
        points
            .windows(2)
            .all(|w| (w[0].start_us, w[0].end_us) < (w[1].start_us, w[1].end_us))
    );
    if points.len() > POINTS_PER_OBJECT_MAX {
        return Err(ObjectError::TooManyPoints);
    }
    let size: usize = points
        .iter()
        .map(|p| p.raw.len() + p.alternates.iter().map(|a| a.len() + 1).sum::<usize>() + 44)
        .sum::<usize>()
        + 2;
    if size > OBJECT_BYTES_MAX {
        return Err(ObjectError::TooLarge);
    }
    let mut json = String::with_capacity(size);
    json.push('[');
    for (i, p) in points.iter().enumerate() {
        if p.alternates.len() + 1 > FORMS_PER_COORDINATE_MAX {
            return Err(TooManyForms.into());
        }
        if i > 0 {
            json.push(',');
        }
        json.push('[');
        json.push_str(&p.start_us.to_string());
        json.push(',');
        json.push_str(&p.end_us.to_string());
        json.push(',');
        json.push_str(&p.raw);
        for alt in &p.alternates {
            json.push(',');
            json.push_str(alt);
        }
        json.push(']');
    }
    json.push(']');
    if json.len() > OBJECT_BYTES_MAX {
        return Err(ObjectError::TooLarge);
    }
    let mut encoder = GzEncoder::new(Vec::with_capacity(json.len() / 4), Compression::default());
    Ok(encoder
        .write_all(json.as_bytes())
        .and_then(|()| encoder.finish())
        .expect("invariant: gzip into a Vec cannot fail"))
}

/// Decodes a payload written by [`encode`] for the object of the hour starting at `hour_us`.
/// A stored row is checked as an arriving one is: a row out of coordinate order, ending before
/// it starts or starting outside the hour is an error (a damaged file), never a panic later.
pub fn decode(payload: &[u8], hour_us: i64) -> Result<Vec<StoredPoint>, ObjectError> {
    let mut json = String::new();
    GzDecoder::new(payload)
        .take(OBJECT_BYTES_MAX as u64 + 1)
        .read_to_string(&mut json)
        .map_err(ObjectError::Gzip)?;
    if json.len() > OBJECT_BYTES_MAX {
        return Err(ObjectError::TooLarge);
    }
    let rows: Vec<Vec<&RawValue>> = serde_json::from_str(&json).map_err(|e| {
        let (category, line, column) = crate::hae::json_position(&e);
        ObjectError::Shape {
            category,
            line,
            column,
        }
    })?;
    if rows.len() > POINTS_PER_OBJECT_MAX {
        return Err(ObjectError::TooManyPoints);
    }
    let mut previous: Option<(i64, i64)> = None;
    let mut points = Vec::with_capacity(rows.len());
    for (i, row) in rows.into_iter().enumerate() {
        if row.len() < 3 || row.len() - 2 > FORMS_PER_COORDINATE_MAX {
            return Err(ObjectError::Row(i));
        }
        let int = |r: &RawValue| r.get().parse::<i64>().map_err(|_| ObjectError::Row(i));
        let (start_us, end_us) = (int(row[0])?, int(row[1])?);
        let in_place = end_us >= start_us
            && hour_start_us(start_us) == hour_us
            && previous.is_none_or(|p| p < (start_us, end_us));
        if !in_place {
            return Err(ObjectError::RowOutOfPlace(i));
        }
        previous = Some((start_us, end_us));
        points.push(StoredPoint {
            start_us,
            end_us,
            raw: row[2].get().into(),
            alternates: row[3..].iter().map(|r| r.get().into()).collect(),
        });
    }
    Ok(points)
}

/// The result of merging arriving candidates into an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// One point per coordinate, ordered by (start, end).
    pub points: Vec<StoredPoint>,
    /// SHA-256 of the canonical content.
    pub hash: [u8; 32],
    /// First start and last end among the points (the catalog's bounds).
    pub first_us: i64,
    pub last_us: i64,
    /// Coordinates where an arriving candidate differs canonically from the stored winner (or,
    /// for a new coordinate, from another arriving candidate): the spec's "перезапись".
    pub collisions: u32,
    /// Of those, coordinates where a kept candidate's non-empty key set is incomparable with
    /// the winner's.
    pub incomparable: u32,
}

/// Merges `incoming` into the points of a stored object (empty for a new hour). Stored
/// coordinates are never removed; each coordinate keeps the [`resolve`] of its stored
/// candidates (winner and alternates) and every arriving candidate.
pub fn merge(stored: &[StoredPoint], incoming: &[&Candidate]) -> Result<Merged, ObjectError> {
    assert!(
        !stored.is_empty() || !incoming.is_empty(),
        "invariant: merge has something to merge"
    );
    let hour = stored
        .first()
        .map(|p| hour_start_us(p.start_us))
        .or_else(|| incoming.first().map(|c| hour_start_us(c.start_us)))
        .expect("invariant: non-empty");
    // Per coordinate: the stored winner's canonical form (if any) and every candidate.
    let mut stored_cands: Vec<Candidate> = Vec::with_capacity(stored.len());
    let mut stored_winner_form: BTreeMap<(i64, i64), usize> = BTreeMap::new();
    for p in stored {
        stored_winner_form.insert((p.start_us, p.end_us), stored_cands.len());
        stored_cands.push(Candidate::from_raw(p.start_us, p.end_us, &p.raw));
        for alt in &p.alternates {
            stored_cands.push(Candidate::from_raw(p.start_us, p.end_us, alt));
        }
    }
    let mut by_coordinate: BTreeMap<(i64, i64), (Vec<&Candidate>, usize)> = BTreeMap::new();
    for c in &stored_cands {
        by_coordinate.entry(c.coordinate()).or_default().0.push(c);
    }
    for c in incoming.iter().copied() {
        assert_eq!(
            hour_start_us(c.start_us),
            hour,
            "invariant: an object holds one start hour"
        );
        let entry = by_coordinate.entry(c.coordinate()).or_default();
        entry.0.push(c);
        entry.1 += 1;
    }
    let mut points = Vec::with_capacity(by_coordinate.len());
    let mut hasher = Sha256::new();
    let (mut collisions, mut incomparable) = (0u32, 0u32);
    let mut last_us = i64::MIN;
    for ((start_us, end_us), (cands, arriving)) in &by_coordinate {
        let resolution = resolve(cands)?;
        let kept: Vec<&Candidate> = resolution.kept.iter().map(|&i| cands[i]).collect();
        let arrivals = &cands[cands.len() - arriving..];
        let collided = match stored_winner_form.get(&(*start_us, *end_us)) {
            Some(&at) => arrivals.iter().any(|c| c.canonical != stored_cands[at].canonical),
            None => arrivals.iter().any(|c| c.canonical != arrivals[0].canonical),
        };
        collisions += u32::from(collided);
        incomparable += u32::from(collided && resolution.incomparable);
        hasher.update(start_us.to_le_bytes());
        hasher.update(end_us.to_le_bytes());
        hasher.update((kept.len() as u64).to_le_bytes());
        for k in &kept {
            hasher.update((k.canonical.len() as u64).to_le_bytes());
            hasher.update(k.canonical.as_bytes());
        }
        last_us = last_us.max(*end_us);
        points.push(StoredPoint {
            start_us: *start_us,
            end_us: *end_us,
            raw: kept[0].raw.clone(),
            alternates: kept[1..].iter().map(|k| k.raw.clone()).collect(),
        });
    }
    let first_us = points.first().map(|p| p.start_us).expect("invariant: non-empty");
    assert!(
        points.len() >= stored.len(),
        "invariant: points are never removed from an object"
    );
    Ok(Merged {
        points,
        hash: hasher.finalize().into(),
        first_us,
        last_us,
        collisions,
        incomparable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::HOUR_US;
    use proptest::prelude::*;

    #[test]
    fn payload_round_trips_bytes_verbatim() {
        let points = vec![
            StoredPoint {
                start_us: 10,
                end_us: 10,
                raw: r#"{ "qty" : 1.50, "note":"a&b<c>" }"#.into(),
                alternates: vec![],
            },
            StoredPoint {
                start_us: 10,
                end_us: 20,
                raw: "{\n\"qty\":2}".into(),
                alternates: vec![r#"{"qty":3}"#.into()],
            },
        ];
        assert_eq!(
            decode(&encode(&points).expect("encodes"), 0).expect("decodes"),
            points
        );
        assert!(decode(b"not gzip", 0).is_err());
    }

    fn gzip(json: &str) -> Vec<u8> {
        let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(json.as_bytes()).expect("writes");
        encoder.finish().expect("gzips")
    }

    /// A damaged stored row is an error naming the row, never a panic in the merge, and the
    /// error text quotes no stored value.
    #[test]
    fn a_damaged_stored_row_is_an_error_not_a_panic() {
        let h = HOUR_US;
        let cases = [
            (
                format!(r#"[[{},{},{{"qty":1}}]]"#, h + 5, h + 4),
                "ends before it starts",
            ),
            (
                format!(r#"[[{},{},{{"qty":1}}]]"#, h + HOUR_US, h + HOUR_US),
                "another hour",
            ),
            (
                format!(r#"[[{a},{a},{{"qty":1}}],[{a},{a},{{"qty":2}}]]"#, a = h + 1),
                "a repeated coordinate",
            ),
        ];
        for (json, what) in &cases {
            let err = decode(&gzip(json), h).expect_err(what);
            assert!(matches!(err, ObjectError::RowOutOfPlace(_)), "{what}: {err}");
        }
        let err = decode(&gzip(r#"{"secret-value-72.5":1}"#), h).expect_err("not an array");
        let text = err.to_string();
        assert!(matches!(err, ObjectError::Shape { .. }), "{text}");
        assert!(!text.contains("72.5") && !text.contains("secret"), "{text}");
        let err = decode(&gzip(r#"[["secret",1,{}]]"#), h).expect_err("a string start");
        assert!(!err.to_string().contains("secret"), "{err}");
    }

    #[test]
    fn merge_keeps_stored_coordinates_and_hash_ignores_noise() {
        let a = Candidate::from_raw(HOUR_US, HOUR_US, r#"{"qty":1.5,"date":"x"}"#);
        let first = merge(&[], &[&a]).expect("merges");
        let b = Candidate::from_raw(HOUR_US + 5, HOUR_US + 5, r#"{"qty":2}"#);
        let second = merge(&first.points, &[&b]).expect("merges");
        assert_eq!(second.points.len(), 2);
        let noisy = Candidate::from_raw(HOUR_US, HOUR_US, r#"{"date":"x","qty":1.5000000000000002}"#);
        let third = merge(&second.points, &[&noisy]).expect("merges");
        assert_eq!(third.hash, second.hash);
        assert_eq!(third.collisions, 0);
    }

    #[test]
    fn an_object_over_its_limits_is_refused_when_written() {
        let at = HOUR_US;
        let big = StoredPoint {
            start_us: at,
            end_us: at,
            raw: format!(r#""{}""#, "x".repeat(OBJECT_BYTES_MAX)).into(),
            alternates: vec![],
        };
        assert!(matches!(encode(&[big]), Err(ObjectError::TooLarge)));
        let forms: Vec<Candidate> = (0..=FORMS_PER_COORDINATE_MAX)
            .map(|i| Candidate::from_raw(at, at, &format!(r#"{{"k{i}":1}}"#)))
            .collect();
        let refs: Vec<&Candidate> = forms.iter().collect();
        assert!(matches!(merge(&[], &refs), Err(ObjectError::TooManyForms(_))));
    }

    proptest! {
        /// Folding candidates into an object in any order and any split gives the same hash.
        #[test]
        fn merge_is_order_and_split_independent(
            items in prop::collection::vec((0i64..4, 0u8..3, 0u8..4), 1..12),
            cut in 0usize..12,
        ) {
            let cands: Vec<Candidate> = items.iter().map(|(s, kind, v)| {
                let raw = match kind {
                    0 => format!(r#"{{"date":"d","qty":{v}}}"#),
                    1 => format!(r#"{{"qty":{v},"date":"d","Min":{v},"Max":0}}"#),
                    _ => format!(r#"{{"date":"d","qty":{v},"source":"w{v}"}}"#),
                };
                Candidate::from_raw(HOUR_US + s, HOUR_US + s, &raw)
            }).collect();
            let refs: Vec<&Candidate> = cands.iter().collect();
            let whole = merge(&[], &refs).expect("merges");
            let cut = cut % refs.len();
            let mut reversed = refs.clone();
            reversed.reverse();
            let (a, b) = reversed.split_at(cut);
            let staged = if a.is_empty() { merge(&[], b).expect("merges") } else { merge(&merge(&[], a).expect("merges").points, b).expect("merges") };
            prop_assert_eq!(staged.hash, whole.hash);
            let again = merge(&whole.points, &refs).expect("merges");
            prop_assert_eq!(again.points, whole.points);
        }
    }
}
