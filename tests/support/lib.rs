//! Test support: starting a private nats-server ([`nats`]), creating a private PostgreSQL
//! database ([`pg`]) per test, so no test depends on another's leftovers (DESIGN.md §7); test
//! traffic with a known outcome ([`traffic`]); and the `sentinel` binary for process tests
//! ([`bin`]).

pub mod bin;
pub mod nats;
pub mod pg;
pub mod traffic;
