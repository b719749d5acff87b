//! Starting a private nats-server per test (placeholder, being written).
