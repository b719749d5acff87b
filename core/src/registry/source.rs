//! From a registry folder's TOML text to resolved descriptors (ingest spec, "The registry is
//! versioned data"; DESIGN.md §4).
//!
//! Owns: resolving a point into a self-contained [`Descriptor`] (affine conversion computed
//! from the unit vocabulary, codebook inlined), and [`load`], which runs parse
//! ([`super::folder`]) → check ([`super::check`]) → resolve and is the one entry point
//! callers need. The parsed form and the issue types live in [`super::folder`] and are
//! re-exported here, where callers have always found them.
//!
//! Takes text in, never touches the file system, and never panics on any input: registry text
//! is authored by people and fuzzed.

use super::check;
use super::descriptor::{Assignment, Conversion, Descriptor, Manifest, Site, Writable};
use super::folder::rule_issue;
pub use super::folder::{
    Defined, FILE_BYTES_MAX, FILES_MAX, FOLDER, ISSUES_MAX, LocatedPoint, RegistryIssue, RegistryReport,
    SourceFile, SourceFolder, SourcePoint, SourceUnit, SourceWritable, Vocabulary, parse,
};
use super::health;
use super::plan::{Admission, DeclaredLoad};
use super::rule_check;

/// Builds descriptors from a folder that passed [`check::check`]. Anything unresolvable is
/// reported rather than assumed away, so calling this on an unchecked folder is safe, just
/// less informative than the checks.
pub fn resolve(folder: &SourceFolder) -> Result<Vec<Descriptor>, RegistryReport> {
    let (vocabulary, mut issues) = Vocabulary::merge(folder);
    let mut descriptors = Vec::new();
    for file in &folder.files {
        for located in &file.points {
            match resolve_point(&vocabulary, file, located) {
                Ok(d) => descriptors.push(d),
                Err(message) => issues.push(RegistryIssue::point(&file.path, &located.label(), message)),
            }
        }
    }
    // Each rule into the descriptor of the point it claims, in rule id order (they come sorted).
    let (rules, rule_issues) = rule_check::resolve_rules(folder);
    issues.extend(rule_issues);
    for (file, rule) in rules {
        match descriptors
            .iter_mut()
            .find(|d| d.id == rule.point && d.writable.is_some())
        {
            Some(d) => d.rules.push(rule),
            None => issues.push(rule_issue(
                &file,
                &rule.id,
                format!(
                    "claim point {:?} is not a writable point in the registry",
                    rule.point
                ),
            )),
        }
    }
    debug_assert!(
        descriptors
            .iter()
            .all(|d| d.rules.windows(2).all(|w| w[0].id < w[1].id) || !issues.is_empty()),
        "a descriptor's rules are sorted by id"
    );
    if issues.is_empty() {
        Ok(descriptors)
    } else {
        Err(RegistryReport::new(issues))
    }
}

fn resolve_point(
    vocabulary: &Vocabulary,
    file: &SourceFile,
    located: &LocatedPoint,
) -> Result<Descriptor, String> {
    let p = &located.point;
    let missing = |field: &str| format!("missing {field}");
    let id = p.id.clone().ok_or_else(|| missing("id"))?;
    let kind = p.kind.ok_or_else(|| missing("kind"))?;
    let host = file
        .host
        .clone()
        .ok_or_else(|| missing("host (the file has no `host = ...`)"))?;
    let driver_instance = p
        .driver_instance
        .clone()
        .ok_or_else(|| missing("driver_instance"))?;
    let unit_native = p.effective_unit_native().map(str::to_owned);
    let conversion = match (&unit_native, &p.unit) {
        (Some(native), Some(unit)) => vocabulary
            .conversion(native, unit)
            .ok_or_else(|| format!("no conversion from {native:?} to {unit:?}"))?,
        (None, None) => Conversion::IDENTITY,
        _ => return Err("unit_native without unit".to_owned()),
    };
    let codebook = match &p.codebook {
        Some(name) => Some(
            vocabulary
                .codebooks
                .get(name)
                .map(|d| d.value.clone())
                .ok_or_else(|| format!("unknown codebook {name:?}"))?,
        ),
        None => None,
    };
    Ok(Descriptor {
        id,
        kind,
        unit_native,
        unit: p.unit.clone(),
        conversion,
        range: p.range,
        codebook,
        // Normalised here, not only in the canonical form, so the in-memory descriptor and its
        // stored blob compare equal bit for bit.
        deadband: p.deadband.unwrap_or(0.0) + 0.0,
        retention: p.retention.ok_or_else(|| missing("retention"))?,
        agg_safe: p.agg_safe.ok_or_else(|| missing("agg_safe"))?,
        assignment: Assignment {
            host,
            driver_instance,
            site: match &file.site {
                Some(name) => {
                    let declared = vocabulary
                        .sites
                        .get(name)
                        .ok_or_else(|| format!("unknown site {name:?}"))?;
                    Some(Site {
                        name: name.clone(),
                        partitionable: declared.value.partitionable.ok_or_else(|| {
                            format!("site {name:?} does not say whether it is partitionable")
                        })?,
                    })
                }
                None => None,
            },
        },
        freshness_s: p.freshness_s.ok_or_else(|| missing("freshness_s"))?,
        manifest: Manifest {
            archetype: p.archetype.ok_or_else(|| missing("archetype"))?,
            peak_rate_hz: p.peak_rate_hz.ok_or_else(|| missing("peak_rate_hz"))?,
            event_policy: p.event_policy.ok_or_else(|| missing("event_policy"))?,
            row_bytes: p.row_bytes.ok_or_else(|| missing("row_bytes"))?,
            reporting: p.reporting,
            heartbeat_s: p.heartbeat_s,
            // Normalised like the deadband (-0.0 → 0.0), so the stored blob compares equal.
            poll_interval_s: p.poll_interval_s.map(|s| s + 0.0),
        },
        derived: p.derived.clone(),
        writable: match &p.writable {
            Some(w) => Some(Writable {
                relinquish_default: w.relinquish_default.clone(),
                verify_s: w.verify_s.ok_or_else(|| missing("writable verify_s"))?,
                // Normalised like the deadband, so the stored blob compares equal.
                tolerance: w.tolerance.unwrap_or(0.0) + 0.0,
                min_on_s: w.min_on_s,
                min_off_s: w.min_off_s,
            }),
            None => None,
        },
        device: p.device.clone(),
        missing_data: p.missing_data,
        // Filled by `resolve` from the folder's `[[rule]]` sections.
        rules: Vec::new(),
    })
}

/// Parse, run every admission check, resolve, and add the generated health points
/// ([`health::generate`]): the one call a registry loader needs. Descriptors come back sorted
/// by id.
pub fn load(files: &[(String, String)]) -> Result<Vec<Descriptor>, RegistryReport> {
    load_with(files, &Admission::default())
}

/// [`load`] with the admission settings (ingest budget, stream bound) given explicitly.
pub fn load_with(
    files: &[(String, String)],
    admission: &Admission,
) -> Result<Vec<Descriptor>, RegistryReport> {
    let (folder, mut issues) = parse(files);
    issues.extend(check::check_with(&folder, admission));
    if !issues.is_empty() {
        return Err(RegistryReport::new(issues));
    }
    let mut descriptors = resolve(&folder)?;
    let refusals = interlock_issues(&folder, &descriptors);
    if !refusals.is_empty() {
        return Err(RegistryReport::new(refusals));
    }
    let generated = health::generate(&descriptors);
    let issues = check_generated(&descriptors, &generated, admission);
    if !issues.is_empty() {
        return Err(RegistryReport::new(issues));
    }
    descriptors.extend(generated);
    descriptors.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(descriptors)
}

/// [`rule_check::interlock_refusals`] as issues, each in the file that declares its rule.
fn interlock_issues(folder: &SourceFolder, descriptors: &[Descriptor]) -> Vec<RegistryIssue> {
    let files: std::collections::BTreeMap<&str, &str> = folder
        .files
        .iter()
        .flat_map(|f| {
            f.rules
                .iter()
                .filter_map(|r| Some((r.rule.id.as_deref()?, f.path.as_str())))
        })
        .collect();
    rule_check::interlock_refusals(descriptors)
        .into_iter()
        .map(|(rule, line)| RegistryIssue::file(files.get(rule.as_str()).copied().unwrap_or(FOLDER), line))
        .collect()
}

/// The generated health points must not take a declared point's id, and the declared load
/// with them must still fit the installation (the folder's own points passed alone).
fn check_generated(
    declared: &[Descriptor],
    generated: &[Descriptor],
    admission: &Admission,
) -> Vec<RegistryIssue> {
    let mut issues = Vec::new();
    let ids: std::collections::BTreeSet<&str> = declared.iter().map(|d| d.id.as_str()).collect();
    for g in generated.iter().filter(|g| ids.contains(g.id.as_str())) {
        issues.push(RegistryIssue::file(
            FOLDER,
            format!(
                "point {:?} is a health point the core generates for a host or device; declare the \
                 point under another id",
                g.id
            ),
        ));
    }
    for g in generated
        .iter()
        .filter(|g| g.id.len() > check::POINT_ID_BYTES_MAX)
    {
        issues.push(RegistryIssue::file(
            FOLDER,
            format!(
                "writable point {:?}: its convergence point {:?} would be {} bytes, over the {}-byte \
                 point id bound; shorten the point's id",
                g.id.trim_start_matches(health::CONVERGENCE_POINT_ID_PREFIX)
                    .trim_end_matches(health::CONVERGENCE_POINT_ID_SUFFIX),
                g.id,
                g.id.len(),
                check::POINT_ID_BYTES_MAX
            ),
        ));
    }
    let load = DeclaredLoad::of(
        declared
            .iter()
            .chain(generated)
            .map(|d| (d.retention, d.manifest.peak_rate_hz, d.manifest.row_bytes)),
        admission.outage_s,
    );
    let generated_obs_s: f64 = generated.iter().map(|g| g.manifest.peak_rate_hz).sum();
    if load.total_peak_obs_s > admission.ingest_budget_obs_s {
        issues.push(RegistryIssue::file(
            FOLDER,
            format!(
                "declared peak rates total {:.1} obs/s with the {} health points the core generates \
                 ({generated_obs_s:.1} obs/s), above the ingest budget of {} obs/s: lower peak rates or \
                 raise the budget (--ingest-budget-obs-s)",
                load.total_peak_obs_s,
                generated.len(),
                admission.ingest_budget_obs_s
            ),
        ));
    } else if !load.stream_fits(admission) {
        issues.push(RegistryIssue::file(
            FOLDER,
            format!(
                "an outage of {} s at {:.1} obs/s (with the {} generated health points) leaves {} messages \
                 ({} bytes) in the stream, more than it holds ({} messages, {} bytes)",
                admission.outage_s,
                load.total_peak_obs_s,
                generated.len(),
                load.outage_msgs_needed,
                load.outage_bytes_needed,
                admission.stream_max_msgs,
                admission.stream_max_bytes
            ),
        ));
    }
    issues
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter().map(|(p, t)| (p.to_string(), t.to_string())).collect()
    }

    proptest::proptest! {
        /// The fuzz target's property in miniature: TOML-shaped noise never panics.
        #[test]
        fn never_panics_on_toml_shaped_noise(
            text in "(host = \"[a-z.* ]{0,4}\"\n|\\[\\[point\\]\\]\n|\\[\\[rule\\]\\]\n|(when|until) = \"[a-z.<>=! ()0-9\"]{0,12}\"\n|[a-z_]{1,12} = (\"[a-zA-Z0-9./ ]{0,6}\"|-?[0-9.e]{1,5}|nan|inf|true|\\{ min = [0-9.-]{1,4}, max = [0-9.]{1,4} \\})\n|\\[(units|quantities|codebooks\\.[a-z]{1,3})\\]\n){0,40}"
        ) {
            let _ = load(&[("hosts/x.toml".to_owned(), text.clone()), ("units.toml".to_owned(), text)]);
        }
    }

    #[test]
    fn never_panics_on_odd_input() {
        for text in [
            "",
            "\u{0}",
            "[[point]]\n[[point]]\nid = 1",
            "point = 3",
            "host = [1]",
            "a.b.c = {",
            "[units.x]\n",
        ] {
            let _ = load(&files(&[("x.toml", text)]));
        }
    }
}
