//! The shared harness of the end-to-end and process tests (`tests/e2e.rs`,
//! `tests/single_writer.rs`), so both observe the real system the same way.
//!
//! Owns:
//! - [`Env`]: a private nats-server, a fresh migrated PostgreSQL database, the store over it
//!   and a bus over the server with the test's ack wait;
//! - [`Transitions`]: the transitions on `state.>`, counted by message key and by core epoch,
//!   from a subscription the server has provably registered;
//! - progress and outcome checks: [`committed`], [`wait_drained`], [`assert_exact_counts`]
//!   (DESIGN.md §5 invariants the real system lets us observe);
//! - the `sentinel` process: [`spawn_core`], [`wait_ready`], [`wait_exit`], [`terminate`]; or the core inside
//!   the test's own process: [`InProcessCore`];
//! - small helpers: [`pg`] (a plain connection for direct SQL) and [`now`].

use std::collections::BTreeMap;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::{Micros, RetentionClass};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, ColdStart, Store};
use sentinel_runtime::startup::Started;
use sentinel_runtime::{self as runtime, RunOutcome, RuntimeConfig};
use sentinel_store_pg::{PgStore, PgStoreConfig};

use crate::bin::{sentinel_bin, workspace_root};
use sentinel_driver::{Credentials, ObservationPublisher, PublisherConfig};

use crate::nats::NatsServer;
use crate::pg::{TestDb, TestRoles};
use crate::traffic::{Expected, Traffic};

/// How long a drain (everything accepted committed, nothing pending) may take.
pub const DRAIN_TIMEOUT_S: u64 = 120;

/// A core running inside the test's process: the production runtime spawned on the caller's
/// tokio runtime over what `startup::start` returned.
pub struct InProcessCore {
    pub epoch: u32,
    stop_tx: tokio::sync::oneshot::Sender<()>,
    handle: tokio::task::JoinHandle<RunOutcome>,
}

impl InProcessCore {
    pub fn spawn<B: Bus, S: Store>(started: Started<B, S>, store: S) -> InProcessCore {
        InProcessCore::spawn_with(started, store, RuntimeConfig::default())
    }

    /// [`InProcessCore::spawn`] with a runtime configuration of the caller's (an exporter).
    pub fn spawn_with<B: Bus, S: Store>(
        started: Started<B, S>,
        store: S,
        config: RuntimeConfig,
    ) -> InProcessCore {
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let epoch = started.core.epoch();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let handle = tokio::spawn(runtime::run(
            started.core,
            started.bus,
            started.consumer,
            store,
            started.lease,
            clock,
            config,
            async move {
                let _ = stop_rx.await;
            },
        ));
        InProcessCore {
            epoch,
            stop_tx,
            handle,
        }
    }

    /// Asks for an orderly stop, waits for it (at most 30 s) and asserts it exited 0.
    pub async fn stop(self) -> RunOutcome {
        let _ = self.stop_tx.send(());
        let outcome = tokio::time::timeout(Duration::from_secs(30), self.handle)
            .await
            .expect("core stops")
            .expect("join");
        assert_eq!(outcome.exit.code, 0, "orderly stop: {}", outcome.exit.why);
        outcome
    }
}

/// Waits (at most 60 s) until the core that took `epoch` has bound its consumer, subscribed
/// to its inbound subjects and recorded its cold start.
pub async fn wait_ready(store: &PgStore, epoch: u32) -> ColdStart {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let starts = store.cold_starts().await.expect("cold starts");
        if let Some(start) = starts
            .into_iter()
            .find(|s| s.epoch == epoch && s.ready_at.is_some())
        {
            return start;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the core of epoch {epoch} never became ready"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A bus connected with `config`, its observation stream ensured.
pub async fn bus_with_stream(config: NatsBusConfig) -> NatsBus {
    let bus = NatsBus::connect(config).await.expect("connect bus");
    bus.ensure_stream().await.expect("stream");
    bus
}

/// A private nats-server and a fresh migrated database, with a store and a bus over them.
/// `store` is the schema owner's (tests read and arrange through it); cores run as the writer
/// role, `sentinel db grants` having given it exactly what `migrations/0003_roles.sql` lists.
pub struct Env {
    pub nats: NatsServer,
    pub db: TestDb,
    pub store: PgStore,
    pub bus: NatsBus,
    pub roles: TestRoles,
    /// The store as the core's writer role.
    pub writer_store: PgStore,
}

impl Env {
    /// Starts the server, creates and migrates the database, connects a bus whose consumer
    /// redelivers after `ack_wait_ms` and ensures the stream.
    pub async fn start(ack_wait_ms: u64) -> Env {
        Env::start_on(NatsServer::start().await, ack_wait_ms, Credentials::None).await
    }

    /// As [`Env::start`] over a server of the caller's; the test's own bus connects as
    /// `bus_credentials`.
    pub async fn start_on(nats: NatsServer, ack_wait_ms: u64, bus_credentials: Credentials) -> Env {
        let mut db = TestDb::create().await.expect("test database");
        let store = PgStore::connect(&db.url, PgStoreConfig::default())
            .await
            .expect("connect store");
        store.migrate().await.expect("migrate");
        let roles = db.create_roles().await.expect("roles");
        store
            .apply_grants(&roles.writer, &roles.reader)
            .await
            .expect("grants");
        let writer_store = PgStore::connect(&roles.writer_url, PgStoreConfig::default())
            .await
            .expect("connect as the writer");
        let bus = bus_with_stream(NatsBusConfig {
            url: nats.url(),
            ack_wait_ms,
            credentials: bus_credentials,
            ..NatsBusConfig::default()
        })
        .await;
        Env {
            nats,
            db,
            store,
            bus,
            roles,
            writer_store,
        }
    }
}

/// A message key: `(driver_instance, source_epoch, source_seq)`.
pub type MessageKey = (String, u64, u64);

/// One transition as a subscriber saw it.
#[derive(Clone, Debug)]
pub struct TransitionSeen {
    pub point_id: String,
    pub quality: String,
    /// RFC 3339, as published.
    pub observed_at: String,
    /// Set for a watchdog transition (no message key).
    pub control_seq: Option<i64>,
    pub core_epoch: u64,
    /// When the subscriber received it.
    pub received_at: std::time::Instant,
}

/// Transitions on `state.>`: how often each message key was published, and by which epoch;
/// watchdog transitions (identified by their control event) are counted per control seq.
#[derive(Clone, Default)]
pub struct Transitions {
    by_key: Arc<Mutex<BTreeMap<MessageKey, u32>>>,
    by_control_seq: Arc<Mutex<BTreeMap<i64, u32>>>,
    by_epoch: Arc<Mutex<BTreeMap<u64, u64>>>,
    seen: Arc<Mutex<Vec<TransitionSeen>>>,
    /// Messages the client dropped because the collector fell behind (async-nats's slow
    /// consumer event), so a test that misses a transition can tell a drop from a core that
    /// never published.
    dropped: Arc<AtomicU64>,
}

/// Room for every transition a test's drain publishes before the collector reads them (a
/// 60,000-message drain publishes about as many). async-nats's default, 65,536, drops the rest
/// once a loaded machine's debug-built collector falls that far behind: CI saw a drain test
/// miss exactly the watchdog transitions published last.
const TRANSITIONS_QUEUED_MAX: usize = 1 << 20;

impl Transitions {
    /// Subscribes to `state.>`; returns once the server has registered the subscription, so
    /// nothing published afterwards is missed.
    pub async fn subscribe(url: &str) -> Transitions {
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        let client = async_nats::ConnectOptions::new()
            .subscription_capacity(TRANSITIONS_QUEUED_MAX)
            .event_callback(move |event| {
                if matches!(event, async_nats::Event::SlowConsumer(_)) {
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                async {}
            })
            .connect(url)
            .await
            .expect("subscriber connects");
        let sub = crate::nats::subscribe_synced(&client, "state.>", "state._sync", b"").await;
        let mut transitions = Transitions::collect(client, sub);
        transitions.dropped = dropped;
        transitions
    }

    /// How many slow-consumer events the subscriber's client reported (each for a message it
    /// dropped; the event queue may itself drop some, so more than 0 is what this tells);
    /// always 0 for [`Transitions::subscribe_on`]'s, whose client the caller made.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Subscribes `client` (which may only subscribe: a read-only principal) to `state.>`, made
    /// sure of by a probe that `prober` (allowed to publish on `state.>`) sends.
    pub async fn subscribe_on(client: async_nats::Client, prober: &async_nats::Client) -> Transitions {
        let mut sub = client.subscribe("state.>").await.expect("subscribe to state.>");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            prober
                .publish("state._sync", bytes::Bytes::new())
                .await
                .expect("probe");
            match tokio::time::timeout(Duration::from_millis(100), sub.next()).await {
                Ok(Some(message)) if message.subject.as_str() == "state._sync" => break,
                Ok(Some(other)) => panic!("unexpected {} before the probe", other.subject),
                Ok(None) => panic!("subscription closed"),
                Err(_) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "the probe never came back"
                ),
            }
        }
        // Later probes may still be on their way: collect ignores them.
        Transitions::collect(client, sub)
    }

    fn collect(client: async_nats::Client, mut sub: async_nats::Subscriber) -> Transitions {
        let transitions = Transitions::default();
        let sink = transitions.clone();
        tokio::spawn(async move {
            let _client = client;
            while let Some(message) = sub.next().await {
                if message.subject.as_str() == "state._sync" {
                    continue;
                }
                let t: serde_json::Value =
                    serde_json::from_slice(&message.payload).expect("transition is JSON");
                let control_seq = t["control_seq"].as_i64();
                match control_seq {
                    Some(seq) => *sink.by_control_seq.lock().expect("lock").entry(seq).or_default() += 1,
                    None => {
                        let key = (
                            t["key"]["driver_instance"]
                                .as_str()
                                .expect("key.driver_instance")
                                .to_owned(),
                            t["key"]["source_epoch"].as_u64().expect("key.source_epoch"),
                            t["key"]["source_seq"].as_u64().expect("key.source_seq"),
                        );
                        *sink.by_key.lock().expect("lock").entry(key).or_default() += 1;
                    }
                }
                let epoch = t["core_epoch"].as_u64().expect("core_epoch");
                *sink.by_epoch.lock().expect("lock").entry(epoch).or_default() += 1;
                sink.seen.lock().expect("lock").push(TransitionSeen {
                    point_id: t["point_id"].as_str().unwrap_or_default().to_owned(),
                    quality: t["quality"].as_str().unwrap_or_default().to_owned(),
                    observed_at: t["observed_at"].as_str().unwrap_or_default().to_owned(),
                    control_seq,
                    core_epoch: epoch,
                    received_at: std::time::Instant::now(),
                });
            }
        });
        transitions
    }

    /// Every transition seen, duplicates included.
    pub fn total(&self) -> u64 {
        let rows: u64 = self
            .by_key
            .lock()
            .expect("lock")
            .values()
            .map(|&n| u64::from(n))
            .sum();
        let controls: u64 = self
            .by_control_seq
            .lock()
            .expect("lock")
            .values()
            .map(|&n| u64::from(n))
            .sum();
        rows + controls
    }

    /// The message keys transitions were published for, with how often each.
    pub fn keys(&self) -> BTreeMap<MessageKey, u32> {
        self.by_key.lock().expect("lock").clone()
    }

    /// Every transition seen so far, in arrival order.
    pub fn seen(&self) -> Vec<TransitionSeen> {
        self.seen.lock().expect("lock").clone()
    }

    /// The transitions published by the core of `epoch`.
    pub fn of_epoch(&self, epoch: u32) -> u64 {
        self.by_epoch
            .lock()
            .expect("lock")
            .get(&u64::from(epoch))
            .copied()
            .unwrap_or(0)
    }

    /// No message key's transition was published twice.
    pub fn assert_at_most_once(&self) {
        let counts = self.by_key.lock().expect("lock");
        let twice: Vec<_> = counts.iter().filter(|&(_, &n)| n > 1).take(5).collect();
        assert!(
            twice.is_empty(),
            "transitions published more than once: {twice:?}"
        );
        let controls = self.by_control_seq.lock().expect("lock");
        let twice: Vec<_> = controls.iter().filter(|&(_, &n)| n > 1).take(5).collect();
        assert!(
            twice.is_empty(),
            "watchdog transitions published more than once: {twice:?}"
        );
    }
}

/// Messages committed so far: rows plus quarantined.
pub async fn committed(store: &PgStore) -> u64 {
    let rows = store.row_counts().await.expect("row counts").total();
    let quarantined: u64 = store
        .quarantine_counts()
        .await
        .expect("quarantine")
        .iter()
        .map(|(_, n)| n)
        .sum();
    rows + quarantined
}

/// Waits until everything accepted is committed and the consumer has nothing pending.
pub async fn wait_drained(env: &Env, expected: &Expected) {
    wait_store_drained(&env.store, &env.bus, expected, DRAIN_TIMEOUT_S).await;
}

/// [`wait_drained`] for a test that keeps its own store and bus (its own servers): every
/// accepted message committed and nothing pending within `timeout_s`, never more committed
/// than accepted.
pub async fn wait_store_drained(store: &PgStore, bus: &NatsBus, expected: &Expected, timeout_s: u64) {
    wait_store_drained_checking(store, bus, expected, timeout_s, || {}).await;
}

/// [`wait_store_drained`], calling `check` before every poll (a test that must also see its
/// core process stay up, say, panics there).
pub async fn wait_store_drained_checking(
    store: &PgStore,
    bus: &NatsBus,
    expected: &Expected,
    timeout_s: u64,
    mut check: impl FnMut(),
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout_s);
    loop {
        check();
        let done = committed(store).await;
        let lag = bus.lag().await.unwrap_or_default();
        if done == expected.accepted() && lag.pending == 0 && lag.ack_pending == 0 {
            return;
        }
        assert!(
            done <= expected.accepted(),
            "more committed ({done}) than accepted ({})",
            expected.accepted()
        );
        assert!(
            tokio::time::Instant::now() < deadline,
            "not drained within {timeout_s} s: {done}/{} committed in {}, {lag:?}",
            expected.accepted(),
            store.host()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Exactly once, counted with SQL from outside the core: rows per class and quarantine by
/// reason as the traffic's oracle says, and no two rows sharing a message key.
pub async fn assert_exactly_once(store: &PgStore, url: &str, expected: &Expected) {
    let rows = store.row_counts().await.expect("row counts");
    for class in RetentionClass::ALL {
        assert_eq!(
            rows.get(class),
            expected.rows[class.index()],
            "rows in observation_{}",
            class.as_str()
        );
    }
    let quarantine: BTreeMap<&'static str, u64> = store
        .quarantine_counts()
        .await
        .expect("quarantine")
        .into_iter()
        .map(|(reason, n)| (reason.as_str(), n))
        .collect();
    assert_eq!(quarantine, expected.quarantine, "quarantine by reason");
    let mut conn = pg(url).await;
    let (all, distinct): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (driver_instance, source_epoch, source_seq)) FROM observation",
    )
    .fetch_one(&mut conn)
    .await
    .expect("row keys");
    assert_eq!(all as u64, expected.rows_total());
    assert_eq!(distinct, all, "no two rows share a message key");
}

/// Exact counts per class, the view equals their sum, no two rows share a message key, bad
/// and unavailable rows, °F stored in °C, quarantine by reason with full payloads, and a
/// checkpointed point_state for every point that has rows.
pub async fn assert_exact_counts(env: &Env, expected: &Expected) {
    let rows = env.store.row_counts().await.expect("row counts");
    for class in RetentionClass::ALL {
        assert_eq!(
            rows.get(class),
            expected.rows[class.index()],
            "rows in observation_{}",
            class.as_str()
        );
    }
    let mut conn = pg(&env.db.url).await;
    let view: i64 = sqlx::query_scalar("SELECT count(*) FROM observation")
        .fetch_one(&mut conn)
        .await
        .expect("view");
    assert_eq!(
        view as u64,
        rows.total(),
        "the observation view equals the sum of the three"
    );
    let distinct: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT DISTINCT driver_instance, source_epoch, source_seq FROM observation) k",
    )
    .fetch_one(&mut conn)
    .await
    .expect("distinct keys");
    assert_eq!(distinct as u64, rows.total(), "no two rows share a message key");
    let bad: i64 = sqlx::query_scalar("SELECT count(*) FROM observation WHERE quality = 'bad'")
        .fetch_one(&mut conn)
        .await
        .expect("bad rows");
    assert_eq!(bad as u64, expected.rows_bad);
    let unavailable: i64 =
        sqlx::query_scalar("SELECT count(*) FROM observation WHERE quality = 'unavailable'")
            .fetch_one(&mut conn)
            .await
            .expect("unavailable rows");
    assert_eq!(unavailable as u64, expected.rows_unavailable);
    let converted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM observation WHERE unit_native = 'degF' AND quality = 'live' \
         AND abs(value_num - (native_num - 32) * 5.0 / 9.0) > 1e-9",
    )
    .fetch_one(&mut conn)
    .await
    .expect("conversion check");
    assert_eq!(
        converted, 0,
        "every °F reading is stored in °C beside its native value"
    );
    let quarantine: BTreeMap<&'static str, u64> = env
        .store
        .quarantine_counts()
        .await
        .expect("quarantine")
        .into_iter()
        .map(|(reason, n)| (reason.as_str(), n))
        .collect();
    assert_eq!(quarantine, expected.quarantine, "quarantine by reason");
    let full_payloads: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM quarantine WHERE reason <> 'oversized' AND length(payload) <> payload_bytes",
    )
    .fetch_one(&mut conn)
    .await
    .expect("payloads");
    assert_eq!(full_payloads, 0, "quarantine keeps the full native payload");
    let states: i64 = sqlx::query_scalar("SELECT count(*) FROM point_state WHERE quality <> 'unknown'")
        .fetch_one(&mut conn)
        .await
        .expect("point_state");
    assert_eq!(
        states as u64, expected.points_with_rows,
        "a checkpointed state for every point that has rows"
    );
}

/// A minimal HTTP/1.0 GET of a nats-server monitoring endpoint (the server closes the
/// connection after the response, so reading to the end is the whole body).
pub async fn monitor(server: &NatsServer, path: &str) -> serde_json::Value {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let base = server.monitor_url();
    let authority = base.strip_prefix("http://").expect("monitor URL is http");
    let mut stream = tokio::net::TcpStream::connect(authority)
        .await
        .expect("connect to the monitoring port");
    let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("send request");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).await.expect("read response");
    let text = String::from_utf8(response).expect("UTF-8 response");
    let (head, body) = text.split_once("\r\n\r\n").expect("HTTP head and body");
    assert!(
        head.lines().next().is_some_and(|status| status.contains(" 200 ")),
        "GET {path}: {head}"
    );
    serde_json::from_str(body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
}

/// The connection name `sentinel run` gives its NATS connection.
pub fn nats_connection_name(child: &Child) -> String {
    format!("sentinel-core pid {}", child.id())
}

/// A plain connection to the test database, for SQL the store does not offer.
pub async fn pg(url: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    sqlx::PgConnection::connect(url).await.expect("connect")
}

/// Spawns `sentinel run` over `env` with the sample registry, `--ack-wait-ms ack_wait_ms` and
/// `extra_args` appended.
pub fn spawn_core(env: &Env, ack_wait_ms: u64, extra_args: &[&str]) -> Child {
    spawn_core_on(
        env,
        &crate::traffic::sample_registry_dir(),
        ack_wait_ms,
        extra_args,
        ("warn", Stdio::inherit()),
    )
}

/// [`spawn_core`] over the registry folder `registry`, logging at `log.0` (a `SENTINEL_LOG`
/// filter) to `log.1`.
pub fn spawn_core_on(
    env: &Env,
    registry: &std::path::Path,
    ack_wait_ms: u64,
    extra_args: &[&str],
    log: (&str, Stdio),
) -> Child {
    Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args([
            "run",
            "--registry",
            registry.to_str().expect("a UTF-8 registry path"),
            "--ack-wait-ms",
            &ack_wait_ms.to_string(),
        ])
        .args(extra_args)
        // As the writer role: the core needs no more than `sentinel db grants` gives it.
        .env("SENTINEL_DATABASE_URL", &env.roles.writer_url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env("SENTINEL_LOG", log.0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log.1)
        .spawn()
        .expect("spawn sentinel run")
}

/// Runs `command` to completion like `Command::output`, but kills it and panics naming it when
/// it has not exited within `timeout`: a CLI that should refuse and instead starts serving
/// (a broken check) fails the test instead of hanging it. Output beyond a pipe's buffer
/// (64 KiB) is read only after the exit, so this is for commands that print little.
pub fn output_within(command: &mut Command, timeout: Duration) -> std::process::Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let deadline = std::time::Instant::now() + timeout;
    while child.try_wait().expect("try_wait").is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{command:?} did not exit within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("output")
}

/// Waits up to `timeout` for `child` to exit. Polls without blocking the runtime, so subscriber
/// tasks keep running meanwhile.
pub async fn wait_exit(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return Some(status);
        }
        if tokio::time::Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Sends SIGTERM and asserts the orderly stop exits 0 within 30 seconds.
pub async fn terminate(mut child: Child) {
    let pid = child.id().to_string();
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = wait_exit(&mut child, Duration::from_secs(30))
        .await
        .expect("core exits after SIGTERM");
    assert!(status.success(), "orderly stop exits 0, got {status}");
}

/// The body of an operator's request for a claim setting `point_id` to `value` (one hour, the
/// default), as `sentinel command set` publishes it on `sentinel.command.request.<principal>`:
/// no principal in the body, the core takes it from the subject.
pub fn command_request(command_id: &str, point_id: &str, value: f64) -> Vec<u8> {
    serde_json::to_vec(&sentinel_core::CommandRequest {
        command_id: command_id.to_owned(),
        point_id: point_id.to_owned(),
        value: serde_json::json!(value),
        unit: None,
        for_s: None,
        release: false,
        principal: String::new(),
        reply_to: None,
        band: None,
    })
    .expect("a request encodes")
}

/// The wall clock, as the cores read it.
pub fn now() -> Micros {
    SystemClock.now()
}

/// [`publish_paced`]'s chunk, and its pause between chunks.
pub const PACED_CHUNK: usize = 100;
pub const PACED_PAUSE_MS: u64 = 50;

/// Publishes the traffic in chunks of [`PACED_CHUNK`] with [`PACED_PAUSE_MS`] between them, so
/// the stream keeps arriving while a test breaks something (a core drains a pre-published
/// backlog too fast to interrupt it); how many the stream stored.
pub async fn publish_paced(url: String, traffic: Arc<Traffic>) -> u64 {
    let publisher = ObservationPublisher::connect(&url, PublisherConfig::default())
        .await
        .expect("publisher");
    let mut stored = 0;
    for chunk in traffic.messages.chunks(PACED_CHUNK) {
        // Collected: a borrowing iterator held across the await makes the future not `Send`.
        let items: Vec<(String, String, bytes::Bytes)> = chunk
            .iter()
            .map(|m| (m.subject.clone(), m.msg_id.clone(), m.payload.clone()))
            .collect();
        let report = publisher
            .publish_pipelined(items, 256)
            .await
            .expect("publish traffic");
        stored += report.stored;
        tokio::time::sleep(Duration::from_millis(PACED_PAUSE_MS)).await;
    }
    stored
}
