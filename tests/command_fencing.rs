//! Bus fencing, the driver half, against a real nats-server and real epochs from the
//! PostgreSQL lock (core runtime spec, "Fencing the bus"; exit criteria: "Together with the
//! driver-side rejection test in Driver Contract, that closes the fencing path end to end").
//!
//! A driver's command intake admits a command from the core that holds the lock, keeps
//! admitting the old core's commands only until it has seen the new core's epoch, and from
//! then on refuses them with outcome `rejected`, reason `stale_epoch`. It sees the new epoch
//! when the new core announces itself (restart step 7), before that core commands anything.
//! The first test sends the two cores' messages itself, stamped with the epochs two real lock
//! acquisitions produced; the second runs two real `sentinel run` processes, whose commands
//! the driver answers (`rejected: device_error`, then `applied`) and each core writes the
//! answer to its own command as a `command_result` event (issue 21 item 4).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use sentinel_core::wire::{
    CommandEnvelope, CommandOutcome, CommandReply, CoreStarted, DriverHello, STALE_EPOCH, ToDriver,
    cmd_subject, driver_subject,
};
use sentinel_driver::EpochFloor;
use sentinel_driver::commands::{CommandIntake, MALFORMED, NotApplied, Received};
use sentinel_driver::state::DriverState;
use sentinel_ports::{Lease, Store};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::nats::{NatsServer, subscribe_synced};
use sentinel_tests::pg::TestDb;

const HOST: &str = "plant-a";
/// The instance of the sample registry's writable `boiler1.setpoint`.
const INSTANCE: &str = "modbus-boiler";

fn command(id: &str, epoch: u32) -> Vec<u8> {
    ToDriver::Command(CommandEnvelope {
        v: 1,
        command_id: id.to_owned(),
        core_epoch: epoch,
        point_id: "pump1.state".to_owned(),
        value: serde_json::json!(1),
        principal: "operator:test".to_owned(),
        core_start: None,
    })
    .to_bytes()
    .to_vec()
}

/// Publishes a core's `core_started` announcement to the driver (restart step 7).
async fn announce(client: &async_nats::Client, core_epoch: u32) {
    let announcement = ToDriver::CoreStarted(CoreStarted {
        v: 1,
        core_epoch,
        registry_version: 1,
        core_start: None,
    });
    client
        .publish(cmd_subject(HOST, INSTANCE), announcement.to_bytes())
        .await
        .expect("announce");
}

/// Sends a command and waits for the driver's answer; retries while the driver's subscription
/// is not yet known to the server ("no responders").
async fn send(client: &async_nats::Client, payload: Vec<u8>) -> CommandReply {
    for _ in 0..100 {
        match client
            .request(cmd_subject(HOST, INSTANCE), payload.clone().into())
            .await
        {
            Ok(message) => return serde_json::from_slice(&message.payload).expect("reply JSON"),
            Err(e) if e.kind() == async_nats::RequestErrorKind::NoResponders => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("request: {e}"),
        }
    }
    panic!("the driver never subscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_refuses_the_deposed_cores_commands_once_it_has_seen_the_new_epoch() {
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    let nats = NatsServer::start().await;

    // Core A takes the lock, then loses it to core B.
    let a = store.acquire().await.expect("core A locks");
    let epoch_a = a.epoch();
    a.release().await.expect("A's session ends");
    let b = store.acquire().await.expect("core B locks");
    let epoch_b = b.epoch();
    assert!(epoch_b > epoch_a);

    // The driver's hellos, as a core would hear them.
    let cores = async_nats::connect(nats.url()).await.expect("cores connect");
    let hello_subject = driver_subject(HOST, INSTANCE);
    let mut hellos = subscribe_synced(&cores, &hello_subject, &hello_subject, b"probe").await;

    // The driver instance's intake; what it admits is what the driver applies.
    let applied: Arc<Mutex<Vec<String>>> = Arc::default();
    let heard: Arc<Mutex<Vec<(u32, bool)>>> = Arc::default();
    let driver_client = async_nats::connect(nats.url()).await.expect("driver connects");
    let mut intake = CommandIntake::subscribe(driver_client, HOST, INSTANCE, 7, EpochFloor::default())
        .await
        .expect("subscribe");
    let (sink, heard_sink) = (applied.clone(), heard.clone());
    tokio::spawn(async move {
        while let Some(received) = intake.next().await {
            match received.expect("intake") {
                Received::CoreStarted { core_epoch, current } => {
                    heard_sink.lock().expect("lock").push((core_epoch, current))
                }
                received => {
                    if let Some(command) = received.admitted() {
                        sink.lock().expect("lock").push(command.command_id.clone());
                        intake.answer(&received, Ok(())).await.expect("answer");
                    }
                }
            }
        }
    });
    // The intake says hello on subscribing, with its source epoch and the floor it started at.
    let message = tokio::time::timeout(Duration::from_secs(10), hellos.next())
        .await
        .expect("the driver says hello")
        .expect("subscription open");
    let hello: DriverHello = serde_json::from_slice(&message.payload).expect("hello JSON");
    assert_eq!(
        (
            hello.driver_instance.as_str(),
            hello.source_epoch,
            hello.highest_epoch_seen
        ),
        (INSTANCE, 7, 0)
    );

    // A, not yet aware it was replaced, reaches the driver before B has: still admitted.
    let reply = send(&cores, command("a-1", epoch_a)).await;
    assert_eq!(reply.outcome, CommandOutcome::Applied);
    // B announces itself (restart step 7): the floor rises before B commands anything, and
    // the driver answers with a hello at B's epoch.
    announce(&cores, epoch_b).await;
    let answer = loop {
        let message = tokio::time::timeout(Duration::from_secs(10), hellos.next())
            .await
            .expect("the driver answers the announcement")
            .expect("subscription open");
        let hello: DriverHello = serde_json::from_slice(&message.payload).expect("hello JSON");
        if hello.highest_epoch_seen == epoch_b {
            break hello;
        }
    };
    assert_eq!(answer.source_epoch, 7);
    // From now on nothing of A's is applied.
    let reply = send(&cores, command("a-2", epoch_a)).await;
    assert_eq!(reply.outcome, CommandOutcome::Rejected);
    assert_eq!(reply.reason.as_deref(), Some(STALE_EPOCH));
    assert_eq!(
        (reply.command_id.as_str(), reply.highest_epoch_seen),
        ("a-2", epoch_b)
    );
    // A's late announcement does not lower it either.
    announce(&cores, epoch_a).await;
    let reply = send(&cores, command("a-3", epoch_a)).await;
    assert_eq!(reply.reason.as_deref(), Some(STALE_EPOCH));
    // Garbage is refused too, and does not move the floor. So is a bare envelope without its
    // `kind`.
    let reply = send(&cores, b"{\"v\":1,\"core_epoch\":".to_vec()).await;
    assert_eq!(reply.reason.as_deref(), Some(MALFORMED));
    let bare = serde_json::to_vec(&CommandEnvelope {
        v: 1,
        command_id: "bare".to_owned(),
        core_epoch: epoch_b,
        point_id: "pump1.state".to_owned(),
        value: serde_json::json!(1),
        principal: "operator:test".to_owned(),
        core_start: None,
    })
    .expect("encode");
    let reply = send(&cores, bare).await;
    assert_eq!(reply.reason.as_deref(), Some(MALFORMED));
    let reply = send(&cores, command("b-1", epoch_b)).await;
    assert_eq!(
        (reply.outcome, reply.highest_epoch_seen),
        (CommandOutcome::Applied, epoch_b)
    );

    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        *applied.lock().expect("lock"),
        ["a-1", "b-1"],
        "what the driver applied"
    );
    assert_eq!(
        *heard.lock().expect("lock"),
        [(epoch_b, true), (epoch_a, false)],
        "the announcements the driver heard"
    );
    b.release().await.expect("release");
}

/// A driver that applied a command, persisted its id and answered, then restarted from its
/// state file: the same command sent again (a core re-sending one it got no answer to) is
/// answered `applied` and not handed to the driver; a new one is (issue 21 item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_driver_answers_a_re_sent_command_without_applying_it_twice() {
    let nats = NatsServer::start().await;
    let cores = async_nats::connect(nats.url()).await.expect("cores connect");
    let dir = std::env::temp_dir().join(format!("sentinel-driver-restart-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let state_file = dir.join("state.json");
    let _ = std::fs::remove_file(&state_file);
    let mut applies = Vec::new();

    // The first run: applies c-1, persists, answers.
    let mut state = DriverState::load(&state_file).expect("a first start");
    state.source_epoch += 1;
    let client = async_nats::connect(nats.url()).await.expect("driver connects");
    let mut intake =
        CommandIntake::subscribe(client, HOST, INSTANCE, state.source_epoch, EpochFloor::default())
            .await
            .expect("subscribe");
    let (reply, ()) = tokio::join!(send(&cores, command("c-1", 3)), async {
        let received = next_received(&mut intake).await;
        let applied = received.admitted().expect("admitted").command_id.clone();
        applies.push(applied.clone());
        intake.mark_applied(&applied);
        DriverState {
            source_epoch: state.source_epoch,
            highest_epoch_seen: intake.highest_seen(),
            highest_epoch_core_start: intake.floor().core_start,
            applied: intake.applied_ids(),
        }
        .save(&state_file)
        .expect("persist");
        intake.answer(&received, Ok(())).await.expect("answer");
    });
    assert_eq!(reply.outcome, CommandOutcome::Applied);
    drop(intake);

    // The restart: the state file gives the floor and the ids back.
    let mut state = DriverState::load(&state_file).expect("the persisted state");
    assert_eq!(
        (state.highest_epoch_seen, state.applied.as_slice()),
        (3, ["c-1".to_owned()].as_slice())
    );
    state.source_epoch += 1;
    let client = async_nats::connect(nats.url()).await.expect("driver reconnects");
    let mut intake = CommandIntake::subscribe(client, HOST, INSTANCE, state.source_epoch, state.floor())
        .await
        .expect("subscribe");
    intake.restore_applied(state.applied);
    for (id, already) in [("c-1", true), ("c-2", false)] {
        let (reply, received) = tokio::join!(send(&cores, command(id, 3)), async {
            let received = next_received(&mut intake).await;
            if let Some(command) = received.admitted() {
                applies.push(command.command_id.clone());
                intake.answer(&received, Ok(())).await.expect("answer");
            }
            received
        });
        assert_eq!(
            (reply.command_id.as_str(), reply.outcome),
            (id, CommandOutcome::Applied)
        );
        assert_eq!(
            matches!(received, Received::AlreadyApplied { .. }),
            already,
            "{id}: {received:?}"
        );
    }
    assert_eq!(applies, ["c-1", "c-2"], "each command applied exactly once");
    let _ = std::fs::remove_dir_all(&dir);
}

async fn next_received(intake: &mut CommandIntake) -> Received {
    tokio::time::timeout(Duration::from_secs(10), intake.next())
        .await
        .expect("a message arrives")
        .expect("subscription open")
        .expect("intake")
}

async fn next_command(intake: &mut CommandIntake) -> Received {
    let received = next_received(intake).await;
    assert!(
        matches!(received, Received::Command { .. } | Received::Refused { .. }),
        "expected a command, got {received:?}"
    );
    received
}

/// A real `sentinel run` turns a request into a written, epoch-stamped `command_issued` event
/// and then a command to the point's driver; after a takeover, the driver refuses the old
/// core's command with `stale_epoch`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_core_writes_then_sends_its_commands_and_a_replaced_ones_are_refused() {
    use sentinel_core::CommandRequest;
    use sentinel_core::wire::command_request_subject;
    use sentinel_tests::harness::{Env, pg, spawn_core, terminate, wait_ready};

    let env = Env::start(30_000).await;
    let driver_client = async_nats::connect(env.nats.url())
        .await
        .expect("driver connects");
    let mut intake =
        CommandIntake::subscribe(driver_client.clone(), HOST, INSTANCE, 1, EpochFloor::default())
            .await
            .expect("subscribe");
    let operator = async_nats::connect(env.nats.url())
        .await
        .expect("operator connects");
    // Each request a new value: a claim for the value a point already has sends nothing (the
    // second core restores the first one's desired value).
    let request = |id: &str, value: f64| {
        serde_json::to_vec(&CommandRequest {
            command_id: id.to_owned(),
            point_id: "boiler1.setpoint".to_owned(),
            value: serde_json::json!(value),
            unit: None,
            for_s: None,
            release: false,
            // Not believed: the core records the principal the subject names.
            principal: "someone-else".to_owned(),
            reply_to: None,
            band: None,
        })
        .expect("encode")
    };

    let first = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    // Restart step 7: the core announces its epoch to every driver instance.
    assert_eq!(
        next_received(&mut intake).await,
        Received::CoreStarted {
            core_epoch: 1,
            current: true
        }
    );
    wait_ready(&env.store, 1).await;
    operator
        .publish(command_request_subject("test"), request("r-1", 65.0).into())
        .await
        .expect("request");
    let received = next_command(&mut intake).await;
    let command_a = received.admitted().expect("admitted").clone();
    assert_eq!((command_a.command_id.as_str(), command_a.core_epoch), ("r-1", 1));
    // The device did not take it: the driver says so, and the core writes the answer.
    let answer = intake
        .answer(&received, Err(NotApplied::DeviceError))
        .await
        .expect("answer")
        .expect("an admitted command is answered");
    assert_eq!(
        (answer.outcome, answer.reason.as_deref()),
        (CommandOutcome::Rejected, Some("device_error"))
    );
    let mut conn = pg(&env.db.url).await;
    wait_for_results(&mut conn, 1).await;
    terminate(first).await;

    let second = spawn_core(&env, 30_000, &["--self-points-interval-ms", "0"]);
    assert_eq!(
        next_received(&mut intake).await,
        Received::CoreStarted {
            core_epoch: 2,
            current: true
        }
    );
    assert_eq!(intake.highest_seen(), 2);
    wait_ready(&env.store, 2).await;

    // The replaced core's command, arriving late and before the new core has commanded this
    // driver at all, is refused: the announcement already raised the floor.
    let late = ToDriver::Command(command_a.clone()).to_bytes().to_vec();
    let (reply, received) = tokio::join!(send(&operator, late), next_command(&mut intake));
    assert_eq!(
        (reply.outcome, reply.reason.as_deref()),
        (CommandOutcome::Rejected, Some(STALE_EPOCH))
    );
    assert!(received.admitted().is_none(), "the driver does not apply it");

    operator
        .publish(command_request_subject("test"), request("r-2", 66.0).into())
        .await
        .expect("request");
    let received = next_command(&mut intake).await;
    assert_eq!(received.admitted().map(|c| c.core_epoch), Some(2));
    intake.answer(&received, Ok(())).await.expect("answer");
    wait_for_results(&mut conn, 2).await;

    // A driver that starts after the core (or missed the announcement) says hello with a lower
    // epoch and is answered with the announcement.
    let mut late_driver = CommandIntake::subscribe(
        driver_client,
        "electrical",
        "mbus-meter",
        1,
        EpochFloor::default(),
    )
    .await
    .expect("subscribe");
    assert_eq!(
        next_received(&mut late_driver).await,
        Received::CoreStarted {
            core_epoch: 2,
            current: true
        }
    );
    assert_eq!(late_driver.highest_seen(), 2);
    terminate(second).await;

    // Each command was written before it was sent, by its own epoch.
    let written: Vec<(i32, String, String)> = sqlx::query_as(
        "SELECT core_epoch, principal, payload->>'command_id' FROM control_event \
         WHERE kind = 'command_issued' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("control events");
    assert_eq!(
        written,
        vec![
            (1, "test".to_owned(), "r-1".to_owned()),
            (2, "test".to_owned(), "r-2".to_owned()),
        ]
    );
    // Each answer is on the record, by the core that sent the command, in the driver host's
    // name; the refused late command was never this core's to record.
    let results: Vec<(i32, String, String, String, Option<String>)> = sqlx::query_as(
        "SELECT core_epoch, principal, payload->>'command_id', payload->>'outcome', \
         payload->>'reason' FROM control_event WHERE kind = 'command_result' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("control events");
    let host = format!("driver-{HOST}");
    assert_eq!(
        results,
        vec![
            (
                1,
                host.clone(),
                "r-1".to_owned(),
                "rejected".to_owned(),
                Some("device_error".to_owned())
            ),
            (2, host, "r-2".to_owned(), "applied".to_owned(), None),
        ]
    );
}

/// Waits until `count` `command_result` events are written.
async fn wait_for_results(conn: &mut sqlx::PgConnection, count: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (written,): (i64,) =
            sqlx::query_as("SELECT count(*) FROM control_event WHERE kind = 'command_result'")
                .fetch_one(&mut *conn)
                .await
                .expect("count");
        if written >= count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} command results written"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
