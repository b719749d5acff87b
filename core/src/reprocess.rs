//! Reprocess and reinterpretation, the pure half (ingest spec, "Reprocess" and "The horizon is
//! per class, and partial reprocess is refused"; issue 9 items 3 and 5). Sans-IO: rows, the
//! registry and `now` come in, decisions go out; `sentinel_runtime::reprocess` drives the store.
//!
//! Owns:
//! - the scope: which points a glob names ([`glob_match`], [`scope`]);
//! - the refusal ([`validate`]): the whole scope is checked before anything is written;
//! - the recompute of one stored row under a registry version ([`recompute`]), by stages 6–8
//!   of the pipeline ([`crate::decide::decide`], the one definition both share);
//! - the projection rebuilt for a reprocessed point ([`rebuild_state`], defined with the state
//!   type, below the running core's projection, which uses it too);
//! - the `reprocess` control event's payload ([`ReprocessRecord`]);
//! - the dry run's time estimate ([`estimate_ms`]).
//!
//! # The row rule (what a recompute may change)
//!
//! A recompute writes only `value_*`, `quality`, `reason` and `registry_version`. It never
//! rewrites `native_num`, `native_text`, `unit_native`, `ingested_at`, `observed_at`, the key,
//! `detail`, `changed` (stage 10 compared against the projection of its time) or
//! `skew_flagged` (stage 9). One column is *filled*, never changed: a good text row keeps its
//! native text only in `value_text`; when the new version would no longer put that text
//! there, `native_text` (NULL until then) receives it, so the native survives every recompute.
//!
//! The native reading of a stored row ([`native_of`]): `native_num` is a number, or a bool
//! when the row's canonical value is a bool or its `native_text` is `true`/`false`; otherwise
//! `native_text` is text; otherwise a good text row's `value_text`; otherwise null. A bool the
//! row recorded only as `0`/`1` (a bool whose unit was refused) reads back as that number.
//!
//! What the driver asserted ([`asserted_of`]) is kept wherever stages 6–8 do not decide:
//! - `unavailable`, and `bad` with a reason that is not one of the pipeline's own
//!   ([`crate::decide::reason`]), are the driver's: kept, with their reason, unless stages 6–8
//!   now fail (then `bad` with the pipeline's reason, as at ingest);
//! - `live` keeps the driver's reason, if it gave one;
//! - `bad` with a pipeline reason was decided by stages 6–8 and is decided again (what the
//!   driver asserted beside it was overwritten at ingest and cannot be recovered: such a row
//!   becomes `live` when the new version accepts its value);
//! - any other quality (`stale`, `restored`, `unknown`, `assumed`: the system set them, stages
//!   6–8 never do) is kept like an assertion.
//!
//! The unit: a row whose unit was refused (`unit_mismatch`) is checked again against the new
//! version's unit; any other row's stored unit agreed with the version it was written under
//! (reported or assumed from that descriptor, which the row cannot tell apart), so the new
//! version's unit is taken: correcting a wrong unit in the registry is what reprocess is for.

use std::borrow::Cow;
use std::sync::Arc;

use crate::config::Config;
use crate::decide::{self, Asserted};
use crate::log::{CanonicalValue, ObsKey, Quality};
use crate::registry::{CompiledPoint, Registry, RetentionClass};
pub use crate::state::rebuild_state;
use crate::time::{Micros, US_PER_DAY};
use crate::wire::NativeValue;

/// Longest glob accepted, in bytes.
pub const GLOB_BYTES_MAX: usize = 256;

/// Most points one reprocess may name.
pub const SCOPE_POINTS_MAX: usize = 100_000;

/// Rows updated per fenced transaction.
pub const CHUNK_ROWS_DEFAULT: usize = 5_000;

/// Most rows one chunk may carry.
pub const CHUNK_ROWS_MAX: usize = 50_000;

/// A stored observation row as reprocess and reinterpret read it (the class tables' columns).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredObservation {
    pub point_id: String,
    pub class: RetentionClass,
    pub observed_at: Micros,
    pub ingested_at: Micros,
    pub key: ObsKey,
    pub value: Option<CanonicalValue>,
    pub native_num: Option<f64>,
    pub native_text: Option<String>,
    pub unit_native: Option<String>,
    pub quality: Quality,
    pub reason: Option<String>,
    pub registry_version: i32,
}

/// What a recompute writes to one row, addressed by its unique key.
#[derive(Clone, Debug, PartialEq)]
pub struct RowUpdate {
    pub key: ObsKey,
    pub ingested_at: Micros,
    /// The row's point and `observed_at`, which are not part of its key: a store that holds
    /// the row in a compacted chunk (issue 24 item 2) finds the chunk by them.
    pub point_id: String,
    pub observed_at: Micros,
    pub value: Option<CanonicalValue>,
    /// Written only where the row's `native_text` is NULL (see the module's row rule).
    pub native_text_fill: Option<String>,
    pub quality: Quality,
    pub reason: Option<String>,
    pub registry_version: i32,
}

/// `*` matches any run of characters (dots included), `?` one character; nothing else is
/// special. Iterative, linear in practice (one backtrack point).
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || (p[pi] != '*' && p[pi] == t[ti])) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The points of `registry` that `glob` names, sorted by id, with their class. A glob that
/// names nothing, or one that is empty or too long, is an error.
pub fn scope(registry: &Registry, glob: &str) -> Result<Vec<(Arc<str>, RetentionClass)>, String> {
    if glob.is_empty() || glob.len() > GLOB_BYTES_MAX {
        return Err(format!("the point glob must be 1..={GLOB_BYTES_MAX} bytes"));
    }
    let mut points: Vec<(Arc<str>, RetentionClass)> = registry
        .points()
        .filter(|(_, p)| glob_match(glob, &p.id))
        .map(|(_, p)| (p.id.clone(), p.descriptor.retention))
        .collect();
    if points.is_empty() {
        return Err(format!(
            "the glob {glob:?} names no point of registry version {}",
            registry.version
        ));
    }
    if points.len() > SCOPE_POINTS_MAX {
        return Err(format!(
            "the glob {glob:?} names {} points, limit {SCOPE_POINTS_MAX}",
            points.len()
        ));
    }
    points.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(points)
}

/// Why a point makes the scope impossible.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Beyond {
    /// The range reaches before the class's raw horizon.
    Horizon,
    /// The range reaches before the oldest partition that exists (rows there are gone).
    OldestPartition,
}

/// One point that makes the scope impossible, and its class's horizon.
#[derive(Clone, Debug, PartialEq)]
pub struct Offender {
    pub point_id: Arc<str>,
    pub class: RetentionClass,
    pub horizon_days: u32,
    /// The first instant whose raw rows of the class are kept.
    pub kept_from: Micros,
    /// The oldest existing partition's start, for the class table.
    pub oldest_partition: Option<Micros>,
    /// The earliest `ingested_at` a row of the range may have.
    pub needs_from: Micros,
    pub beyond: Beyond,
}

/// The earliest `ingested_at` a row observed at or after `from` may carry: stage 2 refuses an
/// `observed_at` more than `observed_future_max_ms` after `ingested_at`, so such a row was
/// ingested no earlier than `from − observed_future_max_ms`. (A row ingested late lies in a
/// newer partition, which is kept longer, so only the early bound matters.)
pub fn earliest_ingested(from: Micros, config: &Config) -> Micros {
    let skew_us = config.observed_future_max_ms.max(0).saturating_mul(1_000);
    Micros(from.0.saturating_sub(skew_us))
}

/// The refusal: every point of `points` whose rows from `from` on may lie before its class's
/// raw horizon at `now`, or before its class table's oldest partition (`oldest_partition`,
/// indexed by [`RetentionClass::index`]). Empty means the whole scope is reachable.
pub fn validate(
    points: &[(Arc<str>, RetentionClass)],
    from: Micros,
    config: &Config,
    oldest_partition: [Option<Micros>; 3],
    now: Micros,
) -> Vec<Offender> {
    let needs_from = earliest_ingested(from, config);
    points
        .iter()
        .filter_map(|(point_id, class)| {
            let kept_from = config.retention.raw_kept_from(*class, now);
            let oldest = oldest_partition[class.index()];
            let beyond = if needs_from < kept_from {
                Beyond::Horizon
            } else if oldest.is_some_and(|o| needs_from < o) {
                Beyond::OldestPartition
            } else {
                return None;
            };
            Some(Offender {
                point_id: point_id.clone(),
                class: *class,
                horizon_days: config.retention.raw_horizon_days(*class),
                kept_from,
                oldest_partition: oldest,
                needs_from,
                beyond,
            })
        })
        .collect()
}

fn is_pipeline_reason(reason: Option<&str>) -> bool {
    use decide::reason::*;
    matches!(
        reason,
        Some(
            UNIT_MISMATCH
                | OUT_OF_RANGE
                | NOT_IN_CODEBOOK
                | TYPE_MISMATCH
                | MISSING_VALUE
                | TEXT_TOO_LONG
                | NOT_FINITE
        )
    )
}

/// The native reading of a stored row (see the module's row rule).
pub fn native_of(row: &StoredObservation) -> NativeValue<'_> {
    match (row.native_num, row.native_text.as_deref(), &row.value) {
        (Some(_), Some("true"), _) => NativeValue::Bool(true),
        (Some(_), Some("false"), _) => NativeValue::Bool(false),
        (Some(_), _, Some(CanonicalValue::Bool(b))) => NativeValue::Bool(*b),
        (Some(x), _, _) => NativeValue::Num(x),
        (None, Some(text), _) => NativeValue::Text(Cow::Borrowed(text)),
        (None, None, Some(CanonicalValue::Text(text))) => NativeValue::Text(Cow::Borrowed(text)),
        _ => NativeValue::Null,
    }
}

/// What stages 6–8 take as the driver's assertion for a stored row: `(quality, reason, unit)`
/// (see the module's rules).
pub fn asserted_of(row: &StoredObservation) -> (Option<Quality>, Option<Cow<'static, str>>, Option<&str>) {
    let decided_by_pipeline = row.quality == Quality::Bad && is_pipeline_reason(row.reason.as_deref());
    let unit = if row.reason.as_deref() == Some(decide::reason::UNIT_MISMATCH) {
        row.unit_native.as_deref()
    } else {
        None
    };
    let reason = || row.reason.clone().map(Cow::Owned);
    match row.quality {
        _ if decided_by_pipeline => (None, None, unit),
        Quality::Live => (None, reason(), unit),
        other => (Some(other), reason(), unit),
    }
}

/// Stages 6–8 again for one stored row, under `point` (as registry version `version`
/// describes it). Never touches what the row rule keeps.
pub fn recompute(point: &CompiledPoint, config: &Config, version: i32, row: &StoredObservation) -> RowUpdate {
    let native = native_of(row);
    let (quality, reason, unit) = asserted_of(row);
    let decided = decide::decide(
        point,
        config,
        Asserted {
            quality,
            reason,
            unit,
            value: &native,
        },
    );
    let native_text_fill = match (&row.native_text, decided.native_text) {
        (None, Some(text)) => Some(text.into_string()),
        _ => None,
    };
    RowUpdate {
        key: row.key.clone(),
        ingested_at: row.ingested_at,
        point_id: row.point_id.clone(),
        observed_at: row.observed_at,
        value: decided.value,
        native_text_fill,
        quality: decided.quality,
        reason: decided.reason.map(Cow::into_owned),
        registry_version: version,
    }
}

/// The range whose rollups a reprocess refreshes: from the first to just past the last
/// `observed_at` it updated (the store rounds it outward to each rollup's buckets).
pub fn affected_range(observed_min: Micros, observed_max: Micros) -> (Micros, Micros) {
    (observed_min, Micros(observed_max.0.saturating_add(1)))
}

/// `[from, to)` rounded outward to `width_us` boundaries.
pub fn round_outward((from, to): (Micros, Micros), width_us: i64) -> (Micros, Micros) {
    let floor = from.0.div_euclid(width_us) * width_us;
    let ceil = to.0.div_euclid(width_us) * width_us;
    let ceil = if ceil == to.0 { ceil } else { ceil + width_us };
    (Micros(floor), Micros(ceil))
}

/// The dry run's estimate of a real run, in milliseconds: rows read, recomputed and updated,
/// plus the rollup refresh over the affected range (point-blind: every row observed in the
/// rounded range is aggregated again, for both grains). Calibrated on the shared 2-core
/// development machine (BENCHMARKS.md, "Reprocess"): `tests/benches/reprocess.rs` measured
/// about 20 µs a row for a whole run of 1,000,000 rows in chunks of 5,000, and
/// `tests/benches/rollups.rs` about 7 µs a row for a refresh of one hour at the design rate
/// (4,000 points, so the refresh writes 244,000 buckets). An order of magnitude, not a promise:
/// the caller passes the scope's own rows for both figures, which undercounts the refresh
/// where other points share the range.
pub fn estimate_ms(rows: u64, rows_in_rounded_range: u64) -> u64 {
    const RUN_US_PER_ROW: u64 = 20;
    const REFRESH_US_PER_ROW: u64 = 7;
    rows.saturating_mul(RUN_US_PER_ROW)
        .saturating_add(rows_in_rounded_range.saturating_mul(REFRESH_US_PER_ROW))
        / 1_000
}

/// The `reprocess` control event: what was asked, what was found, what was done.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct ReprocessRecord {
    pub glob: String,
    pub from: String,
    pub to: Option<String>,
    pub points: usize,
    pub classes: Vec<&'static str>,
    pub old_versions: Vec<i32>,
    pub new_version: i32,
    pub rows: u64,
    /// `[from, to)` per rollup, rounded outward; absent when no row was in the range.
    pub rollup_1m: Option<(String, String)>,
    pub rollup_1h: Option<(String, String)>,
    pub epoch: u32,
}

impl ReprocessRecord {
    pub fn payload_json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|_| "{}".to_owned())
    }
}

/// Whole days between two instants, for messages.
pub fn days_between(earlier: Micros, later: Micros) -> i64 {
    (later.0 - earlier.0).div_euclid(US_PER_DAY)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline;
    use crate::state::{LogHead, PointState};

    #[test]
    fn globs_match_stars_and_single_characters() {
        assert!(glob_match("boiler.*", "boiler.temp"));
        assert!(glob_match("boiler.*", "boiler."));
        assert!(!glob_match("boiler.*", "boilers.temp"));
        assert!(glob_match("*.temp", "a.b.temp"));
        assert!(glob_match("b?iler.t*p", "boiler.temp"));
        assert!(glob_match("*", ""));
        assert!(!glob_match("a*b*c", "aXbY"));
        assert!(glob_match("a*b*c", "aXbYc"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }

    fn row(quality: Quality, reason: Option<&str>) -> StoredObservation {
        StoredObservation {
            point_id: "p".into(),
            class: RetentionClass::Measurement,
            observed_at: Micros(0),
            ingested_at: Micros(0),
            key: ObsKey {
                driver_instance: Arc::from("d"),
                source_epoch: 1,
                source_seq: 1,
            },
            value: Some(CanonicalValue::Num(2.0)),
            native_num: Some(2.0),
            native_text: None,
            unit_native: Some("degC".into()),
            quality,
            reason: reason.map(str::to_owned),
            registry_version: 1,
        }
    }

    #[test]
    fn assertions_are_kept_and_pipeline_decisions_are_not() {
        let unavailable = row(Quality::Unavailable, Some("source_down"));
        let (q, r, u) = asserted_of(&unavailable);
        assert_eq!(
            (q, r.as_deref(), u),
            (Some(Quality::Unavailable), Some("source_down"), None)
        );
        let (q, r, _) = asserted_of(&row(Quality::Bad, Some("sensor_fault")));
        assert_eq!((q, r.as_deref()), (Some(Quality::Bad), Some("sensor_fault")));
        let (q, r, _) = asserted_of(&row(Quality::Bad, Some(pipeline::reason::OUT_OF_RANGE)));
        assert_eq!((q, r), (None, None));
        let (q, r, _) = asserted_of(&row(Quality::Live, Some("note")));
        assert_eq!((q, r.as_deref()), (None, Some("note")));
        let (q, _, _) = asserted_of(&row(Quality::Stale, None));
        assert_eq!(q, Some(Quality::Stale));
        // A refused unit is compared again; any other stored unit is the old version's.
        let refused = row(Quality::Bad, Some(pipeline::reason::UNIT_MISMATCH));
        assert_eq!(asserted_of(&refused).2, Some("degC"));
        let agreed = row(Quality::Live, None);
        assert_eq!(asserted_of(&agreed).2, None);
    }

    #[test]
    fn the_native_reading_comes_back_from_the_columns() {
        let mut r = row(Quality::Live, None);
        assert_eq!(native_of(&r), NativeValue::Num(2.0));
        r.value = Some(CanonicalValue::Bool(true));
        r.native_num = Some(1.0);
        assert_eq!(native_of(&r), NativeValue::Bool(true));
        r.value = None;
        r.native_text = Some("false".into());
        r.native_num = Some(0.0);
        assert_eq!(native_of(&r), NativeValue::Bool(false));
        r.native_num = None;
        r.native_text = Some("OPEN".into());
        assert_eq!(native_of(&r), NativeValue::Text(Cow::Borrowed("OPEN")));
        r.native_text = None;
        r.value = Some(CanonicalValue::Text(Arc::from("free text")));
        assert_eq!(native_of(&r), NativeValue::Text(Cow::Borrowed("free text")));
        r.value = None;
        assert_eq!(native_of(&r), NativeValue::Null);
    }

    #[test]
    fn rounding_is_outward_and_exact_on_boundaries() {
        let minute = 60_000_000;
        assert_eq!(
            round_outward((Micros(1), Micros(2)), minute),
            (Micros(0), Micros(minute))
        );
        assert_eq!(
            round_outward((Micros(minute), Micros(2 * minute)), minute),
            (Micros(minute), Micros(2 * minute))
        );
        assert_eq!(
            round_outward((Micros(-1), Micros(0)), minute),
            (Micros(-minute), Micros(0))
        );
    }

    fn at(text: &str) -> Micros {
        Micros::parse_rfc3339(text).expect("test instant")
    }

    #[test]
    fn the_whole_scope_is_validated_and_every_offender_named() {
        let config = Config::default();
        let points: Vec<(Arc<str>, RetentionClass)> = vec![
            (Arc::from("a.temp"), RetentionClass::Measurement),
            (Arc::from("a.rssi"), RetentionClass::Diagnostic),
            (Arc::from("b.rssi"), RetentionClass::Diagnostic),
            (Arc::from("a.valve"), RetentionClass::State),
        ];
        let now = at("2026-06-20T12:00:00Z");
        let oldest = [Some(at("2026-04-01T00:00:00Z")); 3];
        // Diagnostic keeps 7 days: from 2026-06-13.
        let from = at("2026-06-12T00:00:00Z");
        let offenders = validate(&points, from, &config, oldest, now);
        let named: Vec<(&str, Beyond)> = offenders.iter().map(|o| (&*o.point_id, o.beyond)).collect();
        assert_eq!(
            named,
            vec![("a.rssi", Beyond::Horizon), ("b.rssi", Beyond::Horizon)]
        );
        assert_eq!(offenders[0].kept_from, at("2026-06-13T00:00:00Z"));
        assert_eq!(offenders[0].horizon_days, 7);
        // The future-skew bound: a range starting at the kept-from midnight may hold rows
        // ingested up to five minutes before it.
        let edge = validate(&points, at("2026-06-13T00:00:00Z"), &config, oldest, now);
        assert_eq!(edge.len(), 2, "{edge:?}");
        assert!(validate(&points, at("2026-06-13T00:05:00Z"), &config, oldest, now).is_empty());
        // Older than the oldest partition is past the horizon too, whatever the class's days.
        let young = [Some(at("2026-06-19T00:00:00Z")); 3];
        let all = validate(&points, at("2026-06-18T00:00:00Z"), &config, young, now);
        assert_eq!(all.len(), 4);
        assert!(all.iter().all(|o| o.beyond == Beyond::OldestPartition));
    }

    #[test]
    fn a_rebuilt_state_is_the_log_head_keeping_what_the_log_does_not_hold() {
        let key = ObsKey {
            driver_instance: Arc::from("d"),
            source_epoch: 1,
            source_seq: 9,
        };
        let head = LogHead {
            state: PointState {
                point_id: Arc::from("p"),
                value: Some(CanonicalValue::Num(101.5)),
                quality: Quality::Live,
                reason: None,
                observed_at: Some(Micros(10)),
                ingested_at: Some(Micros(11)),
                key: Some(key.clone()),
                changed_at: None,
                quality_since: Micros(0),
                watermark_seq: None,
            },
            value_order: None,
        };
        let checkpoint = PointState {
            value: Some(CanonicalValue::Num(0.1015)),
            quality: Quality::Stale,
            changed_at: Some(Micros(5)),
            quality_since: Micros(7),
            watermark_seq: Some(42),
            ..head.state.clone()
        };
        let state = rebuild_state(Arc::from("p"), Some(&head), Some(&checkpoint), Micros(100));
        assert_eq!(
            state.value,
            Some(CanonicalValue::Num(101.5)),
            "the corrected value"
        );
        assert_eq!(
            state.quality,
            Quality::Stale,
            "the watchdog's word on the same row stands"
        );
        assert_eq!(
            (state.watermark_seq, state.changed_at, state.quality_since),
            (Some(42), Some(Micros(5)), Micros(7))
        );
        let live = PointState {
            quality: Quality::Live,
            ..checkpoint.clone()
        };
        let bad_head = LogHead {
            state: PointState {
                quality: Quality::Bad,
                reason: Some("out_of_range".into()),
                value: None,
                ..head.state.clone()
            },
            value_order: None,
        };
        let state = rebuild_state(Arc::from("p"), Some(&bad_head), Some(&live), Micros(100));
        assert_eq!((state.quality, state.quality_since), (Quality::Bad, Micros(100)));
        assert_eq!(
            rebuild_state(Arc::from("q"), None, None, Micros(3)).quality,
            Quality::Unknown
        );
    }

    #[test]
    fn the_estimate_grows_with_rows_and_refresh() {
        assert_eq!(estimate_ms(0, 0), 0);
        assert!(estimate_ms(1_000_000, 1_000_000) > estimate_ms(1_000_000, 0));
    }
}
