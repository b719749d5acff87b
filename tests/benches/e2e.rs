//! End-to-end benchmark against a private nats-server and PostgreSQL database (issues: "an
//! end-to-end benchmark command ... that also measures raw COPY into the same table and raw
//! JetStream fetch+ack in the same run and prints the ratios"; issue 13: "measured against the
//! bridge a user would otherwise run").
//!
//! Run: `cargo bench -p sentinel-tests --bench e2e` (after `scripts/test` has installed a
//! current nats-server, or with SENTINEL_NATS_SERVER set); `-- --messages N` changes the size
//! of every measurement, `-- --rounds R` the number of drain rounds.
//!
//! One run, one private nats-server, one database, the same machine:
//! 1. raw JetStream: fetch(500) + plain ack of N messages on a stream of our shape, and the
//!    same with interest retention and one cumulative ack (`AckAll`) per fetch (issue 24 item
//!    3; `-- --acks-only` stops after these);
//! 2. raw COPY of N rows of the observation shape into `observation_measurement`;
//! 3. the store's commit path alone, in both insert forms ([`CommitInsert`]);
//! 4. drains, in R rounds (the order rotated each round): a backlog of N synthetic
//!    observations (the demo's fleet over the sample registry) loaded into a fresh `OBS`
//!    stream while nothing consumes it, then drained by
//!    - the naive bridge a user would otherwise run ([`bridge_drain`]): fetch 500, one
//!      `INSERT … SELECT FROM UNNEST … ON CONFLICT DO NOTHING` into the class table, commit,
//!      ack, four batches in flight; no validation, projection or transitions;
//!    - Sentinel: `sentinel run`'s startup and runtime over the real adapters, once with each
//!      insert form.
//!
//! Every drain starts from empty observation tables, quarantine, checkpoints and control log,
//! right after a CHECKPOINT, so no drain inherits another's rows or WAL debt.
//!
//! `-- --drain-only --messages 7200000` measures only Sentinel's drain of a four-hour backlog
//! at 500 obs/s (core runtime spec, "Buffer sizing"), against the spec's one hour at 20%
//! utilisation and the ten-minute target; `--commit-insert on-conflict` selects the old form.
//!
//! `-- --ack-ab` measures only Sentinel's drain with today's work queue and per-delivery acks
//! against an interest stream with cumulative acks (`AckAll`) held behind the oldest delivery
//! in flight ([`ack_all`], bench-only; issue 24 item 3), R rounds alternating.
//!
//! CPU is attributed per process from /proc: PostgreSQL (every `postgres` process), nats-server,
//! and this process (the bridge, or the in-process Sentinel core).
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

/// Sentinel and the naive bridge (both in this process) allocate through mimalloc, as the
/// `sentinel` binary does, so the bench measures what ships; `--features
/// bench-system-allocator` runs both on glibc's malloc instead (the A/B of issue 24 item 3).
#[cfg(not(feature = "bench-system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator this build runs on, for the bench's first and summary lines.
const ALLOCATOR_NAME: &str = if cfg!(feature = "bench-system-allocator") {
    "glibc malloc"
} else {
    "mimalloc"
};

#[path = "e2e/ack_all.rs"]
mod ack_all;

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream;
use bytes::Bytes;
use futures::StreamExt;
use sentinel_bus_nats::NatsBusConfig;
use sentinel_core::{Config, Micros};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_models::fleet::Fleet;
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, Store};
use sentinel_runtime::startup;
use sentinel_store_pg::{CommitInsert, PgStore, PgStoreConfig};
use sentinel_tests::bench::{CpuSplit, arg, cpu_seconds, flag, load_average, median};
use sentinel_tests::harness::{InProcessCore, bus_with_stream, pg};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use sentinel_tests::traffic;
use serde_json::value::RawValue;

/// Messages per fetch and rows per transaction of the naive bridge, as the core's batches.
const BRIDGE_BATCH: usize = 500;
/// Batches the naive bridge keeps in flight, as the core's runtime.
const BRIDGE_IN_FLIGHT: usize = 4;
/// The drain backlogs' source epochs start here: far above any core epoch this benchmark
/// reaches, so a backlog's keys never meet the core's own self-points (keyed by its epoch).
const BACKLOG_EPOCH_BASE: u32 = 1_000;
/// The fleet seed of every backlog, so every drain gets the same mix.
const BACKLOG_SEED: u64 = 7;
/// Published in chunks, so a multi-million backlog is never all in memory at once.
const LOAD_CHUNK: usize = 100_000;
/// How often a drain's end is polled.
const DRAIN_POLL_MS: u64 = 20;

/// The stream's retention and the consumer's ack policy of one raw fetch+ack measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RawAcks {
    /// Limits retention (an ack only moves the ack floor), one ack per message.
    Limits,
    /// The OBS stream's shape today: work-queue retention (an ack deletes the message), one
    /// explicit ack per message.
    WorkQueue,
    /// Issue 24 item 3's alternative: interest retention (a message goes once every consumer
    /// acked it) and `AckPolicy::All`, one cumulative ack per fetched batch (its last message).
    /// nats-server refuses `AckAll` on a work-queue stream, hence the other retention.
    InterestAckAll,
}

impl RawAcks {
    fn name(self) -> &'static str {
        match self {
            RawAcks::Limits => "RAW",
            RawAcks::WorkQueue => "RAWWQ",
            RawAcks::InterestAckAll => "RAWALL",
        }
    }
}

/// One raw fetch(500)+ack measurement: msg/s, and the CPU per message of nats-server and of
/// this process over the consuming alone (publishing the messages is not counted).
struct RawFetchAck {
    rate: f64,
    nats_us: f64,
    own_us: f64,
}

async fn raw_fetch_ack(url: &str, messages: usize, acks_by: RawAcks) -> RawFetchAck {
    use async_nats::jetstream::consumer::AckPolicy;
    use async_nats::jetstream::stream::RetentionPolicy;
    let name = acks_by.name();
    let client = async_nats::connect(url).await.expect("connect");
    let js = async_nats::jetstream::new(client.clone());
    let stream = js
        .create_stream(async_nats::jetstream::stream::Config {
            name: name.into(),
            subjects: vec![format!("{}.>", name.to_lowercase())],
            storage: async_nats::jetstream::stream::StorageType::File,
            retention: match acks_by {
                RawAcks::Limits => RetentionPolicy::Limits,
                RawAcks::WorkQueue => RetentionPolicy::WorkQueue,
                RawAcks::InterestAckAll => RetentionPolicy::Interest,
            },
            ..Default::default()
        })
        .await
        .expect("raw stream");
    // Under interest retention a message nobody is interested in is not kept: the consumer
    // comes first, as `sentinel run` would have made it before any driver publishes.
    let consumer = stream
        .create_consumer(async_nats::jetstream::consumer::pull::Config {
            durable_name: Some("raw".into()),
            ack_policy: if acks_by == RawAcks::InterestAckAll {
                AckPolicy::All
            } else {
                AckPolicy::Explicit
            },
            max_ack_pending: 20_000,
            ..Default::default()
        })
        .await
        .expect("raw consumer");
    let payload = Bytes::from(vec![b'x'; 200]);
    let mut acks = Vec::with_capacity(4096);
    for i in 0..messages {
        acks.push(
            js.publish(format!("{}.host.drv", name.to_lowercase()), payload.clone())
                .await
                .expect("publish"),
        );
        if acks.len() == 4096 || i + 1 == messages {
            for ack in acks.drain(..) {
                ack.await.expect("publish ack");
            }
        }
    }
    let before = cpu_seconds();
    let started = Instant::now();
    let mut done = 0usize;
    while done < messages {
        let mut batch = consumer
            .fetch()
            .max_messages(500)
            .messages()
            .await
            .expect("fetch");
        let mut last = None;
        while let Some(message) = batch.next().await {
            let message = message.expect("message");
            done += 1;
            if acks_by == RawAcks::InterestAckAll {
                last = Some(message);
            } else {
                message.ack().await.expect("ack");
            }
        }
        if let Some(last) = last {
            last.ack().await.expect("cumulative ack");
        }
    }
    client.flush().await.expect("flush the acks");
    let rate = messages as f64 / started.elapsed().as_secs_f64();
    let cpu = cpu_seconds().since(&before);
    // Every message acked is gone from a work-queue or interest stream; wait for the server
    // to have applied the last acks, so the figures count all of their work.
    if acks_by != RawAcks::Limits {
        let mut stream = stream;
        for _ in 0..500 {
            let info = stream.info().await.expect("raw stream info");
            if info.state.messages == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(
            stream.info().await.expect("raw stream info").state.messages,
            0,
            "every message acked ({acks_by:?}) is removed from the stream"
        );
    }
    RawFetchAck {
        rate,
        nats_us: cpu[1] * 1e6 / messages as f64,
        own_us: cpu[2] * 1e6 / messages as f64,
    }
}

/// COPY of `rows` rows of the observation shape into `observation_measurement`, either in
/// one transaction (`rows_per_tx = rows`) or as durable `rows_per_tx`-row transactions with
/// `concurrency` connections, the same durability unit an ack-after-commit pipeline needs.
async fn raw_copy(url: &str, rows: usize, rows_per_tx: usize, concurrency: usize, tag: &str) -> f64 {
    use sqlx::Connection;
    let now = SystemClock.now().to_rfc3339();
    // The ids' keys (migration 0014), assigned before the COPY as a registry load would.
    let (point_key, instance_key): (i32, i32) = {
        let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
        sqlx::query("INSERT INTO point_key (point_id) VALUES ('boiler1.flow_temp') ON CONFLICT DO NOTHING")
            .execute(&mut conn)
            .await
            .expect("the point's key");
        sqlx::query("INSERT INTO instance_key (driver_instance) VALUES ($1) ON CONFLICT DO NOTHING")
            .bind(tag)
            .execute(&mut conn)
            .await
            .expect("the instance's key");
        sqlx::query_as(
            "SELECT (SELECT key FROM point_key WHERE point_id = 'boiler1.flow_temp'), \
             (SELECT key FROM instance_key WHERE driver_instance = $1)",
        )
        .bind(tag)
        .fetch_one(&mut conn)
        .await
        .expect("the keys")
    };
    let chunks: Vec<Vec<u8>> = (0..rows)
        .collect::<Vec<_>>()
        .chunks(rows_per_tx)
        .map(|chunk| {
            let mut text = String::with_capacity(chunk.len() * 160);
            for &i in chunk {
                // ingested_at, point_key, observed_at, device_time, value_num, value_bool, value_text,
                // native_num, native_text, unit_native, quality, reason, detail, changed,
                // registry_version, instance_key, source_epoch, source_seq, skew_flagged
                text.push_str(&format!(
                    "{now}\t{point_key}\t{now}\t\\N\t{}\t\\N\t\\N\t{}\t\\N\tdegF\tlive\t\\N\t\\N\tt\t1\t{instance_key}\t1\t{i}\tf\n",
                    20.0 + (i % 100) as f64 / 10.0,
                    68.0 + (i % 100) as f64 / 10.0,
                ));
            }
            text.into_bytes()
        })
        .collect();
    let mut conns = Vec::new();
    for _ in 0..concurrency {
        conns.push(sqlx::PgConnection::connect(url).await.expect("connect"));
    }
    let queue = Arc::new(std::sync::Mutex::new(chunks));
    let started = Instant::now();
    let workers = conns.into_iter().map(|mut conn| {
        let queue = queue.clone();
        async move {
            loop {
                let Some(chunk) = queue.lock().expect("queue").pop() else { break };
                let mut copy = conn
                    .copy_in_raw(
                        "COPY observation_measurement (ingested_at, point_key, observed_at, device_time, value_num, \
                         value_bool, value_text, native_num, native_text, unit_native, quality, reason, detail, \
                         changed, registry_version, instance_key, source_epoch, source_seq, skew_flagged) \
                         FROM STDIN",
                    )
                    .await
                    .expect("copy in");
                copy.send(chunk).await.expect("copy send");
                copy.finish().await.expect("copy finish");
            }
        }
    });
    futures::future::join_all(workers).await;
    rows as f64 / started.elapsed().as_secs_f64()
}

/// The store's commit path alone: the core's own 500-row batches (from the same fleet),
/// committed with `concurrency` transactions in flight. Separates PostgreSQL's share from the
/// rest of the pipeline.
async fn commit_path(store: &PgStore, messages: usize, concurrency: usize, source_epoch: u32) -> f64 {
    use sentinel_core::{Core, Effect, Input, RestoredState};
    let registry = Arc::new(traffic::sample_registry());
    let now = SystemClock.now();
    let lease = store.acquire().await.expect("lock");
    let epoch = sentinel_ports::Lease::epoch(&lease);
    let mut core = Core::new(
        Config::default(),
        registry.clone(),
        epoch,
        &RestoredState::default(),
        now,
    )
    .expect("core");
    let mut fleet = Fleet::new(&registry, 11, source_epoch);
    let mut batches = Vec::new();
    for chunk in 0..messages.div_ceil(500) {
        let deliveries = (0..500)
            .map(|i| {
                let m = fleet.next_message(now);
                sentinel_core::Delivery {
                    tag: sentinel_core::DeliveryTag((chunk * 500 + i) as u64),
                    stream_seq: (source_epoch as u64) << 40 | (chunk * 500 + i) as u64,
                    subject: m.subject.into(),
                    payload: m.payload,
                    ingested_at: now,
                    delivered_count: 1,
                }
            })
            .collect();
        core.handle(now, Input::Delivered(deliveries));
        core.handle(now.add_ms(100), Input::Tick);
        while let Some(effect) = core.poll_effect() {
            if let Effect::Commit(batch) = effect {
                let inserted = (0..batch.rows.len() as u32).collect();
                batches.push(batch.clone());
                core.handle(
                    now,
                    Input::Committed(sentinel_core::CommitReport {
                        batch,
                        inserted,
                        quarantine_inserted: 0,
                    }),
                );
            }
        }
    }
    let rows: usize = batches.iter().map(|b| b.len()).sum();
    let started = Instant::now();
    let mut in_flight =
        futures::stream::iter(batches.into_iter().map(|b| store.commit(b))).buffer_unordered(concurrency);
    while let Some(result) = in_flight.next().await {
        result.expect("commit");
    }
    drop(lease);
    rows as f64 / started.elapsed().as_secs_f64()
}

/// A backlog loaded into a fresh `OBS` stream while nothing consumes it.
struct Backlog {
    /// Messages the stream stored (publisher retries dropped by its duplicate window).
    accepted: u64,
    /// The keys' source epoch; unique per backlog.
    source_epoch: u32,
}

/// How `OBS` keeps messages and how the core acks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ObsAcks {
    /// Today's: work-queue retention, one explicit ack per delivery.
    WorkQueue,
    /// Issue 24 item 3's candidate ([`ack_all`]): interest retention, cumulative acks.
    InterestAckAll,
}

/// Creates `OBS` as the bus creates it and loads `messages` fleet messages into it.
async fn load_backlog(nats: &NatsServer, messages: usize, source_epoch: u32) -> Backlog {
    load_backlog_into(nats, messages, source_epoch, ObsAcks::WorkQueue).await
}

/// [`load_backlog`] into the stream shape `acks` names (for interest retention the AckAll
/// consumer is created first: a message nobody is interested in is deleted on arrival).
async fn load_backlog_into(nats: &NatsServer, messages: usize, source_epoch: u32, acks: ObsAcks) -> Backlog {
    let clock = SystemClock;
    let config = NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    };
    match acks {
        // Ensures the stream exactly as `sentinel run` does; dropped before anything consumes.
        ObsAcks::WorkQueue => drop(bus_with_stream(config).await),
        ObsAcks::InterestAckAll => ack_all::create(&config).await,
    }
    let registry = traffic::sample_registry();
    let mut fleet = Fleet::new(&registry, BACKLOG_SEED, source_epoch);
    let publisher = ObservationPublisher::connect(&nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    let load_started = Instant::now();
    let mut accepted = 0;
    let mut remaining = messages;
    while remaining > 0 {
        let n = remaining.min(LOAD_CHUNK);
        remaining -= n;
        let items: Vec<(String, String, Bytes)> = (0..n)
            .map(|_| {
                let m = fleet.next_message(clock.now());
                (m.subject, m.msg_id, m.payload)
            })
            .collect();
        let report = publisher
            .publish_pipelined(items, 1024)
            .await
            .expect("load backlog");
        accepted += report.stored;
    }
    println!(
        "    backlog of {accepted} accepted messages (source epoch {source_epoch}) loaded in {:.1} s",
        load_started.elapsed().as_secs_f64()
    );
    Backlog {
        accepted,
        source_epoch,
    }
}

/// Deletes `OBS` (a work-queue stream takes one unfiltered consumer; the next drain brings
/// its own) and empties what a drain writes, then checkpoints so the next drain starts with
/// no WAL debt of this one.
async fn reset(nats: &NatsServer, db_url: &str) {
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = jetstream::new(client);
    match js.delete_stream("OBS").await {
        Ok(_) => {}
        Err(e) if e.to_string().contains("not found") => {}
        Err(e) => panic!("delete stream: {e}"),
    }
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
}

/// One drain's figures.
struct Drain {
    rate: f64,
    secs: f64,
    cpu: CpuSplit,
    /// What else the drain wrote or did, for the report.
    note: String,
}

/// Sentinel drains `backlog` through the production startup and runtime over the real adapters.
async fn sentinel_drain(nats: &NatsServer, store: &PgStore, db_url: &str, backlog: &Backlog) -> Drain {
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    })
    .await;
    sentinel_drain_on(bus, store, db_url, backlog).await
}

/// [`sentinel_drain`] over the interest stream with cumulative acks ([`ack_all`]).
async fn sentinel_drain_ack_all(
    nats: &NatsServer,
    store: &PgStore,
    db_url: &str,
    backlog: &Backlog,
) -> Drain {
    let nats_bus = sentinel_bus_nats::NatsBus::connect(NatsBusConfig {
        url: nats.url(),
        ..NatsBusConfig::default()
    })
    .await
    .expect("connect bus");
    let bus = ack_all::AckAllBus::over(nats_bus);
    let mut drain = sentinel_drain_on(bus.clone(), store, db_url, backlog).await;
    let (sent, acked, outstanding) = bus.ack_counts();
    assert_eq!(outstanding, 0, "every delivery acked at the end of the drain");
    assert!(acked >= backlog.accepted, "every loaded message acked");
    drain.note = format!(
        "{}; {acked} deliveries acked by {sent} cumulative acks",
        drain.note
    );
    drain
}

async fn sentinel_drain_on<B: Bus>(bus: B, store: &PgStore, db_url: &str, backlog: &Backlog) -> Drain {
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let fallbacks_before = store.commit_fallbacks();
    let cpu_before = cpu_seconds();
    let started_at = Instant::now();
    let started = startup::start(
        store,
        startup::already_connected(&bus),
        Some(&traffic::sample_registry_dir()),
        Config::default(),
        clock.as_ref(),
    )
    .await
    .expect("core starts");
    let core = InProcessCore::spawn(started, store.clone());
    loop {
        let lag = bus.lag().await.expect("lag");
        if lag.pending == 0 && lag.ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
    let secs = started_at.elapsed().as_secs_f64();
    let cpu = CpuSplit::over(&cpu_before, &cpu_seconds(), backlog.accepted, secs);
    let core_epoch = core.epoch;
    let outcome = core.stop().await;

    // The check counts the loaded messages' own keys: the core's self-points (keyed by its
    // epoch, published after the backlog) become rows too, one tick every few seconds.
    let mut conn = pg(db_url).await;
    let (loaded_rows, loaded_keys, self_rows, all_rows): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE source_epoch = $1), \
         count(DISTINCT (driver_instance, source_epoch, source_seq)) FILTER (WHERE source_epoch = $1), \
         count(*) FILTER (WHERE driver_instance = 'core' AND source_epoch = $2), count(*) \
         FROM observation",
    )
    .bind(backlog.source_epoch as i32)
    .bind(core_epoch as i32)
    .fetch_one(&mut conn)
    .await
    .expect("count rows");
    // The backlog holds stream sequences 1..=accepted of the fresh stream; the self-points
    // come after it.
    let (loaded_quarantined, later_quarantined): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE stream_seq <= $1), count(*) FILTER (WHERE stream_seq > $1) \
         FROM quarantine",
    )
    .bind(backlog.accepted as i64)
    .fetch_one(&mut conn)
    .await
    .expect("count quarantine");
    assert_eq!(loaded_rows, loaded_keys, "no loaded message became two rows");
    assert_eq!(
        (loaded_rows + loaded_quarantined) as u64,
        backlog.accepted,
        "every accepted message became a row or a quarantine entry"
    );
    assert_eq!(
        all_rows,
        loaded_rows + self_rows,
        "no rows besides the backlog's and the core's own self-points"
    );
    let core_committed =
        outcome.metrics.rows_inserted.iter().sum::<u64>() + outcome.metrics.quarantined_total();
    assert_eq!(
        core_committed,
        (all_rows + loaded_quarantined + later_quarantined) as u64,
        "the core's RETURNING-based count equals the database's"
    );
    Drain {
        rate: backlog.accepted as f64 / secs,
        secs,
        cpu,
        note: format!(
            "{self_rows} self-point rows and {later_quarantined} later quarantine entries besides; \
             {} transitions published; {} plain inserts fell back to ON CONFLICT",
            outcome.metrics.transitions_published,
            store.commit_fallbacks() - fallbacks_before
        ),
    }
}

/// The envelope fields a generic connector maps onto the class table's columns.
#[derive(serde::Deserialize)]
struct BridgeEnvelope<'a> {
    #[serde(borrow)]
    point_id: Cow<'a, str>,
    #[serde(borrow)]
    driver_instance: Cow<'a, str>,
    source_epoch: i32,
    source_seq: i64,
    #[serde(borrow)]
    observed_at: Cow<'a, str>,
    #[serde(borrow)]
    value: &'a RawValue,
    #[serde(borrow, default)]
    unit: Option<Cow<'a, str>>,
}

/// The naive bridge's statement: the message's fields as they come, no conversion, every row
/// `live`, the ids as the table's keys (migration 0014; `BRIDGE_KEYS` assigns any missing first).
const BRIDGE_INSERT: &str = "INSERT INTO observation_measurement (ingested_at, point_key, observed_at, \
     value_num, value_bool, value_text, unit_native, quality, changed, registry_version, instance_key, \
     source_epoch, source_seq) \
     SELECT ingested_at, p.key, observed_at, value_num, value_bool, value_text, unit_native, 'live', \
     true, 0, i.key, source_epoch, source_seq \
     FROM UNNEST($1::timestamptz[], $2::text[], $3::timestamptz[], $4::float8[], $5::bool[], $6::text[], \
     $7::text[], $8::text[], $9::integer[], $10::bigint[]) \
     AS u(ingested_at, point_id, observed_at, value_num, value_bool, value_text, unit_native, \
     driver_instance, source_epoch, source_seq) \
     JOIN point_key p USING (point_id) JOIN instance_key i USING (driver_instance) \
     ON CONFLICT DO NOTHING";

/// The keys of a batch's ids that have none, in a statement of their own so that the insert's
/// snapshot sees them whichever in-flight batch assigned them.
const BRIDGE_KEYS: &str = "WITH p AS (INSERT INTO point_key (point_id) SELECT DISTINCT x FROM unnest($1::text[]) x \
     WHERE NOT EXISTS (SELECT 1 FROM point_key k WHERE k.point_id = x) ON CONFLICT DO NOTHING) \
     INSERT INTO instance_key (driver_instance) SELECT DISTINCT x FROM unnest($2::text[]) x \
     WHERE NOT EXISTS (SELECT 1 FROM instance_key k WHERE k.driver_instance = x) ON CONFLICT DO NOTHING";

fn to_odt(t: Micros) -> time::OffsetDateTime {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(t.0) * 1_000).expect("timestamp in range")
}

fn as_str<'a>(v: &'a [Cow<'_, str>]) -> Vec<&'a str> {
    v.iter().map(|s| s.as_ref()).collect()
}

fn as_opt_str<'a>(v: &'a [Option<Cow<'_, str>>]) -> Vec<Option<&'a str>> {
    v.iter().map(|s| s.as_deref()).collect()
}

/// What the bridge wrote: rows, and messages it could not map (not JSON, or fields missing).
#[derive(Default)]
struct BridgeCounts {
    rows: AtomicU64,
    dropped: AtomicU64,
}

/// One batch of the naive bridge: map, insert (autocommit: the statement is the transaction),
/// ack. Holds its in-flight slot until the acks are sent.
async fn bridge_batch(
    pool: sqlx::PgPool,
    messages: Vec<jetstream::Message>,
    counts: Arc<BridgeCounts>,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    let n = messages.len();
    let mut ingested_at = Vec::with_capacity(n);
    let mut point_id = Vec::with_capacity(n);
    let mut observed_at = Vec::with_capacity(n);
    let mut value_num = Vec::with_capacity(n);
    let mut value_bool = Vec::with_capacity(n);
    let mut value_text: Vec<Option<Cow<'_, str>>> = Vec::with_capacity(n);
    let mut unit = Vec::with_capacity(n);
    let mut driver_instance = Vec::with_capacity(n);
    let mut source_epoch = Vec::with_capacity(n);
    let mut source_seq = Vec::with_capacity(n);
    let mut dropped = 0u64;
    for message in &messages {
        let published = message.info().expect("a JetStream message").published;
        let Ok(e) = serde_json::from_slice::<BridgeEnvelope<'_>>(&message.payload) else {
            dropped += 1;
            continue;
        };
        let Some(observed) = Micros::parse_rfc3339(&e.observed_at) else {
            dropped += 1;
            continue;
        };
        let raw = e.value.get();
        let (num, boolean, text) = match raw.as_bytes().first() {
            Some(b't') => (None, Some(true), None),
            Some(b'f') => (None, Some(false), None),
            Some(b'"') => (None, None, serde_json::from_str::<Cow<'_, str>>(raw).ok()),
            _ => (raw.parse::<f64>().ok(), None, None),
        };
        ingested_at.push(published);
        point_id.push(e.point_id);
        observed_at.push(to_odt(observed));
        value_num.push(num);
        value_bool.push(boolean);
        value_text.push(text);
        unit.push(e.unit);
        driver_instance.push(e.driver_instance);
        source_epoch.push(e.source_epoch);
        source_seq.push(e.source_seq);
    }
    let rows = ingested_at.len() as u64;
    sqlx::query(BRIDGE_KEYS)
        .bind(as_str(&point_id))
        .bind(as_str(&driver_instance))
        .execute(&pool)
        .await
        .expect("bridge keys");
    sqlx::query(BRIDGE_INSERT)
        .bind(ingested_at)
        .bind(as_str(&point_id))
        .bind(observed_at)
        .bind(value_num)
        .bind(value_bool)
        .bind(as_opt_str(&value_text))
        .bind(as_opt_str(&unit))
        .bind(as_str(&driver_instance))
        .bind(source_epoch)
        .bind(source_seq)
        .execute(&pool)
        .await
        .expect("bridge insert");
    for message in &messages {
        message.ack().await.expect("ack");
    }
    counts.rows.fetch_add(rows, Ordering::Relaxed);
    counts.dropped.fetch_add(dropped, Ordering::Relaxed);
}

/// The naive bridge a user would otherwise run, over the same stream and table: fetch 500 →
/// one `INSERT … SELECT FROM UNNEST … ON CONFLICT DO NOTHING` → commit → ack, four batches in
/// flight; no validation, projection or transitions.
async fn bridge_drain(nats: &NatsServer, db_url: &str, backlog: &Backlog) -> Drain {
    let cpu_before = cpu_seconds();
    let started_at = Instant::now();
    let client = async_nats::connect(nats.url()).await.expect("connect");
    let js = jetstream::new(client.clone());
    let stream = js.get_stream("OBS").await.expect("stream");
    let consumer = stream
        .create_consumer(jetstream::consumer::pull::Config {
            durable_name: Some("bridge".into()),
            ack_policy: jetstream::consumer::AckPolicy::Explicit,
            ack_wait: Duration::from_secs(30),
            max_ack_pending: 20_000,
            ..Default::default()
        })
        .await
        .expect("bridge consumer");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(BRIDGE_IN_FLIGHT as u32)
        .connect(db_url)
        .await
        .expect("bridge pool");
    let slots = Arc::new(tokio::sync::Semaphore::new(BRIDGE_IN_FLIGHT));
    let counts = Arc::new(BridgeCounts::default());
    let mut fetched = 0u64;
    while fetched < backlog.accepted {
        let slot = slots.clone().acquire_owned().await.expect("slot");
        let mut messages = Vec::with_capacity(BRIDGE_BATCH);
        let mut pull = consumer
            .fetch()
            .max_messages(BRIDGE_BATCH)
            .messages()
            .await
            .expect("fetch");
        while let Some(message) = pull.next().await {
            messages.push(message.expect("message"));
        }
        fetched += messages.len() as u64;
        if !messages.is_empty() {
            tokio::spawn(bridge_batch(pool.clone(), messages, counts.clone(), slot));
        }
    }
    // Every batch committed and acked once all slots are free again.
    let _all = slots.acquire_many(BRIDGE_IN_FLIGHT as u32).await.expect("slots");
    client.flush().await.expect("flush acks");
    let mut consumer = consumer;
    loop {
        let info = consumer.info().await.expect("consumer info");
        if info.num_pending == 0 && info.num_ack_pending == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(DRAIN_POLL_MS)).await;
    }
    let secs = started_at.elapsed().as_secs_f64();
    let cpu = CpuSplit::over(&cpu_before, &cpu_seconds(), backlog.accepted, secs);
    let rows = counts.rows.load(Ordering::Relaxed);
    let dropped = counts.dropped.load(Ordering::Relaxed);
    let mut conn = pg(db_url).await;
    let stored: i64 = sqlx::query_scalar("SELECT count(*) FROM observation_measurement")
        .fetch_one(&mut conn)
        .await
        .expect("count");
    assert_eq!(
        rows + dropped,
        backlog.accepted,
        "the bridge saw every message once"
    );
    assert_eq!(
        stored as u64, rows,
        "the bridge stored every message it could map"
    );
    pool.close().await;
    Drain {
        rate: backlog.accepted as f64 / secs,
        secs,
        cpu,
        note: format!("{rows} rows; {dropped} messages it could not map, acked and dropped"),
    }
}

/// The three contestants of a drain round.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Contestant {
    Bridge,
    SentinelOnConflict,
    SentinelOptimistic,
}

impl Contestant {
    const ALL: [Contestant; 3] = [
        Contestant::Bridge,
        Contestant::SentinelOnConflict,
        Contestant::SentinelOptimistic,
    ];

    fn label(self) -> &'static str {
        match self {
            Contestant::Bridge => "naive bridge",
            Contestant::SentinelOnConflict => "sentinel, ON CONFLICT form (old)",
            Contestant::SentinelOptimistic => "sentinel, optimistic form (new)",
        }
    }
}

async fn connect_store(url: &str, commit_insert: CommitInsert) -> PgStore {
    PgStore::connect(
        url,
        PgStoreConfig {
            commit_insert,
            ..PgStoreConfig::default()
        },
    )
    .await
    .expect("store")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let messages: usize = arg("--messages", 200_000);
    let rounds: usize = arg("--rounds", 3usize).max(1);
    let nats = NatsServer::start().await;
    let db = TestDb::create().await.expect("database");
    let optimistic = connect_store(&db.url, CommitInsert::Optimistic).await;
    let on_conflict = connect_store(&db.url, CommitInsert::OnConflict).await;
    optimistic.migrate().await.expect("migrate");
    println!(
        "e2e bench: {messages} messages; nats-server {} and PostgreSQL on this machine; allocator {}; load {}",
        nats.url(),
        ALLOCATOR_NAME,
        load_average()
    );
    if flag("--drain-only") {
        let (store, form) = if std::env::args().any(|a| a == "on-conflict") {
            (&on_conflict, "ON CONFLICT form")
        } else {
            (&optimistic, "optimistic form")
        };
        let started = Instant::now();
        reset(&nats, &db.url).await;
        let backlog = load_backlog(&nats, messages, BACKLOG_EPOCH_BASE).await;
        println!("  load before the drain: {}", load_average());
        let drain = sentinel_drain(&nats, store, &db.url, &backlog).await;
        println!("  drain CPU: {}", drain.cpu);
        println!("  {}", drain.note);
        println!(
            "RESULT drain of {} messages ({form}): {:.0} s ({:.0} obs/s); target < 600 s; \
             spec: 3600 s at 20% utilisation; whole run with loading {:.0} s; load after {}",
            backlog.accepted,
            drain.secs,
            drain.rate,
            started.elapsed().as_secs_f64(),
            load_average()
        );
        return;
    }

    if flag("--ack-ab") {
        ack_ab(&nats, &optimistic, &db.url, messages, rounds).await;
        return;
    }

    let limits = raw_fetch_ack(&nats.url(), messages, RawAcks::Limits).await;
    let fetch_ack_limits = limits.rate;
    println!("  raw JetStream fetch(500)+ack, limits retention     {fetch_ack_limits:>10.0} msg/s");
    // Issue 24 item 3: today's work queue with an ack per message against interest retention
    // with one cumulative ack per fetch, twice each, alternating.
    let mut work_queue = Vec::new();
    let mut ack_all = Vec::new();
    for _ in 0..2 {
        for acks_by in [RawAcks::WorkQueue, RawAcks::InterestAckAll] {
            // A fresh stream each time: delete the previous one of that name.
            let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.expect("connect"));
            let _ = js.delete_stream(acks_by.name()).await;
            let figure = raw_fetch_ack(&nats.url(), messages, acks_by).await;
            println!(
                "  raw JetStream fetch(500), {:<34} {:>10.0} msg/s (nats-server {:.2} / own {:.2} us/msg consuming)",
                match acks_by {
                    RawAcks::WorkQueue => "work-queue, ack per message (as OBS)",
                    _ => "interest, one AckAll per fetch",
                },
                figure.rate,
                figure.nats_us,
                figure.own_us
            );
            if acks_by == RawAcks::WorkQueue {
                work_queue.push(figure);
            } else {
                ack_all.push(figure);
            }
        }
    }
    let fetch_ack = median(work_queue.iter().map(|f| f.rate).collect());
    let fetch_ack_all = median(ack_all.iter().map(|f| f.rate).collect());
    println!(
        "RESULT acks: interest + AckAll / work-queue + per-message acks = {:.2} msg/s \
         (medians {fetch_ack_all:.0} / {fetch_ack:.0}); nats-server {:.2} / {:.2} us/msg, \
         own {:.2} / {:.2} us/msg",
        fetch_ack_all / fetch_ack,
        median(ack_all.iter().map(|f| f.nats_us).collect()),
        median(work_queue.iter().map(|f| f.nats_us).collect()),
        median(ack_all.iter().map(|f| f.own_us).collect()),
        median(work_queue.iter().map(|f| f.own_us).collect()),
    );
    if flag("--acks-only") {
        return;
    }
    let copy_one_tx = raw_copy(&db.url, messages, messages, 1, "copy-one-tx").await;
    println!("  raw COPY, one transaction                          {copy_one_tx:>10.0} rows/s");
    let copy = raw_copy(&db.url, messages, 500, 4, "copy-500").await;
    println!("  raw COPY, 500-row transactions, 4 in flight        {copy:>10.0} rows/s");

    // The commit path alone, both forms back to back at each concurrency. PostgreSQL CPU is
    // read from /proc, so only long-lived backends count: the store's pooled connections do,
    // the raw COPY's short-lived ones would not (they exit before the reading).
    let mut source_epoch = 100;
    for concurrency in [1, 4, 8, 16] {
        for (form, store) in [("ON CONFLICT", &on_conflict), ("optimistic ", &optimistic)] {
            source_epoch += 1;
            let before = cpu_seconds();
            let rate = commit_path(store, messages / 2, concurrency, source_epoch).await;
            let pg_us = cpu_seconds().since(&before)[0] * 1e6 / (messages / 2) as f64;
            println!(
                "  store commit path, {form}, {concurrency:>2} in flight {rate:>10.0} rows/s \
                 (postgres {pg_us:.1} us/row)"
            );
        }
    }

    let mut figures: Vec<(Contestant, Drain)> = Vec::new();
    let mut epoch = BACKLOG_EPOCH_BASE;
    for round in 0..rounds {
        for i in 0..Contestant::ALL.len() {
            let contestant = Contestant::ALL[(i + round) % Contestant::ALL.len()];
            reset(&nats, &db.url).await;
            epoch += 1;
            let backlog = load_backlog(&nats, messages, epoch).await;
            let load = load_average();
            let drain = match contestant {
                Contestant::Bridge => bridge_drain(&nats, &db.url, &backlog).await,
                Contestant::SentinelOnConflict => {
                    sentinel_drain(&nats, &on_conflict, &db.url, &backlog).await
                }
                Contestant::SentinelOptimistic => sentinel_drain(&nats, &optimistic, &db.url, &backlog).await,
            };
            println!(
                "  round {} {:<34} {:>8.0} obs/s ({:.1} s; load {load}); {}; {}",
                round + 1,
                contestant.label(),
                drain.rate,
                drain.secs,
                drain.cpu,
                drain.note
            );
            figures.push((contestant, drain));
        }
    }

    let of = |c: Contestant| figures.iter().filter(move |(k, _)| *k == c).map(|(_, d)| d);
    let rate = |c: Contestant| median(of(c).map(|d| d.rate).collect());
    let cpu = |c: Contestant, i: usize| median(of(c).map(|d| d.cpu.us[i]).collect());
    let cpu_total = |c: Contestant| median(of(c).map(|d| d.cpu.total_us()).collect());
    println!("  medians of {rounds} rounds:");
    for c in Contestant::ALL {
        println!(
            "    {:<34} {:>8.0} obs/s; postgres {:.1} / nats-server {:.1} / own {:.1} us per msg (sum {:.1})",
            c.label(),
            rate(c),
            cpu(c, 0),
            cpu(c, 1),
            cpu(c, 2),
            cpu_total(c)
        );
    }
    let bridge = rate(Contestant::Bridge);
    let old = rate(Contestant::SentinelOnConflict);
    let new = rate(Contestant::SentinelOptimistic);
    // Per round too: the three of a round ran back to back, so their ratio is the least noisy.
    let per_round = |c: Contestant| -> Vec<String> {
        (0..rounds)
            .map(|r| {
                let round = &figures[r * 3..r * 3 + 3];
                let get = |k: Contestant| {
                    round
                        .iter()
                        .find(|(x, _)| *x == k)
                        .map(|(_, d)| d.rate)
                        .unwrap_or(0.0)
                };
                format!("{:.2}", get(c) / get(Contestant::Bridge))
            })
            .collect()
    };
    println!(
        "RESULT sentinel/bridge: new {:.2} (rounds {}), old {:.2} (rounds {}); target >= 1.0, stretch 1.3; \
         new/old {:.2}; sentinel new {new:.0}, old {old:.0}, bridge {bridge:.0} obs/s; \
         ceilings: fetch_ack(work-queue) {fetch_ack:.0}, fetch_ack(limits) {fetch_ack_limits:.0}, \
         copy(500/tx, 4) {copy:.0}, copy(one tx) {copy_one_tx:.0}; sentinel new = {:.0}% of the slower \
         same-durability ceiling; own CPU new {:.1} us/msg (issue 24: <= 4) under {ALLOCATOR_NAME}; load {}",
        new / bridge,
        per_round(Contestant::SentinelOptimistic).join(" "),
        old / bridge,
        per_round(Contestant::SentinelOnConflict).join(" "),
        new / old,
        100.0 * new / fetch_ack.min(copy),
        cpu(Contestant::SentinelOptimistic, 2),
        load_average()
    );
}

/// Issue 24 item 3, end to end: Sentinel's drain of the same backlog with today's work queue
/// and per-delivery acks, and with interest retention and cumulative acks held behind the
/// oldest delivery in flight ([`ack_all`]), alternating (the order swapped each round), the
/// optimistic commit form in both. `-- --ack-ab --rounds R --messages N`.
async fn ack_ab(nats: &NatsServer, store: &PgStore, db_url: &str, messages: usize, rounds: usize) {
    ack_all::self_check();
    let mut figures: Vec<(ObsAcks, Drain)> = Vec::new();
    let mut epoch = BACKLOG_EPOCH_BASE;
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [ObsAcks::WorkQueue, ObsAcks::InterestAckAll]
        } else {
            [ObsAcks::InterestAckAll, ObsAcks::WorkQueue]
        };
        for acks in order {
            reset(nats, db_url).await;
            epoch += 1;
            let backlog = load_backlog_into(nats, messages, epoch, acks).await;
            let load = load_average();
            let drain = match acks {
                ObsAcks::WorkQueue => sentinel_drain(nats, store, db_url, &backlog).await,
                ObsAcks::InterestAckAll => sentinel_drain_ack_all(nats, store, db_url, &backlog).await,
            };
            println!(
                "  round {} {:<36} {:>8.0} obs/s ({:.1} s; load {load}); {}; {}",
                round + 1,
                ack_label(acks),
                drain.rate,
                drain.secs,
                drain.cpu,
                drain.note
            );
            figures.push((acks, drain));
        }
    }
    let of = |a: ObsAcks| figures.iter().filter(move |(k, _)| *k == a).map(|(_, d)| d);
    let rate = |a: ObsAcks| median(of(a).map(|d| d.rate).collect());
    let cpu = |a: ObsAcks, i: usize| median(of(a).map(|d| d.cpu.us[i]).collect());
    println!("  medians of {rounds} rounds:");
    for a in [ObsAcks::WorkQueue, ObsAcks::InterestAckAll] {
        println!(
            "    {:<36} {:>8.0} obs/s; postgres {:.1} / nats-server {:.1} / own {:.1} us per msg",
            ack_label(a),
            rate(a),
            cpu(a, 0),
            cpu(a, 1),
            cpu(a, 2)
        );
    }
    // Per round: the two of a round ran back to back.
    let per_round: Vec<String> = figures
        .chunks(2)
        .map(|pair| {
            let get = |k: ObsAcks| pair.iter().find(|(x, _)| *x == k).map_or(0.0, |(_, d)| d.rate);
            format!("{:.2}", get(ObsAcks::InterestAckAll) / get(ObsAcks::WorkQueue))
        })
        .collect();
    println!(
        "RESULT ack A/B: interest+AckAll / work-queue = {:.2} obs/s (rounds {}); nats-server {:.1} / {:.1} us/msg, \
         own {:.1} / {:.1} us/msg, postgres {:.1} / {:.1} us/msg; load {}",
        rate(ObsAcks::InterestAckAll) / rate(ObsAcks::WorkQueue),
        per_round.join(" "),
        cpu(ObsAcks::InterestAckAll, 1),
        cpu(ObsAcks::WorkQueue, 1),
        cpu(ObsAcks::InterestAckAll, 2),
        cpu(ObsAcks::WorkQueue, 2),
        cpu(ObsAcks::InterestAckAll, 0),
        cpu(ObsAcks::WorkQueue, 0),
        load_average()
    );
}

fn ack_label(acks: ObsAcks) -> &'static str {
    match acks {
        ObsAcks::WorkQueue => "work queue, ack per delivery (today)",
        ObsAcks::InterestAckAll => "interest, cumulative AckAll (held)",
    }
}
