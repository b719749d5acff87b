//! Two private PostgreSQL clusters with streaming replication, for the standby tests (issue 25,
//! item 3; docs/deploy.md, "One box with a database standby"), and a TCP proxy the test can cut.
//!
//! Owns:
//! - [`PgPair`]: a primary made with `initdb` and a standby made from it with
//!   `pg_basebackup -R`, each on a free loopback port with its own data and socket folder, the
//!   standby synchronous (`synchronous_commit = on`, `synchronous_standby_names` naming it),
//!   so a commit the primary acknowledged is on the standby. Killing the primary (SIGKILL to
//!   the postmaster and every backend), promoting the standby, and the multi-host URL the core
//!   is given. Both servers are stopped and their folders removed on drop.
//! - [`TcpProxy`]: forwards a loopback port to another; [`TcpProxy::cut`] drops every
//!   connection through it and refuses new ones (a partition the test controls).
//!
//! The binaries come from `SENTINEL_PG_BIN` (scripts/test sets it to the installed server's
//! `bin` folder) or the newest `/usr/lib/postgresql/*/bin`. `initdb` refuses to run as root,
//! so as root every server command runs as the `postgres` user (`runuser -u postgres --`).
//! `fsync = off`: the tests kill processes, never the machine, and the page cache survives a
//! process; replication acknowledgements do not depend on it.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use sqlx::Connection;

/// The standby's `application_name`, which the primary's `synchronous_standby_names` names.
pub const STANDBY_NAME: &str = "standby1";
/// How long a server may take to start, promote or catch up.
const SERVER_WAIT_S: u64 = 60;

static NEXT: AtomicU64 = AtomicU64::new(0);

pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port on 127.0.0.1");
    listener.local_addr().expect("local address").port()
}

/// The PostgreSQL server binaries' folder.
pub fn pg_bin() -> PathBuf {
    if let Ok(dir) = std::env::var("SENTINEL_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .expect("/usr/lib/postgresql exists (set SENTINEL_PG_BIN otherwise)")
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions
        .pop()
        .map(|(_, bin)| bin)
        .expect("a PostgreSQL server under /usr/lib/postgresql/*/bin")
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Runs a server binary, as `postgres` when we are root; fails with its output.
fn run_pg(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let binary = pg_bin().join(program);
    let mut command = if running_as_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(&binary);
        c
    } else {
        Command::new(&binary)
    };
    let output = command
        .args(args)
        .current_dir("/")
        .output()
        .with_context(|| format!("running {}", binary.display()))?;
    if !output.status.success() {
        bail!(
            "{program} {args:?} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// One cluster: its folder (data in `data/`, socket and log beside it) and port.
pub struct PgServer {
    pub dir: PathBuf,
    pub port: u16,
}

impl PgServer {
    fn data(&self) -> String {
        self.dir.join("data").to_string_lossy().into_owned()
    }

    /// `host:port` as the multi-host URL names it.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The superuser's URL for `database` on this server alone.
    pub fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    fn start(&self) -> anyhow::Result<()> {
        let log = self.dir.join("server.log");
        run_pg(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-l",
                log.to_str().expect("UTF-8 path"),
                "-w",
                "-t",
                &SERVER_WAIT_S.to_string(),
                "start",
            ],
        )
        .map(drop)
    }

    fn append_config(&self, file: &str, lines: &str) -> anyhow::Result<()> {
        use std::io::Write;
        let path = self.dir.join("data").join(file);
        let mut f = std::fs::OpenOptions::new().append(true).open(&path)?;
        f.write_all(lines.as_bytes())?;
        Ok(())
    }

    /// The postmaster's pid, from `postmaster.pid`.
    pub fn postmaster_pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.join("data/postmaster.pid")).ok()?;
        text.lines().next()?.trim().parse().ok()
    }

    /// SIGKILL to the postmaster and every process it started: the server is gone at once, as
    /// on the loss of its machine, with no shutdown checkpoint and no goodbye to clients.
    pub fn kill9(&self) {
        let Some(pid) = self.postmaster_pid() else { return };
        let children = children_of(pid);
        let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        for child in children {
            let _ = Command::new("kill").args(["-KILL", &child.to_string()]).status();
        }
    }

    /// `pg_ctl promote`, waiting until the server accepts writes.
    pub fn promote(&self) -> anyhow::Result<()> {
        run_pg(
            "pg_ctl",
            &[
                "-D",
                &self.data(),
                "-w",
                "-t",
                &SERVER_WAIT_S.to_string(),
                "promote",
            ],
        )
        .map(drop)
    }

    fn stop_immediately(&self) {
        let _ = run_pg("pg_ctl", &["-D", &self.data(), "-m", "immediate", "-w", "stop"]);
    }
}

/// The processes whose parent is `pid`, read from /proc.
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat"))
                .ok()
                // "pid (comm) state ppid …": comm may hold spaces, so read after the last ')'.
                .and_then(|stat| {
                    let after = stat.rsplit_once(')')?.1.to_owned();
                    after.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

/// A primary and its synchronous standby.
pub struct PgPair {
    pub primary: PgServer,
    pub standby: PgServer,
    /// In front of the primary when the standby replicates through it (the link a partition
    /// cuts); `None` when it replicates straight from the primary.
    pub link: Option<TcpProxy>,
    root: PathBuf,
}

impl PgPair {
    /// `initdb`s and starts the primary, `pg_basebackup -R`s the standby from it and starts
    /// it, and waits until the primary reports it as its synchronous standby. With `through_link`
    /// the standby replicates through a [`TcpProxy`] in front of the primary ([`PgPair::link`]),
    /// which the test can cut. After a promotion the standby runs without a synchronous standby of
    /// its own (`synchronous_standby_names = ''` in its configuration): the one box has no
    /// third server to wait for.
    pub async fn start(through_link: bool) -> anyhow::Result<PgPair> {
        let root = std::env::temp_dir().join(format!(
            "sentinel-pg-pair-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let primary = PgServer {
            dir: root.join("primary"),
            port: free_port(),
        };
        let standby = PgServer {
            dir: root.join("standby"),
            port: free_port(),
        };
        for dir in [&root, &primary.dir, &standby.dir] {
            std::fs::create_dir_all(dir)?;
            if running_as_root() {
                let status = Command::new("chown")
                    .args(["postgres:postgres"])
                    .arg(dir)
                    .status()?;
                anyhow::ensure!(status.success(), "chown {}", dir.display());
            }
        }
        let mut pair = PgPair {
            primary,
            standby,
            link: None,
            root,
        };
        run_pg(
            "initdb",
            &[
                "-D",
                &pair.primary.data(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        )?;
        pair.primary.append_config(
            "postgresql.conf",
            &format!(
                "\nport = {}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
                 wal_level = replica\nmax_wal_senders = 5\nhot_standby = on\nfsync = off\n\
                 synchronous_commit = on\nsynchronous_standby_names = '{STANDBY_NAME}'\n",
                pair.primary.port,
                pair.primary.dir.display()
            ),
        )?;
        pair.primary.start()?;
        if through_link {
            pair.link = Some(TcpProxy::start(pair.primary.port).await);
        }
        let replication_port = pair.link.as_ref().map_or(pair.primary.port, |link| link.port);
        run_pg(
            "pg_basebackup",
            &[
                "-D",
                &pair.standby.data(),
                "-R",
                "-X",
                "stream",
                "--no-sync",
                "-d",
                &format!("host=127.0.0.1 port={} user=postgres", pair.primary.port),
            ],
        )?;
        pair.standby.append_config(
            "postgresql.auto.conf",
            &format!(
                "\nport = {}\nunix_socket_directories = '{}'\nsynchronous_standby_names = ''\n\
                 primary_conninfo = 'host=127.0.0.1 port={replication_port} user=postgres application_name={STANDBY_NAME}'\n",
                pair.standby.port,
                pair.standby.dir.display()
            ),
        )?;
        pair.standby.start()?;
        pair.wait_synchronous().await?;
        Ok(pair)
    }

    async fn wait_synchronous(&self) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(SERVER_WAIT_S);
        let mut conn = sqlx::PgConnection::connect(&self.primary.url("postgres")).await?;
        loop {
            let state: Option<String> =
                sqlx::query_scalar("SELECT sync_state FROM pg_stat_replication WHERE application_name = $1")
                    .bind(STANDBY_NAME)
                    .fetch_optional(&mut conn)
                    .await?;
            if state.as_deref() == Some("sync") {
                return Ok(());
            }
            if tokio::time::Instant::now() > deadline {
                bail!("the standby never became synchronous (sync_state {state:?})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The multi-host URL over `hosts` for `user` and `database`, read-write.
    pub fn url_over(hosts: &[String], user: &str, database: &str) -> String {
        format!(
            "postgres://{user}@{}/{database}?target_session_attrs=read-write",
            hosts.join(",")
        )
    }
}

impl Drop for PgPair {
    fn drop(&mut self) {
        self.standby.stop_immediately();
        self.primary.stop_immediately();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// A loopback TCP proxy to `127.0.0.1:target`, which the test can cut.
pub struct TcpProxy {
    pub port: u16,
    cut: Arc<AtomicBool>,
    connections: Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    pub async fn start(target: u16) -> TcpProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the proxy");
        let port = listener.local_addr().expect("proxy address").port();
        let cut = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(std::sync::Mutex::new(tokio::task::JoinSet::new()));
        let accept = {
            let cut = cut.clone();
            let connections = connections.clone();
            tokio::spawn(async move {
                while let Ok((mut inbound, _)) = listener.accept().await {
                    if cut.load(Ordering::SeqCst) {
                        // Refused: closed before a byte passes.
                        drop(inbound);
                        continue;
                    }
                    connections.lock().expect("lock").spawn(async move {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                        {
                            let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                        }
                    });
                }
            })
        };
        TcpProxy {
            port,
            cut,
            connections,
            accept,
        }
    }

    /// Drops every connection through the proxy and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.connections.lock().expect("lock").abort_all();
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.connections.lock().expect("lock").abort_all();
    }
}
