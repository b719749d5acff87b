//! The driver's hello carries the highest epoch it has seen, and a core below it moves the
//! recorded epoch past it before it commands anything (issue 25 item 3; docs/deploy.md,
//! "Without synchronous replication"), with real processes: a nats-server and a database of the
//! test's own, the `sentinel` binary restarted by the test as a supervisor would, and a driver
//! whose state file says it has seen epoch 6 (N + 5, the first core's epoch N being 1, as after
//! a failover that lost the increments since).
//!
//! Owns: the first core hears the hello at 6, raises the recorded epoch to 6 and exits 7,
//! having sent no command; started again it takes epoch 7, and its next command is admitted
//! and applied by that driver (not refused `stale_epoch`), its result recorded under epoch 7.

use std::time::Duration;

use sentinel_core::wire::command_request_subject;
use sentinel_driver::commands::CommandIntake;
use sentinel_driver::state::DriverState;
use sentinel_tests::harness::{Env, command_request, pg, spawn_core, terminate, wait_exit, wait_ready};

const HOST: &str = "plant-a";
/// The instance of the sample registry's writable `boiler1.setpoint`.
const INSTANCE: &str = "modbus-boiler";
const FLOOR: u32 = 6;

fn request(id: &str, value: f64) -> Vec<u8> {
    command_request(id, "boiler1.setpoint", value)
}

/// `(core_epoch, command_id, outcome)` of every `command_result`.
async fn results(url: &str) -> Vec<(i32, String, String)> {
    let mut conn = pg(url).await;
    sqlx::query_as(
        "SELECT core_epoch, payload->>'command_id', payload->>'outcome' FROM control_event \
         WHERE kind = 'command_result' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("control events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hello_above_the_cores_epoch_moves_the_epoch_past_it_before_any_command() {
    tokio::time::timeout(Duration::from_secs(180), run())
        .await
        .expect("bounded");
}

async fn run() {
    let env = Env::start(30_000).await;
    let dir = std::env::temp_dir().join(format!("sentinel-epoch-floor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let state_file = dir.join("state");
    DriverState {
        source_epoch: 3,
        highest_epoch_seen: FLOOR,
        highest_epoch_core_start: None,
        applied: Vec::new(),
    }
    .save(&state_file)
    .expect("save the driver's state");
    let state = DriverState::load(&state_file).expect("load");
    let client = async_nats::connect(env.nats.url()).await.expect("connect");
    let mut intake =
        CommandIntake::subscribe(client.clone(), HOST, INSTANCE, state.source_epoch, state.floor())
            .await
            .expect("subscribe");

    // The first core (epoch 1) announces itself; the driver answers with a hello at 6.
    let mut first = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    let status = loop {
        tokio::select! {
            status = wait_exit(&mut first, Duration::from_millis(200)) => {
                if let Some(status) = status {
                    break status;
                }
            }
            received = intake.next() => {
                let received = received.expect("open").expect("intake");
                assert!(
                    received.admitted().is_none(),
                    "the core below the driver's floor commanded nothing: {received:?}"
                );
            }
        }
    };
    assert_eq!(
        status.code(),
        Some(7),
        "raised the epoch past the driver's, then exited"
    );
    assert_eq!(
        env.store.current_epoch().await.expect("epoch"),
        FLOOR,
        "the recorded epoch is the driver's floor"
    );

    // Its supervisor starts it again: the next acquisition is above every epoch seen.
    let second = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    wait_ready(&env.store, FLOOR + 1).await;
    client
        .publish(command_request_subject("test"), request("r-1", 65.0).into())
        .await
        .expect("request");
    let received = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let received = intake.next().await.expect("open").expect("intake");
            assert!(received.reply().is_none(), "nothing refused: {received:?}");
            if received.admitted().is_some() {
                return received;
            }
        }
    })
    .await
    .expect("a command arrives");
    let command = received.admitted().expect("admitted").clone();
    assert_eq!(
        (command.command_id.as_str(), command.core_epoch),
        ("r-1", FLOOR + 1)
    );
    intake.answer(&received, Ok(())).await.expect("answer");
    assert_eq!(intake.highest_seen(), FLOOR + 1);

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while results(&env.db.url).await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the answer is recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        results(&env.db.url).await,
        [((FLOOR + 1) as i32, "r-1".to_owned(), "applied".to_owned())]
    );
    terminate(second).await;
    let _ = std::fs::remove_dir_all(&dir);
}
