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

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::bin::workspace_root;

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
