//! A private Prometheus per test (issue 26): the Debian package's `prometheus` binary
//! (`$SENTINEL_PROMETHEUS`, else `prometheus` on PATH; `scripts/test` installs it), on a free
//! loopback port with its own temporary data folder, scraping the targets it is given every
//! second and evaluating the repository's alert rules. Killed and removed on drop. Queried
//! through its HTTP API (`/api/v1/query`, `/api/v1/alerts`) with a minimal HTTP/1.0 client, as
//! an operator's dashboards and alertmanager would read it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use sentinel_core::registry::{Registry, SELF_HOST};
use sentinel_core::wire::{EnvelopeOut, queue_drops_point};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bin::workspace_root;
use crate::harness::{Env, now, spawn_core_on};
use crate::traffic::Traffic;

/// The alert rules the server loads (and `scripts/test` checks with promtool).
pub fn rules_file() -> PathBuf {
    workspace_root().join("ops/prometheus/sentinel.rules.yml")
}

pub struct PrometheusServer {
    child: Child,
    dir: PathBuf,
    port: u16,
}

fn binary() -> String {
    std::env::var("SENTINEL_PROMETHEUS").unwrap_or_else(|_| "prometheus".to_owned())
}

/// A port nobody listens on now (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("its address")
        .port()
}

impl PrometheusServer {
    /// Starts a server scraping `targets` (`host:port`, path `/metrics`) every second and
    /// waits until it is ready. Panics, naming the fix, when the binary is missing.
    pub async fn start(targets: &[String]) -> PrometheusServer {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "sentinel-prometheus-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("data")).expect("create the Prometheus folder");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        let config = format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
             rule_files:\n  - '{}'\n\
             scrape_configs:\n  - job_name: sentinel\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n    \
             static_configs:\n      - targets: [{}]\n",
            rules_file().display(),
            targets.join(", ")
        );
        let config_file = dir.join("prometheus.yml");
        std::fs::write(&config_file, config).expect("write the Prometheus configuration");
        let port = free_port();
        let log = std::fs::File::create(dir.join("prometheus.log")).expect("log file");
        let child = Command::new(binary())
            .arg(format!("--config.file={}", config_file.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run prometheus ({}): {e}. Run the suite with scripts/test, which installs \
                     the Debian package `prometheus`",
                    binary()
                )
            });
        let server = PrometheusServer { child, dir, port };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok((200, _)) = http_get(&server.authority(), "/-/ready").await {
                return server;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "Prometheus did not become ready in 30 s; its log: {}",
                server.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn authority(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default()
    }

    /// `/api/v1/query` of an instant vector: each series' labels and value.
    pub async fn query(&self, promql: &str) -> Vec<(serde_json::Value, f64)> {
        let path = format!("/api/v1/query?query={}", percent_encode(promql));
        let (status, body) = http_get(&self.authority(), &path)
            .await
            .unwrap_or_else(|e| panic!("query {promql}: {e}"));
        let json: serde_json::Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("query {promql}: not JSON ({e}): {body}"));
        assert_eq!(status, 200, "query {promql}: {body}");
        assert_eq!(json["status"], "success", "query {promql}: {body}");
        json["data"]["result"]
            .as_array()
            .unwrap_or_else(|| panic!("query {promql}: not a vector: {body}"))
            .iter()
            .map(|series| {
                let value = series["value"][1]
                    .as_str()
                    .and_then(|v| v.parse::<f64>().ok())
                    .unwrap_or_else(|| panic!("query {promql}: no value in {series}"));
                (series["metric"].clone(), value)
            })
            .collect()
    }

    /// The single value of `promql`, if it has exactly one series.
    pub async fn value(&self, promql: &str) -> Option<f64> {
        match self.query(promql).await.as_slice() {
            [(_, value)] => Some(*value),
            _ => None,
        }
    }

    /// Alerts in state `firing`, by name.
    pub async fn firing(&self) -> Vec<String> {
        let (status, body) = http_get(&self.authority(), "/api/v1/alerts")
            .await
            .expect("GET /api/v1/alerts");
        assert_eq!(status, 200, "{body}");
        let json: serde_json::Value = serde_json::from_str(&body).expect("alerts JSON");
        json["data"]["alerts"]
            .as_array()
            .map(|alerts| {
                alerts
                    .iter()
                    .filter(|a| a["state"] == "firing")
                    .filter_map(|a| a["labels"]["alertname"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for PrometheusServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// RFC 3986 unreserved characters stay; everything else is `%XX`.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A minimal HTTP/1.0 GET (the server closes the connection after the response): the status
/// and the body. The content type is returned as part of nothing; see [`http_get_with_headers`].
pub async fn http_get(authority: &str, path: &str) -> std::io::Result<(u16, String)> {
    http_get_with_headers(authority, path)
        .await
        .map(|(status, _, body)| (status, body))
}

/// [`http_get`], with the response's header lines.
pub async fn http_get_with_headers(authority: &str, path: &str) -> std::io::Result<(u16, String, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(authority).await?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {authority}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    };
    let response = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 10 s"))??;
    let text = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| std::io::Error::other("no HTTP head"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or_else(|| std::io::Error::other("no HTTP status"))?;
    Ok((status, head.to_owned(), body.to_owned()))
}

/// A real `sentinel run` core over an [`Env`] (the sample registry, as the writer role) serving
/// `/metrics` on a free loopback port, and a private [`PrometheusServer`] scraping it every
/// second: the setup of the metrics test and the dashboard test.
pub struct ScrapedCore {
    pub core: Child,
    pub prometheus: PrometheusServer,
    /// `127.0.0.1:PORT` of the core's `/metrics`.
    pub target: String,
    /// The first `/metrics` answer that carried the core's epoch: its header lines and body.
    pub first_scrape: (String, String),
}

impl ScrapedCore {
    /// Starts Prometheus, then the core with `--metrics-listen` plus `extra_args`, and waits
    /// until `/metrics` answers 200 with `sentinel_core_epoch` (the core holds the lock).
    pub async fn start(env: &Env, ack_wait_ms: u64, extra_args: &[&str]) -> ScrapedCore {
        let metrics_port = free_port();
        let target = format!("127.0.0.1:{metrics_port}");
        let prometheus = PrometheusServer::start(std::slice::from_ref(&target)).await;
        let port = metrics_port.to_string();
        let mut args = vec!["--metrics-listen", &port];
        args.extend_from_slice(extra_args);
        let core = spawn_core_on(
            env,
            &crate::traffic::sample_registry_dir(),
            ack_wait_ms,
            &args,
            ("warn", Stdio::inherit()),
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let first_scrape = loop {
            if let Ok((200, head, body)) = http_get_with_headers(&target, "/metrics").await
                && body.contains("sentinel_core_epoch")
            {
                break (head, body);
            }
            assert!(tokio::time::Instant::now() < deadline, "no /metrics on {target}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        ScrapedCore {
            core,
            prometheus,
            target,
            first_scrape,
        }
    }
}

/// What [`publish_operator_traffic`] sent beside the generated traffic.
pub struct OperatorTraffic {
    /// The driver instance whose `queue_drops` self-point reported drops, and its host.
    pub drops_host: String,
    pub drops_instance: String,
}

/// Publishes `mix` (every bad-input kind among it), then one `queue_drops` reading of `drops`
/// for a driver instance (last, so it is that instance's last committed one), then
/// `extra_misassigned` misassigned readings (a point of one host from another host's instance);
/// adds the last two to `mix.expected`, so `wait_drained` waits for them too.
pub async fn publish_operator_traffic(
    env: &Env,
    registry: &Registry,
    mix: &mut Traffic,
    drops: u64,
    extra_misassigned: u64,
) -> OperatorTraffic {
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let items = mix
        .messages
        .iter()
        .map(|m| (m.subject.clone(), m.msg_id.clone(), m.payload.clone()));
    publisher
        .publish_pipelined(items, 256)
        .await
        .expect("publish the traffic");
    let drops_point = registry
        .points()
        .map(|(_, p)| p)
        .find(|p| *p.id == *queue_drops_point(&p.host, &p.descriptor.assignment.driver_instance))
        .expect("the sample registry declares queue_drops points");
    let instance = drops_point.descriptor.assignment.driver_instance.clone();
    let mut reading = EnvelopeOut::new(&drops_point.id, &instance, 2, 1, now(), serde_json::json!(drops));
    reading.unit = drops_point.unit_native.as_deref().map(str::to_owned);
    publisher
        .publish(
            &format!("obs.{}.{instance}", drops_point.host),
            &reading.msg_id(),
            Bytes::from(reading.to_bytes()),
        )
        .await
        .expect("publish the queue_drops reading");
    mix.expected.rows[drops_point.descriptor.retention.index()] += 1;
    let other = registry
        .points()
        .map(|(_, p)| p)
        .find(|p| p.host != drops_point.host && &*p.host != SELF_HOST)
        .expect("a point on another host");
    let other_instance = &other.descriptor.assignment.driver_instance;
    for seq in 1..=extra_misassigned {
        let misassigned = EnvelopeOut::new(
            &drops_point.id,
            other_instance,
            3,
            seq,
            now(),
            serde_json::json!(1),
        );
        publisher
            .publish(
                &format!("obs.{}.{other_instance}", other.host),
                &misassigned.msg_id(),
                Bytes::from(misassigned.to_bytes()),
            )
            .await
            .expect("publish a misassigned reading");
    }
    *mix.expected.quarantine.entry("wrong_instance").or_default() += extra_misassigned;
    OperatorTraffic {
        drops_host: drops_point.host.to_string(),
        drops_instance: instance.to_string(),
    }
}
