//! No import circles (ARCHITECTURE.md, "Architecture invariants"): within each Sentinel crate,
//! the files that name each other's items form no cycle.
//!
//! A file is a module: `src/lib.rs` (or a binary's `src/main.rs`) is the crate root,
//! `src/a.rs` and `src/a/mod.rs` are `a`, `src/a/b.rs` is `a::b`. A file names another when its
//! production code (outside `#[cfg(test)]`) holds a path `crate::…`, `super::…` or `self::…`
//! (in a `use` tree or inline) that resolves to it; the longest prefix of the path that is a
//! module is the one named. Edges between a module and its own ancestors or descendants are
//! left out: a folder's files may use what their `mod.rs` (or the crate root) defines, and a
//! parent may use what it declares. A circle between any other modules means two files that
//! need each other, and the shared part belongs below both.

use std::collections::{BTreeMap, BTreeSet};

use super::{Scope, sources};

type Module = Vec<String>;

/// The module a source file is, relative to its crate's `src/`.
fn module_of(src_dir: &str, path: &str) -> Module {
    let rel = path
        .strip_prefix(src_dir)
        .and_then(|p| p.strip_prefix('/'))
        .unwrap_or(path);
    let mut parts: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// Every path rooted at `crate`, `super` or `self` in `text`, brace trees expanded:
/// `crate::{a, b::{c, D}}` gives `crate::a`, `crate::b::c`, `crate::b::D`.
pub fn rooted_paths(text: &str) -> Vec<Vec<String>> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    for root in ["crate::", "super::", "self::"] {
        for (at, _) in text.match_indices(root) {
            let before = text[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let head = root.trim_end_matches(':').to_owned();
            let mut i = at + root.len();
            tree(bytes, &mut i, vec![head], &mut out);
        }
    }
    out
}

/// Parses one use-tree at `i` after `prefix::`, pushing each complete path.
fn tree(bytes: &[u8], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let skip_ws = |i: &mut usize| {
        while *i < bytes.len() && bytes[*i].is_ascii_whitespace() {
            *i += 1;
        }
    };
    skip_ws(i);
    if *i < bytes.len() && bytes[*i] == b'{' {
        *i += 1;
        loop {
            skip_ws(i);
            if *i >= bytes.len() || bytes[*i] == b'}' {
                *i += 1;
                return;
            }
            tree(bytes, i, prefix.clone(), out);
            skip_ws(i);
            if *i < bytes.len() && bytes[*i] == b',' {
                *i += 1;
            }
        }
    }
    let start = *i;
    while *i < bytes.len() && (bytes[*i].is_ascii_alphanumeric() || bytes[*i] == b'_') {
        *i += 1;
    }
    let mut path = prefix;
    if *i > start {
        path.push(String::from_utf8_lossy(&bytes[start..*i]).into_owned());
    }
    if bytes[*i..].starts_with(b"::") {
        *i += 2;
        tree(bytes, i, path, out);
        return;
    }
    // `x as y`, `*`, or the end of the path.
    while *i < bytes.len() && !matches!(bytes[*i], b',' | b'}' | b';' | b'(' | b')' | b'\n') {
        if bytes[*i] == b'{' {
            break;
        }
        *i += 1;
    }
    out.push(path);
}

/// The module `path` (rooted, from `from`) names, if it is one of `modules`.
fn resolve(from: &Module, path: &[String], modules: &BTreeSet<Module>) -> Option<Module> {
    let mut base: Module = Vec::new();
    let mut rest = path;
    match rest.first().map(String::as_str) {
        Some("crate") => rest = &rest[1..],
        Some("self") => {
            base = from.clone();
            rest = &rest[1..];
        }
        Some("super") => {
            base = from.clone();
            while rest.first().map(String::as_str) == Some("super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    for segment in rest {
        let mut next = base.clone();
        next.push(segment.clone());
        if modules.contains(&next) {
            base = next;
        } else {
            break;
        }
    }
    Some(base)
}

fn related(a: &Module, b: &Module) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The file-level import graph of the crate whose sources are under `src_dir`.
pub fn import_graph(src_dir: &str) -> BTreeMap<Module, BTreeSet<Module>> {
    let files: Vec<_> = sources(src_dir, Scope::ProductionCode)
        .into_iter()
        // A crate with both a library and a binary root: the binary is its own crate, which
        // reaches the library by name, never by `crate::`.
        .filter(|s| !(s.path.ends_with("src/main.rs") && sources_has_lib(src_dir)))
        .collect();
    let modules: BTreeSet<Module> = files.iter().map(|s| module_of(src_dir, &s.path)).collect();
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for source in &files {
        let from = module_of(src_dir, &source.path);
        let (text, _) = source.joined();
        let edges = graph.entry(from.clone()).or_default();
        for path in rooted_paths(&text) {
            if let Some(to) = resolve(&from, &path, &modules)
                && !related(&from, &to)
            {
                edges.insert(to);
            }
        }
    }
    graph
}

fn sources_has_lib(src_dir: &str) -> bool {
    super::workspace_root().join(src_dir).join("lib.rs").exists()
}

/// One circle in `graph`, as the modules along it (first repeated at the end), if any.
pub fn find_circle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Active,
        Done,
    }
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        marks: &mut BTreeMap<Module, Mark>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Active) => {
                let from = stack
                    .iter()
                    .position(|m| m == node)
                    .expect("active nodes are on the stack");
                let mut circle = stack[from..].to_vec();
                circle.push(node.clone());
                return Some(circle);
            }
            None => {}
        }
        marks.insert(node.clone(), Mark::Active);
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(circle) = visit(next, graph, marks, stack) {
                return Some(circle);
            }
        }
        stack.pop();
        marks.insert(node.clone(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(circle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(circle);
        }
    }
    None
}

pub fn describe(circle: &[Module]) -> String {
    circle
        .iter()
        .map(|m| {
            if m.is_empty() {
                "(crate root)".to_owned()
            } else {
                m.join("::")
            }
        })
        .collect::<Vec<_>>()
        .join(" -> ")
}
