//! The `sentinel` binary for process-level tests (SIGKILL, a second core). Cargo only exposes
//! `CARGO_BIN_EXE_*` to tests of the binary's own package, so this builds it once with the
//! same profile the tests run under and returns its path; [`sentinel_against_db`] runs it for
//! the commands that need only the database.

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

/// A NATS URL nothing listens on: a command run against it reaches no real bus.
pub const NO_NATS: &str = "nats://127.0.0.1:1";

/// `sentinel ARGS` run to its end (two minutes at most) against `database_url` and no bus,
/// from the workspace root, with its own log level: for commands that take the database only.
pub fn sentinel_against_db(args: &[&str], database_url: &str) -> Output {
    crate::harness::output_within(
        Command::new(sentinel_bin())
            .current_dir(workspace_root())
            .args(args)
            .env("SENTINEL_DATABASE_URL", database_url)
            .env("SENTINEL_NATS_URL", NO_NATS)
            .env_remove("SENTINEL_LOG")
            .stdin(Stdio::null()),
        Duration::from_secs(120),
    )
}

pub fn workspace_root() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

pub fn sentinel_bin() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let release = !cfg!(debug_assertions);
            let mut build = Command::new(cargo);
            // The test harness's own CARGO_* variables (package name, manifest dir, …) would
            // reach the build scripts of this nested build and make them rerun, rebuilding
            // ring, rustls and async-nats on every test binary's first spawn.
            for (key, _) in std::env::vars_os() {
                let key = key.to_string_lossy().into_owned();
                if key.starts_with("CARGO_") && key != "CARGO_HOME" && key != "CARGO_TARGET_DIR" {
                    build.env_remove(&key);
                }
            }
            build
                .current_dir(workspace_root())
                .args(["build", "-p", "sentinel-cli", "--bin", "sentinel"])
                // The named, test-only failpoints (runtime/src/failpoint.rs); inert unless a
                // test sets SENTINEL_FAILPOINT for the process it spawns.
                .args(["--features", "failpoints"]);
            if release {
                build.arg("--release");
            }
            let status = build
                .status()
                .expect("running cargo build for the sentinel binary");
            assert!(status.success(), "building the sentinel binary failed");
            let target = std::env::var("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|_| workspace_root().join("target"));
            target
                .join(if release { "release" } else { "debug" })
                .join("sentinel")
        })
        .clone()
}
