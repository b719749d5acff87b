//! Driver-side library: publishing observations with Nats-Msg-Id (placeholder, being written).
