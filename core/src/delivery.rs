//! Stage 1's output: one message as the bus delivered it (ingest spec, stage 1).
//!
//! Owns: the shape every Bus adapter (NATS, the in-memory model, the simulator) hands the core.

use std::sync::Arc;

use bytes::Bytes;

use crate::time::Micros;

/// Opaque handle the bus adapter maps back to its own ack token. The core only echoes it in
/// [`crate::Effect::Ack`].
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryTag(pub u64);

#[derive(Clone, Debug, PartialEq)]
pub struct Delivery {
    pub tag: DeliveryTag,
    /// The stream's sequence number: identical on every redelivery, so it keys quarantine
    /// entries exactly once.
    pub stream_seq: u64,
    /// Shared, not owned: an adapter hands out one `Arc` per distinct subject (the NATS adapter
    /// interns them), so a delivery costs no allocation for its subject (issue 24 item 3).
    pub subject: Arc<str>,
    pub payload: Bytes,
    /// The bus's accept timestamp, truncated to microseconds. Never the core's clock.
    pub ingested_at: Micros,
    /// 1 on first delivery.
    pub delivered_count: u64,
}
