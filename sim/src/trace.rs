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

/// Appends `us` as `format!("{:>6}.{:06}", us / 1_000_000, us % 1_000_000)` does, digit by
/// digit: every trace line starts with it, and the formatter's padding was a fifth of the
/// trace's own instructions. A negative or a 10^12-second time (never in a run) takes the
/// formatter.
fn push_time(line: &mut String, us: i64) {
    if !(0..1_000_000 * 1_000_000_000_000).contains(&us) {
        let _ = write!(line, "{:>6}.{:06}", us / 1_000_000, us % 1_000_000);
        return;
    }
    let (mut secs, mut micros) = (us / 1_000_000, us % 1_000_000);
    let mut digits = [b' '; 19];
    // Seconds right-aligned in at least six places, then the point, then six digits.
    let mut at = 12;
    loop {
        at -= 1;
        digits[at] = b'0' + (secs % 10) as u8;
        secs /= 10;
        if secs == 0 {
            break;
        }
    }
    let start = at.min(6);
    digits[12] = b'.';
    for place in (13..19).rev() {
        digits[place] = b'0' + (micros % 10) as u8;
        micros /= 10;
    }
    line.push_str(std::str::from_utf8(&digits[start..]).unwrap_or_default());
}

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
        push_time(&mut line, since_start_us);
        let _ = write!(line, " {what}");
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

#[cfg(test)]
mod tests {
    use super::push_time;

    /// The digits are the formatter's, at every width and at the edges of the fast path.
    #[test]
    fn the_time_prefix_is_the_formatters() {
        let mut cases = vec![
            0,
            1,
            999_999,
            1_000_000,
            123_456_789,
            999_999_999_999,
            1_000_000_000_000,
        ];
        cases.extend([-1, -1_000_001, i64::MIN, i64::MAX, 999_999_999_999_999_999]);
        cases.extend([1_000_000_000_000_000_000, 1_000_000_000_000_000_001]);
        let mut x: i64 = 1;
        while let Some(next) = x.checked_mul(7) {
            cases.extend([x, x - 1, x + 1]);
            x = next;
        }
        for us in cases {
            let mut line = String::new();
            push_time(&mut line, us);
            assert_eq!(
                line,
                format!("{:>6}.{:06}", us / 1_000_000, us % 1_000_000),
                "{us}"
            );
        }
    }
}
