//! What several subcommands share: the connection flags ([`DbArgs`], [`NatsArgs`]), the core's
//! tuning and retention flags, instants on the command line, and the "another core holds the
//! lock" exit. Below every subcommand file, so none of them imports `main.rs`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use sentinel_core::Micros;
use sentinel_core::compaction::CompactionConfig;
use sentinel_core::partitions::PartitionsConfig;
use sentinel_core::retention::RetentionConfig;
use sentinel_driver::Credentials;
use sentinel_store_pg::PgStore;

/// Exit code of a core (or `migrate`) that could not take the single-writer lock.
pub const EXIT_LOCK_HELD: u8 = 10;

/// The watchdog's suppression (core runtime spec, "A slow core must not look like a dead
/// fleet") and the self-point interval.
#[derive(clap::Args, Clone)]
pub struct CoreTuningArgs {
    /// No staleness for this long after the core starts.
    #[arg(long, default_value_t = 60_000)]
    pub startup_grace_ms: u64,
    /// Staleness is suppressed while at least this many messages are not yet committed
    /// (pending delivery plus delivered and unacked)...
    #[arg(long, default_value_t = 5_000)]
    pub lag_high_pending: u64,
    /// ...or while the oldest unacked message is at least this old.
    #[arg(long, default_value_t = 30_000)]
    pub lag_high_age_ms: u64,
    /// How often the core publishes its self-points (lag, oldest unacked age, throughput,
    /// quarantine counts) into the stream; 0 turns them off.
    #[arg(long, default_value_t = 5_000)]
    pub self_points_interval_ms: u64,
    /// How often the core publishes the health points it generates per driver host and per
    /// device (connected instances, last hello age, publish failures, disk-queue depth and
    /// drops; last reading age, share of non-live points); 0 turns them off, and so does
    /// --self-points-interval-ms 0. Their declared rate assumes the default.
    #[arg(long, default_value_t = 10_000)]
    pub health_points_interval_ms: u64,
    /// The observation stream's replica count: 1 on one nats-server, 3 on a three-node
    /// cluster (docs/deploy.md). An existing stream with another count is changed to this one
    /// in place; no other stream setting is ever changed by the core.
    #[arg(long, env = "SENTINEL_STREAM_REPLICAS", default_value_t = 1,
          value_parser = clap::value_parser!(u8).range(1..=sentinel_bus_nats::STREAM_REPLICAS_MAX as i64))]
    pub stream_replicas: u8,
    /// How long raw rows and rollups are kept (the core drops what is past them daily).
    #[command(flatten)]
    pub retention: RetentionArgs,
    /// How the running core makes daily partitions ahead.
    #[command(flatten)]
    pub partitions: PartitionsArgs,
    /// When the running core compacts closed days.
    #[command(flatten)]
    pub compaction: CompactionArgs,
}

/// When a closed day is compacted: what `sentinel run` compacts, and what `registry plan` and
/// `sentinel storage` size the raw tables' older days at (README, "Compaction").
#[derive(clap::Args, Clone)]
pub struct CompactionAgeArgs {
    /// A closed day is compacted by the running core once it ended this many days ago (1 to
    /// 400; the spec's "compression from day seven"), one day of one class at a time, oldest
    /// first, never while ingest is behind. A day the stream may still redeliver a message of
    /// waits.
    #[arg(long, default_value_t = sentinel_ports::COMPACT_AFTER_DAYS_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(sentinel_ports::COMPACT_AFTER_DAYS_MAX)))]
    pub compact_after_days: u32,
    /// A closed day's minute rollups are compacted alone by the running core once the day
    /// ended this many days ago (1 to 400, at most --compact-after-days; equal to it: only
    /// with the day's raw rows). They need no stream rule: a late row's recompute wins over a
    /// compacted minute.
    #[arg(long, default_value_t = sentinel_ports::ROLLUP_COMPACT_AFTER_DAYS_DEFAULT,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(sentinel_ports::COMPACT_AFTER_DAYS_MAX)))]
    pub rollup_compact_after_days: u32,
    /// The running core compacts nothing (`sentinel compact` still can, with the core
    /// stopped).
    #[arg(long, conflicts_with_all = ["compact_after_days", "rollup_compact_after_days"])]
    pub no_compaction: bool,
}

impl CompactionAgeArgs {
    /// The age in days, `None` when nothing is compacted.
    pub fn after_days(&self) -> Option<u32> {
        (!self.no_compaction).then_some(self.compact_after_days)
    }

    /// The minute rollups' own age, `None` when nothing is compacted; refused past the raw
    /// age.
    pub fn rollup_after_days(&self) -> anyhow::Result<Option<u32>> {
        if !self.no_compaction && self.rollup_compact_after_days > self.compact_after_days {
            anyhow::bail!(
                "--rollup-compact-after-days ({}) must be at most --compact-after-days ({})",
                self.rollup_compact_after_days,
                self.compact_after_days
            );
        }
        Ok((!self.no_compaction).then_some(self.rollup_compact_after_days))
    }
}

/// The running core's compaction of closed days (`sentinel_core::compaction`; README,
/// "Compaction").
#[derive(clap::Args, Clone)]
pub struct CompactionArgs {
    /// The age of a day the running core compacts, or none.
    #[command(flatten)]
    pub age: CompactionAgeArgs,
    /// The first compaction request after the core starts.
    #[arg(long, default_value_t = 300_000)]
    pub compaction_first_run_delay_ms: u64,
    /// How often the running core looks again for days old enough once every class is
    /// compacted up to the newest, or after the stream held a day back.
    #[arg(long, default_value_t = 3_600_000)]
    pub compaction_interval_ms: u64,
}

impl CompactionArgs {
    /// As the core's configuration; validated.
    pub fn config(&self) -> anyhow::Result<CompactionConfig> {
        let config = CompactionConfig {
            after_days: self.age.after_days(),
            rollup_after_days: self.age.rollup_after_days()?,
            first_run_delay_ms: i64::try_from(self.compaction_first_run_delay_ms)
                .context("--compaction-first-run-delay-ms")?,
            run_interval_ms: i64::try_from(self.compaction_interval_ms)
                .context("--compaction-interval-ms")?,
            ..CompactionConfig::default()
        };
        config.validate().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

/// The running core's partitions made ahead (`sentinel_core::partitions`).
#[derive(clap::Args, Clone)]
pub struct PartitionsArgs {
    /// How often the running core makes daily partitions ahead (0: only at startup and on
    /// demand), and sooner whenever they reach less than two days ahead.
    #[arg(long, default_value_t = 3_600_000)]
    pub partitions_interval_ms: u64,
    /// They are made through today + this many days (1 to 30).
    #[arg(long, default_value_t = 3)]
    pub partitions_days_ahead: u32,
    /// How long making them may wait for a lock on a parent table before giving up until the
    /// next try (1 to 10000 ms); the commits queued behind it wait at most that long.
    #[arg(long, default_value_t = 200)]
    pub partitions_lock_timeout_ms: u32,
}

impl PartitionsArgs {
    /// As the core's configuration; validated.
    pub fn config(&self) -> anyhow::Result<PartitionsConfig> {
        let defaults = PartitionsConfig::default();
        let config = PartitionsConfig {
            interval_ms: i64::try_from(self.partitions_interval_ms).context("--partitions-interval-ms")?,
            days_ahead: self.partitions_days_ahead,
            horizon_min_days: defaults.horizon_min_days.min(self.partitions_days_ahead),
            retry_ms: i64::try_from(self.partitions_interval_ms)
                .unwrap_or(i64::MAX)
                .clamp(1, defaults.retry_ms),
            lock_timeout_ms: self.partitions_lock_timeout_ms,
        };
        config.validate().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

#[derive(clap::Args, Clone)]
pub struct DbArgs {
    /// PostgreSQL connection URL (`sentinel run` connects as the writer role, `migrate` and
    /// `db grants` as the schema owner).
    #[arg(
        long,
        env = "SENTINEL_DATABASE_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/sentinel"
    )]
    pub database_url: String,
}

#[derive(clap::Args, Clone)]
pub struct NatsArgs {
    /// NATS server URL, or a cluster's as a comma-separated list
    /// (`nats://a:4222,nats://b:4222,nats://c:4222`); the client tries them in turn and moves
    /// to another when the one it is on goes away.
    #[arg(long, env = "SENTINEL_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    pub nats_url: String,
    /// NATS user, with --nats-password-file (a server with an authorization block).
    #[arg(long, env = "SENTINEL_NATS_USER")]
    pub nats_user: Option<String>,
    /// File holding the NATS user's password.
    #[arg(long, env = "SENTINEL_NATS_PASSWORD_FILE", requires = "nats_user")]
    pub nats_password_file: Option<PathBuf>,
    /// File holding an nkey seed (`SU…`), instead of a user and password.
    #[arg(long, env = "SENTINEL_NATS_NKEY_SEED_FILE", conflicts_with = "nats_user")]
    pub nats_nkey_seed_file: Option<PathBuf>,
}

impl NatsArgs {
    pub fn credentials(&self) -> anyhow::Result<Credentials> {
        Credentials::from_files(
            self.nats_user.as_deref(),
            self.nats_password_file.as_deref(),
            self.nats_nkey_seed_file.as_deref(),
        )
        .context("NATS credentials")
    }
}

/// The horizons, shared by `sentinel run` and `sentinel retention` (defaults: README,
/// "Retention").
#[derive(clap::Args, Clone)]
pub struct RetentionArgs {
    /// Raw rows of class `measurement` kept, days.
    #[arg(long, default_value_t = 30)]
    pub retention_measurement_days: u32,
    /// Raw rows of class `state` kept, days.
    #[arg(long, default_value_t = 90)]
    pub retention_state_days: u32,
    /// Raw rows of class `diagnostic` kept, days.
    #[arg(long, default_value_t = 7)]
    pub retention_diagnostic_days: u32,
    /// 1-minute rollup buckets kept, days (at least the longest raw horizon).
    #[arg(long, default_value_t = 90)]
    pub retention_rollup_1m_days: u32,
    /// 1-hour rollup buckets kept, days (at least the longest raw horizon; dropped by whole
    /// months).
    #[arg(long, default_value_t = 730)]
    pub retention_rollup_1h_days: u32,
}

impl RetentionArgs {
    /// The horizons as the core's configuration; validated.
    pub fn config(&self) -> anyhow::Result<RetentionConfig> {
        let config = RetentionConfig {
            raw_days: [
                self.retention_measurement_days,
                self.retention_state_days,
                self.retention_diagnostic_days,
            ],
            rollup_1m_days: self.retention_rollup_1m_days,
            rollup_1h_days: self.retention_rollup_1h_days,
            ..RetentionConfig::default()
        };
        config.validate().map_err(anyhow::Error::msg)?;
        Ok(config)
    }
}

/// Parses an RFC 3339 instant or a UTC date (`2026-06-01`, meaning its midnight).
pub fn parse_instant(text: &str) -> anyhow::Result<Micros> {
    if let Some(at) = Micros::parse_rfc3339(text) {
        return Ok(at);
    }
    Micros::parse_rfc3339(&format!("{text}T00:00:00Z"))
        .with_context(|| format!("{text:?} is neither an RFC 3339 instant nor a date (YYYY-MM-DD)"))
}

/// Exit 10, naming the session that holds the lock so the operator can find the other core.
pub async fn lock_held(store: &PgStore, what_now: &str) -> anyhow::Result<ExitCode> {
    let holder = match store.lock_holder().await {
        Ok(Some(holder)) => holder.describe(),
        Ok(None) => "a session that has released it since".to_owned(),
        Err(e) => format!("a session this role cannot see ({e})"),
    };
    eprintln!("sentinel: another core holds the single-writer lock: {holder}; {what_now}");
    Ok(ExitCode::from(EXIT_LOCK_HELD))
}
