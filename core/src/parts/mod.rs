//! The parts [`crate::Core`] routes its inputs to. Each part is a type with its own private
//! state and its own tests; parts never call each other: the router hands each what it needs
//! (data, or a read-only view of another part) and every part writes into the one effect
//! queue, in the order the router calls it.

pub mod drivers;
pub mod self_points;
pub(crate) mod watchdog;
