//! Stage 3: the fast-path dedup set on `(driver_instance, source_epoch, source_seq)` (ingest
//! spec, stage 3). The unique index is the authority; this set only saves work and, for a key
//! whose batch is still in flight, holds the duplicate's ack until that batch commits.
//!
//! Owns: a bounded map from packed key to where the key's row is, forgetting the oldest keys
//! first. Only keys of driver instances the registry knows are tracked (a message from an
//! unknown instance is quarantined at stage 5 anyway), which lets a key pack into a `u128`
//! with no allocation per observation.

use std::collections::VecDeque;

use rustc_hash::FxHashMap;

use crate::log::BatchId;
use crate::registry::InstanceIdx;

/// Where a seen key's row is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Seen {
    /// In a batch not yet committed: ack the duplicate when that batch commits.
    InFlight(BatchId),
    /// Committed (inserted, or swallowed by the unique index): ack the duplicate now.
    Committed,
}

#[derive(Debug)]
pub struct DedupSet {
    slots: FxHashMap<u128, Seen>,
    /// Insertion order, for forgetting the oldest key first.
    order: VecDeque<u128>,
    keys_max: usize,
}

pub fn pack(instance: InstanceIdx, source_epoch: u32, source_seq: u64) -> u128 {
    (u128::from(instance.0) << 96) | (u128::from(source_epoch) << 64) | u128::from(source_seq)
}

impl DedupSet {
    pub fn new(keys_max: usize) -> DedupSet {
        assert!(keys_max > 0, "dedup set needs room for at least one key");
        DedupSet {
            slots: FxHashMap::with_capacity_and_hasher(keys_max.min(1 << 16), Default::default()),
            order: VecDeque::with_capacity(keys_max.min(1 << 16)),
            keys_max,
        }
    }

    pub fn get(&self, key: u128) -> Option<Seen> {
        self.slots.get(&key).copied()
    }

    /// Records a new key as in flight in `batch`, forgetting the oldest key if full.
    pub fn insert_in_flight(&mut self, key: u128, batch: BatchId) {
        debug_assert!(
            !self.slots.contains_key(&key),
            "a duplicate must not be inserted twice"
        );
        if self.slots.len() >= self.keys_max {
            self.forget_oldest();
        }
        self.slots.insert(key, Seen::InFlight(batch));
        self.order.push_back(key);
        debug_assert!(self.slots.len() <= self.keys_max);
    }

    /// Marks a key committed, if it is still remembered.
    pub fn mark_committed(&mut self, key: u128) {
        if let Some(slot) = self.slots.get_mut(&key) {
            *slot = Seen::Committed;
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn forget_oldest(&mut self) {
        // `order` can hold keys already forgotten only if a key were removed elsewhere; it is
        // not, so the front is always present. Loop defensively anyway.
        while let Some(oldest) = self.order.pop_front() {
            if self.slots.remove(&oldest).is_some() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_in_flight_then_committed() {
        let mut set = DedupSet::new(4);
        let key = pack(InstanceIdx(1), 2, 3);
        assert_eq!(set.get(key), None);
        set.insert_in_flight(key, BatchId(7));
        assert_eq!(set.get(key), Some(Seen::InFlight(BatchId(7))));
        set.mark_committed(key);
        assert_eq!(set.get(key), Some(Seen::Committed));
    }

    #[test]
    fn forgets_oldest_when_full() {
        let mut set = DedupSet::new(2);
        for seq in 0..3 {
            set.insert_in_flight(pack(InstanceIdx(0), 0, seq), BatchId(0));
        }
        assert_eq!(set.len(), 2);
        assert_eq!(set.get(pack(InstanceIdx(0), 0, 0)), None);
        assert!(set.get(pack(InstanceIdx(0), 0, 2)).is_some());
    }

    #[test]
    fn packing_keeps_fields_apart() {
        assert_ne!(pack(InstanceIdx(1), 0, 0), pack(InstanceIdx(0), 1, 0));
        assert_ne!(pack(InstanceIdx(0), 1, 0), pack(InstanceIdx(0), 0, 1 << 32));
    }
}
