//! A driver instance for the command-plane process tests, on the driver library: it starts
//! from its state file (a new source epoch, the persisted epoch floor and applied ids, driver
//! contract 2), applies every admitted command (handing it to the test), persists its state,
//! then answers `applied`; it persists on every announcement too, as a real driver does.

use std::path::Path;

use sentinel_core::wire::CommandEnvelope;
use sentinel_driver::commands::{CommandIntake, Received};
use sentinel_driver::state::DriverState;
use tokio::task::JoinHandle;

/// Starts the instance `host`/`instance` on the bus at `nats_url` with the state in
/// `state_file`; `on_apply` sees each command as it is applied.
pub async fn start_driver(
    nats_url: &str,
    host: &str,
    instance: &str,
    state_file: &Path,
    mut on_apply: impl FnMut(&CommandEnvelope) + Send + 'static,
) -> JoinHandle<()> {
    let mut state = DriverState::load(state_file).expect("the state file");
    state.source_epoch += 1;
    state.save(state_file).expect("persist the source epoch");
    let client = async_nats::connect(nats_url).await.expect("driver connects");
    let mut intake = CommandIntake::subscribe(client, host, instance, state.source_epoch, state.floor())
        .await
        .expect("subscribe");
    intake.restore_applied(state.applied);
    let state_file = state_file.to_owned();
    let source_epoch = state.source_epoch;
    tokio::spawn(async move {
        let save = |intake: &CommandIntake| {
            DriverState {
                source_epoch,
                highest_epoch_seen: intake.highest_seen(),
                highest_epoch_core_start: intake.floor().core_start,
                applied: intake.applied_ids(),
            }
            .save(&state_file)
            .expect("persist")
        };
        while let Some(received) = intake.next().await {
            let received = received.expect("intake");
            if let Some(command) = received.admitted() {
                on_apply(command);
                intake.mark_applied(&command.command_id);
                save(&intake);
                intake.answer(&received, Ok(())).await.expect("answer");
            } else if let Received::CoreStarted { .. } = received {
                save(&intake);
            }
        }
    })
}
