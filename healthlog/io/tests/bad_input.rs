//! Bad input (issue 10 "Bad input"): malformed JSON, a body over the size limit, unknown
//! sections, dates that do not parse, a database from a newer binary. Each gives a clear
//! message and a journal status; nothing archived is lost; nothing partial is written.

mod common;

use std::process::Command;

use common::{Env, T0, body, body_with};
use healthlog::fold::DeliveryResult;
use healthlog::journal;
use healthlog::store::sqlite::support;
use healthlog_core::limits::BODY_BYTES_MAX;

async fn row(env: &Env, id: i64) -> healthlog::store::DeliveryRow {
    env.store
        .deliveries(None)
        .await
        .expect("rows")
        .into_iter()
        .find(|r| r.id == id)
        .expect("row")
}

fn archived_files(env: &Env) -> usize {
    walk(env.archive.root())
}

fn walk(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| if e.path().is_dir() { walk(&e.path()) } else { 1 })
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn malformed_json_fails_clearly_and_its_body_stays_archived() {
    let env = Env::new().await;
    for (text, expect) in [
        (&b"{\"data\": {\"metrics\": ["[..], "not valid JSON"),
        (&b"\xff\xfe garbage"[..], "not valid JSON"),
        (&b"{\"metrics\": []}"[..], "no `data` object"),
        (
            &b"{\"data\": {\"metrics\": {\"name\": 1}}}"[..],
            "does not have the HAE shape",
        ),
        (
            &b"{\"data\": {\"metrics\": [{\"name\": \"hr\", \"data\": [7]}]}}"[..],
            "is not a JSON object",
        ),
    ] {
        let j = journal::ingest_body(&env.store, &env.archive, "minute", text, 1)
            .await
            .expect("journals");
        let r = env.fold_result(j.id).await;
        let DeliveryResult::Failed { error, .. } = &r else {
            panic!("{r:?}")
        };
        assert!(error.contains(expect), "{error}");
        let row = row(&env, j.id).await;
        assert_eq!(
            (row.status.as_str(), row.error.as_deref()),
            ("failed", Some(error.as_str()))
        );
        let sha = row.body_sha256.expect("archived");
        assert_eq!(
            env.archive.get(&sha).expect("the body is still there"),
            text,
            "nothing archived is lost"
        );
    }
    assert_eq!(env.store.object_count().await.expect("count"), 0);
}

#[tokio::test]
async fn a_body_over_the_size_limit_is_refused_and_journaled() {
    let env = Env::new().await;
    let path = env.dir.path().join("huge.json");
    let file = std::fs::File::create(&path).expect("creates");
    file.set_len(BODY_BYTES_MAX + 1)
        .expect("sparse file over the limit");
    let j = journal::ingest_file(&env.store, &env.archive, "minute", &path, 1)
        .await
        .expect("journals the refusal");
    let reason = j.refused.expect("refused");
    assert!(reason.contains("over the limit"), "{reason}");
    let row = row(&env, j.id).await;
    assert_eq!(row.status, "failed");
    assert_eq!(row.body_sha256, None);
    assert_eq!(row.body_bytes, BODY_BYTES_MAX + 1);
    assert_eq!(archived_files(&env), 0, "an oversized body is never archived");
    // Folding skips it: it is not pending, and it wrote nothing.
    let (summary, _) = healthlog::fold::fold_pending(
        &env.store,
        &env.archive,
        &env.options,
        &indicatif::ProgressBar::hidden(),
    )
    .await
    .expect("folds");
    assert_eq!(summary.deliveries, 0);
}

#[tokio::test]
async fn unknown_sections_are_named_and_the_delivery_is_partial() {
    let env = Env::new().await;
    let text = format!(
        r#"{{"meta":{{"v":2}},"data":{{"metrics":[{{"name":"step_count","units":"count","data":[{{"date":"{T0}","qty":3}}]}}],"visionRx":[{{"voltage":[1,2]}}],"hearing":[]}}}}"#
    );
    let r = env.deliver("minute", &text).await;
    assert_eq!(r.status(), "partial");
    let row = row(&env, r.id()).await;
    assert_eq!(
        row.uncovered,
        Some(vec![
            "hearing".to_string(),
            "meta".to_string(),
            "visionRx".to_string()
        ])
    );
    assert_eq!(env.store.object_count().await.expect("count"), 1);
}

#[tokio::test]
async fn dates_that_do_not_parse_fail_the_whole_delivery() {
    let env = Env::new().await;
    let good = format!(r#"{{"date":"{T0}","qty":3}}"#);
    for (bad, field) in [
        (r#"{"date":"2026-02-30 10:00:00 +0000","qty":1}"#, "`date`"),
        (r#"{"date":1767607200,"qty":1}"#, "`date`"),
        (r#"{"qty":1}"#, "`date`"),
        (
            r#"{"date":"2026-01-05 10:00:00 +0000","start":"soon","qty":1}"#,
            "`start`",
        ),
        (
            r#"{"date":"2026-01-05 10:00:00 +0000","end":"2026-01-05 09:00:00 +0000","qty":1}"#,
            "ends before it starts",
        ),
    ] {
        let r = env
            .deliver(
                "minute",
                &body_with(
                    &[
                        ("step_count", "count", &[&good]),
                        ("active_energy", "kcal", &[bad]),
                    ],
                    r#","visionRx":[]"#,
                ),
            )
            .await;
        let DeliveryResult::Failed { error, .. } = &r else {
            panic!("{r:?}")
        };
        assert!(
            error.contains("active_energy") && error.contains(field),
            "{error}"
        );
        assert_eq!(
            row(&env, r.id()).await.uncovered,
            Some(vec!["visionRx".to_string()])
        );
    }
    assert_eq!(
        env.store.object_count().await.expect("count"),
        0,
        "nothing partial is written"
    );
    // The same points in a good body fold: the failure was the body's, not the store's.
    assert_eq!(
        env.deliver("minute", &body(&[("step_count", "count", &[&good])]))
            .await
            .status(),
        "parsed"
    );
}

fn healthlog(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_healthlog"))
        .args(args)
        .env("HEALTHLOG_DB", dir.join("h.db"))
        .env("HEALTHLOG_ARCHIVE", dir.join("archive"))
        .env("HEALTHLOG_LOG", "warn")
        .output()
        .expect("runs the binary")
}

#[tokio::test]
async fn a_database_from_a_newer_binary_is_refused_by_every_command() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sample = dir.path().join("sample.json");
    std::fs::write(
        &sample,
        body(&[("step_count", "count", &[&format!(r#"{{"date":"{T0}","qty":3}}"#)])]),
    )
    .expect("writes");
    support::stamp_schema_version(&dir.path().join("h.db"), Some(42))
        .await
        .expect("stamps");
    let sample_arg = sample.to_str().expect("utf-8 path");
    for args in [
        vec!["migrate"],
        vec!["ingest", "--layer", "minute", sample_arg],
        vec!["fold"],
        vec!["fingerprint"],
        vec!["deliveries"],
        vec!["catalog", "--metric", "step_count"],
    ] {
        let out = healthlog(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(3), "{args:?}: {stderr}");
        assert!(
            stderr.contains("42") && stderr.contains("binary's 2"),
            "{args:?}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("archive").exists(),
        "nothing was archived or journaled"
    );
    let (version, tables) = support::inspect(&dir.path().join("h.db"))
        .await
        .expect("inspects");
    assert_eq!((version, tables.len()), (42, 1), "no migration ran");
}

#[test]
fn the_binary_samples_ingests_rebuilds_and_agrees() {
    let dir = tempfile::tempdir().expect("temp dir");
    let p = dir.path();
    let out = healthlog(
        p,
        &[
            "sample",
            "--seed",
            "3",
            "--days",
            "7",
            "--out",
            p.join("corpus").to_str().expect("utf-8"),
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut minute: Vec<String> = std::fs::read_dir(p.join("corpus/minute"))
        .expect("corpus")
        .map(|e| e.expect("entry").path().to_string_lossy().into_owned())
        .collect();
    minute.sort();
    let mut args = vec!["--json", "ingest", "--layer", "minute"];
    args.extend(minute.iter().map(String::as_str));
    let out = healthlog(p, &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(lines.len(), minute.len());
    assert!(lines.iter().all(|l| l["result"]["outcome"] == "folded"));
    let fp = |args: &[&str]| -> String {
        let out = healthlog(p, args);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        v["fingerprint"].as_str().expect("fingerprint").to_string()
    };
    let live = fp(&["--json", "fingerprint"]);
    let rebuilt_db = p.join("rebuilt.db");
    let out = healthlog(
        p,
        &["--json", "rebuild", "--into", rebuilt_db.to_str().expect("utf-8")],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .expect("output")
        .to_string();
    let v: serde_json::Value = serde_json::from_str(&last).expect("json");
    assert_eq!(v["fingerprint"].as_str(), Some(live.as_str()));
    let out = healthlog(p, &["--json", "deliveries", "--status", "partial"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert!(!rows.is_empty() && rows.iter().all(|r| r["status"] == "partial"));
    let out = healthlog(p, &["deliveries", "--status", "sideways"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown parse status"));
    let out = healthlog(p, &["ingest", "--layer", "Minute Layer", &minute[0]]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not 1..=32 bytes of [a-z0-9_-]"));
    let out = healthlog(p, &["--json", "catalog", "--metric", "heart_rate"]);
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(rows.len(), 1);
}
