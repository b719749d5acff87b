//! `sentinel-sim`: run, replay and triage simulated seeds (README, "Engineers").
//!
//! - `--seed N` replays one seed bit for bit: its settings, its outcome, its trace hash;
//!   `--trace` prints every event as it happens.
//! - `--seeds A..B` runs a range, `--minutes M` runs consecutive seeds from `--start` for a
//!   while; both show a progress bar and the seeds-per-minute figure, and print every failing
//!   seed's settings, violation, last trace lines and replay command.
//! - `--plant BUG` plants a known bug (needs `--features planted-bugs`).
//!
//! Exits 1 when any seed violated an invariant. No seed hangs: a livelock (too many events at
//! one simulated instant) or a run past its step bound is a violation of invariant 9, printed
//! with its replay command like any other.

use std::io::IsTerminal as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::Parser;
use sentinel_core::PlantedBug;
use sentinel_sim::{Options, SeedOutcome, SimRegistry, run_seed};

/// mimalloc, not glibc's malloc: a seed is mostly small allocations and frees, which cost
/// about half as many instructions in it. Nothing in a run depends on addresses, so every
/// seed's trace is the same under either.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's own option setter (its C API; the `mimalloc` crate links the library but exports
// the call only with its `extended` feature, which would add a dependency).
unsafe extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `mi_option_purge_delay` in mimalloc's `mi_option_e` (v3, `mimalloc.h`).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// Tells mimalloc never to hand freed memory back to the system. A run is a few seconds to a
/// few minutes of seeds that each build and drop the same tables; returning their pages and
/// faulting them in again (the kernel clears every page) cost about 3 % of a seed's CPU
/// (BENCHMARKS.md, "Issue 24 item 5, fifth pass"), for a peak that is held a few seeds later anyway.
fn keep_freed_memory() {
    // SAFETY: `mi_option_set` only stores the option (an index into mimalloc's option table,
    // in range); mimalloc reads it at its next purge decision. No allocation is in progress
    // on another thread: this runs first in `main`, before any worker starts.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, -1) };
}

#[cfg(target_os = "linux")]
unsafe extern "C" {
    fn prctl(option: std::ffi::c_int, ...) -> std::ffi::c_int;
}

/// `PR_SET_THP_DISABLE` (`linux/prctl.h`).
#[cfg(target_os = "linux")]
const PR_SET_THP_DISABLE: std::ffi::c_int = 41;

/// Asks Linux for no transparent huge pages in this process. mimalloc marks its arena
/// `MADV_HUGEPAGE` when it reserves it (before `main`, so its own `allow_thp` option is read
/// too early to set here), and the kernel then backs every first touch with a 2 MiB page it
/// clears whole: a seed's scattered few MiB of tables held 57 MB resident for ten seeds on one
/// thread where 4 KiB pages hold 35 MB, for no measurable CPU saved (BENCHMARKS.md, "Issue 24
/// item 5, fifth pass"). A refusal (an old kernel) changes nothing but memory.
fn no_huge_pages() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: `prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)` sets one flag on this process and
        // touches no memory of ours; its result is only whether the flag was set.
        let _ = unsafe {
            prctl(
                PR_SET_THP_DISABLE,
                1 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
                0 as std::ffi::c_ulong,
            )
        };
    }
}

#[derive(Parser, Debug)]
#[command(name = "sentinel-sim", about = "Sentinel's deterministic simulator")]
struct Cli {
    /// Replay one seed.
    #[arg(long, conflicts_with_all = ["seeds", "minutes"])]
    seed: Option<u64>,
    /// Run seeds A..B (B exclusive).
    #[arg(long, value_name = "A..B")]
    seeds: Option<String>,
    /// Run consecutive seeds from --start for this many minutes.
    #[arg(long)]
    minutes: Option<f64>,
    /// First seed for --minutes.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Print every trace line (with --seed).
    #[arg(long)]
    trace: bool,
    /// Print each seed's settings and result line in a multi-seed run.
    #[arg(long)]
    verbose: bool,
    /// Worker threads for multi-seed runs (default: the machine's cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Run the dangerous-window scenario instead of random faults: the lock holder is cut off
    /// from the store but not the bus, the other core takes over.
    #[arg(long)]
    dangerous_window: bool,
    /// Plant a known bug: ack-before-commit, ingested-at-from-core-clock,
    /// project-submitted-batch, commit-without-fence, live-from-replayed-row,
    /// stale-while-suppressed, lock-loss-ignored, guard-ignores-announcements,
    /// derive-from-submitted-batch, rollup-ignores-late-rows, publish-before-commit,
    /// resolver-ignores-band, raise-every-row, rule-on-replayed-data, warmup-ignores-suppression,
    /// for-s-without-wake, compaction-drops-detail, wake-for-suppressed-deadline (a livelock).
    #[arg(long)]
    plant: Option<String>,
}

fn main() -> anyhow::Result<()> {
    keep_freed_memory();
    no_huge_pages();
    let cli = Cli::parse();
    let plant = match &cli.plant {
        None => None,
        Some(name) => {
            let bug = PlantedBug::parse(name).with_context(|| format!("unknown planted bug {name:?}"))?;
            if !cfg!(feature = "planted-bugs") {
                bail!("--plant needs a build with `--features planted-bugs`");
            }
            Some(bug)
        }
    };
    let registry = Arc::new(SimRegistry::sample()?);
    let options = Options {
        echo_trace: cli.trace,
        plant,
        dangerous_window: cli.dangerous_window,
    };

    if let Some(seed) = cli.seed {
        let outcome = run_seed(seed, &registry, &options);
        println!("settings {}", outcome.settings);
        print_outcome(&outcome);
        if outcome.violation.is_some() {
            std::process::exit(1);
        }
        return Ok(());
    }

    let (range, deadline) = match (&cli.seeds, cli.minutes) {
        (Some(range), _) => {
            let (a, b) = range.split_once("..").context("--seeds wants A..B")?;
            let (a, b): (u64, u64) = (a.parse()?, b.parse()?);
            if b <= a {
                bail!("--seeds {range}: empty range");
            }
            (a..b, None)
        }
        (None, Some(minutes)) => (
            cli.start..u64::MAX,
            Some(Instant::now() + std::time::Duration::from_secs_f64(minutes * 60.0)),
        ),
        (None, None) => bail!("give --seed N, --seeds A..B or --minutes M"),
    };
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let total = if deadline.is_some() {
        None
    } else {
        Some(range.end - range.start)
    };
    let next = Arc::new(AtomicU64::new(range.start));
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let failures: Arc<Mutex<Vec<SeedOutcome>>> = Arc::new(Mutex::new(Vec::new()));
    // Commands drivers applied, of those from a deposed core, and refused, over all seeds.
    let commands: Arc<[AtomicU64; 3]> = Arc::new(Default::default());
    // Seeds that compacted old days, the days and rows compacted, and day readings judged
    // (invariant 27), over all seeds.
    let compactions: Arc<[AtomicU64; 6]> = Arc::new(Default::default());
    let started = Instant::now();
    let verbose = cli.verbose;

    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, done, stop, failures) = (next.clone(), done.clone(), stop.clone(), failures.clone());
            let commands = commands.clone();
            let compactions = compactions.clone();
            let (registry, options, end) = (registry.clone(), options.clone(), range.end);
            std::thread::spawn(move || {
                loop {
                    if stop.load(Ordering::Relaxed) || deadline.is_some_and(|d| Instant::now() >= d) {
                        return;
                    }
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= end {
                        return;
                    }
                    let outcome = run_seed(seed, &registry, &options);
                    let s = &outcome.stats;
                    for (total, n) in commands.iter().zip([
                        s.commands_applied,
                        s.commands_applied_deposed,
                        s.commands_refused,
                    ]) {
                        total.fetch_add(n, Ordering::Relaxed);
                    }
                    for (total, n) in compactions.iter().zip([
                        u64::from(s.compacted_days > 0),
                        s.compacted_days,
                        s.compacted_rows,
                        s.compaction_days_checked,
                        s.rollup_days_compacted,
                        s.rollup_days_judged,
                    ]) {
                        total.fetch_add(n, Ordering::Relaxed);
                    }
                    if verbose {
                        println!("settings {}", outcome.settings);
                        println!("{}", result_line(&outcome));
                    }
                    if outcome.violation.is_some() {
                        failures.lock().unwrap_or_else(|p| p.into_inner()).push(outcome);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();

    let mut progress = Progress::new(total, verbose);
    while workers.iter().any(|w| !w.is_finished()) {
        std::thread::sleep(std::time::Duration::from_millis(250));
        progress.update(
            done.load(Ordering::Relaxed),
            failures.lock().map_or(0, |f| f.len()),
            started,
        );
    }
    for worker in workers {
        if worker.join().is_err() {
            stop.store(true, Ordering::Relaxed);
            bail!("a simulation worker panicked");
        }
    }
    let n = done.load(Ordering::Relaxed);
    progress.finish(n, failures.lock().map_or(0, |f| f.len()), started);
    let elapsed_s = started.elapsed().as_secs_f64();
    let mut failures = std::mem::take(&mut *failures.lock().unwrap_or_else(|p| p.into_inner()));
    failures.sort_by_key(|f| f.seed);
    for outcome in &failures {
        println!("settings {}", outcome.settings);
        print_outcome(outcome);
    }
    println!(
        "{n} seeds in {elapsed_s:.1} s on {threads} threads: {:.0} seeds/min, {} with violations",
        n as f64 / elapsed_s * 60.0,
        failures.len()
    );
    let [applied, deposed, refused] = commands.as_ref().each_ref().map(|c| c.load(Ordering::Relaxed));
    println!("commands applied by drivers {applied} (from a deposed core {deposed}), refused {refused}");
    let [seeds, days, rows, checked, rollup_days, rollups_judged] =
        compactions.as_ref().each_ref().map(|c| c.load(Ordering::Relaxed));
    println!(
        "old days compacted by the operator: {days} days ({rows} rows) in {seeds} seeds, {checked} day readings judged (invariant 27); \
         {rollup_days} days' minute rollups compacted alone, {rollups_judged} compactions judged to change no minute rollup"
    );
    if !failures.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}

fn result_line(outcome: &SeedOutcome) -> String {
    let s = &outcome.stats;
    // Only a seed whose lossy database failover rolled something back says so.
    let failover =
        if s.failover_rows_rolled_back + s.failover_control_events_rolled_back + s.failover_epochs_lost > 0 {
            format!(
                " | failovers rolled back {} rows, {} control events, {} epochs; {} acked observations lost",
                s.failover_rows_rolled_back,
                s.failover_control_events_rolled_back,
                s.failover_epochs_lost,
                s.failover_observations_lost
            )
        } else {
            String::new()
        };
    let compacted = if s.compaction_days_checked > 0 {
        format!(
            " | compacted {} old days ({} rows), {} day readings judged",
            s.compacted_days, s.compacted_rows, s.compaction_days_checked
        )
    } else {
        String::new()
    };
    format!(
        "seed {}: {} | accepted {} rows {} quarantined {} transitions {} epochs {} derived {} rollup buckets {} | commands applied {} (from a deposed core {}), refused {} | maintenance writes {}, refused by the fence {} | claims {} arbitrations {} value changes {} verdicts {} | policy rows {} | rule claims {} warmups {} windows {}{}{} | {} steps, {} s simulated, at most {} events at one instant | trace {} lines, hash {}",
        outcome.seed,
        match &outcome.violation {
            None => "ok".to_owned(),
            Some(f) => format!("VIOLATION of invariant {}", f.violation.invariant),
        },
        s.accepted,
        s.rows,
        s.quarantined,
        s.transitions,
        s.epochs,
        s.derived_checked,
        s.rollup_buckets_checked,
        s.commands_applied,
        s.commands_applied_deposed,
        s.commands_refused,
        s.maintenance_writes,
        s.maintenance_writes_refused,
        s.claims_set,
        s.arbitrations_checked,
        s.value_changes_checked,
        s.verdicts_checked,
        s.policy_rows_checked,
        s.rule_claims_checked,
        s.rule_warmups_checked,
        s.rule_windows_checked,
        failover,
        compacted,
        s.steps,
        s.simulated_ms / 1_000,
        s.events_peak,
        outcome.trace_lines,
        outcome.trace_hash
    )
}

fn print_outcome(outcome: &SeedOutcome) {
    println!("{}", result_line(outcome));
    if let Some(report) = outcome.failure_report() {
        println!("{report}");
    }
}

/// Progress of a multi-seed run on stderr: a bar on a terminal (indicatif hides it otherwise),
/// and off a terminal, where a log file would collect every redraw, one plain line per tenth
/// of the seeds (or per 1,000 seeds in a `--minutes` run).
struct Progress {
    bar: Option<indicatif::ProgressBar>,
    plain: bool,
    plain_step: u64,
    next_plain: u64,
}

impl Progress {
    fn new(total: Option<u64>, verbose: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = (terminal && !verbose).then(|| {
            let bar = match total {
                Some(total) => indicatif::ProgressBar::new(total),
                None => indicatif::ProgressBar::new_spinner(),
            };
            bar.set_style(
                indicatif::ProgressStyle::with_template("[{bar:30}] {pos}/{len} seeds, {msg} ({elapsed})")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
                    .progress_chars("#>-"),
            );
            bar
        });
        let plain_step = total.map_or(1_000, |t| (t / 10).max(1));
        Progress {
            bar,
            plain: !terminal && !verbose,
            plain_step,
            next_plain: plain_step,
        }
    }

    fn update(&mut self, done: u64, failures: usize, started: Instant) {
        let rate = done as f64 / started.elapsed().as_secs_f64().max(1e-9) * 60.0;
        if let Some(bar) = &self.bar {
            bar.set_position(done);
            bar.set_message(format!("{failures} failing, {rate:.0} seeds/min"));
        } else if self.plain && done >= self.next_plain {
            eprintln!("{done} seeds done, {failures} failing, {rate:.0} seeds/min");
            while self.next_plain <= done {
                self.next_plain += self.plain_step;
            }
        }
    }

    fn finish(mut self, done: u64, failures: usize, started: Instant) {
        self.update(done, failures, started);
        if let Some(bar) = self.bar.take() {
            bar.finish();
        }
    }
}
