//! `sentinel-models`: the in-memory models of the bus and the store, and the synthetic fleet.
//!
//! Owns: [`MemoryBus`] (one JetStream stream and its durable pull consumer, [`bus`]) and
//! [`MemoryStore`] (the PostgreSQL store's semantics the core relies on, [`store`], a folder by
//! concern like the PostgreSQL adapter), each with the fault hooks the simulator drives, and
//! the demo's synthetic [`fleet`]. The demo, the simulator and the tests run on them. They are
//! trusted only because one conformance suite (`tests/store_conformance.rs`,
//! `tests/bus_conformance.rs`) passes against both them and the real adapters. Links neither
//! sqlx nor async-nats (checked by `tests/architecture.rs`).

pub mod bus;
pub mod fleet;
pub mod store;

pub use bus::{MemoryBus, MemoryBusConfig, MemoryConsumer, PublishedMessage};
pub use store::{MemoryLease, MemoryStore, StoredQuarantine};
