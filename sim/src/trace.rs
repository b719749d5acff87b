//! The event trace of one run: every step the simulator takes that matters to the
//! invariants, as one line each, hashed as it goes (invariant 8: the same seed gives the same
//! trace hash). The last lines are kept for a violation report; `--trace` echoes them all.
//!
//! A trace line holds simulated time and coordinates (sequences, keys, epochs, counts), never
//! wall-clock readings, so the hash is a function of the seed alone.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write as _;

use sentinel_core::Micros;
use sha2::{Digest, Sha256};

/// Lines kept for a violation report.
pub const RECENT_LINES_MAX: usize = 40;

pub struct Trace {
    hasher: Sha256,
    recent: VecDeque<String>,
    echo: bool,
    lines: u64,
    start: Micros,
}

impl Trace {
    pub fn new(echo: bool, start: Micros) -> Trace {
        Trace {
            hasher: Sha256::new(),
            recent: VecDeque::with_capacity(RECENT_LINES_MAX),
            echo,
            lines: 0,
            start,
        }
    }

    /// Appends one event at simulated time `at`.
    pub fn event(&mut self, at: Micros, what: std::fmt::Arguments<'_>) {
        // The oldest kept line's buffer is reused once the window is full: one allocation
        // per event less, on the simulator's busiest path.
        let mut line = if self.recent.len() == RECENT_LINES_MAX {
            let mut reused = self.recent.pop_front().unwrap_or_default();
            reused.clear();
            reused
        } else {
            String::with_capacity(64)
        };
        let since_start_us = at.0 - self.start.0;
        let _ = write!(
            line,
            "{:>6}.{:06} {}",
            since_start_us / 1_000_000,
            since_start_us % 1_000_000,
            what
        );
        self.hasher.update(line.as_bytes());
        self.hasher.update(b"\n");
        self.lines += 1;
        if self.echo {
            // A closed pipe (`--trace | head`) ends the echo, not the run.
            let _ = writeln!(std::io::stdout().lock(), "{line}");
        }
        self.recent.push_back(line);
    }

    pub fn lines(&self) -> u64 {
        self.lines
    }

    pub fn recent(&self) -> Vec<String> {
        self.recent.iter().cloned().collect()
    }

    /// The hash of every line so far, hex.
    pub fn hash_hex(&self) -> String {
        hex::encode(self.hasher.clone().finalize())
    }
}
