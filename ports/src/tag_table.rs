//! The bounded table a bus adapter keeps to map the core's opaque [`DeliveryTag`]s back to its
//! own ack token. Shared by the NATS adapter and the in-memory model, so both bound it alike.

use std::collections::VecDeque;

use sentinel_core::DeliveryTag;

/// Maps delivery tags, issued in increasing order, to a bus's ack token.
///
/// Tags are a counter, so the table is a ring indexed by `tag - first_tag`: O(1) insert,
/// lookup and removal with no hashing. Bounded by `entries_max`: when full, the oldest entry
/// is evicted, which turns that delivery's later ack into a no-op. That is safe — the message
/// is redelivered after `ack_wait` and the dedup key makes redelivery harmless — and it only
/// happens when the core holds far more unacked deliveries than `max_ack_pending` allows, i.e.
/// tags that will never be acked (a dropped batch).
#[derive(Debug)]
pub struct TagTable<T> {
    first_tag: u64,
    slots: VecDeque<Option<T>>,
    entries_max: usize,
    evicted_total: u64,
}

impl<T> TagTable<T> {
    pub fn new(entries_max: usize) -> Self {
        TagTable {
            first_tag: 1,
            slots: VecDeque::new(),
            entries_max: entries_max.max(1),
            evicted_total: 0,
        }
    }

    /// Stores `token` under a fresh tag and returns the tag.
    pub fn insert(&mut self, token: T) -> DeliveryTag {
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
    pub fn remove(&mut self, tag: DeliveryTag) -> Option<T> {
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
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// How many entries were evicted to keep the bound.
    pub fn evicted_total(&self) -> u64 {
        self.evicted_total
    }

    /// Forgets every entry: their acks become no-ops. Tags keep increasing so an old tag can
    /// never name a new delivery.
    pub fn clear(&mut self) {
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
