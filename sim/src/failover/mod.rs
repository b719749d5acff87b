//! The database failover shapes (issue 25, "What it must show"; docs/deploy.md, "Losing the
//! primary" and "Without synchronous replication"): the `database_failover` and
//! `database_failover_lost_commits` sites.
//!
//! Owns: when each fires (one opportunity per simulated second of the safety phase, as the
//! controller's other sites, at [`crate::settings::FAILOVER_FIRE_P`]), the promotion window in which the store answers no core (every
//! [`crate::adapters::SimStore`] call fails while [`FailoverState::store_down_until`] is
//! ahead), the standby's copy of a lossy failover (taken when the site fires, promoted
//! 0.2–3 s later while traffic flows), and which core incarnations ran on the lost primary
//! (`FailoverState::deposed`): what they do after a lossy promotion (acks, transitions,
//! projections, lag readings, submits of commits) and the readings they derived since the
//! copy would be judged against a log the promoted database no longer holds, so the adapters
//! and the observer do not hand them to the checker. The checker is told exactly what was lost
//! ([`crate::checker::Checker::on_promoted`]) and excuses that and nothing else.
//!
//! Both shapes kill every lock session at once through the store model's promotion
//! ([`sentinel_models::store::failover`]); the synchronous one promotes a copy taken at the
//! instant of the failover, so it loses nothing and the next acquisition takes a higher epoch.

use std::collections::BTreeSet;

use sentinel_core::Micros;
use sentinel_models::store::failover::Snapshot;

use crate::checker::{FailoverCopy, IncarnationId};
use crate::settings::{FAILOVER_FIRE_P, Site};
use crate::world::{Incarnation, World};

pub mod state;

/// How long a promotion leaves the store without a primary.
pub const PROMOTION_MS: (u64, u64) = (1_000, 10_000);
/// How far an asynchronous standby is behind when the primary dies.
pub const REPLICATION_LAG_MS: (u64, u64) = (200, 3_000);

impl World {
    /// Whether the store is between primaries (a promotion in progress).
    pub fn store_down(&self) -> bool {
        let now = self.now();
        self.lock()
            .failover
            .store_down_until
            .is_some_and(|until| now < until)
    }

    /// Whether what `incarnation` does is judged by the checker: not once a lossy failover
    /// has taken the log it wrote away.
    pub fn judged(&self, incarnation: &Incarnation) -> bool {
        !self.lock().failover.deposed.contains(&incarnation.id())
    }
}

/// The controller's opportunity, once per simulated second of the safety phase: a failover
/// fires only while none is in progress.
pub fn faults(world: &World, now: Micros) {
    let busy = {
        let inner = world.lock();
        inner.failover.pending.is_some() || inner.failover.store_down_until.is_some_and(|until| now < until)
    };
    if busy {
        return;
    }
    let fires = |site: Site| world.settings.is_active(site) && world.lock().rng.chance(FAILOVER_FIRE_P);
    if fires(Site::DatabaseFailover) {
        // The synchronous standby's copy is the store as it is: promoted in place.
        fail_over(world, now, Site::DatabaseFailover, None, None);
    } else if fires(Site::DatabaseFailoverLostCommits) {
        let lag_ms = world.between(REPLICATION_LAG_MS.0, REPLICATION_LAG_MS.1) as i64;
        let snapshot = world.store.snapshot();
        let copy = Box::new(world.lock().checker.failover_copy(now));
        world.lock().failover.pending = Some((now.add_ms(lag_ms), snapshot, copy));
        world.trace(format_args!(
            "fault {}: the standby stops replicating; the primary dies in {lag_ms} ms",
            Site::DatabaseFailoverLostCommits.name()
        ));
    }
}

/// Every controller step: a lossy failover whose time has come happens.
pub fn step(world: &World, now: Micros) {
    let due = {
        let mut inner = world.lock();
        match &inner.failover.pending {
            Some((at, _, _)) if *at <= now => inner.failover.pending.take(),
            _ => None,
        }
    };
    if let Some((_, snapshot, copy)) = due {
        fail_over(
            world,
            now,
            Site::DatabaseFailoverLostCommits,
            Some(snapshot),
            Some(copy),
        );
    }
}

/// The faults heal: a lossy failover not yet happened never will, the store answers.
pub fn heal(world: &World) {
    let mut inner = world.lock();
    inner.failover.pending = None;
    inner.failover.store_down_until = None;
}

/// The primary dies and the standby holding `snapshot` is promoted (`None`: a synchronous
/// standby, holding everything): every lock session dies
/// (the holder's incarnation is told it lost its lock, invariant 15), no core reaches the
/// store for the promotion window, and with `copy` (a lossy failover) the checker rolls back
/// with the store.
fn fail_over(
    world: &World,
    now: Micros,
    site: Site,
    snapshot: Option<Snapshot>,
    copy: Option<Box<FailoverCopy>>,
) {
    let holder = world.store.lock_holder();
    let window_ms = world.between(PROMOTION_MS.0, PROMOTION_MS.1) as i64;
    let promoted = match snapshot {
        Some(snapshot) => world.store.promote(snapshot),
        None => world.store.promote_current(),
    };
    // What the stream holds, for a lossy failover's roll-back only.
    let stream: BTreeSet<u64> = if copy.is_some() {
        world.bus.stream_seqs().into_iter().collect()
    } else {
        BTreeSet::new()
    };
    let mut inner = world.lock();
    inner.failover.store_down_until = Some(now.add_ms(window_ms));
    inner.failover.count += 1;
    let owner = holder.and_then(|session| {
        inner
            .incarnations
            .values()
            .find(|i| i.session() == Some(session))
            .map(|i| i.id())
    });
    if let Some(owner) = owner {
        inner.checker.on_lock_lost(owner, now);
    }
    let lost = match copy {
        Some(copy) => {
            let running: BTreeSet<IncarnationId> = inner.incarnations.values().map(|i| i.id()).collect();
            inner.failover.deposed.extend(running.iter().copied());
            inner
                .checker
                .on_promoted(*copy, &promoted, |seq| stream.contains(&seq))
        }
        None => Default::default(),
    };
    inner.trace.event(
        now,
        format_args!(
            "fault {}: primary dead (lock {}), no primary for {window_ms} ms; lost {} rows, {} \
             quarantine entries, {} control events, epoch {} -> {}; {} acked observations lost",
            site.name(),
            if holder.is_some() { "held" } else { "free" },
            promoted.rows_lost.len(),
            promoted.quarantine_lost.len(),
            promoted.control_events_lost.len(),
            promoted.epoch_before,
            promoted.epoch_after,
            lost
        ),
    );
}
