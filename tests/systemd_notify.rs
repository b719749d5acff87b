//! Issue 26, item 5: `sentinel run` under a service manager. A fake `$NOTIFY_SOCKET` (a unix
//! datagram socket the test binds, which is all systemd's side of `sd_notify` is) receives what
//! a real `sentinel run` process against a private nats-server and PostgreSQL sends:
//!
//! - a `STATUS=startup: <step>` line with `EXTEND_TIMEOUT_USEC` for every startup step, in the
//!   startup order, and `READY=1` only after all of them — when it arrives the cold start is
//!   recorded (the consumer bound, restart steps done) and the core consumes what is published;
//! - `WATCHDOG=1` only after `READY=1`, repeatedly while it runs, never further apart than
//!   `$WATCHDOG_USEC`;
//! - `STOPPING=1` on SIGTERM, then an orderly exit 0.
//!
//! And the unit in `ops/systemd/` passes `systemd-analyze verify` (the tool is required:
//! `scripts/test` installs the `systemd` package when it is missing).

use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use sentinel_core::wire::EnvelopeOut;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{Env, committed, now, pg, terminate};
use sentinel_tests::traffic;

/// The watchdog period the test's "service manager" asks for.
const WATCHDOG_USEC: u64 = 2_000_000;

/// The startup steps, in order (runtime/src/startup.rs).
const STEPS: [&str; 10] = [
    "lock_and_epoch",
    "registry",
    "restore_projection",
    "connect_bus",
    "bind_consumer",
    "replay_control_events",
    "rehydrate_derived_windows",
    "rehydrate_timers",
    "start_drivers",
    "warmup",
];

type Received = Arc<Mutex<Vec<(Instant, String)>>>;

/// Binds the fake manager's socket and collects every datagram on a thread of its own.
fn fake_manager(dir: &std::path::Path) -> (std::path::PathBuf, Received) {
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind the notify socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .expect("read timeout");
    let received: Received = Arc::default();
    let sink = received.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        loop {
            match socket.recv(&mut buf) {
                Ok(n) => sink
                    .lock()
                    .expect("messages")
                    .push((Instant::now(), String::from_utf8_lossy(&buf[..n]).into_owned())),
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    if Arc::strong_count(&sink) == 1 {
                        return;
                    }
                }
                Err(_) => return,
            }
        }
    });
    (path, received)
}

fn position(messages: &[(Instant, String)], line: &str) -> Option<usize> {
    messages.iter().position(|(_, m)| m.lines().any(|l| l == line))
}

async fn wait_for(received: &Received, line: &str, within: Duration) -> usize {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(at) = position(&received.lock().expect("messages"), line) {
            return at;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {line:?} within {within:?}: {:?}",
            received.lock().expect("messages")
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_comes_only_once_consuming_then_the_watchdog_while_running_and_stopping_on_sigterm() {
    let env = Env::start(30_000).await;
    let dir = std::env::temp_dir().join(format!("sentinel-notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (socket, received) = fake_manager(&dir);
    let registry_dir = traffic::sample_registry_dir();
    let child = Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args(["run", "--registry"])
        .arg(&registry_dir)
        .args(["--self-points-interval-ms", "0"])
        .env("SENTINEL_DATABASE_URL", &env.roles.writer_url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env("SENTINEL_LOG", "warn")
        .env("NOTIFY_SOCKET", &socket)
        .env("WATCHDOG_USEC", WATCHDOG_USEC.to_string())
        .env_remove("WATCHDOG_PID")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn sentinel run");

    let ready = wait_for(&received, "READY=1", Duration::from_secs(60)).await;
    // At READY=1 the startup order is complete: its record is written last, after the bind.
    let mut conn = pg(&env.db.url).await;
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM core_start WHERE ready_at IS NOT NULL")
        .fetch_one(&mut conn)
        .await
        .expect("core_start");
    assert_eq!(recorded, 1, "READY=1 before the cold start was recorded");
    {
        let messages = received.lock().expect("messages").clone();
        let mut last = None;
        for step in STEPS {
            let at = position(&messages, &format!("STATUS=startup: {step}"))
                .unwrap_or_else(|| panic!("no status for step {step}: {messages:?}"));
            assert!(
                last.is_none_or(|l| l < at),
                "steps out of order at {step}: {messages:?}"
            );
            assert!(
                messages[at].1.contains("EXTEND_TIMEOUT_USEC="),
                "step {step} extends the start timeout"
            );
            last = Some(at);
        }
        assert!(
            last.is_some_and(|l| l < ready),
            "READY=1 before the last step: {messages:?}"
        );
        assert!(
            messages[..ready].iter().all(|(_, m)| !m.contains("WATCHDOG=1")),
            "no watchdog ping before READY=1: {messages:?}"
        );
        assert_eq!(
            messages.iter().filter(|(_, m)| m.contains("READY=1")).count(),
            1,
            "READY=1 once"
        );
    }

    // It consumes: a reading published now commits.
    let registry = traffic::sample_registry();
    let point = registry
        .points()
        .map(|(_, p)| p)
        .find(|p| p.descriptor.kind == sentinel_core::registry::Kind::Bool && &*p.host != "sentinel")
        .expect("a bool point");
    let instance = &point.descriptor.assignment.driver_instance;
    let envelope = EnvelopeOut::new(&point.id, instance, 1, 1, now(), serde_json::json!(true));
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    publisher
        .publish(
            &format!("obs.{}.{instance}", point.host),
            &envelope.msg_id(),
            Bytes::from(envelope.to_bytes()),
        )
        .await
        .expect("publish");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while committed(&env.store).await < 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ready core did not consume"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The watchdog while it runs: a few seconds of pings, none further apart than the period.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pings: Vec<Instant> = received
        .lock()
        .expect("messages")
        .iter()
        .filter(|(_, m)| m == "WATCHDOG=1")
        .map(|(at, _)| *at)
        .collect();
    assert!(pings.len() >= 3, "watchdog pings while running: {}", pings.len());
    let widest = pings.windows(2).map(|w| w[1] - w[0]).max().expect("two pings");
    assert!(
        widest < Duration::from_micros(WATCHDOG_USEC),
        "pings {widest:?} apart: past the watchdog period"
    );

    let stopping_before = position(&received.lock().expect("messages"), "STOPPING=1");
    assert_eq!(stopping_before, None, "STOPPING=1 only on SIGTERM");
    terminate(child).await;
    let stopping = wait_for(&received, "STOPPING=1", Duration::from_secs(5)).await;
    assert!(stopping > ready);
    wait_for(
        &received,
        "STATUS=stopped: exit 0 (shutdown requested)",
        Duration::from_secs(5),
    )
    .await;
    drop(received);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_unit_passes_systemd_analyze_verify() {
    let unit = workspace_root().join("ops/systemd/sentinel.service");
    let text = std::fs::read_to_string(&unit).expect("ops/systemd/sentinel.service");
    for line in [
        "Type=notify",
        "ExecStart=/usr/local/bin/sentinel run",
        "WatchdogSec=",
        "Restart=on-failure",
        "RestartSec=15",
        "RestartPreventExitStatus=2",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
    ] {
        assert!(text.lines().any(|l| l.starts_with(line)), "the unit lacks {line}");
    }
    // Required, not optional: a missing tool fails the test (scripts/test installs it).
    let version = Command::new("systemd-analyze").arg("--version").output();
    assert!(
        version.as_ref().is_ok_and(|o| o.status.success()),
        "systemd-analyze is not installed ({version:?}); run the suite with scripts/test, which \
         installs the Debian package `systemd`"
    );
    // Verify a copy whose ExecStart names the binary under test (verify checks it exists).
    let dir = std::env::temp_dir().join(format!("sentinel-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let copy = dir.join("sentinel.service");
    let bin = sentinel_bin();
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/sentinel", bin.to_str().expect("UTF-8 path")),
    )
    .expect("write the copy");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("run systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("sentinel.service"))
        .collect();
    assert!(out.status.success() && problems.is_empty(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The daily pack (`ops/systemd/sentinel-pack.{service,timer}`, migration 0019): a oneshot of
/// `sentinel db pack` as the owner, started by a daily persistent timer; both pass
/// `systemd-analyze verify`.
#[test]
fn the_pack_timer_and_its_service_pass_systemd_analyze_verify() {
    let root = workspace_root().join("ops/systemd");
    let service = std::fs::read_to_string(root.join("sentinel-pack.service")).expect("the pack service");
    let timer = std::fs::read_to_string(root.join("sentinel-pack.timer")).expect("the pack timer");
    for line in [
        "Type=oneshot",
        "ExecStart=/usr/local/bin/sentinel db pack",
        "EnvironmentFile=/etc/sentinel/pack.env",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
    ] {
        assert!(
            service.lines().any(|l| l.starts_with(line)),
            "the service lacks {line}"
        );
    }
    for line in ["OnCalendar=", "Persistent=true", "WantedBy=timers.target"] {
        assert!(
            timer.lines().any(|l| l.starts_with(line)),
            "the timer lacks {line}"
        );
    }
    let dir = std::env::temp_dir().join(format!("sentinel-pack-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let bin = sentinel_bin();
    std::fs::write(
        dir.join("sentinel-pack.service"),
        service.replace("/usr/local/bin/sentinel", bin.to_str().expect("UTF-8 path")),
    )
    .expect("write the service");
    std::fs::write(dir.join("sentinel-pack.timer"), &timer).expect("write the timer");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(dir.join("sentinel-pack.service"))
        .arg(dir.join("sentinel-pack.timer"))
        .output()
        .expect("run systemd-analyze verify");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = stderr.lines().filter(|l| l.contains("sentinel-pack")).collect();
    assert!(out.status.success() && problems.is_empty(), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
