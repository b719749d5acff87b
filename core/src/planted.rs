//! Known bugs that can be planted on purpose, so the simulator can show that its invariant
//! checker catches each one (simulator issue: "The checker must be able to fail").
//!
//! Owns: the list of planted bugs. The switch that turns one on ([`crate::Core::plant`] here,
//! `MemoryStore::plant` in `sentinel-models`, `EpochGuard::plant` in `sentinel-driver`,
//! `PointArbiter::plant_ignores_band`, which the claims part calls from the core's) only
//! exists with the `planted-bugs` feature, which no production build enables; without it a
//! core, a store or a driver can never carry a planted bug. The runtime's planted bug is read
//! from the core it runs ([`crate::Core::is_planted`]).

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
    /// The store applies maintenance writes without checking the fence (planted in the store
    /// model): a deposed writer's rollup claim or apply, reprocess chunk, retention drop or
    /// class move lands, as a reprocess whose session died before its next chunk does. Caught
    /// by invariant 6, which judges every maintenance write as it judges a commit.
    MaintenanceWithoutFence,
    /// The recovery rule dropped: a `live` row raises its point to `live` even when it is no
    /// longer current (replayed backlog). Caught by invariant 13.
    LiveFromReplayedRow,
    /// The watchdog's suppression ignored: deadlines expire during the startup grace, before
    /// the first lag reading and while lag is high. Caught by invariant 14.
    StaleWhileSuppressed,
    /// The runtime carries on when its lock ownership check says the lock is gone (planted in
    /// `sentinel-runtime`). Caught by invariant 15.
    LockLossIgnored,
    /// A driver's epoch guard checks commands against the highest epoch among commands only:
    /// `core_started` announcements raise the floor it reports in its hellos but not the one
    /// it checks, so a replaced core's late command is applied (planted in `sentinel-driver`).
    /// Caught by invariant 16. (Ignoring announcements altogether is a livelock instead: the
    /// core answers every hello below its epoch with the announcement again.)
    GuardIgnoresAnnouncements,
    /// A livelock: the core asks to be woken at a freshness deadline the watchdog is holding
    /// back, so the runtime spins at one simulated instant. Caught by invariant 9's bound on
    /// events per instant.
    WakeForSuppressedDeadline,
    /// Derived points computed from the submitted batch (every row, as it is handed to the
    /// store) instead of the RETURNING set: a reading for a row that never commits, or a
    /// window holding one. Caught by invariant 17.
    DeriveFromSubmittedBatch,
    /// The rollups' late-row trigger records nothing (planted in the store model), so a row
    /// committed into a bucket already refreshed never reaches it. Caught by invariant 10.
    RollupIgnoresLateRows,
    /// The outbox's order broken: an operator's command goes to its driver as its claim's
    /// write is handed to the store, before that write commits (and whether or not it does).
    /// Caught by invariant 6: a driver applies a command no core committed under its epoch.
    PublishBeforeCommit,
    /// The resolver ignores the band: the winner is the claim of the highest priority, then
    /// the newest, whatever its band, so an automation claim newer than an operator's wins
    /// (planted in `arbitration.rs`'s `PointArbiter`, switched on by the claims part). Caught
    /// by invariant 18: `point_desired` is not the reference arbitration of the open claims.
    ResolverIgnoresBand,
    /// The event policy ignored: every committed row raises a transition, as if every point
    /// were `always` (a `never` or `on_change` point then publishes readings that changed
    /// nothing). Caught by invariant 21.
    RaiseEveryRow,
    /// The rules part decides on replayed data: a committed row that is no longer current
    /// (replayed backlog) is evaluated as if the core's time were the row's `observed_at`, so
    /// a rule claims from an observation older than its input's freshness (planted in
    /// `parts/rules.rs`). Caught by invariant 22.
    RuleOnReplayedData,
    /// A rule's warmup deadline counts time while staleness is suppressed (the startup grace,
    /// lag high), so a rule leaves warmup by its deadline during or right after a drain
    /// (planted in `parts/rules.rs`). Caught by invariant 23.
    WarmupIgnoresSuppression,
    /// A pending `for_s` asks for no timer wake at its due instant (the rules part still
    /// wakes for its inputs' freshness), so the rule fires only when a later row of an input
    /// happens to evaluate it, seconds late or not at all (planted in `parts/rules.rs`).
    /// Caught by invariant 26.
    ForSWithoutWake,
    /// The store's compaction forgets a column (planted in the store model): a compacted
    /// row comes back without its `detail`. Caught by invariant 27, which reads every
    /// compacted day back through the store's read paths against the rows committed on it.
    CompactionDropsDetail,
    /// The store's minute-rollup compaction forgets a bucket (planted in the store model): a
    /// day's first minute bucket is left out of its chunk, whether the minute rollups are
    /// compacted alone (`compact_rollup_day`) or with the day's rows. Caught by invariant 27,
    /// which reads a day's minute rollups back before and after every compaction.
    RollupCompactionDropsBucket,
}

impl PlantedBug {
    pub const ALL: [PlantedBug; 20] = [
        PlantedBug::AckBeforeCommit,
        PlantedBug::IngestedAtFromCoreClock,
        PlantedBug::ProjectSubmittedBatch,
        PlantedBug::CommitWithoutFence,
        PlantedBug::MaintenanceWithoutFence,
        PlantedBug::LiveFromReplayedRow,
        PlantedBug::StaleWhileSuppressed,
        PlantedBug::LockLossIgnored,
        PlantedBug::GuardIgnoresAnnouncements,
        PlantedBug::WakeForSuppressedDeadline,
        PlantedBug::DeriveFromSubmittedBatch,
        PlantedBug::RollupIgnoresLateRows,
        PlantedBug::PublishBeforeCommit,
        PlantedBug::ResolverIgnoresBand,
        PlantedBug::RaiseEveryRow,
        PlantedBug::RuleOnReplayedData,
        PlantedBug::WarmupIgnoresSuppression,
        PlantedBug::ForSWithoutWake,
        PlantedBug::CompactionDropsDetail,
        PlantedBug::RollupCompactionDropsBucket,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PlantedBug::AckBeforeCommit => "ack-before-commit",
            PlantedBug::IngestedAtFromCoreClock => "ingested-at-from-core-clock",
            PlantedBug::ProjectSubmittedBatch => "project-submitted-batch",
            PlantedBug::CommitWithoutFence => "commit-without-fence",
            PlantedBug::MaintenanceWithoutFence => "maintenance-without-fence",
            PlantedBug::LiveFromReplayedRow => "live-from-replayed-row",
            PlantedBug::StaleWhileSuppressed => "stale-while-suppressed",
            PlantedBug::LockLossIgnored => "lock-loss-ignored",
            PlantedBug::GuardIgnoresAnnouncements => "guard-ignores-announcements",
            PlantedBug::WakeForSuppressedDeadline => "wake-for-suppressed-deadline",
            PlantedBug::DeriveFromSubmittedBatch => "derive-from-submitted-batch",
            PlantedBug::RollupIgnoresLateRows => "rollup-ignores-late-rows",
            PlantedBug::PublishBeforeCommit => "publish-before-commit",
            PlantedBug::ResolverIgnoresBand => "resolver-ignores-band",
            PlantedBug::RaiseEveryRow => "raise-every-row",
            PlantedBug::RuleOnReplayedData => "rule-on-replayed-data",
            PlantedBug::WarmupIgnoresSuppression => "warmup-ignores-suppression",
            PlantedBug::ForSWithoutWake => "for-s-without-wake",
            PlantedBug::CompactionDropsDetail => "compaction-drops-detail",
            PlantedBug::RollupCompactionDropsBucket => "rollup-compaction-drops-bucket",
        }
    }

    pub fn parse(name: &str) -> Option<PlantedBug> {
        PlantedBug::ALL.into_iter().find(|b| b.name() == name)
    }
}
