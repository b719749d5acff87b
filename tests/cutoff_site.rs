//! A site cut off from the bus, with real processes (issue 25 item 2; core runtime spec,
//! "Geographic split"; docs/deploy.md, "A remote site"): a private nats-server, a fresh
//! database, the production core in-process, and a driver at "site-b" publishing through the
//! driver library (publisher + disk queue) over a TCP proxy the test controls
//! ([`sentinel_tests::proxy`]).
//!
//! Owns two cases, each bounded in time:
//! - the link is cut for longer than a publish's whole retry span: the driver keeps reading,
//!   queues on disk, replays in order when the link is back; every reading is in PostgreSQL
//!   exactly once (counted with SQL), no transition twice, and no replayed reading made the
//!   point `live` (it went stale during the cut; only current data brings it back);
//! - the hard case: the link first loses the ack of a publish that landed (the proxy swallows
//!   server → client bytes), then is cut for longer than the stream's duplicate window (5 s
//!   here, set through the stream configuration the test owns): the stream stores the replay a
//!   second time, and the store's late-duplicate check keeps it out of the log: still exactly
//!   once. The core's in-memory dedup set would also catch a copy of a key it still remembers,
//!   so the test makes it remember one key, as after a core restart during the cut, while a
//!   driver at the hub keeps publishing over its own working link.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use sentinel_bus_nats::NatsBusConfig;
use sentinel_core::wire::{EnvelopeOut, obs_subject};
use sentinel_core::{Config, Micros};
use sentinel_driver::disk_queue::{DiskQueue, DiskQueueConfig, Published, QueuedPublisher};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_runtime::startup;
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::harness::{InProcessCore, Transitions, bus_with_stream, pg};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use sentinel_tests::proxy::{BusProxy, LinkMode};
use sentinel_tests::traffic;

const HOST: &str = "site-b";
const INSTANCE: &str = "modbus-site-b";
const POINT: &str = "tank1.level";
/// The point's `freshness_s`: short, so a cut of seconds makes it stale and a replayed reading
/// is old enough that raising the point to `live` from it would be visible.
const FRESHNESS_S: i64 = 2;
/// The stream's duplicate window in this test (the default is two minutes).
const DUPLICATE_WINDOW_MS: u64 = 5_000;
/// Rows late by more than this are checked against the stored keys: half the window.
const LATE_AFTER_MS: i64 = 2_500;
/// One publish's whole retry span: 1,000 + 200 + 500 = 1.7 s, inside the window.
fn publisher_config() -> PublisherConfig {
    PublisherConfig {
        ack_timeout_ms: 500,
        retry_for_ms: 1_000,
        retry_backoff_ms: 100,
        retry_backoff_max_ms: 200,
        duplicate_window_ms: DUPLICATE_WINDOW_MS,
    }
}
const READING_INTERVAL_MS: u64 = 100;
const RELINK_PROBE_MS: u64 = 500;
/// Bound on each wait: the replay, the drain, a row showing up.
const WAIT_S: u64 = 45;

/// The sample registry (no derived points) plus a host "site-b" with one point of short
/// freshness, reported on every reading.
fn registry_dir() -> PathBuf {
    // One folder per call: the tests of this file run in parallel in one process, and a shared
    // folder was removed under the other test's registry load (a CI run failed on it).
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("sentinel-cutoff-registry-{}-{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&traffic::sample_registry_dir(), &dir);
    std::fs::write(
        dir.join("hosts").join("site-b.toml"),
        format!(
            r#"# A remote site behind a link that can be cut (tests/cutoff_site.rs).

host = "{HOST}"

[[point]]
id = "{POINT}"
device = "tank1"
kind = "number"
driver_instance = "{INSTANCE}"
unit = "degC"
range = {{ min = -50.0, max = 150.0 }}
deadband = 0.1
retention = "measurement"
agg_safe = true
freshness_s = {FRESHNESS_S}
archetype = "hardware"
peak_rate_hz = 1.0
event_policy = "always"
row_bytes = 96
"#
        ),
    )
    .expect("write the site's host file");
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create the registry copy");
    for entry in std::fs::read_dir(from).expect("read the registry") {
        let entry = entry.expect("registry entry");
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a registry file");
        }
    }
}

/// The driver at the site: readings of [`POINT`] every [`READING_INTERVAL_MS`], each through
/// the disk-queued publisher, counted by what happened to it.
struct SiteDriver {
    publisher: QueuedPublisher<ObservationPublisher>,
    seq: u64,
    to_stream: u64,
    queued: u64,
}

impl SiteDriver {
    async fn connect(url: &str, queue_dir: &Path) -> SiteDriver {
        let _ = std::fs::remove_dir_all(queue_dir);
        let sink = ObservationPublisher::connect(url, publisher_config())
            .await
            .expect("the driver connects through the proxy");
        let queue = DiskQueue::open(DiskQueueConfig {
            dir: queue_dir.to_owned(),
            bytes_max: 16 << 20,
            age_max_ms: 3_600_000,
        })
        .expect("queue");
        let mut publisher = QueuedPublisher::new(sink, queue);
        publisher.set_relink_probe_interval_ms(RELINK_PROBE_MS);
        SiteDriver {
            publisher,
            seq: 0,
            to_stream: 0,
            queued: 0,
        }
    }

    /// One reading, observed now.
    async fn read_once(&mut self) -> Published {
        self.seq += 1;
        let now = SystemClock.now();
        let envelope = EnvelopeOut::new(
            POINT,
            INSTANCE,
            1,
            self.seq,
            now,
            serde_json::json!(20.0 + (self.seq % 50) as f64 / 10.0),
        );
        let published = self
            .publisher
            .publish(
                &obs_subject(HOST, INSTANCE),
                &envelope.msg_id(),
                Bytes::from(envelope.to_bytes()),
                now,
            )
            .await
            .expect("a reading is either on the stream or on disk");
        match published {
            Published::Stream(_) => self.to_stream += 1,
            Published::Queued => self.queued += 1,
        }
        published
    }

    async fn read_for(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        while Instant::now() < until {
            self.read_once().await;
            tokio::time::sleep(Duration::from_millis(READING_INTERVAL_MS)).await;
        }
    }
}

/// `(rows, distinct keys)` of the site's instance in the log.
async fn rows(url: &str) -> (i64, i64) {
    let mut conn = pg(url).await;
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT (source_epoch, source_seq)) FROM observation \
         WHERE driver_instance = $1",
    )
    .bind(INSTANCE)
    .fetch_one(&mut conn)
    .await
    .expect("count")
}

/// `(reason, count)` of the quarantine.
async fn quarantined(url: &str) -> Vec<(String, i64)> {
    let mut conn = pg(url).await;
    sqlx::query_as("SELECT reason::text, count(*) FROM quarantine GROUP BY 1 ORDER BY 1")
        .fetch_all(&mut conn)
        .await
        .expect("quarantine")
}

async fn row_exists(url: &str, seq: u64) -> bool {
    let mut conn = pg(url).await;
    sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM observation WHERE driver_instance = $1 AND source_seq = $2",
    )
    .bind(INSTANCE)
    .bind(seq as i64)
    .fetch_one(&mut conn)
    .await
    .expect("count")
        > 0
}

/// A driver at the hub (the sample registry's `pump1.speed` on plant-a), publishing every
/// [`READING_INTERVAL_MS`] over its own working link until `stop`: between the lost ack and
/// its late copy the core ingests other keys, so its one-key dedup set has forgotten it.
async fn estate_publishing(url: String, published: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    let publisher = ObservationPublisher::connect(&url, PublisherConfig::default())
        .await
        .expect("the hub's driver connects");
    let mut seq = 0;
    while !stop.load(Ordering::SeqCst) {
        seq += 1;
        let envelope = EnvelopeOut::new(
            "pump1.speed",
            "modbus-pumps",
            1,
            seq,
            SystemClock.now(),
            serde_json::json!(1_450.0),
        );
        let ack = publisher
            .publish(
                &obs_subject("plant-a", "modbus-pumps"),
                &envelope.msg_id(),
                Bytes::from(envelope.to_bytes()),
            )
            .await
            .expect("the hub's link works");
        assert!(!ack.duplicate);
        published.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(READING_INTERVAL_MS)).await;
    }
}

/// Sets the observation stream's duplicate window to [`DUPLICATE_WINDOW_MS`].
async fn shorten_duplicate_window(url: &str) {
    let client = async_nats::connect(url).await.expect("connect");
    let js = async_nats::jetstream::new(client);
    let mut stream = js
        .get_stream(NatsBusConfig::default().stream_name)
        .await
        .expect("stream");
    let mut config = stream.info().await.expect("stream info").config.clone();
    config.duplicate_window = Duration::from_millis(DUPLICATE_WINDOW_MS);
    let updated = js.update_stream(&config).await.expect("update the stream");
    assert_eq!(
        updated.config.duplicate_window,
        Duration::from_millis(DUPLICATE_WINDOW_MS)
    );
}

/// The stream's last sequence: how many messages it ever stored.
async fn stream_stored(url: &str) -> u64 {
    let client = async_nats::connect(url).await.expect("connect");
    let mut stream = async_nats::jetstream::new(client)
        .get_stream(NatsBusConfig::default().stream_name)
        .await
        .expect("stream");
    stream.info().await.expect("stream info").state.last_sequence
}

/// The cut-off site, end to end. `lose_an_ack`: the hard case. Returns nothing; asserts.
async fn cut_off_site(lose_an_ack: bool, cut_for: Duration) {
    let wall_base = (Instant::now(), SystemTime::now());
    let nats = NatsServer::start().await;
    let db = TestDb::create().await.expect("test database");
    let store = PgStore::connect(
        &db.url,
        PgStoreConfig {
            late_duplicate_after_ms: LATE_AFTER_MS,
            ..PgStoreConfig::default()
        },
    )
    .await
    .expect("store");
    store.migrate().await.expect("migrate");
    let bus = bus_with_stream(NatsBusConfig {
        url: nats.url(),
        ack_wait_ms: 30_000,
        ..NatsBusConfig::default()
    })
    .await;
    let transitions = Transitions::subscribe(&nats.url()).await;
    let registry = registry_dir();
    let started = startup::start(
        &store,
        startup::already_connected(&bus),
        Some(&registry),
        Config {
            self_points_interval_ms: 0,
            startup_grace_ms: 1_000,
            // The core's fast-path dedup set remembers one key, as a core restarted during the
            // cut remembers none (or one a million keys later, 35 min at 500 obs/s): with the
            // hub's traffic in between, the store alone must recognise a late copy.
            dedup_keys_max: 1,
            ..Config::default()
        },
        &SystemClock,
    )
    .await
    .expect("core starts");
    let core = InProcessCore::spawn(started, store.clone());
    // The core checked the stream's configuration at its start; the test now shortens the
    // duplicate window under it (the core's own bus refuses a window shorter than its
    // self-point publisher's retries, and publishes none here).
    shorten_duplicate_window(&nats.url()).await;

    // The rest of the estate stays connected and keeps publishing throughout.
    let estate_published = Arc::new(AtomicU64::new(0));
    let estate_stop = Arc::new(AtomicBool::new(false));
    let estate = tokio::spawn(estate_publishing(
        nats.url(),
        estate_published.clone(),
        estate_stop.clone(),
    ));
    let proxy = BusProxy::start(nats.port()).await;
    let queue_dir = std::env::temp_dir().join(format!(
        "sentinel-cutoff-queue-{}-{lose_an_ack}",
        std::process::id()
    ));
    let mut driver = SiteDriver::connect(&proxy.url(), &queue_dir).await;

    // The link works.
    driver.read_for(Duration::from_secs(2)).await;
    assert_eq!(driver.queued, 0, "nothing queued over a working link");

    if lose_an_ack {
        // A publish lands and its ack is lost: after its whole retry span it is queued with
        // its message id, though the stream has it.
        proxy.set(LinkMode::AcksLost);
        assert_eq!(driver.read_once().await, Published::Queued);
        let ambiguous = driver.seq;
        let deadline = Instant::now() + Duration::from_secs(WAIT_S);
        while !row_exists(&db.url, ambiguous).await {
            assert!(
                Instant::now() < deadline,
                "the reading whose ack was lost reached the log"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    // The site is cut off for longer than a publish's retry span (and, in the hard case, than
    // the stream's duplicate window): it keeps reading, onto its disk queue.
    proxy.set(LinkMode::Cut);
    let queued_before = driver.queued;
    driver.read_for(cut_for).await;
    assert!(
        driver.queued > queued_before + 5,
        "the readings of the cut went to disk: {} queued",
        driver.queued - queued_before
    );
    assert!(!driver.publisher.queue().is_empty());
    assert_eq!(driver.publisher.queue().dropped_total(), 0);

    // The link is back: the queue replays, oldest first, and new readings follow.
    proxy.set(LinkMode::Up);
    let deadline = Instant::now() + Duration::from_secs(WAIT_S);
    while !driver.publisher.queue().is_empty() || driver.publisher.is_cut_off(SystemClock.now()) {
        assert!(
            Instant::now() < deadline,
            "the queue replays once the link is back"
        );
        driver.read_once().await;
        tokio::time::sleep(Duration::from_millis(READING_INTERVAL_MS)).await;
    }
    // Current data again, long enough for the point to be live from it.
    driver.read_for(Duration::from_secs(1)).await;
    let readings = driver.seq;
    assert_eq!(driver.to_stream + driver.queued, readings);

    let deadline = Instant::now() + Duration::from_secs(WAIT_S);
    while rows(&db.url).await.0 < readings as i64 {
        assert!(
            Instant::now() < deadline,
            "every reading reaches the log: {:?} of {readings}",
            rows(&db.url).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Let anything late (a second copy of a replayed message) arrive and be judged.
    tokio::time::sleep(Duration::from_secs(2)).await;
    estate_stop.store(true, Ordering::SeqCst);
    estate.await.expect("the hub's driver stops");
    // The site's messages the stream stored: all it stored, less the hub driver's (each stored
    // once: its link never failed).
    let stored_by_stream = stream_stored(&nats.url()).await - estate_published.load(Ordering::SeqCst);
    let late_checked = store.commit_late_checked();
    core.stop().await;
    eprintln!(
        "readings {readings}: {} to the stream, {} queued; the stream stored {stored_by_stream}; \
         {late_checked} batches late-checked; log {:?}; quarantine {:?}",
        driver.to_stream,
        driver.queued,
        rows(&db.url).await,
        quarantined(&db.url).await
    );

    // Exactly once, counted with SQL.
    assert_eq!(
        rows(&db.url).await,
        (readings as i64, readings as i64),
        "every reading once, no key twice"
    );
    let mut conn = pg(&db.url).await;
    let order: Vec<i64> = sqlx::query_scalar(
        "SELECT source_seq FROM observation WHERE driver_instance = $1 ORDER BY ingested_at, source_seq",
    )
    .bind(INSTANCE)
    .fetch_all(&mut conn)
    .await
    .expect("order");
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(order, sorted, "replayed in the order read");
    assert!(late_checked > 0, "the replay arrived late and was checked");
    if lose_an_ack {
        assert!(
            stored_by_stream > readings,
            "the stream stored the late replay again ({stored_by_stream} messages for {readings} readings): \
             the case the window cannot catch"
        );
    }

    // No transition twice; the point went stale during the cut, and no replayed reading made
    // it live: every `live` transition came from a reading younger than its freshness.
    tokio::time::sleep(Duration::from_millis(300)).await;
    transitions.assert_at_most_once();
    let seen: Vec<_> = transitions
        .seen()
        .into_iter()
        .filter(|t| t.point_id == POINT)
        .collect();
    assert!(
        seen.iter()
            .any(|t| t.quality == "stale" && t.control_seq.is_some()),
        "the watchdog saw the cut"
    );
    let mut live = 0;
    for t in seen.iter().filter(|t| t.quality == "live") {
        let observed = Micros::parse_rfc3339(&t.observed_at).expect("observed_at");
        let received = wall_base.1 + (t.received_at - wall_base.0);
        let received = Micros(
            received
                .duration_since(SystemTime::UNIX_EPOCH)
                .expect("after 1970")
                .as_micros() as i64,
        );
        let age_ms = (received.0 - observed.0) / 1_000;
        assert!(
            age_ms < FRESHNESS_S * 1_000 + 500,
            "a reading {age_ms} ms old (replayed) was published as live"
        );
        live += 1;
    }
    assert!(live > 0, "current data made the point live");
    let _ = std::fs::remove_dir_all(&queue_dir);
    let _ = std::fs::remove_dir_all(&registry);
}

/// Cut for 4 s: longer than a publish's 1.7 s retry span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_site_cut_off_longer_than_a_publish_timeout_replays_everything_once() {
    tokio::time::timeout(
        Duration::from_secs(240),
        cut_off_site(false, Duration::from_secs(4)),
    )
    .await
    .expect("bounded");
}

/// An ack lost, then a cut of 8 s: longer than the stream's 5 s duplicate window.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_ack_then_a_cut_longer_than_the_duplicate_window_stores_once() {
    tokio::time::timeout(
        Duration::from_secs(240),
        cut_off_site(true, Duration::from_secs(8)),
    )
    .await
    .expect("bounded");
}
