//! `sentinel-core`: the pure ingest state machine.
//!
//! No async, no I/O, no clock, no randomness (DESIGN.md §1). The caller passes time in with
//! every [`Input`], polls [`Effect`]s out, and asks [`Core::next_deadline`] when to tick. The
//! same code runs under the production runtime, the demo and the simulator.
//!
//! Map (ingest spec, "Ingest pipeline"):
//! - [`delivery`] — stage 1's output, as any bus hands it over;
//! - [`wire`] — the driver contract: envelope decoding (stage 2), subjects, transition encoding;
//! - [`pipeline`] — stages 2–10 for one delivery;
//! - [`dedup`] — stage 3's bounded set;
//! - [`log`] — rows, quarantine entries, batches (stages 11–12);
//! - [`projection`] — stage 13 and the checkpoint policy;
//! - [`watchdog`] — freshness deadlines, startup grace and lag suppression;
//! - [`derived`] — derived points: sliding-window and two-input values computed from committed
//!   rows, keyed by the triggering row, with provenance and typed gaps;
//! - [`gap`] — the closed vocabulary of gap reasons the system writes;
//! - [`reprocess_request`] — a reprocess asked of the running core: admission, the job, the
//!   "newer row wins" rule for the projection;
//! - [`control`] — the control events the core writes (epoch-stamped);
//! - [`self_points`] — the figures the core publishes about itself, as observations;
//! - [`drivers`] — restart step 7: the driver instances, this core's epoch announcement to them
//!   and their connecting → connected → ready states;
//! - [`machine`] — [`Core`], which owns all of the above and keeps the ordering rules;
//! - [`registry`] — the versioned registry;
//! - [`time`] — the one time type;
//! - [`planted`] — bugs the simulator's planted-bug test turns on (feature `planted-bugs`).

pub mod config;
pub mod control;
pub mod decide;
pub mod dedup;
pub mod delivery;
pub mod derived;
pub mod effect;
pub mod gap;
pub mod log;
pub mod machine;
pub mod metrics;
mod parts;
pub mod pipeline;
pub mod planted;
pub mod projection;
pub mod registry;
pub mod reprocess;
pub mod reprocess_request;
pub mod retention;
pub mod rollup;
pub mod state;
pub mod time;
pub mod wire;

pub use parts::{drivers, self_points};

pub use config::Config;
pub use control::{CommandRequest, ControlDetail, ControlEvent, ControlKind, ControlReport};
pub use delivery::{Delivery, DeliveryTag};
pub use effect::{Deadline, Effect, ExitReason, Input};
pub use gap::GapReason;
pub use log::{
    Batch, BatchId, CanonicalValue, CommitReport, ObsKey, ObsRow, Quality, QuarantineEntry, QuarantineReason,
};
pub use machine::Core;
pub use metrics::Metrics;
pub use planted::PlantedBug;
pub use registry::{Registry, RegistrySnapshot, RetentionClass};
pub use state::{LogHead, OrderKey, PointState, RestoredState};
pub use time::Micros;
