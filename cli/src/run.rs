//! `sentinel run`: the core against PostgreSQL and NATS, in the startup order of the core
//! runtime spec ("Acquisition order at startup"), until SIGTERM or Ctrl-C drains it or it
//! exits on its own; the exit code is the core's.
//!
//! Also what a supervisor and a monitoring system see (issue 26): with `--metrics-listen` the
//! exporter (`sentinel_runtime::telemetry`, served by `metrics_http.rs`), and under systemd
//! (`$NOTIFY_SOCKET`) the notifications of `sentinel_runtime::notify`: a status per startup
//! step, `READY=1` from the runtime loop's first wake-up (consuming), `WATCHDOG=1` from every
//! wake-up at half the watchdog period, `STOPPING=1` on SIGTERM.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::Config;
use sentinel_core::registry::plan::Admission;
use sentinel_ports::BusError;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_runtime::notify::Notifier;
use sentinel_runtime::startup::{self, StartError};
use sentinel_runtime::telemetry::Telemetry;
use sentinel_runtime::{self as runtime, RuntimeConfig};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use tracing::info;

use crate::args::{CoreTuningArgs, DbArgs, NatsArgs, lock_held};

#[allow(clippy::too_many_arguments)] // the subcommand's flags, each one thing
pub async fn run(
    db: DbArgs,
    nats: NatsArgs,
    registry: Option<PathBuf>,
    ack_wait_ms: u64,
    inflight_batches_max: usize,
    tuning: CoreTuningArgs,
    admission: &Admission,
    mut runtime_config: RuntimeConfig,
    metrics_listen: Option<SocketAddr>,
) -> anyhow::Result<ExitCode> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let notifier = Notifier::from_env();
    // The endpoint is bound before anything else, so a taken port fails the start at once; it
    // shows `sentinel_lock_held 0` until the core runs.
    if let Some(addr) = metrics_listen {
        let telemetry = Telemetry::new(clock.clone());
        crate::metrics_http::serve(addr, telemetry.clone()).await?;
        runtime_config.telemetry = Some(telemetry);
    }
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
        health_points_interval_ms: i64::try_from(tuning.health_points_interval_ms)
            .context("--health-points-interval-ms")?,
        retention: tuning.retention.config()?,
        partitions: tuning.partitions.config()?,
        compaction: tuning.compaction.config()?,
        ..Config::default()
    };
    let bus_config = NatsBusConfig {
        url: nats.nats_url.clone(),
        ack_wait_ms,
        replicas: usize::from(tuning.stream_replicas),
        // The bound admission checked the registry against is the bound the stream gets.
        max_msgs: admission.stream_max_msgs,
        max_bytes: admission.stream_max_bytes,
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
    let started = match startup::start_notified(
        &store,
        connect_bus,
        registry.as_deref(),
        admission,
        config,
        clock.as_ref(),
        &notifier,
    )
    .await
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
    let stopping = notifier.clone();
    let shutdown = async move {
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
        stopping.stopping();
    };
    let epoch = started.core.epoch();
    let loop_clock = clock.clone();
    let loop_notifier = notifier.clone();
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
        // Every wake-up of the loop: the first one means startup has reached consuming.
        move |_| {
            loop_notifier.ready(epoch);
            loop_notifier.watchdog(loop_clock.now());
        },
    )
    .await;
    notifier.status(&format!(
        "stopped: exit {} ({})",
        outcome.exit.code, outcome.exit.why
    ));
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
