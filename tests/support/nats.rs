//! Starting a private nats-server per test (DESIGN.md §7): its own free ports, its own
//! temporary JetStream store, killed and removed on drop, so no test sees another's streams.
//!
//! The binary is `$SENTINEL_NATS_SERVER`, else `nats-server` on PATH. It must be ≥ 2.10:
//! 2.9.10 (Debian's) drops the oldest messages on a full discard-new stream with max_bytes
//! (nats-server issue 4771) and silently ignores 2.10 consumer fields. `scripts/test` installs
//! a current one and sets the variable.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sentinel_bus_nats::CORE_PRINCIPAL;
use sentinel_driver::connect::{Credentials, connect_options};

/// The oldest server version the bus semantics are checked against.
pub const NATS_SERVER_VERSION_MIN: (u32, u32) = (2, 10);

/// A running private nats-server with JetStream.
pub struct NatsServer {
    child: Child,
    dir: PathBuf,
    port: u16,
    monitor_port: u16,
}

fn binary() -> String {
    std::env::var("SENTINEL_NATS_SERVER").unwrap_or_else(|_| "nats-server".to_owned())
}

fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port on 127.0.0.1");
    listener
        .local_addr()
        .expect("local address of a bound listener")
        .port()
}

/// Parses `nats-server: v2.10.22` into (2, 10).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let version = text.split_whitespace().find_map(|word| word.strip_prefix('v'))?;
    let mut parts = version.split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .ok()?;
    Some((major, minor))
}

fn check_version(binary: &str) {
    let output = Command::new(binary).arg("--version").output().unwrap_or_else(|error| {
        panic!(
            "cannot run nats-server ({binary}): {error}. Run the suite with scripts/test, which installs a \
             current nats-server and sets SENTINEL_NATS_SERVER"
        )
    });
    let text =
        String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    let version = parse_version(&text)
        .unwrap_or_else(|| panic!("cannot read the version of {binary} from {:?}", text.trim()));
    assert!(
        version >= NATS_SERVER_VERSION_MIN,
        "{binary} is {}, older than {}.{} (2.9 drops accepted messages on a full discard-new stream, \
         nats-server issue 4771). Run the suite with scripts/test, which installs a current nats-server \
         and sets SENTINEL_NATS_SERVER",
        text.trim(),
        NATS_SERVER_VERSION_MIN.0,
        NATS_SERVER_VERSION_MIN.1
    );
}

impl NatsServer {
    /// Starts a server and waits until JetStream answers. Panics with a clear message if the
    /// binary is missing or too old, or the server does not come up.
    ///
    /// A free port is found by binding port 0 and releasing it, so another test's server can
    /// take it first. Each server therefore gets a unique name, and readiness means our own
    /// process is alive and the server answering is the one with our name; on a lost race the
    /// start is retried with fresh ports.
    pub async fn start() -> NatsServer {
        NatsServer::start_with_config("", &Credentials::None).await
    }

    /// Starts a server whose configuration file holds `config` (e.g. a generated
    /// authorization block); readiness is checked as `ready_as`, who must be allowed to ask
    /// for JetStream's account info.
    pub async fn start_with_config(config: &str, ready_as: &Credentials) -> NatsServer {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        const ATTEMPTS_MAX: u32 = 5;
        let binary = binary();
        check_version(&binary);
        let mut last_error = String::new();
        for _ in 0..ATTEMPTS_MAX {
            let port = free_port();
            let monitor_port = free_port();
            let n = STARTED.fetch_add(1, Ordering::Relaxed);
            let name = format!("sentinel-test-{}-{n}", std::process::id());
            let dir = std::env::temp_dir().join(format!("sentinel-nats-{}-{n}-{port}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create the server's temporary store directory");
            let log = dir.join("server.log");
            let config_file = dir.join("server.conf");
            std::fs::write(&config_file, config).expect("write the server's configuration");
            let child = Command::new(&binary)
                .arg("-c")
                .arg(&config_file)
                .arg("-js")
                .arg("-sd")
                .arg(&dir)
                .args([
                    "-n",
                    &name,
                    "-a",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-m",
                    &monitor_port.to_string(),
                ])
                .arg("-l")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|error| panic!("spawn {binary}: {error}"));
            let mut server = NatsServer {
                child,
                dir,
                port,
                monitor_port,
            };
            match server.wait_ready(&name, ready_as).await {
                Ok(()) => return server,
                // Dropping the server kills the process and removes its directory.
                Err(error) => last_error = error,
            }
        }
        panic!("nats-server did not start after {ATTEMPTS_MAX} attempts: {last_error}");
    }

    async fn wait_ready(&mut self, name: &str, ready_as: &Credentials) -> Result<(), String> {
        let mut last_error = String::new();
        for _ in 0..200 {
            if let Ok(Some(status)) = self.child.try_wait() {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                return Err(format!(
                    "nats-server on port {} exited ({status}): {log}",
                    self.port
                ));
            }
            let options = connect_options("readiness", CORE_PRINCIPAL, ready_as, Default::default());
            match options.connect(self.url()).await {
                Ok(client) => {
                    if client.server_info().server_name != name {
                        return Err(format!("port {} is served by another test's server", self.port));
                    }
                    let jetstream = async_nats::jetstream::new(client);
                    match jetstream.query_account().await {
                        Ok(_) => return Ok(()),
                        Err(error) => last_error = error.to_string(),
                    }
                }
                Err(error) => last_error = error.to_string(),
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
        Err(format!(
            "nats-server on port {} did not become ready: {last_error}\nserver log:\n{log}",
            self.port
        ))
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn monitor_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.monitor_port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn store_dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Subscribes `client` to `subject` and returns once the server has registered the
/// subscription, so nothing published afterwards by any connection is missed.
///
/// async-nats' `Client::flush` only flushes the local socket; it does not wait for the server.
/// A probe on the same connection does: the server handles one connection's SUB and PUB in
/// order, so once the probe (on `probe_subject`, which `subject` must match) comes back, the
/// subscription is in place. The probe is consumed here.
pub async fn subscribe_synced(
    client: &async_nats::Client,
    subject: &str,
    probe_subject: &str,
    probe_payload: &'static [u8],
) -> async_nats::Subscriber {
    use futures::StreamExt;
    let mut subscriber = client.subscribe(subject.to_owned()).await.expect("subscribe");
    client
        .publish(probe_subject.to_owned(), bytes::Bytes::from_static(probe_payload))
        .await
        .expect("publish the probe");
    let probe = tokio::time::timeout(Duration::from_secs(10), subscriber.next())
        .await
        .expect("the probe returns")
        .expect("subscription open");
    assert_eq!(probe.subject.as_str(), probe_subject);
    assert_eq!(&probe.payload[..], probe_payload);
    subscriber
}

#[cfg(test)]
mod tests {
    use super::parse_version;

    #[test]
    fn parses_server_versions() {
        assert_eq!(parse_version("nats-server: v2.9.10\n"), Some((2, 9)));
        assert_eq!(parse_version("nats-server: v2.15.1"), Some((2, 15)));
        assert_eq!(parse_version("nats-server: v2.11.0-RC.1"), Some((2, 11)));
        assert_eq!(parse_version("garbage"), None);
    }
}
