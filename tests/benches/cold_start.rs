//! Cold start for 4,000 points of which 1,000 derived, per startup step (core runtime spec,
//! exit criteria: "Cold-start duration, per startup step", and "Scale targets"; DESIGN.md §8;
//! issue 14), against a private nats-server and PostgreSQL database.
//!
//! Run: `cargo bench -p sentinel-tests --bench cold_start [-- --hours H] [--control-log N]
//! [--rules N] [--keep-db] [--reuse-db URL]` (after
//! `scripts/test` has installed a current nats-server, or with SENTINEL_NATS_SERVER set).
//!
//! The history a restart finds: a registry of 4,000 points (the stages benchmark's mix: 70%
//! numbers, a fifth in °F; bool, enum, text, diagnostics; 16 hosts) whose last 1,000 are
//! derived points (host `sentinel`, the eight ops in turn, windows of 60 s, 5 min, 15 min and
//! 1 h in turn, each reading a different number point); `--hours` hours (default 24) of
//! history at the design rate, 500 rows/s (every point one reading every 8 s, 5% of them
//! stale), generated in the database by one `INSERT … SELECT generate_series` per hour and
//! class into the class tables with every index and trigger in place, then VACUUM ANALYZE; on
//! top, ten readings per source point through the real path (a core ingests them and derives
//! from them, and its clean stop writes the checkpoint), and 4,000 control events above the
//! checkpoint's watermarks. 1,000 of the source points are writable (issue 21), and the
//! command plane's log is written for them as a core writes it (`write_arbitration` for each
//! claim with its `point_desired` row, then the command issued, its `applied` answer and its
//! verdict), ending in the state a restart has to restore: a claim per point (a fifth of them
//! operator claims that lapsed while the core was down), an open verification per point (a
//! quarter of them overdue, decided at start on the committed rows), and a tenth of the
//! commands unanswered (the outbox). The whole start is measured once over that log, then the
//! log is grown to `--control-log N` events (default 1,000,000: cycles of a claim, its
//! command, its answer and its verdict per writable point, ending in the same final state) and
//! measured again, so restart steps 4 and 6 are compared over two log lengths in one run.
//! Then `startup::start` runs `ROUNDS` times, each a full acquisition
//! (lock, epoch, registry, restore, connect, bind, restart steps 4–8), and each step's median,
//! minimum, maximum and first round are printed, with the 59-point sample registry's cold
//! start measured in the same run for comparison. With `--rules N` (issue 22), the start is
//! measured once more after a registry version with N rules on the writable points
//! (`core/benches/shared/rules_1000.rs`, every fourth with a `for_s` of 300 s) is stored, and
//! each step, restart step 8 (`warmup`) among them, is printed with and without the rules. The database is dropped at the end, unless
//! `--keep-db` (to EXPLAIN its queries; drop it by hand after); `--reuse-db URL` measures
//! again over such a kept database, migrated by this binary, without building the history.
#![allow(clippy::disallowed_methods)] // a benchmark reads the clock

use std::time::{Duration, Instant};

use bytes::Bytes;
use sentinel_bus_nats::{NatsBus, NatsBusConfig};
use sentinel_core::arbitration::{Band, Claim, Desired, DesiredRow};
use sentinel_core::registry::{
    Archetype, CommandValue, Derived, DerivedOp, Descriptor, Kind, RetentionClass, canonical,
};
use sentinel_core::wire::CommandOutcome;
use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{Config, ControlDetail, ControlEvent, Micros, Quality, registry::PointIdx};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::clock::{Clock, SystemClock};
use sentinel_ports::{Bus, Lease, Store, StoreError};
use sentinel_runtime::startup::{self, StartError};
use sentinel_store_pg::{PgStore, PgStoreConfig};
use sentinel_tests::bench::{arg, flag, load_average};
use sentinel_tests::harness::{InProcessCore, bus_with_stream};
use sentinel_tests::nats::NatsServer;
use sentinel_tests::pg::TestDb;
use sentinel_tests::traffic;
use sqlx::{Connection, PgConnection};

/// The stages benchmark's 4,000-point mix.
#[path = "../../core/benches/shared/fleet_4000.rs"]
mod fleet_4000;
/// The rules benchmark's rule set (`--rules`).
#[path = "../../core/benches/shared/rules_1000.rs"]
mod rules_1000;

use fleet_4000::{POINTS, descriptors};

const READINGS_PER_POINT: usize = 10;
const ROUNDS: usize = 7;
/// The last `DERIVED` points of the fleet are derived.
const DERIVED: usize = 1_000;
/// The design rate (core runtime spec, "Scale targets").
const RATE_PER_S: i64 = 500;
/// The sliding windows derived points take in turn.
const WINDOWS_S: [u32; 4] = [60, 300, 900, 3_600];
/// Writable points among the sources (issue 21).
const WRITABLE: usize = 1_000;
/// A writable point's `verify_s`.
const VERIFY_S: u32 = 300;
/// The `for_s` of every fourth rule with `--rules`: step 8 reads its inputs' rows over it plus
/// one freshness.
const RULE_FOR_S: u32 = 300;

/// The fleet with its last [`DERIVED`] points made derived: point `3000 + j` computes
/// `DerivedOp::ALL[j % 8]` over window `WINDOWS_S[(j / 8) % 4]`, reading the `j`-th number
/// point of the first 3,000 (pair ops also the `j + 1000`-th), so 1,000 inputs are read.
fn derived_fleet() -> Vec<Descriptor> {
    let mut descriptors = descriptors();
    let sources = POINTS - DERIVED;
    let numbers: Vec<String> = descriptors[..sources]
        .iter()
        .filter(|d| d.kind == Kind::Number && d.agg_safe)
        .map(|d| d.id.clone())
        .collect();
    assert!(numbers.len() >= 2 * DERIVED, "enough number points to read");
    for (j, d) in descriptors[sources..].iter_mut().enumerate() {
        let op = DerivedOp::ALL[j % DerivedOp::ALL.len()];
        let inputs = if op.is_window() {
            vec![numbers[j].clone()]
        } else {
            vec![numbers[j].clone(), numbers[j + DERIVED].clone()]
        };
        let window_s = op
            .is_window()
            .then_some(WINDOWS_S[(j / DerivedOp::ALL.len()) % WINDOWS_S.len()]);
        let mut derived = Descriptor {
            unit: Some("degC".to_owned()),
            agg_safe: true,
            derived: Some(Derived { op, inputs, window_s }),
            ..Descriptor::new(
                &format!("sentinel.derived.d{j}"),
                Kind::Number,
                RetentionClass::Measurement,
                sentinel_core::self_points::SELF_HOST,
                "derived",
            )
        };
        derived.manifest.archetype = Archetype::Derived;
        *d = derived;
    }
    fleet_4000::make_writable(&mut descriptors[..sources], WRITABLE, VERIFY_S);
    descriptors
}

/// The value cycle `c` commands on a writable point of `kind`.
fn command_value(kind: Kind, c: usize) -> CommandValue {
    match kind {
        Kind::Bool => CommandValue::Bool(c.is_multiple_of(2)),
        _ => CommandValue::Number(18.0 + (c % 8) as f64),
    }
}

fn event(point: (usize, &Descriptor), at: Micros, principal: &str, detail: ControlDetail) -> ControlEvent {
    ControlEvent {
        occurred_at: at,
        point: Some(PointIdx(point.0 as u32)),
        point_id: point.1.id.as_str().into(),
        principal: principal.into(),
        core_epoch: 0,
        registry_version: 1,
        detail,
    }
}

/// Writes `events` under `epoch` (each stamped with it), in writes of the most the store takes.
async fn write_events(store: &PgStore, epoch: u32, mut events: Vec<ControlEvent>) -> Vec<i64> {
    for e in &mut events {
        e.core_epoch = epoch;
    }
    let mut seqs = Vec::with_capacity(events.len());
    for chunk in events.chunks(sentinel_core::control::CONTROL_EVENTS_PER_WRITE_MAX) {
        seqs.extend(
            store
                .write_control_events(epoch, chunk.to_vec())
                .await
                .expect("control events"),
        );
    }
    seqs
}

/// The command plane's log for the writable points, under `epoch`: `cycles` full cycles per
/// point (a claim, its command, the command's `applied` answer, its verdict), each cycle
/// `CYCLE_S` apart ending an hour before `now`, then the final state a restart restores: a
/// claim set with its `point_desired` row (one point in five an operator claim that lapsed
/// ten minutes ago), its command issued, and its `applied` answer — just now, or (one point in
/// four) an hour ago, so its verification came due while the core was down — except one
/// point in ten, whose command was never answered. Returns the events written.
async fn write_command_log(
    store: &PgStore,
    epoch: u32,
    descriptors: &[Descriptor],
    cycles: usize,
    now: Micros,
) -> usize {
    const CYCLE_S: i64 = 10;
    let writable: Vec<(usize, &Descriptor)> = descriptors
        .iter()
        .enumerate()
        .filter(|(_, d)| d.writable.is_some())
        .collect();
    let mut written = 0;
    for c in 0..cycles {
        let at = now.add_ms(-3_600_000 - (cycles - c) as i64 * CYCLE_S * 1_000);
        let mut events = Vec::with_capacity(writable.len() * 3);
        for &(i, d) in &writable {
            let value = command_value(d.kind, c);
            let command_id = format!("bench-{i}-{c}");
            events.push(event(
                (i, d),
                at,
                "rule:bench",
                ControlDetail::ClaimSet {
                    command_id: command_id.clone(),
                    holder: "rule:bench".into(),
                    band: Band::Automation,
                    priority: 0,
                    value: value.clone(),
                    until: None,
                    provenance: None,
                },
            ));
            events.push(event(
                (i, d),
                at,
                "rule:bench",
                ControlDetail::CommandIssued {
                    command_id: command_id.clone(),
                    value: value.to_json(),
                    first_issued_at: None,
                },
            ));
            events.push(event(
                (i, d),
                at.add_ms(200),
                "driver",
                ControlDetail::CommandResult {
                    command_id,
                    outcome: CommandOutcome::Applied,
                    reason: None,
                },
            ));
        }
        let seqs = write_events(store, epoch, events).await;
        let verdicts = writable
            .iter()
            .zip(seqs.chunks(3))
            .map(|(&(i, d), seqs)| {
                event(
                    (i, d),
                    at.add_ms(5_000),
                    "core:verification",
                    ControlDetail::CommandVerified {
                        command_id: format!("bench-{i}-{c}"),
                        result_seq: seqs[2],
                        evidence_at: at.add_ms(4_000),
                    },
                )
            })
            .collect();
        written += seqs.len() + write_events(store, epoch, verdicts).await.len();
    }
    // The final state.
    let mut claims = Vec::with_capacity(writable.len());
    let mut rows = Vec::with_capacity(writable.len());
    let mut tail = Vec::with_capacity(writable.len() * 2);
    for (n, &(i, d)) in writable.iter().enumerate() {
        let value = command_value(d.kind, cycles);
        let command_id = format!("bench-{i}-final");
        let operator = n % 5 == 0;
        let (holder, band, since, until) = if operator {
            (
                "op.bench",
                Band::Operator,
                now.add_ms(-3_600_000),
                Some(now.add_ms(-600_000)),
            )
        } else {
            ("rule:bench", Band::Automation, now.add_ms(-3_600_000), None)
        };
        let claim = Claim {
            holder: holder.into(),
            band,
            priority: 0,
            value: value.clone(),
            since,
            until,
        };
        claims.push(event(
            (i, d),
            since,
            holder,
            ControlDetail::ClaimSet {
                command_id: command_id.clone(),
                holder: holder.into(),
                band,
                priority: 0,
                value: value.clone(),
                until,
                provenance: None,
            },
        ));
        rows.push(DesiredRow {
            point_id: d.id.as_str().into(),
            desired: Desired {
                value: Some(value.clone()),
                winner: Some(claim.clone()),
                since,
            },
            claims: vec![claim],
        });
        tail.push(event(
            (i, d),
            since,
            holder,
            ControlDetail::CommandIssued {
                command_id: command_id.clone(),
                value: value.to_json(),
                first_issued_at: None,
            },
        ));
        if n % 10 != 9 {
            let answered = if n % 4 == 1 {
                now.add_ms(-3_600_000)
            } else {
                now.add_ms(-1_000)
            };
            tail.push(event(
                (i, d),
                answered,
                "driver",
                ControlDetail::CommandResult {
                    command_id,
                    outcome: CommandOutcome::Applied,
                    reason: None,
                },
            ));
        }
    }
    for e in &mut claims {
        e.core_epoch = epoch;
    }
    let per_write =
        sentinel_ports::POINT_DESIRED_PER_WRITE_MAX.min(sentinel_core::control::CONTROL_EVENTS_PER_WRITE_MAX);
    for (events, desired) in claims.chunks(per_write).zip(rows.chunks(per_write)) {
        written += store
            .write_arbitration(epoch, events.to_vec(), desired.to_vec())
            .await
            .expect("arbitration")
            .len();
    }
    written + write_events(store, epoch, tail).await.len()
}

/// The store's lock, waiting while the previous holder's session is being released.
async fn acquire_free(store: &PgStore) -> sentinel_store_pg::PgLease {
    loop {
        match store.acquire().await {
            Ok(lease) => break lease,
            Err(StoreError::LockHeld) => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("acquire: {e}"),
        }
    }
}

/// `hours` of history at the design rate ending at `end`, every point one reading every 8 s,
/// generated inside the database (one statement per hour and class), then VACUUM ANALYZE.
async fn fill_history(url: &str, descriptors: &[Descriptor], end: sentinel_core::Micros, hours: u64) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::query("SELECT sentinel_ensure_partitions(($1::timestamptz - interval '2 days')::date, 4)")
        .bind(end.to_rfc3339())
        .execute(&mut conn)
        .await
        .expect("partitions");
    sqlx::raw_sql(
        "CREATE TABLE bench_point (idx integer PRIMARY KEY, id text NOT NULL, kind text NOT NULL,          class text NOT NULL, instance text NOT NULL)",
    )
    .execute(&mut conn)
    .await
    .expect("bench_point");
    for (i, d) in descriptors.iter().enumerate() {
        let kind = match d.kind {
            Kind::Number => "number",
            Kind::Bool => "bool",
            Kind::Enum => "enum",
            Kind::Text => "text",
        };
        sqlx::query("INSERT INTO bench_point VALUES ($1, $2, $3, $4, $5)")
            .bind(i as i32)
            .bind(&d.id)
            .bind(kind)
            .bind(d.retention.as_str())
            .bind(&d.assignment.driver_instance)
            .execute(&mut conn)
            .await
            .expect("bench point");
    }
    // The ids' keys (migration 0014), as a registry load assigns them.
    sqlx::raw_sql(
        "INSERT INTO point_key (point_id) SELECT id FROM bench_point ON CONFLICT DO NOTHING; \
         INSERT INTO instance_key (driver_instance) SELECT DISTINCT instance FROM bench_point \
         ON CONFLICT DO NOTHING",
    )
    .execute(&mut conn)
    .await
    .expect("keys");
    let per_hour = RATE_PER_S * 3_600;
    let start = Micros(end.0 - hours as i64 * 3_600_000_000);
    for hour in 0..hours as i64 {
        let started = Instant::now();
        for (class, table) in [
            ("measurement", "observation_measurement"),
            ("state", "observation_state"),
            ("diagnostic", "observation_diagnostic"),
        ] {
            // The table name is one of three literals above.
            let sql = format!(
                "INSERT INTO {table} (ingested_at, point_key, observed_at, value_num, value_bool, value_text, \
                   native_num, quality, changed, registry_version, instance_key, source_epoch, source_seq) \
                 SELECT s.t + interval '150 milliseconds', pk.key, s.t, \
                        CASE WHEN p.kind = 'number' THEN 20 + (s.n % 97) * 0.25 END, \
                        CASE WHEN p.kind = 'bool' THEN s.n % 2 = 0 END, \
                        CASE p.kind WHEN 'enum' THEN (ARRAY['off','on','fault'])[1 + (s.n / 4000) % 3] \
                                    WHEN 'text' THEN 'ok' END, \
                        CASE WHEN p.kind = 'number' THEN 20 + (s.n % 97) * 0.25 END, \
                        CASE WHEN (s.n / 4000) % 20 = 0 THEN 'stale'::quality ELSE 'live'::quality END, \
                        true, 1, ik.key, 0, s.n \
                 FROM (SELECT n, $1::timestamptz + n * interval '2 milliseconds' AS t \
                       FROM generate_series($2::bigint, $2::bigint + $3::bigint - 1) n) s \
                 JOIN bench_point p ON p.idx = (s.n % {POINTS}) \
                 JOIN point_key pk ON pk.point_id = p.id JOIN instance_key ik ON ik.driver_instance = p.instance \
                 WHERE p.class = '{class}'"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql))
                .bind(start.to_rfc3339())
                .bind(hour * per_hour)
                .bind(per_hour)
                .execute(&mut conn)
                .await
                .expect("fill an hour");
        }
        eprintln!(
            "filled hour {hour} ({per_hour} rows) in {:.1} s, load {}",
            started.elapsed().as_secs_f64(),
            load_average()
        );
    }
    let started = Instant::now();
    sqlx::raw_sql("VACUUM ANALYZE observation_measurement, observation_state, observation_diagnostic")
        .execute(&mut conn)
        .await
        .expect("vacuum");
    eprintln!("VACUUM ANALYZE in {:.1} s", started.elapsed().as_secs_f64());
    let _ = conn.close().await;
}

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

async fn control_event_count(url: &str) -> usize {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    let count: i64 = sqlx::query_scalar("SELECT count(*) FROM control_event")
        .fetch_one(&mut conn)
        .await
        .expect("count control events");
    usize::try_from(count).expect("a count")
}

/// Fresh statistics after a bulk write, as autovacuum would give a long-lived log.
async fn analyze_control_log(url: &str) {
    let mut conn = PgConnection::connect(url).await.expect("connect");
    sqlx::raw_sql("VACUUM ANALYZE control_event, point_desired")
        .execute(&mut conn)
        .await
        .expect("analyze");
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

/// The 4,000-point history: the registry, ten readings per source point through a core, the
/// day of history, 4,000 control events.
async fn build_history(nats: &NatsServer, hours: u64) -> (TestDb, PgStore, NatsBus) {
    let (db, store, bus) = setup(nats).await;
    let descriptors = derived_fleet();
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
    let sources = &descriptors[..POINTS - DERIVED];
    let items: Vec<_> = (0..READINGS_PER_POINT)
        .flat_map(|r| sources.iter().enumerate().map(move |(i, d)| (r, i, d)))
        .map(|(r, i, d)| reading(d, (i as u64) << 8 | (r as u64 + 1), now))
        .collect();
    let total = publisher
        .publish_pipelined(items, 1024)
        .await
        .expect("publish")
        .stored;
    ingest_history(&bus, &store, total).await;
    // The day before those readings, older than all of them.
    let fill_started = Instant::now();
    fill_history(&db.url, &descriptors, now.add_ms(-2_000), hours).await;
    let history_rows = store.row_counts().await.expect("rows").total();
    eprintln!(
        "history: {history_rows} rows in {:.0} s",
        fill_started.elapsed().as_secs_f64()
    );

    // 4,000 control events above the checkpoint's watermarks, written by a later epoch.
    let lease = acquire_free(&store).await;
    let events: Vec<ControlEvent> = descriptors
        .iter()
        .enumerate()
        .map(|(i, d)| ControlEvent {
            occurred_at: now,
            point: Some(PointIdx(i as u32)),
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
    let quality_events = events.len();
    write_events(&store, lease.epoch(), events).await;
    // The command plane's log: one cycle per writable point, then its final state.
    let command_events = write_command_log(&store, lease.epoch(), &descriptors, 1, now).await;
    lease.release().await.expect("release");
    println!(
        "cold start bench: {POINTS} points ({DERIVED} derived, {WRITABLE} writable), {history_rows} rows ({hours} h at {RATE_PER_S}/s + {total} published), \
         {POINTS} checkpoint rows, {} control events; {ROUNDS} rounds; load {}",
        quality_events + command_events,
        load_average()
    );
    (db, store, bus)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let hours = arg("--hours", 24u64);
    let nats = NatsServer::start().await;
    // `--reuse-db URL`: measure over a database an earlier run kept (`--keep-db`), migrated
    // by this binary's startup, instead of building the history again (a day takes minutes).
    let reuse = std::env::args().skip_while(|a| a != "--reuse-db").nth(1);
    let (db, store, bus) = match &reuse {
        None => {
            let (db, store, bus) = build_history(&nats, hours).await;
            (Some(db), store, bus)
        }
        Some(url) => {
            let store = PgStore::connect(url, PgStoreConfig::default())
                .await
                .expect("store");
            store.migrate().await.expect("migrate");
            let bus = bus_with_stream(NatsBusConfig {
                url: nats.url(),
                ..NatsBusConfig::default()
            })
            .await;
            println!(
                "cold start bench over the kept database {url}: {} rows; load {}",
                store.row_counts().await.expect("rows").total(),
                load_average()
            );
            (None, store, bus)
        }
    };
    let large = measure(&bus, &store).await;
    // The same start over a control log grown to `--control-log` events (issue 21: steps 4
    // and 6 bounded, not growing with the log). Only over a history this run built.
    let control_log = arg("--control-log", 1_000_000usize);
    let grown = match &db {
        Some(db) => {
            let before = control_event_count(&db.url).await;
            let cycles = control_log.saturating_sub(before).div_ceil(4 * WRITABLE);
            let started = Instant::now();
            let lease = acquire_free(&store).await;
            write_command_log(&store, lease.epoch(), &derived_fleet(), cycles, SystemClock.now()).await;
            lease.release().await.expect("release");
            let after = control_event_count(&db.url).await;
            println!(
                "control log grown from {before} to {after} events ({cycles} cycles per writable point) in {:.0} s; load {}",
                started.elapsed().as_secs_f64(),
                load_average()
            );
            analyze_control_log(&db.url).await;
            Some((before, after, measure(&bus, &store).await))
        }
        None => None,
    };

    // `--rules N` (issue 22): the same start again with N rules on the writable points
    // (`shared/rules_1000.rs`, every fourth with a `for_s` of RULE_FOR_S), stored as a registry
    // version of its own: restart step 8 (`warmup`) reads each input's committed rows over its
    // readers' longest `for_s` plus one freshness and replays them through the rules.
    let rules = arg("--rules", 0usize);
    let with_rules = if rules > 0 {
        let mut descriptors = derived_fleet();
        let added = rules_1000::add_rules(&mut descriptors, rules, RULE_FOR_S);
        assert_eq!(added, rules, "at most one rule per writable point ({WRITABLE})");
        store
            .store_registry(&canonical::snapshot("bench-rules", &descriptors))
            .await
            .expect("the registry with rules");
        Some(measure(&bus, &store).await)
    } else {
        None
    };

    // The same, for the 59-point sample registry, in the same run.
    let (_db_small, store_small, bus_small) = {
        let nats_small = &nats;
        let (db, store, _) = setup(nats_small).await;
        // A separate stream would collide on the name; reuse the bus, whose consumer is free.
        (db, store, bus.clone())
    };
    sentinel_runtime::registry_dir::load_dir(&store_small, &traffic::sample_registry_dir())
        .await
        .expect("sample registry");
    let small = measure(&bus_small, &store_small).await;

    println!(
        "  {:<28} {:>12} {:>10} {:>10} {:>10}   {:>14}",
        "step", "median ms", "min ms", "max ms", "first ms", "59 points (ms)"
    );
    let mut total_large = 0;
    let mut total_small = 0;
    for ((step, us), (_, small_us)) in large.iter().zip(&small) {
        let (m, s) = (median(us), median(small_us));
        total_large += m;
        total_small += s;
        println!(
            "  {step:<28} {:>12.2} {:>10.2} {:>10.2} {:>10.2}   {:>14.2}",
            m as f64 / 1e3,
            *us.iter().min().expect("rounds") as f64 / 1e3,
            *us.iter().max().expect("rounds") as f64 / 1e3,
            us[0] as f64 / 1e3,
            s as f64 / 1e3
        );
    }
    println!(
        "RESULT cold start, sum of step medians: {:.1} ms for {POINTS} points; {:.1} ms for the 59-point sample registry",
        total_large as f64 / 1e3,
        total_small as f64 / 1e3
    );
    if let Some((before, after, grown)) = &grown {
        println!(
            "  {:<28} {:>22} {:>22}",
            "step (median, min-max ms)",
            format!("{before} events"),
            format!("{after} events")
        );
        for ((step, us), (_, grown_us)) in large.iter().zip(grown) {
            let span = |us: &[u64]| {
                format!(
                    "{:.2} ({:.2}-{:.2})",
                    median(us) as f64 / 1e3,
                    *us.iter().min().expect("rounds") as f64 / 1e3,
                    *us.iter().max().expect("rounds") as f64 / 1e3
                )
            };
            println!("  {step:<28} {:>22} {:>22}", span(us), span(grown_us));
        }
        let steps_4_6 = |steps: &[(String, Vec<u64>)]| -> u64 {
            steps
                .iter()
                .filter(|(step, _)| {
                    matches!(
                        step.as_str(),
                        "replay_control_events" | "restore_desired" | "rehydrate_timers"
                    )
                })
                .map(|(_, us)| median(us))
                .sum()
        };
        println!(
            "RESULT cold start steps 4 and 6 (replay_control_events + restore_desired + rehydrate_timers): {:.1} ms over {before} control events, {:.1} ms over {after}",
            steps_4_6(&large) as f64 / 1e3,
            steps_4_6(grown) as f64 / 1e3
        );
    }
    if let Some(with_rules) = &with_rules {
        println!(
            "  {:<28} {:>22} {:>22}",
            "step (median, min-max ms)",
            "no rules",
            format!("{rules} rules")
        );
        let span = |us: &[u64]| {
            format!(
                "{:.2} ({:.2}-{:.2})",
                median(us) as f64 / 1e3,
                *us.iter().min().expect("rounds") as f64 / 1e3,
                *us.iter().max().expect("rounds") as f64 / 1e3
            )
        };
        // Compared with the start just before it without rules: over the grown control log when
        // there is one (the rules' start runs over that log too).
        let without = grown.as_ref().map_or(&large, |(_, _, grown)| grown);
        for ((step, us), (_, rules_us)) in without.iter().zip(with_rules) {
            println!("  {step:<28} {:>22} {:>22}", span(us), span(rules_us));
        }
        let step_of = |steps: &[(String, Vec<u64>)], name: &str| -> u64 {
            steps
                .iter()
                .find(|(s, _)| s == name)
                .map_or(0, |(_, us)| median(us))
        };
        let sum = |steps: &[(String, Vec<u64>)]| -> u64 { steps.iter().map(|(_, us)| median(us)).sum() };
        println!(
            "RESULT cold start step 8 (warmup: the rules' inputs' rows read and replayed): {:.1} ms with {rules} rules, \
             {:.1} ms without; whole start (sum of step medians) {:.1} ms with, {:.1} ms without",
            step_of(with_rules, "warmup") as f64 / 1e3,
            step_of(without, "warmup") as f64 / 1e3,
            sum(with_rules) as f64 / 1e3,
            sum(without) as f64 / 1e3
        );
    }
    println!("load after: {}", load_average());
    if let Some(db) = db
        && flag("--keep-db")
    {
        println!("kept database: {}", db.url);
        std::mem::forget(db);
    }
}
