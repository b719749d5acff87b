//! `sentinel-io`: everything that touches the world. The ports ([`ports`]), the runtime loop
//! that feeds the core and executes its effects, the bus adapters ([`bus`]: NATS JetStream and
//! the in-memory model), the store adapters ([`store`]: PostgreSQL and the in-memory model),
//! the bus permissions derived from the registry ([`nats_auth`]), reading a registry folder
//! ([`registry_dir`]), reprocess over the store port ([`reprocess`]) and as the running core's
//! job ([`reprocess_job`]), and the demo.

pub mod bus;
pub mod clock;
pub mod demo;
pub mod nats_auth;
pub mod ports;
pub mod registry_dir;
pub mod reprocess;
pub mod reprocess_job;
pub mod runtime;
pub mod startup;
pub mod store;
