//! `sentinel-runtime`: what drives the pure core against the ports (DESIGN.md §1, "Ports and
//! runtime"; core runtime spec, "Acquisition order at startup").
//!
//! Owns: the loop that feeds the core and runs its effects ([`event_loop`]), the startup order
//! from the lock to consuming ([`startup`]), reading a registry folder ([`registry_dir`]),
//! reprocess over the store port ([`reprocess`]) and as the running core's job off the loop
//! ([`reprocess_job`]), the running core's compaction of a closed day ([`compaction`]), and what an operator's tools see of a running core: the Prometheus
//! exporter's registry and collector ([`telemetry`]) and the systemd notifications
//! ([`notify`]). Generic over `sentinel_ports::{Bus, Store, Clock}`: the same code runs
//! under `sentinel run` (PostgreSQL and NATS), the demo (the in-memory models) and the
//! simulator (the models behind turmoil's links). It names neither sqlx nor async-nats
//! (checked by `tests/architecture.rs` and, for the whole dependency graph, `cargo tree`).

pub mod compaction;
pub mod event_loop;
#[cfg(feature = "failpoints")]
pub mod failpoint;
pub mod notify;
pub mod registry_dir;
pub mod reprocess;
pub mod reprocess_job;
pub mod startup;
pub mod telemetry;

pub use event_loop::{RunOutcome, RuntimeConfig, run, run_observed};
