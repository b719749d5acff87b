//! Reprocess performed by the running core, asked over the bus by the `sentinel` binary (issue
//! 9 item 3; ingest spec, "Reprocess": a single-writer operation, "performed by the core that
//! holds the lock (asked over the bus, as command requests are)").
//!
//! A real `sentinel run` core holds the lock over registry version 2 (the corrected scale);
//! rows written earlier under version 1 carry the wrong one. While the core ingests live
//! readings published before and during the run, `sentinel reprocess` (which cannot take the
//! lock) asks the core: the dry run answers with the plan; the real run fixes the rows under
//! the core's epoch (its `reprocess` control event carries it), every live message still commits
//! exactly once, no transition is published for a historical row, and the core's projection
//! ends on the newest row.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use sentinel_core::wire::EnvelopeOut;
use sentinel_core::{Batch, BatchId, Micros, ObsRow};
use sentinel_ports::{Bus, Lease, Store};
use sentinel_tests::bin::{sentinel_bin, workspace_root};
use sentinel_tests::harness::{Env, Transitions, now, pg, terminate, wait_ready};
use sentinel_tests::reprocess::{self as rp, INSTANCE, PRESSURE, Sent};

const S: i64 = 1_000_000;
/// Historical rows (source epoch 1), written under version 1.
/// Enough, in chunks of [`CHUNK_ROWS`], that the run lasts while the test asks again.
const HISTORICAL: u64 = 3_000;
const CHUNK_ROWS: &str = "5";
/// Live readings (source epoch 2) published before the request, and during it.
const LIVE_BEFORE: u64 = 50;
const LIVE_DURING: u64 = 100;

fn sentinel(env: &Env, args: &[&str]) -> Output {
    Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args(args)
        .env("SENTINEL_DATABASE_URL", &env.roles.writer_url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env_remove("SENTINEL_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run sentinel")
}

async fn publish_live(env: &Env, seqs: std::ops::Range<u64>) {
    for seq in seqs {
        // Current readings in kPa, observed now.
        let e = EnvelopeOut::new(
            PRESSURE,
            INSTANCE,
            2,
            seq,
            now(),
            serde_json::json!(100.0 + seq as f64),
        );
        env.bus
            .publish_observation(
                format!("obs.rp-host.{INSTANCE}"),
                e.msg_id(),
                bytes::Bytes::from(e.to_bytes()),
            )
            .await
            .expect("publish");
    }
}

async fn rows_of(env: &Env, source_epoch: i64) -> i64 {
    let mut conn = pg(&env.db.url).await;
    sqlx::query_scalar("SELECT count(*) FROM observation WHERE source_epoch = $1")
        .bind(source_epoch)
        .fetch_one(&mut conn)
        .await
        .expect("count")
}

/// Historical rows the reprocess has already rewritten under version 2.
async fn historical_fixed(env: &Env) -> i64 {
    let mut conn = pg(&env.db.url).await;
    sqlx::query_scalar("SELECT count(*) FROM observation WHERE source_epoch = 1 AND registry_version = 2")
        .fetch_one(&mut conn)
        .await
        .expect("count fixed rows")
}

async fn wait_rows(env: &Env, source_epoch: i64, n: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while rows_of(env, source_epoch).await < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "rows of source epoch {source_epoch} never reached {n}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_core_asked_over_the_bus_reprocesses_under_its_epoch_while_ingest_goes_on() {
    let env = Env::start(5_000).await;
    // History under version 1 (the wrong scale: Pa for what was kPa).
    let t = now();
    let lease = env.store.acquire().await.expect("acquire");
    let v1 = rp::load(&env.store, 1).await;
    let rows: Vec<ObsRow> = (1..=HISTORICAL)
        .map(|seq| {
            let observed_at = Micros(t.0 - 3_600 * S + seq as i64 * S);
            rp::row(
                &v1,
                &Sent {
                    point: PRESSURE,
                    seq,
                    ingested_at: Micros(observed_at.0 + 1),
                    observed_at,
                    native: Some(seq as f64),
                    asserted: None,
                    reason: None,
                },
            )
        })
        .collect();
    env.store
        .commit(Batch {
            id: BatchId(1),
            epoch: lease.epoch(),
            rows,
            quarantine: vec![],
        })
        .await
        .expect("commit history");
    lease.release().await.expect("release");

    // The core runs version 2 (the corrected scale), loaded from a folder.
    let dir = std::env::temp_dir().join(format!("sentinel-reprocess-bus-{}-{}", std::process::id(), t.0));
    rp::write_dir(2, &dir);
    let transitions = Transitions::subscribe(&env.nats.url()).await;
    let mut core = Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args([
            "run",
            "--registry",
            dir.to_str().expect("utf-8"),
            "--ack-wait-ms",
            "5000",
        ])
        .env("SENTINEL_DATABASE_URL", &env.roles.writer_url)
        .env("SENTINEL_NATS_URL", env.nats.url())
        .env("SENTINEL_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn sentinel run");
    wait_ready(&env.store, 2).await;
    publish_live(&env, 1..LIVE_BEFORE + 1).await;
    wait_rows(&env, 2, LIVE_BEFORE as i64).await;

    let from = Micros(t.0 - 2 * 3_600 * S).to_rfc3339();
    let reprocess_args = [
        "reprocess",
        "--point-glob",
        "rp.boiler.pres*",
        "--from",
        &from,
        "--registry-version",
        "current",
        "--json",
    ];

    // The dry run is the core's too: the plan, nothing changed.
    let mut dry = reprocess_args.to_vec();
    dry.push("--dry-run");
    let out = sentinel(&env, &dry);
    assert!(
        out.status.success(),
        "dry run: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("plan JSON");
    assert_eq!(plan["registry_version"], 2);
    assert_eq!(plan["rows"], HISTORICAL + LIVE_BEFORE, "{plan}");
    assert_eq!(plan["refused"], false);

    // The real run, with live readings published while it goes on.
    let env_url = env.roles.writer_url.clone();
    let nats_url = env.nats.url();
    let args: Vec<String> = reprocess_args.iter().map(|s| s.to_string()).collect();
    let mut cli = Command::new(sentinel_bin())
        .current_dir(workspace_root())
        .args(&args)
        .args(["--chunk-rows", CHUNK_ROWS])
        .env("SENTINEL_DATABASE_URL", env_url)
        .env("SENTINEL_NATS_URL", nats_url)
        .env_remove("SENTINEL_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sentinel reprocess");
    publish_live(&env, LIVE_BEFORE + 1..LIVE_BEFORE + LIVE_DURING + 1).await;
    // The second request goes only once the real run is under way (its first chunk is in the
    // log): sent earlier, on a loaded machine it can reach the core before the real run's own
    // request, be admitted itself, and make the real run the one refused `busy`.
    let started = tokio::time::Instant::now();
    while historical_fixed(&env).await == 0 && cli.try_wait().expect("try_wait").is_none() {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the real run wrote no chunk within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // While it runs, the core's loop still answers: a second request is refused `busy` at once
    // (a loop blocked on the run would only answer it afterwards, and admit it).
    let mut busy_seen = false;
    while cli.try_wait().expect("try_wait").is_none() {
        let out = sentinel(&env, &dry);
        if out.status.code() == Some(12) {
            let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("reply JSON");
            assert_eq!(reply["outcome"], "busy", "{reply}");
            busy_seen = true;
            break;
        }
    }
    let out = tokio::task::spawn_blocking(move || cli.wait_with_output().expect("reprocess output"))
        .await
        .expect("join");
    assert!(
        out.status.success(),
        "reprocess: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(busy_seen, "a second request during the run was answered busy");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("report JSON");
    eprintln!("the core's report: {report}");
    assert_eq!(report["epoch"], 2, "under the running core's epoch: {report}");
    assert_eq!(report["registry_version"], 2);

    // Every live message commits exactly once.
    wait_rows(&env, 2, (LIVE_BEFORE + LIVE_DURING) as i64).await;
    let mut conn = pg(&env.db.url).await;
    let (live, distinct): (i64, i64) =
        sqlx::query_as("SELECT count(*), count(DISTINCT source_seq) FROM observation WHERE source_epoch = 2")
            .fetch_one(&mut conn)
            .await
            .expect("live rows");
    assert_eq!(
        (live, distinct),
        (
            (LIVE_BEFORE + LIVE_DURING) as i64,
            (LIVE_BEFORE + LIVE_DURING) as i64
        )
    );

    // The history is fixed: kPa as reported, under version 2; native untouched.
    let wrong: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM observation WHERE source_epoch = 1 \
         AND (registry_version <> 2 OR abs(value_num - native_num) > 1e-9)",
    )
    .fetch_one(&mut conn)
    .await
    .expect("fixed rows");
    assert_eq!(wrong, 0, "every historical row recomputed under version 2");

    // One reprocess control event, stamped with the core's epoch.
    let events: Vec<(i64, serde_json::Value)> =
        sqlx::query_as("SELECT core_epoch::bigint, payload FROM control_event WHERE kind = 'reprocess'")
            .fetch_all(&mut conn)
            .await
            .expect("control events");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, 2);

    // No transition for a historical row; none published twice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    transitions.assert_at_most_once();
    let keys = transitions.keys();
    assert!(
        keys.keys().all(|(_, source_epoch, _)| *source_epoch == 2),
        "no transition for historical rows (source epoch 1): {keys:?}"
    );
    assert!(!keys.is_empty(), "the live readings raised transitions");

    // Another version than the core runs: refused by the core, exit 12, nothing changed.
    let mut other = reprocess_args.to_vec();
    other[6] = "1";
    let out = sentinel(&env, &other);
    assert_eq!(
        out.status.code(),
        Some(12),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reply: serde_json::Value = serde_json::from_slice(&out.stdout).expect("reply JSON");
    assert_eq!(reply["outcome"], "version", "{reply}");

    assert!(
        core.try_wait().expect("try_wait").is_none(),
        "the core ran throughout"
    );
    terminate(core).await;
    // Its projection ends on the newest row (checkpointed at the orderly stop).
    let seq: i64 = sqlx::query_scalar("SELECT source_seq FROM point_state WHERE point_id = $1")
        .bind(PRESSURE)
        .fetch_one(&mut conn)
        .await
        .expect("point_state");
    assert_eq!(seq as u64, LIVE_BEFORE + LIVE_DURING, "the newest row wins");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The lock is held but no core listens on the bus: a clear error, exit 13, nothing asked twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_with_no_core_on_the_bus_is_a_clear_error() {
    let env = Env::start(5_000).await;
    rp::load(&env.store, 1).await;
    let lease = env.store.acquire().await.expect("acquire");
    let out = sentinel(
        &env,
        &[
            "reprocess",
            "--point-glob",
            "rp.*",
            "--from",
            "2026-01-01",
            "--registry-version",
            "current",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(13),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("did not answer"), "{stderr}");
    lease.release().await.expect("release");
}
