//! What the Prometheus exporter costs the ingest path (issue 26: "the cost of metrics on the
//! hot path, stages 2–10 and end to end, with and without the endpoint, in one run").
//!
//! Run: `cargo bench -p sentinel-tests --bench metrics_cost` (after `scripts/test` has
//! installed a current nats-server, or with SENTINEL_NATS_SERVER set); `-- --messages N`,
//! `-- --rounds R`.
//!
//! One process, alternating in every round, each drain of a backlog loaded while nothing
//! consumes it:
//! 1. the core's hot path alone — stages 2–10, batching, the commit bookkeeping, acks and
//!    transitions — through the production startup and runtime loop over the in-memory models
//!    (no I/O, so the exporter's share is not hidden behind the database's);
//! 2. end to end — the same over a private nats-server and PostgreSQL database.
//!
//! "Without": `RuntimeConfig::telemetry` is `None` (no `--metrics-listen`). "With": an exporter
//! the loop copies the core into (at most every 250 ms) and a scraper encoding the whole
//! OpenMetrics text every second, as a Prometheus at a 1 s interval would (15 s is usual).
//! The core's own counting (the histograms, the drivers table) is in both: it is part of the
//! core, not of the endpoint. Reported: messages per second and this process's CPU per message
//! (user + system from /proc), medians of the rounds.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sentinel_bus_nats::NatsBusConfig;
use sentinel_core::Config;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_models::bus::{MemoryBus, MemoryBusConfig};
use sentinel_models::fleet::Fleet;
use sentinel_models::store::MemoryStore;
use sentinel_ports::Bus;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_runtime::telemetry::Telemetry;
use sentinel_runtime::{RuntimeConfig, startup};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bench::{arg, load_average, median};
use sentinel_tests::harness::{InProcessCore, bus_with_stream, pg};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use sentinel_tests::traffic;

const SEED: u64 = 26;

/// This process's CPU seconds so far (user + system).
fn own_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // After the command name: state is field 0, utime 11, stime 12 (man 5 proc, minus 3).
    (ticks(11) + ticks(12)) / 100.0
}

/// One drain's figures.
#[derive(Clone, Copy)]
struct Drain {
    rate: f64,
    cpu_us: f64,
}

/// The exporter and its scraper, when measuring "with".
struct Scraper {
    telemetry: Telemetry,
    task: tokio::task::JoinHandle<()>,
}

fn exporter(with: bool, clock: &Arc<dyn Clock>) -> (RuntimeConfig, Option<Scraper>) {
    if !with {
        return (RuntimeConfig::default(), None);
    }
    let telemetry = Telemetry::new(clock.clone());
    let scraped = telemetry.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tick.tick().await;
            std::hint::black_box(scraped.encode().map(|text| text.len()).unwrap_or(0));
        }
    });
    let config = RuntimeConfig {
        telemetry: Some(telemetry.clone()),
        ..RuntimeConfig::default()
    };
    (config, Some(Scraper { telemetry, task }))
}

fn finish(scraper: Option<Scraper>) -> String {
    match scraper {
        None => "no exporter".to_owned(),
        Some(scraper) => {
            scraper.task.abort();
            let text = scraper.telemetry.encode().unwrap_or_default();
            format!(
                "exporter on, {} series lines",
                text.lines().filter(|l| !l.starts_with('#')).count()
            )
        }
    }
}

/// The hot path alone: the backlog in a `MemoryBus`, the core over a `MemoryStore`.
async fn memory_drain(messages: usize, with: bool) -> (Drain, String) {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let bus = MemoryBus::new(MemoryBusConfig::default(), clock.clone());
    let store = MemoryStore::new("OBS", clock.clone());
    let registry = traffic::sample_registry();
    let mut fleet = Fleet::new(&registry, SEED, 1);
    for _ in 0..messages {
        let m = fleet.next_message(clock.now());
        bus.publish_observation(&m.subject, &m.msg_id, m.payload)
            .expect("the memory stream takes the backlog");
    }
    let accepted = bus.lag().await.expect("lag").pending;
    timed_drain(&bus, &store, accepted, with, &clock, Duration::from_millis(5)).await
}

/// End to end: the backlog in a fresh `OBS` on the private nats-server, the core over
/// PostgreSQL.
async fn real_drain(
    nats: &NatsServer,
    db_url: &str,
    store: &PgStore,
    messages: usize,
    epoch: u32,
    with: bool,
) -> (Drain, String) {
    // A fresh stream and empty tables, as the e2e bench resets between drains.
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let _ = js.delete_stream("OBS").await;
    let mut conn = pg(db_url).await;
    sqlx::query(
        "TRUNCATE observation_measurement, observation_state, observation_diagnostic, quarantine, \
         point_state, control_event",
    )
    .execute(&mut conn)
    .await
    .expect("truncate");
    sqlx::query("CHECKPOINT")
        .execute(&mut conn)
        .await
        .expect("checkpoint");
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    })
    .await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let registry = traffic::sample_registry();
    let mut fleet = Fleet::new(&registry, SEED, epoch);
    let publisher = ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let items: Vec<(String, String, Bytes)> = (0..messages)
        .map(|_| {
            let m = fleet.next_message(clock.now());
            (m.subject, m.msg_id, m.payload)
        })
        .collect();
    let accepted = publisher
        .publish_pipelined(items, 1024)
        .await
        .expect("load the backlog")
        .stored;
    timed_drain(&bus, store, accepted, with, &clock, Duration::from_millis(20)).await
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let messages = arg("--messages", 100_000usize);
    let rounds = arg("--rounds", 3usize).max(1);
    let nats = NatsServer::start().await;
    let db = TestDb::create().await.expect("database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect");
    store.migrate().await.expect("migrate");
    println!(
        "metrics cost bench: {messages} messages a drain, {rounds} rounds; load {}",
        load_average()
    );
    // [memory without, memory with, real without, real with]
    let mut figures: [Vec<Drain>; 4] = Default::default();
    let mut epoch = 1_000;
    for round in 0..rounds {
        // Alternate which goes first, so neither always runs on a warmer machine.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for with in order {
            let (drain, note) = memory_drain(messages, with).await;
            println!(
                "  round {} hot path (memory models), {:<7} {:>9.0} obs/s, {:.2} us CPU/obs; {note}; load {}",
                round + 1,
                if with { "with" } else { "without" },
                drain.rate,
                drain.cpu_us,
                load_average()
            );
            figures[usize::from(with)].push(drain);
        }
        for with in order {
            epoch += 1;
            let (drain, note) = real_drain(&nats, &db.url, &store, messages, epoch, with).await;
            println!(
                "  round {} end to end (NATS + PostgreSQL), {:<7} {:>9.0} obs/s, {:.2} us CPU/obs (this process); {note}; load {}",
                round + 1,
                if with { "with" } else { "without" },
                drain.rate,
                drain.cpu_us,
                load_average()
            );
            figures[2 + usize::from(with)].push(drain);
        }
    }
    let rate = |i: usize| median(figures[i].iter().map(|d| d.rate).collect());
    let cpu = |i: usize| median(figures[i].iter().map(|d| d.cpu_us).collect());
    println!(
        "RESULT medians of {rounds}: hot path without {:.0} obs/s {:.2} us/obs, with {:.0} obs/s {:.2} us/obs \
         (rate {:+.1}%, CPU {:+.1}%); end to end without {:.0} obs/s {:.2} us/obs, with {:.0} obs/s {:.2} us/obs \
         (rate {:+.1}%, CPU {:+.1}%); load {}",
        rate(0),
        cpu(0),
        rate(1),
        cpu(1),
        100.0 * (rate(1) / rate(0) - 1.0),
        100.0 * (cpu(1) / cpu(0) - 1.0),
        rate(2),
        cpu(2),
        rate(3),
        cpu(3),
        100.0 * (rate(3) / rate(2) - 1.0),
        100.0 * (cpu(3) / cpu(2) - 1.0),
        load_average()
    );
}

/// Starts a core over `bus` and `store` (with or without the exporter), waits until the
/// backlog of `accepted` messages is acked, and measures the drain's rate and own CPU.
async fn timed_drain<B: Bus + Clone, S: sentinel_ports::Store + Clone>(
    bus: &B,
    store: &S,
    accepted: u64,
    with: bool,
    clock: &Arc<dyn Clock>,
    poll: Duration,
) -> (Drain, String) {
    let (config, scraper) = exporter(with, clock);
    let cpu_before = own_cpu_s();
    let started_at = Instant::now();
    let started = startup::start(
        store,
        startup::already_connected(bus),
        Some(&traffic::sample_registry_dir()),
        Config::default(),
        clock.as_ref(),
    )
    .await
    .expect("core starts");
    let core = InProcessCore::spawn_with(started, store.clone(), config);
    loop {
        let lag = bus.lag().await.expect("lag");
        if lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        tokio::time::sleep(poll).await;
    }
    let secs = started_at.elapsed().as_secs_f64();
    let cpu = own_cpu_s() - cpu_before;
    core.stop().await;
    let note = finish(scraper);
    (
        Drain {
            rate: accepted as f64 / secs,
            cpu_us: cpu * 1e6 / accepted as f64,
        },
        note,
    )
}
