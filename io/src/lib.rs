//! `sentinel-io`: everything that touches the world. The ports ([`ports`]), the runtime loop
//! that feeds the core and executes its effects ([`runtime`]), the bus adapters ([`bus`]: NATS
//! JetStream and the in-memory model), the store adapters ([`store`]: PostgreSQL and the
//! in-memory model), reading a registry folder ([`registry_dir`]) and the demo ([`demo`]).

pub mod bus;
pub mod ports;
pub mod store;
