//! healthlog benchmarks (BENCHMARKS.md "healthlog"), a plain binary (`harness = false`):
//!
//! 1. Fold throughput over the generated corpus (coordinates/s and points/s), beside a plain
//!    SQLite insert of the same final objects into an empty store, in the same run; and at full
//!    size, the live fingerprint against a rebuild, a rebuild from a shuffled journal, and a
//!    re-ingest that must write 0 objects.
//! 2. The catalog over a year of objects (260,000+) answered from the covering index, beside
//!    the same question answered by a full scan of the table.
//!
//! `cargo bench -p healthlog --bench fold` (defaults: `--days 92 --catalog-objects 262800`).

#![allow(clippy::disallowed_methods)] // a benchmark measures wall-clock time

use std::sync::Arc;
use std::time::{Duration, Instant};

use healthlog::archive::Archive;
use healthlog::fold::{self, FoldOptions};
use healthlog::journal;
use healthlog::store::sqlite::support;
use healthlog::store::{ObjectRow, Store, StoreOptions};
use healthlog_core::sample;

const SEED: u64 = 20_261_130;

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a number"))
        .unwrap_or(default)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; our own flags follow `--`.
    let days = arg("--days", 92) as u32;
    let catalog_objects = arg("--catalog-objects", 262_800);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        fold_throughput(days).await;
        if catalog_objects > 0 {
            catalog(catalog_objects).await;
        }
    });
}

async fn fold_throughput(days: u32) {
    let dir = tempfile::tempdir().expect("temp dir");
    let options = StoreOptions::default();
    let (store, _) = Store::open_migrating(&dir.path().join("live.db"), options)
        .await
        .expect("opens");
    let archive = Archive::open(&dir.path().join("archive")).expect("archive");
    let fold_options = FoldOptions::new(Arc::new(|| 0));
    let bar = indicatif::ProgressBar::hidden();

    let t = Instant::now();
    let corpus = sample::generate(SEED, days);
    let generated = t.elapsed();
    let bytes: usize = corpus.deliveries.iter().map(|d| d.body.len()).sum();
    let t = Instant::now();
    for d in &corpus.deliveries {
        journal::ingest_body(&store, &archive, d.layer, &d.body, 0)
            .await
            .expect("journals");
    }
    let journaled = t.elapsed();
    let t = Instant::now();
    let (summary, _) = fold::fold_pending(&store, &archive, &fold_options, &bar)
        .await
        .expect("folds");
    let folded = t.elapsed();
    assert_eq!(summary.failed + summary.left_pending, 0);
    let coords = corpus.oracle.coordinates as f64;
    let points = corpus.total_points() as f64;
    println!(
        "corpus: {days} days, {} deliveries, {:.1} MiB of bodies, {} coordinates, {} points (generated in {:.2} s)",
        corpus.deliveries.len(),
        bytes as f64 / 1_048_576.0,
        corpus.oracle.coordinates,
        corpus.total_points(),
        generated.as_secs_f64()
    );
    println!(
        "journal + archive (fsync per body): {:.2} s",
        journaled.as_secs_f64()
    );
    println!(
        "fold: {:.2} s = {:.0} coordinates/s, {:.0} points/s, {} objects written",
        folded.as_secs_f64(),
        coords / folded.as_secs_f64(),
        points / folded.as_secs_f64(),
        summary.totals.objects_written
    );

    // The same final objects, inserted plainly into an empty store in one transaction.
    let objects: Vec<ObjectRow> = store.all_objects().await.expect("objects");
    let (plain, _) = Store::open_migrating(&dir.path().join("plain.db"), options)
        .await
        .expect("opens");
    let t = Instant::now();
    support::insert_objects_plain(&plain, &objects)
        .await
        .expect("inserts");
    let inserted = t.elapsed();
    println!(
        "plain SQLite insert of the same {} objects: {:.2} s = {:.0} coordinates/s ({:.1}x the fold's time)",
        objects.len(),
        inserted.as_secs_f64(),
        coords / inserted.as_secs_f64(),
        folded.as_secs_f64() / inserted.as_secs_f64()
    );
    assert_eq!(
        plain.fingerprint().await.expect("fp"),
        store.fingerprint().await.expect("fp")
    );

    // Full-size convergence: rebuilt, rebuilt from a shuffled journal, re-ingested.
    let (live, n) = store.fingerprint().await.expect("fingerprint");
    let (rebuilt, _) = Store::open_migrating(&dir.path().join("rebuilt.db"), options)
        .await
        .expect("opens");
    let t = Instant::now();
    fold::rebuild_into(&store, &rebuilt, &archive, &fold_options, None, &bar)
        .await
        .expect("rebuilds");
    let rebuild_time = t.elapsed();
    let mut ids: Vec<i64> = store
        .journal(None)
        .await
        .expect("journal")
        .iter()
        .map(|e| e.id)
        .collect();
    let mut s = SEED;
    for i in (1..ids.len()).rev() {
        s = s
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ids.swap(i, (s >> 33) as usize % (i + 1));
    }
    let (shuffled, _) = Store::open_migrating(&dir.path().join("shuffled.db"), options)
        .await
        .expect("opens");
    fold::rebuild_into(&store, &shuffled, &archive, &fold_options, Some(&ids), &bar)
        .await
        .expect("rebuilds");
    for d in &corpus.deliveries {
        journal::ingest_body(&store, &archive, d.layer, &d.body, 1)
            .await
            .expect("journals");
    }
    let t = Instant::now();
    let (again, _) = fold::fold_pending(&store, &archive, &fold_options, &bar)
        .await
        .expect("refolds");
    let reingest_time = t.elapsed();
    let same = rebuilt.fingerprint().await.expect("fp").0 == live
        && shuffled.fingerprint().await.expect("fp").0 == live
        && store.fingerprint().await.expect("fp").0 == live;
    println!(
        "rebuild {:.2} s; re-ingest of the corpus {:.2} s writing {} objects; live == rebuilt == shuffled == re-ingested: {same} ({n} fingerprint rows, {live})",
        rebuild_time.as_secs_f64(),
        reingest_time.as_secs_f64(),
        again.totals.objects_written
    );
    assert!(same && again.totals.objects_written == 0);
}

async fn catalog(objects: u64) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("year.db");
    let (store, _) = Store::open_migrating(&path, StoreOptions::default())
        .await
        .expect("opens");
    let hours = 8_760u64;
    let series = objects.div_ceil(hours);
    let hour0 = sample::CORPUS_START_US;
    let mut x = 0x1234_5678_9abc_def0u64;
    let t = Instant::now();
    let mut batch = Vec::with_capacity(10_000);
    let mut written = 0u64;
    'outer: for s in 0..series {
        let (metric, layer) = (
            format!("metric_{:02}", s / 2),
            if s % 2 == 0 { "minute" } else { "hour" },
        );
        for h in 0..hours {
            if written == objects {
                break 'outer;
            }
            // ~1.5 KiB of incompressible bytes, the size of a gzip'd minute-layer hour.
            let payload: Vec<u8> = (0..1_536)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            let hour_us = hour0 + h as i64 * 3_600_000_000;
            batch.push(ObjectRow {
                metric: metric.clone(),
                layer: layer.to_string(),
                hour_us,
                units: "count".into(),
                first_us: hour_us,
                last_us: hour_us + 3_540_000_000,
                point_count: 60,
                hash: vec![0; 32],
                sealed: false,
                delivery_id: 1,
                payload,
            });
            written += 1;
            if batch.len() == 10_000 {
                support::insert_objects_plain(&store, &batch)
                    .await
                    .expect("inserts");
                batch.clear();
            }
        }
    }
    support::insert_objects_plain(&store, &batch)
        .await
        .expect("inserts");
    let built = t.elapsed();
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0)
        + std::fs::metadata(dir.path().join("year.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    println!(
        "catalog store: {} objects in {series} metric/layer series, {:.0} MiB, built in {:.1} s",
        store.object_count().await.expect("count"),
        size as f64 / 1_048_576.0,
        built.as_secs_f64()
    );
    let metric = "metric_07";
    let indexed = store.catalog(metric).await.expect("catalog");
    assert_eq!(indexed, store.catalog_full_scan(metric).await.expect("scan"));
    let mut fast = Vec::new();
    for _ in 0..21 {
        let t = Instant::now();
        store.catalog(metric).await.expect("catalog");
        fast.push(t.elapsed());
    }
    let mut slow = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        store.catalog_full_scan(metric).await.expect("scan");
        slow.push(t.elapsed());
    }
    let (f, s) = (median(fast), median(slow));
    println!(
        "catalog of one metric ({} layers): covering index {:.3} ms (median of 21), full scan {:.1} ms (median of 5, warm cache): {:.0}x",
        indexed.len(),
        f.as_secs_f64() * 1e3,
        s.as_secs_f64() * 1e3,
        s.as_secs_f64() / f.as_secs_f64()
    );
    let hours_listed: Vec<i64> = (0..48).map(|h| hour0 + (4_000 + h) * 3_600_000_000).collect();
    let before = store.round_trips();
    let t = Instant::now();
    let rows = store
        .read_hours(metric, &["minute", "hour"], &hours_listed)
        .await
        .expect("reads");
    println!(
        "batch read of 48 listed hours in 2 layers: {} objects in {} statement(s), {:.3} ms",
        rows.len(),
        store.round_trips() - before,
        t.elapsed().as_secs_f64() * 1e3
    );
}
