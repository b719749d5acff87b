//! A driver's `stale_epoch` answer, with real processes (issue 21 item 4): it is a claim that
//! the core was replaced, and the core takes it to the store. A core that was replaced (a
//! newer epoch is recorded) exits with the fenced code at once, long before its own lock check
//! would notice; a core that was not records the answer and runs on (a host cannot stop the
//! estate's automation by answering `stale_epoch`).

use std::time::Duration;

use sentinel_core::wire::{CommandOutcome, CommandReply, command_request_subject};
use sentinel_driver::EpochFloor;
use sentinel_driver::commands::{CommandIntake, Received};
use sentinel_tests::harness::{Env, command_request, pg, spawn_core, terminate, wait_exit, wait_ready};

const HOST: &str = "plant-a";
/// The instance of the sample registry's writable `boiler1.setpoint`.
const INSTANCE: &str = "modbus-boiler";

fn request(id: &str, value: f64) -> Vec<u8> {
    command_request(id, "boiler1.setpoint", value)
}

/// The next admitted command and its reply subject (announcements are taken on the way).
async fn next_command(intake: &mut CommandIntake) -> (String, u32, String) {
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let received = intake.next().await.expect("open").expect("intake");
            if let Received::Command { command, reply_to } = received {
                return (
                    command.command_id,
                    command.core_epoch,
                    reply_to.expect("a reply subject"),
                );
            }
        }
    })
    .await
    .expect("a command arrives")
}

/// Answers `stale_epoch` on `reply_to`, as a driver whose floor is `highest_epoch_seen` does.
async fn answer_stale(
    client: &async_nats::Client,
    reply_to: String,
    command_id: &str,
    highest_epoch_seen: u32,
) {
    let reply = CommandReply {
        command_id: command_id.to_owned(),
        outcome: CommandOutcome::Rejected,
        reason: Some("stale_epoch".to_owned()),
        highest_epoch_seen,
    };
    client
        .publish(reply_to, serde_json::to_vec(&reply).expect("encode").into())
        .await
        .expect("answer");
    client.flush().await.expect("flush");
}

/// `(core_epoch, command_id, reason)` of every `command_result` with a reason.
async fn rejections(url: &str) -> Vec<(i32, String, String)> {
    let mut conn = pg(url).await;
    sqlx::query_as(
        "SELECT core_epoch, payload->>'command_id', payload->>'reason' FROM control_event \
         WHERE kind = 'command_result' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("control events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_that_was_not_replaced_records_a_stale_epoch_answer_and_runs_on() {
    let env = Env::start(30_000).await;
    let client = async_nats::connect(env.nats.url()).await.expect("connect");
    let mut intake = CommandIntake::subscribe(client.clone(), HOST, INSTANCE, 1, EpochFloor::default())
        .await
        .expect("subscribe");
    let mut core = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    wait_ready(&env.store, 1).await;
    client
        .publish(command_request_subject("test"), request("r-1", 65.0).into())
        .await
        .expect("request");
    let (id, epoch, reply_to) = next_command(&mut intake).await;
    assert_eq!((id.as_str(), epoch), ("r-1", 1));
    // A host claims a core of epoch 9 exists; the store knows only epoch 1.
    answer_stale(&client, reply_to, "r-1", 9).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while rejections(&env.db.url).await.is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the answer is recorded");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        rejections(&env.db.url).await,
        [(1, "r-1".to_owned(), "stale_epoch".to_owned())]
    );
    // Still running, and still commanding.
    assert!(
        wait_exit(&mut core, Duration::from_secs(2)).await.is_none(),
        "the core runs on"
    );
    client
        .publish(command_request_subject("test"), request("r-2", 66.0).into())
        .await
        .expect("request");
    let (id, epoch, _) = next_command(&mut intake).await;
    assert_eq!((id.as_str(), epoch), ("r-2", 1));
    terminate(core).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_core_told_stale_epoch_exits_fenced_at_once() {
    let env = Env::start(30_000).await;
    let client = async_nats::connect(env.nats.url()).await.expect("connect");
    let mut intake = CommandIntake::subscribe(client.clone(), HOST, INSTANCE, 1, EpochFloor::default())
        .await
        .expect("subscribe");
    // Its own lock check would take ten minutes to notice.
    let mut first = spawn_core(
        &env,
        30_000,
        &[
            "--self-points-interval-ms",
            "0",
            "--lock-check-interval-ms",
            "600000",
        ],
    );
    wait_ready(&env.store, 1).await;
    client
        .publish(command_request_subject("test"), request("r-1", 65.0).into())
        .await
        .expect("request");
    let (id, _, reply_to) = next_command(&mut intake).await;
    assert_eq!(id, "r-1");

    // The first core loses its lock session; a second takes over at epoch 2.
    let holder = env.store.lock_holder().await.expect("lock holder").expect("held");
    let mut admin = pg(&env.db.url).await;
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(holder.backend_pid)
        .fetch_one(&mut admin)
        .await
        .expect("pg_terminate_backend");
    assert!(terminated);
    let second = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    wait_ready(&env.store, 2).await;
    assert!(
        wait_exit(&mut first, Duration::from_millis(500)).await.is_none(),
        "the first core has not noticed"
    );

    // The driver tells the first core its command is stale: it checks the store and stops.
    answer_stale(&client, reply_to, "r-1", 2).await;
    let status = wait_exit(&mut first, Duration::from_secs(5))
        .await
        .expect("the replaced core exits at once");
    assert_eq!(status.code(), Some(4), "the fenced exit code");
    terminate(second).await;
}
