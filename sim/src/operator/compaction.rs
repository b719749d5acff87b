//! The operator's `sentinel compact` during ingest (issue 24, "What it must show": "compaction
//! as an operator action during ingest with crashes in the middle"; core runtime spec,
//! "compression from day seven"), and the previous deployment's log it compacts.
//!
//! Owns: [`seed_old_days`], which gives a run whose `operator_compact` site is active a store
//! that already holds rows of [`OLD_DAYS`] closed days eight days and more before the run (a
//! previous deployment's log of the run's own points, with its drivers' source epoch 0, some
//! rows `bad` with a reason and a detail), committed before any core starts and handed to the
//! checker (the fold, the rollup aggregates, invariant 27's rows); [`operator_compact`], which,
//! like the reprocess site, takes the free lock after the controller crashed its holder and
//! compacts some of those days one by one, with the stream's oldest message time from the bus
//! model, sometimes cut off between two days as its process dies and the restarting core takes
//! the lock (the next day's compaction, by the deposed epoch, must then be refused); and the
//! reads invariant 27 judges after each day and at the end of the run ([`check_days`]). The
//! old days' minute rollups are refreshed when they are committed, and half the days have
//! them compacted alone first (`sentinel compact --rollups-only`, `Store::compact_rollup_day`),
//! which the adapter judges as every compaction: fenced (invariant 6) and changing no bucket
//! of the day (invariant 27).
//! Every draw comes from a generator of its own ([`COMPACT_STREAM`]), so the run's other draws
//! stay as they were.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use sentinel_core::registry::descriptor::Kind;
use sentinel_core::time::US_PER_DAY;
use sentinel_core::{BatchId, CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass};
use sentinel_ports::{CompactionRequest, HISTORY_ROWS_MAX, Lease, RollupCompactionRequest, Store};

use crate::adapters::SimStore;
use crate::checker::compaction::{DayKey, DayReads, day_start};
use crate::registry::SimRegistry;
use crate::rng::SimRng;
use crate::world::{World, now_or_never};

/// Mixed into the seed for the generator of this site's draws.
pub const COMPACT_STREAM: u64 = 0x5eed_0000_c0de_0000;

/// Closed days of the previous deployment's log, ending eight days before the run's start
/// (every one past the default seven-day age).
pub const OLD_DAYS: i64 = 3;
/// Points of the previous deployment's log, and its rows per point per day.
const OLD_POINTS_MAX: usize = 8;
const OLD_ROWS_PER_POINT_DAY_MAX: u64 = 12;

/// The principal the compaction's control event carries.
const PRINCIPAL: &str = "operator:sim";

/// Commits the previous deployment's log before any core starts, and tells the checker.
/// Its points: number and bool points of the `measurement` and `state` classes (the
/// `diagnostic` class's seven-day retention would drop such days) on device hosts, none of them
/// a derived point, a writable point or a derived point's input, so that their
/// histories stay those of plain telemetry.
pub fn seed_old_days(world: &World, registry: &SimRegistry, rng: &mut SimRng, start: Micros) {
    let stored = now_or_never(Store::load_registry(&world.store, None))
        .ok()
        .flatten()
        .expect("invariant: version 1 was stored before the old days are seeded");
    let compiled = sentinel_runtime::registry_dir::compile_stored_shared(stored)
        .expect("invariant: the sim registry compiles");
    let inputs: std::collections::BTreeSet<&str> = registry
        .derived
        .values()
        .flat_map(|d| d.inputs.iter().map(|i| &**i))
        .collect();
    let candidates: Vec<_> = compiled
        .points()
        .filter(|(_, p)| {
            let d = &p.descriptor;
            matches!(d.kind, Kind::Number | Kind::Bool)
                && d.retention != RetentionClass::Diagnostic
                && d.derived.is_none()
                && d.writable.is_none()
                && !inputs.contains(&*p.id)
                && registry.hosts.contains_key(&*p.host)
                && *p.id != *registry.on_change.0.id
        })
        .collect();
    let points = rng.between(1, OLD_POINTS_MAX.min(candidates.len()) as u64) as usize;
    let first_day = start.0.div_euclid(US_PER_DAY) - 7 - OLD_DAYS;
    let mut rows = Vec::new();
    let mut seqs: BTreeMap<Arc<str>, u64> = BTreeMap::new();
    for day in first_day..first_day + OLD_DAYS {
        for (idx, point) in candidates.iter().take(points) {
            let d = &point.descriptor;
            let instance = compiled.instance_name(point.instance).clone();
            for _ in 0..rng.between(0, OLD_ROWS_PER_POINT_DAY_MAX) {
                let seq = seqs.entry(instance.clone()).or_insert(0);
                *seq += 1;
                // Observed within the day, ingested up to a minute later, still on the day.
                let observed_at = Micros(day * US_PER_DAY + rng.below(US_PER_DAY as u64 - 60_000_000) as i64);
                let ingested_at = observed_at.add_ms(rng.between(0, 60_000) as i64);
                let bad = rng.chance(0.2);
                let native = rng.between(0, 1_000) as f64 / 10.0;
                let value = match d.kind {
                    Kind::Bool => CanonicalValue::Bool(native >= 50.0),
                    _ => CanonicalValue::Num(native),
                };
                rows.push(ObsRow {
                    point: *idx,
                    point_id: point.id.clone(),
                    class: d.retention,
                    ingested_at,
                    observed_at,
                    device_time: rng.chance(0.5).then(|| observed_at.add_ms(-250)),
                    value: (!bad).then_some(value),
                    native_num: (!bad).then_some(native),
                    native_text: None,
                    unit_native: point.unit_native.clone(),
                    quality: if bad { Quality::Bad } else { Quality::Live },
                    reason: bad.then_some(Cow::Borrowed("device_offline")),
                    detail: bad.then(|| format!(r#"{{"poll_ms": {}}}"#, rng.below(500)).into()),
                    changed: rng.chance(0.5),
                    registry_version: compiled.version,
                    key: ObsKey {
                        driver_instance: instance.clone(),
                        source_epoch: 0,
                        source_seq: *seq,
                    },
                    skew_flagged: false,
                    tag: DeliveryTag(*seq),
                });
            }
        }
    }
    if rows.is_empty() {
        return;
    }
    let lease = now_or_never(Store::acquire(&world.store))
        .expect("invariant: the lock of a fresh memory store is free");
    let epoch = lease.epoch();
    world.lock().checker.on_acquire(epoch, start);
    for (i, chunk) in rows.chunks(64).enumerate() {
        let batch = sentinel_core::Batch {
            id: BatchId(i as u64 + 1),
            epoch,
            rows: chunk.to_vec(),
            quarantine: Vec::new(),
        };
        let report = now_or_never(Store::commit(&world.store, batch))
            .expect("invariant: the previous deployment's log commits into a fresh store");
        assert_eq!(report.inserted.len(), chunk.len(), "every old row is new");
    }
    // Its minute and hourly rollups, as its core's refresh left them.
    let (from, to) = (day_start(first_day), day_start(first_day + OLD_DAYS));
    now_or_never(Store::refresh_rollups(&world.store, epoch, from, to))
        .expect("invariant: the previous deployment's rollups refresh under its lock");
    drop(lease);
    let points: std::collections::BTreeSet<Arc<str>> = rows.iter().map(|r| r.point_id.clone()).collect();
    let mut inner = world.lock();
    inner.checker.compaction.on_committed(&rows);
    // The log is the truth the fold and the rollup aggregates are judged against.
    inner.checker.on_rows_rewritten(&points, &rows);
    drop(inner);
    world.trace(format_args!(
        "previous deployment's log: {} rows of {points} points over {OLD_DAYS} days, epoch {epoch}",
        rows.len(),
        points = points.len()
    ));
}

/// `sentinel compact --day D --class C` for some of the old days, one by one, under the lock.
pub fn operator_compact(world: &Arc<World>, now: Micros) {
    let days = world.lock().checker.compaction.days();
    if days.is_empty() {
        return;
    }
    let Some(lease) = super::take_lock(world, "compact", now) else {
        return;
    };
    let epoch = lease.epoch();
    let (chosen, cut_after) = {
        let mut inner = world.lock();
        let rng = &mut inner.compact_rng;
        let chosen: Vec<DayKey> = days.into_iter().filter(|_| rng.chance(0.5)).collect();
        let cut_after = rng
            .chance(0.5)
            .then(|| rng.below(chosen.len() as u64 + 1) as usize);
        (chosen, cut_after)
    };
    let store = SimStore::operator(world.clone());
    let mut deposed = false;
    for (i, &(class, day)) in chosen.iter().enumerate() {
        if !deposed && cut_after == Some(i) {
            // Its process dies between two days; the restarting core takes the lock.
            deposed = true;
            world.store.kill_session(&lease);
            if let Ok(next) = now_or_never(Store::acquire(&world.store)) {
                world.lock().checker.on_acquire(next.epoch(), now);
            }
        }
        let stream_oldest = world
            .bus
            .stream_seqs()
            .first()
            .and_then(|&seq| world.bus.message(seq))
            .map(|m| m.ingested_at);
        let request = CompactionRequest {
            class,
            day: day_start(day),
            now,
            compact_after_days: sentinel_ports::COMPACT_AFTER_DAYS_DEFAULT,
            stream_oldest,
            principal: PRINCIPAL,
        };
        let name = sentinel_ports::day_name(day_start(day));
        if world.lock().compact_rng.chance(0.5) {
            // `--rollups-only` first: the day's minute rollups alone, at their own age.
            let rollups = RollupCompactionRequest {
                day: day_start(day),
                now,
                compact_after_days: sentinel_ports::ROLLUP_COMPACT_AFTER_DAYS_DEFAULT,
                principal: PRINCIPAL,
            };
            match now_or_never(Store::compact_rollup_day(&store, epoch, rollups)) {
                Ok(done) => world.trace(format_args!(
                    "operator compact epoch {epoch} rollup_1m {name}: {} buckets into {} chunks",
                    done.buckets, done.chunks
                )),
                Err(e) if deposed => world.trace(format_args!(
                    "operator compact epoch {epoch} rollup_1m {name} cut off ({e})"
                )),
                Err(e) => {
                    let what = format!("operator compact of rollup_1m {name} failed under the lock: {e}");
                    world.lock().checker.fail(0, now, what);
                    return;
                }
            }
        }
        let outcome = now_or_never(Store::compact_day(&store, epoch, request));
        match &outcome {
            Ok(done) => {
                world.lock().checker.compaction.on_compacted(done.rows);
                world.trace(format_args!(
                    "operator compact epoch {epoch} {} {name}: {} rows into {} chunks",
                    class.as_str(),
                    done.rows,
                    done.chunks
                ));
            }
            Err(e) if deposed => world.trace(format_args!(
                "operator compact epoch {epoch} {} {name} cut off ({e})",
                class.as_str()
            )),
            Err(e) => {
                let what = format!(
                    "operator compact of {} {name} failed under the lock: {e}",
                    class.as_str()
                );
                world.lock().checker.fail(0, now, what);
                return;
            }
        }
        check_day(world, (class, day), now, "after a compaction");
    }
    if !deposed {
        // Released, or (half the time) its session dies instead.
        if world.lock().compact_rng.chance(0.5) {
            world.store.kill_session(&lease);
            world.trace(format_args!("operator session killed"));
        }
        drop(lease);
    }
}

/// Invariant 27 over every compactable day (the end of the run).
pub fn check_days(world: &World, now: Micros) {
    let days = world.lock().checker.compaction.days();
    for day in days {
        check_day(world, day, now, "at the end of the run");
    }
}

/// Reads one day back through the store's read paths and has the checker judge it.
fn check_day(world: &World, day: DayKey, now: Micros, after: &str) {
    let (class, index) = day;
    let rows = world.store.rows_where(class, |r| r.ingested_at.day() == index);
    let points: std::collections::BTreeSet<Arc<str>> = world
        .lock()
        .checker
        .compaction
        .rows(day)
        .iter()
        .map(|r| r.point_id.clone())
        .collect();
    let (from, to) = (day_start(index), day_start(index + 1));
    let mut history = BTreeMap::new();
    for point in points {
        match now_or_never(Store::load_history(
            &world.store,
            &point,
            class,
            from,
            to,
            HISTORY_ROWS_MAX,
        )) {
            Ok(got) => {
                history.insert(point, got);
            }
            Err(e) => {
                let what = format!("{after}: history of {point} over a compactable day failed: {e}");
                world.lock().checker.fail(27, now, what);
                return;
            }
        }
    }
    let mut inner = world.lock();
    if let Err(what) = inner
        .checker
        .compaction
        .judge(day, DayReads { rows, history }, after)
    {
        inner.checker.fail(27, now, what);
    }
}
