//! The clock port: where the outside world's time comes from. The core never reads a clock; the
//! runtime, the adapters and the in-memory models read one through this trait so the simulator
//! can substitute its own (turmoil's simulated time). [`SystemClock`] sits here rather than in
//! the runtime because the adapters need a default clock and must not link the runtime.
//!
//! It is also where a core's start identity comes from (issue 25 item 3,
//! [`Clock::start_token`]): like the time, something the core must not make itself (it reads
//! no RNG), which the simulator must be able to make deterministic.

use sentinel_core::Micros;

pub trait Clock: Send + Sync + 'static {
    /// UTC microseconds since the Unix epoch.
    fn now(&self) -> Micros;

    /// A core start's identity (`sentinel_core::Core::set_core_start`): a number unlikely to
    /// repeat between two starts, within `1..=`[`sentinel_core::wire::CORE_START_MAX`].
    /// Random in production; the simulator's is drawn from its seed. Taken once per start.
    fn start_token(&self) -> u64;
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

    /// 53 bits from std's per-process random hash keys (seeded from the operating system; no
    /// RNG crate), mixed with the time and the process id, so two starts in one process
    /// differ too.
    fn start_token(&self) -> u64 {
        use std::hash::{BuildHasher, Hasher};
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        hasher.write_u128(since_epoch.as_nanos());
        hasher.write_u32(std::process::id());
        sentinel_core::wire::core_start_from_bits(hasher.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_start_tokens_are_in_range_and_differ() {
        let tokens: std::collections::BTreeSet<u64> = (0..64).map(|_| SystemClock.start_token()).collect();
        assert_eq!(tokens.len(), 64, "no two starts share an identity");
        assert!(
            tokens
                .iter()
                .all(|t| (1..=sentinel_core::wire::CORE_START_MAX).contains(t))
        );
    }
}
