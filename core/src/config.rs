//! The core's limits and tunables. Every bound the core enforces is here, with its unit last.

/// Limits and intervals for one core. Defaults follow the ingest spec where it names a figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Stage 11: flush a batch at this many rows plus quarantine entries (spec: 500).
    pub batch_rows_max: usize,
    /// Stage 11: flush a non-empty batch this long after its first entry (spec: 100 ms).
    pub flush_interval_ms: i64,
    /// Batches handed to the store and not yet answered. Beyond this the core stops accepting.
    pub inflight_batches_max: usize,
    /// Stage 3: keys remembered by the fast-path dedup set (oldest forgotten first).
    pub dedup_keys_max: usize,
    /// Stage 3: keys the dedup set reserves room for when a core starts (at most
    /// `dedup_keys_max`); it grows past this as keys arrive. Cost only, never behaviour: a core
    /// that holds few keys (the simulator's, restarted a dozen times a run) need not fault in
    /// a table sized for a production stream. Default [`crate::dedup::PRESIZE_KEYS_MAX`].
    pub dedup_presize_keys_max: usize,
    /// Stage 2: larger payloads are quarantined as `oversized`, stored truncated to this.
    pub envelope_bytes_max: usize,
    /// Stage 2: `observed_at` later than `ingested_at` plus this is `future_timestamp`.
    pub observed_future_max_ms: i64,
    /// Stage 9: `|device_time − observed_at|` above this sets `skew_flagged`.
    pub device_skew_max_ms: i64,
    /// Stage 7: text values longer than this are `bad` (`text_too_long`).
    pub text_value_bytes_max: usize,
    /// Checkpoint: a value-only change is written at most this often per point (spec: 5 s).
    pub checkpoint_value_interval_ms: i64,
    /// Checkpoint: every dirty point is written at least this often (spec: 30 s).
    pub checkpoint_full_interval_ms: i64,
    /// Points in one checkpoint effect.
    pub checkpoint_points_max: usize,
    /// Watchdog: no staleness for this long after the core starts (startup grace).
    pub startup_grace_ms: i64,
    /// Watchdog: staleness is suppressed while the oldest unacked message is at least this
    /// old...
    pub lag_high_age_ms: u64,
    /// ...or at least this many messages are not yet committed: pending delivery plus
    /// delivered and unacked (core runtime spec, "Backpressure").
    pub lag_high_pending: u64,
    /// Watchdog expiries handled in one tick; the rest wait for the next.
    pub watchdog_expiries_per_tick_max: usize,
    /// How often the core publishes its self-points (0: never). Below the self-points'
    /// `freshness_s` (10 s in the sample registry), or they would go stale between readings.
    pub self_points_interval_ms: i64,
    /// How often the core publishes the health points it generates per driver host and per
    /// device (`registry::health`; 0: never, and so does a `self_points_interval_ms` of 0:
    /// they are self-points). Their declared rate assumes the default.
    pub health_points_interval_ms: i64,
    /// The running core's refresh of closed rollup buckets (`rollup.rs`).
    pub rollups: crate::rollup::RollupConfig,
    /// How long raw rows and rollups are kept (`retention.rs`).
    pub retention: crate::retention::RetentionConfig,
    /// The running core's partitions made ahead (`partitions.rs`).
    pub partitions: crate::partitions::PartitionsConfig,
    /// The running core's compaction of closed days (`compaction.rs`).
    pub compaction: crate::compaction::CompactionConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            batch_rows_max: 500,
            flush_interval_ms: 100,
            inflight_batches_max: 4,
            dedup_keys_max: 1 << 20,
            dedup_presize_keys_max: crate::dedup::PRESIZE_KEYS_MAX,
            envelope_bytes_max: 16 * 1024,
            observed_future_max_ms: 5 * 60 * 1000,
            device_skew_max_ms: 2_000,
            text_value_bytes_max: 1024,
            checkpoint_value_interval_ms: 5_000,
            checkpoint_full_interval_ms: 30_000,
            checkpoint_points_max: 5_000,
            startup_grace_ms: 60_000,
            lag_high_age_ms: 30_000,
            lag_high_pending: 5_000,
            watchdog_expiries_per_tick_max: 1_000,
            self_points_interval_ms: 5_000,
            health_points_interval_ms: i64::from(crate::registry::health::HEALTH_INTERVAL_S) * 1_000,
            rollups: crate::rollup::RollupConfig::default(),
            retention: crate::retention::RetentionConfig::default(),
            partitions: crate::partitions::PartitionsConfig::default(),
            compaction: crate::compaction::CompactionConfig::default(),
        }
    }
}

impl Config {
    /// Checks the configuration's own consistency; the core asserts this on construction.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("batch_rows_max", self.batch_rows_max as i64),
            ("flush_interval_ms", self.flush_interval_ms),
            ("inflight_batches_max", self.inflight_batches_max as i64),
            ("dedup_keys_max", self.dedup_keys_max as i64),
            ("envelope_bytes_max", self.envelope_bytes_max as i64),
            ("checkpoint_value_interval_ms", self.checkpoint_value_interval_ms),
            ("checkpoint_full_interval_ms", self.checkpoint_full_interval_ms),
            ("checkpoint_points_max", self.checkpoint_points_max as i64),
            ("lag_high_age_ms", self.lag_high_age_ms as i64),
            ("lag_high_pending", self.lag_high_pending as i64),
            (
                "watchdog_expiries_per_tick_max",
                self.watchdog_expiries_per_tick_max as i64,
            ),
        ];
        for (name, value) in positive {
            if value <= 0 {
                return Err(format!("{name} must be positive, got {value}"));
            }
        }
        if self.batch_rows_max > 10_000 {
            return Err(format!("batch_rows_max {} exceeds 10000", self.batch_rows_max));
        }
        if self.self_points_interval_ms < 0 {
            return Err("self_points_interval_ms must not be negative (0 turns them off)".into());
        }
        if self.health_points_interval_ms < 0 {
            return Err("health_points_interval_ms must not be negative (0 turns them off)".into());
        }
        self.rollups.validate()?;
        self.retention.validate()?;
        self.partitions.validate()?;
        self.compaction.validate()?;
        if self.startup_grace_ms < 0 {
            return Err("startup_grace_ms must not be negative".into());
        }
        if self.observed_future_max_ms < 0 || self.device_skew_max_ms < 0 {
            return Err("skew bounds must not be negative".into());
        }
        Ok(())
    }
}
