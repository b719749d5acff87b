//! Stage 3: the fast-path dedup set on `(driver_instance, source_epoch, source_seq)` (ingest
//! spec, stage 3). The unique index is the authority; this set only saves work and, for a key
//! whose batch is still in flight, holds the duplicate's ack until that batch commits.
//!
//! Owns: a bounded map from packed key to where the key's row is, forgetting the oldest keys
//! first. Only keys of driver instances the registry knows are tracked (a message from an
//! unknown instance is quarantined at stage 5 anyway), which lets a key pack into a `u128`
//! with no allocation per observation.
//!
//! The map and the order queue start with room for the configured bound up to
//! [`PRESIZE_KEYS_MAX`] keys (or the configured `dedup_presize_keys_max`) and grow past that as
//! keys arrive. Sizing them for the whole default
//! bound (2^20) up front was measured and not kept (BENCHMARKS.md, "Issue 24 item 3"): a fresh
//! core then looks every key up in a sparse 48 MiB table, a cache miss and often a page fault
//! each, which cost more than the amortised growth it saves.

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
    /// Packed key (as two words) → [`Slot`]. Two words and a word make a 24-byte entry where a
    /// `u128` key and a `Seen` made 32 (a `u128` aligns to 16): a quarter less memory to fault
    /// in and to miss in the cache, on a table of a million keys.
    slots: FxHashMap<(u64, u64), Slot>,
    /// Insertion order, for forgetting the oldest key first.
    order: VecDeque<(u64, u64)>,
    keys_max: usize,
}

/// [`Seen`] in one word: [`Slot::COMMITTED`], or the id of the batch the key is in flight in.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
struct Slot(u64);

impl Slot {
    const COMMITTED: Slot = Slot(u64::MAX);

    fn in_flight(batch: BatchId) -> Slot {
        // Batch ids stay below `BATCH_IDS_PER_EPOCH`, far below the committed marker.
        assert!(
            batch.0 < crate::log::BATCH_IDS_PER_EPOCH,
            "batch id {} out of range",
            batch.0
        );
        Slot(batch.0)
    }

    fn seen(self) -> Seen {
        if self == Slot::COMMITTED {
            Seen::Committed
        } else {
            Seen::InFlight(BatchId(self.0))
        }
    }
}

fn words(key: u128) -> (u64, u64) {
    ((key >> 64) as u64, key as u64)
}

/// The most keys the set reserves room for when it is made; a larger `dedup_keys_max` grows
/// past this as keys arrive (2^17 slots of 24 bytes: 3 MiB, which stays in cache while sparse).
pub const PRESIZE_KEYS_MAX: usize = 1 << 16;

pub fn pack(instance: InstanceIdx, source_epoch: u32, source_seq: u64) -> u128 {
    (u128::from(instance.0) << 96) | (u128::from(source_epoch) << 64) | u128::from(source_seq)
}

impl DedupSet {
    pub fn new(keys_max: usize) -> DedupSet {
        DedupSet::with_presize(keys_max, PRESIZE_KEYS_MAX)
    }

    /// [`DedupSet::new`] reserving room for `keys_max` keys up to `presize_keys_max` (at
    /// least one): how much it holds and forgets is the same whatever the presize.
    pub fn with_presize(keys_max: usize, presize_keys_max: usize) -> DedupSet {
        assert!(keys_max > 0, "dedup set needs room for at least one key");
        let presize = keys_max.min(presize_keys_max.max(1));
        let set = DedupSet {
            slots: FxHashMap::with_capacity_and_hasher(presize, Default::default()),
            order: VecDeque::with_capacity(presize),
            keys_max,
        };
        debug_assert!(set.slots.capacity() >= presize && set.order.capacity() >= presize);
        set
    }

    pub fn get(&self, key: u128) -> Option<Seen> {
        self.slots.get(&words(key)).map(|slot| slot.seen())
    }

    /// Records a new key as in flight in `batch`, forgetting the oldest key if full.
    pub fn insert_in_flight(&mut self, key: u128, batch: BatchId) {
        let key = words(key);
        debug_assert!(
            !self.slots.contains_key(&key),
            "a duplicate must not be inserted twice"
        );
        if self.slots.len() >= self.keys_max {
            self.forget_oldest();
        }
        self.slots.insert(key, Slot::in_flight(batch));
        self.order.push_back(key);
        debug_assert!(self.slots.len() <= self.keys_max);
    }

    /// Marks a key committed, if it is still remembered.
    pub fn mark_committed(&mut self, key: u128) {
        if let Some(slot) = self.slots.get_mut(&words(key)) {
            *slot = Slot::COMMITTED;
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Keys the set holds without growing.
    pub fn capacity(&self) -> usize {
        self.slots.capacity().min(self.order.capacity())
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
    fn sized_for_its_bound_up_front_within_the_limit() {
        let set = DedupSet::new(50_000);
        assert!(set.capacity() >= 50_000, "capacity {}", set.capacity());
        let big = DedupSet::new(PRESIZE_KEYS_MAX * 4);
        assert!(big.capacity() >= PRESIZE_KEYS_MAX, "capacity {}", big.capacity());
        assert!(
            big.capacity() < PRESIZE_KEYS_MAX * 4,
            "capacity {}",
            big.capacity()
        );
    }

    #[test]
    fn filling_to_the_bound_never_grows_the_set() {
        let keys_max = 60_000;
        let mut set = DedupSet::new(keys_max);
        let capacity = (set.slots.capacity(), set.order.capacity());
        for seq in 0..(keys_max as u64 * 10) {
            set.insert_in_flight(pack(InstanceIdx(seq as u32 % 7), 3, seq), BatchId(1));
        }
        assert_eq!(set.len(), keys_max);
        assert_eq!(
            (set.slots.capacity(), set.order.capacity()),
            capacity,
            "the set grew while keys came and went at its bound"
        );
    }

    #[test]
    fn a_smaller_presize_changes_room_not_what_is_remembered() {
        let keys_max = 3_000;
        let mut full = DedupSet::new(keys_max);
        let mut small = DedupSet::with_presize(keys_max, 64);
        assert!(small.capacity() >= 64 && small.capacity() < keys_max);
        assert!(full.capacity() >= keys_max);
        for seq in 0..(keys_max as u64 * 3) {
            let key = pack(InstanceIdx(seq as u32 % 5), 1, seq);
            assert_eq!(full.get(key), small.get(key));
            full.insert_in_flight(key, BatchId(seq % 9));
            small.insert_in_flight(key, BatchId(seq % 9));
            if seq % 2 == 0 {
                full.mark_committed(key);
                small.mark_committed(key);
            }
            let old = pack(InstanceIdx((seq / 2) as u32 % 5), 1, seq / 2);
            assert_eq!(full.get(old), small.get(old), "after key {seq}");
        }
        assert_eq!(full.len(), small.len());
        assert!(DedupSet::with_presize(10, 0).capacity() >= 1);
    }

    #[test]
    fn an_entry_is_three_words() {
        assert_eq!(std::mem::size_of::<((u64, u64), Slot)>(), 24);
        let key = pack(InstanceIdx(u32::MAX), u32::MAX, u64::MAX);
        let mut set = DedupSet::new(2);
        set.insert_in_flight(key, BatchId(crate::log::BATCH_IDS_PER_EPOCH - 1));
        assert_eq!(
            set.get(key),
            Some(Seen::InFlight(BatchId(crate::log::BATCH_IDS_PER_EPOCH - 1)))
        );
        assert_eq!(set.get(key - 1), None, "the words keep every bit of the key");
        assert_eq!(
            set.get(key ^ (1 << 64)),
            None,
            "the words keep every bit of the key"
        );
    }

    #[test]
    fn packing_keeps_fields_apart() {
        assert_ne!(pack(InstanceIdx(1), 0, 0), pack(InstanceIdx(0), 1, 0));
        assert_ne!(pack(InstanceIdx(0), 1, 0), pack(InstanceIdx(0), 0, 1 << 32));
    }
}
