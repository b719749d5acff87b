//! Bus permissions derived from the registry (core runtime spec: "the bus rather than the API is
//! the primary control surface, which makes subject-scoped bus permissions the real
//! authorisation model"; DESIGN.md §2: "bus permissions confine a host to `obs.<host>.>`").
//!
//! Owns: `sentinel registry nats-config DIR --principals FILE`: from the hosts the registry
//! assigns points to and the operator's principals file, the nats-server `authorization` block
//! that gives each principal exactly its subjects (ARCHITECTURE.md, "Security model"):
//!
//! | principal | publish | subscribe |
//! | --- | --- | --- |
//! | driver host `H` | `obs.H.>`, `drv.H.>`, replies to commands it received | `cmd.H.>`, `_INBOX_driver-H.>` |
//! | the core | `$JS.API` for its stream and consumer only, acks, `state.>`, `cmd.>`, `obs.sentinel.>`, replies to requests | `drv.>`, `sentinel.command.request.*`, `sentinel.reprocess.request.*`, `sentinel.registry.loaded.*`, `_INBOX_sentinel-core.>` |
//! | reader | stream and consumer info only | `state.>`, `_INBOX_reader.>` |
//! | operator principal `P` (`operator`, and each of `[operators.<P>]`) | `sentinel.command.request.P`, `sentinel.reprocess.request.P`, `sentinel.registry.loaded.P` | `_INBOX_P.>` |
//!
//! The core's assignments (issue 21 item 7) travel like its commands: on `cmd.H.<instance>`,
//! acknowledged on their reply subjects below `_INBOX_sentinel-core.asg.>`, so they need no
//! subject of their own. `sentinel registry load` announces a new version on
//! `sentinel.registry.loaded.P`.
//!
//! An operator principal may ask only on its own subjects, so the core takes a request's
//! principal from its subject (issue 21 item 2): one operator cannot speak for another.
//!
//! Credentials are the operator's: a password (preferably a bcrypt hash, which nats-server
//! accepts as is), read from the file, a file it names or an environment variable, or an nkey
//! public key. Nothing secret is generated, and nothing here writes into the repository. The
//! core's `wrong_instance` quarantine stays the second line of defence behind these permissions.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use sentinel_core::registry::Descriptor;
use sentinel_core::self_points::SELF_HOST;
use sentinel_driver::connect::inbox_prefix;
use serde::Deserialize;

/// The request subjects: each principal asks below its own name, the core hears them all
/// (ports, `Inbound`).
pub use sentinel_core::wire::{
    COMMAND_REQUEST_SUBJECT, COMMAND_REQUEST_WILDCARD, REGISTRY_LOADED_WILDCARD, REPROCESS_REQUEST_SUBJECT,
    REPROCESS_REQUEST_WILDCARD, command_request_subject, is_principal_name, registry_loaded_subject,
    reprocess_request_subject,
};

/// The principal names whose inbox prefixes the permissions name.
pub const READER_PRINCIPAL: &str = "reader";
pub const OPERATOR_PRINCIPAL: &str = "operator";

/// The principal name of driver host `host` (its connection name and inbox principal).
pub fn host_principal(host: &str) -> String {
    format!("driver-{host}")
}

/// Largest principals file read.
pub const PRINCIPALS_FILE_BYTES_MAX: u64 = 1 << 20;
/// Most driver hosts one block is generated for.
pub const HOSTS_MAX: usize = 10_000;
/// Most operator principals one block is generated for.
pub const OPERATORS_MAX: usize = 1_000;

#[derive(Debug, thiserror::Error)]
pub enum NatsAuthError {
    #[error("{path}: {why}")]
    File { path: String, why: String },
    #[error("principal {who}: {why}")]
    Principal { who: String, why: String },
    #[error("the registry assigns points to host(s) {0} with no principal in the principals file")]
    MissingHosts(String),
    #[error("the registry assigns points to {0} hosts; at most {HOSTS_MAX} are supported")]
    TooManyHosts(usize),
    #[error("{0} operator principals; at most {OPERATORS_MAX} are supported")]
    TooManyOperators(usize),
}

/// One principal as the operator wrote it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalSpec {
    /// The user name (password login). Defaults to the principal's name.
    pub user: Option<String>,
    /// The password as nats-server should store it: a bcrypt hash (`$2a$…`) or plain text.
    pub password: Option<String>,
    /// A file holding that password.
    pub password_file: Option<PathBuf>,
    /// An environment variable holding that password.
    pub password_env: Option<String>,
    /// An nkey public key (`U…`) instead of a password.
    pub nkey: Option<String>,
}

/// The operator's principals file (TOML).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrincipalsFile {
    pub core: PrincipalSpec,
    pub reader: PrincipalSpec,
    /// The operator principal named `operator` (the CLI's default).
    pub operator: Option<PrincipalSpec>,
    /// More operator principals by name, each asking only on its own request subjects
    /// (`sentinel.command.request.<name>`); a name is a subject token (letters, digits, `_`,
    /// `-`), and not `operator` when that is given above, `sentinel-core`, `reader` or
    /// `driver-…`.
    #[serde(default)]
    pub operators: BTreeMap<String, PrincipalSpec>,
    /// Driver hosts by registry host name.
    #[serde(default)]
    pub hosts: BTreeMap<String, PrincipalSpec>,
}

/// How a principal logs in, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Login {
    Password { user: String, password: String },
    Nkey(String),
}

impl PrincipalsFile {
    pub fn read(path: &Path) -> Result<PrincipalsFile, NatsAuthError> {
        let file_error = |why: String| NatsAuthError::File {
            path: path.display().to_string(),
            why,
        };
        let len = std::fs::metadata(path)
            .map_err(|e| file_error(e.to_string()))?
            .len();
        if len > PRINCIPALS_FILE_BYTES_MAX {
            return Err(file_error(format!(
                "{len} bytes; at most {PRINCIPALS_FILE_BYTES_MAX}"
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| file_error(e.to_string()))?;
        PrincipalsFile::parse(&text).map_err(file_error)
    }

    pub fn parse(text: &str) -> Result<PrincipalsFile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// Resolves one principal's login. `env` looks up environment variables (a parameter so tests
/// do not touch the process environment).
fn resolve(
    who: &str,
    spec: &PrincipalSpec,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Login, NatsAuthError> {
    let fail = |why: &str| NatsAuthError::Principal {
        who: who.to_owned(),
        why: why.to_owned(),
    };
    let password = match (&spec.password, &spec.password_file, &spec.password_env) {
        (None, None, None) => None,
        (Some(p), None, None) => Some(p.clone()),
        (None, Some(file), None) => Some(
            std::fs::read_to_string(file)
                .map_err(|e| fail(&format!("reading {}: {e}", file.display())))?
                .trim()
                .to_owned(),
        ),
        (None, None, Some(var)) => {
            Some(env(var).ok_or_else(|| fail(&format!("environment variable {var} is not set")))?)
        }
        _ => return Err(fail("give one of password, password_file, password_env")),
    };
    match (password, &spec.nkey) {
        (Some(_), Some(_)) => Err(fail("give a password or an nkey, not both")),
        (None, None) => Err(fail(
            "needs a password (or password_file, password_env) or an nkey",
        )),
        (Some(password), None) => {
            if password.is_empty() {
                return Err(fail("the password is empty"));
            }
            if password.contains('"') || password.contains('\n') {
                return Err(fail("the password may not contain a double quote or a newline"));
            }
            let user = spec.user.clone().unwrap_or_else(|| who.to_owned());
            if !user
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
            {
                return Err(fail("the user name may hold only letters, digits and - _ . @"));
            }
            Ok(Login::Password { user, password })
        }
        (None, Some(nkey)) => {
            if !(nkey.starts_with('U') && nkey.len() == 56 && nkey.chars().all(|c| c.is_ascii_alphanumeric()))
            {
                return Err(fail(
                    "an nkey must be a user public key: 56 characters starting with U",
                ));
            }
            if spec.user.is_some() {
                return Err(fail("an nkey login has no user name"));
            }
            Ok(Login::Nkey(nkey.clone()))
        }
    }
}

/// What a principal may publish and subscribe to.
struct Permissions {
    publish: Vec<String>,
    subscribe: Vec<String>,
    /// May publish to the reply subject of a message it received (a driver answering a
    /// command, the core answering a request).
    allow_responses: bool,
}

fn driver_host_permissions(host: &str) -> Permissions {
    Permissions {
        publish: vec![format!("obs.{host}.>"), format!("drv.{host}.>")],
        subscribe: vec![
            format!("cmd.{host}.>"),
            format!("{}.>", inbox_prefix(&host_principal(host))),
        ],
        allow_responses: true,
    }
}

fn core_permissions(stream: &str, consumer: &str) -> Permissions {
    Permissions {
        publish: vec![
            "$JS.API.INFO".to_owned(),
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.STREAM.CREATE.{stream}"),
            format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.{consumer}"),
            format!("$JS.API.CONSUMER.CREATE.{stream}.{consumer}.>"),
            format!("$JS.API.CONSUMER.DURABLE.CREATE.{stream}.{consumer}"),
            format!("$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"),
            format!("$JS.ACK.{stream}.{consumer}.>"),
            "state.>".to_owned(),
            "cmd.>".to_owned(),
            format!("obs.{SELF_HOST}.>"),
        ],
        subscribe: vec![
            "drv.>".to_owned(),
            COMMAND_REQUEST_WILDCARD.to_owned(),
            REPROCESS_REQUEST_WILDCARD.to_owned(),
            REGISTRY_LOADED_WILDCARD.to_owned(),
            format!("{}.>", inbox_prefix(crate::CORE_PRINCIPAL)),
        ],
        allow_responses: true,
    }
}

fn reader_permissions(stream: &str, consumer: &str) -> Permissions {
    Permissions {
        publish: vec![
            "$JS.API.INFO".to_owned(),
            format!("$JS.API.STREAM.INFO.{stream}"),
            format!("$JS.API.CONSUMER.INFO.{stream}.{consumer}"),
        ],
        subscribe: vec![
            "state.>".to_owned(),
            format!("{}.>", inbox_prefix(READER_PRINCIPAL)),
        ],
        allow_responses: false,
    }
}

/// Operator principal `name` asks only on its own subjects and hears answers on its inbox.
fn operator_permissions(name: &str) -> Permissions {
    Permissions {
        publish: vec![
            command_request_subject(name),
            reprocess_request_subject(name),
            registry_loaded_subject(name),
        ],
        subscribe: vec![format!("{}.>", inbox_prefix(name))],
        allow_responses: false,
    }
}

/// Every operator principal by name: `operator` (when given) and `[operators.<name>]`, each
/// name checked.
fn operators(principals: &PrincipalsFile) -> Result<Vec<(&str, &PrincipalSpec)>, NatsAuthError> {
    if principals.operators.len() > OPERATORS_MAX {
        return Err(NatsAuthError::TooManyOperators(principals.operators.len()));
    }
    let mut all: Vec<(&str, &PrincipalSpec)> = Vec::new();
    if let Some(spec) = &principals.operator {
        all.push((OPERATOR_PRINCIPAL, spec));
    }
    for (name, spec) in &principals.operators {
        let fail = |why: &str| NatsAuthError::Principal {
            who: name.clone(),
            why: why.to_owned(),
        };
        if !is_principal_name(name) {
            return Err(fail(
                "an operator's name is its subject token: 1 to 64 ASCII letters, digits, '_' or '-'",
            ));
        }
        if name == crate::CORE_PRINCIPAL || name == READER_PRINCIPAL || name.starts_with("driver-") {
            return Err(fail(
                "an operator's name may not be the core's, the reader's or a driver host's",
            ));
        }
        if name == OPERATOR_PRINCIPAL && principals.operator.is_some() {
            return Err(fail("given twice: as `operator` and in [operators]"));
        }
        all.push((name, spec));
    }
    Ok(all)
}

/// The driver hosts a registry assigns points to, the core's own host left out.
pub fn driver_hosts(descriptors: &[Descriptor]) -> BTreeSet<String> {
    descriptors
        .iter()
        .map(|d| d.assignment.host.clone())
        .filter(|h| h != SELF_HOST)
        .collect()
}

fn quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("\"{s}\"")).collect();
    format!("[{}]", quoted.join(", "))
}

fn write_user(out: &mut String, comment: &str, login: &Login, permissions: &Permissions) {
    let login = match login {
        Login::Password { user, password } => format!("user: \"{user}\", password: \"{password}\""),
        Login::Nkey(key) => format!("nkey: \"{key}\""),
    };
    let responses = if permissions.allow_responses {
        ", allow_responses: true"
    } else {
        ""
    };
    // `write!` into a String cannot fail.
    let _ = writeln!(out, "    # {comment}");
    let _ = writeln!(
        out,
        "    {{ {login}, permissions: {{ publish: {{ allow: {} }}, subscribe: {{ allow: {} }}{responses} }} }}",
        quoted_list(&permissions.publish),
        quoted_list(&permissions.subscribe)
    );
}

/// The nats-server `authorization` block for these hosts and principals. Fails, naming them,
/// when a host the registry assigns points to has no principal (its drivers could not connect),
/// and when a principal is malformed. A principal for a host the registry does not name is
/// left out (a decommissioned host loses its access with the registry version that drops it).
pub fn authorization_block(
    hosts: &BTreeSet<String>,
    principals: &PrincipalsFile,
    stream: &str,
    consumer: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<String, NatsAuthError> {
    if hosts.len() > HOSTS_MAX {
        return Err(NatsAuthError::TooManyHosts(hosts.len()));
    }
    let missing: Vec<&str> = hosts
        .iter()
        .filter(|h| !principals.hosts.contains_key(*h))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(NatsAuthError::MissingHosts(missing.join(", ")));
    }
    let mut out = String::new();
    out.push_str(
        "# Generated by `sentinel registry nats-config` from the registry's assignments.\n\
         # Include it from the server's configuration; regenerate it when the registry's hosts change.\n\
         authorization {\n  users = [\n",
    );
    write_user(
        &mut out,
        "the core",
        &resolve(crate::CORE_PRINCIPAL, &principals.core, env)?,
        &core_permissions(stream, consumer),
    );
    write_user(
        &mut out,
        "read-only: state.> subscribers, dashboards",
        &resolve(READER_PRINCIPAL, &principals.reader, env)?,
        &reader_permissions(stream, consumer),
    );
    for (name, spec) in operators(principals)? {
        write_user(
            &mut out,
            &format!("operator {name}: its own command and reprocess requests"),
            &resolve(name, spec, env)?,
            &operator_permissions(name),
        );
    }
    for host in hosts {
        let spec = &principals.hosts[host];
        write_user(
            &mut out,
            &format!("driver host {host}"),
            &resolve(&host_principal(host), spec, env)?,
            &driver_host_permissions(host),
        );
    }
    out.push_str("  ]\n}\n");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core's command replies come back below the inbox its permissions let it subscribe
    /// to (the pure core names that inbox without knowing the bus principal).
    #[test]
    fn command_replies_are_below_the_cores_own_inbox() {
        use sentinel_core::wire::{CORE_INBOX_PREFIX, command_reply_subject};
        assert_eq!(CORE_INBOX_PREFIX, inbox_prefix(crate::CORE_PRINCIPAL));
        assert!(command_reply_subject(3, 7).starts_with(&format!("{CORE_INBOX_PREFIX}.")));
    }

    const KEY_A: &str = "UAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

    fn principals() -> PrincipalsFile {
        PrincipalsFile::parse(&format!(
            r#"
            core = {{ password = "$2a$11$abcdefghijklmnopqrstuv" }}
            reader = {{ user = "dashboards", password_env = "READER_PW" }}
            [hosts.plant-a]
            nkey = "{KEY_A}"
            [hosts.ahu-east]
            password = "plain"
            "#
        ))
        .expect("parses")
    }

    fn env(var: &str) -> Option<String> {
        (var == "READER_PW").then(|| "from-env".to_owned())
    }

    #[test]
    fn each_host_may_publish_only_its_own_subjects() {
        let hosts: BTreeSet<String> = ["plant-a".to_owned(), "ahu-east".to_owned()].into();
        let block = authorization_block(&hosts, &principals(), "OBS", "sentinel-core", &env).expect("block");
        let plant_a = block.lines().find(|l| l.contains(KEY_A)).expect("plant-a's user");
        assert!(plant_a.contains("publish: { allow: [\"obs.plant-a.>\", \"drv.plant-a.>\"] }"));
        assert!(plant_a.contains("subscribe: { allow: [\"cmd.plant-a.>\", \"_INBOX_driver-plant-a.>\"] }"));
        assert!(!plant_a.contains("ahu-east"));
        assert!(block.contains("user: \"dashboards\", password: \"from-env\""));
        assert!(block.contains("user: \"driver-ahu-east\", password: \"plain\""));
        let reader = block
            .lines()
            .find(|l| l.contains("user: \"dashboards\""))
            .expect("reader");
        assert!(reader.contains("\"state.>\"") && !reader.contains("cmd.") && !reader.contains("obs."));
    }

    /// Each operator principal may ask only on its own request subjects; the core hears all.
    #[test]
    fn each_operator_may_ask_only_on_its_own_subjects() {
        let mut p = principals();
        p.operator = Some(PrincipalSpec {
            password: Some("op".into()),
            ..PrincipalSpec::default()
        });
        p.operators.insert(
            "ana".into(),
            PrincipalSpec {
                password: Some("ana-pw".into()),
                ..PrincipalSpec::default()
            },
        );
        let block = authorization_block(&BTreeSet::new(), &p, "OBS", "sentinel-core", &env).expect("block");
        let ana = block
            .lines()
            .find(|l| l.contains("user: \"ana\""))
            .expect("ana's user");
        assert!(
            ana.contains(
                "publish: { allow: [\"sentinel.command.request.ana\", \"sentinel.reprocess.request.ana\", \
                 \"sentinel.registry.loaded.ana\"] }"
            ),
            "{ana}"
        );
        assert!(ana.contains("subscribe: { allow: [\"_INBOX_ana.>\"] }"), "{ana}");
        let operator = block
            .lines()
            .find(|l| l.contains("user: \"operator\""))
            .expect("the operator's user");
        assert!(operator.contains("\"sentinel.command.request.operator\"") && !operator.contains(".ana"));
        let core = block
            .lines()
            .find(|l| l.contains("$2a$11$"))
            .expect("the core's user");
        assert!(core.contains(
            "\"sentinel.command.request.*\", \"sentinel.reprocess.request.*\", \"sentinel.registry.loaded.*\""
        ));

        let refused = |name: &str| {
            let mut p = principals();
            p.operators.insert(
                name.into(),
                PrincipalSpec {
                    password: Some("x".into()),
                    ..PrincipalSpec::default()
                },
            );
            authorization_block(&BTreeSet::new(), &p, "OBS", "c", &env)
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            refused("a.b"),
            "principal a.b: an operator's name is its subject token: 1 to 64 ASCII letters, digits, '_' or '-'"
        );
        assert_eq!(
            refused("driver-plant-a"),
            "principal driver-plant-a: an operator's name may not be the core's, the reader's or a driver host's"
        );
    }

    #[test]
    fn a_host_without_a_principal_is_named() {
        let hosts: BTreeSet<String> = ["plant-a".to_owned(), "electrical".to_owned()].into();
        let err =
            authorization_block(&hosts, &principals(), "OBS", "sentinel-core", &env).expect_err("refused");
        assert_eq!(
            err.to_string(),
            "the registry assigns points to host(s) electrical with no principal in the principals file"
        );
    }

    #[test]
    fn malformed_principals_are_refused_with_a_reason() {
        let bad = |toml: &str| {
            let p = PrincipalsFile::parse(toml).expect("parses");
            authorization_block(&BTreeSet::new(), &p, "OBS", "c", &env)
                .expect_err("refused")
                .to_string()
        };
        assert_eq!(
            bad("core = { password = \"a\", nkey = \"U\" }\nreader = { password = \"b\" }"),
            "principal sentinel-core: give a password or an nkey, not both"
        );
        assert_eq!(
            bad("core = { password_env = \"NOPE\" }\nreader = { password = \"b\" }"),
            "principal sentinel-core: environment variable NOPE is not set"
        );
        assert_eq!(
            bad("core = { nkey = \"SUAB\" }\nreader = { password = \"b\" }"),
            "principal sentinel-core: an nkey must be a user public key: 56 characters starting with U"
        );
        assert!(PrincipalsFile::parse("core = {}\nreader = {}\nsurprise = 1").is_err());
    }
}
