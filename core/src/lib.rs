//! `sentinel-core`: the pure ingest state machine.
//!
//! No async, no I/O, no clock, no randomness (DESIGN.md §1). The caller passes time in with
//! every [`Input`], polls [`Effect`]s out, and asks [`Core::next_deadline`] when to tick. The
//! same code runs under the production runtime, the demo and the simulator.
//!
//! Map (ingest spec, "Ingest pipeline"; DESIGN.md §1, "The core API"). Imports run one way
//! (`tests/module_graph.rs` checks that no modules name each other in a circle, and that only
//! the router names a part): the router names the parts, the parts name the libraries and the
//! vocabulary below, and no part names another.
//!
//! The router and its parts:
//! - [`machine`] — [`Core`], the router (str0m's `Rtc` is the model): it owns the clock, the
//!   mode, the epoch, the registry, the config, the one effect queue and the exit; it routes
//!   each [`Input`] to the part that owns it, asks every part for the next deadline, and keeps
//!   the ordering rules as checks across parts;
//! - `parts/` — the parts, each a type with its own private state and its own tests, which
//!   never name each other: `ingest` (dedup, batches, the commit report order, the only
//!   `Ack`s), `projection` (the projection and its checkpoints), `watchdog` (freshness
//!   deadlines, `quality_changed`), `commands` (admission, refusals, publishing committed
//!   commands), `claims` (writable points' claims through [`arbitration`], `point_desired`), [`drivers`] (restart step 7 and the driver
//!   states), `derived` (derived points, the readings held at restart), `rules` (rules on
//!   committed current data, warmup, their claims, the replay at restart), `maintenance` (rollup
//!   and retention schedules, the reprocess slot, "ingest behind") and [`self_points`];
//!   `parts/context.rs` is what they all read (`Ctx`) and write (`Out`). Only `drivers` and
//!   `self_points` are public, re-exported here.
//!
//! The pure stages and libraries the parts are built from (several are used by other crates):
//! - [`pipeline`] — stages 2–10 for one delivery; [`decide`] — stages 6–8, which reprocess
//!   shares; [`dedup`] — stage 3's bounded set;
//! - [`projection`] — stage 13, the fold, the event policy and the checkpoint policy;
//! - [`derived`] — derived points: sliding-window and two-input values computed from committed
//!   rows, keyed by the triggering row, with provenance and typed gaps;
//! - [`rollup`], [`retention`], [`compaction`] — when rollups refresh, partitions drop and
//!   closed days are compacted, and the horizons;
//! - [`rules`] — rules, evaluated: an input's reading (usable, standing in, lost), a
//!   condition's value, one rule's state machine (hysteresis, `for_s`, gaps, the fight limit);
//! - [`arbitration`] — claims on a writable point, their bands (mapped onto BACnet's priority
//!   levels) and the one resolver that picks the desired value;
//! - [`reprocess_request`] — a reprocess asked of the running core: admission, the job, the
//!   reply; [`reprocess`] — reprocess's pure half (scope, refusal, recompute), which the
//!   `sentinel reprocess` command drives too;
//! - [`registry`] — the versioned registry: parsing, admission checks, canonical form, the
//!   compiled lookup structure.
//!
//! The vocabulary:
//! - [`effect`] — [`Input`], [`Effect`], [`Deadline`], [`ExitReason`]: everything the core is
//!   told and asks for;
//! - [`delivery`] — stage 1's output, as any bus hands it over;
//! - [`wire`] — the driver contract: envelope decoding (stage 2), subjects, transition encoding;
//! - [`log`] — rows, quarantine entries, batches (stages 11–12); [`state`] — the checkpointed
//!   point state; [`control`] — the control events the core writes (epoch-stamped);
//! - [`gap`] — the closed vocabulary of gap reasons the system writes; [`metrics`] — the
//!   counters; [`config`]; [`time`] — the one time type;
//! - [`planted`] — bugs the simulator's planted-bug test turns on (feature `planted-bugs`).

pub mod arbitration;
pub mod compaction;
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
pub mod partitions;
mod parts;
pub mod pipeline;
pub mod planted;
pub mod projection;
pub mod registry;
pub mod reprocess;
pub mod reprocess_request;
pub mod retention;
pub mod rollup;
pub mod rules;
pub mod state;
pub mod time;
pub mod wire;

pub use parts::{assignments, drivers, self_points, verification};

pub use config::Config;
pub use control::{
    CommandRequest, ControlDetail, ControlEvent, ControlKind, ControlReport, IssuedCommand, OpenVerification,
};
pub use delivery::{Delivery, DeliveryTag};
pub use effect::{Deadline, Effect, EpochRaise, ExitReason, Input};
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
