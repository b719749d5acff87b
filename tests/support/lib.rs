//! Test support: starting a private nats-server ([`nats`]) and creating a private PostgreSQL
//! database ([`pg`]) per test, so no test depends on another's leftovers (DESIGN.md §7).

pub mod nats;
pub mod pg;
