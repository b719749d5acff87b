//! The running core compacts closed days itself (issue 24 item 1): `sentinel run` over a real
//! nats-server and real PostgreSQL, with hot rows of old closed days in the database, compacts
//! each day of each class that holds rows — one `compaction` control event each, with the
//! core's epoch and principal `core:compaction` — while traffic published meanwhile is
//! committed; every old row reads back through the `observation` view exactly as before, now
//! from the compacted tables; a day too young is left hot, its minute rollups compacted alone
//! (`rollup_1m`, one day old is enough at the default rollup age). With `--no-compaction` the
//! same core compacts nothing.

use std::borrow::Cow;
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use sentinel_core::registry::PointIdx;
use sentinel_core::time::US_PER_DAY;
use sentinel_core::{
    Batch, BatchId, CanonicalValue, DeliveryTag, Micros, ObsKey, ObsRow, Quality, RetentionClass,
};
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::{Lease, Store};
use sentinel_tests::harness::{Env, committed, now, pg, spawn_core, terminate};
use sentinel_tests::traffic;

const ACK_WAIT_MS: u64 = 30_000;
const WAIT_S: u64 = 60;
const ROWS_PER_DAY: u64 = 240;

fn row(class: RetentionClass, at: Micros, seq: u64) -> ObsRow {
    ObsRow {
        point: PointIdx(0),
        point_id: Arc::from(["cc.old.a", "cc.old.b"][(seq % 2) as usize]),
        class,
        ingested_at: at,
        observed_at: Micros(at.0 - 90_000),
        device_time: seq.is_multiple_of(3).then_some(Micros(at.0 - 95_000)),
        value: Some(CanonicalValue::Num(seq as f64 * 0.25)),
        native_num: Some(seq as f64),
        native_text: None,
        unit_native: Some(Arc::from("degF")),
        quality: if seq.is_multiple_of(7) {
            Quality::Bad
        } else {
            Quality::Live
        },
        reason: seq.is_multiple_of(7).then_some(Cow::Borrowed("sensor_fault")),
        detail: None,
        changed: seq.is_multiple_of(4),
        registry_version: 1,
        key: ObsKey {
            driver_instance: Arc::from(format!("drv-old-{}", class.as_str())),
            source_epoch: 1,
            source_seq: seq,
        },
        skew_flagged: false,
        tag: DeliveryTag(seq),
    }
}

/// Hot rows on `days` (day offsets from today, negative) of `class`, committed under a lease
/// the test takes and releases before the core starts.
async fn seed(env: &Env, days: &[(RetentionClass, i64)]) -> u64 {
    let lease = env.store.acquire().await.expect("acquire");
    let today = now().day();
    let mut total = 0;
    for (i, &(class, offset)) in days.iter().enumerate() {
        let day = Micros((today + offset) * US_PER_DAY);
        let rows: Vec<ObsRow> = (1..=ROWS_PER_DAY)
            .map(|n| {
                row(
                    class,
                    Micros(day.0 + n as i64 * 300_000_000),
                    n + 10_000 * i as u64,
                )
            })
            .collect();
        total += rows.len() as u64;
        env.store
            .commit(Batch {
                id: BatchId(i as u64 + 1),
                epoch: lease.epoch(),
                rows,
                quarantine: vec![],
            })
            .await
            .expect("commit an old day");
    }
    // The youngest day's minute rollups, as a core's refresh leaves them (the older days'
    // are compacted with their rows).
    let youngest = days.iter().map(|&(_, offset)| offset).max().unwrap_or(0);
    let from = Micros((today + youngest) * US_PER_DAY);
    env.store
        .refresh_rollups(lease.epoch(), from, Micros(from.0 + US_PER_DAY))
        .await
        .expect("refresh the youngest day's rollups");
    lease.release().await.expect("release");
    total
}

/// Every row ingested before `before`, as the `observation` view gives it, in key order.
async fn rows_before(env: &Env, before: Micros) -> (i64, String) {
    let mut conn = pg(&env.db.url).await;
    sqlx::query_as(
        "SELECT count(*), coalesce(string_agg(o::text, E'\\n' ORDER BY o.driver_instance, o.source_seq), '') \
         FROM observation o WHERE o.ingested_at < to_timestamp($1::float8 / 1e6)",
    )
    .bind(before.0 as f64)
    .fetch_one(&mut conn)
    .await
    .expect("the observation view")
}

async fn compacted_rows(env: &Env) -> i64 {
    let mut conn = pg(&env.db.url).await;
    sqlx::query_scalar(
        "SELECT (SELECT count(*) FROM observation_measurement_compact) \
              + (SELECT count(*) FROM observation_state_compact) \
              + (SELECT count(*) FROM observation_diagnostic_compact)",
    )
    .fetch_one(&mut conn)
    .await
    .expect("compacted chunks")
}

async fn compaction_events(env: &Env) -> Vec<(i32, String, String)> {
    let mut conn = pg(&env.db.url).await;
    sqlx::query_as(
        "SELECT core_epoch, principal, payload::text FROM control_event \
         WHERE kind = 'compaction' ORDER BY seq",
    )
    .fetch_all(&mut conn)
    .await
    .expect("events")
}

/// `sentinel run`, its first compaction due at once, compacting after 3 days or (`age`
/// `None`) not at all.
fn core(env: &Env, age: Option<&str>) -> Child {
    let mut args = vec![
        "--self-points-interval-ms",
        "0",
        "--compaction-first-run-delay-ms",
        "0",
    ];
    match age {
        Some(days) => args.extend(["--compact-after-days", days]),
        None => args.push("--no-compaction"),
    }
    spawn_core(env, ACK_WAIT_MS, &args)
}

/// Publishes 300 messages of the sample mix from drivers at `source_epoch` (a second round
/// needs another, or its keys are the first round's) and waits until they are committed.
async fn publish_and_wait(env: &Env, source_epoch: u32, expected_before: u64) {
    let registry = traffic::sample_registry();
    let mix = traffic::generate(&registry, 300, source_epoch, now());
    let publisher = ObservationPublisher::connect(&env.nats.url(), PublisherConfig::default())
        .await
        .expect("publisher");
    publisher
        .publish_pipelined(
            mix.messages
                .iter()
                .map(|m| (m.subject.clone(), m.msg_id.clone(), m.payload.clone())),
            64,
        )
        .await
        .expect("publish");
    let expected = expected_before + mix.expected.accepted();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WAIT_S);
    while committed(&env.store).await < expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "ingest stalled: {} of {expected}",
            committed(&env.store).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_core_compacts_old_closed_days_while_ingest_continues() {
    let env = Env::start(ACK_WAIT_MS).await;
    use RetentionClass::*;
    // With --compact-after-days 3, days −10, −9 and −5 are old enough; −2 is not. The
    // diagnostic class keeps 7 days: its day −5 is kept and old enough.
    let seeded = seed(
        &env,
        &[
            (Measurement, -10),
            (Measurement, -9),
            (State, -10),
            (Diagnostic, -5),
            (Measurement, -2),
        ],
    )
    .await;
    let today = Micros(now().day() * US_PER_DAY);
    let young = Micros(today.0 - 2 * US_PER_DAY);
    let before = rows_before(&env, young).await;
    assert_eq!(before.0 as u64, 4 * ROWS_PER_DAY);
    let young_before = rows_before(&env, today).await;

    let child = core(&env, Some("3"));
    // Traffic meanwhile: ingest goes on beside the compactions.
    publish_and_wait(&env, 1, seeded).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WAIT_S);
    loop {
        let events = compaction_events(&env).await;
        if events.len() >= 5 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the core compacted {} day(s) within {WAIT_S} s: {events:?}",
            events.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A second round of traffic after the compactions: still committed.
    let so_far = committed(&env.store).await;
    publish_and_wait(&env, 2, so_far).await;
    terminate(child).await;

    let recorded_epoch: i32 = {
        let mut conn = pg(&env.db.url).await;
        sqlx::query_scalar("SELECT max(core_epoch) FROM control_event")
            .fetch_one(&mut conn)
            .await
            .expect("epoch")
    };
    let days: Vec<String> = compaction_events(&env)
        .await
        .into_iter()
        .map(|(epoch, principal, payload)| {
            assert_eq!(epoch, recorded_epoch, "the running core's epoch");
            assert_eq!(principal, "core:compaction");
            payload
        })
        .collect();
    assert_eq!(
        days.len(),
        5,
        "one event per day and class with rows, and the young day's minute rollups', no more: {days:?}"
    );
    let young_name = young.to_rfc3339()[..10].to_string();
    assert!(
        days.iter()
            .any(|p| p.contains("\"rollup_1m\"") && p.contains(&young_name)),
        "the young day's minute rollups compacted alone: {days:?}"
    );
    for (class, offset) in [
        ("measurement", -10),
        ("measurement", -9),
        ("state", -10),
        ("diagnostic", -5),
    ] {
        let name = Micros((today.day() + offset) * US_PER_DAY).to_rfc3339()[..10].to_string();
        assert!(
            days.iter()
                .any(|p| p.contains(&format!("\"{class}\"")) && p.contains(&name)),
            "{class} {name} compacted: {days:?}"
        );
    }
    assert!(
        compacted_rows(&env).await > 0,
        "the old days live in the compacted tables"
    );
    let after = rows_before(&env, young).await;
    assert_eq!(
        after, before,
        "every old row reads back unchanged through the view"
    );
    let young_after = rows_before(&env, today).await;
    assert_eq!(young_after, young_before, "the young day, unchanged and");
    let mut conn = pg(&env.db.url).await;
    let hot_young: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM observation_measurement WHERE ingested_at < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'",
    )
    .fetch_one(&mut conn)
    .await
    .expect("hot rows");
    assert_eq!(
        hot_young as u64, ROWS_PER_DAY,
        "...still hot: too young at 3 days"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_run_with_no_compaction_compacts_nothing() {
    let env = Env::start(ACK_WAIT_MS).await;
    let seeded = seed(&env, &[(RetentionClass::Measurement, -10)]).await;
    let child = core(&env, None);
    publish_and_wait(&env, 1, seeded).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    terminate(child).await;
    assert!(compaction_events(&env).await.is_empty());
    assert_eq!(compacted_rows(&env).await, 0);
}
