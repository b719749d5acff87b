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

/// Test-only, until the rules engine exists (issue 21, "What it must show": an automation
/// claim beside an operator's): a command request from the principal this variable names
/// becomes an `automation`-band claim instead of an operator's. Compiled only with this
/// module's feature, like the failpoints, so no release build can be told to do it; the bus
/// never can (`CommandRequest::band` is not read from a request's body).
pub const AUTOMATION_PRINCIPAL_ENV: &str = "SENTINEL_TEST_AUTOMATION_PRINCIPAL";

/// Marks a command request from [`AUTOMATION_PRINCIPAL_ENV`]'s principal as an automation
/// claim; every other message passes unchanged.
pub fn test_band(message: sentinel_ports::Inbound) -> sentinel_ports::Inbound {
    match message {
        sentinel_ports::Inbound::CommandRequest(mut request)
            if std::env::var(AUTOMATION_PRINCIPAL_ENV)
                .is_ok_and(|p| !p.is_empty() && p == request.principal) =>
        {
            request.band = Some(sentinel_core::arbitration::Band::Automation);
            sentinel_ports::Inbound::CommandRequest(request)
        }
        other => other,
    }
}

/// Aborts the process if [`ENV`] names `name`.
pub fn hit(name: &str) {
    if std::env::var(ENV).is_ok_and(|set| set == name) {
        eprintln!("failpoint {name}: aborting");
        std::process::abort();
    }
}
