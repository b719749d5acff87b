//! healthlog's layout rules (HEALTHLOG.md "Layout"), checked on the sources:
//! - the core links no async runtime, SQL library or RNG, and its production code names no
//!   clock, file system, socket, environment or process;
//! - the files of `store/sqlite/` are the only ones of healthlog that name sqlx;
//! - `serve.rs` is the only source file that names the HTTP framework (axum, axum-server,
//!   rustls): the receiver is one module, the rest of the edge does not know HTTP.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display())) {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(path);
        }
    }
}

/// Production code of a file: everything before its `#[cfg(test)]` module.
fn production(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("reads");
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

#[test]
fn the_core_links_no_runtime_sql_or_rng() {
    let manifest = fs::read_to_string(root().join("core/Cargo.toml")).expect("manifest");
    let deps = &manifest[manifest.find("[dependencies]").expect("deps")..];
    let deps = &deps[..deps.find("[dev-dependencies]").unwrap_or(deps.len())];
    for forbidden in ["tokio", "sqlx", "rand", "async", "getrandom"] {
        assert!(!deps.contains(forbidden), "healthlog-core depends on {forbidden}");
    }
}

#[test]
fn the_core_reads_no_clock_file_socket_or_environment() {
    let mut files = Vec::new();
    rust_files(&root().join("core/src"), &mut files);
    assert!(files.len() >= 10, "found the core's sources");
    let mut violations = Vec::new();
    for f in &files {
        let text = production(f);
        for forbidden in [
            "SystemTime",
            "Instant::now",
            "std::fs",
            "std::net",
            "std::env",
            "std::process",
            "tokio",
            "sqlx",
        ] {
            if text.contains(forbidden) {
                violations.push(format!("{}: names {forbidden}", f.display()));
            }
        }
    }
    assert!(violations.is_empty(), "{violations:#?}");
}

#[test]
fn only_the_sqlite_adapter_names_sqlx() {
    let mut files = Vec::new();
    for dir in ["core/src", "io/src", "io/tests", "io/benches"] {
        rust_files(&root().join(dir), &mut files);
    }
    let this_file = Path::new(file!()).file_name().expect("name");
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| !f.to_string_lossy().contains("io/src/store/sqlite/") && f.file_name() != Some(this_file))
        .filter(|f| fs::read_to_string(f).expect("reads").contains("sqlx"))
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "only healthlog/io/src/store/sqlite/ may name sqlx: {offenders:?}"
    );
}

#[test]
fn only_the_receiver_names_the_http_framework() {
    let mut files = Vec::new();
    for dir in ["core/src", "io/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    let offenders: Vec<String> = files
        .iter()
        .filter(|f| !f.ends_with("io/src/serve.rs"))
        .filter(|f| {
            let text = fs::read_to_string(f).expect("reads");
            ["axum", "rustls", "hyper"].iter().any(|w| text.contains(w))
        })
        .map(|f| f.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "only healthlog/io/src/serve.rs may name axum/rustls: {offenders:?}"
    );
}
