//! Test support: starting a private nats-server ([`nats`]) or a three-node cluster
//! ([`nats_cluster`]), creating a private PostgreSQL
//! database ([`pg`]) per test, or a primary and a synchronous standby of the test's own
//! ([`pg_pair`]), so no test depends on another's leftovers (DESIGN.md §7); test
//! traffic with a known outcome ([`traffic`]); the `sentinel` binary for process tests
//! ([`bin`]); a driver instance for the command-plane tests ([`driver`]); the harness the end-to-end and process tests share ([`harness`]); a private
//! Prometheus scraping a core ([`prometheus`]); a TCP proxy that cuts a driver off from its
//! bus or loses its acks ([`proxy`]); and what the benchmarks share ([`bench`]).

pub mod bench;
pub mod bin;
pub mod driver;
pub mod harness;
pub mod nats;
pub mod nats_cluster;
pub mod pg;
pub mod pg_pair;
pub mod prometheus;
pub mod proxy;
pub mod reprocess;
pub mod traffic;
