//! The core runtime spec's dangerous window, in the simulator (issue: "core A partitioned from
//! the store but still reaching the bus, core B takes over; no command of A's is applied by
//! any driver"). Two cores; at 60.5 s the lock holder loses its store link (and with it its
//! session and lock) but keeps the bus; the operator asks it for a command at that moment and
//! keeps asking both cores every 5 s. Drivers apply commands through their epoch guards.

mod common;

use sentinel_sim::Options;

#[test]
fn a_core_cut_off_from_the_store_gets_no_command_to_a_driver() {
    let options = Options {
        dangerous_window: true,
        ..Options::default()
    };
    let outcomes = common::run_seeds(0..40, &options, false);
    for o in &outcomes {
        assert!(o.violation.is_none(), "{}", common::describe(o));
        assert!(o.stats.epochs >= 2, "seed {}: the other core took over", o.seed);
        assert!(o.stats.commands_applied > 0, "seed {}: commands flowed", o.seed);
        assert_eq!(
            o.stats.commands_applied_deposed, 0,
            "seed {}: a driver applied a command of a core that no longer held the lock",
            o.seed
        );
    }
    // In most seeds the cut-off core took the operator's request before its lock check
    // noticed; its command write was refused with the store link, so nothing was sent.
    let refused = outcomes
        .iter()
        .filter(|o| o.stats.command_writes_refused > 0)
        .count();
    assert!(
        refused >= outcomes.len() / 2,
        "only {refused} seeds exercised the window"
    );
}
