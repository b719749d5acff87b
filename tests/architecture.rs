//! Architecture invariants checked by reading the source tree (ARCHITECTURE.md, "Architecture
//! invariants"; DESIGN.md §9: "written down and checked by code where possible").
//!
//! Owns: the invariants a text scan can decide — what the core may depend on and call, which
//! files may name NATS, SQL and the observation tables, where the consumer is bound, where the
//! core's `ingested_at` values come from, and what log records above DEBUG may carry. The
//! behavioural invariants (ack after commit, RETURNING-only projection, fencing, …) are checked
//! by the core, conformance and end-to-end tests instead; ARCHITECTURE.md says which.
//!
//! Deliberately simple, so a failure is easy to read and the scan easy to trust:
//! - no `cargo metadata`: Cargo.toml files are parsed as text, line by line;
//! - source is scanned as text, after dropping full-line `//` comments (docs may name what the
//!   code must not use) and, where a rule is about production code, top-level `#[cfg(test)]`
//!   items. Those are found by rustfmt's layout: the attribute at column 0, the item's closing
//!   `}` alone at column 0. A file laid out otherwise makes the scan fail loudly, not pass.
//!
//! Paths are relative to the workspace root (`CARGO_MANIFEST_DIR/..`).

#[path = "architecture/imports.rs"]
mod imports;

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// One source line that survived filtering, with its 1-based number in the file.
struct Line {
    no: usize,
    text: String,
}

/// A Rust file under the workspace, as the lines the rules look at.
struct Source {
    /// Workspace-relative, `/`-separated.
    path: String,
    lines: Vec<Line>,
}

impl Source {
    fn at(&self, line: &Line) -> String {
        format!("{}:{}: {}", self.path, line.no, line.text.trim())
    }

    /// The kept lines joined with `\n`, and the line number at each joined line's start offset.
    fn joined(&self) -> (String, Vec<(usize, usize)>) {
        let mut text = String::new();
        let mut starts = Vec::with_capacity(self.lines.len());
        for line in &self.lines {
            starts.push((text.len(), line.no));
            text.push_str(&line.text);
            text.push('\n');
        }
        (text, starts)
    }
}

fn line_at(starts: &[(usize, usize)], offset: usize) -> usize {
    let i = starts.partition_point(|&(start, _)| start <= offset);
    starts[i.saturating_sub(1)].1
}

#[derive(Copy, Clone, PartialEq)]
enum Scope {
    /// Every line but full-line comments.
    AllCode,
    /// As `AllCode`, without top-level `#[cfg(test)]` items.
    ProductionCode,
}

/// Every `*.rs` file under `dir` (workspace-relative), sorted by path.
fn sources(dir: &str, scope: Scope) -> Vec<Source> {
    let root = workspace_root();
    let mut files = Vec::new();
    collect_rs(&root.join(dir), &mut files);
    files.sort();
    assert!(
        !files.is_empty(),
        "no Rust files under {dir}: is the workspace layout unchanged?"
    );
    files
        .into_iter()
        .map(|file| {
            let raw = fs::read_to_string(&file).unwrap_or_else(|e| panic!("reading {}: {e}", file.display()));
            let path = file
                .strip_prefix(&root)
                .expect("collected under the root")
                .to_string_lossy()
                .replace('\\', "/");
            let lines = filter_lines(&path, &raw, scope);
            Source { path, lines }
        })
        .collect()
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn filter_lines(path: &str, raw: &str, scope: Scope) -> Vec<Line> {
    let all: Vec<&str> = raw.lines().collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while i < all.len() {
        let line = all[i];
        if scope == Scope::ProductionCode && line.trim_end() == "#[cfg(test)]" {
            i = skip_item(path, &all, i);
            continue;
        }
        if !line.trim_start().starts_with("//") {
            kept.push(Line {
                no: i + 1,
                text: line.to_owned(),
            });
        }
        i += 1;
    }
    kept
}

/// Given the index of a column-0 `#[cfg(test)]`, returns the index just past the item it
/// applies to: further attributes, then a one-line item ending in `;` or a block item ending
/// at the first later line that is exactly `}`.
fn skip_item(path: &str, all: &[&str], attribute: usize) -> usize {
    let mut i = attribute + 1;
    while i < all.len() && (all[i].starts_with("#[") || all[i].trim_start().starts_with("//")) {
        i += 1;
    }
    let Some(head) = all.get(i) else {
        panic!("{path}:{}: #[cfg(test)] at the end of the file", attribute + 1);
    };
    if head.trim_end().ends_with(';') {
        return i + 1;
    }
    match all[i..].iter().position(|l| l.trim_end() == "}") {
        Some(end) => i + end + 1,
        None => panic!(
            "{path}:{}: cannot find the end of this #[cfg(test)] item (a `}}` alone at column 0); \
             is the file rustfmt-formatted?",
            attribute + 1
        ),
    }
}

/// Dependency names in a Cargo.toml's `[dependencies]`, `[build-dependencies]` and
/// `[target.'…'.dependencies]` sections, including `package = "…"` renames. Dev-dependencies
/// are not linked into the library and are left out.
fn linked_dependencies(manifest: &str) -> Vec<(usize, String)> {
    let text =
        fs::read_to_string(workspace_root().join(manifest)).unwrap_or_else(|e| panic!("{manifest}: {e}"));
    let is_dep_section = |name: &str| {
        // `target.'cfg(…)'.dependencies` counts as `dependencies`.
        let last = name.rsplit('.').next().unwrap_or(name);
        last == "dependencies" || last == "build-dependencies"
    };
    let mut deps = Vec::new();
    let mut in_deps = false;
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let header = header.trim_matches(['[', ']']).trim();
            // `[dependencies.tokio]` names a dependency in its header.
            if let Some((section, dep)) = header.split_once("dependencies.") {
                let section = format!("{section}dependencies");
                in_deps = false;
                if is_dep_section(&section) {
                    deps.push((i + 1, dep.trim_matches('"').to_owned()));
                }
            } else {
                in_deps = is_dep_section(header);
            }
            continue;
        }
        if !in_deps || line.is_empty() {
            continue;
        }
        if let Some((key, value)) = line.split_once('=') {
            let name = key
                .trim()
                .split('.')
                .next()
                .unwrap_or("")
                .trim_matches('"')
                .trim();
            if !name.is_empty() {
                deps.push((i + 1, name.to_owned()));
            }
            if let Some(renamed) = value.split("package").nth(1) {
                let renamed = renamed
                    .trim_start_matches([' ', '='])
                    .split('"')
                    .nth(1)
                    .unwrap_or("");
                if !renamed.is_empty() {
                    deps.push((i + 1, renamed.to_owned()));
                }
            }
        }
    }
    deps
}

/// The source folders of the crates that must not name a database client or the bus client
/// themselves (the adapters each add their own folder where the rule allows them).
const LIBRARY_SOURCES: [&str; 6] = [
    "core/src",
    "ports/src",
    "runtime/src",
    "models/src",
    "cli/src",
    "sim/src",
];

fn fail_if_any(violations: Vec<String>, rule: &str) {
    assert!(
        violations.is_empty(),
        "architecture invariant broken: {rule}\n  {}\n(see ARCHITECTURE.md, \"Architecture invariants\")",
        violations.join("\n  ")
    );
}

/// Sentinel's crates: (package, folder). The order is the dependency order, lowest first.
const CRATES: [(&str, &str); 10] = [
    ("sentinel-core", "core"),
    ("sentinel-ports", "ports"),
    ("sentinel-driver", "driver"),
    ("sentinel-runtime", "runtime"),
    ("sentinel-models", "models"),
    ("sentinel-store-pg", "store-pg"),
    ("sentinel-bus-nats", "bus-nats"),
    ("sentinel-cli", "cli"),
    ("sentinel-sim", "sim"),
    ("sentinel-tests", "tests"),
];

/// Everything `package` links, through the workspace's own crates (their manifests' linked
/// dependencies, transitively), with the chain that brings each one in. External crates'
/// own dependencies are not followed here; `cargo tree` shows those (ARCHITECTURE.md gives the
/// commands), and the crates this rule names (sqlx, async-nats) are only ever direct.
fn links(package: &str) -> BTreeMap<String, String> {
    let folder = |name: &str| CRATES.iter().find(|(p, _)| *p == name).map(|(_, f)| *f);
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut todo = vec![(package.to_owned(), package.to_owned())];
    while let Some((name, chain)) = todo.pop() {
        let Some(dir) = folder(&name) else { continue };
        for (_, dep) in linked_dependencies(&format!("{dir}/Cargo.toml")) {
            let dep = dep.replace('_', "-");
            if seen.contains_key(&dep) {
                continue;
            }
            let via = format!("{chain} -> {dep}");
            seen.insert(dep.clone(), via.clone());
            todo.push((dep, via));
        }
    }
    seen
}

/// What each crate must never link, anywhere in its graph (ARCHITECTURE.md, one Architecture
/// Invariant line per row).
const NEVER_LINKS: [(&str, &[&str]); 9] = [
    (
        "sentinel-core",
        &[
            "tokio",
            "sqlx",
            "async-nats",
            "rand",
            "rand-chacha",
            "sentinel-ports",
        ],
    ),
    (
        "sentinel-ports",
        &["sqlx", "async-nats", "sentinel-driver", "sentinel-runtime"],
    ),
    (
        "sentinel-driver",
        &[
            "sqlx",
            "sentinel-runtime",
            "sentinel-models",
            "sentinel-store-pg",
            "sentinel-sim",
        ],
    ),
    (
        "sentinel-runtime",
        &[
            "sqlx",
            "async-nats",
            "sentinel-driver",
            "sentinel-models",
            "sentinel-store-pg",
            "sentinel-bus-nats",
        ],
    ),
    (
        "sentinel-models",
        &[
            "sqlx",
            "async-nats",
            "sentinel-driver",
            "sentinel-runtime",
            "sentinel-store-pg",
            "sentinel-bus-nats",
        ],
    ),
    (
        "sentinel-store-pg",
        &[
            "async-nats",
            "sentinel-driver",
            "sentinel-runtime",
            "sentinel-models",
            "sentinel-bus-nats",
        ],
    ),
    (
        "sentinel-bus-nats",
        &["sqlx", "sentinel-runtime", "sentinel-models", "sentinel-store-pg"],
    ),
    (
        "sentinel-sim",
        &["sqlx", "sentinel-store-pg", "sentinel-bus-nats", "sentinel-cli"],
    ),
    ("sentinel-cli", &["rand", "rand-chacha", "turmoil"]),
];

#[test]
fn each_crate_links_only_what_its_job_needs() {
    let mut violations = Vec::new();
    for (package, never) in NEVER_LINKS {
        for (dep, chain) in links(package) {
            if never.contains(&dep.as_str()) {
                violations.push(format!("{package} links `{dep}`: {chain}"));
            }
        }
    }
    fail_if_any(
        violations,
        "crates split by what a user links: the pure core links no runtime, I/O library or RNG; \
         the ports, the runtime and the models link neither sqlx nor async-nats; only the store \
         adapter links sqlx and only the bus adapter and the driver library link async-nats \
         (the binary and the cross-crate tests link them through those); the simulator never \
         links sqlx",
    );
}

#[test]
fn only_the_store_adapter_links_sqlx_and_only_the_bus_adapter_and_driver_link_async_nats() {
    let mut violations = Vec::new();
    for (package, dir) in CRATES {
        for (no, dep) in linked_dependencies(&format!("{dir}/Cargo.toml")) {
            let dep = dep.replace('_', "-");
            let allowed = match dep.as_str() {
                "sqlx" => ["sentinel-store-pg", "sentinel-tests"].contains(&package),
                "async-nats" => ["sentinel-bus-nats", "sentinel-driver", "sentinel-tests"].contains(&package),
                _ => true,
            };
            if !allowed {
                violations.push(format!(
                    "{dir}/Cargo.toml:{no}: {package} depends on `{dep}` itself"
                ));
            }
        }
    }
    fail_if_any(
        violations,
        "only sentinel-store-pg (and the cross-crate tests) depend on sqlx directly; only \
         sentinel-bus-nats, sentinel-driver (and the cross-crate tests) on async-nats",
    );
}

#[test]
fn the_driver_library_names_no_database_client_and_nothing_of_the_core_runtime() {
    let linked = linked_dependencies("driver/Cargo.toml");
    assert!(
        linked.iter().any(|(_, n)| n == "sentinel-core") && linked.iter().any(|(_, n)| n == "async-nats"),
        "the scanner must see the driver crate's real dependencies"
    );
    confined(
        &["driver/src"],
        &[
            "sqlx",
            "postgres",
            "sentinel_runtime",
            "sentinel_models",
            "sentinel_store_pg",
        ],
        &[],
        "driver/src names no database client and nothing of the core's runtime or models",
    );
}

#[test]
fn the_core_reads_no_clock_socket_file_or_rng() {
    const FORBIDDEN: [&str; 11] = [
        "SystemTime",
        "Instant::now",
        "now_utc",
        "now_local",
        "thread_rng",
        "OsRng",
        "getrandom",
        "std::net",
        "std::fs",
        "std::env",
        "std::process",
    ];
    let mut violations = Vec::new();
    for source in sources("core/src", Scope::ProductionCode) {
        for line in &source.lines {
            for word in FORBIDDEN.iter().filter(|w| line.text.contains(**w)) {
                violations.push(format!("{} (names `{word}`)", source.at(line)));
            }
        }
    }
    fail_if_any(
        violations,
        "core/src (outside #[cfg(test)]) never reads a clock, socket, file, environment or RNG; \
         time comes in as `now`, bytes come in as `Delivery`",
    );
}

/// Fails for every line under `dirs` that contains one of `needles`, outside `allowed` files.
fn confined(dirs: &[&str], needles: &[&str], allowed: &[&str], rule: &str) {
    let mut violations = Vec::new();
    for dir in dirs {
        for source in sources(dir, Scope::AllCode) {
            if allowed.contains(&source.path.as_str()) {
                continue;
            }
            for line in &source.lines {
                if let Some(needle) = needles.iter().find(|n| line.text.contains(**n)) {
                    violations.push(format!("{} (names `{needle}`)", source.at(line)));
                }
            }
        }
    }
    fail_if_any(violations, rule);
}

#[test]
fn only_the_postgres_adapter_names_the_observation_tables() {
    let dirs: Vec<&str> = LIBRARY_SOURCES
        .iter()
        .chain(&["bus-nats/src", "driver/src"])
        .copied()
        .collect();
    confined(
        &dirs,
        &[
            "observation_measurement",
            "observation_state",
            "observation_diagnostic",
        ],
        &[],
        "only store-pg/src (and migrations/) name the per-class observation tables",
    );
}

/// The SQL functions that write fenced (their bodies take `sentinel_rollup_fence`).
const FENCED_SQL_FUNCTIONS: [&str; 8] = [
    "sentinel_rollup_refresh_range",
    "sentinel_rollup_claim",
    "sentinel_rollup_apply",
    "sentinel_retention_drop",
    "sentinel_move_point_class",
    "sentinel_reprocess_apply",
    "sentinel_compact_day",
    "sentinel_compact_rollup_day",
];

/// Issue 25 item 3 (migration 0013): the store fences every write on (epoch, start identity).
/// In store-pg, every statement that locks the epoch row for a fence (`FOR SHARE`) or updates
/// it names `core_start`; in the migrations, every fenced SQL function (and the fence itself)
/// has exactly one live definition — each `CREATE FUNCTION` of it but the newest dropped by a
/// `DROP FUNCTION` — and that newest definition takes `p_core_start` and passes it to
/// `sentinel_rollup_fence`.
#[test]
fn every_fenced_statement_names_the_start_identity() {
    let mut violations = Vec::new();
    for source in sources("store-pg/src", Scope::ProductionCode) {
        let (text, starts) = source.joined();
        for (at, _) in text.match_indices("core_epoch") {
            // The statement: from the string literal's start to its end (`";` or `")`).
            let begin = text[..at]
                .rfind("const ")
                .max(text[..at].rfind("query"))
                .unwrap_or(0);
            let end = text[at..]
                .find("\";")
                .into_iter()
                .chain(text[at..].find("\")"))
                .min()
                .map_or(text.len(), |e| at + e);
            let statement = &text[begin..end];
            let fences = statement.contains("FOR SHARE") || statement.contains("UPDATE core_epoch");
            if fences && !statement.contains("core_start") {
                violations.push(format!(
                    "{}:{}: a statement fencing on core_epoch does not name core_start",
                    source.path,
                    line_at(&starts, at)
                ));
            }
        }
    }
    let root = workspace_root().join("migrations");
    let mut files: Vec<PathBuf> = fs::read_dir(&root)
        .expect("migrations/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "sql"))
        .collect();
    files.sort();
    let all: String = files
        .iter()
        .map(|f| fs::read_to_string(f).expect("a migration"))
        .collect::<Vec<_>>()
        .join("\n");
    for function in FENCED_SQL_FUNCTIONS.iter().chain(&["sentinel_rollup_fence"]) {
        let created = all.matches(&format!("CREATE FUNCTION {function}(")).count();
        let dropped = all.matches(&format!("DROP FUNCTION {function}(")).count();
        if created != dropped + 1 {
            violations.push(format!(
                "migrations/: {function} is created {created} times and dropped {dropped}: \
                 every definition but the newest must be dropped"
            ));
            continue;
        }
        let newest = all
            .rfind(&format!("CREATE FUNCTION {function}("))
            .expect("created");
        let body_end = all[newest..].find("$$;").map_or(all.len(), |e| newest + e);
        let definition = &all[newest..body_end];
        let signature = definition.split(')').next().unwrap_or_default();
        let passes = *function == "sentinel_rollup_fence"
            || definition.contains("PERFORM sentinel_rollup_fence(epoch, p_core_start);")
            || definition.contains("PERFORM sentinel_rollup_fence(p_epoch, p_core_start);");
        if !signature.contains("p_core_start bigint") || !passes {
            violations.push(format!(
                "migrations/: the newest {function} does not take the start identity and fence on it"
            ));
        }
    }
    fail_if_any(
        violations,
        "every store write is fenced on (epoch, start identity), not the epoch alone",
    );
}

#[test]
fn only_the_nats_adapter_and_the_driver_library_name_async_nats() {
    let dirs: Vec<&str> = LIBRARY_SOURCES
        .iter()
        .chain(&["store-pg/src", "driver/src"])
        .copied()
        .collect();
    confined(
        &dirs,
        &["async_nats"],
        &[
            "driver/src/lib.rs",
            "driver/src/commands.rs",
            "driver/src/connect.rs",
        ],
        "only bus-nats/src (the Bus adapter) and the driver crate's publisher, command intake and \
         connection (credentials, refusals) use async_nats",
    );
}

#[test]
fn only_the_postgres_adapter_names_sqlx() {
    let dirs: Vec<&str> = LIBRARY_SOURCES
        .iter()
        .chain(&["bus-nats/src", "driver/src"])
        .copied()
        .collect();
    confined(&dirs, &["sqlx"], &[], "only store-pg/src uses sqlx");
}

#[test]
fn the_consumer_is_bound_only_by_startup_after_the_lock() {
    let mut violations = Vec::new();
    let mut startup_checked = false;
    for dir in ["runtime/src", "models/src", "bus-nats/src", "cli/src", "sim/src"] {
        for source in sources(dir, Scope::ProductionCode) {
            // `Bus::bind` takes no arguments; sqlx's `.bind(value)` always has one.
            let (text, starts) = source.joined();
            let binds: Vec<usize> = text.match_indices(".bind()").map(|(at, _)| at).collect();
            if source.path == "runtime/src/startup.rs" {
                startup_checked = true;
                let acquire = text.find(".acquire()");
                for &at in &binds {
                    if acquire.is_none_or(|acquire| acquire > at) {
                        violations.push(format!(
                            "{}:{}: binds the consumer before `.acquire()` takes the lock",
                            source.path,
                            line_at(&starts, at)
                        ));
                    }
                }
            } else {
                for &at in &binds {
                    // A port implementation delegating its own `bind` to a model (the
                    // simulator's adapters) is not a caller binding the consumer.
                    let enclosing = text[..at].rfind("fn ").map(|f| &text[f..at]);
                    if enclosing.is_some_and(|f| f.starts_with("fn bind(")) {
                        continue;
                    }
                    violations.push(format!(
                        "{}:{}: binds the consumer outside runtime/src/startup.rs",
                        source.path,
                        line_at(&starts, at)
                    ));
                }
            }
        }
    }
    assert!(
        startup_checked,
        "runtime/src/startup.rs not found: update this test with the startup sequence"
    );
    fail_if_any(
        violations,
        "the consumer is bound only by runtime/src/startup.rs, after the single-writer lock is taken",
    );
}

#[test]
fn the_core_copies_ingested_at_and_never_makes_one_up() {
    // Every `ingested_at: <expr>` / `ingested_at = <expr>` in core/src must copy another
    // `ingested_at` (ultimately `Delivery::ingested_at`, which the bus adapter sets from the
    // message timestamp) or be `None`. A right-hand side that looks like a type (`Micros`,
    // `Option<Micros>`) is a declaration and passes; one that computes a value does not.
    let mut violations = Vec::new();
    for source in sources("core/src", Scope::ProductionCode) {
        let mut previous = "";
        for line in &source.lines {
            // The one exception: the planted bug that exists to break this rule, compiled only
            // for the simulator's planted-bug test (feature `planted-bugs`).
            let planted = previous.contains("PlantedBug::IngestedAtFromCoreClock");
            previous = &line.text;
            if planted {
                continue;
            }
            for (at, _) in line.text.match_indices("ingested_at") {
                let rest = line.text[at + "ingested_at".len()..].trim_start();
                let rhs = if let Some(rhs) = rest.strip_prefix(':').filter(|r| !r.starts_with(':')) {
                    rhs
                } else if let Some(rhs) = rest.strip_prefix('=').filter(|r| !r.starts_with('=')) {
                    rhs
                } else {
                    continue;
                };
                let rhs = rhs.trim().trim_end_matches([',', ';']).trim();
                let copies = rhs.contains("ingested_at") || rhs == "None";
                let is_type = rhs.starts_with(|c: char| c.is_ascii_uppercase()) && !rhs.contains(['(', '.']);
                if !copies && !is_type && !rhs.is_empty() {
                    violations.push(source.at(line));
                }
            }
        }
    }
    fail_if_any(
        violations,
        "ingested_at comes only from the bus: the core copies it from the delivery and never computes it",
    );
}

/// Names a log field or format argument must not have above DEBUG: they would carry a point
/// value, a payload or descriptor contents (DESIGN.md §9).
fn leaks_content(ident: &str) -> bool {
    let ident = ident.to_ascii_lowercase();
    ["value", "payload", "native", "descriptor", "envelope"]
        .iter()
        .any(|word| ident.contains(word))
}

/// Records that hold values, payloads or descriptors; Debug/Display-formatting one (`?row`,
/// `%delivery`) leaks its contents whatever its fields are called.
const CONTENT_RECORDS: [&str; 12] = [
    "row",
    "rows",
    "state",
    "states",
    "delivery",
    "deliveries",
    "entry",
    "batch",
    "env",
    "message",
    "msg",
    "point",
];

/// The identifiers a macro's argument text mentions: identifiers outside string literals, and
/// inline `{name}` captures inside them. Each comes with whether a `?` or `%` sigil precedes it.
fn mentioned_identifiers(args: &str) -> Vec<(String, bool)> {
    let chars: Vec<char> = args.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            // A string literal: only `{name…}` captures matter.
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 2;
                    continue;
                }
                if chars[i] == '{' && chars.get(i + 1) == Some(&'{') {
                    i += 2;
                    continue;
                }
                if chars[i] == '{' {
                    let start = i + 1;
                    let mut end = start;
                    while end < chars.len() && (chars[end].is_alphanumeric() || chars[end] == '_') {
                        end += 1;
                    }
                    if end > start && !chars[start].is_ascii_digit() {
                        out.push((chars[start..end].iter().collect(), false));
                    }
                    i = end;
                    continue;
                }
                i += 1;
            }
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let sigil = start > 0 && matches!(chars[start - 1], '?' | '%');
            out.push((chars[start..i].iter().collect(), sigil));
        } else {
            i += 1;
        }
    }
    out
}

/// The argument text of a macro call whose `(` is at `open`, up to its matching `)`.
fn macro_args(text: &str, open: usize) -> &str {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = open;
    let mut in_string = false;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'(' | b'[' | b'{' if !in_string => depth += 1,
            b')' | b']' | b'}' if !in_string => {
                depth -= 1;
                if depth == 0 {
                    return &text[open + 1..i];
                }
            }
            _ => {}
        }
        i += 1;
    }
    &text[open + 1..]
}

#[test]
fn log_records_above_debug_carry_no_values_payloads_or_descriptors() {
    const MACROS: [&str; 6] = [
        "info!(",
        "warn!(",
        "error!(",
        "info_span!(",
        "warn_span!(",
        "error_span!(",
    ];
    let mut violations = Vec::new();
    for dir in [
        "core/src",
        "ports/src",
        "runtime/src",
        "models/src",
        "store-pg/src",
        "bus-nats/src",
        "cli/src",
        "driver/src",
    ] {
        for source in sources(dir, Scope::ProductionCode) {
            let (text, starts) = source.joined();
            let mut calls: Vec<(usize, &str)> = MACROS
                .iter()
                .flat_map(|m| text.match_indices(m))
                .filter(|(at, _)| {
                    let before = text[..*at].chars().next_back();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                })
                .collect();
            // `event!(Level::INFO, …)` and friends.
            calls.extend(text.match_indices("event!(").filter(|(at, _)| {
                let args = macro_args(&text, at + "event!".len());
                ["Level::INFO", "Level::WARN", "Level::ERROR"]
                    .iter()
                    .any(|l| args.contains(l))
            }));
            for (at, name) in calls {
                let open = at + name.len() - 1;
                for (ident, sigil) in mentioned_identifiers(macro_args(&text, open)) {
                    if leaks_content(&ident) || (sigil && CONTENT_RECORDS.contains(&ident.as_str())) {
                        violations.push(format!(
                            "{}:{}: `{name}…)` mentions `{}{ident}`",
                            source.path,
                            line_at(&starts, at),
                            if sigil { "?/%" } else { "" }
                        ));
                    }
                }
            }
            // `#[instrument]` records every argument at INFO unless told otherwise.
            for (at, _) in text.match_indices("instrument") {
                let line_start = text[..at].rfind('\n').map_or(0, |n| n + 1);
                let attribute = text[line_start..].lines().next().unwrap_or("").trim();
                if attribute.starts_with("#[instrument") || attribute.starts_with("#[tracing::instrument") {
                    let quiet = attribute.contains("skip_all")
                        || attribute.contains("level = \"debug\"")
                        || attribute.contains("level = \"trace\"");
                    if !quiet {
                        violations.push(format!(
                            "{}:{}: `{attribute}` records arguments above DEBUG; add `skip_all` or a debug level",
                            source.path,
                            line_at(&starts, at)
                        ));
                    }
                }
            }
        }
    }
    fail_if_any(
        violations,
        "log records above DEBUG carry coordinates and counts, never point values, payloads or \
         descriptor contents (a name heuristic: fields and format arguments named like \
         value/payload/native/descriptor/envelope, or `?`/`%` of a whole record)",
    );
}

#[test]
fn the_scanners_see_what_they_should() {
    // Guards against a scanner that silently matches nothing.
    let args = r#"point = %id, value = ?v, "read {native_text} and {{escaped}} at {0}", x.payload.len()"#;
    let idents: Vec<String> = mentioned_identifiers(args).into_iter().map(|(i, _)| i).collect();
    assert_eq!(
        idents,
        ["point", "id", "value", "v", "native_text", "x", "payload", "len"]
    );
    assert!(mentioned_identifiers("?row").contains(&("row".to_owned(), true)));
    assert_eq!(
        macro_args(r#"info!(a = f(1), "x)y"); z"#, 5),
        r#"a = f(1), "x)y""#
    );

    let filtered = filter_lines(
        "x.rs",
        "use a;\n// c\n#[cfg(test)]\nmod tests {\n    std::fs\n}\nfn b() {}\n",
        Scope::ProductionCode,
    );
    let kept: Vec<usize> = filtered.iter().map(|l| l.no).collect();
    assert_eq!(kept, [1, 7]);

    let core = linked_dependencies("core/Cargo.toml");
    assert!(
        core.iter().any(|(_, n)| n == "serde"),
        "core/Cargo.toml parsed: {core:?}"
    );
    assert!(
        !core.iter().any(|(_, n)| n == "proptest"),
        "dev-dependencies are not linked"
    );
    let pg = linked_dependencies("store-pg/Cargo.toml");
    assert!(pg.iter().any(|(_, n)| n == "sqlx"));
    let sim = links("sentinel-sim");
    assert!(
        sim.contains_key("sentinel-runtime")
            && sim.contains_key("sentinel-core")
            && sim.contains_key("tokio"),
        "the crate graph follows workspace crates: {sim:?}"
    );
}

/// Every Sentinel crate's source folder.
const CRATE_SOURCES: [&str; 9] = [
    "core/src",
    "ports/src",
    "driver/src",
    "runtime/src",
    "models/src",
    "store-pg/src",
    "bus-nats/src",
    "cli/src",
    "sim/src",
];

#[test]
fn no_crate_has_an_import_circle() {
    let mut violations = Vec::new();
    for dir in CRATE_SOURCES {
        let graph = imports::import_graph(dir);
        if let Some(circle) = imports::find_circle(&graph) {
            violations.push(format!("{dir}: {}", imports::describe(&circle)));
        }
    }
    fail_if_any(
        violations,
        "no import circles between a crate's files (a file may use its ancestors' items; between \
         any others, what two files share belongs below both)",
    );
}

#[test]
fn the_import_scanner_sees_trees_and_circles() {
    let paths = imports::rooted_paths("use crate::{a, b::{c, D}};\nlet x = super::e::f(1); self::g;");
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    assert_eq!(
        joined,
        ["crate::a", "crate::b::c", "crate::b::D", "super::e::f", "self::g"]
    );
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    let graph = BTreeMap::from([
        (m("a"), [m("b")].into()),
        (m("b"), [m("c")].into()),
        (m("c"), [m("a")].into()),
    ]);
    assert_eq!(
        imports::find_circle(&graph).map(|c| imports::describe(&c)),
        Some("a -> b -> c -> a".to_owned())
    );
    // The graph of the core today is read, not empty.
    assert!(imports::import_graph("core/src").len() > 10);
}
