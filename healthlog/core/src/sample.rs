//! The deterministic corpus generator and its oracle (HEALTHLOG.md "Real inputs"; issue 10
//! "What it must show").
//!
//! Follows the public Health Auto Export JSON shape: `{"data":{"metrics":[{"name","units",
//! "data":[...]}], "workouts":[...]}}`, timestamps `yyyy-MM-dd HH:mm:ss Z`. It emits one
//! `minute`-layer delivery per day, a week-long re-send every seventh day (key order reversed,
//! last-digit jitter, poorer copies, changed source strings, added empty fields), an
//! `hour`-layer delivery every seventh day, sleep intervals sharing a date, a metric that
//! switches units from kg to lb halfway, `workouts`/`stateOfMind` entities (each with its own
//! id, a route of coordinates that must never reach a log) in some deliveries, and an uncovered
//! section (`visionPrescriptions`, standing for one HAE may add) in others.
//!
//! The units switch falls on a re-send boundary. The spec's units rule (the stored units stay)
//! is a function of fold order, not of the set, so a re-send carrying kg-era hours in lb would
//! make a rebuild from a shuffled journal differ in those objects' units; the corpus keeps
//! that case out of the order-independence check, and a scenario test covers the rule.
//!
//! The oracle is computed from the generation plan, not by the store's rules: which
//! coordinates exist, which hours, which deliveries are partial and with which names, how many
//! points carry the rich fields that must survive, which objects stay in kg and which in lb.
//! It also lists values (device names, decimal readings) that must never appear in logs.
//!
//! The generator's randomness is a seeded SplitMix64: the core reads no RNG.

use std::collections::{BTreeMap, BTreeSet};

use crate::time::{HOUR_US, format_hae};

/// 2026-01-05 00:00:00 UTC, the corpus' first day.
pub const CORPUS_START_US: i64 = 1_767_571_200_000_000;
const DAY_US: i64 = 24 * HOUR_US;
const MINUTE_US: i64 = 60_000_000;
/// Days a deep re-send covers.
pub const RESEND_DAYS: u32 = 7;
/// Days the generator accepts.
pub const DAYS_MAX: u32 = 3_660;

const SOURCE_RICH: &str = "Apple Watch Ultra 3|iPad (Anton)";
const SOURCE_PLAIN: &str = "Apple Watch Ultra 3";
const SOURCE_PHONE: &str = "iPhone 17 Pro (Anton)";
const CONTEXTS: [&str; 3] = ["sedentary-resting", "active-walking", "post-workout-recovery"];
const SLEEP_STAGES: [&str; 4] = ["Core", "Deep", "REM", "Awake"];

#[derive(Debug, Clone, Copy)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }
}

/// One generated delivery.
#[derive(Debug, Clone)]
pub struct SampleDelivery {
    /// `minute/000.json`-style relative path; ingesting in name order per layer is journal order.
    pub name: String,
    pub layer: &'static str,
    pub body: Vec<u8>,
}

/// What the oracle expects of one delivery folded in journal order.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OracleDelivery {
    pub name: String,
    pub layer: String,
    pub status: String,
    pub uncovered: Vec<String>,
    /// Entities the delivery carries (every one with a fresh id).
    pub entities: u64,
    pub metrics: u64,
    pub points: u64,
    pub coordinates: u64,
    /// Objects the delivery creates (every hour of a daily delivery is new); `None` for re-sends,
    /// whose writes depend on the tie-break and are checked by the fingerprint instead.
    pub objects_new: Option<u64>,
    pub unit_mismatches: u64,
    pub incomparable: u64,
}

/// The oracle of a corpus.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Oracle {
    pub seed: u64,
    pub days: u32,
    /// In journal order: every `minute` delivery, then every `hour` delivery.
    pub deliveries: Vec<OracleDelivery>,
    pub coordinates: u64,
    pub objects: u64,
    /// heart_rate points that carry `context` in some copy: they must keep it.
    pub points_with_context: u64,
    /// step_count points that carry `Min` in some copy (an empty field): they must keep it.
    pub points_with_empty_min: u64,
    /// weight objects that must keep `kg` although lb copies arrived later.
    pub objects_in_kg: u64,
    pub objects_in_lb: u64,
    /// Strings that must never appear in logs above DEBUG.
    pub secret_values: Vec<String>,
}

/// A generated corpus.
#[derive(Debug, Clone)]
pub struct Corpus {
    pub deliveries: Vec<SampleDelivery>,
    pub oracle: Oracle,
}

impl Corpus {
    pub fn total_points(&self) -> u64 {
        self.oracle.deliveries.iter().map(|d| d.points).sum()
    }
}

/// How one copy of a point is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Noise {
    Exact,
    KeysReversed,
    LastDigit,
    Poorer,
    OtherSource,
}

#[derive(Debug, Clone)]
struct Point {
    start_us: i64,
    end_us: Option<i64>,
    /// A shared label (sleep: the night's date), written as `date` while `start` is written too.
    label_us: Option<i64>,
    /// (key, value text); the value text is JSON.
    fields: Vec<(&'static str, String)>,
    /// Extra key present in the rich copy only (heart_rate `context`).
    rich: Option<(&'static str, String)>,
    source: &'static str,
    /// Empty fields added by re-sends (step_count `Min`/`Max` = 0).
    empty_extra: bool,
}

impl Point {
    fn write(&self, noise: Noise, offset_min: i64, out: &mut String) {
        let mut keys: Vec<(String, String)> = Vec::with_capacity(8);
        let date_us = self.label_us.unwrap_or(self.start_us);
        keys.push(("date".into(), quote(&format_hae(date_us, offset_min))));
        if self.label_us.is_some() {
            keys.push(("start".into(), quote(&format_hae(self.start_us, offset_min))));
        }
        if let Some(end) = self.end_us {
            keys.push(("end".into(), quote(&format_hae(end, offset_min))));
        }
        for (k, v) in &self.fields {
            let v = if noise == Noise::LastDigit {
                jitter(v)
            } else {
                v.clone()
            };
            keys.push(((*k).into(), v));
        }
        if let Some((k, v)) = &self.rich
            && noise != Noise::Poorer
        {
            keys.push(((*k).into(), quote(v)));
        }
        if self.empty_extra {
            keys.push(("Min".into(), "0".into()));
            keys.push(("Max".into(), "0.0".into()));
        }
        let source = if noise == Noise::OtherSource {
            other_source(self.source)
        } else {
            self.source
        };
        keys.push(("source".into(), quote(source)));
        if noise == Noise::KeysReversed {
            keys.reverse();
        }
        out.push('{');
        for (i, (k, v)) in keys.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push('"');
            out.push_str(k);
            out.push_str("\":");
            out.push_str(v);
        }
        out.push('}');
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).expect("invariant: strings serialise")
}

fn other_source(s: &str) -> &'static str {
    if s == SOURCE_RICH {
        SOURCE_PLAIN
    } else {
        SOURCE_RICH
    }
}

/// The same number one ULP away, printed shortest: a last-digit difference.
fn jitter(v: &str) -> String {
    match v.parse::<f64>() {
        Ok(f) if f.fract() != 0.0 => format!("{}", f64::from_bits(f.to_bits() + 1)),
        _ => v.to_string(),
    }
}

/// A metric's units and its points in a re-send, with the noise each copy gets.
type Resent<'a> = (String, Vec<(&'a Point, Noise)>);

struct Metric {
    name: &'static str,
    units: String,
    points: Vec<Point>,
}

/// Generates `days` days of deliveries from `seed`.
pub fn generate(seed: u64, days: u32) -> Corpus {
    assert!((1..=DAYS_MAX).contains(&days), "invariant: 1..={DAYS_MAX} days");
    let mut rng = SplitMix64(seed ^ 0x6865_616C_7468_6C6F);
    // The units switch sits on a re-send boundary, so no re-send carries an hour stored in the
    // other unit: the spec keeps the stored units, which makes an object's units depend on
    // fold order when they conflict (scenario-tested on its own; see the module docs).
    let switch_day = days / 2 / RESEND_DAYS * RESEND_DAYS;
    let mut per_day: Vec<Vec<Metric>> = Vec::with_capacity(days as usize);
    let mut secrets: BTreeSet<String> = [SOURCE_RICH, SOURCE_PLAIN, SOURCE_PHONE]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    secrets.extend(CONTEXTS.iter().map(|s| (*s).to_string()));
    for day in 0..days {
        per_day.push(day_metrics(&mut rng, day, switch_day, &mut secrets));
    }
    // Local time moves from +0100 to +0200 two thirds in (a DST change); a point keeps the
    // offset of its own time in every copy.
    let shift_us = day_start(days * 2 / 3);

    let mut deliveries = Vec::new();
    let mut oracle = Oracle {
        seed,
        days,
        ..Oracle::default()
    };
    let mut all_coords: BTreeSet<(&'static str, i64, i64)> = BTreeSet::new();
    let mut hours: BTreeSet<(&'static str, &'static str, i64)> = BTreeSet::new();
    let mut weight_hours_kg: BTreeSet<i64> = BTreeSet::new();
    let mut weight_hours_lb: BTreeSet<i64> = BTreeSet::new();
    let mut context_coords: BTreeSet<(i64, i64)> = BTreeSet::new();
    let mut min_coords: BTreeSet<(i64, i64)> = BTreeSet::new();
    let mut minute_index = 0usize;
    for day in 0..days {
        // The daily delivery: each point exactly once, rich.
        let metrics: Vec<(&Metric, Vec<Noise>)> = per_day[day as usize]
            .iter()
            .map(|m| (m, vec![Noise::Exact; m.points.len()]))
            .collect();
        let (sections, uncovered) = sections_for(&mut rng, day);
        let mut latitudes = Vec::new();
        let body = body_of(
            &metrics,
            shift_us,
            &sections,
            &uncovered,
            &mut rng,
            &mut latitudes,
        );
        secrets.extend(latitudes);
        let mut day_hours = BTreeSet::new();
        let mut coords = 0u64;
        for m in &per_day[day as usize] {
            for p in &m.points {
                let c = (p.start_us, p.end_us.unwrap_or(p.start_us));
                all_coords.insert((m.name, c.0, c.1));
                coords += 1;
                day_hours.insert((m.name, hour_of(p.start_us)));
                hours.insert((m.name, "minute", hour_of(p.start_us)));
                if p.rich.is_some() {
                    context_coords.insert(c);
                }
                if m.name == "weight_body_mass" {
                    if m.units == "kg" {
                        weight_hours_kg.insert(hour_of(p.start_us));
                    } else {
                        weight_hours_lb.insert(hour_of(p.start_us));
                    }
                }
            }
        }
        let points: u64 = per_day[day as usize].iter().map(|m| m.points.len() as u64).sum();
        oracle.deliveries.push(OracleDelivery {
            name: format!("minute/{minute_index:03}.json"),
            layer: "minute".into(),
            status: if uncovered.is_empty() { "parsed" } else { "partial" }.into(),
            uncovered: uncovered.iter().map(|s| (*s).to_string()).collect(),
            entities: sections.len() as u64,
            metrics: per_day[day as usize].len() as u64,
            points,
            coordinates: coords,
            objects_new: Some(day_hours.len() as u64),
            unit_mismatches: 0,
            incomparable: 0,
        });
        deliveries.push(SampleDelivery {
            name: format!("minute/{minute_index:03}.json"),
            layer: "minute",
            body,
        });
        minute_index += 1;

        // The deep pass: the last week again, with noise, after the day's own delivery.
        if (day + 1) % RESEND_DAYS == 0 {
            let first = day + 1 - RESEND_DAYS;
            let mut merged: BTreeMap<&'static str, Resent<'_>> = BTreeMap::new();
            for d in first..=day {
                for m in &per_day[d as usize] {
                    let entry = merged
                        .entry(m.name)
                        .or_insert_with(|| (m.units.clone(), Vec::new()));
                    assert_eq!(
                        entry.0, m.units,
                        "invariant: a re-send window never straddles the units switch"
                    );
                    for p in &m.points {
                        let noise = match rng.below(100) {
                            0..=44 => Noise::Exact,
                            45..=64 => Noise::KeysReversed,
                            65..=79 => Noise::LastDigit,
                            80..=94 => Noise::Poorer,
                            _ => Noise::OtherSource,
                        };
                        entry.1.push((p, noise));
                    }
                }
            }
            // Re-sends add empty Min/Max to some step counts: the empty fields must survive.
            let mut owned: Vec<(String, &'static str, Vec<Point>, Vec<Noise>)> = Vec::new();
            for (name, (units, pts)) in merged {
                let mut points = Vec::with_capacity(pts.len());
                let mut noises = Vec::with_capacity(pts.len());
                for (p, noise) in pts {
                    let mut p = p.clone();
                    if name == "step_count" && rng.chance(0.2) {
                        p.empty_extra = true;
                        min_coords.insert((p.start_us, p.end_us.unwrap_or(p.start_us)));
                    }
                    points.push(p);
                    noises.push(noise);
                }
                owned.push((units, name, points, noises));
            }
            let metrics: Vec<(Metric, Vec<Noise>)> = owned
                .into_iter()
                .map(|(units, name, points, noises)| (Metric { name, units, points }, noises))
                .collect();
            let refs: Vec<(&Metric, Vec<Noise>)> = metrics.iter().map(|(m, n)| (m, n.clone())).collect();
            let uncovered: Vec<&str> = vec![UNCOVERED_SECTION];
            let mut latitudes = Vec::new();
            let body = body_of(
                &refs,
                shift_us,
                &["workouts"],
                &uncovered,
                &mut rng,
                &mut latitudes,
            );
            secrets.extend(latitudes);
            let points: u64 = metrics.iter().map(|(m, _)| m.points.len() as u64).sum();
            oracle.deliveries.push(OracleDelivery {
                name: format!("minute/{minute_index:03}.json"),
                layer: "minute".into(),
                status: "partial".into(),
                uncovered: vec![UNCOVERED_SECTION.into()],
                entities: 1,
                metrics: metrics.len() as u64,
                points,
                coordinates: points,
                objects_new: None,
                unit_mismatches: 0,
                incomparable: 0,
            });
            deliveries.push(SampleDelivery {
                name: format!("minute/{minute_index:03}.json"),
                layer: "minute",
                body,
            });
            minute_index += 1;
        }
    }

    // The hour layer: every seventh day, hourly aggregates of the past week.
    let mut hour_index = 0usize;
    let mut day = RESEND_DAYS - 1;
    while day < days {
        let first = day + 1 - RESEND_DAYS;
        let mut hr = Vec::new();
        let mut steps = Vec::new();
        for h in 0..i64::from(RESEND_DAYS) * 24 {
            let at = day_start(first) + h * HOUR_US;
            let avg = 55.0 + rng.unit() * 40.0;
            hr.push(Point {
                start_us: at,
                end_us: None,
                label_us: None,
                fields: vec![
                    ("Min", format!("{}", (avg - 8.0).floor())),
                    ("Avg", format!("{avg:.4}")),
                    ("Max", format!("{}", (avg + 20.0).ceil())),
                ],
                rich: None,
                source: SOURCE_RICH,
                empty_extra: false,
            });
            steps.push(Point {
                start_us: at,
                end_us: None,
                label_us: None,
                fields: vec![("qty", format!("{}", rng.below(2_000) + 1))],
                rich: None,
                source: SOURCE_PHONE,
                empty_extra: false,
            });
            hours.insert(("heart_rate", "hour", at));
            hours.insert(("step_count", "hour", at));
        }
        let n = hr.len() as u64;
        let metrics = [
            Metric {
                name: "heart_rate",
                units: "count/min".into(),
                points: hr,
            },
            Metric {
                name: "step_count",
                units: "count".into(),
                points: steps,
            },
        ];
        let refs: Vec<(&Metric, Vec<Noise>)> = metrics
            .iter()
            .map(|m| (m, vec![Noise::Exact; m.points.len()]))
            .collect();
        let body = body_of(&refs, shift_us, &[], &[], &mut rng, &mut Vec::new());
        oracle.deliveries.push(OracleDelivery {
            name: format!("hour/{hour_index:03}.json"),
            layer: "hour".into(),
            status: "parsed".into(),
            uncovered: vec![],
            entities: 0,
            metrics: 2,
            points: 2 * n,
            coordinates: 2 * n,
            objects_new: Some(2 * n),
            unit_mismatches: 0,
            incomparable: 0,
        });
        deliveries.push(SampleDelivery {
            name: format!("hour/{hour_index:03}.json"),
            layer: "hour",
            body,
        });
        hour_index += 1;
        day += RESEND_DAYS;
    }

    oracle.coordinates = all_coords.len() as u64 + 2 * 24 * u64::from(RESEND_DAYS) * hour_index as u64;
    oracle.objects = hours.len() as u64;
    oracle.points_with_context = context_coords.len() as u64;
    oracle.points_with_empty_min = min_coords.len() as u64;
    oracle.objects_in_kg = weight_hours_kg.len() as u64;
    oracle.objects_in_lb = weight_hours_lb.len() as u64;
    oracle.secret_values = secrets.into_iter().collect();
    Corpus { deliveries, oracle }
}

fn day_start(day: u32) -> i64 {
    CORPUS_START_US + i64::from(day) * DAY_US
}

fn hour_of(at_us: i64) -> i64 {
    at_us.div_euclid(HOUR_US) * HOUR_US
}

/// A section name HAE does not send today, standing for one it may add: uncovered.
const UNCOVERED_SECTION: &str = "visionPrescriptions";

/// The entity sections (one element each) and the uncovered names of a day's delivery.
fn sections_for(rng: &mut SplitMix64, day: u32) -> (Vec<&'static str>, Vec<&'static str>) {
    match (day % 5, rng.below(4)) {
        (0, _) => (vec!["workouts"], vec![]),
        (3, 0) => (vec!["stateOfMind", "workouts"], vec![UNCOVERED_SECTION]),
        (2, _) => (vec![], vec![UNCOVERED_SECTION]),
        _ => (vec![], vec![]),
    }
}

fn body_of(
    metrics: &[(&Metric, Vec<Noise>)],
    shift_us: i64,
    sections: &[&str],
    uncovered: &[&str],
    rng: &mut SplitMix64,
    latitudes: &mut Vec<String>,
) -> Vec<u8> {
    let mut out =
        String::with_capacity(metrics.iter().map(|(m, _)| m.points.len() * 140).sum::<usize>() + 256);
    out.push_str("{\"data\":{\"metrics\":[");
    for (i, (m, noises)) in metrics.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        out.push_str(&quote(m.name));
        out.push_str(",\"units\":");
        out.push_str(&quote(&m.units));
        out.push_str(",\"data\":[");
        for (j, (p, noise)) in m.points.iter().zip(noises).enumerate() {
            if j > 0 {
                out.push(',');
            }
            p.write(*noise, if p.start_us < shift_us { 60 } else { 120 }, &mut out);
        }
        out.push_str("]}");
    }
    out.push(']');
    for name in sections.iter().chain(uncovered) {
        let latitude = format!("48.1{}", rng.below(1_000_000));
        out.push_str(",\"");
        out.push_str(name);
        out.push_str("\":[{\"id\":\"");
        out.push_str(&format!("{:016x}", rng.next()));
        out.push_str("\",\"name\":\"Outdoor Walk\",\"start\":\"2026-01-05 10:00:00 +0100\",\"isIndoor\":false,\"route\":[{\"lat\":");
        out.push_str(&latitude);
        out.push_str(",\"lon\":11.5}]}]");
        latitudes.push(latitude);
    }
    out.push_str("}}");
    out.into_bytes()
}

fn day_metrics(
    rng: &mut SplitMix64,
    day: u32,
    switch_day: u32,
    secrets: &mut BTreeSet<String>,
) -> Vec<Metric> {
    let start = day_start(day);
    let mut metrics = Vec::new();
    let series = |name: &'static str,
                  units: &str,
                  every_min: i64,
                  rng: &mut SplitMix64,
                  mk: &mut dyn FnMut(&mut SplitMix64) -> Vec<(&'static str, String)>| {
        let mut points = Vec::new();
        let mut t = start;
        while t < start + DAY_US {
            points.push(Point {
                start_us: t,
                end_us: None,
                label_us: None,
                fields: mk(rng),
                rich: None,
                source: SOURCE_RICH,
                empty_extra: false,
            });
            t += every_min * MINUTE_US;
        }
        Metric {
            name,
            units: units.into(),
            points,
        }
    };
    let mut hr = series("heart_rate", "count/min", 1, rng, &mut |r| {
        let avg = 58.0 + r.unit() * 45.0;
        vec![
            ("Min", format!("{}", (avg - 3.0).floor())),
            ("Avg", format!("{avg:.3}")),
            ("Max", format!("{}", (avg + 6.0).ceil())),
        ]
    });
    for p in &mut hr.points {
        if rng.chance(0.3) {
            p.rich = Some(("context", CONTEXTS[rng.below(3) as usize].to_string()));
        }
    }
    metrics.push(hr);
    metrics.push(series("active_energy", "kcal", 1, rng, &mut |r| {
        vec![("qty", format!("{:.4}", 0.05 + r.unit() * 2.0))]
    }));
    metrics.push(series("basal_energy_burned", "kcal", 2, rng, &mut |r| {
        vec![("qty", format!("{:.4}", 1.1 + r.unit() * 0.2))]
    }));
    let mut steps = series("step_count", "count", 4, rng, &mut |r| {
        vec![("qty", format!("{}", r.below(180) + 1))]
    });
    for p in &mut steps.points {
        p.source = SOURCE_PHONE;
    }
    metrics.push(steps);
    metrics.push(series(
        "environmental_audio_exposure",
        "dBASPL",
        7,
        rng,
        &mut |r| vec![("qty", format!("{:.3}", 35.0 + r.unit() * 40.0))],
    ));
    metrics.push(series("respiratory_rate", "count/min", 15, rng, &mut |r| {
        vec![("qty", format!("{:.3}", 12.0 + r.unit() * 6.0))]
    }));
    metrics.push(series("blood_oxygen_saturation", "%", 30, rng, &mut |r| {
        vec![("qty", format!("{:.3}", 94.0 + r.unit() * 5.0))]
    }));
    // One reading a day at a varying minute.
    let at = start + (6 * 60 + rng.below(180) as i64) * MINUTE_US;
    let kg = 70.0 + rng.unit() * 5.0;
    let (units, value) = if day >= switch_day {
        ("lb", format!("{:.3}", kg * 2.204_62))
    } else {
        ("kg", format!("{kg:.3}"))
    };
    secrets.insert(value.clone());
    metrics.push(Metric {
        name: "weight_body_mass",
        units: units.into(),
        points: vec![Point {
            start_us: at,
            end_us: None,
            label_us: None,
            fields: vec![("qty", value)],
            rich: None,
            source: SOURCE_PHONE,
            empty_extra: false,
        }],
    });
    let walking = format!("{:.3}", 90.0 + rng.unit() * 20.0);
    secrets.insert(walking.clone());
    metrics.push(Metric {
        name: "walking_heart_rate_average",
        units: "count/min".into(),
        points: vec![Point {
            start_us: start + 20 * HOUR_US,
            end_us: None,
            label_us: None,
            fields: vec![("qty", walking)],
            rich: None,
            source: SOURCE_RICH,
            empty_extra: false,
        }],
    });
    // Sleep: several intervals of one night sharing one `date` label, in the early hours.
    let night = start + HOUR_US;
    let mut t = night;
    let mut points = Vec::new();
    for i in 0..8 {
        let len = (20 + rng.below(60) as i64) * MINUTE_US;
        let hours = format!("{:.4}", len as f64 / HOUR_US as f64);
        points.push(Point {
            start_us: t,
            end_us: Some(t + len),
            label_us: Some(night),
            fields: vec![("qty", hours), ("value", quote(SLEEP_STAGES[i % 4]))],
            rich: None,
            source: SOURCE_RICH,
            empty_extra: false,
        });
        t += len;
    }
    metrics.push(Metric {
        name: "sleep_analysis",
        units: "hr".into(),
        points,
    });
    metrics
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hae::{Coverage, parse};

    #[test]
    fn deterministic_and_parseable() {
        let a = generate(7, 8);
        let b = generate(7, 8);
        assert_eq!(a.oracle, b.oracle);
        assert_eq!(a.deliveries.len(), b.deliveries.len());
        assert!(
            a.deliveries
                .iter()
                .zip(&b.deliveries)
                .all(|(x, y)| x.body == y.body)
        );
        for (d, o) in a.deliveries.iter().zip(&a.oracle.deliveries) {
            let parsed = parse(&d.body, &Coverage::current()).expect("the corpus parses");
            assert_eq!(parsed.point_count() as u64, o.points, "{}", d.name);
            assert_eq!(parsed.uncovered.names, o.uncovered, "{}", d.name);
            assert_eq!(parsed.entities.len() as u64, o.entities, "{}", d.name);
            assert!(parsed.skipped.is_empty(), "{}", d.name);
        }
        assert_ne!(generate(8, 8).deliveries[0].body, a.deliveries[0].body);
    }
}
