//! What a replicated stream and a synchronous fsync cost, end to end (issue 25, "The cost in
//! BENCHMARKS.md: end-to-end throughput on the R3 cluster beside a single server in the same
//! run, and with `sync_interval: always` beside the default").
//!
//! Run: `cargo bench -p sentinel-tests --bench bus_topology` (after `scripts/test` has installed
//! a current nats-server, or with SENTINEL_NATS_SERVER set); `-- --messages N` sets each
//! measurement's size (default 50,000), `-- --rounds R` the rounds (default 2; the order of the
//! four topologies rotates each round).
//!
//! Four topologies, each measured in every round on the same machine:
//! - `single`: one nats-server, a one-replica stream, JetStream's default fsync (every 2 min);
//! - `single, sync always`: the same with `sync_interval: always` (an fsync per write);
//! - `R3`: three nats-server nodes on loopback (own store directories, routes), a three-replica
//!   stream: a publish is acked once two nodes stored it;
//! - `R3, sync always`: the same with `sync_interval: always` on every node.
//!
//! Each measurement: a fresh database, the bus, the production startup and runtime of an
//! in-process core over the real adapters (the stream and its consumer with the topology's
//! replica count), then a driver (the driver library's publisher, 1,024 publishes in flight,
//! over every node's URL) publishes N messages of the demo fleet over the sample registry while
//! the core consumes. Figures: the rate the bus acked the driver's publishes, the end-to-end
//! rate (first publish to the stream drained and the last batch committed), and CPU per message
//! per process (every nats-server node summed). Every accepted message is checked to be in
//! PostgreSQL exactly once (a row or a quarantine entry, no two rows with one key).
//!
//! All three nodes of a cluster run on this one machine, so R3 here pays the replication's CPU
//! and loopback round trips on the same two cores as the core and PostgreSQL: a lower bound on
//! what three machines would do.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use sentinel_bus_nats::NatsBusConfig;
use sentinel_core::Config;
use sentinel_driver::connect::Credentials;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_models::fleet::Fleet;
use sentinel_ports::Bus;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_runtime::startup;
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bench::{CpuSplit, arg, cpu_seconds, load_average, median};
use sentinel_tests::harness::{InProcessCore, bus_with_stream, pg};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::nats_cluster::NatsCluster;
use sentinel_tests::pg::TestDb;
use sentinel_tests::traffic;

/// The fleet seed of every measurement, so each gets the same mix.
const FLEET_SEED: u64 = 25;
/// Far above any core epoch, so the driver's keys never meet the core's self-points.
const SOURCE_EPOCH: u32 = 1_000;
/// Publishes the driver keeps in flight.
const IN_FLIGHT: usize = 1_024;
/// Published in chunks, so a large run is never all in memory at once.
const PUBLISH_CHUNK: usize = 10_000;
/// How often the drain's end is polled.
const DRAIN_POLL_MS: u64 = 20;
/// Bound on one drain after the last publish.
const DRAIN_TIMEOUT_S: u64 = 600;
/// `sync_interval: always`, as a `jetstream` block option.
const SYNC_ALWAYS: &str = "sync_interval: always";

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Topology {
    Single,
    SingleSyncAlways,
    R3,
    R3SyncAlways,
}

impl Topology {
    const ALL: [Topology; 4] = [
        Topology::Single,
        Topology::SingleSyncAlways,
        Topology::R3,
        Topology::R3SyncAlways,
    ];

    fn label(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::SingleSyncAlways => "single, sync always",
            Topology::R3 => "R3",
            Topology::R3SyncAlways => "R3, sync always",
        }
    }

    fn replicas(self) -> usize {
        match self {
            Topology::Single | Topology::SingleSyncAlways => 1,
            Topology::R3 | Topology::R3SyncAlways => 3,
        }
    }

    fn sync_always(self) -> bool {
        matches!(self, Topology::SingleSyncAlways | Topology::R3SyncAlways)
    }
}

/// The servers of one measurement; dropped (killed, directories removed) after it.
enum Servers {
    Single(NatsServer),
    Cluster(NatsCluster),
}

impl Servers {
    async fn start(topology: Topology) -> Servers {
        let options = if topology.sync_always() { SYNC_ALWAYS } else { "" };
        if topology.replicas() == 1 {
            let config = format!("jetstream {{\n{options}\n}}\n");
            Servers::Single(NatsServer::start_with_config(&config, &Credentials::None).await)
        } else {
            Servers::Cluster(NatsCluster::start_with(topology.replicas(), options).await)
        }
    }

    fn urls(&self) -> String {
        match self {
            Servers::Single(server) => server.url(),
            Servers::Cluster(cluster) => cluster.urls(),
        }
    }
}

/// One measurement's figures.
struct Measured {
    publish_rate: f64,
    end_to_end_rate: f64,
    cpu: CpuSplit,
}

async fn measure(topology: Topology, messages: usize) -> Measured {
    let servers = Servers::start(topology).await;
    let urls = servers.urls();
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(&db.url, PgStoreConfig::default())
        .await
        .expect("connect store");
    store.migrate().await.expect("migrate");
    let bus = bus_with_stream(NatsBusConfig {
        url: urls.clone(),
        replicas: topology.replicas(),
        ..NatsBusConfig::default()
    })
    .await;
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let started = startup::start(
        &store,
        startup::already_connected(&bus),
        Some(&traffic::sample_registry_dir()),
        Config::default(),
        clock.as_ref(),
    )
    .await
    .expect("core starts");
    let core = InProcessCore::spawn(started, store.clone());

    let registry = traffic::sample_registry();
    let mut fleet = Fleet::new(&registry, FLEET_SEED, SOURCE_EPOCH);
    let publisher = ObservationPublisher::connect(&urls, PublisherConfig::default())
        .await
        .expect("publisher");
    let cpu_before = cpu_seconds();
    let started_at = Instant::now();
    let (mut accepted, mut duplicates) = (0u64, 0u64);
    let mut remaining = messages;
    while remaining > 0 {
        let n = remaining.min(PUBLISH_CHUNK);
        remaining -= n;
        let items: Vec<(String, String, Bytes)> = (0..n)
            .map(|_| {
                let m = fleet.next_message(clock.now());
                (m.subject, m.msg_id, m.payload)
            })
            .collect();
        let report = publisher
            .publish_pipelined(items, IN_FLIGHT)
            .await
            .expect("publish");
        accepted += report.stored;
        duplicates += report.duplicates;
    }
    let publish_secs = started_at.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(DRAIN_TIMEOUT_S);
    loop {
        let lag = bus.lag().await.expect("lag");
        if lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "{} did not drain", topology.label());
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
    let secs = started_at.elapsed().as_secs_f64();
    let cpu = CpuSplit::over(&cpu_before, &cpu_seconds(), accepted, secs);
    let outcome = core.stop().await;
    assert_eq!(
        outcome.exit.code, 0,
        "the core stopped cleanly: {}",
        outcome.exit.why
    );

    // Exactly once, counted from outside: every accepted message is one row or one
    // quarantine entry, and no key is two rows.
    let mut conn = pg(&db.url).await;
    let (rows, keys): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT (driver_instance, source_epoch, source_seq)) \
         FROM observation WHERE source_epoch = $1",
    )
    .bind(SOURCE_EPOCH as i32)
    .fetch_one(&mut conn)
    .await
    .expect("count rows");
    let (quarantined,): (i64,) = sqlx::query_as("SELECT count(*) FROM quarantine")
        .fetch_one(&mut conn)
        .await
        .expect("count quarantine");
    assert_eq!(rows, keys, "{}: no message became two rows", topology.label());
    assert_eq!(
        (rows + quarantined) as u64,
        accepted,
        "{}: every accepted message is a row or a quarantine entry",
        topology.label()
    );
    // The fleet re-sends some messages with their id, as drivers retry: the stream drops those.
    assert_eq!(
        accepted + duplicates,
        messages as u64,
        "{}: the bus answered every publish",
        topology.label()
    );
    drop(conn);
    drop(store);
    drop(db);
    drop(servers);
    Measured {
        publish_rate: accepted as f64 / publish_secs,
        end_to_end_rate: accepted as f64 / secs,
        cpu,
    }
}

#[tokio::main]
async fn main() {
    let messages: usize = arg("--messages", 50_000usize).clamp(1_000, 10_000_000);
    let rounds: usize = arg("--rounds", 2usize).clamp(1, 20);
    println!(
        "bus topologies: {messages} messages per measurement, {rounds} rounds; {} cores; load {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        load_average()
    );
    let mut results: Vec<(Topology, Measured)> = Vec::new();
    for round in 0..rounds {
        for i in 0..Topology::ALL.len() {
            let topology = Topology::ALL[(i + round) % Topology::ALL.len()];
            let m = measure(topology, messages).await;
            println!(
                "  round {}: {:<20} publish {:>8.0} msg/s, end to end {:>8.0} obs/s; {} (load {})",
                round + 1,
                topology.label(),
                m.publish_rate,
                m.end_to_end_rate,
                m.cpu,
                load_average()
            );
            results.push((topology, m));
        }
    }
    println!("\nmedians over {rounds} rounds:");
    let of = |t: Topology| results.iter().filter(move |(r, _)| *r == t).map(|(_, m)| m);
    let single = median(of(Topology::Single).map(|m| m.end_to_end_rate).collect());
    for topology in Topology::ALL {
        let publish = median(of(topology).map(|m| m.publish_rate).collect());
        let end_to_end = median(of(topology).map(|m| m.end_to_end_rate).collect());
        let nats_us = median(of(topology).map(|m| m.cpu.us[1]).collect());
        let own_us = median(of(topology).map(|m| m.cpu.us[2]).collect());
        let pg_us = median(of(topology).map(|m| m.cpu.us[0]).collect());
        println!(
            "  {:<20} publish {:>8.0} msg/s, end to end {:>8.0} obs/s ({:.2} of single); \
             us per msg: nats-server {:.1}, postgres {:.1}, core+driver {:.1}",
            topology.label(),
            publish,
            end_to_end,
            end_to_end / single.max(1.0),
            nats_us,
            pg_us,
            own_us
        );
    }
    println!("load after: {}", load_average());
}
