//! Rules, evaluated (issue 22 items 1, 3, 5 and 8; core runtime spec, "Rules", "Drain
//! behaves"): the pure half the core's rules part (`parts/rules.rs`) is built from, kept free
//! of the core's state so a reference evaluation can be written independently and compared.
//!
//! - [`eval`] — an input's reading (usable, standing in by `hold_last_valid`, lost) and a
//!   condition's value;
//! - [`state`] — one rule's state machine: hysteresis, `for_s`, gaps, input loss, the claim
//!   it wants, and the fight limit.

pub mod eval;
pub mod state;
