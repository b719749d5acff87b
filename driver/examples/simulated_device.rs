//! A simulated device driver to copy from: one driver instance that publishes a reading of one
//! numeric point every interval and applies the commands the core sends it.
//!
//! Everything a real driver needs is here, in order:
//! 1. connect as its host's principal (`driver-<host>`, credentials from a file, never in code);
//! 2. bump and persist its `source_epoch` on every start, so its message keys never repeat;
//! 3. subscribe to its commands and say hello (the core answers with its epoch);
//! 4. publish each reading with its message id, awaiting the stream's ack;
//! 5. apply only the commands the epoch guard admits, and persist the highest core epoch seen.
//!
//! Against the sample registry and an open server (no authorization block):
//!
//! ```sh
//! cargo run -p sentinel-driver --example simulated_device -- \
//!     --host plant-a --instance modbus-boiler --point boiler1.flow_temp --unit degF
//! ```
//!
//! With the permissions `sentinel registry nats-config` generates, add
//! `--nkey-seed-file plant-a.seed` (or `--user driver-plant-a --password-file plant-a.pw`).

use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use sentinel_core::Micros;
use sentinel_core::wire::{EnvelopeOut, obs_subject};
use sentinel_driver::commands::CommandIntake;
use sentinel_driver::{BusConnection, Credentials, ObservationPublisher, PublisherConfig};

#[derive(Parser)]
#[command(about = "A simulated Sentinel device driver: readings out, commands in")]
struct Args {
    #[arg(long, env = "SENTINEL_NATS_URL", default_value = "nats://127.0.0.1:4222")]
    nats_url: String,
    /// The registry host this driver runs on.
    #[arg(long)]
    host: String,
    /// The driver instance the registry assigns the point to.
    #[arg(long)]
    instance: String,
    /// A numeric point of that instance.
    #[arg(long)]
    point: String,
    /// The unit the device reports in (the registry's `unit_native`).
    #[arg(long)]
    unit: Option<String>,
    #[arg(long, default_value_t = 1_000)]
    interval_ms: u64,
    /// Stop after this many readings (0: run until interrupted).
    #[arg(long, default_value_t = 0)]
    readings: u64,
    /// Where the driver keeps its source epoch and the highest core epoch it has seen.
    #[arg(long, default_value = "simulated_device.state")]
    state_file: PathBuf,
    #[arg(long)]
    user: Option<String>,
    #[arg(long, requires = "user")]
    password_file: Option<PathBuf>,
    #[arg(long, conflicts_with = "user")]
    nkey_seed_file: Option<PathBuf>,
}

/// What survives a restart: `source_epoch` (bumped on every start) and the epoch floor.
fn load_state(path: &PathBuf) -> (u32, u32) {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut numbers = text.split_whitespace().filter_map(|w| w.parse::<u32>().ok());
    (numbers.next().unwrap_or(0), numbers.next().unwrap_or(0))
}

fn save_state(path: &PathBuf, source_epoch: u32, highest_seen: u32) -> std::io::Result<()> {
    std::fs::write(path, format!("{source_epoch} {highest_seen}\n"))
}

fn now() -> Micros {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    Micros(i64::try_from(since.as_micros()).unwrap_or(i64::MAX))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let credentials = Credentials::from_files(
        args.user.as_deref(),
        args.password_file.as_deref(),
        args.nkey_seed_file.as_deref(),
    )?;

    // 1. Connect as this host's principal.
    let principal = format!("driver-{}", args.host);
    let connection = BusConnection::connect(&args.nats_url, &principal, &credentials).await?;

    // 2. A new source epoch on every start, persisted before the first publish.
    let (last_epoch, mut highest_seen) = load_state(&args.state_file);
    let source_epoch = last_epoch + 1;
    save_state(&args.state_file, source_epoch, highest_seen)?;

    // 3. Commands in; the intake says hello with the floor we persisted.
    let mut intake = CommandIntake::subscribe_on(
        &connection,
        &args.host,
        &args.instance,
        source_epoch,
        highest_seen,
    )
    .await?;

    // 4. Readings out.
    let publisher = ObservationPublisher::on(&connection, PublisherConfig::default())?;
    let subject = obs_subject(&args.host, &args.instance);
    let mut ticker = tokio::time::interval(Duration::from_millis(args.interval_ms));
    let mut offset = 0.0_f64;
    let mut seq = 0u64;
    println!(
        "{principal}/{}: source epoch {source_epoch}, publishing {}",
        args.instance, args.point
    );
    loop {
        tokio::select! {
            _ = ticker.tick() => {
                seq += 1;
                let value = 150.0 + offset + 10.0 * (seq as f64 / 10.0).sin();
                let mut envelope =
                    EnvelopeOut::new(&args.point, &args.instance, source_epoch, seq, now(), serde_json::json!(value));
                envelope.unit = args.unit.clone();
                let ack = publisher
                    .publish(&subject, &envelope.msg_id(), envelope.to_bytes().into())
                    .await?;
                println!("reading {seq} stored at stream sequence {}", ack.seq);
                if args.readings > 0 && seq >= args.readings {
                    return Ok(());
                }
            }
            received = intake.next() => {
                let Some(received) = received else { return Ok(()) };
                let received = received?;
                // 5. Apply only what the guard admitted; remember the floor across restarts.
                if let Some(command) = received.admitted() {
                    if let Some(v) = command.value.as_f64() {
                        offset = v;
                    }
                    println!("applied command {} from core epoch {}", command.command_id, command.core_epoch);
                } else if let Some(reply) = received.reply() {
                    println!("refused a command: {:?}", reply.reason);
                }
                if intake.highest_seen() != highest_seen {
                    highest_seen = intake.highest_seen();
                    save_state(&args.state_file, source_epoch, highest_seen)?;
                }
            }
        }
    }
}
