//! The core's modules import one way (issue 20, "No import circles in the core, the
//! registry"): a circle means two modules cannot be understood, tested or moved apart, and a
//! shared type or stage function belongs below both of its users.
//!
//! An import is any `crate::…` or `super::…` path naming another module of the crate, in a
//! `use` line or inline, outside `#[cfg(test)]` items; the lib root's re-exports of a module
//! (`pub use parts::drivers`) count as that module. The graph must have no circle between
//! files, nor between the children of any folder once each child's files are taken together
//! (`src/`, `src/registry/`, `src/parts/`). The second test asks the same of the paths named in
//! comments (intra-doc links), so a lower module's documentation does not lean on an upper one.
//!
//! A third test keeps the router's shape: no module but `machine.rs` names a part under
//! `parts/` (their shared `parts/context.rs` aside), so parts never call each other.
//!
//! `cargo test -p sentinel-core --test module_graph -- --nocapture` prints the edges.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Edges = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `src/`, by module path (`""` is the crate root).
fn modules() -> BTreeMap<String, PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .expect("src is readable")
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    walk(&src, &mut files);
    files
        .into_iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).expect("under src").with_extension("");
            let mut parts: Vec<String> = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
                parts.pop();
            }
            (parts.join("::"), path)
        })
        .collect()
}

/// The text with string and char literals emptied and comments removed (or, with
/// `keep_comments`, kept as text to be searched).
fn strip(src: &str, keep_comments: bool) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, c)| chars.get(i + k) == Some(&c));
    while i < chars.len() {
        let c = chars[i];
        if at(i, "//") {
            let end = chars[i..]
                .iter()
                .position(|&c| c == '\n')
                .map_or(chars.len(), |p| i + p);
            if keep_comments {
                out.extend(
                    chars[i..end]
                        .iter()
                        .map(|&c| if matches!(c, '{' | '}' | ';') { ' ' } else { c }),
                );
            }
            i = end;
        } else if at(i, "/*") {
            let end = (i + 2..chars.len())
                .find(|&k| at(k, "*/"))
                .map_or(chars.len(), |k| k + 2);
            i = end;
        } else if c == 'r' && (at(i + 1, "\"") || at(i + 1, "#")) && !is_ident(chars.get(i.wrapping_sub(1))) {
            // A raw string: r"…", r#"…"#.
            let hashes = chars[i + 1..].iter().take_while(|&&c| c == '#').count();
            if chars.get(i + 1 + hashes) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let close: String = std::iter::once('"')
                .chain(std::iter::repeat_n('#', hashes))
                .collect();
            let start = i + 2 + hashes;
            let end = (start..chars.len())
                .find(|&k| at(k, &close))
                .map_or(chars.len(), |k| k + close.len());
            out.push_str("\"\"");
            i = end;
        } else if c == '"' {
            let mut k = i + 1;
            while k < chars.len() && chars[k] != '"' {
                k += if chars[k] == '\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = k + 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\''), or a lifetime ('a), which is kept.
            if chars.get(i + 1) == Some(&'\\') {
                let end = (i + 2..chars.len())
                    .find(|&k| chars[k] == '\'')
                    .map_or(chars.len(), |k| k + 1);
                out.push_str("' '");
                i = end;
            } else if chars.get(i + 2) == Some(&'\'') {
                out.push_str("' '");
                i += 3;
            } else {
                out.push(c);
                i += 1;
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

fn is_ident(c: Option<&char>) -> bool {
    c.is_some_and(|c| c.is_alphanumeric() || *c == '_')
}

/// The text without its `#[cfg(test)]` items (a module, a function, a `use`).
fn without_test_items(text: &str) -> String {
    let mut text = text.to_owned();
    while let Some(start) = text.find("#[cfg(test)]") {
        let rest = &text[start..];
        let brace = rest.find('{');
        let semi = rest.find(';');
        let end = match (brace, semi) {
            (Some(b), Some(s)) if s < b => start + s + 1,
            (Some(b), _) => {
                let mut depth = 0usize;
                let mut end = text.len();
                for (k, c) in text[start + b..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = start + b + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            (None, Some(s)) => start + s + 1,
            (None, None) => text.len(),
        };
        text.replace_range(start..end, "");
    }
    text
}

/// The paths of a `use` tree, prefixed: `crate::{a, b::{c, d as e}}` → `crate::a`,
/// `crate::b::c`, `crate::b::d`.
fn expand_use(tree: &str, prefix: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let path = tree.split(" as ").next().unwrap_or(tree).trim();
        out.push(format!("{prefix}{path}"));
        return;
    };
    let head = &tree[..open];
    let close = tree.rfind('}').unwrap_or(tree.len());
    let mut depth = 0;
    let mut item = String::new();
    for c in tree[open + 1..close].chars() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                if !item.trim().is_empty() {
                    expand_use(&item, &format!("{prefix}{head}"), out);
                }
                item.clear();
                continue;
            }
            _ => {}
        }
        item.push(c);
    }
    if !item.trim().is_empty() {
        expand_use(&item, &format!("{prefix}{head}"), out);
    }
}

/// Every `crate::…` and `super::…` path in `text`, `use` trees expanded.
fn paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = String::new();
    let mut cursor = 0;
    while let Some(found) = text[cursor..].find("use ") {
        let start = cursor + found;
        let boundary = start == 0 || !is_ident(text[..start].chars().last().as_ref());
        let tree_start = start + 4;
        let tree = text[tree_start..].trim_start();
        if boundary && (tree.starts_with("crate::") || tree.starts_with("super::")) {
            let end = text[tree_start..]
                .find(';')
                .map_or(text.len(), |e| tree_start + e);
            rest.push_str(&text[cursor..start]);
            let tree: String = text[tree_start..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            expand_use(&tree, "", &mut out);
            cursor = end;
        } else {
            rest.push_str(&text[cursor..tree_start]);
            cursor = tree_start;
        }
    }
    rest.push_str(&text[cursor..]);
    let rest: Vec<char> = rest.chars().collect();
    let mut i = 0;
    while i < rest.len() {
        let starts = |s: &str| s.chars().enumerate().all(|(k, c)| rest.get(i + k) == Some(&c));
        if (starts("crate::") || starts("super::")) && !is_ident(i.checked_sub(1).and_then(|p| rest.get(p))) {
            let end = (i..rest.len())
                .find(|&k| !(rest[k].is_alphanumeric() || rest[k] == '_' || rest[k] == ':'))
                .unwrap_or(rest.len());
            out.push(
                rest[i..end]
                    .iter()
                    .collect::<String>()
                    .trim_end_matches(':')
                    .to_owned(),
            );
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// The module a path from `module` names: the longest prefix that is a module (after the
/// root's module re-exports), or `None` for the root itself.
fn resolve(
    module: &str,
    path: &str,
    modules: &BTreeMap<String, PathBuf>,
    aliases: &BTreeMap<String, String>,
) -> Option<String> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    let mut base: Vec<String> = module
        .split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    if segments.first() == Some(&"crate") {
        segments.remove(0);
        base.clear();
    } else {
        while segments.first() == Some(&"super") {
            segments.remove(0);
            base.pop();
        }
    }
    let mut full: Vec<String> = base;
    full.extend(segments.iter().map(|s| (*s).to_owned()));
    if let Some(first) = full.first()
        && let Some(target) = aliases.get(first)
    {
        let mut aliased: Vec<String> = target.split("::").map(str::to_owned).collect();
        aliased.extend(full.drain(1..));
        full = aliased;
    }
    (1..=full.len())
        .rev()
        .map(|k| full[..k].join("::"))
        .find(|name| modules.contains_key(name))
}

/// The root's `pub use a::{b, c};` where `a::b` is a module: `b` → `a::b`.
fn aliases(modules: &BTreeMap<String, PathBuf>) -> BTreeMap<String, String> {
    let root = strip(&std::fs::read_to_string(&modules[""]).expect("lib.rs"), false);
    let mut out = BTreeMap::new();
    for statement in root.split(';') {
        let Some(tree) = statement.trim().strip_prefix("pub use ") else {
            continue;
        };
        let mut paths = Vec::new();
        expand_use(
            &tree.split_whitespace().collect::<Vec<_>>().join(" "),
            "",
            &mut paths,
        );
        for path in paths {
            if modules.contains_key(&path)
                && let Some(name) = path.rsplit("::").next()
            {
                out.insert(name.to_owned(), path.clone());
            }
        }
    }
    out
}

fn graph(with_comments: bool) -> (BTreeMap<String, PathBuf>, Edges) {
    let modules = modules();
    let aliases = aliases(&modules);
    let mut edges = Edges::new();
    for (module, path) in &modules {
        let text = without_test_items(&strip(
            &std::fs::read_to_string(path).expect("readable"),
            with_comments,
        ));
        for named in paths(&text) {
            let Some(target) = resolve(module, &named, &modules, &aliases) else {
                continue;
            };
            if target.is_empty() || target == *module || target.starts_with(&format!("{module}::")) {
                continue;
            }
            edges.entry(module.clone()).or_default().insert(target);
        }
    }
    (modules, edges)
}

/// Each circle (a strongly connected set of two or more nodes), sorted.
fn circles(nodes: &BTreeSet<String>, edges: &Edges) -> Vec<Vec<String>> {
    // Reachability by search from each node: the graphs here have a few dozen nodes.
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_owned()];
        while let Some(n) = stack.pop() {
            for next in edges.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> = nodes.iter().map(|n| (n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for n in nodes {
        if !reachable[n].contains(n) {
            continue;
        }
        let circle: Vec<String> = nodes
            .iter()
            .filter(|m| reachable[n].contains(*m) && reachable[*m].contains(n))
            .cloned()
            .collect();
        if !out.contains(&circle) {
            out.push(circle);
        }
    }
    out
}

/// The circles between files, and between the children of each folder (each child's files
/// taken together).
fn all_circles(modules: &BTreeMap<String, PathBuf>, edges: &Edges) -> Vec<String> {
    let mut found = Vec::new();
    let files: BTreeSet<String> = modules.keys().cloned().collect();
    for circle in circles(&files, edges) {
        found.push(format!("between files: {}", circle.join(" → ")));
    }
    let folders: BTreeSet<&String> = modules
        .keys()
        .filter(|m| m.is_empty() || modules.keys().any(|n| n.starts_with(&format!("{m}::"))))
        .collect();
    for folder in folders {
        let prefix = if folder.is_empty() {
            String::new()
        } else {
            format!("{folder}::")
        };
        let child = |m: &str| -> Option<String> {
            let rest = m.strip_prefix(&prefix)?;
            (m != folder.as_str() && !rest.is_empty())
                .then(|| rest.split("::").next().unwrap_or(rest).to_owned())
        };
        let children: BTreeSet<String> = modules.keys().filter_map(|m| child(m)).collect();
        let mut collapsed = Edges::new();
        for (from, tos) in edges {
            let Some(a) = child(from) else { continue };
            for to in tos {
                if let Some(b) = child(to)
                    && a != b
                {
                    collapsed.entry(a.clone()).or_default().insert(b);
                }
            }
        }
        for circle in circles(&children, &collapsed) {
            let folder = if folder.is_empty() { "src" } else { folder };
            found.push(format!(
                "between the children of {folder}: {}",
                circle.join(" → ")
            ));
        }
    }
    found
}

fn print(edges: &Edges) {
    for (from, tos) in edges {
        for to in tos {
            println!("{from} -> {to}");
        }
    }
}

#[test]
fn the_core_imports_one_way() {
    let (modules, edges) = graph(false);
    assert!(modules.contains_key("machine") && modules.contains_key("registry::check"));
    print(&edges);
    let circles = all_circles(&modules, &edges);
    assert!(circles.is_empty(), "import circles:\n{}", circles.join("\n"));
}

#[test]
fn only_the_router_names_a_part_and_no_part_names_another() {
    let (_, edges) = graph(false);
    let mut violations = Vec::new();
    for (from, tos) in &edges {
        for to in tos {
            let part = to.starts_with("parts::") && to != "parts::context";
            if part && from != "machine" {
                violations.push(format!("{from} names {to}"));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "parts never call each other; only the router (machine.rs) routes to them:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_core_documentation_names_modules_one_way_too() {
    let (modules, edges) = graph(true);
    let circles = all_circles(&modules, &edges);
    assert!(
        circles.is_empty(),
        "circles through paths named in comments:\n{}",
        circles.join("\n")
    );
}

#[test]
fn the_scanner_sees_use_trees_inline_paths_and_skips_tests_and_strings() {
    let text = without_test_items(&strip(
        "use crate::a::{b, c::{d as e}};\nfn f() { crate::x::y(); let s = \"crate::no\"; }\n\
         // crate::comment\n#[cfg(test)]\nmod tests { use crate::t; }\n",
        false,
    ));
    assert_eq!(paths(&text), ["crate::a::b", "crate::a::c::d", "crate::x::y"]);
}
