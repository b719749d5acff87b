//! Known bugs that can be planted on purpose, so the simulator can show that its invariant
//! checker catches each one (simulator issue: "The checker must be able to fail").
//!
//! Owns: the list of planted bugs. The switch that turns one on ([`crate::Core::plant`] here,
//! `MemoryStore::plant` in `sentinel-io`) only exists with the `planted-bugs` feature, which no
//! production build enables; without it a core can never carry a planted bug.

/// One deliberately wrong behaviour, each breaking one ordering rule or fence.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PlantedBug {
    /// Rule 1 broken: a batch's deliveries are acked when it is handed to the store, before
    /// it commits. Caught by invariant 3.
    AckBeforeCommit,
    /// `ingested_at` taken from the core's clock instead of the bus's message timestamp, so a
    /// redelivery gets a new unique-index key. Caught by invariant 1.
    IngestedAtFromCoreClock,
    /// Rules 2 and 3 broken: projection and publish driven by the submitted batch (every row,
    /// as the batch is handed to the store) instead of the RETURNING set. Caught by invariant
    /// 4: a transition for a row that is not committed.
    ProjectSubmittedBatch,
    /// The store commits without checking the epoch fence (planted in the store model).
    /// Caught by invariant 6.
    CommitWithoutFence,
}

impl PlantedBug {
    pub const ALL: [PlantedBug; 4] = [
        PlantedBug::AckBeforeCommit,
        PlantedBug::IngestedAtFromCoreClock,
        PlantedBug::ProjectSubmittedBatch,
        PlantedBug::CommitWithoutFence,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::AckBeforeCommit => "ack-before-commit",
            PlantedBug::IngestedAtFromCoreClock => "ingested-at-from-core-clock",
            PlantedBug::ProjectSubmittedBatch => "project-submitted-batch",
            PlantedBug::CommitWithoutFence => "commit-without-fence",
        }
    }

    pub fn parse(name: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.into_iter().find(|b| b.name() == name)
    }
}
