//! Bus permissions from the registry (core runtime spec: "subject-scoped bus permissions [are]
//! the real authorisation model"; ARCHITECTURE.md, "Security model"), against a real nats-server
//! started with the block `sentinel registry nats-config` wrote from the sample registry.
//!
//! Owns: the whole ingest and command path works with the generated users (every driver host as
//! itself, the core as itself, a reader on `state.>`, an operator asking for a command); a host's
//! user is refused by the server when it publishes another host's observations or subscribes to
//! another host's commands, and the refusal reaches the driver library as a clear
//! `PermissionDenied` and is counted; a malformed subject (`obs.<host>` with no instance) never
//! reaches the stream; the reader can neither publish observations nor command. Each operator
//! principal asks only on its own request subjects (`sentinel.command.request.<principal>`, the
//! same for reprocess), one operator is refused on another's, and the core records the
//! principal the subject names, not the one a request's body claims (issue 21 item 2).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use sentinel_bus_nats::CORE_PRINCIPAL;
use sentinel_bus_nats::auth::{OPERATOR_PRINCIPAL, READER_PRINCIPAL, host_principal};
use sentinel_core::reprocess_request::{ReprocessAsk, ReprocessReply};
use sentinel_core::wire::{COMMAND_REQUEST_WILDCARD, command_request_subject, reprocess_request_subject};
use sentinel_core::{CommandRequest, QuarantineReason};
use sentinel_driver::commands::CommandIntake;
use sentinel_driver::connect::{BusConnection, Credentials, RefusedOp};
use sentinel_driver::{BusError, EpochFloor, ObservationPublisher, PublisherConfig};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{
    Env, Transitions, assert_exact_counts, now, spawn_core, terminate, wait_drained, wait_ready,
};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::traffic;

const HOSTS: [&str; 3] = ["ahu-east", "electrical", "plant-a"];

/// One principal's nkey pair: the seed stays with the test (written to a file the process
/// reads), the public key goes into the principals file.
struct Keys {
    seed_file: std::path::PathBuf,
    public: String,
    credentials: Credentials,
}

fn keys(dir: &Path, name: &str) -> Keys {
    let pair = nkeys::KeyPair::new_user();
    let seed = pair.seed().expect("a user key pair has a seed");
    let seed_file = dir.join(format!("{name}.seed"));
    std::fs::write(&seed_file, &seed).expect("write seed");
    Keys {
        seed_file,
        public: pair.public_key(),
        credentials: Credentials::NkeySeed(seed),
    }
}

/// Writes the principals file and runs `sentinel registry nats-config` over the sample
/// registry; returns the generated block.
fn generate_block(
    dir: &Path,
    core: &Keys,
    reader: &Keys,
    operator: &Keys,
    operators: &BTreeMap<&str, Keys>,
    hosts: &BTreeMap<&str, Keys>,
) -> String {
    let mut principals = format!(
        "core = {{ nkey = \"{}\" }}\nreader = {{ nkey = \"{}\" }}\noperator = {{ nkey = \"{}\" }}\n",
        core.public, reader.public, operator.public
    );
    for (name, keys) in operators {
        principals.push_str(&format!("[operators.{name}]\nnkey = \"{}\"\n", keys.public));
    }
    for (host, keys) in hosts {
        principals.push_str(&format!("[hosts.{host}]\nnkey = \"{}\"\n", keys.public));
    }
    let principals_file = dir.join("principals.toml");
    std::fs::write(&principals_file, principals).expect("write principals");
    let out = dir.join("auth.conf");
    let status = Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args(["registry", "nats-config", "registry", "--principals"])
        .arg(&principals_file)
        .arg("--out")
        .arg(&out)
        .stdin(Stdio::null())
        .status()
        .expect("run sentinel registry nats-config");
    assert!(status.success(), "nats-config exits 0");
    std::fs::read_to_string(out).expect("the block was written")
}

async fn connect(server: &NatsServer, principal: &str, keys: &Keys) -> BusConnection {
    BusConnection::connect(&server.url(), principal, &keys.credentials)
        .await
        .unwrap_or_else(|e| panic!("{principal} connects: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_generated_permissions_carry_the_whole_path_and_confine_each_host() {
    let dir = tempdir();
    let core = keys(&dir, "core");
    let reader = keys(&dir, "reader");
    let operator = keys(&dir, "operator");
    let operators: BTreeMap<&str, Keys> = [("ana", keys(&dir, "ana"))].into();
    let hosts: BTreeMap<&str, Keys> = HOSTS.iter().map(|h| (*h, keys(&dir, h))).collect();
    let block = generate_block(&dir, &core, &reader, &operator, &operators, &hosts);
    assert!(block.contains("\"obs.plant-a.>\""), "{block}");

    let server = NatsServer::start_with_config(&block, &core.credentials).await;
    let env = Env::start_on(server, 30_000, core.credentials.clone()).await;
    let prober = connect(&env.nats, CORE_PRINCIPAL, &core).await;
    let reader_connection = connect(&env.nats, READER_PRINCIPAL, &reader).await;
    let transitions = Transitions::subscribe_on(reader_connection.client.clone(), &prober.client).await;

    // Each host's command intake, as that host.
    let connections: BTreeMap<&str, BusConnection> = {
        let mut map = BTreeMap::new();
        for (host, keys) in &hosts {
            map.insert(*host, connect(&env.nats, &host_principal(host), keys).await);
        }
        map
    };
    // The instance of the sample registry's writable `boiler1.setpoint`.
    let mut boiler = CommandIntake::subscribe_on(
        &connections["plant-a"],
        "plant-a",
        "modbus-boiler",
        1,
        EpochFloor::default(),
    )
    .await
    .expect("plant-a may subscribe to its own commands");

    let mut first = spawn_core(
        &env,
        30_000,
        &[
            "--self-points-interval-ms",
            "0",
            "--nats-nkey-seed-file",
            core.seed_file.to_str().expect("UTF-8 path"),
        ],
    );
    wait_ready(&env.store, 1).await;

    // Ingest: every message through the connection of the host its subject names.
    let mut traffic = traffic::generate(&traffic::sample_registry(), 2_000, 1, now());
    let mut publishers: BTreeMap<&str, Arc<ObservationPublisher>> = connections
        .iter()
        .map(|(host, c)| {
            (
                *host,
                Arc::new(ObservationPublisher::on(c, PublisherConfig::default()).expect("publisher")),
            )
        })
        .collect();
    // The core's own host: only the core may publish its self-points.
    publishers.insert(
        sentinel_core::self_points::SELF_HOST,
        Arc::new(ObservationPublisher::on(&prober, PublisherConfig::default()).expect("publisher")),
    );
    let mut refused_bad_subjects = 0;
    for message in &traffic.messages {
        let host = message.subject.split('.').nth(1).expect("obs.<host>...");
        match publishers[host]
            .publish(&message.subject, &message.msg_id, message.payload.clone())
            .await
        {
            Ok(_) => {}
            Err(BusError::PermissionDenied { operation, subject }) => {
                assert_eq!(
                    (operation, subject.as_str()),
                    ("publish", message.subject.as_str())
                );
                assert_eq!(
                    message.subject.split('.').count(),
                    2,
                    "only a subject outside obs.<host>.> is refused: {}",
                    message.subject
                );
                refused_bad_subjects += 1;
            }
            Err(e) => panic!("publish {}: {e}", message.subject),
        }
    }
    // `obs.<host>` without an instance is now stopped at the server rather than quarantined.
    assert!(refused_bad_subjects > 0, "the traffic holds malformed subjects");
    let reason = QuarantineReason::BadSubject.as_str();
    let expected_bad = traffic
        .expected
        .quarantine
        .remove(reason)
        .expect("bad subjects expected");
    assert_eq!(
        refused_bad_subjects, expected_bad,
        "every malformed subject was refused"
    );
    wait_drained(&env, &traffic.expected).await;
    // Wrong-instance messages on a host's own subjects still reach the core and are quarantined:
    // the second line of defence.
    assert!(traffic.expected.quarantine[QuarantineReason::WrongInstance.as_str()] > 0);
    assert_exact_counts(&env, &traffic.expected).await;
    assert!(transitions.total() > 0, "the reader saw transitions on state.>");

    // Commands: each operator asks on its own subject, the core writes and sends, plant-a's
    // driver admits it, and the principal it carries is the subject's, whatever the body says.
    let operator_connection = connect(&env.nats, OPERATOR_PRINCIPAL, &operator).await;
    let ana_connection = connect(&env.nats, "ana", &operators["ana"]).await;
    // Each request a new value: a claim for the value the point already has sends nothing.
    let request = |id: &str, value: f64| {
        bytes::Bytes::from(
            serde_json::to_vec(&CommandRequest {
                command_id: id.into(),
                point_id: "boiler1.setpoint".into(),
                value: serde_json::json!(value),
                unit: None,
                for_s: None,
                release: false,
                principal: "mallory".into(),
                reply_to: None,
                band: None,
            })
            .expect("encode"),
        )
    };
    for (connection, principal, id, value) in [
        (&operator_connection, OPERATOR_PRINCIPAL, "perm-1", 65.0),
        (&ana_connection, "ana", "perm-2", 66.0),
    ] {
        connection
            .client
            .publish(command_request_subject(principal), request(id, value))
            .await
            .expect("request");
        let admitted = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                let received = boiler.next().await.expect("open").expect("received");
                if let Some(command) = received.admitted() {
                    // The host answers on the reply subject the command came with.
                    boiler.answer(&received, Ok(())).await.expect("answer");
                    return command.clone();
                }
            }
        })
        .await
        .expect("the command reaches plant-a's driver");
        assert_eq!(
            (
                admitted.command_id.as_str(),
                admitted.core_epoch,
                admitted.principal.as_str()
            ),
            (id, 1, principal),
            "the core records the subject's principal, not the body's"
        );
    }

    // Each answer reached the core through its reply inbox and is on the record.
    let mut conn = sentinel_tests::harness::pg(&env.db.url).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let results: Vec<(String, String)> = sqlx::query_as(
            "SELECT payload->>'command_id', payload->>'outcome' FROM control_event \
             WHERE kind = 'command_result' ORDER BY seq",
        )
        .fetch_all(&mut conn)
        .await
        .expect("control events");
        if results.len() == 2 {
            assert_eq!(
                results,
                [("perm-1", "applied"), ("perm-2", "applied")].map(|(i, o)| (i.to_owned(), o.to_owned()))
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "both answers written: {results:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A host may answer only the commands it received: the core's reply subjects are not its
    // to publish on otherwise.
    let forged = sentinel_core::wire::command_reply_subject(1, 999_999);
    let seen = connections["plant-a"].refusals.count(RefusedOp::Publish, &forged);
    connections["plant-a"]
        .client
        .publish(forged.clone(), bytes::Bytes::from_static(b"{}"))
        .await
        .expect("sent");
    connections["plant-a"].client.flush().await.expect("flush");
    tokio::time::timeout(
        Duration::from_secs(5),
        connections["plant-a"]
            .refusals
            .refused_after(RefusedOp::Publish, &forged, seen),
    )
    .await
    .expect("a reply subject of a command the host never received is refused");

    // One operator may not ask on another's subject: the server refuses it, so the core never
    // hears a request in another principal's name.
    for (connection, other) in [
        (&ana_connection, OPERATOR_PRINCIPAL),
        (&operator_connection, "ana"),
    ] {
        for subject in [command_request_subject(other), reprocess_request_subject(other)] {
            let seen = connection.refusals.count(RefusedOp::Publish, &subject);
            connection
                .client
                .publish(subject.clone(), request("perm-forged", 67.0))
                .await
                .expect("sent");
            connection.client.flush().await.expect("flush");
            tokio::time::timeout(
                Duration::from_secs(5),
                connection
                    .refusals
                    .refused_after(RefusedOp::Publish, &subject, seen),
            )
            .await
            .unwrap_or_else(|_| panic!("a request on {subject} by another principal is refused"));
        }
    }

    // plant-a's user may not speak for electrical, nor listen to its commands.
    let plant_a = &connections["plant-a"];
    let before = plant_a.refusals.total();
    let err = publishers["plant-a"]
        .publish(
            "obs.electrical.mbus-meter",
            "mbus-meter:1:999999",
            bytes::Bytes::from_static(b"{}"),
        )
        .await
        .expect_err("refused");
    assert!(
        matches!(&err, BusError::PermissionDenied { operation: "publish", subject } if subject == "obs.electrical.mbus-meter"),
        "{err}"
    );
    assert_eq!(
        err.to_string(),
        "the bus refused to let this principal publish on obs.electrical.mbus-meter: not permitted"
    );
    let err = CommandIntake::subscribe_on(plant_a, "electrical", "mbus-meter", 1, EpochFloor::default())
        .await
        .err()
        .expect("subscribing to another host's commands is refused");
    assert!(
        matches!(&err, BusError::PermissionDenied { operation: "subscribe", subject } if subject == "cmd.electrical.mbus-meter"),
        "{err}"
    );
    // Each refusal is counted: these two, and possibly the intake's hello on
    // drv.electrical.mbus-meter, refused too, whose report may still be on its way.
    assert!(plant_a.refusals.total() >= before + 2, "each refusal is counted");
    assert_eq!(
        plant_a
            .refusals
            .count(RefusedOp::Subscribe, "cmd.electrical.mbus-meter"),
        1
    );
    assert_eq!(
        plant_a
            .refusals
            .count(RefusedOp::Publish, "obs.electrical.mbus-meter"),
        1
    );

    // The reader reads only: it can neither inject observations nor ask for commands.
    let reader_publisher =
        ObservationPublisher::on(&reader_connection, PublisherConfig::default()).expect("publisher");
    assert!(matches!(
        reader_publisher
            .publish(
                "obs.plant-a.modbus-pumps",
                "modbus-pumps:1:999999",
                bytes::Bytes::from_static(b"{}")
            )
            .await,
        Err(BusError::PermissionDenied { .. })
    ));
    let seen = reader_connection.refusals.total();
    let reader_subject = command_request_subject(READER_PRINCIPAL);
    reader_connection
        .client
        .publish(reader_subject.clone(), bytes::Bytes::from_static(b"{}"))
        .await
        .expect("sent");
    reader_connection.client.flush().await.expect("flush");
    tokio::time::timeout(
        Duration::from_secs(5),
        reader_connection
            .refusals
            .refused_after(RefusedOp::Publish, &reader_subject, 0),
    )
    .await
    .expect("the reader's command request is refused");
    assert!(reader_connection.refusals.total() > seen);
    // The operator may ask, but not listen to others' requests (it is not the core).
    let _requests = operator_connection
        .client
        .subscribe(COMMAND_REQUEST_WILDCARD)
        .await
        .expect("the subscribe call itself returns");
    assert!(matches!(
        operator_connection
            .check_subscription(COMMAND_REQUEST_WILDCARD, 0)
            .await,
        Err(BusError::PermissionDenied {
            operation: "subscribe",
            ..
        })
    ));

    // A reprocess: the operator may ask the core and hears its answer (here the version rule's
    // refusal, which changes nothing); a driver host may not ask.
    let ask = ReprocessAsk {
        request_id: "perm-1".into(),
        principal: "mallory".into(),
        glob: "*".into(),
        from_us: 0,
        to_us: None,
        registry_version: 999,
        dry_run: true,
        chunk_rows: 100,
    };
    let ask_bytes = bytes::Bytes::from(serde_json::to_vec(&ask).expect("encode"));
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        operator_connection
            .client
            .request(reprocess_request_subject(OPERATOR_PRINCIPAL), ask_bytes.clone()),
    )
    .await
    .expect("the core answers in time")
    .expect("the operator may ask for a reprocess");
    assert!(
        matches!(
            serde_json::from_slice::<ReprocessReply>(&answer.payload),
            Ok(ReprocessReply::Version { asked: 999, .. })
        ),
        "{:?}",
        String::from_utf8_lossy(&answer.payload)
    );
    let host = &connections["plant-a"];
    let seen = host.refusals.total();
    let operator_subject = reprocess_request_subject(OPERATOR_PRINCIPAL);
    host.client
        .publish(operator_subject.clone(), ask_bytes)
        .await
        .expect("sent");
    host.client.flush().await.expect("flush");
    tokio::time::timeout(
        Duration::from_secs(5),
        host.refusals
            .refused_after(RefusedOp::Publish, &operator_subject, 0),
    )
    .await
    .expect("a driver host's reprocess request is refused");
    assert!(host.refusals.total() > seen);

    assert!(
        first.try_wait().expect("try_wait").is_none(),
        "the core ran throughout"
    );
    terminate(first).await;
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "sentinel-bus-permissions-{}-{}",
        std::process::id(),
        now().0
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}
