//! `sentinel-fuzz-bodies`: the bodies of Sentinel's fuzz targets (DESIGN.md §1, `fuzz/`).
//!
//! Owns: one function per target, each taking arbitrary bytes and panicking only when it finds
//! a bug. Two callers share them: the cargo-fuzz package in `fuzz/` (one `fuzz_target!` line
//! per target, built with nightly and libFuzzer) and this crate's `tests/corpus.rs`, which runs
//! every body over every checked-in seed in `fuzz/corpus/<target>/` under `cargo test`.
//!
//! - [`envelope`] — the driver contract's decoding: envelopes and `obs.<host>.<instance>`
//!   subjects;
//! - [`registry`] — one TOML registry file through parse, admission and resolve, then every
//!   loaded descriptor through its canonical form and back;
//! - [`pipeline`] — a [`sentinel_core::Core`] over a small fixed registry fed deliveries cut
//!   from the input, checking the ack-after-commit ordering rule.
//!
//! A body never panics on bad input: refusing input is the code under test's job, and any
//! panic (an assertion here, or one inside `sentinel-core`) is a finding to fix in the core.

pub mod envelope;
pub mod pipeline;
pub mod registry;

pub use envelope::envelope;
pub use pipeline::pipeline;
pub use registry::registry;

/// A target's body: takes any bytes, panics only on a finding.
pub type Body = fn(&[u8]);

/// The targets by name, as `fuzz/fuzz_targets/` and `fuzz/corpus/` name them.
pub const TARGETS: [(&str, Body); 3] = [
    ("envelope", envelope::envelope),
    ("registry", registry::registry),
    ("pipeline", pipeline::pipeline),
];
