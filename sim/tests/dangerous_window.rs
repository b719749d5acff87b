//! The core runtime spec's dangerous window, in the simulator (issue: "core A partitioned from
//! the store but still reaching the bus, core B takes over; no command of A's is applied by
//! any driver"). Two cores; at 58.5 s the lock holder's messages to drivers start taking 10 s
//! and the operator asks it for a command, which it writes while it still holds the lock; at
//! 60.5 s it loses its store link (and with it its session and lock) but keeps the bus; the
//! operator asks it for a command at that moment and keeps asking both cores every 5 s.
//! Drivers apply commands through their epoch guards.
//!
//! The late command reaches its driver after core B has taken over. What refuses it is B's
//! epoch announcement (restart step 7): without it, the 40 seeds below apply 59 of A's
//! commands after the takeover (measured by turning the announcement off).

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
    // And in most, a command A wrote before the cut reached its driver after B's announcement
    // and was refused with stale_epoch.
    let late_refused = outcomes.iter().filter(|o| o.stats.commands_refused > 0).count();
    assert!(
        late_refused >= outcomes.len() / 2,
        "only {late_refused} seeds had a late command refused"
    );
}
