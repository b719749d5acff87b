//! Runs every fuzz target's body over every seed checked in under `fuzz/corpus/<target>/`, so
//! `cargo test --workspace` exercises the targets without nightly or libFuzzer. A seed that
//! panics is a bug found; the failure names each such seed and its panic message.

use std::panic::{self, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// A target with fewer seeds than this has lost its corpus, and the test would prove little.
const SEEDS_MIN: usize = 8;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../corpus")
        .join(target)
}

fn seeds(target: &str) -> Vec<PathBuf> {
    let dir = corpus_dir(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    files
}

fn run(target: &str, body: fn(&[u8])) {
    let seeds = seeds(target);
    assert!(
        seeds.len() >= SEEDS_MIN,
        "{target}: {} seeds in {}, expected at least {SEEDS_MIN}",
        seeds.len(),
        corpus_dir(target).display()
    );
    let mut failures = Vec::new();
    for seed in &seeds {
        let data = std::fs::read(seed).unwrap_or_else(|e| panic!("cannot read {}: {e}", seed.display()));
        if let Err(payload) = panic::catch_unwind(AssertUnwindSafe(|| body(&data))) {
            let message = payload
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| payload.downcast_ref::<&str>().copied())
                .unwrap_or("(non-string panic)")
                .to_owned();
            failures.push(format!("{}: {message}", seed.display()));
        }
    }
    assert!(
        failures.is_empty(),
        "{target}: {} of {} seeds panicked:\n{}",
        failures.len(),
        seeds.len(),
        failures.join("\n")
    );
}

#[test]
fn every_target_has_a_corpus() {
    for (target, _) in sentinel_fuzz_bodies::TARGETS {
        assert!(corpus_dir(target).is_dir(), "no corpus folder for {target}");
    }
}

#[test]
fn envelope_corpus() {
    run("envelope", sentinel_fuzz_bodies::envelope);
}

#[test]
fn registry_corpus() {
    run("registry", sentinel_fuzz_bodies::registry);
}

#[test]
fn pipeline_corpus() {
    run("pipeline", sentinel_fuzz_bodies::pipeline);
}

/// Inputs every body must survive whatever the corpus holds.
#[test]
fn degenerate_inputs() {
    let mut all_bytes: Vec<u8> = (0..=255).collect();
    all_bytes.extend((0..=255).rev());
    let inputs: [&[u8]; 6] = [b"", b"\n", b"\0", b"\xff\xfe\xfd", &all_bytes, &[b'\n'; 64]];
    for (target, body) in sentinel_fuzz_bodies::TARGETS {
        for input in inputs {
            if panic::catch_unwind(|| body(input)).is_err() {
                panic!("{target} panicked on {input:?}");
            }
        }
    }
}

/// The seeds named `valid-*` must decode, or the envelope corpus no longer reaches the code
/// after decoding.
#[test]
fn valid_envelope_seeds_decode() {
    for seed in seeds("envelope") {
        let name = seed.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.starts_with("valid-") {
            let data = std::fs::read(&seed).expect("seed readable");
            if let Err(refusal) = sentinel_core::wire::decode_envelope(&data) {
                panic!("{name} is refused: {refusal:?}");
            }
        }
    }
}

/// The self-contained sample files and `minimal-every-kind.toml` must load, or the registry
/// corpus no longer reaches the canonical round trip.
#[test]
fn loadable_registry_seeds_load() {
    let mut loaded = 0;
    for seed in seeds("registry") {
        let name = seed.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if name.ends_with("-self-contained.toml") || name == "minimal-every-kind.toml" {
            let text = std::fs::read_to_string(&seed).expect("seed is UTF-8");
            match sentinel_core::registry::source::load(&[(
                sentinel_fuzz_bodies::registry::FILE.into(),
                text,
            )]) {
                Ok(descriptors) => assert!(!descriptors.is_empty(), "{name} loads no point"),
                Err(report) => panic!("{name} does not load:\n{report}"),
            }
            loaded += 1;
        }
    }
    assert!(loaded >= 5, "only {loaded} loadable registry seeds");
}
