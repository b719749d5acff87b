//! A database standby, with real processes (issue 25, item 3; docs/deploy.md, "One box with a
//! database standby"): two PostgreSQL clusters of the test's own (`initdb`, streaming
//! replication, the standby synchronous), a private nats-server, and the `sentinel` binary
//! given a multi-host URL (`postgres://…@primary,standby/…?target_session_attrs=read-write`).
//!
//! Owns:
//! - the primary SIGKILLed mid-stream: the core exits as on any lost lock, a supervisor loop
//!   restarts it, the restarts before the promotion refuse naming every host, the one after
//!   takes the lock on the promoted standby at a higher epoch than every epoch before, and
//!   every observation the stream accepted is in the new primary exactly once;
//! - the primary partitioned from its standby (not killed) while the standby is promoted and
//!   a second core runs on it: the old primary's core cannot commit a row the new primary
//!   does not have — its commits wait for the synchronous standby that is gone — and the new
//!   primary ends with every accepted observation exactly once.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sentinel_bus_nats::NatsBusConfig;
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{
    Transitions, assert_exactly_once, bus_with_stream, committed, now, pg, publish_paced, wait_exit,
    wait_store_drained,
};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg_pair::PgPair;
use sentinel_tests::traffic;
use sqlx::Connection;

const ACK_WAIT_MS: u64 = 2_000;
const LOCK_CHECK_INTERVAL_MS: u64 = 200;
/// The supervisor's pause between a core's exit and its restart (systemd's `RestartSec`).
const RESTART_DELAY_MS: u64 = 250;
/// Bound on every wait in these tests: a drain, a restart, a promotion.
const WAIT_S: u64 = 60;
/// 6,000 messages over about three seconds, so the stream is still arriving at the failover.
const MESSAGES: usize = 6_000;
/// Exit codes of `sentinel run` (README, "The CLI").
const EXIT_COULD_NOT_START: i32 = 1;
const EXIT_COMMIT_FAILED: i32 = 3;
const EXIT_LOCK_LOST: i32 = 5;
const DATABASE: &str = "sentinel";
const WRITER: &str = "sentinel_w";
const READER: &str = "sentinel_r";

/// The database, its roles and grants on the primary (replicated to the standby), migrated
/// through the multi-host URL.
async fn prepare_database(pair: &PgPair) {
    let mut admin = pg(&pair.primary.url("postgres")).await;
    for statement in [
        "CREATE DATABASE sentinel",
        "CREATE ROLE sentinel_w LOGIN",
        "CREATE ROLE sentinel_r LOGIN",
    ] {
        sqlx::query(statement).execute(&mut admin).await.expect(statement);
    }
    let url = PgPair::url_over(&[pair.primary.host(), pair.standby.host()], "postgres", DATABASE);
    let store = PgStore::connect(&url, PgStoreConfig::default())
        .await
        .expect("connect through the multi-host URL");
    assert_eq!(
        store.host(),
        pair.primary.host(),
        "the writable host is the primary"
    );
    store.migrate().await.expect("migrate");
    store.apply_grants(WRITER, READER).await.expect("grants");
    store.close().await;
}

/// The schema owner's store over `hosts`, which must choose `expected`.
async fn store_over(hosts: &[String], expected: &str) -> PgStore {
    let url = PgPair::url_over(hosts, "postgres", DATABASE);
    let store = PgStore::connect(&url, PgStoreConfig::default())
        .await
        .expect("connect through the multi-host URL");
    assert_eq!(store.host(), expected, "the store chose the writable host");
    store
}

/// A core process that is killed if the test drops it still running (a failed assertion), so
/// no core outlives its test.
struct CoreProcess(Child);

impl std::ops::Deref for CoreProcess {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for CoreProcess {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for CoreProcess {
    fn drop(&mut self) {
        if matches!(self.0.try_wait(), Ok(None)) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `sentinel run` as the writer role over the multi-host `database_url`, its log in `log`.
fn spawn_core(database_url: &str, nats_url: &str, log: &Path) -> CoreProcess {
    let registry = traffic::sample_registry_dir();
    Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args([
            "run",
            "--registry",
            registry.to_str().expect("a UTF-8 registry path"),
            "--ack-wait-ms",
            &ACK_WAIT_MS.to_string(),
            "--lock-check-interval-ms",
            &LOCK_CHECK_INTERVAL_MS.to_string(),
            // The exact-count oracle covers the traffic, not the core's own self-points.
            "--self-points-interval-ms",
            "0",
        ])
        .env("SENTINEL_DATABASE_URL", database_url)
        .env("SENTINEL_NATS_URL", nats_url)
        .env("SENTINEL_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).expect("core log file"))
        .spawn()
        .map(CoreProcess)
        .expect("spawn sentinel run")
}

/// One run of the core under the supervisor: its exit code (`None` for a signal) and log.
#[derive(Clone, Debug)]
struct Run {
    exit: Option<i32>,
    log: PathBuf,
    ended_at: tokio::time::Instant,
}

/// A supervisor loop, as systemd's `Restart=on-failure` is: starts the core, waits for it to
/// exit, records how, and starts it again after [`RESTART_DELAY_MS`]; on stop it sends SIGTERM
/// to the running core and waits for it.
struct Supervisor {
    stop: Arc<AtomicBool>,
    runs: Arc<Mutex<Vec<Run>>>,
    handle: tokio::task::JoinHandle<Option<std::process::ExitStatus>>,
}

impl Supervisor {
    fn start(database_url: String, nats_url: String, log_dir: PathBuf) -> Supervisor {
        let stop = Arc::new(AtomicBool::new(false));
        let runs = Arc::new(Mutex::new(Vec::new()));
        let handle = {
            let (stop, runs) = (stop.clone(), runs.clone());
            tokio::spawn(async move {
                for n in 0.. {
                    let log = log_dir.join(format!("core-run-{n}.log"));
                    let mut child = spawn_core(&database_url, &nats_url, &log);
                    loop {
                        if let Some(status) = child.try_wait().expect("try_wait") {
                            runs.lock().expect("lock").push(Run {
                                exit: status.code(),
                                log,
                                ended_at: tokio::time::Instant::now(),
                            });
                            break;
                        }
                        if stop.load(Ordering::SeqCst) {
                            let _ = Command::new("kill")
                                .args(["-TERM", &child.id().to_string()])
                                .status();
                            return wait_exit(&mut child, Duration::from_secs(30)).await;
                        }
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    tokio::time::sleep(Duration::from_millis(RESTART_DELAY_MS)).await;
                }
                None
            })
        };
        Supervisor { stop, runs, handle }
    }

    fn runs(&self) -> Vec<Run> {
        self.runs.lock().expect("lock").clone()
    }

    /// Stops the running core; its exit status.
    async fn stop(self) -> Option<std::process::ExitStatus> {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.await.expect("supervisor task")
    }
}

async fn wait_committed_at_least(store: &PgStore, n: u64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WAIT_S);
    while committed(store).await < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "fewer than {n} committed within {WAIT_S} s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until a core of an epoch above `above` has recorded a ready cold start; its epoch.
async fn wait_ready_above(store: &PgStore, above: u32) -> u32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WAIT_S);
    loop {
        if let Ok(starts) = store.cold_starts().await
            && let Some(start) = starts.iter().find(|s| s.epoch > above && s.ready_at.is_some())
        {
            return start.epoch;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no core above epoch {above} became ready within {WAIT_S} s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every message key in the database at `url`.
async fn row_keys(url: &str) -> std::collections::BTreeSet<(String, i32, i64)> {
    let mut conn = pg(url).await;
    sqlx::query_as("SELECT driver_instance, source_epoch, source_seq FROM observation")
        .fetch_all(&mut conn)
        .await
        .expect("row keys")
        .into_iter()
        .collect()
}

async fn recorded_epochs(url: &str) -> Vec<i32> {
    let mut conn = pg(url).await;
    sqlx::query_scalar("SELECT epoch FROM core_start ORDER BY epoch")
        .fetch_all(&mut conn)
        .await
        .expect("core_start")
}

fn log_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sentinel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("log folder");
    dir
}

/// Issue 25, "What it must show": "SIGKILL of the PostgreSQL primary mid-stream, the standby
/// promoted, the core restarted by a supervisor loop: every acked observation is in the new
/// primary exactly once; the epoch after the failover is higher than every epoch before it."
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_primary_then_promotion_keeps_every_acked_observation_once_and_the_epoch_rising() {
    let bin = sentinel_bin();
    assert!(bin.exists(), "{} was built", bin.display());
    let pair = PgPair::start(false)
        .await
        .expect("primary and synchronous standby");
    prepare_database(&pair).await;
    let hosts = [pair.primary.host(), pair.standby.host()];
    let nats = NatsServer::start().await;
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        ack_wait_ms: ACK_WAIT_MS,
        ..NatsBusConfig::default()
    })
    .await;
    let transitions = Transitions::subscribe(&nats.url()).await;
    let traffic = Arc::new(traffic::generate(&traffic::sample_registry(), MESSAGES, 1, now()));
    let logs = log_dir("db-standby-failover");

    let old = store_over(&hosts, &pair.primary.host()).await;
    let supervisor = Supervisor::start(
        PgPair::url_over(&hosts, WRITER, DATABASE),
        nats.url(),
        logs.clone(),
    );
    let first_epoch = wait_ready_above(&old, 0).await;
    let publisher = tokio::spawn(publish_paced(nats.url(), traffic.clone()));
    wait_committed_at_least(&old, traffic.expected.accepted() / 4).await;

    // Every epoch before the failover, as the log and the bus saw them.
    let mut epochs_before: Vec<u64> = recorded_epochs(&pair.primary.url(DATABASE))
        .await
        .into_iter()
        .map(|e| e as u64)
        .collect();
    pair.primary.kill9();
    let killed_at = tokio::time::Instant::now();
    drop(old);

    // The core exits as on any lost lock, and the supervisor's next start finds no writable
    // host (the primary is gone, the standby still in recovery) and says so, naming both.
    let deadline = killed_at + Duration::from_secs(WAIT_S);
    while supervisor.runs().len() < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the core did not exit and restart"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let runs = supervisor.runs();
    let exited_after = runs[0].ended_at.duration_since(killed_at);
    assert!(
        [Some(EXIT_LOCK_LOST), Some(EXIT_COMMIT_FAILED)].contains(&runs[0].exit),
        "the primary's loss stops the core as a lost lock (5) or a commit with an unknown outcome (3): {:?}",
        runs[0].exit
    );
    assert_eq!(
        runs[1].exit,
        Some(EXIT_COULD_NOT_START),
        "no writable host: refused start"
    );
    let refused = std::fs::read_to_string(&runs[1].log).expect("restart log");
    assert!(
        refused.contains("no host of the database URL qualifies")
            && refused.contains(&pair.primary.host())
            && refused.contains(&pair.standby.host())
            && refused.contains("in recovery"),
        "the refusal names every host and why: {refused}"
    );
    epochs_before.extend(transitions.seen().iter().map(|t| t.core_epoch));
    let highest_before = epochs_before.iter().copied().max().expect("epochs before");
    assert!(highest_before >= u64::from(first_epoch));

    let promoting_at = tokio::time::Instant::now();
    pair.standby.promote().expect("promote the standby");
    let promoted_after = promoting_at.elapsed();
    let new = store_over(&hosts, &pair.standby.host()).await;
    let after = wait_ready_above(&new, highest_before as u32).await;
    let ready_after = promoting_at.elapsed();
    assert!(u64::from(after) > highest_before, "the epoch goes on rising");

    let stored = publisher.await.expect("publisher task");
    assert_eq!(
        stored,
        traffic.expected.accepted(),
        "the stream accepted every message"
    );
    wait_store_drained(&new, &bus, &traffic.expected, WAIT_S).await;
    let drained_after = promoting_at.elapsed();
    assert_exactly_once(&new, &pair.standby.url(DATABASE), &traffic.expected).await;
    // BENCHMARKS.md, "Failover to a database standby".
    eprintln!(
        "failover: core exited {exited_after:?} after the SIGKILL (exit {:?}); pg_ctl promote took \
         {promoted_after:?}; epoch {after} ready {ready_after:?} and the stream drained {drained_after:?} \
         after the promotion began",
        runs[0].exit
    );

    // Every epoch recorded on the new primary rises, and the one after the failover is above
    // every one before it.
    let epochs_after = recorded_epochs(&pair.standby.url(DATABASE)).await;
    assert!(epochs_after.windows(2).all(|w| w[0] < w[1]), "{epochs_after:?}");
    assert_eq!(
        epochs_after.last().copied(),
        Some(after as i32),
        "{epochs_after:?}"
    );
    // `sentinel status` over the same URL reads the new primary and says so.
    let status_out = Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .arg("status")
        .env(
            "SENTINEL_DATABASE_URL",
            PgPair::url_over(&hosts, "postgres", DATABASE),
        )
        .env("SENTINEL_NATS_URL", nats.url())
        .output()
        .expect("sentinel status");
    let stdout = String::from_utf8_lossy(&status_out.stdout);
    assert!(status_out.status.success(), "{stdout}");
    assert!(
        stdout.contains(&format!("database host: {}\n", pair.standby.host()))
            && stdout.contains(&format!("core epoch: {after}\n")),
        "{stdout}"
    );
    let status = supervisor.stop().await.expect("the last core exits");
    assert!(
        status.success(),
        "orderly stop of the core on the new primary: {status}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    transitions.assert_at_most_once();
    assert!(
        transitions.of_epoch(after) > 0,
        "the core on the new primary published"
    );
    let _ = std::fs::remove_dir_all(&logs);
}

/// Issue 25: "a primary partitioned (not killed) while the standby is promoted: the old
/// primary's core cannot commit a row the new one does not have." The standby replicates
/// through a link the test cuts; the old core keeps its own connection to the old primary
/// (same side of the partition), the new core reaches the old primary only through the cut
/// link. What fences the old core is synchronous replication: its commits wait for the standby
/// that is gone and never return, so it acks nothing the new primary lacks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_primary_cannot_commit_a_row_the_promoted_standby_lacks() {
    let bin = sentinel_bin();
    assert!(bin.exists(), "{} was built", bin.display());
    let pair = PgPair::start(true)
        .await
        .expect("primary and synchronous standby");
    prepare_database(&pair).await;
    let link = pair
        .link
        .as_ref()
        .expect("the standby replicates through the link");
    let nats = NatsServer::start().await;
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        ack_wait_ms: ACK_WAIT_MS,
        ..NatsBusConfig::default()
    })
    .await;
    let traffic = Arc::new(traffic::generate(&traffic::sample_registry(), MESSAGES, 1, now()));
    let logs = log_dir("db-standby-partition");

    // The old side: its core reaches the old primary directly.
    let old_side = [pair.primary.host(), pair.standby.host()];
    let old = store_over(&old_side, &pair.primary.host()).await;
    let mut old_core = spawn_core(
        &PgPair::url_over(&old_side, WRITER, DATABASE),
        &nats.url(),
        &logs.join("old-core.log"),
    );
    let old_epoch = wait_ready_above(&old, 0).await;
    let publisher = tokio::spawn(publish_paced(nats.url(), traffic.clone()));
    wait_committed_at_least(&old, traffic.expected.accepted() / 4).await;

    // The partition: the link between the old primary and the standby's side is cut, and the
    // standby is promoted (as a failover manager that lost sight of the primary would).
    link.cut();
    pair.standby.promote().expect("promote the standby");
    // The new side reaches the old primary only through the cut link.
    let new_side = [format!("127.0.0.1:{}", link.port), pair.standby.host()];
    let new = store_over(&new_side, &pair.standby.host()).await;
    let new_core = spawn_core(
        &PgPair::url_over(&new_side, WRITER, DATABASE),
        &nats.url(),
        &logs.join("new-core.log"),
    );
    let new_epoch = wait_ready_above(&new, old_epoch).await;

    let stored = publisher.await.expect("publisher task");
    assert_eq!(
        stored,
        traffic.expected.accepted(),
        "the stream accepted every message"
    );
    // Everything the stream accepted reaches the new primary once: had the old core acked a
    // message whose row is only on the old primary, it would never be redelivered and the new
    // primary would stay short of it.
    wait_store_drained(&new, &bus, &traffic.expected, WAIT_S).await;
    assert_exactly_once(&new, &pair.standby.url(DATABASE), &traffic.expected).await;

    // The fence, seen on the old primary: the old core is still running and holds its lock
    // there, but its commits wait on the synchronous standby that is gone, and every row the
    // old primary shows is on the new one.
    assert!(
        old_core.try_wait().expect("try_wait").is_none(),
        "the old core is still running"
    );
    let mut old_admin = pg(&pair.primary.url(DATABASE)).await;
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event = 'SyncRep'",
    )
    .fetch_one(&mut old_admin)
    .await
    .expect("pg_stat_activity");
    assert!(
        waiting > 0,
        "the old core's commits wait for the synchronous standby"
    );
    // Nor does a statement timeout end the wait (PostgreSQL disarms it before the commit): a
    // write over sqlx's extended protocol with a 300 ms statement_timeout is still waiting
    // ten times that later. A cancelled wait would return COMMIT (docs/deploy.md).
    let probe_options: sqlx::postgres::PgConnectOptions = pair
        .primary
        .url(DATABASE)
        .parse::<sqlx::postgres::PgConnectOptions>()
        .expect("URL")
        .options([("statement_timeout", "300")]);
    let mut probe = sqlx::PgConnection::connect_with(&probe_options)
        .await
        .expect("connect to the old primary");
    let write = sqlx::query("CREATE TABLE sync_probe (x integer)").execute(&mut probe);
    assert!(
        tokio::time::timeout(Duration::from_millis(3_000), write)
            .await
            .is_err(),
        "a commit on the partitioned primary returned"
    );
    drop(probe);
    let old_keys = row_keys(&pair.primary.url(DATABASE)).await;
    let new_keys = row_keys(&pair.standby.url(DATABASE)).await;
    let only_old: Vec<_> = old_keys.difference(&new_keys).take(5).collect();
    assert!(
        only_old.is_empty(),
        "rows committed on the old primary that the new one lacks: {only_old:?}"
    );
    eprintln!(
        "old primary shows {} rows, new primary {}, {waiting} commits of epoch {old_epoch} waiting; new epoch {new_epoch}",
        old_keys.len(),
        new_keys.len()
    );

    // The old core cannot stop in order (its commits never return): it is killed, as its
    // supervisor's stop timeout would. The new one stops in order.
    old_core.kill().expect("SIGKILL the old core");
    let _ = old_core.wait();
    let pid = new_core.id().to_string();
    let mut new_core = new_core;
    let _ = Command::new("kill").args(["-TERM", &pid]).status();
    let status = wait_exit(&mut new_core, Duration::from_secs(30))
        .await
        .expect("the new core exits after SIGTERM");
    assert!(status.success(), "orderly stop of the new core: {status}");
    old.close().await;
    let _ = std::fs::remove_dir_all(&logs);
}

/// The writable host is chosen wherever it stands in the list, a list with none refuses
/// naming each host and why, and `target_session_attrs=any` (a reader's choice) takes the
/// first host that answers, standby or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_writable_host_is_chosen_wherever_it_stands() {
    let pair = PgPair::start(false)
        .await
        .expect("primary and synchronous standby");
    prepare_database(&pair).await;
    let store = store_over(&[pair.standby.host(), pair.primary.host()], &pair.primary.host()).await;
    assert_eq!(
        store.current_epoch().await.expect("epoch"),
        0,
        "a migrated, never-run database"
    );
    // The lock session checks its host again: a primary turned read-only since the store
    // chose it is refused before the lock is tried.
    let mut admin = pg(&pair.primary.url("postgres")).await;
    for statement in [
        "ALTER SYSTEM SET default_transaction_read_only = on",
        "SELECT pg_reload_conf()",
    ] {
        sqlx::query(statement).execute(&mut admin).await.expect(statement);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let refused = store.lock().await.expect_err("a read-only host takes no lock");
    assert!(
        refused.to_string().contains("transaction_read_only is on"),
        "{refused}"
    );
    for statement in [
        "ALTER SYSTEM RESET default_transaction_read_only",
        "SELECT pg_reload_conf()",
    ] {
        sqlx::query(statement).execute(&mut admin).await.expect(statement);
    }
    store.close().await;

    let only_standby = PgPair::url_over(&[pair.standby.host()], "postgres", DATABASE);
    let refused = PgStore::connect(&only_standby, PgStoreConfig::default())
        .await
        .expect_err("a standby is not writable");
    let message = refused.to_string();
    assert!(
        message.contains("(1 tried)")
            && message.contains(&pair.standby.host())
            && message.contains("in recovery"),
        "{message}"
    );

    let reader = format!(
        "postgres://postgres@{},{}/{DATABASE}?target_session_attrs=any",
        pair.standby.host(),
        pair.primary.host()
    );
    let store = PgStore::connect(&reader, PgStoreConfig::default())
        .await
        .expect("any: the first host that answers");
    assert_eq!(store.host(), pair.standby.host());
    assert_eq!(
        store.schema_state().await.expect("schema").relation(),
        "current",
        "reads the standby"
    );
    store.close().await;
}
