//! The parts [`crate::Core`] routes its inputs to. Each part is a type with its own private
//! state and its own tests; parts never call each other: the router hands each what it needs
//! (data, or a read-only view of another part) and every part writes into the one effect
//! queue ([`context::Out`]), in the order the router calls it.
//!
//! - [`ingest`]: dedup, batches, acks, the commit report order;
//! - [`projection`]: the projection and its checkpoints;
//! - [`watchdog`]: freshness deadlines and their `quality_changed` events;
//! - [`commands`]: command requests (admission, refusals) and publishing committed commands;
//! - [`claims`]: claims on writable points, the resolver, `point_desired`;
//! - [`verification`]: applied commands' verification timers and each writable point's
//!   convergence;
//! - [`drivers`]: the driver instances' states and the epoch announcement;
//! - [`assignments`]: each driver instance's assignment (poll intervals), its `assignment`
//!   events, their publication and the drivers' acknowledgements;
//! - [`derived`]: derived points, and the readings held back at restart;
//! - [`rules`]: the rules, evaluated on committed current data, their warmup, their claims
//!   (handed to the claims part by the router), their replay at restart;
//! - [`maintenance`]: rollup and retention schedules, the reprocess slot, "ingest behind";
//! - [`self_points`]: the core's figures about itself, and the envelopes of every self-point;
//! - [`health`]: the values of the generated health points per driver host and per device;
//! - [`context`]: what they all read ([`context::Ctx`]) and write ([`context::Out`]).

pub mod assignments;
pub(crate) mod claims;
pub(crate) mod commands;
pub(crate) mod context;
pub(crate) mod derived;
pub mod drivers;
pub(crate) mod health;
pub(crate) mod ingest;
pub(crate) mod maintenance;
pub(crate) mod projection;
pub(crate) mod rules;
pub mod self_points;
pub mod verification;
pub(crate) mod watchdog;
