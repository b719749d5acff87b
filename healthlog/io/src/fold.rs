//! The fold worker (HEALTHLOG.md "A delivery's life"; spec: "Учёт частично разобранной
//! доставки", "Хранение часовыми объектами"): takes pending deliveries in journal order and
//! folds each in one transaction, recording its status, uncovered names and counters.
//!
//! Outcomes: success → `parsed`/`partial` with counters, in the fold's own transaction; a parse
//! failure, an undecodable stored object or a failed write → `failed` (uncovered list kept when
//! it was collected); a busy database, an injected fault or an unreadable archive → left
//! `pending`, decided by the one predicate [`StoreError::is_circumstance`].
//!
//! Logs carry coordinates (delivery id, metric, layer, hour) and counters, never values.

use std::sync::Arc;

use healthlog_core::entities::{Decision, EntityKey, decide};
use healthlog_core::fold::{Counters, DeliveryPlan, ExistingObject, HourOutcome, MetricPlan, merge_metric};
use healthlog_core::hae::{Coverage, ParseFailure, parse};
use healthlog_core::limits::OBJECTS_LISTED_MAX;
use healthlog_core::status::ParseStatus;
use healthlog_core::time::format_utc;
use indicatif::ProgressBar;

use crate::archive::Archive;
use crate::store::{FoldRecord, JournalEntry, ObjectCoordinates, ObjectRow, ObjectStamp, Store, StoreError};

/// A clock in microseconds since the epoch (the binary passes the system clock; tests a fixed one).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// How to fold.
#[derive(Clone)]
pub struct FoldOptions {
    pub coverage: Coverage,
    /// Inject a fault after this many object writes in every delivery (tests).
    pub fail_after_objects: Option<usize>,
    pub clock: Clock,
    /// Set by the receiver's shutdown: the fold stops between deliveries, never inside one.
    pub stop: Option<Arc<std::sync::atomic::AtomicBool>>,
    /// Tests: after merging outside the write lock and before taking it, notify `.0` and wait
    /// for `.1` (another fold can change the same objects in between).
    pub pause_before_lock: Option<(Arc<tokio::sync::Notify>, Arc<tokio::sync::Notify>)>,
}

impl FoldOptions {
    pub fn new(clock: Clock) -> Self {
        Self {
            coverage: Coverage::current(),
            fail_after_objects: None,
            clock,
            stop: None,
            pause_before_lock: None,
        }
    }
}

/// What folding one delivery did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum DeliveryResult {
    Folded {
        id: i64,
        status: String,
        uncovered: Vec<String>,
        counters: Counters,
        /// Objects behind the collision counter (bounded by `OBJECTS_LISTED_MAX`).
        collision_objects: Vec<ObjectCoordinates>,
        /// Objects behind the incomparable counter (bounded the same way).
        incomparable_objects: Vec<ObjectCoordinates>,
    },
    Failed {
        id: i64,
        error: String,
    },
    LeftPending {
        id: i64,
        reason: String,
    },
    /// Refused at ingest (no body): nothing to fold.
    Refused {
        id: i64,
    },
}

impl DeliveryResult {
    pub fn id(&self) -> i64 {
        match self {
            Self::Folded { id, .. }
            | Self::Failed { id, .. }
            | Self::LeftPending { id, .. }
            | Self::Refused { id } => *id,
        }
    }

    pub fn status(&self) -> &str {
        match self {
            Self::Folded { status, .. } => status,
            Self::Failed { .. } | Self::Refused { .. } => "failed",
            Self::LeftPending { .. } => "pending",
        }
    }
}

/// Totals over a fold run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct FoldSummary {
    pub deliveries: u64,
    pub parsed: u64,
    pub partial: u64,
    pub failed: u64,
    pub left_pending: u64,
    pub totals: Counters,
}

impl FoldSummary {
    fn add(&mut self, r: &DeliveryResult) {
        self.deliveries += 1;
        match r {
            DeliveryResult::Folded { status, counters, .. } => {
                if status == "partial" {
                    self.partial += 1;
                } else {
                    self.parsed += 1;
                }
                let t = &mut self.totals;
                t.metrics += counters.metrics;
                t.points += counters.points;
                t.coordinates += counters.coordinates;
                t.objects_written += counters.objects_written;
                t.objects_unchanged += counters.objects_unchanged;
                t.collisions += counters.collisions;
                t.incomparable += counters.incomparable;
                t.unit_mismatches += counters.unit_mismatches;
                t.sealed_changes += counters.sealed_changes;
                t.entities += counters.entities;
                t.entities_written += counters.entities_written;
                t.entities_unchanged += counters.entities_unchanged;
                t.provenance_updates += counters.provenance_updates;
                t.versions_retained += counters.versions_retained;
                t.versions_differing += counters.versions_differing;
                t.skipped_entities += counters.skipped_entities;
            }
            DeliveryResult::Failed { .. } | DeliveryResult::Refused { .. } => self.failed += 1,
            DeliveryResult::LeftPending { .. } => self.left_pending += 1,
        }
    }
}

/// Folds every pending delivery in journal order.
pub async fn fold_pending(
    store: &Store,
    archive: &Archive,
    options: &FoldOptions,
    progress: &ProgressBar,
) -> Result<(FoldSummary, Vec<DeliveryResult>), StoreError> {
    let pending = store.journal(Some(ParseStatus::Pending)).await?;
    progress.set_length(pending.len() as u64);
    let mut summary = FoldSummary::default();
    let mut results = Vec::with_capacity(pending.len());
    for entry in &pending {
        if options
            .stop
            .as_ref()
            .is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst))
        {
            break;
        }
        let result = fold_one(store, archive, entry, options).await?;
        summary.add(&result);
        results.push(result);
        progress.inc(1);
    }
    progress.finish_and_clear();
    Ok((summary, results))
}

/// Folds the listed pending journal entries in the order given (tests: a fold order that is not
/// the journal's, with journal positions fixed).
pub async fn fold_in_order(
    store: &Store,
    archive: &Archive,
    ids: &[i64],
    options: &FoldOptions,
) -> Result<Vec<DeliveryResult>, StoreError> {
    let pending = store.journal(Some(ParseStatus::Pending)).await?;
    let mut results = Vec::with_capacity(ids.len());
    for id in ids {
        let entry = pending
            .iter()
            .find(|e| e.id == *id)
            .ok_or_else(|| StoreError::Invalid(format!("journal row {id} is not pending")))?;
        results.push(fold_one(store, archive, entry, options).await?);
    }
    Ok(results)
}

/// Folds one journal entry. Errors only when the outcome itself cannot be recorded.
pub async fn fold_one(
    store: &Store,
    archive: &Archive,
    entry: &JournalEntry,
    options: &FoldOptions,
) -> Result<DeliveryResult, StoreError> {
    let id = entry.id;
    let Some(sha) = entry.body_sha256.as_deref() else {
        return Ok(DeliveryResult::Refused { id });
    };
    let body = match archive.get(sha) {
        Ok(body) => body,
        Err(e) => {
            // Before the body was read: nothing can be recorded about it; it stays pending.
            tracing::error!(delivery_id = id, error = %e, "archived body unreadable; delivery left pending");
            return Ok(DeliveryResult::LeftPending {
                id,
                reason: e.to_string(),
            });
        }
    };
    let parsed = match parse(&body, &options.coverage) {
        Ok(parsed) => parsed,
        Err(ParseFailure { error, uncovered }) => {
            let text = error.to_string();
            // The parse did not finish counting: skipped entities stay "not measured".
            store
                .record_failure(id, &text, uncovered.as_ref(), None, (options.clock)())
                .await?;
            tracing::warn!(delivery_id = id, error = %text, "delivery failed to parse");
            return Ok(DeliveryResult::Failed { id, error: text });
        }
    };
    drop(body);
    let uncovered = parsed.uncovered.clone();
    // Canonical forms were computed by the parse, once, before any transaction.
    let plan = DeliveryPlan::new(parsed, &entry.layer);
    for s in &plan.skipped {
        tracing::warn!(
            delivery_id = id,
            section = s.section.as_str(),
            index = s.index,
            reason = s.reason.as_str(),
            "entity skipped: it cannot be keyed; counted on the delivery, its neighbours kept"
        );
    }
    let position = (entry.received_at_us, id);
    match fold_plan(store, id, position, &plan, &uncovered, options).await {
        Ok((counters, events, record)) => {
            let status = ParseStatus::derive(false, uncovered.is_empty());
            log_events(id, &plan.layer, &events);
            if uncovered.limits_tripped() {
                tracing::warn!(
                    delivery_id = id,
                    uncovered = ?uncovered.names,
                    uncovered_dropped = uncovered.dropped,
                    uncovered_truncated = uncovered.truncated,
                    "uncovered section list over its limits: names dropped or cut"
                );
            }
            tracing::info!(
                delivery_id = id,
                status = status.as_str(),
                metrics = counters.metrics,
                points = counters.points,
                coordinates = counters.coordinates,
                objects_written = counters.objects_written,
                objects_unchanged = counters.objects_unchanged,
                collisions = counters.collisions,
                incomparable = counters.incomparable,
                unit_mismatches = counters.unit_mismatches,
                sealed_changes = counters.sealed_changes,
                entities = counters.entities,
                entities_written = counters.entities_written,
                entities_unchanged = counters.entities_unchanged,
                provenance_updates = counters.provenance_updates,
                versions_retained = counters.versions_retained,
                versions_differing = counters.versions_differing,
                skipped_entities = counters.skipped_entities,
                uncovered = ?uncovered.names,
                "delivery folded"
            );
            Ok(DeliveryResult::Folded {
                id,
                status: status.as_str().to_string(),
                uncovered: uncovered.names,
                counters,
                collision_objects: record.collision_objects,
                incomparable_objects: record.incomparable_objects,
            })
        }
        Err(e) if e.is_circumstance() => {
            tracing::warn!(delivery_id = id, error = %e, "fold not done; delivery left pending");
            Ok(DeliveryResult::LeftPending {
                id,
                reason: e.to_string(),
            })
        }
        Err(e) => {
            let text = e.to_string();
            // The parse finished: its count of skipped entities is a measurement.
            store
                .record_failure(
                    id,
                    &text,
                    Some(&uncovered),
                    Some(plan.skipped.len() as u64),
                    (options.clock)(),
                )
                .await?;
            tracing::warn!(delivery_id = id, error = %text, "delivery failed to fold");
            Ok(DeliveryResult::Failed { id, error: text })
        }
    }
}

/// A WARN-worthy finding, logged after the commit that made it true.
enum Event {
    Object {
        metric: String,
        outcome: HourOutcome,
    },
    /// An arriving entity version refused: it loses content of the stored one, or the two are
    /// incomparable. Logged by section and id, never by content or by which fields differ.
    Retained {
        key: EntityKey,
    },
}

async fn fold_plan(
    store: &Store,
    id: i64,
    position: (i64, i64),
    plan: &DeliveryPlan,
    uncovered: &healthlog_core::hae::Uncovered,
    options: &FoldOptions,
) -> Result<(Counters, Vec<Event>, FoldRecord), StoreError> {
    let mut counters = Counters {
        metrics: plan.metrics.len() as u64,
        points: plan.points,
        coordinates: plan.coordinates,
        entities: plan.entity_elements,
        versions_differing: plan.versions_differing,
        skipped_entities: plan.skipped.len() as u64,
        ..Counters::default()
    };
    let mut events = Vec::new();
    let mut record = FoldRecord::default();
    // Before the write lock: read each metric's stored hours and merge (decode, compare
    // canonically, gzip). Under the lock only the stamps are read again; a metric whose objects
    // another fold changed in between is merged again there (counted by `Store::remerges`).
    let mut merged = Vec::with_capacity(plan.metrics.len());
    for metric in &plan.metrics {
        let rows = store
            .objects_to_merge(&metric.metric, &plan.layer, &metric.hour_keys())
            .await?;
        let stamps: Vec<ObjectStamp> = rows.iter().map(ObjectRow::stamp).collect();
        let outcomes = merge_rows(metric, &rows)?;
        merged.push((stamps, outcomes));
    }
    if let Some((merged_signal, resume)) = &options.pause_before_lock {
        merged_signal.notify_one();
        resume.notified().await;
    }
    let mut tx = store.begin_fold(options.fail_after_objects).await?;
    for (metric, (stamps, outcomes)) in plan.metrics.iter().zip(merged) {
        let hours = metric.hour_keys();
        let outcomes = if tx.stamps(&metric.metric, &plan.layer, &hours).await? == stamps {
            outcomes
        } else {
            store.count_remerge();
            let rows = tx.load(&metric.metric, &plan.layer, &hours).await?;
            merge_rows(metric, &rows)?
        };
        for outcome in outcomes {
            if let Some(write) = &outcome.write {
                tx.put(&metric.metric, &plan.layer, id, write).await?;
            }
            counters.add_hour(&outcome);
            let coordinates = (metric.metric.clone(), plan.layer.clone(), outcome.hour_us);
            if outcome.collisions > 0 && record.collision_objects.len() < OBJECTS_LISTED_MAX {
                record.collision_objects.push(coordinates.clone());
            }
            if outcome.incomparable > 0 && record.incomparable_objects.len() < OBJECTS_LISTED_MAX {
                record.incomparable_objects.push(coordinates);
            }
            if outcome.collisions > 0 || outcome.units_mismatch || outcome.sealed_changed {
                events.push(Event::Object {
                    metric: metric.metric.clone(),
                    outcome,
                });
            }
        }
    }
    let now = (options.clock)();
    for version in &plan.entities {
        // Read, compare and write in one transaction: the hash and provenance the tie-break
        // rests on are read where the outcome is written.
        let stored = tx.load_entity(&version.key).await?;
        match decide(stored.as_ref(), version, position) {
            Decision::Insert | Decision::Replace => {
                tx.put_entity(version, position, now).await?;
                counters.entities_written += 1;
            }
            Decision::RaiseProvenance => {
                tx.raise_provenance(&version.key, position).await?;
                counters.provenance_updates += 1;
                counters.entities_unchanged += 1;
            }
            Decision::Unchanged | Decision::KeepLater => counters.entities_unchanged += 1,
            Decision::Retain => {
                counters.versions_retained += 1;
                counters.entities_unchanged += 1;
                events.push(Event::Retained {
                    key: version.key.clone(),
                });
            }
        }
    }
    let status = ParseStatus::derive(false, uncovered.is_empty());
    tx.finish(id, status, uncovered, &counters, &record, now).await?;
    Ok((counters, events, record))
}

/// Merges one metric's arriving points with its stored objects of those hours.
fn merge_rows(metric: &MetricPlan, rows: &[ObjectRow]) -> Result<Vec<HourOutcome>, StoreError> {
    let existing: Vec<ExistingObject> = rows.iter().map(ObjectRow::existing).collect();
    merge_metric(metric, &existing).map_err(|e| {
        StoreError::Invalid(format!(
            "object of metric `{}` cannot be merged or written: {e}",
            metric.metric
        ))
    })
}

fn log_events(id: i64, layer: &str, events: &[Event]) {
    for event in events {
        let (metric, o) = match event {
            Event::Object { metric, outcome } => (metric, outcome),
            Event::Retained { key } => {
                tracing::warn!(
                    delivery_id = id,
                    section = key.section.as_str(),
                    entity_id = key.id.as_str(),
                    "arriving entity version loses content of the stored one or is incomparable; the stored version stays"
                );
                continue;
            }
        };
        let hour = format_utc(o.hour_us);
        if o.collisions > 0 {
            tracing::warn!(
                delivery_id = id,
                metric = metric.as_str(),
                layer,
                hour = hour.as_str(),
                collisions = o.collisions,
                incomparable = o.incomparable,
                "points at the same coordinates differ canonically; the most complete was kept"
            );
        }
        if o.incomparable > 0 {
            tracing::warn!(
                delivery_id = id,
                metric = metric.as_str(),
                layer,
                hour = hour.as_str(),
                incomparable = o.incomparable,
                "incomparable key sets at the same coordinates; one kept by the total order, not merged"
            );
        }
        if o.units_mismatch {
            tracing::warn!(
                delivery_id = id,
                metric = metric.as_str(),
                layer,
                hour = hour.as_str(),
                "arriving units differ from the object's; the stored units stay"
            );
        }
        if o.sealed_changed {
            tracing::warn!(
                delivery_id = id,
                metric = metric.as_str(),
                layer,
                hour = hour.as_str(),
                "a sealed hour changed; the points are saved all the same"
            );
        }
    }
}

/// Refolds the whole journal of `source` into a fresh store at `dest` (derived counters start
/// empty; journal rows keep their layer, body address and receipt time). `order`, when given,
/// is the journal ids in the order to append them (tests: a shuffled journal).
pub async fn rebuild_into(
    source: &Store,
    dest: &Store,
    archive: &Archive,
    options: &FoldOptions,
    order: Option<&[i64]>,
    progress: &ProgressBar,
) -> Result<(FoldSummary, Vec<DeliveryResult>), StoreError> {
    if !dest.journal(None).await?.is_empty() {
        return Err(StoreError::Invalid(format!(
            "{} already has a journal: rebuild needs a fresh store",
            dest.path().display()
        )));
    }
    let journal = source.journal(None).await?;
    let entries: Vec<&JournalEntry> = match order {
        None => journal.iter().collect(),
        Some(ids) => {
            assert_eq!(
                ids.len(),
                journal.len(),
                "invariant: a rebuild order is a permutation of the journal"
            );
            ids.iter()
                .map(|id| {
                    journal
                        .iter()
                        .find(|e| e.id == *id)
                        .expect("invariant: the order names journal ids")
                })
                .collect()
        }
    };
    for e in entries {
        let refused = e
            .body_sha256
            .is_none()
            .then(|| e.error.clone().unwrap_or_else(|| "refused at ingest".into()));
        dest.journal_insert(&crate::store::NewDelivery {
            received_at_us: e.received_at_us,
            layer: &e.layer,
            body_sha256: e.body_sha256.as_deref(),
            body_bytes: e.body_bytes,
            refused: refused.as_deref(),
            headers: e.headers.clone(),
            intake_id: None,
        })
        .await?;
    }
    fold_pending(dest, archive, options, progress).await
}
