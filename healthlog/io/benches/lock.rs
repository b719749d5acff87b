//! The lock, bounded (issue 23 item 6; BENCHMARKS.md "healthlog: the write lock and peak
//! memory at 40 and 63 MiB"), a plain binary (`harness = false`).
//!
//! For bodies of 40 MiB and 63 MiB, each of two workouts with a long route (an entity is at
//! most `ENTITY_BYTES_MAX`, 32 MiB), it measures a first write and the replacement of the
//! stored versions by a strictly richer one (one more route point): how long the fold held
//! SQLite's write lock (`BEGIN IMMEDIATE` granted → `COMMIT` done, `Store::last_lock_hold_us`)
//! and the fold process's peak resident memory (`VmHWM`). The parent prepares the store and
//! archive on disk; each fold runs in a child process of this binary, so its peak is its own.
//!
//! `cargo bench -p healthlog --bench lock`. Also prints what a week of daily "previous 7
//! days" repair exports adds to the archive (README "The repair path").

#![allow(clippy::disallowed_methods)] // a benchmark measures wall-clock time

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use healthlog::archive::Archive;
use healthlog::fold::{self, FoldOptions};
use healthlog::journal;
use healthlog::store::{Store, StoreOptions};

const MIB: usize = 1024 * 1024;

fn route_point(i: usize) -> String {
    format!(
        r#"{{"latitude":{:.6},"longitude":{:.6},"altitude":{:.1},"course":181.2,"courseAccuracy":5.1,"horizontalAccuracy":4.2,"verticalAccuracy":3.3,"timestamp":"2024-09-21 07:57:00 +1000","speed":1.42,"speedAccuracy":0.3}}"#,
        48.137154 + i as f64 * 1e-6,
        11.576124 + i as f64 * 1e-6,
        520.0 + (i % 100) as f64
    )
}

/// A body of about `bytes` with two workouts; `extra` more route points in each (a richer version).
fn body(bytes: usize, extra: usize) -> Vec<u8> {
    let per_point = route_point(0).len() + 1;
    let points = bytes / 2 / per_point;
    let mut out = String::with_capacity(bytes + 4096);
    out.push_str(r#"{"data":{"workouts":["#);
    for w in 0..2 {
        if w > 0 {
            out.push(',');
        }
        out.push_str(&format!(
            r#"{{"id":"bench-{w}","name":"Outdoor Walk","start":"2024-09-21 07:57:00 +1000","end":"2024-09-21 09:57:00 +1000","duration":7200,"route":["#
        ));
        for i in 0..points + extra {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&route_point(i));
        }
        out.push_str("]}");
    }
    out.push_str("]}}");
    out.into_bytes()
}

/// A body of about `bytes` of metric points: four metrics, one point a second from
/// 2024-09-01, 35–50 hourly objects each. `richer` adds a `context` key to every point (the
/// same coordinates, strictly more content: every object is rewritten).
fn metrics_body(bytes: usize, richer: bool) -> Vec<u8> {
    let point = |s: usize, richer: bool| {
        let (day, rest) = (1 + s / 86_400, s % 86_400);
        let (h, m, sec) = (rest / 3600, rest % 3600 / 60, rest % 60);
        let context = if richer { r#","context":"Active""# } else { "" };
        format!(
            r#"{{"date":"2024-09-{day:02} {h:02}:{m:02}:{sec:02} +0000","qty":{},"source":"Apple Watch"{context}}}"#,
            60 + s % 90
        )
    };
    // Sized by the richer form, so both bodies hold the same coordinates.
    let (mut per_metric, mut metric_bytes) = (0, 0);
    while metric_bytes + point(per_metric, true).len() + 1 < bytes / 4 - 256 {
        metric_bytes += point(per_metric, true).len() + 1;
        per_metric += 1;
    }
    let point = |s: usize| point(s, richer);
    let mut out = String::with_capacity(bytes + 4096);
    out.push_str(r#"{"data":{"metrics":["#);
    for m in 0..4 {
        if m > 0 {
            out.push(',');
        }
        out.push_str(&format!(r#"{{"name":"bench_{m}","units":"count/min","data":["#));
        for s in 0..per_metric {
            if s > 0 {
                out.push(',');
            }
            out.push_str(&point(s));
        }
        out.push_str("]}");
    }
    out.push_str("]}}");
    out.into_bytes()
}

fn vm_hwm_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// Child: fold everything pending in the store at `db`, print `lock_us peak_kib fold_ms`.
fn child(db: &str, archive: &str, kind: &str) {
    let rt = runtime();
    rt.block_on(async {
        let (store, _) = Store::open_migrating(db.as_ref(), StoreOptions::default())
            .await
            .expect("opens");
        let archive = Archive::open(archive.as_ref()).expect("archive");
        let options = FoldOptions::new(Arc::new(|| 2));
        let t = Instant::now();
        let (summary, _) = fold::fold_pending(&store, &archive, &options, &indicatif::ProgressBar::hidden())
            .await
            .expect("folds");
        let fold_ms = t.elapsed().as_millis();
        assert_eq!(summary.parsed, 1, "{summary:?}");
        if kind == "workouts" {
            assert_eq!(summary.totals.entities_written, 2, "both workouts written");
        } else {
            assert!(
                summary.totals.objects_written > 100,
                "every hour written: {summary:?}"
            );
        }
        println!("{} {} {fold_ms}", store.last_lock_hold_us(), vm_hwm_kib());
    });
}

fn measure(db: &std::path::Path, archive: &std::path::Path, kind: &str) -> (f64, f64, u64) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--child",
            db.to_str().expect("utf-8"),
            archive.to_str().expect("utf-8"),
            kind,
        ])
        .output()
        .expect("runs the child");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let v: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    (v[0] as f64 / 1e3, v[1] as f64 / 1024.0, v[2])
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--child") {
        child(&args[i + 1], &args[i + 2], &args[i + 3]);
        return;
    }
    let rt = runtime();
    println!("| body | case | lock held | peak RSS of the fold process | peak / body | fold |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for (kind, mib) in [
        ("workouts", 40usize),
        ("workouts", 63),
        ("metrics", 40),
        ("metrics", 63),
    ] {
        let make = |richer: bool| match kind {
            "workouts" => body(mib * MIB - 2048, usize::from(richer)),
            _ => metrics_body(mib * MIB - 2048, richer),
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, arch) = (dir.path().join("h.db"), dir.path().join("archive"));
        let first = make(false);
        let size = first.len() as f64 / MIB as f64;
        rt.block_on(async {
            let (store, _) = Store::open_migrating(&db, StoreOptions::default())
                .await
                .expect("opens");
            let archive = Archive::open(&arch).expect("archive");
            journal::ingest_body(&store, &archive, "minute", &first, 1)
                .await
                .expect("journals");
            store.close().await;
        });
        drop(first);
        let (lock_ms, peak_mib, fold_ms) = measure(&db, &arch, kind);
        println!(
            "| {size:.1} MiB of {kind} | first write | {lock_ms:.0} ms | {peak_mib:.0} MiB | {:.2}× | {fold_ms} ms |",
            peak_mib / size
        );
        let richer = make(true);
        rt.block_on(async {
            let (store, _) = Store::open_migrating(&db, StoreOptions::default())
                .await
                .expect("opens");
            let archive = Archive::open(&arch).expect("archive");
            journal::ingest_body(&store, &archive, "minute", &richer, 2)
                .await
                .expect("journals");
            store.close().await;
        });
        let size = richer.len() as f64 / MIB as f64;
        drop(richer);
        let (lock_ms, peak_mib, fold_ms) = measure(&db, &arch, kind);
        println!(
            "| {size:.1} MiB of {kind} | replacement | {lock_ms:.0} ms | {peak_mib:.0} MiB | {:.2}× | {fold_ms} ms |",
            peak_mib / size
        );
    }
    repair_cost();
}

/// What daily "previous 7 days" repairs add to the content-addressed archive, measured: the
/// daily deliveries of a 14-day sample corpus are combined into the seven windows a repair
/// automation would send on days 7..=13 (each the previous seven days, so each a new body),
/// and each is put into one archive; the same window sent twice is measured too.
fn repair_cost() {
    let corpus = healthlog_core::sample::generate(20_261_130, 14);
    // Daily deliveries only (a re-send creates no new object), in journal order.
    let daily: Vec<&[u8]> = corpus
        .deliveries
        .iter()
        .zip(&corpus.oracle.deliveries)
        .filter(|(d, o)| d.layer == "minute" && o.objects_new.is_some())
        .map(|(d, _)| d.body.as_slice())
        .collect();
    assert_eq!(daily.len(), 14, "one daily delivery per day");
    let window = |last_day: usize| -> Vec<u8> {
        let mut by_metric: std::collections::BTreeMap<String, (serde_json::Value, Vec<serde_json::Value>)> =
            std::collections::BTreeMap::new();
        for body in &daily[last_day - 6..=last_day] {
            let v: serde_json::Value = serde_json::from_slice(body).expect("a sample body is JSON");
            for m in v["data"]["metrics"].as_array().into_iter().flatten() {
                let name = m["name"].as_str().expect("named").to_string();
                let entry = by_metric
                    .entry(name)
                    .or_insert_with(|| (m["units"].clone(), Vec::new()));
                entry
                    .1
                    .extend(m["data"].as_array().into_iter().flatten().cloned());
            }
        }
        let metrics: Vec<serde_json::Value> = by_metric
            .into_iter()
            .map(|(name, (units, data))| serde_json::json!({"name": name, "units": units, "data": data}))
            .collect();
        serde_json::to_vec(&serde_json::json!({"data": {"metrics": metrics}})).expect("serialises")
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let archive = Archive::open(&dir.path().join("archive")).expect("archive");
    let size = |p: &std::path::Path| -> u64 {
        fn walk(p: &std::path::Path) -> u64 {
            std::fs::read_dir(p)
                .map(|rd| {
                    rd.filter_map(Result::ok)
                        .map(|e| {
                            if e.path().is_dir() {
                                walk(&e.path())
                            } else {
                                e.metadata().map(|m| m.len()).unwrap_or(0)
                            }
                        })
                        .sum()
                })
                .unwrap_or(0)
        }
        walk(p)
    };
    let first = window(6);
    archive.put(&first).expect("puts");
    let once = size(archive.root());
    archive.put(&first).expect("puts");
    let again = size(archive.root()) - once;
    let mut body_bytes = first.len() as u64;
    for last_day in 7..=12 {
        let w = window(last_day);
        body_bytes += w.len() as u64;
        archive.put(&w).expect("puts");
    }
    let week = size(archive.root());
    println!(
        "\nrepair path: seven daily 7-day windows (days 0-6 .. 6-12 of the sample corpus), {:.1} MiB of bodies, \
         add {:.1} MiB to the archive ({:.1} MiB per window on average); the same window sent again adds {again} bytes",
        body_bytes as f64 / MIB as f64,
        week as f64 / MIB as f64,
        week as f64 / 7.0 / MIB as f64,
    );
}
