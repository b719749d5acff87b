//! Several hosts in the database URL, and connecting only to the writable one (issue 25, item
//! 3, "A database standby"; docs/deploy.md, "One box with a database standby").
//!
//! Owns: parsing libpq's multi-host URL form
//! `postgres://user@h1:5432,h2:5433/db?target_session_attrs=read-write` into one set of
//! connect options per host ([`HostList::parse`]), the `target_session_attrs` this adapter
//! understands ([`TargetSession`]), probing each host in order and keeping the first that
//! qualifies ([`HostList::choose`]), and the writability check the lock session and every
//! pooled connection repeat after connecting ([`check_session`]).
//!
//! sqlx 0.9's `PgConnectOptions` takes one host and ignores `target_session_attrs` with a
//! warning (its `parse_from_url` reads `url.host_str()`/`url.port()` once; a comma-separated
//! authority does not parse at all), so libpq's semantics are implemented here: hosts are
//! tried in the order written; a host that refuses the connection, times out, fails
//! authentication or does not qualify is skipped with its reason; when none qualifies the
//! error names every host tried and why. `read-write` means what it means to libpq: the
//! server is not in recovery and a fresh session's `transaction_read_only` is `off`.
//!
//! A URL naming several hosts without `target_session_attrs` is treated as `read-write`, not
//! libpq's `any`: every `PgStore` user but `history` writes, and a core connected to a standby
//! would only fail later and less clearly. `target_session_attrs=any` keeps libpq's meaning
//! (the first host that accepts a connection) for readers that may use a standby. A single
//! host without the parameter is connected as before, without a probe.

use std::str::FromStr;
use std::time::Duration;

use sentinel_ports::StoreError;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

/// Upper bound on the hosts one URL may name (a limit on everything; libpq has none, but a
/// longer list is a configuration mistake, and each host costs a connect timeout when down).
pub const HOSTS_MAX: usize = 16;

/// The query parameter libpq reads; removed before each host's URL reaches sqlx.
const TARGET_SESSION_ATTRS: &str = "target_session_attrs";

/// What a session must be for the host to be kept (libpq's `target_session_attrs`, the two
/// values this adapter supports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetSession {
    /// The first host that accepts a connection.
    Any,
    /// Not in recovery, and `transaction_read_only` off in a fresh session.
    ReadWrite,
}

impl TargetSession {
    pub fn as_str(self) -> &'static str {
        match self {
            TargetSession::Any => "any",
            TargetSession::ReadWrite => "read-write",
        }
    }
}

/// One host of the URL: what messages call it (`host:port` as written, never the password)
/// and the options sqlx connects with.
#[derive(Clone, Debug)]
pub struct Host {
    pub label: String,
    pub options: PgConnectOptions,
}

/// The hosts of a database URL, in the order written, and what a session must be.
#[derive(Clone, Debug)]
pub struct HostList {
    pub hosts: Vec<Host>,
    pub target: TargetSession,
}

/// Why a session does not qualify, as read from the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unqualified {
    InRecovery,
    ReadOnly,
}

impl std::fmt::Display for Unqualified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unqualified::InRecovery => "in recovery (a standby), not writable",
            Unqualified::ReadOnly => "transaction_read_only is on, not writable",
        })
    }
}

/// `pg_is_in_recovery()` and a fresh session's `transaction_read_only`, in one round trip
/// (libpq asks `SHOW transaction_read_only` for `read-write`).
const SESSION_STATE: &str = "SELECT pg_is_in_recovery(), current_setting('transaction_read_only') = 'on'";

/// Whether the session on `conn` is what `target` asks; `Ok(Err(why))` when it is not.
pub async fn check_session(
    conn: &mut PgConnection,
    target: TargetSession,
) -> Result<Result<(), Unqualified>, sqlx::Error> {
    if target == TargetSession::Any {
        return Ok(Ok(()));
    }
    let (in_recovery, read_only): (bool, bool) = sqlx::query_as(SESSION_STATE).fetch_one(conn).await?;
    Ok(if in_recovery {
        Err(Unqualified::InRecovery)
    } else if read_only {
        Err(Unqualified::ReadOnly)
    } else {
        Ok(())
    })
}

fn config_error(message: String) -> StoreError {
    StoreError::Other(format!("the database URL: {message}"))
}

impl HostList {
    /// Splits `url` into one URL per host (user, password, database and the other parameters
    /// shared) and reads `target_session_attrs`. Messages never quote the URL (it may carry
    /// a password).
    pub fn parse(url: &str) -> Result<HostList, StoreError> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| config_error("has no scheme (expected postgres:// or postgresql://)".into()))?;
        if scheme != "postgres" && scheme != "postgresql" {
            return Err(config_error(format!(
                "scheme {scheme:?} is not postgres or postgresql"
            )));
        }
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(authority_end);
        let (userinfo, host_part) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        let (path, query) = match tail.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (tail, None),
        };
        let mut target = None;
        let mut kept = Vec::new();
        for pair in query.into_iter().flat_map(|q| q.split('&')) {
            match pair.split_once('=') {
                Some((TARGET_SESSION_ATTRS, value)) => {
                    target = Some(match value {
                        "any" => TargetSession::Any,
                        "read-write" => TargetSession::ReadWrite,
                        other => {
                            return Err(config_error(format!(
                                "target_session_attrs={other:?} is not supported (any or read-write)"
                            )));
                        }
                    });
                }
                _ if pair.is_empty() => {}
                _ => kept.push(pair),
            }
        }
        let query = if kept.is_empty() {
            String::new()
        } else {
            format!("?{}", kept.join("&"))
        };
        let names: Vec<&str> = if host_part.is_empty() {
            // No host in the authority (`postgres:///db?host=/run/postgresql`): one entry, as
            // sqlx reads it.
            vec![""]
        } else {
            host_part.split(',').collect()
        };
        if names.len() > HOSTS_MAX {
            return Err(config_error(format!(
                "names {} hosts, more than {HOSTS_MAX}",
                names.len()
            )));
        }
        let mut hosts = Vec::with_capacity(names.len());
        for name in &names {
            if name.is_empty() && names.len() > 1 {
                return Err(config_error("has an empty host in its host list".into()));
            }
            let single = format!("{scheme}://{userinfo}{name}{path}{query}");
            let options = PgConnectOptions::from_str(&single)
                .map_err(|e| config_error(format!("host {name:?}: {e}")))?;
            let label = if name.is_empty() {
                format!("{}:{}", options.get_host(), options.get_port())
            } else {
                (*name).to_owned()
            };
            hosts.push(Host { label, options });
        }
        let target = target.unwrap_or(if hosts.len() > 1 {
            TargetSession::ReadWrite
        } else {
            TargetSession::Any
        });
        debug_assert!(!hosts.is_empty() && hosts.len() <= HOSTS_MAX);
        Ok(HostList { hosts, target })
    }

    /// Whether connecting needs a probe: a single host with `any` is used as written.
    pub fn needs_probe(&self) -> bool {
        self.hosts.len() > 1 || self.target != TargetSession::Any
    }

    /// Tries each host in order with `configure`'s options (each connect bounded by
    /// `connect_timeout`) and returns the first that qualifies, its probe session closed. When
    /// none does, the error names every host and why it was skipped.
    pub async fn choose(
        &self,
        connect_timeout: Duration,
        configure: impl Fn(PgConnectOptions) -> PgConnectOptions,
    ) -> Result<Host, StoreError> {
        let mut reasons = Vec::with_capacity(self.hosts.len());
        for host in &self.hosts {
            let options = configure(host.options.clone());
            match probe(&options, connect_timeout, self.target).await {
                Ok(()) => {
                    tracing::info!(
                        host = %host.label,
                        target_session_attrs = self.target.as_str(),
                        skipped = reasons.len(),
                        "chose the database host"
                    );
                    return Ok(Host {
                        label: host.label.clone(),
                        options,
                    });
                }
                Err(why) => {
                    tracing::warn!(host = %host.label, reason = %why, "database host skipped");
                    reasons.push(format!("{}: {why}", host.label));
                }
            }
        }
        Err(StoreError::Other(format!(
            "no host of the database URL qualifies as target_session_attrs={} ({} tried): {}",
            self.target.as_str(),
            reasons.len(),
            reasons.join("; ")
        )))
    }
}

/// Connects to one host and checks its session; the error says why it does not qualify.
async fn probe(
    options: &PgConnectOptions,
    connect_timeout: Duration,
    target: TargetSession,
) -> Result<(), String> {
    let mut conn = tokio::time::timeout(connect_timeout, PgConnection::connect_with(options))
        .await
        .map_err(|_| format!("connecting timed out after {} ms", connect_timeout.as_millis()))?
        .map_err(|e| format!("connecting failed: {e}"))?;
    let checked = tokio::time::timeout(connect_timeout, check_session(&mut conn, target))
        .await
        .map_err(|_| "the session check timed out".to_owned())
        .and_then(|r| r.map_err(|e| format!("the session check failed: {e}")));
    // Best effort: a probe session holds nothing.
    let _ = conn.close().await;
    match checked? {
        Ok(()) => Ok(()),
        Err(why) => Err(why.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(list: &HostList) -> Vec<(String, String, u16)> {
        list.hosts
            .iter()
            .map(|h| {
                (
                    h.label.clone(),
                    h.options.get_host().to_owned(),
                    h.options.get_port(),
                )
            })
            .collect()
    }

    #[test]
    fn splits_libpq_multi_host_urls_sharing_user_database_and_parameters() {
        let list = HostList::parse(
            "postgres://u:secret@10.0.0.1:5433,db2.example:5434,[::1]:5435/sentinel?sslmode=disable&target_session_attrs=read-write",
        )
        .expect("parses");
        assert_eq!(list.target, TargetSession::ReadWrite);
        assert_eq!(
            labels(&list),
            vec![
                ("10.0.0.1:5433".to_owned(), "10.0.0.1".to_owned(), 5433),
                ("db2.example:5434".to_owned(), "db2.example".to_owned(), 5434),
                ("[::1]:5435".to_owned(), "[::1]".to_owned(), 5435),
            ]
        );
        for host in &list.hosts {
            assert_eq!(host.options.get_username(), "u");
            assert_eq!(host.options.get_database(), Some("sentinel"));
            assert!(!host.label.contains("secret"), "labels never carry the password");
        }
    }

    #[test]
    fn several_hosts_default_to_read_write_and_one_host_to_any_without_a_probe() {
        let several = HostList::parse("postgresql://h1,h2:6000/db").expect("parses");
        assert_eq!(several.target, TargetSession::ReadWrite);
        assert!(several.needs_probe());
        assert_eq!(several.hosts[0].options.get_port(), 5432, "the default port");
        let one = HostList::parse("postgres://postgres@127.0.0.1:5432/db").expect("parses");
        assert_eq!(one.target, TargetSession::Any);
        assert!(!one.needs_probe());
        let one_rw = HostList::parse("postgres://h/db?target_session_attrs=read-write").expect("parses");
        assert!(one_rw.needs_probe());
        let any = HostList::parse("postgres://h1,h2/db?target_session_attrs=any").expect("parses");
        assert_eq!(any.target, TargetSession::Any);
        assert!(any.needs_probe(), "two hosts: the first that connects");
    }

    #[test]
    fn refuses_what_it_cannot_honour_without_quoting_the_url() {
        let unsupported = HostList::parse("postgres://u:secret@h1,h2/db?target_session_attrs=standby")
            .expect_err("standby is not supported");
        assert!(unsupported.to_string().contains("standby"), "{unsupported}");
        assert!(!unsupported.to_string().contains("secret"), "{unsupported}");
        assert!(HostList::parse("mysql://h/db").is_err());
        assert!(HostList::parse("h1,h2/db").is_err());
        assert!(HostList::parse("postgres://h1,,h2/db").is_err(), "an empty host");
        let many = (0..=HOSTS_MAX)
            .map(|i| format!("h{i}"))
            .collect::<Vec<_>>()
            .join(",");
        let too_many = HostList::parse(&format!("postgres://{many}/db")).expect_err("over the bound");
        assert!(too_many.to_string().contains("more than 16"), "{too_many}");
    }

    #[test]
    fn a_url_without_a_host_is_read_as_sqlx_reads_it() {
        let list = HostList::parse("postgres:///db?host=/run/postgresql").expect("parses");
        assert_eq!(list.hosts.len(), 1);
        assert_eq!(list.target, TargetSession::Any);
    }
}
