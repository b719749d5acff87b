//! The HTTP receiver (`healthlog serve`, issue 23 item 4) driven as a person's phone would: the
//! real binary on a loopback socket, a real HTTP client (curl, installed with the image; a raw
//! TCP socket where a client would not send what the test needs), `kill -9` and SIGTERM.

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{T0, body};
use healthlog::store::{DeliveryRow, Store, StoreOptions};

const TOKEN: &str = "test-token-0123456789abcdef";
/// How long a test waits for the background fold before it fails.
const FOLD_WAIT: Duration = Duration::from_secs(60);

struct Server {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Server {
    fn start(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let token = dir.join("token");
        std::fs::write(&token, format!("{TOKEN}\n")).expect("token file");
        {
            use std::os::unix::fs::PermissionsExt as _;
            std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).expect("chmod 600");
        }
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_healthlog"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(&token)
            .args(extra)
            .env("HEALTHLOG_DB", dir.join("h.db"))
            .env("HEALTHLOG_ARCHIVE", dir.join("archive"))
            .env("HEALTHLOG_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("starts healthlog serve");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("reads the listening line");
        let addr = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
            .parse()
            .expect("an address");
        Self {
            child,
            addr,
            dir: dir.to_path_buf(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill {sig}");
    }

    fn wait_exit(&mut self) -> Option<i32> {
        let deadline = Instant::now() + FOLD_WAIT;
        loop {
            if let Some(status) = self.child.try_wait().expect("waits") {
                return status.code();
            }
            assert!(Instant::now() < deadline, "the server did not exit");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A curl reply: status code, body, headers.
struct Reply {
    code: u16,
    body: String,
    headers: String,
}

fn curl(args: &[&str]) -> Reply {
    let out = Command::new("curl")
        .args(["-sS", "-D", "/dev/stderr", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .expect("curl runs (installed with the image)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", "0"));
    Reply {
        code: code.trim().parse().unwrap_or(0),
        body: body.to_string(),
        headers: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn post(url: &str, file: &Path, extra: &[&str]) -> Reply {
    let auth = format!("Authorization: Bearer {TOKEN}");
    let data = format!("@{}", file.display());
    let mut args = vec!["-X", "POST", "-H", &auth, "-H", "Content-Type: application/json"];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--data-binary", &data, url]);
    curl(&args)
}

fn write_body(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("writes");
    path
}

async fn rows(dir: &Path) -> Vec<DeliveryRow> {
    let store = Store::open_read_only(&dir.join("h.db"), StoreOptions::default())
        .await
        .expect("opens read-only");
    let rows = store.deliveries(None).await.expect("rows");
    store.close().await;
    rows
}

async fn wait_folded(dir: &Path, n: usize) -> Vec<DeliveryRow> {
    let deadline = Instant::now() + FOLD_WAIT;
    loop {
        let r = rows(dir).await;
        if r.len() >= n && r.iter().all(|d| d.status != "pending") {
            return r;
        }
        assert!(Instant::now() < deadline, "not folded in time: {r:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn files_under(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| {
                    if e.path().is_dir() {
                        files_under(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
        .unwrap_or(0)
}

fn one_point() -> String {
    body(&[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":4}}"#)])])
}

#[tokio::test]
async fn a_200_comes_only_after_archive_and_journal_and_the_fold_follows() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &[], &[]);
    let file = write_body(dir.path(), "b.json", &one_point());
    let r = post(
        &server.url("/hae/minute"),
        &file,
        &[
            "-H",
            "automation-name: Health Metrics",
            "-H",
            "automation-id: A-1",
            "-H",
            "session-id: S-77",
        ],
    );
    assert_eq!(r.code, 200, "{}", r.body);
    // At the 200: the journal row is committed and the body archived under its address.
    let journaled = rows(dir.path()).await;
    assert_eq!(journaled.len(), 1);
    let sha = journaled[0].body_sha256.clone().expect("archived");
    let archived = dir.path().join("archive").join(&sha[..2]).join(&sha);
    assert_eq!(
        std::fs::read(archived).expect("the body is archived"),
        one_point().as_bytes()
    );
    assert!(
        r.body.contains(&format!("\"id\":{}", journaled[0].id)),
        "{}",
        r.body
    );
    let h = &journaled[0].headers;
    assert_eq!(
        (
            h.automation_name.as_deref(),
            h.automation_id.as_deref(),
            h.session_id.as_deref()
        ),
        (Some("Health Metrics"), Some("A-1"), Some("S-77")),
        "HAE headers kept with the journal row"
    );
    // Folding happens in the background.
    assert_eq!(wait_folded(dir.path(), 1).await[0].status, "parsed");
    let health = curl(&[&server.url("/healthz")]);
    assert_eq!((health.code, health.body.trim()), (200, "ok"));
}

#[tokio::test]
async fn kill_9_right_after_a_200_and_the_delivery_is_folded_on_restart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let corpus = healthlog_core::sample::generate(5, 7);
    let big = corpus
        .deliveries
        .iter()
        .max_by_key(|d| d.body.len())
        .expect("a delivery");
    let file = dir.path().join("big.json");
    std::fs::write(&file, &big.body).expect("writes");
    // `--no-fold` keeps the background fold from racing the kill: the delivery is certainly
    // journaled and not folded when the process dies.
    let server = Server::start(dir.path(), &["--no-fold"], &[]);
    let r = post(&server.url("/hae/minute"), &file, &[]);
    assert_eq!(r.code, 200, "{}", r.body);
    server.signal("-KILL");
    drop(server);
    let after_kill = rows(dir.path()).await;
    assert_eq!(after_kill.len(), 1, "journaled before the 200");
    assert_eq!(
        after_kill[0].status, "pending",
        "killed before its fold committed"
    );
    let _again = Server::start(dir.path(), &[], &[]);
    let folded = wait_folded(dir.path(), 1).await;
    assert_eq!(folded[0].status, "partial", "folded on restart");
}

#[tokio::test]
async fn a_body_archived_but_not_journaled_is_journaled_at_the_next_start() {
    let dir = tempfile::tempdir().expect("temp dir");
    // What a crash between the archive's fsync and the journal's commit leaves behind.
    let archive = healthlog::archive::Archive::open(&dir.path().join("archive")).expect("archive");
    let text = one_point();
    let sha = archive.put(text.as_bytes()).expect("archives");
    let spool = healthlog::intake::Spool::open(&dir.path().join("archive/.intake")).expect("spool");
    spool
        .put(&healthlog::intake::IntakeRecord {
            intake_id: "00000000000000000001-00000000-1".into(),
            layer: "minute".into(),
            received_at_us: 1,
            body_sha256: sha,
            body_bytes: text.len() as u64,
            headers: Default::default(),
        })
        .expect("spools");
    let _server = Server::start(dir.path(), &[], &[]);
    let folded = wait_folded(dir.path(), 1).await;
    assert_eq!((folded.len(), folded[0].status.as_str()), (1, "parsed"));
    assert_eq!(spool.records().expect("records"), vec![], "the spool is drained");
}

#[tokio::test]
async fn a_duplicate_post_adds_a_journal_row_and_changes_nothing_else() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &[], &[]);
    let file = write_body(dir.path(), "b.json", &one_point());
    assert_eq!(post(&server.url("/hae/minute"), &file, &[]).code, 200);
    wait_folded(dir.path(), 1).await;
    let store = Store::open_read_only(&dir.path().join("h.db"), StoreOptions::default())
        .await
        .expect("opens");
    let (fp, _) = store.fingerprint().await.expect("fingerprint");
    let archived = files_under(&dir.path().join("archive"));
    assert_eq!(post(&server.url("/hae/minute"), &file, &[]).code, 200);
    let r = wait_folded(dir.path(), 2).await;
    assert_eq!(r.len(), 2, "a second journal row");
    assert_eq!(r[1].counters.expect("counted").objects_written, 0);
    assert_eq!(
        store.fingerprint().await.expect("fingerprint").0,
        fp,
        "the vitrine is unchanged"
    );
    assert_eq!(
        files_under(&dir.path().join("archive")),
        archived,
        "the archive is unchanged"
    );
}

/// Sends a request head without its body over a raw socket; returns the status line.
fn raw_head(addr: SocketAddr, head: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connects");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    s.write_all(head.as_bytes()).expect("writes the head");
    let mut reply = Vec::new();
    let mut buf = [0u8; 512];
    while !reply.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// At most `BODIES_IN_FLIGHT_MAX` bodies are held at once (each may be 64 MiB): with that many
/// uploads stalled mid-body, the next delivery is answered 503 with `Retry-After` before its
/// body is read; once they go away, deliveries are accepted again.
#[tokio::test]
async fn bodies_in_flight_are_bounded_and_the_next_is_told_to_retry() {
    use healthlog::serve::{BODIES_IN_FLIGHT_MAX, RETRY_AFTER_S};
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &[], &[]);
    let file = write_body(dir.path(), "b.json", &one_point());
    let stalled: Vec<TcpStream> = (0..BODIES_IN_FLIGHT_MAX)
        .map(|_| {
            let mut s = TcpStream::connect(server.addr).expect("connects");
            let head = format!(
                "POST /hae/minute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: 1000\r\n\r\n{{\"data\":"
            );
            s.write_all(head.as_bytes()).expect("writes a head and the start of a body");
            s
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    let refused = loop {
        let r = post(&server.url("/hae/minute"), &file, &[]);
        if r.code == 503 {
            break r;
        }
        assert_eq!(r.code, 200, "{}", r.body);
        assert!(
            Instant::now() < deadline,
            "never refused with {BODIES_IN_FLIGHT_MAX} bodies stalled"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        refused
            .headers
            .to_ascii_lowercase()
            .contains(&format!("retry-after: {RETRY_AFTER_S}")),
        "{}",
        refused.headers
    );
    let journaled_while_full = rows(dir.path()).await.len();
    drop(stalled);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = post(&server.url("/hae/minute"), &file, &[]);
        if r.code == 200 {
            break;
        }
        assert_eq!(r.code, 503, "{}", r.body);
        assert!(
            Instant::now() < deadline,
            "still refused after the stalled uploads went away"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        rows(dir.path()).await.len(),
        journaled_while_full + 1,
        "the refused delivery left nothing; the accepted one is journaled"
    );
}

#[tokio::test]
async fn refusals_answer_4xx_and_leave_archive_and_journal_untouched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &[], &[]);
    let file = write_body(dir.path(), "b.json", &one_point());
    let data = format!("@{}", file.display());
    let url = server.url("/hae/minute");
    let no_token = curl(&["-X", "POST", "--data-binary", &data, &url]);
    let wrong = curl(&[
        "-X",
        "POST",
        "-H",
        "Authorization: Bearer not-the-token-at-all",
        "--data-binary",
        &data,
        &url,
    ]);
    let bad_layer = post(&server.url("/hae/Minute%20Layer"), &file, &[]);
    let over = raw_head(
        server.addr,
        &format!(
            "POST /hae/minute HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\nContent-Length: {}\r\n\r\n",
            healthlog_core::limits::BODY_BYTES_MAX + 1
        ),
    );
    assert_eq!((no_token.code, wrong.code, bad_layer.code), (401, 401, 400));
    assert!(bad_layer.body.contains("[a-z0-9_-]"), "{}", bad_layer.body);
    assert!(
        over.contains("413"),
        "refused from its Content-Length before the body: {over}"
    );
    assert_eq!(
        files_under(&dir.path().join("archive")),
        0,
        "nothing archived or spooled"
    );
    assert!(rows(dir.path()).await.is_empty(), "nothing journaled");
}

#[tokio::test]
async fn a_63_mib_post_is_accepted() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &[], &[]);
    // One point and a 63 MiB section HAE may add one day (uncovered: named, not parsed).
    let pad = "x".repeat(63 * 1024 * 1024 - 400);
    let text = format!(
        r#"{{"data":{{"metrics":[{{"name":"step_count","units":"count","data":[{{"date":"{T0}","qty":4}}]}}],"visionRx":["{pad}"]}}}}"#
    );
    assert!(text.len() > 62 * 1024 * 1024 && (text.len() as u64) < healthlog_core::limits::BODY_BYTES_MAX);
    let file = write_body(dir.path(), "big.json", &text);
    drop(pad);
    let r = post(&server.url("/hae/minute"), &file, &[]);
    assert_eq!(r.code, 200, "{}", r.body);
    let folded = wait_folded(dir.path(), 1).await;
    assert_eq!(folded[0].body_bytes, text.len() as u64);
    assert_eq!(folded[0].status, "partial");
}

#[tokio::test]
async fn a_busy_store_answers_503_with_retry_after_and_the_body_is_journaled_later() {
    let dir = tempfile::tempdir().expect("temp dir");
    let server = Server::start(dir.path(), &[], &[("HEALTHLOG_BUSY_TIMEOUT_MS", "200")]);
    let holder_store = Store::open_migrating(&dir.path().join("h.db"), StoreOptions::default())
        .await
        .expect("second handle")
        .0;
    let holder = holder_store.begin_fold(None).await.expect("holds the write lock");
    let file = write_body(dir.path(), "b.json", &one_point());
    let r = post(&server.url("/hae/minute"), &file, &[]);
    assert_eq!(r.code, 503, "{}", r.body);
    assert!(
        r.headers.to_ascii_lowercase().contains("retry-after: 30"),
        "{}",
        r.headers
    );
    assert_eq!(
        files_under(&dir.path().join("archive/.intake")),
        1,
        "the intake is spooled"
    );
    holder.rollback().await.expect("releases");
    let folded = wait_folded(dir.path(), 1).await;
    assert_eq!(
        (folded.len(), folded[0].status.as_str()),
        (1, "parsed"),
        "journaled by the drain, then folded"
    );
}

#[tokio::test]
async fn sigterm_finishes_the_request_in_flight_and_exits_0() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut server = Server::start(dir.path(), &[], &[]);
    let corpus = healthlog_core::sample::generate(9, 7);
    let week = corpus
        .deliveries
        .iter()
        .max_by_key(|d| d.body.len())
        .expect("a delivery");
    let file = dir.path().join("week.json");
    std::fs::write(&file, &week.body).expect("writes");
    let url = server.url("/hae/minute");
    // A slow upload (about 3 s): connected, and still sending when SIGTERM arrives.
    let upload = std::thread::spawn(move || post(&url, &file, &["--limit-rate", "1M"]));
    std::thread::sleep(Duration::from_millis(1_200));
    server.signal("-TERM");
    let r = upload.join().expect("upload thread");
    assert_eq!(r.code, 200, "the request in flight finished: {}", r.body);
    assert_eq!(server.wait_exit(), Some(0), "graceful exit 0");
    let after = rows(&server.dir).await;
    assert_eq!(after.len(), 1);
}

#[tokio::test]
async fn tls_with_a_self_signed_certificate() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).expect("a certificate");
    let (cert_pem, key_pem) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_pem, cert.cert.pem()).expect("cert");
    std::fs::write(&key_pem, cert.signing_key.serialize_pem()).expect("key");
    let server = Server::start(
        dir.path(),
        &[
            "--tls-cert",
            cert_pem.to_str().expect("utf-8"),
            "--tls-key",
            key_pem.to_str().expect("utf-8"),
        ],
        &[],
    );
    let port = server.addr.port();
    let resolve = format!("localhost:{port}:127.0.0.1");
    let url = format!("https://localhost:{port}/hae/minute");
    let file = write_body(dir.path(), "b.json", &one_point());
    let r = post(
        &url,
        &file,
        &[
            "--cacert",
            cert_pem.to_str().expect("utf-8"),
            "--resolve",
            &resolve,
        ],
    );
    assert_eq!(r.code, 200, "{}", r.body);
    let untrusted = post(&url, &file, &["--resolve", &resolve]);
    assert_eq!(
        untrusted.code, 0,
        "a client that does not trust the certificate does not connect"
    );
    let cleartext = post(&server.url("/hae/minute"), &file, &[]);
    assert_ne!(cleartext.code, 200, "no cleartext on the TLS port");
    assert_eq!(wait_folded(dir.path(), 1).await.len(), 1);
}

#[test]
fn the_systemd_unit_verifies() {
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ops/healthlog.service");
    let text = std::fs::read_to_string(&unit).expect("the unit is in the repository");
    assert!(text.contains("ExecStart=/usr/local/bin/healthlog") && text.contains("KillSignal=SIGTERM"));
    // scripts/test installs systemd-analyze; without it this test fails rather than passing
    // having verified nothing.
    assert!(
        Command::new("systemd-analyze").arg("--version").output().is_ok(),
        "systemd-analyze is not installed (scripts/test installs Debian's systemd package)"
    );
    // Verify a copy whose ExecStart names the binary under test (verify checks it exists).
    let dir = tempfile::tempdir().expect("temp dir");
    let copy = dir.path().join("healthlog.service");
    std::fs::write(
        &copy,
        text.replace("/usr/local/bin/healthlog", env!("CARGO_BIN_EXE_healthlog")),
    )
    .expect("writes");
    let out = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&copy)
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("healthlog.service"))
        .collect();
    assert!(out.status.success() && problems.is_empty(), "{stderr}");
}

#[tokio::test]
async fn status_reports_automations_and_exits_5_when_stale() {
    let dir = tempfile::tempdir().expect("temp dir");
    {
        let server = Server::start(dir.path(), &[], &[]);
        let file = write_body(dir.path(), "b.json", &one_point());
        assert_eq!(
            post(
                &server.url("/hae/minute"),
                &file,
                &["-H", "automation-name: Health Metrics"]
            )
            .code,
            200
        );
        wait_folded(dir.path(), 1).await;
    }
    let status = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_healthlog"))
            .args(args)
            .env("HEALTHLOG_DB", dir.path().join("h.db"))
            .env("HEALTHLOG_ARCHIVE", dir.path().join("archive"))
            .output()
            .expect("runs")
    };
    let fresh = status(&["--json", "status", "--stale-after", "1h"]);
    assert_eq!(
        fresh.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&fresh.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&fresh.stdout).expect("json");
    assert_eq!(v["stale"], false);
    assert_eq!(v["automations"][0]["automation_name"], "Health Metrics");
    assert_eq!(v["automations"][0]["last_status"], "parsed");
    assert_eq!(v["newest_points"][0]["metric"], "step_count");
    std::thread::sleep(Duration::from_millis(1_100));
    let stale = status(&["status", "--stale-after", "1s"]);
    assert_eq!(stale.status.code(), Some(5), "no delivery within 1 s");
    let text = String::from_utf8_lossy(&stale.stdout);
    assert!(
        text.contains("STALE") && text.contains("Health Metrics"),
        "{text}"
    );
    // An empty journal is stale too.
    let empty = tempfile::tempdir().expect("temp dir");
    Store::open_migrating(&empty.path().join("h.db"), StoreOptions::default())
        .await
        .expect("creates");
    let out = Command::new(env!("CARGO_BIN_EXE_healthlog"))
        .args(["status"])
        .env("HEALTHLOG_DB", empty.path().join("h.db"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(5));
}
