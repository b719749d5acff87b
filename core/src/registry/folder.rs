//! A registry folder as parsed from its TOML text, before any check (ingest spec, "The
//! registry is versioned data"; DESIGN.md §4).
//!
//! Owns: the folder format (see `registry/README.md`) and its limits, the raw parsed form
//! ([`SourceFolder`]), the merged unit and codebook vocabulary ([`Vocabulary`]), and the
//! issue type every registry error is reported as ([`RegistryIssue`], [`RegistryReport`]).
//! The admission checks (`check.rs`, `admission.rs`) read this form, and `source.rs` runs
//! parse → check → resolve over it; this module names none of them.
//!
//! Takes text in, never touches the file system, and never panics on any input: registry text
//! is authored by people and fuzzed.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;

use super::descriptor::{
    Archetype, CommandValue, Conversion, Derived, EventPolicy, Kind, Range, Reporting, RetentionClass,
};
use super::rule::{FightLimit, MissingData, RuleBand};

/// Files read from one folder; beyond this the folder is refused rather than half-read.
pub const FILES_MAX: usize = 4096;
/// One registry file's size limit. The largest sensible host file (a few thousand points) is
/// well under this.
pub const FILE_BYTES_MAX: usize = 4 << 20;
/// Issues kept in one report; a broken folder can produce one per line and nobody reads past
/// the first screenful.
pub const ISSUES_MAX: usize = 1000;
/// The `file` of an issue about the folder as a whole (a limit across files).
pub const FOLDER: &str = "(registry folder)";

/// One problem found in a registry folder, located by file and (where there is one) point.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct RegistryIssue {
    /// Path relative to the registry folder, `/`-separated.
    pub file: String,
    pub point: Option<String>,
    pub message: String,
}

impl RegistryIssue {
    pub fn file(file: &str, message: impl Into<String>) -> RegistryIssue {
        RegistryIssue {
            file: file.to_owned(),
            point: None,
            message: message.into(),
        }
    }

    pub fn point(file: &str, point: &str, message: impl Into<String>) -> RegistryIssue {
        RegistryIssue {
            file: file.to_owned(),
            point: Some(point.to_owned()),
            message: message.into(),
        }
    }
}

impl fmt::Display for RegistryIssue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `{:?}` on user text quotes and escapes it, so a hostile id cannot forge report lines.
        match &self.point {
            Some(point) => write!(f, "{}: point {:?}: {}", self.file, point, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

/// Every issue found in a folder, sorted by file, point and message so the output is stable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct RegistryReport {
    pub issues: Vec<RegistryIssue>,
    /// Issues dropped beyond [`ISSUES_MAX`].
    pub omitted: usize,
}

impl RegistryReport {
    pub fn new(mut issues: Vec<RegistryIssue>) -> RegistryReport {
        issues.sort();
        issues.dedup();
        let omitted = issues.len().saturating_sub(ISSUES_MAX);
        issues.truncate(ISSUES_MAX);
        RegistryReport { issues, omitted }
    }

    pub fn is_empty(&self) -> bool {
        self.issues.is_empty()
    }

    pub fn len(&self) -> usize {
        self.issues.len() + self.omitted
    }
}

impl fmt::Display for RegistryReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for issue in &self.issues {
            writeln!(f, "{issue}")?;
        }
        if self.omitted > 0 {
            writeln!(f, "... and {} more issues", self.omitted)?;
        }
        write!(f, "{} issue(s) in the registry", self.len())
    }
}

/// A unit in the vocabulary: `canonical_of_quantity = value × factor + offset`.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceUnit {
    pub quantity: String,
    pub factor: f64,
    #[serde(default)]
    pub offset: f64,
}

/// One `[sites.<name>]` entry as written: whether the site can be cut off from the core
/// (core runtime spec, "Geographic split"). `partitionable` is required: an interlock is
/// allowed only at a site that says it is not, never by omission.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceSite {
    pub partitionable: Option<bool>,
}

/// One `[[point]]` entry as written. Every field is optional here so that a missing field is
/// reported by the admission checks, alongside everything else wrong with the same point,
/// rather than aborting the point at the first gap.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourcePoint {
    pub id: Option<String>,
    pub kind: Option<Kind>,
    pub driver_instance: Option<String>,
    pub unit_native: Option<String>,
    pub unit: Option<String>,
    pub range: Option<Range>,
    pub codebook: Option<String>,
    pub deadband: Option<f64>,
    pub retention: Option<RetentionClass>,
    pub agg_safe: Option<bool>,
    pub freshness_s: Option<u32>,
    pub archetype: Option<Archetype>,
    pub peak_rate_hz: Option<f64>,
    pub event_policy: Option<EventPolicy>,
    pub row_bytes: Option<u32>,
    pub reporting: Option<Reporting>,
    pub heartbeat_s: Option<u32>,
    /// How often the driver polls the point, in seconds (issue 21 item 7, "the valve"): pushed
    /// to the driver instance in its `assignment` and changed live by loading a new version.
    pub poll_interval_s: Option<f64>,
    /// `derived = { op = "...", inputs = [...], window_s = N }`: computed by the core.
    pub derived: Option<Derived>,
    /// `writable = { verify_s = N, tolerance = T, relinquish_default = V, min_on_s = N,
    /// min_off_s = N }`: the point takes commands.
    pub writable: Option<SourceWritable>,
    /// The device the point belongs to; the core generates the device's health self-points.
    pub device: Option<String>,
    /// `missing_data = { policy = "fail_closed" | "hold_last_valid" | "emit_marker", ... }`
    /// (issue 22 item 2): when the point counts as lost to a derived point or a rule.
    pub missing_data: Option<MissingData>,
}

/// A point's `writable` section as written; every field optional here so admission reports
/// what is missing with everything else (`check.rs`).
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceWritable {
    pub relinquish_default: Option<CommandValue>,
    pub verify_s: Option<u32>,
    pub tolerance: Option<f64>,
    pub min_on_s: Option<u32>,
    pub min_off_s: Option<u32>,
}

/// One `[[rule]]` entry as written (issue 22 item 1). Every field is optional here, as in a
/// point, so admission (`rule_check.rs`) reports what is missing with everything else.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceRule {
    pub id: Option<String>,
    pub inputs: Option<Vec<String>>,
    /// The condition's text (`condition.rs`), the "on" threshold.
    pub when: Option<String>,
    /// The "off" threshold's text, for hysteresis.
    pub until: Option<String>,
    pub for_s: Option<u32>,
    pub claim: Option<SourceClaim>,
    pub otherwise: Option<SourceFallback>,
    pub on_input_loss: Option<SourceFallback>,
    pub warmup: Option<SourceWarmup>,
    pub fight: Option<FightLimit>,
}

/// A rule's `claim = { point = "...", value = V, band = "...", priority = N }` as written.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceClaim {
    pub point: Option<String>,
    pub value: Option<CommandValue>,
    pub band: Option<RuleBand>,
    pub priority: Option<u8>,
}

/// A rule's `otherwise` or `on_input_loss` as written: a word (`"release"`, `"hold"`) or a safe
/// value (`{ value = V }`). Which words each accepts is admission's.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(try_from = "toml::Value")]
pub enum SourceFallback {
    Word(String),
    Value(SourceSafeValue),
}

impl TryFrom<toml::Value> for SourceFallback {
    type Error = String;

    /// A word or `{ value = V }`, with a message saying so for anything else (an untagged
    /// enum's own error names no field and no form).
    fn try_from(value: toml::Value) -> Result<SourceFallback, String> {
        match value {
            toml::Value::String(word) => Ok(SourceFallback::Word(word)),
            toml::Value::Table(_) => value
                .try_into::<SourceSafeValue>()
                .map(SourceFallback::Value)
                .map_err(|e| format!("a safe value is {{ value = V }}: {}", e.message().trim())),
            other => Err(format!(
                "expected \"release\", \"hold\" or {{ value = V }}, not the {} {other}",
                other.type_str()
            )),
        }
    }
}

/// `{ value = V }`: a safe value claimed instead.
#[derive(Deserialize, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceSafeValue {
    pub value: CommandValue,
}

/// A rule's `warmup = { deadline_s = N }` as written.
#[derive(Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SourceWarmup {
    pub deadline_s: Option<u32>,
}

/// A rule located in its file.
#[derive(Clone, Debug, PartialEq)]
pub struct LocatedRule {
    /// 1-based position among the file's `[[rule]]` entries, for rules without a usable id.
    pub ordinal: usize,
    pub rule: SourceRule,
}

impl LocatedRule {
    /// How issues name this rule: its id, or its position when it has none.
    pub fn label(&self) -> String {
        match &self.rule.id {
            Some(id) => id.clone(),
            None => format!("#{}", self.ordinal),
        }
    }
}

/// An issue about a rule: `<file>: rule "<id>": <message>` (a rule is not a point, so it is
/// named in the message, the way a file-level issue names what it is about).
pub fn rule_issue(file: &str, rule: &str, message: impl fmt::Display) -> RegistryIssue {
    RegistryIssue::file(file, format!("rule {rule:?}: {message}"))
}

impl SourcePoint {
    /// `unit_native` defaults to `unit`: a device that reports in the canonical unit needs
    /// no conversion and should not have to say so twice.
    pub fn effective_unit_native(&self) -> Option<&str> {
        self.unit_native.as_deref().or(self.unit.as_deref())
    }
}

/// A point located in its file.
#[derive(Clone, Debug, PartialEq)]
pub struct LocatedPoint {
    /// 1-based position among the file's `[[point]]` entries, for points without a usable id.
    pub ordinal: usize,
    pub point: SourcePoint,
}

impl LocatedPoint {
    /// How issues name this point: its id, or its position when it has none.
    pub fn label(&self) -> String {
        match &self.point.id {
            Some(id) => id.clone(),
            None => format!("#{}", self.ordinal),
        }
    }
}

/// One parsed file. Any file may carry any section; by convention `units.toml` holds the
/// quantities and units, `codebooks.toml` the codebooks and `hosts/<host>.toml` one host's
/// points.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceFile {
    pub path: String,
    pub host: Option<String>,
    /// The site the file's host stands at (`site = "..."`), one of the folder's `[sites]`.
    pub site: Option<String>,
    /// Site name → its declaration.
    pub sites: BTreeMap<String, SourceSite>,
    /// Quantity name → its canonical unit.
    pub quantities: BTreeMap<String, String>,
    pub units: BTreeMap<String, SourceUnit>,
    /// Codebook name → (native code → canonical member).
    pub codebooks: BTreeMap<String, BTreeMap<String, String>>,
    pub points: Vec<LocatedPoint>,
    /// The file's `[[rule]]` entries (issue 22): any file may hold them.
    pub rules: Vec<LocatedRule>,
}

/// The parsed folder, files sorted by path.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SourceFolder {
    pub files: Vec<SourceFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    host: Option<String>,
    site: Option<String>,
    #[serde(default)]
    sites: BTreeMap<String, SourceSite>,
    #[serde(default)]
    quantities: BTreeMap<String, String>,
    #[serde(default)]
    units: BTreeMap<String, SourceUnit>,
    #[serde(default)]
    codebooks: BTreeMap<String, BTreeMap<String, String>>,
    #[serde(default)]
    point: Vec<toml::Value>,
    #[serde(default)]
    rule: Vec<toml::Value>,
}

/// Parses each file's TOML. Returns what parsed, plus an issue for each file or point that did
/// not (syntax, unknown field, wrong type). Files are sorted by path so the result does not
/// depend on the order the caller read them in.
pub fn parse(files: &[(String, String)]) -> (SourceFolder, Vec<RegistryIssue>) {
    let mut issues = Vec::new();
    let mut order: Vec<&(String, String)> = files.iter().collect();
    order.sort_by(|a, b| a.0.cmp(&b.0));
    if order.len() > FILES_MAX {
        issues.push(RegistryIssue::file(
            FOLDER,
            format!(
                "the folder holds {} files, more than the limit of {FILES_MAX}",
                order.len()
            ),
        ));
        order.truncate(FILES_MAX);
    }
    let mut folder = SourceFolder::default();
    for (path, text) in order {
        if let Some(file) = parse_file(path, text, &mut issues) {
            folder.files.push(file);
        }
    }
    (folder, issues)
}

fn parse_file(path: &str, text: &str, issues: &mut Vec<RegistryIssue>) -> Option<SourceFile> {
    if text.len() > FILE_BYTES_MAX {
        issues.push(RegistryIssue::file(
            path,
            format!(
                "file is {} bytes, more than the limit of {FILE_BYTES_MAX}",
                text.len()
            ),
        ));
        return None;
    }
    let raw: RawFile = match toml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            issues.push(RegistryIssue::file(path, toml_error_message(text, &e)));
            return None;
        }
    };
    let mut points = Vec::with_capacity(raw.point.len());
    for (i, value) in raw.point.into_iter().enumerate() {
        let ordinal = i + 1;
        // Read the id first so that a type error elsewhere in the entry still names the point.
        let id = value.get("id").and_then(|v| v.as_str()).map(str::to_owned);
        match value.try_into::<SourcePoint>() {
            Ok(point) => points.push(LocatedPoint { ordinal, point }),
            Err(e) => {
                let label = id.unwrap_or_else(|| format!("#{ordinal}"));
                issues.push(RegistryIssue::point(path, &label, e.message().trim().to_owned()));
            }
        }
    }
    let mut rules = Vec::with_capacity(raw.rule.len());
    for (i, value) in raw.rule.into_iter().enumerate() {
        let ordinal = i + 1;
        let id = value.get("id").and_then(|v| v.as_str()).map(str::to_owned);
        match value.try_into::<SourceRule>() {
            Ok(rule) => rules.push(LocatedRule { ordinal, rule }),
            Err(e) => {
                let label = id.unwrap_or_else(|| format!("#{ordinal}"));
                issues.push(rule_issue(path, &label, e.message().trim().replace('\n', " ")));
            }
        }
    }
    Some(SourceFile {
        path: path.to_owned(),
        host: raw.host,
        site: raw.site,
        sites: raw.sites,
        quantities: raw.quantities,
        units: raw.units,
        codebooks: raw.codebooks,
        points,
        rules,
    })
}

/// One line, `line L, column C: message`, instead of toml's multi-line snippet: the report is
/// read in CI logs, one issue per line.
fn toml_error_message(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim().replace('\n', " ");
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let before = text.get(..start).unwrap_or("");
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {message}")
        }
        None => message,
    }
}

/// Where a vocabulary entry was defined.
#[derive(Clone, Debug, PartialEq)]
pub struct Defined<T> {
    pub file: String,
    pub value: T,
}

/// The quantities, units, codebooks and sites of all files merged. The first definition (in path
/// order) wins; later ones are reported as duplicates by [`Vocabulary::merge`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Vocabulary {
    pub quantities: BTreeMap<String, Defined<String>>,
    pub units: BTreeMap<String, Defined<SourceUnit>>,
    pub codebooks: BTreeMap<String, Defined<BTreeMap<String, String>>>,
    pub sites: BTreeMap<String, Defined<SourceSite>>,
}

impl Vocabulary {
    /// Merges every file's vocabulary, reporting a name defined twice with both files.
    pub fn merge(folder: &SourceFolder) -> (Vocabulary, Vec<RegistryIssue>) {
        let mut vocabulary = Vocabulary::default();
        let mut issues = Vec::new();
        for file in &folder.files {
            merge_section(
                &mut vocabulary.quantities,
                &file.quantities,
                &file.path,
                "quantity",
                &mut issues,
            );
            merge_section(
                &mut vocabulary.units,
                &file.units,
                &file.path,
                "unit",
                &mut issues,
            );
            merge_section(
                &mut vocabulary.codebooks,
                &file.codebooks,
                &file.path,
                "codebook",
                &mut issues,
            );
            merge_section(
                &mut vocabulary.sites,
                &file.sites,
                &file.path,
                "site",
                &mut issues,
            );
        }
        (vocabulary, issues)
    }

    /// The affine conversion from `native` to `canonical`, both units of one quantity.
    ///
    /// With `q = n × f_n + o_n` and `q = c × f_c + o_c` (q in the quantity's canonical unit),
    /// `c = n × (f_n / f_c) + (o_n − o_c) / f_c`. Identical units give exactly the identity.
    /// `None` if either unit is unknown, the quantities differ, or the result is not finite.
    pub fn conversion(&self, native: &str, canonical: &str) -> Option<Conversion> {
        let n = &self.units.get(native)?.value;
        let c = &self.units.get(canonical)?.value;
        if n.quantity != c.quantity {
            return None;
        }
        if native == canonical {
            return Some(Conversion::IDENTITY);
        }
        let factor = n.factor / c.factor;
        let offset = (n.offset - c.offset) / c.factor;
        (factor.is_finite() && factor != 0.0 && offset.is_finite()).then_some(Conversion { factor, offset })
    }
}

fn merge_section<T: Clone>(
    into: &mut BTreeMap<String, Defined<T>>,
    from: &BTreeMap<String, T>,
    path: &str,
    what: &str,
    issues: &mut Vec<RegistryIssue>,
) {
    for (name, value) in from {
        match into.get(name) {
            Some(first) => issues.push(RegistryIssue::file(
                path,
                format!(
                    "{what} {name:?} is defined more than once (first in {})",
                    first.file
                ),
            )),
            None => {
                into.insert(
                    name.clone(),
                    Defined {
                        file: path.to_owned(),
                        value: value.clone(),
                    },
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
    }

    const UNITS: &str = r#"
[quantities]
temperature = "degC"
[units]
degC = { quantity = "temperature", factor = 1.0 }
degF = { quantity = "temperature", factor = 0.5555555555555556, offset = -17.77777777777778 }
K = { quantity = "temperature", factor = 1.0, offset = -273.15 }
"#;

    #[test]
    fn issue_display_names_file_and_point() {
        let issue = RegistryIssue::point("hosts/plant-a.toml", "boiler.temp", "unknown unit \"degK\"");
        assert_eq!(
            issue.to_string(),
            r#"hosts/plant-a.toml: point "boiler.temp": unknown unit "degK""#
        );
        assert_eq!(
            RegistryIssue::file("units.toml", "bad").to_string(),
            "units.toml: bad"
        );
    }

    #[test]
    fn syntax_error_names_file_and_line() {
        let (_, issues) = parse(&files(&[("hosts/a.toml", "host = \"a\"\n[[point]\n")]));
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].file, "hosts/a.toml");
        assert!(issues[0].message.starts_with("line 2"), "{}", issues[0].message);
    }

    #[test]
    fn type_error_in_a_point_names_the_point() {
        let text = "host = \"a\"\n[[point]]\nid = \"x.y\"\nfreshness_s = -1\n[[point]]\nbogus = 1\n";
        let (folder, issues) = parse(&files(&[("hosts/a.toml", text)]));
        assert_eq!(folder.files[0].points.len(), 0);
        assert_eq!(issues.len(), 2);
        assert_eq!(issues[0].point.as_deref(), Some("x.y"));
        assert_eq!(issues[1].point.as_deref(), Some("#2"));
        assert!(issues[1].message.contains("bogus"), "{}", issues[1].message);
    }

    #[test]
    fn unknown_top_level_section_is_reported() {
        let (_, issues) = parse(&files(&[("units.toml", "[unitz]\n")]));
        assert_eq!(issues.len(), 1);
        assert!(issues[0].message.contains("unitz"), "{}", issues[0].message);
    }

    #[test]
    fn files_are_sorted_by_path() {
        let (folder, _) = parse(&files(&[("b.toml", ""), ("a.toml", "")]));
        let paths: Vec<_> = folder.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.toml", "b.toml"]);
    }

    #[test]
    fn conversion_is_composed_through_the_quantity_canonical_unit() {
        let (folder, _) = parse(&files(&[("units.toml", UNITS)]));
        let (vocabulary, issues) = Vocabulary::merge(&folder);
        assert!(issues.is_empty());
        assert_eq!(vocabulary.conversion("degC", "degC"), Some(Conversion::IDENTITY));
        let f_to_c = vocabulary.conversion("degF", "degC").expect("same quantity");
        assert!((f_to_c.apply(71.6) - 22.0).abs() < 1e-9);
        let c_to_k = vocabulary.conversion("degC", "K").expect("same quantity");
        assert!((c_to_k.apply(0.0) - 273.15).abs() < 1e-9);
        assert_eq!(vocabulary.conversion("degC", "nope"), None);
    }

    #[test]
    fn vocabulary_duplicates_name_both_files() {
        let (folder, _) = parse(&files(&[("a.toml", UNITS), ("b.toml", UNITS)]));
        let (_, issues) = Vocabulary::merge(&folder);
        assert!(!issues.is_empty());
        assert!(
            issues
                .iter()
                .all(|i| i.file == "b.toml" && i.message.contains("first in a.toml"))
        );
    }

    #[test]
    fn report_is_sorted_bounded_and_counted() {
        let issues = (0..ISSUES_MAX + 5)
            .rev()
            .map(|i| RegistryIssue::file("a.toml", format!("{i:05}")))
            .collect();
        let report = RegistryReport::new(issues);
        assert_eq!(report.issues.len(), ISSUES_MAX);
        assert_eq!(report.omitted, 5);
        assert_eq!(report.issues[0].message, "00000");
        assert!(report.to_string().contains("and 5 more"));
    }
}
