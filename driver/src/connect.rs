//! Connecting to the bus as one principal of the security model (core runtime spec: "the bus
//! rather than the API is the primary control surface, which makes subject-scoped bus
//! permissions the real authorisation model"; ARCHITECTURE.md, "Security model").
//!
//! Owns: the credentials a principal presents ([`Credentials`]: none, user and password, or an
//! nkey seed, read from a file or the environment, never from the repository), its private reply
//! inbox prefix (`_INBOX_<principal>`, so a driver host's permissions can name its own replies
//! and nobody else's), and [`Refusals`]: every permissions violation the server reports on the
//! connection, counted and turned into a clear [`BusError::PermissionDenied`] for the publish or
//! subscription it refused.
//!
//! nats-server reports a refused publish or subscription asynchronously, as
//! `-ERR 'Permissions Violation for Publish to "obs.B.x"'`; async-nats hands it to the
//! connection's event callback. Without [`Refusals`] a refused JetStream publish would look like
//! a lost ack and be retried until it timed out.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::{Client, ConnectOptions, Event, ServerAddr, ServerError};
use tokio::sync::Notify;

use crate::BusError;

/// How a principal proves who it is to nats-server.
#[derive(Clone, Default)]
pub enum Credentials {
    /// No authentication (a server with no authorization block: tests, the demo).
    #[default]
    None,
    UserPassword {
        user: String,
        password: String,
    },
    /// An nkey seed (`SU…`); the server holds only its public key.
    NkeySeed(String),
}

impl std::fmt::Debug for Credentials {
    /// Never prints a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("Credentials::None"),
            Credentials::UserPassword { user, .. } => write!(f, "Credentials::UserPassword({user})"),
            Credentials::NkeySeed(_) => f.write_str("Credentials::NkeySeed"),
        }
    }
}

/// Largest secret file read (a password or an nkey seed is tens of bytes).
pub const SECRET_FILE_BYTES_MAX: u64 = 4_096;

impl Credentials {
    /// From a user and a password file, or an nkey seed file; at most one kind. The secret's
    /// surrounding whitespace is dropped.
    pub fn from_files(
        user: Option<&str>,
        password_file: Option<&Path>,
        nkey_seed_file: Option<&Path>,
    ) -> Result<Credentials, BusError> {
        match (user, password_file, nkey_seed_file) {
            (None, None, None) => Ok(Credentials::None),
            (Some(user), Some(file), None) => Ok(Credentials::UserPassword {
                user: user.to_owned(),
                password: read_secret(file)?,
            }),
            (None, None, Some(file)) => {
                let seed = read_secret(file)?;
                if !seed.starts_with("SU") {
                    return Err(BusError::Other(format!(
                        "{} does not hold a user nkey seed (it should start with SU)",
                        file.display()
                    )));
                }
                Ok(Credentials::NkeySeed(seed))
            }
            _ => Err(BusError::Other(
                "NATS credentials: give a user with a password file, or an nkey seed file, not both".into(),
            )),
        }
    }
}

fn read_secret(file: &Path) -> Result<String, BusError> {
    let len = std::fs::metadata(file)
        .map_err(|e| BusError::Other(format!("reading {}: {e}", file.display())))?
        .len();
    if len > SECRET_FILE_BYTES_MAX {
        return Err(BusError::Other(format!(
            "{} is {len} bytes; a secret file holds at most {SECRET_FILE_BYTES_MAX}",
            file.display()
        )));
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| BusError::Other(format!("reading {}: {e}", file.display())))?;
    let secret = text.trim();
    if secret.is_empty() {
        return Err(BusError::Other(format!("{} is empty", file.display())));
    }
    Ok(secret.to_owned())
}

/// The reply inbox prefix of a principal: `_INBOX_<principal>`, with every character a subject
/// token cannot hold replaced by `_`. The generated permissions allow each principal to
/// subscribe only below its own prefix.
pub fn inbox_prefix(principal: &str) -> String {
    let token: String = principal
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("_INBOX_{token}")
}

/// Which operation the server refused.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum RefusedOp {
    Publish,
    Subscribe,
}

/// Most distinct refused subjects remembered; further ones are still counted in the total.
pub const REFUSED_SUBJECTS_MAX: usize = 1_024;

#[derive(Default)]
struct RefusalsState {
    total: u64,
    by_subject: BTreeMap<(RefusedOp, String), u64>,
}

/// Permission violations the server reported on one connection. Cheap to clone.
#[derive(Clone, Default)]
pub struct Refusals {
    state: Arc<Mutex<RefusalsState>>,
    changed: Arc<Notify>,
}

impl Refusals {
    /// Every refusal so far, on any subject.
    pub fn total(&self) -> u64 {
        self.lock().total
    }

    /// Refusals of `op` on exactly `subject` so far.
    pub fn count(&self, op: RefusedOp, subject: &str) -> u64 {
        self.lock()
            .by_subject
            .get(&(op, subject.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// Resolves once the count for `(op, subject)` exceeds `seen`.
    pub async fn refused_after(&self, op: RefusedOp, subject: &str, seen: u64) {
        loop {
            let notified = self.changed.notified();
            if self.count(op, subject) > seen {
                return;
            }
            notified.await;
        }
    }

    /// Records one server error; returns true when it was a permissions violation.
    pub fn record(&self, error: &ServerError) -> bool {
        let ServerError::Other(text) = error else {
            return false;
        };
        let Some((op, subject)) = parse_violation(text) else {
            return false;
        };
        {
            let mut state = self.lock();
            state.total += 1;
            let key = (op, subject);
            if state.by_subject.contains_key(&key) || state.by_subject.len() < REFUSED_SUBJECTS_MAX {
                *state.by_subject.entry(key).or_insert(0) += 1;
            }
        }
        self.changed.notify_waiters();
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, RefusalsState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `Permissions Violation for Publish to "obs.B.x"` → `(Publish, "obs.B.x")`; likewise for
/// `Subscription to`. Case-insensitive on the words, exact on the subject.
pub fn parse_violation(text: &str) -> Option<(RefusedOp, String)> {
    let text = text.trim().trim_matches('\'');
    let lower = text.to_ascii_lowercase();
    let rest_at = lower.find("permissions violation for ")? + "permissions violation for ".len();
    let rest = &lower[rest_at..];
    let op = if rest.starts_with("publish to ") {
        RefusedOp::Publish
    } else if rest.starts_with("subscription to ") {
        RefusedOp::Subscribe
    } else {
        return None;
    };
    // The subject is the first quoted string after the words, taken from the original text.
    let open = text[rest_at..].find('"')? + rest_at + 1;
    let close = text[open..].find('"')? + open;
    Some((op, text[open..close].to_owned()))
}

/// Most servers one URL list may name (a bus cluster is three or five nodes).
pub const SERVER_URLS_MAX: usize = 16;

/// A comma-separated list of server URLs (`nats://a:4222,nats://b:4222,nats://c:4222`; one
/// URL is a list of one) as the addresses async-nats connects to: it tries them in turn and,
/// once connected, reconnects to any of them (and to the cluster members the server
/// advertises) when the one it is on goes away. Empty entries, more than
/// [`SERVER_URLS_MAX`] or an unparsable URL are a clear error naming it.
pub fn server_addrs(urls: &str) -> Result<Vec<ServerAddr>, BusError> {
    let entries: Vec<&str> = urls.split(',').map(str::trim).collect();
    if entries.iter().any(|entry| entry.is_empty()) {
        return Err(BusError::Other(format!(
            "NATS server list {urls:?} has an empty entry; give comma-separated URLs"
        )));
    }
    if entries.len() > SERVER_URLS_MAX {
        return Err(BusError::Other(format!(
            "NATS server list names {} servers; at most {SERVER_URLS_MAX}",
            entries.len()
        )));
    }
    entries
        .into_iter()
        .map(|entry| {
            entry
                .parse::<ServerAddr>()
                .map_err(|e| BusError::Other(format!("NATS server URL {entry:?}: {e}")))
        })
        .collect()
}

/// A connection as one principal, with its refusals counted.
#[derive(Clone)]
pub struct BusConnection {
    pub client: Client,
    pub refusals: Refusals,
}

/// How long [`BusConnection::check_subscription`] waits, after the server has answered a
/// round trip, for a refusal event to reach the callback.
pub const REFUSAL_EVENT_WAIT_MS: u64 = 250;

impl BusConnection {
    /// Connects to `url` (one URL or a comma-separated list, [`server_addrs`]) as `principal`
    /// (the connection's name and its inbox prefix).
    pub async fn connect(
        url: &str,
        principal: &str,
        credentials: &Credentials,
    ) -> Result<BusConnection, BusError> {
        let refusals = Refusals::default();
        let addrs = server_addrs(url)?;
        let options = connect_options(principal, principal, credentials, refusals.clone());
        let client = options
            .connect(addrs)
            .await
            .map_err(|e| BusError::Connection(format!("{url} as {principal}: {e}")))?;
        Ok(BusConnection { client, refusals })
    }

    /// Waits until the server has seen everything sent so far and then for a refusal of a
    /// subscription to `subject`; `PermissionDenied` if one came.
    pub async fn check_subscription(&self, subject: &str, seen: u64) -> Result<(), BusError> {
        self.client
            .flush()
            .await
            .map_err(|e| BusError::Connection(e.to_string()))?;
        let refused = self.refusals.refused_after(RefusedOp::Subscribe, subject, seen);
        match tokio::time::timeout(Duration::from_millis(REFUSAL_EVENT_WAIT_MS), refused).await {
            Ok(()) => Err(BusError::PermissionDenied {
                operation: "subscribe",
                subject: subject.to_owned(),
            }),
            Err(_) => Ok(()),
        }
    }
}

/// The connect options every Sentinel principal uses: the connection's name (what the server's
/// monitoring shows), the principal's inbox prefix, its credentials, and an event callback that
/// feeds `refusals` and logs (subjects only, never payloads).
pub fn connect_options(
    name: &str,
    principal: &str,
    credentials: &Credentials,
    refusals: Refusals,
) -> ConnectOptions {
    let options = ConnectOptions::new()
        .name(name)
        .custom_inbox_prefix(inbox_prefix(principal))
        .event_callback(move |event| {
            let refusals = refusals.clone();
            async move {
                if let Event::ServerError(error) = &event
                    && refusals.record(error)
                {
                    tracing::warn!(%error, total = refusals.total(), "the bus refused an operation");
                    return;
                }
                tracing::debug!(%event, "bus connection event");
            }
        });
    match credentials {
        Credentials::None => options,
        Credentials::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.clone())
        }
        Credentials::NkeySeed(seed) => options.nkey(seed.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn violations_parse_into_operation_and_subject() {
        assert_eq!(
            parse_violation("Permissions Violation for Publish to \"obs.B.i-1\""),
            Some((RefusedOp::Publish, "obs.B.i-1".to_owned()))
        );
        assert_eq!(
            parse_violation("'Permissions Violation for Subscription to \"cmd.B.>\"'"),
            Some((RefusedOp::Subscribe, "cmd.B.>".to_owned()))
        );
        assert_eq!(parse_violation("maximum payload violation"), None);
    }

    #[test]
    fn refusals_are_counted_per_subject_and_in_total() {
        let refusals = Refusals::default();
        let error = ServerError::Other("Permissions Violation for Publish to \"obs.B.x\"".into());
        assert!(refusals.record(&error));
        assert!(refusals.record(&error));
        assert!(!refusals.record(&ServerError::Other("something else".into())));
        assert_eq!(refusals.total(), 2);
        assert_eq!(refusals.count(RefusedOp::Publish, "obs.B.x"), 2);
        assert_eq!(refusals.count(RefusedOp::Subscribe, "obs.B.x"), 0);
    }

    #[test]
    fn server_lists_are_comma_separated_and_bounded() {
        let addrs =
            server_addrs("nats://127.0.0.1:4222, nats://127.0.0.1:4223,nats://h:4").expect("three servers");
        assert_eq!(addrs.len(), 3);
        assert_eq!(addrs[1].port(), 4223);
        assert_eq!(server_addrs("nats://127.0.0.1:4222").expect("one").len(), 1);
        assert!(server_addrs("nats://a:1,,nats://b:2").is_err(), "empty entry");
        assert!(server_addrs("").is_err(), "nothing");
        let many = vec!["nats://a:1"; SERVER_URLS_MAX + 1].join(",");
        assert!(server_addrs(&many).is_err(), "over the bound");
    }

    #[test]
    fn inbox_prefixes_are_one_subject_token() {
        assert_eq!(inbox_prefix("driver-plant-a"), "_INBOX_driver-plant-a");
        assert_eq!(inbox_prefix("a.b *>"), "_INBOX_a_b___");
    }

    #[test]
    fn credentials_never_print_secrets() {
        let c = Credentials::UserPassword {
            user: "u".into(),
            password: "hunter2".into(),
        };
        assert!(!format!("{c:?}").contains("hunter2"));
        assert!(!format!("{:?}", Credentials::NkeySeed("SUABC".into())).contains("SUABC"));
    }
}
