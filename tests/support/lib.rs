//! Test support: starting a private nats-server, creating a private database.
