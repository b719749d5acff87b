//! The Health Auto Export body model over raw JSON values (spec: "Идентичность точки по
//! координатам", "Учёт частично разобранной доставки"; HEALTHLOG.md "What it is").
//!
//! A body is `{"data": {"metrics": [{"name", "units", "data": [POINT...]}], SECTION: ...}}`.
//! The parser reads the sections in its [`Coverage`] and names every other key of `data` (and
//! any top-level key besides `data`) as uncovered: names only, never their contents. A point's
//! bytes are kept verbatim ([`RawValue`]); its start is `start`, else `date`; its end is `end`,
//! else its start. Any error fails the whole body: nothing of it is folded.
//!
//! Errors never carry body content: serde_json's messages can quote values, so only their
//! category and position are kept.

use std::collections::{BTreeMap, BTreeSet};

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::entities::{EntityVersion, RECORD_SECTIONS, Skipped, WORKOUTS_SECTION};
use crate::limits::{
    BODY_BYTES_MAX, LAYER_BYTES_MAX, METRIC_NAME_BYTES_MAX, METRICS_MAX, POINTS_PER_DELIVERY_MAX,
    POINTS_PER_METRIC_MAX, SECTION_NAME_BYTES_MAX, UNCOVERED_NAMES_MAX, UNITS_BYTES_MAX,
};
use crate::limits::{ENTITIES_PER_DELIVERY_MAX, ENTITY_ID_BYTES_MAX};
use crate::points::Candidate;
use crate::time::parse_label_us;

/// The section of `data` holding the points.
pub const METRICS_SECTION: &str = "metrics";

/// Which sections of `data` this parser reads, and how long an entity id it keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Coverage {
    sections: BTreeSet<String>,
    entity_id_bytes_max: usize,
}

impl Coverage {
    /// What this build parses: `metrics` (points), `workouts` and the six record sections.
    pub fn current() -> Self {
        let mut sections = vec![METRICS_SECTION, WORKOUTS_SECTION];
        sections.extend(RECORD_SECTIONS);
        Self::of(&sections)
    }

    pub fn of(sections: &[&str]) -> Self {
        Self {
            sections: sections.iter().map(|s| (*s).to_string()).collect(),
            entity_id_bytes_max: ENTITY_ID_BYTES_MAX,
        }
    }

    /// A parser that keys ids only up to `bytes` (at most [`ENTITY_ID_BYTES_MAX`]): an older,
    /// stricter parser, as tests need one to refold with a parser that understands more.
    pub fn with_entity_id_bytes_max(mut self, bytes: usize) -> Self {
        self.entity_id_bytes_max = bytes.min(ENTITY_ID_BYTES_MAX);
        self
    }

    pub fn covers(&self, section: &str) -> bool {
        self.sections.contains(section)
    }

    pub fn sections(&self) -> impl Iterator<Item = &str> {
        self.sections.iter().map(String::as_str)
    }
}

/// The names of uncovered keys, bounded (spec: "Границы списка сработали").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Uncovered {
    /// Sorted names, at most [`UNCOVERED_NAMES_MAX`], each at most [`SECTION_NAME_BYTES_MAX`] bytes.
    pub names: Vec<String>,
    /// Names not recorded because the list was full.
    pub dropped: usize,
    /// Recorded names that were cut to the length limit.
    pub truncated: usize,
}

impl Uncovered {
    fn from_names<'a>(all: impl Iterator<Item = &'a str>) -> Self {
        let mut set: BTreeSet<String> = BTreeSet::new();
        let mut truncated_names = BTreeSet::new();
        for name in all {
            let cut = cut_at_char_boundary(name, SECTION_NAME_BYTES_MAX);
            if cut.len() < name.len() {
                truncated_names.insert(cut.to_string());
            }
            set.insert(cut.to_string());
        }
        let total = set.len();
        let names: Vec<String> = set.into_iter().take(UNCOVERED_NAMES_MAX).collect();
        let truncated = names.iter().filter(|n| truncated_names.contains(*n)).count();
        Self {
            dropped: total - names.len(),
            names,
            truncated,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether a list limit tripped (the record goes to WARN).
    pub fn limits_tripped(&self) -> bool {
        self.dropped > 0 || self.truncated > 0
    }
}

fn cut_at_char_boundary(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Whether `layer` is a valid layer name: 1..=[`LAYER_BYTES_MAX`] bytes of `[a-z0-9_-]`. The layer
/// comes from the receiving endpoint or `--layer` (HEALTHLOG.md "Decided"), never from the body.
pub fn valid_layer(layer: &str) -> bool {
    !layer.is_empty()
        && layer.len() <= LAYER_BYTES_MAX
        && layer
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// One metric's points in a body.
#[derive(Debug, Clone)]
pub struct MetricPoints {
    pub name: String,
    pub units: String,
    pub points: Vec<Candidate>,
}

/// A parsed body.
#[derive(Debug, Clone)]
pub struct ParsedBody {
    pub metrics: Vec<MetricPoints>,
    /// Every element of the covered entity sections that could be keyed, in body order.
    pub entities: Vec<EntityVersion>,
    /// Elements of covered entity sections that could not (spec: "Пропущенные сущности").
    pub skipped: Vec<Skipped>,
    pub uncovered: Uncovered,
}

impl ParsedBody {
    pub fn point_count(&self) -> usize {
        self.metrics.iter().map(|m| m.points.len()).sum()
    }
}

/// Why a body did not parse. No variant carries body content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("body is {bytes} bytes, over the limit of {BODY_BYTES_MAX}")]
    TooLarge { bytes: u64 },
    #[error("body is not valid JSON ({category} error at line {line}, column {column})")]
    MalformedJson {
        category: &'static str,
        line: usize,
        column: usize,
    },
    #[error("body has no `data` object")]
    NoData,
    #[error(
        "section `metrics` does not have the HAE shape ({category} error at line {line}, column {column})"
    )]
    MetricsShape {
        category: &'static str,
        line: usize,
        column: usize,
    },
    #[error("more than {METRICS_MAX} metrics")]
    TooManyMetrics,
    #[error(
        "metric #{index} has an empty name, a name over {METRIC_NAME_BYTES_MAX} bytes or control characters"
    )]
    BadMetricName { index: usize },
    #[error("metric `{metric}` has units over {UNITS_BYTES_MAX} bytes")]
    BadUnits { metric: String },
    #[error("metric `{metric}` appears twice with different units")]
    ConflictingUnits { metric: String },
    #[error("metric `{metric}` has more than {POINTS_PER_METRIC_MAX} points")]
    TooManyPoints { metric: String },
    #[error("body has more than {POINTS_PER_DELIVERY_MAX} points")]
    TooManyPointsInBody,
    #[error("metric `{metric}` point #{index} is not a JSON object")]
    PointNotObject { metric: String, index: usize },
    #[error("metric `{metric}` point #{index}: `{field}` is missing or does not parse as a date")]
    BadDate {
        metric: String,
        index: usize,
        field: &'static str,
    },
    #[error("metric `{metric}` point #{index} ends before it starts")]
    EndBeforeStart { metric: String, index: usize },
    #[error("section `{section}` is not an array of entities")]
    SectionShape { section: String },
    #[error("body has more than {ENTITIES_PER_DELIVERY_MAX} entities")]
    TooManyEntities,
}

/// A failed parse, with the uncovered list if the parser got as far as collecting it (spec:
/// "failed с непустым списком — законное состояние").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseFailure {
    pub error: ParseError,
    pub uncovered: Option<Uncovered>,
}

impl From<ParseError> for ParseFailure {
    fn from(error: ParseError) -> Self {
        Self {
            error,
            uncovered: None,
        }
    }
}

pub(crate) fn json_position(e: &serde_json::Error) -> (&'static str, usize, usize) {
    let category = match e.classify() {
        serde_json::error::Category::Io => "io",
        serde_json::error::Category::Syntax => "syntax",
        serde_json::error::Category::Data => "data",
        serde_json::error::Category::Eof => "unexpected end",
    };
    (category, e.line(), e.column())
}

/// A metric as HAE sends it. `units` and `data` may be missing or `null` (a metric with no
/// samples: format rule "no samples"); an absent units string is the empty one.
#[derive(Deserialize)]
struct MetricIn<'a> {
    name: String,
    #[serde(default)]
    units: Option<String>,
    #[serde(borrow, default)]
    data: Option<Vec<&'a RawValue>>,
}

/// Parses a body under a coverage.
pub fn parse(body: &[u8], coverage: &Coverage) -> Result<ParsedBody, ParseFailure> {
    let bytes = body.len() as u64;
    if bytes > BODY_BYTES_MAX {
        return Err(ParseError::TooLarge { bytes }.into());
    }
    let malformed = |e: serde_json::Error| {
        let (category, line, column) = json_position(&e);
        ParseFailure::from(ParseError::MalformedJson {
            category,
            line,
            column,
        })
    };
    let top: BTreeMap<String, &RawValue> = serde_json::from_slice(body).map_err(malformed)?;
    let data_raw = top.get("data").ok_or(ParseError::NoData)?;
    let data: BTreeMap<String, &RawValue> =
        serde_json::from_str(data_raw.get()).map_err(|_| ParseFailure::from(ParseError::NoData))?;
    let uncovered = Uncovered::from_names(
        top.keys()
            .filter(|k| k.as_str() != "data")
            .chain(data.keys().filter(|k| !coverage.covers(k)))
            .map(String::as_str),
    );
    let with_uncovered = |error: ParseError| ParseFailure {
        error,
        uncovered: Some(uncovered.clone()),
    };
    let mut metrics: Vec<MetricPoints> = Vec::new();
    if coverage.covers(METRICS_SECTION)
        && let Some(raw) = data.get(METRICS_SECTION)
    {
        // `"metrics": null` is a body without metrics, as a `null` entity section is.
        let parsed: Option<Vec<MetricIn<'_>>> = serde_json::from_str(raw.get()).map_err(|e| {
            let (category, line, column) = json_position(&e);
            with_uncovered(ParseError::MetricsShape {
                category,
                line,
                column,
            })
        })?;
        let parsed = parsed.unwrap_or_default();
        if parsed.len() > METRICS_MAX {
            return Err(with_uncovered(ParseError::TooManyMetrics));
        }
        let mut by_name: BTreeMap<String, usize> = BTreeMap::new();
        let mut total = 0usize;
        for (index, metric) in parsed.into_iter().enumerate() {
            let metric = MetricFields {
                units: metric.units.unwrap_or_default(),
                data: metric.data.unwrap_or_default(),
                name: metric.name,
            };
            if metric.name.is_empty()
                || metric.name.len() > METRIC_NAME_BYTES_MAX
                || metric.name.chars().any(char::is_control)
            {
                return Err(with_uncovered(ParseError::BadMetricName { index }));
            }
            if metric.units.len() > UNITS_BYTES_MAX || metric.units.chars().any(char::is_control) {
                return Err(with_uncovered(ParseError::BadUnits { metric: metric.name }));
            }
            total += metric.data.len();
            if total > POINTS_PER_DELIVERY_MAX {
                return Err(with_uncovered(ParseError::TooManyPointsInBody));
            }
            let points = parse_points(&metric.name, &metric.data).map_err(with_uncovered)?;
            match by_name.get(&metric.name) {
                Some(&at) => {
                    let existing = &mut metrics[at];
                    if existing.units != metric.units {
                        return Err(with_uncovered(ParseError::ConflictingUnits {
                            metric: metric.name,
                        }));
                    }
                    existing.points.extend(points);
                    if existing.points.len() > POINTS_PER_METRIC_MAX {
                        return Err(with_uncovered(ParseError::TooManyPoints { metric: metric.name }));
                    }
                }
                None => {
                    by_name.insert(metric.name.clone(), metrics.len());
                    metrics.push(MetricPoints {
                        name: metric.name,
                        units: metric.units,
                        points,
                    });
                }
            }
        }
    }
    let (entities, skipped) = parse_entities(&data, coverage).map_err(with_uncovered)?;
    Ok(ParsedBody {
        metrics,
        entities,
        skipped,
        uncovered,
    })
}

/// Reads the covered entity sections: each element keyed and canonicalised once, or skipped
/// with a reason (its neighbours kept). A section that is `null` has no entities.
fn parse_entities(
    data: &BTreeMap<String, &RawValue>,
    coverage: &Coverage,
) -> Result<(Vec<EntityVersion>, Vec<Skipped>), ParseError> {
    let mut entities = Vec::new();
    let mut skipped = Vec::new();
    let mut total = 0usize;
    for section in std::iter::once(WORKOUTS_SECTION).chain(RECORD_SECTIONS) {
        let Some(raw) = data.get(section).filter(|_| coverage.covers(section)) else {
            continue;
        };
        let elements: Option<Vec<&RawValue>> =
            serde_json::from_str(raw.get()).map_err(|_| ParseError::SectionShape {
                section: section.to_string(),
            })?;
        let elements = elements.unwrap_or_default();
        total += elements.len();
        if total > ENTITIES_PER_DELIVERY_MAX {
            return Err(ParseError::TooManyEntities);
        }
        for (index, element) in elements.iter().enumerate() {
            match EntityVersion::read(section, index, element.get(), coverage.entity_id_bytes_max) {
                Ok(v) => entities.push(v),
                Err(reason) => skipped.push(Skipped {
                    section: section.to_string(),
                    index,
                    reason,
                }),
            }
        }
    }
    Ok((entities, skipped))
}

struct MetricFields<'a> {
    name: String,
    units: String,
    data: Vec<&'a RawValue>,
}

/// The fields a point's start may come from, in order: `start`, then non-aggregated sleep's
/// `startDate`, then `date` (spec: start from `start`, else `date`).
const START_FIELDS: [&str; 3] = ["start", "startDate", "date"];
/// The fields a point's end may come from: `end`, then `endDate`; else the end is the start.
const END_FIELDS: [&str; 2] = ["end", "endDate"];

fn parse_points(metric: &str, data: &[&RawValue]) -> Result<Vec<Candidate>, ParseError> {
    if data.len() > POINTS_PER_METRIC_MAX {
        return Err(ParseError::TooManyPoints {
            metric: metric.to_string(),
        });
    }
    let mut points = Vec::with_capacity(data.len());
    for (index, raw) in data.iter().enumerate() {
        let value: Value = serde_json::from_str(raw.get()).map_err(|_| ParseError::PointNotObject {
            metric: metric.to_string(),
            index,
        })?;
        let Value::Object(map) = &value else {
            return Err(ParseError::PointNotObject {
                metric: metric.to_string(),
                index,
            });
        };
        // A field that is missing or `null` is absent (format rule "null fields"); a present
        // one must parse, in any form `time::parse_label_us` reads.
        let stamp = |field: &'static str| -> Result<Option<i64>, ParseError> {
            match map.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(text)) => {
                    parse_label_us(text).map(Some).map_err(|_| ParseError::BadDate {
                        metric: metric.to_string(),
                        index,
                        field,
                    })
                }
                Some(_) => Err(ParseError::BadDate {
                    metric: metric.to_string(),
                    index,
                    field,
                }),
            }
        };
        let mut start = None;
        for field in START_FIELDS {
            if let Some(at) = stamp(field)? {
                start = Some(at);
                break;
            }
        }
        let start = start.ok_or(ParseError::BadDate {
            metric: metric.to_string(),
            index,
            field: "date",
        })?;
        let mut end = start;
        for field in END_FIELDS {
            if let Some(at) = stamp(field)? {
                end = at;
                break;
            }
        }
        if end < start {
            return Err(ParseError::EndBeforeStart {
                metric: metric.to_string(),
                index,
            });
        }
        points.push(Candidate::from_parsed(start, end, raw.get(), &value));
    }
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covered_and_uncovered_sections() {
        let body = br#"{"data":{"metrics":[{"name":"step_count","units":"count","data":[{"qty":5,"date":"2024-01-01 00:00:00 +0000"}]}],"workouts":[{"secret":1}],"stateOfMind":[]}}"#;
        let parsed = parse(body, &Coverage::of(&[METRICS_SECTION])).expect("parses");
        assert_eq!(parsed.point_count(), 1);
        assert_eq!(
            parsed.uncovered.names,
            vec!["stateOfMind".to_string(), "workouts".to_string()]
        );
        let none = parse(body, &Coverage::of(&[])).expect("parses");
        assert_eq!(none.point_count(), 0);
        assert_eq!(none.uncovered.names.len(), 3);
    }

    #[test]
    fn errors_do_not_quote_the_body() {
        let body = br#"{"data":{"metrics":[{"name":"heart_rate","units":"bpm","data":[{"Avg":71.25,"date":"Apple Watch of Anton"}]}],"visionRx":[]}}"#;
        let failure = parse(body, &Coverage::current()).expect_err("bad date fails");
        assert!(matches!(
            failure.error,
            ParseError::BadDate {
                index: 0,
                field: "date",
                ..
            }
        ));
        assert_eq!(
            failure.uncovered.expect("collected").names,
            vec!["visionRx".to_string()]
        );
        let text = failure.error.to_string();
        assert!(!text.contains("Anton") && !text.contains("71.25"), "{text}");
        let bad = parse(
            br#"{"data": {"metrics": [ {"name": "x", "data": "Anton's device" ]}}"#,
            &Coverage::current(),
        )
        .expect_err("malformed");
        assert!(!bad.error.to_string().contains("Anton"));
    }

    /// Format rule "no samples": a metric whose `data` is empty, `null` or missing, or whose
    /// `units` is `null`, is a metric without points, not a failed delivery.
    #[test]
    fn a_metric_with_no_samples_is_not_a_failure() {
        let body = br#"{"data":{"metrics":[
            {"name":"step_count","units":"count","data":[]},
            {"name":"heart_rate","units":"count/min","data":null},
            {"name":"vo2_max","units":null},
            {"name":"active_energy","units":"kcal","data":[{"qty":1.5,"date":"2024-01-01 00:00:00 +0000"}]}
        ]}}"#;
        let parsed = parse(body, &Coverage::current()).expect("parses");
        assert_eq!(parsed.metrics.len(), 4);
        assert_eq!(parsed.point_count(), 1);
        assert_eq!(parsed.metrics[2].units, "");
        // The whole section `null` (an export of workouts only) is a body without metrics.
        let body = br#"{"data":{"metrics":null,"workouts":[]}}"#;
        let parsed = parse(body, &Coverage::current()).expect("a null metrics section parses");
        assert_eq!(parsed.metrics.len(), 0);
    }

    /// Format rule "12-hour dates": points dated in the 12-hour form parse in a body.
    #[test]
    fn points_dated_in_the_twelve_hour_form_parse() {
        let body = "{\"data\":{\"metrics\":[{\"name\":\"heart_rate\",\"units\":\"count/min\",\"data\":[            {\"Avg\":61,\"date\":\"2024-09-21 7:57:00\u{202f}am +1000\"},            {\"Avg\":62,\"date\":\"2024-09-21 7:58:00 PM +1000\"}]}]}}";
        let parsed = parse(body.as_bytes(), &Coverage::current()).expect("parses");
        let pts = &parsed.metrics[0].points;
        assert_eq!(pts[1].start_us - pts[0].start_us, 12 * 3_600_000_000 + 60_000_000);
    }

    /// Format rule "aggregated sleep": one point per night, `date` a date alone, the phases as
    /// numbers and the night's bounds as timestamps inside the point.
    #[test]
    fn aggregated_sleep_parses_with_a_date_label() {
        let body = br#"{"data":{"metrics":[{"name":"sleep_analysis","units":"hr","data":[
            {"date":"2024-09-21","totalSleep":7.1,"asleep":0,"core":4.2,"deep":1.1,"rem":1.8,
             "sleepStart":"2024-09-20 23:10:00 +1000","sleepEnd":"2024-09-21 06:40:00 +1000",
             "inBed":7.5,"inBedStart":"2024-09-20 23:00:00 +1000","inBedEnd":"2024-09-21 06:45:00 +1000"}]}]}}"#;
        let parsed = parse(body, &Coverage::current()).expect("parses");
        let p = &parsed.metrics[0].points[0];
        assert_eq!(crate::time::format_utc(p.start_us), "2024-09-21T00:00:00Z");
        assert_eq!(p.start_us, p.end_us);
    }

    /// Format rule "per-phase sleep": `startDate`/`endDate` give the interval, so phases sharing
    /// a night stay separate points.
    #[test]
    fn per_phase_sleep_parses_from_start_date_and_end_date() {
        let body = br#"{"data":{"metrics":[{"name":"sleep_analysis","units":"hr","data":[
            {"startDate":"2024-09-20 23:10:00 +1000","endDate":"2024-09-21 01:00:00 +1000","qty":1.83,"value":"Core","source":"Watch"},
            {"startDate":"2024-09-21 01:00:00 +1000","endDate":"2024-09-21 01:40:00 +1000","qty":0.66,"value":"Deep","source":"Watch"}]}]}}"#;
        let parsed = parse(body, &Coverage::current()).expect("parses");
        let pts = &parsed.metrics[0].points;
        assert_eq!(pts.len(), 2);
        assert_eq!(pts[0].end_us - pts[0].start_us, 110 * 60_000_000);
        assert_eq!(pts[0].end_us, pts[1].start_us);
    }

    /// Format rule "null fields": a `null` start or end is absent, not a bad date; a `null`
    /// value field is kept verbatim.
    #[test]
    fn null_fields_are_absent_not_errors() {
        let body = br#"{"data":{"metrics":[{"name":"step_count","units":"count","data":[
            {"qty":null,"date":"2024-01-01 00:00:00 +0000","start":null,"end":null,"source":null}]}]}}"#;
        let parsed = parse(body, &Coverage::current()).expect("parses");
        let p = &parsed.metrics[0].points[0];
        assert_eq!(p.start_us, p.end_us);
        assert!(p.raw.contains("\"qty\":null"));
    }

    /// Format rule "entity sections": workouts and the six record sections are covered; an
    /// element that cannot be keyed is skipped and counted, its neighbours kept; a `null`
    /// section has no entities.
    #[test]
    fn entity_sections_are_covered_and_unkeyable_elements_skipped() {
        let body = br#"{"data":{"metrics":[],"workouts":[
            {"id":"W1","name":"Walk","start":"2024-09-21 07:57:00 +1000","route":[]},
            {"name":"v1 walk","start":"2024-09-21 07:57:00 +1000","route":[{"lat":1,"lon":2}]},
            {"id":"W2","name":"Run","start":"2024-09-21 6:00:00 PM +1000"}],
            "stateOfMind":[{"id":"S1","start":"2024-09-21 07:57:00 +1000","valence":0.3}],
            "medications":[{"displayText":"x","start":"2024-09-21 07:57:00 +1000"}],
            "ecg":null}}"#;
        let parsed = parse(body, &Coverage::current()).expect("parses");
        assert!(parsed.uncovered.is_empty());
        let ids: Vec<&str> = parsed.entities.iter().map(|e| e.key.id.as_str()).collect();
        assert_eq!(ids, ["W1", "W2", "S1"]);
        let skipped: Vec<(&str, usize)> = parsed
            .skipped
            .iter()
            .map(|s| (s.section.as_str(), s.index))
            .collect();
        assert_eq!(skipped, [("workouts", 1), ("medications", 0)]);
        let bad = parse(br#"{"data":{"workouts":{"id":"W"}}}"#, &Coverage::current()).expect_err("shape");
        assert!(matches!(bad.error, ParseError::SectionShape { .. }));
    }

    #[test]
    fn list_limits_truncate_and_count() {
        let long = "x".repeat(SECTION_NAME_BYTES_MAX + 10);
        let mut sections: Vec<String> = (0..UNCOVERED_NAMES_MAX + 5)
            .map(|i| format!("\"s{i:03}\":[]"))
            .collect();
        sections.push(format!("\"{long}\":[]"));
        let body = format!("{{\"data\":{{{}}}}}", sections.join(","));
        let parsed = parse(body.as_bytes(), &Coverage::current()).expect("parses");
        assert_eq!(parsed.uncovered.names.len(), UNCOVERED_NAMES_MAX);
        assert_eq!(parsed.uncovered.dropped, 6);
        assert!(parsed.uncovered.limits_tripped());
    }
}
