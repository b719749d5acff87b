//! systemd's service notification protocol (`sd_notify(3)`), spoken directly: one datagram per
//! message to the unix socket `$NOTIFY_SOCKET` names (a path, or `@name` in the abstract
//! namespace), so no libsystemd is linked (issue 26, item 5; core runtime spec, "Acquisition
//! order at startup").
//!
//! Owns: what a `Type=notify` unit is told and when. `READY=1` once, when the runtime loop is
//! running — after the startup order has reached consuming (the consumer bound, restart steps
//! done, the cold start recorded); a drain that follows is the service running, so
//! `TimeoutStartSec` never kills it. `STATUS=` lines for each startup step and for the drain;
//! `EXTEND_TIMEOUT_USEC=` before each startup step, so a long one (derived windows over a big
//! history) is given [`STARTUP_STEP_EXTEND_US`] rather than a unit-wide guess, renewed every
//! minute while `lock_and_epoch` (which migrates the schema) runs, for up to four hours;
//! `WATCHDOG=1`
//! from the runtime loop at half of `$WATCHDOG_USEC` (so a wedged loop stops pinging and
//! systemd restarts it); `STOPPING=1` when SIGTERM asks for the drain.
//!
//! Without `$NOTIFY_SOCKET` every call does nothing. A send never blocks the loop: the socket
//! is non-blocking and a message the manager cannot take now is dropped (the next watchdog
//! ping comes half a period later). Messages carry step names and counts, never values.

use std::os::unix::net::UnixDatagram;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use sentinel_core::Micros;
use tracing::warn;

/// How much longer each startup step may take, told to the manager before the step starts.
pub const STARTUP_STEP_EXTEND_US: u64 = 300_000_000;

/// How often a startup step still running renews its extension ([`Notifier::extend_while`]).
pub const STARTUP_STEP_RENEW_US: u64 = 60_000_000;

/// How long a step may keep renewing: past this, the unit's start timeout ends a wedged start.
/// Four hours is more than every migration takes on a 90-day estate kept uncompacted
/// (docs/operations.md, "Upgrading").
pub const STARTUP_STEP_RENEW_MAX_US: u64 = 4 * 3_600_000_000;

/// The largest watchdog period honoured (a larger `$WATCHDOG_USEC` is clamped): one day.
const WATCHDOG_USEC_MAX: u64 = 86_400_000_000;

struct Target {
    socket: UnixDatagram,
    address: std::os::unix::net::SocketAddr,
}

struct Inner {
    target: Option<Target>,
    /// Half the watchdog period in µs, when the manager asked for pings.
    watchdog_every_us: Option<i64>,
    last_ping_at: AtomicI64,
    ready_sent: AtomicBool,
}

/// The connection to the service manager; cheap to clone.
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("enabled", &self.enabled())
            .field("watchdog_every_us", &self.inner.watchdog_every_us)
            .finish()
    }
}

impl Notifier {
    /// From the environment systemd sets for the service: `$NOTIFY_SOCKET`, `$WATCHDOG_USEC`
    /// and `$WATCHDOG_PID` (pings only when it names this process, or is unset).
    pub fn from_env() -> Notifier {
        let socket_path = std::env::var_os("NOTIFY_SOCKET");
        let watchdog_usec = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|v| v.parse::<u64>().ok());
        let for_us = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_none_or(|pid| pid == std::process::id());
        Notifier::new(
            socket_path.as_deref().and_then(|p| p.to_str()),
            watchdog_usec.filter(|_| for_us),
        )
    }

    /// A notifier sending to `socket` (`None`: a no-op), pinging every half `watchdog_usec`.
    pub fn new(socket: Option<&str>, watchdog_usec: Option<u64>) -> Notifier {
        let target = socket.and_then(|path| match connect(path) {
            Ok(target) => Some(target),
            Err(e) => {
                warn!(error = %e, "cannot use NOTIFY_SOCKET; the service manager will not be told");
                None
            }
        });
        let watchdog_every_us = watchdog_usec
            .filter(|&usec| usec > 0 && target.is_some())
            .map(|usec| (usec.min(WATCHDOG_USEC_MAX) / 2).max(1) as i64);
        Notifier {
            inner: Arc::new(Inner {
                target,
                watchdog_every_us,
                last_ping_at: AtomicI64::new(i64::MIN),
                ready_sent: AtomicBool::new(false),
            }),
        }
    }

    /// A notifier that tells nobody anything.
    pub fn disabled() -> Notifier {
        Notifier::new(None, None)
    }

    pub fn enabled(&self) -> bool {
        self.inner.target.is_some()
    }

    /// A startup step begins: its name as the status, and the step's extension of the start
    /// timeout.
    pub fn startup_step(&self, step: &str) {
        self.send(&format!(
            "STATUS=startup: {step}\nEXTEND_TIMEOUT_USEC={STARTUP_STEP_EXTEND_US}"
        ));
    }

    /// Runs `step_future`, renewing the start timeout's extension every
    /// [`STARTUP_STEP_RENEW_US`] while it runs, for at most [`STARTUP_STEP_RENEW_MAX_US`].
    /// `lock_and_epoch` includes the schema's migrations, and one that rewrites every hot row
    /// takes minutes per ten GB (docs/operations.md, "Upgrading"): past one extension, systemd
    /// would kill the start mid-migration, the migration would roll back, and the restart would
    /// begin it again, forever. Without a service manager it is `step_future` alone.
    pub async fn extend_while<F: Future>(&self, step: &str, step_future: F) -> F::Output {
        self.extend_while_every(
            step,
            step_future,
            Duration::from_micros(STARTUP_STEP_RENEW_US),
            STARTUP_STEP_RENEW_MAX_US / STARTUP_STEP_RENEW_US,
        )
        .await
    }

    async fn extend_while_every<F: Future>(
        &self,
        step: &str,
        step_future: F,
        every: Duration,
        renewals_max: u64,
    ) -> F::Output {
        if !self.enabled() {
            return step_future.await;
        }
        assert!(!every.is_zero() && renewals_max > 0);
        let mut step_future = std::pin::pin!(step_future);
        let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        let mut renewals = 0u64;
        loop {
            tokio::select! {
                out = &mut step_future => return out,
                _ = renew.tick(), if renewals < renewals_max => {
                    renewals += 1;
                    let running_s = every.as_secs() * renewals;
                    self.send(&format!(
                        "STATUS=startup: {step} (running for {running_s} s)\n\
                         EXTEND_TIMEOUT_USEC={STARTUP_STEP_EXTEND_US}"
                    ));
                }
            }
        }
    }

    /// The loop runs: `READY=1` with its status, the first time only.
    pub fn ready(&self, epoch: u32) {
        if !self.inner.ready_sent.swap(true, Ordering::Relaxed) {
            self.send(&format!("READY=1\nSTATUS=consuming (epoch {epoch})"));
        }
    }

    /// Whether `READY=1` was sent.
    pub fn is_ready(&self) -> bool {
        self.inner.ready_sent.load(Ordering::Relaxed)
    }

    /// Called from the runtime loop on every wake-up: a `WATCHDOG=1` when half the period has
    /// passed since the last one.
    pub fn watchdog(&self, now: Micros) {
        let Some(every_us) = self.inner.watchdog_every_us else {
            return;
        };
        let last = self.inner.last_ping_at.load(Ordering::Relaxed);
        if last != i64::MIN && now.0.saturating_sub(last) < every_us {
            return;
        }
        self.inner.last_ping_at.store(now.0, Ordering::Relaxed);
        self.send("WATCHDOG=1");
    }

    /// SIGTERM: the drain begins.
    pub fn stopping(&self) {
        self.send("STOPPING=1\nSTATUS=draining in-flight batches");
    }

    pub fn status(&self, status: &str) {
        self.send(&format!("STATUS={status}"));
    }

    fn send(&self, message: &str) {
        let Some(target) = &self.inner.target else {
            return;
        };
        if let Err(e) = target.socket.send_to_addr(message.as_bytes(), &target.address)
            && e.kind() != std::io::ErrorKind::WouldBlock
        {
            warn!(error = %e, "notifying the service manager failed");
        }
    }
}

fn connect(path: &str) -> std::io::Result<Target> {
    use std::os::linux::net::SocketAddrExt as _;
    use std::os::unix::net::SocketAddr;
    let address = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(path)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    Ok(Target { socket, address })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service manager's socket in a folder of its own (`name` tells the tests' apart).
    struct Manager {
        dir: std::path::PathBuf,
        path: std::path::PathBuf,
        socket: UnixDatagram,
    }

    impl Manager {
        fn bind(name: &str) -> Manager {
            let dir = std::env::temp_dir().join(format!("sentinel-notify-{name}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("temp dir");
            let path = dir.join("notify.sock");
            let _ = std::fs::remove_file(&path);
            let socket = UnixDatagram::bind(&path).expect("bind");
            socket.set_nonblocking(true).expect("non-blocking");
            Manager { dir, path, socket }
        }

        /// Every message queued so far.
        fn received(&self) -> Vec<String> {
            let mut buf = [0u8; 512];
            std::iter::from_fn(|| {
                self.socket
                    .recv(&mut buf)
                    .ok()
                    .map(|n| String::from_utf8_lossy(&buf[..n]).into_owned())
            })
            .collect()
        }
    }

    impl Drop for Manager {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }

    #[test]
    fn ready_once_and_the_watchdog_at_half_its_period() {
        let manager = Manager::bind("unit");
        let notifier = Notifier::new(manager.path.to_str(), Some(2_000_000));
        let received = || manager.received();
        notifier.startup_step("lock_and_epoch");
        notifier.ready(3);
        notifier.ready(3);
        notifier.watchdog(Micros(10_000_000));
        notifier.watchdog(Micros(10_999_999));
        notifier.watchdog(Micros(11_000_000));
        assert_eq!(
            received(),
            [
                format!("STATUS=startup: lock_and_epoch\nEXTEND_TIMEOUT_USEC={STARTUP_STEP_EXTEND_US}"),
                "READY=1\nSTATUS=consuming (epoch 3)".to_owned(),
                "WATCHDOG=1".to_owned(),
                "WATCHDOG=1".to_owned(),
            ]
        );
    }

    /// A step that outlasts its extension renews it while it runs, up to the bound, and the
    /// renewals stop when it ends; without a manager the future just runs.
    #[tokio::test(start_paused = true)]
    async fn a_long_step_renews_its_extension_while_it_runs() {
        let manager = Manager::bind("renew");
        let received = || manager.received();
        let renewal = |s: u64| {
            format!(
                "STATUS=startup: lock_and_epoch (running for {s} s)\nEXTEND_TIMEOUT_USEC={STARTUP_STEP_EXTEND_US}"
            )
        };
        let notifier = Notifier::new(manager.path.to_str(), None);
        let step = async {
            tokio::time::sleep(Duration::from_secs(150)).await;
            7
        };
        assert_eq!(notifier.extend_while("lock_and_epoch", step).await, 7);
        assert_eq!(received(), [renewal(60), renewal(120)]);
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert_eq!(received(), Vec::<String>::new(), "nothing after the step ended");

        // The bound: three renewals of a step that runs for ten periods, then none.
        let step = tokio::time::sleep(Duration::from_secs(10));
        notifier
            .extend_while_every("lock_and_epoch", step, Duration::from_secs(1), 3)
            .await;
        assert_eq!(received(), [renewal(1), renewal(2), renewal(3)]);

        let quiet = Notifier::disabled();
        assert_eq!(quiet.extend_while("lock_and_epoch", async { 8 }).await, 8);
    }
}
