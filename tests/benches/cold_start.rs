//! Cold start for 4,000 points, per startup step (core runtime spec, exit criteria:
//! "Cold-start duration, per startup step"; DESIGN.md §8), against a private nats-server and
//! PostgreSQL database.
//!
//! Run: `cargo bench -p sentinel-tests --bench cold_start` (after `scripts/test` has installed
//! a current nats-server, or with SENTINEL_NATS_SERVER set).
//!
//! The history a restart finds: a registry of 4,000 points (the stages benchmark's mix: 70%
//! numbers, a fifth in °F; bool, enum, text, diagnostics; 16 hosts), ten committed readings
//! per point in their class tables, a checkpoint row per point, and 4,000 control events above
//! the checkpoint's watermarks. Then `startup::start` runs `ROUNDS` times, each a full
//! acquisition (lock, epoch, registry, restore, bind, restart steps 4–8), and each step's
//! median, minimum and maximum are printed, with the 59-point sample registry's cold start
//! measured in the same run for comparison.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::time::{Duration, Instant};

use bytes::Bytes;
use sentinel_core::registry::{Descriptor, Kind, canonical};
use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{Config, ControlDetail, ControlEvent, Quality, registry::PointIdx};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_io::bus::nats::{NatsBus, NatsBusConfig};
use sentinel_io::clock::{Clock, SystemClock};
use sentinel_io::ports::{Bus, Lease, Store, StoreError};
use sentinel_io::startup::{self, StartError};
use sentinel_io::store::postgres::{PgStore, PgStoreConfig};
use sentinel_tests::harness::{InProcessCore, bus_with_stream};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use sentinel_tests::traffic;

/// The stages benchmark's 4,000-point mix.
#[path = "../../core/benches/shared/fleet_4000.rs"]
mod fleet_4000;

use fleet_4000::{POINTS, descriptors};

const READINGS_PER_POINT: usize = 10;
const ROUNDS: usize = 7;

fn reading(d: &Descriptor, seq: u64, now: sentinel_core::Micros) -> (String, String, Bytes) {
    let value = match d.kind {
        Kind::Number => serde_json::json!(20.0 + (seq % 10) as f64),
        Kind::Bool => serde_json::json!(seq.is_multiple_of(2)),
        Kind::Enum => serde_json::json!(seq % 3),
        Kind::Text => serde_json::json!("ok"),
    };
    let instance = &d.assignment.driver_instance;
    let mut e = EnvelopeOut::new(&d.id, instance, 1, seq, now.add_ms(-1_000), value);
    e.unit = d.unit_native.clone();
    (
        format!("obs.{}.{instance}", d.assignment.host),
        e.msg_id(),
        Bytes::from(e.to_bytes()),
    )
}

/// Starts and drains one core over the published history, then stops it cleanly (which
/// writes the full checkpoint).
async fn ingest_history(bus: &NatsBus, store: &PgStore, total: u64) {
    let started = start_when_free(bus, store).await;
    let core = InProcessCore::spawn(started, store.clone());
    loop {
        let lag = bus.lag().await.expect("lag");
        let rows = store.row_counts().await.expect("rows").total();
        if rows >= total && lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    core.stop().await;
}

/// `startup::start`, retrying while the previous holder's session is still being released.
async fn start_when_free(bus: &NatsBus, store: &PgStore) -> startup::Started<NatsBus, PgStore> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match startup::start(
            store,
            startup::already_connected(bus),
            None,
            Config::default(),
            &SystemClock,
        )
        .await
        {
            Ok(started) => return started,
            Err(StartError::LockHeld) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("start: {e}"),
        }
    }
}

/// Per step: every round's duration in µs, in step order.
async fn measure(bus: &NatsBus, store: &PgStore) -> Vec<(String, Vec<u64>)> {
    let mut steps: Vec<(String, Vec<u64>)> = Vec::new();
    for _ in 0..ROUNDS {
        let started = start_when_free(bus, store).await;
        for (i, (step, us)) in started.timings.steps.iter().enumerate() {
            if steps.len() <= i {
                steps.push(((*step).to_owned(), Vec::new()));
            }
            steps[i].1.push(*us);
        }
        let startup::Started { lease, consumer, .. } = started;
        drop(consumer);
        lease.release().await.expect("release");
    }
    steps
}

fn median(v: &[u64]) -> u64 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v[v.len() / 2]
}

async fn setup(nats: &NatsServer) -> (TestDb, PgStore, NatsBus) {
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("store");
    store.migrate().await.expect("migrate");
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    })
    .await;
    (db, store, bus)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // The 4,000-point history.
    let nats = NatsServer::start().await;
    let (_db, store, bus) = setup(&nats).await;
    let descriptors = descriptors();
    store
        .store_registry(&canonical::snapshot("bench", &descriptors))
        .await
        .expect("registry");
    let publisher = ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let now = SystemClock.now();
    // Keys must be unique per driver instance, which many points share: the point's index in
    // the high bits, the reading's number in the low ones.
    let items: Vec<_> = (0..READINGS_PER_POINT)
        .flat_map(|r| descriptors.iter().enumerate().map(move |(i, d)| (r, i, d)))
        .map(|(r, i, d)| reading(d, (i as u64) << 8 | (r as u64 + 1), now))
        .collect();
    let total = publisher
        .publish_pipelined(items, 1024)
        .await
        .expect("publish")
        .stored;
    ingest_history(&bus, &store, total).await;

    // 4,000 control events above the checkpoint's watermarks, written by a later epoch.
    let lease = loop {
        match store.acquire().await {
            Ok(lease) => break lease,
            Err(StoreError::LockHeld) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("acquire: {e}"),
        }
    };
    let events: Vec<ControlEvent> = descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| ControlEvent {
            occurred_at: now,
            point: PointIdx(i as u32),
            point_id: d.id.as_str().into(),
            principal: "core:watchdog".into(),
            core_epoch: lease.epoch(),
            registry_version: 1,
            detail: ControlDetail::QualityChanged {
                from: Quality::Live,
                to: Quality::Stale,
                reason: sentinel_core::GapReason::Freshness,
                deadline: now,
            },
        })
        .collect();
    for chunk in events.chunks(sentinel_core::control::CONTROL_EVENTS_PER_WRITE_MAX) {
        store
            .write_control_events(lease.epoch(), chunk.to_vec())
            .await
            .expect("control events");
    }
    lease.release().await.expect("release");
    println!(
        "cold start bench: {POINTS} points, {total} rows, {POINTS} checkpoint rows, {} control events; {ROUNDS} rounds",
        events.len()
    );
    let large = measure(&bus, &store).await;

    // The same, for the 59-point sample registry, in the same run.
    let (_db_small, store_small, bus_small) = {
        let nats_small = &nats;
        let (db, store, _) = setup(nats_small).await;
        // A separate stream would collide on the name; reuse the bus, whose consumer is free.
        (db, store, bus.clone())
    };
    sentinel_io::registry_dir::load_dir(&store_small, &traffic::sample_registry_dir())
        .await
        .expect("sample registry");
    let small = measure(&bus_small, &store_small).await;

    println!(
        "  {:<28} {:>12} {:>10} {:>10}   {:>14}",
        "step", "median ms", "min ms", "max ms", "59 points (ms)"
    );
    let mut total_large = 0;
    let mut total_small = 0;
    for ((step, us), (_, small_us)) in large.iter().zip(&small) {
        let (m, s) = (median(us), median(small_us));
        total_large += m;
        total_small += s;
        println!(
            "  {step:<28} {:>12.2} {:>10.2} {:>10.2}   {:>14.2}",
            m as f64 / 1e3,
            *us.iter().min().expect("rounds") as f64 / 1e3,
            *us.iter().max().expect("rounds") as f64 / 1e3,
            s as f64 / 1e3
        );
    }
    println!(
        "RESULT cold start, sum of step medians: {:.1} ms for {POINTS} points; {:.1} ms for the 59-point sample registry",
        total_large as f64 / 1e3,
        total_small as f64 / 1e3
    );
}
