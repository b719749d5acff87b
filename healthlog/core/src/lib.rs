//! healthlog's pure core (HEALTHLOG.md "Layout"): everything about a Health Auto Export delivery
//! that can be decided without a file, a socket, a database or a clock.
//!
//! - [`hae`]: the body model over raw JSON values, covered and uncovered sections;
//! - [`time`]: HAE timestamps to UTC microseconds, the start hour;
//! - [`canon`]: the one canonical form and the one emptiness dictionary;
//! - [`points`]: coordinates and the completeness rule by sets, as a function of the set;
//! - [`entities`]: workouts and records with an id of their own, the coverage rule, the
//!   in-body choice among versions and the decision table against the stored version;
//! - [`object`]: the hourly object: gzip codec, merge, canonical hash;
//! - [`fold`]: one delivery's fold as a pure plan (what to load, what to write, counters);
//! - [`status`]: the parse status and which failures leave a delivery pending;
//! - [`fingerprint`]: the store's fingerprint, fed rows in a query-defined order;
//! - [`sample`]: the deterministic corpus generator and its oracle;
//! - [`limits`]: the named limit on every foreign input.
//!
//! The core never reads a clock, a socket or an RNG: time and seeds are inputs.

pub mod canon;
pub mod entities;
pub mod fingerprint;
pub mod fold;
pub mod hae;
pub mod limits;
pub mod object;
pub mod points;
pub mod sample;
pub mod status;
pub mod time;
