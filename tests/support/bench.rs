//! What the benchmarks in `tests/benches/` share: their command-line flags ([`arg`], [`flag`]),
//! the machine's load to print beside every figure ([`load_average`]), the median of rounds
//! ([`median`]), and CPU time attributed per process from /proc ([`cpu_seconds`],
//! [`CpuSplit`]): PostgreSQL (every `postgres` process), nats-server (every node of a cluster)
//! and the benchmark's own process (a bridge, a driver or an in-process core).
//!
//! BENCHMARKS.md asks each figure to carry the machine and its load; these read them the same
//! way in every benchmark.

use std::collections::HashMap;

/// The value after `--name` on the command line, parsed; `default` when absent or unreadable.
pub fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Whether `--name` is on the command line.
pub fn flag(name: &str) -> bool {
    std::env::args().any(|a| a == name)
}

/// The 1, 5 and 15 minute load averages, as `/proc/loadavg` has them.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The median of `values` (the mean of the middle two for an even count; 0 for none).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Which process a CPU reading counts for.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Slot {
    Postgres = 0,
    NatsServer = 1,
    /// The benchmark's own process.
    Own = 2,
}

/// CPU seconds used so far per process, with the slot it counts in.
#[derive(Clone, Default)]
pub struct CpuReading(HashMap<u32, (Slot, f64)>);

/// Reads every `postgres` and `nats-server` process's CPU time, and this process's.
pub fn cpu_seconds() -> CpuReading {
    let ticks_per_s = 100.0; // USER_HZ on Linux
    let me = std::process::id();
    let mut out = CpuReading::default();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        // After the command name: state is field 0, utime 11, stime 12 (man 5 proc, minus 3).
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let (Some(utime), Some(stime)) = (fields.get(11), fields.get(12)) else {
            continue;
        };
        let secs = (utime.parse::<f64>().unwrap_or(0.0) + stime.parse::<f64>().unwrap_or(0.0)) / ticks_per_s;
        let slot = if pid == me {
            Slot::Own
        } else if comm == "postgres" {
            Slot::Postgres
        } else if comm == "nats-server" {
            Slot::NatsServer
        } else {
            continue;
        };
        out.0.insert(pid, (slot, secs));
    }
    out
}

impl CpuReading {
    /// CPU seconds per slot used between `before` and `self`, per process: a process that
    /// started in between counts whole, one that exited in between is lost (short-lived
    /// backends and autovacuum workers; the store's pooled backends and the servers live on).
    pub fn since(&self, before: &CpuReading) -> [f64; 3] {
        let mut used = [0.0; 3];
        for (pid, &(slot, secs)) in &self.0 {
            let earlier = before.0.get(pid).map_or(0.0, |&(_, s)| s);
            used[slot as usize] += (secs - earlier).max(0.0);
        }
        used
    }

    /// This process's CPU seconds in the reading.
    pub fn own_s(&self) -> f64 {
        self.0.get(&std::process::id()).map_or(0.0, |&(_, secs)| secs)
    }
}

/// CPU per message of each process over one measurement.
#[derive(Clone, Copy, Debug, Default)]
pub struct CpuSplit {
    /// µs per message, indexed by [`Slot`]: PostgreSQL, nats-server, this process.
    pub us: [f64; 3],
    /// Cores busy on average.
    pub cores: f64,
}

impl CpuSplit {
    pub fn over(before: &CpuReading, after: &CpuReading, messages: u64, secs: f64) -> CpuSplit {
        assert!(secs > 0.0, "a measurement takes time");
        let used = after.since(before);
        CpuSplit {
            us: [0, 1, 2].map(|i| used[i] * 1e6 / messages.max(1) as f64),
            cores: used.iter().sum::<f64>() / secs,
        }
    }

    pub fn total_us(&self) -> f64 {
        self.us.iter().sum()
    }
}

impl std::fmt::Display for CpuSplit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "postgres {:.1} / nats-server {:.1} / own {:.1} us per msg ({:.2} cores busy)",
            self.us[0], self.us[1], self.us[2], self.cores
        )
    }
}
