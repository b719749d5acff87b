//! Bus adapters: NATS JetStream and the in-memory reference model.
