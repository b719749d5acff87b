//! Shared test setup: a real SQLite file and a real archive folder in a temporary directory,
//! a fixed clock, HAE body builders, and an INFO-level log capture.
#![allow(dead_code)] // each test binary uses its own part of this module

use std::io::Write;
use std::sync::{Arc, Mutex};

use healthlog::archive::Archive;
use healthlog::fold::{self, DeliveryResult, FoldOptions};
use healthlog::journal;
use healthlog::store::{Store, StoreOptions};
use healthlog_core::object;

pub const T0: &str = "2026-01-05 10:05:00 +0000";
/// 2026-01-05T10:00:00Z.
pub const HOUR_10_US: i64 = 1_767_607_200_000_000;

pub struct Env {
    pub dir: tempfile::TempDir,
    pub store: Store,
    pub archive: Archive,
    pub options: FoldOptions,
}

impl Env {
    pub async fn new() -> Self {
        Self::with_options(StoreOptions::default()).await
    }

    pub async fn with_options(options: StoreOptions) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, _) = Store::open_migrating(&dir.path().join("healthlog.db"), options)
            .await
            .expect("opens");
        let archive = Archive::open(&dir.path().join("archive")).expect("archive");
        Self {
            dir,
            store,
            archive,
            options: FoldOptions::new(Arc::new(|| 1_800_000_000_000_000)),
        }
    }

    /// A second store over a fresh file in the same folder (rebuild targets).
    pub async fn sibling(&self, name: &str) -> Store {
        Store::open_migrating(&self.dir.path().join(name), StoreOptions::default())
            .await
            .expect("opens")
            .0
    }

    /// Journals `body` in `layer` and folds everything pending; returns this delivery's result.
    pub async fn deliver(&self, layer: &str, body: &str) -> DeliveryResult {
        let j = journal::ingest_body(&self.store, &self.archive, layer, body.as_bytes(), 1)
            .await
            .expect("journals");
        self.fold_result(j.id).await
    }

    pub async fn fold_result(&self, id: i64) -> DeliveryResult {
        let (_, results) = fold::fold_pending(
            &self.store,
            &self.archive,
            &self.options,
            &indicatif::ProgressBar::hidden(),
        )
        .await
        .expect("folds");
        results
            .into_iter()
            .find(|r| r.id() == id)
            .expect("the delivery was pending")
    }

    pub async fn fingerprint(&self) -> String {
        self.store.fingerprint().await.expect("fingerprint").0
    }

    /// Every stored point of a metric and layer as (start, end, raw bytes).
    pub async fn points(&self, metric: &str, layer: &str) -> Vec<(i64, i64, String)> {
        let mut out = Vec::new();
        for row in self.store.all_objects().await.expect("objects") {
            if row.metric == metric && row.layer == layer {
                for p in object::decode(&row.payload, row.hour_us).expect("decodes") {
                    out.push((p.start_us, p.end_us, p.raw.to_string()));
                }
            }
        }
        out
    }
}

/// `{"data":{"metrics":[{"name":M,"units":U,"data":[P...]}]}}` from raw point texts.
pub fn body(metrics: &[(&str, &str, &[&str])]) -> String {
    body_with(metrics, "")
}

/// As [`body`], with extra `data` members appended verbatim (e.g. `,"workouts":[]`).
pub fn body_with(metrics: &[(&str, &str, &[&str])], extra: &str) -> String {
    let ms: Vec<String> = metrics
        .iter()
        .map(|(name, units, points)| {
            format!(
                r#"{{"name":"{name}","units":"{units}","data":[{}]}}"#,
                points.join(",")
            )
        })
        .collect();
    format!(r#"{{"data":{{"metrics":[{}]{extra}}}}}"#, ms.join(","))
}

pub fn counters(r: &DeliveryResult) -> healthlog_core::fold::Counters {
    match r {
        DeliveryResult::Folded { counters, .. } => *counters,
        other => panic!("expected a folded delivery, got {other:?}"),
    }
}

/// Captured log text.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().expect("log lock")).into_owned()
    }

    pub fn lines_at(&self, level: &str) -> Vec<String> {
        self.text()
            .lines()
            .filter(|l| l.contains(&format!(" {level} ")))
            .map(str::to_string)
            .collect()
    }
}

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("log lock").extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

thread_local! {
    /// Where this thread's log records go while a capture is held.
    static CAPTURING: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
}

/// The writer of the one global subscriber: into the current thread's capture, if any.
struct ThreadCapture;

impl Write for ThreadCapture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURING.with(|c| {
            if let Some(logs) = c.borrow_mut().as_mut() {
                logs.write_all(buf)?;
            }
            Ok(buf.len())
        })
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Holds a log capture on this thread; dropping it stops the capture.
pub struct CaptureGuard(());

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURING.with(|c| *c.borrow_mut() = None);
    }
}

/// Captures everything logged at INFO and above on this thread until the guard drops.
///
/// One global subscriber per test binary routes each record to the capture of the thread that
/// logged it. (Thread-local default subscribers, set and dropped by tests running in parallel,
/// made tracing rebuild its global level hint and callsite interest under them, and a record
/// was lost now and then.)
pub fn capture_logs() -> (Logs, CaptureGuard) {
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        // Without timestamps: the tests look for values in the text, and a timestamp's digits
        // can hold any short number (a kcal of 201 "leaked" from `00:03:17.122015`).
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .without_time()
            .with_writer(|| ThreadCapture)
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("one global subscriber per test binary");
    });
    let logs = Logs::default();
    CAPTURING.with(|c| *c.borrow_mut() = Some(logs.clone()));
    (logs, CaptureGuard(()))
}
