//! `sentinel-ports`: the boundaries between the core's runtime and the world (DESIGN.md §1,
//! "Ports and runtime").
//!
//! Owns the traits every adapter implements and every caller is generic over — [`Bus`] and
//! [`Consumer`] ([`bus`]), [`Store`] and [`Lease`] ([`store`]), [`Clock`] ([`clock`]) — and the
//! types that cross them. It implements none of them against a real server: the PostgreSQL
//! store is `sentinel-store-pg`, the NATS bus `sentinel-bus-nats`, the in-memory models
//! `sentinel-models`. It links neither sqlx nor async-nats (checked by `tests/architecture.rs`),
//! so the runtime, the models, the simulator and the driver library can all depend on it.
//!
//! Everything is re-exported at the crate root: `sentinel_ports::Store`,
//! `sentinel_ports::RollupRow`, …

pub mod bus;
pub mod clock;
pub mod store;
pub mod tag_table;

pub use bus::{
    Bus, BusError, Consumer, FETCH_MAX, INBOUND_QUEUED_MAX, Inbound, Lag, ObservationSink, PublishAck,
};
pub use clock::{Clock, SystemClock};
pub use store::compaction::*;
pub use store::maintenance::*;
pub use store::records::*;
pub use store::retention::*;
pub use store::rollups::*;
pub use store::{
    CommitError, EPOCH_MAX, LATE_DUPLICATE_AFTER_MS, LATE_DUPLICATE_LOOKBACK_MS, Lease, Store, StoreError,
    check_core_start, core_start_out_of_range, epoch_floor_too_high,
};
pub use tag_table::TagTable;
