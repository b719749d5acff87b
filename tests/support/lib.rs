//! Test support: starting a private nats-server ([`nats`]), creating a private PostgreSQL
//! database ([`pg`]) per test, so no test depends on another's leftovers (DESIGN.md §7); test
//! traffic with a known outcome ([`traffic`]); the `sentinel` binary for process tests
//! ([`bin`]); and the harness the end-to-end and process tests share ([`harness`]).

pub mod bin;
pub mod harness;
pub mod nats;
pub mod pg;
pub mod reprocess;
pub mod traffic;
