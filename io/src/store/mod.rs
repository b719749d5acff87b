//! Store adapters: the PostgreSQL adapter ([`postgres`]) and the in-memory reference model
//! ([`memory`]), both implementing [`crate::ports::Store`] with the same semantics (DESIGN.md
//! §3, §5, §6; ingest spec, "Schema", "Projection", "The registry is versioned data").
//!
//! Owns: the small read-side types both adapters share for status output and tests, and the
//! log-head rule (ingest spec, "Restart" steps 2–3) in the form the memory model evaluates it.
//! The conformance suite in `tests/store_conformance.rs` runs one set of test bodies against
//! both adapters; that is what lets the simulator trust the memory model.

pub mod memory;
pub mod postgres;

pub use memory::{MemoryLease, MemoryStore, StoredQuarantine};
pub use postgres::{CommitInsert, LOCK_KEY, LockHolder, MigrateReport, PgLease, PgStore, PgStoreConfig};

use sentinel_core::{ControlEvent, RetentionClass};

use crate::ports::StoreError;

/// Every control event's `core_epoch` must be its writer's (`core_epoch` is NOT NULL and
/// names the core that acted): both adapters check the whole batch before writing any of it.
pub(crate) fn check_control_stamps(epoch: u32, events: &[ControlEvent]) -> Result<(), StoreError> {
    match events.iter().find(|e| e.core_epoch != epoch) {
        Some(event) => Err(StoreError::Other(format!(
            "control event stamped with epoch {} written under epoch {epoch}",
            event.core_epoch
        ))),
        None => Ok(()),
    }
}

/// Row counts per retention-class table.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct ClassCounts(pub [u64; 3]);

impl ClassCounts {
    pub fn get(&self, class: RetentionClass) -> u64 {
        self.0[class.index()]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}
