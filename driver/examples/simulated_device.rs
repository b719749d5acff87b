//! A simulated device driver to copy from: one driver instance that publishes a reading of one
//! numeric point every interval and applies the commands the core sends it.
//!
//! Everything a real driver needs is here, in order:
//! 1. connect as its host's principal (`driver-<host>`, credentials from a file, never in code);
//! 2. bump and persist its `source_epoch` on every start, so its message keys never repeat;
//! 3. subscribe to its commands and say hello (the core answers with its epoch);
//! 4. publish each reading with its message id, awaiting the stream's ack;
//! 5. apply only the commands the epoch guard admits, answer each (`applied`, or `rejected`
//!    with `out_of_range` for a value the device cannot take), and persist the highest core
//!    epoch seen and the ids of the commands applied (before answering), so a command the core
//!    re-sends after this driver restarted is answered without being applied twice;
//! 6. poll at the interval the core assigns (issue 21 item 7, "the valve"): the intake applies
//!    each assignment on a watch channel, and the poll loop re-arms its timer when it changes,
//!    without restarting. `--interval-ms` is the default until an assignment names the point.
//!
//! Once a command is applied the device reports the commanded value (as a setpoint reads
//! back), so the core's verification (issue 21 item 5) reports it converged. With
//! `--ignore-commands` it answers `applied` and keeps reporting what it did: a device that does
//! not follow, which the core reports as `command_diverged` after the point's `verify_s`.
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

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Parser;
use sentinel_core::Micros;
use sentinel_core::wire::{EnvelopeOut, obs_subject};
use sentinel_driver::commands::{CommandIntake, NotApplied, Received};
use sentinel_driver::state::DriverState;
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
    /// Where the driver keeps its source epoch, the highest core epoch it has seen and the ids
    /// of the commands it applied.
    #[arg(long, default_value = "simulated_device.state")]
    state_file: PathBuf,
    #[arg(long)]
    user: Option<String>,
    #[arg(long, requires = "user")]
    password_file: Option<PathBuf>,
    #[arg(long, conflicts_with = "user")]
    nkey_seed_file: Option<PathBuf>,
    /// Answer commands `applied` but do not follow them (to see verification diverge).
    #[arg(long)]
    ignore_commands: bool,
}

/// What survives a restart, as the intake has it now.
fn save_state(path: &Path, source_epoch: u32, intake: &CommandIntake) -> std::io::Result<()> {
    let mut state = DriverState {
        source_epoch,
        applied: intake.applied_ids(),
        ..DriverState::default()
    };
    state.set_floor(intake.floor());
    state.save(path)
}

/// A poll period the timer can run at: the intake only applies positive, finite intervals,
/// and admission bounds them to a day; anything else falls back to a day.
fn period(interval_s: f64) -> Duration {
    Duration::try_from_secs_f64(interval_s)
        .ok()
        .filter(|d| !d.is_zero())
        .unwrap_or(Duration::from_secs(86_400))
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
    let mut state = DriverState::load(&args.state_file)?;
    state.source_epoch += 1;
    state.save(&args.state_file)?;
    let source_epoch = state.source_epoch;
    let mut floor = state.floor();

    // 3. Commands in; the intake says hello with the floor we persisted, and knows the
    //    commands applied before the restart.
    let mut intake =
        CommandIntake::subscribe_on(&connection, &args.host, &args.instance, source_epoch, floor).await?;
    intake.restore_applied(state.applied);

    // 4. Readings out.
    let publisher = ObservationPublisher::on(&connection, PublisherConfig::default())?;
    let subject = obs_subject(&args.host, &args.instance);
    // 6. The poll interval: the assigned one when the core names the point, else the default.
    let mut assigned = intake.assignment();
    let default_s = args.interval_ms as f64 / 1000.0;
    let mut interval_s = assigned.borrow().poll_interval_s(&args.point, default_s);
    let mut ticker = tokio::time::interval(period(interval_s));
    // The commanded value the device holds, once one was applied and followed.
    let mut commanded: Option<f64> = None;
    let mut seq = 0u64;
    println!(
        "{principal}/{}: source epoch {source_epoch}, publishing {}",
        args.instance, args.point
    );
    loop {
        tokio::select! {
            Ok(()) = assigned.changed() => {
                let now_s = assigned.borrow_and_update().poll_interval_s(&args.point, default_s);
                if now_s != interval_s {
                    interval_s = now_s;
                    // Re-armed in place: the driver keeps its epoch, its sequence and its state.
                    ticker = tokio::time::interval(period(interval_s));
                    ticker.tick().await;
                    println!("poll interval of {} is now {interval_s} s", args.point);
                }
            }
            _ = ticker.tick() => {
                seq += 1;
                let value = commanded.unwrap_or_else(|| 150.0 + 10.0 * (seq as f64 / 10.0).sin());
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
                if let Received::Assignment { assignment, ack } = &received {
                    println!(
                        "assignment of registry version {} from core epoch {}: {}",
                        assignment.registry_version,
                        assignment.core_epoch,
                        ack.reason.as_deref().unwrap_or(ack.outcome.as_str())
                    );
                }
                // 5. Apply only what the guard admitted; remember the floor across restarts.
                if let Some(command) = received.admitted() {
                    let outcome = if command.point_id != args.point {
                        Err(NotApplied::UnknownPoint)
                    } else if let Some(v) = command.value.as_f64() {
                        if !args.ignore_commands {
                            commanded = Some(v);
                        }
                        Ok(())
                    } else {
                        Err(NotApplied::OutOfRange)
                    };
                    match outcome {
                        Ok(()) => {
                            println!(
                                "applied command {} from core epoch {}",
                                command.command_id, command.core_epoch
                            );
                            // Persisted before the answer: a re-send finds it applied.
                            intake.mark_applied(&command.command_id);
                            save_state(&args.state_file, source_epoch, &intake)?;
                        }
                        Err(why) => println!("did not apply command {}: {}", command.command_id, why.reason()),
                    }
                    intake.answer(&received, outcome).await?;
                } else if let Some(reply) = received.reply() {
                    println!("answered a command itself: {:?} {:?}", reply.outcome, reply.reason);
                }
                if intake.floor() != floor {
                    floor = intake.floor();
                    save_state(&args.state_file, source_epoch, &intake)?;
                }
            }
        }
    }
}
