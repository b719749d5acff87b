//! An epoch repeated after a lossy database failover (issue 25 item 3, the equal-epoch gap),
//! with real processes: a nats-server and a database of the test's own, the `sentinel` binary
//! started by the test as a supervisor would, and a driver on the driver library.
//!
//! Owns: a core takes epoch 1 and announces it with its start identity; the driver's floor is
//! (1, that identity). The core is SIGKILLed and the failover loses everything since its
//! acquisition: its `core_start` row, its control events and the epoch's increment (deleted in
//! PostgreSQL, as a promoted standby that never received them would not have them). The next
//! core takes epoch 1 again; the driver refuses its announcement (another start at its floor)
//! and its hello echoes the lost core's identity, so that core raises the recorded epoch to 2
//! and exits 7 having had no command admitted. The one after takes 3, and its command is
//! admitted and applied by the same driver, its result recorded under epoch 3. Each
//! acquisition's `core_start` row records the identity its core announced.

use std::time::Duration;

use sentinel_core::wire::command_request_subject;
use sentinel_driver::EpochFloor;
use sentinel_driver::commands::{CommandIntake, Received};
use sentinel_tests::harness::{Env, command_request, pg, spawn_core, terminate, wait_exit, wait_ready};

const HOST: &str = "plant-a";
/// The instance of the sample registry's writable `boiler1.setpoint`.
const INSTANCE: &str = "modbus-boiler";
const CORE_ARGS: &[&str] = &["--self-points-interval-ms", "0"];

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

/// What a failover to a standby that never received the last commits leaves: nothing the core
/// of `epoch` wrote since its acquisition, and the epoch before it.
async fn lose_since_acquisition(url: &str, epoch: i32) {
    use sqlx::Connection;
    let mut conn = pg(url).await;
    let mut tx = conn.begin().await.expect("begin");
    for statement in [
        "DELETE FROM core_start WHERE epoch = $1",
        "DELETE FROM control_event WHERE core_epoch = $1",
        "UPDATE core_epoch SET epoch = $1 - 1",
    ] {
        sqlx::query(statement)
            .bind(epoch)
            .execute(&mut *tx)
            .await
            .expect(statement);
    }
    tx.commit().await.expect("commit");
}

async fn next(intake: &mut CommandIntake) -> Received {
    intake.next().await.expect("open").expect("intake")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_epoch_is_moved_past_before_it_commands_anything() {
    tokio::time::timeout(Duration::from_secs(240), run())
        .await
        .expect("bounded");
}

async fn run() {
    let env = Env::start(30_000).await;
    let client = async_nats::connect(env.nats.url()).await.expect("connect");
    let mut intake = CommandIntake::subscribe(client.clone(), HOST, INSTANCE, 1, EpochFloor::default())
        .await
        .expect("subscribe");

    // The lost core: epoch 1, heard by the driver with its identity.
    let mut lost = spawn_core(&env, 30_000, CORE_ARGS);
    loop {
        if let Received::CoreStarted {
            core_epoch: 1,
            current,
        } = next(&mut intake).await
        {
            assert!(current, "the first core is current");
            break;
        }
    }
    let lost_start = intake
        .floor()
        .core_start
        .expect("the announcement carries an identity");
    assert_eq!(
        intake.floor(),
        EpochFloor {
            epoch: 1,
            core_start: Some(lost_start)
        }
    );
    let lost_row = wait_ready(&env.store, 1).await;
    assert_eq!(
        lost_row.core_start,
        Some(lost_start),
        "the acquisition's row records the identity announced"
    );
    let pid = lost.id().to_string();
    let _ = std::process::Command::new("kill").args(["-KILL", &pid]).status();
    wait_exit(&mut lost, Duration::from_secs(10))
        .await
        .expect("SIGKILLed");
    lose_since_acquisition(&env.db.url, 1).await;
    assert_eq!(env.store.current_epoch().await.expect("epoch"), 0);

    // The next core takes epoch 1 again: the driver's hello at 1 with the lost core's identity
    // makes it move past it, and nothing it sends is admitted.
    let mut repeat = spawn_core(&env, 30_000, CORE_ARGS);
    let mut heard_repeat = false;
    let status = loop {
        tokio::select! {
            status = wait_exit(&mut repeat, Duration::from_secs(90)) => {
                break status.expect("the core repeating epoch 1 moved past it and exited");
            }
            received = intake.next() => {
                let received = received.expect("open").expect("intake");
                assert!(
                    received.admitted().is_none(),
                    "no command of the repeated epoch is admitted: {received:?}"
                );
                if let Received::CoreStarted { core_epoch, current } = received {
                    assert_eq!((core_epoch, current), (1, false), "another start at the floor");
                    heard_repeat = true;
                }
            }
        }
    };
    assert!(heard_repeat, "the repeating core announced itself");
    assert_eq!(
        status.code(),
        Some(7),
        "raised the epoch past its own, then exited"
    );
    assert_eq!(
        env.store.current_epoch().await.expect("epoch"),
        2,
        "the recorded epoch is one above the repeated one"
    );
    assert_eq!(
        intake.floor(),
        EpochFloor {
            epoch: 1,
            core_start: Some(lost_start)
        },
        "the driver kept the identity it first saw at 1"
    );

    // Its supervisor starts it again: epoch 3, and its command is admitted.
    let next_core = spawn_core(&env, 30_000, CORE_ARGS);
    let next_row = wait_ready(&env.store, 3).await;
    client
        .publish(
            command_request_subject("test"),
            command_request("r-1", "boiler1.setpoint", 65.0).into(),
        )
        .await
        .expect("request");
    let received = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let received = next(&mut intake).await;
            assert!(received.reply().is_none(), "nothing refused: {received:?}");
            if received.admitted().is_some() {
                return received;
            }
        }
    })
    .await
    .expect("a command arrives");
    let command = received.admitted().expect("admitted").clone();
    assert_eq!((command.command_id.as_str(), command.core_epoch), ("r-1", 3));
    assert_eq!(command.core_start, intake.floor().core_start);
    assert_ne!(command.core_start, Some(lost_start), "a new start");
    assert_eq!(
        next_row.core_start, command.core_start,
        "on the record as announced"
    );
    intake.answer(&received, Ok(())).await.expect("answer");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while results(&env.db.url).await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the answer is recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        results(&env.db.url).await,
        [(3, "r-1".to_owned(), "applied".to_owned())]
    );
    terminate(next_core).await;
}
