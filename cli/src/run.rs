//! `sentinel run`: the core against PostgreSQL and NATS, in the startup order of the core
//! runtime spec ("Acquisition order at startup"), until SIGTERM or Ctrl-C drains it or it
//! exits on its own; the exit code is the core's.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::Config;
use sentinel_ports::BusError;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_runtime::startup::{self, StartError};
use sentinel_runtime::{self as runtime, RuntimeConfig};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use tracing::info;

use crate::args::{CoreTuningArgs, DbArgs, NatsArgs, lock_held};

pub async fn run(
    db: DbArgs,
    nats: NatsArgs,
    registry: Option<PathBuf>,
    ack_wait_ms: u64,
    inflight_batches_max: usize,
    tuning: CoreTuningArgs,
    runtime_config: RuntimeConfig,
) -> anyhow::Result<ExitCode> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let store = PgStore::connect(&db.database_url, PgStoreConfig::default())
        .await
        .context("connecting to PostgreSQL")?;
    let config = Config {
        inflight_batches_max,
        startup_grace_ms: i64::try_from(tuning.startup_grace_ms).context("--startup-grace-ms")?,
        lag_high_pending: tuning.lag_high_pending,
        lag_high_age_ms: tuning.lag_high_age_ms,
        self_points_interval_ms: i64::try_from(tuning.self_points_interval_ms)
            .context("--self-points-interval-ms")?,
        retention: tuning.retention.config()?,
        ..Config::default()
    };
    let bus_config = NatsBusConfig {
        url: nats.nats_url.clone(),
        ack_wait_ms,
        credentials: nats.credentials()?,
        ..NatsBusConfig::default()
    };
    // Startup order (core runtime spec, "Acquisition order at startup"): the lock, then the
    // schema under it, the epoch, the registry, the restored projection; only then NATS.
    let connect_bus = || async move {
        let bus = NatsBus::connect(bus_config)
            .await
            .map_err(|e| BusError::Connection(e.to_string()))?;
        bus.ensure_stream()
            .await
            .map_err(|e| BusError::Other(format!("ensuring the observation stream: {e}")))?;
        Ok(bus)
    };
    let started = match startup::start(&store, connect_bus, registry.as_deref(), config, clock.as_ref()).await
    {
        Ok(started) => started,
        Err(StartError::LockHeld) => {
            return lock_held(&store, "exiting before touching the bus or the schema").await;
        }
        Err(e) => return Err(e.into()),
    };
    info!(
        epoch = started.core.epoch(),
        points = started.core.registry().len(),
        "core started"
    );
    let shutdown = async {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    };
    let outcome = runtime::run_observed(
        started.core,
        started.bus,
        started.consumer,
        store,
        started.lease,
        clock,
        runtime_config,
        shutdown,
        started.inbound,
        |_| {},
    )
    .await;
    let m = &outcome.metrics;
    info!(
        code = outcome.exit.code,
        why = outcome.exit.why,
        delivered = m.delivered,
        rows = m.rows_inserted.iter().sum::<u64>(),
        quarantined = m.quarantined_total(),
        transitions = m.transitions_published,
        "core stopped"
    );
    Ok(ExitCode::from(u8::try_from(outcome.exit.code).unwrap_or(1)))
}
