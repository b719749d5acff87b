//! The hourly object (spec: "Хранение часовыми объектами", "Хеш как детектор изменений"): the
//! gzip codec of its payload, the merge of arriving points into it, and its canonical hash.
//!
//! The payload is gzip of a JSON array `[[start_us,end_us,POINT],...]` ordered by time, where
//! POINT is the point's arriving bytes, written verbatim (no re-serialisation, so no HTML
//! escaping and no rounding). The hash is SHA-256 over each point's coordinates and canonical
//! form with lengths, so it changes exactly when the canonical content changes.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};

use flate2::Compression;
use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use serde_json::value::RawValue;
use sha2::{Digest as _, Sha256};

use crate::limits::{OBJECT_BYTES_MAX, POINTS_PER_OBJECT_MAX};
use crate::points::{Candidate, resolve};
use crate::time::hour_start_us;

/// A point as an object holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredPoint {
    pub start_us: i64,
    pub end_us: i64,
    /// The bytes the point arrived with.
    pub raw: Box<str>,
}

/// A payload that cannot be decoded, or an object over its limits.
#[derive(Debug, thiserror::Error)]
pub enum ObjectError {
    #[error("object payload does not gunzip: {0}")]
    Gzip(std::io::Error),
    #[error("object payload is over {OBJECT_BYTES_MAX} bytes decompressed")]
    TooLarge,
    #[error("object payload is not the `[[start,end,point],...]` array: {0}")]
    Shape(serde_json::Error),
    #[error("object holds more than {POINTS_PER_OBJECT_MAX} points")]
    TooManyPoints,
}

/// Encodes points (already ordered by coordinate) as a gzip payload.
pub fn encode(points: &[StoredPoint]) -> Vec<u8> {
    debug_assert!(
        points
            .windows(2)
            .all(|w| (w[0].start_us, w[0].end_us) < (w[1].start_us, w[1].end_us))
    );
    let mut json = String::with_capacity(points.iter().map(|p| p.raw.len() + 40).sum::<usize>() + 2);
    json.push('[');
    for (i, p) in points.iter().enumerate() {
        if i > 0 {
            json.push(',');
        }
        json.push('[');
        json.push_str(&p.start_us.to_string());
        json.push(',');
        json.push_str(&p.end_us.to_string());
        json.push(',');
        json.push_str(&p.raw);
        json.push(']');
    }
    json.push(']');
    let mut encoder = GzEncoder::new(Vec::with_capacity(json.len() / 4), Compression::default());
    encoder
        .write_all(json.as_bytes())
        .and_then(|()| encoder.finish())
        .expect("invariant: gzip into a Vec cannot fail")
}

/// Decodes a payload written by [`encode`].
pub fn decode(payload: &[u8]) -> Result<Vec<StoredPoint>, ObjectError> {
    let mut json = String::new();
    GzDecoder::new(payload)
        .take(OBJECT_BYTES_MAX as u64 + 1)
        .read_to_string(&mut json)
        .map_err(ObjectError::Gzip)?;
    if json.len() > OBJECT_BYTES_MAX {
        return Err(ObjectError::TooLarge);
    }
    let rows: Vec<(i64, i64, &RawValue)> = serde_json::from_str(&json).map_err(ObjectError::Shape)?;
    if rows.len() > POINTS_PER_OBJECT_MAX {
        return Err(ObjectError::TooManyPoints);
    }
    Ok(rows
        .into_iter()
        .map(|(start_us, end_us, raw)| StoredPoint {
            start_us,
            end_us,
            raw: raw.get().into(),
        })
        .collect())
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
    /// Coordinates whose candidates carried more than one canonical form.
    pub collisions: u32,
    /// Of those, coordinates where a candidate's non-empty key set was incomparable with the winner's.
    pub incomparable: u32,
}

/// Merges `incoming` into the points of a stored object (empty for a new hour). Stored
/// coordinates are never removed; each coordinate keeps the winner of [`resolve`] over the
/// stored point and every arriving candidate.
pub fn merge(stored: &[StoredPoint], incoming: &[&Candidate]) -> Merged {
    assert!(
        !stored.is_empty() || !incoming.is_empty(),
        "invariant: merge has something to merge"
    );
    let hour = stored
        .first()
        .map(|p| hour_start_us(p.start_us))
        .or_else(|| incoming.first().map(|c| hour_start_us(c.start_us)))
        .expect("invariant: non-empty");
    let stored_cands: Vec<Candidate> = stored
        .iter()
        .map(|p| Candidate::from_raw(p.start_us, p.end_us, &p.raw))
        .collect();
    let mut by_coordinate: BTreeMap<(i64, i64), Vec<&Candidate>> = BTreeMap::new();
    for c in stored_cands.iter().chain(incoming.iter().copied()) {
        assert_eq!(
            hour_start_us(c.start_us),
            hour,
            "invariant: an object holds one start hour"
        );
        by_coordinate.entry(c.coordinate()).or_default().push(c);
    }
    let mut points = Vec::with_capacity(by_coordinate.len());
    let mut hasher = Sha256::new();
    let (mut collisions, mut incomparable) = (0u32, 0u32);
    let mut last_us = i64::MIN;
    for ((start_us, end_us), cands) in &by_coordinate {
        let resolution = resolve(cands);
        let winner = cands[resolution.winner];
        collisions += u32::from(resolution.is_collision());
        incomparable += u32::from(resolution.incomparable);
        hasher.update(start_us.to_le_bytes());
        hasher.update(end_us.to_le_bytes());
        hasher.update((winner.canonical.len() as u64).to_le_bytes());
        hasher.update(winner.canonical.as_bytes());
        last_us = last_us.max(*end_us);
        points.push(StoredPoint {
            start_us: *start_us,
            end_us: *end_us,
            raw: winner.raw.clone(),
        });
    }
    let first_us = points.first().map(|p| p.start_us).expect("invariant: non-empty");
    assert!(
        points.len() >= stored.len(),
        "invariant: points are never removed from an object"
    );
    Merged {
        points,
        hash: hasher.finalize().into(),
        first_us,
        last_us,
        collisions,
        incomparable,
    }
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
            },
            StoredPoint {
                start_us: 10,
                end_us: 20,
                raw: "{\n\"qty\":2}".into(),
            },
        ];
        assert_eq!(decode(&encode(&points)).expect("decodes"), points);
        assert!(decode(b"not gzip").is_err());
    }

    #[test]
    fn merge_keeps_stored_coordinates_and_hash_ignores_noise() {
        let a = Candidate::from_raw(HOUR_US, HOUR_US, r#"{"qty":1.5,"date":"x"}"#);
        let first = merge(&[], &[&a]);
        let b = Candidate::from_raw(HOUR_US + 5, HOUR_US + 5, r#"{"qty":2}"#);
        let second = merge(&first.points, &[&b]);
        assert_eq!(second.points.len(), 2);
        let noisy = Candidate::from_raw(HOUR_US, HOUR_US, r#"{"date":"x","qty":1.5000000000000002}"#);
        let third = merge(&second.points, &[&noisy]);
        assert_eq!(third.hash, second.hash);
        assert_eq!(third.collisions, 0);
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
            let whole = merge(&[], &refs);
            let cut = cut % refs.len();
            let mut reversed = refs.clone();
            reversed.reverse();
            let (a, b) = reversed.split_at(cut);
            let staged = if a.is_empty() { merge(&[], b) } else { merge(&merge(&[], a).points, b) };
            prop_assert_eq!(staged.hash, whole.hash);
            let again = merge(&whole.points, &refs);
            prop_assert_eq!(again.points, whole.points);
        }
    }
}
