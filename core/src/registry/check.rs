//! The registry's admission checks (DESIGN.md §4; sensor paradigm, "The manifest is an
//! admission test").
//!
//! Owns: every rule a registry folder must satisfy before it may be loaded, run on the parsed
//! folder ([`SourceFolder`]) so that one run reports everything wrong at once,
//! each issue naming its file and point. `sentinel registry check` is this function, and is
//! meant to run in a registry repository's own CI: a point that would hurt the system later
//! (an event flood, a point that is always stale, a unit that cannot be converted, a host that
//! could publish another host's points) is refused at registration rather than found in
//! production.
//!
//! Limits on sizes live here too ([`POINTS_MAX`] and friends), so a hostile or broken folder is
//! refused with a message rather than exhausting memory downstream.

use std::collections::BTreeMap;

use super::descriptor::{Archetype, EventPolicy, Kind, Reporting, SELF_HOST, value_refusal};
use super::folder::{FOLDER, LocatedPoint, RegistryIssue, SourceFile, SourceFolder, SourcePoint, Vocabulary};
use super::plan::Admission;

/// Points in one registry. The spec targets ~4,000 (core runtime spec, "Scale targets"); this
/// leaves room for sixteen times that.
pub const POINTS_MAX: usize = 65_536;
pub const QUANTITIES_MAX: usize = 256;
pub const UNITS_MAX: usize = 1024;
pub const CODEBOOKS_MAX: usize = 1024;
pub const CODEBOOK_ENTRIES_MAX: usize = 256;
pub use super::descriptor::POINT_ID_BYTES_MAX;
/// Hosts, driver instances, units, quantities, codebook names.
pub const NAME_BYTES_MAX: usize = 64;
/// Codebook codes and members.
pub const CODE_BYTES_MAX: usize = 64;
pub use super::plan::PEAK_RATE_HZ_MAX;
/// `event_policy = "always"` raises one event per reading; above this rate that floods
/// subscribers (sensor paradigm, "Record and raise are two verbs").
pub const ALWAYS_RATE_HZ_MAX: f64 = 1.0;
/// `on_change` without a deadband raises on every bit of noise; above this rate that is the
/// same flood as `always`.
pub const UNBANDED_ON_CHANGE_RATE_HZ_MAX: f64 = 1.0;
pub const ROW_BYTES_MAX: u32 = 64 * 1024;
/// A point silent for longer than 31 days is not being watched.
pub const FRESHNESS_S_MAX: u32 = 31 * 24 * 3600;
/// A device that has not followed a command within a day is not following it.
pub const VERIFY_S_MAX: u32 = 24 * 3600;
/// Minimum on/off holds longer than a day lock a point out of operator control.
pub const MIN_ON_OFF_S_MAX: u32 = 24 * 3600;
/// Points assigned to one driver instance: its assignment (issue 21 item 7) lists them all,
/// and at 128-byte ids this many stays well under the bus's default 1 MiB payload.
pub const INSTANCE_POINTS_MAX: usize = 4096;
/// A point polled less than once a day is not being watched (issue 21 item 7).
pub const POLL_INTERVAL_S_MAX: f64 = 86_400.0;

/// Runs every admission check over a parsed folder, against the default installation
/// ([`Admission::default`]: the spec's 500 obs/s budget, a four-hour outage, the default
/// stream). Empty means the folder may be loaded.
pub fn check(folder: &SourceFolder) -> Vec<RegistryIssue> {
    check_with(folder, &Admission::default())
}

/// [`check`] against an explicit installation's capacity.
pub fn check_with(folder: &SourceFolder, admission: &Admission) -> Vec<RegistryIssue> {
    let (vocabulary, mut issues) = Vocabulary::merge(folder);
    check_vocabulary(folder, &vocabulary, &mut issues);
    check_folder_points(folder, &mut issues);
    check_host_sites(folder, &mut issues);
    for file in &folder.files {
        check_file(file, &vocabulary, &mut issues);
        check_sites(file, &vocabulary, &mut issues);
    }
    super::admission::check_registry(folder, admission, &mut issues);
    super::rule_check::check_rules(folder, &vocabulary, &mut issues);
    issues
}

/// Host and driver-instance names are single NATS subject tokens (`obs.<host>.<instance>`).
/// Narrower than NATS requires: also no `:`, which separates the parts of `Nats-Msg-Id`.
fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= NAME_BYTES_MAX
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Point ids appear as `state.<point_id>`, so they may span several tokens, but no token may be
/// empty or a wildcard.
fn is_point_id(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= POINT_ID_BYTES_MAX
        && s.split('.').all(|t| {
            !t.is_empty()
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        })
}

/// Units, quantities and codebook names: printable, no whitespace (units such as `m3/h` need
/// punctuation).
fn is_vocabulary_name(s: &str) -> bool {
    !s.is_empty() && s.len() <= NAME_BYTES_MAX && s.bytes().all(|b| b.is_ascii_graphic())
}

const TOKEN_RULE: &str = "use only ASCII letters, digits, '_' and '-'";

fn check_vocabulary(folder: &SourceFolder, vocabulary: &Vocabulary, issues: &mut Vec<RegistryIssue>) {
    let total = |n: usize, limit: usize, what: &str, issues: &mut Vec<RegistryIssue>| {
        if n > limit {
            issues.push(RegistryIssue::file(
                FOLDER,
                format!("{n} {what} defined, more than the limit of {limit}"),
            ));
        }
    };
    total(vocabulary.quantities.len(), QUANTITIES_MAX, "quantities", issues);
    total(vocabulary.units.len(), UNITS_MAX, "units", issues);
    total(vocabulary.codebooks.len(), CODEBOOKS_MAX, "codebooks", issues);

    for file in &folder.files {
        let path = file.path.as_str();
        for (name, canonical) in &file.quantities {
            if !is_vocabulary_name(name) {
                issues.push(RegistryIssue::file(
                    path,
                    format!("quantity name {name:?} is empty, too long or has whitespace"),
                ));
            }
            match vocabulary.units.get(canonical) {
                None => issues.push(RegistryIssue::file(
                    path,
                    format!("quantity {name:?}: canonical unit {canonical:?} is not defined"),
                )),
                Some(unit) if unit.value.quantity != *name => issues.push(RegistryIssue::file(
                    path,
                    format!(
                        "quantity {name:?}: canonical unit {canonical:?} measures {:?}",
                        unit.value.quantity
                    ),
                )),
                Some(unit) if unit.value.factor != 1.0 || unit.value.offset != 0.0 => {
                    issues.push(RegistryIssue::file(
                        path,
                        format!(
                            "quantity {name:?}: canonical unit {canonical:?} must have factor 1 and offset 0, \
                             since every other unit converts to it"
                        ),
                    ))
                }
                Some(_) => {}
            }
        }
        for (name, unit) in &file.units {
            if !is_vocabulary_name(name) {
                issues.push(RegistryIssue::file(
                    path,
                    format!("unit name {name:?} is empty, too long or has whitespace"),
                ));
            }
            if !vocabulary.quantities.contains_key(&unit.quantity) {
                issues.push(RegistryIssue::file(
                    path,
                    format!("unit {name:?}: unknown quantity {:?}", unit.quantity),
                ));
            }
            if !unit.factor.is_finite() || unit.factor == 0.0 || !unit.offset.is_finite() {
                issues.push(RegistryIssue::file(
                    path,
                    format!("unit {name:?}: factor must be finite and non-zero, offset finite"),
                ));
            }
        }
        for (name, entries) in &file.codebooks {
            if !is_vocabulary_name(name) {
                issues.push(RegistryIssue::file(
                    path,
                    format!("codebook name {name:?} is empty, too long or has whitespace"),
                ));
            }
            if entries.is_empty() {
                issues.push(RegistryIssue::file(
                    path,
                    format!("codebook {name:?} has no entries"),
                ));
            }
            if entries.len() > CODEBOOK_ENTRIES_MAX {
                issues.push(RegistryIssue::file(
                    path,
                    format!(
                        "codebook {name:?} has {} entries, more than the limit of {CODEBOOK_ENTRIES_MAX}",
                        entries.len()
                    ),
                ));
            }
            let bad = |s: &str| s.is_empty() || s.len() > CODE_BYTES_MAX || s.chars().any(char::is_control);
            if entries.iter().any(|(code, member)| bad(code) || bad(member)) {
                issues.push(RegistryIssue::file(
                    path,
                    format!(
                        "codebook {name:?}: codes and members must be 1–{CODE_BYTES_MAX} bytes without \
                         control characters"
                    ),
                ));
            }
        }
    }
}

/// Checks that span files: the point count, duplicate ids, and driver instances claimed by
/// two hosts.
fn check_folder_points(folder: &SourceFolder, issues: &mut Vec<RegistryIssue>) {
    let count: usize = folder.files.iter().map(|f| f.points.len()).sum();
    if count > POINTS_MAX {
        issues.push(RegistryIssue::file(
            FOLDER,
            format!("{count} points defined, more than the limit of {POINTS_MAX}"),
        ));
    }
    // id → (file, ordinal) of its first definition.
    let mut ids: BTreeMap<&str, (&str, usize)> = BTreeMap::new();
    // instance → (host, file) of the first file assigning it. An instance name is the first
    // part of the dedup key and is interned globally, so one instance serving two hosts would
    // let either host publish the other's points.
    let mut instances: BTreeMap<&str, (&str, &str)> = BTreeMap::new();
    let mut per_instance: BTreeMap<&str, usize> = BTreeMap::new();
    for file in &folder.files {
        for located in &file.points {
            let p = &located.point;
            if let Some(id) = p.id.as_deref() {
                match ids.get(id) {
                    Some((first_file, first_ordinal)) if *first_file == file.path => {
                        issues.push(RegistryIssue::point(
                            &file.path,
                            id,
                            format!(
                                "duplicate id: entries #{first_ordinal} and #{} in this file",
                                located.ordinal
                            ),
                        ))
                    }
                    Some((first_file, _)) => issues.push(RegistryIssue::point(
                        &file.path,
                        id,
                        format!("duplicate id: also defined in {first_file}"),
                    )),
                    None => {
                        ids.insert(id, (&file.path, located.ordinal));
                    }
                }
            }
            if let (Some(host), Some(instance)) = (file.host.as_deref(), p.driver_instance.as_deref()) {
                *per_instance.entry(instance).or_default() += 1;
                match instances.get(instance) {
                    Some((first_host, first_file)) if *first_host != host => {
                        issues.push(RegistryIssue::point(
                            &file.path,
                            &located.label(),
                            format!(
                                "driver_instance {instance:?} is already assigned to host {first_host:?} in \
                                 {first_file}; instance names must be unique across hosts"
                            ),
                        ))
                    }
                    Some(_) => {}
                    None => {
                        instances.insert(instance, (host, &file.path));
                    }
                }
            }
        }
    }
    for (instance, count) in per_instance {
        if count > INSTANCE_POINTS_MAX {
            issues.push(RegistryIssue::file(
                FOLDER,
                format!(
                    "driver_instance {instance:?} is assigned {count} points, more than the \
                     {INSTANCE_POINTS_MAX} one assignment carries; split them over more instances"
                ),
            ));
        }
    }
}

/// A file's `[sites]` declarations and its own `site = "..."` (core runtime spec, "Geographic
/// split"): names are subject tokens, `partitionable` is said explicitly, a named site is
/// declared somewhere in the folder, and the core's own host is never at a partitionable site
/// (the core cannot be cut off from itself).
fn check_sites(file: &SourceFile, vocabulary: &Vocabulary, issues: &mut Vec<RegistryIssue>) {
    for (name, site) in &file.sites {
        if !is_token(name) {
            issues.push(RegistryIssue::file(
                &file.path,
                format!("site {name:?} is not a token: {TOKEN_RULE}, at most {NAME_BYTES_MAX} bytes"),
            ));
        }
        if site.partitionable.is_none() {
            issues.push(RegistryIssue::file(
                &file.path,
                format!(
                    "site {name:?} does not say whether it is partitionable: add `partitionable = true` \
                     or `partitionable = false`"
                ),
            ));
        }
    }
    let Some(site) = &file.site else {
        return;
    };
    if file.host.is_none() {
        issues.push(RegistryIssue::file(
            &file.path,
            format!("site {site:?} is named, but the file has no `host = \"...\"` to place there"),
        ));
    }
    match vocabulary.sites.get(site) {
        None => issues.push(RegistryIssue::file(
            &file.path,
            format!("unknown site {site:?}: declare it in a `[sites.{site}]` section"),
        )),
        Some(declared)
            if declared.value.partitionable == Some(true) && file.host.as_deref() == Some(SELF_HOST) =>
        {
            issues.push(RegistryIssue::file(
                &file.path,
                format!("host \"{SELF_HOST}\" (the core's own) cannot stand at partitionable site {site:?}"),
            ))
        }
        Some(_) => {}
    }
}

/// A host split over several files stands at one site: every file of the host names the same
/// site, or none of them does.
fn check_host_sites(folder: &SourceFolder, issues: &mut Vec<RegistryIssue>) {
    // host → (site, file) of the first file naming the host.
    let mut hosts: BTreeMap<&str, (Option<&str>, &str)> = BTreeMap::new();
    for file in &folder.files {
        let Some(host) = file.host.as_deref() else {
            continue;
        };
        let site = file.site.as_deref();
        match hosts.get(host) {
            Some((first_site, first_file)) if *first_site != site => issues.push(RegistryIssue::file(
                &file.path,
                format!(
                    "host {host:?} is at site {} here but at site {} in {first_file}; a host stands at one site",
                    site_label(site),
                    site_label(*first_site)
                ),
            )),
            Some(_) => {}
            None => {
                hosts.insert(host, (site, &file.path));
            }
        }
    }
}

fn site_label(site: Option<&str>) -> String {
    site.map_or_else(|| "(none)".to_owned(), |s| format!("{s:?}"))
}

fn check_file(file: &SourceFile, vocabulary: &Vocabulary, issues: &mut Vec<RegistryIssue>) {
    if let Some(host) = &file.host
        && !is_token(host)
    {
        issues.push(RegistryIssue::file(
            &file.path,
            format!(
                "host {host:?} is not a NATS subject token: {TOKEN_RULE}, at most {NAME_BYTES_MAX} bytes"
            ),
        ));
    }
    for located in &file.points {
        let label = located.label();
        let mut push = |message: String| issues.push(RegistryIssue::point(&file.path, &label, message));
        check_point(file, located, vocabulary, &mut push);
    }
}

fn check_point(
    file: &SourceFile,
    located: &LocatedPoint,
    vocabulary: &Vocabulary,
    push: &mut impl FnMut(String),
) {
    let p = &located.point;
    let mut require = |present: bool, field: &str| {
        if !present {
            push(format!("missing {field}"));
        }
    };
    require(p.id.is_some(), "id");
    require(p.kind.is_some(), "kind");
    require(p.retention.is_some(), "retention");
    require(p.agg_safe.is_some(), "agg_safe");
    require(p.freshness_s.is_some(), "freshness_s");
    require(p.archetype.is_some(), "archetype");
    require(p.peak_rate_hz.is_some(), "peak_rate_hz");
    require(p.event_policy.is_some(), "event_policy");
    require(p.row_bytes.is_some(), "row_bytes");

    if let Some(id) = &p.id
        && !is_point_id(id)
    {
        push(format!(
            "id is not NATS-subject-safe: dot-separated non-empty parts that {TOKEN_RULE}, at most \
             {POINT_ID_BYTES_MAX} bytes"
        ));
    }

    // Assignment (stage 5 compares both halves with the publishing subject).
    if file.host.is_none() {
        push("missing assignment: the file has no `host = \"...\"`".to_owned());
    }
    match &p.driver_instance {
        None => push("missing assignment: no driver_instance".to_owned()),
        Some(instance) if !is_token(instance) => push(format!(
            "driver_instance {instance:?} is not a NATS subject token: {TOKEN_RULE}, at most {NAME_BYTES_MAX} bytes"
        )),
        Some(_) => {}
    }
    if let Some(device) = &p.device {
        if !is_token(device) {
            push(format!(
                "device {device:?} is not a NATS subject token: {TOKEN_RULE}, at most {NAME_BYTES_MAX} bytes"
            ));
        }
        if file.host.as_deref() == Some(SELF_HOST) {
            push(format!(
                "device {device:?} on a point of host \"{SELF_HOST}\": the core's own points belong to no device"
            ));
        }
    }

    let is_number = p.kind == Some(Kind::Number);
    // Kind-specific rules only apply once the kind is known; a missing kind is reported above.
    let not_number = p.kind.is_some() && !is_number;
    let kind_name = p.kind.map_or("?", kind_str);

    check_units(p, vocabulary, not_number, kind_name, push);

    // Range: bounds in the canonical unit, numbers only.
    if let Some(range) = p.range {
        if not_number {
            push(format!(
                "range on a {kind_name} point; only number points have a range"
            ));
        }
        if !range.min.is_finite() || !range.max.is_finite() {
            push(format!(
                "bad range: min {} and max {} must be finite",
                range.min, range.max
            ));
        } else if range.min > range.max {
            push(format!(
                "bad range: min {} is greater than max {}",
                range.min, range.max
            ));
        }
    }

    // Codebook: enum points need one, nothing else may have one.
    match (&p.codebook, p.kind) {
        (None, Some(Kind::Enum)) => push("enum point without a codebook".to_owned()),
        (Some(name), Some(kind)) if kind != Kind::Enum => push(format!(
            "codebook {name:?} on a {} point; only enum points have a codebook",
            kind_str(kind)
        )),
        _ => {}
    }
    if let Some(name) = &p.codebook
        && !vocabulary.codebooks.contains_key(name)
    {
        push(format!("unknown codebook {name:?}"));
    }

    // Deadband: a change ≤ deadband is not an edge, so a negative one is meaningless.
    let deadband = p.deadband.unwrap_or(0.0);
    if !deadband.is_finite() || deadband < 0.0 {
        push(format!("negative or non-finite deadband {deadband}"));
    } else if deadband != 0.0 && not_number {
        push(format!(
            "deadband on a {kind_name} point; only number points have a deadband"
        ));
    }

    if p.agg_safe == Some(true) && not_number {
        push(format!(
            "agg_safe on a {kind_name} point; only numbers can be averaged"
        ));
    }

    if let Some(freshness_s) = p.freshness_s {
        if freshness_s == 0 {
            push("freshness_s is 0; every point must be expected to report at some interval".to_owned());
        } else if freshness_s > FRESHNESS_S_MAX {
            push(format!(
                "freshness_s {freshness_s} is more than the limit of {FRESHNESS_S_MAX}"
            ));
        }
    }

    check_heartbeat(p, push);
    super::rule_check::check_missing_data(p, push);
    check_poll_interval(p, file.host.as_deref(), push);
    check_writable(p, file.host.as_deref(), vocabulary, push);

    if let Some(row_bytes) = p.row_bytes
        && (row_bytes == 0 || row_bytes > ROW_BYTES_MAX)
    {
        push(format!(
            "row_bytes {row_bytes} must be between 1 and {ROW_BYTES_MAX}"
        ));
    }

    if let Some(rate) = p.peak_rate_hz {
        if !(rate.is_finite() && rate > 0.0) {
            push(format!("peak_rate_hz {rate} must be a positive, finite rate"));
        } else if rate > PEAK_RATE_HZ_MAX {
            push(format!(
                "peak_rate_hz {rate} is more than the limit of {PEAK_RATE_HZ_MAX}"
            ));
        } else {
            check_rate(p.event_policy, rate, deadband, is_number, p.freshness_s, push);
        }
    }
}

/// A point that reports only on change must heartbeat, and its heartbeat must come before
/// its freshness runs out, or an unchanged point would go stale between heartbeats.
fn check_heartbeat(p: &SourcePoint, push: &mut impl FnMut(String)) {
    match (p.reporting, p.heartbeat_s) {
        (Some(Reporting::OnChange), None) => push(
            "reporting \"on_change\" without heartbeat_s: a point that only reports on change cannot be told \
             from a dead one; declare how often it re-sends an unchanged reading"
                .to_owned(),
        ),
        (_, Some(0)) => push("heartbeat_s is 0; a heartbeat is at least 1 s apart".to_owned()),
        (_, Some(heartbeat_s)) => {
            if let Some(freshness_s) = p.freshness_s
                && heartbeat_s > freshness_s
            {
                push(format!(
                    "heartbeat_s {heartbeat_s} is longer than freshness_s {freshness_s}: an unchanged point \
                     would go stale between heartbeats"
                ));
            }
        }
        _ => {}
    }
}

/// `poll_interval_s` (issue 21 item 7, "the valve"): a positive, finite number of seconds up to
/// [`POLL_INTERVAL_S_MAX`]; no faster than the declared peak rate (`1 / poll_interval_s` above
/// `peak_rate_hz` would break the load admission counted on); no longer than `freshness_s`
/// (the point would go stale between polls); and never on the core's own points, which no
/// driver polls.
fn check_poll_interval(p: &SourcePoint, host: Option<&str>, push: &mut impl FnMut(String)) {
    let Some(poll_interval_s) = p.poll_interval_s else {
        return;
    };
    if host == Some(SELF_HOST) {
        push(format!(
            "poll_interval_s on a point of host \"{SELF_HOST}\": the core's own points are not polled by a driver"
        ));
        return;
    }
    if !(poll_interval_s.is_finite() && poll_interval_s > 0.0) {
        push(format!(
            "poll_interval_s {poll_interval_s} must be a positive, finite number of seconds"
        ));
        return;
    }
    if poll_interval_s > POLL_INTERVAL_S_MAX {
        push(format!(
            "poll_interval_s {poll_interval_s} is more than the limit of {POLL_INTERVAL_S_MAX} s"
        ));
        return;
    }
    if let Some(rate) = p.peak_rate_hz
        && rate.is_finite()
        && rate > 0.0
        && 1.0 / poll_interval_s > rate
    {
        push(format!(
            "poll_interval_s {poll_interval_s} polls faster than peak_rate_hz {rate} allows: poll at most \
             every {} s or raise the declared peak rate",
            1.0 / rate
        ));
    }
    if let Some(freshness_s) = p.freshness_s
        && poll_interval_s > f64::from(freshness_s)
    {
        push(format!(
            "poll_interval_s {poll_interval_s} is longer than freshness_s {freshness_s}: the point would go \
             stale between polls"
        ));
    }
}

/// The `writable` section (issue 21 item 1): only a device's number, bool or enum point takes
/// commands; it says how long verification waits and, for numbers, how close is close enough;
/// minimum on/off times are for bools; a `relinquish_default` must be a value a command could
/// ask for.
fn check_writable(
    p: &SourcePoint,
    host: Option<&str>,
    vocabulary: &Vocabulary,
    push: &mut impl FnMut(String),
) {
    let Some(w) = &p.writable else {
        return;
    };
    if p.kind == Some(Kind::Text) {
        push("writable on a text point; only number, bool and enum points take commands".to_owned());
    }
    if p.archetype == Some(Archetype::Derived) || p.derived.is_some() || host == Some(SELF_HOST) {
        push(
            "writable on a point the core computes or publishes itself; only a device's points take commands"
                .to_owned(),
        );
    }
    match w.verify_s {
        None => push("writable without verify_s: say how long the device has to follow a command".to_owned()),
        Some(0) => push("writable verify_s is 0; a device needs at least 1 s to follow a command".to_owned()),
        Some(verify_s) if verify_s > VERIFY_S_MAX => push(format!(
            "writable verify_s {verify_s} is more than the limit of {VERIFY_S_MAX}"
        )),
        Some(_) => {}
    }
    match (w.tolerance, p.kind) {
        (Some(t), _) if !t.is_finite() || t < 0.0 => {
            push(format!("writable tolerance {t} must be finite and not negative"))
        }
        (None, Some(Kind::Number)) => push(
            "writable number point without tolerance: say how close its observations must come to a command"
                .to_owned(),
        ),
        (Some(t), Some(kind)) if t != 0.0 && kind != Kind::Number => push(format!(
            "writable tolerance on a {} point; bools and enums are verified by equality",
            kind_str(kind)
        )),
        _ => {}
    }
    for (field, hold) in [("min_on_s", w.min_on_s), ("min_off_s", w.min_off_s)] {
        let Some(hold) = hold else {
            continue;
        };
        if let Some(kind) = p.kind
            && kind != Kind::Bool
        {
            push(format!(
                "writable {field} on a {} point; minimum on/off times are for bool points",
                kind_str(kind)
            ));
        }
        if hold == 0 || hold > MIN_ON_OFF_S_MAX {
            push(format!(
                "writable {field} {hold} must be between 1 and {MIN_ON_OFF_S_MAX}"
            ));
        }
    }
    if let (Some(default), Some(kind)) = (&w.relinquish_default, p.kind)
        && kind != Kind::Text
    {
        let codebook = p
            .codebook
            .as_ref()
            .and_then(|name| vocabulary.codebooks.get(name))
            .map(|defined| &defined.value);
        if let Some(why) = value_refusal(kind, p.range, p.unit.as_deref(), codebook, default) {
            push(format!("writable relinquish_default: {why}"));
        }
    }
}

fn check_units(
    p: &SourcePoint,
    vocabulary: &Vocabulary,
    not_number: bool,
    kind_name: &str,
    push: &mut impl FnMut(String),
) {
    if not_number && (p.unit.is_some() || p.unit_native.is_some()) {
        push(format!(
            "unit on a {kind_name} point; only number points have units"
        ));
        return;
    }
    let unit = match (&p.unit, &p.unit_native) {
        (Some(unit), _) => unit,
        (None, Some(_)) => {
            push("unit_native without unit: say which canonical unit to store".to_owned());
            return;
        }
        (None, None) => return,
    };
    let native = p.effective_unit_native().unwrap_or(unit);
    let known = |name: &str, field: &str, push: &mut dyn FnMut(String)| match vocabulary.units.get(name) {
        Some(u) => Some(u.value.quantity.clone()),
        None => {
            push(format!("unknown {field} {name:?}"));
            None
        }
    };
    let q_native = known(native, "unit", push);
    let q_unit = if native == unit {
        q_native.clone()
    } else {
        known(unit, "unit", push)
    };
    if let (Some(qn), Some(qu)) = (q_native, q_unit) {
        if qn != qu {
            push(format!(
                "conversion from {native:?} ({qn}) to {unit:?} ({qu}) crosses quantities; unit_native and \
                 unit must measure the same quantity"
            ));
        } else if vocabulary.conversion(native, unit).is_none() {
            push(format!("conversion from {native:?} to {unit:?} overflows"));
        }
    }
}

/// The sensor paradigm's event-policy-versus-rate guard, plus the freshness a rate implies.
fn check_rate(
    policy: Option<EventPolicy>,
    rate_hz: f64,
    deadband: f64,
    is_number: bool,
    freshness_s: Option<u32>,
    push: &mut impl FnMut(String),
) {
    match policy {
        Some(EventPolicy::Always) if rate_hz > ALWAYS_RATE_HZ_MAX => {
            let instead = if is_number {
                "pick \"on_change\" with a deadband, or \"never\" (record only)"
            } else {
                "pick \"on_change\" (raise on transitions only), or \"never\" (record only)"
            };
            push(format!(
                "event_policy \"always\" raises an event per reading, and a declared peak of {rate_hz} Hz is \
                 more than the {ALWAYS_RATE_HZ_MAX} Hz subscribers are sized for: {instead}"
            ));
        }
        Some(EventPolicy::OnChange)
            if is_number && deadband == 0.0 && rate_hz > UNBANDED_ON_CHANGE_RATE_HZ_MAX =>
        {
            push(format!(
                "event_policy \"on_change\" with deadband 0 raises on every bit of noise at a declared peak of \
                 {rate_hz} Hz (limit {UNBANDED_ON_CHANGE_RATE_HZ_MAX} Hz without a deadband): set a deadband, \
                 or pick \"never\" (record only)"
            ));
        }
        _ => {}
    }
    // Even at its declared peak the point reports only every 1/rate seconds; a freshness
    // shorter than that makes the point stale between every two readings.
    if let Some(freshness_s) = freshness_s
        && freshness_s > 0
        && f64::from(freshness_s) * rate_hz < 1.0
    {
        push(format!(
            "freshness_s {freshness_s} is shorter than the {} s between readings at the declared peak rate; \
             the point would always be stale",
            1.0 / rate_hz
        ));
    }
}

fn kind_str(kind: Kind) -> &'static str {
    match kind {
        Kind::Number => "number",
        Kind::Bool => "bool",
        Kind::Enum => "enum",
        Kind::Text => "text",
    }
}

#[cfg(test)]
mod tests {
    use super::super::source::{self, parse};
    use super::*;

    const UNITS: &str = r#"
[quantities]
temperature = "degC"
pressure = "kPa"
[units]
degC = { quantity = "temperature", factor = 1.0 }
degF = { quantity = "temperature", factor = 0.5555555555555556, offset = -17.77777777777778 }
kPa = { quantity = "pressure", factor = 1.0 }
bar = { quantity = "pressure", factor = 100.0 }
"#;

    const CODEBOOKS: &str = r#"
[codebooks.pump_state]
"0" = "off"
"1" = "on"
"2" = "fault"
"#;

    const BASE: &[(&str, &str)] = &[
        ("id", "\"boiler.temp\""),
        ("kind", "\"number\""),
        ("driver_instance", "\"modbus-1\""),
        ("unit_native", "\"degF\""),
        ("unit", "\"degC\""),
        ("range", "{ min = 0.0, max = 120.0 }"),
        ("deadband", "0.5"),
        ("retention", "\"measurement\""),
        ("agg_safe", "true"),
        ("freshness_s", "60"),
        ("archetype", "\"hardware\""),
        ("peak_rate_hz", "0.1"),
        ("event_policy", "\"on_change\""),
        ("row_bytes", "96"),
    ];

    /// The base point with fields replaced (`Some`) or removed (`None`).
    fn point(overrides: &[(&str, Option<&str>)]) -> String {
        let mut fields: BTreeMap<&str, &str> = BASE.iter().copied().collect();
        for (key, value) in overrides {
            match value {
                Some(v) => fields.insert(key, v),
                None => fields.remove(key),
            };
        }
        let mut text = String::from("[[point]]\n");
        for (k, v) in fields {
            text.push_str(&format!("{k} = {v}\n"));
        }
        text
    }

    fn host_file(host: &str, points: &[String]) -> String {
        format!("host = \"{host}\"\n{}", points.concat())
    }

    fn run(hosts: &[(&str, String)]) -> Vec<RegistryIssue> {
        let mut files = vec![
            ("units.toml".to_owned(), UNITS.to_owned()),
            ("codebooks.toml".to_owned(), CODEBOOKS.to_owned()),
        ];
        files.extend(hosts.iter().map(|(p, t)| (p.to_string(), t.clone())));
        let (folder, mut issues) = parse(&files);
        issues.extend(check(&folder));
        issues
    }

    fn one_point(overrides: &[(&str, Option<&str>)]) -> Vec<RegistryIssue> {
        run(&[("hosts/plant-a.toml", host_file("plant-a", &[point(overrides)]))])
    }

    /// Exactly one issue, on `boiler.temp` in `hosts/plant-a.toml`, containing `needle`.
    #[track_caller]
    fn assert_one(issues: &[RegistryIssue], needle: &str) {
        assert_eq!(
            issues.len(),
            1,
            "expected one issue containing {needle:?}, got {issues:#?}"
        );
        assert_eq!(issues[0].file, "hosts/plant-a.toml");
        assert_eq!(issues[0].point.as_deref(), Some("boiler.temp"));
        assert!(
            issues[0].message.contains(needle),
            "{:?} does not contain {needle:?}",
            issues[0].message
        );
    }

    #[test]
    fn the_base_fixture_passes() {
        assert_eq!(one_point(&[]), vec![]);
    }

    const SITES: &str = "[sites.barn]\npartitionable = true\n[sites.plant-room]\npartitionable = false\n";

    /// The issues of the base point's host placed at `site`, with `SITES` declared.
    fn at_site(site: &str) -> Vec<String> {
        let text = format!("site = \"{site}\"\n{}", host_file("plant-a", &[point(&[])]));
        run(&[("sites.toml", SITES.to_owned()), ("hosts/plant-a.toml", text)])
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn a_host_at_a_declared_site_passes_and_its_points_carry_the_site() {
        assert_eq!(at_site("barn"), Vec::<String>::new());
        let files = [
            ("units.toml".to_owned(), UNITS.to_owned()),
            ("sites.toml".to_owned(), SITES.to_owned()),
            (
                "hosts/plant-a.toml".to_owned(),
                format!("site = \"barn\"\n{}", host_file("plant-a", &[point(&[])])),
            ),
        ];
        let (folder, issues) = parse(&files);
        assert!(issues.is_empty(), "{issues:?}");
        let descriptors = source::resolve(&folder).expect("resolves");
        assert_eq!(descriptors[0].partitionable_site(), Some("barn"));
        assert_eq!(
            descriptors[0].assignment.site,
            Some(crate::registry::Site {
                name: "barn".into(),
                partitionable: true
            })
        );
    }

    #[test]
    fn a_site_that_is_not_declared_is_refused() {
        assert_eq!(
            at_site("shed"),
            [r#"hosts/plant-a.toml: unknown site "shed": declare it in a `[sites.shed]` section"#]
        );
    }

    #[test]
    fn a_site_must_say_whether_it_is_partitionable() {
        let issues: Vec<String> = run(&[("sites.toml", "[sites.barn]\n".to_owned())])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            issues,
            [
                r#"sites.toml: site "barn" does not say whether it is partitionable: add `partitionable = true` or `partitionable = false`"#
            ]
        );
    }

    #[test]
    fn a_site_name_is_a_token() {
        let issues: Vec<String> = run(&[(
            "sites.toml",
            "[sites.\"far barn\"]\npartitionable = true\n".to_owned(),
        )])
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            issues,
            [format!(
                r#"sites.toml: site "far barn" is not a token: {TOKEN_RULE}, at most {NAME_BYTES_MAX} bytes"#
            )]
        );
    }

    #[test]
    fn a_site_without_a_host_is_refused() {
        let issues: Vec<String> = run(&[("sites.toml", format!("site = \"barn\"\n{SITES}"))])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            issues,
            [r#"sites.toml: site "barn" is named, but the file has no `host = "..."` to place there"#]
        );
    }

    #[test]
    fn a_host_stands_at_one_site() {
        let issues: Vec<String> = run(&[
            ("sites.toml", SITES.to_owned()),
            (
                "hosts/plant-a.toml",
                format!("site = \"barn\"\n{}", host_file("plant-a", &[point(&[])])),
            ),
            (
                "hosts/plant-a-more.toml",
                format!(
                    "site = \"plant-room\"\n{}",
                    host_file("plant-a", &[point(&[("id", Some("\"boiler.other\""))])])
                ),
            ),
        ])
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            issues,
            [
                r#"hosts/plant-a.toml: host "plant-a" is at site "barn" here but at site "plant-room" in hosts/plant-a-more.toml; a host stands at one site"#
            ]
        );
    }

    #[test]
    fn the_cores_own_host_cannot_be_cut_off_from_the_core() {
        let text = format!("site = \"barn\"\nhost = \"{SELF_HOST}\"\n");
        let issues: Vec<String> = run(&[("sites.toml", SITES.to_owned()), ("hosts/sentinel.toml", text)])
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            issues,
            [
                r#"hosts/sentinel.toml: host "sentinel" (the core's own) cannot stand at partitionable site "barn""#
            ]
        );
    }

    #[test]
    fn unknown_unit() {
        let issues = one_point(&[("unit_native", Some("\"degK\""))]);
        assert_one(&issues, "unknown unit \"degK\"");
        assert_eq!(
            issues[0].to_string(),
            r#"hosts/plant-a.toml: point "boiler.temp": unknown unit "degK""#
        );
    }

    #[test]
    fn conversion_between_quantities() {
        assert_one(
            &one_point(&[("unit", Some("\"kPa\"")), ("range", None)]),
            "crosses quantities",
        );
    }

    #[test]
    fn unit_native_without_unit() {
        assert_one(&one_point(&[("unit", None)]), "unit_native without unit");
    }

    #[test]
    fn missing_driver_instance() {
        assert_one(
            &one_point(&[("driver_instance", None)]),
            "missing assignment: no driver_instance",
        );
    }

    #[test]
    fn missing_host() {
        let issues = run(&[("hosts/plant-a.toml", point(&[]))]);
        assert_one(&issues, "missing assignment: the file has no `host");
    }

    #[test]
    fn missing_field() {
        assert_one(&one_point(&[("freshness_s", None)]), "missing freshness_s");
    }

    #[test]
    fn range_min_above_max() {
        assert_one(
            &one_point(&[("range", Some("{ min = 10.0, max = 1.0 }"))]),
            "bad range: min 10 is greater",
        );
    }

    #[test]
    fn range_not_finite() {
        assert_one(
            &one_point(&[("range", Some("{ min = nan, max = 1.0 }"))]),
            "must be finite",
        );
        assert_one(
            &one_point(&[("range", Some("{ min = 0.0, max = inf }"))]),
            "must be finite",
        );
    }

    #[test]
    fn duplicate_id_within_a_file() {
        let text = host_file("plant-a", &[point(&[]), point(&[])]);
        let issues = run(&[("hosts/plant-a.toml", text)]);
        assert_one(&issues, "duplicate id: entries #1 and #2 in this file");
    }

    #[test]
    fn duplicate_id_across_files_names_both() {
        let issues = run(&[
            ("hosts/plant-a.toml", host_file("plant-a", &[point(&[])])),
            (
                "hosts/plant-b.toml",
                host_file("plant-b", &[point(&[("driver_instance", Some("\"modbus-2\""))])]),
            ),
        ]);
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert_eq!(issues[0].file, "hosts/plant-b.toml");
        assert!(
            issues[0].message.contains("also defined in hosts/plant-a.toml"),
            "{}",
            issues[0]
        );
    }

    #[test]
    fn instance_shared_by_two_hosts() {
        let issues = run(&[
            ("hosts/plant-a.toml", host_file("plant-a", &[point(&[])])),
            (
                "hosts/plant-b.toml",
                host_file("plant-b", &[point(&[("id", Some("\"other.temp\""))])]),
            ),
        ]);
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert!(
            issues[0].message.contains("already assigned to host \"plant-a\""),
            "{}",
            issues[0]
        );
    }

    #[test]
    fn enum_without_codebook() {
        let issues = one_point(&[
            ("kind", Some("\"enum\"")),
            ("unit", None),
            ("unit_native", None),
            ("range", None),
            ("deadband", None),
            ("agg_safe", Some("false")),
        ]);
        assert_one(&issues, "enum point without a codebook");
    }

    #[test]
    fn codebook_on_a_number() {
        assert_one(
            &one_point(&[("codebook", Some("\"pump_state\""))]),
            "only enum points have a codebook",
        );
    }

    #[test]
    fn unknown_codebook() {
        let issues = one_point(&[
            ("kind", Some("\"enum\"")),
            ("codebook", Some("\"valve_state\"")),
            ("unit", None),
            ("unit_native", None),
            ("range", None),
            ("deadband", None),
            ("agg_safe", Some("false")),
        ]);
        assert_one(&issues, "unknown codebook \"valve_state\"");
    }

    #[test]
    fn negative_deadband() {
        assert_one(
            &one_point(&[("deadband", Some("-0.1"))]),
            "negative or non-finite deadband",
        );
    }

    #[test]
    fn freshness_zero() {
        assert_one(&one_point(&[("freshness_s", Some("0"))]), "freshness_s is 0");
    }

    #[test]
    fn freshness_shorter_than_reporting_interval() {
        assert_one(&one_point(&[("freshness_s", Some("5"))]), "would always be stale");
    }

    #[test]
    fn always_at_a_high_rate_says_what_to_pick() {
        let issues = one_point(&[
            ("event_policy", Some("\"always\"")),
            ("peak_rate_hz", Some("10.0")),
        ]);
        assert_one(&issues, "pick \"on_change\" with a deadband, or \"never\"");
    }

    #[test]
    fn always_at_a_low_rate_is_fine() {
        assert_eq!(
            one_point(&[
                ("event_policy", Some("\"always\"")),
                ("peak_rate_hz", Some("1.0"))
            ]),
            vec![]
        );
    }

    #[test]
    fn unbanded_on_change_at_a_high_rate() {
        let issues = one_point(&[("deadband", Some("0.0")), ("peak_rate_hz", Some("5.0"))]);
        assert_one(&issues, "set a deadband");
    }

    #[test]
    fn peak_rate_must_be_positive_and_bounded() {
        assert_one(&one_point(&[("peak_rate_hz", Some("0.0"))]), "positive, finite");
        assert_one(&one_point(&[("peak_rate_hz", Some("nan"))]), "positive, finite");
        assert_one(
            &one_point(&[("peak_rate_hz", Some("1000.0"))]),
            "more than the limit",
        );
    }

    #[test]
    fn row_bytes_bounds() {
        assert_one(&one_point(&[("row_bytes", Some("0"))]), "row_bytes 0");
    }

    #[test]
    fn host_must_be_a_subject_token() {
        for host in ["plant.a", "plant a", "plant*", "plant>", ""] {
            let issues = run(&[("hosts/x.toml", host_file(host, &[point(&[])]))]);
            assert_eq!(issues.len(), 1, "{host:?}: {issues:#?}");
            assert!(
                issues[0].message.contains("not a NATS subject token"),
                "{}",
                issues[0]
            );
        }
    }

    #[test]
    fn instance_must_be_a_subject_token() {
        for instance in ["\"modbus.1\"", "\"modbus 1\"", "\"*\"", "\">\"", "\"a:b\""] {
            assert_one(
                &one_point(&[("driver_instance", Some(instance))]),
                "not a NATS subject token",
            );
        }
    }

    #[test]
    fn point_id_may_have_dots_but_no_wildcards() {
        assert_eq!(one_point(&[("id", Some("\"a.b-c.d_e\""))]), vec![]);
        for id in ["\"a..b\"", "\".a\"", "\"a.*\"", "\"a.>\"", "\"a b\"", "\"\""] {
            let issues = one_point(&[("id", Some(id))]);
            assert_eq!(issues.len(), 1, "{id}: {issues:#?}");
            assert!(issues[0].message.contains("NATS-subject-safe"), "{}", issues[0]);
        }
    }

    #[test]
    fn long_ids_are_refused() {
        let id = format!("\"{}\"", "a".repeat(POINT_ID_BYTES_MAX + 1));
        let issues = one_point(&[("id", Some(&id))]);
        assert_eq!(issues.len(), 1);
    }

    #[test]
    fn unit_on_a_bool() {
        let issues = one_point(&[
            ("kind", Some("\"bool\"")),
            ("range", None),
            ("deadband", None),
            ("agg_safe", Some("false")),
        ]);
        assert_one(&issues, "only number points have units");
    }

    #[test]
    fn agg_safe_on_text() {
        let issues = one_point(&[
            ("kind", Some("\"text\"")),
            ("unit", None),
            ("unit_native", None),
            ("range", None),
            ("deadband", None),
        ]);
        assert_one(&issues, "agg_safe on a text point");
    }

    #[test]
    fn codebook_entry_limit() {
        let mut text = String::from("[codebooks.big]\n");
        for i in 0..=CODEBOOK_ENTRIES_MAX {
            text.push_str(&format!("\"{i}\" = \"m{i}\"\n"));
        }
        let issues = run(&[("big.toml", text)]);
        assert_eq!(issues.len(), 1, "{issues:#?}");
        assert!(issues[0].message.contains("more than the limit"));
    }

    #[test]
    fn vocabulary_rules() {
        let issues = run(&[(
            "more-units.toml",
            "[quantities]\nflow = \"l/s\"\n[units]\n\"l/s\" = { quantity = \"flow\", factor = 2.0 }\n\
             psi = { quantity = \"pres\", factor = 0.0 }\n"
                .to_owned(),
        )]);
        let messages: Vec<_> = issues.iter().map(|i| i.message.as_str()).collect();
        assert_eq!(issues.len(), 3, "{messages:#?}");
        assert!(
            messages
                .iter()
                .any(|m| m.contains("must have factor 1 and offset 0"))
        );
        assert!(messages.iter().any(|m| m.contains("unknown quantity \"pres\"")));
        assert!(
            messages
                .iter()
                .any(|m| m.contains("factor must be finite and non-zero"))
        );
    }

    /// The whole report for `hosts`, one line per issue, against `admission`.
    fn lines_with(hosts: &[(&str, String)], admission: &Admission) -> Vec<String> {
        let mut files = vec![
            ("units.toml".to_owned(), UNITS.to_owned()),
            ("codebooks.toml".to_owned(), CODEBOOKS.to_owned()),
        ];
        files.extend(hosts.iter().map(|(p, t)| (p.to_string(), t.clone())));
        let (folder, mut issues) = parse(&files);
        issues.extend(check_with(&folder, admission));
        issues.sort();
        issues.iter().map(ToString::to_string).collect()
    }

    fn lines(hosts: &[(&str, String)]) -> Vec<String> {
        lines_with(hosts, &Admission::default())
    }

    /// A derived point (the base point's other fields: a number, agg_safe), for the core's
    /// own host.
    fn derived(id: &str, derived: &str) -> String {
        point(&[
            ("id", Some(&format!("\"{id}\""))),
            ("driver_instance", Some("\"derived\"")),
            ("archetype", Some("\"derived\"")),
            ("unit_native", None),
            ("unit", None),
            ("range", None),
            ("derived", Some(derived)),
        ])
    }

    fn plant_a(points: &[String]) -> Vec<(&'static str, String)> {
        vec![("hosts/plant-a.toml", host_file("plant-a", points))]
    }

    /// The base point on plant-a, and `derived` points in the core's own file.
    fn with_core(plant: &[String], derived: &[String]) -> Vec<(&'static str, String)> {
        vec![
            ("hosts/plant-a.toml", host_file("plant-a", plant)),
            ("hosts/sentinel.toml", host_file("sentinel", derived)),
        ]
    }

    #[test]
    fn a_derived_point_over_an_agg_safe_input_passes() {
        let mean = derived(
            "boiler.temp_mean",
            r#"{ op = "mean", inputs = ["boiler.temp"], window_s = 300 }"#,
        );
        let diff = derived(
            "boiler.temp_spread",
            r#"{ op = "difference", inputs = ["boiler.temp", "boiler.temp_mean"] }"#,
        );
        assert_eq!(
            lines(&with_core(&[point(&[])], &[mean.clone(), diff])),
            Vec::<String>::new()
        );
        assert_eq!(
            lines(&plant_a(&[point(&[]), mean])),
            vec![
                r#"hosts/plant-a.toml: point "boiler.temp_mean": derived "mean" on host "plant-a": the core computes and publishes derived points, so they belong in a file with host = "sentinel""#
            ]
        );
    }

    #[test]
    fn refuses_a_cycle_in_the_inputs_graph_naming_it() {
        let a = derived("d.a", r#"{ op = "max", inputs = ["d.b"], window_s = 60 }"#);
        let b = derived("d.b", r#"{ op = "min", inputs = ["d.c"], window_s = 60 }"#);
        let c = derived("d.c", r#"{ op = "max", inputs = ["d.a"], window_s = 60 }"#);
        assert_eq!(
            lines(&with_core(&[point(&[])], &[c, a, b])),
            vec![
                r#"hosts/sentinel.toml: point "d.a": inputs form a cycle: d.a → d.b → d.c → d.a; a derived point cannot depend on itself"#
            ]
        );
    }

    #[test]
    fn refuses_a_mean_over_an_input_that_is_not_agg_safe() {
        let input = point(&[("agg_safe", Some("false"))]);
        let mean = derived(
            "boiler.temp_mean",
            r#"{ op = "mean", inputs = ["boiler.temp"], window_s = 300 }"#,
        );
        assert_eq!(
            lines(&with_core(std::slice::from_ref(&input), &[mean])),
            vec![
                r#"hosts/sentinel.toml: point "boiler.temp_mean": derived "mean" over input "boiler.temp", which is not agg_safe: adding its values up is meaningless; pick min, max or count, or mark the input agg_safe"#
            ]
        );
        // max is fine over the same input.
        let max = derived(
            "boiler.temp_max",
            r#"{ op = "max", inputs = ["boiler.temp"], window_s = 300 }"#,
        );
        assert_eq!(lines(&with_core(&[input], &[max])), Vec::<String>::new());
    }

    #[test]
    fn refuses_a_malformed_derived_section() {
        let cases = [
            (
                r#"{ op = "ratio", inputs = ["boiler.temp"] }"#,
                r#"derived "ratio" takes 2 input(s), not 1"#,
            ),
            (
                r#"{ op = "sum", inputs = ["boiler.temp"] }"#,
                r#"derived "sum" needs window_s, the sliding window (1 to 86400 s)"#,
            ),
            (
                r#"{ op = "count", inputs = ["boiler.temp"], window_s = 86401 }"#,
                r#"derived "count": window_s 86401 must be between 1 and 86400"#,
            ),
            (
                r#"{ op = "mean", inputs = ["boiler.nope"], window_s = 60 }"#,
                r#"derived input "boiler.nope" is not a point in the registry"#,
            ),
        ];
        for (section, message) in cases {
            let d = derived("boiler.d", section);
            assert_eq!(
                lines(&with_core(&[point(&[])], &[d])),
                vec![format!(r#"hosts/sentinel.toml: point "boiler.d": {message}"#)],
                "{section}"
            );
        }
    }

    #[test]
    fn refuses_a_total_peak_rate_above_the_ingest_budget() {
        let admission = Admission {
            ingest_budget_obs_s: 0.15,
            ..Admission::default()
        };
        let second = point(&[("id", Some("\"boiler.return\"")), ("peak_rate_hz", Some("0.05"))]);
        assert_eq!(
            lines_with(&plant_a(&[point(&[]), second.clone()]), &admission),
            vec![
                r#"hosts/plant-a.toml: point "boiler.temp": declared peak rates total 0.2 obs/s, above the ingest budget of 0.15 obs/s; this point is the largest at 0.1 Hz: lower peak rates or raise the budget (--ingest-budget-obs-s)"#
            ]
        );
        // The default is the spec's 500 obs/s, which this folder is far under.
        assert_eq!(lines(&plant_a(&[point(&[]), second])), Vec::<String>::new());
    }

    #[test]
    fn refuses_a_stream_too_small_for_a_four_hour_outage() {
        let admission = Admission {
            stream_max_msgs: 1_000,
            ..Admission::default()
        };
        assert_eq!(
            lines_with(&plant_a(&[point(&[])]), &admission),
            vec![
                r#"hosts/plant-a.toml: point "boiler.temp": a 14400 s outage at the declared total of 0.1 obs/s leaves 1440 messages (737280 bytes) in the stream, more than its bound of 1000 messages / 4294967296 bytes; this point is the largest at 0.1 Hz: raise the bound (--stream-max-msgs, --stream-max-bytes) or lower peak rates"#
            ]
        );
    }

    #[test]
    fn refuses_an_event_policy_that_does_not_fit_the_rate_in_one_line() {
        let fast_always = point(&[
            ("event_policy", Some("\"always\"")),
            ("peak_rate_hz", Some("2.0")),
        ]);
        assert_eq!(
            lines(&plant_a(&[fast_always])),
            vec![
                r#"hosts/plant-a.toml: point "boiler.temp": event_policy "always" raises an event per reading, and a declared peak of 2 Hz is more than the 1 Hz subscribers are sized for: pick "on_change" with a deadband, or "never" (record only)"#
            ]
        );
    }

    #[test]
    fn a_report_on_change_point_must_declare_a_heartbeat_inside_its_freshness() {
        let silent = point(&[("reporting", Some("\"on_change\""))]);
        assert_eq!(
            lines(&plant_a(&[silent])),
            vec![
                r#"hosts/plant-a.toml: point "boiler.temp": reporting "on_change" without heartbeat_s: a point that only reports on change cannot be told from a dead one; declare how often it re-sends an unchanged reading"#
            ]
        );
        let slow = point(&[("reporting", Some("\"on_change\"")), ("heartbeat_s", Some("90"))]);
        assert_eq!(
            lines(&plant_a(&[slow])),
            vec![
                r#"hosts/plant-a.toml: point "boiler.temp": heartbeat_s 90 is longer than freshness_s 60: an unchanged point would go stale between heartbeats"#
            ]
        );
        let good = point(&[("reporting", Some("\"on_change\"")), ("heartbeat_s", Some("30"))]);
        assert_eq!(lines(&plant_a(&[good])), Vec::<String>::new());
    }

    #[test]
    fn a_poll_interval_is_refused_unless_it_fits_the_peak_rate_and_the_freshness() {
        let with = |value: &str| lines(&plant_a(&[point(&[("poll_interval_s", Some(value))])]));
        let at = |rest: &str| format!(r#"hosts/plant-a.toml: point "boiler.temp": {rest}"#);
        assert_eq!(
            with("0.0"),
            vec![at(
                "poll_interval_s 0 must be a positive, finite number of seconds"
            )]
        );
        assert_eq!(
            with("-5.0"),
            vec![at(
                "poll_interval_s -5 must be a positive, finite number of seconds"
            )]
        );
        assert_eq!(
            with("nan"),
            vec![at(
                "poll_interval_s NaN must be a positive, finite number of seconds"
            )]
        );
        assert_eq!(
            with("inf"),
            vec![at(
                "poll_interval_s inf must be a positive, finite number of seconds"
            )]
        );
        assert_eq!(
            with("86401.0"),
            vec![at("poll_interval_s 86401 is more than the limit of 86400 s")]
        );
        // The base point declares 0.1 Hz: a poll every 5 s would be 0.2 Hz.
        assert_eq!(
            with("5.0"),
            vec![at(
                "poll_interval_s 5 polls faster than peak_rate_hz 0.1 allows: poll at most every 10 s or raise \
                 the declared peak rate"
            )]
        );
        // ... and freshness_s is 60.
        assert_eq!(
            with("61.0"),
            vec![at(
                "poll_interval_s 61 is longer than freshness_s 60: the point would go stale between polls"
            )]
        );
        // Exactly the peak rate and exactly the freshness both pass.
        assert_eq!(with("10.0"), Vec::<String>::new());
        assert_eq!(with("60"), Vec::<String>::new());
        let own = derived(
            "site.mean",
            r#"{ op = "mean", inputs = ["boiler.temp"], window_s = 60 }"#,
        )
        .replace("[[point]]\n", "[[point]]\npoll_interval_s = 10.0\n");
        assert_eq!(
            lines(&with_core(&[point(&[])], &[own])),
            vec![
                r#"hosts/sentinel.toml: point "site.mean": poll_interval_s on a point of host "sentinel": the core's own points are not polled by a driver"#
            ]
        );
    }

    #[test]
    fn a_driver_instance_carries_at_most_one_assignments_worth_of_points() {
        let many: Vec<String> = (0..=INSTANCE_POINTS_MAX)
            .map(|i| {
                point(&[
                    ("id", Some(&format!("\"p.{i}\""))),
                    ("peak_rate_hz", Some("0.01")),
                    ("freshness_s", Some("600")),
                ])
            })
            .collect();
        let issues = run(&[("hosts/plant-a.toml", host_file("plant-a", &many))]);
        assert_eq!(
            issues.iter().map(ToString::to_string).collect::<Vec<_>>(),
            vec![
                "(registry folder): driver_instance \"modbus-1\" is assigned 4097 points, more than the 4096 one \
                 assignment carries; split them over more instances"
            ]
        );
    }

    #[test]
    fn a_poll_interval_resolves_into_the_manifest_and_is_left_out_of_the_canonical_form_when_unset() {
        let files = |p: String| -> Vec<(String, String)> {
            plant_a(&[p])
                .into_iter()
                .map(|(f, t)| (f.to_owned(), t))
                .chain([
                    ("units.toml".to_owned(), UNITS.to_owned()),
                    ("codebooks.toml".to_owned(), CODEBOOKS.to_owned()),
                ])
                .collect()
        };
        let set = crate::registry::source::load(&files(point(&[("poll_interval_s", Some("30"))]))).unwrap();
        let temp = set.iter().find(|d| d.id == "boiler.temp").unwrap();
        assert_eq!(temp.manifest.poll_interval_s, Some(30.0));
        let json = crate::registry::canonical::canonical_json(temp);
        assert!(json.contains(r#""poll_interval_s":30"#), "{json}");
        let unset = crate::registry::source::load(&files(point(&[]))).unwrap();
        let temp = unset.iter().find(|d| d.id == "boiler.temp").unwrap();
        assert!(!crate::registry::canonical::canonical_json(temp).contains("poll_interval_s"));
    }

    #[test]
    fn refuses_a_manifest_field_it_does_not_understand() {
        let typo = point(&[("heartbeat_secs", Some("30"))]);
        let lines = lines(&plant_a(&[typo]));
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].starts_with(
                r#"hosts/plant-a.toml: point "boiler.temp": unknown field `heartbeat_secs`, expected one of"#
            ),
            "{}",
            lines[0]
        );
        // Inside the derived section too.
        let d = derived(
            "boiler.d",
            r#"{ op = "max", inputs = ["boiler.temp"], window_s = 60, windw = 5 }"#,
        );
        let lines =
            super::super::source::parse(&[("hosts/plant-a.toml".to_owned(), host_file("plant-a", &[d]))]).1;
        assert_eq!(lines.len(), 1, "{lines:#?}");
        assert!(
            lines[0].to_string().starts_with(
                r#"hosts/plant-a.toml: point "boiler.d": unknown field `windw`, expected one of"#
            ),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn a_device_is_a_subject_token_and_never_on_the_cores_own_points() {
        let bad = point(&[("device", Some("\"boiler 1\""))]);
        let issues = run(&[("hosts/plant-a.toml", host_file("plant-a", &[bad]))]);
        assert_eq!(
            issues.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                r#"hosts/plant-a.toml: point "boiler.temp": device "boiler 1" is not a NATS subject token: use only ASCII letters, digits, '_' and '-', at most 64 bytes"#
            ]
        );
        let on_core = point(&[("device", Some("\"boiler1\""))]);
        let issues = run(&[("hosts/sentinel.toml", host_file("sentinel", &[on_core]))]);
        assert_eq!(
            issues.iter().map(ToString::to_string).collect::<Vec<_>>(),
            [
                r#"hosts/sentinel.toml: point "boiler.temp": device "boiler1" on a point of host "sentinel": the core's own points belong to no device"#
            ]
        );
        let good = point(&[("device", Some("\"boiler1\""))]);
        assert!(run(&[("hosts/plant-a.toml", host_file("plant-a", &[good]))]).is_empty());
    }

    #[test]
    fn a_declared_point_may_not_take_a_generated_health_id_and_the_budget_counts_them() {
        let files = |extra: Option<String>, rate: &str| {
            let mut points = vec![point(&[
                ("device", Some("\"boiler1\"")),
                ("peak_rate_hz", Some(rate)),
            ])];
            points.extend(extra);
            vec![
                ("units.toml".to_owned(), UNITS.to_owned()),
                ("codebooks.toml".to_owned(), CODEBOOKS.to_owned()),
                ("hosts/plant-a.toml".to_owned(), host_file("plant-a", &points)),
            ]
        };
        let descriptors = source::load(&files(None, "0.1")).expect("clean");
        assert_eq!(
            descriptors.len(),
            1 + 5 + 2,
            "the point, its host's five, its device's two"
        );
        let taken = point(&[("id", Some("\"sentinel.device.boiler1.non_live_share\""))]);
        let report = source::load(&files(Some(taken), "0.1")).expect_err("an id the core generates");
        assert_eq!(
            report.to_string().lines().next(),
            Some(
                r#"(registry folder): point "sentinel.device.boiler1.non_live_share" is a health point the core generates for a host or device; declare the point under another id"#
            )
        );
        // 1 obs/s declared fits a budget of 1.2 alone, not with the seven generated points' 0.7.
        let admission = Admission {
            ingest_budget_obs_s: 1.2,
            ..Admission::default()
        };
        let report = source::load_with(&files(None, "1.0"), &admission).expect_err("over budget");
        assert!(
            report
                .to_string()
                .contains("declared peak rates total 1.7 obs/s with the 7 health points the core generates (0.7 obs/s), above the ingest budget of 1.2 obs/s"),
            "{report}"
        );
    }

    #[test]
    fn load_refuses_a_folder_with_issues_and_resolves_a_clean_one() {
        let mut files = vec![
            ("units.toml".to_owned(), UNITS.to_owned()),
            ("codebooks.toml".to_owned(), CODEBOOKS.to_owned()),
            (
                "hosts/plant-a.toml".to_owned(),
                host_file("plant-a", &[point(&[])]),
            ),
        ];
        let descriptors = source::load(&files).expect("clean fixture");
        let ids: Vec<&str> = descriptors.iter().map(|d| d.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "boiler.temp",
                "sentinel.host.plant-a.connected_instances",
                "sentinel.host.plant-a.disk_queue_depth",
                "sentinel.host.plant-a.disk_queue_drops",
                "sentinel.host.plant-a.last_hello_age",
                "sentinel.host.plant-a.publish_failures",
            ],
            "the declared point and its host's generated health points"
        );
        let d = &descriptors[0];
        assert_eq!(d.unit_native.as_deref(), Some("degF"));
        assert!((d.conversion.apply(71.6) - 22.0).abs() < 1e-9);
        files.push((
            "hosts/bad.toml".to_owned(),
            host_file("bad", &[point(&[("id", Some("\"x\""))])]),
        ));
        let report = source::load(&files).expect_err("instance reused across hosts");
        assert_eq!(report.issues.len(), 1);
    }

    /// Every writable point gets its generated convergence self-point (issue 21 item 5); one
    /// whose id is too long for it is refused with the exact message.
    #[test]
    fn a_writable_point_gets_a_convergence_point_unless_its_id_is_too_long_for_one() {
        let writable = ("writable", Some("{ verify_s = 30, tolerance = 0.5 }"));
        let files = |id: &str| {
            vec![
                ("units.toml".to_owned(), UNITS.to_owned()),
                ("codebooks.toml".to_owned(), CODEBOOKS.to_owned()),
                (
                    "hosts/plant-a.toml".to_owned(),
                    host_file("plant-a", &[point(&[("id", Some(&format!("{id:?}"))), writable])]),
                ),
            ]
        };
        let loaded = source::load(&files("boiler.temp")).expect("loads");
        let convergence = loaded
            .iter()
            .find(|d| d.id == "sentinel.point.boiler.temp.convergence")
            .expect("generated");
        assert_eq!(
            (
                convergence.assignment.host.as_str(),
                convergence.retention,
                convergence.range.map(|r| (r.min, r.max)),
                convergence.unit.as_deref(),
            ),
            (
                "sentinel",
                crate::RetentionClass::Diagnostic,
                Some((-1.0, 1.0)),
                None
            )
        );
        assert!(super::super::health::is_generated(convergence));

        let long = format!("b.{}", "x".repeat(POINT_ID_BYTES_MAX - 2));
        assert_eq!(long.len(), POINT_ID_BYTES_MAX, "a valid point id at the bound");
        let report = source::load(&files(&long)).expect_err("refused");
        let messages: Vec<&str> = report.issues.iter().map(|i| i.message.as_str()).collect();
        assert_eq!(
            messages,
            [format!(
                "writable point {long:?}: its convergence point \"sentinel.point.{long}.convergence\" \
                 would be 155 bytes, over the 128-byte point id bound; shorten the point's id"
            )]
        );
    }

    /// Each refusal of a `writable` section, with its exact message, on the number base point
    /// (range 0 to 120 degC) or the kind the override makes it.
    #[test]
    fn writable_sections_are_admitted_only_when_they_can_be_met() {
        let enum_point: &[(&str, Option<&str>)] = &[
            ("kind", Some("\"enum\"")),
            ("codebook", Some("\"pump_state\"")),
            ("unit", None),
            ("unit_native", None),
            ("range", None),
            ("deadband", None),
            ("agg_safe", Some("false")),
        ];
        let bool_point: &[(&str, Option<&str>)] = &[
            ("kind", Some("\"bool\"")),
            ("unit", None),
            ("unit_native", None),
            ("range", None),
            ("deadband", None),
            ("agg_safe", Some("false")),
        ];
        type Overrides<'a> = Vec<(&'a str, Option<&'a str>)>;
        let cases: Vec<(Overrides<'_>, &str)> = vec![
            (
                vec![("writable", Some("{ tolerance = 0.5 }"))],
                "writable without verify_s: say how long the device has to follow a command",
            ),
            (
                vec![("writable", Some("{ verify_s = 0, tolerance = 0.5 }"))],
                "writable verify_s is 0; a device needs at least 1 s to follow a command",
            ),
            (
                vec![("writable", Some("{ verify_s = 86401, tolerance = 0.5 }"))],
                "writable verify_s 86401 is more than the limit of 86400",
            ),
            (
                vec![("writable", Some("{ verify_s = 60 }"))],
                "writable number point without tolerance: say how close its observations must come to a command",
            ),
            (
                vec![("writable", Some("{ verify_s = 60, tolerance = -1.0 }"))],
                "writable tolerance -1 must be finite and not negative",
            ),
            (
                vec![(
                    "writable",
                    Some("{ verify_s = 60, tolerance = 0.5, relinquish_default = 130.0 }"),
                )],
                "writable relinquish_default: the value 130 degC is outside the point's range 0 to 120 degC",
            ),
            (
                vec![(
                    "writable",
                    Some("{ verify_s = 60, tolerance = 0.5, relinquish_default = true }"),
                )],
                "writable relinquish_default: the value is not a number",
            ),
            (
                vec![(
                    "writable",
                    Some("{ verify_s = 60, tolerance = 0.5, min_on_s = 60 }"),
                )],
                "writable min_on_s on a number point; minimum on/off times are for bool points",
            ),
            (
                [
                    enum_point,
                    &[(
                        "writable",
                        Some("{ verify_s = 60, relinquish_default = \"purple\" }"),
                    )],
                ]
                .concat(),
                "writable relinquish_default: \"purple\" is not a member of the point's codebook (fault, off, on)",
            ),
            (
                [
                    enum_point,
                    &[("writable", Some("{ verify_s = 60, tolerance = 1.0 }"))],
                ]
                .concat(),
                "writable tolerance on a enum point; bools and enums are verified by equality",
            ),
            (
                [
                    bool_point,
                    &[("writable", Some("{ verify_s = 60, min_off_s = 0 }"))],
                ]
                .concat(),
                "writable min_off_s 0 must be between 1 and 86400",
            ),
            (
                vec![
                    ("kind", Some("\"text\"")),
                    ("unit", None),
                    ("unit_native", None),
                    ("range", None),
                    ("deadband", None),
                    ("agg_safe", Some("false")),
                    ("writable", Some("{ verify_s = 60 }")),
                ],
                "writable on a text point; only number, bool and enum points take commands",
            ),
        ];
        for (overrides, message) in cases {
            let issues = one_point(&overrides);
            assert_eq!(issues.len(), 1, "{overrides:?}: {issues:#?}");
            assert_eq!(issues[0].message, message, "{overrides:?}");
        }

        // On the core's own host (self-points and derived points), never.
        let issues = run(&[(
            "hosts/sentinel.toml",
            host_file(
                "sentinel",
                &[point(&[("writable", Some("{ verify_s = 60, tolerance = 0.5 }"))])],
            ),
        )]);
        assert_eq!(
            issues.iter().map(|i| i.message.as_str()).collect::<Vec<_>>(),
            [
                "writable on a point the core computes or publishes itself; only a device's points take commands"
            ]
        );

        // A clean one resolves, its numbers normalised for the canonical form's round trip.
        let files = vec![
            ("units.toml".to_owned(), UNITS.to_owned()),
            ("codebooks.toml".to_owned(), CODEBOOKS.to_owned()),
            (
                "hosts/plant-a.toml".to_owned(),
                host_file(
                    "plant-a",
                    &[point(&[(
                        "writable",
                        Some("{ verify_s = 60, tolerance = 0.5, relinquish_default = 70 }"),
                    )])],
                ),
            ),
        ];
        let descriptors = source::load(&files).expect("a clean writable point");
        let writable = descriptors[0].writable.as_ref().expect("writable");
        assert_eq!(
            writable.relinquish_default,
            Some(crate::registry::CommandValue::Number(70.0))
        );
        let json = crate::registry::canonical::canonical_json(&descriptors[0]);
        let back = crate::registry::canonical::parse_stored(&json).expect("reads back");
        assert_eq!(back, descriptors[0], "the stored blob compares equal");
    }
}
