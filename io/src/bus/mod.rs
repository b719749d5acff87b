//! Bus adapters: NATS JetStream ([`nats`]) and the in-memory reference model ([`memory`]).
//!
//! Owns: the two implementations of the [`crate::ports::Bus`] port and what they share — the
//! publish acknowledgement shape ([`PublishAck`]), the bound on a fetch ([`FETCH_MAX`]) and the
//! bounded table mapping the core's opaque [`DeliveryTag`]s back to a bus's own ack token
//! ([`TagTable`]).
//!
//! Semantics both keep (core runtime spec, "Buffer sizing" and "Backpressure"; DESIGN.md §2,
//! §6): one stream `OBS` on `obs.>`, bounded by messages and bytes and never by age, WorkQueue
//! retention (an ack removes the message, so "full" means backlog), discard-new (a full stream
//! rejects the publisher), a duplicate window keyed by `Nats-Msg-Id`, one durable pull
//! consumer with explicit acks that redelivers an unacked message after `ack_wait_ms` with the
//! same stream sequence and the same timestamp. `tests/bus_conformance.rs` checks that both
//! adapters agree on all of it.

pub mod memory;
pub mod nats;

use std::collections::VecDeque;

use sentinel_core::DeliveryTag;

pub use memory::{MemoryBus, MemoryBusConfig, MemoryConsumer, PublishedMessage};
pub use nats::{NatsBus, NatsBusConfig, NatsConsumer, NatsSetupError};

/// The most deliveries one `fetch` may ask for. A larger request is clamped: one fetch must
/// never hold more than a few batches' worth of messages in memory.
pub const FETCH_MAX: usize = 10_000;

/// What a stream answers to an accepted publish (the driver library's type).
pub use sentinel_driver::PublishAck;

/// Maps delivery tags, issued in increasing order, to a bus's ack token.
///
/// Tags are a counter, so the table is a ring indexed by `tag - first_tag`: O(1) insert,
/// lookup and removal with no hashing. Bounded by `entries_max`: when full, the oldest entry
/// is evicted, which turns that delivery's later ack into a no-op. That is safe — the message
/// is redelivered after `ack_wait` and the dedup key makes redelivery harmless — and it only
/// happens when the core holds far more unacked deliveries than `max_ack_pending` allows, i.e.
/// tags that will never be acked (a dropped batch).
#[derive(Debug)]
pub(crate) struct TagTable<T> {
    first_tag: u64,
    slots: VecDeque<Option<T>>,
    entries_max: usize,
    evicted_total: u64,
}

impl<T> TagTable<T> {
    pub(crate) fn new(entries_max: usize) -> Self {
        TagTable {
            first_tag: 1,
            slots: VecDeque::new(),
            entries_max: entries_max.max(1),
            evicted_total: 0,
        }
    }

    /// Stores `token` under a fresh tag and returns the tag.
    pub(crate) fn insert(&mut self, token: T) -> DeliveryTag {
        while self.slots.len() >= self.entries_max {
            if self.slots.pop_front().flatten().is_some() {
                self.evicted_total += 1;
            }
            self.first_tag += 1;
        }
        let tag = self.first_tag + self.slots.len() as u64;
        self.slots.push_back(Some(token));
        DeliveryTag(tag)
    }

    /// Removes and returns the token for `tag`; `None` for an unknown or already used tag.
    pub(crate) fn remove(&mut self, tag: DeliveryTag) -> Option<T> {
        let index = tag.0.checked_sub(self.first_tag)?;
        let token = self.slots.get_mut(usize::try_from(index).ok()?)?.take();
        // Keep the ring short: drop used slots from the front so `first_tag` advances.
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.first_tag += 1;
        }
        token
    }

    /// Number of live (issued, not yet removed) entries, counting holes as entries.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// How many entries were evicted to keep the bound.
    pub(crate) fn evicted_total(&self) -> u64 {
        self.evicted_total
    }

    /// Forgets every entry: their acks become no-ops. Tags keep increasing so an old tag can
    /// never name a new delivery.
    pub(crate) fn clear(&mut self) {
        self.first_tag += self.slots.len() as u64;
        self.slots.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_increase_and_remove_once() {
        let mut table = TagTable::new(4);
        let a = table.insert("a");
        let b = table.insert("b");
        assert!(b > a);
        assert_eq!(table.remove(b), Some("b"));
        assert_eq!(table.remove(b), None);
        assert_eq!(table.remove(a), Some("a"));
        assert_eq!(table.len(), 0);
        assert_eq!(table.remove(DeliveryTag(999)), None);
        assert_eq!(table.remove(DeliveryTag(0)), None);
    }

    #[test]
    fn bound_evicts_oldest() {
        let mut table = TagTable::new(2);
        let a = table.insert(1);
        let b = table.insert(2);
        let c = table.insert(3);
        assert_eq!(table.remove(a), None);
        assert_eq!(table.evicted_total(), 1);
        assert_eq!(table.remove(b), Some(2));
        assert_eq!(table.remove(c), Some(3));
    }

    #[test]
    fn clear_never_reuses_tags() {
        let mut table = TagTable::new(8);
        let a = table.insert(1);
        table.clear();
        let b = table.insert(2);
        assert!(b > a);
        assert_eq!(table.remove(a), None);
    }
}
