//! `sentinel demo`: the whole core on the in-memory models, fed by the synthetic fleet
//! (`sentinel_models::fleet`) generated from a registry folder. Needs no services. It runs the
//! same startup sequence and runtime loop as `sentinel run`; only the adapters differ.
//!
//! Owns: the demo's wiring, the fleet's answers to the core's epoch announcement (restart step
//! 7: each driver instance raises its epoch floor and says hello), the progress line and the
//! summary.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sentinel_core::wire::{DriverHello, ToDriver, parse_cmd_subject};
use sentinel_core::{Config, QuarantineReason, RetentionClass};

use sentinel_models::bus::{MemoryBus, MemoryBusConfig};
use sentinel_models::fleet::{FLEET_SOURCE_EPOCH, Fleet};
use sentinel_models::store::MemoryStore;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, Inbound};
use sentinel_runtime::startup;
use sentinel_runtime::{self as runtime, RuntimeConfig};

#[derive(Clone, Debug)]
pub struct DemoConfig {
    pub registry_dir: PathBuf,
    pub messages: usize,
    pub seed: u64,
    /// Messages published between yields to the runtime.
    pub publish_chunk: usize,
    /// Upper bound on the whole run.
    pub timeout_s: u64,
}

#[derive(Clone, Debug, Default)]
pub struct DemoSummary {
    pub published: u64,
    pub duplicates_dropped_by_stream: u64,
    pub rows: [u64; 3],
    pub quarantined: Vec<(QuarantineReason, u64)>,
    pub rows_bad: u64,
    pub transitions: u64,
    /// Driver instances connecting, connected, ready and lost when the core stopped.
    pub drivers: [u64; 4],
    pub exit_code: i32,
}

/// Runs the demo and returns its summary. Prints a progress line each second.
pub async fn run(config: DemoConfig) -> anyhow::Result<DemoSummary> {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let bus = MemoryBus::new(MemoryBusConfig::default(), clock.clone());
    let store = MemoryStore::new("OBS", clock.clone());
    let started = startup::start(
        &store,
        startup::already_connected(&bus),
        Some(&config.registry_dir),
        Config::default(),
        clock.as_ref(),
    )
    .await?;
    let registry = started.core.registry().clone();
    println!(
        "demo: registry version {} with {} points; core epoch {}; publishing {} messages (seed {})",
        registry.version,
        registry.len(),
        started.core.epoch(),
        config.messages,
        config.seed
    );

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runtime_config = RuntimeConfig {
        progress_interval_ms: 3_600_000,
        ..RuntimeConfig::default()
    };
    // The fleet's drivers heard the core's announcement: each raises its floor and says hello.
    let hellos = answer_announcements(&bus);
    println!("demo: {hellos} driver instances heard the core's epoch and said hello");
    let run = tokio::spawn(runtime::run_observed(
        started.core,
        bus.clone(),
        started.consumer,
        store.clone(),
        started.lease,
        clock.clone(),
        runtime_config,
        async move {
            let _ = stop_rx.await;
        },
        started.inbound,
        |_| {},
    ));

    let mut fleet = Fleet::new(&registry, config.seed, FLEET_SOURCE_EPOCH);
    let mut summary = DemoSummary::default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(config.timeout_s);
    let mut last_progress = tokio::time::Instant::now();
    let mut published = 0usize;
    let mut announced_published = false;
    loop {
        let now_instant = tokio::time::Instant::now();
        if now_instant > deadline {
            anyhow::bail!("demo did not finish within {} s", config.timeout_s);
        }
        if published < config.messages {
            let chunk = config.publish_chunk.min(config.messages - published);
            for _ in 0..chunk {
                let m = fleet.next_message(clock.now());
                let ack = bus.publish_observation(&m.subject, &m.msg_id, m.payload)?;
                if ack.duplicate {
                    summary.duplicates_dropped_by_stream += 1;
                }
            }
            published += chunk;
        }
        let lag = bus.lag().await?;
        let finished_publishing = published == config.messages && !announced_published;
        if now_instant.duration_since(last_progress) >= Duration::from_secs(1) || finished_publishing {
            announced_published |= finished_publishing;
            last_progress = now_instant;
            let rows = store.row_counts();
            println!(
                "demo: published {published}/{}, rows {}, quarantined {}, transitions {}, pending {}",
                config.messages,
                rows.total(),
                store.quarantine_counts().iter().map(|(_, n)| n).sum::<u64>(),
                transitions(&bus),
                lag.pending + lag.ack_pending
            );
        }
        if published == config.messages && lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(if published < config.messages {
            1
        } else {
            50
        }))
        .await;
    }
    let _ = stop_tx.send(());
    let outcome = run.await?;

    let rows = store.row_counts();
    summary.published = published as u64;
    summary.rows = rows.0;
    summary.quarantined = store.quarantine_counts();
    summary.rows_bad = outcome.metrics.rows_bad;
    summary.transitions = transitions(&bus);
    summary.drivers = outcome.metrics.drivers;
    summary.exit_code = outcome.exit.code;
    Ok(summary)
}

/// Transitions published (the core also publishes its epoch announcements to drivers).
fn transitions(bus: &MemoryBus) -> u64 {
    bus.published()
        .iter()
        .filter(|m| m.subject.starts_with("state."))
        .count() as u64
}

/// Plays the fleet's driver instances hearing the core's `core_started` announcements: each
/// raises its epoch floor to the announced epoch (the demo runs one core) and says hello.
/// Returns how many hellos reached the core.
fn answer_announcements(bus: &MemoryBus) -> usize {
    let mut reached = 0;
    for message in bus.published() {
        let Some((host, instance)) = parse_cmd_subject(&message.subject) else {
            continue;
        };
        let Ok(ToDriver::CoreStarted(started)) = serde_json::from_slice::<ToDriver>(&message.payload) else {
            continue;
        };
        reached += bus.send_inbound(Inbound::DriverHello {
            host: host.to_owned(),
            hello: DriverHello {
                v: 1,
                driver_instance: instance.to_owned(),
                source_epoch: FLEET_SOURCE_EPOCH,
                highest_epoch_seen: started.core_epoch,
                // The demo's fleet applies no commands and answers none.
                contract: 1,
                core_start: started.core_start,
            },
        });
    }
    reached
}

impl std::fmt::Display for DemoSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "demo summary")?;
        writeln!(f, "  messages published            {}", self.published)?;
        writeln!(
            f,
            "  dropped by the stream's duplicate window  {}",
            self.duplicates_dropped_by_stream
        )?;
        for class in RetentionClass::ALL {
            writeln!(
                f,
                "  rows in observation_{:<12} {}",
                class.as_str(),
                self.rows[class.index()]
            )?;
        }
        writeln!(f, "  rows with quality bad         {}", self.rows_bad)?;
        let quarantined: u64 = self.quarantined.iter().map(|(_, n)| n).sum();
        writeln!(f, "  quarantined                   {quarantined}")?;
        for (reason, count) in &self.quarantined {
            writeln!(f, "    {:<27} {count}", reason.as_str())?;
        }
        writeln!(f, "  transitions published         {}", self.transitions)?;
        let [connecting, connected, ready, lost] = self.drivers;
        writeln!(
            f,
            "  driver instances              {ready} ready, {connected} connected, {connecting} connecting, {lost} lost"
        )?;
        write!(f, "  core exit code                {}", self.exit_code)
    }
}
