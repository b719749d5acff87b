//! Invariant 6's write half: no write lands unless its writer holds the lock (DESIGN.md §5;
//! core runtime spec, "Single writer"; issue 25 item 3: the fence is the epoch *and* the start
//! identity; issue 24: maintenance is judged as commits are).
//!
//! Owns: the judgement of one write the store accepted, [`judge`], against the holder the store
//! recorded at that moment — the epoch the write carries must be the current epoch, and the
//! start identity of the handle that wrote it must be the holder's (a writer of the same
//! epoch after a lossy database failover is another process); and the record of maintenance
//! writes ([`Maintenance`]): how many of each kind landed and how many the fence refused.
//! Every write path of the simulator's store adapter reaches [`judge`]: commits, checkpoints,
//! control events, cold-start records, and every maintenance write, the running core's and the
//! operator's commands' alike (`crate::adapters::SimStore::maintenance_write`). A later
//! maintenance operation (a `compaction`) joins by naming its kind here and writing through
//! that same function.

/// One side of the fence: an epoch and a start identity (`None`: a handle that never
/// acquired, which the fence refuses, or a holder with none).
pub type Fence = (u32, Option<u64>);

/// A maintenance write, by kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Maintenance {
    /// The running core's rollup step, first half (`sentinel_rollup_claim`).
    RollupClaim,
    /// Its second half (`sentinel_rollup_apply`).
    RollupApply,
    /// An on-demand `sentinel rollup refresh` (the operator's or a reprocess's).
    RollupRefresh,
    /// One chunk of a reprocess's row updates.
    ReprocessChunk,
    /// A reprocess's `reprocess` control event.
    ReprocessEvent,
    /// A retention drop of expired partitions.
    RetentionDrop,
    /// A point's move to another retention class.
    ClassMove,
    /// A compaction of a closed day (issue 24 item 1): the hook for the store operation when
    /// it lands; nothing writes it yet.
    Compaction,
}

impl Maintenance {
    pub const ALL: [Maintenance; 8] = [
        Maintenance::RollupClaim,
        Maintenance::RollupApply,
        Maintenance::RollupRefresh,
        Maintenance::ReprocessChunk,
        Maintenance::ReprocessEvent,
        Maintenance::RetentionDrop,
        Maintenance::ClassMove,
        Maintenance::Compaction,
    ];

    /// How a violation names it.
    pub fn what(self) -> &'static str {
        match self {
            Maintenance::RollupClaim => "a rollup claim",
            Maintenance::RollupApply => "a rollup step",
            Maintenance::RollupRefresh => "a rollup refresh",
            Maintenance::ReprocessChunk => "a reprocess chunk",
            Maintenance::ReprocessEvent => "a reprocess event",
            Maintenance::RetentionDrop => "a retention drop",
            Maintenance::ClassMove => "a class move",
            Maintenance::Compaction => "a compaction",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Maintenance writes of a run, by kind ([`Maintenance::ALL`]'s order): landed (and judged),
/// and refused by the store's fence.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MaintenanceRecord {
    pub landed: [u64; Maintenance::ALL.len()],
    pub refused: [u64; Maintenance::ALL.len()],
}

impl MaintenanceRecord {
    pub fn on_landed(&mut self, kind: Maintenance) {
        self.landed[kind.index()] += 1;
    }

    pub fn on_refused(&mut self, kind: Maintenance) {
        self.refused[kind.index()] += 1;
    }

    pub fn landed_total(&self) -> u64 {
        self.landed.iter().sum()
    }

    pub fn refused_total(&self) -> u64 {
        self.refused.iter().sum()
    }
}

/// Invariant 6 for a write the store accepted: `writer` (the epoch it carried, its handle's
/// start identity) must be `holder` (the epoch and holder identity recorded just before it;
/// nothing runs between the two in the model). `Err` says what landed.
pub fn judge(what: &str, writer: Fence, holder: Fence) -> Result<(), String> {
    let ((epoch, start), (current, current_start)) = (writer, holder);
    if epoch != current {
        return Err(format!(
            "{what} of deposed epoch {epoch} landed while epoch {current} is current"
        ));
    }
    if start.is_none() || start != current_start {
        return Err(format!(
            "{what} of epoch {epoch} by start {start:?} landed while start {current_start:?} \
             holds that epoch"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_holder_lands() {
        assert_eq!(judge("a commit", (3, Some(7)), (3, Some(7))), Ok(()));
        let deposed = judge("a rollup step", (2, Some(7)), (3, Some(9))).unwrap_err();
        assert!(deposed.contains("deposed epoch 2"), "{deposed}");
        // An epoch repeated after a lossy failover: the same epoch, another process.
        let other = judge("a reprocess chunk", (3, Some(7)), (3, Some(9))).unwrap_err();
        assert!(other.contains("by start Some(7)"), "{other}");
        // A handle that never acquired matches nothing.
        assert!(judge("a retention drop", (3, None), (3, None)).is_err());
    }

    #[test]
    fn maintenance_kinds_are_counted_apart() {
        let mut record = MaintenanceRecord::default();
        record.on_landed(Maintenance::ReprocessChunk);
        record.on_landed(Maintenance::ReprocessChunk);
        record.on_refused(Maintenance::Compaction);
        assert_eq!(record.landed[Maintenance::ReprocessChunk.index()], 2);
        assert_eq!(record.refused[Maintenance::Compaction.index()], 1);
        assert_eq!((record.landed_total(), record.refused_total()), (2, 1));
        for (n, kind) in Maintenance::ALL.into_iter().enumerate() {
            assert_eq!(kind.index(), n);
        }
    }
}
