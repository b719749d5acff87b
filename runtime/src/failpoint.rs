//! Named, test-only failpoints (issue 21 item 3): places where a test makes the core die the
//! way a crash or a SIGKILL would, between two steps whose order is the point of the test.
//! Compiled only with the `failpoints` feature, which the real-process tests' build of the
//! `sentinel` binary turns on (`tests/support/bin.rs`) and no release build does; even then a
//! failpoint fires only when [`ENV`] names it.
//!
//! Owns: the failpoint names and the check. Firing aborts the process (no destructors, no
//! flush, no orderly stop), so PostgreSQL ends the session and the lock passes on as it would
//! after a SIGKILL.

/// The environment variable that names the one failpoint to fire.
pub const ENV: &str = "SENTINEL_FAILPOINT";

/// Between the commit of a `command_issued` event and the command's publish: the outbox case.
pub const COMMAND_COMMITTED_NOT_SENT: &str = "command_committed_not_sent";

/// A driver's answer reached the core and is not yet written: the command was applied, and a
/// successor sees it unanswered and sends it again.
pub const COMMAND_ANSWER_NOT_RECORDED: &str = "command_answer_not_recorded";

/// Aborts the process if [`ENV`] names `name`.
pub fn hit(name: &str) {
    if std::env::var(ENV).is_ok_and(|set| set == name) {
        eprintln!("failpoint {name}: aborting");
        std::process::abort();
    }
}
