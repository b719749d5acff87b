//! A private three-node nats-server cluster per test (issue 25, item 1; docs/deploy.md, "A
//! three-node bus cluster"): each node its own free client, route and monitoring ports on
//! loopback, its own JetStream store directory, routes to every node, one cluster name. A node
//! can be SIGKILLed and restarted on the same ports and store (as a supervisor would), so the
//! cluster keeps its quorum through a test. Everything is killed and removed on drop.
//!
//! The binary is the one [`crate::nats`] uses (`$SENTINEL_NATS_SERVER`, set by `scripts/test`).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::pg_pair::free_port;

/// How long a node (or the cluster's JetStream) may take to come up.
const READY_TIMEOUT_S: u64 = 30;

/// One node of a [`NatsCluster`].
pub struct Node {
    pub name: String,
    pub port: u16,
    config_file: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl Node {
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    fn spawn(&mut self) {
        let binary = std::env::var("SENTINEL_NATS_SERVER").unwrap_or_else(|_| "nats-server".to_owned());
        let child = Command::new(&binary)
            .arg("-c")
            .arg(&self.config_file)
            .arg("-l")
            .arg(&self.log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("spawn {binary}: {error}"));
        self.child = Some(child);
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A running cluster of nats-server nodes with JetStream.
pub struct NatsCluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

impl NatsCluster {
    /// Starts `size` nodes routed to each other and waits until every one answers a JetStream
    /// request (which needs the cluster's meta leader elected).
    pub async fn start(size: usize) -> NatsCluster {
        NatsCluster::start_with(size, "").await
    }

    /// As [`NatsCluster::start`], with `jetstream_options` added to every node's `jetstream`
    /// block (e.g. `sync_interval: always`).
    pub async fn start_with(size: usize, jetstream_options: &str) -> NatsCluster {
        static STARTED: AtomicU64 = AtomicU64::new(0);
        assert!((1..=5).contains(&size), "a cluster of 1..=5 nodes");
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let cluster_name = format!("sentinel-test-{}-{n}", std::process::id());
        let dir = std::env::temp_dir().join(format!("sentinel-nats-cluster-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("cluster directory");
        let ports: Vec<(u16, u16, u16)> = (0..size)
            .map(|_| (free_port(), free_port(), free_port()))
            .collect();
        let routes: Vec<String> = ports
            .iter()
            .map(|(_, route, _)| format!("\"nats-route://127.0.0.1:{route}\""))
            .collect();
        let mut nodes = Vec::with_capacity(size);
        for (i, &(port, route, monitor)) in ports.iter().enumerate() {
            let name = format!("{cluster_name}-n{i}");
            let store = dir.join(format!("n{i}"));
            std::fs::create_dir_all(&store).expect("node store directory");
            let config = format!(
                "server_name: \"{name}\"\nlisten: \"127.0.0.1:{port}\"\nhttp: \"127.0.0.1:{monitor}\"\n\
                 jetstream {{ store_dir: \"{store}\"\n{jetstream_options}\n}}\n\
                 cluster {{\n  name: \"{cluster_name}\"\n  listen: \"127.0.0.1:{route}\"\n  routes: [{routes}]\n}}\n",
                store = store.display(),
                routes = routes.join(", "),
            );
            let config_file = dir.join(format!("n{i}.conf"));
            std::fs::write(&config_file, config).expect("node configuration");
            nodes.push(Node {
                name,
                port,
                config_file,
                log: dir.join(format!("n{i}.log")),
                child: None,
            });
        }
        for node in &mut nodes {
            node.spawn();
        }
        let cluster = NatsCluster { nodes, dir };
        for i in 0..size {
            cluster.wait_node_ready(i).await;
        }
        cluster
    }

    /// Every node's client URL, comma-separated: what the core and the drivers are given.
    pub fn urls(&self) -> String {
        self.nodes.iter().map(Node::url).collect::<Vec<_>>().join(",")
    }

    /// The index of the node called `name`.
    pub fn index_of(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|node| node.name == name)
            .unwrap_or_else(|| panic!("no node called {name}"))
    }

    /// SIGKILLs node `i` (no shutdown, no flush: the store keeps what it had synced).
    pub fn kill9(&mut self, i: usize) {
        let mut child = self.nodes[i].child.take().expect("the node is running");
        child.kill().expect("SIGKILL the node");
        let _ = child.wait();
    }

    /// Starts node `i` again on its ports and store, and waits until it answers JetStream.
    pub async fn restart(&mut self, i: usize) {
        assert!(!self.nodes[i].is_running(), "the node is stopped");
        self.nodes[i].spawn();
        self.wait_node_ready(i).await;
    }

    async fn wait_node_ready(&self, i: usize) {
        let node = &self.nodes[i];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(READY_TIMEOUT_S);
        loop {
            let last_error = match async_nats::connect(node.url()).await {
                Ok(client) => {
                    assert_eq!(
                        client.server_info().server_name,
                        node.name,
                        "port {} is served by another test's server",
                        node.port
                    );
                    match async_nats::jetstream::new(client).query_account().await {
                        Ok(_) => return,
                        Err(error) => error.to_string(),
                    }
                }
                Err(error) => error.to_string(),
            };
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {} did not become ready within {READY_TIMEOUT_S} s: {last_error}\nlog:\n{}",
                node.name,
                node.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(mut child) = node.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
