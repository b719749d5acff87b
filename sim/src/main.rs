//! `sentinel-sim`: the deterministic simulator (DESIGN.md §6).
//!
//! Skeleton: the seeded turmoil harness, fault plans and invariant checker are the simulator
//! issue's work. Until then this binary says so and exits non-zero rather than pretending.

fn main() {
    eprintln!("sentinel-sim: the simulator is not built yet (see the simulator issue)");
    std::process::exit(2);
}
