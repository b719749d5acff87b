//! Per-seed settings: which fault sites are switched on, and every tunable a run draws from
//! its seed (DESIGN.md §6, FoundationDB's BUGGIFY). Printed at the start of every run so a
//! failing seed's conditions can be read without replaying it.

use std::collections::BTreeSet;
use std::fmt;

use crate::rng::SimRng;

/// Simulated wall-clock start of every run: 2026-01-01T00:00:00Z.
pub const START_UNIX_S: u64 = 1_767_225_600;

/// A place where the simulator injects a fault. Each is switched on for a run with
/// probability [`SITE_ACTIVE_P`]; an active site then fires at random at each opportunity.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Site {
    /// The core process dies as it hands a batch to the store.
    CrashBeforeCommit,
    /// The core dies after the store committed a batch, before the core saw the result.
    CrashAfterCommit,
    /// The core dies after an ack reached the bus, before the effects after it (publishes).
    CrashAfterAck,
    /// An ack is lost on the way to the bus (plain JetStream acks are not confirmed).
    LostAck,
    /// Every in-flight delivery's ack_wait expires at once, forcing redelivery.
    AckWaitExpiry,
    /// A driver publishes the same message (same `Nats-Msg-Id`) again.
    PublisherRetry,
    /// The lock-holding database session dies.
    LockSessionKilled,
    /// A core loses its store links for a while (its session and lock die with them).
    PartitionStore,
    /// A core loses its bus links for a while.
    PartitionBus,
    /// Commits take up to twice ack_wait, so deliveries are redelivered while in flight.
    SlowCommit,
    /// The stream is small and fills while a core is down; drivers must queue and retry.
    FullStream,
    /// A new registry version is stored mid-stream; the next core to start uses it.
    RegistryReload,
    /// The bus holds one core's messages to drivers for seconds (as in the dangerous window),
    /// so a command can reach its driver after a newer core's announcement.
    SlowDriverLink,
    /// The lock holder's session dies while no other core runs (in a two-core run the
    /// standby is held down for a while), so only the holder's own lock check can stop it.
    LockSessionKilledAlone,
    /// The core dies between the two halves of a rollup step (claim committed, apply not):
    /// the next step must finish the claim.
    CrashMidRollupStep,
    /// While the lock is free (its holder just crashed), the operator runs `sentinel rollup
    /// refresh` over a recent range, under the lock, as drivers keep publishing; half the time
    /// the operator's session dies right after instead of releasing.
    OperatorRollupRefresh,
    /// While the lock is free, the operator loads registry version 2 (which corrects a
    /// point's conversion) and runs `sentinel reprocess` for that point over the last minutes,
    /// under the lock; half the time the run is cut off between chunks (its session dies and
    /// the restarting core takes the lock).
    OperatorReprocess,
    /// The stream's leader changes (issue 25; docs/deploy.md, "Losing a node, a stream leader
    /// or a consumer leader"): for an election's 4–9 s every publish into the stream is refused
    /// or loses its ack (some land, the driver does not hear so and retries with the same
    /// message id), the core's pulls stall or fail, its acks and lag requests are lost, and its
    /// self-point publishes fail.
    StreamLeaderChange,
    /// The database primary dies and a synchronous standby is promoted (issue 25; docs/deploy.md,
    /// "Losing the primary"): every lock session dies at once, the store answers no
    /// core for a promotion's 1–10 s, then the new primary answers with every commit.
    DatabaseFailover,
    /// As `database_failover`, but the standby replicated asynchronously (or a synchronous wait
    /// was cancelled): it is 0.2–3 s behind, so every commit of those last seconds is lost,
    /// epoch increments included, and the next core may take an epoch a lost core had
    /// (docs/deploy.md, "Without synchronous replication").
    DatabaseFailoverLostCommits,
    /// The store holds a previous deployment's log of closed days eight days and more old;
    /// while the lock is free, the operator runs `sentinel compact` on some of those days one
    /// by one, under the lock, as drivers keep publishing; half the time the run is cut off
    /// between two days (its session dies and the restarting core takes the lock).
    OperatorCompact,
}

impl Site {
    pub const ALL: [Site; 21] = [
        Site::CrashBeforeCommit,
        Site::CrashAfterCommit,
        Site::CrashAfterAck,
        Site::LostAck,
        Site::AckWaitExpiry,
        Site::PublisherRetry,
        Site::LockSessionKilled,
        Site::PartitionStore,
        Site::PartitionBus,
        Site::SlowCommit,
        Site::FullStream,
        Site::RegistryReload,
        Site::SlowDriverLink,
        Site::LockSessionKilledAlone,
        Site::CrashMidRollupStep,
        Site::OperatorRollupRefresh,
        Site::OperatorReprocess,
        Site::StreamLeaderChange,
        Site::DatabaseFailover,
        Site::DatabaseFailoverLostCommits,
        Site::OperatorCompact,
    ];
    /// Sites added after the first twelve are drawn from a generator of their own, so the
    /// seeds of `sim/tests/regressions.rs` keep the settings and runs they failed with.
    const DRAWN_FIRST: usize = 12;

    pub fn name(self) -> &'static str {
        match self {
            Site::CrashBeforeCommit => "crash_before_commit",
            Site::CrashAfterCommit => "crash_after_commit",
            Site::CrashAfterAck => "crash_after_ack",
            Site::LostAck => "lost_ack",
            Site::AckWaitExpiry => "ack_wait_expiry",
            Site::PublisherRetry => "publisher_retry",
            Site::LockSessionKilled => "lock_session_killed",
            Site::PartitionStore => "partition_core_store",
            Site::PartitionBus => "partition_core_bus",
            Site::SlowCommit => "slow_commit",
            Site::FullStream => "full_stream",
            Site::RegistryReload => "registry_reload",
            Site::SlowDriverLink => "slow_driver_link",
            Site::LockSessionKilledAlone => "lock_session_killed_alone",
            Site::CrashMidRollupStep => "crash_mid_rollup_step",
            Site::OperatorRollupRefresh => "operator_rollup_refresh",
            Site::OperatorReprocess => "operator_reprocess",
            Site::StreamLeaderChange => "stream_leader_change",
            Site::DatabaseFailover => "database_failover",
            Site::DatabaseFailoverLostCommits => "database_failover_lost_commits",
            Site::OperatorCompact => "operator_compact",
        }
    }
}

/// BUGGIFY: a site is active in a run with this probability...
pub const SITE_ACTIVE_P: f64 = 0.25;
/// ...and an active site fires at each of its opportunities with this probability. Sites at
/// the ports get an opportunity per call; the controller's sites one per simulated second.
pub const PORT_FIRE_P: f64 = 0.05;
pub const CONTROLLER_FIRE_P: f64 = 0.04;
/// A database failover's chance per simulated second: one every couple of minutes, so a
/// run sees a few, each with its promotion window and restart.
pub const FAILOVER_FIRE_P: f64 = 0.01;

/// Mixed into the seed for the generator that draws the later sites' activity.
const LATER_SITES_STREAM: u64 = 0x5eed_0000_0000_0d0d;

/// Everything a run draws from its seed before it starts.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    pub seed: u64,
    /// Two core hosts contend for the lock; otherwise one core restarts after each exit.
    pub two_cores: bool,
    /// Observations the drivers publish in all (each distinct, before retries).
    pub messages: u64,
    /// Simulated time of the safety phase (faults on, traffic flowing).
    pub safety_ms: u64,
    /// Traffic continues this long into the liveness phase, with faults healed.
    pub liveness_traffic_ms: u64,
    /// The whole run lasts at least this long (simulated).
    pub run_min_ms: u64,
    /// After faults heal, everything must have drained within this (invariant 9).
    pub drain_bound_ms: u64,
    pub ack_wait_ms: u64,
    pub duplicate_window_ms: u64,
    pub stream_max_msgs: u64,
    pub lock_check_interval_ms: u64,
    pub restart_delay_max_ms: u64,
    pub dedup_keys_max: usize,
    /// Per mille of messages: late (buffered minutes on the device), skewed device clock,
    /// malformed, unknown point, misassigned (a host publishing another host's point).
    pub late_permille: u64,
    pub skew_permille: u64,
    pub malformed_permille: u64,
    pub unknown_permille: u64,
    pub misassigned_permille: u64,
    /// How long one turmoil step advances every host's clock.
    pub tick_ms: u64,
    pub active: BTreeSet<Site>,
}

impl Settings {
    /// Draws a run's settings: the first values of the run's one generator.
    pub fn draw(seed: u64, rng: &mut SimRng) -> Settings {
        let mut active = BTreeSet::new();
        for site in &Site::ALL[..Site::DRAWN_FIRST] {
            if rng.chance(SITE_ACTIVE_P) {
                active.insert(*site);
            }
        }
        let ack_wait_ms = rng.between(2, 10) * 1_000;
        let mut settings = Settings {
            seed,
            two_cores: rng.chance(0.5),
            messages: rng.between(2_000, 2_600),
            safety_ms: 8 * 60_000,
            liveness_traffic_ms: 30_000,
            run_min_ms: 10 * 60_000,
            drain_bound_ms: 4 * 60_000,
            ack_wait_ms,
            duplicate_window_ms: rng.between(20, 120) * 1_000,
            stream_max_msgs: if active.contains(&Site::FullStream) {
                rng.between(20, 200)
            } else {
                1_000_000
            },
            lock_check_interval_ms: rng.between(2, 10) * 100,
            restart_delay_max_ms: rng.between(1, 5) * 1_000,
            dedup_keys_max: if rng.chance(0.3) { 64 } else { 1 << 16 },
            late_permille: rng.between(0, 40),
            skew_permille: rng.between(0, 40),
            malformed_permille: rng.between(0, 10),
            unknown_permille: rng.between(0, 10),
            misassigned_permille: rng.between(0, 10),
            tick_ms: 500,
            active,
        };
        // From a generator of their own, so the run's draws after the settings stay as they
        // were too.
        let mut later = SimRng::new(seed ^ LATER_SITES_STREAM);
        for site in &Site::ALL[Site::DRAWN_FIRST..] {
            if later.chance(SITE_ACTIVE_P) {
                settings.active.insert(*site);
            }
        }
        settings
    }

    pub fn is_active(&self, site: Site) -> bool {
        self.active.contains(&site)
    }
}

impl fmt::Display for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sites: Vec<&str> = self.active.iter().map(|s| s.name()).collect();
        write!(
            f,
            "seed={} cores={} messages={} safety_ms={} drain_bound_ms={} ack_wait_ms={} \
             duplicate_window_ms={} stream_max_msgs={} lock_check_interval_ms={} \
             restart_delay_max_ms={} dedup_keys_max={} permille(late={} skew={} malformed={} \
             unknown={} misassigned={}) tick_ms={} faults=[{}]",
            self.seed,
            if self.two_cores { 2 } else { 1 },
            self.messages,
            self.safety_ms,
            self.drain_bound_ms,
            self.ack_wait_ms,
            self.duplicate_window_ms,
            self.stream_max_msgs,
            self.lock_check_interval_ms,
            self.restart_delay_max_ms,
            self.dedup_keys_max,
            self.late_permille,
            self.skew_permille,
            self.malformed_permille,
            self.unknown_permille,
            self.misassigned_permille,
            self.tick_ms,
            sites.join(",")
        )
    }
}
