//! Issue 26, "partitions created ahead while the core runs": a running `sentinel run` makes
//! daily partitions ahead on a schedule, off the commit path, with a short lock timeout.
//!
//! Real PostgreSQL, real nats-server, the real binary. The core runs with partitions wanted six
//! days ahead (the store makes three at startup), so every run of its schedule has partitions
//! to make. While another session holds a lock on a parent table that conflicts with the DDL
//! (SHARE UPDATE EXCLUSIVE: inserts still go through), every run times out, is counted in
//! `sentinel_partitions_lock_timeouts_total` and is retried, and the core keeps committing
//! traffic. Once the lock goes, the next run makes the partitions, without a restart.

use std::time::Duration;

use sentinel_core::Micros;
use sentinel_core::time::US_PER_DAY;
use sentinel_driver::{ObservationPublisher, PublisherConfig};
use sentinel_ports::Store as _;
use sentinel_tests::harness::{Env, committed, now, pg, spawn_core, terminate};
use sentinel_tests::prometheus::{free_port, http_get};
use sentinel_tests::traffic;

const ACK_WAIT_MS: u64 = 30_000;
const WAIT_S: u64 = 60;

/// The value of an unlabelled series in the core's OpenMetrics text (`name{} 3`), if present.
async fn metric(authority: &str, name: &str) -> Option<f64> {
    let (status, body) = http_get(authority, "/metrics").await.ok()?;
    if status != 200 {
        return None;
    }
    body.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let rest = rest.strip_prefix("{}").unwrap_or(rest);
        rest.strip_prefix(' ')?.trim().parse().ok()
    })
}

async fn eventually_metric(authority: &str, name: &str, ok: impl Fn(f64) -> bool) -> f64 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WAIT_S);
    loop {
        let value = metric(authority, name).await;
        if let Some(v) = value
            && ok(v)
        {
            return v;
        }
        if tokio::time::Instant::now() >= deadline {
            let scrape = http_get(authority, "/metrics").await;
            panic!("{name} stayed at {value:?}; /metrics: {scrape:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_core_makes_partitions_ahead_and_a_held_lock_only_delays_them() {
    use sqlx::Connection as _;
    let env = Env::start(ACK_WAIT_MS).await;
    let today = Micros(now().0.div_euclid(US_PER_DAY) * US_PER_DAY);
    let day = |n: i64| Micros(today.0 + n * US_PER_DAY);

    // What a core makes at startup exists already, so its startup makes nothing and waits for
    // nothing; then another session holds a lock that conflicts with making a partition of
    // `observation_measurement` but not with inserting into it.
    let mut admin = pg(&env.db.url).await;
    sqlx::query("SELECT sentinel_ensure_partitions((now() AT TIME ZONE 'UTC')::date - 1, 5)")
        .execute(&mut admin)
        .await
        .expect("yesterday through today + 3");
    let until_before = env.store.partitions_created_until().await.expect("read");
    assert!(until_before < Some(day(6)), "{until_before:?}");
    let mut holder = admin.begin().await.expect("begin");
    sqlx::query("LOCK TABLE observation_measurement IN SHARE UPDATE EXCLUSIVE MODE")
        .execute(&mut *holder)
        .await
        .expect("lock the parent table");

    let port = free_port();
    let authority = format!("127.0.0.1:{port}");
    let core = spawn_core(
        &env,
        ACK_WAIT_MS,
        &[
            "--metrics-listen",
            &port.to_string(),
            "--self-points-interval-ms",
            "0",
            "--partitions-interval-ms",
            "300",
            "--partitions-days-ahead",
            "6",
            "--partitions-lock-timeout-ms",
            "50",
        ],
    );

    // Each run times out on the lock, is counted and retried; nothing is made meanwhile.
    eventually_metric(&authority, "sentinel_partitions_lock_timeouts_total", |v| {
        v >= 2.0
    })
    .await;

    // The core keeps committing: traffic published now lands while the lock is held.
    let registry = traffic::sample_registry();
    let mix = traffic::generate(&registry, 200, 1, now());
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
    let expected = mix.expected.accepted();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WAIT_S);
    while committed(&env.store).await < expected {
        assert!(
            tokio::time::Instant::now() < deadline,
            "commits stalled behind the partitions run: {} of {expected}",
            committed(&env.store).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let timeouts = eventually_metric(&authority, "sentinel_partitions_lock_timeouts_total", |v| {
        v >= 3.0
    })
    .await;
    assert_eq!(
        metric(&authority, "sentinel_partitions_created_total").await,
        Some(0.0),
        "nothing made while the lock is held"
    );
    assert_eq!(
        env.store.partitions_created_until().await.expect("read"),
        until_before,
        "the lock held every run off"
    );

    // The lock goes: the next run makes through today + 6, without a restart.
    holder.rollback().await.expect("release the lock");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(WAIT_S);
    loop {
        let until = env.store.partitions_created_until().await.expect("read");
        if until == Some(day(7)) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "partitions never made ahead: they reach {until:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        eventually_metric(&authority, "sentinel_partitions_created_total", |v| v >= 9.0).await >= 9.0,
        "at least today + 4 … + 6 in three raw tables"
    );
    assert!(
        metric(&authority, "sentinel_partitions_lock_timeouts_total")
            .await
            .is_some_and(|v| v >= timeouts),
        "a lock timeout is counted, never fatal"
    );
    terminate(core).await;
}
