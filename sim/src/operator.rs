//! The operator's maintenance commands, run while drivers keep publishing (issue 9; ingest
//! spec, "Reprocess", "Retention and rollups"). Like the real commands, each takes the
//! single-writer lock itself and refuses (exit 10) when a core holds it, so the controller runs
//! them right after it crashed the lock holder, before the core's restart: between two
//! simulated instants. Their writes go through the store adapter's fenced path
//! ([`SimStore::operator`]), so invariant 6 judges each maintenance write (a refresh, a
//! reprocess chunk, its control event) as it judges a core's commit: one by a writer that no
//! longer holds the lock must be refused.
//!
//! Owns: `operator_rollup_refresh` (`sentinel rollup refresh` over a recent range; invariant 10
//! on what it reports) and `operator_reprocess` (`sentinel registry load` of version 2, which
//! corrects one point's conversion, then `sentinel reprocess` of that point over the last
//! minutes (up to twenty), in small chunks, sometimes cut off between two of them as its process dies and the
//! restarting core takes the lock). After a reprocess the checker rebuilds its fold and rollup
//! aggregates of the point from the log (the rows are rewritten in place, and the log is the
//! truth invariants 5 and 10 judge against); the restarted core's projection must then be that
//! fold, and the core's rollup steps must bring every bucket back to its rows, even after a run
//! cut off before its refresh.
//!
//! `operator_compact` (`sentinel compact` of old days, issue 24) is [`compaction`]'s.
//!
//! Also owns the claims every seed makes (issue 21, "What it must show": writable points and
//! claims in every seed): [`draw_claim`] picks, for each request the controller sends a core,
//! who asks and what — an operator's claim for the default hour or a short while that lapses
//! within the run, an automation-band claim (a simulated rule, injected in-process the way the
//! runtime's test-only hook does until rules exist), a rarer `safety` or `interlock` claim
//! (which break a minimum on/off hold; an interlock at a partitionable site is refused), or an
//! early release by any of those holders (refused when it holds nothing). The draws come
//! from a generator of their own ([`CLAIMS_STREAM`]), so the run's other draws stay as they were.

pub mod compaction;

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::adapters::SimStore;

use sentinel_core::time::US_PER_DAY;
use sentinel_core::{Config, Micros, RetentionClass};
use sentinel_models::MemoryLease;
use sentinel_ports::{Lease, Store};
use sentinel_runtime::reprocess::{self, Request};

use sentinel_core::arbitration::Band;

use crate::registry::SimRegistry;
use crate::rng::SimRng;
use crate::settings::Site;
use crate::world::World;
use crate::world::now_or_never;

/// Mixed into the seed for the generator that draws the claims ([`draw_claim`]).
pub const CLAIMS_STREAM: u64 = 0x5eed_0000_c1a1_0000;

/// The operators and the simulated rules that hold claims.
pub const OPERATORS: [&str; 2] = ["operator:ana", "operator:bob"];
pub const AUTOMATION: [&str; 2] = ["rule:sim-heat", "rule:sim-night"];
pub const SAFETY: &str = "rule:sim-frost";
pub const INTERLOCK: &str = "rule:sim-trip";

/// One request's who and what, beside its point and value (which the run's own generator
/// draws, as before claims existed).
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimAsk {
    pub principal: &'static str,
    /// `None`: the operator band (what every request from the bus is).
    pub band: Option<Band>,
    /// `None`: the default hour.
    pub for_s: Option<u64>,
    pub release: bool,
}

/// Draws one request: 40% an operator's claim (half for the default hour, half for 15 s to
/// 5 min, which lapse within the run), 25% an automation claim (1 to 30 min), 20% a release
/// by any holder, 10% a safety claim (10 s to 2 min), 5% an interlock claim (10 s to 1 min).
pub fn draw_claim(rng: &mut SimRng) -> ClaimAsk {
    let all: [&'static str; 6] = [
        OPERATORS[0],
        OPERATORS[1],
        AUTOMATION[0],
        AUTOMATION[1],
        SAFETY,
        INTERLOCK,
    ];
    let set = |principal, band, for_s| ClaimAsk {
        principal,
        band,
        for_s,
        release: false,
    };
    match rng.below(100) {
        0..40 => {
            let principal = *rng.pick(&OPERATORS);
            let for_s = rng.chance(0.5).then(|| rng.between(15, 300));
            set(principal, None, for_s)
        }
        40..65 => {
            let principal = *rng.pick(&AUTOMATION);
            set(principal, Some(Band::Automation), Some(rng.between(60, 1_800)))
        }
        65..85 => {
            let principal = *rng.pick(&all);
            ClaimAsk {
                principal,
                band: None,
                for_s: None,
                release: true,
            }
        }
        85..95 => set(SAFETY, Some(Band::Safety), Some(rng.between(10, 120))),
        _ => set(INTERLOCK, Some(Band::Interlock), Some(rng.between(10, 60))),
    }
}

/// Each active maintenance site runs with this chance at each crash of the lock holder.
const RUN_P: f64 = 0.5;

/// The crash hook: every active maintenance site gets its chance.
pub fn maintenance(world: &Arc<World>, registry: &SimRegistry, now: Micros) {
    if world.store_down() {
        return;
    }
    for site in [Site::OperatorRollupRefresh, Site::OperatorReprocess] {
        if !world.settings.is_active(site) || !world.lock().rng.chance(RUN_P) {
            continue;
        }
        match site {
            Site::OperatorRollupRefresh => operator_rollup_refresh(world, now),
            _ => operator_reprocess(world, registry, now),
        }
    }
    // Drawn from its own generator, so the sites above draw as they did before it existed.
    if world.settings.is_active(Site::OperatorCompact) && world.lock().compact_rng.chance(RUN_P) {
        compaction::operator_compact(world, now);
    }
}

/// Takes the lock as a command does: `None` (exit 10) when a core holds it.
fn take_lock(world: &World, what: &str, now: Micros) -> Option<MemoryLease> {
    if world.store.lock_held() {
        world.trace(format_args!("operator {what}: lock held, exit 10"));
        return None;
    }
    match now_or_never(Store::acquire(&world.store)) {
        Ok(lease) => {
            world.lock().checker.on_acquire(lease.epoch(), now);
            Some(lease)
        }
        Err(e) => {
            let what = format!("operator {what} could not take a free lock: {e}");
            world.lock().checker.fail(0, now, what);
            None
        }
    }
}

/// Ends the command: released, or (half the time) its session dies instead.
fn end(world: &World, lease: MemoryLease) {
    if world.lock().rng.chance(0.5) {
        world.store.kill_session(&lease);
        world.trace(format_args!("operator session killed"));
    }
    drop(lease);
}

/// `sentinel rollup refresh --from T --to T` over a range of the last hour.
fn operator_rollup_refresh(world: &Arc<World>, now: Micros) {
    let Some(lease) = take_lock(world, "rollup refresh", now) else {
        return;
    };
    let epoch = lease.epoch();
    let from = now.add_ms(-(world.between(0, 3_600_000) as i64));
    let to = from.add_ms(world.between(1_000, 7_200_000) as i64);
    // Judged by invariants 6 and 10 in the adapter.
    let store = SimStore::operator(world.clone());
    match now_or_never(Store::refresh_rollups(&store, epoch, from, to)) {
        Ok(refresh) => {
            world.trace(format_args!(
                "operator rollup refresh epoch {epoch} over [{from}, {to}): {} + {} buckets",
                refresh.minute_buckets, refresh.hour_buckets
            ));
        }
        Err(e) => world.lock().checker.fail(
            0,
            now,
            format!("operator rollup refresh failed under the lock: {e}"),
        ),
    }
    end(world, lease);
}

/// `sentinel registry load` (version 2) then `sentinel reprocess --point-glob P --from T
/// --registry-version current` for the point version 2 corrects.
fn operator_reprocess(world: &Arc<World>, registry: &SimRegistry, now: Micros) {
    let Some(lease) = take_lock(world, "reprocess", now) else {
        return;
    };
    let epoch = lease.epoch();
    let stored = now_or_never(Store::store_registry(&world.store, &registry.v2))
        .and_then(|_| now_or_never(Store::load_registry(&world.store, None)));
    let compiled = match stored {
        Ok(Some(stored)) => {
            sentinel_runtime::registry_dir::compile_stored_shared(stored).map_err(|e| e.to_string())
        }
        Ok(None) => Err("no registry version stored".to_owned()),
        Err(e) => Err(e.to_string()),
    };
    let compiled = match compiled {
        Ok(compiled) => compiled,
        Err(e) => {
            world
                .lock()
                .checker
                .fail(0, now, format!("operator registry load failed: {e}"));
            return;
        }
    };
    let point: Arc<str> = Arc::from(registry.reprocess_point.as_str());
    // The last minutes, but not before the oldest partition (yesterday's, made when the first
    // core took the lock) plus the future-skew bound: a reprocess reaching there is refused
    // (rows observed then may sit in a partition that never existed).
    let yesterday = Micros((now.0.div_euclid(US_PER_DAY) - 1) * US_PER_DAY);
    let earliest = yesterday.add_ms(Config::default().observed_future_max_ms + 1_000);
    let request = Request {
        glob: point.to_string(),
        from: now
            .add_ms(-(world.between(60_000, 1_200_000) as i64))
            .max(earliest),
        to: None,
        chunk_rows: world.between(1, 20) as usize,
    };
    let config = Config::default();
    let plan = match now_or_never(reprocess::plan(&world.store, &compiled, &config, &request, now)) {
        Ok(plan) if plan.refused() => {
            world.trace(format_args!("operator reprocess of {point} refused, exit 11"));
            end(world, lease);
            return;
        }
        Ok(plan) => plan,
        Err(e) => {
            world
                .lock()
                .checker
                .fail(0, now, format!("operator reprocess plan failed: {e}"));
            return;
        }
    };
    // Cut off after this many rows (or never): its session dies and the restarting core takes
    // the lock, so the next chunk's write is fenced.
    let cut = world.lock().rng.chance(0.5);
    let cut_after = cut.then(|| world.between(1, plan.rows.max(1)));
    let mut deposed = false;
    let mut progress = |done: u64| {
        if !deposed && cut_after.is_some_and(|cut| done >= cut) {
            deposed = true;
            world.store.kill_session(&lease);
            if let Ok(next) = now_or_never(Store::acquire(&world.store)) {
                world.lock().checker.on_acquire(next.epoch(), now);
            }
        }
    };
    // Every chunk, the refresh and the control event through the fenced path (invariant 6).
    let store = SimStore::operator(world.clone());
    let outcome = now_or_never(reprocess::run(
        &store,
        epoch,
        &compiled,
        &config,
        &request,
        &plan,
        "operator:sim",
        now,
        reprocess::Projecting::Checkpoint,
        &mut progress,
    ));
    match &outcome {
        Ok(report) => world.trace(format_args!(
            "operator reprocess epoch {epoch} of {point} from {} to version {}: {} rows",
            request.from, compiled.version, report.rows
        )),
        Err(e) => world.trace(format_args!(
            "operator reprocess epoch {epoch} of {point} cut off ({e})"
        )),
    }
    if outcome.is_err() && !deposed {
        let what = format!(
            "operator reprocess failed without being cut off: {:?}",
            outcome.err()
        );
        world.lock().checker.fail(0, now, what);
        return;
    }
    // The log is the truth: the checker's fold and aggregates of the point, from its rows now.
    let rows: Vec<_> = RetentionClass::ALL
        .into_iter()
        .flat_map(|class| world.store.rows_where(class, |row| row.point_id == point))
        .collect();
    let points = BTreeSet::from([point.clone()]);
    world.lock().checker.on_rows_rewritten(&points, &rows);
    if let Ok(report) = &outcome
        && let Some(refresh) = &report.refresh
    {
        now_or_never(crate::adapters::check_refreshed_rollups(world, refresh));
    }
    if !deposed {
        end(world, lease);
    }
}
