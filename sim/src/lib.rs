//! `sentinel-sim`: the deterministic simulator (DESIGN.md §5, §6; ingest spec and core
//! runtime spec, "Exit criteria").
//!
//! One `u64` seed feeds one ChaCha generator ([`rng`]), which draws the run's [`settings`]
//! (which fault sites are on, timings, traffic mix) and every later random choice. The run
//! ([`scenario`]) is a turmoil simulation whose hosts run the production startup sequence and
//! runtime loop over the real core, through the sim's port [`adapters`] onto the in-memory
//! bus and store models, with [`drivers`] publishing traffic from the sample [`registry`].
//! The [`checker`] tests the invariants at every event; the [`trace`] hashes every event so a
//! seed's run can be compared bit for bit. Shared run state lives in [`world`].
//!
//! Replay a seed with `cargo run --release -p sentinel-sim -- --seed N` (README, "Engineers").

pub mod adapters;
pub mod checker;
pub mod drivers;
pub mod failover;
pub mod operator;
pub mod registry;
pub mod rng;
pub mod scenario;
pub mod settings;
pub mod trace;
pub mod world;

pub use registry::SimRegistry;
pub use scenario::{Options, SeedOutcome, replay_command, run_seed};
