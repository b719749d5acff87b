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
fn child(db: &str, archive: &str) {
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
        assert_eq!(summary.totals.entities_written, 2, "both workouts written");
        println!("{} {} {fold_ms}", store.last_lock_hold_us(), vm_hwm_kib());
    });
}

fn measure(db: &std::path::Path, archive: &std::path::Path) -> (f64, f64, u64) {
    let out = Command::new(std::env::current_exe().expect("exe"))
        .args([
            "--child",
            db.to_str().expect("utf-8"),
            archive.to_str().expect("utf-8"),
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
        child(&args[i + 1], &args[i + 2]);
        return;
    }
    let rt = runtime();
    println!("| body | case | lock held | peak RSS of the fold process | peak / body | fold |");
    println!("| --- | --- | --- | --- | --- | --- |");
    for mib in [40usize, 63] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (db, arch) = (dir.path().join("h.db"), dir.path().join("archive"));
        let first = body(mib * MIB - 2048, 0);
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
        let (lock_ms, peak_mib, fold_ms) = measure(&db, &arch);
        println!(
            "| {size:.1} MiB | first write | {lock_ms:.0} ms | {peak_mib:.0} MiB | {:.2}× | {fold_ms} ms |",
            peak_mib / size
        );
        let richer = body(mib * MIB - 2048, 1);
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
        let (lock_ms, peak_mib, fold_ms) = measure(&db, &arch);
        println!(
            "| {size:.1} MiB | replacement | {lock_ms:.0} ms | {peak_mib:.0} MiB | {:.2}× | {fold_ms} ms |",
            peak_mib / size
        );
    }
    repair_cost(&rt);
}

/// What daily "previous 7 days" repairs add to the content-addressed archive.
fn repair_cost(rt: &tokio::runtime::Runtime) {
    let corpus = healthlog_core::sample::generate(20_261_130, 14);
    let week = corpus
        .deliveries
        .iter()
        .find(|d| d.name == "minute/007.json")
        .expect("the first week-long re-send");
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
    archive.put(&week.body).expect("puts");
    let once = size(archive.root());
    archive.put(&week.body).expect("puts");
    let twice = size(archive.root());
    let _ = rt;
    println!(
        "\nrepair path: one 7-day window of the sample corpus is {:.1} MiB; the same body sent again adds {} bytes \
         (content-addressed); a week of daily 7-day repairs, each window a new body, adds about {:.0} MiB",
        once as f64 / MIB as f64,
        twice - once,
        7.0 * once as f64 / MIB as f64
    );
}
