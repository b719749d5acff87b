//! Counters the core keeps about itself: the figures the demo prints, `sentinel status` shows
//! and the self-points carry. Counting happens where the fact is decided, so nothing is
//! counted twice.

use crate::log::QuarantineReason;
use crate::registry::RetentionClass;

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Metrics {
    /// Deliveries handed to the core, redeliveries included.
    pub delivered: u64,
    /// Rows inserted (in a RETURNING set), per retention class.
    pub rows_inserted: [u64; 3],
    /// Rows the unique index swallowed (redeliveries of committed rows).
    pub rows_conflicted: u64,
    /// Inserted rows with quality `bad` (stages 6–8).
    pub rows_bad: u64,
    /// Quarantine entries committed, per reason (redelivered entries counted again).
    pub quarantined: [u64; QuarantineReason::ALL.len()],
    /// Duplicates recognised by stage 3.
    pub duplicates_fast_path: u64,
    pub transitions_published: u64,
    /// Derived readings computed from committed rows and published into the stream.
    pub derived_readings: u64,
    pub batches_committed: u64,
    pub acks: u64,
    pub checkpoint_points: u64,
    /// Control events the core asked the store to write (watchdog quality changes, commands).
    pub control_events: u64,
    /// Commands published to drivers, after their `command_issued` event committed.
    pub commands_issued: u64,
    /// Command requests refused (unknown point, missing principal, bad id or value).
    pub commands_refused: u64,
    /// Driver hellos received (restart step 7), and of those: from an instance no point is
    /// assigned to, from an instance that has seen a newer core's epoch, and answered with the
    /// announcement again because the instance had not seen this core's.
    pub driver_hellos: u64,
    pub driver_hellos_unknown: u64,
    pub driver_hellos_ahead: u64,
    pub driver_reannouncements: u64,
    /// Driver instances now connecting, connected and ready (a gauge, as
    /// `DriverState::ALL` orders them).
    pub drivers: [u64; 3],
    /// The last lag reading from the durable consumer.
    pub lag_pending: u64,
    pub lag_oldest_unacked_age_ms: u64,
}

impl Metrics {
    pub fn rows_in(&self, class: RetentionClass) -> u64 {
        self.rows_inserted[class.index()]
    }

    pub fn quarantined_for(&self, reason: QuarantineReason) -> u64 {
        self.quarantined[reason as usize]
    }

    pub fn quarantined_total(&self) -> u64 {
        self.quarantined.iter().sum()
    }

    /// The security signal of stage 5, counted on its own (ingest spec, stage 5).
    pub fn wrong_instance(&self) -> u64 {
        self.quarantined_for(QuarantineReason::WrongInstance)
    }
}
