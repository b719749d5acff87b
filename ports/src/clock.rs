//! The clock port: where the outside world's time comes from. The core never reads a clock; the
//! runtime, the adapters and the in-memory models read one through this trait so the simulator
//! can substitute its own (turmoil's simulated time). [`SystemClock`] sits here rather than in
//! the runtime because the adapters need a default clock and must not link the runtime.

use sentinel_core::Micros;

pub trait Clock: Send + Sync + 'static {
    /// UTC microseconds since the Unix epoch.
    fn now(&self) -> Micros;
}

/// The system's wall clock.
#[derive(Copy, Clone, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Micros {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        Micros::from_unix_nanos(since_epoch.as_nanos() as i128)
    }
}
